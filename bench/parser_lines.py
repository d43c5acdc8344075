"""Benchmark: every line parser on its own sample lines, repeated, at two sizes: does any grow
faster than its input?

    python -m bench.parser_lines [--lines 20000,200000] [--parsers scheduler,nccl] [--json FILE]

Each parser of ``postmortem.parsers.ALL_PARSERS`` gets its ``SAMPLE_LINES`` (the one-line ones),
repeated to about each size, enveloped once (``postmortem.parsers.lines.envelope``) and parsed
(best of two). It prints, measured in the same run, microseconds a line at each size and their
ratio, largest to smallest: a parser's fixed cost makes the ratio fall below 1 as the input
grows; above 1.5 the parser does more work a line the more lines it has (a filter of the whole
input per block, say: the sacct reader took 60 us a line at 20,000 lines and 105 at 100,000),
and it is flagged. No test asserts a time (``tests/test_parser_lines_bench.py`` runs it small).
"""

from __future__ import annotations

import argparse
import json
import time

from postmortem.parsers import ALL_PARSERS
from postmortem.parsers.lines import envelope

GROWS = 1.5     # us a line at the largest size over the smallest, above which a parser is flagged


def sample_input(module, lines: int) -> bytes:
    """``module``'s one-line samples repeated to about ``lines`` lines (at least once)."""
    sample = [line for line in module.SAMPLE_LINES if "\n" not in line]
    return ("\n".join(sample * max(1, lines // max(1, len(sample)))) + "\n").encode()


def time_parser(module, lines: int, tries: int = 2) -> tuple[int, float]:
    """(lines parsed, best seconds of ``tries``) for ``module`` on its samples at ``lines``."""
    frame = envelope(sample_input(module, lines))
    best = float("inf")
    for _ in range(tries):
        started = time.perf_counter()
        module.parse(frame)
        best = min(best, time.perf_counter() - started)
    return frame.height, best


def measure(sizes: list[int], names: list[str] | None = None) -> list[dict]:
    """One row per parser: its name, and per size the lines and microseconds a line; the growth."""
    rows = []
    for module in ALL_PARSERS:
        name = module.__name__.rsplit(".", 1)[-1]
        if names and name not in names or not getattr(module, "SAMPLE_LINES", None):
            continue
        per_size = []
        for size in sizes:
            count, seconds = time_parser(module, size)
            per_size.append({"lines": count, "seconds": round(seconds, 4),
                             "us_per_line": round(seconds / max(1, count) * 1e6, 2)})
        growth = per_size[-1]["us_per_line"] / max(per_size[0]["us_per_line"], 1e-9)
        rows.append({"parser": name, "sizes": per_size, "growth": round(growth, 2), "flagged": growth > GROWS})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.parser_lines", description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", default="20000,200000", help="comma list of sizes (default 20000,200000)")
    parser.add_argument("--parsers", default="", help="comma list of parser names (default: all)")
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args(argv)
    sizes = sorted(int(size) for size in args.lines.split(",") if size.strip())
    rows = measure(sizes, [name for name in args.parsers.split(",") if name])
    print(f"{'parser':16s} " + " ".join(f"{f'us/line at {size:,}':>20s}" for size in sizes) + "   growth")
    for row in rows:
        cells = " ".join(f"{cell['us_per_line']:20.2f}" for cell in row["sizes"])
        print(f"{row['parser']:16s} {cells}   {row['growth']:.2f}x" + ("  <- grows with its input" if row["flagged"] else ""))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"sizes": sizes, "grows_above": GROWS, "parsers": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
