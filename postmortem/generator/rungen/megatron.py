"""Megatron-LM stdout: startup chatter (rank 0), iteration lines (last rank), memory report (rank 0).

Formats: ``docs/formats/training-logs.md`` sections 2.1-2.6 (current layout: datetime prefix, the
iteration fields in order, ``[Rank N] (after K iterations) memory (MB)`` with 2 decimals, the
arguments dump, the datetime markers). Who prints what follows 2.1: with TP1/PP1 the iteration
line comes from the last rank only and the memory report from rank 0 only.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .base import Clock
from .eras import Era

MEGATRON_ROOT = "/workspace/Megatron-LM"
CHECKPOINT_DIR = "/mnt/ckpt/moe-16b-a3b"
DATA_PATH = "/mnt/data/pile/pile_text_document"


@dataclass(frozen=True)
class TrainConfig:
    world: int
    ep: int
    train_iters: int
    timeout_minutes: int
    global_batch: int = 640
    seq_length: int = 4096
    lr: float = 1.5e-4
    tflops: float = 13.1          # about 9% MFU on an H20 (148 dense BF16 TFLOP/s)


def arguments(cfg: TrainConfig) -> dict[str, str]:
    """The keys of the arguments dump that matter to the rules (parallel sizes, timeout, ...)."""
    return {
        "bf16": "True", "ckpt_format": "torch_dist", "context_parallel_size": "1",
        "data_parallel_size": str(cfg.world), "data_path": f"['{DATA_PATH}']",
        "distributed_backend": "nccl", "distributed_timeout_minutes": str(cfg.timeout_minutes),
        "expert_model_parallel_size": str(cfg.ep), "expert_tensor_parallel_size": "1",
        "ffn_hidden_size": "10944", "global_batch_size": str(cfg.global_batch), "hidden_size": "2048",
        "load": CHECKPOINT_DIR, "log_interval": "1", "log_throughput": "True", "lr": str(cfg.lr),
        "micro_batch_size": "1", "moe_ffn_hidden_size": "1408", "moe_router_topk": "6",
        "moe_token_dispatcher_type": "alltoall", "num_attention_heads": "16", "num_experts": "64",
        "num_layers": "28", "optimizer": "adam", "pipeline_model_parallel_size": "1", "save": CHECKPOINT_DIR,
        "save_interval": "1000", "seq_length": str(cfg.seq_length), "tensor_model_parallel_size": "1",
        "train_iters": str(cfg.train_iters), "use_distributed_optimizer": "True", "world_size": str(cfg.world),
    }


def startup_chatter(cfg: TrainConfig) -> list[tuple[float, str]]:
    """Rank 0's lines before the process group exists, as (seconds after process start, text)."""
    lines = [(0.0, f"using world size: {cfg.world}, data-parallel size: {cfg.world}, context-parallel size: 1, "
                   "hierarchical context-parallel sizes: None, tensor-model-parallel size: 1, "
                   "pipeline-model-parallel size: 1"),
             (0.01, "using torch.bfloat16 for parameters ..."),
             (0.02, "------------------------ arguments ------------------------")]
    for name, value in sorted(arguments(cfg).items(), key=lambda kv: kv[0].lower()):
        lines.append((0.02, f"  {name} {'.' * max(1, 48 - len(name))} {value}"))
    lines += [(0.02, "-------------------- end of arguments ---------------------"),
              (0.05, "setting number of microbatches to constant 16"),
              (0.06, "> building GPT2BPETokenizer tokenizer ..."),
              (0.3, " > padded vocab (size: 50257) with 47 dummy tokens (new size: 50304)"),
              (0.31, "> initializing torch distributed ...")]
    return lines


