"""Hardware tool output (``docs/formats/hardware.md`` sections 4-7).

Line kinds handled, each gated by a marker of its tool in the same input so that ordinary
logs never lose lines to it:

* ``nvidia-smi topo -m`` in its three generations (NIC columns named ``mlx5_N`` with only
  ``CPU Affinity``; ``NIC<k>`` columns with ``CPU Affinity`` + ``NUMA Affinity``; the current
  one with ``GPU NUMA ID`` and a ``NIC Legend:``), tab-separated or space-aligned, ``-mp``
  (PCIe-only view) and ``-p2p r|w|...`` matrices, the ``Legend:`` block: the matrix goes to
  ``topology`` (one row per ordered pair, ``X`` cells dropped, ``matrix`` = ``topo`` / ``pcie``
  (``-mp``) / ``p2p``; ``to_device`` names the NIC from the legend), the ``NIC Legend:`` to
  ``topo_nics``, each GPU row's affinity columns to ``gpus``;
* ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]``: the header names the fields
  (units in brackets); ``noheader`` output is read when the command line with
  ``--query-gpu=`` is in the input. Every cell goes to ``gpu_query`` (row, field, unit, value);
  the common fields also to ``gpus``;
* nccl-tests output: the version / test-starting / nThread / Blocking lines and the footer
  (``Out of bounds``, ``Avg bus bandwidth``, ``Collective test concluded``) go to
  ``bench_runs`` (key, value); the ``#  Rank  0 Group  0 Pid ... device 0 [0x1b] NAME`` lines
  (with or without ``Group``) to ``gpus`` (source ``nccl-tests``); one row per size (current
  layout with ``root`` and ``#wrong``, legacy layout with a float ``error`` column and no
  ``root``) to ``bench_results``. Lines may have lost their ``#``; ``mpirun --tag-output``
  ``[0]`` tags inside rows are removed. Interleaved ``NCCL INFO`` lines are left to the NCCL
  parser, wrapper and ssh lines stay unparsed;
* ``ibstat`` (``CA 'mlx5_0'`` blocks, ``Port N:``; tab or space indentation) and
  ``ibv_devinfo`` (``hca_id:`` blocks, ``port: N``) -> ``nic_ports`` (one row per CA and
  port; a CA whose port block was cut off keeps one row with a null port);
* ``ibdev2netdev`` (``mlx5_0 port 1 ==> ibp26s0 (Down)``) -> ``nic_ports`` (source
  ``ibdev2netdev``, ``netdev``, ``state`` = the network interface's Up/Down, which is not the IB
  port's state: docs/formats/hardware.md section 6);
* ``ibwarn: [pid] func: text`` / ``ibpanic: [pid] func: text`` lines of infiniband-diags ->
  ``events`` (kind ``ibwarn`` / ``ibpanic``, ``detail`` = the text, ``device`` = a quoted device);
* ``iblinkinfo`` link lines -> ``ib_links``;
* a ``- H100: 81559MiB (85.52 GB)`` memory list (people compile these from nvidia-smi) ->
  ``gpus`` (source ``memory list``).

Every table carries ``line_no``; matrix rows cite the row's line. Multi-line blocks are
followed by forward-filling the block's header line over the lines of one stream.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.ascii_text import rx
from postmortem.parsers.base import ParseResult, among, collect_each, conform, consumed_of, to_int
from postmortem.parsers.lines import file_of, files_where, of_files, with_stream
from postmortem.parsers.tables import SHARED

NAME = "hwtools"

SAMPLE_LINES = [
    # nvidia-smi topo -m, current generation
    "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID",
    "GPU0\t X \tNV18\tPIX\t0-23,96-119\t0\t\tN/A",
    "GPU1\tNV18\t X \tNODE\t0-23,96-119\t0\t\tN/A",
    "NIC0\tPIX\tNODE\t X ",
    "",
    "Legend:",
    "",
    "  X    = Self",
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "  PIX  = Connection traversing at most a single PCIe bridge",
    "  NV#  = Connection traversing a bonded set of # NVLinks",
    "",
    "NIC Legend:",
    "",
    "  NIC0: mlx5_0",
    # legacy generation: NIC columns named by device, CPU Affinity only
    "        GPU0    GPU1    mlx5_0  CPU Affinity",
    "GPU0     X      NV6     PIX     0-23,48-71",
    "GPU1    NV6      X      PXB     0-23,48-71",
    "mlx5_0  PIX     PXB      X ",
    # middle generation
    "        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity",
    "GPU0     X      SYS     PHB     0-47,96-143     0",
    "GPU1    SYS      X      SYS     48-95,144-191   1",
    # nvidia-smi --query-gpu ... --format=csv
    "nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total --format=csv",
    "index, name, pci.bus_id, memory.total [MiB]",
    "0, NVIDIA H20, 00000000:18:00.0, 97871 MiB",
    "1, NVIDIA H20, 00000000:2A:00.0, 97871 MiB",
    "nvidia-smi --query-gpu=index,uuid,memory.used --format=csv,noheader,nounits",
    "0, GPU-3f2a6c1e-0000-4000-8000-000000000000, 512",
    "- H100: 81559MiB (85.52 GB)",
    # nccl-tests
    "# nccl-tests version 2.17.1 (0a4a4de) nccl-headers=22603 nccl-library=22603",
    "# Collective test starting: all_reduce_perf",
    ("# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
     "validation: 1 graph: 0"),
    "#",
    "# Using devices",
    "#  Rank  0 Group  0 Pid  43215 on h20-node-01 device  0 [0x18] NVIDIA H20",
    "#   Rank  1 Pid  43216 on h20-node-01 device  1 [0000:2a:00] NVIDIA H20",
    "#                                                              out-of-place                       in-place",
    ("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   "
     "busbw  #wrong"),
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)",
    "           8             2     float     sum      -1    19.90    0.00    0.00       0    18.96    0.00    0.00       0",
    "   134217728      33554432     float     sum      -1   1108.0  121.14  227.14     N/A   1111.2  120.79  226.48     N/A",
    "   134217728       4194304     float    none      -1    24410    5.50    4.81       0    24425    5.49    4.81       0",
    "           8             2   float     sum    59.98    0.00    0.00  2e-07    56.81    0.00    0.00  1e-07",
    "# Out of bounds values : 0 OK",
    "# Avg bus bandwidth    : 42.8721 ",
    "# Collective test concluded: all_reduce_perf",
    " Blocking Enabled: wait for completion and barrier after each collective ",
    # ibstat
    "CA 'mlx5_0'",
    "\tCA type: MT4129",
    "\tNumber of ports: 1",
    "\tFirmware version: 28.39.1002",
    "\tPort 1:",
    "\t\tState: Active",
    "\t\tPhysical state: LinkUp",
    "\t\tRate: 400",
    "\t\tLink layer: Ethernet",
    # ibv_devinfo
    "hca_id: mlx5_1",
    "        transport:                      InfiniBand (0)",
    "        fw_ver:                         28.39.1002",
    "        vendor_part_id:                 4129",
    "                port:   1",
    "                        state:                  PORT_DOWN (1)",
    "                        active_mtu:             1024 (3)",
    "                        link_layer:             Ethernet",
    # ibdev2netdev, infiniband-diags' own warnings
    "mlx5_0 port 1 ==> ibp26s0 (Down)",
    "mlx5_bond_0 port 1 ==> bond0 (Up)",
    "ibwarn: [168988] umad_get_ca: opened mlx4_0",
    "ibpanic: [4121] main: stat of IB device 'mlx5_3' failed: No such file or directory",
    # iblinkinfo
    "CA: gpu-v100-3 HCA-1:",
    ("      0x60b160dc288d1d8a      6    1[  ] ==( 4X      25.78125 Gbps Active/  LinkUp)==>       3    3[  ] "
     "\"MF0;ibswitch254:MQM8700/U1\" ( )"),
    "Switch: 0x75ff4c246835b5b9 MF0;ibswitch254:MQM8700/U1:",
    "           3    1[  ] ==( 4X      25.78125 Gbps Active/  LinkUp)==>       1    1[  ] \"gpu-v100-0 HCA-1\" ( )",
]

TOPOLOGY_SCHEMA = {"line_no": pl.UInt32, "matrix": pl.String, "from": pl.String, "to": pl.String,
                   "link": pl.String, "to_device": pl.String}
GPUS_SCHEMA = {"line_no": pl.UInt32, "source": pl.String, "gpu": pl.String, "index": pl.Int64,
               "name": pl.String, "bus_id": pl.String, "uuid": pl.String, "serial": pl.String,
               "memory_total_mib": pl.Int64, "memory_used_mib": pl.Int64, "driver_version": pl.String,
               "cpu_affinity": pl.String, "numa_affinity": pl.String, "gpu_numa_id": pl.String,
               "rank": pl.Int64, "pid": pl.Int64, "host": pl.String}
GPU_QUERY_SCHEMA = {"line_no": pl.UInt32, "field": pl.String, "unit": pl.String, "value": pl.String}
BENCH_RESULTS_SCHEMA = {"line_no": pl.UInt32, "run": pl.UInt32, "op": pl.String, "size_bytes": pl.Int64,
                        "count": pl.Int64, "dtype": pl.String, "redop": pl.String, "root": pl.Int64,
                        "oop_time_us": pl.Float64, "oop_algbw_gbs": pl.Float64, "oop_busbw_gbs": pl.Float64,
                        "oop_wrong": pl.Int64, "oop_error": pl.Float64,
                        "ip_time_us": pl.Float64, "ip_algbw_gbs": pl.Float64, "ip_busbw_gbs": pl.Float64,
                        "ip_wrong": pl.Int64, "ip_error": pl.Float64}
BENCH_RUNS_SCHEMA = {"line_no": pl.UInt32, "run": pl.UInt32, "op": pl.String, "key": pl.String,
                     "value": pl.String}
NIC_PORTS_SCHEMA = {"line_no": pl.UInt32, "source": pl.String, "ca": pl.String, "port": pl.Int64,
                    "state": pl.String, "physical_state": pl.String, "rate_gbps": pl.Float64,
                    "link_layer": pl.String, "fw": pl.String, "ca_type": pl.String,
                    "vendor_part_id": pl.String, "node_guid": pl.String, "port_guid": pl.String,
                    "active_mtu": pl.Int64, "max_mtu": pl.Int64, "lid": pl.String, "netdev": pl.String}
EVENTS_SCHEMA = SHARED["events"].columns_of(NAME)
TOPO_NICS_SCHEMA = {"line_no": pl.UInt32, "nic": pl.String, "device": pl.String}
IB_LINKS_SCHEMA = {"line_no": pl.UInt32, "device": pl.String, "guid": pl.String, "lid": pl.Int64,
                   "port": pl.Int64, "width": pl.String, "lane_gbps": pl.Float64, "rate_gbps": pl.Float64,
                   "state": pl.String, "physical_state": pl.String, "peer_lid": pl.Int64,
                   "peer_port": pl.Int64, "peer": pl.String}

TABLES = {"topology": TOPOLOGY_SCHEMA, "topo_nics": TOPO_NICS_SCHEMA, "gpus": GPUS_SCHEMA, "gpu_query": GPU_QUERY_SCHEMA,
          "bench_results": BENCH_RESULTS_SCHEMA, "bench_runs": BENCH_RUNS_SCHEMA,
          "nic_ports": NIC_PORTS_SCHEMA, "ib_links": IB_LINKS_SCHEMA, "events": EVENTS_SCHEMA}


# Columns that hold a line number besides ``line_no`` (0: none), for ``postmortem.analyzer.ingest``
# to map back when it hands over several inputs at once.
LINE_NUMBER_COLUMNS = {"bench_results": ("run",), "bench_runs": ("run",)}

_EMPTY = {name: pl.DataFrame(schema=schema) for name, schema in TABLES.items()}


def _empty() -> dict[str, pl.DataFrame]:
    return dict(_EMPTY)  # frames are never modified in place; sharing the empty ones is safe


_ROW_HINT = r"^\s*(?:\[\d+\])?\s*\d+\s+\d+\s+[a-z]"



def file_gate(text: pl.Expr) -> pl.Expr:
    """A line this parser could start from: an input with none gives nothing (postmortem.analyzer.ingest
    skips the parser there; tests/test_batched_parsing.py holds the skip to the full run)."""
    # the five tool families parse looks for first: their literals as one regex, their patterns
    # anchored at the line start as another (a regex that mixes anchored and unanchored
    # alternatives walks every byte of every line, and so did the many single tests)
    literals = "|".join(pl.escape_regex(literal) for literal in ("GPU0", "Legend:", "--query-gpu=", "Gbps"))
    line_starts = "|".join(f"(?:{pattern})" for pattern in (
        r"^\s*[a-z_]+\.[a-z_.]+(?: \[[^\]]+\])?(?:, |$)", r"^- [^:]+: \d+ ?MiB \(", _ROW_HINT, r"^CA '|^hca_id:",
        _IBDEV2NETDEV, _IBDIAG))
    return (text.str.contains(rx(literals)) | text.str.contains(rx(_NT_MARKERS))
            | text.str.contains(rx(line_starts))).fill_null(False)


def parse(lines: pl.DataFrame) -> ParseResult:
    """The tool outputs of one input, or of several at once (an ``input_id`` column:
    ``postmortem.analyzer.ingest`` hands over a chunk's inputs that pass ``file_gate`` in one
    frame): each tool's parser reads only the inputs that hold its output, and what one input's
    lines say (a NIC legend, a matrix's kind) applies to that input alone (``_file``)."""
    tables = _empty()
    if lines is None or lines.is_empty() or "text" not in lines.columns:
        return ParseResult(tables=tables)
    # Which tools' output is in which input: decided on the text before anything else is computed.
    found = files_where(lines, **{step.__name__: test(pl.col("text")).any() for test, step in _TOOLS})
    if not any(found[step.__name__].any() for _, step in _TOOLS):
        return ParseResult(tables=tables)
    df = with_stream(lines).with_columns(_file=file_of(lines))
    used: list[pl.DataFrame] = []
    for _, step in _TOOLS:
        if (mine := of_files(df, found, step.__name__)) is not None:
            step(mine, tables, used)
    tables = {name: frame if frame is _EMPTY[name] else conform(frame, TABLES[name]) for name, frame in tables.items()}
    return ParseResult(tables=tables, consumed=consumed_of(*used))


# -- nvidia-smi topo -m -----------------------------------------------------------------------

_TOPO_HEADER = (r"^\s*GPU0(?:\s+(?:GPU\d+|NIC\d+|mlx\d+_\w+|[a-z]+\d+_\w+))*"
                r"(?:\s+CPU Affinity)?(?:\s+NUMA Affinity)?(?:\s+GPU NUMA ID)?\s*$")
_TOPO_ROW = r"^\s*(GPU\d+|NIC\d+|mlx\d+_\w+)\s+\S"
_LEGEND = (r"^\s*(?:Legend:|NIC Legend:|(?:X|SYS|NODE|PHB|PXB|PIX|NV#|OK|CNS|GNS|TNS|NS|DR|U)\s+= .*"
           r"|NIC\d+: \S+)\s*$")
_TOPO_CMD = r"nvidia-smi topo (-mp|-m|-p2p\s*\w*|--matrix)"
_P2P_CODES = ["OK", "CNS", "GNS", "TNS", "NS", "DR", "U"]


def _topo(df: pl.DataFrame, tables: dict, used: list) -> None:
    t = pl.col("text")
    s = "_stream"
    header = t.str.contains(rx(_TOPO_HEADER))
    row = t.str.contains(rx(_TOPO_ROW)) & ~header
    cmd = t.str.extract(rx(_TOPO_CMD), 1)
    d = df.with_columns(
        _hdr=pl.when(header).then(pl.col("line_no")).when(~row).then(pl.lit(0, dtype=pl.UInt32))
        .forward_fill().over(s),
        _view=pl.when(cmd.is_not_null()).then(cmd).forward_fill().over(s),
    )
    heads = d.filter(header).select(
        "_file", _hdr="line_no", _view="_view",
        names=t.str.replace_all("\t", "  ").str.extract_all(rx(r"CPU Affinity|NUMA Affinity|GPU NUMA ID|\S+")),
    )
    rows = d.filter(row & (pl.col("_hdr") > 0)).select(
        "line_no", "_hdr", cells=t.str.extract_all(rx(r"\S+")))
    legend_lines = d.filter(t.str.contains(rx(_LEGEND)) | cmd.is_not_null())
    legend = legend_lines.select(
        "line_no", nic=t.str.extract(rx(r"^\s*(NIC\d+): "), 1), device=t.str.extract(rx(r"^\s*NIC\d+: (\S+)"), 1),
        _file="_file",
    ).drop_nulls("nic")
    tables["topo_nics"] = legend.drop("_file")
    if heads.is_empty():
        used.append(legend_lines.select("line_no"))
        return
    heads = heads.with_columns(
        n_matrix=pl.col("names").list.eval(pl.element().str.contains(rx(r"^(?:GPU\d+|NIC\d+|\w+\d+_\w+)$")).cast(pl.Int32))
        .list.sum())
    rows = rows.join(heads, on="_hdr", how="inner")
    # The row name, then one cell per matrix column, then the affinity columns.
    cells = rows.select(
        "line_no", "_file", "_hdr", "_view", "names", "n_matrix",
        from_=pl.col("cells").list.first(),
        matrix=pl.col("cells").list.slice(1, pl.col("n_matrix")),
        trailing=pl.col("cells").list.slice(pl.col("n_matrix") + 1),
    )
    pairs = cells.select(
        "line_no", "_file", "_view", pl.col("from_").alias("from"),
        # a torn row has fewer cells than the header has columns: pair only the cells it has
        to=pl.col("names").list.slice(0, pl.col("matrix").list.len()), link="matrix",
    ).explode(["to", "link"]).drop_nulls("link")
    # what a view's matrix is, and which NIC a NIC<k> column is, are said per input
    kinds = pairs.group_by("_file", "_view").agg(p2p=pl.col("link").is_in(_P2P_CODES).any())
    pairs = pairs.join(kinds, on=["_file", "_view"], how="left", nulls_equal=True).with_columns(
        matrix=pl.when(pl.col("p2p") & ~pl.col("link").str.contains(rx(r"^(?:NV\d+|PIX|PXB|PHB|NODE|SYS)$")))
        .then(pl.lit("p2p"))
        .when(pl.col("_view") == "-mp").then(pl.lit("pcie"))
        .when(pl.col("_view").str.starts_with("-p2p")).then(pl.lit("p2p"))
        .otherwise(pl.lit("topo")))
    pairs = pairs.filter(pl.col("link") != "X")
    # NIC<k> columns are named by the NIC legend (the first one in the input); legacy columns
    # are the device names themselves.
    names = legend.group_by("_file", "nic").agg(to_device=pl.col("device").first())
    pairs = pairs.join(names, left_on=["_file", "to"], right_on=["_file", "nic"], how="left").with_columns(
        to_device=pl.when(pl.col("to").str.starts_with("NIC")).then(pl.col("to_device"))
        .when(~pl.col("to").str.starts_with("GPU")).then(pl.col("to")))
    tables["topology"] = pairs.select("line_no", "matrix", "from", "to", "link", "to_device").sort("line_no", "to")
    tail_names = pl.col("names").list.slice(pl.col("n_matrix"))
    gpus = cells.filter(pl.col("from_").str.starts_with("GPU") & (pl.col("trailing").list.len() > 0)) \
        .with_columns(tail_names=tail_names)
    gpus = gpus.select(
        "line_no", source=pl.lit("nvidia-smi topo"), gpu="from_",
        index=to_int(pl.col("from_").str.extract(rx(r"(\d+)"), 1)),
        cpu_affinity=pl.when(pl.col("tail_names").list.contains("CPU Affinity")).then(pl.col("trailing").list.get(0, null_on_oob=True)),
        numa_affinity=pl.when(pl.col("tail_names").list.contains("NUMA Affinity")).then(pl.col("trailing").list.get(1, null_on_oob=True)),
        gpu_numa_id=pl.when(pl.col("tail_names").list.contains("GPU NUMA ID")).then(pl.col("trailing").list.get(2, null_on_oob=True)),
    )
    tables["gpus"] = pl.concat([tables["gpus"], conform(gpus, GPUS_SCHEMA)], how="diagonal_relaxed")
    used += [heads["_hdr"].alias("line_no"), rows, legend_lines]


# -- nvidia-smi --query-gpu --format=csv --------------------------------------------------------

_CSV_FIELD = r"[a-z_]+(?:\.[a-z_]+)*(?: \[[^\]]+\])?"
_CSV_HEADER = rf"^\s*{_CSV_FIELD}(?:, {_CSV_FIELD})*\s*$"
_KNOWN_FIELD = (r"(?:^|, )(?:index|name|uuid|serial|pci\.bus_id|memory\.(?:total|used|free)|driver_version|"
                r"temperature\.gpu|utilization\.(?:gpu|memory)|power\.draw|pstate|compute_cap|pid|process_name|"
                r"used_gpu_memory|clocks\.\w+)(?: \[|,|\s*$)")
_QUERY_CMD = r"--query-(?:gpu|compute-apps)=([\w.,]+).*?--format=([\w,]+)|--format=([\w,]+).*?--query-(?:gpu|compute-apps)=([\w.,]+)"
_MEMORY_LIST = r"^- ([^:]+): (\d+) ?MiB \(([\d.]+) GB\)\s*$"


def _smi_csv(df: pl.DataFrame, tables: dict, used: list) -> None:
    t = pl.col("text")
    s = "_stream"
    query = t.str.extract_groups(rx(_QUERY_CMD))
    d = df.with_columns(
        _fields=pl.coalesce(query.struct.field("1"), query.struct.field("4")),
        _format=pl.coalesce(query.struct.field("2"), query.struct.field("3")),
    )
    is_cmd = pl.col("_fields").is_not_null()
    header = t.str.contains(rx(_CSV_HEADER)) & t.str.contains(rx(_KNOWN_FIELD)) & ~is_cmd
    noheader_cmd = is_cmd & pl.col("_format").str.contains("noheader")
    blank = t.str.strip_chars() == ""
    # A block starts at a header line (or at a noheader command line) and ends at a blank line
    # or at any line whose field count differs from the header's.
    names = (pl.when(header).then(t.str.strip_chars())
             .when(noheader_cmd).then(pl.col("_fields").str.replace_all(",", ", ")))
    d = d.with_columns(
        _names=names, _nounits=pl.when(is_cmd).then(pl.col("_format").str.contains("nounits")),
    ).with_columns(
        _anchor=pl.when(pl.col("_names").is_not_null()).then(pl.col("line_no"))
        .when(blank | is_cmd).then(pl.lit(0, dtype=pl.UInt32)).forward_fill().over(s),
        _nounits=pl.col("_nounits").forward_fill().over(s),
    )
    heads = d.filter(pl.col("_names").is_not_null()).select(
        _anchor="line_no", _hnames=pl.col("_names").str.split(", "))
    rows = d.filter((pl.col("_anchor") > 0) & pl.col("_names").is_null() & ~blank & ~is_cmd) \
        .join(heads, on="_anchor", how="inner") \
        .with_columns(_cells=t.str.strip_chars().str.split(", "))
    rows = rows.filter(pl.col("_cells").list.len() == pl.col("_hnames").list.len())
    memory = df.filter(t.str.contains(rx(_MEMORY_LIST))).select(
        "line_no", source=pl.lit("memory list"), name=t.str.extract(rx(_MEMORY_LIST), 1),
        memory_total_mib=to_int(t.str.extract(rx(_MEMORY_LIST), 2)))
    used += [d.filter(is_cmd), heads["_anchor"].alias("line_no"), rows, memory]
    frames = [conform(memory, GPUS_SCHEMA)]
    if not rows.is_empty():
        long = rows.select("line_no", field=pl.col("_hnames"), value=pl.col("_cells")).explode(["field", "value"])
        long = long.with_columns(
            unit=pl.col("field").str.extract(rx(r"\[([^\]]+)\]"), 1),
            field=pl.col("field").str.replace(rx(r"\s*\[[^\]]+\]$"), ""),
            value=pl.col("value").str.strip_chars(),
        ).with_columns(
            value=pl.when(pl.col("value").is_in(["[N/A]", "N/A", "[Not Supported]", "[Unknown Error]"])).then(None)
            .when(pl.col("unit").is_not_null() & pl.col("value").str.ends_with(" " + pl.col("unit").fill_null("")))
            .then(pl.col("value").str.slice(0, pl.col("value").str.len_chars() - pl.col("unit").str.len_chars() - 1))
            .when(pl.col("value").str.contains(rx(r"^-?[\d.]+ (?:MiB|%|W|MHz|C)$")))
            .then(pl.col("value").str.extract(rx(r"^(-?[\d.]+) "), 1))
            .otherwise(pl.col("value")))
        tables["gpu_query"] = long.select("line_no", "field", "unit", "value")
        wide = long.filter(pl.col("field").is_in(["index", "name", "pci.bus_id", "uuid", "serial", "memory.total",
                                                  "memory.used", "driver_version"]))
        if not wide.is_empty():
            wide = wide.pivot(on="field", index="line_no", values="value", aggregate_function="first")
            rename = {"pci.bus_id": "bus_id", "memory.total": "memory_total_mib", "memory.used": "memory_used_mib"}
            wide = wide.rename({k: v for k, v in rename.items() if k in wide.columns})
            wide = wide.with_columns(source=pl.lit("nvidia-smi csv"))
            if "index" in wide.columns:
                wide = wide.with_columns(gpu=pl.concat_str([pl.lit("GPU"), pl.col("index")]))
            for c in ("memory_total_mib", "memory_used_mib"):
                if c in wide.columns:
                    wide = wide.with_columns(pl.col(c).cast(pl.Float64, strict=False).cast(pl.Int64, strict=False))
            frames.append(conform(wide, GPUS_SCHEMA))
    tables["gpus"] = pl.concat([tables["gpus"], *frames], how="diagonal_relaxed")


# -- nccl-tests -------------------------------------------------------------------------------

_NT_MARKERS = r"nThread \d+ nGpus|Using devices|out-of-place|Avg bus bandwidth|nccl-tests version|_perf(?:_mpi)?\b"
_F = r"(-?[\d.]+(?:e[-+]?\d+)?)"
_W = r"(\d+|N/A|-?[\d.]+(?:e[-+]?\d+)?)"
_ROW = (rf"^\s*(\d+)\s+(\d+)\s+([a-z][a-z0-9_]*)\s+([a-z][a-z0-9_]*)\s+(?:(-?\d+)\s+)?"
        rf"{_F}\s+{_F}\s+{_F}\s+{_W}\s+{_F}\s+{_F}\s+{_F}\s+{_W}\s*$")
_DEVICE = (r"^\s*#?\s*Rank\s+(\d+)(?:\s+Group\s+(\d+))?\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+"
           r"\[([0-9a-fA-Fx:.]+)\]\s+(.+?)\s*$")
_NT_HEAD = (r"^\s*#?\s*(?:nThread \d+ nGpus|Using devices\s*$|Blocking Enabled:|nccl-tests version|"
            r"Collective test (?:starting|concluded):|Out of bounds values\s*:|Avg bus bandwidth\s*:)")
_TABLE_HEAD = r"^\s*#?\s*(?:out-of-place\s+in-place|size\s+count\s+type|\(B\)\s+\(elements\))"
_BIN = r"(?:^|[\s/])(\w+)_perf(?:_mpi)?(?:\s|$)"


def _nccl_tests(df: pl.DataFrame, tables: dict, used: list) -> None:
    t = pl.col("text")
    s = "_stream"
    # the inputs with nccl-tests' own markers; a bare result row is read anywhere
    marked = df.filter(t.str.contains(rx(_NT_MARKERS)))["_file"].unique()
    # mpirun --tag-output puts `[0]` before every field group, inside the row too.
    clean = t.str.replace_all(rx(r"\[\d+\]"), " ")
    row = clean.str.contains(rx(_ROW))
    if marked.is_empty() and not df.select(row.any()).item():
        return
    head = t.str.contains(rx(_NT_HEAD)) | t.str.contains(rx(_BIN))
    nthread = t.str.contains(rx(r"nThread \d+ nGpus"))
    opname = pl.coalesce(t.str.extract(rx(r"Collective test starting: (\w+?)(?:_perf)?(?:_mpi)?\s*$"), 1),
                         t.str.extract(rx(_BIN), 1))
    d = df.with_columns(
        _run=pl.when(nthread).then(pl.col("line_no")).forward_fill().over(s).fill_null(0).cast(pl.UInt32),
        _op=pl.when(opname.is_not_null()).then(opname).forward_fill().over(s),
        _clean=clean,
    )
    parts = pl.col("_clean").str.extract_groups(rx(_ROW))
    # (each table's steps as one plan: a Polars call each cost more than their work)
    rows = d.lazy().filter(row).with_columns(_p=parts).select(
        "line_no", run="_run", op="_op",
        size_bytes=pl.col("_p").struct.field("1"), count=pl.col("_p").struct.field("2"),
        dtype=pl.col("_p").struct.field("3"), redop=pl.col("_p").struct.field("4"),
        root=pl.col("_p").struct.field("5"),
        oop_time_us=pl.col("_p").struct.field("6"), oop_algbw_gbs=pl.col("_p").struct.field("7"),
        oop_busbw_gbs=pl.col("_p").struct.field("8"), _ow=pl.col("_p").struct.field("9"),
        ip_time_us=pl.col("_p").struct.field("10"), ip_algbw_gbs=pl.col("_p").struct.field("11"),
        ip_busbw_gbs=pl.col("_p").struct.field("12"), _iw=pl.col("_p").struct.field("13"),
    )
    legacy = pl.col("root").is_null()
    rows = rows.with_columns(
        oop_wrong=pl.when(~legacy).then(pl.col("_ow").cast(pl.Int64, strict=False)),
        ip_wrong=pl.when(~legacy).then(pl.col("_iw").cast(pl.Int64, strict=False)),
        oop_error=pl.when(legacy).then(pl.col("_ow").cast(pl.Float64, strict=False)),
        ip_error=pl.when(legacy).then(pl.col("_iw").cast(pl.Float64, strict=False)),
    ).collect(engine="in-memory")
    tables["bench_results"] = conform(rows, BENCH_RESULTS_SCHEMA)
    used.append(rows)
    if marked.is_empty():
        return
    if marked.len() < d["_file"].n_unique():
        d = d.filter(pl.col("_file").is_in(among(marked)))
    dev = d.lazy().filter(t.str.contains(rx(_DEVICE))).with_columns(_p=t.str.extract_groups(rx(_DEVICE))).select(
        "line_no", source=pl.lit("nccl-tests"),
        rank=pl.col("_p").struct.field("1"), pid=pl.col("_p").struct.field("3"),
        host=pl.col("_p").struct.field("4"), index=pl.col("_p").struct.field("5"),
        bus_id=pl.col("_p").struct.field("6"), name=pl.col("_p").struct.field("7"),
    ).with_columns(gpu=pl.concat_str([pl.lit("GPU"), pl.col("index")])).collect(engine="in-memory")
    tables["gpus"] = pl.concat([tables["gpus"], conform(dev, GPUS_SCHEMA)], how="diagonal_relaxed")
    body = t.str.replace(rx(r"^\s*#?\s*"), "")
    meta = d.lazy().filter(head).select(
        "line_no", run="_run", op="_op",
        key=pl.when(body.str.starts_with("Collective test starting")).then(pl.lit("test_starting"))
        .when(body.str.starts_with("Collective test concluded")).then(pl.lit("test_concluded"))
        .when(t.str.contains(rx(_BIN))).then(pl.lit("command"))
        .when(body.str.starts_with("nThread")).then(pl.lit("params"))
        .when(body.str.starts_with("Using devices")).then(pl.lit("devices"))
        .when(body.str.starts_with("Blocking")).then(pl.lit("blocking"))
        .when(body.str.starts_with("nccl-tests version")).then(pl.lit("version"))
        .when(body.str.starts_with("Collective test starting")).then(pl.lit("test_starting"))
        .when(body.str.starts_with("Collective test concluded")).then(pl.lit("test_concluded"))
        .when(body.str.starts_with("Out of bounds")).then(pl.lit("out_of_bounds"))
        .otherwise(pl.lit("avg_busbw_gbs")),
        value=pl.when(t.str.contains(rx(_BIN)) & ~body.str.starts_with("Collective test")).then(t.str.strip_chars())
        .when(body.str.contains(rx(r"^(?:Out of bounds values|Avg bus bandwidth)\s*:")))
        .then(body.str.replace(rx(r"^[^:]*:\s*"), "").str.strip_chars())
        .when(body.str.starts_with("nccl-tests version")).then(body.str.replace("nccl-tests version ", "", literal=True))
        .when(body.str.starts_with("Collective test")).then(body.str.replace(rx(r"^[^:]*:\s*"), ""))
        .otherwise(body.str.strip_chars()),
    ).collect(engine="in-memory")
    tables["bench_runs"] = conform(meta, BENCH_RUNS_SCHEMA)
    table_head = d.filter(t.str.contains(rx(_TABLE_HEAD)))
    bare_hash = d.filter(t.str.contains(rx(r"^\s*#\s*$")))
    used += [dev, meta, table_head, bare_hash]


# -- ibstat / ibv_devinfo -----------------------------------------------------------------------

_CA = r"^CA '([^']+)'\s*$|^hca_id:\s*(\S+)\s*$"
_PORT = r"^\s+(?:Port (\d+):|port:\s+(\d+))\s*$"
_KV = r"^\s+([A-Za-z][\w ]*?):\s+(.*?)\s*$"
_FIELD = {
    "CA type": "ca_type", "Firmware version": "fw", "fw_ver": "fw", "Node GUID": "node_guid",
    "node_guid": "node_guid", "vendor_part_id": "vendor_part_id",
    "State": "state", "state": "state", "Physical state": "physical_state", "Rate": "rate_gbps",
    "Link layer": "link_layer", "link_layer": "link_layer", "Port GUID": "port_guid",
    "active_mtu": "active_mtu", "max_mtu": "max_mtu", "Base lid": "lid", "port_lid": "lid",
}


def _ib_blocks(df: pl.DataFrame, tables: dict, used: list) -> None:
    t = pl.col("text")
    s = "_stream"
    ca = pl.coalesce(t.str.extract(rx(_CA), 1), t.str.extract(rx(_CA), 2))
    is_ca = ca.is_not_null()
    port = to_int(pl.coalesce(t.str.extract(rx(_PORT), 1), t.str.extract(rx(_PORT), 2)))
    indented = t.str.contains(rx(r"^\s+\S"))
    blank = t.str.strip_chars() == ""
    d = df.with_columns(
        _ca_line=pl.when(is_ca).then(pl.col("line_no"))
        .when(~indented & ~blank).then(pl.lit(0, dtype=pl.UInt32)).forward_fill().over(s),
        _ca=ca,
        _src=pl.when(t.str.starts_with("CA '")).then(pl.lit("ibstat"))
        .when(t.str.starts_with("hca_id:")).then(pl.lit("ibv_devinfo")),
        _port=port,
    ).with_columns(
        _ca=pl.col("_ca").forward_fill().over([s]),
        _src=pl.col("_src").forward_fill().over([s]),
        _port_line=pl.when(pl.col("_port").is_not_null()).then(pl.col("line_no"))
        .when(is_ca).then(pl.lit(0, dtype=pl.UInt32)).forward_fill().over(s),
        _port=pl.when(pl.col("_port").is_not_null()).then(pl.col("_port"))
        .when(is_ca).then(pl.lit(-1, dtype=pl.Int64)).forward_fill().over(s),
    )
    inside = pl.col("_ca_line") > 0
    # (the steps as a few plans, collected together: a Polars call each cost more than their work)
    kv, cas, ports = collect_each([
        d.lazy().filter(inside & ~is_ca & pl.col("_port").is_not_null() & t.str.contains(rx(_KV))
                        & ~t.str.contains(rx(_PORT))).with_columns(key=t.str.extract(rx(_KV), 1), value=t.str.extract(rx(_KV), 2)),
        d.lazy().filter(is_ca).select("line_no", "_ca_line", ca="_ca", source="_src"),
        d.lazy().filter(inside & t.str.contains(rx(_PORT))).select("line_no", "_ca_line", "_port_line", port="_port")])
    fields = kv.lazy().with_columns(col=pl.col("key").replace_strict(_FIELD, default=None)).drop_nulls("col")
    ca_fields, port_fields = collect_each([fields.filter(pl.col("_port") == -1), fields.filter(pl.col("_port") >= 0)])
    out = cas.lazy()
    if not ca_fields.is_empty():
        wide = ca_fields.pivot(on="col", index="_ca_line", values="value", aggregate_function="first")
        out = out.join(wide.lazy(), on="_ca_line", how="left")
    with_ports = ports.lazy().join(out.drop("line_no"), on="_ca_line", how="inner")
    if not port_fields.is_empty():
        wide = port_fields.pivot(on="col", index="_port_line", values="value", aggregate_function="first")
        with_ports = with_ports.join(wide.lazy(), on="_port_line", how="left", suffix="_p")
    no_port = out.join(ports.lazy().select("_ca_line").unique(), on="_ca_line", how="anti")
    rows = pl.concat([with_ports, no_port], how="diagonal_relaxed")
    names = rows.collect_schema().names()

    def col(name: str) -> pl.Expr:
        return pl.col(name) if name in names else pl.lit(None, dtype=pl.String)

    rows = rows.with_columns(
        state=col("state").str.replace(r"^PORT_", "").str.replace(rx(r"\s*\(\d+\)$"), "").str.to_titlecase(),
        active_mtu=col("active_mtu").str.extract(rx(r"^(\d+)"), 1),
        max_mtu=col("max_mtu").str.extract(rx(r"^(\d+)"), 1),
    ).collect(engine="in-memory")
    tables["nic_ports"] = conform(rows, NIC_PORTS_SCHEMA).sort("line_no")
    used += [cas, ports, kv]


# -- iblinkinfo -------------------------------------------------------------------------------

_LINK = (r"^\s+(?:(0x[0-9a-fA-F]+)\s+)?(\d+)\s+(\d+)\[\s*\]\s+==\(\s*(\d+X)\s+([\d.]+) Gbps\s+(\w+)/\s*(\w+)\)==>"
         r"\s+(\d+)\s+(\d+)\[\s*\]\s+\"([^\"]*)\"")
_LINK_HEAD = r"^(?:CA: (.+?)|Switch: (0x[0-9a-fA-F]+) (.+?)):\s*$"


def _iblinkinfo(df: pl.DataFrame, tables: dict, used: list) -> None:
    t = pl.col("text")
    links = t.str.contains(rx(_LINK))
    if not df.select(links.any()).item():
        return
    head = t.str.contains(rx(_LINK_HEAD))
    device = pl.coalesce(t.str.extract(rx(_LINK_HEAD), 1), t.str.extract(rx(_LINK_HEAD), 3))
    d = df.with_columns(_dev=pl.when(head).then(device).forward_fill().over("_stream"))
    p = t.str.extract_groups(rx(_LINK))
    rows = d.filter(links).with_columns(_p=p).select(
        "line_no", device="_dev", guid=pl.col("_p").struct.field("1"), lid=pl.col("_p").struct.field("2"),
        port=pl.col("_p").struct.field("3"), width=pl.col("_p").struct.field("4"),
        lane_gbps=pl.col("_p").struct.field("5").cast(pl.Float64, strict=False),
        state=pl.col("_p").struct.field("6"), physical_state=pl.col("_p").struct.field("7"),
        peer_lid=pl.col("_p").struct.field("8"), peer_port=pl.col("_p").struct.field("9"),
        peer=pl.col("_p").struct.field("10"),
    ).with_columns(rate_gbps=pl.col("width").str.extract(rx(r"(\d+)"), 1).cast(pl.Float64, strict=False) * pl.col("lane_gbps"))
    tables["ib_links"] = conform(rows, IB_LINKS_SCHEMA)
    used += [rows, d.filter(head)]


# -- ibdev2netdev, ibwarn / ibpanic ------------------------------------------------------------

_IBDEV2NETDEV = r"^\s*(\S+) port (\d+) ==> (\S+) \((\w+)\)\s*$"
_IBDIAG = r"^\s*(ibwarn|ibpanic|iberror): \[\d+\] (.*?)\s*$"


def _ibdev2netdev(df: pl.DataFrame, tables: dict, used: list) -> None:
    t = pl.col("text")
    rows = df.filter(t.str.contains(rx(_IBDEV2NETDEV))).with_columns(_p=t.str.extract_groups(rx(_IBDEV2NETDEV))).select(
        "line_no", source=pl.lit("ibdev2netdev"), ca=pl.col("_p").struct.field("1"),
        port=to_int(pl.col("_p").struct.field("2")), netdev=pl.col("_p").struct.field("3"),
        state=pl.col("_p").struct.field("4").str.to_titlecase())
    if rows.is_empty():
        return
    tables["nic_ports"] = pl.concat([tables["nic_ports"], conform(rows, NIC_PORTS_SCHEMA)], how="diagonal_relaxed").sort("line_no")
    used.append(rows.select("line_no"))


def _ibdiag(df: pl.DataFrame, tables: dict, used: list) -> None:
    t = pl.col("text")
    rows = df.filter(t.str.contains(rx(_IBDIAG))).with_columns(_p=t.str.extract_groups(rx(_IBDIAG))).select(
        "line_no", kind=pl.col("_p").struct.field("1"),
        level=pl.when(pl.col("_p").struct.field("1") == "ibwarn").then(pl.lit("WARN")).otherwise(pl.lit("ERROR")),
        detail=pl.col("_p").struct.field("2"), message=t.str.strip_chars(),
        device=pl.coalesce(t.str.extract(r"device '([^']+)'", 1), t.str.extract(rx(r"ca_name (\S+)"), 1),
                           t.str.extract(rx(r"opened (\S+)"), 1)))
    if rows.is_empty():
        return
    tables["events"] = conform(rows, EVENTS_SCHEMA)
    used.append(rows.select("line_no"))


# What shows that a tool family's output is in an input at all, and the parser of that output,
# in the order ``parse`` runs them.
_TOOLS = (
    (lambda t: t.str.contains("GPU0", literal=True) | t.str.contains("Legend:", literal=True), _topo),
    (lambda t: t.str.contains(rx(r"^\s*[a-z_]+\.[a-z_.]+(?: \[[^\]]+\])?(?:, |$)|--query-gpu=|^- [^:]+: \d+ ?MiB \(")),
     _smi_csv),
    (lambda t: t.str.contains(rx(_NT_MARKERS)) | t.str.contains(rx(_ROW_HINT)), _nccl_tests),
    (lambda t: t.str.contains(r"^CA '|^hca_id:"), _ib_blocks),
    (lambda t: t.str.contains("Gbps", literal=True), _iblinkinfo),
    (lambda t: t.str.contains(rx(_IBDEV2NETDEV)), _ibdev2netdev),
    (lambda t: t.str.contains(rx(_IBDIAG)), _ibdiag),
)
