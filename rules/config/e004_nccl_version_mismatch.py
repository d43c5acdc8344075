"""E004 nccl-version-mismatch: some nodes run another NCCL release than the rest.

What it detects
    Nodes whose NCCL processes show a different release: their own ``NCCL version`` lines
    (every process prints one from 2.22), or, before that, the release range their line shapes
    allow (plugin wording, init and channel-count lines: ``docs/formats/nccl.md`` section 4;
    ``nccl_processes.version_min/max``), which must not overlap the others'. NCCL 2.23+'s own
    ``Mismatched NCCL version detected`` warning is reported too. The minority node(s) are named
    when one release is held by a majority of the nodes.

Why it matters
    NCCL does not support mixing releases in one job. Before 2.23 nothing checks it: the
    bootstrap exchanges structures whose size changed (``Message truncated``), or
    initialisation succeeds and the ranks disagree at the first collective and hang (different
    tuning, protocols, chunk sizes). From 2.23 initialisation fails with invalid usage.

What to do
    Run one NCCL build everywhere: on the named node check which ``libnccl.so.2`` the ranks load
    (``LD_LIBRARY_PATH``, ``ldconfig -p | grep nccl``, ``python -c "import torch;
    print(torch.cuda.nccl.version())"``) and which container image or Python environment it
    runs; exclude the node until it matches.

Known false positives
    Line shapes narrow a release to a range; a patched or vendor build (RCCL, NCCLX, a
    distribution backport) can print another release's wording. Processes whose shapes fit no
    single release are left out, and with shapes only the confidence is lower. Before 2.22 only
    rank 0 prints the version line; it is not copied onto the other processes as evidence.
"""

from __future__ import annotations

import polars as pl

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.config.config_model import NodeVersion, nccl_node_versions, ranks_on, version_split

RULE = Rule(code="E004", name="nccl-version-mismatch", severity=Severity.ERROR, category=Category.CONFIG, since="0.1.0")

CONSEQUENCE = ("NCCL does not support mixed releases: before 2.23 nothing checks it, so the ranks fail at bootstrap "
               "('Message truncated') or hang at the first collective they disagree on; 2.23+ refuses at init")


def _job_line(ctx: Context) -> str:
    versions = ctx.table("nccl_versions")
    if versions.is_empty() or "pid" not in versions.columns:
        return ""
    bare = versions.filter(pl.col("pid").is_null())["version"].unique().sort().to_list()
    return f" (rank 0 printed NCCL version {', '.join(bare)})" if bare else ""


def _how(v: NodeVersion) -> str:
    return "its own version lines" if v.exact else "its line shapes"


def check(ctx: Context) -> list[Finding]:
    out = []
    nodes = nccl_node_versions(ctx)
    best, minority = version_split(nodes)
    warns = ctx.table("events")
    refused = warns.filter(pl.col("error_class") == "version_mismatch") \
        if not warns.is_empty() and "error_class" in warns.columns else warns.clear()
    if minority:
        exact = all(v.exact for v in nodes if v in minority or v is best)
        confidence = 0.9 if exact else 0.75
        if not refused.is_empty():
            confidence = max(confidence, 0.9)
        culprit = best is not None
        majority = [v for v in nodes if v not in minority]
        odd = ", ".join(f"{v.node} runs NCCL {v.text()} (from {_how(v)})" for v in minority)
        if culprit:
            rest = ", ".join(v.node for v in majority)
            message = (f"{odd}, while {rest} run{'s' if len(majority) == 1 else ''} {best.text()}"
                       f"{_job_line(ctx)}. {CONSEQUENCE}")
            title = f"{', '.join(v.node for v in minority)} run{'s' if len(minority) == 1 else ''} another NCCL release"
        else:
            message = (f"{odd}: no release is held by a majority of the nodes, so which node is wrong is not "
                       f"decided{_job_line(ctx)}. {CONSEQUENCE}")
            title = "the nodes run different NCCL releases"
        evidence = []
        for v in (minority + ([best] if best is not None else []))[:3]:
            evidence += [ctx.evidence(i, n, note=what) for i, n, what in v.refs[:2]]
        evidence += [ctx.evidence(r["input_id"], r["line_no"], note="NCCL refused the mixed releases")
                     for r in refused.head(1).iter_rows(named=True)]
        names = [v.node for v in minority]
        hint, refs = _library_path_hint(ctx, names)
        message = message.replace(f". {CONSEQUENCE}", f"{hint}. {CONSEQUENCE}")
        evidence += [ctx.evidence(i, n, note=note) for i, n, note in refs]
        out.append(RULE.finding(confidence=confidence, title=title, message=message,
            ranks=ranks_on(ctx, names) if culprit else [], nodes=names, evidence=evidence[:6],
            suggestion=_suggestion(names, culprit),
            culprit=culprit,
            details={"versions": {v.node: v.text() for v in nodes}, "minority": names, "drain": False,
                     "from_line_shapes": not exact}))
    elif not refused.is_empty():
        _refused(ctx, refused, out)
    return out


def _library_path_hint(ctx: Context, names: list[str]) -> tuple[str, list[tuple[int, int, str]]]:
    """Where a minority node's env dump loads libraries from elsewhere (LD_LIBRARY_PATH, LD_PRELOAD)."""
    env = ctx.table("env_nodes")
    if env.is_empty():
        return "", []
    env = env.filter(pl.col("key").is_in(["LD_LIBRARY_PATH", "LD_PRELOAD"]) & (pl.col("basis") == "env dump"))
    texts, refs = [], []
    for key in ("LD_LIBRARY_PATH", "LD_PRELOAD"):
        rows = {r["node"]: r for r in env.filter(pl.col("key") == key).iter_rows(named=True)}
        others = {r["value"] for node, r in rows.items() if node not in names}
        for node in names:
            row = rows.get(node)
            if row and others and row["value"] not in others:
                texts.append(f"{node}'s env dump has {key}={row['value']} (the others: {' | '.join(sorted(others))})")
                refs.append((row["input_id"], row["line_no"], f"{key} on {node} differs from the other nodes'"))
    return ("; " + "; ".join(texts) if texts else ""), refs[:2]


def _suggestion(names: list[str], culprit: bool) -> str:
    text = (f"Run one NCCL build on every node: on {', '.join(names)} check which libnccl.so.2 the ranks "
            "load (LD_LIBRARY_PATH, ldconfig -p | grep nccl, python -c \"import torch; "
            "print(torch.cuda.nccl.version())\") and the container image / Python environment")
    if culprit:
        text += f"; exclude {'it' if len(names) == 1 else 'them'} (sbatch --exclude={','.join(names)}) until it matches"
    return text + "."


def _refused(ctx: Context, refused: pl.DataFrame, out: list[Finding]) -> None:
    r = refused.row(0, named=True)
    out.append(RULE.finding(confidence=0.85, title="NCCL refused to mix releases",
        message=f"NCCL reported: {r.get('message') or r.get('detail')}. {CONSEQUENCE}",
        nodes=sorted(set(refused["node"].drop_nulls().to_list())) if "node" in refused.columns else [],
        evidence=[ctx.evidence(r["input_id"], r["line_no"], note="NCCL's version check (2.23+)")],
        suggestion="Run one NCCL build on every node; the ranks named in the warning are communicator ranks: "
                   "their hosts' NCCL lines show which release each runs.",
        culprit=False, details={"drain": False}))
