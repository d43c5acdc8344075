"""Training-framework styles for generated runs (``RunSpec.framework``).

``megatron`` (the default) delegates to ``rungen.megatron`` unchanged, so the bundled samples stay
byte-identical. The other styles print what that framework prints at the same points of the story
(rank 0's startup chatter, the step line the story gives to its printing rank, rank 0's memory
report for the first two steps, the checkpoint save at the end of a healthy run), in the shapes of
``docs/formats/training-logs.md``:

``deepspeed``  section 3: the DeepSpeed logger (``[YYYY-MM-DD HH:MM:SS,mmm] [INFO] [file:line:func]``),
               engine info, ZeRO creation, the config dump, ``step=N, skipped=K, lr=[..]`` + the
               throughput timer line (GiB), ``see_memory_usage`` (MA/CA GiB), and the ``[Torch]
               Checkpoint TAG is about to be saved!`` / ``is ready now!`` pair.
``hf``         section 4: ``TrainingArguments(`` dump, ``***** Running training *****`` block, a tqdm
               bar per step and the metric dict every step, ``Saving model checkpoint to DIR``.
``torchtitan`` section 6: ``[titan] ts - root - INFO - ...``: device capacity line, model size,
               ``Training starts at step 1, ...``, the step line with memory GiB(%), tps, tflops, mfu.
``lightning``  section 5: ``GPU available``, ``Initializing distributed: GLOBAL_RANK``, the seed line,
               the model summary, and the ``Epoch 0: pct%|bar| n/total [...]`` bar with ``loss=``.
"""

from __future__ import annotations

import math

from . import megatron

FRAMEWORKS = ("megatron", "deepspeed", "hf", "torchtitan", "lightning")
CAPACITY_GIB = 95.58          # an H20 as torch sees it (the 85.6 GB peak of DESIGN.md is 87654 MiB)


def _fw(spec) -> str:
    return getattr(spec, "framework", "megatron")


def _loss(it: int, rng) -> float:
    return 2.2 + 8.6 * math.exp(-it / 9) + rng.uniform(-0.04, 0.04)


def _grad_norm(it: int, rng) -> float:
    return 0.6 + 4.0 * math.exp(-it / 6) + rng.uniform(-0.05, 0.05)


def _peak_mib(it: int) -> float:
    return 87654.32 if it > 1 else 86410.57


# -- DeepSpeed ---------------------------------------------------------------------------------

def _ds(clock, t: float, where: str, msg: str, rank0: bool = False) -> str:
    return f"[{clock.pylog(t)}] [INFO] [{where}] " + ("[Rank 0] " if rank0 else "") + msg


