"""The scheduler's record of a job: Slurm ``sacct`` (``--parsable``/``--parsable2`` and the plain
fixed-width table), ``scontrol show job``, ``squeue``; Kubernetes ``kubectl get pod -o yaml`` /
``-o json`` and ``kubectl describe pod``.

Tables:

``job``        one row per job, step or pod: ``job_id``, ``step``, ``source``, ``name``, ``state``,
               ``exit_code``, ``signal``, ``reason``, ``nodelist``, ``nnodes``, ``ntasks``,
               ``start``, ``end``, ``elapsed``, ``restarts``, ``line_no``
``job_nodes``  one row per expected node: ``job_id``, ``node``, ``node_index`` (position in the
               expanded host list), ``source``, ``line_no``

Slurm's ``State`` carries the reason for the interesting endings (``NODE_FAIL``, ``TIMEOUT``,
``PREEMPTED``, ``OUT_OF_MEMORY``, ``CANCELLED by 1000``); ``scontrol`` adds ``Reason=``. Host lists
(``gpu-[01-05,07]``) are expanded by ``expand_hostlist``.

Multi-line blocks (the plain sacct table under its dashes, scontrol's continuation lines, a pod
document) are followed with a forward-filled block key, not a Python loop over lines; the
only Python loops run over headers and host lists (a handful per input).
"""

from __future__ import annotations

import json
import re

import polars as pl

from postmortem.parsers.ascii_text import rx
from postmortem.parsers.base import ParseResult, consumed_of, to_int

NAME = "scheduler"

SAMPLE_LINES = [
    "JobID|JobName|Partition|State|ExitCode|Start|End|Elapsed|NNodes|NTasks|NodeList",
    "4242|pretrain|gpu|NODE_FAIL|1:0|2026-07-24T08:00:00|2026-07-24T14:12:31|06:12:31|5|40|h20-node-[01-05]",
    "4242.batch|batch||CANCELLED|0:15|2026-07-24T08:00:00|2026-07-24T14:12:31|06:12:31|1|1|h20-node-01",
    "JobId=4243 JobName=pretrain",
    "   JobState=TIMEOUT Reason=TimeLimit Dependency=(null)",
    "   ExitCode=0:15 RunTime=1-00:00:12 TimeLimit=1-00:00:00",
    "   StartTime=2026-07-24T08:00:00 EndTime=2026-07-25T08:00:12",
    "   NodeList=gpu-[01-02,07] BatchHost=gpu-01",
    "   NumNodes=3 NumCPUs=96 NumTasks=24 CPUs/Task=4",
    "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)",
    "              4244       gpu pretrain    alice  R    2:03:11      4 gpu-[10-13]",
    "Name:             trainer-worker-3",
    "Node:             gpu-node-3/10.0.0.13",
    "Status:           Failed",
    "      Reason:       OOMKilled",
    "      Exit Code:    137",
    "    Restart Count:  4",
]

JOB_SCHEMA = {
    "line_no": pl.UInt32, "job_id": pl.String, "step": pl.String, "source": pl.String, "name": pl.String,
    "state": pl.String, "exit_code": pl.Int64, "signal": pl.Int64, "reason": pl.String, "nodelist": pl.String,
    "nnodes": pl.Int64, "ntasks": pl.Int64, "start": pl.Datetime("us"), "end": pl.Datetime("us"),
    "elapsed": pl.String, "restarts": pl.Int64,
}
JOB_NODES_SCHEMA = {"line_no": pl.UInt32, "job_id": pl.String, "node": pl.String, "node_index": pl.Int64,
                    "source": pl.String}


# -- host lists -----------------------------------------------------------------------------------

