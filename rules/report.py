"""The report: one dict (the ``postmortem.report/1`` JSON contract) and its text/Markdown views.

``build_report`` runs the rules on each attempt, leads with the latest failed attempt, and
adds what a responder needs: the verdict, actions (drain hostlist, GPU, GPU-hours lost,
py-spy commands for a job that may still hang), evidence gaps, the run summary and input
accounting. ``docs/report.md`` documents every field.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime

import duckdb
import polars as pl

from postmortem.analyzer import commands
from postmortem.analyzer.gc_passes import fewer_passes
from postmortem.analyzer.pipeline import Run
from postmortem.analyzer.ranges import hostlist, rank_ranges
from postmortem.analyzer.timeline import log_bounds
from postmortem.rules.base import Options
from postmortem.rules.declare import Category

SCHEMA = "postmortem.report/1"
VERSION = "0.1.0"


# How deep a cause lies is its category's ``layer`` (postmortem.rules.declare.Category). Findings
# with no rank and no node of these categories (everyone stuck alike, the waiting ranks' timeouts)
# are explained by any deeper culprit.
_JOB_WIDE = (Category.CRASH, Category.HANG, Category.DESYNC, Category.SYMPTOM, Category.OUTCOME)


def run_rules(run: Run, attempt: int | None, options: Options | None = None):
    from postmortem.rules import RULES
    from postmortem.rules.base import Context

    ctx = Context(run, attempt, options)
    findings = []
    ctx.findings = findings   # what the rules before it found (a LATE rule defers to them)
    # Late rules (N020: every error NCCL stated that no other rule explained) run after the
    # others; fallback rules (X000) run last and speak only when no other rule found an error.
    late = lambda r: getattr(r, "LATE", False)  # noqa: E731
    fallback = lambda r: getattr(r, "FALLBACK", False)  # noqa: E731
    ordered = ([r for r in RULES if not late(r) and not fallback(r)] + [r for r in RULES if late(r)]
               + [r for r in RULES if fallback(r) and not late(r)])
    for rule in ordered:
        if getattr(rule, "FALLBACK", False) and any(_explains_failure(f) for f in findings):
            continue
        try:
            findings.extend(rule.check(ctx))
        except Exception as exc:  # noqa: BLE001 -- one rule's bug costs only its own findings
            ctx.rule_errors.append(rule_error(rule, exc, attempt))
    for f in findings:
        f.attempt = attempt
    findings.sort(key=lambda f: (f.severity.rank, not f.culprit, _layer(f), f.code, f.ranks, f.title))
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.code] = counts.get(f.code, 0) + 1
        f.id = f"a{attempt if attempt is not None else 0}-{f.code}-{counts[f.code]}"
    link_causes(findings)
    return ctx, findings


def _explains_failure(f) -> bool:
    """An error, or a warning that names why a job ended (a teardown hang after the last step)."""
    return f.severity == "error" or (f.severity == "warning" and f.category in ("hang", "desync", "crash"))


def rule_error(rule, exc: BaseException, attempt: int | None) -> dict:
    """A rule that raised, as the report lists it (``rule_errors``): which rule, the exception,
    where it was raised, and that its findings are missing. Also said on stderr, once."""
    import sys
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else None
    code = rule.RULE.code
    error = {"rule": code, "name": rule.RULE.name, "attempt": attempt,
             "exception": type(exc).__name__, "message": str(exc)[:500], "where": where,
             "effect": f"{code}'s findings are missing from this report; the other rules and the verdict stand"}
    print(f"postmortem: internal error: rule {code} failed ({error['exception']}: {error['message'][:200]}"
          f"{' at ' + where if where else ''}); its findings are missing", file=sys.stderr)
    return error


def _layer(finding) -> int:
    return finding.category.layer


def link_causes(findings) -> None:
    """Fill ``caused_by``: each culprit error finding explains the findings of later layers that
    share a rank or node with it, and the job-wide ones (no rank, no node)."""
    causes = [f for f in findings if f.culprit and f.severity == "error"]
    for f in findings:
        if f.severity == "info":
            continue  # context, not a consequence
        for cause in causes:
            if cause is f or _layer(cause) >= _layer(f) or cause.id in f.caused_by:
                continue
            shared = set(cause.ranks) & set(f.ranks) or set(cause.nodes) & set(f.nodes)
            job_wide = not f.ranks and not f.nodes and f.category in _JOB_WIDE
            if shared or job_wide:
                f.caused_by.append(cause.id)
    # With no culprit (everyone stuck alike), the waiting ranks' timeouts still belong to the hang.
    hangs = [f.id for f in findings if f.category in ("hang", "desync") and f.severity == "error"]
    for f in findings:
        if f.category == "symptom" and not f.caused_by:
            f.caused_by.extend(hangs)


def root_causes(findings) -> list:
    """Culprit error findings that no deeper culprit explains, deepest and surest first."""
    by_id = {f.id: f for f in findings}
    roots = [f for f in findings if f.culprit and f.severity == "error"
             and not any(by_id[c].culprit and by_id[c].severity == "error" for c in f.caused_by if c in by_id)]
    return sorted(roots, key=lambda f: (_layer(f), -f.confidence, f.code))


@fewer_passes
def build_report(run: Run, options: Options | None = None) -> dict:
    """The report of ``run``; its ``findings`` and ``report`` tables are written to the store.
    On a store from the cache, a report the same rules made with the same options is reused
    (``postmortem.analyzer.cache.load_report``)."""
    from postmortem.analyzer import cache

    options = options or Options()
    key = cache.report_key(run.cache_key, run.info, asdict(options)) if run.cache_key else None
    cached = cache.load_report(key, run.con) if key else None
    if cached is not None:
        cached["timings"] = {**run.timings, "report": "cached"}
        store_report(run, cached)
        return cached
    report = _fresh_report(run, options)
    if key and not report["rule_errors"]:  # a partial report is not worth keeping: rerun the rules
        cache.save_report(key, run.con, report)
    return report


def _fresh_report(run: Run, options: Options) -> dict:
    # The rules create and alter no table: while they run, each table's columns are asked once.
    with run.schema_frozen():
        report, findings = _report_of_rules(run, options)
    store_findings(run, findings)
    store_report(run, report)
    return report


def _report_of_rules(run: Run, options: Options) -> tuple[dict, list]:
    attempts = run.info.get("attempts") or [0]
    per_attempt = {a: run_rules(run, a, options) for a in attempts}
    verdicts = {a: _verdict(per_attempt[a][1], per_attempt[a][0].outcome) for a in attempts}
    analysed = _analysed_attempt(attempts, per_attempt, verdicts)
    ctx, findings = per_attempt[analysed]
    verdict = verdicts[analysed]
    outcome = _outcome(run, per_attempt)
    last = attempts[-1]
    if analysed != last:
        if outcome.get("recovered"):
            lead = f"The job recovered: attempt {last} completed after attempt {analysed} failed."
        else:
            lead = (f"The job {outcome['outcome']} in attempt {last} "
                    f"({_first_clause(verdicts[last]['sentence'])}) after a restart; the cause is in attempt {analysed}.")
        verdict = {**verdict, "sentence": f"{lead} Attempt {analysed}: {verdict['sentence']}"}
    report = {
        "schema": SCHEMA,
        "generator": f"postmortem {VERSION}",
        "outcome": outcome,
        "verdict": verdict,
        "actions": _actions(ctx, findings, verdict),
        "findings": [f.to_dict() for f in findings],
        "missing_evidence": _missing(ctx, findings),
        "attempts": {
            "analysed": analysed,
            "all": [{"attempt": a, "findings": len(per_attempt[a][1]),
                     "errors": sum(f.severity == "error" for f in per_attempt[a][1]),
                     "outcome": per_attempt[a][0].outcome["outcome"], "last_step": _last_step(per_attempt[a][0]),
                     "verdict": verdicts[a]["sentence"]} for a in attempts],
        },
        "run": _run_summary(run, ctx),
        "inputs": _inputs(run),
        "messages": run.messages,
        "rule_errors": [e for a in attempts for e in per_attempt[a][0].rule_errors],
        "timings": run.timings,
    }
    return report, [f for a in attempts for f in per_attempt[a][1]]


def _analysed_attempt(attempts: list, per_attempt: dict, verdicts: dict):
    """The attempt the report leads with: the latest that failed with a cause named; else the
    latest failed one; else the last. A restart that fails at once (every rank's reconnect times
    out, no rule names a cause) is the consequence of the attempt before it, not a new cause."""
    failed = [a for a in attempts if any(f.severity in ("error", "warning") for f in per_attempt[a][1])]
    explained = [a for a in failed if verdicts[a]["status"] not in ("undetermined", "unknown")]
    return explained[-1] if explained else failed[-1] if failed else attempts[-1]


def _first_clause(sentence: str) -> str:
    return sentence.split(". ")[0].split(": ")[0].rstrip(".")


def _outcome(run: Run, per_attempt: dict) -> dict:
    """What happened to the job, from the evidence alone (``postmortem.analyzer.outcome``): the last
    attempt's outcome and its basis, each sign with its line. With several attempts (torchrun
    restarts), ``recovered`` says whether an attempt failed and a later one completed."""
    paths = dict(run.frame("SELECT input_id, path FROM inputs").iter_rows())
    last_attempt = list(per_attempt)[-1]
    ctx = per_attempt[last_attempt][0]
    this = ctx.outcome
    basis = [{"what": b["what"], "path": paths.get(b["input_id"]), "line": b["line_no"], "rank": b["rank"],
              "node": b["node"], "time": str(b["ts"]) if b["ts"] else None} for b in this["basis"]]
    out = {"outcome": this["outcome"], "attempt": last_attempt, "basis": basis, "failed_ranks": this["failed_ranks"],
           "ended_by": this.get("ended_by")}
    if len(per_attempt) > 1:
        earlier = [c.outcome["outcome"] for c, _ in list(per_attempt.values())[:-1]]
        out["recovered"] = this["outcome"] == "completed" and any(o in ("failed", "hung") for o in earlier)
    return out


def _last_step(ctx) -> int | None:
    it = ctx.table("iterations")
    if it.is_empty() or "iteration" not in it.columns:
        return None
    return it["iteration"].max()


def store_report(run: Run, report: dict) -> None:
    """The whole report as one JSON row (table ``report``), so ``postmortem.tui --db`` and other tools can
    show the verdict and actions of a store without running the rules again."""
    from postmortem.analyzer.store import write_table

    write_table(run.con, "report", pl.DataFrame({"schema": [SCHEMA], "json": [to_json(report)]}))


def stored_report(con) -> dict | None:
    """The report a store was written with (``store_report``), or None for a store without one."""
    try:
        # fetchall, not fetchone: an unfinished result would block the connection's next query
        rows = con.execute("SELECT json FROM report WHERE schema = ? LIMIT 1", [SCHEMA]).fetchall()
    except duckdb.CatalogException:  # no report table: a store written before it existed
        return None
    return json.loads(rows[0][0]) if rows else None


def store_findings(run: Run, findings) -> None:
    """The rules' output as the ``findings`` table (evidence and details as JSON text)."""
    from postmortem.analyzer.store import write_table

    rows = [{"id": f.id, "attempt": f.attempt, "code": f.code, "name": f.name, "severity": str(f.severity),
             "confidence": round(f.confidence, 2), "title": f.title, "message": f.message, "ranks": f.ranks,
             "nodes": f.nodes, "culprit": f.culprit, "category": str(f.category), "caused_by": f.caused_by,
             "suggestion": f.suggestion,
             "evidence": json.dumps([e.__dict__ for e in f.evidence], default=str),
             "details": json.dumps(f.details, default=str)} for f in findings]
    schema = {"id": pl.String, "attempt": pl.Int64, "code": pl.String, "name": pl.String, "severity": pl.String,
              "confidence": pl.Float64, "title": pl.String, "message": pl.String, "ranks": pl.List(pl.Int64),
              "nodes": pl.List(pl.String), "culprit": pl.Boolean, "category": pl.String,
              "caused_by": pl.List(pl.String), "suggestion": pl.String, "evidence": pl.String, "details": pl.String}
    write_table(run.con, "findings", pl.DataFrame(rows, schema=schema))


