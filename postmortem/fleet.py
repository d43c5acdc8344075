"""The fleet view: many jobs' ``report.json`` files -> which nodes, GPUs and NICs keep failing.

Core only (no Textual, no rules): ``postmortem fleet`` (postmortem.cli) and the renderers
(``postmortem.fleet_render``) sit on top of it.

Reading. ``scan`` finds the reports under the PATHs (``report.json`` and ``*.report.json``,
recursively, and the ``report`` table of ``postmortem export parquet`` exports,
``job=<id>/table=report/part-0.parquet``; a file named on the command line is read whatever its
name). Each report becomes
rows of four tables (``report_rows``):

* ``jobs`` -- one row per job: id, outcome, verdict status/category/confidence/sentence, the
  finding codes, start and end time, the nodes it ran on (``run.nodes``), the culprit nodes;
* ``implicated`` -- one row per job x node / GPU / NIC a finding names: ``role`` is ``culprit``
  (the verdict's culprit, ``status = culprit``) or ``implicated`` (another cause-finding, e.g. a
  competing one); GPUs by serial, else UUID, else node + bus id; NICs as node:port;
* ``findings`` -- one row per finding: code, severity, category, culprit, title and its template
  (numbers folded), nodes;
* ``files`` -- one row per report file read: path, size, mtime, job id, status.

The job id is the report's own (``job_id`` / ``job`` / ``run.job_id`` when a report carries
one), else the report's folder name (``table=...`` folders skipped, ``job=`` of a hive layout and ``job-``/``job_`` before a
number stripped: ``job-4242/`` is job 4242; a generic output
folder such as ``postmortem/`` gives its parent's name), else the file's stem.

Storing. With a store folder (``--store``) each ingest batch is one Parquet file per table,
``STORE/table=<name>/batch=<id>/part-0.parquet`` (hive layout: DuckDB, Spark and Trino read it
as one table partitioned by table and batch). The ``files`` table is written last and is the
commit mark: a batch without it is ignored. A report already in the store (same path, size and
mtime) is not read again; a changed one is read into the new batch and supersedes its old rows.
A job id seen twice keeps its newest report (mtime, then batch).

The statistics (``fleet_view``). For every node: jobs run ``n`` (jobs whose ``run.nodes`` or
culprit list names it) and culprit jobs ``k``. The fleet's rate ``p`` is all culprit (node,
job) pairs over all (node, job) pairs. A node's p-value is the one-sided binomial tail
``P(X >= k)`` for ``X ~ Binomial(n, p)`` (``binom_sf``): a node that runs many jobs is
expected to be culprit more often, in proportion, and is not flagged for that. The p-values
of all nodes are corrected for multiple comparisons (Bonferroni by default, or
Benjamini-Hochberg); a node is **flagged** when the corrected p-value is below alpha (0.01)
**and** it was the culprit of at least ``min_jobs`` (3) jobs. GPUs and NICs are tested the same
way, each against its node's jobs, with the fleet's per-device rate (GPU: hardware culprits
over node-job pairs x ``GPUS_PER_NODE``; NIC: network culprits over node-job pairs x
``NICS_PER_NODE``), corrected within their own family. The null assumes the culprit of a
failed job is as likely to be any of its nodes, whatever the job's size; jobs whose size is
tied to a node (a node that only runs one-node jobs) are the known way to fool it.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

SCHEMA = "postmortem.fleet/1"
REPORT_SCHEMA = "postmortem.report/"
TABLES = ("jobs", "implicated", "findings", "files")
GENERIC_DIRS = {"postmortem", "pm", "report", "reports", "out", "output", "analysis", "postmortem-report"}
FAILED_STATUSES = ("culprit", "no-single-culprit", "inconclusive", "undetermined")
GPUS_PER_NODE = 8
NICS_PER_NODE = 8
CORRECTIONS = {"bonferroni": "Bonferroni", "bh": "Benjamini-Hochberg"}
EVIDENCE_JOBS = 50          # jobs listed as evidence per flagged node / GPU / NIC


# -- statistics ----------------------------------------------------------------------------------

def _log_pmf(i: int, n: int, p: float) -> float:
    return (math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
            + i * math.log(p) + (n - i) * math.log1p(-p))


def binom_sf(k: int, n: int, p: float) -> float:
    """``P(X >= k)`` for ``X ~ Binomial(n, p)``, without scipy: the terms from ``k`` on (above the
    mode they only fall, so the sum stops when they no longer count), or 1 minus the terms below
    ``k`` when ``k`` is at or below the mode. Stable for n in the millions and tails far below
    1e-300 (which underflow to 0.0)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    mode = math.floor((n + 1) * p)
    ratio = p / (1.0 - p)
    if k > mode:
        total, term, i = 1.0, 1.0, k      # terms relative to pmf(k)
        while i < n:
            term *= (n - i) / (i + 1) * ratio
            i += 1
            total += term
            if term < total * 1e-17:
                break
        log_sf = _log_pmf(k, n, p) + math.log(total)
        return math.exp(log_sf) if log_sf > -745 else 0.0
    # P(X <= k-1): terms from k-1 down (below the mode they only fall)
    total, term, i = 1.0, 1.0, k - 1
    while i > 0:
        term *= i / (n - i + 1) / ratio
        i -= 1
        total += term
        if term < total * 1e-17:
            break
    cdf = math.exp(_log_pmf(k - 1, n, p) + math.log(total))
    return min(1.0, max(0.0, 1.0 - cdf))


