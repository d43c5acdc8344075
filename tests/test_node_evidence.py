"""Issue 5: node and scheduler evidence -- kernel logs, GPU/NIC health, Slurm and Kubernetes
records, the GPU identity join and per-node clocks."""
from __future__ import annotations

import json
import shutil
from datetime import datetime

import polars as pl
import pytest

from postmortem.parsers import health, kernel, scheduler
from postmortem.parsers.lines import envelope


def _parse(module, text: str):
    lines = envelope(text.encode())
    return module.parse(lines), lines


def _one(text: str) -> dict:
    result, _ = _parse(kernel, text + "\n")
    rows = result.tables["node_events"].to_dicts()
    assert len(rows) == 1, rows
    return rows[0]


# -- kernel logs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("line, kind, code, device", [
    ("[ 8812.402823] NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
     "xid", "79", "0000:2a:00.0"),
    ("[ 8812.4] NVRM: Xid (PCI:0000:AB:00): 48, pid=31337, name=python, DBE (double bit error) ECC error",
     "xid", "48", "0000:ab:00.0"),
    ("NVRM: Xid (0000:3b:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1): Out Of Range Address",
     "xid", "13", "0000:3b:00.0"),
    ("[ 1.0] NVRM: GPU 0000:2a:00.0: GPU has fallen off the bus.", "gpu_off_bus", None, "0000:2a:00.0"),
    ("[ 1.0] mlx5_core 0000:5e:00.0 ens12f0np0: Link down", "link_down", None, "ens12f0np0"),
    ("[ 1.0] mlx5_core 0000:5e:00.0 ens12f0np0: Link up", "link_up", None, "ens12f0np0"),
    ("[ 1.0] ice 0000:b1:00.0 ens5f0: NIC Link is Down", "link_down", None, "ens5f0"),
    ("[ 1.0] pcieport 0000:00:01.1: AER: Corrected error received: 0000:2a:00.0", "aer", "Corrected", "0000:2a:00.0"),
    ("[ 1.0] nvidia 0000:18:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)",
     "aer", "Uncorrected (Fatal)", "0000:18:00.0"),
    ("[ 1.0] pcieport 0000:00:01.1:    [ 0] RxErr                  (First)", "aer_detail", None, "0000:00:01.1"),
    ("[ 1.0] INFO: task pt_data_worker:48211 blocked for more than 122 seconds.", "hung_task", "122", None),
    ("[ 1.0] Out of memory: Killed process 48212 (python) total-vm:1234kB, anon-rss:1000kB", "oom_kill", "host", None),
    ("[ 1.0] Memory cgroup out of memory: Killed process 48211 (python) total-vm:98765432kB", "oom_kill",
     "CONSTRAINT_MEMCG", None),
    ("[ 1.0] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,task=python,pid=48211,uid=1000",
     "oom_constraint", "CONSTRAINT_MEMCG", None),
    ("[ 1.0] Out of memory: Kill process 1234 (python) score 900 or sacrifice child", "oom_kill", "host", None),
    ("[ 1.0] nfs: server nfs01 not responding, still trying", "nfs_not_responding", None, "nfs01"),
    ("[ 1.0] nfs: server nfs01 OK", "nfs_ok", None, "nfs01"),
])
def test_kernel_message_kinds(line, kind, code, device):
    row = _one(line)
    assert (row["kind"], row["code"], row["device"]) == (kind, code, device)


def test_xid_catalogue_meanings():
    for code, words, category in [(79, "fallen off the bus", "bus"), (48, "Double-bit", "memory"),
                                  (94, "Contained", "memory"), (95, "Uncontained", "memory"),
                                  (63, "row remapping", "memory"), (64, "failure", "memory"), (74, "NVLink", "nvlink"),
                                  (119, "GSP RPC timeout", "firmware"), (120, "GSP error", "firmware"),
                                  (13, "Graphics engine exception", "app"), (31, "page fault", "app"),
                                  (43, "stopped processing", "app"), (45, "Preemptive cleanup", "app")]:
        row = _one(f"[ 5.0] NVRM: Xid (PCI:0000:18:00): {code}, pid=1, name=python, something")
        assert words in row["meaning"] and row["category"] == category, (code, row)
    assert "not in the catalogue" in _one("NVRM: Xid (PCI:0000:18:00): 999, x")["meaning"]


