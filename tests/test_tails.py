"""A live hang's logs grow between two analyses: the second one re-parses only their tails
(postmortem.analyzer.tails) and must give exactly what a full parse of the grown files gives."""

from __future__ import annotations

import shutil

import pytest

from postmortem.analyzer import cache, tails
from postmortem.analyzer.pipeline import analyze
from postmortem.generator import RunSpec, generate_run
from tests.conftest import ROOT
from tests.test_scale_ingest import differing, store_of

DEADLOCK = ROOT / "sample_logs" / "silent-deadlock-40r"


@pytest.fixture
def cached(tmp_path, monkeypatch):
    monkeypatch.setenv("POSTMORTEM_CACHE", "on")
    monkeypatch.setenv("POSTMORTEM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tails, "BACK_OFF", 25)   # small logs: re-read from well inside them
    return tmp_path


def grow(path, lines: int = 40) -> None:
    """Append the file's own last ``lines`` lines again (a hang keeps printing the same kinds)."""
    text = path.read_text()
    tail = "".join(text.splitlines(keepends=True)[-lines:])
    with open(path, "a") as handle:
        handle.write(tail if text.endswith("\n") else "\n" + tail)


def biggest_logs(job, n):
    return sorted(job.rglob("*.log"), key=lambda p: p.stat().st_size, reverse=True)[:n]


def test_grown_logs_are_read_from_their_tails_and_give_the_full_result(cached):
    job = cached / "job"
    shutil.copytree(DEADLOCK, job)
    first = analyze([job])
    assert "cache" not in first.timings
    (entry,) = (cached / "cache").glob("*.parsed")
    # the frames compressed (LZ4): a run's parse entry is a few times smaller than its logs
    assert sum(f.stat().st_size for f in entry.glob("*.arrow")) < sum(f.stat().st_size for f in job.rglob("*") if f.is_file())
    for path in biggest_logs(job, 3):
        grow(path)
    again = analyze([job])
    assert again.timings.get("cache") == "tails" and again.timings["tail_inputs"] == 3, again.timings
    assert again.timings["tail_bytes"] < sum(p.stat().st_size for p in biggest_logs(job, 3))
    tailed = store_of([job])       # the same analysis again: now a store-cache hit of the tailed result
    full = store_of([job], use_cache=False)
    assert not differing(tailed[0], full[0])
    assert tailed[1] == full[1] and tailed[2] == full[2]


def test_a_coll_traced_log_and_a_torn_last_line(cached):
    job = cached / "coll"
    generate_run(job, RunSpec(nodes=1, gpus_per_node=4, culprit=2, iterations_before_hang=3,
                              nccl_subsys="INIT,ENV,COLL", coll_trace=True, work_updates=True))
    log = biggest_logs(job, 1)[0]
    data = log.read_bytes()
    cut = data.rfind(b"\n", 0, len(data) - 10) + 20     # the file ends in the middle of a line
    log.write_bytes(data[:cut])
    analyze([job])
    with open(log, "ab") as handle:
        handle.write(data[cut:])                         # the rest of that line, and more
    grow(log, 120)
    again = analyze([job])
    assert again.timings.get("cache") == "tails", again.timings
    tailed, full = store_of([job]), store_of([job], use_cache=False)
    assert not differing(tailed[0], full[0])
    assert tailed[1] == full[1] and tailed[2] == full[2]


def test_a_rewritten_or_shrunk_file_is_parsed_again_whole(cached):
    job = cached / "job"
    shutil.copytree(DEADLOCK, job)
    analyze([job])
    path = biggest_logs(job, 1)[0]
    text = path.read_text()
    path.write_text(text.replace("NCCL", "nccl", 1) + "one more line\n")   # grown, but not only grown
    again = analyze([job])
    assert "cache" not in again.timings
    path.write_text(text[: len(text) // 2])
    assert "cache" not in analyze([job]).timings


def test_a_damaged_parse_entry_costs_a_full_parse_not_the_report(cached):
    job = cached / "job"
    shutil.copytree(DEADLOCK, job)
    analyze([job])
    grow(biggest_logs(job, 1)[0])
    for entry in (cached / "cache").glob("*.parsed"):
        (entry / "lines.arrow").write_bytes(b"not arrow")
    again = analyze([job])
    assert "cache" not in again.timings
    assert store_of([job], use_cache=False)[1] == store_of([job])[1]


def test_the_ui_writes_its_parse_entry_after_its_first_screen(cached, monkeypatch):
    """``analyze(background_cache=True, start_cache=False)`` (the TUI) holds the parse entry
    back until ``Run.start_cache``, with the cache entry, when the parsed frames are small
    beside the budget; larger ones are written while the models run, as before."""
    from postmortem.analyzer import budget

    job = cached / "job"
    shutil.copytree(DEADLOCK, job)
    run = analyze([job], background_cache=True, start_cache=False)
    assert not list((cached / "cache").glob("*.parsed")) and not cache.entries(cached / "cache")
    run.start_cache()
    run.cache_written()
    assert len(list((cached / "cache").glob("*.parsed"))) == 1 and len(cache.entries(cached / "cache")) == 1
    grow(biggest_logs(job, 1)[0])
    again = analyze([job])
    assert again.timings.get("cache") == "tails", again.timings     # the entry it wrote is used

    shutil.rmtree(cached / "cache")
    monkeypatch.setattr(budget, "held_tables_bytes", lambda: 0)     # frames too large to hold
    run = analyze([job], background_cache=True, start_cache=False)
    assert len(list((cached / "cache").glob("*.parsed"))) == 1 and not cache.entries(cached / "cache")
    run.cache_written()
