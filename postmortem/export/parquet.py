"""The Parquet export: every store table in a hive layout,
``OUT/job=<id>/table=<name>/part-0.parquet``."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from postmortem.export.common import ExportError
from postmortem.views import timeline


def safe_partition_value(value: str) -> str:
    """A job id usable as a hive partition value (no '/', '=', spaces, leading dots)."""
    text = re.sub(r"[^A-Za-z0-9._+-]", "_", str(value)).lstrip(".")
    return text[:200] or "job"


MARKER = "_postmortem.json"


def parquet(con, out: str | Path, job: str | None = None, store_path: str | None = None,
            replace: bool = False, messages: list[str] | None = None) -> dict:
    """Every store table (but ``store.INTERNAL``) -> ``OUT/job=<id>/table=<name>/part-0.parquet``.

    Only this job's partition is written: an existing ``job=<id>`` written from the same
    store is replaced; one written from another store is left alone (ExportError) unless
    ``replace``. Returns ``{"job": id, "dir": path, "tables": {name: rows}}``."""
    from postmortem.analyzer.store import INTERNAL, tables

    messages = messages if messages is not None else []
    source = "--job"
    if job is None:
        job, source = timeline.job_id(timeline.Store(con)), "the store's job table / Slurm lines"
    if job is None and store_path:
        job, source = Path(store_path).stem, "the store file's name (no job id in the store)"
    if job is None:
        raise ExportError("no job id in the store; give --job ID")
    value = safe_partition_value(job)
    if value != job:
        messages.append(f"job id {job!r} written as job={value} (characters a partition path cannot hold replaced)")
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"job={value}"
    origin = str(Path(store_path).resolve()) if store_path else None
    if final.exists():
        marker = final / MARKER
        previous = None
        if marker.exists():
            try:
                previous = json.loads(marker.read_text(encoding="utf-8")).get("store")
            except (OSError, ValueError):
                previous = None
        if previous != origin and not replace:
            raise ExportError(f"{final} already holds {'an export of ' + previous if previous else 'data'} "
                              f"not written from this store; give --job to name this job differently, or "
                              f"--replace to overwrite it")
        messages.append(f"replacing the existing partition {final}")
    tmp = root / f".job={value}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    counts = {}
    try:
        for name in tables(con):
            if name in INTERNAL:
                continue
            target = tmp / f"table={name}"
            target.mkdir()
            path = str(target / "part-0.parquet").replace("'", "''")
            con.execute(f"COPY (SELECT * FROM \"{name}\") TO '{path}' (FORMAT parquet, COMPRESSION zstd)")
            counts[name] = con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0]
        (tmp / MARKER).write_text(json.dumps({"job": job, "job_source": source, "store": origin,
                                              "tables": counts}, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return {"job": job, "job_source": source, "dir": str(final), "tables": counts}
