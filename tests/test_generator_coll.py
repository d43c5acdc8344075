"""RunSpec.coll_trace: every collective's NCCL COLL line, every iteration (postmortem/generator/rungen/coll_trace.py).

The written trace is read back with the project's NCCL parser: every line a typed collective,
opCounts consecutive per communicator and rank, the line count the story implies, the hang told
by where each rank's trace stops; the analyzer still names the planted culprit. Off, the
generator writes what it wrote before.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from postmortem.generator import RunSpec, generate_run, main
from postmortem.generator.rungen.coll_trace import LAYERS, calls_per_iteration
from postmortem.parsers import nccl
from postmortem.parsers.lines import envelope

NODES, GPUS, ITERATIONS, CULPRIT = 2, 4, 3, 5
PER_ITERATION = sum(calls_per_iteration().values())        # world + expert calls of one rank
BEFORE_HANG = 2 * LAYERS + 1                               # router AllReduces, ReduceScatters, grad norm


def spec(**kwargs) -> RunSpec:
    values = dict(nodes=NODES, gpus_per_node=GPUS, culprit=CULPRIT, iterations_before_hang=ITERATIONS,
                  nccl_subsys="INIT,ENV,COLL")
    return RunSpec(**{**values, **kwargs})


def stdout_files(out: Path, truth: dict) -> dict[int, Path]:
    files = {}
    for node, host in enumerate(truth["hosts"]):
        for folder in (out / "logs" / host).glob(f"*/attempt_{truth['analysed_attempt']}/*"):
            files[node * GPUS + int(folder.name)] = folder / "stdout.log"
    return files


def collectives(path: Path):
    data = path.read_bytes()
    table = nccl.parse(envelope(data)).tables["collectives"]
    return table, data.count(b" opCount ")


def digest(out: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(p for p in out.rglob("*") if p.is_file()):
        h.update(str(p.relative_to(out)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("coll") / "run"
    truth = generate_run(out, spec(coll_trace=True))
    return out, truth


def test_every_coll_line_parses_and_op_counts_run_on_per_communicator(traced) -> None:
    out, truth = traced
    last = {}
    for rank, path in sorted(stdout_files(out, truth).items()):
        table, printed = collectives(path)
        assert printed and table.height == printed, path
        assert set(table["kind"]) == {"nccl_coll"}
        assert table["op"].null_count() == 0 and table["count"].null_count() == 0
        assert set(table["op"]) == {"AllReduce", "AllGather", "ReduceScatter"}
        assert set(table["stream"]) and table["stream"].n_unique() == 1         # one training stream per rank
        comms = table.partition_by("comm", as_dict=True, maintain_order=True)
        assert len(comms) == 2                                                     # world and expert comm
        for (comm,), rows in comms.items():
            counts = rows.sort("line_no")["op_count"].to_list()
            assert counts == list(range(len(counts))), (rank, comm)               # +1 per call, from 0
            last[(rank, rows["nranks"][0])] = (counts[-1], rows.sort("line_no").row(-1, named=True))
    world = NODES * GPUS
    ends = {rank: last[(rank, world)] for rank in range(world)}
    hung = 3 + ITERATIONS * calls_per_iteration()["world"] + LAYERS + 1
    for rank, (count, row) in ends.items():
        if rank == CULPRIT:        # stops before the collective it never entered
            assert count == hung - 1 and row["op"] == "AllReduce" and row["count"] == 1
        else:                      # ends in the collective it waits in: the hung all-gather
            assert count == hung and row["op"] == "AllGather" and row["count"] == RunSpec().numel_in
            assert row["datatype"] == "bfloat16"


def test_line_count_is_ranks_times_iterations_times_calls(traced) -> None:
    out, truth = traced
    world = NODES * GPUS
    expected = world * ITERATIONS * PER_ITERATION + world * BEFORE_HANG + (world - 1)
    assert truth["coll_trace"]["lines"] == expected
    printed = sum(collectives(p)[1] for p in stdout_files(out, truth).values())
    assert printed == expected + 3 * world                                         # + first_collectives' three


def test_analyzer_still_names_the_culprit(traced) -> None:
    from postmortem.analyzer.pipeline import analyze
    from postmortem.rules.report import build_report

    out, _ = traced
    report = build_report(analyze([out]))
    assert report["verdict"]["culprit"]["ranks"] == [CULPRIT], report["verdict"]


def test_off_writes_the_same_bytes_as_without_the_option(tmp_path: Path) -> None:
    default = generate_run(tmp_path / "default", spec(nccl_subsys=None))
    off = generate_run(tmp_path / "off", spec(nccl_subsys=None, coll_trace=False))
    assert default == off and digest(tmp_path / "default") == digest(tmp_path / "off")
    # With COLL but without the option: the first three collectives only, the same bytes again.
    generate_run(tmp_path / "coll", spec())
    generate_run(tmp_path / "coll-off", spec(coll_trace=False))
    assert digest(tmp_path / "coll") == digest(tmp_path / "coll-off")
    assert "coll_trace" not in default


def test_on_adds_only_coll_lines(tmp_path: Path) -> None:
    generate_run(tmp_path / "coll", spec())
    generate_run(tmp_path / "trace", spec(coll_trace=True))
    for path in (tmp_path / "coll").rglob("*"):
        if path.is_file():
            before = path.read_text().splitlines()
            after = [line for line in (tmp_path / "trace" / path.relative_to(tmp_path / "coll")).read_text().splitlines()
                     if " opCount " not in line or line in before]
            assert after == before, path


@pytest.mark.parametrize("kwargs", [
    dict(scenario="desync-size"), dict(group="node"), dict(scenario="all-stuck"), dict(scenario="healthy"),
    dict(scenario="crash"), dict(attempts=2, launcher="srun-per-gpu"), dict(launcher="srun-torchrun"),
    dict(nccl_version="2.7.8"), dict(nccl_version="2.28.3", nccl_subsys="INIT,BOOTSTRAP,ENV,COLL"),
])
def test_other_stories_and_layouts(tmp_path: Path, kwargs: dict) -> None:
    truth = generate_run(tmp_path, spec(coll_trace=True, **kwargs))
    text = "\n".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".log", ".out"))
    table = nccl.parse(envelope(text.encode())).tables["collectives"]
    assert table.height == text.count(" opCount ") == truth["coll_trace"]["lines"] + 3 * NODES * GPUS * truth["attempts"]
    for (host, pid, comm), rows in table.partition_by("host", "pid", "comm", as_dict=True).items():
        counts = rows.sort("line_no")["op_count"].to_list()
        assert counts == list(range(len(counts))), (host, pid, comm)
    world = NODES * GPUS
    if kwargs.get("scenario") == "healthy":
        assert truth["coll_trace"]["lines"] == world * (ITERATIONS + 20) * PER_ITERATION
    if kwargs.get("scenario") == "desync-size":       # the culprit enters the same opCount with another size
        last = table.filter(pl_col_is_world(world)).sort("line_no").group_by("pid", maintain_order=True).last()
        assert last["op_count"].n_unique() == 1 and last["count"].n_unique() == 2


def pl_col_is_world(world: int):
    import polars as pl
    return pl.col("nranks") == world


def test_needs_coll_in_the_subsystems(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="COLL in nccl_subsys"):
        generate_run(tmp_path, spec(nccl_subsys=None, coll_trace=True))
    with pytest.raises(SystemExit):
        main([str(tmp_path / "cli"), "--ranks", "8", "--gpus-per-node", "4", "--coll-trace"])
