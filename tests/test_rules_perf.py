"""Performance rules (P001-P003): MFU, irregular iterations, checkpoint stalls. Generated runs
(2 nodes x 4 GPUs, once per module), hand-written Megatron logs independent of the generator,
the model job's sample and real excerpts (Megatron-DeepSpeed ``TFLOPs``, torchtitan ``mfu``)."""
from __future__ import annotations

from pathlib import Path

import pytest

from postmortem.analyzer.pipeline import analyze
from postmortem.rules.base import Options
from postmortem.rules.report import build_report
from postmortem.generator import RunSpec, generate_run

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"

RULE_FIXTURES = {
    "P001": {"fires": ["test_model_job_mfu_is_near_the_seeds_8_to_10_percent", "test_dense_run_by_hand_mfu_arithmetic",
                       "test_real_megatron_deepspeed_tflops_with_gpu_given", "test_real_torchtitan_mfu_field",
                       "test_hand_written_low_mfu_large_model_warns"],
             "quiet": ["test_moe_without_active_params_gives_no_own_estimate", "test_unknown_gpu_no_mfu",
                       "test_generated_healthy_run_raises_no_perf_warning"]},
    "P002": {"fires": ["test_hand_written_irregular_steps"],
             "quiet": ["test_generated_healthy_run_raises_no_perf_warning", "test_real_torchtitan_mfu_field",
                       "test_dense_run_by_hand_mfu_arithmetic"]},
    "P003": {"fires": ["test_generated_slow_save_is_priced_against_nfs", "test_hand_written_unfinished_save"],
             "quiet": ["test_generated_healthy_run_raises_no_perf_warning", "test_dense_run_by_hand_mfu_arithmetic",
                       "test_real_megatron_moe_timeout_excerpt_is_quiet"]},
}


