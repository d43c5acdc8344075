"""A tiny real distributed training job (CPU, gloo) with one injected fault.

Run under torchrun by ``bench/inject/make_corpus.py``; never imported by the analyzer.
Environment:
  PM_FAULT       none | skip | kill | sleep | raise
  PM_FAULT_RANK  the global rank that misbehaves
  PM_FAULT_STEP  the step at which it does
  PM_TIMEOUT_S   the process group's collective timeout
  PM_STEPS       steps to run
The loop prints a Megatron-style iteration line per step on rank 0 (and per rank to its own
stdout), so the logs look like a training job's, not like a test.
"""

from __future__ import annotations

import datetime
import faulthandler
import os
import signal
import sys
import time

import torch
import torch.distributed as dist


def lazy_optimizer_state_init(seconds: float) -> None:
    """The culprit's detour: a code path only it takes, which never reaches the collective."""
    time.sleep(seconds)


def main() -> None:
    fault = os.environ.get("PM_FAULT", "none")
    fault_rank = int(os.environ.get("PM_FAULT_RANK", "1"))
    fault_step = int(os.environ.get("PM_FAULT_STEP", "3"))
    timeout = float(os.environ.get("PM_TIMEOUT_S", "10"))
    steps = int(os.environ.get("PM_STEPS", "6"))
    faulthandler.enable()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    weights = torch.ones(4096) * (rank + 1)
    start = time.time()
    for step in range(1, steps + 1):
        t0 = time.time()
        # A step watchdog: a rank stuck in this step dumps every thread's stack to stderr
        # before the collective timeout fires (re-armed each step, cancelled when it ends).
        faulthandler.dump_traceback_later(timeout * 0.6, exit=False)
        if rank == fault_rank and step == fault_step:
            if fault == "skip":
                lazy_optimizer_state_init(timeout * 4)
                continue
            if fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if fault == "sleep":
                time.sleep(timeout * 2)
            if fault == "raise":
                raise RuntimeError(f"injected failure on rank {rank} at step {step}")
        grad = torch.randn(4096) * 0.01
        dist.all_reduce(grad)
        weights -= grad / world
        faulthandler.cancel_dump_traceback_later()
        loss = float(weights.abs().mean())
        elapsed_ms = (time.time() - t0) * 1000
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        print(f" [{stamp}] iteration {step:8d}/{steps:8d} | consumed samples: {step * 8 * world:12d} | "
              f"elapsed time per iteration (ms): {elapsed_ms:.1f} | learning rate: 1.000E-04 | "
              f"global batch size: {8 * world:5d} | lm loss: {loss:.6E} | loss scale: 1.0 | "
              f"number of skipped iterations:   0 | number of nan iterations:   0 |", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: done in {time.time() - start:.1f}s", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
