"""Format parsers: bytes/lines in, Polars frames out. See ``postmortem.parsers.base`` for the contract.

``LOG_PARSERS`` run on every text log (each filters its own lines by literal first, so a
file interleaving NCCL, PyTorch and framework output is classified line by line). The order
decides which parser's name a line gets in ``lines.kind`` when two understand it.
``WHOLE_FILE`` parsers read formats that are one document, not lines: each owns its format
through two hooks (``sniff`` and ``read_whole``, see ``postmortem.parsers.base``), so
``postmortem.analyzer.discover.sniff`` asks them in this order and ``postmortem.analyzer.ingest``
hands the input to the one that claimed it, neither naming a format; a new whole-file format
needs only its module and its entry here. Environment dumps are text logs recognised by their
lines (``ENV_PARSERS``).
"""

from postmortem.parsers import (c10d, config, deepspeed, envdump, flight_recorder, health, hf_trainer, hwtools, kernel, kineto,
                                linkbench, megatron, nccl, nccl_inspector, nccl_ras, nsys, pyspy, scheduler, titan_lightning,
                                torch_errors, torchrun)

LOG_PARSERS = [
    c10d, nccl, torchrun, megatron, pyspy, nccl_ras,   # PyTorch distributed, NCCL, launchers, Megatron
    nccl_inspector,                                    # the NCCL Inspector profiler plugin's JSON records
    torch_errors,                                      # OOM sizes, CUDA faults, tracebacks, faulthandler, gloo
    deepspeed, hf_trainer, titan_lightning,            # other training frameworks
    hwtools, config,                                   # nvidia-smi/topo, nccl-tests, ibstat; sbatch, collect_env
    linkbench,                                         # bandwidthTest, p2pBandwidthLatencyTest, perftest ib_*_bw/lat
    kernel, health, scheduler,                         # node evidence: kernel logs, GPU/NIC health, Slurm/K8s
]
# Parsers run once over all log inputs at once (postmortem.analyzer.ingest), in LOG_PARSERS order: they make
# many small Polars calls, which per file would cost more than the parsing (a job folder holds
# hundreds of small per-rank files). They follow multi-line blocks per stream
# (postmortem.parsers.lines.with_stream, whose key includes the input), so files never bleed into each
# other. Parsers that keep file-level state are per-file parsers: node evidence (kernel, health,
# scheduler), tool output whose tables number their rows by line (hwtools, config, nccl_ras) or
# whose records span lines (nccl_inspector); they read only the inputs their ``file_gate`` passes.
# tests/test_batched_parsing.py holds the batched ones to the per-file result.
PER_FILE = (nccl_ras, nccl_inspector, hwtools, linkbench, config, kernel, health, scheduler)
BATCHED = [m for m in LOG_PARSERS if m not in PER_FILE]
# Per-file parsers that keep each input's state apart by ``input_id`` (postmortem.parsers.lines.file_of):
# a chunk's inputs that pass their gate go to them in one frame, and each input gets its share
# (postmortem.analyzer.ingest._parse_at_once). A job folder holds their inputs per node: 936 tool
# outputs of 130 nodes took 14-17 s one at a time, 2.4-2.9 s at once.
# tests/test_at_once_parsers.py holds them to the one-input-at-a-time result.
AT_ONCE = (hwtools, kernel, config, health)
ENV_PARSERS = [envdump]
# Whole-file formats, in the order they are asked (the first whose ``sniff`` says yes reads it):
WHOLE_FILE = [
    nsys,               # SQLite databases (Nsight Systems exports; others refused) and .nsys-rep reports by name
    kineto,             # PyTorch profiler / Kineto JSON traces: before the Flight Recorder, as newer
                        # traces carry "pg_config" too
    flight_recorder,    # Flight Recorder dumps, pickle (never unpickled) or JSON
]
ALL_PARSERS = LOG_PARSERS + ENV_PARSERS