def test_kernel_time_headers():
    rel = _one("[  123.456789] nfs: server nfs01 OK")
    assert rel["rel_s"] == pytest.approx(123.456789) and rel["ts"] is None
    dmesg_t = _one("[Fri Jul 24 08:01:02 2026] nfs: server nfs01 OK")
    assert dmesg_t["ts"] == datetime(2026, 7, 24, 8, 1, 2) and dmesg_t["ts_zone"] == "local"
    journal = _one("Jul 24 08:01:02 gpu-07 kernel: nfs: server nfs01 OK")
    assert journal["host"] == "gpu-07" and journal["ts"] == datetime(2000, 7, 24, 8, 1, 2)
    assert journal["ts_zone"] == "local-no-year"
    precise = _one("Jul  4 08:01:02.250000 gpu-07 kernel: nfs: server nfs01 OK")
    assert precise["ts"] == datetime(2000, 7, 4, 8, 1, 2, 250000)
    iso = _one("2026-07-24T16:01:02+0800 gpu-07 kernel: nfs: server nfs01 OK")
    assert iso["ts"] == datetime(2026, 7, 24, 8, 1, 2) and iso["ts_zone"] == "UTC" and iso["host"] == "gpu-07"
    iso2 = _one("2026-07-24T08:01:02.5+00:00 gpu-07 kernel: nfs: server nfs01 OK")
    assert iso2["ts"] == datetime(2026, 7, 24, 8, 1, 2, 500000)
    kern = _one("Jul 24 08:01:02 gpu-07 kernel: [  123.456789] nfs: server nfs01 OK")
    assert kern["rel_s"] == pytest.approx(123.456789) and kern["host"] == "gpu-07"
    facility = _one("kern  :err   : [  123.456789] nfs: server nfs01 OK")
    assert facility["kind"] == "nfs_ok"


def test_nvrm_identity_block_and_flaps():
    text = "\n".join([
        "[ 10.0] NVRM: GPU at PCI:0000:2a:00: GPU-5f4e7b0a-3c1d-4e2f-9a8b-7c6d5e4f3a2b",
        "[ 10.0] NVRM: GPU Board Serial Number: 1321021034567",
        "[ 10.0] NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "[ 20.0] mlx5_core 0000:5e:00.0 ens12f0np0: Link down",
        "[ 21.0] mlx5_core 0000:5e:00.0 ens12f0np0: Link up",
        "[ 22.0] mlx5_core 0000:5e:00.0 ens12f0np0: Link down",
        "[ 23.0] some unrelated line",
    ]) + "\n"
    result, _ = _parse(kernel, text)
    ev = result.tables["node_events"]
    serial = ev.filter(pl.col("serial").is_not_null()).row(0, named=True)
    assert serial["pci"] == "0000:2a:00.0" and serial["serial"] == "1321021034567"
    assert ev.filter(pl.col("kind") == "link_down")["flaps"].to_list() == [2, 2]
    assert 7 not in result.consumed.to_list() and len(result.consumed) == 6


# -- host lists and scheduler -------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("gpu-[01-03,07]", ["gpu-01", "gpu-02", "gpu-03", "gpu-07"]),
    ("gpu-[01-02],login1", ["gpu-01", "gpu-02", "login1"]),
    ("rack[1-2]-n[8-9]", ["rack1-n8", "rack1-n9", "rack2-n8", "rack2-n9"]),
    ("node7", ["node7"]),
    ("(null)", []),
])
def test_expand_hostlist(text, expected):
    assert scheduler.expand_hostlist(text) == expected


def test_hostlist_round_trip():
    from postmortem.analyzer.ranges import hostlist
    hosts = ["h20-node-01", "h20-node-02", "h20-node-05"]
    assert scheduler.expand_hostlist(hostlist(hosts)) == hosts


