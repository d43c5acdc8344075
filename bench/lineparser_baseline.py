"""A straightforward per-line Python parser: the yardstick ``bench.ingest_bench`` measures our ingest against.

What a user would write in an afternoon: open every text file, read it line by line, try a
handful of compiled regexes (``re.match``) for the main line kinds, append one dict per line,
then put the rows into an in-memory DuckDB table. No attribution of ranks beyond what the
line itself says, no clocks, no multi-line joins beyond "this line is inside a traceback".

The rows go into DuckDB through one columnar frame (``polars.DataFrame(rows)`` registered as an
Arrow table) rather than ``executemany`` row by row: the latter is what many users would write
first, but DuckDB inserts those one statement per row (much slower; not measured here), which
would flatter our ingest. Binary files (nsys exports, pickles) are not read at all.

    python -m bench.lineparser_baseline DIR [DIR ...]     (prints rows, seconds)
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import duckdb
import polars as pl

# Optional launcher prefixes: "[rank3]:" (torch), "3: " (srun --label), "[default3]:" (torchrun --tee).
_PREFIX = r"(?:\[rank(?P<prank>\d+)\]:|(?P<srank>\d+): |\[default(?P<drank>\d+)\]:)?"

PATTERNS: list[tuple[str, re.Pattern]] = [
    # host:pid:tid [cudaDev] NCCL INFO|WARN message
    ("nccl", re.compile(_PREFIX + r"(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
                                  r"NCCL (?P<level>INFO|WARN|ERROR|TRACE) (?P<msg>.*)")),
    # glog: [E0724 08:32:56.001735206 ProcessGroupNCCL.cpp:758] [PG ID 0 ...] message  (c10d watchdog/progress)
    ("c10d", re.compile(_PREFIX + r"\[(?P<level>[IWEF])(?P<date>\d{4}) (?P<time>\d\d:\d\d:\d\d\.\d+)"
                                  r"(?: +\d+)? (?P<src>[\w.]+):(?P<line>\d+)\] (?P<msg>.*)")),
    # Megatron:  [2026-07-24 08:03:13] iteration        1/   50000 | ... | lm loss: 9.9E+00 | ...
    ("iteration", re.compile(_PREFIX + r" *\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] iteration +(?P<iter>\d+)/ *"
                                       r"(?P<total>\d+) \|(?P<msg>.*)")),
    ("traceback", re.compile(_PREFIX + r"Traceback \(most recent call last\):")),
    ("frame", re.compile(_PREFIX + r'  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')),
    ("exception", re.compile(_PREFIX + r"(?P<exc>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt)): (?P<msg>.*)")),
    # generic timestamped Python logging line (torchrun, Megatron's own logger)
    ("log", re.compile(_PREFIX + r"\[?(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)[,.\d]*\]? ?(?P<msg>.*)")),
]

COLUMNS = ["file", "line_no", "kind", "rank", "host", "pid", "level", "ts", "iteration", "msg", "text"]
_TYPES = [pl.String, pl.Int64, pl.String, pl.Int64, pl.String, pl.Int64, pl.String, pl.String, pl.Int64,
          pl.String, pl.String]
_BINARY_SUFFIXES = {".sqlite", ".pickle", ".pkl", ".nsys-rep", ".qdrep", ".gz", ".zip", ".tar", ".duckdb"}


def text_files(paths: list[str | Path]) -> list[Path]:
    """Every file under ``paths`` that is not a known binary format (nsys exports, pickles, archives)."""
    out = []
    for path in map(Path, paths):
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        out.extend(p for p in files if p.suffix.lower() not in _BINARY_SUFFIXES)
    return out


def parse_file(path: Path, rows: list[dict]) -> None:
    name = str(path)
    in_traceback = False
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line_no, line in enumerate(handle, 1):
            line = line.rstrip("\n")
            row = {"file": name, "line_no": line_no, "kind": "other", "rank": None, "host": None, "pid": None,
                   "level": None, "ts": None, "iteration": None, "msg": None, "text": line}
            for kind, pattern in PATTERNS:
                m = pattern.match(line)
                if m is None:
                    continue
                g = m.groupdict()
                rank = g.get("prank") or g.get("srank") or g.get("drank")
                row["kind"] = kind
                row["rank"] = int(rank) if rank else None
                row["host"] = g.get("host")
                row["pid"] = int(g["pid"]) if g.get("pid") else None
                row["level"] = g.get("level")
                row["ts"] = g.get("ts") or (f"{g['date']} {g['time']}" if g.get("date") else None)
                row["iteration"] = int(g["iter"]) if g.get("iter") else None
                row["msg"] = g.get("msg") or g.get("exc")
                break
            if row["kind"] == "traceback":
                in_traceback = True
            elif in_traceback and row["kind"] == "other" and line.startswith("    "):
                row["kind"] = "frame"            # the source line under a File "..." line
            elif row["kind"] not in ("frame", "exception"):
                in_traceback = False
            rows.append(row)


def parse(paths: list[str | Path], con: duckdb.DuckDBPyConnection | None = None) -> tuple[duckdb.DuckDBPyConnection, int]:
    """Parse every text file under ``paths`` into table ``lines`` of an in-memory DuckDB; returns (con, rows)."""
    rows: list[dict] = []
    for path in text_files(paths):
        parse_file(path, rows)
    con = con or duckdb.connect(":memory:")
    frame = pl.DataFrame(rows, schema=dict(zip(COLUMNS, _TYPES)))
    con.register("_rows", frame.to_arrow())
    con.execute("CREATE OR REPLACE TABLE lines AS SELECT * FROM _rows")
    con.unregister("_rows")
    n = con.execute("SELECT count(*) FROM lines").fetchone()[0]
    return con, n


def main(argv: list[str] | None = None) -> int:
    paths = (argv if argv is not None else sys.argv[1:]) or [os.getcwd()]
    t = time.perf_counter()
    con, n = parse(paths)
    elapsed = time.perf_counter() - t
    kinds = con.execute("SELECT kind, count(*) FROM lines GROUP BY kind ORDER BY 2 DESC").fetchall()
    print(f"{n} rows in {elapsed:.3f} s; " + ", ".join(f"{k} {c}" for k, c in kinds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
