"""The cache of parsed runs (postmortem.analyzer.cache): a second analysis of the same inputs reads the
cached store instead of parsing, and gives the same findings; any change to an input, or
--no-cache, parses again; a damaged entry is a miss, not an error."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from postmortem.analyzer import cache
from postmortem.analyzer.pipeline import analyze
from postmortem.rules.base import Options
from postmortem.rules.report import build_report
from tests.conftest import ROOT

SAMPLE = ROOT / "sample_logs" / "slow-ring"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("POSTMORTEM_CACHE", "on")
    monkeypatch.setenv("POSTMORTEM_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _findings(run) -> list[tuple]:
    report = build_report(run)
    return [(f["code"], f["severity"], f["ranks"], f["nodes"], f["title"]) for f in report["findings"]], report


def test_a_second_analysis_reads_the_cache_and_finds_the_same(cache_dir, tmp_path):
    job = tmp_path / "job"
    shutil.copytree(SAMPLE, job)
    first = analyze([job])
    assert "parse_s" in first.timings and len(cache.entries(cache_dir)) == 1
    want, first_report = _findings(first)
    second = analyze([job])
    assert second.timings.get("cache") == "hit"
    got, second_report = _findings(second)
    assert got == want
    assert second_report["verdict"] == first_report["verdict"]
    assert second_report["inputs"]["totals"] == first_report["inputs"]["totals"]
    assert second.info == json.loads(json.dumps(first.info, default=str))
    without = analyze([job], use_cache=False)
    assert "parse_s" in without.timings and _findings(without)[0] == want


def test_a_changed_input_parses_again(cache_dir, tmp_path):
    job = tmp_path / "job"
    shutil.copytree(SAMPLE, job)
    analyze([job])
    log = next(p for p in sorted(job.rglob("*.log")) if p.stat().st_size)
    with open(log, "a") as handle:
        handle.write("one more line\n")
    again = analyze([job])
    assert "parse_s" in again.timings  # a miss
    assert again.frame("SELECT sum(lines) AS n FROM inputs")["n"][0] == \
        analyze([job], use_cache=False).frame("SELECT sum(lines) AS n FROM inputs")["n"][0]
    assert len(cache.entries(cache_dir)) == 2


def test_a_damaged_entry_is_a_miss(cache_dir, tmp_path):
    job = tmp_path / "job"
    shutil.copytree(SAMPLE, job)
    analyze([job])
    for entry in cache.entries(cache_dir):
        for damaged in entry.glob("*.parquet") if entry.is_dir() else [entry]:
            damaged.write_bytes(b"not a database")
    run = analyze([job])
    assert "parse_s" in run.timings and _findings(run)[0]


@pytest.mark.parametrize("sendfile", ["whole", "in pieces", "refused", "missing"])
def test_a_copy_is_byte_for_byte_however_the_kernel_copies(tmp_path, monkeypatch, sendfile):
    """Entries are copied by ``sendfile`` where the kernel does it, which may send less than
    asked, refuse these files (another OS: the rest goes through Python) or not exist at all."""
    import os

    source = tmp_path / "entry.duckdb"
    source.write_bytes(os.urandom(3 << 20) + b"end")
    real = os.sendfile
    if sendfile == "in pieces":
        monkeypatch.setattr(os, "sendfile", lambda out, src, offset, count: real(out, src, offset, min(count, 4099)))
    elif sendfile == "refused":
        monkeypatch.setattr(os, "sendfile", lambda *a: (_ for _ in ()).throw(OSError(22, "Invalid argument")))
    elif sendfile == "missing":
        monkeypatch.delattr(os, "sendfile")
    expected = cache._digest_file(source)
    assert cache._copy_checked(source, tmp_path / "copy", expected)
    assert (tmp_path / "copy").read_bytes() == source.read_bytes()
    assert cache._copy_checked(source, tmp_path / "unchecked", None)
    assert (tmp_path / "unchecked").read_bytes() == source.read_bytes()
    assert not cache._copy_checked(source, tmp_path / "wrong", "0" * 64)
    assert not (tmp_path / "wrong").exists()


def test_the_store_file_of_a_hit_is_a_full_store(cache_dir, tmp_path):
    job = tmp_path / "job"
    shutil.copytree(SAMPLE, job)
    analyze([job])
    db = tmp_path / "again.duckdb"
    run = analyze([job], db_path=db)
    assert run.timings.get("cache") == "hit"
    build_report(run)
    run.con.close()
    done = subprocess.run([sys.executable, "-m", "postmortem.cli", "query", "--db", str(db),
                           "SELECT count(*) AS n FROM findings", "--format", "json"], capture_output=True, text=True)
    assert json.loads(done.stdout)[0]["n"] > 0


def _stored(con, names=None) -> dict[str, tuple]:
    """Each table's (or view's) columns with their DuckDB types, and its rows in the order a
    ``SELECT *`` gives them."""
    columns = {}
    for table, column, dtype in con.execute(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE schema_name = 'main' "
            "AND database_name = current_database() ORDER BY table_name, column_index").fetchall():
        columns.setdefault(table, []).append((column, dtype))
    return {name: (cols, con.execute(f'SELECT * FROM "{name}"').fetchall()) for name, cols in columns.items()
            if names is None or name in names}


def test_an_in_memory_store_is_kept_as_parquet_and_a_hit_is_the_same_store(cache_dir, tmp_path):
    """An in-memory store's entry is its tables' frames as Parquet files; a hit reads them
    through views that give every table's columns, DuckDB types and rows as the store had them
    (and the frames kept as read, ``Run.kept``, as a query gives them), also once the store is
    locked down, when SQL may read no other file."""
    import duckdb

    from postmortem.analyzer.store import lock_down

    job = tmp_path / "job"
    shutil.copytree(SAMPLE, job)
    first = analyze([job])
    (entry,) = cache.entries(cache_dir)
    assert entry.is_dir() and entry.suffix == ".store"
    want = _stored(first.con)
    hit = analyze([job])
    assert hit.timings.get("cache") == "hit" and _stored(hit.con) == want
    assert hit.stored_frames and set(hit.stored_frames) <= set(want)
    for name in want:
        assert hit.table(name).equals(hit.frame(f'SELECT * FROM "{name}"'))
    lock_down(hit.con)
    assert hit.con.execute("SELECT count(*) FROM lines").fetchone()[0] == len(want["lines"][1])
    with pytest.raises(duckdb.PermissionException):
        hit.con.execute("SELECT * FROM read_csv('/etc/passwd')")


def test_a_large_run_without_a_store_file_keeps_its_tables_as_parquet_views(cache_dir, tmp_path, monkeypatch):
    """A run over ``store.SPILL_BYTES`` with no ``--db``: each table is a Parquet file and a view
    with the columns, types and rows an in-memory store's table has, also once locked down; the
    same findings; its cache entry copies the files, and a hit is the same store again."""
    from postmortem.analyzer import store

    job = tmp_path / "job"
    shutil.copytree(SAMPLE, job)
    plain = analyze([job], use_cache=False)
    want, want_findings = _stored(plain.con), _findings(plain)[0]
    monkeypatch.setattr(store, "SPILL_BYTES", 0)
    run = analyze([job])
    views = run.con.execute("SELECT count(*) FROM duckdb_views() WHERE NOT internal").fetchone()[0]
    assert views == len(want) and _stored(run.con) == want and run.stored_frames
    for name in run.stored_frames:
        assert run.table(name).equals(run.frame(f'SELECT * FROM "{name}"'))
    store.lock_down(run.con)
    assert run.con.execute("SELECT count(*) FROM lines").fetchone()[0] == len(want["lines"][1])
    assert _findings(run)[0] == want_findings
    (entry,) = cache.entries(cache_dir)
    assert entry.suffix == ".store"
    hit = analyze([job])
    assert hit.timings.get("cache") == "hit" and _stored(hit.con) == want


def test_a_hit_with_a_db_path_writes_the_tables_into_that_file(cache_dir, tmp_path):
    job = tmp_path / "job"
    shutil.copytree(SAMPLE, job)
    want = _stored(analyze([job]).con)
    run = analyze([job], db_path=tmp_path / "kept.duckdb")
    assert run.timings.get("cache") == "hit" and not run.stored_frames
    assert _stored(run.con) == want
    assert not run.con.execute("SELECT count(*) FROM duckdb_views() WHERE NOT internal").fetchone()[0]


def test_a_manifest_that_names_no_type_is_a_miss(cache_dir, tmp_path):
    """A column type in the manifest goes into SQL unquoted: anything but a type's shape is a
    damaged entry, even where the entry's checksums were made to agree."""
    job = tmp_path / "job"
    shutil.copytree(SAMPLE, job)
    analyze([job])
    (entry,) = cache.entries(cache_dir)
    manifest = json.loads((entry / "manifest.json").read_text())
    manifest["tables"][0]["columns"][0][1] = "VARCHAR); DROP TABLE ranks; --"
    (entry / "manifest.json").write_text(json.dumps(manifest))
    sums = json.loads((entry / "sha256.json").read_text())
    sums["manifest.json"] = cache._digest_file(entry / "manifest.json")
    (entry / "sha256.json").write_text(json.dumps(sums))
    run = analyze([job])
    assert "parse_s" in run.timings and _findings(run)[0]


