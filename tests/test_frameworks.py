"""Training-framework logs (issue 4): Megatron family, DeepSpeed, HF Trainer, torchtitan, Lightning.

Per format and layout: sample lines and the fields they must yield; generated runs of every
framework parse with no unparsed framework line; every real excerpt under training/ has its
iteration lines, memory reports and checkpoints found; and ``postmortem query`` answers the
questions a responder asks (last iteration per rank, peak memory per rank, the parallel layout).
"""
from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import polars as pl
import pytest

from postmortem import parsers
from postmortem.parsers import deepspeed, hf_trainer, megatron, titan_lightning, trainlog
from postmortem.parsers.lines import envelope

FRAMEWORK_PARSERS = [megatron, deepspeed, hf_trainer, titan_lightning]


def parse(module, *texts: str):
    return module.parse(envelope(("\n".join(texts) + "\n").encode()))


def union(lines: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The framework tables of all four parsers over one input, and the consumed line numbers."""
    tables: dict[str, list[pl.DataFrame]] = {}
    consumed = []
    for module in FRAMEWORK_PARSERS:
        result = module.parse(lines)
        consumed.append(result.consumed)
        for name, frame in result.tables.items():
            tables.setdefault(name, []).append(frame)
    out = {name: pl.concat(frames, how="diagonal_relaxed") for name, frames in tables.items()}
    out["_consumed"] = pl.concat(consumed).unique().to_frame()
    return out


# -- shared table shapes ---------------------------------------------------------------------------

@pytest.mark.parametrize("module", FRAMEWORK_PARSERS, ids=lambda m: m.NAME)
def test_tables_have_the_shared_schemas(module):
    for data in (b"", b"\x00\xff" * 100, ("\n".join(module.SAMPLE_LINES) + "\n").encode()):
        result = module.parse(envelope(data))
        schemas = {"iterations": trainlog.ITERATIONS_SCHEMA, "memory": trainlog.MEMORY_SCHEMA,
                   "events": trainlog.EVENTS_SCHEMA, "job_config": trainlog.JOB_CONFIG_SCHEMA,
                   "timers": trainlog.TIMERS_SCHEMA, "train_progress": trainlog.PROGRESS_SCHEMA}
        for name, frame in result.tables.items():
            if name in schemas:
                assert dict(frame.schema) == schemas[name], (module.NAME, name)


@pytest.mark.parametrize("module", FRAMEWORK_PARSERS, ids=lambda m: m.NAME)
def test_registered(module):
    assert module in parsers.LOG_PARSERS


# -- Megatron family -------------------------------------------------------------------------------

def test_megatron_checkpoint_save_and_load():
    r = parse(megatron,
              "[2026-02-01 03:10:00.000001] saving checkpoint at iteration     200 to /ckpt/run1 in torch_dist format",
              "  [2026-02-01 03:10:41.300001] successfully saved checkpoint from iteration     200 to /ckpt/run1 "
              "[ t 1/1, p 1/1 ]",
              "[2026-02-01 04:10:00.000001] saving checkpoint at iteration     400 to /ckpt/run1 in torch_dist format",
              " loading distributed checkpoint from /ckpt/run1 at iteration 200",
              "  successfully loaded checkpoint from /ckpt/run1 [ t 1/1, p 1/1 ] at iteration 200",
              "WARNING: could not find the metadata file /ckpt/x/latest_checkpointed_iteration.txt",
              "    will not load any checkpoints and will start from random")
    ev = r.tables["events"]
    rows = ev.select("line_no", "kind", "iteration", "path", "duration_s", "finished").rows()
    assert rows[0] == (1, "checkpoint_save_start", 200, "/ckpt/run1", pytest.approx(41.3), True)
    assert rows[1][:4] == (2, "checkpoint_save_done", 200, "/ckpt/run1")
    assert rows[2] == (3, "checkpoint_save_start", 400, "/ckpt/run1", None, False)   # a save that never finished
    assert rows[3][:2] == (4, "checkpoint_load_start") and rows[3][5] is True
    assert [k for _, k, *_ in rows[4:]] == ["checkpoint_load_done", "checkpoint_missing", "checkpoint_none"]
    assert set(r.consumed.to_list()) == set(range(1, 8))


def test_megatron_timers_all_layouts():
    r = parse(megatron,
              "time (ms) | forward-compute: 193.77 | backward-compute: 73.02",
              "(min, max) time across ranks (ms):",
              "    save-checkpoint ................................: (3413.14, 3420.00)",
              "max time across ranks (ms):",
              "    load-checkpoint ................................: 1021.55",
              "times across ranks (ms):",
              "  optimizer:",
              "     rank  0: 12.34",
              "     rank  1: 13.01")
    rows = r.tables["timers"].select("name", "min_ms", "max_ms", "reported_rank").rows()
    assert rows == [("forward-compute", None, 193.77, None), ("backward-compute", None, 73.02, None),
                    ("save-checkpoint", 3413.14, 3420.0, None), ("load-checkpoint", None, 1021.55, None),
                    ("optimizer", None, 12.34, 0), ("optimizer", None, 13.01, 1)]
    assert set(r.consumed.to_list()) == set(range(1, 10))


def test_megatron_parameter_counts_and_theoretical_memory():
    r = parse(megatron,
              " > number of parameters on (tensor, pipeline) model parallel rank (0, 3): 15798591488",
              "Total number of parameters in billions: 0.12",
              "Theoretical memory footprints: weight and optimizer=2121.85 MB")
    cfg = {(row["key"], row["raw_key"]): row["value"] for row in r.tables["job_config"].to_dicts()}
    assert cfg[("num_parameters", "number of parameters on (tensor, pipeline) model parallel rank (0, 3)")] \
        == "15798591488"
    assert cfg[("params_total_b", "Total number of parameters in billions")] == "0.12"
    assert cfg[("theoretical_weight_and_optimizer_mib", "weight and optimizer")] == "2121.85"


def test_megatron_job_config_is_canonical():
    r = parse(megatron, *[line for line in megatron.SAMPLE_LINES if "...." in line or "arguments" in line])
    cfg = dict(r.tables["job_config"].filter(source="megatron-args").select("key", "value").iter_rows())
    assert cfg["ep"] == "8" and cfg["micro_batch_size"] == "1" and cfg["timeout_minutes"] == "10"


def test_megatron_rerun_and_nan_events():
    r = parse(megatron,
              "Rank 17, node h20-node-03, device 1, iteration 4242: Unexpected result nan (message='found NaN in "
              "local forward loss calculation')",
              " iteration     5426/  250000 | consumed samples:        43408 | elapsed time per iteration (ms): "
              "4247.9 | learning rate: 2.999E-04 | global batch size:     8 | loss scale: 1.0 | grad norm: nan | "
              "number of skipped iterations:   2 | number of nan iterations:   0 |")
    ev = r.tables["events"].select("kind", "reported_rank", "iteration").rows()
    assert ("nan_detected", 17, 4242) in ev
    assert ("nan_grad_norm", None, 5426) in ev and ("skipped_iterations", None, 5426) in ev


def test_nemo2_iteration_line_units():
    r = parse(megatron,
              "Training epoch 0, iteration 8/29 | lr: 5.389e-06 | global_batch_size: 512 | global_step: 8 | "
              "max_memory_reserved: 57466159104 | max_memory_allocated: 53930270720 | reduced_train_loss: 10.22 | "
              "train_step_timing in s: 27.01 | consumed_samples: 4608 | TFLOPS_per_GPU: 48.58")
    (it,) = r.tables["iterations"].to_dicts()
    assert (it["framework"], it["iteration"], it["train_iters"], it["learning_rate"], it["global_batch_size"],
            it["lm_loss"], it["elapsed_ms"], it["consumed_samples"], it["throughput_tflops"]) == (
        "nemo", 8, 29, 5.389e-06, 512, 10.22, 27010.0, 4608, 48.58)
    (mem,) = r.tables["memory"].to_dicts()
    assert mem["max_reserved_mib"] == 57466159104 / 2**20 and mem["source_unit"] == "bytes"


# -- DeepSpeed --------------------------------------------------------------------------------------

def test_deepspeed_step_throughput_and_memory():
    r = parse(deepspeed,
              "[2023-05-01 10:00:00,001] [INFO] [logging.py:96:log_dist] [Rank 0] step=100, skipped=2, "
              "lr=[0.0001, 0.0002], mom=[(0.9, 0.95), (0.9, 0.95)]",
              "[2023-05-01 10:00:00,002] [INFO] [timer.py:260:stop] epoch=0/micro_step=400/global_step=100, "
              "RunningAvgSamplesPerSec=48.53, CurrSamplesPerSec=49.01, MemAllocated=20.13GB, MaxMemAllocated=61.9GB",
              "[2022-03-01 10:00:00,002] [INFO] [timer.py:189:stop] 0/40, SamplesPerSec=10.96, MemAllocated=2.58GB, "
              "MaxMemAllocated=7.32GB",
              "[2025-02-07 01:13:40,175] [INFO] [utils.py:781:see_memory_usage] After initializing optimizer states",
              "[2025-02-07 01:13:40,176] [INFO] [utils.py:782:see_memory_usage] MA 3.5 GB         Max_MA 4.25 GB   "
              "      CA 5.0 GB         Max_CA 6 GB ")
    it = r.tables["iterations"].select("iteration", "skipped_iterations", "learning_rate", "samples_per_s").rows()
    assert it == [(100, 2, 0.0001, None), (100, None, None, 49.01), (40, None, None, 10.96)]
    mem = r.tables["memory"].select("line_no", "label", "allocated_mib", "max_allocated_mib", "reserved_mib",
                                    "max_reserved_mib", "source_unit").rows()
    assert mem[0] == (2, "throughput timer", 20.13 * 1024, 61.9 * 1024, None, None, "GB=GiB")
    assert mem[2] == (5, "After initializing optimizer states", 3584.0, 4352.0, 5120.0, 6144.0, "GB=GiB")
    assert set(r.consumed.to_list()) == {1, 2, 3, 4, 5}


def test_deepspeed_checkpoint_overflow_and_launcher():
    r = parse(deepspeed, *[line for line in deepspeed.SAMPLE_LINES
                           if "Checkpoint" in line or "OVERFLOW" in line or "cmd =" in line])
    ev = r.tables["events"]
    start = ev.filter(kind="checkpoint_save_start").row(0, named=True)
    assert (start["detail"], start["iteration"], start["duration_s"], start["finished"]) == (
        "global_step1000", 1000, 42.5, True)
    assert ev.filter(kind="overflow_skip")["reported_rank"].to_list() == [0, 3]
    cfg = r.tables["job_config"]
    env = dict(cfg.filter(source="deepspeed-env").select("key", "value").iter_rows())
    assert env == {"NCCL_IB_DISABLE": "1", "PYTHONPATH": "/work"}
    launch = dict(cfg.filter(source="deepspeed-cmd").select("key", "value").iter_rows())
    assert launch["master_addr"] == "node01" and launch["master_port"] == "9901" and launch["launcher"] == "pdsh"


# -- HF Trainer -------------------------------------------------------------------------------------

def test_hf_dicts_steps_from_tqdm_and_nan_events():
    r = parse(hf_trainer,
              "  1%|          | 10/1233 [07:54<14:12:16, 41.81s/it]",
              "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 9.77e-06, 'epoch': 0.53}",
              "{'eval_loss': 1.873, 'eval_runtime': 12.3, 'epoch': 1.0}",
              "{'train_runtime': 3601.2, 'train_loss': 1.4567, 'epoch': 3.0}")
    it = r.tables["iterations"].to_dicts()
    assert [(i["iteration"], i["validation"], i["lm_loss"], i["epoch"]) for i in it] == [
        (10, False, 0.0, 0.53), (10, True, 1.873, 1.0)]
    assert math.isnan(it[0]["grad_norm"]) and it[0]["learning_rate"] == 9.77e-06
    kinds = r.tables["events"].select("kind", "duration_s").rows()
    assert ("zero_loss_nan_grad", None) in kinds and ("train_summary", 3601.2) in kinds
    bar = r.tables["train_progress"].row(0, named=True)
    assert (bar["n"], bar["total"], bar["pct"], bar["elapsed_s"], bar["s_per_it"]) == (10, 1233, 1, 474.0, 41.81)


# -- torchtitan and Lightning --------------------------------------------------------------------

def test_torchtitan_step_line_both_layouts():
    r = parse(titan_lightning,
              "[titan] 2025-06-16 22:30:50,322 - root - INFO - step: 200  loss:  6.1384  memory: 49.66GiB(52.28%)  "
              "tps: 5,856  tflops: 339.16  mfu: 34.29%",
              "[titan] 2026-05-18 16:04:46,338 - root - INFO - step: 14  loss:  3.24405  grad_norm:  0.8319  "
              "memory:  9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%")
    it = r.tables["iterations"].select("iteration", "lm_loss", "grad_norm", "tokens_per_s", "throughput_tflops",
                                       "mfu_pct", "framework").rows()
    assert it == [(200, 6.1384, None, 5856.0, 339.16, 34.29, "torchtitan"),
                  (14, 3.24405, 0.8319, 7282.0, 0.52, 0.17, "torchtitan")]
    mem = r.tables["memory"].to_dicts()
    assert mem[0]["max_reserved_mib"] == pytest.approx(49.66 * 1024) and mem[0]["source_unit"] == "GiB"
    assert mem[0]["capacity_mib"] == pytest.approx(49.66 * 1024 / 0.5228)


def test_lightning_init_lines():
    r = parse(titan_lightning, "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/5",
              "initializing ddp: GLOBAL_RANK: 0, MEMBER: 2/5", "[rank: 0] Seed set to 42")
    cfg = r.tables["job_config"].select("line_no", "key", "value").rows()
    assert (1, "global_rank", "0") in cfg and (2, "global_rank", "0") in cfg   # duplicate GLOBAL_RANK stays visible
    assert (1, "world_size", "5") in cfg and (3, "seed", "42") in cfg


# -- real excerpts -----------------------------------------------------------------------------------

# file -> (iteration rows, memory rows, checkpoint events); counts verified by reading each file.
REAL_COUNTS = {
    "megatron-deepspeed-issue-396-grad-norm-nan.log": (3, 0, 0),
    "megatron-llm-issue-33-nan-loss-omitted.log": (3, 0, 0),
    "megatron-lm-issue-51-2020-startup.log": (0, 0, 3),          # load start, 'could not find arguments', load done
    "nccl-issue-743-megatron-bert-old-timers.log": (2, 1, 0),
    "nemo-issue-14850-srun-label-moe.log": (4, 4, 0),
    "pai-megatron-patch-issue-671-arguments-dump.log": (0, 0, 0),
    "torchtitan-pr-1287-pre-gradnorm-format.log": (6, 6, 0),
    "torchtitan-pr-3393-rank0-prefix-small-gpu.log": (8, 8, 0),
    "trl-issue-2784-zero3-optimizer-state-memory.log": (0, 4, 0),
    "deepspeed-issue-4305-zero3-startup.log": (0, 0, 0),
    "transformers-issue-22363-deepspeed-pdsh-launch.log": (0, 0, 0),
    "llava-issue-1264-pdsh-prefixed-hf-trainer.log": (14, 0, 0),
    "modernbert-issue-233-hf-loss-zero-gradnorm-nan.log": (3, 0, 0),
    "vg-llm-issue-21-hf-tqdm-interleaved.log": (2, 0, 0),
    "lightning-issue-19606-stuck-at-init.log": (0, 0, 0),
    "diffsynth-issue-458-lightning-step0-allgather-timeout.log": (0, 0, 0),
    # watchdog / NCCL / OOM / Slurm / torchrun pastes: no framework rows
    "ace-issue-348-watchdog-torch21-format.log": (0, 0, 0),
    "areal-issue-639-socket-fallback.log": (0, 0, 0),
    "megatron-lm-issue-525-oom-pre21-format.log": (0, 0, 0),
    "megatron-lm-issue-735-moe-nccl-timeout.log": (0, 0, 0),
    "ms-swift-issue-7992-ep-group-watchdog-stuck.log": (0, 0, 0),
    "nccl-issue-1111-megatron-reduce-scatter-hang.log": (0, 0, 0),
    "pytorch-issue-121209-elastic-failure-summary.log": (0, 0, 0),
    "torchrec-issue-189-alltoall-seq-desync.log": (0, 0, 0),
    "zetta-utils-issue-671-slurm-time-limit.log": (0, 0, 0),
}


def _real(real_logs: Path, name: str) -> tuple[pl.DataFrame, dict]:
    path = real_logs / "training" / name
    if not path.is_file():
        pytest.skip(f"{path} is not present")
    lines = envelope(path.read_bytes())
    return lines, union(lines)


@pytest.mark.parametrize("name", sorted(REAL_COUNTS))
def test_real_excerpt_iterations_memory_checkpoints(real_logs, name):
    _, t = _real(real_logs, name)
    checkpoints = t["events"].filter(pl.col("kind").str.starts_with("checkpoint"))
    assert (t["iterations"].height, t["memory"].height, checkpoints.height) == REAL_COUNTS[name]


def test_every_real_training_excerpt_is_accounted_for(real_logs):
    assert {p.name for p in (real_logs / "training").glob("*.log")} == set(REAL_COUNTS)


def test_real_values(real_logs):
    _, t = _real(real_logs, "trl-issue-2784-zero3-optimizer-state-memory.log")
    mem = t["memory"].select("label", "reserved_mib", "max_reserved_mib").rows()
    assert mem[-1] == ("After initializing optimizer states", 0.77 * 1024, 1024.0)
    _, t = _real(real_logs, "vg-llm-issue-21-hf-tqdm-interleaved.log")
    assert t["iterations"]["iteration"].to_list() == [None, 20]          # step from the last bar before the dict
    assert t["train_progress"]["n"].to_list() == list(range(10, 21)) + list(range(20, 27))
    _, t = _real(real_logs, "modernbert-issue-233-hf-loss-zero-gradnorm-nan.log")
    assert t["events"]["kind"].to_list() == ["nan_grad_norm", "zero_loss_nan_grad", "zero_loss_nan_grad"]
    _, t = _real(real_logs, "transformers-issue-22363-deepspeed-pdsh-launch.log")
    cfg = t["job_config"]
    assert cfg.filter(source="deepspeed-env")["key"].to_list() == ["PYTHONPATH", "PATH"]   # across the hard wraps
    assert set(t["_consumed"]["line_no"].to_list()) == set(range(1, 10))
    _, t = _real(real_logs, "deepspeed-issue-4305-zero3-startup.log")   # editor line numbers in front
    cfg = dict(t["job_config"].select("key", "value").iter_rows())
    assert cfg["deepspeed_version"] == "0.10.2" and cfg["zero_stage"] == "3" and cfg["basic_optimizer"] == "FusedAdam"
    _, t = _real(real_logs, "lightning-issue-19606-stuck-at-init.log")
    cfg = dict(t["job_config"].select("key", "value").iter_rows())
    assert (cfg["seed"], cfg["global_rank"], cfg["world_size"]) == ("42", "0", "5")
    _, t = _real(real_logs, "torchtitan-pr-1287-pre-gradnorm-format.log")
    assert t["events"]["kind"].to_list() == ["gc", "profiler_dump_start", "profiler_dump_done", "gc"]
    _, t = _real(real_logs, "nccl-issue-743-megatron-bert-old-timers.log")
    assert t["timers"]["line_no"].unique().sort().to_list() == [8, 12, 14]


# -- generated runs -------------------------------------------------------------------------------

FRAMEWORKS = ["megatron", "deepspeed", "hf", "torchtitan", "lightning"]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    from postmortem.generator import RunSpec, generate_run

    runs = {}
    for fw in FRAMEWORKS:
        out = tmp_path_factory.mktemp(fw) / "run"
        generate_run(out, RunSpec(nodes=1, gpus_per_node=2, scenario="healthy", iterations_before_hang=3,
                                  nccl_debug=False, pyspy=False, culprit=1, framework=fw))
        runs[fw] = out
    return runs


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_generated_run_has_no_unparsed_framework_line(generated, fw):
    totals = {"iterations": 0, "memory": 0, "job_config": 0}
    rank_logs = sorted(generated[fw].rglob("stdout.log"))
    assert rank_logs
    for path in rank_logs:       # the ranks' stdout: framework output only
        lines = envelope(path.read_bytes())
        t = union(lines)
        consumed = set(t["_consumed"]["line_no"].to_list())
        missing = [text for n, text in lines.select("line_no", "text").iter_rows() if n not in consumed and text.strip()]
        assert not missing, (path, missing[:5])
        for name in totals:
            totals[name] += t[name].height
    assert totals["iterations"] >= 23 and totals["job_config"] > 0
    if fw not in ("hf", "lightning"):          # neither prints a memory report of its own
        assert totals["memory"] > 0


def test_default_framework_keeps_megatron():
    from postmortem.generator import RunSpec

    assert RunSpec().framework == "megatron"
    with pytest.raises(ValueError):
        RunSpec(framework="keras").validate()


# -- postmortem query on a generated run --------------------------------------------------------

def _query(db: str, sql: str) -> list[dict]:
    from postmortem.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["query", "--db", db, sql, "--format", "json"]) == 0
    return json.loads(buf.getvalue())


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    from postmortem.cli import main
    from postmortem.generator import RunSpec, generate_run

    base = tmp_path_factory.mktemp("query")
    out = {}
    for fw in ("megatron", "deepspeed"):
        run = base / fw
        spec = RunSpec(nodes=2, gpus_per_node=2, scenario="healthy", iterations_before_hang=4, pyspy=False,
                       culprit=1, framework=fw)
        generate_run(run, spec)
        db = str(base / f"{fw}.duckdb")
        with contextlib.redirect_stderr(io.StringIO()):
            assert main(["ingest", str(run), "--db", db]) == 0
        out[fw] = (db, spec)
    return out


@pytest.mark.parametrize("fw", ["megatron", "deepspeed"])
def test_query_last_iteration_and_time_per_rank(ingested, fw):
    db, spec = ingested[fw]
    rows = _query(db, "SELECT l.rank, max(i.iteration) AS last_iteration, max(i.ts) AS last_ts "
                      "FROM iterations i JOIN lines l USING (input_id, line_no) "
                      "WHERE NOT coalesce(i.validation, false) GROUP BY l.rank ORDER BY l.rank")
    world = spec.nodes * spec.gpus_per_node
    # The story gives the step line to the last rank (Megatron's print_rank_last).
    assert [r["rank"] for r in rows] == [world - 1]
    assert rows[0]["last_iteration"] == spec.iterations_before_hang + 20
    assert rows[0]["last_ts"].startswith(spec.start[:10])


def test_query_peak_memory_per_rank_in_mib(ingested):
    db, _ = ingested["megatron"]
    rows = _query(db, "SELECT l.rank, max(greatest(coalesce(m.max_allocated_mib, 0), coalesce(m.max_reserved_mib, 0)))"
                      " AS peak_mib, any_value(m.source_unit) AS unit FROM memory m "
                      "JOIN lines l USING (input_id, line_no) GROUP BY l.rank ORDER BY l.rank")
    assert rows[0]["rank"] == 0 and rows[0]["unit"] == "MB=MiB"
    assert rows[0]["peak_mib"] == pytest.approx(88412.0 + 128.0)      # max reserved of the 2nd report
    db, _ = ingested["deepspeed"]
    rows = _query(db, "SELECT l.rank, max(m.max_allocated_mib) AS peak_mib FROM memory m "
                      "JOIN lines l USING (input_id, line_no) GROUP BY l.rank ORDER BY l.rank")
    assert {r["rank"] for r in rows} == {0, 3}
    assert max(r["peak_mib"] for r in rows) == pytest.approx(85.6 * 1024)


def test_query_parallel_layout_from_job_config(ingested):
    db, spec = ingested["megatron"]
    rows = _query(db, "SELECT key, value, source FROM job_config WHERE key IN ('tp','pp','ep','dp','cp','world_size') "
                      "AND source = 'megatron-args'")
    layout = {r["key"]: r["value"] for r in rows}
    world = spec.nodes * spec.gpus_per_node
    assert layout == {"tp": "1", "pp": "1", "ep": str(spec.gpus_per_node), "dp": str(world), "cp": "1",
                      "world_size": str(world)}
    db, _ = ingested["deepspeed"]
    rows = _query(db, "SELECT key, value FROM job_config WHERE key IN ('zero_stage', 'micro_batch_size', "
                      "'global_batch_size') ORDER BY line_no, key")
    assert {(r["key"], r["value"]) for r in rows} >= {("zero_stage", "1"), ("micro_batch_size", "1"),
                                                      ("global_batch_size", "640")}


# -- more Megatron-family layouts -------------------------------------------------------------------

def test_megatron_optional_iteration_fields():
    r = parse(megatron,
              " [2026-02-01 03:04:05.123456] iteration      200/    1000 | consumed samples:       819200 | skipped "
              "samples:         4096 | elapsed time per iteration (ms): 6021.7 | throughput per GPU (TFLOP/s/GPU): "
              "401.2 | energy per GPU (J/iter/GPU): 4210.3 | power per GPU (W/GPU): 699.2 | learning rate: "
              "1.200000E-04 | global batch size:  4096 | lm loss: 2.0 | loss scale: 1.0 | grad norm: 0.5 | num zeros: "
              "12.0 | params norm: 250.125 | number of skipped iterations:   0 | number of nan iterations:   0 |",
              " iteration     5426/  250000 | consumed samples:        43408 | consumed tokens:     88899584 | "
              "elapsed time per iteration (ms): 4247.9 | learning rate: 2.999E-04 | global batch size:     8 | "
              "lm loss: 2.5 | loss scale: 1.0 | actual seqlen:  2048 | number of skipped iterations:   0 | "
              "number of nan iterations:   0 | samples per second: 1.883 | TFLOPs: 78.36 |")
    a, b = r.tables["iterations"].to_dicts()
    assert (a["skipped_samples"], a["energy_j_per_gpu"], a["power_w_per_gpu"], a["num_zeros"], a["params_norm"],
            a["throughput_tflops"]) == (4096, 4210.3, 699.2, 12.0, 250.125, 401.2)
    assert (b["consumed_tokens"], b["samples_per_s"], b["throughput_tflops"]) == (88899584, 1.883, 78.36)
    assert json.loads(b["fields"])["actual seqlen"] == "2048"


def test_nanotron_iteration_line():
    r = parse(megatron, *[line for line in megatron.SAMPLE_LINES if "[INFO|DP=" in line])
    (it,) = r.tables["iterations"].to_dicts()
    assert (it["framework"], it["iteration"], it["train_iters"], it["consumed_tokens"], it["tokens_per_s"],
            it["lm_loss"], it["elapsed_ms"]) == ("nanotron", 991, 1000, 634000, 14100.0, 2.1, 45.0)
    (mem,) = r.tables["memory"].to_dicts()
    assert mem["max_reserved_mib"] == pytest.approx(547e6 / 2**20)


def test_launch_command_line_gives_the_layout():
    r = parse(megatron, "srun python -u pretrain_gpt.py --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 "
                        "--expert-model-parallel-size 8 --context-parallel-size 2 --seq-length 4096 --micro-batch-size 1 "
                        "--global-batch-size 640 --recompute-granularity full --bf16 --distributed-timeout-minutes 30")
    cfg = dict(r.tables["job_config"].filter(source="cmdline").select("key", "value").iter_rows())
    assert cfg == {"tp": "2", "pp": "4", "ep": "8", "cp": "2", "seq_length": "4096", "micro_batch_size": "1",
                   "global_batch_size": "640", "recompute": "full", "bf16": "True", "timeout_minutes": "30"}


def test_torchtitan_args_and_device_mesh():
    r = parse(titan_lightning, *[line for line in titan_lightning.SAMPLE_LINES
                                 if "Running with args" in line or "device mesh" in line or "capacity:" in line])
    cfg = r.tables["job_config"]
    args = dict(cfg.filter(source="torchtitan-args").select("key", "value").iter_rows())
    assert (args["tp"], args["pp"], args["cp"], args["ep"], args["dp_shard"], args["seq_length"]) == (
        "2", "1", "1", "8", "-1", "8192")
    assert cfg.filter(source="torchtitan-mesh").select("key", "value").rows() == [("dp_shard", "4"), ("tp", "2")]
    device = dict(cfg.filter(source="torchtitan-log").select("key", "value").iter_rows())
    assert device["device_capacity_gib"] == "79.11" and device["device_name"] == "NVIDIA H100 80GB HBM3"


def test_generated_torchtitan_run_states_the_mesh(generated):
    rank0 = sorted(generated["torchtitan"].rglob("stdout.log"))[0]
    cfg = union(envelope(rank0.read_bytes()))["job_config"]
    assert cfg.filter(source="torchtitan-mesh").select("key", "value").rows() == [("dp_shard", "2")]
