"""Every NCCL_DEBUG message kind the parser understands: name, target table, pattern, versions.

This is the lnav-style format definition of NCCL's own output (``docs/formats/nccl.md`` section 3,
with the corrections of 3.14.7). Each ``Kind`` matches the *message* part of a line, after
the ``host:pid:tid [dev] NCCL INFO`` prefix (``postmortem.parsers.nccl``) has been taken off; its named
groups become columns of ``table``. Kinds are tried in order and the first match wins, so a
specific shape must come before a looser one. ``samples`` are message texts written from the
format strings of the reference (not copied from logs); ``tests/test_nccl_catalogue.py`` checks
that each sample is classified as its own kind and yields the fields it states.

Tables (``table=None`` means the line is understood but carries nothing worth a row, e.g.
allocator chatter is counted, not stored):

``nccl_comms``        communicator lifecycle and layout rows
``nccl_connections``  one row per printed transport connection (``Channel ... via ...``)
``nccl_rings``        rank 0's ring order lines and GRAPH ``Ring NN : prev -> me -> next``
``nccl_trees``        ``Trees [c] ...`` (exploded per channel), GRAPH ``Tree`` lines
``nccl_graph``        topology search results and the topology dump (GRAPH subsystem)
``nccl_net``          bootstrap/socket interfaces, IB/RoCE NICs, chosen network, plugins, GDR
``nccl_env``          variables NCCL reports as set (and comm config values)
``nccl_tuning``       algorithm/protocol decisions, the tuning table, thresholds, channel counts
``nccl_info``         other init facts: driver, affinity, timings, connected markers, proxies
``events``            error back-traces, P2P capability refusals, retries (WARN lines are
                      handled separately: every WARN is an event with an error class)
``collectives``       ``NCCL_DEBUG_SUBSYS=COLL`` trace rows
"""

from __future__ import annotations

from postmortem.parsers.kinds import Kind
from postmortem.parsers.nccl_errors import warn_classes


_HEX = r"0x[0-9a-fA-F]+|\(nil\)"