def correct(pvalues: list[float], method: str) -> list[float]:
    """Multiple-comparison correction: ``bonferroni`` (m x p) or ``bh`` (Benjamini-Hochberg
    step-up adjusted p-values); each capped at 1, in the order given."""
    m = len(pvalues)
    if m == 0:
        return []
    if method == "bonferroni":
        return [min(1.0, p * m) for p in pvalues]
    if method != "bh":
        raise ValueError(f"unknown correction {method!r}")
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [1.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, pvalues[i] * m / rank)
        adjusted[i] = min(1.0, running)
    return adjusted


# -- reading reports -----------------------------------------------------------------------------

@dataclass
class Scan:
    files: list[tuple[str, int, int]] = field(default_factory=list)   # (path, size, mtime_ns)
    messages: list[str] = field(default_factory=list)


def _is_report_name(name: str, folder: str = "") -> bool:
    """report.json, *.report.json, or the report table of a Parquet export
    (``job=<id>/table=report/part-0.parquet``)."""
    if name == "report.json" or name.endswith(".report.json"):
        return True
    return name.endswith(".parquet") and os.path.basename(folder) == "table=report"


def scan(paths) -> Scan:
    """Every report file under ``paths`` (sorted, each once), with size and mtime. Links are
    not followed into other folders."""
    out = Scan()
    seen = set()
    for given in paths:
        p = Path(given)
        if p.is_file():
            candidates = [str(p)]
        elif p.is_dir():
            candidates = []
            for folder, dirs, names in os.walk(p):
                dirs.sort()
                candidates += [os.path.join(folder, n) for n in sorted(names) if _is_report_name(n, folder)]
        else:
            out.messages.append(f"{given}: no such file or folder")
            continue
        for c in candidates:
            try:
                st = os.stat(c, follow_symlinks=False)
            except OSError as exc:
                out.messages.append(f"{c}: {exc.strerror or exc}")
                continue
            if not os.path.isfile(c) or os.path.islink(c):
                continue
            key = os.path.abspath(c)
            if key not in seen:
                seen.add(key)
                out.files.append((key, st.st_size, st.st_mtime_ns))
    return out


def job_id_of(path: str, report: dict) -> str:
    """The report's own job id, else its folder's name (see the module docstring)."""
    for value in (report.get("job_id"), report.get("job"), (report.get("run") or {}).get("job_id")):
        if isinstance(value, (str, int)) and str(value).strip():
            return str(value).strip()
    p = Path(path)
    if p.name != "report.json" and not p.name.endswith(".parquet"):
        stem = p.name.removesuffix(".json").removesuffix(".report")
        if stem:
            return stem
    folders = [f for f in reversed(p.parent.parts) if f not in ("/", "")]
    for i, name in enumerate(folders):
        if (name.lower() in GENERIC_DIRS or name.startswith("table=")) and i + 1 < len(folders):
            continue
        return _JOB_PREFIX.sub("", name)
    return p.stem


_JOB_PREFIX = re.compile(r"^(?:job=|job[-_](?=\d))", re.I)


_HEX = re.compile(r"0x[0-9a-fA-F]+")
_BUS = re.compile(r"\b[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b")
_NUM = re.compile(r"(?<![\w.-])\d+(?:\.\d+)?(?![\w-])")


