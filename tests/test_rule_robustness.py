"""Every rule survives a damaged store: tables emptied, optional columns missing, NULL in every
column. Stores come from real analysed samples, damaged in their DuckDB tables, and every rule
(``postmortem.rules.RULES``) runs on each attempt with ``rule.check(Context(run, attempt))``: none may raise.

``report.run_rules`` would catch a raising rule and only record it in ``rule_errors``, which is
why the rules are called directly here. A column is "key" (never dropped) when every store has
it: the columns of ``postmortem.analyzer.store.REQUIRED``, the line reference and attribution that
``postmortem.analyzer.identity`` adds to every parser table, the NCCL parser's fixed table schemas, and
every column of the tables the models build (they have no ``parser`` column). Any other column
of a parser table exists only when some row filled it (no event with a time: no ``events.ts``).
Empty tables may hit any table, NULLs any column but the store's plumbing (``PLUMBING``: where
each input is and where each of its lines starts), which the pipeline writes for every row: a
NULL there is a corrupt store, not missing evidence.

Deterministic (derandomize), like tests/test_fuzz_parsers.py: POSTMORTEM_FUZZ_SCALE=N runs N times
the random examples, with fresh randomness, for a longer local hunt.
"""
from __future__ import annotations

import copy
import os
import traceback
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postmortem.analyzer.pipeline import Run, analyze
from postmortem.analyzer.store import REQUIRED, sql_path
from postmortem.parsers.nccl import SCHEMAS as NCCL_SCHEMAS
from postmortem.rules import RULES
from postmortem.rules.base import Context

ROOT = Path(__file__).resolve().parents[1]
# Between them: c10d hang evidence, NCCL transports and sockets, Xids and kernel logs, checkpoints
# and Megatron iterations, memory lines, and a real torchrun job with py-spy dumps.
SAMPLES = [ROOT / "sample_logs" / name for name in
           ("silent-deadlock-40r", "slow-ring-sockets", "gpu-fell-off-bus", "checkpoint-stall", "memory-peak")]
SAMPLES += [p for p in [ROOT / "tests" / "corpus" / "skip"] if p.is_dir()]
ATTRIBUTION = {"input_id", "line_no", "parser", "rank", "rank_source", "rank_confidence", "node", "node_source",
               "pid", "attempt", "attempt_source"}
PLUMBING = {"inputs": {"input_id", "path", "abs_path"}, "lines": {"input_id", "line_no", "offset", "length"}}
SCALE = max(1, int(os.environ.get("POSTMORTEM_FUZZ_SCALE", "1") or 1))


class Store:
    """One sample analysed once into a file; ``fresh()`` is an in-memory copy to damage."""

    def __init__(self, sample: Path, folder: Path):
        self.name = sample.name
        self.path = folder / f"{sample.name}.duckdb"
        run = analyze([sample], db_path=self.path)
        self.info = copy.deepcopy(run.info)
        rows = run.con.execute("SELECT table_name, column_name FROM information_schema.columns "
                               "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position").fetchall()
        run.con.close()
        self.columns: dict[str, list[str]] = {}
        for table, column in rows:
            self.columns.setdefault(table, []).append(column)

    def droppable(self, table: str) -> list[str]:
        columns = self.columns[table]
        if "parser" not in columns:  # built by a model with a fixed schema
            return []
        key = ATTRIBUTION | set(REQUIRED.get(table, {})) | (set(NCCL_SCHEMAS.get(table, {})) if
                                                              table.startswith("nccl_") else set())
        return [c for c in columns if c not in key]

    def nullable(self, table: str) -> list[str]:
        return [c for c in self.columns[table] if c not in PLUMBING.get(table, set())]

    def fresh(self) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect()
        con.execute(f"ATTACH '{sql_path(self.path)}' AS src (READ_ONLY)")
        con.execute("COPY FROM DATABASE src TO memory")
        con.execute("DETACH src")
        return con


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Store]:
    folder = tmp_path_factory.mktemp("robust")
    return {s.name: Store(s, folder) for s in SAMPLES}


def damage(con: duckdb.DuckDBPyConnection, mutations: list[tuple[str, str, str | None]]) -> None:
    """Apply ``(op, table, column)``: ``empty`` a table, ``drop`` or ``null`` a column. A column
    an earlier mutation dropped is skipped."""
    for op, table, column in mutations:
        present = {r[0] for r in con.execute("SELECT column_name FROM information_schema.columns "
                                             "WHERE table_name = ?", [table]).fetchall()}
        if op == "empty":
            con.execute(f'DELETE FROM "{table}"')
        elif column in present and op == "drop":
            con.execute(f'ALTER TABLE "{table}" DROP COLUMN "{column}"')
        elif column in present:
            con.execute(f'UPDATE "{table}" SET "{column}" = NULL')


def crashes(store: Store, mutations) -> list[str]:
    """Every rule on every attempt of the damaged store; the failures as readable lines."""
    con = store.fresh()
    damage(con, mutations)
    run = Run(con, copy.deepcopy(store.info))
    failures = []
    for attempt in store.info.get("attempts") or [0]:
        ctx = Context(run, attempt)
        for rule in RULES:
            try:
                rule.check(ctx)
            except Exception as exc:  # noqa: BLE001 -- what the test is looking for
                ours = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(str(ROOT)) and "site-packages" not in f.filename]
                where = f" at {Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else ""
                failures.append(f"{rule.RULE.code}: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}{where}")
    con.close()
    return failures


def _whole_store(store: Store, mode: str) -> list[tuple[str, str, str | None]]:
    if mode == "empty":
        return [("empty", t, None) for t in store.columns]
    if mode == "drop":
        return [("drop", t, c) for t in store.columns for c in store.droppable(t)]
    return [("null", t, c) for t in store.columns for c in store.nullable(t)]


@pytest.mark.parametrize("mode", ["empty", "drop", "null"])
@pytest.mark.parametrize("sample", [s.name for s in SAMPLES])
def test_every_rule_survives_the_whole_store_damaged(stores, sample, mode):
    """Every table empty; every optional column gone; every column NULL (rows kept)."""
    store = stores[sample]
    assert not crashes(store, _whole_store(store, mode)), f"{sample} with every table damaged ({mode})"


@st.composite
def damaged_store(draw, stores: dict[str, Store]):
    """A sample and a few mutations of its tables, any mix of the three kinds."""
    store = stores[draw(st.sampled_from(sorted(stores)))]
    mutations = []
    for _ in range(draw(st.integers(1, 6))):
        table = draw(st.sampled_from(sorted(store.columns)))
        ops = ["empty", "null"] + (["drop"] if store.droppable(table) else [])
        op = draw(st.sampled_from(ops))
        column = None
        if op == "drop":
            column = draw(st.sampled_from(store.droppable(table)))
        elif op == "null":
            column = draw(st.sampled_from(store.nullable(table)))
        mutations.append((op, table, column))
    return store, mutations


@settings(max_examples=30 * SCALE, deadline=None, database=None, derandomize=SCALE == 1,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_rule_survives_random_damage(stores, data):
    store, mutations = data.draw(damaged_store(stores))
    assert not crashes(store, mutations), f"{store.name} damaged by {mutations}"
