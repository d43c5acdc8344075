"""The one shape of a line format: ``Kind``, what every line parser's table of message kinds is made of.

A ``Kind`` is one message shape a parser understands (lnav-style): its name, the table its rows
go to, a literal prefilter (a cheap vectorised ``str.contains(literal, literal=True)`` screen
before the regex runs), the regex whose named groups become columns, which versions of the
program print it, and sample lines written in its real shape. The samples live beside the
pattern they exercise: ``tests/test_parser_kinds.py`` checks that every kind's samples match its
own pattern and no other kind's of the same parser (an overlap the parser resolves by order is
stated there, with its precedence), and each parser's ``SAMPLE_LINES`` includes them, so the
whole-parser tests read them too.

Kinds of one parser are tried in order and the first match wins; several kinds may share a name
when one message has several printed forms (each its own pattern, so named groups may repeat).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import polars as pl

try:    # Python's own regex parser, to read which literals a pattern needs (``guard``)
    from re import _constants as _sre
    from re import _parser as _sre_parse
except ImportError:     # pragma: no cover - a Python without them: no guards, every pattern runs
    _sre = _sre_parse = None


@dataclass(frozen=True)
class Kind:
    name: str
    table: str | None                                   # None: understood, carries nothing worth a row
    pattern: str                                        # regex (Rust syntax, as Polars runs it) on the message
    versions: str = ""                                  # free text: which versions print it
    samples: tuple[str, ...] = field(default_factory=tuple)
    literal: str | None = None                          # a substring every matching line holds (prefilter)
    keys: tuple[tuple[str, str | None], ...] = ()       # settings kinds: (named group, setting key) per value


def samples_of(kinds: list[Kind]) -> list[str]:
    """Every sample line of ``kinds``, in kind order (for a parser's ``SAMPLE_LINES``)."""
    return [line for kind in kinds for line in kind.samples]


def first_kind(holds: list[pl.Expr | None]) -> pl.Expr:
    """The index (Int32) of the first kind whose condition (``holds``, in kind order) a line
    meets, null where none does: the first match wins, in one expression (a filter per kind cost
    a Polars call each). A condition of None is a kind no line can be (``possible_kinds``)."""
    whens = [pl.when(hold).then(pl.lit(i, dtype=pl.Int32)) for i, hold in enumerate(holds) if hold is not None]
    return pl.coalesce(whens) if whens else pl.lit(None, dtype=pl.Int32)


def possible_kinds(frame: pl.DataFrame, column: str, kinds: list) -> set[int]:
    """The indexes of ``kinds`` (``Kind``s, or anything with a ``pattern``) whose pattern could
    match a value of ``column`` in ``frame``: those whose guard (``Kind.literal``, else
    ``guard`` of the pattern) occurs in it, found in one Polars call, and every kind without one.

    Why: Polars compiles a regex at every call that holds it, unless it is among the 32 its
    thread last used, and the parsers use hundreds. A query testing a parser's 36 patterns
    compiled all 36 each time (8-11 ms on a frame of one row, more than the work on most
    chunks); a literal test costs no compile. Leaving out a kind whose literal no line holds
    changes no result: no line could match it."""
    return possible_guards(frame, column, [(kind.literal,) if getattr(kind, "literal", None) else guard(kind.pattern)
                                           for kind in kinds])


def possible_guards(frame: pl.DataFrame, column: str, guards: list[tuple[str, ...] | None]) -> set[int]:
    """``possible_kinds`` of patterns given by their guards (``guard``; None: always possible)."""
    present = literals_held(frame, column, [lit for found in guards if found for lit in found])
    return {i for i, found in enumerate(guards) if not found or present.intersection(found)}


def literals_held(frame: pl.DataFrame, value: str | pl.Expr, literals: list[str]) -> set[str]:
    """Which of ``literals`` occur somewhere in ``value`` (a column's name, or an expression) of
    ``frame``, in one Polars call: the screen a parser runs before its kinds' patterns."""
    literals = sorted(set(literals))
    if not literals or frame.is_empty():
        return set()
    text = pl.col("_value")
    rows = frame.lazy().select(_value=pl.col(value) if isinstance(value, str) else value)
    if frame.height > _FEW_ROWS:
        # the lines that hold any literal first: one regex of them all is a SIMD literal search
        # (24 ms on 50 MB, where the automaton below took 121 and a test per literal 186)
        rows = rows.filter(text.str.contains("|".join(map(pl.escape_regex, literals))))
    held = rows.select(text.str.extract_many(literals, overlapping=True).explode().unique()).collect(engine="in-memory")
    return {lit for lit in held.to_series().to_list() if lit is not None}


# Up to this many rows, which literals a frame holds is one automaton over all of it (1.4 ms on
# 500 lines for c10d's 75 literals, where compiling their regex alone took 1.9, and a test per
# literal 7).
_FEW_ROWS = 20_000


# Rust's word-boundary assertions `\<`, `\>` and `\b{...}`, which Python's parser would read as
# literal characters: a pattern holding one gets no guard.
_READ_OTHERWISE = re.compile(r"\\[<>]|\\b\{")


@functools.cache
def guard(pattern: str) -> tuple[str, ...] | None:
    """Literals at least one of which every string ``pattern`` matches contains (the longest
    such that Python's parser finds in the pattern), or None where none is known: a pattern
    Python's ``re`` does not read (Rust-only syntax), one that ignores case, or one whose every
    match could be made of classes and optional parts.

    Read from the pattern's parse tree: a run of literal characters outside optional parts, a
    group or a repetition of at least one, and an alternation whose every branch has a guard
    (their union)."""
    if _sre_parse is None or _READ_OTHERWISE.search(pattern):
        return None
    try:
        tree = _sre_parse.parse(pattern)
    except (re.error, ValueError, TypeError, OverflowError, RecursionError):
        return None
    if tree.state.flags & re.IGNORECASE:
        return None
    return _required(list(tree))


def _required(items: list) -> tuple[str, ...] | None:
    """The guard of a sequence of parse-tree items: its best literal run or required part."""
    candidates: list[tuple[str, ...]] = []
    run: list[str] = []
    for op, arg in items:
        if op is _sre.LITERAL:
            run.append(chr(arg))
            continue
        if run:
            candidates.append(("".join(run),))
            run = []
        found = _required_of(op, arg)
        if found:
            candidates.append(found)
    if run:
        candidates.append(("".join(run),))
    if not candidates:
        return None
    # the most selective: its shortest literal longest, then the fewest literals
    return max(candidates, key=lambda found: (min(map(len, found)), -len(found)))


def _required_of(op, arg) -> tuple[str, ...] | None:
    if op is _sre.SUBPATTERN:
        _group, add_flags, _del_flags, sub = arg
        return None if add_flags & re.IGNORECASE else _required(list(sub))
    if op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, getattr(_sre, "POSSESSIVE_REPEAT", None)):
        low, _high, sub = arg
        return _required(list(sub)) if low >= 1 else None
    if op is _sre.BRANCH:
        branches = [_required(list(branch)) for branch in arg[1]]
        if any(found is None for found in branches):
            return None
        return tuple(sorted({lit for found in branches for lit in found}))
    return None


def kind_name(index: pl.Expr, kinds: list[Kind]) -> pl.Expr:
    """The name of the kind at ``index`` in ``kinds`` (``first_kind``'s)."""
    return index.replace_strict(list(range(len(kinds))), [kind.name for kind in kinds], return_dtype=pl.String)
