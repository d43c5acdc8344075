"""Shared table shapes and helpers of the training-framework parsers (``docs/formats/training-logs.md``).

Not a parser (no ``parse``): ``postmortem.parsers.megatron``, ``postmortem.parsers.deepspeed``, ``postmortem.parsers.hf_trainer``
and ``postmortem.parsers.titan_lightning`` all write the same four tables, so a query can ask "last
iteration" or "peak memory" without knowing the framework:

``iterations``  one row per training (or validation) step line: framework, step, loss, lr, ...;
                ``fields`` keeps every key as printed (JSON object of strings).
``memory``      one row per memory report, normalised to MiB; ``source_unit`` says what the
                line printed (``MB=MiB`` Megatron, ``GB=GiB`` DeepSpeed, ``bytes`` NeMo,
                ``GiB`` torchtitan).
``events``      checkpoint save/load (``duration_s``, ``finished``), NaN/inf, skipped steps,
                overflow, allocator retries, ... (``kind``, ``message``; the same table c10d
                writes its events to).
``job_config``  key/value with ``source``: parallel layout and run settings from argument
                dumps, config dumps and launch command lines. ``key`` is canonical where one is
                known (``tp``, ``pp``, ``ep``, ``dp``, ``cp``, ``etp``, ``vpp``, ``world_size``,
                ``seq_length``, ``micro_batch_size``, ``global_batch_size``, ``num_parameters``,
                ``timeout_minutes``, ...), ``raw_key`` is the name as printed.
``timers``      named durations in ms (Megatron timers, DeepSpeed wall-clock breakdown), with
                (min, max) across ranks where printed.
``train_progress`` tqdm bars (HF Trainer, Lightning): n/total, elapsed, rate.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.ascii_text import rx
from postmortem.parsers.kinds import literals_held
from postmortem.parsers.tables import FRAMEWORK_EVENTS, FRAMEWORK_MEMORY, SHARED

ITERATIONS_SCHEMA = dict(SHARED["iterations"].columns)

MEMORY_SCHEMA = SHARED["memory"].select(FRAMEWORK_MEMORY)

EVENTS_SCHEMA = SHARED["events"].select(FRAMEWORK_EVENTS)

JOB_CONFIG_SCHEMA = {
    "line_no": pl.UInt32,
    "framework": pl.String,
    "source": pl.String,
    "key": pl.String,
    "value": pl.String,
    "raw_key": pl.String,
}

TIMERS_SCHEMA = {
    "line_no": pl.UInt32,
    "framework": pl.String,
    "name": pl.String,
    "min_ms": pl.Float64,
    "max_ms": pl.Float64,
    "reported_rank": pl.Int64,
}

PROGRESS_SCHEMA = {
    "line_no": pl.UInt32,
    "framework": pl.String,
    "desc": pl.String,
    "pct": pl.Int64,
    "n": pl.Int64,
    "total": pl.Int64,
    "elapsed_s": pl.Float64,
    "s_per_it": pl.Float64,
    "postfix": pl.String,
}

# Printed names -> canonical job_config keys (argument dumps, config dumps, command lines).
CANONICAL = {
    "tensor_model_parallel_size": "tp", "tensor-model-parallel-size": "tp", "tensor_parallel_degree": "tp",
    "tp_size": "tp", "tensor_parallel_size": "tp",
    "pipeline_model_parallel_size": "pp", "pipeline-model-parallel-size": "pp",
    "pipeline_parallel_degree": "pp", "pipeline_parallel_size": "pp",
    "expert_model_parallel_size": "ep", "expert-model-parallel-size": "ep", "moe_expert_parallel_size": "ep",
    "expert_parallel_degree": "ep", "expert_parallel_size": "ep",
    "expert_tensor_parallel_size": "etp", "expert-tensor-parallel-size": "etp",
    "data_parallel_size": "dp", "data-parallel-size": "dp", "data_parallel_replicate_degree": "dp_replicate",
    "data_parallel_shard_degree": "dp_shard",
    "context_parallel_size": "cp", "context-parallel-size": "cp", "context_parallel_degree": "cp",
    "virtual_pipeline_model_parallel_size": "vpp", "num_layers_per_virtual_pipeline_stage": "vpp_layers",
    "model_parallel_size": "mp",
    "world_size": "world_size", "num_processes": "world_size", "dist_world_size": "world_size",
    "seq_length": "seq_length", "seq-length": "seq_length", "seq_len": "seq_length",
    "max_seq_length": "seq_length", "encoder_seq_length": "seq_length", "sequence_length": "seq_length",
    "micro_batch_size": "micro_batch_size", "micro-batch-size": "micro_batch_size",
    "per_device_train_batch_size": "micro_batch_size", "train_micro_batch_size_per_gpu": "micro_batch_size",
    "local_batch_size": "micro_batch_size",
    "global_batch_size": "global_batch_size", "global-batch-size": "global_batch_size",
    "train_batch_size": "global_batch_size",
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "num_layers": "num_layers", "num-layers": "num_layers", "hidden_size": "hidden_size",
    "hidden-size": "hidden_size", "num_attention_heads": "num_attention_heads",
    "num_experts": "num_experts", "num-experts": "num_experts", "moe_router_topk": "moe_router_topk",
    "moe-router-topk": "moe_router_topk", "moe_token_dispatcher_type": "moe_token_dispatcher_type",
    "recompute_granularity": "recompute", "recompute-granularity": "recompute",
    "recompute_activations": "recompute", "activation_checkpointing": "recompute",
    "gradient_checkpointing": "recompute", "recompute_method": "recompute_method",
    "recompute_num_layers": "recompute_num_layers",
    "distributed_timeout_minutes": "timeout_minutes", "distributed-timeout-minutes": "timeout_minutes",
    "ddp_timeout": "timeout_s", "init_timeout_seconds": "timeout_s", "train_timeout_seconds": "train_timeout_s",
    "train_iters": "train_iters", "train-iters": "train_iters", "max_steps": "train_iters", "steps": "train_iters",
    "bf16": "bf16", "fp16": "fp16", "mixed_precision": "mixed_precision", "mixed_precision_param": "mixed_precision",
    "use_distributed_optimizer": "distributed_optimizer", "use-distributed-optimizer": "distributed_optimizer",
    "save_interval": "save_interval", "save-interval": "save_interval", "interval": "save_interval",
    "log_interval": "log_interval", "logging_steps": "log_interval", "log_freq": "log_interval",
    "save": "save_dir", "load": "load_dir", "output_dir": "save_dir", "ckpt_format": "ckpt_format",
    "async_save": "async_save", "learning_rate": "lr", "lr": "lr",
    "zero_optimization_stage": "zero_stage", "zero_stage": "zero_stage",
}


def empty(schema: dict) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def conform(frame: pl.DataFrame, schema: dict, **constants) -> pl.DataFrame:
    """``frame`` with exactly ``schema``'s columns (missing -> null, strings cast leniently)."""
    return frame.select(_conformed(frame.schema, schema, constants))


