"""Environment/configuration and hardware-tool output: parsers.envdump, postmortem.parsers.config,
parsers.hwtools, postmortem.analyzer.env_model and the generator's --config-files."""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import polars as pl
import pytest

from postmortem.cli import main
from postmortem.parsers import config, envdump, hwtools
from postmortem.parsers.lines import envelope


def parse(module, text: str):
    lines = envelope(text.encode())
    result = module.parse(lines)
    return lines, result


def unconsumed(lines: pl.DataFrame, result) -> list[str]:
    return lines.filter(~pl.col("line_no").is_in(result.consumed.implode())
                        & (pl.col("text").str.strip_chars() != ""))["text"].to_list()


def query(db: Path, sql: str) -> list[dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["query", "--db", str(db), sql, "--format", "json"]) == 0
    return json.loads(out.getvalue())


# -- nvidia-smi topo -m ---------------------------------------------------------------------------

TOPO_CURRENT = "\n".join([  # noqa: FLY002
    "\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID",
    "GPU0\t X \tNV18\tPIX\tSYS\t0-47,96-143\t0\t\tN/A",
    "GPU1\tNV18\t X \tSYS\tPIX\t48-95,144-191\t1\t\tN/A",
    "NIC0\tPIX\tSYS\t X \tSYS",
    "NIC1\tSYS\tPIX\tSYS\t X ",
    "",
    "Legend:",
    "",
    "  X    = Self",
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "  NV#  = Connection traversing a bonded set of # NVLinks",
    "",
    "NIC Legend:",
    "",
    "  NIC0: mlx5_0",
    "  NIC1: mlx5_bond_0",
]) + "\n"


def test_topo_current_generation_with_nic_legend():
    lines, result = parse(hwtools, TOPO_CURRENT)
    assert unconsumed(lines, result) == []
    topo = result.tables["topology"]
    assert topo.height == 12 and set(topo["matrix"]) == {"topo"}
    links = {(r["from"], r["to"]): (r["link"], r["to_device"]) for r in topo.to_dicts()}
    assert links[("GPU0", "GPU1")] == ("NV18", None)
    assert links[("GPU0", "NIC0")] == ("PIX", "mlx5_0")
    assert links[("GPU1", "NIC1")] == ("PIX", "mlx5_bond_0")
    assert links[("NIC0", "GPU1")] == ("SYS", None)
    gpus = result.tables["gpus"].sort("index")
    assert gpus.select("gpu", "cpu_affinity", "numa_affinity", "gpu_numa_id").rows() == [
        ("GPU0", "0-47,96-143", "0", "N/A"), ("GPU1", "48-95,144-191", "1", "N/A")]
    assert result.tables["topo_nics"].select("nic", "device").rows() == [("NIC0", "mlx5_0"), ("NIC1", "mlx5_bond_0")]


def test_topo_legacy_and_middle_generations_and_views():
    legacy = ("nvidia-smi topo -m\n"
              "        GPU0    GPU1    mlx5_0  mlx5_1  CPU Affinity\n"
              "GPU0     X      NV6     PIX     PXB     0-23,48-71\n"
              "GPU1    NV6      X      PXB     PIX     0-23,48-71\n"
              "mlx5_0  PIX     PXB      X      PIX\n")
    lines, result = parse(hwtools, legacy)
    assert unconsumed(lines, result) == []
    topo = result.tables["topology"]
    assert topo.filter(pl.col("from") == "GPU0").select("to", "link", "to_device").rows() == [
        ("GPU1", "NV6", None), ("mlx5_0", "PIX", "mlx5_0"), ("mlx5_1", "PXB", "mlx5_1")]
    assert result.tables["gpus"]["numa_affinity"].to_list() == [None, None]
    middle = ("root@h:~# nvidia-smi topo -mp\n"
              "        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity\n"
              "GPU0     X      NODE    PHB     0-47,96-143     0\n"
              "GPU1    NODE     X      NODE    0-47,96-143     0\n")
    lines, result = parse(hwtools, middle)
    assert unconsumed(lines, result) == []
    topo = result.tables["topology"]
    assert set(topo["matrix"]) == {"pcie"} and topo.height == 4
    assert result.tables["gpus"]["numa_affinity"].to_list() == ["0", "0"]
    p2p = " \tGPU0\tGPU1\t\n GPU0\tX\tOK\t\n GPU1\tCNS\tX\t\n\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n"
    lines, result = parse(hwtools, p2p)
    assert unconsumed(lines, result) == []
    assert result.tables["topology"].select("matrix", "from", "to", "link").rows() == [
        ("p2p", "GPU0", "GPU1", "OK"), ("p2p", "GPU1", "GPU0", "CNS")]


