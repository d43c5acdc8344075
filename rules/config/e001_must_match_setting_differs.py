"""E001 must-match-setting-differs: a setting every rank must share has another value on some nodes.

What it detects
    An NCCL variable that every rank must share (``docs/formats/training-logs.md`` 9.2, must match:
    ``NCCL_PROTO``, ``NCCL_ALGO``, buffer/thread/channel/threshold sizing, ``NCCL_IB_DISABLE``,
    ``NCCL_NET``/``NCCL_NET_PLUGIN``, ``NCCL_CROSS_NIC``/``COLLNET``/``NVLS``/``PXN`` switches) or a
    rendezvous variable (``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``NNODES``) whose value
    differs between nodes. NCCL's own ``X set by environment to Y`` lines are the truth; shell
    env dumps (``env``, ``nccl.conf`` copies) count where a node has no such lines. The finding
    names the minority node(s), their value and the majority's.

Why it matters
    NCCL never exchanges these settings: each rank decides its algorithm, protocol, channels
    and chunking alone (``docs/formats/nccl.md`` 3.14.5). Ranks that decide differently wait on each
    other forever at the message sizes where they differ, or exchange buffers of different
    sizes (truncation errors, corruption); different transports fail to connect. Nothing up to
    NCCL 2.30 detects it, so the job just hangs with every rank stuck in one collective.

What to do
    Make the value the same everywhere: remove it from the minority node's shell profile,
    ``/etc/nccl.conf`` / ``~/.nccl.conf`` or image, or export the intended value in the job
    script so every rank inherits it. Check with ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV``
    that every rank prints the same ``set by environment`` lines.

Known false positives
    An env dump taken in a different shell than the job (a login shell that sources a profile
    the job did not, or the other way round): when NCCL's own lines disagree with the dump, the
    lines win, and a difference shown only by dumps is reported with lower confidence (and not
    as the culprit when the node's NCCL lines do not show the variable). NCCL prints a variable
    only when it reads it, so a variable read lazily may be missing from a node's lines without
    being unset. Per-node variables (``NCCL_SOCKET_IFNAME``, ``NCCL_IB_HCA``, host names,
    ``SLURM_*``, ``CUDA_VISIBLE_DEVICES``) are never compared.
"""

from __future__ import annotations

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.config.config_model import UNSET, Mismatch, mismatch_confidence, mismatch_evidence, ranks_on, setting_mismatches

RULE = Rule(code="E001", name="must-match-setting-differs", severity=Severity.ERROR, category=Category.CONFIG, since="0.1.0")

ERROR_HANDLING = {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT",
                  "NCCL_BLOCKING_WAIT"}   # must match too, but they decide how a hang ends, not whether: E002
_WHY = {
    ("NCCL_PROTO", "NCCL_ALGO"): "each rank picks its algorithm and protocol alone (never exchanged): ranks that "
                                 "disagree hang at the message sizes where their choices differ",
    ("NCCL_IB_DISABLE", "NCCL_NET", "NCCL_NET_PLUGIN"): "the nodes pick different network transports: connection "
                                                        "failures, hangs, or a silent fallback to sockets",
    ("NCCL_CROSS_NIC", "NCCL_COLLNET_ENABLE", "NCCL_NVLS_ENABLE", "NCCL_PXN_DISABLE"):
        "some ranks use an algorithm family or NIC path the others do not: a hang",
    ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NNODES"): "the ranks disagree on the rendezvous: init hangs or "
                                                           "ranks join different jobs",
}
_SIZING = "peers compute buffers, chunks and channels independently: a mismatch hangs or corrupts data"


def why(key: str) -> str:
    return next((text for keys, text in _WHY.items() if key in keys), _SIZING)


def describe(m: Mismatch) -> str:
    if m.basis.startswith("echo"):
        how = "NCCL's own 'set by environment' lines show it"
        if m.basis == "echo+dump":
            how += " and the env dumps agree"
    elif m.basis == "dump":
        how = "only the env dumps show it (those nodes printed no NCCL 'set by environment' lines)"
    else:
        how = ("only the env dumps show it: NCCL's own lines on those nodes do not (unset in the job, or not read "
               "in this run), so the dump may come from another shell")
    text = f"{m.key} differs between nodes: {m.summary()}; {how}"
    if m.contradicted:
        text += (f"; the env dump of {', '.join(m.contradicted)} disagrees with NCCL's own lines there "
                 "(a dump from another shell?): the NCCL lines are believed")
    return text


def suggestion(m: Mismatch) -> str:
    where = ", ".join(m.minority)
    if m.majority is None:
        fix = f"decide which value of {m.key} is intended and set it on every node ({m.summary()})"
    elif m.majority == UNSET:
        fix = f"unset {m.key} on {where} (shell profile, /etc/nccl.conf, ~/.nccl.conf, container image)"
    else:
        fix = f"set {m.key}={m.majority} on {where}, or export it in the job script so every rank inherits it"
    return (fix[0].upper() + fix[1:] + "; then check that every rank prints the same 'set by environment' lines "
            "with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV.")


def check(ctx: Context) -> list[Finding]:
    out = []
    for m in setting_mismatches(ctx, ("must_match",)):
        if m.key in ERROR_HANDLING:
            continue
        confidence = mismatch_confidence(m)
        culprit = m.majority is not None and confidence >= 0.6 and m.basis != "dump, not echoed"
        weak = m.basis == "dump, not echoed"
        nodes = m.minority
        if culprit:
            title = f"{m.key} on {', '.join(nodes)} differs from the other nodes"
        else:
            title = f"{m.key} differs between nodes"
        message = describe(m) + f". Why it matters: {why(m.key)}"
        if m.majority is None and not weak:
            message += ". No value is held by a majority of the nodes, so which node is wrong is not decided"
        out.append(RULE.finding(severity=Severity.WARNING if weak else RULE.severity, confidence=confidence, title=title, message=message,
            ranks=ranks_on(ctx, nodes) if culprit else [], nodes=nodes,
            evidence=mismatch_evidence(ctx, m), suggestion=suggestion(m), culprit=culprit,
            details={"key": m.key, "values": m.summary(), "majority": m.majority, "minority": m.minority,
                     "basis": m.basis, "dump_disagrees_on": m.contradicted, "drain": False}))
    return out