def stack_conformed(frames: list[pl.DataFrame | pl.LazyFrame], schema: dict, **constants) -> pl.DataFrame:
    """``stack`` of ``frames``, each ``conform``ed first: one Polars call for them all. A plan
    (a ``LazyFrame``) is run in that call: its steps cost no call of their own."""
    plans = [f.lazy().select(_conformed(f.collect_schema(), schema, constants)) for f in frames
             if f is not None and (isinstance(f, pl.LazyFrame) or not f.is_empty())]
    if not plans:
        return empty(schema)
    return pl.concat(plans).sort("line_no", maintain_order=True).collect(engine="in-memory")


def _conformed(have: pl.Schema, schema: dict, constants: dict) -> list[pl.Expr]:
    columns = []
    for name, dtype in schema.items():
        if name in constants:
            columns.append(pl.lit(constants[name], dtype=dtype).alias(name))
        elif name not in have:
            columns.append(pl.lit(None, dtype=dtype).alias(name))
        else:
            value = pl.col(name)
            if have[name] == pl.String and dtype in (pl.Int64, pl.Float64):
                value = value.str.strip_chars().str.replace_all(",", "")
            columns.append(value.cast(dtype, strict=False).alias(name))
    return columns


def stack(frames: list[pl.DataFrame], schema: dict) -> pl.DataFrame:
    frames = [f for f in frames if f is not None and not f.is_empty()]
    if not frames:
        return empty(schema)
    # each frame's columns cast as Series: a select and a cast per frame were two Polars queries
    return pl.concat([pl.DataFrame([f[name].cast(dtype) for name, dtype in schema.items()]) for f in frames]
                     ).sort("line_no", maintain_order=True)