# -- nvidia-smi --query-gpu --------------------------------------------------------------------------

def test_smi_csv_header_noheader_nounits_and_missing_values():
    text = ("nvidia-smi --query-gpu=index,name,memory.total,fan.speed --format=csv\n"
            "index, name, memory.total [MiB], fan.speed [%]\n"
            "0, NVIDIA H100 80GB HBM3, 81559 MiB, [N/A]\n"
            "1, Tesla P100-PCIE-16GB, 16280 MiB, [Not Supported]\n"
            "\n"
            "nvidia-smi --query-gpu=index,uuid,memory.used --format=csv,noheader,nounits\n"
            "0, GPU-aaaa, 512\n"
            "1, GPU-bbbb, 1024\n"
            "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv\n"
            "pid, process_name, used_gpu_memory [MiB]\n")
    lines, result = parse(hwtools, text)
    assert unconsumed(lines, result) == []
    q = result.tables["gpu_query"]
    assert q.filter(pl.col("field") == "fan.speed")["value"].to_list() == [None, None]
    assert q.filter(pl.col("field") == "memory.total")["value"].to_list() == ["81559", "16280"]
    gpus = result.tables["gpus"]
    csv = gpus.filter(pl.col("name").is_not_null())
    assert csv.select("index", "name", "memory_total_mib").rows() == [
        (0, "NVIDIA H100 80GB HBM3", 81559), (1, "Tesla P100-PCIE-16GB", 16280)]
    assert gpus.filter(pl.col("uuid").is_not_null()).select("uuid", "memory_used_mib").rows() == [
        ("GPU-aaaa", 512), ("GPU-bbbb", 1024)]


# -- nccl-tests ------------------------------------------------------------------------------------

NCCL_TESTS = """\
# nccl-tests version 2.17.1 (0a4a4de) nccl-headers=22603 nccl-library=22603
# Collective test starting: all_gather_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  43215 on h20-node-01 device  0 [0000:18:00] NVIDIA H20
#  Rank  1 Group  0 Pid  43216 on h20-node-02 device  0 [0000:18:00] NVIDIA H20
h20-node-01:43215:43215 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.1<0>
NCCL version 2.21.5+cuda12.4
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             1     float    none      -1    19.90    0.00    0.00      0    18.96    0.00    0.00      0
   134217728      16777216     float    none      -1   1108.0  121.14   60.57    N/A   1111.2  120.79   60.40    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 30.2425
#
# Collective test concluded: all_gather_perf
"""


def test_nccl_tests_current_format():
    lines, result = parse(hwtools, NCCL_TESTS)
    # NCCL's own lines are the NCCL parser's.
    assert unconsumed(lines, result) == ["h20-node-01:43215:43215 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.1<0>",
                                         "NCCL version 2.21.5+cuda12.4"]
    rows = result.tables["bench_results"]
    assert rows.select("op", "size_bytes", "redop", "root", "oop_busbw_gbs", "oop_wrong", "ip_busbw_gbs").rows() == [
        ("all_gather", 8, "none", -1, 0.0, 0, 0.0), ("all_gather", 134217728, "none", -1, 60.57, None, 60.40)]
    runs = dict(result.tables["bench_runs"].select("key", "value").iter_rows())
    assert runs["avg_busbw_gbs"] == "30.2425" and runs["out_of_bounds"] == "0 OK"
    assert runs["version"].startswith("2.17.1") and runs["test_concluded"] == "all_gather_perf"
    devices = result.tables["gpus"]
    assert devices.select("rank", "host", "index", "bus_id", "name", "pid").rows() == [
        (0, "h20-node-01", 0, "0000:18:00", "NVIDIA H20", 43215), (1, "h20-node-02", 0, "0000:18:00", "NVIDIA H20", 43216)]


