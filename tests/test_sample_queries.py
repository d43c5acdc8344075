"""`postmortem query` answers the everyday questions on the bundled sample (issues 4 and 5).

The sample holds per-rank logs, env dumps, collect_env, pip freeze, the sbatch script,
nvidia-smi topo/CSV, nccl-tests, kernel logs, nvidia-smi -q, sacct and scontrol output
(sample_logs/silent-deadlock-40r/README.md).
"""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from postmortem.cli import main

SAMPLE = Path(__file__).resolve().parents[1] / "sample_logs" / "silent-deadlock-40r"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("q") / "sample.duckdb"
    assert main(["ingest", str(SAMPLE), "--db", str(path), "--quiet"]) == 0
    return str(path)


def query(db: str, sql: str) -> list[dict]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["query", "--db", db, sql, "--format", "json"]) == 0
    return json.loads(buf.getvalue())


def test_last_iteration_and_time_per_rank(db):
    rows = query(db, "SELECT rank, max(iteration) AS last, max(ts) AS at FROM iterations GROUP BY rank")
    # Megatron prints iteration lines on the last pipeline stage's last rank.
    assert rows == [{"rank": 39, "last": 40, "at": rows[0]["at"]}] and rows[0]["at"].startswith("2026-07-24")


def test_peak_memory_per_rank_in_mib(db):
    rows = query(db, "SELECT rank, max(coalesce(max_allocated_mib, allocated_mib)) AS peak FROM memory GROUP BY rank")
    assert rows and all(r["peak"] > 1000 for r in rows)


def test_parallel_layout(db):
    rows = query(db, "SELECT DISTINCT key, value FROM job_config WHERE key IN ('tp', 'pp', 'ep', 'dp', 'world_size')")
    layout = {r["key"]: r["value"] for r in rows}
    assert layout == {"tp": "1", "pp": "1", "ep": "8", "dp": "40", "world_size": "40"}


def test_must_match_variables_that_differ_between_nodes(db):
    rows = query(db, "SELECT key FROM env_diff WHERE class = 'must_match' AND differs")
    assert rows == []  # the sample's nodes agree; the column exists and is computed
    assert query(db, "SELECT count(*) AS n FROM env_diff WHERE class = 'must_match'")[0]["n"] > 0


def test_gpu_model_and_link_matrix(db):
    assert query(db, "SELECT DISTINCT name FROM gpus WHERE name IS NOT NULL") == [{"name": "NVIDIA H20"}]
    links = query(db, "SELECT DISTINCT link FROM topology WHERE matrix = 'topo' AND \"from\" LIKE 'GPU%' "
                      "AND \"to\" LIKE 'GPU%' AND \"from\" <> \"to\"")
    assert [r["link"] for r in links] == ["NV18"]


def test_busbw_per_size(db):
    rows = query(db, "SELECT size_bytes, oop_busbw_gbs FROM bench_results ORDER BY size_bytes")
    assert len(rows) > 5 and rows[-1]["oop_busbw_gbs"] > rows[0]["oop_busbw_gbs"]


def test_expected_nodes_and_which_left_no_log(db):
    rows = query(db, "SELECT DISTINCT node, has_logs FROM job_nodes ORDER BY node")
    assert [r["node"] for r in rows] == [f"h20-node-0{i}" for i in range(1, 6)]
    assert all(r["has_logs"] for r in rows)
