"""Per-node environment dumps (``docs/formats/training-logs.md`` section 9.1).

Line kinds handled:

* ``env`` / ``printenv`` / ``env | sort`` output: ``KEY=VALUE`` (the value is everything after
  the first ``=``, kept as printed: it may contain ``=``, quotes, spaces);
* ``export KEY=VALUE``, ``export KEY="VALUE"``, ``export KEY='VALUE'`` (what people paste from
  job scripts) and bash ``export -p`` / ``declare -p`` output ``declare -x KEY="VALUE"``
  (quotes removed, ``\\"`` ``\\\\`` ``\\$`` ``\\``` unescaped) and ``declare -x KEY`` (no
  value: null);
* exported bash functions ``BASH_FUNC_name%%=() {  body`` (bash >= 4.3; ``BASH_FUNC_name()=``
  before the Shellshock fix) whose body spans lines up to a ``}`` line, and ``declare -x``
  double- or single-quoted values that contain newlines: the continuation lines are consumed
  into the previous key's value (joined with ``\\n``), so they never turn into keys;
* ``srun -l env`` (``N: KEY=VALUE``) and pdsh ``host: KEY=VALUE``: the envelope peeled the
  label; entries are followed per prefix stream, so interleaved tasks' multi-line values stay
  apart;
* separator / header lines between per-node sections (``### node01``, ``==> env.node01 <==``,
  ``[node01]``, a bare ``node01`` as ``echo $(hostname)`` prints it, ``----``): ``section`` is
  the last such header above a variable (punctuation trimmed; null before the first header).
  Other lines are left unconsumed and do not change the section.

``looks_like_env_dump`` is for discovery: true when most non-empty lines of the input (its
first 5000 lines) are ``KEY=VALUE`` lines with an upper-case key, or when the input is one
``NCCL_*=value`` line under ``#`` comments (an ``/etc/nccl.conf`` or ``~/.nccl.conf`` copy; NCCL
reads the same ``KEY=VALUE`` lines there, ``postmortem.analyzer.env_model`` tells them apart by file name);
never for a batch script (``#!``/``#SBATCH`` lines: ``postmortem.parsers.config`` reads those). The analyzer calls
``parse`` only for files classified that way; in an ordinary log this parser is not used.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.ascii_text import rx
from postmortem.parsers.base import ParseResult, consumed_of
from postmortem.parsers.lines import with_stream

NAME = "envdump"

SAMPLE_LINES = [
    "### node01",
    "NCCL_DEBUG=INFO",
    "NCCL_SOCKET_IFNAME=eth0,eth1",
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "LAUNCH_CMD=torchrun --nnodes=5 --node-rank=0 train.py",
    "EMPTY_VALUE=",
    "BASH_FUNC_module%%=() {  eval `/usr/bin/modulecmd bash $*`",
    "}",
    "BASH_FUNC_ml()=() {  module ml \"$@\"",
    "}",
    "_=/usr/bin/env",
    "### node02",
    "export NCCL_IB_HCA=mlx5_0,mlx5_1",
    "export TORCH_NCCL_ASYNC_ERROR_HANDLING='3'",
    'declare -x CUDA_DEVICE_MAX_CONNECTIONS="1"',
    'declare -x PS1="[\\u@\\h \\W]\\$ "',
    'declare -x MULTI="first line',
    'second line"',
    "declare -x OLDPWD",
]

ENV_SCHEMA = {
    "line_no": pl.UInt32,
    "key": pl.String,
    "value": pl.String,
    "section": pl.String,
}


_KEY = r"[A-Za-z_][A-Za-z0-9_]*(?:%%|\(\))?"
_KV = r"^(?P<decl>export\s+|declare\s+-[A-Za-z]*\s+)?(?P<key>" + _KEY + r")=(?P<value>.*)$"
_DECL_ONLY = r"^(?:export|declare\s+-[A-Za-z]*)\s+(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*$"
_UPPER_KV = r"^(?:export\s+|declare\s+-[A-Za-z]*\s+)?[A-Z_][A-Z0-9_]*(?:%%|\(\))?="
_DQ_CLOSED = r'^"(?:[^"\\]|\\.)*"\s*$'
_DQ_CLOSER = r'^(?:[^"\\]|\\.)*"\s*$'
_SQ_CLOSED = r"^'[^']*'\s*$"
_SQ_CLOSER = r"^[^']*'\s*$"
# Raw control characters (tab excepted) mark binary noise, never a dump line.
_CONTROL = r"[\x00-\x08\x0b-\x1f\x7f]"
# A section header between per-node dumps: a marker line (`### node01`, `==> f <==`,
# `[node01]`, `----`) or a single token (`echo $(hostname)`).
_HEADER = r"^\s*(?:[#=*<>\[-]|\S+\s*$)"




def _classify(lines: pl.DataFrame) -> pl.DataFrame:
    """One row per line: ``kind`` (kv / decl / cont / header / blank / other), the entry it
    belongs to (``_entry`` = line_no of its KEY line) and the pieces of the KEY line."""
    df = with_stream(lines)
    t = pl.col("text")
    kv = t.str.extract_groups(rx(_KV))
    binary = t.str.contains(rx(_CONTROL))
    df = df.with_columns(
        decl=kv.struct.field("decl"),
        key=pl.when(~binary).then(pl.coalesce(kv.struct.field("key"), t.str.extract(rx(_DECL_ONLY), 1))),
        raw=pl.when(~binary).then(kv.struct.field("value")),
        _binary=binary | t.str.contains(rx(r"\\x[0-9a-fA-F]{2}")),
    )
    is_key = pl.col("key").is_not_null()
    raw = pl.col("raw")
    quoted = pl.col("decl").is_not_null()
    open_kind = (
        pl.when(raw.str.starts_with("() {") & ~raw.str.contains(rx(r"\}\s*$"))).then(pl.lit("func"))
        .when(quoted & raw.str.starts_with('"') & ~raw.str.contains(rx(_DQ_CLOSED))).then(pl.lit("dq"))
        .when(quoted & raw.str.starts_with("'") & ~raw.str.contains(rx(_SQ_CLOSED))).then(pl.lit("sq"))
    )
    s = "_stream"
    df = df.with_columns(
        _open=open_kind,
        _entry=pl.when(is_key).then(pl.col("line_no")).forward_fill().over(s),
    )
    # Continuation lines: after an open KEY line, up to and including the first closer.
    entry_open = pl.col("_open").first().over([s, "_entry"])
    closer = (
        pl.when(entry_open == "func").then(t.str.strip_chars_end() == "}")
        .when(entry_open == "dq").then(t.str.contains(rx(_DQ_CLOSER)))
        .when(entry_open == "sq").then(t.str.contains(rx(_SQ_CLOSER)))
        .otherwise(False)
    ) & ~is_key
    df = df.with_columns(_closer=closer.fill_null(False))
    closers_before = (
        pl.col("_closer").cast(pl.Int64).cum_sum().over([s, "_entry"]) - pl.col("_closer").cast(pl.Int64)
    )
    has_closer = pl.col("_closer").any().over([s, "_entry"])
    is_cont = (
        ~is_key & pl.col("_entry").is_not_null() & entry_open.is_not_null()
        & has_closer & (closers_before == 0)
    ).fill_null(False)
    blank = t.str.strip_chars().str.len_chars() == 0
    return df.with_columns(
        kind=pl.when(is_key & pl.col("raw").is_not_null()).then(pl.lit("kv"))
        .when(is_key).then(pl.lit("decl"))
        .when(is_cont).then(pl.lit("cont"))
        .when(blank).then(pl.lit("blank"))
        .when(t.str.contains(rx(_HEADER)) & (t.str.len_chars() <= 200) & ~pl.col("_binary"))
        .then(pl.lit("header"))
        .otherwise(pl.lit("other"))
    )


def file_gate(text: pl.Expr) -> pl.Expr:
    """An input with no upper-case ``KEY=VALUE`` line is not an env dump (postmortem.analyzer.ingest asks
    ``looks_like_env_dump`` only where some line passes)."""
    return text.fill_null("").str.contains(rx(_UPPER_KV))


def looks_like_env_dump(lines: pl.DataFrame) -> bool:
    """True when most non-empty lines (of the first 5000) are ``KEY=VALUE`` with an
    upper-case key (continuation lines of multi-line values are not counted)."""
    if lines is None or lines.is_empty() or "text" not in lines.columns:
        return False
    return bool(env_dump_inputs(lines.with_columns(input_id=pl.lit(0, dtype=pl.UInt32))))


# How many lines from the top of an input ``env_dump_inputs`` looks at.
HEAD_LINES = 5000


def env_dump_inputs(lines: pl.DataFrame) -> set:
    """``looks_like_env_dump`` for many inputs at once: the ``input_id`` values of ``lines``
    (each input's lines in file order) whose input is an env dump. One pass over them all:
    a job folder holds a dump per node, and the test costs milliseconds per call."""
    if lines is None or lines.is_empty():
        return set()
    head = lines.filter(pl.int_range(pl.len()).over("input_id") < HEAD_LINES)
    # _classify keeps the rows and their order; its streams keep the inputs apart
    head = _classify(head).with_columns(input_id=head["input_id"])
    t = pl.col("text")
    counted = pl.col("kind").is_in(["cont", "blank"]).not_()
    upper = counted & t.str.contains(rx(_UPPER_KV))
    per_input = head.group_by("input_id").agg(
        # a batch script: parsers.config reads its options, exports and commands
        script=t.str.contains(r"^#SBATCH|^#!/").any(),
        counted=counted.sum(),
        upper=upper.sum(),
        uncommented=(counted & ~t.str.contains(rx(r"^\s*#"))).sum(),
        nccl=(upper & t.str.starts_with("NCCL_")).sum(),
    )
    # a one-variable nccl.conf copy (`NCCL_IB_GID_INDEX=3` under a comment), or mostly KEY=VALUE
    one_nccl = (pl.col("upper") == 1) & (pl.col("uncommented") == 1)
    dump = ~pl.col("script") & (pl.col("counted") > 0) & pl.when(one_nccl).then(pl.col("nccl") == 1).otherwise(
        (pl.col("upper") >= 2) & (pl.col("upper") * 2 > pl.col("counted")))
    return set(per_input.filter(dump)["input_id"].to_list())


def parse(lines: pl.DataFrame) -> ParseResult:
    if lines is None or lines.is_empty() or "text" not in lines.columns:
        return ParseResult(tables={"env": pl.DataFrame(schema=ENV_SCHEMA)})
    df = _classify(lines)
    s = "_stream"
    header_text = pl.col("text").str.strip_chars(" \t#=*<>-:[]")
    df = df.with_columns(
        section=pl.when((pl.col("kind") == "header") & (header_text.str.len_chars() > 0))
        .then(header_text).forward_fill().over(s)
    )
    entries = df.filter(pl.col("kind").is_in(["kv", "decl", "cont"]))
    if entries.is_empty():
        return ParseResult(tables={"env": pl.DataFrame(schema=ENV_SCHEMA)})
    piece = pl.when(pl.col("kind") == "cont").then(pl.col("text")).otherwise(pl.col("raw"))
    grouped = entries.group_by([s, "_entry"], maintain_order=True).agg(
        line_no=pl.col("line_no").first(),
        key=pl.col("key").first(),
        decl=pl.col("decl").first(),
        kind=pl.col("kind").first(),
        section=pl.col("section").first(),
        value=piece.str.join("\n"),
    )
    value = pl.col("value")
    dq = value.str.contains(rx(r'(?s)^"(?:[^"\\]|\\.)*"\s*$'))
    sq = value.str.contains(rx(r"(?s)^'[^']*'\s*$"))
    unquoted = (
        pl.when(dq).then(value.str.replace(rx(r'(?s)^"(.*)"\s*$'), "$1").str.replace_all(rx(r'\\(["\\$`])'), "$1"))
        .when(sq).then(value.str.replace(rx(r"(?s)^'(.*)'\s*$"), "$1"))
        .otherwise(value)
    )
    env = grouped.with_columns(
        value=pl.when(pl.col("kind") == "decl").then(None)
        .when(pl.col("decl").is_not_null()).then(unquoted)
        .otherwise(value),
    ).select([pl.col(c).cast(dtype, strict=False) for c, dtype in ENV_SCHEMA.items()]).sort("line_no")
    headers = df.filter((pl.col("kind") == "header") & pl.col("section").is_not_null()
                        & (pl.col("text").str.strip_chars(" \t#=*<>-:[]").str.len_chars() > 0))
    understood = df.filter(pl.col("kind").is_in(["kv", "decl", "cont"]))
    consumed = consumed_of(understood.select("line_no"), headers.select("line_no"))
    return ParseResult(tables={"env": env}, consumed=consumed)