def test_nccl_tests_legacy_lost_hash_and_mpirun_tags():
    legacy = ("./build/all_reduce_perf -b 8 -e 4G -f 2 -g 8\n"
              "# nThread 1 nGpus 8 minBytes 8 maxBytes 4294967296 step: 2(factor) warmup iters: 5 iters: 20 validation: 1 \n"
              "#   Rank  0 Pid  23638 on ip-10-0-26-117 device  0 [0x00] Tesla V100-SXM2-32GB\n"
              "           8             2   float     sum    59.98    0.00    0.00  2e-07    56.81    0.00    0.00  1e-07\n")
    lines, result = parse(hwtools, legacy)
    assert unconsumed(lines, result) == []
    row = result.tables["bench_results"].row(0, named=True)
    assert row["op"] == "all_reduce" and row["root"] is None and row["oop_error"] == pytest.approx(2e-7)
    assert row["oop_wrong"] is None and row["ip_time_us"] == pytest.approx(56.81)
    assert result.tables["gpus"].select("rank", "pid", "name").rows() == [(0, 23638, "Tesla V100-SXM2-32GB")]
    tagged = "".join(f"[0]   {size:10d}  {size // 4:12d}     float     sum      -1[0]    1626.5    0.64    1.24      0"
                     f"[0]    2302.3    0.46    0.87      0\n" for size in (1048576, 2097152, 4194304))
    lines, result = parse(hwtools, tagged)
    assert unconsumed(lines, result) == []
    assert result.tables["bench_results"]["size_bytes"].to_list() == [1048576, 2097152, 4194304]
    assert result.tables["bench_results"]["ip_busbw_gbs"].to_list() == [0.87] * 3


# -- ibstat / ibv_devinfo / iblinkinfo --------------------------------------------------------------

def test_ibstat_and_ibv_devinfo_blocks():
    ibstat = ("CA 'mlx5_0'\n        CA type: MT4129\n        Number of ports: 1\n        Firmware version: 28.39.1002\n"
              "        Port 1:\n                State: Down\n                Physical state: Polling\n"
              "                Rate: 10\n                Link layer: InfiniBand\n")
    lines, result = parse(hwtools, ibstat)
    assert unconsumed(lines, result) == []
    assert result.tables["nic_ports"].select("source", "ca", "port", "state", "physical_state", "rate_gbps",
                                             "link_layer", "fw", "ca_type").rows() == [
        ("ibstat", "mlx5_0", 1, "Down", "Polling", 10.0, "InfiniBand", "28.39.1002", "MT4129")]
    devinfo = ("hca_id: rdmaP23800p0s2\n        transport:                      InfiniBand (0)\n"
               "        fw_ver:                         16.35.4030\n        vendor_part_id:                 4119\n"
               "        phys_port_cnt:                  2\n"
               "                port:   1\n                        state:                  PORT_ACTIVE (4)\n"
               "                        max_mtu:                4096 (5)\n"
               "                        active_mtu:             1024 (3)\n"
               "                        link_layer:             Ethernet\n\n"
               "                port:   2\n                        state:                  PORT_INIT (2)\n"
               "                        link_layer:             Ethernet\n")
    lines, result = parse(hwtools, devinfo)
    assert unconsumed(lines, result) == []
    assert result.tables["nic_ports"].select("source", "ca", "port", "state", "active_mtu", "max_mtu", "fw",
                                             "vendor_part_id").rows() == [
        ("ibv_devinfo", "rdmaP23800p0s2", 1, "Active", 1024, 4096, "16.35.4030", "4119"),
        ("ibv_devinfo", "rdmaP23800p0s2", 2, "Init", None, None, "16.35.4030", "4119")]


# -- collect_env, pip, sbatch, launch commands ----------------------------------------------------

