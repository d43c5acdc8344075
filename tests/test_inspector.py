"""NCCL Inspector profiler plugin records (issue 22, bullet 9): parsed from its JSON (pretty-printed
or one object per line, a cut object counted), priced by ``postmortem.analyzer.collective_timing`` like
profile kernels, and read by the busbw rule (L003): below the hardware model, and one
communicator far below its peers. Records written from the plugin's documented format
(``ext-profiler/inspector/README.md``: header, metadata, coll_perf, verbose event_trace_ts)."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from postmortem.analyzer.pipeline import analyze
from postmortem.parsers import nccl_inspector
from tests.scenario import report_of

RULE_FIXTURES = {
    "L003": {"fires": ["test_inspector_busbw_far_below_the_nic_rate", "test_one_communicator_far_below_its_peers"],
             "quiet": ["test_inspector_busbw_near_the_nic_rate_is_quiet"]},
}

MIB = 1 << 20


def _record(comm: str, rank: int, n: int, nnodes: int, host: str, pid: int, sn: int, size: int, busbw: float,
            coll: str = "AllReduce", start_us: int | None = None) -> dict:
    factor = 2 * (n - 1) / n if coll == "AllReduce" else (n - 1) / n
    algbw = busbw / factor
    total = size * (n if coll in ("AllGather", "ReduceScatter") else 1)
    exec_us = total / (algbw * 1e9) * 1e6
    perf = {"coll": coll, "coll_sn": sn, "coll_msg_size_bytes": size, "coll_exec_time_us": round(exec_us),
            "coll_timing_source": "kernel_gpu", "coll_algobw_gbs": algbw, "coll_busbw_gbs": busbw}
    if start_us is not None:
        perf["event_trace_ts"] = {"coll_start_ts": start_us - 5, "coll_stop_ts": start_us,
                                  "kernel_events": [{"channel_id": 0, "kernel_start_ts": start_us,
                                                     "kernel_stop_ts": start_us + round(exec_us),
                                                     "kernel_record_ts": start_us + round(exec_us)}]}
    return {"header": {"id": comm, "rank": rank, "n_ranks": n, "nnodes": nnodes},
            "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "", "rec_mechanism": "profiler_plugin",
                         "dump_timestamp_us": 1752867229276385 + sn, "hostname": host, "pid": pid},
            "coll_perf": perf}


def _write_records(folder: Path, records: list[dict], pretty: bool = False) -> None:
    by_proc: dict[tuple, list[dict]] = {}
    for r in records:
        by_proc.setdefault((r["metadata"]["hostname"], r["metadata"]["pid"]), []).append(r)
    for (host, pid), rows in by_proc.items():
        path = folder / "nccl-inspector-4242" / f"{host}-pid{pid}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = "\n".join(json.dumps(r, indent=2 if pretty else None) for r in rows) + "\n"
        path.write_text(text)


def _hw(folder: Path, hosts: list[str], rate: int = 400) -> None:
    for h in hosts:
        d = folder / "hw" / h
        d.mkdir(parents=True, exist_ok=True)
        (d / "ibstat.txt").write_text("".join(
            f"CA 'mlx5_{i}'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n"
            f"\t\tRate: {rate}\n\t\tLink layer: InfiniBand\n" for i in range(4)))
        (d / "nvidia-smi.csv").write_text("index, name, memory.total [MiB]\n" + "".join(
            f"{i}, NVIDIA H100 80GB HBM3, 81559 MiB\n" for i in range(4)))


def _world(busbw: float) -> list[dict]:
    hosts = ["insp-a", "insp-b"]
    return [_record("0xabc1", r, 8, 2, hosts[r // 4], 7000 + r, sn, 64 * MIB, busbw) for sn in range(1, 7)
            for r in range(8)]


def test_records_parse_pretty_and_single_line_and_count_a_cut_one():
    one = json.dumps(_record("0x1", 0, 2, 1, "h", 1, 5, 8 * MIB, 100.0))
    pretty = json.dumps(_record("0x1", 0, 2, 1, "h", 1, 6, 8 * MIB, 100.0, start_us=1752867229235181), indent=2)
    cut = json.dumps(_record("0x1", 0, 2, 1, "h", 1, 7, 8 * MIB, 100.0), indent=2).splitlines()[:9]
    text = [one, *pretty.splitlines(), *cut]
    lines = pl.DataFrame({"line_no": pl.Series(range(1, len(text) + 1), dtype=pl.UInt32), "text": text})
    r = nccl_inspector.parse(lines)
    rec = r.tables["inspector_records"]
    assert rec["coll_sn"].to_list() == [5, 6] and rec["start"].null_count() == 1
    assert r.tables["kernels"]["op"].to_list() == ["allreduce", "allreduce"]
    assert r.tables["events"]["kind"].to_list() == ["inspector_record_cut"]
    assert len(r.consumed) == len(text)


def test_inspector_busbw_far_below_the_nic_rate(tmp_path):
    _write_records(tmp_path, _world(3.0))
    _hw(tmp_path, ["insp-a", "insp-b"])
    report = report_of(tmp_path)
    l003 = [f for f in report["findings"] if f["code"] == "L003" and f["details"].get("check") != "peers"]
    assert l003 and l003[0]["details"]["source"] == "inspector" and l003[0]["nodes"] == ["insp-a", "insp-b"]
    assert l003[0]["details"]["median_busbw_gbs"] < 4


def test_inspector_busbw_near_the_nic_rate_is_quiet(tmp_path):
    _write_records(tmp_path, _world(45.0), pretty=True)
    _hw(tmp_path, ["insp-a", "insp-b"])
    assert not [f for f in report_of(tmp_path)["findings"] if f["code"] == "L003"]


def test_one_communicator_far_below_its_peers(tmp_path):
    # four 4-rank TP communicators, two per node; the one on GPUs 4-7 of insp-b is slow
    records = []
    for c in range(4):
        host = "insp-a" if c < 2 else "insp-b"
        busbw = 60.0 if c == 3 else 300.0
        records += [_record(f"0xc0{c}", r, 4, 1, host, 8000 + 10 * c + r, sn, 128 * MIB, busbw, start_us=10**15 + sn * 10**6)
                    for sn in range(1, 7) for r in range(4)]
    _write_records(tmp_path, records)
    report = report_of(tmp_path)
    peers = [f for f in report["findings"] if f["code"] == "L003" and f["details"].get("check") == "peers"]
    assert len(peers) == 1 and peers[0]["details"]["coll_key"] == "0xc03/seq"
    assert "its 3 peer communicator(s)" in peers[0]["message"]
    run = analyze([tmp_path])
    timing = run.frame("SELECT * FROM collective_timing WHERE source = 'inspector'")
    assert timing.height == 96 and timing["skew_ns"].null_count() == 0