_NOBODY = {"ranks": [], "nodes": [], "gpus": []}
_DRAIN_CATEGORIES = ("hardware", "network")


def _verdict(findings, outcome: dict | None = None) -> dict:
    outcome = outcome or {"outcome": "unknown", "progress": True, "basis": []}
    roots = root_causes(findings)
    if roots:
        return _culprit_verdict(roots)
    stuck = [f for f in findings if f.code == "H003"]
    undecided = [f for f in findings if f.code == "H005"]
    errors = [f for f in findings if f.severity == "error"]
    warnings = [f for f in findings if f.severity == "warning" and f.category not in ("symptom", "info")]
    # A deeper-layer error that could not choose between places (two ends of one failing link):
    # it explains an all-stuck hang better than "no single culprit", but names nobody.
    torn = [f for f in errors if not f.culprit and f.details.get("competing") and _layer(f) < Category.CRASH.layer]
    if torn:
        top = max(torn, key=lambda f: f.confidence)
        competing = [f"{top.code} points at {c}" for c in top.details["competing"]]
        return _verdict_of("inconclusive", top, _sentence(f"Inconclusive: {top.title}", top.message),
                           [f.id for f in torn], competing)
    if stuck:
        top = stuck[0]
        return _verdict_of("no-single-culprit", top, _sentence(f"{top.title}; no single rank is to blame", top.message),
                           [top.id], ["network or GPU fault on the path", "NCCL/environment mismatch between nodes"])
    if undecided:
        top = undecided[0]
        return _verdict_of("inconclusive", top, _sentence(f"Inconclusive: {top.title}", top.message), [top.id],
                           [f"rank {r} (not trustworthy: see reasons)" for r in top.details.get("candidates", [])])
    if errors and all(f.category == "outcome" for f in errors):
        top = errors[0]
        sentence = _sentence(f"{top.details['outcome'].capitalize()}, cause not determined: {top.message}")
        return _verdict_of("undetermined", top, sentence, [top.id], [])
    if errors:
        top = next(f for f in errors if f.category != "outcome")
        return _verdict_of("inconclusive", top, _sentence(top.title, top.message), [f.id for f in errors], [])
    if warnings:
        top = warnings[0]
        named = _culprit_of([top]) if top.culprit else _NOBODY
        return _verdict_of("degraded", top, _sentence(f"The job shows no failure, but: {top.title}", top.message),
                           [f.id for f in warnings], [], named)
    if outcome["outcome"] == "unknown" and not outcome.get("progress"):
        return {"status": "unknown", "category": "none", "confidence": 0.5,
                "sentence": _sentence("No failure is in these logs, but no training step and no end (launcher, "
                                      "scheduler) are either", "if the job stopped here, it stopped during start-up: "
                                      "compare with a run that trained, or collect the whole job folder"),
                "culprit": dict(_NOBODY), "finding_ids": [], "competing": []}
    if outcome["outcome"] == "completed":
        known = f"the job completed ({outcome['basis'][0]['what']})"
    else:
        known = "whether the job completed is not known: no end (launcher, scheduler or last step) is recorded"
    return {"status": "healthy", "category": "none", "confidence": 0.8,
            "sentence": _sentence("No error finding: nothing in these logs shows a failure, hang, desync or crash",
                                  known),
            "culprit": dict(_NOBODY), "finding_ids": [], "competing": []}


