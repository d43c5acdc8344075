"""Which kinds of evidence the inputs hold, and which settings the job already had, so that
advice is checked against the data: an evidence gap or a "collect X next time" is given only
when the inputs show it is not already satisfied. Shared by ``postmortem.rules.report`` (the evidence
gaps) and the rules whose suggestions ask for evidence (H005, X000); not a rule itself.

Settings are read from the per-node environment (``env_nodes``: env dumps, nccl.conf copies
and NCCL's own ``set by environment`` echoes); a setting counts as set when every node that has
evidence of the environment sets it (one node without it can still lose that node's dumps).
"""

from __future__ import annotations

from collections import Counter

from postmortem.rules.base import Context, memoised

# Flight Recorder: both spellings (TORCH_FR_* since PyTorch 2.7, TORCH_NCCL_* before and after).
FR_BUFFER = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
FR_DUMP = ("TORCH_FR_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT")
FR_FILE = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
FR_DEFAULT_FILE = "/tmp/nccl_trace_rank_"


def _count(ctx: Context, sql: str) -> int:
    try:
        return int(ctx.frame(sql)[0, 0] or 0)
    except Exception:  # noqa: BLE001 -- a table or column this store lacks
        return 0


@memoised
def setting(ctx: Context, keys: tuple[str, ...]) -> str | None:
    """The value of the first of ``keys`` that every node with environment evidence sets (the
    most common value), or None when some node does not set any of them."""
    env = ctx.table("env_nodes")
    value = None
    if not env.is_empty() and {"node", "key", "value"} <= set(env.columns):
        nodes = set(env["node"].drop_nulls().to_list())
        for k in keys:
            rows = env["key"] == k      # Series work: a query per key costs more
            have = {n: v for n, v in zip(env["node"].filter(rows).to_list(), env["value"].filter(rows).to_list())
                    if n is not None and v not in (None, "")}
            if nodes and set(have) >= nodes:
                value = Counter(have.values()).most_common(1)[0][0]
                break
    return value


def _on(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in ("0", "false", "no", "off", "")


def _positive(value: str | None) -> bool:
    try:
        return value is not None and int(value.strip()) > 0
    except ValueError:
        return False


def flight_recorder(ctx: Context) -> dict:
    """What the inputs say about Flight Recorder: dumps read, dumps c10d said it wrote, and the
    settings that turn it on."""
    return {
        "dumps_read": _count(ctx, "SELECT count(*) FROM inputs WHERE kind = 'flight_recorder'")
        + _count(ctx, "SELECT count(*) FROM fr_dumps"),
        "dumps_announced": _count(ctx, "SELECT count(*) FROM events WHERE kind = 'fr_dump'"),
        "buffer": setting(ctx, FR_BUFFER),
        "dump_on_timeout": setting(ctx, FR_DUMP),
        "file": setting(ctx, FR_FILE),
    }


def flight_recorder_gap(ctx: Context) -> dict | None:
    """The evidence gap about Flight Recorder, or None when dumps were read. When the environment
    already turned it on, the gap says so and asks for the files, not for the settings."""
    fr = flight_recorder(ctx)
    if fr["dumps_read"]:
        return None
    enabled = _positive(fr["buffer"]) and _on(fr["dump_on_timeout"])
    where = fr["file"] or FR_DEFAULT_FILE
    if enabled:
        said = " and c10d's lines say dumps were written" if fr["dumps_announced"] else \
            " (a dump is written only when a watchdog times out, or on demand)"
        return {"what": f"no Flight Recorder dumps were read, though the environment turned it on "
                        f"(buffer {fr['buffer']}, dump on timeout {fr['dump_on_timeout']}){said}",
                "enable": f"copy each node's dump files ({where}<rank>) into the job folder before the node is "
                          "reused"}
    wanted = _fr_wanted(fr)
    if not fr["file"]:
        wanted.append("TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/shared/fr/nccl_trace_rank_")
    return {"what": "no Flight Recorder dumps were read", "enable": " ".join(wanted)}


def _fr_wanted(fr: dict) -> list[str]:
    """The Flight Recorder settings the environment lacks."""
    wanted = []
    if not _positive(fr["buffer"]):
        wanted.append("TORCH_NCCL_TRACE_BUFFER_SIZE=2000")
    if not _on(fr["dump_on_timeout"]):
        wanted.append("TORCH_NCCL_DUMP_ON_TIMEOUT=1")
    return wanted


@memoised
def uses_gpus(ctx: Context) -> bool:
    """Whether anything in the inputs shows GPUs at work: NCCL output, a GPU per rank, nvidia-smi,
    CUDA memory lines, GPU kernel-log lines. A CPU job (gloo) loses CPU-hours, not GPU-hours."""
    return has_nccl_output(ctx) or any(_count(ctx, sql) for sql in (
        "SELECT count(*) FROM ranks WHERE cuda_dev IS NOT NULL OR bus_id IS NOT NULL",
        "SELECT count(*) FROM gpu_health", "SELECT count(*) FROM memory",
        "SELECT count(*) FROM node_events WHERE kind IN ('xid', 'gpu_identity', 'gpu_off_bus')"))


@memoised
def cpu_only(ctx: Context) -> bool:
    """A job that ran on CPUs with gloo: no sign of GPUs, and gloo in its lines. Advice about
    NCCL output or nvidia-smi does not apply to it."""
    # the spellings logs use (gloo, ProcessGroupGloo, GLOO_SOCKET_IFNAME): three literal searches
    # cost half what ILIKE does over every line's text (a 535 MB log: 0.21 against 0.41 s)
    return not uses_gpus(ctx) and _any(ctx, "lines", "contains(text, 'gloo') OR contains(text, 'Gloo') OR "
                                                     "contains(text, 'GLOO')")


# Asked by several rules and the report's missing-evidence list: each a scan of every line, once.
@memoised
def has_nccl_output(ctx: Context) -> bool:
    return _any(ctx, "lines", "kind = 'nccl'")


@memoised
def has_stacks(ctx: Context) -> bool:
    return _any(ctx, "stacks", "true")


@memoised
def has_rank_prefix(ctx: Context) -> bool:
    return _any(ctx, "lines", "rank_tag IS NOT NULL")


def _any(ctx: Context, table: str, condition: str) -> bool:
    """Whether any row of ``table`` meets ``condition`` (the scan stops at the first)."""
    return _count(ctx, f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {condition} LIMIT 1)") > 0


def missing_for_a_hang(ctx: Context) -> list[str]:
    """The evidence a hang's culprit is named from that these inputs lack, as short phrases for a
    suggestion (empty when all of it is there)."""
    out = []
    nccl = has_nccl_output(ctx) or cpu_only(ctx)   # a gloo job on CPUs has no NCCL output to collect
    if not has_rank_prefix(ctx) and not nccl:
        out.append("per-rank stderr with the [rankN]: prefix or NCCL_DEBUG=INFO")
    elif not has_rank_prefix(ctx):
        out.append("per-rank stderr with the [rankN]: prefix (PyTorch >= 2.3)")
    elif not nccl:
        out.append("NCCL_DEBUG=INFO")
    if flight_recorder_gap(ctx) is not None:
        wanted = _fr_wanted(flight_recorder(ctx))
        out.append(f"Flight Recorder ({' '.join(wanted)})" if wanted else "the Flight Recorder dump files")
    if not has_stacks(ctx):
        out.append("py-spy dumps of every rank while it hangs")
    return out


def phrase(items: list[str]) -> str:
    """``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
