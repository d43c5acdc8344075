"""ASCII classes for ASCII text (``postmortem.parsers.ascii_text``): the rewritten patterns match
exactly where the written ones do on every ASCII character and on real log lines, and the
envelope of an ASCII input is the same with either."""
from __future__ import annotations

import ast
import functools
import importlib
import re
from pathlib import Path

import polars as pl
import pytest

from postmortem import parsers
from postmortem.parsers import ascii_text, lines
from postmortem.parsers.ascii_text import all_ascii, for_ascii, reading, rx

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "real-data" / "logs"


@pytest.mark.parametrize("pattern, expected", [
    (r"^\[(\d+)\] [\w.-]+", r"^\[([0-9]+)\] [0-9A-Za-z_.-]+"),
    (r"a\sb\Sc\Dd\W", r"a[\t\n\x0B\x0C\r ]b[^\t\n\x0B\x0C\r ]c[^0-9]d[^0-9A-Za-z_]"),
    (r"[^\]\s]+", r"[^\]\t\n\x0B\x0C\r ]+"),
    (r"[\d-]", r"[0-9-]"),
    (r"[]\d]", r"[]0-9]"),
    (r"[^]\d]", r"[^]0-9]"),
    (r"[]]\d", r"[]][0-9]"),
    (r"(?i)foo\d", r"(?i)foo[0-9]"),
    (r"\\d", r"\\d"),                       # an escaped backslash, then a letter
    (r"\bword\b\d", r"\bword\b[0-9]"),      # word boundaries stay as written
    (r"x\.\d", r"x\.[0-9]"),
])
def test_rewrites(pattern, expected):
    assert for_ascii(pattern) == expected


@pytest.mark.parametrize("pattern", [
    r"(?x) \d  # verbose: comments are not pattern text",
    r"[a-\d]", r"[\d-z]",                   # a class escape at a range's end
    r"[\W]", r"[\S]",                       # a negated escape inside a class
    r"[[:alpha:]\d]", r"[\w&&[^_]]", r"[\w--_]",   # nested classes, set operations
    r"\p{L}\d",                             # a Unicode property
    r"[\d",                                 # unbalanced
])
def test_patterns_it_is_not_sure_of_come_back_unchanged(pattern):
    assert for_ascii(pattern) == pattern


CLASSES = [r"\d", r"\D", r"\w", r"\W", r"\s", r"\S", r"[\d]", r"[\w.-]", r"[^\s]", r"[^\d\w]",
           r"(?i)\w", r"(?i)[\w]", r"(?i)k\s"]


@pytest.mark.parametrize("pattern", CLASSES)
def test_every_ascii_character_matches_as_before(pattern):
    """Each class, written and rewritten, on each of the 128 ASCII characters alone, in Polars."""
    characters = pl.DataFrame({"c": [chr(i) for i in range(128)]})
    written, rewritten = (characters.select(pl.col("c").str.contains(f"^(?:{p})$")).to_series().to_list()
                          for p in (pattern, for_ascii(pattern)))
    assert for_ascii(pattern) != pattern
    assert written == rewritten


def _catalogue_patterns() -> list[str]:
    """The patterns of the envelope and of every parser's kind catalogue."""
    from postmortem.parsers import c10d, nccl_errors, torch_errors

    found = [p for _n, p, _g in lines._PREFIXES]
    found += [lines._LEAD_PREFIXES, lines._PDSH, lines._HOSTLIKE, lines._RANK_BRACKET, lines._C10D_RECORD,
              lines._GLUED_BAR, lines._PAGER_MARK, lines._BOX_EDGE, lines._RANK_TAG, lines._ANSI]
    found += [kind.pattern for kind in c10d.KINDS]
    found += [kind.pattern for kind in torch_errors.SINGLE_KINDS]
    found += [cause.pattern for cause in nccl_errors.CAUSES]
    return sorted(set(found))


@functools.cache
def _ascii_lines() -> list[str]:
    texts = [line for module in parsers.ALL_PARSERS for line in getattr(module, "SAMPLE_LINES", [])]
    if REAL.is_dir():
        for path in sorted(REAL.rglob("*")):
            if path.is_file() and path.suffix in (".log", ".txt") and path.stat().st_size < 2_000_000:
                texts += path.read_bytes().decode("utf-8", "replace").splitlines()
    return [text for text in texts if text.isascii()]


def _same_matches(frame: pl.DataFrame, pattern: str, rewritten: str) -> bool:
    """The written and the rewritten pattern match the same lines of ``frame``, with the same
    groups where the pattern has any (one Python's ``re`` reads; Rust-only syntax: the matches)."""
    try:
        grouped = re.compile(pattern).groups > 0
    except re.error:
        grouped = False
    def expr(p: str) -> pl.Expr:
        return pl.col("text").str.extract_groups(p) if grouped else pl.col("text").str.contains(p)
    return frame.select(expr(pattern)).equals(frame.select(expr(rewritten)))


def test_catalogue_patterns_match_alike_on_ascii_log_lines():
    """Each pattern written and rewritten: the same lines match, with the same groups."""
    frame = pl.DataFrame({"text": _ascii_lines()})
    assert frame.height > 2_000
    changed = 0
    for pattern in _catalogue_patterns():
        rewritten = for_ascii(pattern)
        changed += rewritten != pattern
        assert _same_matches(frame, pattern, rewritten), pattern
    assert changed > 20


