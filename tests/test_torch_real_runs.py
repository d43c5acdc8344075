"""Real torchrun output (tests/torch_runs, see its README): the line envelope with multi-byte
progress bars, global ranks from what torchrun's agents state, and PyTorch failure lines
beyond NCCL (gloo, C++ terminate, faulthandler, bare exits)."""
from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from postmortem.analyzer.pipeline import analyze
from postmortem.parsers import c10d, torch_errors, torchrun
from postmortem.parsers.lines import envelope

RUNS = Path(__file__).with_name("torch_runs")


def one(pattern: str) -> Path:
    (path,) = RUNS.glob(pattern)
    return path


def lines_of(run) -> pl.DataFrame:
    return run.frame("SELECT i.path, l.line_no, l.rank, l.rank_source, l.rank_confidence, l.pid, l.text "
                     "FROM lines l JOIN inputs i USING (input_id) ORDER BY i.path, l.line_no")


def per_file(run) -> dict[str, tuple[set, set]]:
    """path -> (ranks, confidences) of its lines that have a rank."""
    df = lines_of(run).filter(pl.col("rank").is_not_null())
    return {p: (set(g["rank"]), set(g["rank_confidence"]))
            for (p,), g in df.group_by("path")}


# -- 1. prefixes split on characters, not bytes -------------------------------------------------

def test_progress_bar_of_multibyte_characters_keeps_the_rank_prefix_whole():
    # `█`, `▉` (3 bytes), CJK (3) and an emoji (4) before `[rank3]:` used to shift the cut by the
    # number of extra bytes: the rank came out as `k3]:` and the traceback lost its rank.
    console = envelope((RUNS / "tqdm-bar" / "console.log").read_bytes())
    glued = console.filter(pl.col("prefix").str.contains("训练 🚀", literal=True)
                           & pl.col("text").str.starts_with("Traceback"))
    (row,) = glued.to_dicts()
    assert (row["rank_tag"], row["local_rank"], row["text"]) == (3, 3, "Traceback (most recent call last):")
    assert row["prefix"].startswith("[default3]:Train: 100%|██████████|") and row["prefix"].endswith("🚀")
    assert not console.filter(pl.col("text").str.contains(r"^(?:k|nk|ank)\d+\]:")).height


def test_multibyte_characters_after_the_prefixes_stay_in_the_text():
    # gloo's `... GLHF! 🏖️` behind `[default0]:[rank0]: `: both prefixes peeled, the emoji (and
    # its variation selector) still at the end of the message
    console = envelope((RUNS / "raise-default" / "console.log").read_bytes())
    glhf = console.filter(pl.col("text").str.ends_with("GLHF! 🏖️"))
    assert glhf.height == 2
    assert all(t.startswith("RuntimeError: [/__w/pytorch/") for t in glhf["text"])
    assert sorted(glhf.select("local_rank", "rank_tag").rows()) == [(0, 0), (2, 2)]
    assert set(glhf["prefix"].str.replace_all(r"\d", "N")) == {"[defaultN]:[rankN]: "}


def test_carriage_return_redraws_then_a_prefixed_line():
    # the rank's own stderr.log: one physical line of 11 `\r` redraws, the traceback glued to the last
    data = one("tqdm-bar/logs/*/attempt_0/3/stderr.log").read_bytes()
    env = envelope(data)
    first = env.row(0, named=True)
    assert (first["rank_tag"], first["text"]) == (3, "Traceback (most recent call last):")
    assert first["prefix"].startswith("Train: 100%|██████████| 10/10")
    # offsets and lengths stay byte positions in the file, whatever the characters
    for offset, length, line in zip(env["offset"], env["length"], data.split(b"\n")):
        assert data[offset:offset + length] == line
    # the same redraws under `srun --label`: the task label was written once, before the first
    # segment, and belongs to the line that is kept
    labelled = b" 7: " + data.split(b"\n", 1)[0] + b"\n"
    row = envelope(labelled).row(0, named=True)
    assert (row["srun_task"], row["rank_tag"], row["text"]) == (7, 3, "Traceback (most recent call last):")


def test_the_glued_traceback_is_rank_3s_through_the_pipeline():
    run = analyze([RUNS / "tqdm-bar"], use_cache=False)
    tb = run.frame("SELECT rank, rank_confidence, detail FROM events WHERE kind = 'python_traceback' "
                   "AND detail LIKE 'injected failure after progress bar%'")
    assert set(tb["rank"]) == {3} and set(tb["rank_confidence"]) == {"certain"} and tb.height == 2


# -- 2. rank identity from the launcher's own statements ----------------------------------------

