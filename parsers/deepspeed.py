"""DeepSpeed runtime and launcher logs (``docs/formats/training-logs.md`` section 3).

Every DeepSpeed line goes through its logger:
``[2023-09-12 00:26:08,683] [INFO] [logging.py:96:log_dist] [Rank 0] message`` (``log_dist`` adds
``[Rank r]``, ``-1`` before dist init). An editor line number in front of a paste (`` 10 [2023-...``)
is tolerated. Lines handled, by message:

``iterations``  ``step=N, skipped=K, lr=[...], mom=[...]`` (engine, every ``steps_per_print``;
                ``skipped`` is cumulative), ``epoch=E/micro_step=M/global_step=G,
                RunningAvgSamplesPerSec=x, CurrSamplesPerSec=x, MemAllocated=xGB,
                MaxMemAllocated=xGB[, vm %: x, swap %: x]`` and the <= 2022
                ``[timer.py:189:stop] E/S, SamplesPerSec=x, MemAllocated=xGB, MaxMemAllocated=xGB``.
``memory``      the throughput lines' MemAllocated / MaxMemAllocated and ``see_memory_usage``'s
                ``MA x GB  Max_MA x GB  CA x GB  Max_CA x GB`` (label: the message printed on
                the line before; CA = reserved; ``Max_CA`` is rounded to a whole GiB). DeepSpeed
                "GB" is GiB (``source_unit`` = ``GB=GiB``).
``events``      ``CPU Virtual Memory:  used = x GB, percent = y%`` (kind ``cpu_memory``),
                ``OVERFLOW! Rank r Skipping step. Attempted loss scale: x, reducing to y`` (and
                the hysteresis form, ``Grad overflow on iteration i``, ``Overflow detected.
                Skipping step``), checkpoints ``[Torch] Checkpoint TAG is about to be saved!`` ->
                ``[Torch] Checkpoint TAG is ready now!`` (``duration_s``, ``finished``) and
                ``Saving model checkpoint: PATH``, ``optimizer state initialized``.
``timers``      ``rank=0 time (ms) | forward_microstep: x | ...`` (wall-clock breakdown).
``job_config``  ``DeepSpeed info: version=...``, ``DeepSpeed Basic/Final Optimizer = ...``,
                ``Creating fp16 ZeRO stage 3 optimizer, MiCS is enabled False, Hierarchical params
                gather False`` / ``Creating torch.float16 ZeRO stage 3 optimizer``, ``Reduce
                bucket size``, ``Allgather bucket size``, ``CPU Offload: b``, the config dump
                ``[config.py:957:print]   name ........ value``, and the launcher's ``cmd = pdsh
                ... export K=V; ... --world_info=... --node_rank=%n --master_addr=... ``
                (hard-wrapped continuation lines of a pasted ``cmd =`` are followed and
                consumed; every forwarded ``export K=V`` becomes a ``deepspeed-env`` row),
                ``Running on the following workers: h1,h2``, ``WORLD INFO DICT: {...}``,
                ``nnodes=..., num_local_procs=..., node_rank=...``, ``dist_world_size=N``.

Other DeepSpeed logger lines stay unconsumed.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers import trainlog
from postmortem.parsers.ascii_text import rx
from postmortem.parsers.kinds import Kind, samples_of
from postmortem.parsers.base import ParseResult, among, consumed_of, to_int
from postmortem.parsers.lines import with_stream, with_stream_where

NAME = "deepspeed"
# Batched over every log input (postmortem.analyzer.ingest): its many small passes would cost more per file.
BATCH_LITERAL = ""

SAMPLE_LINES = [
    "[2023-09-12 00:26:10,100] [INFO] [stage3.py:380:_setup_for_real_optimizer] optimizer state initialized",
    "[2025-02-07 01:13:40,175] [INFO] [utils.py:781:see_memory_usage] Before initializing optimizer states",
    "[2025-02-07 01:13:40,176] [INFO] [utils.py:782:see_memory_usage] MA 0.0 GB         Max_MA 0.0 GB         "
    "CA 0.77 GB         Max_CA 1 GB ",
    "[2025-02-07 01:13:40,176] [INFO] [utils.py:789:see_memory_usage] CPU Virtual Memory:  used = 8.07 GB, "
    "percent = 25.8%",
    "[2023-05-01 10:00:00,001] [INFO] [logging.py:96:log_dist] [Rank 0] step=100, skipped=2, lr=[0.0001, 0.0001], "
    "mom=[(0.9, 0.95), (0.9, 0.95)]",
    "[2023-05-01 10:00:00,002] [INFO] [timer.py:260:stop] epoch=0/micro_step=400/global_step=100, "
    "RunningAvgSamplesPerSec=48.53, CurrSamplesPerSec=49.01, MemAllocated=20.13GB, MaxMemAllocated=61.9GB",
    "[2024-05-01 10:00:00,002] [INFO] [timer.py:264:stop] epoch=0/micro_step=20/global_step=20, "
    "RunningAvgSamplesPerSec=12.5, CurrSamplesPerSec=12.7, MemAllocated=3.1GB, MaxMemAllocated=9.8GB, "
    "vm %: 31.2, swap %: 0.0",
    "[2022-03-01 10:00:00,002] [INFO] [timer.py:189:stop] 0/40, SamplesPerSec=10.96, MemAllocated=2.58GB, "
    "MaxMemAllocated=7.32GB",
    "[2023-05-01 10:00:00,003] [INFO] [logging.py:96:log_dist] [Rank 0] rank=0 time (ms) | forward_microstep: "
    "312.55 | backward_microstep: 701.11 | backward_inner_microstep: 650.02 | backward_allreduce_microstep: 51.02 "
    "| step_microstep: 20.4",
    "[2023-05-01 10:00:00,004] [INFO] [logging.py:96:log_dist] [Rank 0] rank=0 time (ms) | optimizer_allgather: "
    "12.1 | optimizer_gradients: 3.3 | optimizer_step: 8.8",
    "[2023-05-01 10:00:01,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping "
    "step. Attempted loss scale: 65536, reducing to 32768",
    "[2023-05-01 10:00:01,100] [INFO] [loss_scaler.py:190:update_scale] [deepspeed] OVERFLOW! Rank 3 Skipping "
    "step. Attempted loss scale: 4096, but hysteresis is 2. Reducing hysteresis to 1",
    "[2021-05-01 10:00:01,100] [INFO] [fused_optimizer.py:330:_update_scale] Grad overflow on iteration 51",
    "[2021-05-01 10:00:01,101] [INFO] [fused_optimizer.py:331:_update_scale] Overflow detected. Skipping step. "
    "Attempted loss scale: 131072, reducing to 65536",
    "[2023-05-01 11:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] [Torch] Checkpoint global_step1000 is "
    "about to be saved!",
    "[2023-05-01 11:00:00,010] [INFO] [logging.py:96:log_dist] [Rank 0] Saving model checkpoint: "
    "/ckpt/global_step1000/mp_rank_00_model_states.pt",
    "[2023-05-01 11:00:42,500] [INFO] [engine.py:3411:_save_zero_checkpoint] [Torch] Checkpoint global_step1000 "
    "is ready now!",
    "[2023-03-24 10:26:48,202] [INFO] [runner.py:550:main] cmd = pdsh -S -f 1024 -w node01,gpu1505 export "
    "NCCL_IB_DISABLE=1; export PYTHONPATH=/work;  cd /work; /usr/bin/python3 -u -m deepspeed.launcher.launch "
    "--world_info=eyJub2RlMDEiOiBbMF19 --node_rank=%n --master_addr=node01 --master_port=9901 train.py",
    "[2023-05-01 09:00:00,000] [INFO] [config.py:953:print] DeepSpeedEngine configuration:",
    "[2023-05-01 09:00:00,000] [INFO] [config.py:957:print]   train_micro_batch_size_per_gpu  4",
    "[2023-05-01 09:00:00,000] [INFO] [config.py:957:print]   zero_optimization_stage ...... 3",
]

# The logger header's start: every line ``parse`` reads past its router is one that holds it.
_HEAD_START = r"^\s*(?:\d{1,5} +)?\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3})\] \["
_HEAD = (_HEAD_START + r"(?P<lvl>\w+)\] "
         r"\[(?P<file>[^:\]]+):(?P<line>\d+):(?P<func>[^\]]+)\] (?:\[Rank (?P<rank>-?\d+)\] )?(?P<msg>.*)$")

_STEP = r"^step=(?P<step>\d+), skipped=(?P<skipped>\d+), lr=\[(?P<lr>[^\],]*)[^\]]*\](?:, mom=(?P<mom>.*))?$"
_TPUT = (r"^epoch=(?P<epoch>\d+)/micro_step=(?P<micro>\d+)/global_step=(?P<step>\d+), "
         r"RunningAvgSamplesPerSec=(?P<avg>[\d.eE+-]+), CurrSamplesPerSec=(?P<cur>[\d.eE+-]+|inf|nan), "
         r"MemAllocated=(?P<ma>[\d.]+)GB, MaxMemAllocated=(?P<mma>[\d.]+)GB"
         r"(?:, vm %: (?P<vm>[\d.]+), swap %: (?P<swap>[\d.]+))?")
_TPUT_OLD = (r"^(?P<epoch>\d+)/(?P<step>\d+), SamplesPerSec=(?P<cur>[\d.eE+-]+|inf|nan), "
             r"MemAllocated=(?P<ma>[\d.]+)GB, MaxMemAllocated=(?P<mma>[\d.]+)GB")
_MA = (r"^MA (?P<ma>[\d.]+) GB\s+Max_MA (?P<mma>[\d.]+) GB\s+CA (?P<ca>[\d.]+) GB\s+Max_CA (?P<mca>[\d.]+) GB\s*$")
_CPU = r"^CPU Virtual Memory:\s+used = (?P<used>[\d.]+) GB, percent = (?P<pct>[\d.]+)%"
_OVERFLOW = (r"OVERFLOW! Rank (?P<rank>\d+) Skipping step\. Attempted loss scale: (?P<scale>[\d.]+)"
             r"(?:, reducing to (?P<to>[\d.]+))?")
_GRAD_OVERFLOW = r"^Grad overflow on iteration (?P<it>\d+)"
_OVERFLOW_OLD = r"^Overflow detected\. Skipping step\. Attempted loss scale: (?P<scale>[\d.]+)"
_CK_START = r"^\[Torch\] Checkpoint (?P<tag>\S+) is about to be saved!"
_CK_DONE = r"^\[Torch\] Checkpoint (?P<tag>\S+) is ready now!"
_CK_SAVING = r"^Saving model checkpoint: (?P<path>\S+)"
_WALL = r"^rank=(?P<rank>\d+) time \(ms\) \|(?P<rest>.*)$"
_CONFIG = r"^\s{2,}(?P<k>[A-Za-z_][\w.]*) (?:\.+ |\s+)(?P<v>.*?)\s*$"

# Settings lines (``postmortem.parsers.kinds``): each named group in ``keys`` gives one ``job_config`` row.
SETTING_KINDS: list[Kind] = [
    Kind("deepspeed_version", "job_config", r"^DeepSpeed info: version=(?P<v>[^,]+), git-hash=(?P<h>[^,]+), git-branch=(?P<b>\S+)",
         literal="DeepSpeed info:", keys=(("v", "deepspeed_version"), ("h", "deepspeed_git_hash"), ("b", "deepspeed_git_branch")),
         samples=("[2023-09-12 00:26:08,683] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.10.2, "
                  "git-hash=unknown, git-branch=unknown",)),
    Kind("basic_optimizer", "job_config", r"^DeepSpeed Basic Optimizer = (?P<o>\S+)",
         literal="Basic Optimizer", keys=(("o", "basic_optimizer"),),
         samples=("[2023-09-12 00:26:08,983] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed Basic Optimizer = FusedAdam",)),
    Kind("optimizer", "job_config", r"^DeepSpeed Final Optimizer = (?P<o>\S+)",
         literal="Final Optimizer", keys=(("o", "optimizer"),),
         samples=("[2023-09-12 00:26:09,983] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed Final Optimizer = FusedAdam",)),
    Kind("zero_dtype", "job_config", r"^Creating (?P<d>\S+) ZeRO stage (?P<s>\d+) optimizer(?:, MiCS is enabled (?P<m>\w+), Hierarchical params gather (?P<hp>\w+))?",
         literal="ZeRO stage", keys=(("d", "zero_dtype"), ("s", "zero_stage"), ("m", "mics"), ("hp", "hierarchical_params_gather")),
         samples=(
             "  10 [2023-09-12 00:26:08,983] [INFO] [logging.py:96:log_dist] [Rank 0] Creating fp16 ZeRO stage 3 optimizer, "
             "MiCS is enabled False, Hierarchical params gather False",
             "[2023-09-12 00:26:08,984] [INFO] [logging.py:96:log_dist] [Rank 0] Creating torch.float16 ZeRO stage 3 optimizer",
         )),
    Kind("reduce_bucket_size", "job_config", r"^Reduce bucket size (?P<n>\d+)",
         literal="Reduce bucket size", keys=(("n", "reduce_bucket_size"),),
         samples=("[2023-09-12 00:26:08,985] [INFO] [stage_1_and_2.py:149:__init__] Reduce bucket size 500000000",)),
    Kind("allgather_bucket_size", "job_config", r"^Allgather bucket size (?P<n>\d+)",
         literal="Allgather bucket size", keys=(("n", "allgather_bucket_size"),),
         samples=("[2023-09-12 00:26:08,985] [INFO] [stage_1_and_2.py:150:__init__] Allgather bucket size 500000000",)),
    Kind("cpu_offload", "job_config", r"^CPU Offload: (?P<b>\w+)",
         literal="CPU Offload:", keys=(("b", "cpu_offload"),),
         samples=("[2023-09-12 00:26:08,985] [INFO] [stage_1_and_2.py:151:__init__] CPU Offload: False",)),
    Kind("hosts", "job_config", r"^Running on the following workers: (?P<h>\S+)",
         literal="following workers:", keys=(("h", "hosts"),),
         samples=("[2023-03-24 10:26:48,202] [INFO] [multinode_runner.py:67:get_cmd] Running on the following workers: "
                  "node01,gpu1505",)),
    Kind("world_info", "job_config", r"^WORLD INFO DICT: (?P<w>\{.*\})",
         literal="WORLD INFO DICT:", keys=(("w", "world_info"),),
         samples=("[2023-03-24 10:26:51,118] [INFO] [launch.py:142:main] WORLD INFO DICT: {'node01': [0], 'gpu1505': [0]}",)),
    Kind("nnodes", "job_config", r"^nnodes=(?P<n>\d+), num_local_procs=(?P<l>\d+), node_rank=(?P<r>\d+)",
         literal="nnodes=", keys=(("n", "nnodes"), ("l", "gpus_per_node"), ("r", "node_rank")),
         samples=("[2023-03-24 10:26:51,118] [INFO] [launch.py:148:main] nnodes=2, num_local_procs=1, node_rank=0",)),
    Kind("world_size", "job_config", r"^dist_world_size=(?P<w>\d+)",
         literal="dist_world_size=", keys=(("w", "world_size"),),
         samples=("[2023-03-24 10:26:51,118] [INFO] [launch.py:161:main] dist_world_size=2",)),
    Kind("accelerator", "job_config", r"^Setting ds_accelerator to (?P<a>\w+)",
         literal="ds_accelerator", keys=(("a", "accelerator"),),
         samples=("[2026-07-24 08:00:04,196] [INFO] [real_accelerator.py:203:get_accelerator] Setting ds_accelerator to cuda "
                  "(auto detect)",)),
    Kind("flops_profiler", "job_config", r"^DeepSpeed Flops Profiler Enabled: (?P<b>\w+)",
         literal="Flops Profiler Enabled", keys=(("b", "flops_profiler"),),
         samples=("[2023-09-12 00:26:08,874] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed Flops Profiler Enabled: False",)),
]
SAMPLE_LINES += samples_of(SETTING_KINDS)


def _empty_tables() -> dict[str, pl.DataFrame]:
    return {"iterations": trainlog.empty(trainlog.ITERATIONS_SCHEMA),
            "memory": trainlog.empty(trainlog.MEMORY_SCHEMA),
            "events": trainlog.empty(trainlog.EVENTS_SCHEMA),
            "timers": trainlog.empty(trainlog.TIMERS_SCHEMA),
            "job_config": trainlog.empty(trainlog.JOB_CONFIG_SCHEMA)}


def _gib(expr: pl.Expr) -> pl.Expr:
    return trainlog.num(expr) * 1024.0


def _cmd(lines: pl.DataFrame, heads: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
    """The launcher's ``cmd = ...`` line, with hard-wrapped continuation lines re-joined."""
    starts = heads.filter(pl.col("msg").str.starts_with("cmd = "))
    if starts.is_empty():
        return pl.DataFrame(), pl.Series("line_no", [], dtype=pl.UInt32)
    # The continuation lines have no header (and no literal to route them by): here, where a
    # launcher printed its command, every line of the input and its streams.
    df = with_stream(lines)
    s = "_stream"
    is_head = pl.col("text").str.contains(rx(_HEAD))
    prev_len = pl.col("text").str.len_chars().shift(1).over(s)
    d = df.with_columns(_head=is_head, _cmd=pl.col("line_no").is_in(among(starts["line_no"])))
    # A continuation: no logger header, and the line before it was wrapped (long).
    d = d.with_columns(_cont=~pl.col("_head") & (prev_len >= 100).fill_null(False)
                       & (pl.col("text").str.strip_chars() != ""))
    d = d.with_columns(_grp=(~pl.col("_cont")).cum_sum().over(s))
    d = d.with_columns(_owner=pl.col("_cmd").first().over([s, "_grp"]))
    grp = d.filter(pl.col("_owner")).group_by([s, "_grp"], maintain_order=True).agg(
        line_no=pl.col("line_no").first(), all_lines=pl.col("line_no"), joined=pl.col("text").str.join(""))
    cont = grp.select(pl.col("all_lines").explode())["all_lines"].cast(pl.UInt32)
    cmd = grp.select("line_no", cmd=pl.col("joined").str.extract(r"cmd = (.*)$", 1))
    rows = []
    rows.append(cmd.select("line_no", source=pl.lit("deepspeed-cmd"), key=pl.lit("launch_cmd"), value="cmd",
                           raw_key=pl.lit("cmd")))
    env = cmd.select("line_no", kv=pl.col("cmd").str.extract_all(rx(r"export [A-Za-z_]\w*=[^;]*;"))).explode("kv")
    env = env.filter(pl.col("kv").is_not_null()).select(
        "line_no", source=pl.lit("deepspeed-env"),
        key=pl.col("kv").str.extract(rx(r"export ([A-Za-z_]\w*)="), 1),
        value=pl.col("kv").str.extract(rx(r"export [A-Za-z_]\w*=([^;]*);"), 1), raw_key=pl.lit("export"))
    rows.append(env.with_columns(raw_key=pl.col("key")))
    for key, pattern in (("world_info_b64", r"--world_info=(\S+)"), ("master_addr", r"--master_addr=(\S+)"),
                         ("master_port", r"--master_port=(\d+)"), ("launcher", r"cmd = (\w+)"),
                         ("hosts", r" -w (\S+) ")):
        src = pl.col("cmd") if key != "launcher" else pl.concat_str([pl.lit("cmd = "), pl.col("cmd")])
        rows.append(cmd.select("line_no", source=pl.lit("deepspeed-cmd"), key=pl.lit(key),
                               value=src.str.extract(rx(pattern), 1), raw_key=pl.lit(key)).filter(
            pl.col("value").is_not_null()))
    return pl.concat([r.select("line_no", "source", "key", "value", "raw_key") for r in rows]), cont