_IP = re.compile(r"(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?![\w.])")


def template(text: str | None) -> str:
    """A finding title with its numbers folded, names kept: 'Xid 79 on gpu-03 GPU 5 (0000:ab:00.0)'
    -> 'Xid N on gpu-03 GPU N (BUS)'; digits inside a name (gpu-03, mlx5_1) stay."""
    t = _IP.sub("IP", _BUS.sub("BUS", text or ""))
    t = _HEX.sub("0xX", t)
    return _NUM.sub("N", t)


def _time(value) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t.replace(tzinfo=None)


def _str(value) -> str | None:
    return None if value is None else str(value)


def _strings(values) -> list[str]:
    return [str(v) for v in values or [] if v is not None and str(v) != ""] if isinstance(values, list) else []


def gpu_key(g: dict, node: str | None) -> tuple[str, str] | None:
    """(key, how) of a GPU: serial, else uuid, else node + bus id, else node + CUDA index."""
    if not isinstance(g, dict):
        return None
    node = g.get("node") or node
    if g.get("serial"):
        return f"serial:{g['serial']}", "serial"
    if g.get("uuid"):
        return str(g["uuid"]), "uuid"
    if node and g.get("bus_id"):
        return f"{node}:{g['bus_id']}", "node+bus id"
    if node and g.get("cuda_dev") is not None:
        return f"{node}:cuda{g['cuda_dev']}", "node+cuda index"
    return None


def _nic_names(details: dict) -> list[str]:
    names = []
    for key in ("nics", "flapped_ports", "down_ports"):
        for v in details.get(key) or []:
            if isinstance(v, str):
                names.append(v)
            elif isinstance(v, dict):
                name = v.get("port") or v.get("name") or v.get("device") or v.get("nic")
                if name:
                    names.append(str(name))
    return sorted(set(names))


def report_rows(path: str, size: int, mtime_ns: int, report: dict) -> tuple[dict, list[dict], list[dict]]:
    """(job row, implicated rows, finding rows) of one report."""
    job_id = job_id_of(path, report)
    verdict = report.get("verdict") or {}
    outcome = (report.get("outcome") or {}).get("outcome")
    run = report.get("run") or {}
    span = run.get("time_span") or {}
    findings = [f for f in report.get("findings") or [] if isinstance(f, dict)]
    by_id = {f.get("id"): f for f in findings}
    status = verdict.get("status")
    culprit = verdict.get("culprit") or {}
    culprit_nodes = _strings(culprit.get("nodes")) if status == "culprit" else []
    lead = next((by_id[i] for i in verdict.get("finding_ids") or [] if i in by_id), None)
    lead_code = lead.get("code") if lead else None
    actions = report.get("actions") or {}
    lost = actions.get("gpu_hours_lost")
    base = {"job_id": job_id, "source": path}
    job = {
        **base, "size": size, "mtime_ns": mtime_ns,
        "outcome": _str(outcome), "status": _str(status), "category": _str(verdict.get("category")),
        "confidence": float(verdict["confidence"]) if isinstance(verdict.get("confidence"), (int, float)) else None,
        "sentence": _str(verdict.get("sentence")), "lead_code": _str(lead_code),
        "failed": outcome in ("failed", "hung") or status in FAILED_STATUSES,
        "start_time": _time(span.get("start")), "end_time": _time(span.get("end")),
        "nodes": sorted(set(_strings(run.get("nodes")) + culprit_nodes)),
        "culprit_nodes": culprit_nodes,
        "codes": sorted({str(f.get("code")) for f in findings if f.get("severity") in ("error", "warning")}),
        "drain_hostlist": _str(actions.get("drain_hostlist")),
        "gpu_hours_lost": float(lost["value"]) if isinstance(lost, dict) and isinstance(lost.get("value"),
                                                                                     (int, float)) else None,
    }
    implicated: dict[tuple, dict] = {}

    def add(kind, key, node, label, role, code, category):
        k = (kind, key)
        if k in implicated and (implicated[k]["role"] == "culprit" or role != "culprit"):
            return
        implicated[k] = {**base, "kind": kind, "key": key, "node": node, "label": label, "role": role,
                         "code": _str(code), "category": _str(category)}

    for node in culprit_nodes:
        add("node", node, node, node, "culprit", lead_code, verdict.get("category"))
    causes = [f for f in findings if f.get("culprit") and f.get("severity") == "error"]
    for f in causes:
        in_verdict = f is lead or f.get("id") in (verdict.get("finding_ids") or [])
        role = "culprit" if status == "culprit" and in_verdict else "implicated"
        for node in _strings(f.get("nodes")):
            add("node", node, node, node, role if node in culprit_nodes or role != "culprit" else "implicated",
                f.get("code"), f.get("category"))
        if f.get("category") == "hardware":
            for g in f.get("gpus") or []:
                key = gpu_key(g, None)
                if key:
                    add("gpu", key[0], _str(g.get("node")), _gpu_label(g), role, f.get("code"), f.get("category"))
        if f.get("category") == "network":
            details = f.get("details") if isinstance(f.get("details"), dict) else {}
            node = details.get("culprit_node") or (_strings(f.get("nodes")) or [None])[0]
            for nic in _nic_names(details):
                add("nic", f"{node}:{nic}", _str(node), f"{node} {nic}", role, f.get("code"), f.get("category"))
    if status == "culprit":
        for g in actions.get("rma_gpus") or []:
            key = gpu_key(g, None)
            if key:
                add("gpu", key[0], _str(g.get("node")), _gpu_label(g), "culprit", lead_code, "hardware")
    rows_f = [{**base, "id": _str(f.get("id")), "code": _str(f.get("code")), "name": _str(f.get("name")),
               "severity": _str(f.get("severity")), "category": _str(f.get("category")),
               "culprit": bool(f.get("culprit")), "in_verdict": f.get("id") in (verdict.get("finding_ids") or []),
               "title": _str(f.get("title")), "template": template(_str(f.get("title"))),
               "nodes": _strings(f.get("nodes"))} for f in findings]
    return job, list(implicated.values()), rows_f


