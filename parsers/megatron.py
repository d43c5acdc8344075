"""Megatron-LM family training logs (``docs/formats/training-logs.md`` sections 2.2, 2.3, 2.5).

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

Added for issue 4 (shared shapes in ``postmortem.parsers.trainlog``):

``iterations`` also from NeMo 2 / nemo_run ``Training epoch E, iteration I/N | lr: ... |
max_memory_reserved: <bytes> | reduced_train_loss: ... | train_step_timing in s: ...``
(``framework`` ``nemo``; ``iteration`` is ``global_step``) and nanotron ``MM/DD/YYYY HH:MM:SS
[INFO|DP=0|PP=0|TP=0|host]: iteration: I / N | ...`` (K/M/G suffixes, 1000-based, [mem]); the
columns ``consumed_tokens``, ``skipped_samples``, ``num_zeros``, ``params_norm``,
``energy_j_per_gpu``, ``power_w_per_gpu``, ``samples_per_s``.
``memory`` also from NeMo's byte counters and nanotron's ``cuda_*`` keys (``source_unit`` says so).
``events`` -- checkpoint save start/done (``duration_s`` from the two timestamps, ``finished``
false when the next done line of the stream is missing or for another iteration), async saves,
load start/done (2020 wording too), ``could not find the metadata file`` / ``will not load any
checkpoints``, ``progress.txt`` lines, rerun state machine ``Unexpected result`` lines (kinds
``nan_detected`` / ``inf_detected`` / ``loss_spike``, with the rank), NaN/inf values and
skipped/NaN iteration counters of iteration lines, and the startup chatter
(``megatron_startup``: ``> initializing torch distributed ...``, ``building GPT model ...``, ...).
``timers`` -- one-line ``time (ms) | name: x |`` (< 2022-08), the ``(min, max)`` / ``max`` /
``all`` blocks, Megatron-Bridge ``Step Time : Xs``.
``job_config`` -- the settings rows with canonical keys (``tp``, ``pp``, ``ep``, ``dp``, ``cp``,
...), parameter counts (every wording), theoretical memory and parameter billions, number of
microbatches, params dtype, padded vocab, dataset target sizes, and ``--flag value`` pairs of
launch command lines (source ``cmdline``, any log).
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers import trainlog
from postmortem.parsers.ascii_text import rx
from postmortem.parsers.base import ParseResult, among, consumed_of, to_int
from postmortem.parsers.kinds import Kind, first_kind, literals_held, possible_kinds, samples_of
from postmortem.parsers.lines import any_literal, with_stream_where

NAME = "megatron"
# Batched over every log input (postmortem.analyzer.ingest): its many small passes would cost more per file.
BATCH_LITERAL = ""

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
    # model build and theoretical memory (section 2.3, 2.5)
    " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 15798591488",
    " > number of parameters on (tensor, gtp_weight_remat, pipeline) model parallel rank (1, 0, 3): 1234567",
    " > number of parameters on model parallel rank 0: 354871296",
    "Number of parameters in transformer block in billions:  0.08",
    "Number of active parameters in transformer block in billions:  0.03",
    "Number of parameters in embedding layers in billions: 0.04",
    "Total number of parameters in billions: 0.12",
    "Total number of active parameters in billions: 0.07",
    "Number of parameters in most loaded shard in billions: 0.1236",
    "Theoretical memory footprints: weight and optimizer=2121.85 MB, activation=3456.78 MB, total=5578.63 MB",
    # timers: one-line (< 2022-08), (min, max) block, max block, `all` block, Megatron-Bridge step time
    "time (ms) | model-and-optimizer-setup: 294.00 | train/valid/test-data-iterators-setup: 3654.81",
    "(min, max) time across ranks (ms):",
    "    save-checkpoint ................................: (3413.14, 3413.14)",
    "    forward-backward ...............................: (8012.33, 8120.91)",
    "max time across ranks (ms):",
    "    load-checkpoint ................................: 1021.55",
    "times across ranks (ms):",
    "  optimizer:",
    "     rank  0: 12.34",
    "     rank  1: 13.01",
    "Step Time : 4.65s GPU utilization: 412.3MODEL_TFLOP/s/GPU",
    # startup chatter (section 2.5)
    "using torch.bfloat16 for parameters ...",
    "setting number of microbatches to constant 16",
    "> building GPT2BPETokenizer tokenizer ...",
    " > padded vocab (size: 50257) with 47 dummy tokens (new size: 50304)",
    "> initializing torch distributed ...",
    "> setting random seeds to 1234 ...",
    "building GPT model ...",
    "> building train, validation, and test datasets ...",
    " > datasets target sizes (minimum size):",
    "    train:      32000000",
    "    validation: 3200640",
    "    test:       640",
    "> building train, validation, and test datasets for GPT ...",
    "> finished creating GPT datasets ...",
    "done with setup ...",
    "training ...",
    # nanotron (values with K/M/G suffixes)
    "05/14/2024 10:11:12 [INFO|DP=0|PP=0|TP=0|node-1]: iteration: 991 / 1000 | consumed_tokens: 634K | "
    "elapsed_time_per_iteration_ms: 45 | tokens_per_sec: 14.1K | tokens_per_sec_per_gpu: 14.1K | global_batch_size: 16 "
    "| lm_loss: 2.1 | lr: 0.0003 | model_tflops_per_gpu: 1.2 | hardware_tflops_per_gpu: 1.2 | grad_norm: 0.31 | "
    "cuda_memory_allocated: 75.2M | cuda_max_memory_reserved: 547M",
    # launch command line (job_config source `cmdline`)
    "Process 413930: /usr/bin/python -u pretrain_gpt.py --tensor-model-parallel-size 2 --pipeline-model-parallel-size "
    "4 --expert-model-parallel-size 8 --seq-length 4096 --bf16 --use-distributed-optimizer --lr=1.5e-4",
    # NeMo 2 / nemo_run (section 2.9)
    "Training epoch 0, iteration 7/29 | lr: 5.389e-06 | global_batch_size: 512 | global_step: 7 | "
    "max_memory_reserved: 57466159104 | max_memory_allocated: 53930270720 | reduced_train_loss: 10.22 | "
    "train_step_timing in s: 27.01 | consumed_samples: 4096 | TFLOPS_per_GPU: 48.58",
    "Training epoch 1, iteration 3/100 | lr: 1e-05 | global_batch_size: 8 | global_step: 103 | "
    "reduced_train_loss: 2.5 | train_step_timing in s: 0.5",
]

ITERATIONS_SCHEMA = trainlog.ITERATIONS_SCHEMA
MEMORY_SCHEMA = trainlog.MEMORY_SCHEMA
EVENTS_SCHEMA = trainlog.EVENTS_SCHEMA
JOB_CONFIG_SCHEMA = trainlog.JOB_CONFIG_SCHEMA
TIMERS_SCHEMA = trainlog.TIMERS_SCHEMA

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
_FLOAT_KEYS["samples_per_s"] = ["samples per second"]
_FLOAT_KEYS["num_zeros"] = ["num zeros"]
_FLOAT_KEYS["params_norm"] = ["params norm"]
_FLOAT_KEYS["energy_j_per_gpu"] = ["energy per GPU (J/iter/GPU)"]
_FLOAT_KEYS["power_w_per_gpu"] = ["power per GPU (W/GPU)"]
_INT_KEYS = {
    "consumed_samples": ["consumed samples"],
    "global_batch_size": ["global batch size"],
    "skipped_iterations": ["number of skipped iterations"],
    "nan_iterations": ["number of nan iterations"],
    "consumed_tokens": ["consumed tokens"],
    "skipped_samples": ["skipped samples"],
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
    # `key: value` as `^([^:]*?)\s*:\s*(.*?)$` read it: the key up to the first colon less its
    # trailing blanks, the value after it less its leading ones, cut by position (that pattern's
    # lazy captures cost 0.5 of 0.63 s on 100,000 iteration lines); the pattern of bare
    # `key value` pieces runs on those alone (a null elsewhere is skipped).
    halves = pl.col("piece").str.splitn(":", 2).struct
    has_colon = pl.col("piece").str.contains(":", literal=True)
    bare = pl.when(~has_colon).then(pl.col("piece")).str.extract_groups(rx(_PIECE_BARE))
    return long.with_columns(
        k=pl.when(has_colon).then(halves.field("field_0").str.strip_chars_end()).otherwise(bare.struct.field("k")),
        v=pl.when(has_colon).then(halves.field("field_1").str.strip_chars_start()).otherwise(bare.struct.field("v")),
    ).filter(pl.col("k").is_not_null() & (pl.col("k").str.len_chars() > 0))


_CONTROL = [chr(code) for code in range(0x20)]


def _json_str(expr: pl.Expr) -> pl.Expr:
    """``expr`` as a JSON string: backslashes, then quotes, escaped and control characters made
    blanks, by literal replaces (two regex passes over every piece cost 0.17 s at 100,000
    iteration lines, these 0.10 s)."""
    escaped = (expr.str.replace_all("\\", "\\\\", literal=True).str.replace_all('"', '\\"', literal=True)
               .str.replace_many(_CONTROL, [" "] * len(_CONTROL)))
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
        m = t.str.extract_groups(rx(_ITERATION))
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
        m = t.str.extract_groups(rx(_VALIDATION))
        valid = valid.select(
            "line_no",
            ts=pl.lit(None, dtype=pl.String),
            validation=pl.lit(True),
            iteration=to_int(m.struct.field("what").str.extract(rx(r"iteration (\d+)"), 1)),
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
        framework=pl.lit(NAME),
    )
    return trainlog.conform(out, ITERATIONS_SCHEMA)


def _memory(df: pl.DataFrame) -> pl.DataFrame:
    t = pl.col("text")
    sub = df.filter(t.str.contains("memory (MB)", literal=True))
    if sub.is_empty():
        return _empty(MEMORY_SCHEMA)
    m = t.str.extract_groups(rx(_MEMORY))
    heads = sub.select(
        "line_no",
        reported_rank=to_int(m.struct.field("rank")),
        label=m.struct.field("label").str.strip_chars().str.replace(rx(r"^\((.*)\)$"), "$1"),
        rest=m.struct.field("rest"),
    ).filter(pl.col("rest").is_not_null())
    if heads.is_empty():
        return _empty(MEMORY_SCHEMA)
    heads = heads.with_columns(
        iteration=to_int(pl.coalesce(
            pl.col("label").str.extract(rx(r"after (\d+) iterations?"), 1),
            pl.col("label").str.extract(rx(r"for iteration (\d+)"), 1),
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
    ).with_columns(source_unit=pl.lit("MB=MiB"), framework=pl.lit(NAME))
    return trainlog.conform(out, MEMORY_SCHEMA)


def _settings(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
    t = pl.col("text")
    frames: list[pl.DataFrame] = []
    extra = pl.Series("line_no", [], dtype=pl.UInt32)

    # Argument dump.
    cand = df.filter(t.str.contains(" arguments ", literal=True) | t.str.starts_with(" "))
    if not cand.is_empty():
        strict = t.str.extract_groups(rx(_ARG_STRICT))
        loose = t.str.extract_groups(rx(_ARG_LOOSE))
        cand = cand.with_columns(
            is_open=t.str.contains(rx(_ARGS_OPEN)),
            is_close=t.str.contains(rx(_ARGS_CLOSE)),
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
        long = pl.concat([   # every key's rows in one Polars call
            world.lazy().select("line_no", key=pl.lit(key), value=t.str.extract(rx(pattern), 1))
            for key, pattern in _WORLD_KEYS
        ]).filter(pl.col("value").is_not_null())
        frames.append(long.select("line_no", source=pl.lit("megatron-startup"), key="key", value="value")
                      .collect(engine="in-memory"))

    # `> initializing tensor model parallel with size 2`
    init = df.filter(t.str.contains(" parallel with size ", literal=True))
    if not init.is_empty():
        m = t.str.extract_groups(rx(_INIT_SIZE))
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
        m = t.str.extract_groups(rx(_DATETIME_MARKER))
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
        pl.col("line_no").cast(pl.Int64).is_in(among(near))
        & pl.col("text").str.contains(rx(r"^\s*-{10,}\s*$"))
    )
    return rules["line_no"].cast(pl.UInt32)


# -- NeMo 2 / nemo_run (section 2.9) ------------------------------------------------------------
_NEMO = r"^\s*Training epoch (?P<epoch>\d+), iteration (?P<it>\d+)/(?P<total>\d+)\s*\|(?P<rest>.*)$"
_NEMO_FLOAT = {
    "learning_rate": ["lr"], "lm_loss": ["reduced_train_loss", "train_loss"],
    "throughput_tflops": ["TFLOPS_per_GPU"], "_step_s": ["train_step_timing in s"],
}
_NEMO_INT = {"global_batch_size": ["global_batch_size"], "consumed_samples": ["consumed_samples"],
             "_global_step": ["global_step"]}
_NEMO_MEMORY = {"max_reserved_mib": ["max_memory_reserved"], "max_allocated_mib": ["max_memory_allocated"]}


def _nemo(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    t = pl.col("text")
    sub = df.filter(t.str.contains("Training epoch ", literal=True))
    if sub.is_empty():
        return _empty(ITERATIONS_SCHEMA), _empty(MEMORY_SCHEMA)
    m = t.str.extract_groups(rx(_NEMO))
    heads = sub.select("line_no", epoch=m.struct.field("epoch"), it=m.struct.field("it"),
                       train_iters=m.struct.field("total"), rest=m.struct.field("rest")
                       ).filter(pl.col("rest").is_not_null())
    if heads.is_empty():
        return _empty(ITERATIONS_SCHEMA), _empty(MEMORY_SCHEMA)
    pieces = _pieces(heads)
    aggs = [_value(keys).str.strip_chars().cast(pl.Float64, strict=False).alias(name)
            for name, keys in {**_NEMO_FLOAT, **_NEMO_MEMORY}.items()]
    aggs += [to_int(_value(keys).str.strip_chars()).alias(name) for name, keys in _NEMO_INT.items()]
    values = pieces.group_by("line_no").agg(aggs).join(trainlog.kv_json(pieces), on="line_no", how="left")
    out = heads.join(values, on="line_no", how="left", maintain_order="left").with_columns(
        iteration=pl.coalesce(pl.col("_global_step"), to_int(pl.col("it"))),
        elapsed_ms=pl.col("_step_s") * 1000.0,
        validation=pl.lit(False),
        framework=pl.lit("nemo"),
    )
    iterations = trainlog.conform(out, ITERATIONS_SCHEMA)
    memory = out.filter(pl.col("max_reserved_mib").is_not_null() | pl.col("max_allocated_mib").is_not_null())
    memory = memory.with_columns(
        max_reserved_mib=pl.col("max_reserved_mib") / 1048576.0,
        max_allocated_mib=pl.col("max_allocated_mib") / 1048576.0,
        label=pl.lit("train step"), source_unit=pl.lit("bytes"),
    )
    return iterations, trainlog.conform(memory, MEMORY_SCHEMA)


# -- nanotron (section 2.2 variants): `MM/DD/YYYY HH:MM:SS [INFO|DP=0|PP=0|TP=0|host]: iteration: ...`
_NANOTRON = (r"^\s*(?P<ts>\d{2}/\d{2}/\d{4} \d{2}:\d{2}:\d{2}) \[\w+\|DP=\d+\|PP=\d+\|TP=\d+[^\]]*\]: "
             r"iteration: (?P<it>\d+) / (?P<total>\d+) \|(?P<rest>.*)$")
_NANO_FLOAT = {"elapsed_ms": ["elapsed_time_per_iteration_ms"], "tokens_per_s": ["tokens_per_sec"],
               "lm_loss": ["lm_loss"], "throughput_tflops": ["model_tflops_per_gpu"], "grad_norm": ["grad_norm"],
               "learning_rate": ["lr"], "consumed_tokens": ["consumed_tokens"], "global_batch_size": ["global_batch_size"],
               "allocated_mib": ["cuda_memory_allocated"], "max_reserved_mib": ["cuda_max_memory_reserved"],
               "max_allocated_mib": ["cuda_max_memory_allocated"], "reserved_mib": ["cuda_memory_reserved"]}


def _suffixed(expr: pl.Expr) -> pl.Expr:
    """nanotron's human_format numbers (``634K``, ``75.2M``, ``1.2G``; 1000-based) -> Float64."""
    text = expr.str.strip_chars()
    base = trainlog.num(text.str.extract(rx(r"^(-?[\d.]+(?:[eE][-+]?\d+)?|nan|-?inf)"), 1))
    unit = text.str.extract(rx(r"^[-\d.eE+]+\s*([KMGTP])$"), 1)
    factor = unit.replace_strict({"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}, default=1.0,
                                 return_dtype=pl.Float64)
    return base * factor


def _nanotron(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    t = pl.col("text")
    sub = df.filter(t.str.contains("]: iteration: ", literal=True))
    if sub.is_empty():
        return _empty(ITERATIONS_SCHEMA), _empty(MEMORY_SCHEMA)
    m = t.str.extract_groups(rx(_NANOTRON))
    heads = sub.select("line_no", ts=m.struct.field("ts"), it=m.struct.field("it"),
                       train_iters=m.struct.field("total"), rest=m.struct.field("rest")
                       ).filter(pl.col("rest").is_not_null())
    if heads.is_empty():
        return _empty(ITERATIONS_SCHEMA), _empty(MEMORY_SCHEMA)
    pieces = _pieces(heads)
    values = pieces.group_by("line_no").agg(
        [_suffixed(_value(keys)).alias(name) for name, keys in _NANO_FLOAT.items()]
    ).join(trainlog.kv_json(pieces), on="line_no", how="left")
    out = heads.join(values, on="line_no", how="left", maintain_order="left").with_columns(
        ts=pl.col("ts").str.strptime(pl.Datetime("us"), "%m/%d/%Y %H:%M:%S", strict=False),
        iteration=to_int(pl.col("it")), validation=pl.lit(False), framework=pl.lit("nanotron"),
        consumed_tokens=pl.col("consumed_tokens").round(0),
    )
    memory = out.filter(pl.any_horizontal([pl.col(c).is_not_null() for c in
                                           ("allocated_mib", "max_reserved_mib", "max_allocated_mib", "reserved_mib")]))
    memory = memory.with_columns([(pl.col(c) / 1048576.0).alias(c) for c in
                                  ("allocated_mib", "max_reserved_mib", "max_allocated_mib", "reserved_mib")]
                                 ).with_columns(label=pl.lit("iteration"), source_unit=pl.lit("bytes(K/M/G=1e3)"))
    return trainlog.conform(out, ITERATIONS_SCHEMA), trainlog.conform(memory, MEMORY_SCHEMA)


# -- checkpoint, rerun and datetime events (sections 2.5-2.7) ----------------------------------
_CK_TS = r"^\s*(?:\[(?P<ts>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?)\]\s*)?"
# The checkpoint, rerun and progress.txt event kinds (``postmortem.parsers.kinds``): optional ts / it / path
# / detail / rank / value groups on the line; tried in order on the lines holding the literal that
# no earlier kind took. Their samples join SAMPLE_LINES.
EVENT_KINDS: list[Kind] = [
    Kind("checkpoint_save_start", "events",
         _CK_TS + r"saving checkpoint at iteration\s+(?P<it>\d+) to (?P<path>\S+)(?: in (?P<detail>\S+) format)?",
         literal="saving checkpoint at iteration",
         samples=("[2026-02-01 03:10:00.000001] saving checkpoint at iteration     200 to /ckpt/run1 in torch_dist format",
                  "saving checkpoint at iteration     400 to /ckpt/run1 in torch_dist format")),
    Kind("checkpoint_save_done", "events",
         _CK_TS + r"successfully saved checkpoint (?:from|at) iteration\s+(?P<it>\d+) to (?P<path>\S+)(?P<detail>.*)$",
         literal="successfully saved checkpoint",
         samples=("  [2026-02-01 03:10:41.300001] successfully saved checkpoint from iteration     200 to /ckpt/run1 "
                  "[ t 1/1, p 1/1 ]",)),
    Kind("checkpoint_async", "events",
         _CK_TS + r"(?P<detail>.*?async checkpoint save) (?:at|for) iteration\s+(?P<it>\d+)(?: to (?P<path>\S+))?",
         literal="async checkpoint",
         samples=("  scheduled an async checkpoint save at iteration     200 to /ckpt/run1",)),
    Kind("checkpoint_load_start", "events",
         _CK_TS + r"loading (?P<detail>distributed |torch_dist |)checkpoint from (?P<path>\S+) at iteration (?P<it>\d+)",
         literal="checkpoint from",
         samples=(" loading distributed checkpoint from /ckpt/run1 at iteration 200",)),
    Kind("checkpoint_load_done", "events",
         _CK_TS + r"successfully loaded checkpoint from (?P<path>\S+)(?P<detail>[^\n]*?) at iteration (?P<it>\d+)",
         literal="successfully loaded checkpoint",
         samples=("  successfully loaded checkpoint from /ckpt/run1 [ t 1/1, p 1/1 ] at iteration 200",)),
    Kind("checkpoint_load_start", "events", r"^\s*(?P<detail>global rank \d+) is loading checkpoint (?P<path>\S+)",
         literal="is loading checkpoint", versions="2019-2020 (per-rank load lines)",
         samples=("global rank 0 is loading checkpoint checkpoints/gpt2_345m/release/mp_rank_00/model_optim_rng.pt",)),
    Kind("checkpoint_load_done", "events", r"^\s+successfully loaded (?P<path>/?[\w.-]+(?:/[\w.-]+)+\.\w+)\s*$",
         literal="successfully loaded ", versions="2019-2020 (per-rank load lines)",
         samples=("  successfully loaded checkpoints/gpt2_345m/release/mp_rank_00/model_optim_rng.pt",)),
    Kind("checkpoint_missing", "events", r"^\s*WARNING: could not find the metadata file (?P<path>\S+)",
         literal="could not find the metadata file",
         samples=("WARNING: could not find the metadata file /ckpt/run1/latest_checkpointed_iteration.txt",)),
    Kind("checkpoint_none", "events", r"^\s*(?P<detail>will not load any checkpoints and will start from random)",
         literal="will not load any checkpoints",
         samples=("    will not load any checkpoints and will start from random",)),
    Kind("checkpoint_warning", "events", r"^\s*(?P<detail>could not find arguments in the checkpoint)",
         literal="could not find arguments in the checkpoint",
         samples=("could not find arguments in the checkpoint ...",)),
    Kind("rerun_unexpected", "events",
         r"^.*?Rank (?P<rank>\d+), node (?P<host>\S+), device (?P<dev>\d+), iteration (?P<it>\d+): "
         r"Unexpected result (?P<value>\S+) \(message='(?P<detail>.*?)'\)",
         literal="Unexpected result", versions="rerun state machine (section 2.7)",
         samples=("Rank 17, node h20-node-03, device 1, iteration 4242: Unexpected result nan (message='found NaN in local "
                  "forward loss calculation')",)),
    Kind("rerun_unexpected", "events",
         r"^.*?Unexpected result (?P<value>\S+) on rank (?P<rank>\d+) at iteration #(?P<it>\d+) "
         r"invocation #\d+ \(message='(?P<detail>.*?)'\)",
         literal="Unexpected result", versions="rerun state machine (section 2.7)",
         samples=("Unexpected result 1e+30 on rank 5 at iteration #77 invocation #1 (message='Spiky loss')",)),
    Kind("progress_txt", "events",
         r"^(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\tJob ID: [^\t]*\t# GPUs: \d+\t(?P<detail>[^\t]*)"
         r"(?:\tIteration: (?P<it>\d+))?",
         literal="\tJob ID: ", versions="progress.txt (--log-progress)",
         samples=("2026-02-01 03:10:41\tJob ID: 4242\t# GPUs: 40\tSaved checkpoint\tIteration: 200\tJob throughput: "
                  "13.1 TFLOP/s/GPU",)),
]
SAMPLE_LINES += samples_of(EVENT_KINDS)


def _match_events(df: pl.DataFrame) -> pl.DataFrame:
    """Each line's first ``EVENT_KINDS`` kind whose literal and pattern it holds, with the
    pattern's groups. Which kind is one query (a filter per kind cost more than the work); the
    groups are read per kind found."""
    t = pl.col("text")
    possible = possible_kinds(df, "text", EVENT_KINDS)     # the others' patterns are not even compiled
    if not possible:
        return pl.DataFrame()
    held = {i: t.str.contains(kind.literal, literal=True) for i, kind in enumerate(EVENT_KINDS) if i in possible}
    at = first_kind([held[i] & t.str.contains(rx(kind.pattern)) if i in possible else None
                     for i, kind in enumerate(EVENT_KINDS)])
    # the patterns read only the lines that hold a literal (on 147,000 lines: 35 ms, not 350)
    hits = (df.lazy().filter(pl.any_horizontal(list(held.values()))).select("line_no", "_stream", "text", _kind=at)
            .filter(pl.col("_kind").is_not_null()).collect(engine="in-memory"))
    frames = []
    for i in sorted(hits["_kind"].unique().to_list()):
        kind = EVENT_KINDS[i]
        m = t.str.extract_groups(rx(kind.pattern))
        groups = {g for g in ("ts", "it", "path", "detail", "rank", "value") if f"(?P<{g}>" in kind.pattern}
        cols = {"kind": pl.lit(kind.name)}
        for g in groups:
            cols[{"it": "iteration", "rank": "reported_rank"}.get(g, g)] = m.struct.field(g)
        frames.append(hits.lazy().filter(pl.col("_kind") == i).select("line_no", "_stream", "text", **cols))
    if not frames:
        return pl.DataFrame()
    # every kind's rows, the missing columns and the conversions below in one Polars call
    out = pl.concat(frames, how="diagonal_relaxed")
    have = out.collect_schema().names()
    out = out.with_columns([pl.lit(None, dtype=pl.String).alias(c) for c in
                            ("ts", "iteration", "path", "detail", "reported_rank", "value") if c not in have])
    return out.with_columns(
        ts=pl.col("ts").str.replace("T", " ").str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S%.f", strict=False),
        iteration=to_int(pl.col("iteration")),
        detail=pl.col("detail").str.strip_chars().replace("", None),
        value=trainlog.num(pl.col("value").str.strip_chars("'\"")),
        message=pl.col("text").str.strip_chars(),
    ).sort("line_no").collect(engine="in-memory")


def _pair(events: pl.DataFrame, start: str, done: str) -> pl.DataFrame:
    """``start`` rows with ``finished`` and ``duration_s`` from the next ``done`` row of the same
    stream (saves are sequential: a next ``done`` of another iteration means this one never finished)."""
    starts = events.filter(pl.col("kind") == start)
    if starts.is_empty():
        return starts
    dones = events.filter(pl.col("kind") == done).select(
        "_stream", "line_no", d_line=pl.col("line_no"), d_ts=pl.col("ts"), d_it=pl.col("iteration"))
    both = pl.concat([starts.select("_stream", "line_no", _start=pl.lit(True)),
                      dones.select("_stream", "line_no", "d_line", "d_ts", "d_it", _start=pl.lit(False))],
                     how="diagonal_relaxed").sort("_stream", "line_no")
    nxt = both.with_columns(pl.col("d_line", "d_ts", "d_it").backward_fill().over("_stream")).filter("_start")
    starts = starts.drop("duration_s", "finished", strict=False).join(
        nxt.select("line_no", "d_line", "d_ts", "d_it"), on="line_no", how="left")
    ok = pl.col("d_line").is_not_null() & (
        pl.col("iteration").is_null() | pl.col("d_it").is_null() | (pl.col("iteration") == pl.col("d_it")))
    return starts.with_columns(
        finished=ok,
        duration_s=pl.when(ok).then((pl.col("d_ts") - pl.col("ts")).dt.total_microseconds() / 1e6),
    ).drop("d_line", "d_ts", "d_it")


def _iteration_events(iterations: pl.DataFrame) -> pl.DataFrame:
    """NaN/inf values and skipped / NaN iteration counters of the iteration lines as events."""
    it = iterations.filter(~pl.col("validation").fill_null(False))
    if it.is_empty():
        return pl.DataFrame()
    checks = [
        ("nan_loss", pl.col("lm_loss").is_nan(), pl.col("lm_loss")),
        ("inf_loss", pl.col("lm_loss").is_infinite(), pl.col("lm_loss")),
        ("nan_grad_norm", pl.col("grad_norm").is_nan(), pl.col("grad_norm")),
        ("inf_grad_norm", pl.col("grad_norm").is_infinite(), pl.col("grad_norm")),
        ("skipped_iterations", pl.col("skipped_iterations") > 0, pl.col("skipped_iterations").cast(pl.Float64)),
        ("nan_iterations", pl.col("nan_iterations") > 0, pl.col("nan_iterations").cast(pl.Float64)),
    ]
    frames = [it.lazy().filter(cond.fill_null(False)).select(
        "line_no", "ts", "iteration", "framework", kind=pl.lit(kind), value=value,
        message=pl.concat_str([pl.lit(kind.replace("_", " ") + " at iteration "),
                               pl.col("iteration").cast(pl.String).fill_null("?")]))
        for kind, cond, value in checks]
    return pl.concat(frames, how="vertical_relaxed").collect(engine="in-memory")   # every check in one call


def _events(df: pl.DataFrame, iterations: pl.DataFrame) -> pl.DataFrame:
    raw = _match_events(df)
    parts = [_iteration_events(iterations)]
    if not raw.is_empty():
        raw = raw.with_columns(finished=pl.lit(None, dtype=pl.Boolean), duration_s=pl.lit(None, dtype=pl.Float64))
        saves = _pair(raw, "checkpoint_save_start", "checkpoint_save_done")
        loads = _pair(raw, "checkpoint_load_start", "checkpoint_load_done")
        paired = pl.concat([saves, loads], how="diagonal_relaxed") if not (saves.is_empty() and loads.is_empty()) \
            else raw.clear()
        rest = raw.filter(~pl.col("line_no").is_in(among(paired["line_no"])))
        merged = pl.concat([rest, paired], how="diagonal_relaxed").with_columns(
            level=pl.when(pl.col("kind").is_in(["checkpoint_missing", "checkpoint_warning", "rerun_unexpected"]))
            .then(pl.lit("warning")).otherwise(pl.lit("info")),
            kind=pl.when((pl.col("kind") == "rerun_unexpected") & pl.col("detail").str.contains("(?i)nan"))
            .then(pl.lit("nan_detected"))
            .when((pl.col("kind") == "rerun_unexpected") & pl.col("detail").str.contains("(?i)inf"))
            .then(pl.lit("inf_detected"))
            .when((pl.col("kind") == "rerun_unexpected") & pl.col("detail").str.contains("(?i)spiky"))
            .then(pl.lit("loss_spike")).otherwise(pl.col("kind")),
        )
        parts.append(merged)
    out = trainlog.stack_conformed(parts, EVENTS_SCHEMA)
    return out.with_columns(framework=pl.col("framework").fill_null(NAME))


# -- timers (section 2.4) -----------------------------------------------------------------------
_TIMER_HEADER = r"^\s*(?:\(min, max\) time across ranks|max time across ranks|times across ranks) \(ms\):\s*$"
_TIMER_MINMAX = r"^\s{2,}(?P<name>[\w./-]+(?: [\w./-]+)*) \.*: \((?P<min>[\d.]+), (?P<max>[\d.]+)\)\s*$"
_TIMER_MAX = r"^\s{2,}(?P<name>[\w./-]+(?: [\w./-]+)*) \.*: (?P<max>[\d.]+)\s*$"
_TIMER_NAME = r"^\s{2,}(?P<name>[\w./-]+):\s*$"
_TIMER_RANK = r"^\s{2,}rank\s+(?P<rank>\d+): (?P<max>[\d.]+)\s*$"
_BRIDGE_STEP = r"^\s*Step Time : (?P<s>[\d.]+)s(?: GPU utilization: (?P<tf>[\d.]+)\s*(?:MODEL_)?TFLOP/s/GPU)?"


def _timers(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
    t = pl.col("text")
    frames = []
    extra = pl.Series("line_no", [], dtype=pl.UInt32)
    # One-line form (before 2022-08): `time (ms) | name: 1.23 | ...`
    one = df.filter(t.str.contains("time (ms) |", literal=True) & ~t.str.contains("rank=", literal=True))
    if not one.is_empty():
        heads = one.select("line_no", rest=t.str.extract(rx(r"^\s*time \(ms\) \|(.*)$"), 1)).filter(
            pl.col("rest").is_not_null())
        if not heads.is_empty():
            p = _pieces(heads)
            frames.append(p.select("line_no", name="k", max_ms=trainlog.num(pl.col("v")),
                                   min_ms=pl.lit(None, dtype=pl.Float64)).filter(pl.col("max_ms").is_not_null()))
    # Block form: a header, then `    name ......: (min, max)` / `: max` / the `all` layout.
    blockish = df.filter(t.str.starts_with("  ") | t.str.contains("across ranks (ms):", literal=True))
    if not blockish.is_empty():
        b = blockish.with_columns(
            is_head=t.str.contains(rx(_TIMER_HEADER)),
            mm=t.str.extract_groups(rx(_TIMER_MINMAX)), mx=t.str.extract_groups(rx(_TIMER_MAX)),
            nm=t.str.extract(rx(_TIMER_NAME), 1), rk=t.str.extract_groups(rx(_TIMER_RANK)))
        extra = b.filter(pl.col("is_head"))["line_no"]
        mm = b.filter(pl.col("mm").struct.field("name").is_not_null() & pl.col("text").str.contains(rx(r" \.{2,}:|\S:")))
        frames.append(mm.select("line_no", name=pl.col("mm").struct.field("name"),
                                min_ms=trainlog.num(pl.col("mm").struct.field("min")),
                                max_ms=trainlog.num(pl.col("mm").struct.field("max"))))
        mx = b.filter(pl.col("mx").struct.field("name").is_not_null() & pl.col("mm").struct.field("name").is_null()
                      & pl.col("text").str.contains(rx(r" \.{2,}: ")))
        frames.append(mx.select("line_no", name=pl.col("mx").struct.field("name"),
                                min_ms=pl.lit(None, dtype=pl.Float64),
                                max_ms=trainlog.num(pl.col("mx").struct.field("max"))))
        # `times across ranks (ms):` then `  name:` and `     rank  r: t` lines, followed per stream.
        heads_all = b.filter(pl.col("is_head") & pl.col("text").str.contains("times across ranks", literal=True))
        if not heads_all.is_empty():
            s = "_stream"
            contiguous = (pl.col("_seq").shift(1).over(s) == pl.col("_seq") - 1).fill_null(False)
            run = b.filter(pl.col("is_head") | pl.col("nm").is_not_null()
                           | pl.col("rk").struct.field("rank").is_not_null()).with_columns(
                _start=pl.col("is_head") | ~contiguous)
            run = run.with_columns(
                _block=pl.col("_start").cum_sum().over(s),
            ).with_columns(
                _in=pl.col("is_head").first().over([s, "_block"]) & pl.col("text").first().over([s, "_block"])
                .str.contains("times across ranks", literal=True),
                _name=pl.col("nm").forward_fill().over([s, "_block"]),
            ).filter(pl.col("_in") & ~pl.col("is_head"))
            names = run.filter(pl.col("nm").is_not_null())
            ranks = run.filter(pl.col("rk").struct.field("rank").is_not_null() & pl.col("_name").is_not_null())
            frames.append(ranks.select("line_no", name="_name", min_ms=pl.lit(None, dtype=pl.Float64),
                                       max_ms=trainlog.num(pl.col("rk").struct.field("max")),
                                       reported_rank=to_int(pl.col("rk").struct.field("rank"))))
            extra = pl.concat([extra, names["line_no"]])
    bridge = df.filter(t.str.contains("Step Time :", literal=True))
    if not bridge.is_empty():
        m = t.str.extract_groups(rx(_BRIDGE_STEP))
        frames.append(bridge.select("line_no", name=pl.lit("step-time"), min_ms=pl.lit(None, dtype=pl.Float64),
                                    max_ms=trainlog.num(m.struct.field("s")) * 1000.0).filter(
            pl.col("max_ms").is_not_null()))
    return trainlog.stack_conformed(frames, TIMERS_SCHEMA, framework=NAME), extra.cast(pl.UInt32)


# -- parameter counts, theoretical memory -> job_config (sections 2.3, 2.5) --------------------
_PARAMS = (r"^\s*>?\s*number of parameters on (?P<where>\(tensor(?:, gtp_weight_remat)?, pipeline\) model parallel "
           r"rank \([\d, ]+\)|model parallel rank \d+): (?P<n>\d+)\s*$")
_THEORY = r"^\s*(?P<k>(?:Total number|Number) of (?:active )?parameters(?: in [\w ]+?)? in billions):\s*(?P<v>[\d.]+)"
_THEORY_KEYS = {
    "Number of parameters in transformer block in billions": "params_transformer_b",
    "Number of parameters in transformer layers in billions": "params_transformer_b",
    "Number of active parameters in transformer block in billions": "params_active_transformer_b",
    "Number of parameters in embedding layers in billions": "params_embedding_b",
    "Total number of parameters in billions": "params_total_b",
    "Total number of active parameters in billions": "params_active_total_b",
    "Number of parameters in most loaded shard in billions": "params_most_loaded_shard_b",
}
_FOOTPRINT = r"Theoretical memory footprints: (?P<rest>.*)$"


def _job_config(df: pl.DataFrame, settings: pl.DataFrame) -> pl.DataFrame:
    t = pl.col("text")
    frames = []
    cfg = settings.filter(~pl.col("key").str.starts_with("datetime:"))
    if not cfg.is_empty():
        frames.append(cfg.select("line_no", "source", key=trainlog.canonical(pl.col("key")),
                                 value="value", raw_key="key"))
    sub = df.filter(t.str.contains("number of parameters on", literal=True))
    if not sub.is_empty():
        m = t.str.extract_groups(rx(_PARAMS))
        frames.append(sub.select("line_no", source=pl.lit("megatron-model"), key=pl.lit("num_parameters"),
                                 value=m.struct.field("n"),
                                 raw_key=pl.concat_str([pl.lit("number of parameters on "), m.struct.field("where")])
                                 ).filter(pl.col("value").is_not_null()))
    sub = df.filter(t.str.contains(" parameters in ", literal=True) & t.str.contains("in billions", literal=True))
    if not sub.is_empty():
        m = t.str.extract_groups(rx(_THEORY))
        frames.append(sub.select("line_no", source=pl.lit("megatron-theoretical"),
                                 key=m.struct.field("k").replace_strict(_THEORY_KEYS, default=None,
                                                                        return_dtype=pl.String),
                                 value=m.struct.field("v"), raw_key=m.struct.field("k")
                                 ).filter(pl.col("value").is_not_null()))
    sub = df.filter(t.str.contains("Theoretical memory footprints:", literal=True))
    if not sub.is_empty():
        long = sub.select("line_no", piece=t.str.extract(rx(_FOOTPRINT), 1).str.split(",")).explode("piece").select(
            "line_no", raw_key=pl.col("piece").str.extract(rx(r"^\s*([\w ]+?)\s*="), 1),
            value=pl.col("piece").str.extract(rx(r"=\s*([\d.]+)\s*MB"), 1)).filter(pl.col("value").is_not_null())
        frames.append(long.select("line_no", source=pl.lit("megatron-theoretical"),
                                  key=pl.concat_str([pl.lit("theoretical_"),
                                                     pl.col("raw_key").str.replace_all(" ", "_"), pl.lit("_mib")]),
                                  value="value", raw_key="raw_key"))
    return trainlog.stack_conformed(frames, JOB_CONFIG_SCHEMA, framework=NAME)


# Startup chatter (section 2.5 "Other"), rank 0; the `> ` may already be peeled by the envelope.
_STARTUP = (r"^\s*(?:>\s*)?(?P<m>initializing torch distributed|setting random seeds to \d+|building \w+ model|"
            r"done with setup|training|finished creating \w+ datasets|building train, validation, and test datasets"
            r"(?: for \w+)?|building \w+ tokenizer|compiling dataset index builder|compiling and loading fused kernels"
            r"|done with dataset index builder\. Compilation time: [\d.]+ seconds|done with compiling and loading "
            r"fused kernels\. Compilation time: [\d.]+ seconds)\s*(?:\.\.\.)?\s*$")
_STARTUP_CFG = [
    ("num_microbatches", r"^\s*setting number of microbatches to constant (?P<v>\d+)\s*$"),
    ("params_dtype", r"^\s*using (?P<v>torch\.\w+) for parameters \.\.\.\s*$"),
    ("padded_vocab_size", r"^\s*>?\s*padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (?P<v>\d+)\)\s*$"),
]
_TARGET_HEAD = r"^\s*>?\s*datasets target sizes \(minimum size\):\s*$"
_TARGET_LINE = r"^\s{4}(?P<k>train|validation|test):\s+(?P<v>\d+)\s*$"


def _startup(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(events, job_config) of Megatron's startup chatter."""
    t = pl.col("text")
    cfg_literals = ("number of microbatches", " for parameters ", "padded vocab")
    # one scan for which parts have a line to read (a chunk with none costs one call, not a dozen)
    held = literals_held(df, "text", [" ...", "Compilation time", "datasets target sizes", *cfg_literals])
    events, cfg = [], []
    # (plans: stack_conformed runs them in its one call)
    if held & {" ...", "Compilation time"}:
        ev = df.lazy().filter(t.str.contains(" ...", literal=True) | t.str.contains("Compilation time", literal=True))
        events.append(ev.filter(t.str.contains(rx(_STARTUP))).select(
            "line_no", kind=pl.lit("megatron_startup"), level=pl.lit("info"),
            detail=t.str.extract(rx(_STARTUP), 1), message=t.str.strip_chars()))
    for (key, pattern), literal in zip(_STARTUP_CFG, cfg_literals):
        if literal not in held:
            continue
        sub = df.lazy().filter(t.str.contains(literal, literal=True)).filter(t.str.contains(rx(pattern)))
        cfg.append(sub.select("line_no", source=pl.lit("megatron-startup"), key=pl.lit(key),
                              value=t.str.extract(rx(pattern), 1), raw_key=t.str.strip_chars()))
    cand = df.clear()
    if "datasets target sizes" in held:
        cand = df.filter(t.str.starts_with("    ") | t.str.contains("datasets target sizes", literal=True))
        cand = cand.filter(t.str.contains(rx(_TARGET_HEAD)) | t.str.contains(rx(_TARGET_LINE)))
    if not cand.is_empty() and cand["text"].str.contains(rx(_TARGET_HEAD)).any():
        s = "_stream"
        contiguous = (pl.col("_seq").shift(1).over(s) == pl.col("_seq") - 1).fill_null(False)
        cand = cand.with_columns(_head=t.str.contains(rx(_TARGET_HEAD)))
        cand = cand.with_columns(_block=(pl.col("_head") | ~contiguous).cum_sum().over(s))
        cand = cand.filter(pl.col("_head").first().over([s, "_block"]))
        heads = cand.filter(pl.col("_head"))
        events.append(heads.select("line_no", kind=pl.lit("megatron_startup"), level=pl.lit("info"),
                                   detail=pl.lit("datasets target sizes"), message=t.str.strip_chars()))
        body = cand.filter(~pl.col("_head"))
        cfg.append(body.select("line_no", source=pl.lit("megatron-startup"),
                               key=pl.concat_str([pl.lit("dataset_target_"), t.str.extract(rx(_TARGET_LINE), 1)]),
                               value=t.str.extract(rx(_TARGET_LINE), 2), raw_key=t.str.strip_chars()))
    return (trainlog.stack_conformed(events, EVENTS_SCHEMA, framework=NAME),
            trainlog.stack_conformed(cfg, JOB_CONFIG_SCHEMA, framework=NAME))


def _empty_tables() -> dict[str, pl.DataFrame]:
    return {"iterations": _empty(ITERATIONS_SCHEMA), "memory": _empty(MEMORY_SCHEMA),
            "settings": _empty(SETTINGS_SCHEMA), "events": _empty(EVENTS_SCHEMA),
            "job_config": _empty(JOB_CONFIG_SCHEMA), "timers": _empty(TIMERS_SCHEMA)}


# The line router: every literal a function above filters the lines on (a kind's literal, a
# ``str.contains(..., literal=True)``; of two ANDed literals one), and the indent of argument dumps,
# timer blocks and dataset target sizes (``starts_with(" ")``). A line with none of them is no
# function's: one scan drops it, and the dozen passes read the rest. A new filter on a literal
# must add it here (its sample line in SAMPLE_LINES would go unconsumed otherwise).
_ROUTE = [
    "iteration", "validation loss at",                                          # _iterations, _nanotron
    "memory (MB)",                                                              # _memory
    "Training epoch ",                                                          # _nemo
    " arguments ", "using world size:", " parallel with size ", "] datetime: ",  # _settings
    "----------",                                                               # _validation_rules
    *(kind.literal for kind in EVENT_KINDS),                                    # _match_events
    "time (ms) |", "across ranks (ms):", "Step Time :",                         # _timers
    "number of parameters on", " parameters in ", "Theoretical memory footprints:",  # _job_config
    " ...", "Compilation time", "number of microbatches", " for parameters ", "padded vocab",
    "datasets target sizes",                                                    # _startup
    " --",                                                                      # trainlog.cmdline_config
]
# Words that several of those hold: routed in their stead (a few more lines read, a faster scan).
_ROUTE_WORDS = ["checkpoint", "successfully", "parameters", "memory", "(ms)", "could not find"]


def parse(lines: pl.DataFrame) -> ParseResult:
    if lines is None or lines.is_empty() or "text" not in lines.columns:
        return ParseResult(tables=_empty_tables())
    text = pl.col("text")
    df = with_stream_where(lines, text.str.starts_with(" ") | any_literal(text, _ROUTE + _ROUTE_WORDS))
    if df.is_empty():   # most chunks of a large run: none of the dozen passes has a line to read
        return ParseResult(tables=_empty_tables())
    iterations = _iterations(df)
    memory = _memory(df)
    nemo_it, nemo_mem = _nemo(df)
    nano_it, nano_mem = _nanotron(df)
    iterations = trainlog.stack([iterations, nemo_it, nano_it], ITERATIONS_SCHEMA)
    memory = trainlog.stack([memory, nemo_mem, nano_mem], MEMORY_SCHEMA)
    settings, banners = _settings(df)
    rules = _validation_rules(df, iterations)
    events = _events(df, iterations)
    timers, timer_heads = _timers(df)
    job_config = _job_config(df, settings)
    startup_events, startup_cfg = _startup(df)
    events = trainlog.stack([events, startup_events], EVENTS_SCHEMA)
    job_config = trainlog.stack([job_config, startup_cfg, trainlog.cmdline_config(df, NAME)], JOB_CONFIG_SCHEMA)
    consumed = consumed_of(
        iterations, memory, settings, events, timers, job_config,
        pl.DataFrame({"line_no": banners}), pl.DataFrame({"line_no": rules}),
        pl.DataFrame({"line_no": timer_heads}),
    )
    return ParseResult(
        tables={"iterations": iterations, "memory": memory, "settings": settings, "events": events,
                "job_config": job_config, "timers": timers},
        consumed=consumed,
    )
