"""P021 loss-spike: training losses far above the running median after warm-up.

What it detects
    Iteration lines whose finite loss is more than ``K`` (3) times the running median of the
    previous ``W`` (20) losses of the same log and also more than 8 robust deviations (1.4826 x
    MAD) above it, after the warm-up (the first 10 lines, or 10% of them): the falling loss of
    the first iterations never counts. Megatron's rerun state machine's ``Spiky loss`` reports
    count as spikes too. The finding lists the iterations, each with its loss and the median.

Why it matters
    A spike that the run recovers from costs a few steps; repeated spikes are the prelude of a
    divergence (the NaN of P020), and a spike at one iteration across restarts points at a bad
    batch in the data.

What to do
    Look at the data at the spiking iterations (``consumed samples`` gives the position); lower
    the learning rate or lengthen warm-up, clip gradients (``--clip-grad 1.0``); for repeated
    spikes resume from a checkpoint before the first one and skip those batches. Megatron's
    rerun state machine (``--rerun-mode validate_results``) reruns a spiky step to tell a bad
    batch from a transient hardware fault.

Known false positives
    Logs that mix several losses in one column (a curriculum switch, a new data mixture, a
    resumed run printing a different loss) look like spikes at the switch. fp16 loss-scale
    warm-up (skipped iterations while the scale halves) prints no loss and never counts. NaN
    and inf values are P020's, not spikes.
"""

from __future__ import annotations

import math
import statistics

from postmortem.parsers.base import groups_of
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.numerics.numerics_model import training_rows

RULE = Rule(code="P021", name="loss-spike", severity=Severity.WARNING, category=Category.PERF, since="0.1.0")

K = 3.0          # times the running median
DEVIATIONS = 8.0  # robust deviations above the median
WINDOW = 20
WARMUP = 10


def spikes(ctx: Context) -> list[dict]:
    rows = training_rows(ctx)
    found = []
    if rows.is_empty():
        return found
    for _, stream in groups_of(rows, "input_id", maintain_order=True):
        vals = [(r, r["lm_loss"]) for r in stream.iter_rows(named=True)
                if r["lm_loss"] is not None and not math.isnan(r["lm_loss"]) and not math.isinf(r["lm_loss"])]
        warm = max(WARMUP, len(vals) // 10)
        for i in range(warm, len(vals)):
            r, loss = vals[i]
            window = [v for _, v in vals[max(0, i - WINDOW):i]]
            if len(window) < 5:
                continue
            med = statistics.median(window)
            mad = statistics.median(abs(v - med) for v in window) * 1.4826
            if med > 0 and loss > K * med and loss - med > DEVIATIONS * max(mad, 0.01 * med):
                found.append({"iteration": r["iteration"], "loss": loss, "median": med, "mad": mad,
                              "input_id": r["input_id"], "line_no": r["line_no"], "rank": r.get("rank"),
                              "node": r.get("node")})
    ev = ctx.table("events")
    if not ev.is_empty() and "kind" in ev.columns:
        for r in ev.filter(ev["kind"] == "loss_spike").iter_rows(named=True):
            found.append({"iteration": r.get("iteration"), "loss": r.get("value"), "median": None, "mad": None,
                          "input_id": r["input_id"], "line_no": r["line_no"], "rank": r.get("reported_rank"),
                          "node": r.get("node"), "rerun": True})
    return found


def check(ctx: Context) -> list[Finding]:
    found = spikes(ctx)
    if not found:
        return []
    found.sort(key=lambda s: (s["iteration"] if s["iteration"] is not None else 1 << 62))
    parts = []
    for s in found[:6]:
        if s.get("rerun"):
            parts.append(f"iteration {s['iteration']}: the rerun state machine reported a spiky loss")
        else:
            parts.append(f"iteration {s['iteration']}: loss {s['loss']:.4g} against a running median of "
                         f"{s['median']:.4g} ({s['loss'] / s['median']:.1f}x)")
    more = f" and {len(found) - 6} more" if len(found) > 6 else ""
    evidence = [ctx.evidence(s["input_id"], s["line_no"], note="loss spike") for s in found[:3]]
    iters = [s["iteration"] for s in found if s["iteration"] is not None]
    return [RULE.finding(confidence=0.6, title=f"{len(found)} loss spike(s) after warm-up",
                    message=f"{len(found)} loss spike(s) more than {K:.0f}x the running median of the last {WINDOW} "
                    f"losses: {'; '.join(parts)}{more}", evidence=evidence, culprit=False,
                    suggestion=("Inspect the batches at those iterations (consumed samples gives the position); "
                                "lower the learning rate or lengthen warm-up, clip gradients (--clip-grad 1.0); "
                                "Megatron: --rerun-mode validate_results reruns a spiky step."),
                    details={"iterations": iters, "spikes": found[:20], "k": K, "window": WINDOW})]