def settings_rows(df: pl.DataFrame, text: pl.Expr, kinds, source: str) -> list[pl.DataFrame]:
    """``job_config`` rows from settings ``Kind``s (``postmortem.parsers.kinds``): each line holding a
    kind's literal and matching its pattern gives one row per named group of ``keys`` that matched.
    A key of None takes the name from the pattern's group ``k`` (lower case, ``_`` for spaces and
    dashes; ``raw_key`` keeps it as printed). The literal is a cheap filter before the regex."""
    out = []
    kinds = list(kinds)
    # which kinds' literals any line holds, in one query: most inputs hold none of most kinds
    held = literals_held(df, text, [kind.literal for kind in kinds])
    for kind in kinds:
        if kind.literal not in held:
            continue
        lines = df.filter(text.str.contains(kind.literal, literal=True))
        lines = lines.filter(text.str.contains(rx(kind.pattern)))
        if lines.is_empty():
            continue
        g = text.str.extract_groups(rx(kind.pattern))
        for group, key in kind.keys:
            if key is None:
                name = g.struct.field("k")
                key_expr, raw = name.str.to_lowercase().str.replace_all("[ -]", "_"), name
            else:
                key_expr = raw = pl.lit(key)
            out.append(lines.select("line_no", source=pl.lit(source), key=key_expr, value=g.struct.field(group),
                                    raw_key=raw).filter(pl.col("value").is_not_null()))
    return out


def canonical(key: pl.Expr) -> pl.Expr:
    """A printed setting name -> its canonical ``job_config`` key (itself when none is known)."""
    return key.replace_strict(CANONICAL, default=key, return_dtype=pl.String)


def num(expr: pl.Expr) -> pl.Expr:
    """A printed number (``1,234``, ``nan``, ``inf``, ``1.5E+00``) -> Float64, garbage -> null."""
    return expr.str.strip_chars().str.replace_all(",", "").cast(pl.Float64, strict=False)


def json_str(expr: pl.Expr) -> pl.Expr:
    escaped = expr.str.replace_all(rx(r'(["\\])'), r"\$1").str.replace_all(rx(r"[\x00-\x1f]"), " ")
    return pl.concat_str([pl.lit('"'), escaped, pl.lit('"')])


def kv_json(pairs: pl.DataFrame, by: str = "line_no") -> pl.DataFrame:
    """(``by``, ``k``, ``v``) long rows -> (``by``, ``fields``) with a JSON object per group."""
    pair = pl.concat_str([json_str(pl.col("k")), pl.lit(": "), json_str(pl.col("v").fill_null(""))])
    return pairs.group_by(by, maintain_order=True).agg(
        fields=pl.concat_str([pl.lit("{"), pair.str.join(", "), pl.lit("}")]))


def seconds(hms: pl.Expr) -> pl.Expr:
    """tqdm's ``[[D:]H:]MM:SS`` -> seconds (``?`` -> null)."""
    parts = hms.str.split(":").list.reverse()
    total = None
    for i, factor in enumerate((1, 60, 3600, 86400)):
        part = parts.list.get(i, null_on_oob=True).cast(pl.Float64, strict=False)
        term = part * factor
        total = term if total is None else total + term.fill_null(0.0)
    return total


# A launch command line: an interpreter or launcher, a script, then ``--flag [value]`` pairs.
_LAUNCH = r"(?:^|[\s/])(?:python[\d.]*|torchrun|deepspeed|accelerate launch|srun|mpirun)\s.*?\S+\.py\b"
_FLAG = r"--([A-Za-z][\w-]*)(?:[ =]([^\s-]\S*|-\d\S*))?"


def cmdline_config(df: pl.DataFrame, framework: str) -> pl.DataFrame:
    """``job_config`` rows (source ``cmdline``) from the ``--flag value`` pairs of launch command lines
    (``python -u pretrain_gpt.py --tensor-model-parallel-size 1 ...``, a py-spy ``Process N: ...``
    line, a job script echo); a flag without a value is ``True``."""
    t = pl.col("text")
    sub = df.filter(t.str.contains(" --", literal=True) & t.str.contains(".py", literal=True))
    sub = sub.filter(t.str.contains(rx(_LAUNCH)))
    if sub.is_empty():
        return empty(JOB_CONFIG_SCHEMA)
    args = sub.select("line_no", a=t.str.extract(rx(_LAUNCH + r"(.*)$"), 1).str.extract_all(rx(_FLAG))).explode("a")
    args = args.filter(pl.col("a").is_not_null()).select(
        "line_no", raw_key=pl.col("a").str.extract(rx(_FLAG), 1),
        value=pl.col("a").str.extract(rx(_FLAG), 2).fill_null("True"))
    out = args.with_columns(source=pl.lit("cmdline"),
                            key=canonical(pl.col("raw_key").str.replace_all("-", "_")))
    return conform(out, JOB_CONFIG_SCHEMA, framework=framework)
