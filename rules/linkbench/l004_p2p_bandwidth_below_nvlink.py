"""L004 p2p-bandwidth-below-nvlink: p2pBandwidthLatencyTest measured a GPU pair far below its NVLink, or without P2P.

What it detects
    CUDA samples' ``p2pBandwidthLatencyTest`` output (``p2p_matrix``), per host: (a) a GPU pair
    whose unidirectional P2P=Enabled bandwidth (the write matrix; the read matrix where no write
    matrix is printed) is below half of what NVLink carries where ``nvidia-smi topo -m`` of the same
    host says ``NV#`` between them (the GPU model's NVLink tier, about 370 GB/s achievable on
    NVLink 4, 230 on NVLink 3); (b) without a topology, a pair below half of the median of the
    other pairs of the same matrix (at least three GPUs); (c) a pair the test could not enable P2P
    for (``Device=i CANNOT Access Peer Device=j``, a 0 in the ``P2P Connectivity Matrix``) although
    the topology says ``NV#`` between them. The measured and the expected GB/s are in the finding.

Why it matters
    Tensor- and expert-parallel collectives run over NVLink; one slow or P2P-less pair caps every
    ring through it (NCCL falls back to SHM through host memory, ten times slower), and the job
    looks merely slow.

What to do
    ``nvidia-smi nvlink -s`` (links down or at reduced speed), ``nvidia-smi nvlink -e`` error
    counters, ``nvidia-smi -q | grep -i fabric`` and the Fabric Manager service on NVSwitch systems;
    P2P refused inside a container usually means the processes cannot share IPC (``--ipc=host``)
    or the IOMMU/ACS blocks peer access; rerun the test after a reset and drain the host if a pair
    stays low.

Known false positives
    The sample repeats each copy only a few times, so single cells vary by 5-10%: the bar is half
    the expected rate. ``P2P=Disabled`` matrices (copies staged through the host) are not judged,
    nor PCIe pairs (``PIX``/``SYS`` cells): consumer cards without P2P are as designed. Without the
    GPU model the NVLink check uses the matrix's own median.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.base import groups_of
from postmortem.rules.linkbench import linkbench_model as lm
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="L004", name="p2p-bandwidth-below-nvlink", severity=Severity.WARNING, category=Category.PERF, since="0.1.0")

SHORT = 0.5


def check(ctx: Context) -> list[Finding]:
    m = lm.placed(ctx, ctx.table("p2p_matrix"))
    if m.is_empty():
        return []
    out = []
    for (place, input_id, run), rows in groups_of(m, "place", "input_id", "run", maintain_order=True):
        f = _judge(ctx, place, input_id, rows)
        if f:
            out.append(f)
    return out


def _judge(ctx: Context, place, input_id, rows: pl.DataFrame) -> Finding | None:
    gpus = lm.placed(ctx, ctx.table("gpus"))
    names = []
    if not gpus.is_empty() and "source" in gpus.columns:
        names = gpus.filter((pl.col("input_id") == input_id) & (pl.col("source") == "p2pBandwidthLatencyTest"))["name"] \
            .drop_nulls().to_list()
    acc = lm.accelerator(ctx, place, names)
    links = lm.topo_links(ctx, place)
    uni = rows.filter((pl.col("matrix") == "bandwidth") & (pl.col("direction") == "unidirectional")
                      & (pl.col("p2p") == "enabled") & (pl.col("src") != pl.col("dst")))
    method = "writes" if (uni["method"] == "writes").any() else ("reads" if (uni["method"] == "reads").any() else None)
    if method:
        uni = uni.filter(pl.col("method") == method)
    expected, basis = lm.nvlink_expected(acc)
    slow, refused = [], []
    if not uni.is_empty():
        median = float(uni["value"].median())
        for r in uni.iter_rows(named=True):
            link = links.get((f"GPU{r['src']}", f"GPU{r['dst']}"))
            if link and link.startswith("NV") and expected:
                if r["value"] < SHORT * expected:
                    slow.append((r, link, expected, basis))
            elif not links and uni["src"].n_unique() >= 3 and median > 0 and r["value"] < SHORT * median:
                slow.append((r, None, median, f"the median pair of this matrix ({median:g} GB/s)"))
    access = rows.filter(pl.col("matrix").is_in(["access", "connectivity"]) & (pl.col("src") != pl.col("dst"))
                         & (pl.col("value") == 0))
    seen = set()
    for r in access.iter_rows(named=True):
        link = links.get((f"GPU{r['src']}", f"GPU{r['dst']}"))
        if link and link.startswith("NV") and (r["src"], r["dst"]) not in seen:
            seen.add((r["src"], r["dst"]))
            refused.append((r, link))
    if not slow and not refused:
        return None
    node = rows["node"].drop_nulls().first() if "node" in rows.columns else None
    parts = []
    if slow:
        shown = ", ".join(f"GPU{r['src']}->GPU{r['dst']} {r['value']:g} GB/s" + (f" ({link})" if link else "")
                          for r, link, _, _ in slow[:8])
        more = f" and {len(slow) - 8} more" if len(slow) > 8 else ""
        parts.append(f"{len(slow)} GPU pair(s) measured far below what their link carries: {shown}{more}; "
                     f"expected about {slow[0][2]:g} GB/s per direction ({slow[0][3]})")
    if refused:
        parts.append("P2P not enabled between GPUs that topo -m shows on NVLink: "
                     + ", ".join(f"GPU{r['src']}->GPU{r['dst']} ({link})" for r, link in refused[:8]))
    where = place or "?"
    title = (f"P2P bandwidth of {len(slow)} GPU pair(s) on {where} far below NVLink" if slow
             else f"P2P disabled between NVLink-connected GPUs on {where}")
    ev = [ctx.evidence(r["input_id"], r["line_no"], f"GPU{r['src']}->GPU{r['dst']}: {r['value']:g} GB/s")
          for r, *_ in slow[:3]]
    ev += [ctx.evidence(r["input_id"], r["line_no"], f"GPU{r['src']}->GPU{r['dst']}: no P2P") for r, _ in refused[:3]]
    worst = min((r["value"] for r, *_ in slow), default=None)
    gpu_ids = sorted({r["src"] for r, *_ in slow} | {r["dst"] for r, *_ in slow}
                     | {r["src"] for r, _ in refused} | {r["dst"] for r, _ in refused})
    return RULE.finding(confidence=0.7 if (slow and slow[0][1]) or refused else 0.55, title=title,
                   message="; ".join(parts) + ".", nodes=[node] if node else [],
                   gpus=[{"node": node, "cuda_dev": g} for g in gpu_ids], evidence=ev, suggestion=("Check nvidia-smi nvlink -s / -e on the host (links down or degraded), the Fabric "
                               "Manager on NVSwitch systems, and container IPC (--ipc=host) where P2P is refused; "
                               "rerun p2pBandwidthLatencyTest and drain the host if the pair stays low."),
                   details={"place": place, "method": method, "slow_pairs": [
                       {"src": r["src"], "dst": r["dst"], "measured_gbs": r["value"], "link": link, "expected_gbs": e}
                       for r, link, e, _ in slow], "p2p_refused": [{"src": r["src"], "dst": r["dst"], "link": link}
                                                                   for r, link in refused],
                       "worst_gbs": worst})