def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def expand_hostlist(text: str | None, limit: int = 100000) -> list[str]:
    """``gpu-[01-03,07],login1`` -> ``['gpu-01', 'gpu-02', 'gpu-03', 'gpu-07', 'login1']``
    (Slurm syntax: zero padding kept, several bracket groups multiply)."""
    if not text or text in ("(null)", "None", "None assigned"):
        return []
    out: list[str] = []
    for part in _split_top(text.strip()):
        match = re.search(r"\[([^\]]*)\]", part)
        if not match:
            out.append(part)
            continue
        head, tail = part[:match.start()], part[match.end():]
        for item in match.group(1).split(","):
            lo, _, hi = item.partition("-")
            if lo.isdigit() and hi.isdigit():
                width = len(lo)
                for n in range(int(lo), min(int(hi), int(lo) + limit) + 1):
                    out.extend(expand_hostlist(f"{head}{n:0{width}d}{tail}", limit))
            elif item:
                out.extend(expand_hostlist(f"{head}{item}{tail}", limit))
        if len(out) > limit:
            break
    return out


# -- helpers ----------------------------------------------------------------------------------------

def _slurm_ts(expr: pl.Expr) -> pl.Expr:
    return expr.str.strip_chars().str.to_datetime("%Y-%m-%dT%H:%M:%S", strict=False).cast(pl.Datetime("us"))


def _block_id(starts: pl.Expr, ends: pl.Expr) -> pl.Expr:
    """A block number for every row from a start row until an end row (exclusive), else null."""
    n = starts.cast(pl.Int64).cum_sum()
    mark = pl.when(starts).then(n).when(ends).then(pl.lit(-1, dtype=pl.Int64)).otherwise(None)
    filled = mark.forward_fill()
    return pl.when(filled > 0).then(filled)


_KEYS = {
    "jobid": "job_id", "jobidraw": "job_id", "jobname": "name", "state": "state", "exitcode": "exit",
    "start": "start", "end": "end", "elapsed": "elapsed", "nodelist": "nodelist", "nnodes": "nnodes",
    "ntasks": "ntasks", "reason": "reason", "restarts": "restarts",
}


def _finish_slurm(rows: pl.DataFrame, source: str) -> pl.DataFrame:
    for c in ("job_id", "name", "state", "exit", "start", "end", "elapsed", "nodelist", "nnodes", "ntasks",
              "reason", "restarts"):
        if c not in rows.columns:
            rows = rows.with_columns(pl.lit(None, dtype=pl.String).alias(c))
    state = pl.col("state").str.strip_chars()
    return rows.with_columns(
        source=pl.lit(source),
        job_id=pl.col("job_id").str.strip_chars().str.extract(r"^([^.]+)", 1),
        step=pl.col("job_id").str.strip_chars().str.extract(rx(r"^[^.]+\.(.+)$"), 1),
        state=state.str.extract(r"^([A-Z_]+)", 1),
        reason=pl.coalesce(pl.col("reason").str.strip_chars(), state.str.extract(rx(r"^[A-Z_]+ (by \d+)"), 1)),
        exit_code=to_int(pl.col("exit").str.extract(rx(r"^\s*(-?\d+)"), 1)),
        signal=to_int(pl.col("exit").str.extract(rx(r":(\d+)"), 1)),
        start=_slurm_ts(pl.col("start")), end=_slurm_ts(pl.col("end")),
        nnodes=to_int(pl.col("nnodes").str.strip_chars()), ntasks=to_int(pl.col("ntasks").str.strip_chars()),
        restarts=to_int(pl.col("restarts").str.strip_chars()),
        nodelist=pl.col("nodelist").str.strip_chars(), name=pl.col("name").str.strip_chars(),
        elapsed=pl.col("elapsed").str.strip_chars(),
    )


# -- sacct ------------------------------------------------------------------------------------------

def _blocks_by_head(rows) -> list[tuple[object, list[int]]]:
    """(head, block) pairs -> each head, in the order first met, with its blocks."""
    grouped: dict[object, list[int]] = {}
    for head, block in rows:
        grouped.setdefault(head, []).append(block)
    return list(grouped.items())


