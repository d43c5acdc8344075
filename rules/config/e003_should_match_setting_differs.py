"""E003 should-match-setting-differs: a setting that should be uniform differs between nodes.

What it detects
    A variable of the "should match" class (``docs/formats/training-logs.md`` 9.2: every other
    ``NCCL_*`` and ``TORCH_NCCL_*`` variable, ``NCCL_IB_GID_INDEX``/``TC``/``TIMEOUT``, GDR and
    P2P levels, ``CUDA_DEVICE_MAX_CONNECTIONS``, ``PYTORCH_CUDA_ALLOC_CONF``, ``OMP_NUM_THREADS``,
    ``NVTE_*``, ``UCX_*``, ``FI_*``) whose value differs between nodes, NCCL's own ``set by
    environment`` lines first, env dumps where a node has none.

Why it matters
    These do not hang a job by themselves but make nodes behave differently: asymmetric
    bandwidth (GDR, P2P, IB traffic class), one node's ranks running out of memory first
    (allocator settings), different numerics (TransformerEngine switches), or evidence missing
    on some nodes (``NCCL_DEBUG``, Flight Recorder settings).

What to do
    Set the variable once in the job script so every rank inherits it, and remove per-node
    overrides (shell profiles, ``/etc/nccl.conf``, images).

Known false positives
    An env dump taken in a different shell than the job. Variables that legitimately differ per
    node (``NCCL_SOCKET_IFNAME``, ``NCCL_IB_HCA``, ``NCCL_DEBUG_FILE``, host names, ``SLURM_*``,
    ``CUDA_VISIBLE_DEVICES``) are not compared. ``NCCL_IB_GID_INDEX`` may need another value
    on a node whose NICs number their GIDs differently.
"""

from __future__ import annotations

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.config.config_model import mismatch_confidence, mismatch_evidence, setting_mismatches
from postmortem.rules.config.e001_must_match_setting_differs import describe, suggestion

RULE = Rule(code="E003", name="should-match-setting-differs", severity=Severity.WARNING, category=Category.CONFIG, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    out = []
    for m in setting_mismatches(ctx, ("should_match",)):
        out.append(RULE.finding(confidence=min(0.8, mismatch_confidence(m)), title=f"{m.key} differs between nodes",
            message=describe(m) + ". It should be the same everywhere: nodes that differ perform or report differently",
            nodes=m.minority, evidence=mismatch_evidence(ctx, m), suggestion=suggestion(m), culprit=False, details={"key": m.key, "values": m.summary(), "majority": m.majority,
                                    "minority": m.minority, "basis": m.basis}))
    return out
