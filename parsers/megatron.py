"""Megatron-LM family training logs (``formats/training-logs.md`` sections 2.2, 2.3, 2.5).

Line kinds handled:

``iterations`` -- the training-iteration line, parsed by key (``|``-separated ``key: value``
fragments), never by position, so every layout reads the same:

* 2019 Megatron-LM / early forks: ``iteration 100/ 1000 | elapsed time per iteration (ms): ...
  | learning rate 1.000E-04 | lm loss 5.1E+00 | loss scale 1024.0 |`` (some keys without a
  colon: the value is the last token);
* 2019-2020: ``learning rate: {:.3E}``, losses, ``loss scale``, ``grad norm``, ``number of
  skipped iterations``, ``number of nan iterations`` (from 2020-09);
* 2021-2023: ``consumed samples`` and ``global batch size`` added;
* 2023-11: ``throughput per GPU (TFLOP/s/GPU)``; 2024-01: the `` [YYYY-MM-DD HH:MM:SS]``
  prefix (``ts``, local time of the last rank, no zone); 2024-07 ``skipped samples``;
  2025-06 ``energy per GPU`` / ``power per GPU``; 2026-01 ``.ffffff`` on the prefix;
  2026 MoE tracker keys (``load_balancing_loss: 1.01``) and any other dynamic loss key;
* Megatron-DeepSpeed: ``consumed tokens``, ``actual seqlen``, ``samples per second``,
  ``TFLOPs`` (per GPU; fills ``throughput_tflops`` when the Megatron-LM key is absent);
* Megatron-LLM (epfLLM) and Pai-Megatron-Patch use the Megatron-LM layouts above.

``nan`` / ``inf`` / ``-inf`` values become float NaN / inf. A key that is absent is null (the
NaN rule -- ``lm loss`` absent while not every iteration was skipped -- is for the rules to
apply; ``fields`` keeps every key as printed, as JSON). The validation line
``validation loss at iteration N | lm loss value: ... | lm loss PPL: ... |`` (and the 2019
``validation loss at iteration N | LM loss: ... | LM PPL: ...``, and ``at the end of
training for val data``) is a row with ``validation`` true and ``lm_loss`` from ``lm loss
value`` / ``LM loss``.

``memory`` -- ``[Rank N] (after K iterations) memory (MB) | allocated: ... | max allocated:
... | reserved: ... | max reserved: ...[ | total device memory used: ...]`` (2020-12 on; the
label can also be ``(before save_checkpoint for iteration I)``), the 2020 form without
``[Rank N]`` (``after 5 iterations memory (MB) | ...``) and the 2019 ``cached`` / ``max
cached`` keys (read as reserved). Megatron's "MB" is bytes / 1024^2, so the values are MiB
(``source_unit`` = ``MB=MiB``).

``settings`` -- ``megatron-args``: the argument dump (``------------------------ arguments
------------------------``, ``  name ........ value`` lines, ``-------------------- end of
arguments ---------------------`` or the 2020 ``---------------- end of arguments
----------------``); dump lines are also read without the banners (truncated pastes) when
they carry the dot leader. ``megatron-startup``: ``using world size: W, data-parallel size: D,
context-parallel size: C, hierarchical context-parallel sizes: H, tensor-model-parallel size:
T, ..., pipeline-model-parallel size: P`` in all its versions (2019 ``using world size: W and
model-parallel size: M``, 2021 ``data-parallel-size``, the 2025 missing comma
``Nonetensor-model-parallel size``, Megatron-DeepSpeed ``deepspeed sequence-parallel size``),
``> initializing tensor model parallel with size T`` / ``> initialized pipeline model parallel
with size P`` / 2020 ``> initializing model parallel with size M``, and the datetime markers
``[after dataloaders are built] datetime: 2022-10-31 08:35:51`` (key ``datetime:<label>``,
value the timestamp).
"""

from __future__ import annotations

import polars as pl

from parsers.lines import with_stream

from parsers.base import ParseResult, consumed_of, to_int

NAME = "megatron"

