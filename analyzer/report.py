"""The report: one dict (the ``postmortem.report/1`` JSON contract) and its text/Markdown views.

``build_report`` runs the rules on each attempt, leads with the latest failed attempt, and
adds what a responder needs: the verdict, actions (drain hostlist, GPU, GPU-hours lost,
py-spy commands for a job that may still hang), evidence gaps, the run summary and input
accounting. ``docs/report.md`` documents every field.
"""

from __future__ import annotations

import json
from datetime import datetime

import polars as pl

from analyzer.pipeline import Run
from analyzer.ranges import hostlist, rank_ranges

SCHEMA = "postmortem.report/1"
VERSION = "0.1.0"


def run_rules(run: Run, attempt: int | None):
    from rules import RULES
    from rules.base import SEVERITY_ORDER, Context

    ctx = Context(run, attempt)
    findings = []
    for rule in RULES:
        findings.extend(rule.check(ctx))
    for f in findings:
        f.attempt = attempt
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], not f.culprit, f.code, f.ranks, f.title))
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.code] = counts.get(f.code, 0) + 1
        f.id = f"a{attempt if attempt is not None else 0}-{f.code}-{counts[f.code]}"
    causes = [f.id for f in findings if f.category in ("hang", "desync") and f.severity == "error"]
    for f in findings:
        if f.category == "symptom":
            f.caused_by = causes
    return ctx, findings


def build_report(run: Run) -> dict:
    attempts = run.info.get("attempts") or [0]
    per_attempt = {a: run_rules(run, a) for a in attempts}
    failed = [a for a in attempts if any(f.severity in ("error", "warning") for f in per_attempt[a][1])]
    analysed = failed[-1] if failed else attempts[-1]
    ctx, findings = per_attempt[analysed]
    report = {
        "schema": SCHEMA,
        "generator": f"postmortem {VERSION}",
        "verdict": _verdict(findings),
        "actions": _actions(ctx, findings),
        "findings": [f.to_dict() for f in findings],
        "missing_evidence": _missing(ctx, findings),
        "attempts": {
            "analysed": analysed,
            "all": [{"attempt": a, "findings": len(per_attempt[a][1]),
                     "errors": sum(f.severity == "error" for f in per_attempt[a][1]),
                     "verdict": _verdict(per_attempt[a][1])["sentence"]} for a in attempts],
        },
        "run": _run_summary(run, ctx),
        "inputs": _inputs(run),
        "messages": run.messages,
        "timings": run.timings,
    }
    store_findings(run, [f for a in attempts for f in per_attempt[a][1]])
    return report


def store_findings(run: Run, findings) -> None:
    """The rules' output as the ``findings`` table (evidence and details as JSON text)."""
    from analyzer.store import write_table

    rows = [{"id": f.id, "attempt": f.attempt, "code": f.code, "name": f.name, "severity": f.severity,
             "confidence": round(f.confidence, 2), "title": f.title, "message": f.message, "ranks": f.ranks,
             "nodes": f.nodes, "culprit": f.culprit, "category": f.category, "caused_by": f.caused_by,
             "suggestion": f.suggestion,
             "evidence": json.dumps([e.__dict__ for e in f.evidence], default=str),
             "details": json.dumps(f.details, default=str)} for f in findings]
    schema = {"id": pl.String, "attempt": pl.Int64, "code": pl.String, "name": pl.String, "severity": pl.String,
              "confidence": pl.Float64, "title": pl.String, "message": pl.String, "ranks": pl.List(pl.Int64),
              "nodes": pl.List(pl.String), "culprit": pl.Boolean, "category": pl.String,
              "caused_by": pl.List(pl.String), "suggestion": pl.String, "evidence": pl.String, "details": pl.String}
    write_table(run.con, "findings", pl.DataFrame(rows, schema=schema))


