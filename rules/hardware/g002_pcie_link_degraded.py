"""G002 pcie-link-degraded: a GPU's PCIe link trained below its maximum, unlike its peers.

What it detects
    ``nvidia-smi -q`` (``PCI / GPU Link Info``: ``Link Width`` and ``PCIe Generation``,
    ``Max`` vs ``Current``) or ``--query-gpu=pcie.link.width.current,...`` rows where one
    GPU's link is narrower (x8 on an x16 slot) or slower than the maximum, while the same
    product on the job's other GPUs and nodes runs at the usual width/generation.

Why it matters
    A link that trained at x8 or Gen3 halves or quarters the GPU's host and GPU-NIC bandwidth
    (GPUDirect RDMA, PCIe P2P). The rank on that GPU becomes the slowest in every collective:
    the job runs, but slowly, and step times jitter. It usually means a bad riser, a dirty
    or loose connector, or a failing retimer.

What to do
    On the node run ``nvidia-smi -q -d PCI -i BUS`` under load and ``lspci -vv -s BUS``
    (``LnkSta`` vs ``LnkCap``); reseat the GPU or riser at the next maintenance; exclude the
    node from bandwidth-sensitive jobs until then (``--exclude=NODE``).

Known false positives
    GPUs drop their PCIe *generation* at idle to save power (nvidia-smi ``Idle: Active``):
    a generation below the maximum is only reported when the GPU's peers in the same
    snapshot run at the maximum, and at lower confidence when the GPU was idle. A platform
    whose slots are all x8 is not degraded: every GPU would show it, and nothing is reported.
"""

from __future__ import annotations

from collections import Counter

import polars as pl

from postmortem.analyzer import commands
from postmortem.parsers.base import groups_of
from postmortem.rules.base import Context, Finding, with_columns
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.hardware.hw_model import gpu_descriptor, gpu_label, job_nodes

RULE = Rule(code="G002", name="pcie-link-degraded", severity=Severity.WARNING, category=Category.HARDWARE, since="0.1.0")


def _rank_at(ctx: Context, node: str, pci: str) -> int | None:
    ident = ctx.table("gpu_identity")
    if ident.is_empty():
        return None
    row = ident.filter((pl.col("node") == node) & (pl.col("pci") == pci))
    return row["global_rank"][0] if not row.is_empty() else None


def check(ctx: Context) -> list[Finding]:
    health = ctx.table("gpu_health")
    need = {"node", "bus_id", "pcie_width_cur", "pcie_width_max", "pcie_gen_cur", "pcie_gen_max"}
    if health.is_empty() or not need <= set(health.columns):
        return []
    health = with_columns(health, state=pl.String)  # no state column: no row is known to be a healthy reading
    rows = health.filter((pl.col("state") == "ok") & pl.col("node").is_not_null() & pl.col("bus_id").is_not_null())
    nodes = job_nodes(ctx)
    if nodes:
        rows = rows.filter(pl.col("node").is_in(sorted(nodes)))
    if rows.is_empty():
        return []
    product = pl.col("product").fill_null("?") if "product" in rows.columns else pl.lit("?")
    rows = rows.with_columns(_product=product)
    findings = []
    for (prod,), group in groups_of(rows, "_product"):
        findings += _check_product(ctx, prod, group)
    return sorted(findings, key=lambda f: (f.nodes, f.title))


def _usual(values: list[int]) -> int | None:
    counts = Counter(v for v in values if v is not None)
    return counts.most_common(1)[0][0] if counts else None


def _check_product(ctx: Context, product: str, rows: pl.DataFrame) -> list[Finding]:
    width_usual = _usual(rows["pcie_width_cur"].to_list())
    gen_usual = _usual(rows["pcie_gen_cur"].to_list())
    gpus = rows.select("node", "bus_id").unique().height
    out = []
    # one row per GPU: its worst snapshot
    worst = rows.sort("pcie_width_cur", "pcie_gen_cur", "input_id", "line_no", nulls_last=True).unique(
        ["node", "bus_id"], keep="first", maintain_order=True)
    for r in worst.iter_rows(named=True):
        wc, wm, gc, gm = r["pcie_width_cur"], r["pcie_width_max"], r["pcie_gen_cur"], r["pcie_gen_max"]
        narrow = wc is not None and wm is not None and wc < wm and (gpus == 1 or (width_usual or 0) > wc)
        slow = (gc is not None and gm is not None and gc < gm and gpus > 1 and (gen_usual or 0) > gc)
        if not (narrow or slow):
            continue
        idle = "Idle" in (r.get("throttle") or "")
        rank = _rank_at(ctx, r["node"], r["bus_id"])
        gpu = gpu_descriptor(ctx, r["node"], r["bus_id"], rank)
        gpu.setdefault("gpu_index", r.get("minor"))
        parts = []
        if narrow:
            peers = f" (the other {product} GPUs: x{width_usual})" if gpus > 1 else ""
            parts.append(f"link width x{wc} of x{wm}{peers}")
        if slow:
            parts.append(f"PCIe Gen{gc} of Gen{gm} (the other {product} GPUs: Gen{gen_usual})")
        confidence = 0.8 if narrow else (0.45 if idle else 0.65)
        if gpus == 1:
            confidence = min(confidence, 0.5)
        label = gpu_label(gpu) + (f", rank {rank}" if rank is not None else "")
        message = (f"{label}: {'; '.join(parts)}. The GPU's host and GPUDirect bandwidth is cut accordingly; its rank "
                   "is the slowest in every collective that crosses PCIe.")
        if slow and not narrow and idle:
            message += (" The snapshot shows the GPU idle (Idle: Active), and GPUs lower the PCIe generation at idle: "
                        "check it under load before acting.")
        if gpus == 1:
            message += " No other GPU of the same model was in the inputs to compare with."
        bus = commands.shown(r["bus_id"], commands.bus_id)
        out.append(RULE.finding(confidence=confidence, title=f"PCIe link degraded on {label}", message=message,
            ranks=[rank] if rank is not None else [], nodes=[r["node"]], gpus=[gpu],
            evidence=[ctx.evidence(r["input_id"], r["line_no"],
                                   note="nvidia-smi block of this GPU (PCI / GPU Link Info)")],
            suggestion=(f"On {r['node']} run `{commands.sh('nvidia-smi', '-q', '-d', 'PCI', '-i', bus)}` under load and "
                        f"`{commands.sh('lspci', '-vv', '-s', bus)} | grep -E 'LnkCap|LnkSta'`; reseat the GPU/riser at "
                        f"the next maintenance and keep bandwidth-bound jobs off it "
                        f"(`{commands.sh('--exclude=' + commands.shown(r['node'], commands.host))}`)."),
            culprit=False,
            details={"bus_id": r["bus_id"], "width_current": wc, "width_max": wm, "gen_current": gc, "gen_max": gm,
                     "peers_width": width_usual, "peers_gen": gen_usual, "idle": idle}))
    return out