def test_collect_env_versions_gpus_and_keys():
    text = "\n".join(config.SAMPLE_LINES[:31]) + "\n"
    lines, result = parse(config, text)
    assert unconsumed(lines, result) == []
    packages = {(r["name"], r["source"]): r["version"] for r in result.tables["packages"].to_dicts()}
    assert packages[("torch", "collect_env")] == "2.4.0+cu121"
    assert packages[("cuda (build)", "collect_env")] == "12.1"
    assert packages[("nvidia-driver", "collect_env")] == "550.54.15"
    assert packages[("python", "collect_env")] == "3.10.12"
    assert packages[("numpy", "collect_env pip3")] == "1.26.4"
    assert packages[("torch", "collect_env conda")] == "2.4.0"
    assert packages[("cudnn", "collect_env (candidate)")] == "8.9.7"
    cfg = dict(result.tables["job_config"].select("key", "value").iter_rows())
    assert cfg["Is debug build"] == "False" and cfg["cpu.Model name"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert result.tables["gpus"].select("index", "name").rows() == [(0, "NVIDIA H20"), (1, "NVIDIA H20")]


def test_pip_freeze_and_pip_list():
    freeze = ("absl-py==2.1.0\ntorch==2.4.0+cu121\nflash_attn @ file:///tmp/flash_attn-2.6.3-cp310-cp310-linux_x86_64.whl\n"
              "-e git+https://github.com/NVIDIA/Megatron-LM.git@a1b2c3d#egg=megatron_core\nnvidia-nccl-cu12==2.21.5\n")
    lines, result = parse(config, freeze)
    assert unconsumed(lines, result) == []
    assert result.tables["packages"].select("name", "version").rows() == [
        ("absl-py", "2.1.0"), ("torch", "2.4.0+cu121"), ("flash_attn", "2.6.3"), ("megatron_core", "a1b2c3d"),
        ("nvidia-nccl-cu12", "2.21.5")]
    listing = "Package            Version\n------------------ -----------\naccelerate         0.33.0\ntorch              2.4.0\n"
    lines, result = parse(config, listing)
    assert unconsumed(lines, result) == []
    assert result.tables["packages"].select("name", "version", "source").rows() == [
        ("accelerate", "0.33.0", "pip list"), ("torch", "2.4.0", "pip list")]
    # two `x==y` lines in an ordinary log are not a freeze
    assert parse(config, "loss==1.0\nlr==3e-4\nhello\n")[1].tables["packages"].is_empty()


def test_sbatch_script_and_launch_commands():
    lines, result = parse(config, "\n".join(config.SAMPLE_LINES[31:47]) + "\n")
    assert unconsumed(lines, result) == []
    cfg = result.tables["job_config"]
    got = {(r["source"], r["key"]): r["value"] for r in cfg.to_dicts()}
    assert got[("sbatch", "nodes")] == "5" and got[("sbatch", "time")] == "2-00:00:00"
    assert got[("sbatch", "job_name")] == "moe-16b-pretrain" and got[("sbatch export", "NCCL_IB_HCA")] == "mlx5"
    assert got[("srun", "label")] == "true" and got[("srun", "kill_on_bad_exit")] == "1"
    assert got[("torchrun", "nnodes")] == "5" and got[("torchrun", "nproc_per_node")] == "8"
    assert got[("torchrun", "rdzv_endpoint")] == "$MASTER_ADDR:29500" and got[("torchrun", "rdzv_backend")] == "c10d"
    assert got[("torchrun", "program")] == "pretrain_gpt.py"
    assert ("torchrun", "tensor_model_parallel_size") not in got   # the program's own arguments
    assert got[("torch.distributed.run", "master_addr")] == "10.0.0.1"
    assert got[("torch.distributed.run", "master_port")] == "29500"
    assert got[("deepspeed", "num_gpus")] == "8" and got[("deepspeed", "hostfile")] == "hostfile"
    assert got[("accelerate", "num_processes")] == "16" and got[("accelerate", "main_process_ip")] == "node01"
    assert got[("mpirun", "np")] == "16" and got[("mpirun", "x")] == "NCCL_DEBUG=INFO"
    command = cfg.filter((pl.col("key") == "command") & (pl.col("source") == "srun"))
    assert command["line_no"].to_list() == [9] and "--rdzv-id=$SLURM_JOB_ID" in command["value"][0]
    # a batch script full of exports is not an env dump
    assert not envdump.looks_like_env_dump(lines)


def test_prose_mentioning_launchers_is_not_a_command():
    text = "we launched torchrun on 5 nodes\nsrun: error: node03: task 3: Exited with exit code 1\n"
    _, result = parse(config, text)
    assert result.tables["job_config"].is_empty() and len(result.consumed) == 0


# -- env dumps: export -p, srun -l, nccl.conf ----------------------------------------------------

def test_env_forms_and_nccl_conf():
    export_p = 'declare -x NCCL_ALGO="Ring"\ndeclare -x NCCL_PROTO="Simple"\ndeclare -x OLDPWD\n'
    lines = envelope(export_p.encode())
    assert envdump.looks_like_env_dump(lines)
    env = envdump.parse(lines).tables["env"]
    assert env.select("key", "value").rows() == [("NCCL_ALGO", "Ring"), ("NCCL_PROTO", "Simple"), ("OLDPWD", None)]
    conf = envelope(b"# set by the site image\nNCCL_IB_GID_INDEX=3\n")
    assert envdump.looks_like_env_dump(conf)
    assert envdump.parse(conf).tables["env"].select("key", "value").rows() == [("NCCL_IB_GID_INDEX", "3")]
    assert not envdump.looks_like_env_dump(envelope(b"# note\nFOO=1\n"))


@pytest.fixture
def env_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "env").mkdir(parents=True)
    (run / "env" / "node01.env").write_text(
        "HOSTNAME=node01\nNCCL_ALGO=Ring\nNCCL_SOCKET_IFNAME=eth0\nCUDA_VISIBLE_DEVICES=0,1\n"
        "TORCH_NCCL_ASYNC_ERROR_HANDLING=1\nNCCL_IB_TIMEOUT=22\n")
    (run / "env" / "node02.env").write_text(
        "HOSTNAME=node02\nNCCL_ALGO=Tree\nNCCL_SOCKET_IFNAME=ens1f0\nCUDA_VISIBLE_DEVICES=2,3\n"
        "TORCH_NCCL_ASYNC_ERROR_HANDLING=1\nNCCL_IB_TIMEOUT=22\n")
    # srun -l env on two more nodes, one file
    (run / "env" / "srun-env.txt").write_text(
        "0: SLURMD_NODENAME=node03\n1: SLURMD_NODENAME=node04\n0: NCCL_ALGO=Ring\n1: NCCL_ALGO=Ring\n"
        "0: TORCH_NCCL_ASYNC_ERROR_HANDLING=1\n1: TORCH_NCCL_ASYNC_ERROR_HANDLING=0\n"
        "0: NCCL_IB_TIMEOUT=22\n1: NCCL_IB_TIMEOUT=22\n0: NCCL_SOCKET_IFNAME=eth0\n1: NCCL_SOCKET_IFNAME=eth0\n"
        "0: CUDA_VISIBLE_DEVICES=0\n1: CUDA_VISIBLE_DEVICES=0\n")
    (run / "node04").mkdir()
    (run / "node04" / "nccl.conf").write_text("# site defaults\nNCCL_PROTO=Simple\n")
    return run


