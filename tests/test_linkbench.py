"""postmortem.parsers.linkbench: CUDA samples' bandwidthTest and p2pBandwidthLatencyTest, perftest ib_*_bw / ib_*_lat.

The texts are our own, in the shapes of real outputs posted in public threads
(docs/formats/hardware.md sections 8-10 cite them); each version or flag difference is a test."""
from __future__ import annotations

import polars as pl

from postmortem.parsers import linkbench
from postmortem.parsers.lines import envelope


def parse(text: str):
    lines = envelope(text.encode())
    return lines, linkbench.parse(lines)


def unconsumed(lines: pl.DataFrame, result) -> list[str]:
    return lines.filter(~pl.col("line_no").is_in(result.consumed.implode())
                        & (pl.col("text").str.strip_chars() != ""))["text"].to_list()


# -- bandwidthTest ------------------------------------------------------------------------------

BT_OLD_MB = """[CUDA Bandwidth Test] - Starting...
Running on...

 Device 0: Tesla P100-PCIE-16GB
 Quick Mode

 Host to Device Bandwidth, 1 Device(s)
 PINNED Memory Transfers
   Transfer Size (Bytes)        Bandwidth(MB/s)
   33554432                     3791.2

 Device to Host Bandwidth, 1 Device(s)
 PINNED Memory Transfers
   Transfer Size (Bytes)        Bandwidth(MB/s)
   33554432                     2530.8

 Device to Device Bandwidth, 1 Device(s)
 PINNED Memory Transfers
   Transfer Size (Bytes)        Bandwidth(MB/s)
   33554432                     443120.5

Result = PASS
"""

BT_NEW_GB = """[CUDA Bandwidth Test] - Starting...
Running on...

 Device 0: NVIDIA H100 80GB HBM3
 Quick Mode

 Host to Device Bandwidth, 1 Device(s)
 PINNED Memory Transfers
   Transfer Size (Bytes)\tBandwidth(GB/s)
   32000000\t\t\t55.2

 Device to Host Bandwidth, 1 Device(s)
 PAGEABLE Memory Transfers
   Transfer Size (Bytes)\tBandwidth(GB/s)
   32000000\t\t\t20.1

Result = PASS

NOTE: The CUDA Samples are not meant for performance measurements. Results may vary when GPU Boost is enabled.
"""

BT_SHMOO = """[CUDA Bandwidth Test] - Starting...
Running on...

 Device 0: NVIDIA A100-SXM4-80GB
 Shmoo Mode

.................................................................................
 Host to Device Bandwidth, 1 Device(s)
 PINNED Memory Transfers
   Transfer Size (Bytes)\tBandwidth(GB/s)
   1000\t\t\t0.3
   2000\t\t\t0.6
   1048576\t\t\t21.9
   67108864\t\t\t24.8

Result = PASS
"""

BT_CSV = """bandwidthTest-H2D-Pinned, Bandwidth = 25.3 GB/s, Time = 0.00126 s, Size = 32000000 bytes, NumDevsUsed = 1
bandwidthTest-D2H-Paged, Bandwidth = 9.8 GB/s, Time = 0.00327 s, Size = 32000000 bytes, NumDevsUsed = 1
bandwidthTest-D2D, Bandwidth = 1310.4 GB/s, Time = 0.00005 s, Size = 32000000 bytes, NumDevsUsed = 1
Result = PASS
"""


def test_bandwidthtest_before_cuda11_prints_mb_per_s():
    lines, result = parse(BT_OLD_MB)
    assert unconsumed(lines, result) == []
    bw = result.tables["cuda_bandwidth"]
    assert bw["direction"].to_list() == ["H2D", "D2H", "D2D"]
    assert bw["unit"].unique().to_list() == ["MB/s"]
    assert bw["gbyte_s"].round(3).to_list() == [3.791, 2.531, 443.12]
    assert set(bw["device_name"]) == {"Tesla P100-PCIE-16GB"} and set(bw["memory"]) == {"pinned"}


def test_bandwidthtest_cuda11_and_later_prints_gb_per_s_with_tabs():
    lines, result = parse(BT_NEW_GB)
    assert unconsumed(lines, result) == []
    bw = result.tables["cuda_bandwidth"]
    assert bw.select("direction", "memory", "gbyte_s", "size_bytes").rows() == [
        ("H2D", "pinned", 55.2, 32000000), ("D2H", "pageable", 20.1, 32000000)]
    assert bw["mode"].unique().to_list() == ["quick"]