def _codes(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


def _report(path: Path, gpu: str | None = None) -> dict:
    return build_report(analyze([path]), Options(gpu=gpu))


# -- generated runs ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    out = tmp_path_factory.mktemp("healthy")
    generate_run(out, RunSpec(scenario="healthy", nodes=2, gpus_per_node=4, seed=0, pyspy=False, node_logs=True))
    return _report(out)


@pytest.fixture(scope="module")
def slow_save(tmp_path_factory):
    out = tmp_path_factory.mktemp("slow_save")
    generate_run(out, RunSpec(scenario="healthy", nodes=2, gpus_per_node=4, seed=0, pyspy=False, node_logs=True,
                              checkpoint_save_s=560.0))
    return _report(out)


def test_generated_healthy_run_raises_no_perf_warning(healthy):
    perf = [f for f in healthy["findings"] if f["code"].startswith("P00")]
    assert not [f for f in perf if f["severity"] != "info"], perf
    assert not _codes(healthy, "P002") and not _codes(healthy, "P003")
    # The generator's batch is the 40-GPU job's: on 8 GPUs the own estimate disagrees with Megatron's
    # throughput field, and P001 says so with a low confidence.
    p001 = _codes(healthy, "P001")
    assert p001 and p001[0]["severity"] == "info" and p001[0]["confidence"] <= 0.4 and "differ" in p001[0]["message"]


def test_generated_slow_save_is_priced_against_nfs(slow_save):
    p003 = _codes(slow_save, "P003")
    assert len(p003) == 1 and p003[0]["severity"] == "warning"
    msg = p003[0]["message"]
    assert "560 s" in msg and "221 GB" in msg and "14 bytes per parameter" in msg and "1 GB/s" in msg
    assert not p003[0]["culprit"]


# -- the model job --------------------------------------------------------------------------------

def test_model_job_mfu_is_near_the_seeds_8_to_10_percent():
    report = _report(SAMPLES / "silent-deadlock-40r")
    p001 = _codes(report, "P001")
    assert len(p001) == 1 and p001[0]["severity"] == "info"
    d = p001[0]["details"]
    assert d["world_size"] == 40 and d["gpu"] == "H20" and d["active_params"] == pytest.approx(3.3e9)
    assert d["tokens_per_step"] == 640 * 4096 and d["step_s"] == pytest.approx(120.0, abs=0.5)
    assert 0.075 <= d["mfu"] <= 0.10, d
    assert d["framework_mfu"] == pytest.approx(13.1 / 148, abs=0.002)
    assert "13.1 TFLOP/s per GPU" in p001[0]["message"] and "MFU 8.3%" in p001[0]["message"]


# -- hand-written Megatron logs (independent of the generator) --------------------------------------

ARGS = {"global_batch_size": "512", "hidden_size": "4096", "num_layers": "32", "seq_length": "4096",
        "tensor_model_parallel_size": "1", "pipeline_model_parallel_size": "1", "world_size": "16",
        "data_parallel_size": "16", "micro_batch_size": "2"}


def _megatron_log(folder: Path, steps_ms: list[float], *, args: dict | None = None, params: list[str] | None = None,
                  extra: dict[int, list[str]] | None = None, tflops: float | None = None, world: int = 16) -> Path:
    """One rank's stdout: arguments dump, parameter counts, iteration lines (``extra[i]``: lines
    printed between iteration i-1 and i, at their own times)."""
    from datetime import datetime, timedelta
    args = {**ARGS, "world_size": str(world), "data_parallel_size": str(world), **(args or {})}
    lines = [f"using world size: {world}, data-parallel size: {world}, context-parallel size: 1, "
             "tensor-model-parallel size: 1, pipeline-model-parallel size: 1",
             "------------------------ arguments ------------------------"]
    lines += [f"  {k} {'.' * max(1, 48 - len(k))} {v}" for k, v in sorted(args.items())]
    lines += ["-------------------- end of arguments ---------------------"]
    lines += params if params is not None else [" > number of parameters on (tensor, pipeline) model parallel rank "
                                                "(0, 0): 6738415616"]
    t = datetime(2026, 3, 1, 10, 0, 0)
    for i, ms in enumerate(steps_ms, start=1):
        for text in (extra or {}).get(i, []):
            lines.append(text.replace("{ts}", f"{t + timedelta(seconds=1):%Y-%m-%d %H:%M:%S}.000001"))
        t += timedelta(milliseconds=ms)
        fields = [f"iteration {i:>8}/{1000:>8}", f"consumed samples: {i * 512:>12}",
                  f"elapsed time per iteration (ms): {ms:.1f}"]
        if tflops:
            fields.append(f"throughput per GPU (TFLOP/s/GPU): {tflops * min(1.0, 20000 / ms):.1f}")
        fields += ["learning rate: 3.000000E-04", "global batch size:   512", "lm loss: 2.500000E+00",
                   "loss scale: 1.0", "grad norm: 0.400", "number of skipped iterations:   0",
                   "number of nan iterations:   0"]
        lines.append(f" [{t:%Y-%m-%d %H:%M:%S}] " + " | ".join(fields) + " |")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.log").write_text("\n".join(lines) + "\n")
    return folder


def test_dense_run_by_hand_mfu_arithmetic(tmp_path):
    """6.74B dense, 512 x 4096 tokens, 20 s per step on 16 x H100 SXM (989 TFLOP/s): (6 x 6.74e9 +
    12 x 32 x 4096 x 4096) x 2,097,152 / (20 x 16 x 989e12) = 31 %."""
    report = _report(_megatron_log(tmp_path / "dense", [26000] + [20000.0] * 19, tflops=330.0), gpu="H100 SXM")
    p001 = _codes(report, "P001")
    assert len(p001) == 1 and p001[0]["severity"] == "info"
    expected = (6 * 6738415616 + 12 * 32 * 4096 * 4096) * 512 * 4096 / (20 * 16 * 989e12)
    assert p001[0]["details"]["mfu"] == pytest.approx(expected, abs=0.002)
    assert "33.4%" in p001[0]["message"]          # the framework's field, beside the estimate
    assert not _codes(report, "P002") and not _codes(report, "P003")


def test_hand_written_low_mfu_large_model_warns(tmp_path):
    """The same 6.7B model at 200 s per step: MFU 3 %, a warning."""
    report = _report(_megatron_log(tmp_path / "slow", [200000.0] * 12), gpu="H100 SXM")
    p001 = _codes(report, "P001")
    assert len(p001) == 1 and p001[0]["severity"] == "warning" and "far below" in p001[0]["message"]


def test_moe_without_active_params_gives_no_own_estimate(tmp_path):
    """An MoE whose logs give only the total parameter count: no 6N estimate (it would overstate the
    FLOPs many times); only the framework's own throughput is reported."""
    folder = _megatron_log(tmp_path / "moe", [20000.0] * 12, tflops=100.0,
                           args={"num_experts": "64", "moe_router_topk": "6"})
    report = _report(folder, gpu="H100 SXM")
    p001 = _codes(report, "P001")
    assert len(p001) == 1 and "mfu" not in p001[0]["details"]
    assert "active parameters" in p001[0]["message"] and p001[0]["severity"] == "info"
    assert "own estimate" not in p001[0]["title"]


def test_unknown_gpu_no_mfu(tmp_path):
    report = _report(_megatron_log(tmp_path / "nogpu", [20000.0] * 12))
    assert not _codes(report, "P001")


def test_hand_written_irregular_steps(tmp_path):
    """Step 8 (62 s) has a checkpoint save before it: explained. Step 14 (75 s): nothing: a warning."""
    steps = [26000.0] + [20000.0] * 19
    steps[7], steps[13] = 62000.0, 75000.0
    extra = {8: ["[{ts}] saving checkpoint at iteration       7 to /ckpt/run in torch_dist format",
                 "  [{ts}] successfully saved checkpoint from iteration       7 to /ckpt/run [ t 1/1, p 1/1 ]"]}
    report = _report(_megatron_log(tmp_path / "irr", steps, extra=extra), gpu="H100 SXM")
    p002 = _codes(report, "P002")
    assert len(p002) == 1 and p002[0]["severity"] == "warning"
    msg = p002[0]["message"]
    assert "iteration 14 (75.0 s" in msg.split(". explained:")[0] and "iteration 8" in msg and "checkpoint save" in msg
    assert p002[0]["details"]["unexplained"] == 1


def test_hand_written_unfinished_save(tmp_path):
    """A save at iteration 10 that never completes (the job died during it): what it cost."""
    extra = {5: ["[{ts}] saving checkpoint at iteration       4 to /ckpt/run in torch_dist format",
                 "  [{ts}] successfully saved checkpoint from iteration       4 to /ckpt/run [ t 1/1, p 1/1 ]"]}
    folder = _megatron_log(tmp_path / "unfinished", [20000.0] * 10, extra=extra)
    with open(folder / "train.log", "a") as handle:
        handle.write("[2026-03-01 10:03:30.000001] saving checkpoint at iteration      10 to /ckpt/run in torch_dist "
                     "format\n")
    report = _report(folder, gpu="H100 SXM")
    p003 = _codes(report, "P003")
    assert len(p003) == 1 and p003[0]["severity"] == "warning"
    msg = p003[0]["message"]
    assert "iteration 10" in msg and "never printed its completion" in msg and "iteration 4" in msg
    assert "6 iterations x 20.0 s" in msg


# -- real excerpts -------------------------------------------------------------------------------

def test_real_megatron_deepspeed_tflops_with_gpu_given(real_logs):
    """Megatron-DeepSpeed prints ``TFLOPs: 78.36`` per GPU; with --gpu A100 that is 25 % of 312."""
    report = _report(real_logs / "training" / "megatron-deepspeed-issue-396-grad-norm-nan.log", gpu="A100 SXM4 80GB")
    p001 = _codes(report, "P001")
    assert len(p001) == 1 and p001[0]["severity"] == "info"
    assert p001[0]["details"]["framework_mfu"] == pytest.approx(78.71 / 312, abs=0.01)
    assert not _codes(report, "P002")


def test_real_torchtitan_mfu_field(real_logs):
    """torchtitan prints its own ``mfu: 34.29%``: reported as is (the GPU and model are not in the excerpt)."""
    report = _report(real_logs / "training" / "torchtitan-pr-1287-pre-gradnorm-format.log", gpu="H100 SXM")
    p001 = _codes(report, "P001")
    assert len(p001) == 1 and p001[0]["severity"] == "info"
    assert 0.32 <= p001[0]["details"]["framework_mfu"] <= 0.35
    assert not _codes(report, "P002")


def test_real_megatron_moe_timeout_excerpt_is_quiet(real_logs):
    report = _report(real_logs / "training" / "megatron-lm-issue-735-moe-nccl-timeout.log")
    assert not [f for f in report["findings"] if f["code"] in ("P001", "P002", "P003")]
