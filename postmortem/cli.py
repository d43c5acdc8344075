"""The ``postmortem`` command line. Headless: nothing here imports Textual.

Exit codes (``EXIT_CODES``, also in ``--help`` and docs/report.md): 0 ran and no finding at or above
``--fail-on``; 1 findings at or above it; 2 bad usage, nothing readable, or a path that cannot be
read or written; 3 the report was written but is partial (a rule raised: ``rule_errors``), which
wins over 1; 4 internal error (one line on stderr, ``POSTMORTEM_DEBUG=1`` for the traceback).
Data goes to stdout, progress and diagnostics to stderr.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import tempfile
from pathlib import Path

from postmortem.views.screens import SCREENS

EXAMPLES = """\
examples:
  postmortem report /scratch/job-4242/                     verdict, findings, actions (text)
  postmortem report job/ --format md,json,html --out job/pm   write report.md, .json and .html
  postmortem report job-4242.tar.gz                        archives are read in place (.tar[.gz|.zst], .zip)
  postmortem report job/ --fail-on warning; echo $?        1 when any warning or error
  postmortem ingest job/ --db job.duckdb                   build the store, query it later
  postmortem query --db job.duckdb "SELECT rank, node, pid, bus_id, source FROM ranks"
  postmortem tui job/                                      browse it in the terminal (keys 1-7, ? for help)
  postmortem tui --db job.duckdb --screen timeline          open a store at once, on the timeline
  postmortem transports job/                               which transport each NCCL ring hop used
  postmortem transports --db job.duckdb --all --format json
  postmortem hw H100                                       a GPU's numbers, sources and machine balance
  postmortem export perfetto --db job.duckdb --out trace.json   timeline of the last 30 min for ui.perfetto.dev
  postmortem export parquet --db job.duckdb --out /data/pm      every table as Parquet, one folder per job
  postmortem diff good-job/ bad-job/                       what changed: settings, versions, nodes, transports
  postmortem fleet /data/reports --store /data/fleet        recurring culprit nodes/GPUs/NICs over many report.json
  postmortem rules                                         list rule codes
  postmortem explain H001                                  what a rule detects and why

"""

# The exit codes scripts can rely on. 3 wins over 1: a partial report cannot promise that the
# missing findings would not have changed the answer, and its rule_errors say which are missing.
OK, FINDINGS, USAGE, PARTIAL, INTERNAL = 0, 1, 2, 3, 4
INTERRUPTED, TERMINATED = 130, 143   # 128 + SIGINT, 128 + SIGTERM
EXIT_CODES = """\
exit codes:
  0  ran; no finding at or above --fail-on (default: error)
  1  findings at or above --fail-on
  2  bad usage, nothing readable, or a path that cannot be read or written
  3  the report was written but is partial: a rule raised (listed under rule_errors);
     its findings are missing. 3 wins over 1 (--fail-on never does not hide it)
  4  internal error: one line on stderr; POSTMORTEM_DEBUG=1 shows the traceback
  130  interrupted (Ctrl-C, SIGINT); 143  terminated (SIGTERM): workers stopped, temporary files removed
