"""Regexes for text known to be ASCII: the same matches, compiled several times faster.

Polars compiles a regex at each call that is not among the 32 its thread used last, and a
parse uses hundreds. Most of a pattern's compile time is its Unicode classes: ``\\d`` is every
decimal digit of every script, ``\\w`` every letter, ``\\s`` every kind of space, each compiled
into an automaton over UTF-8 bytes (the launcher-prefix alternation of ``postmortem.parsers.lines``
took 3.8 ms to compile, and 0.6 ms with ASCII classes). On ASCII text the ASCII classes match
exactly what the Unicode ones match, so a chunk whose bytes are all ASCII (nearly every log)
can use them; any other text keeps the pattern as written. For example
``^\\[(\\d+)\\] [\\w.-]+`` becomes ``^\\[([0-9]+)\\] [0-9A-Za-z_.-]+``.
"""
from __future__ import annotations

import functools
import re
import threading
from contextlib import contextmanager

# Outside a class: the escape as a class of its own.
_CLASS = {"d": "[0-9]", "D": "[^0-9]", "w": "[0-9A-Za-z_]", "W": "[^0-9A-Za-z_]",
          "s": r"[\t\n\x0B\x0C\r ]", "S": r"[^\t\n\x0B\x0C\r ]"}
# Inside a class: its members (a negated escape inside a class has no such form: left as is).
_MEMBERS = {"d": "0-9", "w": "0-9A-Za-z_", "s": r"\t\n\x0B\x0C\r "}
# A flag group turning on verbose mode, where whitespace and `#` comments are not pattern text.
_VERBOSE = re.compile(r"\(\?[a-zA-Z-]*x")


@functools.cache
def for_ascii(pattern: str) -> str:
    """``pattern`` with its Unicode classes (``\\d \\w \\s`` and their negations) made ASCII:
    on ASCII text it matches where ``pattern`` matches, with the same groups, and Python's
    ``re`` reads it as it read ``pattern``. A pattern this reading is not sure of (verbose
    mode, a nested or set-operation class, a class escape at a range's end, a Unicode
    property) comes back unchanged; word boundaries stay as written."""
    if _VERBOSE.search(pattern):
        return pattern
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    class_start = 0             # where the current class's members begin (after `[`, `^`, a leading `]`)
    while i < n:
        char = pattern[i]
        if char == "\\":
            if i + 1 >= n:
                return pattern
            escape = pattern[i + 1]
            if in_class and escape in _MEMBERS:
                ranged = (i > class_start and pattern[i - 1] == "-") or (
                    pattern[i + 2:i + 3] == "-" and pattern[i + 3:i + 4] not in ("]", ""))
                if ranged:
                    return pattern
                out.append(_MEMBERS[escape])
            elif in_class and escape in "DWSbBpP":
                return pattern
            elif not in_class and escape in _CLASS:
                out.append(_CLASS[escape])
            elif escape in "pP":
                return pattern      # Unicode properties: as written
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            if char == "[" or pattern[i:i + 2] in ("&&", "--", "~~"):
                return pattern      # a nested class or a set operation
            if char == "]":             # (a leading one was taken as a member below)
                in_class = False
        elif char == "[":
            in_class = True
            class_start = i + 1
            if pattern[class_start:class_start + 1] == "^":
                class_start += 1
            out.append(pattern[i:class_start])
            if pattern[class_start:class_start + 1] == "]":   # a leading `]` is a member
                out.append("]")
                class_start += 1
            i = class_start
            continue
        out.append(char)
        i += 1
    return pattern if in_class else "".join(out)


def all_ascii(datas) -> bool:
    """Whether every one of ``datas`` (bytes) is ASCII: their decoded lines are then ASCII too."""
    return all(data.isascii() for data in datas)


# Whether the text this thread parses now is all ASCII (``reading``); ``rx`` reads it.
_NOW = threading.local()


@contextmanager
def reading(ascii: bool):
    """While this thread parses lines that are all ASCII (``ascii``) or may not be: ``rx``
    gives the ASCII form of a pattern only in the first case. Ingest says it for each chunk's
    parsers (``all_ascii`` of the chunk's bytes); a parser called otherwise (a test, another
    caller) gets every pattern as written."""
    before = getattr(_NOW, "ascii", False)
    _NOW.ascii = ascii
    try:
        yield
    finally:
        _NOW.ascii = before


def rx(pattern: str) -> str:
    """``pattern`` as the text parsed now (``reading``) allows: its ASCII form, or as written.
    Call it where an expression is built for the frame at hand, never in a cached builder or
    at import (the expression would outlive the text it was built for)."""
    return for_ascii(pattern) if getattr(_NOW, "ascii", False) else pattern