def _ds_startup(cfg: megatron.TrainConfig, clock, t0: float) -> list[tuple[float, str]]:
    micro = 1
    accum = max(1, cfg.global_batch // (micro * cfg.world))
    lines = [
        (0.0, _ds(clock, t0, "real_accelerator.py:203:get_accelerator", "Setting ds_accelerator to cuda (auto detect)")),
        (0.4, _ds(clock, t0 + 0.4, "logging.py:96:log_dist", "DeepSpeed info: version=0.14.4, git-hash=unknown, "
                                                             "git-branch=unknown", True)),
        (0.5, _ds(clock, t0 + 0.5, "logging.py:96:log_dist", "DeepSpeed Basic Optimizer = FusedAdam", True)),
        (0.5, _ds(clock, t0 + 0.5, "logging.py:96:log_dist",
                  "Creating torch.bfloat16 ZeRO stage 1 optimizer", True)),
        (0.5, _ds(clock, t0 + 0.5, "stage_1_and_2.py:149:__init__", "Reduce bucket size 500000000")),
        (0.5, _ds(clock, t0 + 0.5, "stage_1_and_2.py:150:__init__", "Allgather bucket size 500000000")),
        (0.5, _ds(clock, t0 + 0.5, "stage_1_and_2.py:151:__init__", "CPU Offload: False")),
        (0.9, _ds(clock, t0 + 0.9, "utils.py:781:see_memory_usage", "Before initializing optimizer states")),
        (0.9, _ds(clock, t0 + 0.9, "utils.py:782:see_memory_usage",
                  "MA 29.43 GB         Max_MA 29.43 GB         CA 29.5 GB         Max_CA 30 GB ")),
        (0.9, _ds(clock, t0 + 0.9, "utils.py:789:see_memory_usage",
                  "CPU Virtual Memory:  used = 212.35 GB, percent = 10.5%")),
        (1.2, _ds(clock, t0 + 1.2, "utils.py:781:see_memory_usage", "After initializing optimizer states")),
        (1.2, _ds(clock, t0 + 1.2, "utils.py:782:see_memory_usage",
                  "MA 41.02 GB         Max_MA 47.11 GB         CA 47.5 GB         Max_CA 48 GB ")),
        (1.2, _ds(clock, t0 + 1.2, "utils.py:789:see_memory_usage",
                  "CPU Virtual Memory:  used = 214.8 GB, percent = 10.6%")),
        (1.3, _ds(clock, t0 + 1.3, "logging.py:96:log_dist", "DeepSpeed Final Optimizer = FusedAdam", True)),
        (1.4, _ds(clock, t0 + 1.4, "config.py:988:print", "DeepSpeedEngine configuration:")),
    ]
    config = {"gradient_accumulation_steps": str(accum), "steps_per_print": "1",
              "train_batch_size": str(cfg.global_batch), "train_micro_batch_size_per_gpu": str(micro),
              "wall_clock_breakdown": "False", "world_size": str(cfg.world), "zero_enabled": "True",
              "zero_optimization_stage": "1"}
    for name, value in config.items():
        lines.append((1.4, _ds(clock, t0 + 1.4, "config.py:992:print", f"  {name} {'.' * max(1, 29 - len(name))} "
                                                                        f"{value}")))
    return lines


class _DeepSpeedLog:
    def __init__(self, cfg, clock, rng):
        self.cfg, self.clock, self.rng, self.t = cfg, clock, rng, 0.0

    def iteration_line(self, t: float, it: int, elapsed_ms: float) -> str:
        self.t = t
        lr = self.cfg.lr * min(1.0, it / 20)
        sps = self.cfg.global_batch / (elapsed_ms / 1000.0)
        return "\n".join([
            _ds(self.clock, t, "logging.py:96:log_dist", f"step={it}, skipped=0, lr=[{lr}], mom=[(0.9, 0.95)]", True),
            _ds(self.clock, t, "timer.py:264:stop",
                f"epoch=0/micro_step={it}/global_step={it}, RunningAvgSamplesPerSec={sps:.4f}, "
                f"CurrSamplesPerSec={sps * (1 + self.rng.uniform(-0.01, 0.01)):.4f}, "
                f"MemAllocated={41.02 + 0.01 * it:.2f}GB, MaxMemAllocated={_peak_mib(it) / 1024:.2f}GB"),
        ])

    def memory_line(self, rank: int, it: int) -> str:
        return "\n".join([
            _ds(self.clock, self.t, "utils.py:781:see_memory_usage", f"After train step {it}"),
            _ds(self.clock, self.t, "utils.py:782:see_memory_usage",
                f"MA {41.02 + 0.01 * it:.2f} GB         Max_MA {_peak_mib(it) / 1024:.2f} GB         "
                f"CA {86.34 + 0.01 * it:.2f} GB         Max_CA {round(_peak_mib(it) / 1024 + 0.4)} GB "),
            _ds(self.clock, self.t, "utils.py:789:see_memory_usage",
                "CPU Virtual Memory:  used = 215.02 GB, percent = 10.6%"),
        ])


# -- Hugging Face Trainer ----------------------------------------------------------------------

def _hf_startup(cfg: megatron.TrainConfig) -> list[tuple[float, str]]:
    args = {"_n_gpu": "1", "bf16": "True", "ddp_timeout": str(cfg.timeout_minutes * 60),
            "gradient_accumulation_steps": str(max(1, cfg.global_batch // cfg.world)),
            "gradient_checkpointing": "True", "learning_rate": str(cfg.lr), "logging_steps": "1",
            "max_steps": str(cfg.train_iters), "output_dir": megatron.CHECKPOINT_DIR,
            "per_device_train_batch_size": "1", "save_steps": "1000"}
    lines = [(0.0, "Training/evaluation parameters TrainingArguments(")]
    lines += [(0.0, f"{k}={v},") for k, v in args.items()]
    lines += [(0.0, ")"),
              (0.3, "***** Running training *****"),
              (0.3, f"  Num examples = {cfg.train_iters * cfg.global_batch:,}"),
              (0.3, "  Num Epochs = 1"),
              (0.3, "  Instantaneous batch size per device = 1"),
              (0.3, f"  Total train batch size (w. parallel, distributed & accumulation) = {cfg.global_batch:,}"),
              (0.3, f"  Gradient Accumulation steps = {max(1, cfg.global_batch // cfg.world)}"),
              (0.3, f"  Total optimization steps = {cfg.train_iters:,}"),
              (0.3, "  Number of trainable parameters = 15,798,591,488")]
    return lines


def _hms(seconds: float) -> str:
    s = int(seconds)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class _HfLog:
    def __init__(self, cfg, clock, rng):
        self.cfg, self.clock, self.rng, self.elapsed = cfg, clock, rng, 0.0

    def iteration_line(self, t: float, it: int, elapsed_ms: float) -> str:
        total = self.cfg.train_iters
        self.elapsed += elapsed_ms / 1000.0
        pct = int(100 * it / total)
        fill = int(10 * it / total)
        bar = "█" * fill + " " * (10 - fill)
        eta = (total - it) * elapsed_ms / 1000.0
        lr = self.cfg.lr * min(1.0, it / 20)
        return (f"{pct:3d}%|{bar}| {it}/{total} [{_hms(self.elapsed)}<{_hms(eta)}, {elapsed_ms / 1000.0:.2f}s/it]\n"
                f"{{'loss': {_loss(it, self.rng):.4f}, 'grad_norm': {_grad_norm(it, self.rng):.4f}, "
                f"'learning_rate': {lr}, 'epoch': {it / total:.2f}}}")

    def memory_line(self, rank: int, it: int) -> str:
        # HF Trainer prints no memory report of its own; the story's memory slot stays empty.
        return ""


# -- torchtitan ---------------------------------------------------------------------------------

def _titan(clock, t: float, msg: str, level: str = "INFO") -> str:
    return f"[titan] {clock.pylog(t)} - root - {level} - {msg}"


def _titan_startup(cfg: megatron.TrainConfig, clock, t0: float) -> list[tuple[float, str]]:
    return [
        (0.0, _titan(clock, t0, "Starting job: MoE 16B-A3B training")),
        (0.1, _titan(clock, t0 + 0.1, f"Building 1-D device mesh with ['dp_shard'], [{cfg.world}]")),
        (0.2, _titan(clock, t0 + 0.2, f"CUDA capacity: NVIDIA H20 with {CAPACITY_GIB:.2f}GiB memory")),
        (0.6, _titan(clock, t0 + 0.6, "Model moe 16B size: 15,798,591,488 total parameters")),
        (0.9, _titan(clock, t0 + 0.9, f"Training starts at step 1, with local batch size 1, global batch size "
                                      f"{cfg.global_batch}, sequence length {cfg.seq_length}, total steps "
                                      f"{cfg.train_iters} (warmup 20)")),
    ]


class _TitanLog:
    def __init__(self, cfg, clock, rng):
        self.cfg, self.clock, self.rng = cfg, clock, rng

    def iteration_line(self, t: float, it: int, elapsed_ms: float) -> str:
        gib = _peak_mib(it) / 1024
        tps = int(self.cfg.global_batch * self.cfg.seq_length / self.cfg.world / (elapsed_ms / 1000.0))
        tflops = self.cfg.tflops * 120_000.0 / elapsed_ms
        return _titan(self.clock, t, f"step: {it:2}  loss: {_loss(it, self.rng):8.5f}  grad_norm: "
                                     f"{_grad_norm(it, self.rng):7.4f}  memory: {gib:5.2f}GiB"
                                     f"({100 * gib / CAPACITY_GIB:.2f}%)  tps: {tps:,}  tflops: {tflops:,.2f}  "
                                     f"mfu: {100 * tflops / 148:.2f}%")

    def memory_line(self, rank: int, it: int) -> str:
        return ""       # the step line carries the memory


# -- Lightning ----------------------------------------------------------------------------------

def _lightning_startup(cfg: megatron.TrainConfig) -> list[tuple[float, str]]:
    return [
        (0.0, "GPU available: True (cuda), used: True"),
        (0.0, "TPU available: False, using: 0 TPU cores"),
        (0.1, "[rank: 0] Seed set to 1234"),
        (0.2, f"Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/{cfg.world}"),
        (0.4, "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0,1,2,3,4,5,6,7]"),
        (0.6, "15.8 B    Trainable params"),
        (0.6, "0         Non-trainable params"),
        (0.6, "15.8 B    Total params"),
        (0.6, "63,194.366Total estimated model params size (MB)"),
    ]


class _LightningLog(_HfLog):
    def iteration_line(self, t: float, it: int, elapsed_ms: float) -> str:
        total = self.cfg.train_iters
        self.elapsed += elapsed_ms / 1000.0
        pct = int(100 * it / total)
        fill = int(10 * it / total)
        bar = "█" * fill + " " * (10 - fill)
        eta = (total - it) * elapsed_ms / 1000.0
        return (f"Epoch 0: {pct:3d}%|{bar}| {it}/{total} [{_hms(self.elapsed)}<{_hms(eta)}, "
                f"{elapsed_ms / 1000.0:.2f}s/it, loss={_loss(it, self.rng):.3g}, v_num=0]")


# -- dispatch (what rungen.story calls) -----------------------------------------------------------

def startup_chatter(spec, cfg: megatron.TrainConfig, clock, t0: float) -> list[tuple[float, str]]:
    fw = _fw(spec)
    if fw == "deepspeed":
        return _ds_startup(cfg, clock, t0)
    if fw == "hf":
        return _hf_startup(cfg)
    if fw == "torchtitan":
        return _titan_startup(cfg, clock, t0)
    if fw == "lightning":
        return _lightning_startup(cfg)
    return megatron.startup_chatter(cfg)


def after_init_chatter(spec, clock, t_init: float) -> list[tuple[float, str]]:
    if _fw(spec) == "megatron":
        return megatron.after_init_chatter(clock, t_init)
    return []


def iteration_log(spec, cfg: megatron.TrainConfig, clock, rng):
    cls = {"deepspeed": _DeepSpeedLog, "hf": _HfLog, "torchtitan": _TitanLog,
           "lightning": _LightningLog}.get(_fw(spec))
    return cls(cfg, clock, rng) if cls else megatron.IterationLog(cfg, clock, rng)


def save_lines(spec, clock, t: float, it: int) -> list[tuple[float, str]]:
    fw = _fw(spec)
    if fw == "deepspeed":
        tag = f"global_step{it}"
        return [(t, _ds(clock, t, "logging.py:96:log_dist", f"[Torch] Checkpoint {tag} is about to be saved!", True)),
                (t + 0.01, _ds(clock, t + 0.01, "logging.py:96:log_dist",
                               f"Saving model checkpoint: {megatron.CHECKPOINT_DIR}/{tag}/mp_rank_00_model_states.pt",
                               True)),
                (t + 41.3, _ds(clock, t + 41.3, "engine.py:3488:_save_zero_checkpoint",
                               f"[Torch] Checkpoint {tag} is ready now!"))]
    if fw == "hf":
        return [(t, f"Saving model checkpoint to {megatron.CHECKPOINT_DIR}/checkpoint-{it}")]
    if fw == "torchtitan":
        return [(t, _titan(clock, t, "Saving the checkpoint (or staging if async is enabled).")),
                (t + 41.3, _titan(clock, t + 41.3, "Finished saving the checkpoint (or staging if async is "
                                                   "enabled)in 41.30 seconds."))]
    if fw == "lightning":
        return []
    return megatron.save_lines(clock, t, it, spec.checkpoint_save_s)
