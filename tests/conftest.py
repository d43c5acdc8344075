from __future__ import annotations

import atexit
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

# Tests parse for real: a cached run (postmortem.analyzer.cache) would hide what a change to a parser does.
# tests/test_cache.py turns it on with its own folder.
os.environ["POSTMORTEM_CACHE"] = "off"

# Under pytest-xdist every core already runs a worker: a Polars pool of its own per worker only
# oversubscribes them (the suite's tests hand Polars small frames). One thread per core left to
# each worker took a pair of modules from 49.7 to 44.0 s on the 2-core CI machine. Set before
# any test module imports Polars; a value given in the environment is kept.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("POLARS_MAX_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))


def _bytecode_outside_the_sources() -> None:
    """Where the environment forbids bytecode beside the sources (``PYTHONDONTWRITEBYTECODE``,
    as some CI images set), every process the suite starts (the xdist workers, each CLI run
    under test, worker processes) would compile the project again: a clean clone's suite spent
    about 10% more CPU on the modules that run the CLI. The suite's processes write it to a
    private folder of this run instead (``PYTHONPYCACHEPREFIX``), never beside the sources, and
    the folder goes when the run ends."""
    if not sys.dont_write_bytecode or os.environ.get("PYTHONPYCACHEPREFIX") or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    prefix = tempfile.mkdtemp(prefix="postmortem-tests-pycache-")
    atexit.register(shutil.rmtree, prefix, ignore_errors=True)
    _link_installed_bytecode(prefix)
    os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix = prefix
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


# Standard-library folders the suite never imports from: 1,074 of its 1,761 bytecode files here.
# Its site-packages is linked only where it is this environment's (sysconfig's purelib).
_STDLIB_UNUSED = {"site-packages", "dist-packages", "test", "idlelib", "tkinter", "lib2to3", "turtledemo", "ensurepip"}


def _link_installed_bytecode(prefix: str) -> None:
    """A cache prefix hides the ``__pycache__`` folders that are already there, so each worker
    would compile the standard library and every installed package again: about 4 s of CPU per
    worker, three at once at the start (the suite's start took 20 s instead of 13). The folder
    is seeded with links to that bytecode instead: Python checks a linked file against its
    source as it would in place, and writes a new one by renaming a fresh file over the link,
    never into the file it points to."""
    paths = sysconfig.get_paths()
    tag = f".{sys.implementation.cache_tag}.pyc"
    for root in {paths["stdlib"], paths["purelib"], paths["platlib"]}:
        for folder, subfolders, names in os.walk(root):
            if folder == paths["stdlib"]:
                subfolders[:] = [s for s in subfolders if s not in _STDLIB_UNUSED]
            if os.path.basename(folder) != "__pycache__":
                continue
            compiled = [name for name in names if name.endswith(tag)]
            mirror = prefix + os.path.dirname(os.path.abspath(folder))
            os.makedirs(mirror, exist_ok=True)
            for name in compiled:
                _link(os.path.join(folder, name), os.path.join(mirror, name))


def _link(source: str, link: str) -> None:
    """A hard link where it can be (0.02 ms here, a symbolic one 0.3 ms: thousands are made
    before the workers start); else a symbolic one; else nothing, and that module is compiled."""
    for make in (os.link, os.symlink):
        try:
            make(source, link)
            return
        except OSError:     # another file system, or a file this user may not link
            continue


_bytecode_outside_the_sources()


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: a worker more than the cores. The TUI's tests wait for screens and the CLI's for
    their subprocesses; the extra worker fills those waits (2 cores: 425 s with 2 workers, 402 s
    with 3)."""
    return (os.cpu_count() or 1) + 1


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
            from postmortem.analyzer.pipeline import analyze
            from postmortem.rules.report import build_report

            path = tmp_path_factory.mktemp("stores") / f"{sample}.duckdb"
            run = analyze([ROOT / "sample_logs" / sample], db_path=path)
            build_report(run)
            run.con.close()
            made[sample] = path
        return made[sample]
    return store


@pytest.fixture
def shared_cache(tmp_path_factory, monkeypatch):
    """The run cache on, in one folder for the whole session (every xdist worker's), for the
    sweeps that each analyse every sample and corpus case and only read what they get (the
    samples' expected findings, the corpus truths, no report saying None, never healthy on a
    failure). The first sweep to reach a folder parses it for real; the others load its store
    and report, which tests/test_scale_ingest.py and tests/test_cache.py hold to a fresh parse."""
    from postmortem.analyzer import cache

    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-run-cache"
    monkeypatch.setenv("POSTMORTEM_CACHE", "on")
    monkeypatch.setenv("POSTMORTEM_CACHE_DIR", str(folder))
    monkeypatch.setattr(cache, "KEEP", 10_000)    # every folder's entry, not the 10 newest
    return folder


@pytest.fixture
def snap_compare(snap_compare, request):
    """pytest-textual-snapshot's ``snap_compare``, which on a mismatch also says what differs as
    a diff of the screen's text: its HTML report stays on the machine that ran the tests (CI's),
    the assertion message does not."""
    import difflib
    import pickle

    from pytest_textual_snapshot import node_to_report_path

    from tests.tui_helpers import svg_screen_lines

    def compare(*args, **kwargs) -> bool:
        if snap_compare(*args, **kwargs):
            return True
        # The plugin's own record of this comparison, written by this process a moment ago.
        record = pickle.loads(node_to_report_path(request.node).read_bytes())
        expected, actual = svg_screen_lines(str(record[1])), svg_screen_lines(record[2])
        diff = "\n".join(difflib.unified_diff(expected, actual, "snapshot", "now", lineterm=""))
        raise AssertionError("the screen differs from its snapshot"
                             + (f" in its text:\n{diff}" if diff else " in colour or style only"))
    return compare
