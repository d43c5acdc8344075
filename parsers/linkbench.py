"""Link benchmarks: CUDA samples' ``bandwidthTest`` and ``p2pBandwidthLatencyTest``, perftest's
``ib_*_bw`` / ``ib_*_lat`` (``docs/formats/hardware.md`` sections 8-10).

Each tool is gated by a marker of its own in the same input, so ordinary logs never lose lines
to it (a bare ``33554432  12150.7`` row is only a bandwidthTest row under its column header):

* ``bandwidthTest``: the ``[CUDA Bandwidth Test] - Starting...`` banner, ``Running on...``,
  `` Device N: NAME``, the mode line (``Quick Mode`` / ``Range Mode`` / ``Shmoo Mode``), one
  section per direction (``Host to Device Bandwidth, 1 Device(s)``), its memory line (``PINNED``
  / ``PAGEABLE Memory Transfers``, ``Write-Combined Memory Writes are Enabled``), the column header
  (``Bandwidth(MB/s)`` before CUDA 11, ``Bandwidth(GB/s)`` since) and one row per size ->
  ``cuda_bandwidth``; the ``--csv`` form (``bandwidthTest-H2D-Pinned, Bandwidth = 24.6 GB/s,
  Time = ... s, Size = N bytes, NumDevsUsed = 1``) too. ``Result = PASS`` and the samples' NOTE.
* ``p2pBandwidthLatencyTest``: the banner, `` Device: N, NAME, pciBusID: 18, ...`` lines (->
  ``gpus``, source ``p2pBandwidthLatencyTest``), ``Device=0 CAN|CANNOT Access Peer Device=1``
  (-> ``p2p_matrix``, matrix ``access``), the NOTE pair, and every matrix: ``P2P Connectivity
  Matrix``, uni- and bidirectional bandwidth with P2P disabled and enabled (titled ``(P2P
  Writes)`` / ``(P2P Reads)`` since CUDA 11.x samples, untitled before), latency matrices with
  their ``GPU`` and ``CPU`` blocks -> ``p2p_matrix`` (one row per cell: matrix, p2p, method,
  side, src, dst, value, unit).
* perftest: the ``* Waiting for client to connect... *`` banner (the server side), the test title
  (``Send BW Test``, ``RDMA_Write Bidirectional BW Test``, ``RDMA_Read Latency Test``, ``RDMA_Write
  Post List BW Test``), the ``key : value`` header block, one or two pairs a line (-> ``perftest_params``),
  ``local address`` / ``remote address`` / ``GID:`` lines, the result header and rows: bandwidth
  (``BW peak[MB/sec]`` or ``[Gb/sec]`` with ``--report_gbits``; per-port columns allowed), latency
  (``t_min t_max t_typical`` in old releases, ``t_avg t_stdev`` then ``99%``/``99.9% percentile``
  added later; ``t_avg`` alone with ``-D``) -> ``perftest_results``, one row per size with the run's
  header facts repeated. ``Conflicting CPU frequency values detected`` and ``WARNING:`` lines
  interleaved in a perftest input go to ``perftest_params`` (key ``warning``).

Units: perftest's MB/sec is 2^20 bytes per second and its Gb/sec is 10^9 bits; both are also
stored as Gb/s (``bw_avg_gbit``), the unit NIC line rates are quoted in. A bidirectional run's
average is the sum of both directions. bandwidthTest's MB/s and GB/s are stored as GB/s
(10^9 B/s, ``gbyte_s``); pageable rows are slower by design and kept apart by ``memory``.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.ascii_text import rx
from postmortem.parsers.base import ParseResult, conform, consumed_of, to_int
from postmortem.parsers.lines import with_stream

NAME = "linkbench"

SAMPLE_LINES = [
    # bandwidthTest, CUDA 11+ (GB/s)
    "[CUDA Bandwidth Test] - Starting...",
    "Running on...",
    " Device 0: NVIDIA H20",
    " Quick Mode",
    " Host to Device Bandwidth, 1 Device(s)",
    " PINNED Memory Transfers",
    "   Transfer Size (Bytes)\tBandwidth(GB/s)",
    "   32000000\t\t\t53.4",
    " Device to Host Bandwidth, 1 Device(s)",
    " PAGEABLE Memory Transfers",
    "   Transfer Size (Bytes)        Bandwidth(MB/s)",
    "   33554432                     12150.7",
    "Result = PASS",
    "NOTE: The CUDA Samples are not meant for performance measurements. Results may vary when GPU Boost is enabled.",
    "bandwidthTest-H2D-Pinned, Bandwidth = 24.6 GB/s, Time = 0.00130 s, Size = 32000000 bytes, NumDevsUsed = 1",
    # p2pBandwidthLatencyTest
    "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]",
    "Device: 0, NVIDIA H20, pciBusID: 18, pciDeviceID: 0, pciDomainID:0",
    "Device: 1, NVIDIA H20, pciBusID: 2a, pciDeviceID: 0, pciDomainID:0",
    "Device=0 CAN Access Peer Device=1",
    "Device=1 CANNOT Access Peer Device=0",
    "***NOTE: In case a device doesn't have P2P access to other one, it falls back to normal memcopy procedure.",
    "So you can see lesser Bandwidth (GB/s) and unstable Latency (us) in those cases.",
    "P2P Connectivity Matrix",
    "     D\\D     0     1",
    "     0\t     1     1",
    "     1\t     1     1",
    "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)",
    "   D\\D     0      1 ",
    "     0 3650.12 371.40 ",
    "     1 370.95 3652.00 ",
    "P2P=Enabled Latency (P2P Writes) Matrix (us)",
    "   GPU     0      1",
    "     0   2.59   2.31",
    "   CPU     0      1",
    "     0   2.71   1.91",
    # perftest
    "$ ib_send_bw -d mlx5_0 -x 3 -a -F --report_gbits h20-node-02",
    "************************************",
    "* Waiting for client to connect... *",
    "---------------------------------------------------------------------------------------",
    "                    Send BW Test",
    " Dual-port       : OFF\t\tDevice         : mlx5_0",
    " Number of qps   : 1\t\tTransport type : IB",
    " Mtu             : 4096[B]",
    " Link type       : Ethernet",
    " GID index       : 3",
    " local address: LID 0000 QPN 0x0108 PSN 0x63ad7d RKey 0x17eedf VAddr 0x007f760c947000",
    " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:255:255:05",
    " remote address: LID 0000 QPN 0x0076 PSN 0xf3810c RKey 0x201600 VAddr 0x007fbb4c981000",
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]",
    " 65536      5000             388.12             387.90               0.739861",
    "                    RDMA_Read Latency Test",
    " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   "
    "99% percentile[usec]   99.9% percentile[usec] ",
    "Conflicting CPU frequency values detected: 2200.000000 != 1040.353000. CPU Frequency is not max.",
    " 2       1000          1.76           6.12         1.79                1.80             0.06            1.88"
    "                    6.12",
]

CUDA_BW_SCHEMA = {"line_no": pl.UInt32, "run": pl.UInt32, "source": pl.String, "mode": pl.String,
                  "direction": pl.String, "memory": pl.String, "devices": pl.Int64, "device": pl.Int64,
                  "device_name": pl.String, "size_bytes": pl.Int64, "value": pl.Float64, "unit": pl.String,
                  "gbyte_s": pl.Float64}
P2P_SCHEMA = {"line_no": pl.UInt32, "run": pl.UInt32, "matrix": pl.String, "direction": pl.String,
              "p2p": pl.String, "method": pl.String, "side": pl.String, "src": pl.Int64, "dst": pl.Int64,
              "value": pl.Float64, "unit": pl.String, "title_line": pl.UInt32}
PERF_RESULTS_SCHEMA = {"line_no": pl.UInt32, "run": pl.UInt32, "test": pl.String, "verb": pl.String,
                       "kind": pl.String, "bidirectional": pl.Boolean, "side": pl.String, "device": pl.String,
                       "link_type": pl.String, "transport": pl.String, "connection": pl.String,
                       "mtu": pl.Int64, "gid_index": pl.Int64, "qps": pl.Int64,
                       "size_bytes": pl.Int64, "iterations": pl.Int64, "unit": pl.String,
                       "bw_peak": pl.Float64, "bw_avg": pl.Float64, "bw_avg_gbit": pl.Float64,
                       "msg_rate_mpps": pl.Float64, "t_min_us": pl.Float64, "t_max_us": pl.Float64,
                       "t_typical_us": pl.Float64, "t_avg_us": pl.Float64, "t_stdev_us": pl.Float64,
                       "t_p99_us": pl.Float64, "t_p999_us": pl.Float64}
PERF_PARAMS_SCHEMA = {"line_no": pl.UInt32, "run": pl.UInt32, "key": pl.String, "value": pl.String}
GPUS_SCHEMA = {"line_no": pl.UInt32, "source": pl.String, "gpu": pl.String, "index": pl.Int64,
               "name": pl.String, "bus_id": pl.String}

TABLES = {"cuda_bandwidth": CUDA_BW_SCHEMA, "p2p_matrix": P2P_SCHEMA, "perftest_results": PERF_RESULTS_SCHEMA,
          "perftest_params": PERF_PARAMS_SCHEMA, "gpus": GPUS_SCHEMA}
_EMPTY = {name: pl.DataFrame(schema=schema) for name, schema in TABLES.items()}

_BT_MARK = r"\[CUDA Bandwidth Test\]|^\s*(?:Host to Device|Device to Host|Device to Device) Bandwidth, \d+ Device|^bandwidthTest-"
_P2P_MARK = r"\[P2P \(Peer-to-Peer\) GPU Bandwidth Latency Test\]|P2P=(?:Enabled|Disabled) (?:Bandwidth|Latency)|P2P Connectivity Matrix"
_PT_CMD = r"^\s*(?:\$\s+|#\s+)?(?:\S*/)?ib_(?:send|write|read|atomic)_(?:bw|lat)(?:\s.*)?$"
_PT_MARK = r"(?:BW|Latency) Test\s*$|BW average\[|t_typical\[usec\]|t_avg\[usec\]|Waiting for client to connect"


def file_gate(text: pl.Expr) -> pl.Expr:
    """A line this parser could start from (postmortem.analyzer.ingest skips the parser on inputs with none)."""
    # _BT_MARK's title apart from its line-start alternatives: mixed in one regex, they walk
    # every byte of every line (four times the time of the two tests)
    bt_title, bt_line_starts = _BT_MARK.split("|", 1)
    return (text.str.contains(rx(bt_title)) | text.str.contains(rx(bt_line_starts))
            | text.str.contains(rx(_P2P_MARK)) | text.str.contains(rx(_PT_MARK))).fill_null(False)


def parse(lines: pl.DataFrame) -> ParseResult:
    tables = dict(_EMPTY)
    if lines is None or lines.is_empty() or "text" not in lines.columns:
        return ParseResult(tables=tables)
    text = lines["text"]
    bt = bool(text.str.contains(rx(_BT_MARK)).any())
    p2p = bool(text.str.contains(rx(_P2P_MARK)).any())
    pt = bool(text.str.contains(rx(_PT_MARK)).any())
    if not (bt or p2p or pt):
        return ParseResult(tables=tables)
    df = with_stream(lines)
    used: list[pl.DataFrame] = []
    if bt:
        _bandwidth_test(df, tables, used)
    if p2p:
        _p2p(df, tables, used)
    if pt:
        _perftest(df, tables, used)
    tables = {name: frame if frame is _EMPTY[name] else conform(frame, TABLES[name]) for name, frame in tables.items()}
    return ParseResult(tables=tables, consumed=consumed_of(*used))


def _ff(expr: pl.Expr) -> pl.Expr:
    return expr.forward_fill().over("_stream")


# -- bandwidthTest ----------------------------------------------------------------------------

_BT_SECTION = r"^\s*(Host to Device|Device to Host|Device to Device) Bandwidth, (\d+) Device\(s\)\s*$"
_BT_MEMORY = r"^\s*(PINNED|PAGEABLE) Memory Transfers\s*$"
_BT_COLS = r"^\s*Transfer Size \(Bytes\)\s+Bandwidth\((MB|GB)/s\)\s*$"
_BT_ROW = r"^\s*(\d+)\s+(\d+(?:\.\d+)?)\s*$"
_BT_DEVICE = r"^\s*Device (\d+): (.+?)\s*$"
_BT_MODE = r"^\s*(Quick|Range|Shmoo) Mode\s*$"
_BT_OTHER = (r"^\s*(?:\[CUDA Bandwidth Test\] - Starting\.\.\.|Running on\.\.\.|Result = (?:PASS|FAIL|WAIVED)|"
             r"Write-Combined Memory Writes are Enabled|\.+|NOTE: The CUDA Samples? (?:are|is) not meant for "
             r"performance measurements\..*)\s*$")
_BT_CSV = (r"^\s*bandwidthTest-(H2D|D2H|D2D)(?:-(Pinned|Paged|Pageable|WriteCombined))?, Bandwidth = ([\d.]+) (MB|GB)/s, "
           r"Time = ([\d.eE+-]+) s, Size = (\d+) bytes, NumDevsUsed = (\d+)\s*$")
_DIRS = {"Host to Device": "H2D", "Device to Host": "D2H", "Device to Device": "D2D"}


def _bandwidth_test(df: pl.DataFrame, tables: dict, used: list) -> None:
    t = pl.col("text")
    section = t.str.contains(rx(_BT_SECTION))
    cols = t.str.contains(rx(_BT_COLS))
    row = t.str.contains(rx(_BT_ROW))
    banner = t.str.contains(rx(r"\[CUDA Bandwidth Test\]"))
    d = df.with_columns(
        _run=_ff(pl.when(banner).then(pl.col("line_no"))).fill_null(0).cast(pl.UInt32),
        _mode=_ff(pl.when(banner).then(pl.lit("")).otherwise(t.str.extract(rx(_BT_MODE), 1))),
        _dev=_ff(pl.when(banner).then(pl.lit(None, dtype=pl.String)).otherwise(t.str.extract(rx(_BT_DEVICE), 1))),
        _devname=_ff(pl.when(banner).then(pl.lit(None, dtype=pl.String)).otherwise(t.str.extract(rx(_BT_DEVICE), 2))),
        _dir=_ff(t.str.extract(rx(_BT_SECTION), 1)),
        _ndev=_ff(t.str.extract(rx(_BT_SECTION), 2)),
        _mem=_ff(pl.when(section).then(pl.lit("")).otherwise(t.str.extract(rx(_BT_MEMORY), 1))),
        # the column header opens a table; anything but a row closes it
        _cols=_ff(pl.when(cols).then(pl.col("line_no")).when(~row).then(pl.lit(0, dtype=pl.UInt32))),
        _unit=_ff(t.str.extract(rx(_BT_COLS), 1)),
    )
    rows = d.filter(row & (pl.col("_cols") > 0)).select(
        "line_no", run="_run", source=pl.lit("bandwidthTest"),
        mode=pl.col("_mode").replace("", None).str.to_lowercase(),
        direction=pl.col("_dir").replace_strict(_DIRS, default=None), memory=pl.col("_mem").replace("", None).str.to_lowercase(),
        devices=to_int(pl.col("_ndev")), device=to_int(pl.col("_dev")), device_name="_devname",
        size_bytes=to_int(t.str.extract(rx(_BT_ROW), 1)), value=t.str.extract(rx(_BT_ROW), 2).cast(pl.Float64, strict=False),
        unit=pl.col("_unit") + "/s",
    )
    p = t.str.extract_groups(rx(_BT_CSV))
    csv = d.filter(t.str.contains(rx(_BT_CSV))).with_columns(_p=p).select(
        "line_no", run="_run", source=pl.lit("bandwidthTest --csv"), mode=pl.col("_mode").replace("", None).str.to_lowercase(),
        direction=pl.col("_p").struct.field("1"),
        memory=pl.col("_p").struct.field("2").str.to_lowercase().replace({"paged": "pageable", "writecombined": "write-combined"}),
        devices=to_int(pl.col("_p").struct.field("7")), device=to_int(pl.col("_dev")), device_name="_devname",
        size_bytes=to_int(pl.col("_p").struct.field("6")),
        value=pl.col("_p").struct.field("3").cast(pl.Float64, strict=False), unit=pl.col("_p").struct.field("4") + "/s",
    )
    out = pl.concat([rows, csv], how="diagonal_relaxed").with_columns(
        gbyte_s=pl.when(pl.col("unit") == "MB/s").then(pl.col("value") / 1000).otherwise(pl.col("value")))
    tables["cuda_bandwidth"] = conform(out, CUDA_BW_SCHEMA).sort("line_no")
    other = d.filter(section | cols | t.str.contains(rx(_BT_MEMORY)) | t.str.contains(rx(_BT_MODE)) | t.str.contains(rx(_BT_OTHER))
                     | (t.str.contains(rx(_BT_DEVICE)) & ~t.str.contains(rx(r"^\s*Device \d+: .*pciBusID"))))
    used += [out, other]


# -- p2pBandwidthLatencyTest -----------------------------------------------------------------

_P2P_TITLE = (r"^\s*(?:(Unidirectional|Bidirectional) )?P2P=(Enabled|Disabled) (Bandwidth|Latency)"
              r"(?: \(P2P (Writes|Reads)\))? Matrix \((GB/s|us)\)\s*$")
_CONN_TITLE = r"^\s*P2P Connectivity Matrix\s*$"
_P2P_HEAD = r"^\s*(D\\D|GPU|CPU)((?:\s+\d+)+)\s*$"
_P2P_ROW = r"^\s*(\d+)((?:\s+-?\d+(?:\.\d+)?)+)\s*$"
_P2P_DEVICE = r"^\s*Device: (\d+), (.+?), pciBusID: ([0-9a-fA-F]+), pciDeviceID: ([0-9a-fA-F]+), pciDomainID:\s*([0-9a-fA-F]+)\s*$"
_P2P_ACCESS = r"^\s*Device=(\d+) (CAN|CANNOT) Access Peer Device=(\d+)\s*$"
_P2P_OTHER = (r"^\s*(?:\[P2P \(Peer-to-Peer\) GPU Bandwidth Latency Test\]|\*+NOTE: In case a device doesn't have P2P "
              r"access to other one, it falls back to normal memcopy procedure\.|So you can see lesser Bandwidth \(GB/s\) "
              r"and unstable Latency \(us\) in those cases\.|NOTE: The CUDA Samples? (?:are|is) not meant for "
              r"performance measurements\..*|Test passed|Result = PASS)\s*$")


def _p2p(df: pl.DataFrame, tables: dict, used: list) -> None:
    t = pl.col("text")
    title = t.str.contains(rx(_P2P_TITLE)) | t.str.contains(rx(_CONN_TITLE))
    head = t.str.contains(rx(_P2P_HEAD))
    row = t.str.contains(rx(_P2P_ROW))
    blank = t.str.strip_chars() == ""
    banner = t.str.contains(rx(r"\[P2P \(Peer-to-Peer\)"))
    g = t.str.extract_groups(rx(_P2P_TITLE))
    d = df.with_columns(
        _run=_ff(pl.when(banner).then(pl.col("line_no"))).fill_null(0).cast(pl.UInt32),
        _title=_ff(pl.when(title).then(pl.col("line_no")).when(~(head | row | blank)).then(pl.lit(0, dtype=pl.UInt32))),
        _matrix=_ff(pl.when(t.str.contains(rx(_CONN_TITLE))).then(pl.lit("connectivity"))
                    .when(title).then(pl.when(g.struct.field("3") == "Latency").then(pl.lit("latency")).otherwise(pl.lit("bandwidth")))),
        _direction=_ff(pl.when(title).then(pl.coalesce(g.struct.field("1").str.to_lowercase(), pl.lit("")))),
        _p2p=_ff(pl.when(title).then(pl.coalesce(g.struct.field("2").str.to_lowercase(), pl.lit("")))),
        _method=_ff(pl.when(title).then(pl.coalesce(g.struct.field("4").str.to_lowercase(), pl.lit("")))),
        _unit=_ff(pl.when(title).then(pl.coalesce(g.struct.field("5"), pl.lit("")))),
        # the column header of the block a row belongs to (a latency matrix has a GPU and a CPU block)
        _head=_ff(pl.when(title).then(pl.lit(0, dtype=pl.UInt32)).when(head).then(pl.col("line_no"))),
    )
    heads = d.filter(head & (pl.col("_title") > 0)).select(
        _head="line_no", side=t.str.extract(rx(_P2P_HEAD), 1).replace({"D\\D": None}).str.to_lowercase(),
        _cols=t.str.extract(rx(_P2P_HEAD), 2).str.extract_all(rx(r"\d+")))
    cells = d.filter(row & ~head & (pl.col("_title") > 0) & (pl.col("_head") > 0)).select(
        "line_no", run="_run", title_line="_title", _head="_head", matrix="_matrix",
        direction=pl.col("_direction").replace("", None), p2p=pl.col("_p2p").replace("", None),
        method=pl.col("_method").replace("", None), unit=pl.col("_unit").replace("", None),
        src=to_int(t.str.extract(rx(_P2P_ROW), 1)), _vals=t.str.extract(rx(_P2P_ROW), 2).str.extract_all(rx(r"-?\d+(?:\.\d+)?")),
    ).join(heads, on="_head", how="inner").filter(pl.col("_vals").list.len() == pl.col("_cols").list.len())
    frames = []
    if not cells.is_empty():
        long = cells.explode(["_vals", "_cols"]).with_columns(
            dst=to_int(pl.col("_cols")), value=pl.col("_vals").cast(pl.Float64, strict=False))
        frames.append(long)
    a = t.str.extract_groups(rx(_P2P_ACCESS))
    access = d.filter(t.str.contains(rx(_P2P_ACCESS))).with_columns(_a=a).select(
        "line_no", run="_run", matrix=pl.lit("access"), src=to_int(pl.col("_a").struct.field("1")),
        dst=to_int(pl.col("_a").struct.field("3")),
        value=pl.when(pl.col("_a").struct.field("2") == "CAN").then(1.0).otherwise(0.0))
    frames.append(access)
    out = pl.concat(frames, how="diagonal_relaxed")
    tables["p2p_matrix"] = conform(out, P2P_SCHEMA).sort("line_no", "dst")
    dv = t.str.extract_groups(rx(_P2P_DEVICE))
    devs = d.filter(t.str.contains(rx(_P2P_DEVICE))).with_columns(_d=dv).select(
        "line_no", source=pl.lit("p2pBandwidthLatencyTest"), index=to_int(pl.col("_d").struct.field("1")),
        name=pl.col("_d").struct.field("2"),
        bus_id=pl.format("{}:{}:00.0", pl.col("_d").struct.field("5").str.zfill(4),
                         pl.col("_d").struct.field("3").str.zfill(2)).str.to_lowercase(),
    ).with_columns(gpu=pl.concat_str([pl.lit("GPU"), pl.col("index").cast(pl.String)]))
    if not devs.is_empty():
        tables["gpus"] = pl.concat([tables["gpus"], conform(devs, GPUS_SCHEMA)], how="diagonal_relaxed")
    heads_used = d.filter(head & (pl.col("_title") > 0)).select("line_no")
    used += [out, heads_used, devs, d.filter(title | t.str.contains(rx(_P2P_OTHER)))]


# -- perftest ---------------------------------------------------------------------------------

_PT_TITLE = r"^\s*(Send|RDMA_Write|RDMA_Read|Atomic\w*|RDMA_Write_with_imm)\b(.*?)\b(BW|Latency) Test\s*$"
_PT_KV_ONE = r"[A-Za-z][\w*.\-/ ]*?\s*:\s*\S+"
_PT_KV_LINE = rf"^\s*{_PT_KV_ONE}(?:\s+{_PT_KV_ONE})?\s*$"
_PT_ADDR = r"^\s*(?:(?:local|remote) address:|GID:)\s"
_PT_SEP = r"^\s*(?:-{20,}|\*{20,}|\* Waiting for client to connect\.\.\. \*)\s*$"
_PT_HEAD = r"^\s*#bytes\s+(?:#sl\s+)?#iterations\s+(.*?)\s*$"
_PT_BW_ROW = r"^\s*(\d+)\s+(\d+)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)(?:\s+-?[\d.]+)*\s*$"
_PT_LAT_ROW = r"^\s*(\d+)\s+(\d+)((?:\s+-?[\d.]+)+)\s*$"
_PT_WARN = (r"^\s*(?:Conflicting CPU frequency values detected:.*|WARNING:.*|Warning:.*|"
            r"Requested mtu is higher than active mtu.*|Changing to active mtu.*|"
            r"Inline data is used up to \d+ bytes message|"
            r"Using GID to support RDMAoE configuration\..*)$")
_LAT_NAMES = {"t_min[usec]": "t_min_us", "t_max[usec]": "t_max_us", "t_typical[usec]": "t_typical_us",
              "t_avg[usec]": "t_avg_us", "t_stdev[usec]": "t_stdev_us", "99% percentile[usec]": "t_p99_us",
              "99.9% percentile[usec]": "t_p999_us"}
_PARAMS = {"Device": "device", "Link type": "link_type", "Transport type": "transport", "Connection type": "connection",
           "Mtu": "mtu", "GID index": "gid_index", "Number of qps": "qps"}


def _perftest(df: pl.DataFrame, tables: dict, used: list) -> None:
    t = pl.col("text")
    title = t.str.contains(rx(_PT_TITLE))
    head = t.str.contains(rx(_PT_HEAD))
    addr = t.str.contains(rx(_PT_ADDR))
    banner = t.str.contains(r"Waiting for client to connect")
    d = df.with_columns(
        _run=_ff(pl.when(title).then(pl.col("line_no"))),
        # where in a run a line is: "head" (key: value block), "addr", "table"
        _phase=_ff(pl.when(title).then(pl.lit("head")).when(addr).then(pl.lit("addr")).when(head).then(pl.lit("table"))),
        _hdr=_ff(pl.when(title).then(pl.lit(None, dtype=pl.String)).when(head).then(t.str.extract(rx(_PT_HEAD), 1))),
        # a result table is its header and the rows right under it (warnings may interleave)
        _tbl=_ff(pl.when(head).then(pl.col("line_no")).when(~(t.str.contains(rx(_PT_LAT_ROW)) | t.str.contains(rx(_PT_WARN))))
                 .then(pl.lit(0, dtype=pl.UInt32))).fill_null(0),
        _banner=_ff(pl.when(banner).then(pl.col("line_no"))).fill_null(0),
    )
    titles = d.filter(title).with_columns(_g=t.str.extract_groups(rx(_PT_TITLE))).select(
        run="_run", test=t.str.strip_chars(), verb=pl.col("_g").struct.field("1"),
        kind=pl.when(pl.col("_g").struct.field("3") == "BW").then(pl.lit("bw")).otherwise(pl.lit("lat")),
        bidirectional=pl.col("_g").struct.field("2").str.contains("Bidirectional"),
        side=pl.when(pl.col("_banner") > pl.col("_run").shift(1).over("_stream").fill_null(0))
        .then(pl.lit("server")).otherwise(pl.lit("client")),
    )
    in_head = (pl.col("_phase") == "head") & pl.col("_run").is_not_null()
    kv_lines = d.filter(in_head & ~title & t.str.contains(rx(_PT_KV_LINE)))
    params = kv_lines.select("line_no", run="_run", _kv=t.str.extract_all(rx(_PT_KV_ONE))).explode("_kv").select(
        "line_no", "run", key=pl.col("_kv").str.extract(rx(r"^(.*?)\s*:"), 1).str.strip_chars(),
        value=pl.col("_kv").str.extract(rx(r":\s*(\S+)$"), 1))
    inside = pl.col("_run").is_not_null()
    warn = d.filter(t.str.contains(rx(_PT_WARN))).select("line_no", run="_run", key=pl.lit("warning"),
                                                      value=t.str.strip_chars())
    # the command line a wrapper script echoed (``$ ib_send_bw -d mlx5_0 ...``): it belongs to the next run
    cmd = d.filter(t.str.contains(rx(_PT_CMD))).select("line_no", run=pl.lit(None, dtype=pl.UInt32), key=pl.lit("command"),
                                                   value=t.str.replace(rx(r"^\s*(?:\$|#)?\s*"), ""))
    tables["perftest_params"] = conform(pl.concat([params, warn, cmd]), PERF_PARAMS_SCHEMA).sort("line_no")
    facts = params.filter(pl.col("key").is_in(list(_PARAMS))).with_columns(
        col=pl.col("key").replace_strict(_PARAMS, default=None))
    if not facts.is_empty():
        wide = facts.pivot(on="col", index="run", values="value", aggregate_function="first")
    else:
        wide = pl.DataFrame(schema={"run": pl.UInt32})
    for c in _PARAMS.values():
        if c not in wide.columns:
            wide = wide.with_columns(pl.lit(None, dtype=pl.String).alias(c))
    wide = wide.with_columns(mtu=pl.col("mtu").str.extract(rx(r"^(\d+)"), 1))
    in_table = inside & (pl.col("_phase") == "table") & pl.col("_hdr").is_not_null() & (pl.col("_tbl") > 0)
    bw_hdr = pl.col("_hdr").str.contains(rx(r"BW average\["))
    bwp = t.str.extract_groups(rx(_PT_BW_ROW))
    bw = d.filter(in_table & bw_hdr & t.str.contains(rx(_PT_BW_ROW))).with_columns(_p=bwp).select(
        "line_no", run="_run", size_bytes=to_int(pl.col("_p").struct.field("1")),
        iterations=to_int(pl.col("_p").struct.field("2")),
        bw_peak=pl.col("_p").struct.field("3").cast(pl.Float64, strict=False),
        bw_avg=pl.col("_p").struct.field("4").cast(pl.Float64, strict=False),
        msg_rate_mpps=pl.col("_p").struct.field("5").cast(pl.Float64, strict=False),
        unit=pl.col("_hdr").str.extract(rx(r"BW average\[([^\]]+)\]"), 1),
    ).with_columns(bw_avg_gbit=pl.when(pl.col("unit") == "MB/sec").then(pl.col("bw_avg") * 1048576 * 8 / 1e9)
                   .otherwise(pl.col("bw_avg")))
    lat = d.filter(in_table & ~bw_hdr & t.str.contains(rx(_PT_LAT_ROW))).select(
        "line_no", run="_run", size_bytes=to_int(t.str.extract(rx(_PT_LAT_ROW), 1)),
        iterations=to_int(t.str.extract(rx(_PT_LAT_ROW), 2)),
        _vals=t.str.extract(rx(_PT_LAT_ROW), 3).str.extract_all(rx(r"-?[\d.]+")),
        _names=pl.col("_hdr").str.extract_all(rx(r"t_\w+\[usec\]|99(?:\.9)?% percentile\[usec\]")),
        unit=pl.lit("usec"))
    lat = lat.filter(pl.col("_vals").list.len() == pl.col("_names").list.len())
    if not lat.is_empty():
        long = lat.explode(["_vals", "_names"]).with_columns(
            _col=pl.col("_names").replace_strict(_LAT_NAMES, default=None), _v=pl.col("_vals").cast(pl.Float64, strict=False))
        lat = lat.drop("_vals", "_names").join(
            long.pivot(on="_col", index="line_no", values="_v", aggregate_function="first"), on="line_no", how="left")
    else:
        lat = lat.drop("_vals", "_names")
    results = pl.concat([bw, lat], how="diagonal_relaxed")
    if not results.is_empty():
        results = results.join(titles, on="run", how="left").join(wide, on="run", how="left")
    tables["perftest_results"] = conform(results, PERF_RESULTS_SCHEMA).sort("line_no")
    other = d.filter(inside & (title | addr | head) | t.str.contains(rx(_PT_SEP)))
    used += [results, params, warn, cmd, other]
