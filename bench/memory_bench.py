"""Peak memory against the budget (issue 23): one large input per case, whatever its size.

    python -m bench.memory_bench --sizes 200MB,2GB [--cases plain,coll,no-newline,zip] [--dir DIR]
                                 [--budget 4GiB] [--json FILE] [--keep]

Each case generates one input of each size and runs ``postmortem report FILE --format json
--out ... --no-cache --quiet`` in a child process while this process samples, every 50 ms, the
resident memory of the child and every process under it (its workers) added together: the peak
printed is "all processes at once", not the largest one alone. The cases:

* ``plain``: a training job's stderr: c10d periodic work updates of two process groups,
  Megatron-style iteration lines, application chatter, now and then a warning;
* ``coll``: one rank's NCCL COLL trace (``NCCL_DEBUG_SUBSYS=COLL``): a line per collective;
* ``no-newline``: the size in ``x`` bytes and not one newline (one line: cut at the line cap);
* ``zip``: a ``.zip`` holding one member of ``plain`` lines of the size (the archive is small).

A run prints a table: case, size, peak RSS of all processes, the budget, whether it is under,
the wall time and the exit code. Nothing is asserted about time. Inputs are written under
``--dir`` (default: a temporary folder, removed unless ``--keep``); they take the sizes asked on
disk (the zip much less), plus the private store of the run in ``TMPDIR``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from datetime import datetime, timedelta
from pathlib import Path

from postmortem.analyzer.budget import memory, parse_size

CASES = ("plain", "coll", "no-newline", "zip")
BLOCK_LINES = 4000


def _plain_block(t: datetime, seq: int, step: int) -> tuple[bytes, datetime, int, int]:
    lines = []
    for _ in range(BLOCK_LINES // 4):
        t += timedelta(milliseconds=250)
        seq += 3
        stamp = t.strftime("%m%d %H:%M:%S") + f".{t.microsecond:06d}123"
        lines.append(f"[rank0]:[I{stamp} ProcessGroupNCCL.cpp:2401] [PG ID 0 PG GUID 0(default_pg) Rank 0] NCCL Work "
                     f"update periodically: last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.")
        lines.append(f"[rank0]:[I{stamp} ProcessGroupNCCL.cpp:2401] [PG ID 2 PG GUID 5(EXPERT_MODEL_PARALLEL_GROUP) "
                     f"Rank 0] NCCL Work update periodically: last enqueued NCCL work: {seq // 2}, last completed "
                     f"NCCL work: {seq // 2}.")
        lines.append(f"data loader: prefetched batch {seq} of shard {seq % 97} in {seq % 13}.{seq % 7} ms")
        if seq % 40 == 1:
            step += 1
            lines.append(f" [{t:%Y-%m-%d %H:%M:%S}] iteration {step:8d}/ 1000000 | consumed samples: {step * 1024:12d} "
                         f"| elapsed time per iteration (ms): 1210.4 | learning rate: 1.500000E-04 | global batch "
                         f"size:  1024 | lm loss: {2.5 + (step % 17) / 100:.6E} | loss scale: 1.0 | grad norm: 0.812 "
                         "| number of skipped iterations:   0 | number of nan iterations:   0 |")
        elif seq % 200 == 7:
            lines.append("UserWarning: torch.utils.checkpoint: the use_reentrant parameter should be passed "
                         "explicitly.")
        else:
            lines.append(f"tokens/s/gpu {3000 + seq % 500}, mfu {0.31 + (seq % 9) / 1000:.3f}")
    return ("\n".join(lines) + "\n").encode(), t, seq, step


def write_plain(path: Path, size: int, sink=None) -> int:
    t, seq, step, written = datetime(2025, 7, 24, 8, 0, 0), 0, 0, 0
    out = sink or open(path, "wb")  # noqa: SIM115 -- closed below when ours
    try:
        while written < size:
            block, t, seq, step = _plain_block(t, seq, step)
            block = block[:size - written] if written + len(block) > size else block
            if written + len(block) >= size and not block.endswith(b"\n"):
                block = block[:block.rfind(b"\n") + 1] or block
            out.write(block)
            written += len(block)
            if not block:
                break
    finally:
        if sink is None:
            out.close()
    return written


def write_coll(path: Path, size: int) -> int:
    ops = (("AllReduce", 1, 7), ("AllGather", 1048576, 9), ("ReduceScatter", 1048576, 9))
    written, op = 0, 0
    with open(path, "wb") as out:
        header = b"h20-node-01:3571778:3571778 [3] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
        out.write(header)
        written += len(header)
        while written < size:
            lines = []
            for _ in range(BLOCK_LINES):
                name, count, dtype = ops[op % 3]
                lines.append(f"h20-node-01:3571778:3571778 [3] NCCL INFO {name}: opCount {op:x} sendbuff "
                             f"0x7f4973517000 recvbuff 0x7f4973517000 count {count} datatype {dtype} op 0 root 0 comm "
                             "0x5562f1205540 [nranks=8] stream 0x55d26859b600")
                op += 1
            block = ("\n".join(lines) + "\n").encode()
            out.write(block)
            written += len(block)
    return written


def write_no_newline(path: Path, size: int) -> int:
    block = b"x" * (4 << 20)
    written = 0
    with open(path, "wb") as out:
        while written < size:
            piece = block[:size - written]
            out.write(piece)
            written += len(piece)
    return written


def write_zip(path: Path, size: int) -> int:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z, \
            z.open("job/rank0/stderr.log", "w", force_zip64=True) as member:
        return write_plain(path, size, sink=member)


WRITERS = {"plain": ("stderr.log", write_plain), "coll": ("rank3.log", write_coll),
           "no-newline": ("one-line.log", write_no_newline), "zip": ("job.zip", write_zip)}


def _tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def measure(command: list[str], env: dict | None = None) -> dict:
    """Run ``command``; its exit code, wall time and the peak of the summed RSS of its process tree."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, sum(_rss(p) for p in _tree(proc.pid)))
        time.sleep(0.05)
    err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    return {"rc": proc.returncode, "wall_s": round(time.perf_counter() - started, 1), "peak_rss_mib": peak >> 20,
            "stderr": err.strip().splitlines()[-3:]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="200MB,2GB", help="comma list of sizes (200MB, 2GB, 2GiB)")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--dir", help="where the inputs are written (default: a temporary folder)")
    ap.add_argument("--budget", help="POSTMORTEM_MEMORY for the runs (default: as set, else 4GiB)")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--keep", action="store_true", help="keep the generated inputs")
    args = ap.parse_args(argv)
    env = dict(os.environ, POSTMORTEM_CACHE="off", POSTMORTEM_PROGRESS="0")
    if args.budget:
        env["POSTMORTEM_MEMORY"] = args.budget
    os.environ.update({k: v for k, v in env.items() if k == "POSTMORTEM_MEMORY"})
    budget = memory()
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="pm-memory-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    print(f"budget (POSTMORTEM_MEMORY): {budget >> 20} MiB; peak = resident memory of postmortem and its workers "
          "added together, sampled every 50 ms", flush=True)
    print(f"{'case':12s} {'size':>10s} {'peak RSS':>10s} {'budget':>9s} {'under':>6s} {'wall':>8s} {'rc':>3s}")
    try:
        for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
            name, writer = WRITERS[case]
            for text in args.sizes.split(","):
                size = parse_size(text)
                folder = root / f"{case}-{text.strip()}"
                folder.mkdir(exist_ok=True)
                target = folder / name
                if not target.exists():
                    writer(target, size)
                out = folder / "report.json"
                row = {"case": case, "size": text.strip(), "bytes": size, "file_bytes": target.stat().st_size,
                       **measure([sys.executable, "-m", "postmortem.cli", "report", str(target), "--format", "json",
                                  "--out", str(out), "--no-cache", "--quiet"], env)}
                row["budget_mib"] = budget >> 20
                row["under_budget"] = row["peak_rss_mib"] <= row["budget_mib"]
                rows.append(row)
                print(f"{case:12s} {text.strip():>10s} {row['peak_rss_mib']:>7d} MiB {row['budget_mib']:>5d} MiB "
                      f"{'yes' if row['under_budget'] else 'NO':>6s} {row['wall_s']:>7.1f}s {row['rc']:>3d}", flush=True)
                if row["rc"] not in (0, 1, 3):
                    print("    " + "\n    ".join(row["stderr"]), flush=True)
                if not args.keep:
                    shutil.rmtree(folder, ignore_errors=True)
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"budget_mib": budget >> 20, "rows": rows}, indent=1) + "\n")
    return 0 if all(r["under_budget"] and r["rc"] in (0, 1, 3) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
