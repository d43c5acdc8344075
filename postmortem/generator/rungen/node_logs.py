"""Node and scheduler evidence of a generated run (issue 5): kernel logs, ``nvidia-smi -q``,
``sacct`` / ``scontrol show job``.

Written only when ``RunSpec.node_logs`` is set or ``RunSpec.node_fault`` names a fault, so the
default output stays byte-identical. Layout::

    OUT/node_logs/<host>/dmesg.txt            dmesg (seconds since boot)
    OUT/node_logs/<host>/journal-kernel.txt   journalctl -k -o short-iso (the host's clock)
    OUT/node_logs/<host>/nvidia-smi-q.txt     nvidia-smi -q taken by the job prolog
    OUT/slurm/sacct.txt                       sacct --parsable2
    OUT/slurm/scontrol-show-job.txt           scontrol show job

Faults (``node_fault``): ``xid79`` -- the culprit's GPU falls off the bus just before the hung
collective: the culprit never enters it and the other ranks time out later. ``xid48``,
``xid94`` -- the same story with an ECC error instead.

Clock skew (``clock_skew_s`` on ``skew_node``, default the culprit's node): the node's host
clock runs ahead by that many seconds, in its journal and in its ranks' c10d glog times
(``Story.clock_of``). dmesg's relative times are not affected (boot-relative).
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path

from .base import Clock
from .endings import oom_kill_events
from .numerics import fault_time

FAULTS = {
    "xid79": (79, "GPU has fallen off the bus."),
    "xid48": (48, "DBE (double bit error) ECC error"),
    "xid94": (94, "Contained: SM (0x1). RST: No, D-RST: No"),
}


class SkewedClock(Clock):
    """A node clock ``skew`` seconds ahead of the job's (true UTC) clock."""

    def __init__(self, base: Clock, skew: float):
        self.start = base.start + timedelta(seconds=skew)
        self.skew = skew


def skew_node(spec, cluster) -> int | None:
    node = getattr(spec, "skew_node", None)
    if node is not None:
        return node
    if not getattr(spec, "clock_skew_s", 0.0):
        return None
    return min(max(spec.culprit, 0), cluster.world - 1) // cluster.gpus_per_node