def _gpu_label(g: dict) -> str:
    bits = [str(g.get("node") or "?")]
    if g.get("cuda_dev") is not None:
        bits.append(f"GPU {g['cuda_dev']}")
    if g.get("bus_id"):
        bits.append(f"({g['bus_id']})")
    if g.get("serial"):
        bits.append(f"serial {g['serial']}")
    elif g.get("uuid"):
        bits.append(str(g["uuid"]))
    return " ".join(bits)


# -- the store -----------------------------------------------------------------------------------

def _schemas():
    import pyarrow as pa

    s, i64, f64, b = pa.string(), pa.int64(), pa.float64(), pa.bool_()
    ts, ls = pa.timestamp("us"), pa.list_(pa.string())
    return {
        "jobs": pa.schema([("job_id", s), ("source", s), ("size", i64), ("mtime_ns", i64), ("outcome", s),
                           ("status", s), ("category", s), ("confidence", f64), ("sentence", s), ("lead_code", s),
                           ("failed", b), ("start_time", ts), ("end_time", ts), ("nodes", ls),
                           ("culprit_nodes", ls), ("codes", ls), ("drain_hostlist", s), ("gpu_hours_lost", f64)]),
        "implicated": pa.schema([("job_id", s), ("source", s), ("kind", s), ("key", s), ("node", s), ("label", s),
                                 ("role", s), ("code", s), ("category", s)]),
        "findings": pa.schema([("job_id", s), ("source", s), ("id", s), ("code", s), ("name", s), ("severity", s),
                               ("category", s), ("culprit", b), ("in_verdict", b), ("title", s), ("template", s),
                               ("nodes", ls)]),
        "files": pa.schema([("source", s), ("size", i64), ("mtime_ns", i64), ("job_id", s), ("status", s)]),
    }


@dataclass
class Batch:
    """The rows read in one ingest."""
    rows: dict[str, list[dict]] = field(default_factory=lambda: {t: [] for t in TABLES})
    read: int = 0
    skipped: int = 0
    messages: list[str] = field(default_factory=list)