"""
# Per command, the codes it can end with (each subcommand's --help lists its own).
_CODES = {
    "ingest": "exit codes: 0 store written; 2 bad usage, nothing readable or the store cannot be written;\n"
              "3 store written but a rule raised (its findings are missing from the findings table); 4 internal error",
    "query": "exit codes: 0 ran; 2 no such store or the SQL failed (or reached for a file without "
             "--allow-file-access); 4 internal error",
    "transports": "exit codes: 0 shown; 2 bad usage, nothing readable or no such store; 4 internal error",
    "hw": "exit codes: 0 shown; 2 unknown GPU model, nothing readable or no such store; 4 internal error",
    "diff": "exit codes: 0 the same outcome and no change; 1 the outcomes or something else differ; 2 a side could "
            "not be read; 4 internal error",
    "tui": "exit codes: 0 closed normally; 2 bad usage, no terminal, or the run could not be opened; "
           "4 internal error",
    "explain": "exit codes: 0 shown; 2 no such rule",
    "fleet": "exit codes: 0 no node, GPU or NIC fails more often than chance; 1 some do (the drain list); 2 bad "
             "usage, no report readable or an output/store that cannot be written; 4 internal error",
    "export": "exit codes: 0 written; 2 bad usage, no such store or the output cannot be written; "
              "4 internal error",
}

class _Formatter(argparse.HelpFormatter):
    """Wraps one-line descriptions to the terminal as usual, but keeps the line breaks of text
    laid out by hand (examples, the exit code table)."""

    def _fill_text(self, text, width, indent):
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


class _Version(argparse.Action):
    """``--version``: the version the report's ``generator`` field carries. Imported only when
    asked, so ``--help`` and ``rules`` do not pay for DuckDB and Polars."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from postmortem.rules.report import VERSION

        print(f"postmortem {VERSION}")
        parser.exit(OK)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="postmortem",
        description="Post-mortem analysis of failed or hung distributed GPU training jobs: point it at the "
                    "job's log folder and it names what went wrong, where, and how it knows.",
        epilog=EXAMPLES + "\n" + EXIT_CODES, formatter_class=_Formatter)
    p.add_argument("--version", action=_Version, help="print postmortem <version> and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    r = sub.add_parser("report", help="analyse inputs and print or write the report",
                       description="Analyse a job folder (recursively), files, or .gz/.zst/.bz2/.xz files and "
                                   "report the verdict, findings with evidence, actions and evidence gaps.",
                       epilog=EXIT_CODES, formatter_class=_Formatter)
    r.add_argument("paths", nargs="+", metavar="PATH", help="job folder(s) or files; in a folder, README*, *.md, "
                                                            "expected.json, truth.json and CASE.json are not read "
                                                            "(name one to read it)")
    r.add_argument("--format", default="text", help="comma list of text, md, json, html (default: text)")
    r.add_argument("--out", help="write here instead of stdout: a file for one format (or report.<ext> in it when "
                                 "it is a folder), a folder for several; missing folders are created")
    r.add_argument("--fail-on", default="error", choices=["error", "warning", "info", "never"],
                   help="exit 1 when a finding at or above this severity exists (default: error)")
    r.add_argument("--db", help="also keep the DuckDB store in this file")
    r.add_argument("--gpu", metavar="MODEL", help="the GPU model for the hardware model (e.g. H20, H100, A100-80GB); "
                                                   "default: the nvidia-smi name in the inputs")
    r.add_argument("--quiet", action="store_true", help="no progress and no 'wrote' lines on stderr (notes about "
                                                         "unreadable inputs and errors are still said)")
    r.add_argument("--no-cache", action="store_true", help="parse everything again: neither read nor keep the cache of parsed runs (see POSTMORTEM_CACHE_DIR)")
    r.add_argument("--follow-symlinks", action="store_true",
                   help="also read links that lead out of the input folders (and hard links to other users' files); "
                        "by default they are skipped and counted (docs/security.md)")
    r.add_argument("--what-if-gpu", metavar="MODEL", help="also judge the observed memory peak against another card "
                                                          "(e.g. H100): does it fit, by how much not, and the levers")

    i = sub.add_parser("ingest", help="parse inputs into a DuckDB file",
                       description="Parse inputs into a DuckDB database you can query with postmortem query, "
                                   "duckdb, harlequin or pandas. Replaces FILE if it exists.",
                       epilog=_CODES["ingest"], formatter_class=_Formatter)
    i.add_argument("paths", nargs="+", metavar="PATH")
    i.add_argument("--db", required=True, metavar="FILE")
    i.add_argument("--quiet", action="store_true", help="no progress on stderr")
    i.add_argument("--no-cache", action="store_true", help="parse everything again: neither read nor keep the cache of parsed runs (see POSTMORTEM_CACHE_DIR)")
    i.add_argument("--follow-symlinks", action="store_true",
                   help="also read links that lead out of the input folders (docs/security.md)")

    q = sub.add_parser("query", help="run SQL on a store", description="Run one SQL statement on a store.",
                       epilog=_CODES["query"], formatter_class=_Formatter)
    q.add_argument("sql")
    q.add_argument("--db", required=True, metavar="FILE")
    q.add_argument("--format", default="table", choices=["table", "csv", "json"],
                   help="table (default), csv, or json (a list of row objects)")
    q.add_argument("--allow-file-access", action="store_true",
                   help="let the SQL read and write files (read_parquet of your own files, COPY TO); by "
                        "default the store is opened with DuckDB's external access off and its settings locked")

    t = sub.add_parser(
        "transports", help="per NCCL communicator: ring order and the transport of every hop",
        description="Show, per NCCL communicator, its members (rank -> host, GPU), the ring order of every "
                    "channel and the transport each hop used (NVLink/PCIe P2P, SHM, IB/RoCE with or without "
                    "GPUDirect RDMA, sockets), with the NICs on both sides and the hops slower than the rest. "
                    "Needs NCCL_DEBUG=INFO output; GRAPH and TUNING subsystems add ring lines and algorithm choices.",
        epilog=_CODES["transports"], formatter_class=_Formatter)
    t.add_argument("paths", nargs="*", metavar="PATH", help="job folder(s) or files (or use --db)")
    t.add_argument("--db", metavar="FILE", help="read a store written by postmortem ingest instead of parsing")
    t.add_argument("--comm", help="only communicators whose key (commId) contains this text")
    t.add_argument("--all", action="store_true", help="list every hop, not just the slow ones")
    t.add_argument("--gpu", metavar="MODEL", help="the GPU model, to price each hop (e.g. H100, A100-80GB); "
                                                   "default: the nvidia-smi name in the inputs")
    t.add_argument("--format", default="text", choices=["text", "json"])
    t.add_argument("--quiet", action="store_true", help="no progress on stderr")

    hw = sub.add_parser("hw", help="the hardware model: accelerators, link tiers, a GPU's machine balance, a run's "
                                   "bandwidth map",
                        description="Without arguments: every accelerator in the model. With MODEL: its numbers, their "
                                    "sources, its machine balance and link tiers. With a run (PATH or --db FILE): the "
                                    "GPU model found in it (or --gpu), its machine balance, its NVLink domain and the "
                                    "run's bandwidth map: per tier the NCCL hops ran on, the hops and their bandwidth.",
                        epilog=_CODES["hw"], formatter_class=_Formatter)
    hw.add_argument("model", nargs="?", metavar="MODEL|PATH", help="a GPU model (H100, A100-80GB) or a job folder/file")
    hw.add_argument("--db", metavar="FILE", help="a store written by postmortem ingest")
    hw.add_argument("--gpu", metavar="MODEL",
                    help="with a run: the GPU model (default: the nvidia-smi name in the inputs)")
    hw.add_argument("--format", default="text", choices=["text", "json"])
    hw.add_argument("--quiet", action="store_true", help="no progress on stderr")

    _export_parser(sub)
    _fleet_parser(sub)

    d = sub.add_parser("diff", help="did two runs of a job end differently, and what changed that could explain it",
                       description="Compare a good run with a failed one, starting from the outcomes: each run's "
                                   "outcome and verdict and whether they differ; then the changes that could explain "
                                   "a difference (must-match and behaviour settings -- NCCL's own 'set by "
                                   "environment' echoes, then env dumps --, versions, the node set, the transports "
                                   "and algorithms NCCL picked), saying so when none could; then the other "
                                   "differences (logging switches, busbw, step time, memory peak). Each side is a "
                                   "job folder or a store from postmortem ingest.",
                       epilog=_CODES["diff"], formatter_class=_Formatter)
    d.add_argument("good", metavar="GOOD", help="the good run: a job folder, files, or a .duckdb store")
    d.add_argument("bad", metavar="BAD", help="the failed run")
    d.add_argument("--format", default="text", choices=["text", "json"])
    d.add_argument("--quiet", action="store_true", help="no progress on stderr")

    u = sub.add_parser(
        "tui", help="browse a run in the terminal: verdict, timeline, transports, env, memory, logs, SQL",
        description="Open the terminal UI on a job folder (ingested first, with progress) or on a store written by "
                    "postmortem ingest / report --db (opens at once). Keys 1-7 switch screens, ? lists every key, "
                    "q quits. Works over ssh; needs a terminal of at least 80x24.",
        epilog=_CODES["tui"], formatter_class=_Formatter)
    u.add_argument("paths", nargs="*", metavar="PATH", help="job folder(s) or files (or use --db)")
    u.add_argument("--db", metavar="FILE", help="open a store written by postmortem ingest or report --db")
    u.add_argument("--theme", choices=["dark", "light"], help="colour theme (default: dark; ctrl+t toggles)")
    u.add_argument("--allow-file-access", action="store_true",
                   help="let the SQL screen read and write files (off by default: external access disabled)")
    u.add_argument("--follow-symlinks", action="store_true",
                   help="also read links that lead out of the input folders (docs/security.md)")
    u.add_argument("--screen", default="verdict", choices=list(SCREENS), help="the first screen")

    sub.add_parser("rules", help="list the rules and their codes")
    e = sub.add_parser("explain", help="show a rule's documentation", epilog=_CODES["explain"],
                       formatter_class=_Formatter)
    e.add_argument("code")
    return p