def after_init_chatter(clock: Clock, t_init: float) -> list[tuple[float, str]]:
    """Rank 0's lines from model-parallel init to the first training step, as (absolute t, text)."""
    def marker(name: str, t: float) -> tuple[float, str]:
        return t, f"[{name}] datetime: {clock.megatron(t)} "

    t = t_init
    return [
        (t, "> initialized tensor model parallel with size 1"),
        (t, "> initialized pipeline model parallel with size 1"),
        (t + 0.2, "> setting random seeds to 1234 ..."),
        marker("after megatron is initialized", t + 0.9),
        (t + 1.0, "building GPT model ..."),
        (t + 6.8, " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 15798591488"),
        (t + 9.4, f"WARNING: could not find the metadata file {CHECKPOINT_DIR}/latest_checkpointed_iteration.txt"),
        (t + 9.4, "    will not load any checkpoints and will start from random"),
        marker("after model, optimizer, and learning rate scheduler are built", t + 9.6),
        (t + 9.7, "> building train, validation, and test datasets ..."),
        (t + 9.7, " > datasets target sizes (minimum size):"),
        (t + 9.7, "    train:      32000000"),
        (t + 9.7, "    validation: 3200640"),
        (t + 9.7, "    test:       640"),
        (t + 9.8, "> building train, validation, and test datasets for GPT ..."),
        (t + 31.5, "> finished creating GPT datasets ..."),
        marker("after dataloaders are built", t + 31.6),
        (t + 31.6, "done with setup ..."),
        (t + 31.7, "training ..."),
        marker("before the start of training step", t + 31.8),
    ]


class IterationLog:
    """Iteration and memory lines with smooth, seeded noise (loss falls, lr warms up)."""

    def __init__(self, cfg: TrainConfig, clock: Clock, rng: random.Random):
        self.cfg, self.clock, self.rng = cfg, clock, rng

    def iteration_line(self, t: float, it: int, elapsed_ms: float) -> str:
        cfg, rng = self.cfg, self.rng
        lr = cfg.lr * min(1.0, it / 20)
        loss = 2.2 + 8.6 * math.exp(-it / 9) + rng.uniform(-0.04, 0.04)
        balance = 1.0 + 0.35 * math.exp(-it / 12) + rng.uniform(0.004, 0.02)
        grad_norm = 0.6 + 4.0 * math.exp(-it / 6) + rng.uniform(-0.05, 0.05)
        tflops = cfg.tflops * 120_000.0 / elapsed_ms
        return (f" [{self.clock.megatron(t)}] iteration {it:>8}/{cfg.train_iters:>8} |"
                f" consumed samples: {it * cfg.global_batch:>12} |"
                f" elapsed time per iteration (ms): {elapsed_ms:.1f} |"
                f" throughput per GPU (TFLOP/s/GPU): {tflops:.1f} |"
                f" learning rate: {lr:.6E} |"
                f" global batch size: {cfg.global_batch:>5} |"
                f" lm loss: {loss:.6E} |"
                f" load_balancing_loss: {balance:.6E} |"
                f" loss scale: 1.0 |"
                f" grad norm: {grad_norm:.3f} |"
                f" number of skipped iterations: {0:>3} |"
                f" number of nan iterations: {0:>3} |")

    @staticmethod
    def memory_line(rank: int, it: int) -> str:
        """Peak 87654.32 MiB (85.6 GiB) of the H20's 97871 MiB: high but healthy (about 89%)."""
        allocated = 41873.18 + 7.25 * it
        reserved = 88412.00 + 128.0 * (it - 1)
        return (f"[Rank {rank}] (after {it} iterations) memory (MB) | allocated: {allocated:.2f} | "
                f"max allocated: {87654.32 if it > 1 else 86410.57:.2f} | reserved: {reserved:.2f} | "
                f"max reserved: {reserved:.2f}")

    @staticmethod
    def params_report() -> list[str]:
        """Rank 0's parameter counts from ``report_theoretical_memory`` (printed with the first memory
        report): 15.80B in all, 3.30B active per token (an "A3B" MoE)."""
        return ["Number of parameters in transformer block in billions:  15.69",
                "Number of active parameters in transformer block in billions:  3.19",
                "Number of parameters in embedding layers in billions: 0.10",
                "Total number of parameters in billions: 15.80",
                "Total number of active parameters in billions: 3.30",
                "Number of parameters in most loaded shard in billions: 2.4886"]