def test_default_torchrun_folders_take_the_ranks_the_failure_summary_states():
    """4 processes, default settings, rank 3 raises: rank 1 printed nothing that states its rank,
    and its attempt_0/1/ files were only ever guessed from the folder layout."""
    run = analyze([RUNS / "raise-default"], use_cache=False)
    files = per_file(run)
    for local in range(4):
        for stream in ("stdout", "stderr"):
            key = next((p for p in files if p.endswith(f"attempt_0/{local}/{stream}.log")), None)
            if key is None:      # an empty file has no lines
                continue
            assert files[key] == ({local}, {"certain"}), key
    ranks = run.frame("SELECT rank, pid, confidence FROM ranks ORDER BY rank")
    assert ranks["rank"].to_list() == [0, 1, 2, 3] and set(ranks["confidence"]) == {"certain"}
    # the console's `[default1]:` line: the agent that prefixed it states local 1 = global 1
    console = lines_of(run).filter((pl.col("path") == "console.log") & pl.col("text").str.starts_with("rank 1 pid"))
    assert console.select("rank", "rank_confidence").rows() == [(1, "certain")]
    assert "failure summary" in console["rank_source"][0]


@pytest.mark.parametrize("case", ["two-agents-exit3", "two-agents-info", "two-agents-template"])
def test_two_agents_map_their_own_folders(case):
    """Two agents on one host (`--nnodes 2`): both say host localhost, so a folder is told apart
    by the `[rankN]:` lines it holds; rank 2 (the second agent's local rank 0) is silent or dies
    without a traceback, and still gets its rank from its agent, with certainty."""
    run = analyze([RUNS / case], use_cache=False)
    files = per_file(run)
    agent_dirs = sorted({p.split("/attempt_")[0] for p in files if "/attempt_" in p})
    assert len(agent_dirs) == 2
    seen = {}
    for path, (ranks, confidences) in files.items():
        if "/attempt_" not in path:
            continue
        local = int(path.split("/attempt_0/")[1].split("/")[0])
        (rank,) = ranks
        assert confidences == {"certain"}, path
        seen[(path.split("/attempt_")[0], local)] = rank
    # each folder is one agent's: its local ranks 0, 1 are the global ranks 0, 1 or 2, 3
    for d in agent_dirs:
        assert sorted(v for (dd, _), v in seen.items() if dd == d) in ([0, 1], [2, 3])
    assert {v - local for (d, local), v in seen.items()} == {0, 2}
    assert 2 in seen.values()


def test_rendezvous_result_is_parsed_per_worker():
    result = torchrun.parse(envelope((RUNS / "two-agents-info" / "node1.log").read_bytes()))
    rdzv = result.tables["agent"].filter(pl.col("kind") == "rendezvous")
    keys = dict(rdzv.filter(pl.col("key") != "global_rank").select("key", "value").iter_rows())
    assert (keys["group_rank"], keys["group_world_size"], keys["global_ranks"]) == ("1", "2", "[2, 3]")
    workers = rdzv.filter(pl.col("key") == "global_rank").select("local_rank", "value").rows()
    assert workers == [(0, "2"), (1, "3")]


def test_console_lines_of_the_info_run_take_the_rendezvous_result():
    run = analyze([RUNS / "two-agents-info" / "node1.log"], use_cache=False)
    started = lines_of(run).filter(pl.col("text").str.contains(r"^rank \d pid \d+ started$"))
    assert started.select("rank", "rank_confidence").sort("rank").rows() == [(2, "certain"), (3, "certain")]


def test_a_template_with_the_global_rank_first_is_read_that_way():
    """`[${role_name}${rank}|${local_rank}]:` -> `[default2|0]:`: the failure summary states local
    0 = global 2, so the line is rank 2's (reading the template the other way gave rank 0)."""
    run = analyze([RUNS / "two-agents-template" / "node1.log"], use_cache=False)
    df = lines_of(run).filter(pl.col("text").str.contains("terminate called without an active exception"))
    assert df.select("rank", "rank_confidence").rows() == [(2, "certain")]
    assert "[<role><rank>|<local rank>]" in df["rank_source"][0]


def test_pyspy_dumps_take_the_rank_of_their_pid():
    run = analyze([RUNS / "hang-pyspy"], use_cache=False)
    dumps = lines_of(run).filter(pl.col("path").str.starts_with("pyspy/"))
    for (path,), g in dumps.group_by("path"):
        pid = int(Path(path).stem)
        assert set(g["pid"]) == {pid} and set(g["rank_confidence"]) == {"certain"}, path
    stacks = run.frame("SELECT rank, pid, function FROM stacks WHERE depth = 0 AND function IS NOT NULL "
                       "AND thread_name = 'MainThread'")
    # the rank that never entered the all_reduce is rank 2 (the failure summary's pid)
    assert stacks.filter(pl.col("function") == "lazy_state_init")["rank"].to_list() == [2]
    assert sorted(stacks.filter(pl.col("function") == "all_reduce")["rank"].to_list()) == [0, 1, 3]


