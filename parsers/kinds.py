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

from dataclasses import dataclass, field

import polars as pl


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


def first_kind(holds: list[pl.Expr]) -> pl.Expr:
    """The index (Int32) of the first kind whose condition (``holds``, in kind order) a line
    meets, null where none does: the first match wins, in one expression (a filter per kind cost
    a Polars call each)."""
    return pl.coalesce([pl.when(hold).then(pl.lit(i, dtype=pl.Int32)) for i, hold in enumerate(holds)])


def kind_name(index: pl.Expr, kinds: list[Kind]) -> pl.Expr:
    """The name of the kind at ``index`` in ``kinds`` (``first_kind``'s)."""
    return index.replace_strict(list(range(len(kinds))), [kind.name for kind in kinds], return_dtype=pl.String)