def _culprit_verdict(roots) -> dict:
    """The deepest root names the culprit, unless an independent root (another rule, other ranks
    and nodes) is nearly as sure: then the verdict is inconclusive and lists both."""
    top = roots[0]
    same = [r for r in roots if r.code == top.code]
    rivals = [r for r in roots if r.code != top.code and not _overlap(r, top)]
    if rivals and max(r.confidence for r in rivals) > top.confidence - 0.2:
        competing = [_explanation(r) for r in [top, *rivals]]
        sentence = "Inconclusive: independent causes compete: " + "; ".join(competing) + "."
        return _verdict_of("inconclusive", top, sentence, [r.id for r in [top, *rivals]], competing)
    culprit = _culprit_of(same)
    where = _where(top)
    if any(node in top.title for node in top.nodes):
        where = ""  # the title already says where
    head = f"{top.title}: {where}" if where else top.title
    # Some messages restate the title before adding to it: say it once.
    sentence = _sentence(top.message) if top.message.startswith(top.title) else _sentence(head, top.message)
    return _verdict_of("culprit", top, sentence, [r.id for r in same], [_explanation(r) for r in rivals], culprit)


def _sentence(*parts: str) -> str:
    """Parts joined as sentences, each ending in exactly one full stop."""
    parts = [p.strip().rstrip(".") for p in parts if p and p.strip()]
    return " ".join(p[0].upper() + p[1:] + "." for p in parts)