def test_bandwidthtest_shmoo_mode_has_a_row_per_size():
    lines, result = parse(BT_SHMOO)
    assert unconsumed(lines, result) == []
    bw = result.tables["cuda_bandwidth"]
    assert bw.height == 4 and bw["mode"].unique().to_list() == ["shmoo"]
    assert bw["size_bytes"].to_list() == [1000, 2000, 1048576, 67108864]


def test_bandwidthtest_csv_form():
    lines, result = parse(BT_CSV)
    assert unconsumed(lines, result) == []
    bw = result.tables["cuda_bandwidth"]
    assert bw.select("direction", "memory", "gbyte_s").rows() == [
        ("H2D", "pinned", 25.3), ("D2H", "pageable", 9.8), ("D2D", None, 1310.4)]


def test_bare_number_pairs_elsewhere_are_not_bandwidth_rows():
    lines, result = parse("Host to Device Bandwidth, 1 Device(s)\nsome log line\n   33554432    12150.7\n")
    assert result.tables["cuda_bandwidth"].is_empty()
    assert "   33554432    12150.7" in unconsumed(lines, result)


# -- p2pBandwidthLatencyTest --------------------------------------------------------------------

def _matrix(title: str, n: int, value, head: str = "D\\D") -> list[str]:
    out = [title, f"   {head}" + "".join(f"{j:>7d}" for j in range(n)) + " "]
    for i in range(n):
        out.append(f"{i:>6d}" + "".join(f" {value(i, j):6.2f}" for j in range(n)) + " ")
    return out


def _p2p_text(n: int, uni, reads: bool = True, titled: bool = True, cannot: tuple = ()) -> str:
    lines = ["[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]"]
    lines += [f"Device: {i}, NVIDIA H100 80GB HBM3, pciBusID: {0x18 + 0x10 * i:x}, pciDeviceID: 0, pciDomainID:0"
              for i in range(n)]
    for i in range(n):
        for j in range(n):
            if i != j:
                word = "CANNOT" if (i, j) in cannot else "CAN"
                lines.append(f"Device={i} {word} Access Peer Device={j}")
    lines += ["", "***NOTE: In case a device doesn't have P2P access to other one, it falls back to normal memcopy "
              "procedure.", "So you can see lesser Bandwidth (GB/s) and unstable Latency (us) in those cases.", "",
              "P2P Connectivity Matrix", "     D\\D" + "".join(f"{j:>6d}" for j in range(n))]
    for i in range(n):
        lines.append(f"{i:>6d}\t" + "".join(f"{0 if (i, j) in cannot else 1:>6d}" for j in range(n)))
    diag = lambda i, j: 2500.0  # noqa: E731
    lines += _matrix("Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)", n, lambda i, j: diag(i, j) if i == j else 37.1)
    writes = "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)" if titled else \
        "Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)"
    lines += _matrix(writes, n, lambda i, j: diag(i, j) if i == j else uni(i, j))
    if reads:
        lines += _matrix("Unidirectional P2P=Enabled Bandwidth (P2P Reads) Matrix (GB/s)", n,
                         lambda i, j: diag(i, j) if i == j else uni(i, j) * 0.98)
    lines += _matrix("Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)", n, lambda i, j: 3000 if i == j else 52.0)
    lines += _matrix("Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)", n, lambda i, j: 3000 if i == j else 2 * uni(i, j))
    lat = "P2P=Enabled Latency (P2P Writes) Matrix (us)" if titled else "P2P=Enabled Latency Matrix (us)"
    lines += _matrix("P2P=Disabled Latency Matrix (us)", n, lambda i, j: 2.5 if i == j else 14.2, head="GPU")
    lines += [""] + _matrix("x", n, lambda i, j: 2.6 if i == j else 6.1, head="CPU")[1:]
    lines += _matrix(lat, n, lambda i, j: 2.5 if i == j else 2.2, head="GPU")
    lines += [""] + _matrix("x", n, lambda i, j: 2.6 if i == j else 1.9, head="CPU")[1:]
    lines += ["", "NOTE: The CUDA Samples are not meant for performance measurements. Results may vary when GPU Boost "
              "is enabled."]
    return "\n".join(lines) + "\n"


