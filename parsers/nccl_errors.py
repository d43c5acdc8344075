"""What NCCL's stated errors mean: one entry per WARN or error text, with its cause and its fix.

The data beside the line catalogue (``postmortem.parsers.nccl_catalogue``): each ``Cause`` names an
error NCCL states -- in a ``NCCL WARN`` line (``docs/formats/nccl.md`` sections 3.2, 3.10-3.13) or
in the text PyTorch wraps around NCCL's result (``NCCL error in: ..., unhandled system
error, NCCL version X`` / ``ncclSystemError: ...`` / ``Last error:`` + the last WARN text,
``docs/formats/pytorch-failures.md`` section 4.1) -- with:

``name``         a stable id (``duplicate_rank``), the finding's ``details.cause``;
``error_class``  the coarse class other rules key on (``events.error_class`` of WARN rows);
``pattern``      a regex on the message (the text after ``NCCL WARN``, or the wrapped text);
``src``          a regex on NCCL's ``file:line`` the WARN must come from, when the text alone
                 is ambiguous (``Cuda failure 'invalid argument'`` in ``transport/nvls.cc``);
``versions``     the releases that print it (nccl.md, tags checked);
``meaning``      what it says happened, in one phrase;
``action``       what to do about it;
``role``         ``cause`` (states a root cause on the process that printed it),
                 ``consequence`` (a reaction to another failure: a peer went away, a proxy
                 operation failed because of an earlier error), ``result`` (only NCCL's
                 result code: the cause is in the process's own WARN lines or ``Last error``),
                 ``harmless`` (printed on healthy hosts too);
``where``        where the problem is: ``printer`` (the host that printed it), ``peer`` (the
                 host or rank it names), ``link`` (between the two), ``job`` (how the job was
                 launched or configured);
``category``     the report's category (``config``, ``network``, ``crash``, ``hardware``);
``samples``      message texts written from the format strings of the reference (not copied
                 from logs); ``tests/test_nccl_errors.py`` checks each is classified as its
                 own cause.

First match wins (specific before loose). ``classify`` runs the catalogue over a column of
messages at once (one vectorised pass per entry, no per-line Python); ``fields`` takes the
peer rank, peer address, errno text, result code and byte counts out of them, and
``ERRNO`` decodes a ``strerror`` text to its errno.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from postmortem.parsers.ascii_text import rx

@dataclass(frozen=True)
class Cause:
    name: str
    error_class: str
    pattern: str
    versions: str
    meaning: str
    action: str
    role: str = "cause"
    where: str = "printer"
    category: str = "config"
    src: str | None = None
    samples: tuple[str, ...] = field(default_factory=tuple)
    severity: str = "error"

    @property
    def title(self) -> str:
        return TITLES.get(self.name, self.name.replace("_", " "))


_RESTART = "the other ranks' errors follow from it"

CAUSES: list[Cause] = [
    # -- network: IB / RoCE verbs (section 3.11) -------------------------------------------------
    Cause("ib_completion_error", "ib_completion_error", r"Got completion (?:from peer \S+ )?with (?:error|status)",
          "2.4-2.30",
          "an RDMA work request failed (status 12 = transport retry counter exceeded: a timeout between the two "
          "NICs; 5 = flushed after an earlier error)",
          "Check the link between the two NICs (ibstat, the switch port, cables); for RoCE the GID index "
          "(NCCL_IB_GID_INDEX) and routing; raise NCCL_IB_TIMEOUT for a lossy fabric.",
          where="link", category="network",
          samples=("NET/IB : Got completion from peer 10.1.0.2<40123> with status=12 opcode=0 len=0 vendor err 129 (Send) "
                   "localGid ::ffff:10.1.0.1 remoteGids::ffff:10.1.0.2",
                   "NET/IB : Got completion with error 12, opcode 1, len 32768, vendor err 129")),
    Cause("ib_async_event", "ib_async_event", r"async (?:fatal )?(?:event|error)", "2.4-2.30",
          "the NIC reported an asynchronous port or device error (port down, device fatal)",
          "Look at the NIC on this node: ibstat (port state), the kernel log (mlx5_core), the switch port.",
          category="hardware",
          samples=("NET/IB : mlx5_0:1 async fatal event: local catastrophic error",
                   "NET/IB : Got async error event: port error")),
    Cause("ib_modify_qp", "ib_modify_qp", r"ibv_modify_qp failed", "2.4-2.30",
          "RDMA queue pair setup failed: the two NICs cannot reach each other (for RoCE: wrong GID index, no route "
          "between the GIDs' subnets, a VLAN/PFC mismatch)",
          "For RoCE set NCCL_IB_GID_INDEX to the RoCEv2 GID of the routable address (show_gids), check the route "
          "between the NICs' subnets and the switch configuration; for IB check the subnet manager.",
          where="link", category="network",
          samples=("Call to ibv_modify_qp failed with error Network is unreachable",
                   "Call to ibv_modify_qp failed with error Invalid argument")),
    Cause("ib_incompatible", "ib_incompatible", r"Attempted to connect incompatible devices", "2.2x",
          "an IB NIC and a RoCE NIC were paired in one connection",
          "Select NICs of one link type with NCCL_IB_HCA on every node.",
          where="job", category="config",
          samples=("NET/IB : Attempted to connect incompatible devices: [0]mlx5_0:1/IB and [1]mlx5_1:1/RoCE. "
                   "Try selecting NICs of only one link type using NCCL_IB_HCA",)),
    Cause("ib_verbs_error", "ib_verbs", r"Call to ibv_\w+ failed|ibv_\w+ failed|NET/IB : Unable to|Failed to open device",
          "2.4-2.30",
          "an RDMA verbs call failed (device, memory registration or queue pair resources)",
          "Check the RDMA device on this node (ibv_devinfo, ulimit -l for locked memory, the kernel log) and that "
          "the container sees /dev/infiniband.",
          category="network",
          samples=("Call to ibv_reg_mr failed with error Cannot allocate memory",
                   "Call to ibv_create_qp failed with error No space left on device")),

    # -- sizes: ranks disagree ------------------------------------------------------------------
    Cause("ib_size_mismatch", "size_mismatch", r"collective mismatch error|posted incorrect receive info", "2.4-2.2x",
          "the ranks on either side of an IB connection disagree on a message size: mismatched collectives, NCCL "
          "versions or NCCL_PROTO/NCCL_ALGO between ranks",
          "Compare the ranks' collective calls (TORCH_DISTRIBUTED_DEBUG=DETAIL, NCCL_DEBUG_SUBSYS=COLL) and "
          "their NCCL versions and NCCL_* settings.",
          where="job", category="config",
          samples=("NET/IB : req 3/8 tag 7 peer 10.1.0.2<40123> collective mismatch error, local size 4096 remote size 2048",)),
    Cause("socket_truncated", "size_mismatch", r"NET/Socket : (?:peer \S+ )?message truncated", "2.4-2.30",
          "the socket transport received a bigger message than the receive posted: the ranks disagree on a size "
          "(mismatched collectives or NCCL_PROTO/NCCL_ALGO between ranks)",
          "Compare the ranks' collective calls and sizes (NCCL_DEBUG_SUBSYS=COLL, TORCH_DISTRIBUTED_DEBUG=DETAIL) "
          "and their NCCL_* settings.",
          where="job", category="config",
          samples=("NET/Socket : peer 10.0.0.12<48213> message truncated : receiving 4194304 bytes instead of 524288. "
                   "If you believe your socket network is in a healthy state, there may be a mismatch in collective "
                   "sizes or environment settings (e.g. NCCL_PROTO, NCCL_ALGO) between ranks",)),
    Cause("bootstrap_truncated", "size_mismatch", r"Message truncated : received \d+ bytes instead of \d+", "2.4-2.30",
          "a bootstrap message was longer than expected (Message truncated): the ranks disagree on what they "
          "exchange -- different NCCL versions or settings between ranks, or two communicators mixed up (also a "
          "known intermittent 2.19.x bug during lazy p2p connection, nccl#1176)",
          "Check that every rank runs the same NCCL build and NCCL_* settings and joins the same communicators in "
          "the same order; with NCCL 2.19.x, try another release.",
          where="job", category="config",
          samples=("Message truncated : received 256 bytes instead of 4",)),

    # -- bootstrap and interfaces (section 3.2) ---------------------------------------------------
    Cause("duplicate_rank", "bootstrap_mismatch", r"rank \d+ of \d+ ranks has already checked in", "2.4-2.30",
          "two processes claimed the same rank of one communicator: a duplicated launch, a wrong RANK / "
          "LOCAL_RANK environment, or two jobs sharing one rendezvous port (MASTER_PORT / NCCL_COMM_ID)",
          "Check that the job started each rank once (no second launcher on the node, no leftover process from an "
          "earlier run) and that concurrent jobs on the same host use different MASTER_PORT / NCCL_COMM_ID.",
          where="job", category="config",
          samples=("Bootstrap Root : rank 1 of 8 ranks has already checked in",)),
    Cause("bootstrap_rank_count", "bootstrap_mismatch", r"Bootstrap Root : mismatch", "2.4-2.30",
          "the processes that reached the bootstrap root disagree on the communicator's size: two jobs or two "
          "communicators share one rendezvous",
          "Give each job its own MASTER_PORT / NCCL_COMM_ID; check WORLD_SIZE is the same on every rank.",
          where="job", category="config",
          samples=("Bootstrap Root : mismatch in rank count from procs 8 : 16",
                   "Bootstrap Root : mismatch in info from procs, nranks 16 vs 8, nroots 1 vs 1, iroot 0 vs 0")),
    Cause("invalid_comm_id", "bootstrap_mismatch", r"Invalid NCCL_COMM_ID", "2.4-2.30",
          "NCCL_COMM_ID is not in the ip:port form", "Set NCCL_COMM_ID=<ip>:<port> (or unset it).",
          samples=("Invalid NCCL_COMM_ID, please use format: <ipv4>:<port> or [<ipv6>]:<port> or <hostname>:<port>",)),
    Cause("no_socket_interface", "no_interface", r"no socket interface found", "2.4-2.30",
          "NCCL found no network interface to bootstrap on: NCCL_SOCKET_IFNAME names no interface of this host "
          "(or every interface was excluded)",
          "Set NCCL_SOCKET_IFNAME to an interface this host has (ip -br addr; a prefix such as eth matches eth0, "
          "=eth0 is exact, ^docker0,lo excludes), or unset it.",
          samples=("Bootstrap : no socket interface found",)),
    Cause("no_subnet_interface", "no_interface", r"No interface found in the same subnet", "2.4-2.30",
          "no interface of this host is in the subnet of the rendezvous address (NCCL_COMM_ID / MASTER_ADDR)",
          "Make NCCL_COMM_ID / MASTER_ADDR an address this host can reach on a local interface; run containers "
          "with --network=host.",
          samples=("Net : No interface found in the same subnet as remote address 10.1.1.9<27030>",)),
    Cause("no_listening_interface", "no_interface", r"No usable listening interface", "2.4-2.30",
          "the socket transport found no interface to listen on", "Set NCCL_SOCKET_IFNAME to a usable interface.",
          samples=("NET/Socket : No usable listening interface found",)),
    Cause("bind_failed", "bind_failed", r"Call to bind failed", "2.4-2.30",
          "NCCL could not bind the bootstrap address: it is not an address of this host (wrong interface or IP)",
          "Bootstrap on an interface that holds the address (NCCL_SOCKET_IFNAME), or run containers with "
          "--network=host.",
          samples=("Call to bind failed : Cannot assign requested address",)),
    Cause("connect_failed", "socket_error",
          r"Connect to (?:rank \d+|\S+) failed|connect to \S+ returned .*exceeded error retry|Call to connect failed",
          "2.4-2.30",
          "a TCP connection to another rank could not be made (refused, timed out, unreachable): that rank was not "
          "listening (it died or never started) or the address is not reachable",
          "Check the peer rank's own log for an earlier failure; check that the address NCCL connected to is "
          "reachable from this host (firewall, the bootstrap interface, NCCL_SOCKET_IFNAME).",
          where="peer", category="network",
          samples=("socketStartConnect: Connect to 10.1.0.2<43215> failed : Connection refused",
                   "socketStartConnect: connect to 10.1.0.2<43215> returned Connection timed out, exceeded error retry "
                   "count after 35 attempts",
                   "Connect to rank 3 failed : Connection refused",
                   "Call to connect failed : Connection refused")),
    Cause("version_mismatch", "version_mismatch", r"Mismatched NCCL version", "2.23-2.30",
          "the ranks run different NCCL versions", "Run one NCCL build on every node (container image, LD_LIBRARY_PATH).",
          where="job", category="config",
          samples=("Mismatched NCCL version detected : rank 0 version 22105 rank 8 version 21905",)),

    # -- memory, shared memory, NVLS ---------------------------------------------------------------
    Cause("out_of_memory", "out_of_memory", r"out of memory|Failed to CUDA (?:calloc|malloc|host alloc)", "2.4-2.30",
          "GPU memory ran out while NCCL allocated its buffers (connection buffers per peer and channel)",
          "Leave NCCL room: lower the model's memory peak or PYTORCH_CUDA_ALLOC_CONF caching, fewer channels "
          "(NCCL_MAX_NCHANNELS) or a smaller NCCL_BUFFSIZE.",
          category="crash",
          samples=("Cuda failure 'out of memory'", "Failed to CUDA calloc 6291456 bytes")),
    Cause("shm_too_small", "shm_failed", r"failed to extend \S+ to \d+ bytes|Error while creating shared memory segment",
          "2.4-2.30",
          "NCCL could not create its shared-memory segment in /dev/shm: /dev/shm is too small (a container's "
          "default is 64 MB)",
          "Give the container a larger /dev/shm (docker --shm-size=16g or --ipc=host; Kubernetes: an emptyDir "
          "with medium Memory mounted at /dev/shm).",
          samples=("Error: failed to extend /dev/shm/nccl-8bZ3Cd to 9637892 bytes",
                   "Error while creating shared memory segment /dev/shm/nccl-8bZ3Cd (size 9637888)")),
    Cause("nvls_bind_failed", "nvls_failed", r"NVLink SHARP|MNNVL .*not working|NCCL_NVLS_ENABLE has been set", "2.17-2.30",
          "NVLink SHARP (NVLS) multicast memory could not be set up: the Fabric Manager / NVSwitch multicast is "
          "not working (or IMEX for multi-node NVLink)",
          "Check the Fabric Manager service and nvidia-smi -q (Fabric state) on this node; test multicast with "
          "nvbandwidth; as a workaround set NCCL_NVLS_ENABLE=0.",
          category="hardware",
          samples=("Failed to bind NVLink SHARP (NVLS) Multicast memory of size 1073741824 : CUDA error 801 "
                   "'operation not supported'.",
                   "MNNVL (cliqueSize 8) is available but not working on this system. Check the IMEX channel "
                   "configuration")),
    Cause("nvls_cuda_failure", "nvls_failed", r"Cuda failure", "2.17-2.30",
          "a CUDA call failed while NCCL set up NVLink SHARP (NVLS): usually the Fabric Manager / NVSwitch "
          "multicast is not working on this node (maintainers, nccl#1672)",
          "Set NCCL_NVLS_ENABLE=0 to run without NVLS; check the Fabric Manager service, nvidia-smi -q (Fabric "
          "state) and an nvbandwidth multicast test on this node.",
          category="hardware", src=r"nvls",
          samples=("Cuda failure 1 'invalid argument'",)),
    Cause("cuda_failure", "cuda_error", r"Cuda failure|CUDA error|cuda\w* failed", "2.4-2.30",
          "a CUDA call NCCL made failed",
          "The error text says which: 'invalid argument' / 'invalid device' in transport setup often means a CUDA "
          "or driver build NCCL does not support (try another NCCL release); an 'illegal address' is a fault of "
          "the application's kernels.",
          category="crash",
          samples=("Cuda failure 'invalid argument'", "Cuda failure 700 'an illegal memory access was encountered'")),
    Cause("duplicate_gpu", "duplicate_gpu", r"Duplicate GPU detected", "2.5-2.30",
          "two ranks of one communicator run on the same GPU", "Map each local rank to its own GPU (LOCAL_RANK -> "
          "torch.cuda.set_device, CUDA_VISIBLE_DEVICES per process).",
          where="job",
          samples=("Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000",)),

    # -- configuration and usage -------------------------------------------------------------------
    Cause("no_algorithm", "no_algorithm", r"[Nn]o algorithm/protocol available", "2.5-2.30",
          "NCCL_ALGO / NCCL_PROTO (or the CollNet/NVLS setup) left a collective without an algorithm",
          "Unset NCCL_ALGO / NCCL_PROTO, or give values the hardware supports.", where="job",
          samples=("Error : no algorithm/protocol available for function AllReduce with datatype ncclFloat32. "
                   "NCCL_ALGO was set to NVLS.",)),
    Cause("env_invalid", "env_invalid",
          r"All entries except the first must have a prefix|Unrecognized (?:element|prefix) token|is being ignored because",
          "2.13-2.30", "an NCCL variable has a value NCCL cannot use", "Fix the variable's value (the line names it).",
          where="job", severity="warning",
          samples=("NCCL_WORK_FIFO_BYTES=1000 is being ignored because it is not a power of 2.",)),
    Cause("collective_mismatch", "collective_mismatch", r"Mismatched collective detected|may be caused by a collective mismatch",
          "2.4-2.6", "the ranks called different collectives", "Compare the ranks' collective calls.", where="job",
          samples=("Mismatched collective detected, please check your collective calls at and around rank 3.",)),
    Cause("ring_error", "ring_error", r"ring \d+ does not (?:loop back|contain rank)", "2.4-2.30",
          "the ranks computed different rings: their topology or settings differ", "Compare NCCL versions and "
          "NCCL_* settings across ranks.", where="job",
          samples=("Error : ring 0 does not loop back to start (3 != 0)",)),
    Cause("invalid_usage", "invalid_usage", r"improper usage|Invalid rank requested", "2.4-2.30",
          "the application called NCCL incorrectly (rank out of range, wrong unique id)",
          "Check the rank and world size each process passes to init.", where="job",
          samples=("Invalid rank requested : 9/8", "improper usage of ncclCommInitRank: nId = 2, nranks=1")),
    Cause("collnet_failed", "collnet", r"CollNet", "2.8-2.30", "CollNet (SHARP) could not be used",
          "Check the SHARP plugin and NCCL_COLLNET_ENABLE.", role="harmless",
          samples=("Cannot initialize CollNet, using point-to-point network instead",)),
    Cause("net_device_mismatch", "net_device_mismatch", r"Detected mixed local (?:Net|CollNet) device counts", "2.30",
          "the ranks see different numbers of NICs", "Give every node the same NIC set (NCCL_IB_HCA).", where="job",
          samples=("Detected mixed local Net device counts across ranks: min 4 max 8",)),

    # -- consequences: a peer or an earlier error ------------------------------------------------
    Cause("proxy_call_failed", "proxy_error", r"Proxy Call to rank \d+ failed", "2.12-2.30",
          "the proxy thread's call for a peer rank failed (connection setup to that rank): the peer died or an "
          "earlier error on this process broke the proxy",
          "Look for the first error of this process and of the named peer rank.", role="consequence", where="peer",
          category="network",
          samples=("Proxy Call to rank 3 failed (Connect)",)),
    Cause("proxy_op_failed", "proxy_error", r"\[Proxy Service \d+\] Failed to execute operation", "2.12-2.30",
          "the proxy service failed an operation a local rank asked for (its return code says which kind)",
          "Look for the first error of this process (the proxy failed because of it).", role="consequence",
          category="network",
          samples=("[Proxy Service 3] Failed to execute operation Connect from rank 3, retcode 2",)),
    Cause("service_thread", "proxy_error", r"\[Service thread\]|Rem Allocator", "2.12-2.30",
          "NCCL's service thread lost a connection to a local rank (after an earlier failure)",
          "Look for the first error of this process and of the local rank named.", role="consequence",
          samples=("[Service thread] Error encountered progressing operation=Connect, res=3, closing connection",)),
    Cause("remote_exited", "peer_closed", r"remote process exited or there was a network error", "2.13-2.30",
          "NCCL returned 'remote error': a peer process exited or the network failed",
          "Find the peer that died first (its own traceback, OOM, signal) or the network error NCCL printed "
          "before this.", role="consequence", where="peer", category="network",
          samples=("remote process exited or there was a network error",)),
    Cause("peer_closed", "peer_closed", r"Connection closed by remote peer|Connection reset by peer|Broken pipe",
          "2.4-2.30",
          "the connection to the peer was closed or reset: the peer process went away first",
          "Look for the peer's own error (a traceback, OOM, a signal) before this time; it is rarely the root "
          "cause itself.", role="consequence", where="peer", category="network",
          samples=("socketProgress: Connection closed by remote peer node02<41109>",
                   "socketProgressOpt: Call to send to 10.1.0.2<52905> failed : Connection reset by peer",
                   "Net : Call to recv from 10.1.0.2<58355> failed : Broken pipe")),
    Cause("socket_poll_failed", "socket_error", r"Socket recv failed while polling", "2.12-2.30",
          "a socket receive from the proxy failed (after the proxy or a peer failed)",
          "Look for the first error of this process.", role="consequence", category="network",
          samples=("Socket recv failed while polling for opId=0x7f2a10000000",)),
    Cause("socket_error", "socket_error",
          r"socket\w*:|Call to (?:recv|send|connect|accept)|Net : Call to|socketFinalizeAccept", "2.4-2.30",
          "a TCP socket operation failed", "The errno says which; look for the peer's own failure.",
          where="peer", category="network",
          samples=("socketFinalizeAccept: wrong type 3 != 4", "Net : Call to recv from 10.1.0.2<58355> failed : Timeout")),
    Cause("fatal_error", "fatal_error", r"communicator encountered a fatal error", "2.2x",
          "the communicator was aborted after an error", "Look for the error before it.", role="consequence",
          samples=("communicator encountered a fatal error (detected in ncclIbAsyncThread)",)),

    # -- NCCL's result codes as PyTorch prints them (the cause is elsewhere) ---------------------
    Cause("unhandled_system_error", "system_error", r"unhandled system error|ncclSystemError", "2.4-2.30",
          "an NCCL call failed in a system call or an external library (sockets, memory, the IB verbs) -- NCCL's "
          "result code only: its own WARN lines (NCCL_DEBUG=INFO) or 'Last error' say which",
          "Rerun with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,NET) to see the failing call and its errno.",
          role="result", category="network",
          samples=("unhandled system error (run with NCCL_DEBUG=INFO for details)",
                   "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.")),
    Cause("unhandled_cuda_error", "cuda_error", r"unhandled cuda error|ncclUnhandledCudaError", "2.4-2.30",
          "a CUDA call inside NCCL failed -- NCCL's result code only", "Rerun with NCCL_DEBUG=INFO to see the call.",
          role="result", category="crash",
          samples=("unhandled cuda error (run with NCCL_DEBUG=INFO for details)",)),
    Cause("internal_error", "internal_error", r"internal error|ncclInternalError", "2.4-2.30",
          "NCCL reported an internal error -- its result code only (often a failed connection or a size the ranks "
          "disagree on)", "Rerun with NCCL_DEBUG=INFO; the Last error / WARN lines say which.", role="result",
          category="crash",
          samples=("internal error - please report this issue to the NCCL developers",
                   "ncclInternalError: Internal check failed.")),
    Cause("invalid_usage_result", "invalid_usage", r"invalid usage|ncclInvalidUsage|invalid argument|ncclInvalidArgument",
          "2.4-2.30", "NCCL refused the call as invalid -- its result code only",
          "Rerun with NCCL_DEBUG=INFO; the WARN line says what was invalid.", role="result", where="job",
          samples=("invalid usage (run with NCCL_DEBUG=WARN for details)",)),
    Cause("remote_error_result", "peer_closed", r"ncclRemoteError", "2.13-2.30",
          "NCCL returned 'remote error': a peer process exited or the network failed",
          "Find the peer that died first or the network error NCCL printed before this.", role="result",
          where="peer", category="network",
          samples=("ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
                   "prematurely.",)),

    # -- printed on healthy hosts -------------------------------------------------------------------
    Cause("graph_search_fallback", "topology", r"Could not find a path for pattern \d+", "2.4-2.30",
          "NCCL's topology search found no path of the preferred pattern and fell back to a simple ring order "
          "(slower rings; common on PCIe boxes and mixed GPUs)",
          "Check nvidia-smi topo -m and NCCL_P2P_LEVEL / NCCL_TOPO_FILE; nothing to fix when the box has no better "
          "path.", role="harmless", category="perf",
          samples=("Could not find a path for pattern 4, falling back to simple order",)),
    Cause("libibverbs_missing", "libibverbs_missing", r"Failed to open libibverbs", "2.4-2.30",
          "no RDMA library on this host (harmless on hosts without IB/RoCE; NCCL then uses sockets)",
          "Install rdma-core in the image if the host has RDMA NICs.", role="harmless", category="network",
          samples=("Failed to open libibverbs.so[.1]",)),
]

BY_NAME = {c.name: c for c in CAUSES}

# The finding's title per cause (a short phrase; the message quotes NCCL's own text).
TITLES = {
    "ib_completion_error": "RDMA completion error", "ib_async_event": "NIC asynchronous error",
    "ib_modify_qp": "RDMA queue pair setup failed", "ib_incompatible": "IB and RoCE NICs paired",
    "ib_verbs_error": "RDMA verbs call failed", "ib_size_mismatch": "ranks disagree on a message size (IB)",
    "socket_truncated": "socket message truncated: ranks disagree on a size",
    "bootstrap_truncated": "bootstrap 'Message truncated': ranks disagree on what they exchange",
    "duplicate_rank": "two processes claimed the same rank (duplicate launch or shared rendezvous)",
    "bootstrap_rank_count": "processes disagree on the communicator size at bootstrap",
    "invalid_comm_id": "invalid NCCL_COMM_ID", "no_socket_interface": "no socket interface found for bootstrap",
    "no_subnet_interface": "no interface in the rendezvous address's subnet",
    "no_listening_interface": "no usable listening interface", "bind_failed": "bootstrap bind failed",
    "connect_failed": "connection to another rank failed", "version_mismatch": "mismatched NCCL versions",
    "out_of_memory": "GPU out of memory in NCCL setup", "shm_too_small": "/dev/shm too small for NCCL",
    "nvls_bind_failed": "NVLink SHARP (NVLS) setup failed",
    "nvls_cuda_failure": "CUDA failure in NVLink SHARP (NVLS) setup", "cuda_failure": "CUDA failure inside NCCL",
    "duplicate_gpu": "two ranks on one GPU", "no_algorithm": "no algorithm/protocol available",
    "env_invalid": "invalid NCCL variable", "collective_mismatch": "mismatched collectives",
    "ring_error": "inconsistent rings between ranks", "invalid_usage": "invalid NCCL usage",
    "collnet_failed": "CollNet not used", "net_device_mismatch": "ranks see different NIC counts",
    "proxy_call_failed": "proxy call to a peer rank failed", "proxy_op_failed": "proxy operation failed",
    "service_thread": "NCCL service thread lost a connection", "remote_exited": "remote process exited or network error",
    "peer_closed": "connection closed or reset by the peer", "socket_poll_failed": "socket receive from the proxy failed",
    "socket_error": "socket operation failed", "fatal_error": "communicator aborted after an error",
    "unhandled_system_error": "NCCL system error", "unhandled_cuda_error": "NCCL unhandled CUDA error",
    "internal_error": "NCCL internal error", "invalid_usage_result": "NCCL invalid usage/argument",
    "remote_error_result": "NCCL remote error", "libibverbs_missing": "libibverbs not found",
    "graph_search_fallback": "topology search fell back to a simple order",
}

# ncclResult_t (nccl.md 3.10).
RESULT_CODES = {0: "success", 1: "unhandled cuda error", 2: "system error", 3: "internal error",
                4: "invalid argument", 5: "invalid usage", 6: "remote error", 7: "in progress"}

# strerror text -> (errno name, number) on Linux, for the texts NCCL's socket and verbs WARNs carry.
ERRNO = {
    "Operation not permitted": ("EPERM", 1), "No such file or directory": ("ENOENT", 2),
    "Interrupted system call": ("EINTR", 4), "Input/output error": ("EIO", 5), "No such device or address": ("ENXIO", 6),
    "Bad file descriptor": ("EBADF", 9), "Resource temporarily unavailable": ("EAGAIN", 11),
    "Cannot allocate memory": ("ENOMEM", 12), "Permission denied": ("EACCES", 13), "Device or resource busy": ("EBUSY", 16),
    "No such device": ("ENODEV", 19), "Invalid argument": ("EINVAL", 22), "Too many open files": ("EMFILE", 24),
    "No space left on device": ("ENOSPC", 28), "Broken pipe": ("EPIPE", 32), "Protocol error": ("EPROTO", 71),
    "Address already in use": ("EADDRINUSE", 98), "Cannot assign requested address": ("EADDRNOTAVAIL", 99),
    "Network is down": ("ENETDOWN", 100), "Network is unreachable": ("ENETUNREACH", 101),
    "Software caused connection abort": ("ECONNABORTED", 103), "Connection reset by peer": ("ECONNRESET", 104),
    "Transport endpoint is not connected": ("ENOTCONN", 107), "Connection timed out": ("ETIMEDOUT", 110),
    "Connection refused": ("ECONNREFUSED", 111), "No route to host": ("EHOSTUNREACH", 113),
    "Operation already in progress": ("EALREADY", 114), "Operation now in progress": ("EINPROGRESS", 115),
    "Timeout": ("ETIMEDOUT", 110),
}
# What an errno usually means for NCCL (the finding's message).
ERRNO_MEANING = {
    "ECONNREFUSED": "nothing listened at the peer's address (the peer process was gone or not started yet)",
    "ECONNRESET": "the peer closed the connection abruptly (it exited or was killed)",
    "EPIPE": "the peer closed the connection (it exited)",
    "ETIMEDOUT": "the peer did not answer in time (unreachable, firewalled or stuck)",
    "ENETUNREACH": "no route to the peer's network from this interface",
    "EHOSTUNREACH": "no route to the peer host",
    "EADDRNOTAVAIL": "the address is not an address of this host",
    "EADDRINUSE": "the port is already taken (another job on the host)",
    "ENOMEM": "out of memory (for RDMA: the locked-memory limit, ulimit -l)",
    "ENOSPC": "out of a resource (for RDMA: queue pairs or memory regions)",
    "EINVAL": "an invalid argument (for RDMA: a wrong GID index or port)",
    "ENODEV": "the device is gone",
}

# Fields any message may carry, taken by position-free small regexes (nccl.md 3.10-3.12).
_PEER_RANK = r"(?:^|[^A-Za-z])(?:rank|to rank|from rank) (\d+)"
_PEER = r"(?:remote peer|peer|Connect to|connect to|send to|recv from|remote address|from peer) (\S+?<\d+>)"
_ERRNO_TEXT = (r"(?:failed ?: |failed with error |failed with \d+ |returned )"
               r"([A-Z][a-z][A-Za-z /]+?)(?:,|\.|$| exceeded| retrying)")
_RETCODE = r"(?:retcode|res=|-> )\s*(\d+)"
_BYTES = r"(\d+) bytes"


def classify(message: pl.Expr, src: pl.Expr | None = None, possible: set[int] | None = None) -> tuple[pl.Expr, pl.Expr]:
    """(cause name, error class) of each message; null where no entry matches (an unknown
    WARN). ``src``: NCCL's ``file:line`` of a WARN (null for wrapped texts). ``possible``: the
    indexes of the causes the messages could match (``postmortem.parsers.kinds.possible_kinds``
    of the frame), the others left out; all when None."""
    cause = pl.lit(None, dtype=pl.String)
    klass = pl.lit(None, dtype=pl.String)
    src = src if src is not None else pl.lit(None, dtype=pl.String)
    for i, c in reversed(list(enumerate(CAUSES))):
        if possible is not None and i not in possible:
            continue
        hit = message.str.contains(rx(c.pattern))
        if c.src:
            hit = hit & src.fill_null("").str.contains(rx(c.src))
        cause = pl.when(hit).then(pl.lit(c.name)).otherwise(cause)
        klass = pl.when(hit).then(pl.lit(c.error_class)).otherwise(klass)
    return cause, klass


def fields(message: pl.Expr) -> dict[str, pl.Expr]:
    """The peer rank, peer address, errno (text, name, number), NCCL result code and a byte
    count a message states (null where it states none)."""
    text = message.str.extract(rx(_ERRNO_TEXT), 1).str.strip_chars()
    names = {k: v[0] for k, v in ERRNO.items()}
    numbers = {k: v[1] for k, v in ERRNO.items()}
    code = message.str.extract(rx(_RETCODE), 1).cast(pl.Int64, strict=False)
    return {
        "peer_rank": message.str.extract(rx(_PEER_RANK), 1).cast(pl.Int64, strict=False),
        "peer": message.str.extract(rx(_PEER), 1),
        "errno_text": text,
        "errno_name": text.replace_strict(names, default=None, return_dtype=pl.String),
        "errno": text.replace_strict(numbers, default=None, return_dtype=pl.Int64),
        "result_code": code,
        "result": code.replace_strict(RESULT_CODES, default=None, return_dtype=pl.String),
        "bytes": message.str.extract(rx(_BYTES), 1).cast(pl.Int64, strict=False),
    }


def warn_classes() -> list[tuple[str, str, str]]:
    """(error class, pattern, meaning) per entry: the shape ``postmortem.parsers.nccl`` classifies WARN rows with."""
    return [(c.error_class, c.pattern, c.meaning) for c in CAUSES]