SAMPLE_LINES = [
    # 2019
    " iteration      100/   10000 | elapsed time per iteration (ms): 512.3 | learning rate 1.500E-04 "
    "| lm loss 7.123456E+00 | loss scale 65536.0 |",
    # 2020 (no consumed samples / global batch size)
    " iteration       50/  500000 | elapsed time per iteration (ms): 402.1 | learning rate: 1.875E-06 "
    "| lm loss: 9.874512E+00 | loss scale: 262144.0 | number of skipped iterations:   3 "
    "| number of nan iterations:   0 |",
    # 2022
    " iteration       30/ 1000000 | consumed samples:          120 | elapsed time per iteration (ms): "
    "123.4 | learning rate: 1.111E-07 | global batch size:     4 | lm loss: 1.012573E+01 | sop loss: "
    "6.911852E-01 | loss scale: 16384.0 | number of skipped iterations:   1 | number of nan iterations:   0 |",
    # 2024 with datetime prefix, throughput and MoE aux loss
    " [2024-03-11 10:12:13] iteration     1200/   50000 | consumed samples:      4915200 | elapsed time "
    "per iteration (ms): 8123.4 | throughput per GPU (TFLOP/s/GPU): 213.5 | learning rate: 2.999999E-04 "
    "| global batch size:  4096 | lm loss: 2.345678E+00 | load_balancing_loss: 1.013377E+00 | loss scale: "
    "1.0 | grad norm: 0.412 | number of skipped iterations:   0 | number of nan iterations:   0 |",
    # 2026: microseconds, skipped samples, energy, MoE tracker, NaN loss key gone
    " [2026-02-01 03:04:05.123456] iteration      200/    1000 | consumed samples:       819200 | skipped "
    "samples:         4096 | elapsed time per iteration (ms): 6021.7 | throughput per GPU (TFLOP/s/GPU): "
    "401.2 | energy per GPU (J/iter/GPU): 4210.3 | power per GPU (W/GPU): 699.2 | learning rate: "
    "1.200000E-04 | global batch size:  4096 | z_loss: 0.01 | loss scale: 1.0 | grad norm: nan | "
    "number of skipped iterations:   0 | number of nan iterations:   0 |",
    # Megatron-DeepSpeed
    " iteration     5426/  250000 | consumed samples:        43408 | consumed tokens:     88899584 | "
    "elapsed time per iteration (ms): 4247.9 | learning rate: 2.999E-04 | global batch size:     8 | "
    "lm loss: inf | loss scale: 1.0 | grad norm: -inf | actual seqlen:  2048 | number of skipped "
    "iterations:   0 | number of nan iterations:   0 | samples per second: 1.883 | TFLOPs: 78.36 |",
    " validation loss at iteration 1200 | lm loss value: 2.301234E+00 | lm loss PPL: 9.986543E+00 | ",
    "-" * 99,
    "[Rank 16] (after 10 iterations) memory (MB) | allocated: 20245.03 | max allocated: 61234.50 | "
    "reserved: 63210.00 | max reserved: 63210.00 | total device memory used: 71002.12",
    "after 5 iterations memory (MB) | allocated: 6245.033203125 | max allocated: 9554.87939453125 | "
    "reserved: 10020.0 | max reserved: 10020.0",
    "[Rank 0] (before save_checkpoint for iteration 1000) memory (MB) | allocated: 1.5 | max allocated: 2.5"
    " | reserved: 3.0 | max reserved: 4.0",
    "using world size: 40, data-parallel size: 40, context-parallel size: 1, hierarchical "
    "context-parallel sizes: Nonetensor-model-parallel size: 1, encoder-tensor-model-parallel size: 0, "
    "pipeline-model-parallel size: 1, encoder-pipeline-model-parallel size: 0",
    "using world size: 8 and model-parallel size: 2 ",
    "> initializing tensor model parallel with size 2",
    "> initialized pipeline model parallel with size 4",
    "[after dataloaders are built] datetime: 2024-03-11 10:02:03 ",
    "------------------------ arguments ------------------------",
    "  distributed_timeout_minutes ..................... 10",
    "  expert_model_parallel_size ...................... 8",
    "  micro_batch_size ................................ 1",
    "  an_argument_name_longer_than_forty_eight_characters_x  True",
    "-------------------- end of arguments ---------------------",
]