def save_lines(clock: Clock, t: float, it: int, duration: float = 41.3) -> list[tuple[float, str]]:
    """Rank 0's checkpoint save at the end of a healthy run (``duration`` seconds)."""
    return [(t, f"[{clock.megatron(t)}.{int(t * 1e6) % 1_000_000:06d}] saving checkpoint at iteration {it:7d} "
                f"to {CHECKPOINT_DIR} in torch_dist format"),
            (t + duration, f"  [{clock.megatron(t + duration)}.{int((t + duration) * 1e6) % 1_000_000:06d}] "
                           f"successfully saved checkpoint from iteration {it:7d} to {CHECKPOINT_DIR} [ t 1/1, p 1/1 ]"),
            (t + duration + 0.2, f"[after training is done] datetime: {clock.megatron(t + duration + 0.2)} ")]


OOM_SITES = ("backward", "optimizer-init")

# The optimizer step that first reaches Adam's state: torch.optim creates exp_avg/exp_avg_sq lazily.
_OPTIMIZER_INIT_FRAMES = [
    (f"{MEGATRON_ROOT}/megatron/training/training.py", 1188, "train_step",
     "update_successful, grad_norm, num_zeros_in_grad = optimizer.step()"),
    ("/usr/local/lib/python3.12/dist-packages/torch/utils/_contextlib.py", 116, "decorate_context",
     "return func(*args, **kwargs)"),
    (f"{MEGATRON_ROOT}/megatron/core/optimizer/distrib_optimizer.py", 2219, "step_with_ready_grads",
     "update_successful = super().step_with_ready_grads()"),
    (f"{MEGATRON_ROOT}/megatron/core/optimizer/optimizer.py", 434, "step_with_ready_grads", "self.optimizer.step()"),
    ("/usr/local/lib/python3.12/dist-packages/torch/optim/adam.py", 223, "step",
     "has_complex = self._init_group("),
    ("/usr/local/lib/python3.12/dist-packages/torch/optim/adam.py", 163, "_init_group",
     "state[\"exp_avg_sq\"] = torch.zeros_like("),
]


def megatron_oom(era: Era, device: int, site: str = "backward") -> str:
    """The traceback of a CUDA OOM in the backward pass of a Megatron MoE layer (``site="backward"``)
    or in the optimizer step creating Adam's state (``site="optimizer-init"``)."""
    frames = [
        (f"{MEGATRON_ROOT}/pretrain_gpt.py", 294, "<module>", "pretrain("),
        (f"{MEGATRON_ROOT}/megatron/training/training.py", 421, "pretrain", "iteration, num_floating_point_operations_so_far = train("),
        (f"{MEGATRON_ROOT}/megatron/training/training.py", 1988, "train", "train_step(forward_step_func,"),
        (f"{MEGATRON_ROOT}/megatron/training/training.py", 1152, "train_step", "losses_reduced = forward_backward_func("),
        (f"{MEGATRON_ROOT}/megatron/core/pipeline_parallel/schedules.py", 492, "forward_backward_no_pipelining",
         "backward_step(input_tensor, output_tensor, output_tensor_grad, model_type, config)"),
        (f"{MEGATRON_ROOT}/megatron/core/pipeline_parallel/schedules.py", 366, "backward_step",
         "custom_backward(output_tensor[0], output_tensor_grad[0])"),
        (f"{MEGATRON_ROOT}/megatron/core/pipeline_parallel/schedules.py", 150, "custom_backward",
         "Variable._execution_engine.run_backward("),
    ]
    if site == "optimizer-init":
        frames = frames[:3] + _OPTIMIZER_INIT_FRAMES
    lines = ["Traceback (most recent call last):"]
    for path, line, fn, code in frames:
        lines += [f'  File "{path}", line {line}, in {fn}', f"    {code}"]
    return "\n".join(lines + [
        f"{era.oom_class}: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {device} has a total "
        f"{era.oom_capacity} of 95.58 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process "
        "has 94.51 GiB memory in use. Of the allocated memory 88.41 GiB is allocated by PyTorch, and 3.77 GiB is "
        "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
        "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"])
