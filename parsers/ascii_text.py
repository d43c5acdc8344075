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
    class_start = 0             # where the current class's members begin (after `[` and `^`)
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
            if char == "]" and i > class_start:
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


def as_written(pattern: str) -> str:
    return pattern


def patterns_for(datas: list[bytes]):
    """``for_ascii`` where every one of ``datas`` is ASCII (their decoded text is then ASCII too),
    else ``as_written``: what a parser applies to each pattern it runs over their lines."""
    return for_ascii if all(data.isascii() for data in datas) else as_written