def test_query_must_match_variables_that_differ(env_run: Path, tmp_path: Path):
    db = tmp_path / "run.duckdb"
    assert main(["ingest", str(env_run), "--db", str(db)]) == 0
    rows = query(db, "SELECT key, n_nodes, n_values, values FROM env_diff "
                     "WHERE class = 'must_match' AND differs ORDER BY key")
    assert [r["key"] for r in rows] == ["NCCL_ALGO", "NCCL_PROTO", "TORCH_NCCL_ASYNC_ERROR_HANDLING"]
    assert rows[0]["values"] == "Ring @ node01,node03,node04; Tree @ node02" and rows[0]["n_nodes"] == 4
    assert rows[1]["values"] == "<unset> @ node01,node02,node03; Simple @ node04"
    assert rows[2]["values"] == "1 @ node01,node02,node03; 0 @ node04"
    # legitimately per node / per rank, or equal everywhere: not must-match differences
    classes = {r["key"]: r["class"] for r in query(db, "SELECT key, class FROM env_diff")}
    assert classes["NCCL_SOCKET_IFNAME"] == "per_node" and classes["CUDA_VISIBLE_DEVICES"] == "per_rank"
    assert query(db, "SELECT differs FROM env_diff WHERE key = 'NCCL_IB_TIMEOUT'") == [{"differs": False}]
    sources = query(db, "SELECT node, node_source, source FROM env_nodes WHERE key = 'NCCL_PROTO'")
    assert sources == [{"node": "node04", "node_source": "nccl.conf path", "source": "nccl.conf"}]
    inputs = query(db, "SELECT sum(unparsed_lines) AS n FROM inputs")
    assert inputs == [{"n": 0}]


# -- the real excerpts ------------------------------------------------------------------------------