def _job(text: str):
    result, lines = _parse(scheduler, text)
    return result.tables["job"], result.tables["job_nodes"], result, lines


def test_sacct_parsable_with_trailing_bar():
    job, nodes, result, lines = _job(
        "JobID|JobName|State|ExitCode|Start|End|NodeList|\n"
        "4242|pretrain|NODE_FAIL|1:0|2026-07-24T08:00:00|2026-07-24T14:12:31|gpu-[01-03]|\n"
        "4242.batch|batch|CANCELLED by 1000|0:15|2026-07-24T08:00:00|2026-07-24T14:12:31|gpu-01|\n"
        "4242.0|python|OUT_OF_MEMORY|0:125|2026-07-24T08:00:01|Unknown|gpu-[01-03]|\n")
    rows = job.to_dicts()
    assert [(r["step"], r["state"], r["exit_code"], r["signal"]) for r in rows] == [
        (None, "NODE_FAIL", 1, 0), ("batch", "CANCELLED", 0, 15), ("0", "OUT_OF_MEMORY", 0, 125)]
    assert rows[1]["reason"] == "by 1000" and rows[2]["end"] is None
    assert rows[0]["start"] == datetime(2026, 7, 24, 8)
    assert nodes["node"].to_list() == ["gpu-01", "gpu-02", "gpu-03"]
    assert len(result.consumed) == len(lines)


def test_sacct_plain_fixed_width():
    text = (
        "JobID           JobName  Partition      State ExitCode               Start        NodeList \n"
        "------------ ---------- ---------- ---------- -------- ------------------- --------------- \n"
        "4242           pretrain        gpu    TIMEOUT      0:0 2026-07-24T08:00:00  h20-node-[01-05] \n"
        "4242.batch        batch             CANCELLED     0:15 2026-07-24T08:00:00     h20-node-01 \n"
        "4242.0           python              PREEMPTED      0:0 2026-07-24T08:00:01  h20-node-[01-05] \n")
    job, nodes, result, lines = _job(text)
    assert job["state"].to_list() == ["TIMEOUT", "CANCELLED", "PREEMPTED"]
    assert job["signal"].to_list() == [0, 15, 0]
    assert job["nodelist"][0] == "h20-node-[01-05]" and len(nodes) == 5
    assert len(result.consumed) == len(lines)


def test_many_sacct_outputs_one_after_another_read_as_each_alone():
    """An epilog's file of sacct outputs, two layouts of each form, one after another: the blocks
    under one header are read together, and every row is what its block gives alone."""
    parsable = ["JobID|State|ExitCode|NodeList", "{j}|FAILED|1:0|n[1-2]", "{j}.0|OUT_OF_MEMORY|0:125|n1"]
    raw = ["JobIDRaw|JobName|State|ExitCode", "{j}|train|TIMEOUT|0:0"]
    plain = ["JobID           State ExitCode", "------------ ---------- --------", "{j}           COMPLETED      0:0"]
    blocks = [[line.format(j=100 + n) for line in layout] + [""]
              for n, layout in enumerate([parsable, raw, plain, plain, parsable, raw] * 3)]
    job, _nodes, _result, _lines = _job("\n".join(line for block in blocks for line in block) + "\n")
    alone = [_job("\n".join(block) + "\n")[0].drop("line_no") for block in blocks]
    assert job.drop("line_no").equals(pl.concat(alone, how="vertical"))
    assert job["job_id"].n_unique() == len(blocks)


def test_scontrol_show_job():
    text = (
        "JobId=4243 JobName=pretrain\n"
        "   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A\n"
        "   JobState=NODE_FAIL Reason=NodeDown Dependency=(null)\n"
        "   Requeue=1 Restarts=2 BatchFlag=1 Reboot=0 ExitCode=0:0\n"
        "   StartTime=2026-07-24T08:00:00 EndTime=2026-07-24T09:00:00 Deadline=N/A\n"
        "   NodeList=gpu-[01-02,07]\n"
        "   NumNodes=3-3 NumCPUs=96 NumTasks=24 CPUs/Task=4\n"
        "   TRES=cpu=96,mem=1T,node=3,billing=96,gres/gpu=24\n")
    job, nodes, result, lines = _job(text)
    row = job.row(0, named=True)
    assert (row["job_id"], row["state"], row["reason"], row["restarts"], row["nnodes"], row["ntasks"]) == \
        ("4243", "NODE_FAIL", "NodeDown", 2, 3, 24)
    assert nodes["node"].to_list() == ["gpu-01", "gpu-02", "gpu-07"]
    assert len(result.consumed) == len(lines)