def _sacct_parsable(df: pl.DataFrame) -> tuple[pl.DataFrame, list[int]]:
    t = pl.col("text")
    is_head = t.str.contains(rx(r"(?i)^\s*JobID(?:Raw)?\|"))
    df = df.with_columns(_blk=_block_id(is_head, ~t.str.contains("|", literal=True)))
    heads = df.filter(is_head)
    frames, used = [], heads["line_no"].to_list()
    # the blocks under one header are read together (a filter a block read every line once per
    # block: 60 us a line for a file of sacct outputs one after another)
    for head, blocks in _blocks_by_head(heads.select("text", "_blk").iter_rows()):
        names = [_KEYS.get(h.strip().lower(), f"_x{i}") for i, h in enumerate(head.strip().split("|"))]
        body = df.filter(pl.col("_blk").is_in(blocks) & ~is_head)
        if body.is_empty():
            continue
        parts = pl.col("text").str.strip_chars().str.split("|")    # every field in one Polars call
        frames.append(body.select("line_no", **{name: parts.list.get(i, null_on_oob=True)
                                                for i, name in enumerate(names) if not name.startswith("_x")}))
    if not frames:
        return pl.DataFrame(), used
    return _finish_slurm(pl.concat(frames, how="diagonal_relaxed"), "sacct"), used


def _sacct_plain(df: pl.DataFrame) -> tuple[pl.DataFrame, list[int]]:
    t = pl.col("text")
    dashes = t.str.contains(r"^-{3,}(?: +-{3,})+ *$")
    df = df.with_columns(_prev=t.shift(1), _dash=dashes)
    is_head = pl.col("_dash").shift(-1).fill_null(False) & t.str.contains(rx(r"(?i)^\s*JobID"))
    df = df.with_columns(_head=is_head)
    df = df.with_columns(_blk=_block_id(pl.col("_dash"), t.str.strip_chars() == ""))
    heads = df.filter(pl.col("_dash") & pl.col("_prev").str.contains(rx(r"(?i)^\s*JobID")).fill_null(False))
    frames = []
    used = [n for line_no in heads["line_no"].to_list() for n in (line_no - 1, line_no)]
    for (dash, head), blocks in _blocks_by_head(((dash, head), blk) for dash, head, blk in
                                                heads.select("text", "_prev", "_blk").iter_rows()):
        spans = [(m.start(), m.end()) for m in re.finditer(r"-+", dash)]
        names = [_KEYS.get(head[a:b + 1].strip().lower(), f"_x{i}") for i, (a, b) in enumerate(spans)]
        body = df.filter(pl.col("_blk").is_in(blocks) & ~pl.col("_dash"))
        if body.is_empty():
            continue
        last = len(spans) - 1  # the last column runs to the end of the line (values wider than the dashes)
        cols = {name: pl.col("text").str.slice(a, None if i == last else b - a + 1).str.strip_chars()
                for i, ((a, b), name) in enumerate(zip(spans, names)) if not name.startswith("_x")}
        frames.append(body.select("line_no", **cols))
    if not frames:
        return pl.DataFrame(), used
    return _finish_slurm(pl.concat(frames, how="diagonal_relaxed"), "sacct"), used


# -- scontrol ---------------------------------------------------------------------------------------

