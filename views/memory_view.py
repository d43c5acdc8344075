"""Per-rank GPU memory as the Memory screen and the HTML report show it, Textual-free.

Per-rank peaks (``memory_model.peaks``) against the card's capacity (the memory lines, else the
report's GPU model), CUDA OOMs (``memory_model.ooms`` and M001) and host OOM kills
(``crash_model.oom_kills`` and X004) marked on the ranks they hit. A rank with no memory samples
that ran out of memory takes its peak from the OOM message's own reading. One computation for
both views: the TUI's Memory screen (``tui/screens/memory.py``) and the report's memory chart
(``analyzer/html_report.py``) draw the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from postmortem.analyzer.pipeline import Run
from postmortem.rules.base import Context


@dataclass
class RankMemory:
    rank: int
    node: str | None
    alloc: float | None = None        # MiB, peak allocated over the memory samples
    reserved: float | None = None     # MiB, peak reserved
    samples: int = 0
    early: bool = False               # every sample predates the optimizer state (understates the peak)
    ref: tuple[int, int] | None = None        # (input_id, line_no) of the peak sample
    cuda_oom: tuple[int, int] | None = None   # the CUDA OOM line
    oom_sizes: dict | None = None
    host_oom: tuple[int, int] | None = None   # the kernel OOM killer's line on this rank's node
    host_oom_killed: bool = False             # this rank's own process was the one killed
    at_oom: bool = False                      # alloc/reserved read from the OOM message (no samples)

    @property
    def peak(self) -> float:
        return max(self.alloc or 0.0, self.reserved or 0.0)

    @property
    def evidence(self) -> tuple[int, int] | None:
        return self.cuda_oom or (self.host_oom if self.host_oom_killed else None) or self.ref or self.host_oom


@dataclass
class MemoryView:
    rows: list[RankMemory]
    capacity: float | None
    capacity_source: str
    n_ranks: int                      # ranks the run knows (ranks table)
    paths: dict[int, str] = field(default_factory=dict)   # input_id -> inputs.path of the rows' lines

    @property
    def top(self) -> float:
        """The bar scale: the capacity or the largest peak, whichever is larger."""
        return max([self.capacity or 0.0] + [r.peak for r in self.rows] + [1.0])


def memory_view(run: Run, report: dict) -> MemoryView:
    from postmortem.rules.crash.crash_model import oom_kills
    from postmortem.rules.memory.memory_model import capacity_mib, ooms, peaks

    ctx = Context(run, None)
    capacity, source = capacity_mib(ctx)
    if capacity is None:
        capacity, source = _capacity_of_report(report)
    by_rank: dict[int, RankMemory] = {}
    p = peaks(ctx)
    for r in ([] if p.is_empty() else p.iter_rows(named=True)):
        by_rank[r["rank"]] = RankMemory(r["rank"], r["node"], r["peak_alloc"], r["peak_reserved"], r["samples"],
                                        bool(r["all_early"]), (r["input_id"], r["line_no"]))
    rank_nodes = _rank_nodes(ctx)
    for o in ooms(ctx):
        if o["rank"] is None:
            continue
        row = by_rank.setdefault(o["rank"], RankMemory(o["rank"], o["node"] or rank_nodes.get(o["rank"])))
        if row.cuda_oom is None:
            row.cuda_oom, row.oom_sizes = (o["input_id"], o["line_no"]), o["sizes"]
            alloc, unalloc = o["sizes"]["allocated"], o["sizes"]["unallocated"]
            if not row.samples and alloc is not None:
                # no memory samples: the OOM message's own reading is the best peak there is
                row.alloc, row.reserved, row.at_oom = alloc, alloc + (unalloc or 0.0), True
    for rank in _finding_ranks(report, "M001"):
        by_rank.setdefault(rank, RankMemory(rank, rank_nodes.get(rank)))
    for kill in oom_kills(ctx):
        hit = [r for r, n in rank_nodes.items() if n == kill["node"]] or ([kill["rank"]] if kill["rank"] is not None else [])
        for rank in hit:
            row = by_rank.setdefault(rank, RankMemory(rank, rank_nodes.get(rank, kill["node"])))
            if row.host_oom is None:
                row.host_oom = (kill["input_id"], kill["line_no"])
            row.host_oom_killed |= kill["rank"] == rank
    rows = sorted(by_rank.values(), key=lambda r: r.rank)
    return MemoryView(rows, capacity, source, len(rank_nodes), _paths(run, rows))


def _paths(run: Run, rows: list[RankMemory]) -> dict[int, str]:
    ids = sorted({ref[0] for r in rows for ref in (r.ref, r.cuda_oom, r.host_oom) if ref})
    if not ids:
        return {}
    found = run.frame("SELECT input_id, path FROM inputs WHERE list_contains(?, input_id)", [ids])
    return {int(i): p for i, p in found.iter_rows()}


def _capacity_of_report(report: dict) -> tuple[float | None, str]:
    """The report's GPU model (detected, or ``--gpu``) in the hardware model, in MiB as the
    memory rules count it (memory_model.capacity_mib: GB of the table taken as GiB)."""
    from postmortem.analyzer import hardware

    model = report.get("run", {}).get("gpu_model") or {}
    acc = hardware.find(model["name"]) if model.get("name") else None
    if not acc or not acc.get("memory_gb"):
        return None, "unknown"
    return float(acc["memory_gb"]) * 1024, f"the hardware model ({acc['name']}, {model.get('basis') or 'report'})"


def _rank_nodes(ctx: Context) -> dict[int, str | None]:
    ranks = ctx.ranks
    if ranks.is_empty() or "rank" not in ranks.columns:
        return {}
    return {r: n for r, n in ranks.select("rank", "node").iter_rows() if r is not None}


def _finding_ranks(report: dict, code: str) -> list[int]:
    return sorted({r for f in report.get("findings") or [] if f.get("code") == code for r in f.get("ranks") or []})


def sort_rows(rows: list[RankMemory], by_peak: bool) -> list[RankMemory]:
    return sorted(rows, key=lambda r: (-r.peak, r.rank)) if by_peak else sorted(rows, key=lambda r: r.rank)


NEAR = 0.95   # M002's threshold: a peak at or above 95% of the card


def percent(value: float, capacity: float | None) -> float | None:
    return 100.0 * value / capacity if capacity and value else None



def gib(mib: float | None) -> str:
    return "" if mib is None else f"{mib / 1024:.1f} GiB"