def read_reports(files: list[tuple[str, int, int]], messages_limit: int = 20) -> Batch:
    """Read and flatten the report files; a file that is not a readable report is remembered
    (so that it is not re-read until it changes) and counted."""
    batch = Batch()
    for path, size, mtime in files:
        status = "ok"
        try:
            report = _read_parquet_report(path) if path.endswith(".parquet") else _read_json(path)
            if not isinstance(report, dict) or not str(report.get("schema", "")).startswith(REPORT_SCHEMA):
                status = "not a postmortem report (no schema postmortem.report/N)"
        except (OSError, ValueError) as exc:
            status = f"unreadable: {type(exc).__name__}: {str(exc)[:120]}"
        if status != "ok":
            batch.skipped += 1
            batch.rows["files"].append({"source": path, "size": size, "mtime_ns": mtime, "job_id": None,
                                        "status": status})
            if len(batch.messages) < messages_limit:
                batch.messages.append(f"{path}: {status}")
            continue
        try:
            job, implicated, findings = report_rows(path, size, mtime, report)
        except Exception as exc:  # noqa: BLE001 -- a strange report must not cost the fleet
            batch.skipped += 1
            status = f"unreadable: {type(exc).__name__}: {str(exc)[:120]}"
            batch.rows["files"].append({"source": path, "size": size, "mtime_ns": mtime, "job_id": None,
                                        "status": status})
            if len(batch.messages) < messages_limit:
                batch.messages.append(f"{path}: {status}")
            continue
        batch.read += 1
        batch.rows["jobs"].append(job)
        batch.rows["implicated"] += implicated
        batch.rows["findings"] += findings
        batch.rows["files"].append({"source": path, "size": size, "mtime_ns": mtime, "job_id": job["job_id"],
                                    "status": "ok"})
    if batch.skipped > len(batch.messages):
        batch.messages.append(f"... and {batch.skipped - len(batch.messages)} more report file(s) not read")
    return batch


def _read_json(path: str):
    with open(path, "rb") as handle:
        return json.loads(handle.read())


def _read_parquet_report(path: str):
    """The report a Parquet export carries (its ``report`` table: ``schema``, ``json``)."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, columns=["schema", "json"])
    except Exception as exc:  # noqa: BLE001 -- pyarrow raises its own types for a damaged file
        raise ValueError(f"not a readable report table: {exc}") from None
    for schema, text in zip(table.column("schema").to_pylist(), table.column("json").to_pylist()):
        if str(schema or "").startswith(REPORT_SCHEMA) and text:
            return json.loads(text)
    return None


def _arrow(batch: Batch) -> dict:
    import pyarrow as pa

    schemas = _schemas()
    return {t: pa.Table.from_pylist(batch.rows[t], schema=schemas[t]) for t in TABLES}


def new_batch_id() -> str:
    """Sortable by time of ingest: ``20261204T063302123456-1a2b3c``."""
    return datetime.utcnow().strftime("%Y%m%dT%H%M%S%f") + "-" + uuid.uuid4().hex[:6]


def _glob(root: Path, table: str) -> str:
    return str(root / f"table={table}" / "*" / "*.parquet").replace("'", "''")


class FleetStore:
    """The fleet's Parquet files (``root``), or, without a root, tables kept in memory."""

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root else None
        self.memory: dict[str, list] = {t: [] for t in TABLES}   # (batch id, arrow table)

    def known(self) -> dict[str, tuple[int, int]]:
        """path -> (size, mtime_ns) of every report file already in the store."""
        if self.root is None or not any((self.root / "table=files").glob("*/*.parquet")):
            return {}
        import duckdb

        con = duckdb.connect()
        try:
            rows = con.execute(f"SELECT source, size, mtime_ns, batch FROM read_parquet('{_glob(self.root, 'files')}',"
                               " hive_partitioning = true) ORDER BY batch").fetchall()
        finally:
            con.close()
        return {r[0]: (r[1], r[2]) for r in rows}

    def add(self, batch: Batch) -> str | None:
        """Write one batch (nothing when it holds no file); its id."""
        if not batch.rows["files"]:
            return None
        batch_id = new_batch_id()
        tables = _arrow(batch)
        if self.root is None:
            for t in TABLES:
                self.memory[t].append((batch_id, tables[t]))
            return batch_id
        import pyarrow.parquet as pq

        for t in TABLES:   # files last: the batch's commit mark
            folder = self.root / f"table={t}" / f"batch={batch_id}"
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".part-0.parquet.{os.getpid()}.tmp"
            pq.write_table(tables[t], tmp, compression="zstd")
            os.replace(tmp, folder / "part-0.parquet")
        return batch_id

    def connect(self):
        """A DuckDB connection with the views ``jobs``, ``implicated``, ``findings``, ``files``
        (current rows only: committed batches, each path's newest batch, each job id's newest
        report) and ``appearances`` (job x node)."""
        import duckdb
        import pyarrow as pa

        con = duckdb.connect()
        schemas = _schemas()
        for t in TABLES:
            name = f"{t}_all"
            on_disk = self.root is not None and any((self.root / f"table={t}").glob("*/*.parquet"))
            if on_disk:
                con.execute(f"CREATE VIEW {name} AS SELECT * EXCLUDE (\"table\") FROM read_parquet("
                            f"'{_glob(self.root, t)}', hive_partitioning = true, union_by_name = true)")
            else:
                parts = [tbl.append_column("batch", pa.array([b] * tbl.num_rows, pa.string()))
                         for b, tbl in self.memory[t]]
                schema = schemas[t].append(pa.field("batch", pa.string()))
                arrow = pa.concat_tables(parts) if parts else schema.empty_table()
                con.register(f"_{name}", arrow)
                con.execute(f"CREATE VIEW {name} AS SELECT * FROM _{name}")
        con.execute("""
            CREATE VIEW files AS SELECT * FROM (
                SELECT *, row_number() OVER (PARTITION BY source ORDER BY batch DESC) AS _n FROM files_all)
            WHERE _n = 1""")
        con.execute("""
            CREATE VIEW jobs AS SELECT * EXCLUDE (_n) FROM (
                SELECT j.*, row_number() OVER (PARTITION BY j.job_id ORDER BY j.mtime_ns DESC, j.batch DESC,
                                               j.source) AS _n
                FROM jobs_all j JOIN files f ON f.source = j.source AND f.batch = j.batch)
            WHERE _n = 1""")
        for t in ("implicated", "findings"):
            con.execute(f"CREATE VIEW {t} AS SELECT x.* FROM {t}_all x "
                        "SEMI JOIN jobs j ON j.job_id = x.job_id AND j.source = x.source AND j.batch = x.batch")
        con.execute("""
            CREATE VIEW appearances AS
            SELECT DISTINCT job_id, node FROM (SELECT job_id, unnest(nodes) AS node FROM jobs)""")
        return con