class Terminated(BaseException):
    """SIGTERM (what ``timeout`` and the scheduler send): unwinds like Ctrl-C, so that workers are
    stopped and temporary files removed on the one way out."""


def _on_sigterm(signum, frame):
    raise Terminated()


def _cleanup() -> None:
    """Temporary files of this process (archive members, decoded copies, private stores)."""
    from postmortem.analyzer.archives import Scratch

    Scratch.cleanup_all()
    if "postmortem.analyzer.store" in sys.modules:
        sys.modules["postmortem.analyzer.store"].remove_private_dir()


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code (``EXIT_CODES``). No exception leaves here as a traceback:
    scripts get a documented code and one line on stderr. SIGINT (Ctrl-C) and SIGTERM stop the
    workers, remove the temporary files and exit 130 and 143."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    else:
        previous = None
    try:
        return _run(argv)
    except BrokenPipeError:
        _quiet_stdout()
        return OK
    except KeyboardInterrupt:
        _cleanup()
        print("postmortem: interrupted; temporary files removed", file=sys.stderr)
        return INTERRUPTED  # the shell's code for SIGINT
    except Terminated:
        _cleanup()
        print("postmortem: terminated (SIGTERM); temporary files removed", file=sys.stderr)
        return TERMINATED
    except OSError as exc:
        if exc.filename is None:
            return _internal_error(exc)
        # A file or folder that cannot be read or written (permissions, a full disk, a missing
        # folder): the user's to fix, not a bug.
        print(f"postmortem: {_safe(exc.filename)}: {_safe(exc.strerror or str(exc))}", file=sys.stderr)
        return USAGE
    except Exception as exc:  # noqa: BLE001 -- the last line of defence: a bug must not print a traceback
        return _internal_error(exc)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run(argv: list[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return USAGE
    return {"report": _report, "ingest": _ingest, "query": _query, "transports": _transports,
            "hw": _hw, "rules": _rules, "explain": _explain, "export": _export,
            "diff": _diff, "tui": _tui, "fleet": _fleet}[args.command](args)


def _internal_error(exc: BaseException) -> int:
    """A bug: one line naming it (the full traceback with ``POSTMORTEM_DEBUG=1``)."""
    if os.environ.get("POSTMORTEM_DEBUG", "") not in ("", "0"):
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    message = " ".join(str(exc).split())[:300]
    print(f"postmortem: internal error: {type(exc).__name__}{': ' + _safe(message) if message else ''} "
          "(a bug; POSTMORTEM_DEBUG=1 shows the traceback)", file=sys.stderr)
    return INTERNAL


def _safe(text) -> str:
    """Text from the inputs or the system, without control characters (render.safe, whose module
    is light to import)."""
    from postmortem.views.render import safe

    return safe(str(text))


def _quiet_stdout() -> None:
    """After the reader of stdout went away (``| head``): point stdout at /dev/null so the
    interpreter's final flush does not complain about the broken pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor (captured output in tests)
        pass


def _analyze(paths, db, quiet, exclude=None, no_cache=False, follow_symlinks=False, background_cache=False):
    """The analysed run, or None after saying why on stderr (nothing readable, a store that
    cannot be written): the caller exits 2. ``db``: the store is built in a private temporary
    folder and copied into place at the end (``_keep_store``): a folder the job's user controls
    never sees DuckDB's own files."""
    import duckdb

    from postmortem.analyzer.pipeline import NothingReadable, analyze

    if db and not _ready_for(Path(db), "the store", roots=paths):
        return None
    try:
        from postmortem.analyzer.ingest import progress_wanted

        run = analyze(paths, db_path=_private_store() if db else None, progress=progress_wanted(quiet),
                      exclude=[*(exclude or []), *([db] if db else [])], use_cache=False if no_cache else None,
                      follow_symlinks=follow_symlinks, background_cache=background_cache)
    except NothingReadable as exc:
        print(f"postmortem: nothing readable: {_safe(exc)}", file=sys.stderr)
        return None
    except duckdb.IOException as exc:  # the private store on a full disk
        print(f"postmortem: cannot write the store: {_safe(exc)}", file=sys.stderr)
        return None
    for message in run.messages:  # they quote file names and file content: no raw escapes on the terminal
        print(f"postmortem: {_safe(message)}", file=sys.stderr)
    return run


def _private_store() -> str:
    import uuid

    from postmortem.analyzer.store import private_dir

    return str(private_dir() / f"store-{uuid.uuid4().hex[:12]}.duckdb")


def _keep_store(run, db: str, roots) -> bool:
    """Copy the finished store (built privately) to ``--db``, atomically and never through a
    link; False after saying why it could not be written."""
    from postmortem.analyzer import safeio

    private = run.db_path
    try:
        run.con.execute("CHECKPOINT")
    except Exception:  # noqa: BLE001 -- a read-only or closed store needs none
        pass
    run.con.close()
    try:
        safeio.write_file(db, Path(private), roots=roots, inputs=_input_ids(run, roots), what="store")
    except safeio.Refused as exc:
        print(f"postmortem: cannot write the store: {_safe(exc)}", file=sys.stderr)
        return False
    except OSError as exc:
        print(f"postmortem: cannot write the store {_safe(db)}: {_safe(safeio.why(exc))}", file=sys.stderr)
        return False
    return True


def _input_ids(run, roots) -> set:
    """(device, inode) of every input the run read (archives for their members)."""
    from postmortem.analyzer import safeio

    try:
        paths = [r[0] for r in run.con.execute("SELECT DISTINCT abs_path FROM inputs").fetchall()]
    except Exception:  # noqa: BLE001 -- a closed store: the roots' own files are checked by name
        paths = []
    return safeio.identities(p.split("!/", 1)[0] for p in paths if p)


def _ready_for(path: Path, what: str, roots=()) -> bool:
    """Create the folder ``path`` will be written in (with its parents; never through a link
    inside the input folders) and check the target; False after saying on stderr why that is not
    possible. Checked before the analysis, which may take minutes."""
    from postmortem.analyzer import safeio

    folder = path.parent
    try:
        safeio.precheck(path, roots, what=what.removeprefix("the "))
    except safeio.Refused as exc:
        print(f"postmortem: cannot write {what} {_safe(path)}: {_safe(exc)}", file=sys.stderr)
        return False
    except OSError as exc:
        # mkdir says "File exists" or "Not a directory" when a file sits where a folder should be: name it
        existing = next((a for a in (folder, *folder.parents) if a.exists()), None)
        why = f"{existing} is a file, not a folder" if existing and not existing.is_dir() else \
            f"cannot create {exc.filename or folder}: {safeio.why(exc)}"
        print(f"postmortem: cannot write {what} {_safe(path)}: {_safe(why)}", file=sys.stderr)
        return False
    if not os.access(folder, os.W_OK):
        print(f"postmortem: cannot write {what} {_safe(path)}: {_safe(folder)} is not writable", file=sys.stderr)
        return False
    refusal = _not_ours(path, what)
    if refusal and _inside(path, roots):
        print(f"postmortem: cannot write {what} {_safe(path)}: {_safe(refusal)}", file=sys.stderr)
        return False
    return True


# How each of our outputs starts: an existing file in an input folder that does not is taken for
# an input of the run and never replaced.
_OWN_HEADS = {"report.txt": (b"OUTCOME: ",), "report.md": (b"# postmortem report",),
              "report.json": (b'{\n  "schema": "postmortem.report/',), "report.html": (b"<!DOCTYPE html>",),
              "fleet.txt": (b"FLEET: ",), "fleet.md": (b"# postmortem fleet",),
              "fleet.json": (b'{\n  "schema": "postmortem.fleet/',)}


def _not_ours(path: Path, what: str) -> str | None:
    """Why the existing file at ``path`` is not one of our outputs (None: ours, empty, or none)."""
    try:
        with open(path, "rb") as handle:    # precheck refused links and special files already
            head = handle.read(64)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    if not head:
        return None
    if what == "the store":
        return None if head[8:12] == b"DUCK" else "exists and is not a DuckDB store (an input of the run?); " \
                                                   "not replaced"
    if any(head.startswith(h) for heads in _OWN_HEADS.values() for h in heads):
        return None
    return "exists and is not a postmortem report (an input of the run?); not replaced"


def _inside(path: Path, roots) -> bool:
    path = Path(os.path.abspath(path))
    for root in roots or ():
        root = Path(os.path.abspath(root))
        if path == root or root in path.parents:
            return True
    return False


REPORT_FILES = {"text": "report.txt", "md": "report.md", "json": "report.json", "html": "report.html"}


def _formats(text: str, known) -> list[str] | None:
    """``--format text,md,...`` as a list; None after saying on stderr which are unknown."""
    formats = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in formats if f not in known]
    if unknown or not formats:
        print(f"postmortem: unknown format(s) {', '.join(unknown) or '(none)'}; use text, md, json, html",
              file=sys.stderr)
        return None
    return formats


def _out_paths(out: str, formats: list[str], roots=(), files: dict[str, str] | None = None,
               what: str = "the report") -> dict[str, Path] | None:
    """Where ``--out`` puts each format: a folder of ``files`` (report.<ext>) for several formats
    (or when ``--out`` is an existing folder or ends in /), else the file itself. Folders are
    created with their parents; None after saying on stderr why the place cannot be written."""
    target = Path(out)
    as_folder = len(formats) > 1 or target.is_dir() or out.endswith(("/", os.sep))
    if as_folder and target.exists() and not target.is_dir():
        print(f"postmortem: --out {_safe(out)} is a file; several formats need a folder", file=sys.stderr)
        return None
    names = files or REPORT_FILES
    paths = {f: target / names[f] for f in formats} if as_folder else {formats[0]: target}
    if not all(_ready_for(path, what, roots) for path in paths.values()):
        return None
    return paths


def _with_status(phase: str, quiet: bool, work):
    """``work()`` with ``postmortem: PHASE`` on stderr meanwhile (as the ingest's phases are)."""
    from postmortem.analyzer.ingest import Progress, progress_wanted

    meter = Progress(progress_wanted(quiet))
    meter.status(phase)
    try:
        return work()
    finally:
        meter.close()


def _report(args) -> int:
    from postmortem.html_report import html_report
    from postmortem.views.render import markdown_report, text_report
    from postmortem.rules.base import Options
    from postmortem.rules.report import build_report, to_json

    formats = _formats(args.format, REPORT_FILES)
    if formats is None:
        return USAGE
    paths = _out_paths(args.out, formats, args.paths) if args.out else None
    if args.out and paths is None:
        return USAGE
    # --out inside the job folder (the epilog recipe) must not be read back as input on a re-run
    # The cache entry is written while the rules run (joined before the store is closed or kept).
    run = _analyze(args.paths, args.db, args.quiet, exclude=[args.out] if args.out else None, no_cache=args.no_cache,
                   follow_symlinks=args.follow_symlinks, background_cache=True)
    if run is None:
        return USAGE
    options = Options(gpu=args.gpu, what_if_gpu=getattr(args, "what_if_gpu", None))
    report = _with_status("running the rules", args.quiet, lambda: build_report(run, options))
    renderers = {"text": text_report, "md": markdown_report, "json": to_json,
                 "html": lambda r: html_report(r, run, args.gpu)}
    if paths is None:
        for f in formats:
            sys.stdout.write(renderers[f](report))
    elif not _write_reports(paths, {f: renderers[f](report) for f in formats}, quiet=args.quiet or len(paths) == 1,
                            roots=args.paths, inputs=_input_ids(run, args.paths)):
        _discard(run)
        return USAGE
    run.cache_written()
    if args.db and not _keep_store(run, args.db, args.paths):
        return USAGE
    _say_partial(report)
    return _exit_code(report, args.fail_on)


def _discard(run) -> None:
    run.cache_written()
    try:
        run.con.close()
    except Exception:  # noqa: BLE001
        pass


def _write_reports(paths: dict[str, Path], texts: dict[str, str], quiet: bool, roots=(), inputs=frozenset()) -> bool:
    """Write every format (all or none: each under a temporary name, then renamed into place);
    False after saying why they could not be written."""
    from postmortem.analyzer import safeio

    try:
        safeio.write_files({path: texts[f] for f, path in paths.items()}, roots=roots, inputs=inputs,
                           what="report")
    except safeio.Refused as exc:
        print(f"postmortem: cannot write the report: {_safe(exc)}", file=sys.stderr)
        return False
    except OSError as exc:
        where = exc.filename if isinstance(exc.filename, str) else ", ".join(str(p) for p in paths.values())
        print(f"postmortem: cannot write {_safe(where)}: {_safe(safeio.why(exc))}; no report file was written",
              file=sys.stderr)
        return False
    if not quiet:
        for path in paths.values():
            print(f"postmortem: wrote {_safe(path)}", file=sys.stderr)
    return True


def _say_partial(report: dict) -> None:
    """One line that the report is partial (the rules' own lines may be far up, or absent when
    the report came from the cache)."""
    failed = sorted({e["rule"] for e in report.get("rule_errors") or []})
    if failed:
        print(f"postmortem: the report is partial: rule(s) {', '.join(failed)} failed and their findings are "
              f"missing (exit code {PARTIAL})", file=sys.stderr)


def _exit_code(report: dict, fail_on: str) -> int:
    """3 when a rule failed (whatever --fail-on), else 1 for a finding at or above --fail-on, else 0."""
    if report.get("rule_errors"):
        return PARTIAL
    if fail_on == "never":
        return OK
    from postmortem.rules.declare import Severity

    limit = Severity(fail_on).rank
    return FINDINGS if any(Severity(f["severity"]).rank <= limit for f in report["findings"]) else OK


def _ingest(args) -> int:
    from postmortem.rules.report import build_report

    run = _analyze(args.paths, args.db, args.quiet, no_cache=args.no_cache, follow_symlinks=args.follow_symlinks)
    if run is None:
        return USAGE
    report = build_report(run)  # fills the findings table
    totals = run.frame("SELECT count(*) AS files, sum(lines) AS lines, sum(parsed_lines) AS parsed, "
                       "sum(unparsed_lines) AS unparsed FROM inputs").row(0, named=True)
    if not _keep_store(run, args.db, args.paths):
        return USAGE
    print(f"postmortem: {_safe(args.db)}: {totals['files']} inputs, {totals['lines']} lines "
          f"({totals['parsed']} parsed, {totals['unparsed']} unparsed)", file=sys.stderr)
    _say_partial(report)
    return PARTIAL if report.get("rule_errors") else OK


def _query(args) -> int:
    import duckdb

    if not Path(args.db).exists():
        print(f"postmortem: {args.db}: no such database", file=sys.stderr)
        return 2
    from postmortem.analyzer.store import lock_down

    try:
        con = duckdb.connect(args.db, read_only=True)
        if not args.allow_file_access:
            lock_down(con)
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
        writer.writerows([[_cell(v, "") for v in row] for row in rows])
        sys.stdout.write(buf.getvalue())
    else:
        from postmortem.views.render import safe

        cells = [[safe(_cell(v, "NULL")).replace("\n", " ") for v in row] for row in rows]
        widths = [min(max([len(c)] + [len(r[i]) for r in cells]), CELL_WIDTH) for i, c in enumerate(columns)]
        print("  ".join(safe(c).ljust(w) for c, w in zip(columns, widths)).rstrip())
        for row in cells:
            print("  ".join(_cut(v, w).ljust(w) for v, w in zip(row, widths)).rstrip())
    return 0


CELL_WIDTH = 60   # the widest column of query --format table; longer cells end in an ellipsis


def _cell(value, null: str) -> str:
    """One value of a query result as text: NULL as ``null`` (``NULL`` in a table, empty in CSV),
    lists, structs and maps as JSON (not Python's repr), everything else as str."""
    if value is None:
        return null
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str, ensure_ascii=False)
    return str(value)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "\u2026"