def test_p2p_current_samples_have_writes_and_reads_matrices():
    lines, result = parse(_p2p_text(4, lambda i, j: 376.0))
    assert unconsumed(lines, result) == []
    m = result.tables["p2p_matrix"]
    kinds = m.group_by("matrix", "direction", "p2p", "method", "side").len().sort(pl.all().exclude("len"), nulls_last=True)
    assert kinds.filter(pl.col("matrix") == "bandwidth").height == 5
    assert kinds.filter(pl.col("matrix") == "latency")["side"].to_list() == ["cpu", "gpu", "cpu", "gpu"]
    assert m.filter(pl.col("matrix") == "access")["value"].sum() == 12
    cell = m.filter((pl.col("matrix") == "bandwidth") & (pl.col("direction") == "unidirectional") & (pl.col("method") == "writes") & (pl.col("src") == 2) & (pl.col("dst") == 3))
    assert cell["value"].to_list() == [376.0] and cell["unit"].to_list() == ["GB/s"]
    gpus = result.tables["gpus"]
    assert gpus["bus_id"].to_list()[:2] == ["0000:18:00.0", "0000:28:00.0"]


def test_p2p_older_samples_have_untitled_enabled_matrices():
    lines, result = parse(_p2p_text(2, lambda i, j: 48.0, reads=False, titled=False))
    assert unconsumed(lines, result) == []
    m = result.tables["p2p_matrix"].filter(pl.col("p2p") == "enabled")
    assert m["method"].null_count() == m.height


def test_p2p_cannot_access_and_connectivity_zero():
    lines, result = parse(_p2p_text(2, lambda i, j: 9.9, cannot=((0, 1), (1, 0))))
    assert unconsumed(lines, result) == []
    m = result.tables["p2p_matrix"]
    assert m.filter((pl.col("matrix") == "access"))["value"].to_list() == [0.0, 0.0]
    conn = m.filter((pl.col("matrix") == "connectivity") & (pl.col("src") != pl.col("dst")))
    assert conn["value"].to_list() == [0.0, 0.0]


# -- perftest -----------------------------------------------------------------------------------

SEP = "-" * 87


def _perftest(title: str, table: list[str], *, device="mlx5_0", link="Ethernet", gid="3", server=False,
              tab="\t\t", extra: list[str] = ()) -> str:
    lines = []
    if server:
        lines += ["", "*" * 36, "* Waiting for client to connect... *", "*" * 36]
    lines += [SEP, f"                    {title}",
              f" Dual-port       : OFF{tab}Device         : {device}",
              f" Number of qps   : 1{tab}Transport type : IB",
              f" Connection type : RC{tab}Using SRQ      : OFF",
              " PCIe relax order: ON", " ibv_wr* API     : ON", " TX depth        : 128",
              " CQ Moderation   : 100", " Mtu             : 4096[B]", f" Link type       : {link}"]
    if gid is not None:
        lines.append(f" GID index       : {gid}")
    lines += [" Max inline data : 0[B]", " rdma_cm QPs\t : OFF", " Data ex. method : Ethernet", *extra, SEP,
              " local address: LID 0000 QPN 0x0108 PSN 0x63ad7d RKey 0x17eedf VAddr 0x007f760c947000",
              " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:12:01:05",
              " remote address: LID 0000 QPN 0x0076 PSN 0xf3810c RKey 0x201600 VAddr 0x007fbb4c981000",
              " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:12:01:04", SEP, *table, SEP]
    return "\n".join(lines) + "\n"


BW_MB = [" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]",
         " 65536      5000             11432.10            11430.85\t\t   0.182894"]
BW_GB_ALL = [" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"] + [
    f" {1 << k:<7d}    5000           {min(390.0, 0.2 * (1 << k)):<7.2f}            {min(389.5, 0.19 * (1 << k)):<7.2f}"
    f"\t\t   {1.5:.6f}" for k in range(1, 24)]
LAT_CURRENT = [" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   "
               "99% percentile[usec]   99.9% percentile[usec] ",
               "Conflicting CPU frequency values detected: 2400.000000 != 1873.463000. CPU Frequency is not max.",
               " 2       1000          1.76           6.12         1.79                1.80             0.06            "
               "1.88                    6.12   "]
