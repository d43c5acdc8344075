"""Configuration and hardware-tool files a responder collects next to the logs (``--config-files``).

Written under ``OUT/config/`` and ``OUT/hw/``, in the formats of ``docs/formats/training-logs.md``
9.1 and ``docs/formats/hardware.md`` 4-7:

* ``config/collect_env.txt``  ``python -m torch.utils.collect_env`` on the first node;
* ``config/pip-freeze.txt``   ``pip freeze`` of the training image;
* ``config/job.sbatch``       the batch script: ``#SBATCH`` options, exports, the launch command;
* ``hw/<host>/nvidia-smi-topo.txt``  ``nvidia-smi topo -m`` (current generation: NIC columns,
  three affinity columns, legend and NIC legend) of every node;
* ``hw/<host>/nvidia-smi.csv``  ``nvidia-smi --query-gpu=... --format=csv`` of every node;
* ``hw/nccl-tests/all_reduce_perf.txt``  an ``all_reduce_perf`` run over all ranks before the job;
* ``hw/<host>/ib_send_bw.txt``  (``perftest``) perftest's ``ib_send_bw -d mlx5_0 -x 3 -a --report_gbits``
  client side against the next node (hardware.md section 10), a fifth of line rate on ``slow_nic_node``.

Everything is derived from the spec and the cluster: no random draws, so the rest of the run
is byte-identical with or without these files.
"""

from __future__ import annotations

from pathlib import Path

from .base import HGX_BUS_IDS, Cluster
from .eras import Era
from .megatron import MEGATRON_ROOT

GPU_NAME = "NVIDIA H20"
GPU_MIB = 97871
DRIVER = "550.54.15"
NICS = [f"mlx5_{i}" for i in range(8)]


def write_config_files(out: Path, spec, cluster: Cluster, era: Era) -> list[Path]:
    written = []

    def put(rel: str, text: str) -> None:
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)

    put("config/collect_env.txt", collect_env(spec, cluster, era))
    put("config/pip-freeze.txt", pip_freeze(spec, era))
    put("config/job.sbatch", sbatch_script(spec, cluster))
    for host in cluster.hosts:
        put(f"hw/{host}/nvidia-smi-topo.txt", topo_matrix(cluster.gpus_per_node))
        put(f"hw/{host}/nvidia-smi.csv", smi_csv(cluster.gpus_per_node))
        put(f"hw/{host}/ibstat.txt", ibstat(host))
        put(f"hw/{host}/ibv_devinfo.txt", ibv_devinfo())
    put("hw/nccl-tests/all_reduce_perf.txt", nccl_tests(spec, cluster))
    if getattr(spec, "perftest", False):
        for i, host in enumerate(cluster.hosts):
            peer = cluster.hosts[(i + 1) % len(cluster.hosts)]
            put(f"hw/{host}/ib_send_bw.txt", ib_send_bw(host, peer, i, slow=spec.slow_nic_node == i))
    return written


def _cuda(era: Era) -> tuple[str, str]:
    """(torch's local version tag, CUDA build version) for the era's torch."""
    major, minor = (int(x) for x in era.torch_version.split(".")[:2])
    if (major, minor) >= (2, 7):
        return "cu128", "12.8"
    if (major, minor) >= (2, 4):
        return "cu124", "12.4"
    return "cu121", "12.1"