KINDS: list[Kind] = [
    # -- section 3.9: collective trace (first: it is the bulk of COLL-enabled logs) ------------
    # ASCII classes, not \w and \d: the pattern is tested on every line of a COLL-traced log, and
    # Unicode classes make it about 1.6x slower (no number NCCL prints is in another script).
    Kind("coll", "collectives",
         r"^(?P<op>[A-Za-z0-9_]+): opCount (?P<op_count_hex>[0-9a-fA-F]+) sendbuff (?P<sendbuff>\S+) "
         r"recvbuff (?P<recvbuff>\S+) count (?P<count>[0-9]+) datatype (?P<datatype>[0-9]+) op (?P<red_op>[0-9]+) "
         rf"root (?P<root>-?[0-9]+) comm (?P<comm>{_HEX}) \[nranks=(?P<nranks>[0-9]+)\] stream (?P<stream>\S+)",
         "2.4-2.30",
         ("AllReduce: opCount 1a sendbuff 0x7f2a10000000 recvbuff 0x7f2a10000000 count 262144 datatype 7 op 0 root 0 comm 0x55d0c0a1b2c0 [nranks=16] stream 0x55d0c0000a10",
          "Send: opCount 2 sendbuff 0x7f2a10000000 recvbuff (nil) count 4096 datatype 9 op 0 root 5 comm 0x55d0c0a1b2c0 [nranks=16] stream 0x55d0c0000a10")),

    # -- section 3.7: per-channel transport connections ------------------------------------------
    Kind("connection", "nccl_connections",
         r"^(?P<word>Ring|Channel) (?P<channel>\d+)(?:/(?P<conn_index>\d+))? : (?P<src>\d+)(?:\[(?P<src_dev>[0-9a-fA-F]+)\])? -> "
         r"(?P<dst>\d+)(?:\[(?P<dst_dev>[0-9a-fA-F]+)\])?(?: \[(?P<side>send|receive)\])? via (?P<via>.+)$",
         "2.4-2.30",
         ("Ring 00 : 3[1] -> 0[0] via P2P/IPC",
          "Ring 01 : 34 -> 33 [send] via NET/IB/0/GDRDMA",
          "Ring 00 : 1[1b0] -> 2[1c0] via direct shared memory",
          "Channel 02 : 5[3d000] -> 6[3e000] via P2P/indirect/4[3b000]",
          "Channel 00/1 : 7[b3000] -> 8[18000] [send] via NET/IB/3(4)/GDRDMA/Shared",
          "Channel 03/0 : 2[2] -> 3[3] via P2P/CUMEM/read",
          "Channel 00/1 : 1[2] -> 0[2] [send] via NET/AWS Libfabric/1/GDRDMA/Shared",
          "Channel 05/0 : 6[6] -> 7[7] via SHM/direct/direct",
          "Channel 01/0 : 0[0] -> 1[1] via P2P/direct pointer/read")),
    Kind("collnet_connection", "nccl_connections",
         r"^CollNet (?P<channel>\d+)/(?P<conn_index>\d+) : (?P<src>\d+) \[(?P<side>send|receive)\] via (?P<via>COLLNET/.+)$",
         "2.2x", ("CollNet 00/0 : 3 [send] via COLLNET/IBext_v8/0/GDRDMA",)),

    # -- section 3.6: rings and trees ---------------------------------------------------------------
    Kind("ring_order", "nccl_rings",
         r"^Channel (?P<channel>\d+)(?:/(?P<nchannels>\d+))? :(?P<order>(?: +\d+)+)(?P<cut> ?\.\.\.)?$",
         "2.4-2.30",
         ("Channel 00 :    0   1   2   3", "Channel 01/02 :    0   3   2   1",
          "Channel 20/24 : 0 1 2 3 4 5 6 7", "Channel 00/04 : 0 1 2 3 4 5 6 7 8 9 10 11 ...")),
    Kind("ring_neighbors", "nccl_rings",
         r"^Ring (?P<channel>\d+) : (?P<prev>-?\d+) -> (?P<me>\d+) -> (?P<next>-?\d+)$",
         "2.10-2.30 (GRAPH)", ("Ring 03 : 7 -> 0 -> 1",)),
    Kind("trees", "nccl_trees", r"^Trees(?P<body>(?: \[\d+\] \S+)+)(?P<cut> \[\d*)?$", "2.4-2.30 (cut at 1023 bytes: a partial last label)",
         ("Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1",
          "Trees [0] -1/-1/-1->3->2|2->3->-1/-1/-1 [1] 1/-1/-1->3->2|2->3->1/-1/-1",
          "Trees [0] -1->0->1/-1/-1")),
    Kind("tree_graph", "nccl_trees",
         r"^Tree (?P<channel>\d+) : (?P<up>-?\d+) -> (?P<me>\d+) -> (?P<down0>-?\d+)/(?P<down1>-?\d+)/(?P<down2>-?\d+)$",
         "2.8-2.30 (GRAPH)", ("Tree 1 : 4 -> 5 -> 6/-1/-1",)),
    Kind("collnet_tree", "nccl_trees",
         r"^CollNet Channel (?P<channel>\d+) rank (?P<me>\d+) up (?P<up>-?\d+) down (?P<down0>-?\d+)",
         "2.2x (GRAPH)", ("CollNet Channel 0 rank 3 up 8 down -1",)),
    Kind("nvls_tree", "nccl_trees", r"^NVLS (?:Trees?|Head)\b.*$", "2.17-2.30 (GRAPH)",
         ("NVLS Trees : 0/-1/-1->8->16", "NVLS Head  0:  0  8")),

    # -- section 3.5: communicator lifecycle --------------------------------------------------------
    Kind("comm_init", "nccl_comms",
         rf"^(?:\[Rank \d+\] )?(?:(?P<api>nccl\w+) )?comm (?P<comm>{_HEX}) rank (?P<rank>\d+) "
         r"nranks (?P<nranks>\d+) cudaDev (?P<cuda_dev>\d+)(?: nvmlDev (?P<nvml_dev>\d+))?"
         r"(?: busId (?P<bus_id>[0-9a-fA-F]+))?(?: commId (?P<comm_id>0x[0-9a-fA-F]+))?"
         rf"(?: parent (?P<parent>{_HEX})(?: (?:splitCount|childCount) \d+)?"
         r" color (?P<color>-?\d+) key (?P<key>-?\d+))?(?: commId (?P<comm_id2>0x[0-9a-fA-F]+))? ?- "
         r"(?P<phase>Init START|Init COMPLETE|Abort COMPLETE|Destroy COMPLETE|Revoke COMPLETE)",
         "2.4-2.30",
         ("comm 0x7f00 rank 3 nranks 8 cudaDev 3 nvmlDev 3 - Init COMPLETE",
          "comm 0x7f00 rank 3 nranks 8 cudaDev 3 busId 3d000 - Init COMPLETE",
          "comm 0x55d1c3a4b6f0 rank 0 nranks 40 cudaDev 0 nvmlDev 0 busId 18000 commId 0x5ae77eb5ea4ec1ee - Init START",
          "ncclCommSplit comm 0x55d1c3a4c000 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 18000 parent 0x55d1c3a4b6f0 color 2 key 0 commId 0x11 - Init START",
          "ncclCommSplit comm 0x55d1c3a4c000 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 18000 parent 0x55d1c3a4b6f0 splitCount 1 color 2 key 0- Init START",
          "[Rank 0] ncclCommInitRankConfig comm 0x55d1 rank 0 nranks 40 cudaDev 0 nvmlDev 0 busId 18000 commId 0x5ae7 - Init START",
          "comm 0x7f00 rank 3 nranks 8 cudaDev 3 busId 3d000 - Abort COMPLETE")),
    Kind("comm_layout", "nccl_comms",
         r"^comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes (?P<nnodes>\d+) "
         r"localRanks (?P<local_ranks>\d+) localRank (?P<local_rank>\d+) MNNVL (?P<mnnvl>\d+)",
         "2.20-2.30", ("comm 0x55a7be569d00 rank 1 nRanks 8 nNodes 1 localRanks 8 localRank 1 MNNVL 0",)),
    Kind("comm_revoke", "nccl_comms",
         r"^CommRevokeAsync START comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) "
         r"nNodes (?P<nnodes>\d+) localRank (?P<local_rank>\d+) cudaDev (?P<cuda_dev>\d+)",
         "2.28-2.30", ("CommRevokeAsync START comm 0x5501 rank 2 nRanks 16 nNodes 2 localRank 2 cudaDev 2",)),

    # -- section 3.10: error back-traces (INFO, every level of a failing call) -------------------
    Kind("error_chain", "events",
         r"^(?P<src>[\w./-]+\.(?:cc|cu|h|cpp|c)):(?P<src_line>\d+)(?: \((?P<fn>[^)]*)\))? -> (?P<code>\d+)(?P<rest>.*)$",
         "2.4-2.30",
         ("transport/net_ib.cc:368 -> 2", "group.cc:64 -> 3 [Async thread]", "proxy.cc:1234 -> 6 [Progress Thread]",
          "misc/socket.cc:607 -> 6 socketWait(NCCL_SOCKET_SEND, sock, &sock->type, sizeof(sock->type), &sent)",
          "init.cc:1800 (ncclCommInitRankFunc) -> 5")),

    # -- section 3.1 --------------------------------------------------------------------------------
    # Rows come from postmortem.parsers.nccl._versions, which reads this INFO form and the bare line alike.
    Kind("version", None, r"^NCCL version (?P<version>\d+\.\d+\.\d+[^+\s]*)\+cuda(?P<cuda>[\w.]+)", "2.22-2.30 (INFO)",
         ("NCCL version 2.25.1+cuda12.2",)),
    Kind("cuda_driver", "nccl_info", r"^cudaDriverVersion (?P<value>\d+)$", "2.13-2.30", ("cudaDriverVersion 12020",)),

    # -- sections 3.2-3.4: bootstrap, network, NICs, plugins, GDR -----------------------------------
    Kind("bootstrap_if", "nccl_net", r"^Bootstrap ?: Using(?P<items>(?: \S+)+)$", "2.4-2.30",
         ("Bootstrap : Using [0]eth0:10.100.3.64<0> [1]ib0:10.200.3.64<0>", "Bootstrap : Using bond0:10.100.4.184<0>",
          "Bootstrap: Using eno1:10.100.5.89<0>", "Bootstrap : Using [0]veth75fa783:fe80::14ad:64ff:fe64:b31e%veth75fa783<0>")),
    Kind("ib_nics", "nccl_net", r"^NET/IB ?: Using(?P<items>(?: ?(?:\[\d+\]=\{[^}]*\}?|\[\d+\]\S*|\[RO\]))*) ?(?:; OOB (?P<oob>\S+))?$",
         "2.4-2.30 (a line cut at 1023 bytes loses the OOB tail)",
         ("NET/IB : Using [0]mlx5_1:1/IB [1]mlx5_3:1/IB [2]mlx5_2:1/RoCE ; OOB eth0:10.100.3.64<0>",
          "NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB enp220s0np0:10.100.7.136<0>",
          "NET/IB : Using [RO]; OOB eno1:10.100.5.89<0>",
          "NET/IB : Using [0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE} [1]={[2] mlx5_0:1/RoCE} [RO]; OOB bond0:10.1.1.9<0>")),
    Kind("ib_no_device", "nccl_net", r"^NET/IB ?: No device found\.?$", "2.4-2.30", ("NET/IB : No device found.",)),
    Kind("socket_ifs", "nccl_net", r"^NET/Socket ?: Using(?P<items>(?: \[\d+\]\S+)+)$", "2.4-2.30",
         ("NET/Socket : Using [0]eth0:10.100.8.4<0> [1]br-ce64497c3b44:10.100.9.1<0>",)),
    Kind("socket_threads", "nccl_net",
         r"^NET/Socket ?: Using (?P<threads>\d+) threads and (?P<sockets>\d+) sockets per thread", "2.4-2.30",
         ("NET/Socket: Using 2 threads and 8 sockets per thread",)),
    Kind("network", "nccl_net", r"^Using network (?P<name>.+)$", "2.6-2.30",
         ("Using network IB", "Using network Socket", "Using network AWS Libfabric")),
    Kind("gdr", "nccl_net",
         r"^(?:NET/[\w ]+?: ?)?GPU Direct RDMA (?P<gdr>Enabled|Disabled) for (?:GPU (?P<gpu>[0-9a-fA-F]+)(?:\[\d+\])? / HCA (?P<hca>[0-9a-fA-Fx]+)"
         r"|HCA (?P<hca_index>\d+) '(?P<hca_name>[^']*)')(?: \((?:distance (?P<distance>\d+) \S+ (?P<threshold>\d+)|(?P<why>[^)]*))\))?"
         r"(?:, read (?P<read>\d+))?(?: mode (?P<mode>\w+))?",
         "2.4-2.30 (NET)",
         ("GPU Direct RDMA Enabled for GPU 1b000 / HCA 0 (distance 2 <= 4), read 1",
          "GPU Direct RDMA Disabled for GPU 5 / HCA 3f00000001 (distance 5 > 4)",
          "NET/IB : GPU Direct RDMA Disabled for GPU 1[1] / HCA 0 (distance 4 >= 4)",
          "NET/Socket : GPU Direct RDMA Disabled for HCA 0 'enp1s0f0'",
          "NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)")),
    Kind("nic_distance", "nccl_net", r"^CUDA Dev (?P<dev>\d+)\[(?P<nvml_dev>\d+)\], (?P<name>.+?) NIC distance : (?P<detail>.*)$",
         "2.4", ("CUDA Dev 0[0], IB NIC distance :  PIX PXB SYS",)),
    Kind("ib_virtual", "nccl_net", r"^NET/IB ?: Made virtual device \[(?P<index>\d+)\] name=(?P<name>\S+) speed=(?P<speed>\d+) ndevs=(?P<ndevs>\d+)",
         "2.2x", ("NET/IB : Made virtual device [4] name=mlx5_0+mlx5_1 speed=400000 ndevs=2",)),
    Kind("ib_device", "nccl_net",
         r"^NET/IB ?: \[(?P<index>\d+)\] (?P<name>[\w.-]+):(?:[\w.-]+:)?(?P<port>\d+)/(?P<link>IB|RoCE|UNSPECIFIED)(?P<detail>.*)$",
         "pre-2.4 list, 2.2x NET detail", ("NET/IB: [0] mlx5_3:1/IB", "NET/IB: [1] mlx5_1:uverbs1:1/RoCE provider=Mlx5 speed=200000 context=0x5500 pciPath=/sys/x ar=0")),
    Kind("ib_qp", "nccl_net", r"^NET/IB ?: .*(?:IbDev \d+ Port \d+ qpn|ECE|GID)", "2.1x-2.30 (NET)",
         ("NET/IB: NCCL Dev 0 IbDev 0 Port 1 qpn 1234 mtu 5 GID 3 (0/3A00640AFFFF0000)",)),
    Kind("plugin", "nccl_net",
         r"^(?:(?P<which>NET|TUNER|PROFILER|ENV|GIN)/Plugin ?: ?(?P<detail>.*)|Plugin Path : (?P<path>.*)|P2P plugin (?P<name>\S+)"
         r"|Using non-device net plugin version \d+|Successfully loaded external plugin .*|Initialized NET plugin .*"
         r"|Assigned NET plugin .*|Using tuner plugin:? .*|Opened tuner:? .*|Tuner: no plugin found .*)$",
         "2.4-2.30",
         ("NET/Plugin : No plugin found (libnccl-net.so).", "NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
          "NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file",
          "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.", "NET/Plugin: Could not find: libnccl-net.so.",
          "Using non-device net plugin version 0", "Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so",
          "P2P plugin IBext_v8", "TUNER/Plugin: Using internal tuner plugin.", "PROFILER/Plugin: Could not find: libnccl-profiler.so.")),
    Kind("ibverbs_missing", "nccl_net", r"^Failed to open libibverbs\.so\b", "2.4-2.30",
         ("Failed to open libibverbs.so[.1]",)),   # no verbs library: NCCL uses sockets (nccl_errors says why)
    Kind("ofi", "nccl_net", r"^NET/(?P<which>OFI|FastSocket|gIB|FasTrak)\b ?:? ?(?P<detail>.*)$", "plugins",
         ("NET/OFI Initializing aws-ofi-nccl 1.11.0-aws", "NET/FastSocket plugin initialized")),

    # -- section 3.8 and 3.14.4: environment -------------------------------------------------------
    Kind("env", "nccl_env", r"^(?P<key>[A-Z][A-Z0-9_]*) set by environment to (?P<value>.*?)$", "2.4-2.30",
         ("NCCL_IB_TIMEOUT set by environment to 18.", "NCCL_SOCKET_IFNAME set by environment to eth0",
          "NCCL_PROTO set by environment to ^LL128", "NCCL_P2P_LEVEL set by environment to LOC")),
    Kind("env_set_to", "nccl_env", r"^(?P<key>NCCL_[A-Z0-9_]+) set to (?P<value>.*)$", "2.4-2.30",
         ("NCCL_IB_HCA set to mlx5", "NCCL_SOCKET_IFNAME set to =eth0")),
    Kind("env_invalid", "nccl_env", r"^Invalid value (?P<value>.*) for (?P<key>\S+), using default (?P<default>.*?)\.?$", "2.4-2.30",
         ("Invalid value abc for NCCL_IB_TIMEOUT, using default 18.",)),
    Kind("env_invalid_range", "nccl_env",
         r"^Invalid (?P<key>[A-Za-z_]\w*) (?P<value>-?\d+) \((?P<default>must be a multiple of \d+|maximum \d+|minimum \d+)\)\.?$",
         "2.27-2.30", ("Invalid NCCL_NTHREADS 100 (must be a multiple of 32)", "Invalid NCCL_LL128_NTHREADS 2048 (maximum 640).")),
    Kind("comm_config", "nccl_env", r"^Comm config (?P<key>\w+) set to (?P<value>.*)$", "2.2x", ("Comm config Blocking set to 1",)),

    # -- section 3.14: tuning -------------------------------------------------------------------------
    Kind("decision_numeric", "nccl_tuning",
         r"^(?:(?P<func>\w+): )?(?P<bytes>\d+) Bytes -> Algo (?P<algo>-?\d+) proto (?P<proto>-?\d+) time (?P<time_us>[-\d.e+]+)$",
         "2.20-2.23 (INFO), 2.5-2.19 (TRACE)",
         ("1048576 Bytes -> Algo 1 proto 2 time 31.452000", "AllReduce: 65536 Bytes -> Algo 0 proto 0 time 19.840000")),
    Kind("decision", "nccl_tuning",
         r"^(?P<func>\w+): (?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+) channel\{Lo\.\.Hi\}=\{(?P<ch_lo>\d+)\.\.(?P<ch_hi>\d+)\}$",
         "2.24-2.30", ("AllReduce: 67108864 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}",)),
    Kind("decision_symmetric", "nccl_tuning",
         r"^(?P<func>\w+) \[Symmetric\]: (?P<bytes>\d+) Bytes -> Kernel (?P<kernel>\S+) nchannels (?P<nchannels>\d+) nthreads (?P<nthreads>\d+)(?: nWorks (?P<nworks>\d+))?$",
         "2.27-2.30", ("AllReduce [Symmetric]: 262144 Bytes -> Kernel AllReduce_AGxLLMC_R nchannels 8 nthreads 512",
                       "AllReduce [Symmetric]: 8388608 Bytes -> Kernel AllReduce_RSxLDMC_AGxSTMC nchannels 16 nthreads 512 nWorks 1")),
    Kind("decision_ce", "nccl_tuning", r"^(?P<func>\w+) \[(?P<kernel>Copy Engine|Hierarchical CE)\]: (?P<bytes>\d+) Bytes -> (?P<detail>.+)$",
         "2.29-2.30", ("AllGather [Copy Engine]: 16777216 Bytes -> cudaMemcpy; CE synchronization with NVLS",)),
    Kind("decision_trace", "nccl_tuning",
         r"^Collective (?P<func>\w+)\((?P<red_op>[^,]*), (?P<datatype>[^,]*), (?P<algo>[^,]*), (?P<proto>[^)]*)\) "
         r"(?P<detail>count=\d+(?:.*? channel\{Lo\.\.Hi\}=\{(?P<ch_lo>\d+)\.\.(?P<ch_hi>\d+)\}.*|.*))$",
         "2.24-2.30 (TRACE)", ("Collective AllReduce(Sum, float32, RING, SIMPLE) count=1048576 devFuncId=42 channel{Lo..Hi}={0..7} count{Lo,Mid,Hi}={0,0,0} chunkBytes{Lo,Mid,Hi}={0,0,0}",)),
    Kind("tuner_chunk", "nccl_tuning", r"^(?P<func>\w+): tuner chunk size (?P<detail>.*)$", "2.30",
         ("AllReduce: tuner chunk size 4194304 exceeds buffer max 2097152, clamping",)),
    Kind("table_header", "nccl_tuning", r"^Latency/AlgBw \|(?P<cells>.*)$", "2.5-2.17",
         ("Latency/AlgBw | Tree/    LL | Tree/ LL128 | Tree/Simple | Ring/    LL | Ring/ LL128 | Ring/Simple |",)),
    Kind("table_algorithms", "nccl_tuning", r"^\s*Algorithm\s+\|(?P<cells>.*)$", "2.18-2.30",
         ("  Algorithm   |                            Tree                  |                            Ring                  |",)),
    Kind("table_protocols", "nccl_tuning", r"^\s*Protocol\s+\|(?P<cells>.*)$", "2.18-2.30",
         ("  Protocol    |             LL |          LL128 |         Simple |             LL |          LL128 |         Simple |",)),
    Kind("table_max_threads", "nccl_tuning", r"^\s*Max NThreads\s+\|(?P<cells>.*)$", "2.6-2.30",
         (" Max NThreads |            512 |            640 |            512 |",)),
    Kind("table_row", "nccl_tuning", r"^\s*(?P<func>[A-Za-z]+) \|(?P<cells>(?:\s*-?[\d.]+/\s*-?[\d.]+\s*\|)+)$", "2.5-2.30",
         ("    AllReduce |    16.1/  36.4 |    22.3/  64.2 |    41.2/  92.8 |",
          "    AllReduce |    8.9/  9.6|    8.9/  0.0|   44.0/ 21.6|")),
    Kind("matrix", "nccl_tuning", r"^Enabled NCCL Func/Proto/Algo Matrix:", "2.24-2.30", ("Enabled NCCL Func/Proto/Algo Matrix:",)),
    Kind("thread_thresholds", "nccl_tuning", r"^threadThresholds (?P<detail>-?\d+(?:[/ |]+-?\d+)*)$", "2.5-2.30",
         ("threadThresholds 8/8/64 | 128/8/64 | 512 | 512", "threadThresholds 8/8/64 | 32/8/64")),
    Kind("threads_per_block", "nccl_tuning", r"^Threads per block : (?P<detail>\d+/\d+/\d+)$", "2.5", ("Threads per block : 512/640/512",)),
    Kind("channel_counts", "nccl_tuning",
         r"^(?P<coll_channels>\d+) coll channels, (?:(?P<collnet_channels>\d+) collnet channels, )?(?:(?P<nvls_channels>\d+) nvls channels, )?"
         r"(?P<p2p_channels>\d+) p2p channels, (?P<p2p_per_peer>\d+) p2p channels per peer$",
         "2.7-2.30",
         ("32 coll channels, 32 p2p channels, 2 p2p channels per peer",
          "24 coll channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer",
          "32 coll channels, 32 collnet channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer")),
    Kind("using_threads", "nccl_tuning", r"^Using (?P<nthreads>\d+) threads, Min Comp Cap (?P<min_cc>\d+), Trees (?P<detail>.*)$", "2.4",
         ("Using 256 threads, Min Comp Cap 7, Trees enabled up to size 41943039",)),
    Kind("launch_mode", "nccl_tuning", r"^Launch mode (?P<detail>\w+)$", "2.4-2.12", ("Launch mode Parallel",)),
    Kind("nvls_support", "nccl_tuning",
         r"^NVLS multicast support is (?P<detail>not )?available on dev (?P<dev>\d+)(?: \(NVLS_NCHANNELS (?P<nchannels>\d+)\))?",
         "2.17-2.30", ("NVLS multicast support is available on dev 3 (NVLS_NCHANNELS 16)", "NVLS multicast support is not available on dev 0")),
    Kind("nvls_other", "nccl_tuning", r"^(?:NVLS tuning: |NVLS comm (?:0x[0-9a-fA-F]+) headRank )(?P<detail>.*)$", "2.17-2.30",
         ("NVLS comm 0x55e1 headRank 0 nHeads 4 buffSize 1048576 memSize 2097152 nvlsPerRankSize 201326592 nvlsTotalSize 805306368",
          "NVLS tuning: nChannels 16 chunkSize 131072 treeMaxChunkSize 65536")),
    Kind("collnet_state", "nccl_tuning",
         r"^(?:Communicator has \d+ nodes which is less than CollNet node threshold|(?:Connected )?Collnet Chains|rank \d+ Connected CollNet)(?P<detail>.*)$",
         "2.9-2.30", ("Communicator has 1 nodes which is less than CollNet node threshold 2, disabling CollNet",
                      "rank 3 Connected CollNet")),
    Kind("mixed_cpus", "nccl_tuning", r"^CPUs with mixed (?P<detail>architecture|vendors) were detected\.", "2.22-2.30",
         ("CPUs with mixed vendors were detected.",)),
    Kind("net_counts", "nccl_tuning",
         r"^(?:Local (?:Net|CollNet) device counts across ranks|Rank \d+ has \d+ local (?:Net|CollNet) devices|Rank \d+: \d+ (?:Net|CollNet) devices)(?P<detail>.*)$",
         "2.30", ("Local Net device counts across ranks: min 8 max 8", "Rank 3: 8 Net devices")),
    Kind("ll128_off", "nccl_tuning", r"^Disabling LL128 over all PxN connections", "2.27-2.30",
         ("Disabling LL128 over all PxN connections (PXB and C2C). This ensures that no C2C link will be used by LL128.",)),

    # -- section 3.6: topology search and dump (GRAPH) ---------------------------------------------
    Kind("graph_pattern", "nccl_graph",
         r"^Pattern (?P<pattern>\d+), crossNic (?P<cross_nic>\d+), nChannels (?P<nchannels>\d+), (?:speed|bw) (?P<bw_intra>[\d.]+)/(?P<bw_inter>[\d.]+), "
         r"type (?P<type_intra>\w+)/(?P<type_inter>\w+), sameChannels (?P<same_channels>\d+)",
         "2.5-2.30", ("Pattern 4, crossNic 0, nChannels 2, bw 20.000000/20.000000, type NVL/PIX, sameChannels 1",)),
    Kind("graph_channel", "nccl_graph", r"^\s*(?P<channel>\d+) : (?P<path>(?:\w+/[\w-]+(?:\(\d+\))? ?)+)$", "2.5-2.30",
         (" 0 : GPU/0 GPU/1 GPU/2 GPU/3", " 1 : NET/0 GPU/1 GPU/0 NET/0")),
    Kind("topo_system", "nccl_graph", r"^=== System : maxBw (?P<bw_intra>[\d.]+) totalBw (?P<bw_inter>[\d.]+) ===", "2.5-2.30",
         ("=== System : maxBw 12.0 totalBw 12.0 ===",)),
    Kind("topo_node", "nccl_graph",
         r"^\s*(?:\+ (?P<link>\w+)\[(?P<link_bw>[\d.]+)\] - )?(?P<node>(?:CPU|GPU|PCI|NIC|NET|NVS|NVL|C2C)/[0-9A-Fa-fx-]+)(?P<detail>.*)$",
         "2.5-2.30", ("CPU/0 (1/1/2)", "+ PCI[12.0] - PCI/18000 (10b5874710b58747)", "              + PCI[12.0] - GPU/1A000 (0)",
                      "+ NVL[40.0] - GPU/2A000")),
    Kind("topo_paths", "nccl_graph", r"^(?:Paths from |Topology detection|Could not find real path|Ignoring |Loading |Dumping |Attribute |Added )(?P<detail>.*)$",
         "2.5-2.30", ("Paths from GPU/1A000-1A000 :",)),

    # -- other init facts ----------------------------------------------------------------------------
    Kind("connected", "nccl_info",
         r"^(?P<key>Connected all rings|Connected all trees|Connected NVLS tree|Connected binomial trees)(?:, use ring PXN (?P<pxn>\d+) GDR (?P<gdr>\d+))?$",
         "2.8-2.30", ("Connected all rings", "Connected all rings, use ring PXN 0 GDR 1", "Connected all trees", "Connected NVLS tree")),
    Kind("affinity", "nccl_info", r"^Setting affinity for GPU (?P<key>\d+) to (?P<value>\S+)", "2.4-2.30",
         ("Setting affinity for GPU 3 to ffff,ffffffff,00000000",)),
    Kind("init_timings", "nccl_info",
         r"^Init timings(?: - (?P<key>\w+))?: rank (?P<rank>\d+) nranks (?P<nranks>\d+) total (?P<value>[\d.]+) \((?P<detail>[^)]*)\)",
         "2.22-2.30", ("Init timings - ncclCommInitRankConfig: rank 0 nranks 16 total 1.52 (kernels 0.21, alloc 0.01, bootstrap 0.33, allgathers 0.05, topo 0.28, graphs 0.02, connections 0.40, rest 0.22)",)),
    Kind("bootstrap_timings", "nccl_info", r"^Bootstrap timings total (?P<value>[\d.]+) \((?P<detail>[^)]*)\)", "2.23-2.30",
         ("Bootstrap timings total 0.001234 (create 0.000022, send 0.000113, recv 0.000521, ring 0.000381, delay 0.000000)",)),
    Kind("bootstrap_split", "nccl_info",
         r"^bootstrapSplit: rank (?P<rank>\d+) nranks (?P<nranks>\d+) color (?P<key>-?\d+) key (?P<value>-?\d+) (?P<detail>prev -?\d+ next -?\d+) - DONE",
         "2.18-2.30", ("bootstrapSplit: rank 1 nranks 8 color 3 key 1 prev 0 next 2 - DONE",)),
    Kind("p2p_chunksize", "nccl_info", r"^P2P Chunksize set to (?P<value>\d+)", "2.16-2.30", ("P2P Chunksize set to 524288",)),
    Kind("check_p2p", "nccl_info", r"^Check P2P Type (?P<detail>.*)$", "2.24-2.30",
         ("Check P2P Type intraNodeP2pSupport 1 directMode 0", "Check P2P Type isAllDirectP2p 1 directMode 0 isAllCudaP2p 1")),
    Kind("cc_mode", "nccl_info", r"^CC (?P<detail>(?:On|Off).*workFifoBytes (?P<value>\d+))$", "2.22-2.30",
         ("CC Off, workFifoBytes 1048576", "CC Off, Multi-GPU CC Off, workFifoBytes 1048576")),
    Kind("dmabuf", "nccl_info", r"^DMA-BUF is available on GPU device (?P<key>\d+)", "2.2x", ("DMA-BUF is available on GPU device 0",)),
    Kind("mnnvl", "nccl_info", r"^MNNVL (?P<detail>.*)$", "2.2x", ("MNNVL busId 0x18000 fabric UUID 0.0 cliqueId 0x0 state 3 healthMask 0x0",)),
    Kind("symmetric_vm", "nccl_info", r"^rank (?P<rank>\d+) base stride (?P<detail>.*)$", "2.27", ("rank 3 base stride 16GB total VM 128GB",)),
    Kind("alloc", "nccl_info",
         r"^(?:[\w./-]+:\d+ )?(?:(?P<key>Cuda|Mem|Cuda Host|Cuda Managed) Alloc Size (?P<value>\d+) pointer \S+|Mem Realloc old size \d+, new size (?P<value2>\d+).*"
         r"|Allocated (?P<value3>\d+) bytes of shared memory in (?P<detail>\S+)|MemManager.*)$",
         "2.4-2.30 (ALLOC)", ("channel.cc:40 Cuda Alloc Size 1536 pointer 0x7f1200000000", "Allocated 9637892 bytes of shared memory in /dev/shm/nccl-abcdef",
                              "Mem Realloc old size 0, new size 8 pointer 0x5575")),
    Kind("proxy", "nccl_info",
         r"^(?:\[Proxy (?:Service|Service UDS|Progress)\]|New proxy \w+ connection|Connection to proxy|proxyProgressAsync|ncclPollProxyResponse"
         r"|Received and initiated operation|Allocated shareable buffer|Transport \d+ use proxy|transport/\S+ proxy|\[Proxy Service \d+\] )(?P<detail>.*)$",
         "2.12-2.30 (PROXY)", ("[Proxy Service] Device 3 CPU core 21", "New proxy recv connection 0 from local rank 3, transport 0",
                               "Connection to proxy localRank 3 -> connection 0x7f55")),
    Kind("service_thread", "events", r"^\[Service thread\] (?P<detail>.*)$", "2.12-2.30",
         ("[Service thread] Connection closed by localRank 2",)),
    Kind("ras_info", None, r"^RAS ", "2.24-2.30 (RAS; the nccl_ras parser makes rows of them)",
         ("RAS client listening socket at ::1<28028>",)),

    # -- P2P capability and retries (events) ---------------------------------------------------------
    Kind("p2p_unavailable", "events",
         r"^(?:Could not enable P2P between dev (?P<dev_a>\d+)\(=(?P<bus_a>[0-9a-fA-F]+)\) and dev (?P<dev_b>\d+)\(=(?P<bus_b>[0-9a-fA-F]+)\)"
         r"|peer query failed between dev (?P<dev_a2>\d+)\(=(?P<bus_a2>[0-9a-fA-F]+)\) and dev (?P<dev_b2>\d+)\(=(?P<bus_b2>[0-9a-fA-F]+)\)"
         r"|P2P is disabled between connected GPUs (?P<dev_a3>\d+) and (?P<dev_b3>\d+)\..*"
         r"|P2P not supported between GPU(?P<dev_a4>\d+) and GPU(?P<dev_b4>\d+))",
         "2.4-2.30",
         ("Could not enable P2P between dev 1(=1b000) and dev 0(=1a000)",
          "P2P is disabled between connected GPUs 1 and 0. You can repress this message with NCCL_IGNORE_DISABLED_P2P=1.",
          "peer query failed between dev 0(=3d000) and dev 1(=3e000)", "P2P not supported between GPU0 and GPU1")),
    Kind("retry", "events",
         r"^(?:Call to (?:ibv_modify_qp|connect) (?:failed|returned) .*retrying.*|\w+: connect to \S+ returned .*retrying.*|Call to connect returned .*, retrying)$",
         "2.4-2.30", ("Call to connect returned Connection refused, retrying",
                      "socketStartConnect: connect to 10.1.1.2<4000> returned Connection refused, retrying (3/34) after sleep for 300 msec",
                      "Call to ibv_modify_qp failed with 110 Connection timed out, <qp_state>, retrying 1/5 after 100 msec of sleep")),
    Kind("shared_mem_limit", "events", r"^ncclMaxSharedMem (?P<detail>\d+ exceeds .*)$", "2.2x",
         ("ncclMaxSharedMem 214784 exceeds device/fn maxSharedMem 101376",)),
]