def test_without_the_agents_statements_one_agents_folder_is_one_node(tmp_path):
    # only the log folder: nothing states the mapping of the silent local rank 1, but one agent's
    # folder and no other node named anywhere: local rank = global rank, derived, saying so
    shutil.copytree(RUNS / "raise-default" / "logs", tmp_path / "logs")
    run = analyze([tmp_path], use_cache=False)
    files = per_file(run)
    (stdout1,) = [p for p in files if p.endswith("attempt_0/1/stdout.log")]
    assert files[stdout1][1] == {"derived"}
    assert run.info["world_size"] == 4 and "only torchrun agent" in run.info["world_size_source"]


def test_without_the_agents_statements_two_agents_folders_stay_a_guess(tmp_path):
    # two agents' folders and nothing that says which node came first: the global rank is a guess
    for n, d in enumerate((RUNS / "two-agents-exit3" / "logs").iterdir()):
        shutil.copytree(d, tmp_path / f"node{n}" / "logs" / d.name)
    files = per_file(analyze([tmp_path], use_cache=False))
    silent = [p for p in files if p.endswith("stdout.log")]
    assert silent and all(files[p][1] <= {"guessed", "certain"} for p in silent)
    assert any(files[p][1] == {"guessed"} for p in silent)


def test_a_folder_that_contradicts_the_only_agent_is_not_claimed(tmp_path):
    # agent 1's console with agent 2's folder: the folder's [rank3]: (local 1) is not what agent 1
    # states for local 1, so the folder is not taken as agent 1's
    shutil.copy(RUNS / "two-agents-exit3" / "node0.log", tmp_path / "node0.log")
    other = next(d for d in (RUNS / "two-agents-exit3" / "logs").iterdir()
                 if "[rank3]" in (d / "attempt_0" / "1" / "stderr.log").read_text())
    shutil.copytree(other, tmp_path / "logs" / other.name)
    files = per_file(analyze([tmp_path], use_cache=False))
    (silent,) = [p for p in files if p.endswith("attempt_0/0/stdout.log")]
    assert files[silent][1] == {"guessed"}


# -- 3. PyTorch failure lines beyond NCCL -------------------------------------------------------

def events(module, path: Path) -> pl.DataFrame:
    tables = module.parse(envelope(path.read_bytes())).tables
    return tables.get("events", pl.DataFrame(schema={"kind": pl.String}))


def test_gloo_size_mismatch_terminate_and_abort():
    path = one("size-mismatch/logs/*/attempt_0/1/stderr.log")
    ev = events(torch_errors, path)
    (mismatch,) = ev.filter(pl.col("kind") == "gloo_size_mismatch").to_dicts()
    assert (mismatch["cause"], mismatch["op"], mismatch["value"]) == ("size_mismatch", "ALLREDUCE", 2048.0)
    assert "Received data size doesn't match expected size" in mismatch["detail"]
    (fatal,) = ev.filter(pl.col("kind") == "faulthandler").to_dicts()
    assert (fatal["detail"], fatal["op"]) == ("Aborted", "ALLREDUCE")
    cpp = events(c10d, path)
    assert cpp.filter(pl.col("kind") == "terminate")["detail"].to_list()[0] == "gloo::EnforceNotMet"


def test_gloo_errors_of_the_peers_carry_cause_peer_and_op():
    rows = []
    for path in sorted(RUNS.glob("*/logs/*/attempt_0/*/stderr.log")):
        ev = events(torch_errors, path).filter(pl.col("kind") == "gloo_error")
        if ev.height:
            rows += ev.select("cause", "peer", "op", "value").to_dicts()
    causes = {r["cause"] for r in rows}
    assert {"peer_closed", "peer_reset", "recv_timeout", "send_timeout"} <= causes
    closed = [r for r in rows if r["cause"] in ("peer_closed", "peer_reset")]
    assert all(r["peer"].startswith("127.0.0.1:") and r["op"] == "ALLREDUCE" for r in closed)
    timeouts = [r for r in rows if r["cause"].endswith("_timeout")]
    assert {r["value"] for r in timeouts} == {20000.0} and {r["op"] for r in timeouts} == {"ALLREDUCE"}


def test_gloo_connect_full_mesh_in_init():
    path = one("restart-connect-full-mesh/logs/*/attempt_1/2/stderr.log")
    ev = events(torch_errors, path).filter(pl.col("kind") == "gloo_error")
    mesh = ev.filter(pl.col("cause") == "connect_full_mesh")
    assert mesh.height == 2 and set(mesh["peer"]) == {"127.0.0.1:28590"}
    assert mesh["op"].to_list()[-1] == "INIT"      # the traceback's frame is init_process_group
    assert set(ev.filter(pl.col("cause") == "connect_failed")["detail"].str.slice(0, 23)) == {"ERROR failed to connect"}


