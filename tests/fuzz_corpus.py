"""Hostile inputs for the parser fuzz tests (tests/test_fuzz_parsers.py), built at test time
from the real log excerpts in ../shared/real-data/logs/ (never copied into the project).

Every mutation is a function ``(rng, data, other) -> bytes``: ``data`` is one real file's bytes,
``other`` a second real file (for interleaving); ``rng`` a seeded ``random.Random`` so a failing
input can be rebuilt from its seed. Also: the parser-calling helpers the tests share, and a
counter of how many inputs the suite fed to parsers.
"""
from __future__ import annotations

import random
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

import polars as pl

from postmortem import parsers
from postmortem.parsers.ascii_text import reading
from postmortem.parsers.lines import ENVELOPE_SCHEMA

REAL = Path(__file__).resolve().parents[2] / "shared" / "real-data" / "logs"

# How many inputs the fuzz suite fed to the parsers, by test (reported at the end of the module).
TRIED: Counter = Counter()


@lru_cache(maxsize=1)
def real_files() -> tuple[tuple[str, bytes], ...]:
    """(name relative to the logs folder, bytes) of every real excerpt, INDEX.md files too."""
    if not REAL.is_dir():
        return ()
    return tuple((str(p.relative_to(REAL)), p.read_bytes()) for p in sorted(REAL.rglob("*")) if p.is_file())


@lru_cache(maxsize=1)
def real_lines() -> tuple[bytes, ...]:
    """Every distinct non-blank line of the real excerpts (for hypothesis to sample from)."""
    seen = {}
    for _, data in real_files():
        for line in data.split(b"\n"):
            if line.strip():
                seen.setdefault(line, None)
    return tuple(seen)


def physical_lines(data: bytes) -> int:
    """The envelope's line count (postmortem.parsers.lines.decode_lines): one row per ``\\n``-separated
    piece, a final ``\\n`` ending the last line rather than starting an empty one; no bytes, no rows."""
    if not data:
        return 0
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


# ---------------------------------------------------------------------------------------------
# byte-level pieces

INVALID_UTF8 = [b"\xff", b"\xfe", b"\x80", b"\xc0\x80", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80",
                b"\xf4\x90\x80\x80", b"\xf0\x9f\x98", b"\xc3\x28", b"\xa0\xa1", b"\xe2\x28\xa1"]
ANSI = [b"\x1b[0m", b"\x1b[31m", b"\x1b[1;32m", b"\x1b[2K", b"\x1b[A", b"\x1b[?25l", b"\x1b(B",
        b"\x1b=", b"\x1b]0;title\x07", b"\x1b[", b"\x1b[31", b"\x1b", b"\x1b[38;5;208m", b"[0m", b"[36m"]
# what replaces a run of digits: huge, negative, out of every integer range, not a number at all
NUMBERS = [b"99999999999999999999999999999999", b"18446744073709551616", b"18446744073709551615",
           b"9223372036854775808", b"9223372036854775807", b"-9223372036854775809", b"4294967296",
           b"2147483648", b"-2147483649", b"-1", b"-0", b"0", b"00000000000000000000000000001",
           b"-99999999999999999999", b"1e309", b"NaN", b"inf", b"-inf", b"1" * 400, b"65536", b"-32769"]
_DIGITS = re.compile(rb"\d+")


def _positions(rng: random.Random, data: bytes, k: int) -> list[int]:
    return sorted(rng.randrange(len(data) + 1) for _ in range(k)) if data else [0] * k


def _insert(rng: random.Random, data: bytes, pieces: list[bytes], k: int) -> bytes:
    out, last = [], 0
    for pos in _positions(rng, data, k):
        out += [data[last:pos], rng.choice(pieces)]
        last = pos
    out.append(data[last:])
    return b"".join(out)


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _per_line(rng: random.Random, data: bytes, share: float, change) -> bytes:
    return b"\n".join(change(line) if rng.random() < share else line for line in _lines(data))