# -- WARN lines: every one is an event; the class says what kind of failure it reports ---------
# (class, pattern on the message, what it usually means), first match wins: the coarse view of
# ``postmortem.parsers.nccl_errors.CAUSES``, which holds each error's cause, fix and samples.
WARN_CLASSES: list[tuple[str, str, str]] = warn_classes()

# ncclResult_t (section 3.10).
RESULT_CODES = {0: "success", 1: "unhandled cuda error", 2: "system error", 3: "internal error",
                4: "invalid argument", 5: "invalid usage", 6: "remote error", 7: "in progress"}

# Section 3.9: datatype and reduction op numbers.
DATATYPES = {0: "int8", 1: "uint8", 2: "int32", 3: "uint32", 4: "int64", 5: "uint64", 6: "float16",
             7: "float32", 8: "float64", 9: "bfloat16", 10: "float8e4m3", 11: "float8e5m2"}
DATATYPE_BYTES = {0: 1, 1: 1, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 1, 11: 1}
RED_OPS = {0: "sum", 1: "prod", 2: "max", 3: "min", 4: "avg"}


# -- version fingerprints (section 4 and 3.14.6): message shapes only some releases print ------
# (evidence, pattern on the message, first minor, last minor); 2.X is written as minor X.
# Applied by the analyzer once over every process's distinct message shapes
# (``postmortem.analyzer.nccl_model``), which intersects the ranges a process shows.
FINGERPRINTS: list[tuple[str, str, int, int]] = [
    ("2.4 NET ring line without device ids", r"^Ring \d+ : \d+ -> \d+ \[(?:send|receive)\] via NET/", 4, 4),
    ("`Ring NN : a[dev] -> b[dev]` connection line", r"^Ring \d+ : \d+\[[0-9a-fA-F]+\] -> \d+\[[0-9a-fA-F]+\] via ", 4, 6),
    # SHM lines never print a connection index (2.13-2.29), so only P2P and NET lines count here.
    ("`Channel NN :` P2P line without connection index", r"^Channel \d+ : \d+\[[0-9a-fA-F]+\] -> \d+\[[0-9a-fA-F]+\] via P2P/", 7, 13),
    ("`Channel NN :` NET line without connection index", r"^Channel \d+ : \d+\[[0-9a-fA-F]+\] -> \d+\[[0-9a-fA-F]+\] \[(?:send|receive)\] via NET/", 7, 11),
    ("NET connection line with connection index and bus id", r"^Channel \d+/\d+ : \d+\[[0-9a-fA-F]{3,}\] -> \d+\[[0-9a-fA-F]{3,}\] \[(?:send|receive)\] via NET/", 12, 17),
    ("P2P/SHM connection line with connection index and bus id", r"^Channel \d+/\d+ : \d+\[[0-9a-fA-F]{3,}\] -> \d+\[[0-9a-fA-F]{3,}\] via (?:P2P|SHM)/", 14, 17),
    ("connection line with device index", r"^Channel \d+/\d+ : \d+\[\d{1,2}\] -> \d+\[\d{1,2}\] ", 18, 30),
    ("P2P/CUMEM transport", r" via P2P/CUMEM", 18, 30),
    ("SHM/x/y transport", r" via SHM/\w+/\w+", 13, 29),
    ("`direct shared memory` transport", r" via direct shared memory", 4, 12),
    ("Trees with up|down pairs", r"^Trees \[\d+\] -?\d+/-?\d+/-?\d+->-?\d+->-?\d+\|", 5, 7),
    ("Trees as up->me->downs", r"^Trees \[\d+\] -?\d+->-?\d+->-?\d+/", 4, 4),
    ("Trees as downs->me->up", r"^Trees \[\d+\] -?\d+/-?\d+/-?\d+->-?\d+->-?\d+(?: \[|$)", 8, 30),
    ("Init START line", r"- Init START$", 18, 30),
    ("Init COMPLETE with nvmlDev and no busId", r"^comm \S+ rank \d+ nranks \d+ cudaDev \d+ nvmlDev \d+ - Init COMPLETE$", 4, 4),
    ("Init COMPLETE with busId and no commId", r"^comm \S+ rank \d+ nranks \d+ cudaDev \d+ busId [0-9a-fA-F]+ - Init COMPLETE$", 5, 15),
    ("Init COMPLETE with commId and no nvmlDev", r"^comm \S+ rank \d+ nranks \d+ cudaDev \d+ busId [0-9a-fA-F]+ commId \S+ - Init COMPLETE$", 16, 17),
    ("Init COMPLETE with nvmlDev, busId and commId, no API name", r"^comm \S+ rank \d+ nranks \d+ cudaDev \d+ nvmlDev \d+ busId \S+ commId \S+ - Init COMPLETE$", 18, 20),
    ("API name before `comm`", r"^(?:\[Rank \d+\] )?nccl\w+ comm ", 21, 30),
    ("`[Rank N]` before the API name", r"^\[Rank \d+\] nccl\w+ comm ", 29, 30),
    ("layout line (nNodes, localRanks, MNNVL)", r"^comm \S+ rank \d+ nRanks \d+ nNodes ", 20, 30),
    # %3d columns hold at most 20 ranks and are never cut; the 2.23+ minimal width looks the
    # same for 1000+ ranks (width 4) but is then always cut at 128 characters with `...`.
    ("ring order with %3d columns", r"^Channel \d+/\d+ :    0(?: +\d+){0,19}$", 5, 22),
    ("ring order with minimal-width columns", r"^Channel \d+/\d+ : {1,3}0 ", 23, 30),
    ("ring order cut at 128 characters", r"^Channel \d+/\d+ : +\d+(?: +\d+)* ?\.\.\.$", 23, 30),
    ("`Channel NN :` ring order without channel count", r"^Channel \d+ :    0(?: |$)", 4, 4),
    ("`Connected all rings/trees`", r"^Connected all (?:rings|trees)", 8, 30),
    ("`Connected all rings, use ring PXN`", r"^Connected all rings, use ring PXN", 24, 30),
    ("`Bootstrap : Using [i]if` list", r"^Bootstrap : Using \[\d+\]", 4, 7),
    ("`Bootstrap : Using if` (one interface)", r"^Bootstrap : Using [^\[\s]", 8, 23),
    ("`Bootstrap: Using` (no space before the colon)", r"^Bootstrap: Using ", 24, 30),
    ("plugin wording `No plugin found (libnccl-net.so).`", r"^NET/Plugin : No plugin found \(libnccl-net\.so\)\.$", 4, 4),
    ("plugin wording `..., using internal implementation`", r"^NET/Plugin : No plugin found \([^)]*\), using internal implementation$", 5, 11),
    ("plugin wording `Plugin load (...) returned`", r"^NET/Plugin : (?:Plugin load \(|No plugin found, using internal implementation)", 12, 18),
    ("plugin wording `dlerror=` / `Plugin load returned`", r"^NET/Plugin : (?:dlerror=|Plugin load returned)", 19, 20),
    ("plugin wording `NET/Plugin: No plugin found (` / `Using internal network plugin.`", r"^NET/Plugin: (?:No plugin found \(|Plugin load returned .* : when loading|Using internal network plugin\.)", 21, 22),
    ("plugin wording `Could not find: ... Using internal network plugin.`", r"^NET/Plugin: Could not find: \S+ Using internal network plugin\.$", 23, 25),
    ("plugin wording `Could not find: ... Using internal net plugin.`", r"^NET/Plugin: Could not find: \S+ Using internal net plugin\.$", 26, 26),
    ("plugin wording `Could not find: libnccl-net.so.`", r"^NET/Plugin: Could not find: \S+\.so\.$", 27, 30),
    ("`Using non-device net plugin version`", r"^Using non-device net plugin version", 19, 30),
    ("`Using network`", r"^Using network ", 6, 30),
    ("threadThresholds with two groups", r"^threadThresholds -?\d+/-?\d+/-?\d+ \| -?\d+/-?\d+/-?\d+$", 5, 5),
    ("threadThresholds with three groups", r"^threadThresholds -?\d+/-?\d+/-?\d+ \| -?\d+/-?\d+/-?\d+ \| -?\d+/-?\d+/-?\d+$", 6, 13),
    ("threadThresholds with CollNet Direct/Chain", r"^threadThresholds -?\d+/-?\d+/-?\d+ \| -?\d+/-?\d+/-?\d+ \| -?\d+ \| -?\d+$", 14, 30),
    ("`Threads per block`", r"^Threads per block", 5, 5),
    ("channel counts coll/p2p", r"^\d+ coll channels, \d+ p2p channels", 7, 16),
    ("channel counts coll/nvls/p2p", r"^\d+ coll channels, \d+ nvls channels", 17, 19),
    ("channel counts coll/collnet/nvls/p2p", r"^\d+ coll channels, \d+ collnet channels", 20, 30),
    ("`Init timings:`", r"^Init timings: ", 22, 22),
    ("`Init timings - api:`", r"^Init timings - ", 23, 30),
    ("`CC x, Multi-GPU CC y`", r"^CC \w+, Multi-GPU CC", 22, 23),
    ("`CC x, workFifoBytes`", r"^CC \w+, workFifoBytes", 24, 30),
    # As INFO lines only: the same text is a TRACE line in 2.5-2.19 builds (checked by level).
    ("numeric decision line without function (INFO)", r"^\d+ Bytes -> Algo -?\d+ proto", 20, 22),
    ("numeric decision line with function (INFO)", r"^\w+: \d+ Bytes -> Algo -?\d+ proto", 23, 23),
    ("named decision line", r" Bytes -> Algo \w+ proto \w+ channel\{", 24, 30),
    ("`Latency/AlgBw` tuning table", r"^Latency/AlgBw \|", 5, 17),
    ("`Algorithm` block tuning table", r"^\s*Algorithm\s+\|", 18, 30),
    ("`Check P2P Type intraNodeP2pSupport`", r"^Check P2P Type intraNodeP2pSupport", 24, 26),
    ("`Check P2P Type isAllDirectP2p` (2.27 form)", r"^Check P2P Type isAllDirectP2p \d+ directMode \d+$", 27, 27),
    ("`Check P2P Type ... isAllCudaP2p`", r"^Check P2P Type .* isAllCudaP2p", 28, 30),
    ("`(NVLS_NCHANNELS n)`", r"\(NVLS_NCHANNELS \d+\)", 27, 29),
    ("IB completion `status=`", r"Got completion .*status=\d+", 20, 30),
    ("IB completion `with error`", r"Got completion .*with error \d+", 4, 19),
    ("IB completion with `hca`", r"^NET/IB: Got completion.* hca \S+", 22, 30),
    ("`P2P Chunksize`", r"^P2P Chunksize", 16, 30),
]