def _scontrol(df: pl.DataFrame) -> pl.DataFrame:
    t = pl.col("text")
    start = t.str.contains(rx(r"^\s*JobId=\d"))
    df = df.with_columns(_blk=_block_id(start, ~t.str.contains(rx(r"^\s*[A-Za-z][\w/:]*="))))
    body = df.filter(pl.col("_blk").is_not_null())
    if body.is_empty():
        return pl.DataFrame()
    pairs = body.select("line_no", "_blk", _p=t.str.extract_all(rx(r"(?:^|\s)[A-Za-z][\w/:]*=\S*"))).explode("_p")
    pairs = pairs.drop_nulls("_p").with_columns(_k=pl.col("_p").str.extract(rx(r"([A-Za-z][\w/:]*)="), 1),
                                                _v=pl.col("_p").str.extract(rx(r"=(\S*)$"), 1))
    want = {"JobId": "job_id", "JobName": "name", "JobState": "state", "Reason": "reason", "ExitCode": "exit",
            "StartTime": "start", "EndTime": "end", "RunTime": "elapsed", "NodeList": "nodelist",
            "NumNodes": "nnodes", "NumTasks": "ntasks", "Restarts": "restarts"}
    pairs = pairs.filter(pl.col("_k").is_in(list(want))).with_columns(
        _k=pl.col("_k").replace_strict(want, return_dtype=pl.String))
    first = pairs.group_by("_blk").agg(line_no=pl.col("line_no").min())
    wide = pairs.group_by("_blk", "_k").agg(pl.col("_v").first()).pivot(on="_k", index="_blk", values="_v")
    rows = first.join(wide, on="_blk").drop("_blk").with_columns(
        nnodes=pl.col("nnodes").str.extract(rx(r"^(\d+)"), 1) if "nnodes" in wide.columns else pl.lit(None, pl.String))
    out = _finish_slurm(rows, "scontrol")
    return out.with_columns(reason=pl.when(pl.col("reason").is_in(["None", "(null)"])).then(None)
                            .otherwise(pl.col("reason")))


def _scontrol_lines(df: pl.DataFrame) -> pl.Series:
    t = pl.col("text")
    start = t.str.contains(rx(r"^\s*JobId=\d"))
    blk = df.select("line_no", _blk=_block_id(start, ~t.str.contains(rx(r"^\s*[A-Za-z][\w/:]*="))))
    return blk.filter(pl.col("_blk").is_not_null())["line_no"]


# -- squeue -----------------------------------------------------------------------------------------

_SQUEUE_ROW = (r"^\s*(?P<job_id>\d+(?:_[\d\[\]-]+)?)\s+(?P<partition>\S+)\s+(?P<name>\S+)\s+(?P<user>\S+)\s+"
               r"(?P<st>[A-Z]{1,2})\s+(?P<elapsed>[\d:-]+)\s+(?P<nnodes>\d+)\s+(?P<nl>\S.*?)\s*$")
_ST = {"R": "RUNNING", "PD": "PENDING", "CG": "COMPLETING", "CD": "COMPLETED", "F": "FAILED", "TO": "TIMEOUT",
       "NF": "NODE_FAIL", "PR": "PREEMPTED", "CA": "CANCELLED", "OOM": "OUT_OF_MEMORY", "S": "SUSPENDED"}


def _squeue(df: pl.DataFrame) -> tuple[pl.DataFrame, list[int]]:
    t = pl.col("text")
    is_head = t.str.contains(rx(r"^\s*JOBID\s+PARTITION\s+NAME\s+USER\s+ST\s+TIME\s+NODES\s+NODELIST"))
    if not df.select(is_head.any()).item():
        return pl.DataFrame(), []
    df = df.with_columns(_blk=_block_id(is_head, t.str.strip_chars() == ""))
    used = df.filter(is_head)["line_no"].to_list()
    body = df.filter(pl.col("_blk").is_not_null() & ~is_head)
    rows = body.with_columns(_m=t.str.extract_groups(rx(_SQUEUE_ROW))).unnest("_m").filter(pl.col("job_id").is_not_null())
    if rows.is_empty():
        return pl.DataFrame(), used
    rows = rows.with_columns(
        state=pl.col("st").replace_strict(_ST, default=pl.col("st"), return_dtype=pl.String),
        reason=pl.col("nl").str.extract(rx(r"^\((.*)\)$"), 1),
        nodelist=pl.when(pl.col("nl").str.starts_with("(")).then(None).otherwise(pl.col("nl")),
    )
    return _finish_slurm(rows.select("line_no", "job_id", "name", "state", "reason", "nodelist", "nnodes", "elapsed"),
                         "squeue"), used


