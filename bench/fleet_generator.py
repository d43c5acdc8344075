"""A generated fleet: thousands of ``report.json`` files, written directly (the log generator
and the analysis per job would take hours), each valid against docs/report.schema.json and
shaped like the real reports of the generator's scenarios (deadlock, all-stuck, GPU Xid, IB
link flap, CUDA OOM, healthy...), with known lemon nodes planted.

Each job runs on a random subset of the nodes (1-16 of them; ``busy`` nodes are picked
``busy_weight`` times as often as the others). A job fails with probability ``fail_rate``, of a
cause drawn from ``CAUSES``; a cause that names a culprit names one of the job's nodes at
random. A job that includes a lemon node fails, in addition, with probability ``lemon_rate``
of a fault on that node (a GPU Xid on its GPU 3, or a link flap on its NIC port), whatever its
other nodes.

    python -m bench.fleet_generator OUT --jobs 5000 --nodes 500 --lemons 3 [--seed 7] [--busy 10]

writes OUT/job-<id>/report.json and OUT/truth.json (the lemon nodes).
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

# (scenario, weight, category, code, name, culprit node named?)
CAUSES = [
    ("deadlock", 30, "hang", "H001", "rank-never-entered-collective", True),
    ("all-stuck", 15, "hang", "H003", "all-ranks-stuck", False),
    ("gpu-xid", 12, "hardware", "G001", "gpu-fault", True),
    ("ib-flap", 10, "network", "N001", "ib-completion-errors", True),
    ("oom", 15, "crash", "M001", "cuda-oom", True),
    ("cuda-error", 8, "crash", "X003", "cuda-error", True),
    ("timeout", 10, "external", "X005", "scheduler-ended-job", False),
]
NIC_PORTS = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
BUS_IDS = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0",
           "0000:ba:00.0", "0000:db:00.0"]


@dataclass
class FleetSpec:
    jobs: int = 5000
    nodes: int = 500
    lemons: int = 3
    seed: int = 7
    fail_rate: float = 0.25
    lemon_rate: float = 0.35
    busy: list[int] = field(default_factory=list)      # node indices picked more often
    busy_weight: float = 20.0
    start: datetime = datetime(2026, 7, 1)
    days: int = 42
    first_id: int = 100000
    node_names: list[str] | None = None                 # default gpu-node-0001...


def node_names(spec: FleetSpec) -> list[str]:
    return spec.node_names or [f"gpu-node-{i:04d}" for i in range(1, spec.nodes + 1)]


def lemon_nodes(spec: FleetSpec) -> list[str]:
    """The planted lemons: fixed, spread over the node list, never a busy node."""
    names = node_names(spec)
    picks, i = [], 0
    step = max(len(names) // (spec.lemons + 1), 1)
    while len(picks) < spec.lemons:
        idx = (step * (len(picks) + 1) + i) % len(names)
        if idx not in spec.busy and names[idx] not in picks:
            picks.append(names[idx])
        else:
            i += 1
    return picks


def _serial(node: str, gpu: int) -> str:
    """A stable 13-digit serial per (node, GPU index)."""
    import zlib

    return f"{zlib.crc32(f'{node}/{gpu}'.encode()) * 1000 + gpu:013d}"


def _gpu(node: str, idx: int, rank: int) -> dict:
    return {"rank": rank, "node": node, "local_rank": idx, "cuda_dev": idx, "bus_id": BUS_IDS[idx],
            "pid": 400000 + rank, "mapping_source": "c10d [rankN]: prefix", "mapping_confidence": "certain"}


def _finding(job_attempt: int, code: str, name: str, n: int, severity: str, category: str, culprit: bool,
             title: str, nodes: list[str], ranks: list[int], gpus: list[dict], details: dict | None = None) -> dict:
    return {"code": code, "name": name, "severity": severity, "confidence": 0.9 if culprit else 0.7, "title": title,
            "message": title + ".", "ranks": ranks, "nodes": nodes, "gpus": gpus,
            "evidence": [{"path": f"logs/{nodes[0] if nodes else 'job'}/stdout.log", "line": 88, "text": title,
                          "rank": ranks[0] if ranks else None, "node": nodes[0] if nodes else None, "note": None}],
            "suggestion": "see postmortem explain " + code, "caused_by": [], "attempt": job_attempt,
            "category": category, "culprit": culprit, "details": details or {}, "id": f"a{job_attempt}-{code}-{n}"}


def make_report(job_id: str, nodes: list[str], start: datetime, cause: str | None, culprit: str | None,
                rng: random.Random, gpu_index: int | None = None, nic: str | None = None) -> dict:
    """One schema-valid report: ``cause`` None is a healthy run."""
    ranks = len(nodes) * 8
    end = start + timedelta(hours=rng.uniform(0.5, 12))
    findings: list[dict] = []
    verdict_status, category, confidence, sentence = "healthy", "none", 1.0, "The job completed; no error found."
    culprit_block = {"ranks": [], "nodes": [], "gpus": []}
    outcome, ids, drain, rma, culprit_ranks = "completed", [], None, [], None
    spec = {c[0]: c for c in CAUSES}
    if cause is not None:
        _, _, category, code, name, names_node = spec[cause]
        outcome = "hung" if category in ("hang",) or cause == "timeout" else "failed"
        node_i = nodes.index(culprit) if culprit in nodes else 0
        local = gpu_index if gpu_index is not None else rng.randrange(8)
        rank = node_i * 8 + local
        gpu = _gpu(culprit, local, rank) if culprit else None
        details: dict = {}
        if cause == "deadlock":
            title = f"rank {rank} never entered the collective #{rng.randint(1000, 9000)} (default_pg)"
        elif cause == "gpu-xid":
            gpu = {**gpu, "gpu_index": local, "serial": _serial(culprit, local), "product": "NVIDIA H20", "xid": 79}
            title = f"Xid 79 (GPU has fallen off the bus) on {culprit} GPU {local} ({BUS_IDS[local]}), rank {rank}"
            details = {"xid": 79, "pci": BUS_IDS[local]}
            rma = [{"node": culprit, "cuda_dev": local, "bus_id": BUS_IDS[local], "serial": gpu["serial"],
                    "uuid": None, "rank": rank, "reason": title, "finding": "a0-G001-1"}]
        elif cause == "ib-flap":
            port = nic or rng.choice(NIC_PORTS)
            title = f"IB/RoCE completion errors point at {culprit} ({port} (2 link down))"
            details = {"culprit_node": culprit, "nics": [], "flapped_ports": [port], "down_ports": [], "drain": True}
            gpu = None
        elif cause == "oom":
            title = f"CUDA out of memory on rank {rank} ({culprit}): tried to allocate {rng.randint(1, 40)}.00 GiB"
        elif cause == "cuda-error":
            title = f"CUDA error: an illegal memory access was encountered on rank {rank} ({culprit})"
        elif cause == "all-stuck":
            title = f"all ranks of default_pg are stuck in _ALLGATHER_BASE #{rng.randint(1000, 9000)}"
        else:
            title = "Slurm ended the job at its time limit"
        if names_node:
            f = _finding(0, code, name, 1, "error", category, True, title, [culprit],
                         [] if cause == "ib-flap" else [rank], [gpu] if gpu else [], details)
            verdict_status, confidence = "culprit", 0.9
            culprit_block = {"ranks": f["ranks"], "nodes": [culprit], "gpus": f["gpus"]}
            culprit_ranks = str(rank) if f["ranks"] else None
            if category in ("hardware", "network"):
                drain = culprit
        else:
            f = _finding(0, code, name, 1, "error", category, False, title,
                         nodes if cause == "all-stuck" else [], [], [], details)
            verdict_status, confidence = ("no-single-culprit", 0.6) if cause == "all-stuck" else ("culprit", 0.8)
        findings.append(f)
        ids = [f["id"]]
        sentence = title + "."
        if category in ("hang", "hardware", "network"):
            findings.append(_finding(0, "H004", "watchdog-timeouts", 1, "warning", "symptom", False,
                                     f"watchdog timeouts on {ranks - 1} rank(s) of default_pg", [], [], []))
    findings.append(_finding(0, "P001", "model-flops-utilization", 1, "info", "perf", False,
                             f"MFU {rng.uniform(5, 40):.1f}% (own estimate)", [], [], []))
    errors = sum(f["severity"] == "error" for f in findings)
    return {
        "schema": "postmortem.report/1", "generator": "postmortem 0.1.0",
        "outcome": {"outcome": outcome, "attempt": 0, "basis": [{"what": "generated", "path": None, "line": None,
                                                                   "rank": None, "node": None, "time": None}],
                    "failed_ranks": [], "ended_by": None},
        "verdict": {"status": verdict_status, "category": category, "confidence": confidence, "sentence": sentence,
                    "culprit": culprit_block, "finding_ids": ids, "competing": []},
        "actions": {"culprit_ranks": culprit_ranks, "inspect_hostlist": culprit if culprit else None,
                    "drain_hostlist": drain, "drain_reason": sentence if drain else None,
                    "gpus": culprit_block["gpus"], "rma_gpus": rma, "gpu_hours_lost": None, "checkpoint": None,
                    "job_may_still_be_hanging": False, "py_spy": [], "py_spy_note": None, "note": None},
        "findings": findings, "missing_evidence": [],
        "attempts": {"analysed": 0, "all": [{"attempt": 0, "findings": len(findings), "errors": errors,
                                             "verdict": sentence, "outcome": outcome, "last_step": 100}]},
        "run": {"ranks": ranks, "ranks_source": "stated in the logs", "ranks_seen": ranks, "nodes": sorted(nodes),
                "gpu_model": {"name": "H20", "id": "h20", "basis": "gpus: NVIDIA H20"}, "nccl_versions": ["2.21.5"],
                "time_span": {"start": start.strftime("%Y-%m-%d %H:%M:%S"), "end": end.strftime("%Y-%m-%d %H:%M:%S"),
                              "end_basis": "generated", "source": "generated", "zone": "UTC"},
                "rank_mapping": [{"confidence": "certain", "len": ranks}]},
        "inputs": {"files": [], "totals": {"files": 0, "skipped": 0, "lines": 0, "parsed_lines": 0,
                                           "unparsed_lines": 0}, "nccl_lines": {"total": 0, "typed": 0, "untyped": 0},
                   "nccl_gaps": []},
        "messages": [], "rule_errors": [], "timings": {"total_ingest_s": 0.0},
    }


def generate_fleet(out: str | Path, spec: FleetSpec) -> dict:
    """Write the fleet; the truth: lemon nodes, busy nodes, job count."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(spec.seed)
    names = node_names(spec)
    lemons = set(lemon_nodes(spec)) if spec.lemons else set()
    lemon_gpu = {n: 3 for n in lemons}
    lemon_nic = {n: "mlx5_1" for n in lemons}
    weights = [spec.busy_weight if i in spec.busy else 1.0 for i in range(len(names))]
    sizes, size_w = [1, 2, 4, 8, 16], [10, 15, 25, 30, 20]
    causes, cause_w = [c[0] for c in CAUSES], [c[1] for c in CAUSES]
    span_s = spec.days * 86400
    for j in range(spec.jobs):
        k = rng.choices(sizes, size_w)[0]
        chosen: set[int] = set()
        while len(chosen) < min(k, len(names)):
            chosen.add(rng.choices(range(len(names)), weights)[0])
        nodes = [names[i] for i in sorted(chosen)]
        start = spec.start + timedelta(seconds=rng.uniform(0, span_s))
        job_lemons = [n for n in nodes if n in lemons]
        cause = culprit = gpu_index = nic = None
        if job_lemons and rng.random() < spec.lemon_rate:
            culprit = rng.choice(job_lemons)
            cause = rng.choice(["gpu-xid", "ib-flap"])
            gpu_index, nic = lemon_gpu[culprit], lemon_nic[culprit]
        elif rng.random() < spec.fail_rate:
            cause = rng.choices(causes, cause_w)[0]
            culprit = rng.choice(nodes)
        job_id = str(spec.first_id + j)
        report = make_report(job_id, nodes, start, cause, culprit, rng, gpu_index, nic)
        folder = out / f"job-{job_id}"
        folder.mkdir(exist_ok=True)
        (folder / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    truth = {"lemons": sorted(lemons), "busy": [names[i] for i in spec.busy], "jobs": spec.jobs,
             "nodes": len(names), "seed": spec.seed}
    (out / "truth.json").write_text(json.dumps(truth, indent=2) + "\n", encoding="utf-8")
    return truth


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fleet_generator", description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--lemons", type=int, default=3)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--first-id", type=int, default=100000)
    p.add_argument("--start", default="2026-07-01", help="the first day (YYYY-MM-DD)")
    p.add_argument("--days", type=int, default=42)
    p.add_argument("--busy", default="", help="comma list of node indices picked 20 times as often (e.g. 10)")
    a = p.parse_args(argv)
    truth = generate_fleet(a.out, FleetSpec(jobs=a.jobs, nodes=a.nodes, lemons=a.lemons, seed=a.seed,
                                            first_id=a.first_id, start=datetime.fromisoformat(a.start),
                                            days=a.days, busy=[int(b) for b in a.busy.split(",") if b.strip()]))
    print(json.dumps(truth))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
