from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "real-data" / "logs"


@pytest.fixture
def real_logs() -> Path:
    if not REAL.is_dir():
        pytest.skip("../shared/real-data/logs is not present")
    return REAL
