"""torchtitan and PyTorch Lightning logs (``docs/formats/training-logs.md`` sections 6 and 5).

torchtitan (logger ``[titan] 2026-02-24 19:46:17,508 - root - INFO - message``; the ``[titan] ``
tag is optional so older builds and bare pastes read the same):

``iterations``  ``step: {step:2}  loss: {loss:8.5f}  [grad_norm: {gn:7.4f}  ]memory:
                {GiB:5.2f}GiB({pct:.2f}%)  tps: {tps:,}  [tflops: {x:,.2f}  mfu: {x:.2f}%]`` (fields
                two spaces apart; ``grad_norm`` from 2025-06, ``tflops`` from 2025-02; ``mfu: N/A``
                under FP8/MX) and ``validate step: ...`` (``validation`` true). ``tps`` is tokens/s
                per device.
``memory``      the step line's ``memory`` (peak **reserved** GiB since the last log -> MiB;
                ``source_unit`` ``GiB``), its percentage, and the capacity it implies (GiB / pct);
                the ``CUDA capacity: NAME with X.XXGiB memory`` device line gives the capacity.
``events``      ``N CUDA memory allocation retries.``, ``N CUDA OOM errors thrown.``, ``[GC]
                Peforming periodical GC collection. X seconds.`` (sic), ``Dumping profiler traces at
                step N``, ``Finished dumping profiler traces in X seconds``, checkpoint ``Saving the
                checkpoint (or staging if async is enabled).`` / ``Finished saving the checkpoint
                (or staging if async is enabled)in X seconds.`` / ``Loading the checkpoint at step
                N.`` / ``Finished loading the checkpoint in X seconds.`` [mem].
``job_config``  ``Running with args: {...}`` (``job.print_args``; leaf keys, canonical where known)
                and ``Building N-D device mesh with ['dp_shard', 'tp'], [4, 2]`` [mem], the device
                line (``device_name``, ``device_capacity_gib``), ``Model NAME size:
                N total parameters``, ``Training starts at step N[, with local batch size B, global
                batch size G, sequence length S, total steps T (warmup W)]``.

Lightning:

``job_config``  ``GPU available: True (cuda), used: True`` (1.x ``GPU available: True, used:
                True``), ``TPU available: False, using: 0 TPU cores``, ``LOCAL_RANK: 0 -
                CUDA_VISIBLE_DEVICES: [0,1,2,3]``, ``Initializing distributed: GLOBAL_RANK: 0, MEMBER:
                1/5`` (1.x ``initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/8``: ``global_rank`` and
                ``world_size`` rows, one per line, so duplicates stay visible), ``[rank: 0] Seed set
                to 42`` / ``Global seed set to 42``, model summary ``7.0 B     Trainable params`` /
                ``Non-trainable params`` / ``Total params`` / ``Total estimated model params size
                (MB)``.
``iterations``  the ``Epoch E: pct%|bar| n/total [elapsed<eta, rate, loss=..., v_num=0]`` bar:
                ``iteration`` = batch index n within the epoch, ``epoch``, ``lm_loss`` from the
                postfix ``loss=`` / ``train_loss=`` / ``reduced_train_loss=`` (the bar itself is
                also a ``train_progress`` row, from ``postmortem.parsers.hf_trainer``).
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers import trainlog
from postmortem.parsers.ascii_text import rx
from postmortem.parsers.kinds import Kind, samples_of
from postmortem.parsers.base import ParseResult, consumed_of, to_int
from postmortem.parsers.lines import any_literal, with_stream_where

NAME = "titan_lightning"
# Batched over every log input (postmortem.analyzer.ingest): its many small passes would cost more per file.
BATCH_LITERAL = ""

SAMPLE_LINES = [
    "[titan] 2025-06-16 22:30:50,322 - root - INFO - step: 200  loss:  6.1384  memory: 49.66GiB(52.28%)  "
    "tps: 5,856  tflops: 339.16  mfu: 34.29%",
    "[titan] 2026-05-18 16:04:46,338 - root - INFO - step: 14  loss:  3.24405  grad_norm:  0.8319  memory:  "
    "9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%",
    "[titan] 2025-01-10 10:00:00,000 - root - INFO - step:  5  loss: 10.2212  memory: 40.12GiB(42.20%)  "
    "wps: 1,234  mfu: 12.01%",
    "[titan] 2026-05-18 16:05:00,000 - root - INFO - step: 30  loss:  2.50000  grad_norm:  0.5000  memory: "
    "70.00GiB(73.70%)  tps: 9,000  tflops: 800.00  mfu: N/A",
    "[titan] 2026-05-18 16:06:00,000 - root - INFO - validate step: 30  loss:  2.6100  memory: 70.00GiB(73.70%)  "
    "tps: 21,000",
    "[titan] 2026-02-24 19:46:17,000 - root - INFO - Starting job: Llama 3 8B training",
    "[titan] 2026-02-24 19:46:17,508 - root - INFO - CUDA capacity: NVIDIA H100 80GB HBM3 with 79.11GiB memory",
    "[titan] 2026-02-24 19:46:18,000 - root - INFO - Model llama3 8B size: 8,030,261,248 total parameters",
    "[titan] 2026-02-24 19:46:19,000 - root - INFO - Training starts at step 1, with local batch size 1, global "
    "batch size 8, sequence length 8192, total steps 1000 (warmup 200)",
    "[titan] 2026-02-24 19:46:16,000 - root - INFO - Running with args: {'job': {'dump_folder': './outputs'}, "
    "'training': {'local_batch_size': 2, 'seq_len': 8192, 'steps': 1000}, 'parallelism': "
    "{'data_parallel_shard_degree': -1, 'tensor_parallel_degree': 2, 'pipeline_parallel_degree': 1, "
    "'context_parallel_degree': 1, 'expert_parallel_degree': 8}}",
    "[titan] 2026-02-24 19:46:16,500 - root - INFO - Building 2-D device mesh with ['dp_shard', 'tp'], [4, 2]",
    "Epoch 0:  45%|████▌     | 30/67 [27:15<23:13, 37.65s/it, loss=2.31, v_num=0]",
    "Epoch 3: 100%|██████████| 67/67 [00:41<00:00,  1.62it/s, v_num=1, train_loss=0.912]",
]

_HEAD = (r"^\s*(?:\[titan\]\s*)?(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}) - (?P<name>[\w.]+) - "
         r"(?P<lvl>[A-Z]+) - (?P<msg>.*)$")
_STEP = (r"^(?P<val>validate )?step:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>\S+)(?:\s+grad_norm:\s*(?P<gn>\S+))?"
         r"\s+memory:\s*(?P<mem>[\d.]+)GiB\((?P<pct>[\d.]+)%\)"
         r"(?:\s+[tw]ps:\s*(?P<tps>[\d,]+))?(?:\s+tflops:\s*(?P<tf>[\d,.]+|N/A))?(?:\s+mfu:\s*(?P<mfu>[\d.]+|N/A)%?)?")
_DEVICE = r"^(?P<kind>\w+) capacity: (?P<dev>.+?) with (?P<cap>[\d.]+)GiB memory"
_MODEL = r"^Model (?P<m>.+?) size: (?P<n>[\d,]+) total parameters"
_STARTS = (r"^Training starts at step (?P<s>\d+)(?:, with local batch size (?P<lb>\d+), global batch size (?P<gb>\d+)"
           r"(?:, sequence length (?P<sl>\d+))?, total steps (?P<ts>\d+) \(warmup (?P<wu>\d+)\))?")
_ARG_PAIR = r"'(\w+)': ('[^']*'|[^,{}\[\]]+|\[[^\]]*\])"
_MESH = r"^Building \d+-D device mesh with \[(?P<names>[^\]]*)\], \[(?P<sizes>[^\]]*)\]"
# torchtitan's events (on the message after the logger header), first match wins; level: _TITAN_LEVELS.
TITAN_EVENT_KINDS: list[Kind] = [
    Kind("alloc_retries", "events", r"^(?P<v>\d+) CUDA memory allocation retries",
         samples=("[titan] 2026-02-24 19:47:19,000 - root - WARNING - 3 CUDA memory allocation retries.",)),
    Kind("oom_errors", "events", r"^(?P<v>\d+) CUDA OOM errors thrown",
         samples=("[titan] 2026-02-24 19:47:19,001 - root - WARNING - 1 CUDA OOM errors thrown.",)),
    Kind("gc", "events", r"^\[GC\] Pe(?:r)?f?orming periodical GC collection(?:\.| took) (?P<d>[\d.]+) seconds",
         samples=(
             "[titan] 2025-06-16 22:30:48,735 - root - INFO - [GC] Peforming periodical GC collection. 0.06 seconds.",
             "[titan] 2025-06-16 22:40:31,000 - root - INFO - [GC] Performing periodical GC collection took 0.05 seconds",
         )),
    Kind("profiler_dump_start", "events", r"^Dumping profiler traces at step (?P<it>\d+)",
         samples=("[titan] 2025-06-16 22:30:50,758 - root - INFO - Dumping profiler traces at step 200",)),
    Kind("profiler_dump_done", "events", r"^Finished dumping profiler traces in (?P<d>[\d.]+) seconds",
         samples=("[titan] 2025-06-16 22:30:50,976 - root - INFO - Finished dumping profiler traces in 0.22 seconds",)),
    Kind("checkpoint_save_start", "events", r"^Saving (?:the )?checkpoint(?: at step (?P<it>\d+))?",
         samples=("[titan] 2025-06-16 22:40:00,000 - root - INFO - Saving the checkpoint (or staging if async is enabled).",)),
    Kind("checkpoint_save_done", "events", r"^Finished saving the checkpoint.*?in (?P<d>[\d.]+) seconds",
         samples=("[titan] 2025-06-16 22:40:31,500 - root - INFO - Finished saving the checkpoint (or staging if async is "
                  "enabled)in 31.50 seconds.",)),
    Kind("checkpoint_load_start", "events", r"^Loading the checkpoint(?: at step (?P<it>\d+))?",
         samples=("[titan] 2025-06-16 22:00:00,000 - root - INFO - Loading the checkpoint at step 100.",)),
    Kind("checkpoint_load_done", "events", r"^Finished loading the checkpoint in (?P<d>[\d.]+) seconds",
         samples=("[titan] 2025-06-16 22:00:09,000 - root - INFO - Finished loading the checkpoint in 9.00 seconds.",)),
]
_TITAN_LEVELS = {"alloc_retries": "warning", "oom_errors": "error"}   # the rest: info
SAMPLE_LINES += samples_of(TITAN_EVENT_KINDS)

# Settings lines (``postmortem.parsers.kinds``): each named group in ``keys`` gives one ``job_config`` row.
LIGHTNING_SETTING_KINDS: list[Kind] = [
    Kind("gpu_available", "job_config", r"^GPU available: (?P<a>\w+)(?: \((?P<k>\w+)\))?, used: (?P<u>\w+)\s*$",
         literal="available: ", keys=(("a", "gpu_available"), ("k", "accelerator"), ("u", "gpu_used")),
         samples=('GPU available: True (cuda), used: True', 'GPU available: True, used: True')),
    Kind("tpu_available", "job_config", r"^TPU available: (?P<a>\w+), using: (?P<n>\d+) TPU cores\s*$",
         literal="available: ", keys=(("a", "tpu_available"), ("n", "tpu_cores")),
         samples=('TPU available: False, using: 0 TPU cores',)),
    Kind("local_rank", "job_config", r"^LOCAL_RANK: (?P<l>\d+) - CUDA_VISIBLE_DEVICES: (?P<d>\[.*\])\s*$",
         literal="LOCAL_RANK: ", keys=(("l", "local_rank"), ("d", "cuda_visible_devices")),
         samples=('LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0,1,2,3]',)),
    Kind("global_rank", "job_config", r"^(?:Initializing distributed|initializing ddp): GLOBAL_RANK: (?P<g>\d+), MEMBER: (?P<m>\d+)/(?P<w>\d+)\s*$",
         literal="GLOBAL_RANK: ", keys=(("g", "global_rank"), ("m", "member"), ("w", "world_size")),
         samples=('Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/5', 'initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/8')),
    Kind("seed", "job_config", r"^(?:\[rank: \d+\] )?(?:Global seed set|Seed set) to (?P<s>\d+)\s*$",
         literal="eed set to ", keys=(("s", "seed"),),
         samples=('[rank: 0] Seed set to 42', 'Global seed set to 42')),
    Kind("model_params", "job_config", r"^(?P<v>[\d.,]+(?: [KMBT])?)\s+(?P<k>Trainable params|Non-trainable params|Total params)\s*$",
         literal=" params", keys=(("v", None),),
         samples=('7.0 B     Trainable params', '0         Non-trainable params', '7.0 B     Total params')),
    Kind("model_size_mb", "job_config", r"^(?P<v>[\d.,]+)\s*Total estimated model params size \(MB\)\s*$",
         literal="Total estimated model params size", keys=(("v", "model_size_mb"),),
         samples=('28,000.000Total estimated model params size (MB)',)),
]
SAMPLE_LINES += samples_of(LIGHTNING_SETTING_KINDS)
_EPOCH_BAR = (r"^\s*Epoch (?P<e>\d+):\s*(?P<pct>\d+)%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+|\?) "
              r"\[[^\]]*?(?:, (?P<postfix>[A-Za-z_][^\]]*=[^\]]*))?\]\s*$")


def _empty_tables() -> dict[str, pl.DataFrame]:
    return {"iterations": trainlog.empty(trainlog.ITERATIONS_SCHEMA),
            "memory": trainlog.empty(trainlog.MEMORY_SCHEMA),
            "events": trainlog.empty(trainlog.EVENTS_SCHEMA),
            "job_config": trainlog.empty(trainlog.JOB_CONFIG_SCHEMA)}


def _titan(df: pl.DataFrame) -> tuple[list, list, list, list]:
    t = pl.col("text")
    its, mems, evs, cfgs = [], [], [], []
    sub = df.filter(t.str.contains(" - ", literal=True))
    if sub.is_empty():
        return its, mems, evs, cfgs
    m = t.str.extract_groups(rx(_HEAD))
    heads = sub.with_columns(
        ts=m.struct.field("ts").str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S,%3f", strict=False),
        level=m.struct.field("lvl").str.to_lowercase(), msg=m.struct.field("msg"),
    ).filter(pl.col("msg").is_not_null())
    if heads.is_empty():
        return its, mems, evs, cfgs
    msg = pl.col("msg")
    steps = heads.filter(msg.str.contains("step:", literal=True) & msg.str.contains(rx(_STEP)))
    if not steps.is_empty():
        g = msg.str.extract_groups(rx(_STEP))
        steps = steps.with_columns(
            validation=g.struct.field("val").is_not_null(), iteration=to_int(g.struct.field("step")),
            lm_loss=trainlog.num(g.struct.field("loss")), grad_norm=trainlog.num(g.struct.field("gn")),
            tokens_per_s=trainlog.num(g.struct.field("tps")), throughput_tflops=trainlog.num(g.struct.field("tf")),
            mfu_pct=trainlog.num(g.struct.field("mfu")),
            max_reserved_mib=trainlog.num(g.struct.field("mem")) * 1024.0,
            pct_of_capacity=trainlog.num(g.struct.field("pct")),
            fields=pl.concat_str([pl.lit('{"raw": '), trainlog.json_str(msg), pl.lit("}")]),
        ).with_columns(
            capacity_mib=pl.when(pl.col("pct_of_capacity") > 0)
            .then(pl.col("max_reserved_mib") / (pl.col("pct_of_capacity") / 100.0)),
            iteration_for_mem=pl.col("iteration"),
        )
        its.append(steps.with_columns(framework=pl.lit("torchtitan")))
        mems.append(steps.with_columns(
            label=pl.when(pl.col("validation")).then(pl.lit("validate step")).otherwise(pl.lit("step")),
            source_unit=pl.lit("GiB"), framework=pl.lit("torchtitan")))
    dev = heads.filter(msg.str.contains(" capacity: ", literal=True) & msg.str.contains(rx(_DEVICE)))
    if not dev.is_empty():
        g = msg.str.extract_groups(rx(_DEVICE))
        for group, key in (("kind", "device_backend"), ("dev", "device_name"), ("cap", "device_capacity_gib")):
            cfgs.append(dev.select("line_no", source=pl.lit("torchtitan-log"), key=pl.lit(key),
                                   value=g.struct.field(group), raw_key=pl.lit(key), framework=pl.lit("torchtitan")))
    for pattern, keys in ((r"^Starting job: (?P<j>.+?)\s*$", (("j", "job_description"),)),
                          (_MODEL, (("n", "num_parameters"), ("m", "model"))),
                          (_STARTS, (("s", "start_step"), ("lb", "micro_batch_size"), ("gb", "global_batch_size"),
                                     ("sl", "seq_length"), ("ts", "train_iters"), ("wu", "warmup_steps")))):
        c = heads.filter(msg.str.contains(rx(pattern)))
        if c.is_empty():
            continue
        g = msg.str.extract_groups(rx(pattern))
        for group, key in keys:
            cfgs.append(c.select("line_no", source=pl.lit("torchtitan-log"), key=pl.lit(key),
                                 value=g.struct.field(group).str.replace_all(",", ""), raw_key=pl.lit(key),
                                 framework=pl.lit("torchtitan")).filter(pl.col("value").is_not_null()))
    # `Running with args: {...}` (job.print_args) and `Building N-D device mesh with [names], [sizes]` [mem]
    args = heads.filter(msg.str.starts_with("Running with args: {"))
    if not args.is_empty():
        kv = args.select("line_no", a=msg.str.extract_all(rx(_ARG_PAIR))).explode("a").filter(pl.col("a").is_not_null())
        kv = kv.select("line_no", raw_key=pl.col("a").str.extract(rx(_ARG_PAIR), 1),
                       value=pl.col("a").str.extract(rx(_ARG_PAIR), 2).str.strip_chars().str.strip_chars("'"))
        cfgs.append(kv.with_columns(source=pl.lit("torchtitan-args"), key=trainlog.canonical(pl.col("raw_key")),
                                    framework=pl.lit("torchtitan")))
    mesh = heads.filter(msg.str.starts_with("Building ") & msg.str.contains(rx(_MESH)))
    if not mesh.is_empty():
        g = msg.str.extract_groups(rx(_MESH))
        dims = mesh.select("line_no", n=g.struct.field("names").str.split(","),
                           v=g.struct.field("sizes").str.split(",")).explode("n", "v")
        dims = dims.with_columns(raw_key=pl.col("n").str.strip_chars().str.strip_chars("'\""),
                                 value=pl.col("v").str.strip_chars())
        cfgs.append(dims.select("line_no", "raw_key", "value", source=pl.lit("torchtitan-mesh"),
                                key=pl.col("raw_key").replace({"dp": "dp", "dp_shard": "dp_shard",
                                                               "dp_replicate": "dp_replicate"}),
                                framework=pl.lit("torchtitan")))
    for event in TITAN_EVENT_KINDS:
        kind, pattern, level = event.name, event.pattern, _TITAN_LEVELS.get(event.name, "info")
        e = heads.filter(msg.str.contains(rx(pattern)))
        if e.is_empty():
            continue
        g = msg.str.extract_groups(rx(pattern))
        cols = {"kind": pl.lit(kind), "message": msg, "level": pl.lit(level), "framework": pl.lit("torchtitan")}
        if "(?P<v>" in pattern:
            cols["value"] = trainlog.num(g.struct.field("v"))
        if "(?P<d>" in pattern:
            cols["duration_s"] = trainlog.num(g.struct.field("d"))
        if "(?P<it>" in pattern:
            cols["iteration"] = to_int(g.struct.field("it"))
        if kind.endswith("_done"):
            cols["finished"] = pl.lit(True)
        evs.append(e.with_columns(**cols))
    return its, mems, evs, cfgs


def _lightning(df: pl.DataFrame) -> tuple[list, list]:
    t = pl.col("text")
    its, cfgs = [], []
    cfgs += [f.with_columns(framework=pl.lit("lightning"))
             for f in trainlog.settings_rows(df, t, LIGHTNING_SETTING_KINDS, "lightning-log")]
    bars = df.filter(t.str.contains("Epoch ", literal=True) & t.str.contains(rx(_EPOCH_BAR)))
    if not bars.is_empty():
        g = t.str.extract_groups(rx(_EPOCH_BAR))
        post = g.struct.field("postfix")
        loss = pl.coalesce([post.str.extract(rx(rf"(?:^|, ){k}=([^,\]]+)"), 1)
                            for k in ("loss", "train_loss", "reduced_train_loss", "train_loss_step")])
        its.append(bars.with_columns(
            iteration=to_int(g.struct.field("n")), train_iters=to_int(g.struct.field("total")),
            epoch=trainlog.num(g.struct.field("e")), lm_loss=trainlog.num(loss), validation=pl.lit(False),
            fields=pl.concat_str([pl.lit('{"postfix": '), trainlog.json_str(post.fill_null("")), pl.lit("}")]),
            framework=pl.lit("lightning")))
    return its, cfgs


# The line router: every literal ``_titan`` and ``_lightning`` filter the lines on (torchtitan's
# reads only lines with the logger's `` - ``). A line with none of them is no function's: one
# scan drops it. A new filter on a literal must add it here (its sample would go unconsumed otherwise).
_ROUTE = [
    " - ",                                                                   # _titan
    *(kind.literal for kind in LIGHTNING_SETTING_KINDS), "Epoch ",           # _lightning
]


def parse(lines: pl.DataFrame) -> ParseResult:
    if lines is None or lines.is_empty() or "text" not in lines.columns:
        return ParseResult(tables=_empty_tables())
    df = with_stream_where(lines, any_literal(pl.col("text"), _ROUTE))
    if df.is_empty():   # most chunks of a large run
        return ParseResult(tables=_empty_tables())
    its, mems, evs, cfgs = _titan(df)
    l_its, l_cfgs = _lightning(df)
    its += l_its
    cfgs += l_cfgs
    tables = {
        "iterations": trainlog.stack_conformed(its, trainlog.ITERATIONS_SCHEMA),
        "memory": trainlog.stack_conformed([f.with_columns(iteration=pl.col("iteration_for_mem")) for f in mems],
                                           trainlog.MEMORY_SCHEMA),
        "events": trainlog.stack_conformed(evs, trainlog.EVENTS_SCHEMA),
        "job_config": trainlog.stack_conformed(cfgs, trainlog.JOB_CONFIG_SCHEMA),
    }
    consumed = consumed_of(*tables.values())
    return ParseResult(tables=tables, consumed=consumed)
