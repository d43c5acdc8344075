"""Numerics rules (P020 first NaN, P021 loss spikes) on generated runs, hand-written logs and the
real NaN excerpts: a NaN after a GPU fault on its node is that fault's symptom; fp16 loss-scale
warm-up skips and healthy runs stay quiet."""
from __future__ import annotations

from pathlib import Path

import pytest

from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report

RULE_FIXTURES = {
    "P020": {"fires": ["test_nan_after_xid94_is_the_gpu_faults_symptom", "test_handwritten_nan_without_fault_is_numerics",
                       "test_handwritten_rerun_machine_names_the_rank_and_its_xid",
                       "test_real_megatron_deepspeed_grad_norm_nan", "test_real_megatron_llm_loss_left_out",
                       "test_real_hf_zero_loss_nan_grad_norm",
                       "test_handwritten_xid_on_another_node_than_the_rerun_rank_is_not_linked"],
             "quiet": ["test_healthy_run_is_quiet", "test_handwritten_fp16_warmup_skips_are_quiet",
                       "test_handwritten_xid_after_the_nan_is_not_linked"]},
    "P021": {"fires": ["test_handwritten_loss_spike"],
             "quiet": ["test_healthy_run_is_quiet", "test_handwritten_fp16_warmup_skips_are_quiet",
                       "test_nan_after_xid94_is_the_gpu_faults_symptom"]},
}

SMALL = dict(nodes=2, gpus_per_node=4, pyspy=False)


def _report(folder: Path) -> dict:
    return build_report(analyze([folder]))