def collect_env(spec, cluster: Cluster, era: Era) -> str:
    tag, cuda = _cuda(era)
    gpus = "\n".join(f"GPU {i}: {GPU_NAME}" for i in range(cluster.gpus_per_node))
    return f"""Collecting environment information...
PyTorch version: {era.torch_version}+{tag}
Is debug build: False
CUDA used to build PyTorch: {cuda}
ROCM used to build PyTorch: N/A

OS: Ubuntu 22.04.4 LTS (x86_64)
GCC version: (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0
Clang version: Could not collect
CMake version: version 3.29.2
Libc version: glibc-2.35

Python version: 3.10.12 (main, Nov 20 2023, 15:14:05) [GCC 11.4.0] (64-bit runtime)
Python platform: Linux-5.15.0-105-generic-x86_64-with-glibc2.35
Is CUDA available: True
CUDA runtime version: {cuda}.{41 if cuda == '12.8' else 131}
CUDA_MODULE_LOADING set to: LAZY
GPU models and configuration: 
{gpus}

Nvidia driver version: {DRIVER}
cuDNN version: Probably one of the following:
/usr/lib/x86_64-linux-gnu/libcudnn.so.9.1.0
HIP runtime version: N/A
MIOpen runtime version: N/A
Is XNNPACK available: True

CPU:
Architecture:                       x86_64
CPU op-mode(s):                     32-bit, 64-bit
Byte Order:                         Little Endian
CPU(s):                             192
On-line CPU(s) list:                0-191
Vendor ID:                          GenuineIntel
Model name:                         Intel(R) Xeon(R) Platinum 8469C
Thread(s) per core:                 2
Socket(s):                          2
NUMA node(s):                       2
NUMA node0 CPU(s):                  0-47,96-143
NUMA node1 CPU(s):                  48-95,144-191

Versions of relevant libraries:
[pip3] numpy==1.26.4
[pip3] nvidia-nccl-cu12=={spec.nccl_version}
[pip3] torch=={era.torch_version}
[pip3] triton==3.0.0
[conda] Could not collect
"""


def pip_freeze(spec, era: Era) -> str:
    tag, _ = _cuda(era)
    packages = [
        ("absl-py", "2.1.0"), ("accelerate", "0.33.0"), ("einops", "0.8.0"), ("filelock", "3.15.4"),
        ("flash-attn", "2.6.3"), ("numpy", "1.26.4"), ("nvidia-cublas-cu12", "12.4.5.8"),
        ("nvidia-nccl-cu12", spec.nccl_version), ("packaging", "24.1"), ("regex", "2024.7.24"),
        ("safetensors", "0.4.4"), ("sentencepiece", "0.2.0"), ("tensorboard", "2.17.0"),
        ("torch", f"{era.torch_version}+{tag}"), ("transformer_engine", "1.9.0"), ("triton", "3.0.0"),
    ]
    lines = [f"{name}=={version}" for name, version in packages]
    lines.insert(9, "-e git+https://github.com/NVIDIA/Megatron-LM.git@0f1b4a7c#egg=megatron_core")
    return "\n".join(lines) + "\n"


def sbatch_script(spec, cluster: Cluster) -> str:
    extra = "".join(f"export {k}={v}\n" for k, v in sorted(spec.nccl_env.items()))
    return f"""#!/bin/bash
#SBATCH --job-name=moe-16b-pretrain
#SBATCH --nodes={cluster.nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={cluster.gpus_per_node}
#SBATCH --cpus-per-task=96
#SBATCH --time=2-00:00:00
#SBATCH -o logs/%x-%j.out

export NCCL_DEBUG=INFO
export NCCL_IB_HCA=mlx5
export NCCL_SOCKET_IFNAME=eth0
export NCCL_IB_GID_INDEX=3
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
export CUDA_DEVICE_MAX_CONNECTIONS=1
{extra}MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)

srun --label --kill-on-bad-exit=1 torchrun \\
    --nnodes={cluster.nodes} --nproc-per-node={cluster.gpus_per_node} \\
    --rdzv-backend=c10d --rdzv-endpoint=$MASTER_ADDR:29500 --rdzv-id=$SLURM_JOB_ID \\
    --log-dir=logs --tee=3 \\
    {MEGATRON_ROOT}/pretrain_gpt.py --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \\
    --expert-model-parallel-size 8 --num-experts 64
"""