# -- kubernetes -------------------------------------------------------------------------------------

_K8S_KEYS = "name|nodeName|phase|reason|exitCode|restartCount|message|kind|startedAt|finishedAt|metadata"
_K8S_LINE = r'^(?P<ind>\s*)(?P<dash>- )?"?(?P<key>' + _K8S_KEYS + r')"?: ?(?P<val>.*?),?\s*$'


def _pod_docs(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
    """``kubectl get pod -o yaml|json``: pods, per metadata block (yaml and json alike)."""
    t = pl.col("text")
    if not df.select(t.str.contains(rx(r'^\s*(?:- )?"?kind"?: ?"?Pod"?')).any()).item():
        return pl.DataFrame(), pl.Series("line_no", [], dtype=pl.UInt32)
    rows = df.with_columns(_m=t.str.extract_groups(rx(_K8S_LINE))).unnest("_m")
    rows = rows.with_columns(_ind=pl.col("ind").str.len_chars() + pl.col("dash").str.len_chars().fill_null(0),
                             _next_ind=pl.col("text").str.extract(rx(r"^(\s*)"), 1).str.len_chars().shift(-1))
    rows = rows.with_columns(val=pl.col("val").str.strip_chars().str.strip_chars('"').str.strip_chars("'"))
    meta = pl.col("key") == "metadata"
    rows = rows.with_columns(_child=pl.when(meta).then(pl.col("_next_ind")).forward_fill(),
                             _meta=pl.when(meta).then(pl.col("line_no")).forward_fill())
    is_pod_name = (pl.col("key") == "name") & (pl.col("_ind") == pl.col("_child")) & pl.col("dash").is_null()
    rows = rows.with_columns(_podname=pl.when(is_pod_name).then(pl.col("val")))
    # the first name at the metadata's child level after each metadata line is the pod's
    rows = rows.with_columns(_first=is_pod_name & (pl.col("_podname").cum_count().over("_meta") == 1))
    rows = rows.with_columns(pod=pl.when(pl.col("_first")).then(pl.col("val")).forward_fill(),
                             _pod_line=pl.when(pl.col("_first")).then(pl.col("line_no")).forward_fill())
    keyed = rows.filter(pl.col("key").is_not_null() & pl.col("pod").is_not_null())
    if keyed.is_empty():
        return pl.DataFrame(), pl.Series("line_no", [], dtype=pl.UInt32)
    k = pl.col("key")
    v = pl.col("val")
    pods = keyed.group_by("pod", maintain_order=True).agg(
        line_no=pl.col("_pod_line").first(),
        node=v.filter(k == "nodeName").first(),
        state=v.filter(k == "phase").first(),
        reason=v.filter((k == "reason") & (v != "")).first(),
        reasons=v.filter((k == "reason") & (v != "")),
        exit_code=to_int(v.filter(k == "exitCode")).filter(to_int(v.filter(k == "exitCode")) != 0).first(),
        restarts=to_int(v.filter(k == "restartCount")).max(),
        start=v.filter(k == "startedAt").first(),
        end=v.filter(k == "finishedAt").last(),
    )
    pods = pods.with_columns(
        reason=pl.col("reasons").list.join(","), source=pl.lit("kubectl"), job_id=pl.col("pod"), name=pl.col("pod"),
        nodelist=pl.col("node"), nnodes=pl.lit(1, dtype=pl.Int64),
        start=pl.col("start").str.to_datetime("%Y-%m-%dT%H:%M:%SZ", strict=False),
        end=pl.col("end").str.to_datetime("%Y-%m-%dT%H:%M:%SZ", strict=False),
    )
    used = keyed.filter(k.is_in(["name", "nodeName", "phase", "reason", "exitCode", "restartCount", "kind"])
                        & (pl.col("_first") | (k != "name")))["line_no"]
    return pods, used


_DESCRIBE = r"^(?P<ind>\s*)(?P<key>Name|Node|Status|Reason|Message|Exit Code|Restart Count|State|Last State):\s+(?P<val>\S.*?)\s*$"


def _describe(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
    t = pl.col("text")
    if not df.select(t.str.contains(rx(r"^Name:\s+\S")).any() & t.str.contains(rx(r"^(?:Node|Status):\s+\S")).any()).item():
        return pl.DataFrame(), pl.Series("line_no", [], dtype=pl.UInt32)
    rows = df.with_columns(_m=t.str.extract_groups(rx(_DESCRIBE))).unnest("_m").filter(pl.col("key").is_not_null())
    top = pl.col("ind").str.len_chars() == 0
    rows = rows.with_columns(pod=pl.when(top & (pl.col("key") == "Name")).then(pl.col("val")).forward_fill(),
                             _pl=pl.when(top & (pl.col("key") == "Name")).then(pl.col("line_no")).forward_fill())
    rows = rows.filter(pl.col("pod").is_not_null() & (top | pl.col("key").is_in(["Reason", "Exit Code", "Restart Count",
                                                                                   "State", "Last State"])))
    if rows.is_empty():
        return pl.DataFrame(), pl.Series("line_no", [], dtype=pl.UInt32)
    k, v = pl.col("key"), pl.col("val")
    ec = to_int(v.filter(k == "Exit Code"))
    pods = rows.group_by("pod", maintain_order=True).agg(
        line_no=pl.col("_pl").first(),
        node=v.filter(top & (k == "Node")).first().str.extract(r"^([^/]+)", 1),
        state=v.filter(top & (k == "Status")).first(),
        reasons=v.filter(k == "Reason"),
        exit_code=ec.filter(ec != 0).first(),
        restarts=to_int(v.filter(k == "Restart Count")).max(),
    )
    pods = pods.with_columns(reason=pl.col("reasons").list.join(","), source=pl.lit("kubectl describe"),
                             job_id=pl.col("pod"), name=pl.col("pod"), nodelist=pl.col("node"),
                             nnodes=pl.lit(1, dtype=pl.Int64))
    return pods, rows["line_no"]


def _pod_json(lines: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series] | None:
    """Compact (one-line) ``-o json`` that the line reader cannot follow: parse the document."""
    text = "\n".join(lines["text"].to_list())
    if not text.lstrip().startswith("{") or '"Pod"' not in text or "\n    " in text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    items = doc.get("items", [doc]) if isinstance(doc, dict) else []
    rows = []
    for pod in items:
        if not isinstance(pod, dict) or pod.get("kind", "Pod") != "Pod":
            continue
        status = pod.get("status", {}) or {}
        reasons, codes, restarts = [status.get("reason")], [], []
        for cs in status.get("containerStatuses", []) or []:
            restarts.append(cs.get("restartCount", 0))
            for st in (cs.get("state", {}) or {}, cs.get("lastState", {}) or {}):
                term = st.get("terminated") or {}
                reasons.append(term.get("reason"))
                codes.append(term.get("exitCode"))
        name = (pod.get("metadata") or {}).get("name")
        rows.append({"line_no": 1, "job_id": name, "name": name, "source": "kubectl", "state": status.get("phase"),
                     "reason": ",".join(r for r in reasons if r) or None,
                     "exit_code": next((c for c in codes if c), None), "restarts": max(restarts) if restarts else None,
                     "nodelist": (pod.get("spec") or {}).get("nodeName"), "nnodes": 1})
    if not rows:
        return None
    return pl.DataFrame(rows), pl.Series("line_no", [1], dtype=pl.UInt32)


# -- parse ------------------------------------------------------------------------------------------

def _conform(frame: pl.DataFrame, schema: dict) -> pl.DataFrame:
    return frame.select([pl.col(c).cast(t, strict=False) if c in frame.columns else pl.lit(None, dtype=t).alias(c)
                         for c, t in schema.items()])


def _nodes_of(job: pl.DataFrame) -> pl.DataFrame:
    rows = []
    top = job.filter(pl.col("step").is_null() & pl.col("nodelist").is_not_null())
    for line_no, job_id, nodelist, source in top.select("line_no", "job_id", "nodelist", "source").unique(
            ["job_id", "source", "nodelist"], keep="first", maintain_order=True).iter_rows():
        for i, node in enumerate(expand_hostlist(nodelist)):
            rows.append({"line_no": line_no, "job_id": job_id, "node": node, "node_index": i, "source": source})
    if not rows:
        return pl.DataFrame(schema=JOB_NODES_SCHEMA)
    return pl.DataFrame(rows, schema=JOB_NODES_SCHEMA)


# Literals a scheduler record has; `kubectl describe` output by its first field only (`Name:`
# anywhere would be every c10d `PG Name: 0` line of a training log).
_GATE = ["JobID", "JobId=", "JOBID", "Pod"]


def file_gate(text: pl.Expr) -> pl.Expr:
    """A line this parser could start from: an input with none gives nothing (postmortem.analyzer.ingest
    skips the parser there; tests/test_batched_parsing.py holds the skip to the full run)."""
    text = text.fill_null("")
    return text.str.contains_any(_GATE) | text.str.starts_with("Name:")


def parse(lines: pl.DataFrame) -> ParseResult:
    empty = ParseResult(tables={"job": pl.DataFrame(schema=JOB_SCHEMA), "job_nodes": pl.DataFrame(schema=JOB_NODES_SCHEMA)})
    if lines is None or lines.is_empty() or "text" not in lines.columns:
        return empty
    df = lines.select("line_no", pl.col("text").fill_null(""))
    probe = df["text"]
    # literal gate: a training log without any scheduler output costs one scan
    if not df.select(file_gate(pl.col("text")).any()).item():
        return empty
    frames, used = [], []
    if probe.str.contains(rx(r"(?i)^\s*JobID")).any():
        for fn in (_sacct_parsable, _sacct_plain):
            frame, lines_used = fn(df)
            used += lines_used
            if not frame.is_empty():
                frames.append(frame)
                used += frame["line_no"].to_list()
    if probe.str.contains(rx(r"^\s*JobId=\d")).any():
        frame = _scontrol(df)
        if not frame.is_empty():
            frames.append(frame)
            used += _scontrol_lines(df).to_list()
    if probe.str.contains("JOBID", literal=True).any():
        frame, lines_used = _squeue(df)
        used += lines_used
        if not frame.is_empty():
            frames.append(frame)
            used += frame["line_no"].to_list()
    if probe.str.contains("Pod", literal=True).any():
        compact = _pod_json(df)
        pods, lines_used = compact if compact else _pod_docs(df)
        if not pods.is_empty():
            frames.append(pods)
            used += lines_used.to_list()
    if probe.str.contains(rx(r"^Name:\s")).any():
        pods, lines_used = _describe(df)
        if not pods.is_empty():
            frames.append(pods)
            used += lines_used.to_list()
    if not frames:
        return empty
    job = _conform(pl.concat([f.drop([c for c in ("reasons", "pod", "node", "exit", "st", "nl", "partition", "user")
                                      if c in f.columns]) for f in frames], how="diagonal_relaxed"), JOB_SCHEMA)
    job = job.sort("line_no")
    nodes = _nodes_of(job)
    consumed = pl.Series("line_no", used, dtype=pl.UInt32).unique()
    return ParseResult(tables={"job": job, "job_nodes": nodes}, consumed=consumed_of(job, pl.DataFrame({"line_no": consumed})))
