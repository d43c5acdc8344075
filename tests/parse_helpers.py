"""Helpers the parser tests share."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import polars as pl

from postmortem.parsers.lines import ENVELOPE_SCHEMA, decode_lines, envelope

REAL = Path(__file__).resolve().parents[2] / "shared" / "real-data" / "logs"


@lru_cache(maxsize=None)
def _env(data: bytes) -> pl.DataFrame:
    return envelope(data)


def bare(data: bytes) -> pl.DataFrame:
    """An envelope-shaped frame without prefix peeling (cheap; for bulk sweeps)."""
    d = decode_lines(data).rename({"raw": "text"})
    if d.is_empty():
        return pl.DataFrame(schema=ENVELOPE_SCHEMA)
    return d.with_columns(
        **{n: pl.lit(None, dtype=t) for n, t in ENVELOPE_SCHEMA.items() if n not in d.columns}
    ).select(list(ENVELOPE_SCHEMA))