def _open_store(path: str):
    """A read-only ``Run`` over an existing store, or None (with a message) when it cannot be opened."""
    import duckdb

    from postmortem.analyzer.pipeline import Run

    if not Path(path).exists():
        print(f"postmortem: {path}: no such database", file=sys.stderr)
        return None
    try:
        return Run(duckdb.connect(path, read_only=True), db_path=path)
    except duckdb.Error as exc:
        print(f"postmortem: {path}: cannot open: {exc}", file=sys.stderr)
        return None


def _transports(args) -> int:
    from postmortem.views.transports import render_text, view

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


def _diff(args) -> int:
    from postmortem.diff import diff, render_text

    runs, reports = [], []
    for side in (args.good, args.bad):
        store = side.endswith((".duckdb", ".db"))
        run = _open_store(side) if store else _analyze([side], None, args.quiet)
        if run is None:
            return 2
        runs.append(run)
        reports.append(_report_of(run, store))
    result = diff(*runs, *reports)
    sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n" if args.format == "json"
                     else render_text(result, (args.good, args.bad)))
    return 1 if result["changes"] or result["outcomes"]["differ"] else 0


def _report_of(run, store: bool) -> dict | None:
    """The report of one side of a diff: the one a store was written with, else made now (a
    read-only store without one: None, its outcome unknown)."""
    from postmortem.rules.report import build_report, stored_report

    if store:
        found = stored_report(run.con)
        if found is not None:
            return found
    try:
        return build_report(run)
    except Exception:  # noqa: BLE001 -- a store opened read-only cannot take the findings table
        return None


