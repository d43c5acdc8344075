"""A tiny real distributed training job (CPU, gloo) with at most one injected fault.

Run under torchrun by ``bench/inject/make_corpus.py``; never imported by the analyzer.
It trains a small MLP on random data, averaging the flattened gradients with one gloo
all-reduce per step, and logs the way training scripts do: a few per-rank info lines at start
(``logging``), a Megatron-style iteration line per step (on rank 0, or on every rank), a
``done`` line at the end.

Environment (all optional):
  PM_FAULT          one of FAULTS below (default ``none``)
  PM_FAULT_RANK     the global rank that misbehaves (default 1)
  PM_FAULT_STEP     the step at which it does (default 3)
  PM_FAULT_ATTEMPT  ``all`` (default) or ``first``: fault only while TORCHELASTIC_RESTART_COUNT is 0
  PM_TIMEOUT_S      the process group's collective timeout in seconds (default 10)
  PM_STEPS          steps to run (default 6)
  PM_ITER_RANKS     ``0`` (iteration line on rank 0 only, default) or ``all``
  PM_SUBGROUP       ranks of a ``dist.new_group`` that all-reduces its loss every step, e.g. ``2,3``
  PM_WATCHDOG       ``1``: a per-step ``faulthandler.dump_traceback_later`` watchdog
  PM_RECORD         ``1``: wrap main in torchelastic's ``@record`` (error files for torchrun)
  PM_ATTEMPT_STORE  ``1``: a store namespace per restart attempt (see init_distributed)
"""

from __future__ import annotations

import datetime
import faulthandler
import logging
import os
import queue
import signal
import socket
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

log = logging.getLogger("train")


@dataclass
class Ctx:
    """What one rank knows about the run."""

    rank: int
    world: int
    local_rank: int
    timeout: float
    steps: int
    fault: str
    fault_rank: int
    fault_step: int
    subgroup: object | None = None
    subgroup_ranks: list[int] = field(default_factory=list)


def _env_ctx() -> Ctx:
    rank, world = dist.get_rank(), dist.get_world_size()
    fault = os.environ.get("PM_FAULT", "none")
    restarted = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0"
    if os.environ.get("PM_FAULT_ATTEMPT", "all") == "first" and restarted:
        fault = "none"
    return Ctx(rank=rank, world=world, local_rank=int(os.environ.get("LOCAL_RANK", "0")),
               timeout=float(os.environ.get("PM_TIMEOUT_S", "10")), steps=int(os.environ.get("PM_STEPS", "6")),
               fault=fault, fault_rank=int(os.environ.get("PM_FAULT_RANK", "1")),
               fault_step=int(os.environ.get("PM_FAULT_STEP", "3")))


# -- faults: each replaces the step's gradient all-reduce on the culprit ------------------------
# A fault function gets (ctx, flat gradient buffer) and either returns (the step goes on) or
# never does (the process dies, blocks, or is killed while it waits).

def lazy_optimizer_state_init(seconds: float) -> None:
    """The culprit's detour: a code path only it takes, which never reaches the collective."""
    time.sleep(seconds)


def fault_skip(ctx: Ctx, flat: torch.Tensor) -> None:
    """Never enter this step's all-reduce (busy elsewhere far past the timeout)."""
    lazy_optimizer_state_init(ctx.timeout * 4)


def fault_sleep(ctx: Ctx, flat: torch.Tensor) -> None:
    """Slow solo work past the timeout, silent, then enter the all-reduce late."""
    time.sleep(ctx.timeout * 2)
    dist.all_reduce(flat)


def fault_slow(ctx: Ctx, flat: torch.Tensor) -> None:
    """Slow solo work that says what it does (a validation pass), then the all-reduce, late."""
    log.info("running validation on 512 held-out batches (rank-local)")
    for batch in range(4):
        time.sleep(ctx.timeout * 0.6)
        log.info("validation batch %d/4", batch + 1)
    dist.all_reduce(flat)


def fault_block(ctx: Ctx, flat: torch.Tensor) -> None:
    """Wait forever on a prefetch queue whose producer thread died (outside any collective)."""
    batches: queue.Queue = queue.Queue(maxsize=2)

    def prefetch() -> None:
        raise OSError(f"[Errno 5] Input/output error: '/data/shards/train-{ctx.rank:05d}.bin'")

    threading.Thread(target=prefetch, name="prefetch", daemon=True).start()
    batches.get()                                   # never returns: nothing will ever put a batch
    dist.all_reduce(flat)