@pytest.mark.parametrize("case,terminate,what", [
    ("terminate-runtime-error", ["std::runtime_error", "injected std::runtime_error from a worker thread"], True),
    ("terminate-int", ["int"], False),
    ("terminate-no-exception", ["without an active exception"], False),
])
def test_cpp_terminate_with_and_without_what(case, terminate, what):
    path = one(f"{case}/logs/*/attempt_0/1/stderr.log")
    ev = events(c10d, path).filter(pl.col("kind") == "terminate")
    assert ev["detail"].to_list() == terminate
    assert ev["message"].str.contains("what():", literal=True).any() == what
    (fatal,) = events(torch_errors, path).filter(pl.col("kind") == "faulthandler").to_dicts()
    assert fatal["detail"] == "Aborted" and fatal["frames"] == 2


def test_watchdog_timeout_carried_by_dist_backend_error_is_a_collective():
    run = analyze([RUNS / "terminate-dist-backend-error"], use_cache=False)
    rows = run.frame("SELECT c.rank, c.rank_confidence, c.pg_id, c.pg_rank, c.seq, c.op, c.numel_in, "
                     "c.timeout_ms, c.ran_for_ms, i.path FROM collectives c JOIN inputs i USING (input_id) "
                     "WHERE c.kind = 'watchdog_timeout'")
    assert set(rows.select("pg_id", "pg_rank", "seq", "op", "numel_in", "timeout_ms", "ran_for_ms").rows()) == {
        (0, 1, 7, "ALLREDUCE", 4096, 6000, 6004)}
    assert set(rows.select("rank", "rank_confidence").rows()) == {(1, "certain")}
    terminate = run.frame("SELECT detail FROM events WHERE kind = 'terminate'")["detail"].to_list()
    assert "c10::DistBackendError" in terminate


def test_old_watchdog_line_without_seqnum_is_a_collective_with_a_null_seq():
    line = ("[E ProcessGroupNCCL.cpp:587] [Rank 0] Watchdog caught collective operation timeout: "
            "WorkNCCL(OpType=BROADCAST, Timeout(ms)=1800000) ran for 1806119 milliseconds before timing out.")
    what = "  what():  " + line.split("] ", 1)[1]
    for text in (line, what):
        (row,) = c10d.parse(envelope(text.encode())).tables["collectives"].to_dicts()
        assert (row["op"], row["seq"], row["pg_rank"], row["timeout_ms"]) == ("BROADCAST", None, 0, 1800000)


@pytest.mark.parametrize("case,rank,detail,root", [
    ("exit-3", 2, "exitcode 3", True),
    ("abort", 2, "SIGABRT", True),
])
def test_bare_exits_are_events_with_the_reported_rank(case, rank, detail, root):
    run = analyze([RUNS / case], use_cache=False)
    ev = run.frame("SELECT reported_rank, detail, exitcode, root_cause FROM events WHERE kind = 'worker_exit'")
    assert ev.filter(pl.col("root_cause")).select("reported_rank", "detail").rows() == [(rank, detail)]
    assert set(ev.filter(~pl.col("root_cause"))["detail"]) == {"SIGTERM"}


def test_without_a_summary_a_pid_printed_by_a_rank_ties_its_dump(tmp_path):
    """The console cut before the agent's lines (a snapshot of the live hang): no failure summary.
    Ranks 0, 1 and 3 printed their pid on lines of a stream whose `[rankN]:` traceback states the
    rank; rank 2 (the one that never entered the collective) printed its pid on a stream nothing
    attributes. Its dump stays unknown: a rule can not blame it on a guess."""
    lines = (RUNS / "hang-pyspy" / "console.log").read_bytes().split(b"\n")
    cut = next(i for i, line in enumerate(lines) if b"closing signal" in line)
    (tmp_path / "console.log").write_bytes(b"\n".join(lines[:cut]) + b"\n")
    shutil.copytree(RUNS / "hang-pyspy" / "pyspy", tmp_path / "pyspy")
    dumps = lines_of(analyze([tmp_path], use_cache=False)).filter(pl.col("path").str.starts_with("pyspy/"))
    got = {int(Path(p).stem): (set(g["rank"]), set(g["rank_confidence"])) for (p,), g in dumps.group_by("path")}
    assert got[15441] == ({0}, {"derived"}) and got[15443] == ({1}, {"derived"}) and got[15453] == ({3}, {"derived"})
    assert got[15452] == ({None}, {None})
