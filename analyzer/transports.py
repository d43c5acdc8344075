"""The NCCL transports judgement the rules and the transports view share: the accelerator a run
ran on, and which ring hops are slower than they should be (N010-N013) and why.

The view itself (``postmortem transports``) is ``postmortem.views.transports``.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer import hardware
from postmortem.analyzer.topology import GDR_PATHS, Topology
from postmortem.parsers.base import among


def accelerator(run, gpu: str | None = None) -> tuple[dict | None, str]:
    """The GPU model: ``--gpu`` when given, else the name nvidia-smi reported in the inputs."""
    if gpu:
        acc = hardware.find(gpu)
        return acc, (f"--gpu {gpu}" if acc else f"--gpu {gpu}: not in the hardware model")
    return run.derived(("accelerator",), lambda: _named_in_inputs(run))   # a report asks about five times


def _named_in_inputs(run) -> tuple[dict | None, str]:
    for table, column in (("gpus", "name"), ("gpu_health", "product")):
        if column in run.columns(table):
            names = run.frame(f'SELECT "{column}" AS n, count(*) AS c FROM "{table}" WHERE "{column}" IS NOT NULL '
                              "GROUP BY 1 ORDER BY c DESC, n LIMIT 1")  # a tie: by name, not by chance
            if not names.is_empty():
                acc = hardware.find(names["n"][0])
                if acc:
                    return acc, f"{table}: {names['n'][0]}"
    return None, "not in the inputs (give --gpu MODEL)"


# -- which hops are slower than they should be: one judgement for the view and the rules -------------


def judge(hops: pl.DataFrame, topo: Topology, acc: dict | None, no_module_hosts: set[str]) -> pl.DataFrame:
    """Per hop (``_hop``, its row index in ``hops``): ``slow`` (the transports view lists it as
    slower than expected), ``reason`` and ``code`` (the rule whose finding covers it: N010 SHM
    where P2P was possible, N011 the network inside one host, N012 sockets between hosts, N013 a
    side without GPUDirect RDMA where it was possible). The rules read the same judgement, so the
    view and the report never disagree about a hop."""
    schema = {"_hop": pl.UInt32, "slow": pl.Boolean, "reason": pl.String, "code": pl.String}
    if hops.is_empty():
        return pl.DataFrame(schema=schema)
    shm_expected = sorted(shm_by_design(hops, topo, acc))
    gaps = gdr_gaps(hops, topo, no_module_hosts)
    gdr_slow = among(gaps.filter(pl.col("expected"))["_hop"] if not gaps.is_empty() else pl.Series([], dtype=pl.UInt32))
    intra = pl.col("same_host").fill_null(False)
    tier = pl.col("tier")
    rows = hops.with_row_index("_hop").select(
        "_hop",
        reason=pl.when(intra & (tier == "SHM") & pl.col("src_host").is_in(shm_expected)).then(
            pl.lit("SHM where P2P is not possible (GPUs across CPU sockets or without P2P)"))
        .when(intra & (tier == "SHM")).then(pl.lit("SHM between GPUs of one host where P2P (NVLink) is expected"))
        .when(intra & (tier == "NET on one host")).then(
            pl.lit("NET on one host between GPUs of one host where P2P (NVLink) is expected"))
        .when(~intra & (tier == "Socket")).then(pl.lit("TCP sockets where RDMA NICs would carry it"))
        .when(pl.col("_hop").is_in(gdr_slow)).then(
            pl.lit("network without GPUDirect RDMA on a side where it is possible")),
        code=pl.when(intra & (tier == "SHM") & pl.col("src_host").is_in(shm_expected)).then(pl.lit(None, dtype=pl.String))
        .when(intra & (tier == "SHM")).then(pl.lit("N010"))
        .when(intra & (tier == "NET on one host")).then(pl.lit("N011"))
        .when(~intra & (tier == "Socket")).then(pl.lit("N012"))
        .when(pl.col("_hop").is_in(gdr_slow)).then(pl.lit("N013")))
    return rows.with_columns(slow=pl.col("code").is_not_null()).select(list(schema)).cast(schema)


def shm_by_design(hops: pl.DataFrame, topo: Topology, acc: dict | None) -> set[str]:
    """Hosts whose intra-node SHM hops are NCCL's right choice: every GPU pair of them is SYS in
    topo -m (across CPU sockets), or the GPU model has no NVLink at all -- unless topo -m shows
    NVLink for a pair, the model has NVLink to every GPU, or the job's other hosts use P2P."""
    intra = hops.filter(pl.col("same_host").fill_null(False))
    shm = intra.filter(pl.col("transport") == "SHM")
    if shm.is_empty():
        return set()
    p2p_hosts = set(intra.filter(pl.col("transport") == "P2P")["src_host"].drop_nulls().to_list())
    link = (acc or {}).get("nvlink")
    acc_nvlink = bool(link) and "bridge" not in link
    pcie_only = acc is not None and not acc.get("nvlink")
    out = set()
    for node in shm["src_host"].drop_nulls().unique().to_list():
        rows = shm.filter(pl.col("src_host") == node)
        pairs = rows.select("src_gpu", "dst_gpu").unique().rows()
        links = [topo.gpu_link(node, a, b) for a, b in pairs]
        strong = any(x and x.startswith("NV") for x in links) or acc_nvlink or bool(p2p_hosts - {node})
        all_sys = bool(pairs) and all(x == "SYS" for x in links)
        if not strong and (all_sys or pcie_only):
            out.add(node)
    return out