def _hw(args) -> int:
    from postmortem.analyzer import hardware

    if args.db or (args.model and Path(args.model).exists()):
        return _hw_run(args)
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


def _hw_run(args) -> int:
    """``hw PATH|--db FILE``: the run's GPU model, machine balance and bandwidth map."""
    from postmortem.views.transports import bandwidth_map, render_bandwidth_map

    if args.db and args.model:
        print("postmortem hw: give either PATH or --db FILE", file=sys.stderr)
        return 2
    run = _open_store(args.db) if args.db else _analyze([args.model], None, args.quiet)
    if run is None:
        return 2
    from postmortem.views import hw_view

    v = bandwidth_map(run, gpu=args.gpu)
    if args.gpu and v["accelerator"] is None:
        print(f"postmortem: {v['source']}", file=sys.stderr)
        return 2
    parsed = hw_view.view(run, v["accelerator"])   # what the hardware tools said, and its prices
    if args.format == "json":
        sys.stdout.write(json.dumps({**v, "parsed": parsed}, default=str, indent=1) + "\n")
    else:
        sys.stdout.write(_safe(hw_view.render_text(parsed) + "\n" + render_bandwidth_map(v)))
    return 0


EXPORT_EXAMPLES = {
    "perfetto": """\
examples:
  postmortem ingest job/ --db job.duckdb
  postmortem export perfetto --db job.duckdb --out trace.json             the last 30 minutes of the logs
  postmortem export perfetto --db job.duckdb --out trace.json --last 120 --ranks 0-7,17
  postmortem export perfetto --db job.duckdb --out trace.json --from 2026-07-24T13:00 --to 13:30
then open trace.json at https://ui.perfetto.dev (it stays in the browser) or in chrome://tracing.

One process per node, one thread per rank (and per rank: a thread per process group with the
stretches where its collective counters stood still -- "waiting in #N" when the rank is inside
collective N, "no progress after #N" when it never entered the next one --, GPU streams and NVTX
from profiles), a node thread for kernel/Xid/NIC and launcher events, a job process for Slurm.
Trace time 0 is the start of the window; each event's args.at is its wall time.
Default window: the LAST 30 MINUTES BEFORE THE END OF THE LOGS; a time of day (13:30) is on
the day the logs end. At most --max-events events (errors and timeouts are kept first).
""",
    "parquet": """\
examples:
  postmortem export parquet --db job.duckdb --out /data/pm                 job id from the store
  postmortem export parquet --db job.duckdb --out /data/pm --job 4242_run2
  duckdb -c "SELECT job, code, severity, title FROM
             read_parquet('/data/pm/*/table=findings/*.parquet', hive_partitioning=true)"

Layout: OUT/job=<id>/table=<name>/part-0.parquet (Spark, Trino and DuckDB read it as a table
partitioned by job and table). The job id is the Slurm job id in the store (sacct/scontrol/
slurmstepd lines), else --job, else the store file's name. Re-exporting a job replaces only its
own partition; a partition written from another store is never overwritten without --replace.
""",
}


