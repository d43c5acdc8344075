"""Flight Recorder dumps of a generated run (``docs/formats/pytorch-failures.md`` section 9).

One dump per rank of the last attempt, the dict that ``ProcessGroupNCCL`` writes on a
timeout: ``version``, ``pg_config``, ``pg_status``, ``entries`` (the last ``RING`` collectives
per process group, record ids continuing from ops that already fell out of the ring),
``nccl_version`` (``comm_lib_version`` from format 2.10). Progress comes from the story's
``Attempt.frozen`` (rank, PG uid) -> (time, last enqueued, last completed): the hung
collective is ``scheduled``, everything before it ``completed``.

``pickle`` dumps are written with the plain pickle module at protocol 2 (torch's jit pickler
writes the same opcodes: dicts, lists, tuples, str, int, float, bool, None; no globals); the
file name is ``<prefix><global rank>``, default prefix ``nccl_trace_rank_``. ``json`` dumps are
the ``_dump_nccl_trace_json`` shape: no stacks, undiscovered times 0, pg_status as strings.
Nothing here draws from the story's random generator, so runs without dumps are unchanged.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

from .base import Clock

RING = 20
# Dump-format version written by each PyTorch era the generator knows.
VERSIONS = {"2.1": "1.1", "2.3": "1.2", "2.4": "2.3", "2.6": "2.5", "2.8": "2.7"}
PROFILING = {
    "ALLREDUCE": "nccl:all_reduce", "_ALLGATHER_BASE": "nccl:_all_gather_base", "ALLGATHER": "nccl:all_gather",
    "BROADCAST": "nccl:broadcast", "_REDUCE_SCATTER_BASE": "nccl:_reduce_scatter_base",
    "REDUCE_SCATTER": "nccl:reduce_scatter", "ALLTOALL_BASE": "nccl:all_to_all", "ALLTOALL": "nccl:all_to_all",
    "BARRIER": "nccl:all_reduce_barrier", "REDUCE": "nccl:reduce", "GATHER": "nccl:gather",
}
_COLL_FRAMES = {
    "nccl:_all_gather_base": "all_gather_into_tensor",
    "nccl:all_reduce": "all_reduce",
    "nccl:broadcast": "broadcast",
    "nccl:_reduce_scatter_base": "reduce_scatter_tensor",
}


def _frames(profiling: str, hung: bool) -> list[dict]:
    call = _COLL_FRAMES.get(profiling, profiling.split(":", 1)[1])
    frames = [
        {"name": call, "filename": "torch/distributed/distributed_c10d.py", "line": 2897},
        {"name": "wrapper", "filename": "torch/distributed/c10d_logger.py", "line": 81},
    ]
    if hung:
        frames += [{"name": "_lazy_init_state", "filename": "megatron/core/optimizer/distrib_optimizer.py", "line": 1204},
                   {"name": "step", "filename": "megatron/core/optimizer/distrib_optimizer.py", "line": 1650}]
    else:
        frames += [{"name": "finish_grad_sync", "filename": "megatron/core/distributed/param_and_grad_buffer.py",
                    "line": 410}]
    frames += [{"name": "train_step", "filename": "megatron/training/training.py", "line": 915},
               {"name": "<module>", "filename": "pretrain_gpt.py", "line": 300}]
    return frames


def _ns(clock: Clock, t: float) -> int:
    return round(clock.at(t).timestamp() * 1e6) * 1000


def build_dumps(run, spec, clock: Clock) -> dict[int, dict]:
    """Global rank -> the FR dump dict of the last attempt (empty for healthy runs)."""
    attempt = run.attempts[-1]
    if not attempt.frozen:
        return {}
    version = VERSIONS.get(spec.torch_era, "2.7")
    world = run.cluster.world
    gpn = run.cluster.gpus_per_node
    hung_seq = {0: spec.hang_seq, 2: spec.node_hang_seq}
    hang_group_node = run.truth.get("culprit_rank", spec.culprit)
    hang_group_node = (hang_group_node if hang_group_node is not None else spec.culprit) // gpn
    dumps = {}
    for proc in attempt.procs:
        rank = proc.rank
        node = rank // gpn
        pgs = {0: ("0", "default_pg", list(range(world)))}
        if (rank, 2) in attempt.frozen:
            pgs[2] = (str(5 + node), "EXPERT_MODEL_PARALLEL_GROUP", list(range(node * gpn, (node + 1) * gpn)))
        entries, status = [], {}
        for uid, (guid, desc, members) in pgs.items():
            frozen = attempt.frozen.get((rank, uid))
            if frozen is None:
                continue
            t_frozen, enqueued, completed = frozen
            status[str(uid)] = {"last_enqueued_collective": enqueued, "last_started_collective": -1,
                                "last_completed_collective": completed}
            rate = attempt.seq_rate.get(uid) or 1.0
            in_hung_group = uid == 0 if spec.group == "default" else (uid == 2 and node == hang_group_node)
            for seq in range(max(1, enqueued - RING + 1), enqueued + 1):
                t = t_frozen - (enqueued - seq) / rate
                hung = seq == hung_seq[uid] and in_hung_group and seq > completed
                op = spec.op if hung else "ALLREDUCE"
                numel_in = spec.numel_in if hung else 1
                numel_out = numel_in * len(members) if op in ("_ALLGATHER_BASE", "ALLGATHER") else numel_in
                if hung and rank == spec.culprit and spec.scenario == "desync-op":
                    op, numel_out = "BROADCAST", numel_in
                if hung and rank == spec.culprit and spec.scenario == "desync-size":
                    numel_in //= 2
                    numel_out //= 2
                profiling = PROFILING.get(op, "nccl:" + op.lower())
                done = seq <= completed
                entries.append({
                    "t": t, "pg_id": uid, "process_group": (guid, desc), "collective_seq_id": seq,
                    "p2p_seq_id": 0, "op_id": seq, "profiling_name": profiling,
                    "time_created_ns": _ns(clock, t),
                    "input_sizes": [[numel_in]], "input_dtypes": ["BFloat16"],
                    "output_sizes": [[numel_out]], "output_dtypes": ["BFloat16"],
                    "state": "completed" if done else "scheduled",
                    "time_discovered_started_ns": None,
                    "time_discovered_completed_ns": _ns(clock, t + 0.004) if done else None,
                    "retired": done, "timeout_ms": spec.timeout_s * 1000, "is_p2p": False,
                    "duration_ms": None, "frames": _frames(profiling, hung),
                })
        entries.sort(key=lambda e: (e["t"], e["pg_id"], e["collective_seq_id"]))
        total_ops = sum(s["last_enqueued_collective"] for s in status.values())
        first_id = max(0, total_ops - len(entries))
        for i, entry in enumerate(entries):
            del entry["t"]
            entry["record_id"] = first_id + i
            if version == "2.10":
                entry["thread_id"] = str(1000 + rank)
                entry["thread_name"] = "pt_main_thread"
        dump = {"version": version, "entries": [dict(sorted(e.items())) for e in entries]}
        if version >= "1.2" or version.startswith("2."):
            dump["pg_config"] = {guid: {"name": guid, "desc": desc, "ranks": str(members)}
                                 for guid, desc, members in pgs.values()}
            dump["pg_status"] = status
        dump["nccl_version"] = spec.nccl_version
        dumps[rank] = dump
    return dumps


def _json_form(dump: dict) -> dict:
    """The ``_dump_nccl_trace_json`` shape (FlightRecorder.cpp ``dump_json``): no frames, undiscovered
    times as 0 instead of null, the PG name tuple as a list, pg_status values as strings."""
    entries = []
    for e in dump["entries"]:
        e = {k: v for k, v in e.items() if k != "frames" and not (k == "duration_ms" and v is None)}
        e["process_group"] = list(e["process_group"])
        for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            e[key] = e[key] or 0
        entries.append(e)
    out = {k: v for k, v in dump.items() if k != "entries"}
    if "pg_status" in out:
        out["pg_status"] = {pg: {k: str(v) for k, v in st.items()} for pg, st in out["pg_status"].items()}
    if entries:
        out["entries"] = entries
    return out


def write_dumps(run, spec, clock: Clock, out: Path) -> list[Path]:
    """Write ``OUT/flight_recorder/<host>/<prefix><rank>`` (pickle) or ``...<rank>.json``."""
    if spec.flight_recorder == "none":
        return []
    written = []
    for rank, dump in sorted(build_dumps(run, spec, clock).items()):
        host = run.cluster.hosts[rank // run.cluster.gpus_per_node]
        folder = out / "flight_recorder" / host
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{spec.flight_recorder_prefix}{rank}"
        if spec.flight_recorder == "pickle":
            path = folder / name
            path.write_bytes(pickle.dumps(dump, protocol=2))  # torch's jit pickler writes protocol 2
        else:
            path = folder / f"{name}.json"
            path.write_text(json.dumps(_json_form(dump), indent=None, sort_keys=True) + "\n")
        written.append(path)
    return written