def gdr_gaps(hops: pl.DataFrame, topo: Topology, no_module_hosts: set[str]) -> pl.DataFrame:
    """One row per side of an inter-node RDMA hop that runs without GPUDirect RDMA (``send_gdr`` /
    ``recv_gdr`` false): ``_hop``, ``side``, ``host``, ``gpu``, ``nic``, ``path`` (topo -m between
    that GPU and NIC), ``reason`` and ``expected`` (GDR was possible there, so the hop is slower
    than it should be):

    * ``close``: topo -m puts GPU and NIC on one PCIe switch or host bridge (PIX/PXB/PHB);
    * ``no module``: NCCL said ``GPU Direct RDMA Disabled for HCA ... (no module)`` on that host;
    * ``others have it``: no topo -m, but other sides of the job's hops use GDR (lower confidence);
    * ``far`` (not expected): topo -m says NODE or SYS, where NCCL disables GDR by design;
    * ``unknown`` (not expected): nothing to compare with."""
    schema = {"_hop": pl.UInt32, "side": pl.String, "host": pl.String, "gpu": pl.Int64, "nic": pl.String,
              "path": pl.String, "reason": pl.String, "expected": pl.Boolean}
    cols = {"send_gdr", "recv_gdr", "send_nic", "recv_nic"}
    if hops.is_empty() or not cols <= set(hops.columns):
        return pl.DataFrame(schema=schema)
    net = ((pl.col("transport") == "NET") & ~pl.col("same_host").fill_null(False)
           & (pl.col("tier").fill_null("") != "Socket") & (pl.col("net").fill_null("") != "Socket"))
    rdma = hops.with_row_index("_hop").filter(net)
    if rdma.is_empty():
        return pl.DataFrame(schema=schema)
    any_gdr = bool(rdma["send_gdr"].fill_null(False).any() or rdma["recv_gdr"].fill_null(False).any())
    sides = pl.concat([
        rdma.select("_hop", side=pl.lit("send"), host="src_host", gpu="src_gpu", nic="send_nic", gdr="send_gdr"),
        rdma.select("_hop", side=pl.lit("receive"), host="dst_host", gpu="dst_gpu", nic="recv_nic", gdr="recv_gdr"),
    ]).filter(pl.col("gdr") == False).drop("gdr")  # noqa: E712 -- a side that logged no GDR (null: not logged)
    if sides.is_empty():
        return pl.DataFrame(schema=schema)
    # topo -m cells between each (node, GPU) and NIC, looked up once per distinct triple
    keys = sides.select("host", "gpu", "nic").unique()
    paths = [topo.nic_path(h, g, n) for h, g, n in keys.iter_rows()]
    keys = keys.with_columns(path=pl.Series(paths, dtype=pl.String))
    sides = sides.join(keys, on=["host", "gpu", "nic"], how="left", nulls_equal=True)
    path = pl.col("path")
    reason = (pl.when(path.is_in(sorted(GDR_PATHS))).then(pl.lit("close"))
              .when(path.is_not_null()).then(pl.lit("far"))
              .when(pl.col("host").is_in(sorted(no_module_hosts))).then(pl.lit("no module"))
              .when(pl.lit(any_gdr)).then(pl.lit("others have it"))
              .otherwise(pl.lit("unknown")))
    sides = sides.with_columns(reason=reason).with_columns(
        expected=pl.col("reason").is_in(["close", "no module", "others have it"]))
    return sides.sort("_hop", pl.col("side") == "receive").select(list(schema)).cast(schema)


def no_module_hosts(net: pl.DataFrame) -> set[str]:
    """Hosts where NCCL said ``GPU Direct RDMA Disabled for HCA ... (no module)``: nvidia-peermem is not loaded."""
    if net.is_empty() or not {"kind", "gdr", "detail", "host"} <= set(net.columns):
        return set()
    rows = net.filter((pl.col("kind") == "gdr") & (pl.col("gdr") == "Disabled")
                      & pl.col("detail").fill_null("").str.contains("no module"))
    return set(rows["host"].drop_nulls().to_list())