# file -> (rows per table, unconsumed non-blank line numbers); counts read off each file.
REAL_HW = {
    "topo_nccl-1453_h100-nv18-tabs-nics.txt": ({"topology": 224, "gpus": 8}, []),
    "topo_sglang-13973_h100-nv18-9nics-3numa.txt": ({"topology": 96, "gpus": 6}, []),
    "topo_nccl-933_nv8-9nics.txt": ({"topology": 112, "gpus": 7}, []),
    "topo_deepep-60_topo-mp-pcie-14nics.txt": ({"topology": 84, "gpus": 4}, []),
    "topo_deepep-128_gpu-sys-only-pix-nic-per-gpu.txt": ({"topology": 102, "gpus": 6}, []),
    "topo_club-3090-1229_2x5090-p2p-rw-matrix.txt": ({"topology": 2, "gpus": 0}, []),
    "topo_nccl-tests-78_16gpu-nv6-legacy-mlx5-columns.txt": ({"topology": 100, "gpus": 4}, []),
    "topo_public-file-70889741537_nic-legend-bond.txt": ({"topo_nics": 9}, []),
    "nvidia-smi_modal-client-2797_reported-memory-total-mib.txt": ({"gpus": 7}, []),
    "nvidia-smi_public-file-59137460836_h100-csv-header.txt": ({"gpus": 1, "gpu_query": 2}, []),
    "ibstat_l2fwd-nv-6_roce-cx6dx-100g.txt": ({"nic_ports": 2}, []),
    "ibstat_rdma-core-847_mlx4-ib-2port-tabs-ibwarn.txt": ({"nic_ports": 2, "events": 4}, [1]),
    "ibv_devinfo_deepep-38_h100-roce-cx7-active.txt": ({"nic_ports": 2}, []),
    "ibv_devinfo_deepep-60_port-down-mtu-1024-mixed-cx6-cx7.txt": ({"nic_ports": 2}, []),
    "iblinkinfo_nccl-tests-71_edr-hdr-lane-speeds.txt": ({"ib_links": 8}, [14]),
    "nccltests_dgx-spark-playbooks-103_gb10-2node-version-header.txt": ({"bench_results": 4, "gpus": 2}, []),
    "nccltests_nccl-1244_h20-2node-16gpu-nvls-rows.txt": ({"bench_results": 10}, []),
    "nccltests_nccl-1453_mpirun-tag-output-rank-prefix.txt": ({"bench_results": 10}, []),
    "nccltests_nccl-318_v100-p3dn-legacy-error-column.txt": ({"bench_results": 1, "gpus": 8}, []),
    "nccltests_nccl-tests-100_hgx-a100-alltoall-legacy-header.txt": ({"bench_results": 0, "gpus": 8}, []),
    "nccltests_nccl-tests-131_nccl-info-interleaved-2gpu.txt": ({"bench_results": 0, "gpus": 2}, [3, 4]),
    "nccltests_nccl-tests-150_a100-2node-1gpu-hdr-small-sizes.txt": ({"bench_results": 4}, []),
    "nccltests_nccl-tests-194_h100pcie-nvlink-bridge-pair.txt": ({"bench_results": 2}, [1, 3, 5]),
    "nccltests_nccl-tests-249_a10g-blocking-enabled-no-hash.txt": ({"bench_results": 0, "gpus": 1}, [1]),
    "nccltests_nccl-tests-309_h100-4node-wrapper-run-label.txt": ({"bench_results": 0, "gpus": 6}, [2]),
}


def test_every_real_hw_excerpt_is_listed(real_logs: Path):
    assert sorted(p.name for p in (real_logs / "hw").glob("*.txt")) == sorted(REAL_HW)


@pytest.mark.parametrize("name", sorted(REAL_HW))
def test_real_hw_excerpt(real_logs: Path, name: str):
    counts, left = REAL_HW[name]
    lines = envelope((real_logs / "hw" / name).read_bytes())
    result = hwtools.parse(lines)
    for table, n in counts.items():
        assert result.tables[table].height == n, (table, result.tables[table])
    consumed = set(result.consumed.to_list())
    rest = [n for n, t in lines.select("line_no", "text").iter_rows()
            if n not in consumed and t.strip() and "NCCL " not in t]
    assert rest == left


