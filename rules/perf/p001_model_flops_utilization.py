"""P001 model-flops-utilization: the job's MFU from step time, tokens per step and model FLOPs, against the cluster peak.

What it detects
    MFU = model FLOPs per step / (steady step time x world size x the GPU's dense BF16 peak).
    Model FLOPs per token are 6 x the active parameters (8 x with full activation recompute;
    for MoE the parameters a token is routed through, not the total), plus the attention term
    12 x layers x hidden x sequence length when the arguments give them (PaLM's definition).
    Tokens per step are the global batch x the sequence length. The step time is the median of
    the training iterations after the first two. Where the framework prints its own
    throughput (Megatron ``throughput per GPU (TFLOP/s/GPU)``, ``TFLOPs``, torchtitan ``mfu``),
    the message compares the two. Info normally; a warning when MFU is below 5 % (far below
    what large-model training gets, 25-55 % on dense models, ~8-20 % on fine-grained MoE) or
    when the last steps are much slower than the run's own earlier steps.

Why it matters
    A job at a few percent MFU wastes most of its GPUs; a sudden drop in the middle of a run
    is a straggler, a throttled GPU, a slow link or a storage stall.

What to do
    Compare with a known-good run of the same model (``postmortem diff``); look at P002 (irregular
    steps), the straggler and link rules; for a low but steady MFU, profile one step
    (``nsys profile``) and check the parallel layout (TP inside a node, EP, micro-batch size).

Known false positives
    The parameter count Megatron prints per model-parallel rank is a shard when TP or PP > 1:
    the rule then needs the ``Total number of parameters`` lines and says so when they are
    absent. An MoE without the active parameter count gets no estimate (the total would
    overstate the FLOPs many times). Small models, fine-tuning with short sequences and
    inference-heavy loops (RLHF) legitimately run at low MFU.
"""

from __future__ import annotations

import polars as pl

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.perf.perf_model import fmt_params, median, model, peak, steady, train_steps

RULE = Rule(code="P001", name="model-flops-utilization", severity=Severity.INFO, category=Category.PERF, since="0.1.0")

LOW_MFU = 0.05
DROP_RATIO = 1.5     # the last steps this much slower than the earlier steady steps


