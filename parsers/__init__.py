"""Format parsers: bytes/lines in, Polars frames out. See ``parsers.base`` for the contract.

``LOG_PARSERS`` run on every text log (each filters its own lines by literal first, so a
file interleaving NCCL, PyTorch and framework output is classified line by line). The order
decides which parser's name a line gets in ``lines.kind`` when two understand it.
"""

from parsers import c10d, envdump, megatron, nccl, nccl_ras, pyspy, torchrun

LOG_PARSERS = [c10d, nccl, torchrun, megatron, pyspy, nccl_ras]
# Parsers run once over all log inputs that contain their BATCH_LITERAL (analyzer.ingest):
# they make many small Polars calls, which per file would cost more than the parsing.
BATCHED = [nccl]
ENV_PARSERS = [envdump]
ALL_PARSERS = LOG_PARSERS + ENV_PARSERS