LAT_OLD = [" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]",
           " 2       1000          0.91           5.02         0.95"]
LAT_DURATION = [" #bytes        #iterations       t_avg[usec]  \t", " 2             2731920           1.10"]


def test_perftest_bw_mb_per_sec_client():
    lines, result = parse(_perftest("RDMA_Write BW Test", BW_MB))
    assert unconsumed(lines, result) == []
    r = result.tables["perftest_results"].row(0, named=True)
    assert (r["verb"], r["kind"], r["side"], r["device"], r["link_type"], r["gid_index"], r["mtu"]) == \
        ("RDMA_Write", "bw", "client", "mlx5_0", "Ethernet", 3, 4096)
    assert r["unit"] == "MB/sec" and round(r["bw_avg_gbit"], 1) == 95.9   # MB here is 2^20 bytes


def test_perftest_report_gbits_all_sizes_server_side():
    lines, result = parse(_perftest("Send BW Test", BW_GB_ALL, server=True, link="IB", gid=None))
    assert unconsumed(lines, result) == []
    res = result.tables["perftest_results"]
    assert res.height == 23 and set(res["side"]) == {"server"} and set(res["unit"]) == {"Gb/sec"}
    assert res["bw_avg_gbit"].max() == 389.5 and res["gid_index"].null_count() == 23


def test_perftest_bidirectional_with_spaces_between_pairs():
    lines, result = parse(_perftest("Send Bidirectional BW Test", BW_MB, tab="          "))
    assert unconsumed(lines, result) == []
    r = result.tables["perftest_results"].row(0, named=True)
    assert r["bidirectional"] is True and r["device"] == "mlx5_0" and r["transport"] == "IB"


def test_perftest_latency_versions():
    for table, cols in ((LAT_CURRENT, ("t_min_us", "t_typical_us", "t_p999_us")),
                        (LAT_OLD, ("t_min_us", "t_max_us", "t_typical_us")),
                        (LAT_DURATION, ("t_avg_us",))):
        lines, result = parse(_perftest("Send Latency Test", table))
        assert unconsumed(lines, result) == [], table
        r = result.tables["perftest_results"].row(0, named=True)
        assert r["kind"] == "lat" and all(r[c] is not None for c in cols), (table, r)
    params = result.tables["perftest_params"]
    assert "Device" in params["key"].to_list()


def test_perftest_post_list_title_and_warning_lines():
    text = _perftest("RDMA_Write Post List BW Test", BW_MB, extra=[" Post List       : 128"])
    text = text.replace(" #bytes", " WARNING: BW peak won't be measured in this run.\n #bytes", 1)
    lines, result = parse(text)
    assert unconsumed(lines, result) == []
    assert result.tables["perftest_results"]["test"].to_list() == ["RDMA_Write Post List BW Test"]
    assert "warning" in result.tables["perftest_params"]["key"].to_list()


def test_two_runs_in_one_file_keep_their_own_headers():
    text = _perftest("Send BW Test", BW_MB, device="mlx5_0") + _perftest("Send BW Test", BW_MB, device="mlx5_3")
    lines, result = parse(text)
    assert unconsumed(lines, result) == []
    assert result.tables["perftest_results"]["device"].to_list() == ["mlx5_0", "mlx5_3"]


def test_ordinary_logs_give_nothing():
    lines, result = parse("step 10 loss 2.3\n 2       1000          1.76\nDevice: mlx5_0\n")
    assert all(f.is_empty() for f in result.tables.values())
    assert result.consumed.len() == 0


def test_tool_outputs_concatenated_stay_apart():
    """A p2p matrix after a perftest table is not perftest rows; every tool keeps its own rows."""
    from postmortem.generator.rungen.config_files import ib_send_bw
    text = ib_send_bw("a", "b", 1) + _p2p_text(4, lambda i, j: 376.0) + BT_SHMOO + ib_send_bw("a", "b", 2)
    lines, result = parse(text)
    assert unconsumed(lines, result) == []
    assert result.tables["perftest_results"].height == 46
    assert result.tables["cuda_bandwidth"].height == 4
    assert result.tables["p2p_matrix"].filter(pl.col("matrix") == "bandwidth").height == 5 * 16