def _verdict_of(status, top, sentence, ids, competing, culprit=None) -> dict:
    return {"status": status, "category": str(top.category), "confidence": round(top.confidence, 2),
            "sentence": sentence, "culprit": culprit or dict(_NOBODY), "finding_ids": ids, "competing": competing}


def _culprit_of(findings) -> dict:
    ranks = sorted({r for f in findings for r in f.ranks})
    nodes = sorted({n for f in findings for n in f.nodes})
    return {"ranks": ranks, "nodes": nodes, "gpus": _unique_gpus(findings)}


def _unique_gpus(findings) -> list[dict]:
    """The GPUs the findings name, each once (two findings often name the same rank's GPU)."""
    seen, out = set(), []
    for g in (g for f in findings for g in f.gpus):
        key = (g.get("rank"), g.get("node"), g.get("cuda_dev"), g.get("bus_id"))
        if key not in seen:
            seen.add(key)
            out.append(g)
    return out


def _overlap(a, b) -> bool:
    return bool(set(a.ranks) & set(b.ranks) or set(a.nodes) & set(b.nodes))


def _where(f) -> str:
    if f.gpus:
        places = ", ".join(
            (g.get("node") or "an unknown node") + (f" GPU {g['cuda_dev']}" if g.get("cuda_dev") is not None else "")
            + (f" ({g['bus_id']})" if g.get("bus_id") else "") for g in f.gpus[:3])
        return (f"rank {rank_ranges(f.ranks)} on {places}" if f.ranks else places)
    if f.ranks:
        return f"rank {rank_ranges(f.ranks)}" + (f" on {hostlist(f.nodes)}" if f.nodes else "")
    return f"node {hostlist(f.nodes)}" if f.nodes else ""