def _export_parser(sub) -> None:
    x = sub.add_parser("export", help="export a store: a Perfetto/Chrome trace, or Parquet tables",
                       description="Export a store written by postmortem ingest (or report --db).",
                       formatter_class=_Formatter,
                       epilog="examples:\n"
                              "  postmortem export perfetto --db job.duckdb --out trace.json   (last 30 min)\n"
                              "  postmortem export parquet --db job.duckdb --out /data/pm\n"
                              "see postmortem export perfetto --help, postmortem export parquet --help\n\n"
                              + _CODES["export"])
    xs = x.add_subparsers(dest="export_kind", metavar="KIND")
    pf = xs.add_parser("perfetto", help="Chrome trace JSON of a time window (one process per node, thread per rank)",
                       description="Write a Chrome Trace Event Format JSON file of the store for Perfetto or "
                                   "chrome://tracing: training steps, collectives and their waits and timeouts, "
                                   "NCCL WARNs, exceptions, exits, checkpoints, kernel/Xid/NIC events, profiler "
                                   "kernels. Covers by default the last 30 minutes before the end of the logs.",
                       epilog=EXPORT_EXAMPLES["perfetto"] + "\n" + _CODES["export"], formatter_class=_Formatter)
    pf.add_argument("--db", required=True, metavar="FILE", help="a store written by postmortem ingest")
    pf.add_argument("--out", required=True, metavar="FILE", help="the trace file to write (- for stdout)")
    pf.add_argument("--from", dest="start", metavar="TIME", help="window start: 2026-07-24T13:00[:00] or 13:00")
    pf.add_argument("--to", dest="end", metavar="TIME", help="window end (default: the end of the logs)")
    pf.add_argument("--last", type=float, metavar="MINUTES",
                    help="the last MINUTES before the end of the logs (default 30)")
    pf.add_argument("--ranks", metavar="RANGES", help="only these ranks (and their nodes), e.g. 0-7,17")
    pf.add_argument("--max-events", type=int, default=250_000, metavar="N",
                    help="at most N events (default 250000); errors and timeouts are kept first")
    pq = xs.add_parser("parquet", help="every table as Parquet in a hive layout OUT/job=<id>/table=<name>/",
                       description="Write every table of the store as Parquet under "
                                   "OUT/job=<id>/table=<name>/part-0.parquet, so the tables of many jobs can be "
                                   "queried together by DuckDB, Spark or Trino.",
                       epilog=EXPORT_EXAMPLES["parquet"] + "\n" + _CODES["export"], formatter_class=_Formatter)
    pq.add_argument("--db", required=True, metavar="FILE", help="a store written by postmortem ingest")
    pq.add_argument("--out", required=True, metavar="DIR", help="the dataset folder (created if missing)")
    pq.add_argument("--job", metavar="ID", help="the job id of the partition (default: from the store, else the "
                                                "store file's name)")
    pq.add_argument("--replace", action="store_true",
                    help="overwrite OUT/job=<id> even when another store wrote it")
    x.set_defaults(export_parser=x)


