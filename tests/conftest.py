from __future__ import annotations

import os
from pathlib import Path

import pytest

# Tests parse for real: a cached run (analyzer.cache) would hide what a change to a parser does.
# tests/test_cache.py turns it on with its own folder.
os.environ["POSTMORTEM_CACHE"] = "off"

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "real-data" / "logs"


@pytest.fixture
def real_logs() -> Path:
    if not REAL.is_dir():
        pytest.skip("../shared/real-data/logs is not present")
    return REAL


@pytest.fixture(scope="session")
def sample_store(tmp_path_factory):
    """``sample_store("silent-deadlock-40r")`` -> the path of a store of that sample, written by
    ``postmortem ingest`` once per test process (the TUI tests open it read-only)."""
    made: dict[str, Path] = {}

    def store(sample: str) -> Path:
        if sample not in made:
            from analyzer.pipeline import analyze
            from analyzer.report import build_report

            path = tmp_path_factory.mktemp("stores") / f"{sample}.duckdb"
            run = analyze([ROOT / "sample_logs" / sample], db_path=path)
            build_report(run)
            run.con.close()
            made[sample] = path
        return made[sample]
    return store