def _explanation(f) -> str:
    where = _where(f)
    return f"{f.code} {f.title} ({where + ', ' if where else ''}confidence {f.confidence:.2f})"


def _actions(ctx, findings, verdict: dict) -> dict:
    roots = root_causes(findings)
    named = [f for f in roots if f.id in verdict["finding_ids"]] if verdict["status"] == "culprit" else []
    ranks = sorted({r for f in roots for r in f.ranks})
    nodes = sorted({n for f in roots for n in f.nodes})
    gpus = _unique_gpus(roots)
    drain = sorted({n for f in named if f.details.get("drain", f.category in _DRAIN_CATEGORIES)
                    and f.confidence >= 0.7 for n in f.nodes})
    # Host lists and commands are pasted into scontrol, sbatch and ssh: only names of a host's
    # shape go in (postmortem.analyzer.commands); the others are named in the note, escaped.
    nodes, odd = commands.hosts(nodes)
    drain, odd_drain = commands.hosts(drain)
    still_hanging = not _ended(ctx)
    pyspy = []
    for g in gpus:
        host, pid = commands.host(g.get("node")), commands.number(g.get("pid"))
        if host and pid:
            pyspy.append({"host": host, "pid": pid, "rank": g.get("rank"),
                          "command": commands.sh("ssh", host, "py-spy", "dump", "--pid", pid)})
    odd = sorted(set(odd) | set(odd_drain))
    note = ("a hang caused by a code path is not a hardware fault: inspect, do not drain, unless hardware "
            "findings point at the node") if roots and all(f.category in ("hang", "desync") for f in roots) else None
    if odd:
        said = "; ".join(repr(n)[1:-1] for n in odd[:3])
        note = (f"{note}; " if note else "") + f"node name(s) {said} {commands.NOT_A_HOST}"
    return {
        "culprit_ranks": rank_ranges(ranks) if ranks else None,
        "inspect_hostlist": hostlist(nodes) if nodes else None,
        "drain_hostlist": hostlist(drain) if drain else None,
        "drain_reason": "; ".join(f.title for f in named if set(f.nodes) & set(drain)) or None,
        "gpus": gpus,
        "rma_gpus": _rma(named),
        "gpu_hours_lost": _gpu_hours(ctx),
        "checkpoint": _checkpoint(ctx),
        "job_may_still_be_hanging": still_hanging,
        "py_spy": pyspy if still_hanging else [],
        "py_spy_note": ("the logs show no exit or cancellation: if the job is still running, dump the culprit's "
                        "stack before it is killed") if still_hanging and pyspy else None,
        "note": note,
    }


def _rma(named) -> list[dict]:
    """GPUs a hardware culprit names, with what an RMA ticket asks for."""
    out = []
    for f in named:
        if f.category != "hardware":
            continue
        for g in f.gpus:
            out.append({"node": g.get("node"), "cuda_dev": g.get("cuda_dev"), "bus_id": g.get("bus_id"),
                        "serial": g.get("serial"), "uuid": g.get("uuid"), "rank": g.get("rank"),
                        "reason": f.title, "finding": f.id})
    return out