ITERATIONS_SCHEMA = {
    "line_no": pl.UInt32,
    "ts": pl.Datetime("us"),
    "validation": pl.Boolean,
    "iteration": pl.Int64,
    "train_iters": pl.Int64,
    "consumed_samples": pl.Int64,
    "elapsed_ms": pl.Float64,
    "throughput_tflops": pl.Float64,
    "learning_rate": pl.Float64,
    "global_batch_size": pl.Int64,
    "lm_loss": pl.Float64,
    "loss_scale": pl.Float64,
    "grad_norm": pl.Float64,
    "skipped_iterations": pl.Int64,
    "nan_iterations": pl.Int64,
    "fields": pl.String,
}

MEMORY_SCHEMA = {
    "line_no": pl.UInt32,
    "reported_rank": pl.Int64,
    "label": pl.String,
    "iteration": pl.Int64,
    "allocated_mib": pl.Float64,
    "max_allocated_mib": pl.Float64,
    "reserved_mib": pl.Float64,
    "max_reserved_mib": pl.Float64,
    "device_used_mib": pl.Float64,
    "source_unit": pl.String,
}

SETTINGS_SCHEMA = {
    "line_no": pl.UInt32,
    "source": pl.String,
    "key": pl.String,
    "value": pl.String,
}


_TS = r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?"
_ITERATION = (
    r"^\s*(?:\[(?P<ts>" + _TS + r")\]\s*)?iteration\s+(?P<it>\d+)\s*/\s*(?P<total>\d+)\s*\|(?P<rest>.*)$"
)
_VALIDATION = r"^\s*validation loss at (?P<what>[^|]*?)\s*\|(?P<rest>.*)$"
_MEMORY = (
    r"^\s*(?:\[Rank (?P<rank>\d+)\]\s*)?(?P<label>[^|]*?)\s*memory \(MB\)\s*\|(?P<rest>.*)$"
)
_PIECE_COLON = r"^(?P<k>[^:]*?)\s*:\s*(?P<v>.*?)$"
_PIECE_BARE = r"^(?P<k>.*?\S)\s+(?P<v>\S+)$"

_ARGS_OPEN = r"^\s*-{3,} arguments -{3,}\s*$"
_ARGS_CLOSE = r"^\s*-{3,} end of arguments -{3,}\s*$"
_ARG_STRICT = r"^ {2}(?P<k>[a-z][a-z0-9_]*) \.+ (?P<v>.*?)\s*$"
_ARG_LOOSE = r"^ {1,4}(?P<k>[A-Za-z_][A-Za-z0-9_]*) (?:\.+ | )(?P<v>.*?)\s*$"

# `using world size: ...` fragments -> setting key (first match wins per key).
_WORLD_KEYS = [
    ("world_size", r"using world size: (\d+)"),
    ("data_parallel_size", r"data-parallel[- ]size: (\d+)"),
    ("context_parallel_size", r"(?:^|[^-])context-parallel size: (\d+)"),
    ("hierarchical_context_parallel_sizes", r"hierarchical context-parallel sizes: (None|\[[^\]]*\])"),
    ("tensor_model_parallel_size", r"(?:^|[^-])tensor-model-parallel size: (\d+)"),
    ("encoder_tensor_model_parallel_size", r"encoder-tensor-model-parallel size: (\d+)"),
    ("pipeline_model_parallel_size", r"(?:^|[^-])pipeline-model-parallel size: (\d+)"),
    ("encoder_pipeline_model_parallel_size", r"encoder-pipeline-model-parallel size: (\d+)"),
    ("ds_sequence_parallel_size", r"deepspeed sequence-parallel size: (\d+)"),
    ("model_parallel_size", r"and model-parallel size: (\d+)"),
]
_INIT_SIZE = (
    r"^\s*(?:>\s*)?initializ(?:ing|ed) (?P<what>tensor model|pipeline model|data|model|expert model|"
    r"expert tensor|context|virtual pipeline model) parallel with size (?P<size>\d+)"
)
_INIT_KEYS = {
    "tensor model": "tensor_model_parallel_size",
    "pipeline model": "pipeline_model_parallel_size",
    "data": "data_parallel_size",
    "model": "model_parallel_size",
    "expert model": "expert_model_parallel_size",
    "expert tensor": "expert_tensor_parallel_size",
    "context": "context_parallel_size",
    "virtual pipeline model": "virtual_pipeline_model_parallel_size",
}
_DATETIME_MARKER = r"^\s*\[(?P<label>[^\]]+)\] datetime: (?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)"

