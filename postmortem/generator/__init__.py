"""Write realistic log folders of a multi-rank training job, with a "silent deadlock" story.

The model job (``DESIGN.md``): 5 nodes x 8 H20, TP1 PP1 EP8 DP40, Megatron-style training,
NCCL over RoCE (mlx5, GDRDMA), bootstrap on eth0, about 120 s per step. In the deadlock story
39 ranks enqueue a collective that one rank (the culprit) never enters, because it took a lazy
optimizer-state initialisation path; the others wait until their watchdog fires or Slurm
cancels the job.

Every line follows the real formats described in ``/work/shared/formats`` for the chosen PyTorch
era and NCCL version; the ``rungen`` modules hold one function per line kind. The output is
deterministic for a given ``RunSpec`` (``random.Random(seed)``, no wall clock).

Use::

    from postmortem.generator import RunSpec, generate_run
    truth = generate_run(Path("out/run1"), RunSpec(scenario="deadlock", culprit=17))

or ``postmortem-generate OUT --scenario deadlock --culprit 17 --ranks 40`` /
``python -m postmortem.generator OUT ...``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path

from .rungen.base import Clock, build_cluster, default_hosts, reset_order
from .rungen.eras import ERAS, era_for
from .rungen.c10d import CRASH_KINDS
from .rungen.endings import CRASH_ENDS
from .rungen.frameworks import FRAMEWORKS
from .rungen.layout import write_run
from .rungen.megatron import OOM_SITES
from .rungen.nccl import NcclVersion
from .rungen.nccl_topology import CONNECTIONS, FABRICS, INTRA, SUBSYSTEMS, subsys_names
from .rungen.story import Story

# NCCL variables the generator writes itself, from the other nccl_* fields.
MANAGED_NCCL_ENV = {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX",
                    "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE", "NCCL_CUMEM_ENABLE"}
SCENARIOS = ("deadlock", "healthy", "all-stuck", "desync-op", "desync-size", "crash", "missing-node")
LAUNCHERS = ("torchrun-logdir", "srun-per-gpu", "srun-torchrun")
GROUPS = ("default", "node")
FLIGHT_RECORDER = ("none", "pickle", "json")
NODE_FAULTS = ("xid79", "xid48", "xid94", "link-flap")


@dataclass
class RunSpec:
    nodes: int = 5
    gpus_per_node: int = 8
    hosts: list[str] | None = None          # default h20-node-01..
    scenario: str = "deadlock"              # "deadlock" | "healthy" | "all-stuck" | "desync-op" | "desync-size"
    culprit: int = 17                       # global rank that never enters (deadlock) or runs a different op/size (desync)
    op: str = "_ALLGATHER_BASE"             # WorkNCCL OpType the others wait in
    numel_in: int = 8069120
    numel_out: int | None = None            # default numel_in * group size for all-gather, else numel_in
    hang_seq: int = 7219                    # the SeqNum the waiting ranks are stuck in (default PG)
    group: str = "default"                  # "default" (all ranks) or "node" (hang inside the culprit node's EP group)
    torch_era: str = "2.8"                  # "2.1", "2.3", "2.4", "2.6", "2.8"
    launcher: str = "torchrun-logdir"       # "torchrun-logdir" | "srun-per-gpu" | "srun-torchrun"
    nccl_version: str = "2.21.5"            # 2.4.x and later: selects the shape of every NCCL line
    nccl_debug: bool = True                 # NCCL_DEBUG=INFO init output per rank
    nccl_fabric: str = "roce"               # "roce" | "ib" | "socket" (NCCL_IB_DISABLE=1) | "socket-nodev" | "ofi"
    nccl_gdr: bool = True                   # GPUDirect RDMA on the NET hops (ignored on sockets)
    nccl_pxn: bool = False                  # PXN: rings leave a node through the NIC of the GPU they entered at (2.12+)
    nccl_intra: str = "nvlink"              # "nvlink" | "pcie" | "direct" | "shm" | "indirect" (2.8+)
    nccl_cumem: bool = True                 # 2.18+: P2P/CUMEM (False: NCCL_CUMEM_ENABLE=0, P2P/IPC)
    nccl_shm_node: int | None = None        # node whose GPUs cannot P2P: its intra-node hops use SHM
    nccl_bootstrap_if: dict[int, str] = field(default_factory=dict)   # node -> "ifname[:addr]" (default eth0)
    nccl_nvls: bool = False                 # NVLink SHARP available (2.17+)
    nccl_connections: str = "rings"         # "rings": ring hops, rank-order rings; "full": varied rings, trees, p2p
    nccl_subsys: str | None = None          # NCCL_DEBUG_SUBSYS, e.g. "INIT,ENV,GRAPH,TUNING,COLL" (default per version)
    nccl_env: dict[str, str] = field(default_factory=dict)  # extra NCCL_* variables, e.g. NCCL_ALGO, NCCL_PROTO
    timeout_s: int = 600                    # collective timeout (Timeout(ms) in WorkNCCL)
    hang_duration_s: int = 18000            # how long the job hung before it was killed
    work_updates: bool = False              # TORCH_CPP_LOG_LEVEL=INFO periodic work update lines
    pyspy: bool = True                      # py-spy dumps of every rank taken during the hang
    attempts: int = 1                       # >1: earlier attempts crashed (CUDA OOM) and were restarted/requeued
    iterations_before_hang: int = 40
    step_s: float = 120.0
    start: str = "2026-07-24 08:00:00"      # job start (UTC)
    seed: int = 0
    node_hang_seq: int = 3841               # group="node": the SeqNum of the hung collective in the EP group
    # Flight Recorder dumps of every rank (postmortem/generator/rungen/flight_recorder.py); "none" keeps the
    # bundled samples byte-identical.
    flight_recorder: str = "none"           # "none" | "pickle" | "json"
    flight_recorder_prefix: str = "nccl_trace_rank_"   # TORCH_NCCL_DEBUG_INFO_TEMP_FILE's file-name part
    crash_kind: str = "oom"                 # attempts > 1: how earlier attempts crash ("oom" keeps the samples as they are)
    crash_end: str = "host-oom-kill"        # scenario="crash": how the culprit rank fails (postmortem/generator/rungen/endings.py)
    oom_site: str = "backward"              # crash_end="oom": where the CUDA OOM is raised (postmortem/generator/rungen/megatron.py)
    # Node and scheduler evidence (issue 5, postmortem/generator/rungen/node_logs.py); the defaults write nothing new.
    node_logs: bool = False                 # kernel logs, nvidia-smi -q, sacct/scontrol under node_logs/ and slurm/
    node_fault: str | None = None           # "xid79" | "xid48" | "xid94": the culprit's GPU fails just before the hang
    clock_skew_s: float = 0.0               # the skew node's host clock runs this many seconds ahead
    skew_node: int | None = None            # node index with the skewed clock (default: the culprit's node)
    fault_at_s: float = -0.35               # xid faults: seconds from the hung collective's start to the Xid
    flap_node: int | None = None            # node_fault="link-flap": node whose NIC flaps (default: nodes // 2)
    flap_nic: int | None = None             # node_fault="link-flap": the flapping NIC, mlx5_N (default 1)
    # Training framework whose log lines the ranks print (postmortem/generator/rungen/frameworks.py, issue 4);
    # "megatron" keeps the bundled samples byte-identical.
    framework: str = "megatron"             # "megatron" | "deepspeed" | "hf" | "torchtitan" | "lightning"
    # Config and hardware-tool files (postmortem/generator/rungen/config_files.py); off keeps the samples byte-identical.
    config_files: bool = False              # collect_env, pip freeze, sbatch, topo -m, nvidia-smi csv, nccl-tests
    perftest: bool = False                  # with config_files: hw/<host>/ib_send_bw.txt of every node (mlx5_0 to a peer)
    slow_nic_node: int | None = None        # with perftest: node whose ib_send_bw runs at a fifth of line rate
    missing_node: int | None = None         # scenario "missing-node": index of the node whose agent never starts
    # Per-node configuration drift (postmortem/generator/rungen/node_config.py); empty keeps the samples byte-identical.
    node_env: dict[int, dict[str, str]] = field(default_factory=dict)   # node -> variables only that node has
    node_nccl_version: dict[int, str] = field(default_factory=dict)     # node -> the NCCL release its ranks run
    network_fault: bool = True              # all-stuck: RoCE retry timeouts on one node (off: another cause)
    checkpoint_save_s: float = 41.3         # healthy: seconds the final checkpoint save takes (Megatron)
    nan_from_iteration: int | None = None   # NaN losses from this iteration on (postmortem/generator/rungen/numerics.py)
    # Profiles (postmortem/generator/rungen/nsys.py): nsys exports of every rank; off keeps the samples byte-identical.
    profile: bool = False                   # nsys/<rank>.sqlite: 24 profiled steps of every rank
    slow_rank: int | None = None            # with profile: the rank that starts every all-reduce slow_ms late
    slow_ms: float = 3.0
    # Every collective's NCCL COLL line (postmortem/generator/rungen/coll_trace.py, issue 11); off keeps the samples byte-identical.
    coll_trace: bool = False                # needs COLL in nccl_subsys

    def validate(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ValueError(f"scenario must be one of {', '.join(SCENARIOS)}, got {self.scenario!r}")
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {self.launcher!r}")
        if self.group not in GROUPS:
            raise ValueError(f"group must be one of {', '.join(GROUPS)}, got {self.group!r}")
        era_for(self.torch_era)
        world = self.nodes * self.gpus_per_node
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ValueError("nodes and gpus_per_node must be at least 1")
        self.validate_nccl()
        from .rungen.node_config import validate as validate_node_config
        validate_node_config(self)
        if self.hosts is not None and len(self.hosts) != self.nodes:
            raise ValueError(f"{len(self.hosts)} hosts given for {self.nodes} nodes")
        if self.scenario not in ("all-stuck", "healthy", "missing-node") and not 0 <= self.culprit < world:
            raise ValueError(f"culprit rank {self.culprit} is outside a world of {world} ranks; pass --culprit")
        if self.group == "node" and self.gpus_per_node < 2:
            raise ValueError("group='node' needs at least 2 GPUs per node")
        if self.nan_from_iteration is not None and not (2 <= self.nan_from_iteration <= self.iterations_before_hang
                                                        and self.framework == "megatron"):
            raise ValueError("nan_from_iteration must be 2..iterations_before_hang, with framework='megatron'")
        if self.attempts < 1 or self.iterations_before_hang < 1 or self.hang_seq < 10 or self.node_hang_seq < 10:
            raise ValueError("attempts and iterations_before_hang must be >= 1, hang sequence numbers >= 10")
        if self.checkpoint_save_s <= 0:
            raise ValueError("checkpoint_save_s must be positive")
        if self.step_s <= 0 or self.timeout_s <= 0 or self.hang_duration_s <= 0:
            raise ValueError("step_s, timeout_s and hang_duration_s must be positive")
        if self.framework not in FRAMEWORKS:
            raise ValueError(f"framework must be one of {', '.join(FRAMEWORKS)}, got {self.framework!r}")
        if self.crash_end not in CRASH_ENDS:
            raise ValueError(f"crash_end must be one of {', '.join(CRASH_ENDS)}, got {self.crash_end!r}")
        if self.oom_site not in OOM_SITES:
            raise ValueError(f"oom_site must be one of {', '.join(OOM_SITES)}, got {self.oom_site!r}")
        if self.crash_kind not in CRASH_KINDS:
            raise ValueError(f"crash_kind must be one of {', '.join(CRASH_KINDS)}, got {self.crash_kind!r}")
        if self.node_fault is not None and self.node_fault not in NODE_FAULTS:
            raise ValueError(f"node_fault must be one of {', '.join(NODE_FAULTS)}, got {self.node_fault!r}")
        if self.node_fault == "link-flap" and (self.scenario != "all-stuck" or self.nodes < 2
                                               or self.nccl_fabric not in ("roce", "ib")):
            raise ValueError("node_fault='link-flap' needs scenario='all-stuck', 2+ nodes and an IB/RoCE fabric")
        if self.flap_node is not None and not 0 <= self.flap_node < self.nodes:
            raise ValueError(f"flap_node {self.flap_node} is not a node of this {self.nodes}-node job")
        if self.flap_nic is not None and not 0 <= self.flap_nic < self.gpus_per_node:
            raise ValueError(f"flap_nic {self.flap_nic} is not a NIC of this node (one mlx5 per GPU)")
        if self.skew_node is not None and not 0 <= self.skew_node < self.nodes:
            raise ValueError(f"skew_node {self.skew_node} is not a node of this {self.nodes}-node job")
        if self.scenario == "missing-node":
            if self.nodes < 2 or self.launcher != "torchrun-logdir":
                raise ValueError("scenario missing-node needs at least 2 nodes and the torchrun-logdir launcher")
            if self.missing_node is None:
                self.missing_node = min(self.culprit // self.gpus_per_node, self.nodes - 1)
            if not 0 <= self.missing_node < self.nodes:
                raise ValueError(f"missing_node {self.missing_node} is not a node of this {self.nodes}-node job")
        elif self.missing_node is not None:
            raise ValueError("missing_node is only for --scenario missing-node")
        if self.slow_rank is not None and not (self.profile and 0 <= self.slow_rank < world and self.slow_ms > 0):
            raise ValueError("slow_rank needs --profile, a rank of this job and a positive slow_ms")
        from .rungen.coll_trace import validate as validate_coll_trace
        validate_coll_trace(self)
        if self.flight_recorder not in FLIGHT_RECORDER:
            raise ValueError(f"flight_recorder must be one of {', '.join(FLIGHT_RECORDER)}, got {self.flight_recorder!r}")
        if not self.flight_recorder_prefix or "/" in self.flight_recorder_prefix or self.flight_recorder_prefix[-1].isdigit():
            raise ValueError("flight_recorder_prefix must be a file-name prefix that does not end in a digit")

    def validate_nccl(self) -> None:
        version = NcclVersion.parse(self.nccl_version)
        for name, value, allowed in (("nccl_fabric", self.nccl_fabric, FABRICS), ("nccl_intra", self.nccl_intra, INTRA),
                                     ("nccl_connections", self.nccl_connections, CONNECTIONS)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        if self.nccl_pxn and not (version.at_least(12) and self.nccl_fabric in ("roce", "ib")
                                  and self.nccl_intra in ("nvlink", "indirect")):
            raise ValueError("nccl_pxn needs NCCL 2.12+, an IB/RoCE fabric and NVLink inside the node")
        if self.nccl_intra == "indirect" and not (version.at_least(8) and self.gpus_per_node % 2 == 0):
            raise ValueError("nccl_intra='indirect' needs NCCL 2.8+ and an even number of GPUs per node")
        if self.nccl_nvls and not version.at_least(17):
            raise ValueError("nccl_nvls needs NCCL 2.17+")
        if self.nccl_shm_node is not None and not 0 <= self.nccl_shm_node < self.nodes:
            raise ValueError(f"nccl_shm_node {self.nccl_shm_node} is not a node of this {self.nodes}-node job")
        for node, value in self.nccl_bootstrap_if.items():
            if not (isinstance(node, int) and 0 <= node < self.nodes) or not value or not value.split(":")[0]:
                raise ValueError(f"nccl_bootstrap_if: {node}={value!r} must map a node index to 'ifname[:addr]'")
        if self.nccl_subsys is not None:
            names = subsys_names(self.nccl_subsys)[1]
            if not names or names - set(SUBSYSTEMS) - {"ALL"}:
                raise ValueError(f"nccl_subsys: unknown subsystem in {self.nccl_subsys!r} "
                                 f"(known: {', '.join(SUBSYSTEMS)}, ALL)")
        for key in self.nccl_env:
            if not key.startswith("NCCL_") or key in MANAGED_NCCL_ENV:
                raise ValueError(f"nccl_env: {key!r} is not an NCCL_ variable the generator leaves to you "
                                 f"({', '.join(sorted(MANAGED_NCCL_ENV))} follow from the other nccl_* fields)")


def generate_run(out_dir: Path, spec: RunSpec, write_truth: bool = False) -> dict:
    """Write the run folder and return the ground truth (written to ``.truth.json`` only if asked)."""
    spec.validate()
    reset_order()
    hosts = spec.hosts or default_hosts(spec.nodes)
    cluster = build_cluster(hosts, spec.gpus_per_node)
    if spec.scenario == "missing-node":
        import random

        from .rungen.rendezvous import write_missing_node
        return write_missing_node(Path(out_dir), spec, cluster, era_for(spec.torch_era), Clock(spec.start),
                                  random.Random(spec.seed))
    story = Story(spec, cluster, era_for(spec.torch_era), NcclVersion.parse(spec.nccl_version), Clock(spec.start))
    run = story.build()
    if spec.crash_kind != "oom":
        _swap_crash(run, spec)
    if spec.coll_trace:
        from .rungen.coll_trace import add_coll_trace
        add_coll_trace(story, run)
    write_run(run, Path(out_dir), spec.launcher, write_truth)
    if spec.config_files:
        from .rungen.config_files import write_config_files
        write_config_files(Path(out_dir), spec, cluster, era_for(spec.torch_era))
    # Flight Recorder dumps: written after the logs, from the story's progress (no rng draws).
    from .rungen.flight_recorder import write_dumps
    write_dumps(run, spec, Clock(spec.start), Path(out_dir))
    if spec.profile:
        from .rungen.nsys import write_profiled_run
        write_profiled_run(Path(out_dir), world=cluster.world, steps=24, late_rank=spec.slow_rank,
                           delay_ns=int(spec.slow_ms * 1e6), hosts=hosts, gpus_per_node=spec.gpus_per_node,
                           gpu_name="NVIDIA H20", base_epoch_ns=int(Clock(spec.start).at(600).timestamp()) * 10**9)
    if spec.node_logs or spec.node_fault:
        from .rungen.node_logs import write_node_logs
        fault = write_node_logs(run, spec, Clock(spec.start), Path(out_dir))
        if fault:
            run.truth["node_fault"] = fault
            if write_truth:
                import json
                (Path(out_dir) / ".truth.json").write_text(json.dumps(run.truth, indent=2, sort_keys=True) + "\n")
    return run.truth


def _swap_crash(run, spec: RunSpec) -> None:
    """Earlier attempts crash with ``spec.crash_kind`` instead of the story's CUDA OOM: the OOM
    line of the victim's traceback is replaced (same time and prefix), with the kind's lines
    before and after it. The exit code stays 1 (a Python exception in every kind)."""
    from .rungen.base import Line, next_order
    from .rungen.c10d import crash_text

    before, exception, after = crash_text(spec.crash_kind, spec.torch_era)
    for attempt in run.attempts[:-1]:
        for proc in attempt.procs:
            for i, line in enumerate(proc.lines):
                at = line.text.find("CUDA out of memory. Tried to allocate")
                if at < 0:
                    continue
                prefix = line.text[:at].rsplit(" ", 1)[0] if line.text.startswith("[rank") else ""
                prefix = prefix[:prefix.index("]:") + 2] + " " if prefix.startswith("[rank") else ""
                line.text = prefix + exception
                start = next(j for j in range(i, -1, -1) if "Traceback (most recent call last)" in proc.lines[j].text)
                proc.lines[start:start] = [Line(line.t - 0.001, next_order(), line.stream, b)  # device printf: no prefix
                                           for b in before]
                proc.lines.extend(Line(line.t, next_order(), line.stream, prefix + a) for a in after)
                break
    for failure in run.truth.get("earlier_failures", []):
        failure["kind"] = spec.crash_kind


# -- command line ------------------------------------------------------------------------------

_HELP = {
    "node_env": "NODE:KEY=VALUE (repeatable): a variable only that node has (a stale shell profile), in its env dump "
                "and, for NCCL_* variables, in its ranks' 'set by environment' lines, e.g. 1:NCCL_PROTO=Simple",
    "node_nccl_version": "NODE=VERSION (repeatable): the NCCL release that node's ranks run (their line shapes), e.g. "
                         "2=2.18.3; it must sit on the same side of 2.18, 2.22 and 2.23 as --nccl-version",
    "network_fault": "all-stuck: write RoCE retry timeouts on one node's NICs (the network fault behind the hang); "
                     "--no-network-fault when the hang has another cause (--node-env, --node-nccl-version)",
    "missing_node": "with --scenario missing-node: index of the node whose torchrun agent never starts (default: "
                    "the culprit rank's node); the other agents end with RendezvousTimeoutError",
    "config_files": "also write config/ (collect_env, pip freeze, the sbatch script) and hw/ (nvidia-smi topo -m "
                    "and --query-gpu csv per node, an all_reduce_perf run)",
    "perftest": "with --config-files: also write hw/<host>/ib_send_bw.txt, perftest's ib_send_bw --report_gbits "
                "client run on mlx5_0 of every node against the next node",
    "slow_nic_node": "with --perftest: index of the node whose ib_send_bw averages a fifth of the 400 Gb/s line rate "
                     "(RoCE without PFC/ECN on its switch port)",
    "scenario": "story of the run: deadlock (one rank never enters the collective the others wait in), "
                "healthy (trains to the end), all-stuck (everyone waits: a network fault), desync-op / "
                "desync-size (the culprit runs another op / another size at the same SeqNum), crash (the culprit "
                "fails mid-training, --crash-end says how; the others are torn down or time out), missing-node "
                "(one node's torchrun agent never starts; the others end with RendezvousTimeoutError)",
    "culprit": "global rank that never enters (deadlock) or runs a different op/size (desync); "
               "default 17, or world/2+1 when the world has 17 ranks or fewer",
    "op": "WorkNCCL OpType the waiting ranks are stuck in (e.g. _ALLGATHER_BASE, ALLREDUCE, BROADCAST)",
    "numel_in": "NumelIn of the hung collective",
    "numel_out": "NumelOut of the hung collective (default: NumelIn x group size for all-gathers, "
                 "NumelIn / group size for reduce-scatters, else NumelIn)",
    "hang_seq": "SeqNum of the hung collective in the default PG (the waiting ranks' last enqueued work)",
    "node_hang_seq": "with --group node: SeqNum of the hung collective in the culprit node's EP group",
    "group": "default: the hang is in the default PG (all ranks); node: in the culprit node's 8-rank "
             "EXPERT_MODEL_PARALLEL_GROUP, and the other ranks then wait in a later default-PG all-reduce",
    "torch_era": f"PyTorch release whose log formats to write ({', '.join(ERAS)}; 2.2, 2.5, 2.7, 2.9 map to "
                 "the nearest): glog header, [rankN]: prefix, PG prefix, status-line wording, dump signal",
    "launcher": "torchrun-logdir: per-rank files under logs/<host>/<run>/attempt_N/<local_rank>/; "
                "srun-per-gpu: everything in slurm-4242.out behind 'rank: ' labels; "
                "srun-torchrun: slurm-4242.out with 'node: [defaultN]:' prefixes",
    "nccl_version": "NCCL release whose lines to write (2.4.x to 2.30.x), e.g. 2.7.8, 2.12.12, 2.21.5, 2.28.3",
    "nccl_debug": "write NCCL_DEBUG=INFO init output for every rank",
    "nccl_fabric": "inter-node transport: roce / ib (NET/IB over mlx5, one NIC per GPU), socket (NCCL_IB_DISABLE=1), "
                   "socket-nodev (hosts without IB devices), ofi (AWS Libfabric plugin, one EFA NIC per two GPUs)",
    "nccl_gdr": "GPUDirect RDMA on NET hops (/GDRDMA); ignored on sockets",
    "nccl_pxn": "PXN: a ring leaves each node through the NIC of the GPU it entered at (NET/IB/n(rank)); 2.12+",
    "nccl_intra": "intra-node transport: nvlink (P2P .../read), pcie (P2P without /read), direct (P2P/direct pointer), "
                  "shm (NCCL_P2P_DISABLE=1: SHM), indirect (two NVLink islands: P2P/indirect/k between them)",
    "nccl_cumem": "2.18+: P2P over cuMem (P2P/CUMEM); --no-nccl-cumem: NCCL_CUMEM_ENABLE=0, P2P/IPC",
    "nccl_shm_node": "index of a node whose GPUs cannot P2P: its intra-node hops use SHM, with NCCL's "
                     "'P2P is disabled' (2.12+) / 'Could not enable P2P' lines",
    "nccl_bootstrap_if": "NODE=IFNAME[:ADDR] (repeatable): the interface a node bootstraps on, e.g. 2=docker0:172.17.0.2 "
                         "(default eth0 with the node's address)",
    "nccl_nvls": "NVLink SHARP available: NVLS lines and nvls channels (2.17+)",
    "nccl_connections": "rings: ring hops only, every ring in rank order (the default output); full: odd channels "
                        "traverse each node in another order, tree hops, lazy p2p connections (2.12+)",
    "nccl_subsys": "NCCL_DEBUG_SUBSYS, e.g. INIT,ENV,GRAPH,TUNING,COLL (default: the version's default mask)",
    "nccl_env": "KEY=VALUE (repeatable): an NCCL_* variable every rank has set, e.g. NCCL_ALGO=Ring, NCCL_PROTO=Simple",
    "timeout_s": "collective timeout in seconds (Timeout(ms) in WorkNCCL); the watchdog fires when it is "
                 "shorter than --hang-duration-s, otherwise the hang is silent until Slurm cancels the job",
    "hang_duration_s": "seconds between the start of the hang and the job being cancelled",
    "work_updates": "TORCH_CPP_LOG_LEVEL=INFO: PG init banners and the per-minute 'NCCL Work update "
                    "periodically' lines of every rank",
    "pyspy": "write a py-spy dump of every rank taken during the hang (deadlock and all-stuck only)",
    "attempts": "number of attempts; earlier ones crash with a CUDA OOM on one rank and are restarted "
                "(torchrun, attempt_N folders) or requeued (srun launchers, appended to the same file)",
    "iterations_before_hang": "training iterations completed before the hang (healthy runs train 20 more)",
    "step_s": "seconds per training iteration",
    "checkpoint_save_s": "healthy runs: seconds the final Megatron checkpoint save takes (default 41.3; a slow storage tier: sample checkpoint-stall)",
    "nan_from_iteration": "Megatron iteration lines print a NaN step (loss left out, grad norm nan, one NaN "
                          "iteration) from this iteration on; with --node-fault xid48/xid94 the Xid comes during it",
    "start": "job start, 'YYYY-MM-DD HH:MM:SS' (UTC)",
    "seed": "random seed; the same seed and options write identical bytes",
    "nodes": "number of nodes (use --ranks to give the world size instead)",
    "gpus_per_node": "GPUs (ranks) per node",
    "hosts": "comma-separated host names, one per node (default h20-node-01, h20-node-02, ...)",
    "flight_recorder": "write a Flight Recorder dump of every rank of the last attempt under flight_recorder/<host>/: "
                       "pickle (as torch writes it) or json (the _dump_nccl_trace_json shape); none: no dumps",
    "node_logs": "write node and scheduler evidence: kernel logs (dmesg, journalctl -k), nvidia-smi -q, sacct and "
                 "scontrol output (node_logs/<host>/, slurm/)",
    "node_fault": "a node fault behind the hang: xid79 (the culprit's GPU falls off the bus), xid48, xid94; "
                  "link-flap (with --scenario all-stuck: one node's NIC port flaps, IB completion errors on both "
                  "sides); implies --node-logs",
    "clock_skew_s": "seconds the skew node's host clock runs ahead (its journal and its ranks' c10d times)",
    "skew_node": "index of the node with the skewed clock (default: the culprit's node)",
    "fault_at_s": "with an xid node fault: seconds from the hung collective's start to the Xid (negative: before it; "
                  "the watchdog fires timeout_s after that start)",
    "flap_node": "with --node-fault link-flap: index of the node whose NIC port flaps (default: nodes / 2)",
    "flap_nic": "with --node-fault link-flap: the flapping NIC, mlx5_N, the NIC of local GPU N (default 1)",
    "framework": "training framework whose log lines the ranks print: megatron, deepspeed, hf (Trainer), "
                 "torchtitan, lightning",
    "crash_end": f"with --scenario crash: how the culprit rank fails ({', '.join(CRASH_ENDS)}); the OOM-killer "
                 "endings SIGKILL its process (kernel log lines with --node-logs), the others raise on that rank",
    "oom_site": "with --crash-end oom: where the CUDA OOM is raised: backward (a MoE layer's backward pass) or "
                "optimizer-init (the optimizer step allocating Adam's state the first time it reaches it)",
    "crash_kind": f"with --attempts > 1: how the earlier attempts crash ({', '.join(CRASH_KINDS)})",
    "profile": "write an Nsight Systems SQLite export of every rank (nsys/rank_N.sqlite, 24 steps, 10 minutes in)",
    "slow_rank": "with --profile: the rank that starts every all-reduce --slow-ms late (a straggler)",
    "slow_ms": "with --slow-rank: milliseconds the slow rank is late at every all-reduce",
    "coll_trace": "write the NCCL COLL line of every collective every rank issues, every iteration (per layer: "
                  "the expert-group router AllReduce, the gradient ReduceScatter and parameter AllGather of the "
                  "distributed optimizer; the grad-norm and loss AllReduce), about 18 kB per rank per iteration; "
                  "needs COLL in --nccl-subsys",
    "flight_recorder_prefix": "file-name prefix of the dumps (TORCH_NCCL_DEBUG_INFO_TEMP_FILE's last part); the rank follows",
}


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show defaults, except the "None" of options whose default is derived (the help says how)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False:
            return action.help or ""
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="postmortem-generate",
        description="Write a realistic log folder of a multi-rank Megatron training job (NCCL INFO, "
                    "c10d watchdog lines, torchrun/Slurm output, py-spy dumps, env dumps) with a "
                    "silent-deadlock story as parameters. Prints the ground truth as JSON.",
        formatter_class=_HelpFormatter)
    parser.add_argument("out", type=Path, help="folder to write the run into (created if missing)")
    parser.add_argument("--ranks", type=int, help="world size; sets --nodes to ranks / --gpus-per-node")
    parser.add_argument("--write-truth", action="store_true",
                        help="also write the ground truth to OUT/.truth.json (hidden from the analyzer)")
    defaults = RunSpec()
    for f in fields(RunSpec):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        if f.name == "hosts":
            parser.add_argument(flag, type=lambda s: s.split(","), default=None, help=_HELP[f.name])
        elif f.name in ("culprit", "nccl_shm_node", "skew_node", "flap_node", "flap_nic", "missing_node",
                        "slow_rank", "nan_from_iteration", "slow_nic_node"):
            parser.add_argument(flag, type=int, default=None, help=_HELP[f.name])
        elif f.name == "node_fault":
            parser.add_argument(flag, default=None, choices=NODE_FAULTS, help=_HELP[f.name])
        elif f.name == "nccl_subsys":
            parser.add_argument(flag, default=None, help=_HELP[f.name])
        elif f.name == "node_env":
            parser.add_argument(flag, action="append", default=None, metavar="NODE:KEY=VALUE", help=_HELP[f.name])
        elif f.name in ("nccl_bootstrap_if", "nccl_env", "node_nccl_version"):
            parser.add_argument(flag, action="append", type=_key_value, default=None, metavar="KEY=VALUE",
                                help=_HELP[f.name])
        elif isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=_HELP[f.name])
        elif f.name == "numel_out":
            parser.add_argument(flag, type=int, default=None, help=_HELP[f.name])
        else:
            choices = {"scenario": SCENARIOS, "launcher": LAUNCHERS, "group": GROUPS, "nccl_fabric": FABRICS,
                       "flight_recorder": FLIGHT_RECORDER, "crash_kind": CRASH_KINDS, "framework": FRAMEWORKS,
                       "crash_end": CRASH_ENDS, "oom_site": OOM_SITES,
                       "nccl_intra": INTRA, "nccl_connections": CONNECTIONS}.get(f.name)
            parser.add_argument(flag, type=type(default), default=default, choices=choices, help=_HELP[f.name])
    return parser


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def spec_from_args(args: argparse.Namespace) -> RunSpec:
    values = {f.name: getattr(args, f.name) for f in fields(RunSpec)}
    values["nccl_env"] = dict(values["nccl_env"] or [])
    from .rungen.node_config import parse_node_env
    values["node_env"] = parse_node_env(values["node_env"])
    try:
        values["node_nccl_version"] = {int(node): value for node, value in values["node_nccl_version"] or []}
    except ValueError:
        raise ValueError("--node-nccl-version takes NODE=VERSION with a node index") from None
    try:
        values["nccl_bootstrap_if"] = {int(node): value for node, value in values["nccl_bootstrap_if"] or []}
    except ValueError:
        raise ValueError("--nccl-bootstrap-if takes NODE=IFNAME[:ADDR] with a node index") from None
    if args.ranks is not None:
        if args.ranks % args.gpus_per_node:
            raise ValueError(f"--ranks {args.ranks} is not a multiple of --gpus-per-node {args.gpus_per_node}")
        values["nodes"] = args.ranks // args.gpus_per_node
    if values["culprit"] is None:
        world = values["nodes"] * values["gpus_per_node"]
        values["culprit"] = 17 if world > 17 else world // 2 + 1 if world > 1 else 0
    return RunSpec(**values)


def main(argv: list[str] | None = None) -> int:
    import json

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        spec = spec_from_args(args)
        truth = generate_run(args.out, spec, write_truth=args.write_truth)
    except ValueError as error:
        parser.error(str(error))
    print(json.dumps(truth, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