@dataclass
class Ingest:
    files_seen: int = 0
    new_files: int = 0
    reused_files: int = 0
    read: int = 0
    skipped: int = 0
    batch: str | None = None
    messages: list[str] = field(default_factory=list)
    timings: dict = field(default_factory=dict)


def ingest(store: FleetStore, paths) -> Ingest:
    """Scan ``paths`` and add the report files the store does not hold yet (new, or changed in
    size or mtime) as one batch."""
    t0 = time.perf_counter()
    found = scan(paths)
    known = store.known()
    todo = [f for f in found.files if known.get(f[0]) != (f[1], f[2])]
    t1 = time.perf_counter()
    batch = read_reports(todo)
    t2 = time.perf_counter()
    batch_id = store.add(batch)
    t3 = time.perf_counter()
    return Ingest(files_seen=len(found.files), new_files=len(todo), reused_files=len(found.files) - len(todo),
                  read=batch.read, skipped=batch.skipped, batch=batch_id, messages=found.messages + batch.messages,
                  timings={"scan_s": round(t1 - t0, 3), "read_s": round(t2 - t1, 3), "write_s": round(t3 - t2, 3)})


# -- the view ------------------------------------------------------------------------------------

def _rows(con, sql: str, params=None) -> list[dict]:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def _iso(t) -> str | None:
    return t.isoformat(sep=" ") if isinstance(t, datetime) else (str(t) if t is not None else None)


def _test(rows: list[dict], rate: float, alpha: float, min_jobs: int, correction: str) -> None:
    """Fill p-values, corrected p-values and the flag into ``rows`` (each with ``jobs`` and
    ``culprit_jobs``)."""
    pvals = [binom_sf(r["culprit_jobs"], r["jobs"], rate) for r in rows]
    adjusted = correct(pvals, correction)
    for r, p, q in zip(rows, pvals, adjusted):
        r["expected"] = round(r["jobs"] * rate, 3)
        r["rate"] = round(r["culprit_jobs"] / r["jobs"], 4) if r["jobs"] else None
        r["p_value"] = p
        r["p_adjusted"] = q
        r["flagged"] = bool(q < alpha and r["culprit_jobs"] >= min_jobs)