def check(ctx: Context) -> list[Finding]:
    steps = train_steps(ctx)
    if steps.is_empty():
        return []
    run_steps = steady(steps)
    step_s = median(run_steps["elapsed_ms"].to_list()) / 1000.0
    if not step_s or step_s <= 0:
        return []
    m = model(ctx)
    cluster_peak, acc, peak_basis = peak(ctx)
    world = ctx.world_size

    gbs = m.global_batch
    if "global_batch_size" in steps.columns and steps["global_batch_size"].drop_nulls().len():
        gbs = int(steps["global_batch_size"].drop_nulls().median())
    tokens = gbs * m.seq_length if gbs and m.seq_length else None
    tokens_basis = f"{gbs} sequences x {m.seq_length} tokens" if tokens else ""
    if tokens is None and "tokens_per_s" in steps.columns and steps["tokens_per_s"].drop_nulls().len():
        tps = float(run_steps["tokens_per_s"].drop_nulls().median() or steps["tokens_per_s"].drop_nulls().median())
        per_gpu = steps["framework"].drop_nulls().head(1).to_list() == ["torchtitan"]
        tokens = tps * step_s * (world if per_gpu and world else 1)
        tokens_basis = f"{tps:,.0f} tokens/s{' per GPU x ' + str(world) + ' GPUs' if per_gpu and world else ''}"

    framework_mfu, framework_note = _framework_mfu(run_steps, acc)
    missing = list(m.missing)
    if tokens is None:
        missing.append("tokens per step (global batch size and sequence length, or tokens/s)")
    if cluster_peak is None:
        missing.append(peak_basis)

    details: dict = {"step_s": round(step_s, 3), "world_size": world, "tokens_per_step": tokens,
                     "active_params": m.active_params, "total_params": m.total_params,
                     "gpu": acc["name"] if acc else None, "framework_mfu": framework_mfu, "missing": missing}
    mfu = None
    arithmetic = ""
    if not missing:
        factor = 8 if m.recompute_full else 6
        per_token = factor * m.active_params
        attn = 12 * m.layers * m.hidden * m.seq_length if m.layers and m.hidden and m.seq_length else 0
        flops = (per_token + attn) * tokens
        mfu = flops / (step_s * cluster_peak)
        attn_text = (f" + attention 12 x {m.layers} layers x {m.hidden} x {m.seq_length} = {attn / 1e9:.2f} GFLOP"
                     if attn else "")
        arithmetic = (f"{factor} x {fmt_params(m.active_params)} {'active ' if m.moe else ''}parameters"
                      f"{' (full recompute)' if m.recompute_full else ''}{attn_text} per token x "
                      f"{tokens:,.0f} tokens per step ({tokens_basis}) = {flops / 1e15:,.1f} PFLOP per step; "
                      f"in {step_s:.1f} s on {world} x {acc['name']} at {acc['bf16_dense_tflops']:g} TFLOP/s "
                      f"(peak {cluster_peak / 1e15:,.2f} PFLOP/s): MFU {mfu:.1%}")
        details.update(mfu=round(mfu, 4), model_flops_per_step=flops, flops_per_token=per_token + attn)
    elif framework_mfu is None:
        return []      # nothing to say without a number

    drop = _drop(run_steps)
    headline = mfu if mfu is not None else framework_mfu
    severity, reasons = Severity.INFO, []
    if mfu is not None and mfu < LOW_MFU and m.active_params >= 1e9:
        severity = Severity.WARNING
        reasons.append(f"MFU {mfu:.1%} is far below what training a model of this size gets (>= 5 %)")
    elif headline is not None and headline < LOW_MFU:
        reasons.append(f"MFU {headline:.1%} is low, but the model's size is unknown or small "
                       "(a debug or small model runs at low MFU by design)")
    if drop:
        severity = Severity.WARNING
        reasons.append(drop)
    parts = [arithmetic] if arithmetic else [f"MFU not estimated: the logs lack {'; '.join(missing)}"]
    confidence = 0.7 if mfu is not None else 0.5
    if framework_note:
        parts.append(framework_note)
    if mfu is not None and framework_mfu and not 0.5 <= mfu / framework_mfu <= 2.0:
        confidence = 0.4
        parts.append(f"the two differ {max(mfu, framework_mfu) / min(mfu, framework_mfu):.1f}x: the parameter count, "
                     "batch or world size read from the logs is not what the framework used")
    parts += reasons
    first = run_steps.sort("elapsed_ms").row(run_steps.height // 2, named=True)
    evidence = []
    if first.get("input_id") is not None:
        evidence.append(ctx.evidence(first["input_id"], first["line_no"], f"a median step ({step_s:.1f} s)"))
    title = (f"MFU {headline:.1%} ({'own estimate' if mfu is not None else 'framework throughput'})"
             if headline is not None else "MFU")
    return [RULE.finding(severity=severity, confidence=confidence, title=title, message=". ".join(parts) + ".",
                    evidence=evidence, details=details,
                    suggestion="" if severity == "info" else
                    "Compare with a known-good run (postmortem diff); check P002, the straggler and link findings; "
                    "profile one step with nsys.")]


def _framework_mfu(steps: pl.DataFrame, acc: dict | None) -> tuple[float | None, str]:
    if "mfu_pct" in steps.columns and steps["mfu_pct"].drop_nulls().len():
        value = float(steps["mfu_pct"].drop_nulls().median()) / 100.0
        return value, f"the framework's own mfu field says {value:.1%}"
    if "throughput_tflops" in steps.columns and steps["throughput_tflops"].drop_nulls().len():
        tflops = float(steps["throughput_tflops"].drop_nulls().median())
        if acc and acc.get("bf16_dense_tflops"):
            value = tflops / acc["bf16_dense_tflops"]
            return value, (f"the framework's own throughput {tflops:g} TFLOP/s per GPU is {value:.1%} of "
                           f"{acc['bf16_dense_tflops']:g} (its FLOP count includes attention and the logits)")
        return None, f"the framework's own throughput is {tflops:g} TFLOP/s per GPU (GPU model unknown)"
    return None, ""


def _drop(steps: pl.DataFrame) -> str:
    """The last steps against the earlier steady ones (a sudden slowdown)."""
    if steps.height < 12:
        return ""
    tail = max(3, steps.height // 6)
    early = median(steps.head(steps.height - tail)["elapsed_ms"].to_list())
    late = median(steps.tail(tail)["elapsed_ms"].to_list())
    if early and late and late > DROP_RATIO * early:
        return (f"the last {tail} steps take {late / 1000:.1f} s against {early / 1000:.1f} s before "
                f"({late / early:.1f}x slower: throughput dropped during the run)")
    return ""
