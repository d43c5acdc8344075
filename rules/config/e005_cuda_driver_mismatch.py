"""E005 cuda-driver-mismatch: the GPU driver differs between nodes.

What it detects
    Nodes whose GPU driver differs from the others': NCCL's ``cudaDriverVersion N`` line (2.13+,
    the CUDA version the driver supports, per process) and ``nvidia-smi``'s ``driver_version``
    (per node, from saved ``--query-gpu`` output).

Why it matters
    A node left on another driver after maintenance is a classic source of asymmetric
    behaviour: different CUDA compatibility (a newer toolkit may fall back or fail on the old
    driver), different NVLink/NVSwitch fabric-manager pairing, and bugs fixed on one node but not
    the other. It rarely hangs a job by itself, so this is a warning.

What to do
    Bring the node to the cluster's driver (and the matching fabric manager), or exclude it
    until it is; ``nvidia-smi --query-gpu=driver_version --format=csv`` on every node.

Known false positives
    A rolling driver upgrade in progress is intended; outputs saved at different times may
    show a node before and after its upgrade.
"""

from __future__ import annotations

import polars as pl

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.config.config_model import majority_split

RULE = Rule(code="E005", name="cuda-driver-mismatch", severity=Severity.WARNING, category=Category.CONFIG, since="0.1.0")


def _per_node(frame: pl.DataFrame, node: str, value: str) -> tuple[dict[str, str], dict[str, tuple[int, int]]]:
    if frame.is_empty() or node not in frame.columns or value not in frame.columns:
        return {}, {}
    frame = (frame.lazy().filter(pl.col(node).is_not_null() & pl.col(value).is_not_null()).sort("input_id", "line_no")
             .collect(engine="in-memory"))
    values, refs = {}, {}
    for row in frame.group_by(node, maintain_order=True).agg(
            v=pl.col(value).cast(pl.String).unique().sort().str.join(" | "),
            input_id=pl.col("input_id").first(), line_no=pl.col("line_no").first()).iter_rows(named=True):
        values[row[node]] = row["v"]
        refs[row[node]] = (row["input_id"], row["line_no"])
    return values, refs


def check(ctx: Context) -> list[Finding]:
    info = ctx.table("nccl_info")
    if not info.is_empty() and "kind" in info.columns:
        info = info.filter(pl.col("kind") == "cuda_driver")
    smi = ctx.table("gpu_query")
    if not smi.is_empty() and "field" in smi.columns:
        smi = smi.filter(pl.col("field") == "driver_version")
    out = []
    for label, (values, refs) in (("NCCL's cudaDriverVersion", _per_node(info, "host", "value")),
                                  ("nvidia-smi driver_version", _per_node(smi, "node", "value"))):
        if len(values) < 2 or len(set(values.values())) < 2:
            continue
        majority, minority = majority_split(values)
        groups: dict[str, list[str]] = {}
        for node, value in values.items():
            groups.setdefault(value, []).append(node)
        ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        summary = "; ".join(f"{v} on {', '.join(sorted(n))}" for v, n in ordered)
        evidence = [ctx.evidence(*refs[n], note=f"{label} {values[n]} on {n}") for n in minority[:2]]
        if majority is not None:
            other = next(n for n in sorted(values) if values[n] == majority)
            evidence.append(ctx.evidence(*refs[other], note=f"{label} {majority} on {other} (the majority)"))
        where = f"{', '.join(minority)} run{'s' if len(minority) == 1 else ''} another GPU driver" \
            if majority is not None else "the nodes run different GPU drivers"
        out.append(RULE.finding(confidence=0.7, title=where,
            message=f"{label} differs between nodes: {summary}. Nodes on another driver behave differently (CUDA "
            "compatibility, fabric manager, fixed bugs)",
            nodes=minority, evidence=evidence, culprit=False,
            suggestion=f"Bring {', '.join(minority)} to the cluster's driver"
                       + (f" ({majority})" if majority is not None else "")
                       + " with its matching fabric manager, or exclude it until then; check with "
                         "nvidia-smi --query-gpu=driver_version --format=csv on every node.",
            details={"source": label, "values": values, "majority": majority}))
    return out