_FLOAT_KEYS = {
    "elapsed_ms": ["elapsed time per iteration (ms)"],
    "throughput_tflops": ["throughput per GPU (TFLOP/s/GPU)", "TFLOPs"],
    "learning_rate": ["learning rate"],
    "lm_loss": ["lm loss", "lm loss value", "LM loss"],
    "loss_scale": ["loss scale"],
    "grad_norm": ["grad norm"],
}
_INT_KEYS = {
    "consumed_samples": ["consumed samples"],
    "global_batch_size": ["global batch size"],
    "skipped_iterations": ["number of skipped iterations"],
    "nan_iterations": ["number of nan iterations"],
}
_MEMORY_KEYS = {
    "allocated_mib": ["allocated"],
    "max_allocated_mib": ["max allocated"],
    "reserved_mib": ["reserved", "cached"],
    "max_reserved_mib": ["max reserved", "max cached"],
    "device_used_mib": ["total device memory used"],
}


def _empty(schema: dict) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)




def _pieces(frame: pl.DataFrame) -> pl.DataFrame:
    """``line_no`` + ``rest`` (the ``|``-separated tail) -> one row per ``key: value`` piece,
    in printed order (``pos``)."""
    long = (
        frame.select("line_no", piece=pl.col("rest").str.split("|"))
        .explode("piece")
        .with_columns(pl.col("piece").str.strip_chars())
        .filter(pl.col("piece").str.len_chars() > 0)
        .with_columns(pos=pl.int_range(pl.len()).over("line_no"))
    )
    colon = pl.col("piece").str.extract_groups(_PIECE_COLON)
    bare = pl.col("piece").str.extract_groups(_PIECE_BARE)
    has_colon = pl.col("piece").str.contains(":", literal=True)
    return long.with_columns(
        k=pl.when(has_colon).then(colon.struct.field("k")).otherwise(bare.struct.field("k")),
        v=pl.when(has_colon).then(colon.struct.field("v")).otherwise(bare.struct.field("v")),
    ).filter(pl.col("k").is_not_null() & (pl.col("k").str.len_chars() > 0))


def _json_str(expr: pl.Expr) -> pl.Expr:
    escaped = expr.str.replace_all(r'(["\\])', r"\$1").str.replace_all(r"[\x00-\x1f]", " ")
    return pl.concat_str([pl.lit('"'), escaped, pl.lit('"')])


def _value(keys: list[str]) -> pl.Expr:
    """First value of any of ``keys`` (in ``keys`` order of preference)."""
    options = [pl.col("v").filter(pl.col("k") == k).first() for k in keys]
    return options[0] if len(options) == 1 else pl.coalesce(options)