def _verdict(findings) -> dict:
    causes = [f for f in findings if f.culprit and f.severity == "error"]
    stuck = [f for f in findings if f.code == "H003"]
    undecided = [f for f in findings if f.code == "H005"]
    errors = [f for f in findings if f.severity == "error"]
    if causes:
        top = causes[0]
        gpus = top.gpus
        where = ", ".join(
            (g.get("node") or "?") + (f" GPU {g['cuda_dev']}" if g.get("cuda_dev") is not None else "")
            + (f" ({g['bus_id']})" if g.get("bus_id") else "") for g in gpus[:3])
        sentence = f"{top.title}: rank {rank_ranges(top.ranks)} on {where}. {top.message}."
        return {"status": "culprit", "category": top.category, "confidence": round(top.confidence, 2),
                "sentence": sentence, "culprit": {"ranks": top.ranks, "nodes": top.nodes, "gpus": gpus},
                "finding_ids": [f.id for f in causes], "competing": []}
    if stuck:
        top = stuck[0]
        return {"status": "no-single-culprit", "category": "hang", "confidence": round(top.confidence, 2),
                "sentence": f"{top.title}; no single rank is to blame. {top.message}.",
                "culprit": {"ranks": [], "nodes": [], "gpus": []}, "finding_ids": [top.id],
                "competing": ["network or GPU fault on the path", "NCCL/environment mismatch between nodes"]}
    if undecided:
        top = undecided[0]
        return {"status": "inconclusive", "category": "hang", "confidence": round(top.confidence, 2),
                "sentence": f"Inconclusive: {top.title}. {top.message}.",
                "culprit": {"ranks": [], "nodes": [], "gpus": []}, "finding_ids": [top.id],
                "competing": [f"rank {r} (not trustworthy: see reasons)" for r in top.details.get("candidates", [])]}
    if errors:
        top = errors[0]
        return {"status": "inconclusive", "category": top.category, "confidence": round(top.confidence, 2),
                "sentence": f"{top.title}. {top.message}.", "culprit": {"ranks": [], "nodes": [], "gpus": []},
                "finding_ids": [f.id for f in errors], "competing": []}
    return {"status": "healthy", "category": "none", "confidence": 0.8,
            "sentence": "No error finding: nothing in these logs shows a hang, desync or crash.",
            "culprit": {"ranks": [], "nodes": [], "gpus": []}, "finding_ids": [], "competing": []}


def _actions(ctx, findings) -> dict:
    causes = [f for f in findings if f.culprit and f.severity == "error"]
    ranks = sorted({r for f in causes for r in f.ranks})
    nodes = sorted({n for f in causes for n in f.nodes})
    gpus = [g for f in causes for g in f.gpus]
    still_hanging = not _ended(ctx)
    pyspy = []
    for g in gpus:
        if g.get("pid") and g.get("node"):
            pyspy.append({"host": g["node"], "pid": g["pid"], "rank": g["rank"],
                          "command": f"ssh {g['node']} py-spy dump --pid {g['pid']}"})
    return {
        "culprit_ranks": rank_ranges(ranks) if ranks else None,
        "inspect_hostlist": hostlist(nodes) if nodes else None,
        "gpus": gpus,
        "gpu_hours_lost": _gpu_hours(ctx),
        "job_may_still_be_hanging": still_hanging,
        "py_spy": pyspy if still_hanging else [],
        "py_spy_note": ("the logs show no exit or cancellation: if the job is still running, dump the culprit's "
                        "stack before it is killed") if still_hanging else None,
        "note": ("a hang caused by a code path is not a hardware fault: inspect, do not drain, unless hardware "
                 "findings point at the node") if causes and all(f.category in ("hang", "desync") for f in causes) else None,
    }


def _ended(ctx) -> bool:
    for name, kinds in (("exits", None), ("slurm", None), ("events", ["teardown", "terminate", "watchdog_exception"])):
        t = ctx.table(name)
        if t.is_empty():
            continue
        if kinds is None or ("kind" in t.columns and t.filter(pl.col("kind").is_in(kinds)).height):
            return True
    return False


def _gpu_hours(ctx) -> dict | None:
    from rules.why_no_timeout import hang_span

    span = hang_span(ctx)
    world = ctx.world_size
    if not span or not world:
        return None
    hours = (span[1] - span[0]).total_seconds() / 3600
    return {"value": round(world * hours, 1), "ranks": world, "hours": round(hours, 2),
            "from": str(span[0]), "to": str(span[1]),
            "basis": "ranks x time from the last training progress line to the last timestamped line"}


