"""A failed job is never "healthy": every real excerpt (each file of ../shared/real-data/logs
alone, as a user would point the tool at it), every sample and every corpus case that holds a
launcher failure, a fatal signal, an uncaught traceback, a scheduler failure state or a watchdog
timeout gets a verdict other than healthy.

The signs are found here by a plain regular expression, independently of the parsers: what a
person grepping the log would call a failure. A traceback the job printed and ran past
(``logging.exception``) is a failure sign to grep but not to the tool; the corpus cases that hold
such tracebacks on purpose (``healthy-warnings``) are left to their truth file.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from postmortem.analyzer.pipeline import NothingReadable, analyze
from postmortem.rules.report import build_report
from tests.conftest import REAL, ROOT

FAILURE_SIGNS = re.compile(
    r"ChildFailedError|Watchdog caught collective operation timeout|exitcode\s*:\s*-\d+|"
    r"\bCANCELLED\b|\bNODE_FAIL\b|\bOUT_OF_MEMORY\b|Traceback \(most recent call last\)|terminate called|"
    r"Fatal Python error|Signal \d+ \(SIG[A-Z]+\) received|Timed out waiting \d+ms|watchdog got stuck")
EXCERPTS = sorted(p for p in REAL.rglob("*") if p.is_file() and p.suffix not in (".md", ".json")) \
    if REAL.is_dir() else []
FOLDERS = sorted(p for p in (ROOT / "sample_logs").iterdir() if p.is_dir())
FOLDERS += sorted(p for p in (ROOT / "tests" / "corpus").iterdir()
                  if p.is_dir() and json.loads((p / "truth.json").read_text())["outcome"] != "completed")


def _status(path: Path) -> str | None:
    try:
        run = analyze([path])
    except NothingReadable:
        return None
    try:
        return build_report(run)["verdict"]["status"]
    finally:
        run.con.close()


def _signs(path: Path) -> list[str]:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file() and p.suffix != ".json"]
    return [m.group(0) for f in files for m in FAILURE_SIGNS.finditer(f.read_text(errors="replace"))]


def test_the_signs_are_in_the_inputs():
    """The sweep is not vacuous: real excerpts and samples hold each kind of sign."""
    found = {s for p in EXCERPTS + FOLDERS for s in _signs(p)}
    assert {"ChildFailedError", "Watchdog caught collective operation timeout", "CANCELLED"} <= found
    assert any(s.startswith("Traceback") for s in found) and any(s.startswith("exitcode") for s in found)


@pytest.mark.parametrize("path", EXCERPTS + FOLDERS, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_an_input_with_a_failure_sign_is_never_healthy(path: Path, shared_cache):
    signs = _signs(path)
    if not signs:
        pytest.skip("no failure sign to grep")
    assert _status(path) not in ("healthy", None), f"healthy although it holds {signs[0]!r}"