def _iterations(df: pl.DataFrame) -> pl.DataFrame:
    t = pl.col("text")
    train = df.filter(t.str.contains("iteration", literal=True) & t.str.contains("|", literal=True))
    frames = []
    if not train.is_empty():
        m = t.str.extract_groups(_ITERATION)
        train = train.select(
            "line_no",
            ts=m.struct.field("ts"),
            validation=pl.lit(False),
            iteration=to_int(m.struct.field("it")),
            train_iters=to_int(m.struct.field("total")),
            rest=m.struct.field("rest"),
        ).filter(pl.col("rest").is_not_null())
        frames.append(train)
    valid = df.filter(t.str.contains("validation loss at", literal=True))
    if not valid.is_empty():
        m = t.str.extract_groups(_VALIDATION)
        valid = valid.select(
            "line_no",
            ts=pl.lit(None, dtype=pl.String),
            validation=pl.lit(True),
            iteration=to_int(m.struct.field("what").str.extract(r"iteration (\d+)", 1)),
            train_iters=pl.lit(None, dtype=pl.Int64),
            rest=m.struct.field("rest"),
        ).filter(pl.col("rest").is_not_null())
        frames.append(valid)
    if not frames:
        return _empty(ITERATIONS_SCHEMA)
    heads = pl.concat(frames, how="vertical_relaxed").sort("line_no")
    if heads.is_empty():
        return _empty(ITERATIONS_SCHEMA)
    pieces = _pieces(heads)
    pair = pl.concat_str([_json_str(pl.col("k")), pl.lit(": "), _json_str(pl.col("v"))])
    aggs = [pl.concat_str([pl.lit("{"), pair.str.join(", "), pl.lit("}")]).alias("fields")]
    aggs += [
        _value(keys).str.strip_chars().cast(pl.Float64, strict=False).alias(name)
        for name, keys in _FLOAT_KEYS.items()
    ]
    aggs += [to_int(_value(keys).str.strip_chars()).alias(name) for name, keys in _INT_KEYS.items()]
    values = pieces.group_by("line_no").agg(aggs)
    out = heads.join(values, on="line_no", how="left", maintain_order="left").with_columns(
        ts=pl.col("ts").str.replace("T", " ")
        .str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S%.f", strict=False),
        fields=pl.col("fields").fill_null("{}"),
    )
    return out.select(
        [pl.col(c).cast(dtype, strict=False) for c, dtype in ITERATIONS_SCHEMA.items()]
    )


def _memory(df: pl.DataFrame) -> pl.DataFrame:
    t = pl.col("text")
    sub = df.filter(t.str.contains("memory (MB)", literal=True))
    if sub.is_empty():
        return _empty(MEMORY_SCHEMA)
    m = t.str.extract_groups(_MEMORY)
    heads = sub.select(
        "line_no",
        reported_rank=to_int(m.struct.field("rank")),
        label=m.struct.field("label").str.strip_chars().str.replace(r"^\((.*)\)$", "$1"),
        rest=m.struct.field("rest"),
    ).filter(pl.col("rest").is_not_null())
    if heads.is_empty():
        return _empty(MEMORY_SCHEMA)
    heads = heads.with_columns(
        iteration=to_int(pl.coalesce(
            pl.col("label").str.extract(r"after (\d+) iterations?", 1),
            pl.col("label").str.extract(r"for iteration (\d+)", 1),
        )),
        label=pl.when(pl.col("label").str.len_chars() > 0).then(pl.col("label")),
    )
    pieces = _pieces(heads)
    values = pieces.group_by("line_no").agg([
        _value(keys).str.strip_chars().cast(pl.Float64, strict=False).alias(name)
        for name, keys in _MEMORY_KEYS.items()
    ])
    out = heads.join(values, on="line_no", how="inner", maintain_order="left").filter(
        pl.any_horizontal([pl.col(c).is_not_null() for c in _MEMORY_KEYS])
    ).with_columns(source_unit=pl.lit("MB=MiB"))
    return out.select([pl.col(c).cast(dtype, strict=False) for c, dtype in MEMORY_SCHEMA.items()])