# ---------------------------------------------------------------------------------------------
# mutations: (rng, data, other) -> bytes


def truncate(rng, data, other):
    """The file cut at a random byte (a job killed mid-write; may split a UTF-8 character)."""
    return data[: rng.randrange(len(data) + 1)] if data else data


def tear(rng, data, other):
    """Lines torn at random points: newlines inserted mid-line, chunks of bytes lost."""
    torn = _insert(rng, data, [b"\n", b"\n\n", b"\r\n"], max(1, len(data) // 200))
    out, last = [], 0
    for pos in _positions(rng, torn, max(1, len(torn) // 800)):
        out.append(torn[last:pos])
        last = min(len(torn), pos + rng.randrange(1, 40))
    out.append(torn[last:])
    return b"".join(out)


def interleave(rng, data, other):
    """Two processes writing to one file: whole lines shuffled together, and fragments of the
    other file's lines spliced into the middle of lines (no line buffering)."""
    a, b = _lines(data), _lines(other)
    out = []
    while a or b:
        src = a if (a and (not b or rng.random() < 0.5)) else b
        line = src.pop(0)
        if rng.random() < 0.15 and (a or b):
            peer = a if src is b else b
            if peer:
                piece = peer.pop(0)
                cut = rng.randrange(len(line) + 1)
                line = line[:cut] + piece[: rng.randrange(len(piece) + 1)] + line[cut:]
        out.append(line)
    return b"\n".join(out)


def invalid_utf8(rng, data, other):
    """Invalid UTF-8 sequences anywhere, including inside multi-byte characters."""
    return _insert(rng, data, INVALID_UTF8, max(1, len(data) // 300))


def nul_bytes(rng, data, other):
    """NUL bytes inside lines, whole NUL lines, and the zero-filled tail a crashed
    writer leaves on some file systems."""
    out = _insert(rng, data, [b"\x00", b"\x00" * 7, b"\n\x00\n"], max(1, len(data) // 400))
    return out + b"\x00" * rng.choice([1, 512, 4096])


def crlf(rng, data, other):
    """Windows line ends, some lines with a doubled ``\\r``, a lone ``\\r`` at the end."""
    out = data.replace(b"\n", b"\r\n")
    return _insert(rng, out, [b"\r", b"\r\r\n"], 3) + b"\r"


def cr_storm(rng, data, other):
    """tqdm redraws: lines made of many ``\\r``-separated segments, blank segments, bare ``\\r`` runs."""
    def storm(line: bytes) -> bytes:
        cuts = sorted(rng.randrange(len(line) + 1) for _ in range(rng.randrange(1, 12)))
        segments = [line[:c] for c in cuts] + [line]
        return b"\r".join(segments) + b"\r" * rng.randrange(0, 5) + rng.choice([b"", b"\r \r", b"\r" * 200])
    return _per_line(rng, data, 0.5, storm) + b"\r" * 50


def ansi(rng, data, other):
    """ANSI colour and cursor escapes anywhere, complete and broken ones."""
    return _insert(rng, data, ANSI, max(1, len(data) // 100))


def huge_numbers(rng, data, other):
    """Every run of digits replaced, at random, by a huge, negative or non-number value."""
    return _DIGITS.sub(lambda m: rng.choice(NUMBERS) if rng.random() < 0.7 else m.group(0), data)


def negative_numbers(rng, data, other):
    """A minus sign in front of runs of digits (negative ranks, sizes, counts, durations)."""
    return _DIGITS.sub(lambda m: b"-" + m.group(0) if rng.random() < 0.7 else m.group(0), data)


def random_bytes(rng, data, other):
    """Random bytes overwritten into the file (a disk error, a binary dumped into the log)."""
    buf = bytearray(data)
    for pos in _positions(rng, data, max(1, len(data) // 50)):
        if pos < len(buf):
            buf[pos] = rng.randrange(256)
    return bytes(buf) + rng.randbytes(rng.randrange(64))


def everything(rng, data, other):
    """Three mutations in a row."""
    for mutate in rng.sample(list(MUTATIONS.values())[:-1], 3):
        data = mutate(rng, data, other)
    return data


MUTATIONS = {f.__name__: f for f in (truncate, tear, interleave, invalid_utf8, nul_bytes, crlf, cr_storm,
                                     ansi, huge_numbers, negative_numbers, random_bytes, everything)}


def mutated_corpus(name: str, seed: int = 12) -> list[tuple[str, bytes]]:
    """(label, bytes) of every real file under the mutation ``name``; the other file of an
    interleaving is the next one. Deterministic for a seed."""
    files = real_files()
    out = []
    for i, (path, data) in enumerate(files):
        rng = random.Random(f"{seed}:{name}:{path}")
        other = files[(i + 1) % len(files)][1]
        out.append((f"{name}:{path}", MUTATIONS[name](rng, data, other)))
    return out


def long_line(size: int = 10 * 2**20) -> bytes:
    """One ``size``-byte line (no newline) made of real lines joined with spaces, so every
    parser's literal filter passes and its regexes run over it; a short line before and after."""
    lines = [line.replace(b"\r", b" ") for line in real_lines()]
    body = b" ".join(lines)
    body = (body * (size // max(len(body), 1) + 1))[:size]
    return lines[0] + b"\n" + body + b"\n" + lines[-1] + b"\n"


# ---------------------------------------------------------------------------------------------
# calling parsers directly (postmortem.analyzer.ingest catches their exceptions; these helpers do not)


def batch_frame(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Many inputs' envelope frames as a batched parser gets them (postmortem.analyzer.ingest._parse_batched):
    one contiguous frame (as ingest reads it: a frame of hundreds of pieces made each parser's
    calls several times slower), ``input_id`` stamped, ``line_no`` renumbered to a global row."""
    combined = pl.concat([f.select(list(ENVELOPE_SCHEMA)) for f in frames], how="vertical_relaxed", rechunk=True)
    inputs = pl.Series([i for i, f in enumerate(frames) if f.height], dtype=pl.UInt32)
    heights = pl.Series([f.height for f in frames if f.height], dtype=pl.UInt32)
    input_id = inputs.repeat_by(heights).explode() if len(inputs) else pl.Series([], dtype=pl.UInt32)
    return combined.with_columns(input_id=input_id, line_no=pl.int_range(1, pl.len() + 1, dtype=pl.UInt32))


def run_parser(module, lines: pl.DataFrame) -> None:
    """``module.parse`` on ``lines``; any exception propagates. Checks the result's shape: frames,
    and consumed line numbers that exist in the input."""
    result = module.parse(lines)
    assert isinstance(result, parsers.base.ParseResult), module.NAME
    for name, frame in result.tables.items():
        assert isinstance(frame, pl.DataFrame), (module.NAME, name)
    consumed = result.consumed
    assert isinstance(consumed, pl.Series), module.NAME
    if len(consumed):
        known = lines["line_no"]
        stray = consumed.filter(~consumed.is_in(known.implode()))
        assert stray.is_empty(), (module.NAME, "consumed lines not in the input", stray.head(5).to_list())


def run_all_parsers(lines: pl.DataFrame, modules=None) -> None:
    """Every line and env parser on one input's envelope frame (each module as ingest would
    call it: ``parse(frame)``, with the patterns' ASCII forms where all the text is ASCII)."""
    text = lines["text"].fill_null("") if "text" in lines.columns else pl.Series([], dtype=pl.String)
    ascii = bool((text.str.len_bytes() == text.str.len_chars()).all())
    for module in modules if modules is not None else parsers.ALL_PARSERS:
        try:
            with reading(ascii):
                run_parser(module, lines)
        except Exception as exc:
            raise AssertionError(f"parser {module.NAME} raised {type(exc).__name__}: {exc}") from exc