def fault_extra_barrier(ctx: Ctx, flat: torch.Tensor) -> None:
    """One rank only: a barrier 'before writing the checkpoint' nobody else calls."""
    log.info("saving checkpoint at iteration %d", ctx.fault_step)
    dist.barrier()
    dist.all_reduce(flat)


def fault_extra_allreduce(ctx: Ctx, flat: torch.Tensor) -> None:
    """The gradient all-reduce twice on one rank (a sync hook registered twice)."""
    dist.all_reduce(flat)
    dist.all_reduce(flat)


def fault_op_broadcast(ctx: Ctx, flat: torch.Tensor) -> None:
    """A broadcast from rank 0 where the others all-reduce."""
    dist.broadcast(flat, src=0)


def fault_op_allgather(ctx: Ctx, flat: torch.Tensor) -> None:
    """An all-gather where the others all-reduce."""
    parts = [torch.empty_like(flat) for _ in range(ctx.world)]
    dist.all_gather(parts, flat)
    flat.copy_(torch.stack(parts).sum(0))


def fault_size(ctx: Ctx, flat: torch.Tensor) -> None:
    """All-reduce only half the buffer (a layer frozen on this rank alone)."""
    dist.all_reduce(flat[: flat.numel() // 2])


def fault_raise(ctx: Ctx, flat: torch.Tensor) -> None:
    raise RuntimeError(f"injected failure on rank {ctx.rank} at step {ctx.fault_step}")


def fault_data_error(ctx: Ctx, flat: torch.Tensor) -> None:
    """A realistic uncaught error from the data path."""
    sample = 4096 * ctx.fault_step + ctx.rank
    raise ValueError(f"sample {sample} in shard {ctx.rank:05d}: expected 2048 tokens, got 0 (truncated record?)")


def fault_kill(ctx: Ctx, flat: torch.Tensor) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def fault_abort(ctx: Ctx, flat: torch.Tensor) -> None:
    os.abort()


def fault_exit(ctx: Ctx, flat: torch.Tensor) -> None:
    sys.exit(3)


def fault_terminate(ctx: Ctx, flat: torch.Tensor) -> None:
    """Start a daemon 'async metrics' thread that keeps running torch ops. The step goes on; at
    interpreter exit the thread is forced to unwind inside torch's C++ code, which calls
    std::terminate ("terminate called without an active exception", SIGABRT)."""
    probe = torch.randn(600, 600)

    def metrics() -> None:
        while True:
            torch.mm(probe, probe)

    threading.Thread(target=metrics, name="async-metrics", daemon=True).start()
    dist.all_reduce(flat)


FAULTS = {
    "skip": fault_skip, "sleep": fault_sleep, "slow": fault_slow, "block": fault_block,
    "extra-barrier": fault_extra_barrier, "extra-allreduce": fault_extra_allreduce,
    "op-broadcast": fault_op_broadcast, "op-allgather": fault_op_allgather, "size": fault_size,
    "raise": fault_raise, "data-error": fault_data_error, "kill": fault_kill, "abort": fault_abort,
    "exit": fault_exit, "terminate": fault_terminate,
}
# Faults that act in the subgroup's all-reduce rather than the global one.
SUBGROUP_FAULTS = {"subgroup-skip"}


# -- the training loop -----------------------------------------------------------------------

def setup_logging(rank: int) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format=f"%(asctime)s %(levelname)s [rank{rank}] %(name)s: %(message)s")


def build_model(ctx: Ctx) -> torch.nn.Module:
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.GELU(), torch.nn.Linear(48, 16))
    params = sum(p.numel() for p in model.parameters())
    log.info("rank %d/%d (local_rank %d) on %s, pid %d: model params %d, data shard %d/%d",
             ctx.rank, ctx.world, ctx.local_rank, socket.gethostname(), os.getpid(), params, ctx.rank, ctx.world)
    return model


def make_subgroup(ctx: Ctx) -> None:
    spec = os.environ.get("PM_SUBGROUP", "")
    if not spec:
        return
    ctx.subgroup_ranks = [int(r) for r in spec.split(",")]
    # every rank must call new_group; without a timeout it would get gloo's 30-minute default
    group = dist.new_group(ctx.subgroup_ranks, timeout=datetime.timedelta(seconds=ctx.timeout))
    if ctx.rank in ctx.subgroup_ranks:
        ctx.subgroup = group
        log.info("joined expert-parallel group %s", ctx.subgroup_ranks)