def test_rx_gives_the_ascii_form_only_while_ascii_text_is_read():
    assert all_ascii([b"plain", b"text\n"]) and all_ascii([])
    assert not all_ascii([b"plain", "caf\u00e9".encode()])
    pattern = r"^\d+ \w+"
    assert rx(pattern) == pattern                       # a parser called on its own
    with reading(True):
        assert rx(pattern) == for_ascii(pattern)
        with reading(False):                            # a chunk with other text
            assert rx(pattern) == pattern
        assert rx(pattern) == for_ascii(pattern)
    assert rx(pattern) == pattern


def test_the_envelope_of_ascii_inputs_is_the_same_with_either(monkeypatch):
    """Every sample log, every launcher prefix (the envelope's own samples) and the real
    excerpts, peeled with the ASCII classes and with the written ones."""
    datas = [("\n".join(lines.SAMPLE_LINES) + "\n").encode()]
    for folder in [ROOT / "sample_logs", REAL]:
        if folder.is_dir():
            datas += [p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.stat().st_size < 2_000_000]
    datas = [data for data in datas if data.isascii()]
    assert len(datas) > 100
    fast = lines.envelope_frame(datas)
    monkeypatch.setattr(lines, "all_ascii", lambda _datas: False)
    assert fast.equals(lines.envelope_frame(datas))


def test_the_store_and_findings_are_the_same_with_the_patterns_as_written(monkeypatch):
    """Samples whose evidence spans most parsers and the real excerpts (some of them not ASCII),
    a chunk per few files: each ASCII chunk's parsers use the ASCII forms, the others the
    written patterns; with the ASCII forms turned off the store is the same, table by table."""
    from postmortem.analyzer import ingest
    from tests.test_scale_ingest import differing, store_of

    paths = [ROOT / "sample_logs" / name for name in ("gpu-fell-off-bus", "ib-link-flap", "mixed-versions")]
    paths += [REAL] if REAL.is_dir() else []
    monkeypatch.setattr(ingest, "CHUNK_BYTES", 400_000)
    monkeypatch.setenv("POSTMORTEM_WORKERS", "1")
    rewritten = []
    real_for_ascii = ascii_text.for_ascii
    monkeypatch.setattr(ascii_text, "for_ascii", lambda p: rewritten.append(p) or real_for_ascii(p))
    fast = store_of(paths)
    assert len({p for p in rewritten if real_for_ascii(p) != p}) > 100
    monkeypatch.setattr(ascii_text, "for_ascii", lambda pattern: pattern)
    written = store_of(paths)
    assert not differing(fast[0], written[0])
    assert fast[1:] == written[1:]


# The parsers that read a chunk's lines inside ingest's ``reading``: each regex with a class
# they run over those lines goes through ``rx`` (a pattern written bare is right, only slower).
READERS = ["c10d", "config", "deepspeed", "envdump", "health", "hf_trainer", "hwtools", "kernel", "linkbench",
           "megatron", "nccl", "nccl_errors", "nccl_ras", "pyspy", "scheduler", "titan_lightning", "torch_errors",
           "torchrun", "trainlog"]
_REGEX_METHODS = {"contains", "extract", "extract_all", "extract_groups", "count_matches", "replace", "replace_all",
                  "find"}


def _bare_patterns(source: str) -> list[int]:
    """Lines where a Polars string method gets a regex with a backslash escape not through rx."""
    bare = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in _REGEX_METHODS and isinstance(node.func.value, ast.Attribute)
                and node.func.value.attr == "str" and node.args):
            continue
        if any(k.arg == "literal" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
               for k in node.keywords):
            continue
        pattern = node.args[0]
        if isinstance(pattern, ast.Call) and isinstance(pattern.func, ast.Name) and pattern.func.id == "rx":
            continue
        if isinstance(pattern, ast.Constant) and "\\" not in str(pattern.value):
            continue
        bare.append(node.lineno)
    return bare


@pytest.mark.parametrize("name", READERS)
def test_the_parsers_patterns_go_through_rx(name):
    source = (ROOT / "parsers" / f"{name}.py").read_text()
    assert not _bare_patterns(source), f"parsers/{name}.py: wrap these lines' patterns in rx(): {_bare_patterns(source)}"


def _pattern_strings(name: str) -> set[str]:
    """The module's string constants and module-level strings (composed patterns) with an escape."""
    module = importlib.import_module(f"postmortem.parsers.{name}")
    found = {node.value for node in ast.walk(ast.parse((ROOT / "parsers" / f"{name}.py").read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and "\\" in node.value}
    found |= {value for value in vars(module).values() if isinstance(value, str) and "\\" in value}
    return found


@pytest.mark.parametrize("name", READERS)
def test_every_pattern_of_the_parsers_compiles_and_matches_alike_in_its_ascii_form(name):
    """Every string of the module that Polars compiles as a regex (its patterns, and strings that
    merely hold a backslash) compiles in its ASCII form too, and matches the same real lines
    with the same groups: a pattern only rare input reaches is held here, not only where a
    sample reaches it."""
    frame = pl.DataFrame({"text": _ascii_lines()})
    compared = 0
    for pattern in sorted(_pattern_strings(name)):
        try:
            frame.head(1).select(pl.col("text").str.contains(pattern))
        except Exception:  # noqa: BLE001 -- not a regex (a message, a docstring)
            continue
        rewritten = for_ascii(pattern)
        if rewritten != pattern:
            assert _same_matches(frame, pattern, rewritten), pattern
            compared += 1
    assert compared > 0, name