FLEET_EXAMPLES = """\
examples:
  postmortem fleet /data/reports                           every report.json under it, read now (in memory)
  postmortem fleet /data/reports/2026-07-25 --store /data/fleet   add a day's reports to the Parquet store, then
                                                           rank the whole store (files already in are not re-read)
  postmortem fleet --store /data/fleet --format md,json,html --out /data/fleet-view
  postmortem fleet /data/reports --drain-threshold 0.001 --min-jobs 5 || file-drain-ticket
  duckdb -c "SELECT node, count(*) FROM (SELECT unnest(nodes) AS node FROM
             read_parquet('/data/fleet/table=jobs/*/*.parquet', hive_partitioning=true)) GROUP BY node"

Reads postmortem.report/1 JSON files (report.json, *.report.json; recursively) and the report
table of postmortem export parquet folders (job=<id>/table=report/). A node is
flagged when its culprit jobs, against the jobs it ran, beat the fleet's rate in a one-sided
binomial test (corrected for the number of nodes: --correction) below --drain-threshold, and
it was the culprit of at least --min-jobs jobs. docs/fleet.md has the JSON schema
(postmortem.fleet/1) and the store's layout.
"""


def _fleet_parser(sub) -> None:
    f = sub.add_parser("fleet", help="across many jobs' reports: nodes, GPUs and NICs that keep being the culprit",
                       description="Rank the nodes, GPUs (serial, else uuid, else node + bus id) and NICs named by "
                                   "many jobs' reports by how often they were the culprit against how often they "
                                   "ran, with a binomial test against the fleet's rate; failure categories per day "
                                   "and week, the most frequent finding codes, jobs with the same cause.",
                       epilog=FLEET_EXAMPLES + "\n" + _CODES["fleet"], formatter_class=_Formatter)
    f.add_argument("paths", nargs="*", metavar="PATH", help="folders searched recursively for report.json, "
                                                             "*.report.json and Parquet exports' report tables, "
                                                             "or report files")
    f.add_argument("--store", metavar="DIR", help="keep the fleet as Parquet here (one file per table and ingest "
                                                  "batch) and add to it; without PATH, the store alone is ranked")
    f.add_argument("--format", default="text", help="comma list of text, md, json, html (default: text)")
    f.add_argument("--out", help="write here instead of stdout: a file for one format, a folder of fleet.<ext> "
                                 "for several")
    f.add_argument("--drain-threshold", type=float, default=0.01, metavar="ALPHA",
                   help="flag when the corrected p-value is below this (default 0.01)")
    f.add_argument("--min-jobs", type=int, default=3, metavar="N",
                   help="and the node was the culprit of at least N jobs (default 3)")
    f.add_argument("--correction", default="bonferroni", choices=["bonferroni", "bh"],
                   help="multiple-comparison correction: bonferroni (default) or bh (Benjamini-Hochberg)")
    f.add_argument("--quiet", action="store_true", help="no progress and no 'wrote' lines on stderr")


def _fleet(args) -> int:
    from postmortem import fleet
    from postmortem.fleet_render import FILES, RENDERERS
    from postmortem.rules.report import VERSION

    formats = _formats(args.format, RENDERERS)
    if formats is None:
        return USAGE
    if not args.paths and not args.store:
        print("postmortem fleet: give PATH... (report folders or files), --store DIR, or both", file=sys.stderr)
        return USAGE
    if not 0 < args.drain_threshold < 1 or args.min_jobs < 1:
        print("postmortem fleet: --drain-threshold must be between 0 and 1 and --min-jobs at least 1",
              file=sys.stderr)
        return USAGE
    if args.store and not args.paths and not Path(args.store).is_dir():
        print(f"postmortem: {_safe(args.store)}: no such fleet store", file=sys.stderr)
        return USAGE
    paths = _out_paths(args.out, formats, args.paths, FILES, "the fleet view") if args.out else None
    if args.out and paths is None:
        return USAGE
    store = fleet.FleetStore(args.store)
    if args.store:
        Path(args.store).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="postmortem-fleet-") as scratch:
        inputs = _fleet_inputs(args.paths, scratch, args.quiet)
        done = fleet.ingest(store, inputs) if inputs else fleet.Ingest()
    for message in done.messages:
        print(f"postmortem: {_safe(message)}", file=sys.stderr)
    view = fleet.fleet_view(store, alpha=args.drain_threshold, min_jobs=args.min_jobs, correction=args.correction)
    if not view["summary"]["jobs"]:
        print("postmortem: nothing readable: no postmortem report (report.json) found"
              + (f" in {', '.join(_safe(p) for p in args.paths)}" if args.paths else ""), file=sys.stderr)
        return USAGE
    view = {"schema": view.pop("schema"), "generator": f"postmortem {VERSION}", **view,
            "ingest": {"store": args.store, "files_seen": done.files_seen, "new_files": done.new_files,
                       "already_in_store": done.reused_files, "read": done.read, "not_reports": done.skipped,
                       "batch": done.batch},
            "messages": done.messages}
    view["timings"] = {**done.timings, **view["timings"]}
    texts = {f: RENDERERS[f](view) for f in formats}
    if paths is None:
        for f in formats:
            sys.stdout.write(texts[f])
    elif not _write_reports(paths, texts, quiet=args.quiet or len(paths) == 1, roots=args.paths):
        return USAGE
    if not args.quiet:
        print(f"postmortem: {view['summary']['jobs']} jobs; {done.new_files} report file(s) read now, "
              f"{done.reused_files} already in the store", file=sys.stderr)
    return FINDINGS if view["drain"]["nodes"] else OK