def parse(lines: pl.DataFrame) -> ParseResult:
    if lines is None or lines.is_empty() or "text" not in lines.columns:
        return ParseResult(tables=_empty_tables())
    # The line router: every line read below (but _cmd's continuations) holds the logger header
    # (``heads``); one anchored match drops the rest (half of a c10d log holds "] [").
    df = with_stream_where(lines, pl.col("text").str.contains(rx(_HEAD_START)))
    t = pl.col("text")
    sub = df.filter(t.str.contains("] [", literal=True))
    if sub.is_empty():
        return ParseResult(tables=_empty_tables())
    m = t.str.extract_groups(rx(_HEAD))
    heads = sub.with_columns(
        ts=m.struct.field("ts").str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S,%3f", strict=False),
        level=m.struct.field("lvl").str.to_lowercase(), src=m.struct.field("file"),
        reported_rank=to_int(m.struct.field("rank")), msg=m.struct.field("msg"),
    ).filter(pl.col("msg").is_not_null())
    if heads.is_empty():
        return ParseResult(tables=_empty_tables())
    msg = pl.col("msg")
    it_frames, mem_frames, ev_frames, cfg_frames, timer_frames = [], [], [], [], []

    # step=N, skipped=K, lr=[...]
    step = heads.filter(msg.str.starts_with("step="))
    if not step.is_empty():
        g = msg.str.extract_groups(rx(_STEP))
        step = step.with_columns(iteration=to_int(g.struct.field("step")),
                                 skipped_iterations=to_int(g.struct.field("skipped")),
                                 learning_rate=trainlog.num(g.struct.field("lr")),
                                 fields=pl.concat_str([pl.lit('{"lr": '), trainlog.json_str(
                                     msg.str.extract(rx(r"lr=(\[[^\]]*\])"), 1).fill_null("")),
                                     pl.lit(', "mom": '), trainlog.json_str(g.struct.field("mom").fill_null("")),
                                     pl.lit("}")])).filter(pl.col("iteration").is_not_null())
        it_frames.append(step)
    # throughput timers (new and old)
    for literal, pattern in (("RunningAvgSamplesPerSec=", _TPUT), ("SamplesPerSec=", _TPUT_OLD)):
        tp = heads.filter(msg.str.contains(literal, literal=True) & msg.str.contains(rx(pattern)))
        if literal == "SamplesPerSec=":
            tp = tp.filter(~msg.str.contains("RunningAvgSamplesPerSec=", literal=True))
        if tp.is_empty():
            continue
        g = msg.str.extract_groups(rx(pattern))
        tp = tp.with_columns(
            iteration=to_int(g.struct.field("step")), epoch=trainlog.num(g.struct.field("epoch")),
            samples_per_s=trainlog.num(g.struct.field("cur")),
            allocated_mib=_gib(g.struct.field("ma")), max_allocated_mib=_gib(g.struct.field("mma")),
            fields=pl.concat_str([pl.lit('{"raw": '), trainlog.json_str(msg), pl.lit("}")]),
        )
        it_frames.append(tp)
        mem_frames.append(tp.with_columns(label=pl.lit("throughput timer")))
    # see_memory_usage: MA/CA line, label from the message before it in the same stream.
    ma = heads.filter(msg.str.starts_with("MA ") & msg.str.contains(rx(_MA)))
    if not ma.is_empty():
        g = msg.str.extract_groups(rx(_MA))
        ordered = heads.sort("_stream", "_seq").with_columns(
            _prev=pl.col("msg").shift(1).over("_stream"),
            _prev_src=pl.col("src").shift(1).over("_stream"),
            _prev_line=pl.col("line_no").shift(1).over("_stream"))
        ma = ma.join(ordered.select("line_no", "_prev", "_prev_src", "_prev_line"), on="line_no", how="left")
        ma = ma.with_columns(
            allocated_mib=_gib(g.struct.field("ma")), max_allocated_mib=_gib(g.struct.field("mma")),
            reserved_mib=_gib(g.struct.field("ca")), max_reserved_mib=_gib(g.struct.field("mca")),
            label=pl.when(pl.col("_prev_src").is_not_null() & (pl.col("_prev_src") == pl.col("src"))
                          & ~pl.col("_prev").str.starts_with("CPU Virtual Memory"))
            .then(pl.col("_prev").str.strip_chars()))
        mem_frames.append(ma)
        labels = ma.filter(pl.col("label").is_not_null())["_prev_line"]
        ev_frames.append(heads.filter(pl.col("line_no").is_in(among(labels))).with_columns(
            kind=pl.lit("memory_checkpoint"), message=msg, detail=msg))
    cpu = heads.filter(msg.str.starts_with("CPU Virtual Memory:"))
    if not cpu.is_empty():
        g = msg.str.extract_groups(rx(_CPU))
        ev_frames.append(cpu.with_columns(kind=pl.lit("cpu_memory"), message=msg,
                                          value=trainlog.num(g.struct.field("used")) * 1024.0,
                                          detail=pl.concat_str([g.struct.field("pct"), pl.lit("%")])))
    # fp16 overflow
    for literal, pattern, kind in (("OVERFLOW!", _OVERFLOW, "overflow_skip"),
                                   ("Grad overflow on iteration", _GRAD_OVERFLOW, "overflow_skip"),
                                   ("Overflow detected.", _OVERFLOW_OLD, "overflow_skip")):
        ov = heads.filter(msg.str.contains(literal, literal=True) & msg.str.contains(rx(pattern)))
        if ov.is_empty():
            continue
        g = msg.str.extract_groups(rx(pattern))
        fields = {"kind": pl.lit(kind), "message": msg, "level": pl.lit("warning")}
        if "(?P<scale>" in pattern:
            fields["value"] = trainlog.num(g.struct.field("scale"))
        if "(?P<rank>" in pattern:
            fields["reported_rank"] = to_int(g.struct.field("rank"))
        if "(?P<it>" in pattern:
            fields["iteration"] = to_int(g.struct.field("it"))
        ev_frames.append(ov.with_columns(**fields))
    # checkpoints
    ck = heads.filter(msg.str.contains("Checkpoint ", literal=True) | msg.str.starts_with("Saving model checkpoint"))
    if not ck.is_empty():
        ck = ck.with_columns(
            kind=pl.when(msg.str.contains(rx(_CK_START))).then(pl.lit("checkpoint_save_start"))
            .when(msg.str.contains(rx(_CK_DONE))).then(pl.lit("checkpoint_save_done"))
            .when(msg.str.contains(rx(_CK_SAVING))).then(pl.lit("checkpoint_saving")),
            detail=pl.coalesce(msg.str.extract(rx(_CK_START), 1), msg.str.extract(rx(_CK_DONE), 1)),
            path=msg.str.extract(rx(_CK_SAVING), 1), message=msg,
        ).filter(pl.col("kind").is_not_null())
        ck = ck.with_columns(iteration=to_int(pl.col("detail").str.extract(rx(r"(\d+)$"), 1)))
        starts = ck.filter(pl.col("kind") == "checkpoint_save_start")
        dones = ck.filter(pl.col("kind") == "checkpoint_save_done").select(
            "_stream", "detail", d_line="line_no", d_ts="ts")
        if not starts.is_empty():
            # The next `is ready now!` of the same tag after each `about to be saved!`, in the same
            # process's stream (every rank saves the same tag).
            both = pl.concat([starts.select("_stream", "detail", "line_no", _start=pl.lit(True)),
                              dones.select("_stream", "detail", line_no="d_line", d_line="d_line", d_ts="d_ts",
                                           _start=pl.lit(False))], how="diagonal_relaxed").sort("detail", "line_no")
            pair = both.with_columns(pl.col("d_line", "d_ts").backward_fill().over("_stream", "detail")).filter(
                "_start").select("line_no", "d_line", "d_ts")
            starts = starts.join(pair, on="line_no", how="left").with_columns(
                finished=pl.col("d_line").is_not_null(),
                duration_s=(pl.col("d_ts") - pl.col("ts")).dt.total_microseconds() / 1e6)
        ev_frames.append(pl.concat([starts, ck.filter(pl.col("kind") != "checkpoint_save_start")],
                                   how="diagonal_relaxed"))
    opt = heads.filter(msg.str.strip_chars() == "optimizer state initialized")
    if not opt.is_empty():
        ev_frames.append(opt.with_columns(kind=pl.lit("optimizer_state_initialized"), message=msg))
    # wall-clock breakdown
    wall = heads.filter(msg.str.starts_with("rank=") & msg.str.contains("time (ms) |", literal=True))
    if not wall.is_empty():
        g = msg.str.extract_groups(rx(_WALL))
        long = wall.select("line_no", rank=to_int(g.struct.field("rank")),
                           piece=g.struct.field("rest").str.split("|")).explode("piece").with_columns(
            name=pl.col("piece").str.extract(rx(r"^\s*([^:]+?)\s*:"), 1),
            max_ms=trainlog.num(pl.col("piece").str.extract(rx(r":\s*(\S+)\s*$"), 1))).filter(
            pl.col("name").is_not_null() & pl.col("max_ms").is_not_null())
        timer_frames.append(long.with_columns(reported_rank="rank"))
    # engine / ZeRO / launcher settings
    cfg_frames += trainlog.settings_rows(heads, msg, SETTING_KINDS, "deepspeed-log")
    conf = heads.filter(pl.col("src").str.starts_with("config.py") & msg.str.contains(rx(_CONFIG)))
    if not conf.is_empty():
        g = msg.str.extract_groups(rx(_CONFIG))
        cfg_frames.append(conf.select("line_no", source=pl.lit("deepspeed-config"),
                                      key=trainlog.canonical(g.struct.field("k")), value=g.struct.field("v"),
                                      raw_key=g.struct.field("k")))
    banner = heads.filter(msg.str.strip_chars().is_in(["DeepSpeedEngine configuration:", "DeepSpeed Config:"]))
    cmd, cmd_lines = _cmd(lines, heads)
    cmd_lines = pl.concat([cmd_lines, banner["line_no"].cast(pl.UInt32)])
    if not cmd.is_empty():
        cfg_frames.append(cmd)

    iterations = trainlog.stack_conformed(it_frames, trainlog.ITERATIONS_SCHEMA, framework=NAME, validation=False)
    memory = trainlog.stack_conformed(mem_frames, trainlog.MEMORY_SCHEMA, framework=NAME, source_unit="GB=GiB")
    events = trainlog.stack_conformed(ev_frames, trainlog.EVENTS_SCHEMA, framework=NAME)
    timers = trainlog.stack_conformed(timer_frames, trainlog.TIMERS_SCHEMA, framework=NAME)
    job_config = trainlog.stack_conformed(cfg_frames, trainlog.JOB_CONFIG_SCHEMA, framework=NAME)
    consumed = consumed_of(iterations, memory, events, timers, job_config, pl.DataFrame({"line_no": cmd_lines}))
    return ParseResult(tables={"iterations": iterations, "memory": memory, "events": events, "timers": timers,
                               "job_config": job_config}, consumed=consumed)