def gpu_uuid(host: str, bus_id: str) -> str:
    h = hashlib.md5(f"{host}/{bus_id}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def gpu_serial(host: str, bus_id: str) -> str:
    return str(int(hashlib.md5(f"serial/{host}/{bus_id}".encode()).hexdigest()[:12], 16) % 10**13).zfill(13)


def pci_of(bus_id: str) -> str:
    """NCCL busId ``2a000`` -> ``0000:2a:00.0``."""
    value = int(bus_id, 16)
    return f"{value >> 20:04x}:{(value >> 12) & 0xff:02x}:{(value >> 4) & 0xff:02x}.{value & 0xf:x}"


def _boot_offset(node: int) -> float:
    """Seconds the node had been up when the job started."""
    return 3 * 86400 + 1234.5 + node * 977.25


def write_node_logs(run, spec, clock: Clock, out: Path) -> dict:
    cluster = run.cluster
    attempt = run.attempts[-1]
    t_hang = (attempt.iteration_ends[-1] + 0.85 * spec.step_s) if attempt.iteration_ends else attempt.t0 + 60.0
    fault = FAULTS.get(spec.node_fault or "")
    culprit = cluster.slots[min(max(spec.culprit, 0), cluster.world - 1)]
    skewed = skew_node(spec, cluster)
    t_fault = fault_time(spec, attempt, t_hang + getattr(spec, "fault_at_s", -0.35))
    truth: dict = {}
    for node, host in enumerate(cluster.hosts):
        skew = spec.clock_skew_s if node == skewed else 0.0
        boot = -_boot_offset(node)                       # job-time of the boot
        events: list[tuple[float, str]] = [
            (boot + 5.012345, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023"),
        ]
        for i in range(cluster.gpus_per_node):
            events.append((boot + 31.5 + i * 0.01, f"mlx5_core 0000:{0x1f + 0x20 * i:02x}:00.0 ens{12 + i}f0np0: Link up"))
        if node == (skewed if skewed is not None else -1) or node == cluster.nodes - 1:
            # an older, harmless flap on one port
            events += [(-7200.0, "mlx5_core 0000:3f:00.0 ens13f0np0: Link down"),
                       (-7196.5, "mlx5_core 0000:3f:00.0 ens13f0np0: Link up")]
        if fault and node == culprit.node:
            code, text = fault
            pci = pci_of(culprit.bus_id)
            short = pci[:-2]
            uuid, serial = gpu_uuid(host, culprit.bus_id), gpu_serial(host, culprit.bus_id)
            events += [
                (t_fault, f"NVRM: GPU at PCI:{short}: {uuid}"),
                (t_fault + 0.000004, f"NVRM: GPU Board Serial Number: {serial}"),
                (t_fault + 0.000008, f"NVRM: Xid (PCI:{short}): {code}, pid='<unknown>', name=<unknown>, {text}"),
            ]
            if code == 79:
                events.append((t_fault + 0.000020, f"NVRM: GPU {pci}: GPU has fallen off the bus."))
            truth = {"kind": spec.node_fault, "xid": code, "host": host, "node": node, "pci": pci, "uuid": uuid,
                     "serial": serial, "local_gpu": culprit.local_rank, "rank": culprit.rank,
                     "t_fault_utc": f"{clock.at(t_fault):%Y-%m-%dT%H:%M:%S.%f}", "clock_skew_s": spec.clock_skew_s,
                     "skew_host": cluster.hosts[skewed] if skewed is not None else None}
        events += oom_kill_events(run, node)         # crash scenario: the OOM killer's lines
        if spec.node_fault == "link-flap":
            from .fabric_faults import kernel_events
            flapping, flap_lines, flap_truth = kernel_events(spec, cluster, t_hang)
            if node == flapping:
                events += flap_lines
                truth = flap_truth
        events.sort(key=lambda e: e[0])
        folder = out / "node_logs" / host
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "dmesg.txt").write_text("".join(f"[{t - boot:12.6f}] {text}\n" for t, text in events))
        since = -3600.0
        journal = [f"{clock.at(t + skew):%Y-%m-%dT%H:%M:%S}+0000 {host} kernel: {text}\n"
                   for t, text in events if t >= since]
        (folder / "journal-kernel.txt").write_text(f"-- Logs begin at {clock.at(boot + skew):%a %Y-%m-%d %H:%M:%S} UTC. --\n"
                                                   + "".join(journal))
        (folder / "nvidia-smi-q.txt").write_text(_nvidia_smi_q(cluster, node, host, clock.at(-30.0 + skew)))
    _slurm_files(run, spec, clock, out)
    return truth


def _nvidia_smi_q(cluster, node: int, host: str, when) -> str:
    lines = ["", "==============NVSMI LOG==============", "",
             f"Timestamp                                 : {when:%a %b %d %H:%M:%S %Y}",
             "Driver Version                            : 535.129.03",
             "CUDA Version                              : 12.2", "",
             f"Attached GPUs                             : {cluster.gpus_per_node}"]
    for slot in cluster.node_slots(node):
        pci = pci_of(slot.bus_id)
        full = "0000" + pci.upper().replace(".0", ".0")
        lines += [
            f"GPU {full}",
            "    Product Name                          : NVIDIA H20",
            f"    Serial Number                         : {gpu_serial(host, slot.bus_id)}",
            f"    GPU UUID                              : {gpu_uuid(host, slot.bus_id)}",
            f"    Minor Number                          : {slot.local_rank}",
            "    PCI",
            f"        Bus                               : 0x{pci[5:7].upper()}",
            f"        Bus Id                            : {full}",
            "        GPU Link Info",
            "            PCIe Generation",
            "                Max                       : 5",
            "                Current                   : 5",
            "            Link Width",
            "                Max                       : 16x",
            "                Current                   : 16x",
            "    Clocks Event Reasons",
            "        Idle                              : Active",
            "        HW Slowdown                       : Not Active",
            "    ECC Errors",
            "        Volatile",
            "            SRAM Correctable              : 0",
            "            SRAM Uncorrectable            : 0",
            "            DRAM Correctable              : 0",
            "            DRAM Uncorrectable            : 0",
            "        Aggregate",
            "            SRAM Correctable              : 0",
            "            SRAM Uncorrectable            : 0",
            "            DRAM Correctable              : 0",
            "            DRAM Uncorrectable            : 0",
            "    Retired Pages",
            "        Single Bit ECC                    : N/A",
            "        Double Bit ECC                    : N/A",
            "        Pending Page Blacklist            : N/A",
            "    Remapped Rows",
            "        Correctable Error                 : 0",
            "        Uncorrectable Error               : 0",
            "        Pending                           : No",
            "        Remapping Failure Occurred        : No",
            "    Temperature",
            "        GPU Current Temp                  : 33 C",
            "",
        ]
    return "\n".join(lines) + "\n"


def _slurm_files(run, spec, clock: Clock, out: Path) -> None:
    cluster = run.cluster
    attempt = run.attempts[-1]
    t_end = max([p.exit_t or 0.0 for p in attempt.procs] + [attempt.end_t])
    fired = run.truth.get("watchdog_fired")
    state, exit_code = ("COMPLETED", "0:0") if spec.scenario == "healthy" else \
        (("FAILED", "1:0") if fired else ("TIMEOUT", "0:15"))
    state, exit_code = run.truth.get("slurm_state") or (state, exit_code)   # crash scenario (endings.py)
    start, end = clock.slurm(-1.0), clock.slurm(t_end)
    elapsed = int(t_end + 1.0)
    el = f"{elapsed // 3600:02d}:{elapsed % 3600 // 60:02d}:{elapsed % 60:02d}"
    jid = cluster.job_id
    folder = out / "slurm"
    folder.mkdir(parents=True, exist_ok=True)
    rows = ["JobID|JobName|Partition|State|ExitCode|Start|End|Elapsed|NNodes|NTasks|NodeList",
            f"{jid}|pretrain|gpu|{state}|{exit_code}|{start}|{end}|{el}|{cluster.nodes}|{cluster.world}|{cluster.nodelist()}",
            f"{jid}.batch|batch||{state}|{exit_code}|{start}|{end}|{el}|1|1|{cluster.hosts[0]}",
            f"{jid}.0|torchrun||{state}|{exit_code}|{start}|{end}|{el}|{cluster.nodes}|{cluster.nodes}|{cluster.nodelist()}"]
    (folder / "sacct.txt").write_text("\n".join(rows) + "\n")
    reason = "NonZeroExitCode" if state == "FAILED" else ("TimeLimit" if state == "TIMEOUT" else "None")
    sc = [f"JobId={jid} JobName=pretrain",
          "   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A",
          f"   JobState={state} Reason={reason} Dependency=(null)",
          f"   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode={exit_code}",
          f"   RunTime={el} TimeLimit=1-00:00:00 TimeMin=N/A",
          f"   StartTime={start} EndTime={end} Deadline=N/A",
          "   Partition=gpu AllocNode:Sid=login01:12345",
          f"   NodeList={cluster.nodelist()}",
          f"   BatchHost={cluster.hosts[0]}",
          f"   NumNodes={cluster.nodes} NumCPUs={cluster.nodes * 128} NumTasks={cluster.nodes} CPUs/Task=128",
          f"   TRES=cpu={cluster.nodes * 128},mem={cluster.nodes * 2000}G,node={cluster.nodes},gres/gpu={cluster.world}",
          "   Command=/home/alice/pretrain.sbatch",
          f"   StdOut=/home/alice/slurm-{jid}.out", ""]
    (folder / "scontrol-show-job.txt").write_text("\n".join(sc) + "\n")