def _fleet_inputs(paths: list[str], scratch: str, quiet: bool) -> list[str]:
    """The PATHs for the fleet: report files and folders of reports as given; a folder with no
    report in it is one job's log folder, reported on first (as ``postmortem report`` would,
    with the cache) into ``scratch``, under the folder's own name (its job id)."""
    from postmortem import fleet
    from postmortem.analyzer.pipeline import NothingReadable, analyze
    from postmortem.rules.report import build_report

    out = []
    for i, given in enumerate(paths):
        folder = Path(given)
        if not folder.is_dir() or fleet.scan([given]).files:
            out.append(given)
            continue
        if not quiet:
            print(f"postmortem: {_safe(given)}: no report in it; reporting on it as a job folder", file=sys.stderr)
        try:
            run = analyze([folder])
            try:
                report = build_report(run)
            finally:
                run.con.close()
        except NothingReadable as exc:
            print(f"postmortem: {_safe(given)}: {_safe(str(exc))}", file=sys.stderr)
            continue
        except Exception as exc:  # noqa: BLE001 -- one job folder that cannot be read costs only itself
            print(f"postmortem: {_safe(given)}: not reported ({type(exc).__name__}: {_safe(str(exc))})",
                  file=sys.stderr)
            continue
        target = Path(scratch) / str(i) / (folder.resolve().name or "job")
        target.mkdir(parents=True)
        (target / "report.json").write_text(json.dumps(report, default=str), encoding="utf-8")
        out.append(str(target / "report.json"))
    return out


def _export(args) -> int:
    from postmortem.export import run_cli

    return run_cli(args)


def _tui(args) -> int:
    """The only command that imports Textual (tui/)."""
    if bool(args.paths) == bool(args.db):
        print("postmortem: tui needs job folder(s) or --db FILE (not both)", file=sys.stderr)
        return 2
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("postmortem: tui needs a terminal; for scripts use report, query or transports", file=sys.stderr)
        return 2
    from postmortem.tui.app import PostmortemApp
    from postmortem.tui.session import StoreError, open_store

    theme = {"dark": "textual-dark", "light": "textual-light"}.get(args.theme or "")
    if args.db:
        try:
            app = PostmortemApp(session=open_store(args.db, allow_file_access=args.allow_file_access), theme=theme,
                                start=args.screen)
        except StoreError as exc:
            print(f"postmortem: {exc}", file=sys.stderr)
            return 2
    else:
        app = PostmortemApp(paths=args.paths, theme=theme, start=args.screen, allow_file_access=args.allow_file_access,
                            follow_symlinks=args.follow_symlinks)
    app.run()
    app.finish_cache(say=lambda line: print(line, file=sys.stderr))
    if app.failure:
        print(f"postmortem: {app.failure}", file=sys.stderr)
        return 2
    return 0


def _rules(args) -> int:
    # The catalogue reads the rule files without importing them (no Polars, DuckDB or parsers).
    from postmortem.rules.catalogue import entries

    for entry in entries():
        rule = entry.rule
        summary = entry.doc.strip().splitlines()[0].removeprefix(f"{rule.code} ")
        print(f"{rule.code}  {rule.severity:<8} {summary}")
    return 0


def _explain(args) -> int:
    from postmortem.rules.catalogue import by_code

    entry = by_code().get(args.code.upper())
    if entry is None:
        print(f"postmortem: no rule {args.code}; see postmortem rules", file=sys.stderr)
        return 2
    title, body = rule_doc(entry.rule, entry.doc)
    print(title + "\n")
    if body:
        print(body)
    return 0


def rule_doc(rule, doc: str) -> tuple[str, str]:
    """A rule's docstring as plain text: the title once (``CODE name (severity): summary``), then
    the sections, with reStructuredText marks (double backticks, ``::``, bold) taken out."""
    import inspect

    doc = inspect.cleandoc(doc)
    head, _, body = doc.partition("\n\n")
    summary = " ".join(head.split())
    for prefix in (f"{rule.code} {rule.name}:", f"{rule.code} {rule.name}", f"{rule.code}:", rule.code):
        if summary.startswith(prefix):
            summary = summary[len(prefix):].strip()
            break
    title = f"{rule.code} {rule.name} ({rule.severity})" + (f": {summary}" if summary else "")
    return _plain(title), _plain(body.strip())


def _plain(text: str) -> str:
    """reStructuredText to plain text: ``code`` -> code (its content kept as is), **bold** -> bold,
    a paragraph ending in ``::`` (a literal block follows) -> ``:``."""
    import re

    parts = re.split(r"(``.+?``)", text, flags=re.S)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(part[2:-2])
        else:
            part = part.replace("**", "")
            out.append(re.sub(r"(?<=\S)::(?=\s*$)", ":", part, flags=re.M))
    return "".join(out)


def entry() -> None:
    """The ``postmortem`` command: ``main``, then exit with its code.

    The process ends at once (``os._exit``) once its output is flushed and its temporary files
    removed, without the interpreter's teardown: freeing a large run's store and frames object
    by object took 0.2-0.25 s of the 1,024-rank run's report, for memory the system takes back
    anyway. Not while a thread of ours still works, nor after the TUI (Textual's own exit). After
    workers were stopped by a signal, likewise (their files are already removed): a worker
    killed mid-message would keep the interpreter's exit waiting on the pool's manager thread."""
    code = main()
    if "postmortem.analyzer.ingest" in sys.modules and sys.modules["postmortem.analyzer.ingest"].POOL_STOPPED:
        _flush_output()
        os._exit(code)
    if "postmortem.tui.app" not in sys.modules and not _threads_working():
        _cleanup()
        if _flush_output():
            os._exit(code)
    sys.exit(code)


def _flush_output() -> bool:
    """Flush stdout and stderr; False when one could not be flushed (then the interpreter's own
    exit deals with it, as it always did)."""
    done = True
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            done = False
    return done


def _threads_working() -> bool:
    """A thread other than this one that the interpreter's exit would wait for."""
    import threading

    main_thread = threading.main_thread()
    return any(t is not main_thread and t.is_alive() and not t.daemon for t in threading.enumerate())


if __name__ == "__main__":
    entry()
