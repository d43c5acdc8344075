"""The ``postmortem`` command line. Headless: nothing here imports Textual.

Exit codes: 0 ran and no finding at or above ``--fail-on``; 1 findings at or above it;
2 bad usage or nothing readable. Data goes to stdout, progress and diagnostics to stderr.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path

EXAMPLES = """\
examples:
  postmortem report /scratch/job-4242/                     verdict, findings, actions (text)
  postmortem report job/ --format md,json --out job/pm     write report.md and report.json
  postmortem report job/ --fail-on warning; echo $?        1 when any warning or error
  postmortem ingest job/ --db job.duckdb                   build the store, query it later
  postmortem query --db job.duckdb "SELECT rank, node, pid, bus_id, source FROM ranks"
  postmortem transports job/                               which transport each NCCL ring hop used
  postmortem transports --db job.duckdb --all --format json
  postmortem hw H100                                       a GPU's numbers, sources and machine balance
  postmortem rules                                         list rule codes
  postmortem explain H001                                  what a rule detects and why

exit codes: 0 no finding at or above --fail-on, 1 findings at or above it, 2 usage error or
nothing readable.
"""

SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="postmortem",
        description="Post-mortem analysis of failed or hung distributed GPU training jobs: point it at the "
                    "job's log folder and it names what went wrong, where, and how it knows.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    r = sub.add_parser("report", help="analyse inputs and print or write the report",
                       description="Analyse a job folder (recursively), files, or .gz/.zst/.bz2/.xz files and "
                                   "report the verdict, findings with evidence, actions and evidence gaps.")
    r.add_argument("paths", nargs="+", metavar="PATH", help="job folder(s) or files")
    r.add_argument("--format", default="text", help="comma list of text, md, json (default: text)")
    r.add_argument("--out", help="write here instead of stdout: a file for one format, a folder for several")
    r.add_argument("--fail-on", default="error", choices=["error", "warning", "info", "never"],
                   help="exit 1 when a finding at or above this severity exists (default: error)")
    r.add_argument("--db", help="also keep the DuckDB store in this file")
    r.add_argument("--quiet", action="store_true", help="no progress on stderr")

    i = sub.add_parser("ingest", help="parse inputs into a DuckDB file",
                       description="Parse inputs into a DuckDB database you can query with postmortem query, "
                                   "duckdb, harlequin or pandas. Replaces FILE if it exists.")
    i.add_argument("paths", nargs="+", metavar="PATH")
    i.add_argument("--db", required=True, metavar="FILE")
    i.add_argument("--quiet", action="store_true")

    q = sub.add_parser("query", help="run SQL on a store", description="Run one SQL statement on a store.")
    q.add_argument("sql")
    q.add_argument("--db", required=True, metavar="FILE")
    q.add_argument("--format", default="table", choices=["table", "csv", "json"],
                   help="table (default), csv, or json (a list of row objects)")

    t = sub.add_parser(
        "transports", help="per NCCL communicator: ring order and the transport of every hop",
        description="Show, per NCCL communicator, its members (rank -> host, GPU), the ring order of every "
                    "channel and the transport each hop used (NVLink/PCIe P2P, SHM, IB/RoCE with or without "
                    "GPUDirect RDMA, sockets), with the NICs on both sides and the hops slower than the rest. "
                    "Needs NCCL_DEBUG=INFO output; GRAPH and TUNING subsystems add ring lines and algorithm choices.")
    t.add_argument("paths", nargs="*", metavar="PATH", help="job folder(s) or files (or use --db)")
    t.add_argument("--db", metavar="FILE", help="read a store written by postmortem ingest instead of parsing")
    t.add_argument("--comm", help="only communicators whose key (commId) contains this text")
    t.add_argument("--all", action="store_true", help="list every hop, not just the slow ones")
    t.add_argument("--gpu", metavar="MODEL", help="the GPU model, to price each hop (e.g. H100, A100-80GB); "
                                                   "default: the nvidia-smi name in the inputs")
    t.add_argument("--format", default="text", choices=["text", "json"])
    t.add_argument("--quiet", action="store_true", help="no progress on stderr")

    hw = sub.add_parser("hw", help="the hardware model: accelerators, link tiers, a GPU's machine balance",
                        description="Without MODEL: every accelerator in the model. With MODEL: its numbers, their "
                                    "sources, its machine balance and link tiers.")
    hw.add_argument("model", nargs="?", metavar="MODEL")
    hw.add_argument("--format", default="text", choices=["text", "json"])

    sub.add_parser("rules", help="list the rules and their codes")
    e = sub.add_parser("explain", help="show a rule's documentation")
    e.add_argument("code")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return {"report": _report, "ingest": _ingest, "query": _query, "transports": _transports,
                "hw": _hw, "rules": _rules, "explain": _explain}[args.command](args)
    except BrokenPipeError:
        return 0


def _analyze(paths, db, quiet):
    from analyzer.pipeline import NothingReadable, analyze

    try:
        run = analyze(paths, db_path=db, progress=not quiet and sys.stderr.isatty())
    except NothingReadable as exc:
        print(f"postmortem: nothing readable: {exc}", file=sys.stderr)
        return None
    for message in run.messages:
        print(f"postmortem: {message}", file=sys.stderr)
    return run


def _report(args) -> int:
    from analyzer.render import markdown_report, text_report
    from analyzer.report import build_report, to_json

    formats = [f.strip() for f in args.format.split(",") if f.strip()]
    unknown = [f for f in formats if f not in ("text", "md", "json")]
    if unknown or not formats:
        print(f"postmortem: unknown format(s) {', '.join(unknown) or '(none)'}; use text, md, json", file=sys.stderr)
        return 2
    run = _analyze(args.paths, args.db, args.quiet)
    if run is None:
        return 2
    report = build_report(run)
    renderers = {"text": text_report, "md": markdown_report, "json": to_json}
    if args.out and len(formats) > 1:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for f in formats:
            name = {"text": "report.txt", "md": "report.md", "json": "report.json"}[f]
            (out / name).write_text(renderers[f](report), encoding="utf-8")
            print(f"postmortem: wrote {out / name}", file=sys.stderr)
    elif args.out:
        Path(args.out).write_text(renderers[formats[0]](report), encoding="utf-8")
    else:
        for f in formats:
            sys.stdout.write(renderers[f](report))
    return _exit_code(report, args.fail_on)


def _exit_code(report: dict, fail_on: str) -> int:
    if fail_on == "never":
        return 0
    limit = SEVERITY_RANK[fail_on]
    return 1 if any(SEVERITY_RANK[f["severity"]] <= limit for f in report["findings"]) else 0


def _ingest(args) -> int:
    from analyzer.report import build_report

    run = _analyze(args.paths, args.db, args.quiet)
    if run is None:
        return 2
    build_report(run)  # fills the findings table
    totals = run.frame("SELECT count(*) AS files, sum(lines) AS lines, sum(parsed_lines) AS parsed, "
                       "sum(unparsed_lines) AS unparsed FROM inputs").row(0, named=True)
    run.con.close()
    print(f"postmortem: {args.db}: {totals['files']} inputs, {totals['lines']} lines "
          f"({totals['parsed']} parsed, {totals['unparsed']} unparsed)", file=sys.stderr)
    return 0


def _query(args) -> int:
    import duckdb

    if not Path(args.db).exists():
        print(f"postmortem: {args.db}: no such database", file=sys.stderr)
        return 2
    try:
        con = duckdb.connect(args.db, read_only=True)
        result = con.execute(args.sql)
        columns = [d[0] for d in result.description] if result.description else []
        rows = result.fetchall()
    except duckdb.Error as exc:
        print(f"postmortem: query failed: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        sys.stdout.write(json.dumps([dict(zip(columns, row)) for row in rows], default=str, indent=1) + "\n")
    elif args.format == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(columns)
        writer.writerows(rows)
        sys.stdout.write(buf.getvalue())
    else:
        from analyzer.render import safe

        widths = [max([len(c)] + [len(safe(str(r[i]))) for r in rows]) for i, c in enumerate(columns)]
        widths = [min(w, 60) for w in widths]
        print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
        for row in rows:
            print("  ".join(safe(str(v))[:w].ljust(w) for v, w in zip(row, widths)))
    return 0


def _open_store(path: str):
    """A read-only ``Run`` over an existing store, or None (with a message) when it cannot be opened."""
    import duckdb

    from analyzer.pipeline import Run

    if not Path(path).exists():
        print(f"postmortem: {path}: no such database", file=sys.stderr)
        return None
    try:
        return Run(duckdb.connect(path, read_only=True), db_path=path)
    except duckdb.Error as exc:
        print(f"postmortem: {path}: cannot open: {exc}", file=sys.stderr)
        return None


def _transports(args) -> int:
    from analyzer.transports import render_text, view

    if bool(args.paths) == bool(args.db):
        print("postmortem transports: give either PATH... or --db FILE", file=sys.stderr)
        return 2
    run = _open_store(args.db) if args.db else _analyze(args.paths, None, args.quiet)
    if run is None:
        return 2
    v = view(run, comm=args.comm, gpu=args.gpu)
    if args.format == "json":
        sys.stdout.write(json.dumps(v, default=str, indent=1) + "\n")
    else:
        sys.stdout.write(render_text(v, all_hops=args.all))
    return 0


def _hw(args) -> int:
    from analyzer import hardware

    if args.model:
        acc = hardware.find(args.model)
        if acc is None:
            names = ", ".join(a["name"] for a in hardware.accelerators())
            print(f"postmortem: no accelerator matches {args.model!r}; the model has: {names}", file=sys.stderr)
            return 2
        rows = [acc]
    else:
        rows = hardware.accelerators()
    if args.format == "json":
        sys.stdout.write(json.dumps([{**a, "machine_balance_flop_per_byte": hardware.machine_balance(a),
                                      "nvlink_tier": hardware.tier(a.get("nvlink")),
                                      "pcie_tier": hardware.tier(a.get("pcie"))} for a in rows], indent=1) + "\n")
        return 0
    print(f"{'GPU':24s} {'BF16 TF/s':>9s} {'HBM TB/s':>8s} {'FLOP/B':>6s} {'mem GB':>6s}  {'GPU-GPU link (per dir.)':28s} host")
    for a in rows:
        balance = hardware.machine_balance(a)
        link = f"{a['nvlink']} {a['nvlink_unidir_gbs']} GB/s" if a.get("nvlink") else "PCIe only"
        print(f"{a['name']:24s} {a.get('bf16_dense_tflops', '?'):>9} {a.get('hbm_tbps', '?'):>8} "
              f"{balance:>6.0f} {a.get('memory_gb', '?'):>6}  {link:28s} {a.get('pcie', '?')}")
    if args.model:
        acc = rows[0]
        print(f"\nsource: {acc['source']} (confidence: {acc['confidence']})")
        for name in (acc.get("nvlink"), acc.get("pcie")):
            t = hardware.tier(name)
            if t:
                achievable = f", achievable ~{t['achievable_gbyte_s']:g}" if t.get("achievable_gbyte_s") else ""
                print(f"{t['name']}: line {t['line_gbyte_s']:g} GB/s per direction{achievable} ({t['source']})")
    return 0


def _rules(args) -> int:
    from rules import RULES

    for rule in RULES:
        summary = (rule.__doc__ or "").strip().splitlines()[0].removeprefix(f"{rule.CODE} ")
        print(f"{rule.CODE}  {rule.SEVERITY:<8} {summary}")
    return 0


def _explain(args) -> int:
    from rules import BY_CODE

    rule = BY_CODE.get(args.code.upper())
    if rule is None:
        print(f"postmortem: no rule {args.code}; see postmortem rules", file=sys.stderr)
        return 2
    print(f"{rule.CODE} {rule.NAME} ({rule.SEVERITY})\n")
    print((rule.__doc__ or "").strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