def _missing(ctx, findings) -> list[dict]:
    out = []
    world = ctx.world_size
    seen = ctx.logged_ranks()
    if world:
        absent = sorted(set(range(world)) - seen)
        if absent:
            out.append({"what": f"no log lines attributable to rank(s) {rank_ranges(absent)}",
                        "enable": "keep every rank's stdout and stderr (torchrun --log-dir with --tee 3, or srun -o %t)"})
    nccl = ctx.frame("SELECT count(*) AS n FROM lines WHERE kind = 'nccl'")["n"][0]
    if nccl == 0:
        out.append({"what": "no NCCL_DEBUG output (rank to GPU and host mapping, versions, transports)",
                    "enable": "NCCL_DEBUG=INFO (NCCL_DEBUG_FILE=/path/nccl.%h.%p.log to keep it out of stdout)"})
    hang = any(f.category in ("hang", "desync") for f in findings)
    if hang:
        out.append({"what": "no Flight Recorder dumps were read",
                    "enable": "TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 "
                              "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/shared/fr/nccl_trace_rank_"})
    stacks = ctx.frame("SELECT count(*) AS n FROM stacks")["n"][0]
    if hang and stacks == 0:
        out.append({"what": "no py-spy dumps of the hung ranks",
                    "enable": "while it hangs: on each node, pgrep -f train | xargs -I{} py-spy dump --pid {}"})
    prefixed = ctx.frame("SELECT count(*) AS n FROM lines WHERE rank_tag IS NOT NULL")["n"][0]
    if prefixed == 0 and hang:
        out.append({"what": "no c10d [rankN]: prefix on any line (global rank of each line is not stated)",
                    "enable": "PyTorch >= 2.3 prints it; or use a torchrun --log-line-prefix-template with ${rank}"})
    return out


def _run_summary(run: Run, ctx) -> dict:
    ranks = ctx.ranks
    versions = run.frame("SELECT DISTINCT version FROM nccl_versions ORDER BY 1")["version"].to_list() \
        if run.columns("nccl_versions") else []
    spans = []
    for name in ("iterations", "events", "collectives", "exits", "slurm"):
        for c in ("ts", "time"):
            if c in run.columns(name):
                row = run.con.execute(f'SELECT min("{c}"), max("{c}") FROM "{name}"').fetchall()[0]
                spans += [v for v in row if v is not None]
    return {
        "ranks": run.info.get("world_size"),
        "ranks_seen": len(ranks),
        "nodes": sorted(set(ranks["node"].drop_nulls().to_list())),
        "gpu_model": None,
        "nccl_versions": versions,
        "time_span": {"start": str(min(spans)) if spans else None, "end": str(max(spans)) if spans else None,
                      "source": run.info.get("time_source"),
                      "zone": "as printed (glog and Megatron print local time without a zone)"},
        "rank_mapping": ranks.group_by("confidence").len().sort("confidence").to_dicts(),
    }


def _inputs(run: Run) -> dict:
    rows = run.frame("SELECT path, kind, lines, parsed_lines, unparsed_lines, problem FROM inputs ORDER BY path")
    return {"files": rows.to_dicts(),
            "totals": {"files": len(rows), "skipped": int((rows["kind"] == "skipped").sum()),
                       "lines": int(rows["lines"].sum()), "parsed_lines": int(rows["parsed_lines"].sum()),
                       "unparsed_lines": int(rows["unparsed_lines"].sum())},
            **_nccl_coverage(run)}


def _nccl_coverage(run: Run) -> dict:
    """How many NCCL lines landed in a typed table, and the shapes of those that did not (digits
    and hex folded), each with one example line, so parser gaps are visible, not silent."""
    if not run.columns("nccl_lines"):
        return {"nccl_lines": {"total": 0, "typed": 0, "untyped": 0}, "nccl_gaps": []}
    totals = run.frame("SELECT count(*) AS total, count(kind) AS typed FROM nccl_lines").row(0, named=True)
    gaps = run.frame(
        "SELECT regexp_replace(regexp_replace(coalesce(l.text, ''), '0x[0-9a-fA-F]+', '0xX', 'g'), '[0-9]+', 'N', 'g') "
        "AS shape, count(*) AS count, min(i.path || ':' || n.line_no) AS example "
        "FROM nccl_lines n JOIN lines l USING (input_id, line_no) JOIN inputs i USING (input_id) "
        "WHERE n.kind IS NULL GROUP BY 1 ORDER BY count DESC, shape LIMIT 50")
    gaps = gaps.with_columns(pl.col("shape").str.slice(0, 160))
    return {"nccl_lines": {"total": totals["total"], "typed": totals["typed"],
                           "untyped": totals["total"] - totals["typed"]},
            "nccl_gaps": gaps.to_dicts()}


def to_json(report: dict) -> str:
    return json.dumps(report, indent=2, default=_default, sort_keys=False) + "\n"


def _default(value):
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)