def test_only_a_store_whose_frames_are_every_table_is_kept_as_parquet():
    """A store with a view (a COLL-traced run's bulk), a table the frames lack or a column of
    another order is copied by DuckDB; an entry written later keeps its frames only where they
    fit in the held share of the budget."""
    import duckdb
    import polars as pl

    frames = {"a": pl.DataFrame({"x": [1, 2], "y": ["p", None]}), "b": pl.DataFrame({"z": [True]})}
    con = duckdb.connect()
    for name, frame in frames.items():
        con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM frame')
    assert cache._parquet_columns(con, frames, held=False) == {"a": [("x", "BIGINT"), ("y", "VARCHAR")],
                                                                "b": [("z", "BOOLEAN")]}
    assert cache._parquet_columns(con, None, held=False) is None
    assert cache._parquet_columns(con, {"a": frames["a"]}, held=False) is None
    assert cache._parquet_columns(con, {**frames, "a": frames["a"].select("y", "x")}, held=False) is None
    con.execute("CREATE VIEW v AS SELECT * FROM a")
    assert cache._parquet_columns(con, frames, held=False) is None


def test_a_store_of_views_over_files_that_no_entry_can_hold_is_not_cached(cache_dir, tmp_path, monkeypatch):
    """A large run's tables are views over this process's own Parquet files: where its entry
    cannot be those files (a column of a type the manifest may not hold), a DuckDB copy of the
    store would hold views of files gone with the process. No entry is written; the next run
    parses again."""
    from postmortem.analyzer import store

    monkeypatch.setattr(store, "SPILL_BYTES", 0)
    monkeypatch.setattr(cache, "_TYPE", cache.re.compile("NO TYPE"))
    job = tmp_path / "job"
    shutil.copytree(SAMPLE, job)
    run = analyze([job])
    assert not cache.entries(cache_dir) and _findings(run)[0]
    assert "parse_s" in analyze([job]).timings