def _evidence(con, kind: str, key: str, limit: int = EVIDENCE_JOBS) -> list[dict]:
    rows = _rows(con, """
        SELECT i.job_id, j.start_time, j.end_time, j.outcome, j.status, j.category, i.code, i.role,
               j.sentence, j.codes, j.source
        FROM implicated i JOIN jobs j USING (job_id, source, batch)
        WHERE i.kind = ? AND i.key = ? AND i.role = 'culprit'
        ORDER BY coalesce(j.start_time, j.end_time) DESC NULLS LAST, i.job_id LIMIT ?""", [kind, key, limit])
    for r in rows:
        r["start_time"], r["end_time"] = _iso(r["start_time"]), _iso(r["end_time"])
    return rows


def fleet_view(store: FleetStore, alpha: float = 0.01, min_jobs: int = 3, correction: str = "bonferroni",
               con=None) -> dict:
    """The fleet view as a dict (the ``postmortem.fleet/1`` JSON less ``generator`` and the
    ingest numbers, which the caller adds)."""
    t0 = time.perf_counter()
    con = con or store.connect()
    summary = _rows(con, """
        SELECT count(*) AS jobs, count(*) FILTER (WHERE failed) AS failed_jobs,
               count(*) FILTER (WHERE status = 'culprit') AS jobs_with_culprit,
               min(coalesce(start_time, end_time)) AS first, max(coalesce(end_time, start_time)) AS last
        FROM jobs""")[0]
    summary["first"], summary["last"] = _iso(summary["first"]), _iso(summary["last"])
    summary["nodes"] = con.execute("SELECT count(DISTINCT node) FROM appearances").fetchone()[0]
    summary["report_files"] = con.execute("SELECT count(*) FROM files").fetchone()[0]
    summary["skipped_files"] = con.execute("SELECT count(*) FROM files WHERE status <> 'ok'").fetchone()[0]
    summary["statuses"] = dict(con.execute("SELECT coalesce(status, 'unknown'), count(*) FROM jobs GROUP BY 1 "
                                           "ORDER BY 2 DESC, 1").fetchall())

    node_rows = _rows(con, """
        WITH c AS (SELECT key AS node, count(DISTINCT job_id) FILTER (WHERE role = 'culprit') AS culprit_jobs,
                          count(DISTINCT job_id) FILTER (WHERE role = 'implicated') AS implicated_jobs
                   FROM implicated WHERE kind = 'node' GROUP BY key),
             a AS (SELECT node, count(*) AS jobs FROM appearances GROUP BY node)
        SELECT a.node, a.jobs, coalesce(c.culprit_jobs, 0) AS culprit_jobs,
               coalesce(c.implicated_jobs, 0) AS implicated_jobs
        FROM a LEFT JOIN c USING (node)""")
    pairs = sum(r["jobs"] for r in node_rows)
    culprit_pairs = sum(r["culprit_jobs"] for r in node_rows)
    node_rate = culprit_pairs / pairs if pairs else 0.0
    _test(node_rows, node_rate, alpha, min_jobs, correction)
    node_jobs = {r["node"]: r["jobs"] for r in node_rows}

    def devices(kind: str, per_node: int) -> tuple[list[dict], float]:
        rows = _rows(con, f"""
            SELECT key, any_value(node) AS node, any_value(label) AS label,
                   count(DISTINCT job_id) FILTER (WHERE role = 'culprit') AS culprit_jobs,
                   count(DISTINCT job_id) FILTER (WHERE role = 'implicated') AS implicated_jobs,
                   list(DISTINCT code ORDER BY code) FILTER (WHERE code IS NOT NULL) AS codes
            FROM implicated WHERE kind = '{kind}' GROUP BY key""")
        culprits = sum(r["culprit_jobs"] for r in rows)
        rate = culprits / (pairs * per_node) if pairs else 0.0
        for r in rows:
            r["jobs"] = max(node_jobs.get(r["node"], 0), r["culprit_jobs"] + r["implicated_jobs"])
        _test(rows, rate, alpha, min_jobs, correction)
        return rows, rate

    gpu_rows, gpu_rate = devices("gpu", GPUS_PER_NODE)
    nic_rows, nic_rate = devices("nic", NICS_PER_NODE)

    # the breakdown of each node's culprit jobs by category and code (nodes with any)
    breakdown: dict[str, dict] = {}
    for node, cat, code, n in con.execute("""
            SELECT key, coalesce(category, 'none'), coalesce(code, '?'), count(DISTINCT job_id)
            FROM implicated WHERE kind = 'node' AND role = 'culprit'
            GROUP BY ALL ORDER BY 1, 4 DESC, 2, 3""").fetchall():
        b = breakdown.setdefault(node, {"categories": {}, "codes": {}})
        b["categories"][cat] = b["categories"].get(cat, 0) + n
        b["codes"][code] = b["codes"].get(code, 0) + n

    def order(rows):
        return sorted(rows, key=lambda r: (not r["flagged"], r["p_adjusted"], -r["culprit_jobs"], -r["jobs"],
                                           str(r.get("node") or r.get("key"))))

    nodes_out = []
    for r in order([r for r in node_rows if r["culprit_jobs"] or r["implicated_jobs"]]):
        item = {**r, **breakdown.get(r["node"], {"categories": {}, "codes": {}})}
        if r["flagged"]:
            item["evidence"] = _evidence(con, "node", r["node"])
        nodes_out.append(item)
    gpus_out, nics_out = [], []
    for rows, out, kind in ((gpu_rows, gpus_out, "gpu"), (nic_rows, nics_out, "nic")):
        for r in order(rows):
            item = dict(r)
            if r["flagged"]:
                item["evidence"] = _evidence(con, kind, r["key"])
            out.append(item)

    from postmortem.analyzer.ranges import hostlist

    drain = sorted({r["node"] for r in nodes_out if r["flagged"]}
                   | {r["node"] for r in gpus_out + nics_out if r["flagged"] and r["node"]})
    categories = {
        "per_day": _rows(con, """
            SELECT strftime(CAST(coalesce(start_time, end_time) AS DATE), '%Y-%m-%d') AS day,
                   coalesce(category, 'none') AS category, count(*) AS jobs
            FROM jobs WHERE failed AND coalesce(start_time, end_time) IS NOT NULL
            GROUP BY ALL ORDER BY day, jobs DESC, category"""),
        "per_week": _rows(con, """
            SELECT strftime(date_trunc('week', coalesce(start_time, end_time)), '%Y-%m-%d') AS week,
                   coalesce(category, 'none') AS category, count(*) AS jobs
            FROM jobs WHERE failed AND coalesce(start_time, end_time) IS NOT NULL
            GROUP BY ALL ORDER BY week, jobs DESC, category"""),
        "no_time": con.execute("SELECT count(*) FROM jobs WHERE failed AND start_time IS NULL "
                               "AND end_time IS NULL").fetchone()[0],
    }
    codes = _rows(con, """
        SELECT code, any_value(name) AS name, any_value(severity) AS severity, count(DISTINCT job_id) AS jobs,
               count(*) AS findings
        FROM findings WHERE severity IN ('error', 'warning') GROUP BY code ORDER BY jobs DESC, code LIMIT 30""")
    same_cause = _rows(con, """
        WITH f AS (SELECT job_id, code, template, unnest(CASE WHEN len(nodes) = 0 THEN [NULL] ELSE nodes END) AS node
                   FROM findings WHERE culprit AND severity = 'error'),
             g AS (SELECT code, node, CASE WHEN node IS NULL THEN template END AS tkey, job_id, template FROM f)
        SELECT code, node, mode(template) AS template, count(DISTINCT job_id) AS jobs,
               list(DISTINCT job_id ORDER BY job_id)[1:20] AS job_ids
        FROM g GROUP BY code, node, tkey HAVING count(DISTINCT job_id) >= 2
        ORDER BY jobs DESC, code, node NULLS LAST LIMIT 30""")
    return {
        "schema": SCHEMA,
        "summary": summary,
        "test": {
            "method": "one-sided binomial test of each node's culprit jobs against its jobs run, at the fleet's "
                      "rate of culprit jobs per job run",
            "correction": CORRECTIONS[correction], "alpha": alpha, "min_culprit_jobs": min_jobs,
            "node_rate": node_rate, "node_job_pairs": pairs, "nodes_tested": len(node_rows),
            "gpu_rate": gpu_rate, "gpus_tested": len(gpu_rows), "gpus_per_node": GPUS_PER_NODE,
            "nic_rate": nic_rate, "nics_tested": len(nic_rows), "nics_per_node": NICS_PER_NODE,
        },
        "drain": {"nodes": drain, "hostlist": hostlist(drain) if drain else None},
        "nodes": nodes_out,
        "gpus": gpus_out,
        "nics": nics_out,
        "categories": categories,
        "codes": codes,
        "same_cause": same_cause,
        "timings": {"query_s": round(time.perf_counter() - t0, 3)},
    }