def test_squeue():
    job, nodes, _, _ = _job(
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"
        "              4244       gpu pretrain    alice  R    2:03:11      2 gpu-[10-11]\n"
        "              4245       gpu pretrain    alice PD       0:00      4 (Resources)\n")
    assert job["state"].to_list() == ["RUNNING", "PENDING"]
    assert job["reason"].to_list() == [None, "Resources"]
    assert nodes["node"].to_list() == ["gpu-10", "gpu-11"]


POD_YAML = """apiVersion: v1
kind: Pod
metadata:
  labels:
    app: trainer
  name: trainer-worker-3
  namespace: default
spec:
  containers:
  - name: trainer
    image: nvcr.io/nvidia/pytorch:24.05-py3
  nodeName: gpu-node-3
status:
  containerStatuses:
  - containerID: containerd://abc
    lastState:
      terminated:
        exitCode: 137
        reason: OOMKilled
    name: trainer
    restartCount: 4
    state:
      waiting:
        reason: CrashLoopBackOff
  phase: Running
"""


def test_kubectl_pod_yaml():
    job, nodes, _, _ = _job(POD_YAML)
    row = job.row(0, named=True)
    assert (row["job_id"], row["nodelist"], row["exit_code"], row["restarts"], row["state"]) == \
        ("trainer-worker-3", "gpu-node-3", 137, 4, "Running")
    assert "OOMKilled" in row["reason"] and "CrashLoopBackOff" in row["reason"]
    assert nodes["node"].to_list() == ["gpu-node-3"]