def _settings(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
    t = pl.col("text")
    frames: list[pl.DataFrame] = []
    extra = pl.Series("line_no", [], dtype=pl.UInt32)

    # Argument dump.
    cand = df.filter(t.str.contains(" arguments ", literal=True) | t.str.starts_with(" "))
    if not cand.is_empty():
        strict = t.str.extract_groups(_ARG_STRICT)
        loose = t.str.extract_groups(_ARG_LOOSE)
        cand = cand.with_columns(
            is_open=t.str.contains(_ARGS_OPEN),
            is_close=t.str.contains(_ARGS_CLOSE),
            sk=strict.struct.field("k"), sv=strict.struct.field("v"),
            lk=loose.struct.field("k"), lv=loose.struct.field("v"),
        ).filter(pl.col("is_open") | pl.col("is_close") | pl.col("lk").is_not_null())
        s = "_stream"
        contiguous_prev = (pl.col("_seq").shift(1).over(s) == pl.col("_seq") - 1).fill_null(False)
        # Inside a dump: a contiguous run of arg-like lines under the opening banner.
        start = pl.col("is_open") | pl.col("is_close") | ~contiguous_prev
        cand = cand.with_columns(
            _under_open=pl.when(start).then(pl.col("is_open")).forward_fill().over(s).fill_null(False)
        )
        args = cand.filter(~pl.col("is_open") & ~pl.col("is_close")).with_columns(
            key=pl.when(pl.col("_under_open")).then(pl.col("lk")).otherwise(pl.col("sk")),
            value=pl.when(pl.col("_under_open")).then(pl.col("lv")).otherwise(pl.col("sv")),
        ).filter(pl.col("key").is_not_null())
        frames.append(args.select("line_no", source=pl.lit("megatron-args"), key="key", value="value"))
        extra = cand.filter(pl.col("is_open") | pl.col("is_close"))["line_no"]

    # `using world size: ...`
    world = df.filter(t.str.contains("using world size:", literal=True))
    if not world.is_empty():
        long = pl.concat([
            world.select("line_no", key=pl.lit(key), value=t.str.extract(pattern, 1))
            for key, pattern in _WORLD_KEYS
        ]).filter(pl.col("value").is_not_null())
        frames.append(long.select("line_no", source=pl.lit("megatron-startup"), key="key", value="value"))

    # `> initializing tensor model parallel with size 2`
    init = df.filter(t.str.contains(" parallel with size ", literal=True))
    if not init.is_empty():
        m = t.str.extract_groups(_INIT_SIZE)
        init = init.select(
            "line_no",
            source=pl.lit("megatron-startup"),
            key=m.struct.field("what").replace_strict(_INIT_KEYS, default=None, return_dtype=pl.String),
            value=m.struct.field("size"),
        ).filter(pl.col("key").is_not_null())
        frames.append(init)

    # `[after dataloaders are built] datetime: 2022-10-31 08:35:51`
    marks = df.filter(t.str.contains("] datetime: ", literal=True))
    if not marks.is_empty():
        m = t.str.extract_groups(_DATETIME_MARKER)
        marks = marks.select(
            "line_no",
            source=pl.lit("megatron-startup"),
            key=pl.concat_str([pl.lit("datetime:"), m.struct.field("label")]),
            value=m.struct.field("ts"),
        ).filter(pl.col("value").is_not_null())
        frames.append(marks)

    if not frames:
        return _empty(SETTINGS_SCHEMA), extra
    out = pl.concat(frames, how="vertical_relaxed").sort("line_no", maintain_order=True)
    out = out.select([pl.col(c).cast(dtype, strict=False) for c, dtype in SETTINGS_SCHEMA.items()])
    return out, extra.cast(pl.UInt32)


def _validation_rules(df: pl.DataFrame, iterations: pl.DataFrame) -> pl.Series:
    """The dash lines Megatron prints above and below a validation line."""
    valid = iterations.filter(pl.col("validation"))
    if valid.is_empty():
        return pl.Series("line_no", [], dtype=pl.UInt32)
    near = pl.concat([valid["line_no"].cast(pl.Int64) - 1, valid["line_no"].cast(pl.Int64) + 1])
    rules = df.filter(
        pl.col("line_no").cast(pl.Int64).is_in(near.implode())
        & pl.col("text").str.contains(r"^\s*-{10,}\s*$")
    )
    return rules["line_no"].cast(pl.UInt32)


def parse(lines: pl.DataFrame) -> ParseResult:
    if lines is None or lines.is_empty() or "text" not in lines.columns:
        return ParseResult(tables={
            "iterations": _empty(ITERATIONS_SCHEMA),
            "memory": _empty(MEMORY_SCHEMA),
            "settings": _empty(SETTINGS_SCHEMA),
        })
    df = with_stream(lines)
    iterations = _iterations(df)
    memory = _memory(df)
    settings, banners = _settings(df)
    rules = _validation_rules(df, iterations)
    consumed = consumed_of(
        iterations, memory, settings,
        pl.DataFrame({"line_no": banners}), pl.DataFrame({"line_no": rules}),
    )
    return ParseResult(
        tables={"iterations": iterations, "memory": memory, "settings": settings},
        consumed=consumed,
    )