def _by_code(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


# -- generated runs ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def nan_after_xid(tmp_path_factory):
    from postmortem.generator import RunSpec, generate_run
    out = tmp_path_factory.mktemp("nanxid")
    truth = generate_run(out, RunSpec(**SMALL, culprit=5, node_fault="xid94", iterations_before_hang=12,
                                      nan_from_iteration=8))
    return _report(out), truth


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    from postmortem.generator import RunSpec, generate_run
    out = tmp_path_factory.mktemp("healthy")
    generate_run(out, RunSpec(**SMALL, scenario="healthy", iterations_before_hang=40))
    return _report(out)


def test_nan_after_xid94_is_the_gpu_faults_symptom(nan_after_xid):
    report, truth = nan_after_xid
    [p020] = _by_code(report, "P020")
    assert p020["category"] == "symptom" and not p020["culprit"]
    assert p020["details"]["iteration"] == 8 and p020["details"]["diverged"]
    assert p020["nodes"] == [truth["node_fault"]["host"]] and p020["ranks"] == [5]
    assert "Xid 94" in p020["message"]
    g001 = _by_code(report, "G001")[0]
    assert g001["id"] in p020["caused_by"]
    assert report["verdict"]["status"] == "culprit" and report["verdict"]["culprit"]["ranks"] == [5]
    assert not _by_code(report, "P021")


def test_healthy_run_is_quiet(healthy):
    assert not _by_code(healthy, "P020") and not _by_code(healthy, "P021")


# -- hand-written logs ---------------------------------------------------------------------------

def _it(it: int, loss: float | str | None, gn: float | str = 0.5, scale: float = 1.0, skipped: int = 0,
        nan: int = 0, ts: str | None = None) -> str:
    pre = f" [{ts}]" if ts else ""
    lm = "" if loss is None else f" lm loss: {loss if isinstance(loss, str) else f'{loss:.6E}'} |"
    return (f"{pre} iteration {it:>8}/    1000 | consumed samples: {it * 64:>10} | elapsed time per iteration (ms): "
            f"1000.0 | learning rate: 1.000E-04 | global batch size:    64 |{lm} loss scale: {scale} | grad norm: "
            f"{gn} | number of skipped iterations: {skipped:>3} | number of nan iterations: {nan:>3} |")


def _write(folder: Path, lines: list[str], name: str = "train.log") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("\n".join(lines) + "\n")
    return folder


def _losses(n: int, base: float = 2.5) -> list[float]:
    return [base + 0.02 * ((i * 7) % 5) for i in range(n)]


def test_handwritten_nan_without_fault_is_numerics(tmp_path):
    lines = [_it(i + 1, v) for i, v in enumerate(_losses(20))]
    lines += [_it(21 + i, "nan", "nan", nan=1) for i in range(3)]
    report = _report(_write(tmp_path / "run", lines))
    [p020] = _by_code(report, "P020")
    assert p020["category"] == "perf" and not p020["culprit"] and p020["severity"] == "error"
    assert p020["details"]["iteration"] == 21 and p020["details"]["diverged"]
    assert "--check-for-nan-in-loss-and-grad" in p020["suggestion"]


def test_handwritten_fp16_warmup_skips_are_quiet(tmp_path):
    # fp16: the first iterations overflow and are skipped while the loss scale halves; no loss is printed
    lines = [_it(1, None, "nan", scale=2 ** 32, skipped=1), _it(2, None, "nan", scale=2 ** 31, skipped=1),
             _it(3, None, "nan", scale=2 ** 30, skipped=1)]
    lines = [ln.replace("grad norm: nan |", "") for ln in lines]
    lines += [_it(4 + i, v, scale=2 ** 30) for i, v in enumerate(_losses(30, 9.0))]
    report = _report(_write(tmp_path / "run", lines))
    assert not _by_code(report, "P020") and not _by_code(report, "P021")


def test_handwritten_loss_spike(tmp_path):
    vals = _losses(40)
    vals[30] = 11.0
    report = _report(_write(tmp_path / "run", [_it(i + 1, v) for i, v in enumerate(vals)]))
    [p021] = _by_code(report, "P021")
    assert p021["details"]["iterations"] == [31] and p021["category"] == "perf"
    assert not _by_code(report, "P020")


def _rerun_run(folder: Path, xid_host: str, xid_time: str) -> Path:
    lines = [_it(i + 1, v, ts=f"2026-07-24 09:{i:02d}:00") for i, v in enumerate(_losses(20))]
    lines.append("Rank 5, node node-02, device 1, iteration 21: Unexpected result nan (message='found NaN in local "
                 "forward loss calculation')")
    lines += [_it(21 + i, None, "nan", nan=1, ts=f"2026-07-24 09:{20 + i:02d}:00") for i in range(3)]
    _write(folder, lines)
    kern = folder / "node_logs" / xid_host
    kern.mkdir(parents=True)
    (kern / "journal-kernel.txt").write_text(
        f"{xid_time}+0000 {xid_host} kernel: NVRM: Xid (PCI:0000:2a:00): 48, pid='<unknown>', name=<unknown>, "
        "DBE (double bit error) ECC error\n")
    return folder


def test_handwritten_rerun_machine_names_the_rank_and_its_xid(tmp_path):
    report = _report(_rerun_run(tmp_path / "run", "node-02", "2026-07-24T09:19:30"))
    [p020] = _by_code(report, "P020")
    assert p020["details"]["named_by"] == "rerun" and p020["details"]["iteration"] == 21
    assert p020["category"] == "symptom" and not p020["culprit"] and p020["nodes"] == ["node-02"]


def test_handwritten_xid_after_the_nan_is_not_linked(tmp_path):
    report = _report(_rerun_run(tmp_path / "run", "node-02", "2026-07-24T10:30:00"))
    [p020] = _by_code(report, "P020")
    assert p020["category"] == "perf" and not p020["culprit"]


def test_handwritten_xid_on_another_node_than_the_rerun_rank_is_not_linked(tmp_path):
    report = _report(_rerun_run(tmp_path / "run", "node-07", "2026-07-24T09:19:30"))
    [p020] = _by_code(report, "P020")
    assert p020["category"] == "perf" and p020["ranks"] == [5]


# -- real excerpts -------------------------------------------------------------------------------

def _real(real_logs: Path, name: str) -> dict:
    return _report(real_logs / "training" / name)


def test_real_megatron_deepspeed_grad_norm_nan(real_logs):
    [p020] = _by_code(_real(real_logs, "megatron-deepspeed-issue-396-grad-norm-nan.log"), "P020")
    assert p020["details"]["iteration"] == 5426 and p020["details"]["diverged"]
    assert p020["category"] == "perf" and not p020["culprit"]


def test_real_megatron_llm_loss_left_out(real_logs):
    # iteration 3385 prints no lm loss after two that did: Megatron omits a NaN loss
    [p020] = _by_code(_real(real_logs, "megatron-llm-issue-33-nan-loss-omitted.log"), "P020")
    assert p020["details"]["iteration"] == 3385 and "left out" in p020["details"]["what"]
    assert p020["confidence"] <= 0.4 and not p020["culprit"]


def test_real_hf_zero_loss_nan_grad_norm(real_logs):
    report = _real(real_logs, "modernbert-issue-233-hf-loss-zero-gradnorm-nan.log")
    [p020] = _by_code(report, "P020")
    assert p020["details"]["what"].startswith("grad norm") and p020["details"]["diverged"]
    assert not _by_code(report, "P021")
