"""A tiny hand-written run writer for CLI and rule tests, independent of bench's generator
(which shares our reading of the formats, so it must not be the only source of test runs)."""
from __future__ import annotations

from pathlib import Path

PG0 = "[PG ID 0 PG GUID 0(default_pg) Rank {r}]"


def write_scenario(folder: Path, ranks: int = 4, culprit: int | None = 2, seq: int = 10,
                   desync: bool = False, all_stuck: bool = False, guessed: bool = False,
                   culprit_last_line: str | None = None) -> Path:
    """Per-rank files node-XX/rankN.log; rank ``culprit`` never enters SeqNum ``seq``.

    guessed=True writes PyTorch 2.1-era lines with no ``[rankN]:`` prefix and no NCCL output,
    under torchrun-style ``attempt_0/<local_rank>/stderr.log`` paths: the global rank is
    then only a guess from the folder layout.
    """
    per_node = 2
    for r in range(ranks):
        node = f"node-{r // per_node + 1:02d}"
        if guessed:
            path = folder / node / "run_x" / "attempt_0" / str(r % per_node) / "stderr.log"
        else:
            path = folder / node / f"rank{r}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        if not guessed:
            lines.append(f"{node}:{1000 + r}:{1000 + r} [{r % per_node}] NCCL INFO NCCL version 2.21.5+cuda12.4")
            lines.append(f"{node}:{1000 + r}:{1100 + r} [{r % per_node}] NCCL INFO ncclCommInitRank comm 0x5{r:03x} "
                         f"rank {r} nranks {ranks} cudaDev {r % per_node} nvmlDev {r % per_node} busId "
                         f"{['18000', '2a000'][r % per_node]} commId 0xfeed - Init COMPLETE")
        behind = r == culprit and not all_stuck and not desync
        if r == culprit and culprit_last_line:
            lines.append(culprit_last_line)
        if behind:
            if not guessed:
                lines.append(f"[rank{r}]:[E0724 09:12:02.1 ProcessGroupNCCL.cpp:3] {PG0.format(r=r)} Received a dump "
                             f"signal due to a collective timeout from  rank 0 and we will try our best to dump the "
                             f"debug info. Last enqueued NCCL work: {seq - 1}, last completed NCCL work: {seq - 1}.")
            else:
                lines.append("INFO:root:building optimizer state")  # alive, but no c10d line
            path.write_text("\n".join(lines) + "\n")
            continue
        op = "BROADCAST" if desync and r == culprit else "ALLREDUCE"
        if guessed:
            lines.append(f"[E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation timeout: "
                         f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=5, NumelOut=5, Timeout(ms)=600000) ran for "
                         f"600010 milliseconds before timing out.")
            lines.append(f"[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank {r}] Timeout at NCCL work: {seq}, last enqueued "
                         f"NCCL work: {seq}, last completed NCCL work: {seq - 1}.")
            path.write_text("\n".join(lines) + "\n")
            continue
        lines.append(f"[rank{r}]:[E0724 09:12:0{r % 10}.1 ProcessGroupNCCL.cpp:1] {PG0.format(r=r)} Watchdog caught "
                     f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=5, NumelOut=5, "
                     f"Timeout(ms)=600000) ran for 600010 milliseconds before timing out.")
        lines.append(f"[rank{r}]:[E0724 09:12:0{r % 10}.2 ProcessGroupNCCL.cpp:2] {PG0.format(r=r)}  failure detected "
                     f"by watchdog at work sequence id: {seq} PG status: last enqueued work: {seq}, last completed "
                     f"work: {seq - 1}")
        path.write_text("\n".join(lines) + "\n")
    return folder


def write_files(folder: Path, files: dict[str, list[str]]) -> Path:
    """Hand-written inputs: each ``name -> lines`` as a file under ``folder`` (folders made)."""
    for name, lines in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
    return folder


def report_of(folder: Path) -> dict:
    """The report of one folder, as ``postmortem report`` builds it; the store is closed after."""
    from postmortem.analyzer.pipeline import analyze
    from postmortem.rules.report import build_report

    run = analyze([folder])
    try:
        return build_report(run)
    finally:
        run.con.close()