def test_real_hw_values(real_logs: Path):
    hw = real_logs / "hw"

    def tables(name):
        return hwtools.parse(envelope((hw / name).read_bytes())).tables

    topo = tables("topo_nccl-1453_h100-nv18-tabs-nics.txt")["topology"]
    assert topo.filter((pl.col("to") == "NIC0") & pl.col("from").str.starts_with("GPU"))["link"].unique().to_list() == ["SYS"]
    assert topo.filter(pl.col("from") == "GPU0").filter(pl.col("to") == "NIC8")["link"].to_list() == ["PIX"]
    gpus = tables("topo_sglang-13973_h100-nv18-9nics-3numa.txt")["gpus"]
    assert gpus["numa_affinity"].to_list() == ["0", "0", "0", "1", "2", "2"]
    assert set(tables("topo_nccl-933_nv8-9nics.txt")["topology"].filter(
        pl.col("to").str.starts_with("GPU"))["link"]) == {"NV8"}
    ports = tables("ibv_devinfo_deepep-60_port-down-mtu-1024-mixed-cx6-cx7.txt")["nic_ports"]
    assert ports.select("ca", "port", "state", "active_mtu", "vendor_part_id").rows() == [
        ("mlx5_12", 1, "Down", 1024, "4125"), ("mlx5_13", None, None, None, "4129")]
    ports = tables("ibstat_rdma-core-847_mlx4-ib-2port-tabs-ibwarn.txt")["nic_ports"]
    assert ports.select("port", "state", "physical_state", "rate_gbps").rows() == [
        (1, "Down", "Disabled", 10.0), (2, "Active", "LinkUp", 56.0)]
    links = tables("iblinkinfo_nccl-tests-71_edr-hdr-lane-speeds.txt")["ib_links"]
    assert sorted(set(links["rate_gbps"])) == [pytest.approx(103.125), pytest.approx(212.5)]
    bench = tables("nccltests_nccl-1244_h20-2node-16gpu-nvls-rows.txt")["bench_results"]
    assert bench.filter(pl.col("size_bytes") == 536870912)["ip_busbw_gbs"].to_list() == [314.10]
    bench = tables("nccltests_nccl-1453_mpirun-tag-output-rank-prefix.txt")["bench_results"]
    assert bench.filter(pl.col("size_bytes") == 67108864)["oop_time_us"].to_list() == [24410.0]
    runs = tables("nccltests_dgx-spark-playbooks-103_gb10-2node-version-header.txt")["bench_runs"]
    assert runs.filter(pl.col("key") == "version")["value"].to_list()[0].startswith("2.20.0 (b4d5bee)")
    assert tables("nccltests_nccl-tests-100_hgx-a100-alltoall-legacy-header.txt")["gpus"]["name"].unique().to_list() == [
        "NVIDIA A100-SXM-80GB"]
    csv = tables("nvidia-smi_public-file-59137460836_h100-csv-header.txt")["gpus"]
    assert csv.select("memory_total_mib", "memory_used_mib").rows() == [(81559, 18560)]


def test_real_hw_folder_ingests(real_logs: Path, tmp_path: Path):
    db = tmp_path / "hw.duckdb"
    assert main(["ingest", str(real_logs / "hw"), "--db", str(db)]) == 0
    counts = query(db, "SELECT (SELECT count(*) FROM topology) AS topology, (SELECT count(*) FROM nic_ports) AS ports, "
                       "(SELECT count(*) FROM bench_results) AS bench, (SELECT count(*) FROM ib_links) AS links")
    assert counts == [{"topology": 224 + 96 + 112 + 84 + 102 + 2 + 100, "ports": 8, "bench": 31, "links": 8}]


# -- a generated run with --config-files ------------------------------------------------------------

@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[Path, Path]:
    from postmortem.generator import RunSpec, generate_run

    out = tmp_path_factory.mktemp("cfg") / "run"
    generate_run(out, RunSpec(nodes=2, culprit=9, config_files=True, pyspy=False))
    db = out.parent / "run.duckdb"
    assert main(["ingest", str(out), "--db", str(db)]) == 0
    return out, db


