"""The literals a pattern needs (``postmortem.parsers.kinds.guard``) and the kinds a frame could hold
(``possible_kinds``): a classifier leaves out the kinds no line could match, so that Polars does
not compile their patterns (it keeps only the 32 regexes a thread used last). Leaving a kind
out must never change a result: every guard is a literal every match holds."""
from __future__ import annotations

import re

import polars as pl
import pytest

from postmortem.parsers import kinds, nccl_errors
from postmortem.parsers.kinds import first_kind, guard, possible_kinds
from tests.test_parser_kinds import PARSERS


@pytest.mark.parametrize("pattern, expected", [
    (r"Watchdog caught collective operation timeout: WorkNCCL\((?P<seq>\d+)", ("Watchdog caught collective operation timeout: WorkNCCL(",)),
    (r"^\s*(?:Op type|Tensor shapes):\s*(?P<detail>\S.*)$", ("Op type", "Tensor shapes")),   # an alternation: any branch
    (r"^abc|^x+defg", ("abc", "defg")),                 # each branch's own longest run
    (r"(?:optional part )?needed", ("needed",)),        # an optional part holds nothing certain
    (r"(?:repeated )+tail", ("repeated ",)),            # a repetition of at least one holds its body
    (r"(?:rep)*tl", ("tl",)),
    (r"^\d+ \w+$", (" ",)),                              # a one-character literal is a guard too
    (r"^\d+\w+$", None),                                 # classes only: no literal known
    (r"abc|\d+", None),                                  # a branch without one: none
    (r"(?i)watchdog", None),                             # ignoring case: a literal test would not
    (r"x(?i:caseless)y", ("x",)),                        # a caseless group holds nothing certain; the rest does
    (r"\p{Greek}+ word", None),                          # Rust-only syntax Python's re does not read: no guard
    (r"ab\x{41}", None),
    (r"\<word\>", None),                                 # Rust's word boundaries, literals to Python: none
    (r"\b{start}word", None),
])
def test_guard(pattern, expected):
    assert guard(pattern) == expected


def _kinds_by_parser():
    for name, (catalogue, read) in PARSERS.items():
        yield pytest.param(name, catalogue, read, id=name)
    yield pytest.param("nccl_errors", nccl_errors.CAUSES, list, id="nccl_errors")


@pytest.mark.parametrize("name, catalogue, read", list(_kinds_by_parser()))
def test_every_sample_holds_its_kinds_guard(name, catalogue, read):
    """Each sample a kind documents (what its pattern reads of it) holds a literal of its guard
    where Python's ``re`` matches the pattern on it too."""
    missing, checked = [], 0
    for kind in catalogue:
        found = (kind.literal,) if getattr(kind, "literal", None) else guard(kind.pattern)
        for message in read(list(kind.samples)) if found else ():
            if message is not None and re.search(kind.pattern, message):
                checked += 1
                if not any(literal in message for literal in found):
                    missing.append((kind.name, message, found))
    assert checked and not missing


@pytest.mark.parametrize("few_rows", [kinds._FEW_ROWS, 0], ids=["automaton", "regex-first"])
@pytest.mark.parametrize("parser", [p for p in PARSERS if p != "nccl"])
def test_leaving_out_impossible_kinds_changes_no_kind(parser, few_rows, monkeypatch):
    """The first kind of each line (``first_kind``) is the same with every kind tried and with
    only the possible ones, on the parser's samples, each alone and all together, and on lines
    of no kind; on small frames (one automaton over every line) and large ones (the lines with
    any literal first)."""
    monkeypatch.setattr(kinds, "_FEW_ROWS", few_rows)
    catalogue, read = PARSERS[parser]
    samples = [m for m in read([line for kind in catalogue for line in kind.samples]) if m is not None]
    noise = ["", "plain text of no kind", "Traceback", "12345", "[rank3]: something"]
    frames = [pl.DataFrame({"m": [line]}) for line in samples + noise] + [pl.DataFrame({"m": samples + noise})]
    every = first_kind([pl.col("m").str.contains(kind.pattern) for kind in catalogue])
    for frame in frames:
        possible = possible_kinds(frame, "m", catalogue)
        some = first_kind([pl.col("m").str.contains(kind.pattern) if i in possible else None
                           for i, kind in enumerate(catalogue)])
        assert frame.select(every).equals(frame.select(some)), (parser, frame["m"].to_list()[:3])


def test_possible_kinds_of_nothing_and_of_unguarded_kinds():
    kinds = [nccl_errors.CAUSES[0]]
    assert possible_kinds(pl.DataFrame({"m": pl.Series([], dtype=pl.String)}), "m", kinds) == set()
    assert possible_kinds(pl.DataFrame({"m": ["x"]}), "m", kinds) == set()

    class Bare:     # a pattern with no literal is always possible
        pattern = r"^\d+$"
        literal = None
    assert possible_kinds(pl.DataFrame({"m": ["x"]}), "m", [Bare(), *kinds]) == {0}


def test_nccl_fingerprints_are_the_same_with_every_check_tried(monkeypatch):
    """NCCL's version fingerprints (64 patterns over the message shapes) leave out the checks
    whose literal no shape holds: the evidence of each version's block is what trying every
    check gives."""
    from postmortem.parsers import nccl
    from tests.test_nccl_line_kinds import FINGERPRINT_BLOCKS, _fp_block, parse_lines

    blocks = [parse_lines(tuple(_fp_block(lines, f"fp-{minor}", minor))).tables["nccl_shapes"]
              for minor, _exclude, lines in FINGERPRINT_BLOCKS]
    shapes = pl.concat(blocks, how="diagonal_relaxed")
    pruned = [nccl.fingerprints(frame) for frame in [*blocks, shapes]]
    left_out = [len(nccl.FINGERPRINTS) - len(nccl.possible_guards(frame, "msg", [guard(p) for _, p, _, _ in nccl.FINGERPRINTS]))
                for frame in blocks]
    assert min(left_out) > 0, left_out        # each block leaves some checks out
    monkeypatch.setattr(nccl, "possible_guards", lambda frame, column, guards: set(range(len(guards))))
    every = [nccl.fingerprints(frame) for frame in [*blocks, shapes]]
    assert all(a.equals(b) for a, b in zip(pruned, every))
    assert all(not a.is_empty() for a in pruned)


@pytest.mark.parametrize("few_rows", [kinds._FEW_ROWS, 0], ids=["automaton", "regex-first"])
def test_literals_held(few_rows, monkeypatch):
    """Which literals a frame holds, by a column's name or an expression, literals inside others
    and at the same place included; none of an empty frame."""
    monkeypatch.setattr(kinds, "_FEW_ROWS", few_rows)
    frame = pl.DataFrame({"t": ["abcd", "x.y", None, "NCCL error: Error: b"]})
    wanted = ["abc", "bcd", "b", "x.y", "Error: ", "error", "absent", "."]
    assert kinds.literals_held(frame, "t", wanted) == {"abc", "bcd", "b", "x.y", "Error: ", "error", "."}
    assert kinds.literals_held(frame, pl.col("t").str.to_uppercase(), ["ABC", "abc"]) == {"ABC"}
    assert kinds.literals_held(frame.clear(), "t", wanted) == set()
    assert kinds.literals_held(frame, "t", []) == set()