def test_kubectl_pod_json_evicted():
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer-worker-1", "namespace": "default"},
           "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "trainer"}]},
           "status": {"phase": "Failed", "reason": "Evicted",
                      "message": "The node was low on resource: memory.",
                      "containerStatuses": [{"name": "trainer", "restartCount": 0,
                                             "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}]}}
    for text in (json.dumps(doc, indent=4), json.dumps(doc)):
        job, _, _, _ = _job(text + "\n")
        row = job.row(0, named=True)
        assert (row["job_id"], row["nodelist"], row["state"], row["exit_code"]) == \
            ("trainer-worker-1", "gpu-node-1", "Failed", 137), text[:20]
        assert row["reason"].startswith("Evicted")


def test_kubectl_describe_pod():
    text = (
        "Name:             trainer-worker-3\n"
        "Namespace:        default\n"
        "Node:             gpu-node-3/10.0.0.13\n"
        "Status:           Running\n"
        "Containers:\n"
        "  trainer:\n"
        "    State:          Running\n"
        "    Last State:     Terminated\n"
        "      Reason:       OOMKilled\n"
        "      Exit Code:    137\n"
        "    Restart Count:  4\n")
    job, _, _, _ = _job(text)
    row = job.row(0, named=True)
    assert (row["nodelist"], row["exit_code"], row["restarts"], row["reason"]) == ("gpu-node-3", 137, 4, "OOMKilled")


# -- GPU and NIC health --------------------------------------------------------------------------------

def test_nvidia_smi_q_samples():
    result, _ = _parse(health, "\n".join(health.SAMPLE_LINES) + "\n")
    gpu = result.tables["gpu_health"]
    row = gpu.filter(pl.col("state") == "ok").row(0, named=True)
    assert row["bus_id"] == "0000:18:00.0" and row["uuid"].startswith("GPU-0a1b") and row["serial"] == "1652123456789"
    assert (row["pcie_gen_cur"], row["pcie_gen_max"], row["pcie_width_cur"], row["pcie_width_max"]) == (4, 5, 8, 16)
    assert (row["ecc_volatile_corrected"], row["ecc_volatile_uncorrected"], row["ecc_aggregate_uncorrected"]) == (12, 1, 2)
    assert (row["retired_dbe"], row["remapped_uncorrectable"], row["remap_pending"]) == (1, 1, "Yes")
    assert row["throttle"] == "HW Slowdown" and row["temp_c"] == 41 and row["sm_clock_mhz"] == 1980
    gone = gpu.filter(pl.col("state") == "unreachable").row(0, named=True)
    assert gone["bus_id"] == "0000:2a:00.0"


def test_nvidia_smi_q_old_ecc_layout():
    text = "\n".join([
        "GPU 00000000:3B:00.0",
        "    Product Name                    : Tesla V100-SXM2-32GB",
        "    ECC Errors",
        "        Volatile",
        "            Single Bit",
        "                Device Memory       : 3",
        "                Total               : 3",
        "            Double Bit",
        "                Device Memory       : 1",
        "                Total               : 1",
        "        Aggregate",
        "            Single Bit",
        "                Total               : 9",
        "            Double Bit",
        "                Total               : 2",
        "GPU 00000000:5E:00.0",
        "    Product Name                    : Tesla V100-SXM2-32GB",
    ]) + "\n"
    result, lines = _parse(health, text)
    gpu = result.tables["gpu_health"].sort("bus_id")
    assert gpu["bus_id"].to_list() == ["0000:3b:00.0", "0000:5e:00.0"]
    first = gpu.row(0, named=True)
    assert (first["ecc_volatile_corrected"], first["ecc_volatile_uncorrected"], first["ecc_aggregate_corrected"],
            first["ecc_aggregate_uncorrected"]) == (3, 1, 9, 2)
    assert len(result.consumed) == len(lines)


def test_nvidia_smi_csv_real_excerpt(real_logs):
    path = real_logs / "hw" / "nvidia-smi_public-file-59137460836_h100-csv-header.txt"
    if not path.is_file():
        pytest.skip("excerpt not present")
    result = health.parse(envelope(path.read_bytes()))
    row = result.tables["gpu_health"].row(0, named=True)
    assert (row["memory_total_mib"], row["memory_used_mib"]) == (81559, 18560)


def test_ethtool_and_perfquery():
    text = ("$ ethtool -S ens12f0np0\nNIC statistics:\n     rx_packets: 123456\n     rx_symbol_err_phy: 7\n"
            "     link_down_events_phy: 3\n"
            "# perfquery -C mlx5_2 -P 1\n# Port counters: Lid 12 port 1 (CapMask: 0x5A00)\n"
            "PortSelect:......................1\nSymbolErrorCounter:..............4\nLinkDownedCounter:...............1\n"
            "PortRcvErrors:...................0\nPortXmitData:....................9999\n")
    result, _ = _parse(health, text)
    nic = result.tables["nic_counters"]
    eth = {r["counter"]: r for r in nic.filter(pl.col("source") == "ethtool").to_dicts()}
    assert eth["link_down_events_phy"]["value"] == 3 and eth["link_down_events_phy"]["device"] == "ens12f0np0"
    assert eth["rx_symbol_err_phy"]["is_error"] and not eth["rx_packets"]["is_error"]
    pq = {r["counter"]: r for r in nic.filter(pl.col("source") == "perfquery").to_dicts()}
    assert pq["SymbolErrorCounter"]["value"] == 4 and pq["LinkDownedCounter"]["device"] == "mlx5_2"
    assert pq["LinkDownedCounter"]["port"] == 1 and pq["LinkDownedCounter"]["is_error"]


# -- the generated Xid-79 run ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def xid_run(tmp_path_factory):
    from postmortem.generator import RunSpec, generate_run
    out = tmp_path_factory.mktemp("xid79")
    truth = generate_run(out, RunSpec(nodes=3, gpus_per_node=4, culprit=5, node_fault="xid79", clock_skew_s=7.5,
                                      pyspy=False, iterations_before_hang=3))
    return out, truth


def test_generated_xid_joins_to_the_physical_gpu(xid_run):
    from postmortem.analyzer.pipeline import analyze
    out, truth = xid_run
    fault = truth["node_fault"]
    run = analyze([out])
    xids = run.frame("SELECT node, pci, gpu_index, uuid, serial, global_rank, local_rank, code, meaning "
                     "FROM node_events WHERE kind = 'xid'")
    assert len(xids) == 2  # dmesg and journal forms
    for row in xids.to_dicts():
        assert (row["node"], row["pci"], row["gpu_index"], row["uuid"], row["serial"], row["global_rank"]) == \
            (fault["host"], fault["pci"], fault["local_gpu"], fault["uuid"], fault["serial"], fault["rank"])
        assert row["code"] == "79" and "fallen off the bus" in row["meaning"]
    ident = run.frame("SELECT * FROM gpu_identity WHERE pci = ? AND node = ?", [fault["pci"], fault["host"]]).row(0, named=True)
    assert ident["global_rank"] == truth["culprit_rank"] and "nvidia-smi" in ident["sources"]
    assert "NCCL busId" in ident["sources"] and "kernel log" in ident["sources"]


def test_generated_clock_offsets_order_events_across_nodes(xid_run):
    from postmortem.analyzer.pipeline import analyze
    out, truth = xid_run
    fault = truth["node_fault"]
    run = analyze([out])
    clocks = {r["node"]: r for r in run.frame("SELECT * FROM node_clocks").to_dicts()}
    assert clocks[fault["skew_host"]]["offset_s"] == pytest.approx(7.5, abs=1.0)
    assert clocks[fault["skew_host"]]["confidence"] in ("high", "medium")
    others = [c for n, c in clocks.items() if n != fault["skew_host"]]
    assert all(abs(c["offset_s"]) < 1.0 for c in others)
    t_fault = datetime.fromisoformat(fault["t_fault_utc"])
    xids = run.frame("SELECT ts, rel_s, ts_utc, order_confidence FROM node_events WHERE kind = 'xid'").to_dicts()
    for row in xids:
        assert abs((row["ts_utc"] - t_fault).total_seconds()) < 1.5, row
        assert row["order_confidence"] == "high"
    journal = next(r for r in xids if r["ts"] is not None)
    assert (journal["ts"] - t_fault).total_seconds() > 6  # the raw journal time is the skewed clock's
    # cross-node order: the Xid comes before every rank's watchdog timeout, once clocks are corrected
    first_timeout = run.frame(
        "SELECT min(c.ts - to_seconds(coalesce(k.offset_s, 0))) AS t FROM collectives c "
        "JOIN node_clocks k USING (node) WHERE c.kind = 'watchdog_timeout'").item()
    assert min(r["ts_utc"] for r in xids) < first_timeout


def test_query_lists_expected_nodes_and_which_left_no_log(xid_run, tmp_path, capsys):
    from postmortem.cli import main
    out, _ = xid_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    for folder in ("logs", "node_logs", "pyspy"):
        shutil.rmtree(copy / folder / "h20-node-03", ignore_errors=True)
    (copy / "env" / "h20-node-03.env").unlink()
    # The node's torchrun agent wrote to the job's srun output too (srun --label 2: is its node).
    combined = copy / "slurm-4242.out"
    combined.write_text("".join(line for line in combined.read_text().splitlines(keepends=True)
                                if not line.startswith("2: ")))
    db = tmp_path / "run.duckdb"
    assert main(["ingest", str(copy), "--db", str(db), "--quiet"]) == 0
    capsys.readouterr()
    main(["query", "--db", str(db), "--format", "json",
          "SELECT DISTINCT job_id, node, has_logs FROM job_nodes ORDER BY node"])
    rows = json.loads(capsys.readouterr().out)
    assert [(r["job_id"], r["node"], r["has_logs"]) for r in rows] == [
        ("4242", "h20-node-01", True), ("4242", "h20-node-02", True), ("4242", "h20-node-03", False)]


def test_default_spec_writes_no_node_logs(tmp_path):
    from postmortem.generator import RunSpec, generate_run
    generate_run(tmp_path, RunSpec(nodes=2, gpus_per_node=2, culprit=1, pyspy=False, iterations_before_hang=2))
    assert not (tmp_path / "node_logs").exists() and not (tmp_path / "slurm").exists()


def test_dmesg_t_zone_from_the_journal():
    from postmortem.analyzer import clocks
    text = ("[Fri Jul 24 16:01:02 2026] nfs: server nfs01 not responding, still trying\n"
            "[Fri Jul 24 16:02:02 2026] nfs: server nfs01 OK\n"
            "2026-07-24T16:01:02+0800 gpu-07 kernel: nfs: server nfs01 not responding, still trying\n")
    events = kernel.parse(envelope(text.encode())).tables["node_events"].with_columns(node=pl.lit("gpu-07"))
    node_clocks = clocks.estimate({}, ["gpu-07"])
    out, node_clocks = clocks.apply(events, node_clocks)
    assert out["ts_utc"].to_list() == [datetime(2026, 7, 24, 8, 1, 2), datetime(2026, 7, 24, 8, 2, 2),
                                       datetime(2026, 7, 24, 8, 1, 2)]
    assert "UTC+08:00" in out["ts_basis"][1] and "UTC+08:00" in node_clocks["zone"][0]
    # no synchronised events for this node: its clock offset is unknown, and says so
    assert node_clocks["confidence"][0] == "none" and out["order_confidence"][1] == "low"


def test_nvidia_bug_report_excerpt():
    text = "\n".join([
        "____________________________________________",
        "",
        "dmesg:",
        "",
        ("[  123.456789] NVRM: Xid (PCI:0000:3b:00): 119, pid=2277, name=python, Timeout after 6s of waiting for "
         "RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20801702 0x4)."),
        "[  130.000000] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
        "____________________________________________",
        "",
        "/usr/bin/nvidia-smi --query",
        "",
        "==============NVSMI LOG==============",
        "",
        "Timestamp                                 : Fri Jul 24 08:00:05 2026",
        "Driver Version                            : 550.54.15",
        "",
        "Attached GPUs                             : 1",
        "GPU 00000000:3B:00.0",
        "    Product Name                          : NVIDIA H100 80GB HBM3",
        "    GPU UUID                              : GPU-11111111-2222-3333-4444-555555555555",
    ]) + "\n"
    lines = envelope(text.encode())
    ev = kernel.parse(lines).tables["node_events"]
    assert ev["code"].to_list() == ["119", "79"] and ev["category"].to_list() == ["firmware", "bus"]
    gpu = health.parse(lines).tables["gpu_health"].row(0, named=True)
    assert (gpu["bus_id"], gpu["product"], gpu["driver"]) == ("0000:3b:00.0", "NVIDIA H100 80GB HBM3", "550.54.15")


def test_an_inputs_path_names_its_node():
    """A folder or the whole file name equal to a known host wins; else the longest host the
    file name contains (of equally long ones, the first by name); no host, no row."""
    from postmortem.analyzer.node_model import _path_nodes

    inputs = pl.DataFrame({"input_id": [0, 1, 2, 3, 4, 5], "path": [
        "logs/gpu-1/rank0.log",              # a folder
        "kernel/gpu-10",                     # the whole file name
        "env/gpu-10.env",                    # contains gpu-1 and gpu-10: the longer
        "dmesg-gpu-2-gpu-3.txt",             # two of one length: the first by name
        "logs/gpu-1/gpu-3.log",              # a folder before a name that contains a host
        "slurm-4242.out",                    # none
    ]}, schema={"input_id": pl.UInt32, "path": pl.String})
    found = _path_nodes(inputs, {"gpu-1", "gpu-10", "gpu-2", "gpu-3"})
    assert found.rows() == [(0, "gpu-1"), (1, "gpu-10"), (2, "gpu-10"), (3, "gpu-2"), (4, "gpu-1")]
    assert _path_nodes(inputs, set()).is_empty()
