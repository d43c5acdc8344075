"""``env`` as the batch script captured it on each node (``OUT/env/<host>.env``)."""

from __future__ import annotations

from .base import Cluster
from .eras import Era
from .megatron import MEGATRON_ROOT
from .node_config import env_pairs


def env_dump(spec, cluster: Cluster, era: Era, node: int) -> str:
    """``env`` on one node, as the batch script captured it (unsorted, like the real command)."""
    host = cluster.hosts[node]
    pairs = [
        ("SLURM_JOB_ID", str(cluster.job_id)), ("SLURM_JOB_NAME", "moe-16b-pretrain"),
        ("SLURM_JOB_NODELIST", cluster.nodelist()), ("SLURM_NNODES", str(cluster.nodes)),
        ("SLURM_NODEID", str(node)), ("SLURMD_NODENAME", host), ("SLURM_CPUS_ON_NODE", "192"),
        ("SLURM_NTASKS", str(cluster.world if spec.launcher == "srun-per-gpu" else cluster.nodes)),
        ("SLURM_GPUS_ON_NODE", str(cluster.gpus_per_node)), ("HOSTNAME", host),
        ("CUDA_VISIBLE_DEVICES", ",".join(str(i) for i in range(cluster.gpus_per_node))),
        ("CUDA_VERSION", "12.4.1"), ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
        ("MASTER_ADDR", cluster.hosts[0]), ("MASTER_PORT", "29500"), ("WORLD_SIZE", str(cluster.world)),
        ("CUDA_DEVICE_MAX_CONNECTIONS", "1"), ("OMP_NUM_THREADS", "1"),
    ]
    if spec.nccl_debug:
        pairs.append(("NCCL_DEBUG", "INFO"))
    pairs += [("NCCL_IB_HCA", "mlx5"), ("NCCL_SOCKET_IFNAME", "eth0"), ("NCCL_IB_GID_INDEX", "3"),
              ("NCCL_IB_TIMEOUT", "22"), ("NCCL_NVLS_ENABLE", "0"), ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")]
    if era.dump_signal:
        pairs.append(("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"))
    if era.stack_trace == "frames":
        pairs.append(("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"))
    if spec.work_updates:
        pairs.append(("TORCH_CPP_LOG_LEVEL", "INFO"))
    pairs += [("LOGLEVEL", "INFO"), ("PYTHONPATH", MEGATRON_ROOT),
              ("PATH", "/usr/local/nvidia/bin:/usr/local/cuda/bin:"
                       "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
              ("LD_LIBRARY_PATH", "/usr/local/cuda/compat/lib:/usr/local/nvidia/lib:/usr/local/nvidia/lib64"),
              ("PWD", MEGATRON_ROOT), ("HOME", "/root")]
    pairs = _with_node_env(pairs, env_pairs(spec, node))
    return "".join(f"{key}={value}\n" for key, value in pairs)


def _with_node_env(pairs: list[tuple[str, str]], extra: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The node's own variables (``RunSpec.node_env``): a key the dump already has takes the
    node's value in place; new keys come after the NCCL/TORCH block, where a profile's
    ``export`` lands in an unsorted ``env``."""
    if not extra:
        return pairs
    override = dict(extra)
    out = [(k, override.pop(k, v)) for k, v in pairs]
    at = next(i for i, (k, _) in enumerate(out) if k == "LOGLEVEL")
    return out[:at] + list(override.items()) + out[at:]
