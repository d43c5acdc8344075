"""Exports of a store (``postmortem export perfetto|parquet``): a Chrome/Perfetto trace of the
last minutes (``postmortem.export.perfetto``) and Parquet in a hive layout
(``postmortem.export.parquet``); here the command line both share."""

from __future__ import annotations

from pathlib import Path

import duckdb

from postmortem.export.common import ExportError
from postmortem.export.parquet import parquet
from postmortem.export.perfetto import dumps, parse_ranks, perfetto


# --- command line ------------------------------------------------------------------------------

def _say(message: str) -> None:
    import sys

    print(f"postmortem: {message}", file=sys.stderr)


def run_cli(args) -> int:
    """``postmortem export perfetto|parquet`` (postmortem.cli builds the arguments)."""
    import sys

    if getattr(args, "export_kind", None) is None:
        args.export_parser.print_help(sys.stderr)
        return 2
    if not Path(args.db).exists():
        _say(f"{args.db}: no such database")
        return 2
    try:
        con = duckdb.connect(args.db, read_only=True)
    except duckdb.Error as exc:
        _say(f"{args.db}: cannot open: {exc}")
        return 2
    messages: list[str] = []
    try:
        if args.export_kind == "perfetto":
            return _cli_perfetto(con, args, messages)
        return _cli_parquet(con, args, messages)
    except ExportError as exc:
        for m in messages:
            _say(m)
        _say(str(exc))
        return 2
    finally:
        con.close()


def _cli_perfetto(con, args, messages: list[str]) -> int:
    import sys

    if args.last is not None and (args.start or args.end):
        raise ExportError("give either --last or --from/--to, not both")
    if args.last is not None and args.last <= 0:
        raise ExportError("--last needs a positive number of minutes")
    if args.max_events < 1:
        raise ExportError("--max-events needs a positive number")
    try:
        ranks = parse_ranks(args.ranks) if args.ranks else None
    except ValueError as exc:
        raise ExportError(f"--ranks: {exc}") from None
    doc = perfetto(con, start=args.start, end=args.end, last_min=args.last, ranks=ranks,
                   max_events=args.max_events, messages=messages)
    meta = doc["otherData"]
    _say(f"window: {meta['window']}")
    for m in messages:
        _say(m)
    text = dumps(doc)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text, encoding="utf-8")
    threads = sum(1 for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name")
    procs = sum(1 for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name")
    where = "stdout" if args.out == "-" else args.out
    _say(f"wrote {where}: {meta['events']} events on {threads} threads in {procs} processes; "
         f"open it at https://ui.perfetto.dev or chrome://tracing")
    if meta["events"] == 0:
        _say("the window holds no events: try --last with more minutes or --from/--to")
    return 0


def _cli_parquet(con, args, messages: list[str]) -> int:
    result = parquet(con, args.out, job=args.job, store_path=args.db, replace=args.replace, messages=messages)
    for m in messages:
        _say(m)
    rows = sum(result["tables"].values())
    _say(f"job {result['job']} (from {result['job_source']}): wrote {len(result['tables'])} tables, {rows} rows "
         f"to {result['dir']}")
    return 0
