"""E006 torch-version-mismatch: PyTorch differs between nodes.

What it detects
    Nodes whose installed PyTorch (``collect_env``'s ``PyTorch version``, ``pip freeze`` /
    ``pip list`` ``torch`` lines saved per node) differs from the others', by release
    (``2.4.0`` vs ``2.3.1``) or build (``+cu121`` vs ``+cu124``).

Why it matters
    Ranks of one job must run the same collectives in the same order with the same
    ProcessGroupNCCL behaviour; a different PyTorch changes defaults (error handling, NCCL
    bundled with the wheel, communicator splitting, timeouts) and can change which collectives
    a model issues. It is a warning: the mismatch is worth fixing even when it did not cause
    this failure.

What to do
    Run every node from one image or environment; compare ``python -c "import torch;
    print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"`` on each node.

Known false positives
    A package list saved from another environment than the job's (a login shell's Python, not
    the container's). Only lists that a node's path or host name attributes are compared.
"""

from __future__ import annotations

import polars as pl

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.config.config_model import majority_split

RULE = Rule(code="E006", name="torch-version-mismatch", severity=Severity.WARNING, category=Category.CONFIG, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    pkgs = ctx.table("packages")
    if pkgs.is_empty() or not {"name", "version", "node"} <= set(pkgs.columns):
        return []
    torch = pkgs.filter((pl.col("name").str.to_lowercase() == "torch") & pl.col("node").is_not_null()
                        & pl.col("version").is_not_null()).sort("input_id", "line_no")
    if torch.is_empty():
        return []
    release = pl.col("version").str.extract(r"^([^+]+)", 1)
    build = pl.col("version").str.extract(r"\+(.+)$", 1)
    per_node = torch.group_by("node", maintain_order=True).agg(
        release=release.drop_nulls().unique().sort().str.join(" | "),
        build=build.drop_nulls().unique().sort().str.join(" | "),
        input_id=pl.col("input_id").first(), line_no=pl.col("line_no").first())
    rows = list(per_node.iter_rows(named=True))
    values = {r["node"]: r["release"] + (f"+{r['build']}" if r["build"] else "") for r in rows}
    releases = {r["node"]: r["release"] for r in rows}
    builds = {r["node"]: r["build"] for r in rows if r["build"]}
    refs = {r["node"]: (r["input_id"], r["line_no"]) for r in rows}
    if len(releases) < 2 or (len(set(releases.values())) < 2 and len(set(builds.values())) < 2):
        return []
    compared = releases if len(set(releases.values())) > 1 else builds
    majority, minority = majority_split(compared)
    summary = "; ".join(f"{values[n]} on {n}" for n in sorted(values))
    evidence = [ctx.evidence(*refs[n], note=f"torch {values[n]} on {n}") for n in minority[:2]]
    if majority is not None:
        other = next(n for n in sorted(compared) if compared[n] == majority)
        evidence.append(ctx.evidence(*refs[other], note=f"torch {values[other]} on {other} (the majority)"))
    return [RULE.finding(confidence=0.7,
        title=f"{', '.join(minority)} run{'s' if len(minority) == 1 else ''} another PyTorch" if majority is not None
        else "the nodes run different PyTorch builds",
        message=f"PyTorch differs between nodes: {summary}. Ranks on another PyTorch may issue collectives differently "
        "and handle errors and timeouts differently",
        nodes=minority, evidence=evidence, culprit=False,
        suggestion="Run every node from one image or environment; compare python -c \"import torch; "
                   "print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())\" on each node.",
        details={"values": values, "majority": majority})]