def healthy_noise(ctx: Ctx, step: int) -> None:
    """What a healthy run still logs: a deprecation warning, a logged warning, a caught error."""
    if step == 1:
        warnings.warn("torch.cuda.amp.GradScaler is deprecated, use torch.amp.GradScaler('cuda') instead",
                      FutureWarning, stacklevel=1)
    if step == 2 and ctx.rank == 0:
        log.warning("throughput dropped to 61% of the moving average (data loader stall?)")
    if step == ctx.fault_step and ctx.rank == ctx.fault_rank:
        try:
            upload_metrics(step)
        except ConnectionError:
            log.exception("failed to upload metrics for step %d; continuing without them", step)


def upload_metrics(step: int) -> None:
    raise ConnectionError(f"metrics endpoint http://metrics.internal:8086 refused the connection (step {step})")


def sgd_update(model: torch.nn.Module, flat: torch.Tensor, lr: float = 1e-4) -> None:
    """Plain SGD from the averaged flat gradient (torch.optim would import torch._dynamo: seconds per rank)."""
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            p.add_(flat[offset:offset + p.numel()].view_as(p), alpha=-lr)
            offset += p.numel()


def train_step(ctx: Ctx, model: torch.nn.Module, step: int) -> float:
    time.sleep(0.2)                                 # "data loading"
    x = torch.randn(32, 64)
    loss = (model(x) - x[:, :16]).pow(2).mean()
    model.zero_grad()
    loss.backward()
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    culprit = ctx.rank == ctx.fault_rank and step == ctx.fault_step
    if culprit and ctx.fault in FAULTS:
        FAULTS[ctx.fault](ctx, flat)
    else:
        dist.all_reduce(flat)
    sgd_update(model, flat / ctx.world)
    if ctx.subgroup is not None:
        local = loss.detach().reshape(1)
        if culprit and ctx.fault == "subgroup-skip":
            lazy_optimizer_state_init(ctx.timeout * 4)
        else:
            dist.all_reduce(local, group=ctx.subgroup)
    return loss.item()


def iteration_line(ctx: Ctx, step: int, loss: float, elapsed_ms: float) -> str:
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    return (f" [{stamp}] iteration {step:8d}/{ctx.steps:8d} | consumed samples: {step * 32 * ctx.world:12d} | "
            f"elapsed time per iteration (ms): {elapsed_ms:.1f} | learning rate: 1.000E-04 | "
            f"global batch size: {32 * ctx.world:5d} | lm loss: {loss:.6E} | loss scale: 1.0 | "
            f"number of skipped iterations:   0 | number of nan iterations:   0 |")


def init_distributed() -> None:
    """init_process_group from torchrun's environment. With PM_ATTEMPT_STORE=1 the gloo keys go
    under a per-attempt prefix of the agent's store: with torch 2.13 the agent's store outlives a
    restart, and a restarted gloo group reads the dead attempt's addresses from it
    (``Gloo connectFullMesh failed``: Connection refused or Connect timeout; see the restart-static case)."""
    timeout = datetime.timedelta(seconds=float(os.environ.get("PM_TIMEOUT_S", "10")))
    if os.environ.get("PM_ATTEMPT_STORE") != "1":
        dist.init_process_group("gloo", timeout=timeout)
        return
    agent_store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                                timeout=timeout)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt-{attempt}", agent_store),
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]), timeout=timeout)


def main() -> None:
    init_distributed()
    ctx = _env_ctx()
    setup_logging(ctx.rank)
    model = build_model(ctx)
    make_subgroup(ctx)
    watchdog = os.environ.get("PM_WATCHDOG") == "1"
    every_rank = os.environ.get("PM_ITER_RANKS", "0") == "all"
    if watchdog:
        faulthandler.enable()
    start = time.time()
    for step in range(1, ctx.steps + 1):
        t0 = time.time()
        if watchdog:
            # A rank stuck in this step dumps every thread's stack to stderr before the timeout.
            faulthandler.dump_traceback_later(ctx.timeout * 0.6, exit=False)
        if ctx.fault == "warn":
            healthy_noise(ctx, step)
        loss = train_step(ctx, model, step)
        if watchdog:
            faulthandler.cancel_dump_traceback_later()
        if every_rank or ctx.rank == 0:
            print(iteration_line(ctx, step, loss, (time.time() - t0) * 1000), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {ctx.rank}: done in {time.time() - start:.1f}s", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    if os.environ.get("PM_RECORD") == "1":
        from torch.distributed.elastic.multiprocessing.errors import record

        main = record(main)
    main()