def test_no_cache_flag_and_environment_turn_it_off(cache_dir, tmp_path, monkeypatch):
    job = tmp_path / "job"
    shutil.copytree(SAMPLE, job)
    done = subprocess.run([sys.executable, "-m", "postmortem.cli", "report", str(job), "--quiet", "--no-cache",
                           "--format", "json"], capture_output=True, text=True)
    assert done.returncode in (0, 1) and not cache_dir.exists()
    monkeypatch.setenv("POSTMORTEM_CACHE", "off")
    analyze([job])
    assert not cache_dir.exists() and not cache.enabled()


def _rendered(report: dict, run) -> dict[str, str]:
    from postmortem.html_report import html_report
    from postmortem.views.render import markdown_report, text_report
    from postmortem.rules.report import to_json

    plain = {**report, "timings": {}}
    return {"text": text_report(plain), "md": markdown_report(plain), "json": to_json(plain),
            "html": html_report(plain, run)}


def _findings_table(run) -> list[tuple]:
    return run.con.execute("SELECT * FROM findings ORDER BY id").fetchall()


def test_a_second_report_on_the_same_store_is_the_cached_one(cache_dir, tmp_path):
    job = tmp_path / "job"
    shutil.copytree(SAMPLE, job)
    first = analyze([job])
    fresh = build_report(first)
    want, want_rows = _rendered(fresh, first), _findings_table(first)
    assert len(list(cache_dir.glob("*.report"))) == 1
    second = analyze([job])
    again = build_report(second)
    assert again["timings"].get("report") == "cached" and again["timings"].get("cache") == "hit"
    assert _rendered(again, second) == want            # every format, byte for byte
    assert _findings_table(second) == want_rows          # the store's findings table too
    assert second.con.execute("SELECT count(*) FROM report").fetchone()[0] == 1


def test_a_cached_report_gives_its_times_back_as_times(cache_dir, real_logs):
    """An outcome sign's time is a datetime in the report: JSON writes it `2026-10-19T01:04:03`,
    Markdown `2026-10-19 01:04:03`. The cached report gave it back as text, and its JSON then
    said `2026-10-19 01:04:03`."""
    log = real_logs / "torch" / "sglang-issue-1691-heartbeat-monitor-timeout.log"
    first = analyze([log])
    fresh = build_report(first)
    assert "datetime.datetime(" in repr(fresh)
    want = _rendered(fresh, first)
    second = analyze([log])
    again = build_report(second)
    assert again["timings"].get("report") == "cached" and _rendered(again, second) == want