def test_generated_config_files_parse_completely(generated):
    out, db = generated
    names = {"config/collect_env.txt", "config/pip-freeze.txt", "config/job.sbatch",
             "hw/h20-node-01/nvidia-smi-topo.txt", "hw/h20-node-02/nvidia-smi.csv", "hw/nccl-tests/all_reduce_perf.txt",
             "hw/h20-node-01/ibstat.txt", "hw/h20-node-02/ibv_devinfo.txt"}
    assert names <= {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    rows = query(db, "SELECT path, lines, unparsed_lines FROM inputs WHERE path LIKE 'config/%' OR path LIKE 'hw/%' "
                     "ORDER BY path")
    assert len(rows) == 12 and all(r["unparsed_lines"] == 0 and r["lines"] > 0 for r in rows), rows
    versions = query(db, "SELECT name, version FROM packages WHERE source = 'collect_env' AND name = 'torch'")
    assert versions == [{"name": "torch", "version": "2.8.0+cu128"}]
    launch = query(db, "SELECT key, value FROM job_config WHERE source = 'torchrun' AND key IN ('nnodes', 'nproc_per_node') "
                       "ORDER BY key")
    assert launch == [{"key": "nnodes", "value": "2"}, {"key": "nproc_per_node", "value": "8"}]


def test_generated_query_gpu_model_and_link_matrix(generated):
    _, db = generated
    model = query(db, "SELECT DISTINCT name FROM gpus WHERE name IS NOT NULL")
    assert model == [{"name": "NVIDIA H20"}]
    matrix = query(db, "SELECT node, link, count(*) AS n FROM topology WHERE \"from\" LIKE 'GPU%' GROUP BY ALL "
                       "ORDER BY node, link")
    assert matrix == [{"node": node, "link": link, "n": n} for node in ("h20-node-01", "h20-node-02")
                      for link, n in (("NODE", 24), ("NV18", 56), ("PIX", 8), ("SYS", 32))]
    nic = query(db, "SELECT to_device FROM topology WHERE node = 'h20-node-02' AND \"from\" = 'GPU3' AND link = 'PIX'")
    assert nic == [{"to_device": "mlx5_3"}]


def test_generated_query_busbw_per_size(generated):
    _, db = generated
    rows = query(db, "SELECT size_bytes, oop_busbw_gbs FROM bench_results ORDER BY size_bytes")
    assert [r["size_bytes"] for r in rows] == [1 << k for k in range(20, 31)]
    busbw = [r["oop_busbw_gbs"] for r in rows]
    assert busbw == sorted(busbw) and 150 < busbw[-1] < 190
    avg = query(db, "SELECT value FROM bench_runs WHERE key = 'avg_busbw_gbs'")
    assert len(avg) == 1 and float(avg[0]["value"]) > 0


def test_config_files_off_writes_nothing(tmp_path: Path):
    from postmortem.generator import RunSpec, generate_run

    generate_run(tmp_path / "run", RunSpec(nodes=1, gpus_per_node=2, culprit=1, pyspy=False))
    assert not (tmp_path / "run" / "config").exists() and not (tmp_path / "run" / "hw").exists()


def test_real_launch_command_lines(real_logs: Path):
    lines = envelope((real_logs / "hw" / "nccltests_nccl-tests-309_h100-4node-wrapper-run-label.txt").read_bytes())
    cfg = config.parse(lines).tables["job_config"]
    rows = cfg.select("key", "value").rows()
    assert ("np", "32") in rows and ("H", "spt01:8,spt02:8,pt01:8,pt02:8") in rows
    assert ("mca", "pml ucx") in rows and ("mca", "btl ^openib") in rows
    assert ("x", "NCCL_IB_GID_INDEX=0") in rows
    assert ("program", "/home/user/nccl-tests/build/all_reduce_perf_mpi") in rows
    assert set(cfg["source"]) == {"mpirun"} and set(cfg["line_no"]) == {1}
    lines = envelope((real_logs / "nccl" / "nccl-issue-300-loopback-bootstrap-shm-instead-of-p2p-2.5.6.log").read_bytes())
    cfg = config.parse(lines).tables["job_config"]
    assert ("np", "4") in cfg.select("key", "value").rows() and set(cfg["source"]) == {"mpiexec"}


def test_nccl_info_echoes_are_compared_among_the_nodes_that_print_them(tmp_path: Path):
    run = tmp_path / "logs"
    run.mkdir()
    (run / "a.log").write_text("node01:1234:1234 [0] NCCL INFO NCCL_PROTO set by environment to Simple\n"
                               "node01:1234:1234 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\n")
    (run / "b.log").write_text("node02:2234:2234 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ens1\n")
    (run / "c.log").write_text("node03:3234:3234 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.3<0>\n")
    db = tmp_path / "logs.duckdb"
    assert main(["ingest", str(run), "--db", str(db)]) == 0
    rows = query(db, "SELECT key, basis, class, n_nodes, values, line_no FROM env_diff WHERE differs ORDER BY key")
    assert rows == [
        {"key": "NCCL_PROTO", "basis": "NCCL INFO", "class": "must_match", "n_nodes": 2,
         "values": "<unset> @ node02; Simple @ node01", "line_no": 1},
        {"key": "NCCL_SOCKET_IFNAME", "basis": "NCCL INFO", "class": "per_node", "n_nodes": 2,
         "values": "ens1 @ node02; eth0 @ node01", "line_no": 2}]
