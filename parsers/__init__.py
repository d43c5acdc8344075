"""Format parsers: bytes/lines in, Polars frames out. See ``parsers.base`` for the contract.

``LOG_PARSERS`` run on every text log (each filters its own lines by literal first, so a
file interleaving NCCL, PyTorch and framework output is classified line by line). The order
decides which parser's name a line gets in ``lines.kind`` when two understand it.
Whole-file inputs have their own readers, chosen by ``analyzer.discover.sniff``: Flight
Recorder dumps (``flight_recorder``), nsys SQLite exports (``nsys``), Kineto traces
(``kineto``), environment dumps (``ENV_PARSERS``).
"""

from parsers import (c10d, config, deepspeed, envdump, health, hf_trainer, hwtools, kernel, megatron, nccl,
                     nccl_ras, pyspy, scheduler, titan_lightning, torch_errors, torchrun)

LOG_PARSERS = [
    c10d, nccl, torchrun, megatron, pyspy, nccl_ras,   # PyTorch distributed, NCCL, launchers, Megatron
    torch_errors,                                      # OOM sizes, CUDA faults, tracebacks, faulthandler, gloo
    deepspeed, hf_trainer, titan_lightning,            # other training frameworks
    hwtools, config,                                   # nvidia-smi/topo, nccl-tests, ibstat; sbatch, collect_env
    kernel, health, scheduler,                         # node evidence: kernel logs, GPU/NIC health, Slurm/K8s
]
# Parsers run once over all log inputs that contain their BATCH_LITERAL (analyzer.ingest):
# they make many small Polars calls, which per file would cost more than the parsing.
BATCHED = [nccl, megatron, deepspeed, hf_trainer, titan_lightning]
ENV_PARSERS = [envdump]
ALL_PARSERS = LOG_PARSERS + ENV_PARSERS
