"""Are the reports the same as before? The check a refactor lands on.

    python -m bench.report_identity save DIR       # before the change
    python -m bench.report_identity compare DIR    # after: exit 1 and name every file that differs

For every labelled case the scoreboard knows (samples, corpus, real excerpts: ``bench.accuracy``)
plus every other real excerpt file, it writes what a user sees through the command line: the
report in text, md, json and html, the transports table as JSON, and the Perfetto export of the
store. Timings are the only thing masked (they differ from run to run by design).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench.accuracy import REAL, cases

# "timings": {...} in the JSON report, and the same numbers wherever a format prints them.
_TIMINGS = re.compile(r'"timings": \{[^{}]*\}')
_SECONDS = re.compile(r"\b\d+(\.\d+)?\s?(ms|s)\b(?= (parse|rules|report|ingest|total))")


def _inputs() -> list[tuple[str, Path]]:
    seen = {c.path.resolve(): c.name for c in cases()}
    for path in sorted(REAL.glob("*/*")) if REAL.is_dir() else []:
        if path.is_file() and path.suffix in (".txt", ".log", ".json", ".out") and path.name != "truth.json":
            seen.setdefault(path.resolve(), f"{path.parent.name}-{path.name}")
    return sorted(((name, path) for path, name in seen.items()), key=lambda item: item[0])


def _mask(text: str) -> str:
    return _SECONDS.sub("<t>", _TIMINGS.sub('"timings": {}', text))


def _cli(argv: list[str]) -> str:
    try:
        from postmortem.cli import main
    except ImportError:   # before the namespace move
        from postmortem.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return f"exit {code}\n{out.getvalue()}"


def render_case(item: tuple[str, Path]) -> dict[str, str]:
    """Every view of one case, file name -> masked text."""
    name, path = item
    with tempfile.TemporaryDirectory() as tmp:
        store, out = Path(tmp, "s.duckdb"), Path(tmp, "out")
        files = {"report.exit": _cli(["report", str(path), "--format", "text,md,json,html", "--out", str(out),
                                      "--db", str(store), "--no-cache", "--quiet", "--fail-on", "never"])}
        for written in sorted(out.glob("report.*")):
            files[written.name] = written.read_text(encoding="utf-8")
        files["transports.json"] = _cli(["transports", "--db", str(store), "--all", "--format", "json"])
        trace = Path(tmp, "trace.json")
        files["perfetto.exit"] = _cli(["export", "perfetto", "--db", str(store), "--out", str(trace)])
        if trace.exists():
            files["perfetto.json"] = trace.read_text(encoding="utf-8")
    return {f"{name}/{key}": _mask(text.replace(tmp, "<tmp>")) for key, text in files.items()}


def render_all(jobs: int) -> dict[str, str]:
    items = _inputs()
    with ProcessPoolExecutor(jobs) as pool:
        return {k: v for part in pool.map(render_case, items) for k, v in part.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["save", "compare"])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    rendered = render_all(args.jobs)
    if args.action == "save":
        for key, text in rendered.items():
            Path(args.dir, key).parent.mkdir(parents=True, exist_ok=True)
            Path(args.dir, key).write_text(text, encoding="utf-8")
        print(f"saved {len(rendered)} files for {len({k.split('/')[0] for k in rendered})} cases in {args.dir}")
        return 0
    saved = {str(p.relative_to(args.dir)): p.read_text(encoding="utf-8") for p in args.dir.rglob("*") if p.is_file()}
    differ = sorted(k for k in saved.keys() | rendered.keys() if saved.get(k) != rendered.get(k))
    for key in differ:
        print(f"differs: {key}")
    print(json.dumps({"files": len(rendered), "cases": len({k.split('/')[0] for k in rendered}),
                      "differ": len(differ)}))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