def _checkpoint(ctx) -> dict | None:
    """The last checkpoint the logs show saved completely, and whether a later save never finished."""
    events = ctx.table("events")
    if events.is_empty() or not {"kind", "iteration", "finished"} <= set(events.columns):
        return None
    saves = events.filter(pl.col("kind").is_in(["checkpoint_save_start", "checkpoint_save_done"])
                          & pl.col("iteration").is_not_null())
    if saves.is_empty():
        return None
    done = saves.filter((pl.col("kind") == "checkpoint_save_done") | pl.col("finished").fill_null(False))
    started = saves.filter(pl.col("kind") == "checkpoint_save_start")
    last_done = done.sort("iteration").tail(1).row(0, named=True) if not done.is_empty() else None
    last_started = started.sort("iteration").tail(1).row(0, named=True) if not started.is_empty() else None
    unfinished = (last_started is not None and last_started.get("finished") is False
                  and (last_done is None or last_started["iteration"] > last_done["iteration"]))
    return {
        "last_complete_iteration": last_done["iteration"] if last_done else None,
        "last_complete_path": last_done.get("path") if last_done else None,
        "saved_at": str(last_done["ts"]) if last_done and last_done.get("ts") else None,
        "unfinished_save_iteration": last_started["iteration"] if unfinished else None,
        "warning": (f"the save of iteration {last_started['iteration']} started but never finished: do not resume "
                    "from it") if unfinished else None,
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
    from postmortem.rules.hang.why_no_timeout import hang_span

    from postmortem.rules.evidence_model import uses_gpus

    world = ctx.world_size
    if not world:
        return None
    span = hang_span(ctx)
    if not span or not uses_gpus(ctx):
        return None
    hours = (span[1] - span[0]).total_seconds() / 3600
    if round(world * hours, 1) == 0:   # no cost worth a line (a healthy run's last seconds)
        return None
    return {"value": round(world * hours, 1), "ranks": world, "hours": round(hours, 2),
            "from": str(span[0]), "to": str(span[1]),
            "basis": "ranks x time from the last training progress line to the last timestamped line"}


def _missing(ctx, findings) -> list[dict]:
    """What the inputs lack and how to collect it next time; nothing the inputs show is already
    there or already turned on (``postmortem.rules.evidence_model``)."""
    from postmortem.rules import evidence_model

    out = []
    world = ctx.world_size
    seen = ctx.logged_ranks()
    if world:
        absent = sorted(set(range(world)) - seen)
        if absent:
            out.append({"what": f"no log lines attributable to rank(s) {rank_ranges(absent)}",
                        "enable": "keep every rank's stdout and stderr (torchrun --log-dir with --tee 3, "
                                  "or srun -o %t)"})
    cpu_only = evidence_model.cpu_only(ctx)   # a gloo job on CPUs: no NCCL, no GPU to query
    if not evidence_model.has_nccl_output(ctx) and not cpu_only:
        debug = evidence_model.setting(ctx, ("NCCL_DEBUG",))
        if debug and debug.upper() in ("INFO", "TRACE"):
            where = evidence_model.setting(ctx, ("NCCL_DEBUG_FILE",))
            out.append({"what": f"no NCCL_DEBUG output was read, though the environment sets NCCL_DEBUG={debug}",
                        "enable": f"copy the files NCCL_DEBUG_FILE names ({where}) into the job folder" if where else
                        "keep the stdout/stderr of every rank (NCCL prints there)"})
        else:
            out.append({"what": "no NCCL_DEBUG output (rank to GPU and host mapping, versions, transports)",
                        "enable": "NCCL_DEBUG=INFO (NCCL_DEBUG_FILE=/path/nccl.%h.%p.log to keep it out of stdout)"})
    hang = any(f.category in ("hang", "desync") for f in findings)
    gap = evidence_model.flight_recorder_gap(ctx) if hang else None
    if gap:
        out.append(gap)
    if hang and not evidence_model.has_stacks(ctx):
        out.append({"what": "no py-spy dumps of the hung ranks",
                    "enable": "while it hangs: on each node, pgrep -f train | xargs -I{} py-spy dump --pid {}"})
    if hang and not evidence_model.has_rank_prefix(ctx):
        out.append({"what": "no c10d [rankN]: prefix on any line (global rank of each line is not stated)",
                    "enable": "PyTorch >= 2.3 prints it; or use a torchrun --log-line-prefix-template with ${rank}"})
    if any(f.severity == "error" for f in findings):
        out += [gap for table, gap in _NODE_EVIDENCE if ctx.table(table).is_empty()
                and not (cpu_only and table == "gpu_health")]
    return out


# Node-side evidence a failed job should leave, the table that holds it, and how to collect it
# (a Slurm epilog or the job script's trap on exit, per node).
_NODE_EVIDENCE = [
    ("node_events", {"what": "no kernel log from the nodes (GPU Xid, OOM killer, NIC link events cannot be checked)",
                     "enable": "per node after the job: journalctl -k -o short-iso --since '-12h' > "
                               "$JOB_DIR/node_logs/$(hostname)/journal-kernel.txt"}),
    ("job", {"what": "no scheduler record of the job (state, exit code, node list, time limit)",
             "enable": "sacct -j $SLURM_JOB_ID --parsable2 --format=JobID,JobName,State,ExitCode,Start,End,"
                       "NNodes,NodeList > $JOB_DIR/slurm/sacct.txt"}),
    ("env_nodes", {"what": "no environment dump per node (NCCL_*/TORCH_* settings cannot be compared across nodes)",
                   "enable": "in the job script, per node: env | sort > $JOB_DIR/env/$(hostname).env "
                             "(NCCL_DEBUG=INFO also echoes the NCCL_* it reads)"}),
    ("gpu_health", {"what": "no nvidia-smi -q per node (GPU serials, ECC and row-remap counters, PCIe link width)",
                    "enable": "in the prolog and epilog: "
                              "nvidia-smi -q > $JOB_DIR/node_logs/$(hostname)/nvidia-smi-q.txt"}),
]


def _run_summary(run: Run, ctx) -> dict:
    ranks = ctx.ranks
    versions = run.frame("SELECT DISTINCT version FROM nccl_versions ORDER BY 1")["version"].to_list() \
        if run.columns("nccl_versions") else []
    first, last = log_bounds(run)
    return {
        "ranks": run.info.get("world_size"),
        "ranks_source": run.info.get("world_size_source"),
        "ranks_seen": len(ranks),
        "nodes": _nodes(run, ranks),
        "gpu_model": _gpu_model(run, ctx.options.gpu),
        "nccl_versions": versions,
        "time_span": {"start": str(first["ts"]) if first else None, "end": str(last["ts"]) if last else None,
                      "end_basis": _bound_basis(last), "source": run.info.get("time_source"),
                      "zone": "as printed (glog and Megatron print local time without a zone)"},
        "rank_mapping": ranks.group_by("confidence").len().sort("confidence").to_dicts(),
    }


def _bound_basis(bound: dict | None) -> str | None:
    """Where the end of the logs was read: ``the last timestamped line (the torchrun agent, slurm-4242.out:94)``."""
    if not bound:
        return None
    where = f", {bound['path']}:{bound['line']}" if bound.get("path") and bound.get("line") is not None else ""
    return f"the last timestamped line ({bound['what']}{where})"


def _nodes(run: Run, ranks) -> list[str]:
    """The hosts the run names: from the rank mapping, and from NCCL's line prefixes (which name
    every process's host even when no rank mapping could be made)."""
    hosts = set(ranks["node"].drop_nulls().to_list())
    if "host" in run.columns("nccl_processes"):
        hosts |= set(run.frame("SELECT DISTINCT host FROM nccl_processes WHERE host IS NOT NULL")["host"].to_list())
    return sorted(hosts)


def _gpu_model(run: Run, gpu: str | None) -> dict | None:
    """The accelerator of the hardware model the run was judged against, and how it was found."""
    from postmortem.analyzer.transports import accelerator

    acc, basis = accelerator(run, gpu)
    if acc is None:
        return {"name": None, "basis": basis}
    return {"name": acc.get("name"), "id": acc.get("id"), "basis": basis}


def _inputs(run: Run) -> dict:
    rows = run.frame("SELECT path, kind, lines, parsed_lines, unparsed_lines, problem FROM inputs ORDER BY path")
    return {"files": rows.to_dicts(),
            "totals": {"files": len(rows), "skipped": int((rows["kind"] == "skipped").sum()),
                       "empty": int(rows["problem"].fill_null("").str.ends_with(": empty file").sum()),
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