def test_other_options_or_other_rules_run_the_rules_again(cache_dir, tmp_path, monkeypatch):
    job = tmp_path / "job"
    shutil.copytree(SAMPLE, job)
    build_report(analyze([job]))
    other = analyze([job])
    assert "report" not in build_report(other, Options(gpu="A100-80GB"))["timings"]   # report --gpu A100-80GB
    assert len(list(cache_dir.glob("*.report"))) == 2
    monkeypatch.setattr(cache, "rules_version", lambda: "a changed rule")
    assert "report" not in build_report(analyze([job]))["timings"]


def test_a_damaged_report_entry_runs_the_rules_again(cache_dir, tmp_path):
    job = tmp_path / "job"
    shutil.copytree(SAMPLE, job)
    want = _findings(analyze([job]))[0]
    for entry in cache_dir.glob("*.report"):
        (entry / "findings.parquet").write_bytes(b"not parquet")
    run = analyze([job])
    got, report = _findings(run)
    assert got == want and "report" not in report["timings"]
    assert len(_findings_table(run)) == len(want)


def test_a_cached_report_follows_the_schema(cache_dir, tmp_path):
    import jsonschema

    job = tmp_path / "job"
    shutil.copytree(SAMPLE, job)
    build_report(analyze([job]))
    again = json.loads(json.dumps(build_report(analyze([job])), default=str))
    assert again["timings"]["report"] == "cached"
    schema = json.loads((ROOT / "docs" / "report.schema.json").read_text())
    assert not list(jsonschema.Draft202012Validator(schema).iter_errors(again))


def _entry_tables(cache_dir) -> dict[str, int]:
    import duckdb
    import polars as pl

    (entry,) = cache.entries(cache_dir)
    if entry.is_dir():
        manifest = json.loads((entry / "manifest.json").read_text())
        return {t["name"]: pl.scan_parquet([entry / f for f in t["files"]]).select(pl.len()).collect().item()
                for t in manifest["tables"]}
    with duckdb.connect(str(entry), read_only=True) as con:
        names = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall()]
        return {name: con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0] for name in names}


def test_an_entry_written_while_the_report_runs_is_the_entry_written_before_it(cache_dir, tmp_path):
    """``background_cache``: the rows are copied by a thread while the rules run and write their
    own tables; the entry holds what the analysis wrote, as the entry written at once does."""
    job = tmp_path / "job"
    shutil.copytree(SAMPLE, job)
    at_once = analyze([job])
    assert at_once.pending_cache is None
    want = _entry_tables(cache_dir)
    shutil.rmtree(cache_dir)
    beside = analyze([job], background_cache=True)
    assert beside.pending_cache is not None
    report = build_report(beside)
    beside.cache_written()
    assert beside.pending_cache is None
    assert _entry_tables(cache_dir) == want and "findings" not in want
    again = analyze([job])
    assert again.timings.get("cache") == "hit"
    assert _findings(again)[1]["findings"] == report["findings"]


def test_a_store_on_disk_is_copied_into_the_cache_at_once(cache_dir, tmp_path):
    """Its file must not change while it is read: no thread."""
    run = analyze([SAMPLE], db_path=tmp_path / "store.duckdb", background_cache=True)
    assert run.pending_cache is None and [e.suffix for e in cache.entries(cache_dir)] == [".duckdb"]


def test_an_entry_that_cannot_be_written_in_the_background_is_no_error(cache_dir, tmp_path, monkeypatch):
    def refuse(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(cache, "_digest_file", refuse)
    run = analyze([SAMPLE], background_cache=True)
    assert run.pending_cache is not None
    run.cache_written()
    assert not cache.entries(cache_dir) and not list(cache_dir.glob(".*part*"))
    assert build_report(run)["findings"]


def test_an_entry_started_later_is_written_after_the_store_is_locked_down(cache_dir, tmp_path):
    """``start_cache=False`` (the TUI: the entry is written once its first screen is up): nothing
    is written until the thread starts; it then runs on a store already locked down (its file
    was attached before) and gives the entry an at-once analysis gives."""
    from postmortem.analyzer.store import lock_down

    job = tmp_path / "job"
    shutil.copytree(SAMPLE, job)
    analyze([job])
    want = _entry_tables(cache_dir)
    shutil.rmtree(cache_dir)
    later = analyze([job], background_cache=True, start_cache=False)
    assert later.pending_cache is not None and later.pending_cache.ident is None
    build_report(later)
    lock_down(later.con)
    assert not cache.entries(cache_dir)
    later.start_cache()
    later.start_cache()     # once only
    later.cache_written()
    assert later.pending_cache is None
    assert _entry_tables(cache_dir) == want
    assert analyze([job]).timings.get("cache") == "hit"


def test_an_entry_never_started_is_written_when_waited_for(cache_dir):
    run = analyze([SAMPLE], background_cache=True, start_cache=False)
    run.cache_written()     # starts it, then waits
    assert len(cache.entries(cache_dir)) == 1