def topo_matrix(gpus: int) -> str:
    """``nvidia-smi topo -m`` of an HGX H20 box: NV18 between GPUs, one PIX NIC per GPU."""
    nics = min(len(NICS), gpus)
    half = max(1, gpus // 2)
    names = [f"GPU{i}" for i in range(gpus)] + [f"NIC{i}" for i in range(nics)]

    def numa(i: int) -> int:
        return 0 if i < half else 1

    def cell(a: str, b: str) -> str:
        if a == b:
            return " X "
        ka, ia = a[:3], int(a[3:])
        kb, ib = b[:3], int(b[3:])
        if ka == "GPU" and kb == "GPU":
            return "NV18"
        if ia == ib:
            return "PIX"
        return "NODE" if numa(ia) == numa(ib) else "SYS"

    lines = ["\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for a in names:
        row = [a] + [cell(a, b) for b in names]
        if a.startswith("GPU"):
            n = numa(int(a[3:]))
            row += ["0-47,96-143" if n == 0 else "48-95,144-191", str(n), "", "N/A"]
        lines.append("\t".join(row))
    lines += ["", "Legend:", "",
              "  X    = Self",
              "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
              "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
              "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
              "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
              "  PIX  = Connection traversing at most a single PCIe bridge",
              "  NV#  = Connection traversing a bonded set of # NVLinks",
              "", "NIC Legend:", ""]
    lines += [f"  NIC{i}: {NICS[i]}" for i in range(nics)]
    return "\n".join(lines) + "\n"


def smi_csv(gpus: int) -> str:
    rows = ["nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total,memory.used --format=csv",
            "index, name, pci.bus_id, driver_version, memory.total [MiB], memory.used [MiB]"]
    for i in range(gpus):
        bus = HGX_BUS_IDS[i % len(HGX_BUS_IDS)][:2].upper()
        rows.append(f"{i}, {GPU_NAME}, 00000000:{bus}:00.0, {DRIVER}, {GPU_MIB} MiB, 4 MiB")
    return "\n".join(rows) + "\n"


# busbw (GB/s) of all_reduce_perf across nodes over 8x400G RoCE, by message size (out-of-place).
def _guid(host: str, nic: int, port: bool = False) -> str:
    """A stable fake GUID per host and NIC (0x + 16 hex digits), as ibstat prints it."""
    seed = sum(ord(c) for c in host) * 131 + nic * 7 + (1 if port else 0)
    return f"0x{0xa088c20300000000 + seed * 0x1000193:016x}"[:18]


def ibstat(host: str) -> str:
    """``ibstat`` (hardware.md section 6): one block per CA, RoCE ports at 400 Gb/s on ConnectX-7."""
    blocks = []
    for i, nic in enumerate(NICS):
        blocks.append(
            f"CA '{nic}'\n"
            f"\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.39.1002\n"
            f"\tHardware version: 0\n\tNode GUID: {_guid(host, i)}\n\tSystem image GUID: {_guid(host, i)}\n"
            f"\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 400\n\t\tBase lid: 0\n"
            f"\t\tLMC: 0\n\t\tSM lid: 0\n\t\tCapability mask: 0x00010000\n"
            f"\t\tPort GUID: {_guid(host, i, port=True)}\n\t\tLink layer: Ethernet\n")
    return "".join(blocks)


def ibv_devinfo() -> str:
    """``ibv_devinfo`` (hardware.md section 6): ``hca_id`` blocks, ports with state and MTU, no rate."""
    blocks = []
    for nic in NICS:
        blocks.append(
            f"hca_id:\t{nic}\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t28.39.1002\n"
            f"\tvendor_id:\t\t\t0x02c9\n\tvendor_part_id:\t\t\t4129\n\thw_ver:\t\t\t\t0x0\n"
            f"\tphys_port_cnt:\t\t\t1\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"
            f"\t\t\tmax_mtu:\t\t4096 (5)\n\t\t\tactive_mtu:\t\t4096 (5)\n\t\t\tsm_lid:\t\t\t0\n"
            f"\t\t\tport_lid:\t\t0\n\t\t\tport_lmc:\t\t0x00\n\t\t\tlink_layer:\t\tEthernet\n\n")
    return "".join(blocks)


def _busbw(size: int, world: int, nodes: int) -> float:
    peak = 360.0 if nodes == 1 else 185.0
    half = 8 * 1024 * 1024  # the size at which half the peak is reached
    return round(peak * size / (size + half), 2)


def nccl_tests(spec, cluster: Cluster) -> str:
    world = cluster.world
    lines = [
        ("# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 "
         "agg iters: 1 validation: 1 graph: 0"),
        "#",
        "# Using devices",
    ]
    for slot in cluster.slots:
        bus = slot.bus_id[:2]
        lines.append(f"#  Rank {slot.rank:2d} Group  0 Pid {40000 + slot.rank:6d} on {slot.host:>10s} "
                     f"device {slot.local_rank:2d} [0x{bus}] {GPU_NAME}")
    lines += [
        "#",
        "#                                                              out-of-place                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
    ]
    factor = 2 * (world - 1) / world if world > 1 else 1.0
    total = 0.0
    count = 0
    size = 1 << 20
    while size <= 1 << 30:
        rows = []
        for shrink in (1.0, 0.99):
            busbw = round(_busbw(size, world, cluster.nodes) * shrink, 2)
            algbw = round(busbw / factor, 2)
            time_us = size / (algbw * 1e3) if algbw else 0.0
            shown = f"{time_us:8.1f}" if time_us < 10000 else f"{time_us:8.0f}"
            rows.append(f"{shown} {algbw:7.2f} {busbw:7.2f} {0:6d}")
            total += busbw
            count += 1
        lines.append(f"{size:12d}  {size // 4:12d}     float     sum      -1  {rows[0]}  {rows[1]}")
        size *= 2
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {total / count:.4f} ", "#"]
    return "\n".join(lines) + "\n"


def ib_send_bw(host: str, peer: str, index: int, slow: bool = False) -> str:
    """perftest ``ib_send_bw -d mlx5_0 -x 3 -a --report_gbits PEER`` (client side), in the shape of the
    outputs posted in linux-rdma/perftest issues: header block, addresses, one row per size 2 B .. 8 MB.
    A healthy 400G RoCE port reaches about 390 Gb/s; ``slow`` caps it at a fifth of line rate."""
    sep = "-" * 87
    ip = f"10.12.{index // 250}.{index % 250 + 11}"
    peer_ip = f"10.12.{(index + 1) // 250}.{(index + 1) % 250 + 11}"
    lines = [f"$ ib_send_bw -d mlx5_0 -x 3 -a -F --report_gbits {peer}", sep,
             "                    Send BW Test",
             " Dual-port       : OFF\t\tDevice         : mlx5_0",
             " Number of qps   : 1\t\tTransport type : IB",
             " Connection type : RC\t\tUsing SRQ      : OFF",
             " PCIe relax order: ON", " ibv_wr* API     : ON", " TX depth        : 128", " RX depth        : 512",
             " CQ Moderation   : 100", " Mtu             : 4096[B]", " Link type       : Ethernet",
             " GID index       : 3", " Max inline data : 0[B]", " rdma_cm QPs\t : OFF", " Data ex. method : Ethernet",
             sep,
             f" local address: LID 0000 QPN 0x{0x108 + index:04x} PSN 0x{0x63ad7d + 97 * index:06x} ",
             " GID: 00:00:00:00:00:00:00:00:00:00:255:255:" + ":".join(f"{int(x):02d}" for x in ip.split(".")),
             f" remote address: LID 0000 QPN 0x{0x76 + index:04x} PSN 0x{0xf3810c - 89 * index:06x} ",
             " GID: 00:00:00:00:00:00:00:00:00:00:255:255:" + ":".join(f"{int(x):02d}" for x in peer_ip.split(".")),
             sep, " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"]
    cap = 78.6 if slow else 391.2
    for k in range(1, 24):
        size = 1 << k
        avg = round(min(cap, cap * size / (size + 4096)), 2)
        peak = round(avg * 1.004, 2) if size >= 1024 else 0.0
        rate = avg * 1e9 / 8 / size / 1e6
        lines.append(f" {size:<7d}    1000           {peak:<7.2f}            {avg:<7.2f}\t\t   {rate:.6f}")
    lines.append(sep)
    return "\n".join(lines) + "\n"
