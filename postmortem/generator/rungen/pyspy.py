"""``py-spy dump --pid P`` output (``docs/formats/pytorch-failures.md`` section 8).

Innermost frame first; paths as py-spy shortens them (relative to the sys.path entry). A rank that
already enqueued the collective blocks later, at a sync point; the rank that never entered is in
host code elsewhere -- here, Adam's lazy state initialisation.
"""

from __future__ import annotations

from .eras import Era

_OUTER_TRAINING_FRAMES = [
    ("step_with_ready_grads", "megatron/core/optimizer/distrib_optimizer.py", 2242),
    ("decorate_context", "torch/utils/_contextlib.py", 116),
    ("step", "megatron/core/optimizer/optimizer.py", 497),
    ("decorate_context", "torch/utils/_contextlib.py", 116),
    ("train_step", "megatron/training/training.py", 1186),
    ("train", "megatron/training/training.py", 1988),
    ("pretrain", "megatron/training/training.py", 421),
    ("<module>", "pretrain_gpt.py", 294),
]

# What a waiting rank's main thread shows: blocked in a device sync after issuing the all-gather.
WAITING_MAIN = [("synchronize", "torch/cuda/__init__.py", 954),
                ("_dispatch_gather_model_params", "megatron/core/optimizer/distrib_optimizer.py", 1881),
                *_OUTER_TRAINING_FRAMES]

# A rank that went past the hung group and waits in a later default-PG all-reduce (group="node").
DOWNSTREAM_MAIN = [("synchronize", "torch/cuda/__init__.py", 954),
                   ("training_log", "megatron/training/training.py", 1421),
                   ("train", "megatron/training/training.py", 2011),
                   ("pretrain", "megatron/training/training.py", 421),
                   ("<module>", "pretrain_gpt.py", 294)]

# The culprit: still creating Adam state for parameters that got their first gradient.
CULPRIT_MAIN = [("_init_group", "torch/optim/adam.py", 168),
                ("step", "torch/optim/adam.py", 226),
                ("_use_grad", "torch/optim/optimizer.py", 79),
                ("wrapper", "torch/optim/optimizer.py", 493),
                ("_lazy_init_expert_state", "megatron/core/optimizer/distrib_optimizer.py", 2198),
                *_OUTER_TRAINING_FRAMES]

# The Python API function NCCL's OpType comes from, for the Flight Recorder call-site frames.
_API_OF_OP = {"_ALLGATHER_BASE": ("all_gather_into_tensor", 3709), "ALLGATHER": ("all_gather", 3557),
              "ALLREDUCE": ("all_reduce", 2806), "BROADCAST": ("broadcast", 2725),
              "_REDUCE_SCATTER_BASE": ("reduce_scatter_tensor", 4178), "REDUCE_SCATTER": ("reduce_scatter", 4105),
              "ALLTOALL_BASE": ("all_to_all_single", 4388), "BARRIER": ("barrier", 4635)}

# Who called the collective: the parameter all-gather after the optimizer step (waiting ranks),
# the lazy state init (a desync culprit), the loss all-reduce of training_log (downstream ranks).
CALLERS = {
    "gather": [("_dispatch_gather_model_params", "megatron/core/optimizer/distrib_optimizer.py", 1878),
               *_OUTER_TRAINING_FRAMES],
    "lazy-init": [("_lazy_init_expert_state", "megatron/core/optimizer/distrib_optimizer.py", 2204),
                  *_OUTER_TRAINING_FRAMES],
    "training-log": [("training_log", "megatron/training/training.py", 1419),
                     ("train", "megatron/training/training.py", 2011),
                     ("pretrain", "megatron/training/training.py", 421), ("<module>", "pretrain_gpt.py", 294)],
}


def collective_frames(site_packages: str, megatron_root: str, op: str, caller: str) -> list[tuple[str, str]]:
    """(function, absolute ``file:line``) pairs for the c10d "Stack trace of the failed collective"."""
    api, line = _API_OF_OP.get(op, ("all_reduce", 2806))
    stack = [(api, "torch/distributed/distributed_c10d.py", line), ("wrapper", "torch/distributed/c10d_logger.py", 81),
             *CALLERS[caller]]
    frames = []
    for fn, path, number in stack:
        root = site_packages if path.startswith("torch/") else megatron_root
        frames.append((fn, f"{root}/{path}:{number}"))
    return frames


_PIN_MEMORY_THREAD = [("select", "selectors.py", 415), ("wait", "multiprocessing/connection.py", 1136),
                      ("_poll", "multiprocessing/connection.py", 440), ("poll", "multiprocessing/connection.py", 257),
                      ("get", "multiprocessing/queues.py", 113),
                      ("do_one_step", "torch/utils/data/_utils/pin_memory.py", 35),
                      ("_pin_memory_loop", "torch/utils/data/_utils/pin_memory.py", 58),
                      ("run", "threading.py", 1010), ("_bootstrap_inner", "threading.py", 1073),
                      ("_bootstrap", "threading.py", 1030)]

_WATCHDOG_THREAD = [("wait", "threading.py", 359), ("wait", "threading.py", 655),
                    ("_watch", "megatron/training/hang_watchdog.py", 61),
                    ("run", "threading.py", 1010), ("_bootstrap_inner", "threading.py", 1073),
                    ("_bootstrap", "threading.py", 1030)]


def dump(era: Era, pid: int, command: str, main_state: str, main_frames: list[tuple[str, str, int]],
         thread_ids: dict[str, int]) -> str:
    """A whole dump: header, the main thread, then the helper threads."""
    version = {"3.10": "3.10.12", "3.12": "3.12.3"}.get(era.python, era.python)
    lines = [f"Process {pid}: {command}", f"Python v{version} (/usr/bin/python{era.python})", ""]
    lines += _thread(pid, main_state, "MainThread", main_frames)
    lines += _thread(thread_ids["pin_memory"], "idle", "Thread-2 (_pin_memory_loop)", _PIN_MEMORY_THREAD)
    lines += _thread(thread_ids["watchdog"], "idle", "Thread-3 (_watch)", _WATCHDOG_THREAD)
    return "\n".join(lines) + "\n"


def _thread(tid: int, state: str, name: str, frames: list[tuple[str, str, int]]) -> list[str]:
    return [f'Thread {tid} ({state}): "{name}"'] + [f"    {fn} ({path}:{line})" for fn, path, line in frames]
