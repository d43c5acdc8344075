"""Transport rules (N010-N014, L001) and ``postmortem hw`` with a run.

Three kinds of fixtures: runs from the generator (postmortem/generator/), small hand-written runs
(``_write_job`` below: NCCL 2.21 lines, nvidia-smi topo -m and CSV, ibstat, independent of the
generator) and the real excerpts in ../shared/real-data/logs/nccl (their INDEX.md says what
each thread established; the tests hold the rules to it, never to the trap).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from postmortem.cli import main
from postmortem.analyzer.pipeline import analyze
from postmortem.generator import RunSpec, generate_run
from postmortem.rules import BY_CODE
from postmortem.rules.base import Context

MINE = ("N010", "N011", "N012", "N013", "N014", "L001")

RULE_FIXTURES = {
    "N010": {"fires": ["test_shm_node_is_named_with_its_gpus_and_price",
                       "test_handwritten_shm_where_topo_says_nvlink",
                       "test_real_300_shm_hops_are_reported_honestly", "test_real_1027_shm_hop_across_sockets_is_info"],
             "quiet": ["test_healthy_generated_run_is_quiet", "test_handwritten_shm_across_sockets_on_pcie_is_quiet",
                       "test_real_2183_pcie_topology_is_quiet", "test_real_1504_healthy_p2p_ring_is_quiet"]},
    "N011": {"fires": ["test_real_horovod_intra_node_socket_hops"],
             "quiet": ["test_healthy_generated_run_is_quiet", "test_shm_node_is_named_with_its_gpus_and_price",
                       "test_real_1504_healthy_p2p_ring_is_quiet"]},
    "N012": {"fires": ["test_ib_disable_puts_every_node_on_sockets", "test_no_device_although_ibstat_lists_nics"],
             "quiet": ["test_healthy_generated_run_is_quiet", "test_hosts_without_rdma_nics_rightly_use_sockets",
                       "test_real_373_plugin_traffic_is_not_called_sockets",
                       "test_real_horovod_intra_node_socket_hops"]},
    "N013": {"fires": ["test_gdr_off_where_topo_says_pix", "test_real_733_gdr_on_some_hops_only_is_low_confidence"],
             "quiet": ["test_healthy_generated_run_is_quiet", "test_handwritten_gdr_off_over_sys_path_is_quiet"]},
    "N014": {"fires": ["test_handwritten_mixed_nic_counts", "test_handwritten_nic_names_only_differ_is_info"],
             "quiet": ["test_healthy_generated_run_is_quiet", "test_handwritten_same_nic_sets_are_quiet"]},
    "L001": {"fires": ["test_shm_node_is_named_with_its_gpus_and_price", "test_ib_disable_puts_every_node_on_sockets"],
             "quiet": ["test_healthy_generated_run_is_quiet", "test_real_1027_shm_hop_across_sockets_is_info",
                       "test_handwritten_gdr_off_over_sys_path_is_quiet"]},
}


def _mine(run) -> list:
    """Only this family's findings (the other families are tested in their own files)."""
    ctx = Context(run, None)
    return [f for code in MINE for f in BY_CODE[code].check(ctx)]


def _codes(findings) -> set[str]:
    return {f.code for f in findings}


def _one(findings, code):
    hits = [f for f in findings if f.code == code]
    assert len(hits) == 1, [(f.code, f.title) for f in findings]
    return hits[0]


# -- generated runs (one per module, small) ---------------------------------------------------------


FOLDERS: dict[str, Path] = {}


def _generated(tmp_path_factory, name, **kw):
    out = tmp_path_factory.mktemp(name)
    generate_run(out, RunSpec(seed=0, scenario="healthy", nodes=kw.pop("nodes", 2), gpus_per_node=4,
                              iterations_before_hang=4, **kw))
    FOLDERS[name] = out
    return analyze([out])


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return _generated(tmp_path_factory, "healthy", config_files=True)


@pytest.fixture(scope="module")
def shm_node(tmp_path_factory):
    # GDR off too (NCCL_NET_GDR_LEVEL-style): one generated run serves N010, L001 and N013
    return _generated(tmp_path_factory, "shm", nodes=3, nccl_shm_node=1, nccl_gdr=False, config_files=True)


@pytest.fixture(scope="module")
def sockets(tmp_path_factory):
    return _generated(tmp_path_factory, "sockets", nccl_fabric="socket", config_files=True)


@pytest.fixture(scope="module")
def nodev(tmp_path_factory):
    return _generated(tmp_path_factory, "nodev", nccl_fabric="socket-nodev", config_files=True)


def test_healthy_generated_run_is_quiet(healthy):
    assert _mine(healthy) == []


def test_shm_node_is_named_with_its_gpus_and_price(shm_node):
    found = _mine(shm_node)
    n010 = _one(found, "N010")
    assert n010.nodes == ["h20-node-02"] and n010.culprit and n010.severity == "warning"
    assert n010.ranks == [4, 5, 6, 7] and {g["node"] for g in n010.gpus} == {"h20-node-02"}
    assert "~370 GB/s" in n010.message and "~50 GB/s" in n010.message  # NVLink 4 vs SHM over PCIe Gen5
    assert "P2P is disabled" in n010.message and "NV18" in n010.message
    assert "--ipc=host" in n010.suggestion and "ACS" in n010.suggestion
    assert any("SHM" in e.text for e in n010.evidence)
    l001 = _one(found, "L001")
    assert l001.nodes == ["h20-node-02"] and not l001.culprit
    assert "N011" not in _codes(found) and "N012" not in _codes(found)


def _without_hw(folder: Path) -> list[Path]:
    """The run's inputs minus hw/ and config/ (no topo -m, no ibstat, no GPU name)."""
    return [p for p in sorted(folder.iterdir()) if p.name not in ("hw", "config")]


def test_shm_node_without_hardware_files_still_named_from_peer_nodes(shm_node):
    """No topo -m, no GPU name: the job's other nodes using P2P are the evidence."""
    n010 = _one(_mine(analyze(_without_hw(FOLDERS["shm"]))), "N010")
    assert n010.nodes == ["h20-node-02"] and n010.culprit and "h20-node-01" in n010.message
    assert "NV18" not in n010.message


def test_ib_disable_puts_every_node_on_sockets(sockets):
    found = _mine(sockets)
    n012 = _one(found, "N012")
    assert n012.nodes == ["h20-node-01", "h20-node-02"] and n012.culprit
    assert "every node" in n012.message and "NCCL_IB_DISABLE=1" in n012.message
    assert "400 Gb/s" in n012.message and "ibstat" in n012.message
    assert "Remove NCCL_IB_DISABLE=1" in n012.suggestion
    assert any("NCCL_IB_DISABLE set by environment" in e.text for e in n012.evidence)
    assert _one(found, "L001").details["communicators"][0]["tier"] == "Socket"


def test_no_device_although_ibstat_lists_nics(nodev):
    """NCCL found no IB device (the plugin/verbs did not load) while ibstat lists active ports."""
    n012 = _one(_mine(nodev), "N012")
    assert "No device found" in n012.message and "NCCL_IB_DISABLE" not in n012.message
    assert "/dev/infiniband" in n012.suggestion


def test_hosts_without_rdma_nics_rightly_use_sockets(nodev):
    """The same run without ibstat / topo -m: nothing shows an RDMA NIC, sockets are the only choice:
    said as information, not as a warning (issue 22: inter-node sockets always get a finding)."""
    n012 = _one(_mine(analyze(_without_hw(FOLDERS["nodev"]))), "N012")
    assert n012.severity == "info" and not n012.culprit and "If these nodes have RDMA NICs" in n012.suggestion


def test_gdr_off_where_topo_says_pix(shm_node):
    n013 = _one(_mine(shm_node), "N013")
    assert n013.culprit and "PIX" in n013.message and "nvidia-peermem" in n013.suggestion
    assert n013.nodes == ["h20-node-01", "h20-node-02", "h20-node-03"]


# -- hand-written runs ------------------------------------------------------------------------------


def _topo(gpus: int, gpu_link, nic_link=None, nics: int = 0) -> str:
    names = [f"GPU{i}" for i in range(gpus)] + [f"NIC{i}" for i in range(nics)]
    lines = ["\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for a in names:
        cells = []
        for b in names:
            if a == b:
                cells.append(" X ")
            elif a.startswith("GPU") and b.startswith("GPU"):
                cells.append(gpu_link(int(a[3:]), int(b[3:])))
            else:
                g, n = (a, b) if a.startswith("GPU") else (b, a)
                cells.append(nic_link(int(g[3:]), int(n[3:])) if nic_link else "SYS")
        lines.append("\t".join([a] + cells + (["0-23", "0", "", "N/A"] if a.startswith("GPU") else [])))
    lines += ["", "Legend:", "", "  X    = Self",
              "  SYS  = Connection traversing PCIe as well as the SMP interconnect",
              "  PIX  = Connection traversing at most a single PCIe bridge",
              "  NV#  = Connection traversing a bonded set", ""]
    if nics:
        lines += ["NIC Legend:", ""] + [f"  NIC{i}: mlx5_{i}" for i in range(nics)]
    return "\n".join(lines) + "\n"


def _write_job(folder: Path, hosts: list[str], gpus: int, via, *, nics: dict | None = None, topo: dict | None = None,
               gpu_name: str | None = None, ibstat: dict | None = None, via_recv=None,
               extra: dict | None = None) -> Path:
    """A 2.21.5 job, one rank per GPU, one ring 0 -> 1 -> ... -> 0 on channel 0; ``via(src, dst)`` says how each hop
    is connected ("P2P/CUMEM/read", "SHM/direct/direct", "NET/IB/0/GDRDMA"); ``via_recv(src, dst)``, when given,
    what the receiving side of a NET hop prints; ``extra``: host -> NCCL messages every rank of it prints."""
    n = len(hosts) * gpus
    lines: dict[int, list[str]] = {r: [] for r in range(n)}

    def head(r: int) -> str:
        return f"{hosts[r // gpus]}:{1000 + r}:{2000 + r} [{r % gpus}] NCCL INFO "

    for r in range(n):
        host = hosts[r // gpus]
        if r == 0:
            lines[r].append(head(r) + "NCCL version 2.21.5+cuda12.4")
        for message in (extra or {}).get(host, []):
            lines[r].append(head(r) + message)
        if nics and nics.get(host) is not None:
            devs = "".join(f" [{i}]{name}" for i, name in enumerate(nics[host]))
            lines[r].append(head(r) + f"NET/IB : Using{devs} [RO]; OOB eth0:10.0.0.{r // gpus + 1}<0>")
            lines[r].append(head(r) + "Using network IB")
        lines[r].append(head(r) + f"ncclCommInitRank comm 0x7f{r:04x} rank {r} nranks {n} cudaDev {r % gpus} nvmlDev "
                        f"{r % gpus} busId {0x18000 + 0x10000 * (r % gpus):x} commId 0xabc - Init START")
    for src in range(n):
        dst = (src + 1) % n
        how = via(src, dst)
        text = f"Channel 00/0 : {src}[{src % gpus}] -> {dst}[{dst % gpus}]"
        if how.startswith("NET"):
            lines[src].append(head(src) + f"{text} [send] via {how}")
            lines[dst].append(head(dst) + f"{text} [receive] via {(via_recv or via)(src, dst)}")
        else:
            lines[src].append(head(src) + f"{text} via {how}")
    for r in range(n):
        lines[r].append(head(r) + f"ncclCommInitRank comm 0x7f{r:04x} rank {r} nranks {n} cudaDev {r % gpus} nvmlDev "
                        f"{r % gpus} busId {0x18000 + 0x10000 * (r % gpus):x} commId 0xabc - Init COMPLETE")
        path = folder / hosts[r // gpus] / f"rank{r}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines[r]) + "\n")
    for host in hosts:
        if topo and topo.get(host):
            (folder / "hw" / host).mkdir(parents=True, exist_ok=True)
            (folder / "hw" / host / "nvidia-smi-topo.txt").write_text("nvidia-smi topo -m\n" + topo[host])
        if gpu_name:
            (folder / "hw" / host).mkdir(parents=True, exist_ok=True)
            rows = ["index, name, pci.bus_id, driver_version, memory.total [MiB], memory.used [MiB]"]
            rows += [f"{i}, {gpu_name}, 00000000:{0x18 + 0x10 * i:02X}:00.0, 550.54.15, 46068 MiB, 4 MiB"
                     for i in range(gpus)]
            (folder / "hw" / host / "nvidia-smi.csv").write_text("\n".join(rows) + "\n")
        if ibstat and ibstat.get(host):
            (folder / "hw" / host).mkdir(parents=True, exist_ok=True)
            blocks = [f"CA '{ca}'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Active\n"
                      f"\t\tPhysical state: LinkUp\n\t\tRate: {rate}\n\t\tLink layer: Ethernet\n"
                      for ca, rate in ibstat[host]]
            (folder / "hw" / host / "ibstat.txt").write_text("".join(blocks))
    return folder


def _pcie_pairs(a: int, b: int) -> str:
    """Two CPU sockets: GPU0-1 on one, GPU2-3 on the other."""
    return "PIX" if a // 2 == b // 2 else "SYS"


def test_handwritten_shm_across_sockets_on_pcie_is_quiet(tmp_path):
    """L40S (PCIe only): P2P inside a socket, SHM across it: NCCL's right choice."""
    via = lambda s, d: "SHM/direct/direct" if s // 2 != d // 2 else "P2P/CUMEM"  # noqa: E731
    run = analyze([_write_job(tmp_path, ["pc-01"], 4, via, topo={"pc-01": _topo(4, _pcie_pairs)},
                              gpu_name="NVIDIA L40S")])
    assert not {"N010", "L001"} & _codes(_mine(run))


def test_handwritten_shm_where_topo_says_nvlink(tmp_path):
    """Same hops, but topo -m shows NV12 everywhere: P2P was lost."""
    via = lambda s, d: "SHM/direct/direct" if s // 2 != d // 2 else "P2P/CUMEM/read"  # noqa: E731
    run = analyze([_write_job(tmp_path, ["dgx-01"], 4, via, topo={"dgx-01": _topo(4, lambda a, b: "NV12")},
                              gpu_name="NVIDIA A100-SXM4-80GB")])
    found = _mine(run)
    n010 = _one(found, "N010")
    assert n010.culprit and n010.nodes == ["dgx-01"] and "NV12" in n010.message and "~230 GB/s" in n010.message
    assert n010.details["gpu_pairs"] == [[1, 2], [3, 0]]
    assert "L001" in _codes(found)


_TWO = ["ib-01", "ib-02"]


def _net_via(gdr: bool):
    return lambda s, d: ("NET/IB/0" + ("/GDRDMA" if gdr else "")) if s // 2 != d // 2 else "P2P/CUMEM/read"


def test_handwritten_gdr_off_over_sys_path_is_quiet(tmp_path):
    """GPU1/GPU0 talk through mlx5_0, which topo -m puts at SYS from them: GDR off is right."""
    topo = _topo(2, lambda a, b: "NV18", lambda g, n: "SYS", nics=1)
    run = analyze([_write_job(tmp_path, _TWO, 2, _net_via(False), nics={h: ["mlx5_0:1/RoCE"] for h in _TWO},
                              topo={h: topo for h in _TWO}, gpu_name="NVIDIA H100 80GB HBM3")])
    found = _codes(_mine(run))
    assert "N013" not in found
    assert "L001" not in found  # the slowest ring hop is the network hop: the expected bottleneck


def test_handwritten_gdr_off_over_pix_path_fires(tmp_path):
    topo = _topo(2, lambda a, b: "NV18", lambda g, n: "PIX", nics=1)
    run = analyze([_write_job(tmp_path, _TWO, 2, _net_via(False), nics={h: ["mlx5_0:1/RoCE"] for h in _TWO},
                              topo={h: topo for h in _TWO}, gpu_name="NVIDIA H100 80GB HBM3")])
    n013 = _one(_mine(run), "N013")
    assert n013.nodes == _TWO and n013.culprit


def test_handwritten_mixed_nic_counts(tmp_path):
    nics = {"ib-01": ["mlx5_0:1/IB", "mlx5_1:1/IB"], "ib-02": ["mlx5_0:1/IB"],
            "ib-03": ["mlx5_0:1/IB", "mlx5_1:1/IB"]}
    run = analyze([_write_job(tmp_path, list(nics), 1, lambda s, d: "NET/IB/0/GDRDMA", nics=nics)])
    n014 = _one(_mine(run), "N014")
    assert n014.severity == "warning" and n014.nodes == ["ib-02"] and "1 NIC(s)" in n014.message


def test_handwritten_nic_names_only_differ_is_info(tmp_path):
    nics = {"ib-01": ["mlx5_0:1/IB", "mlx5_1:1/IB"], "ib-02": ["mlx5_2:1/IB", "mlx5_3:1/IB"]}
    run = analyze([_write_job(tmp_path, list(nics), 1, lambda s, d: "NET/IB/0/GDRDMA", nics=nics)])
    n014 = _one(_mine(run), "N014")
    assert n014.severity == "info" and not n014.culprit and "only the names differ" in n014.message


def test_handwritten_same_nic_sets_are_quiet(tmp_path):
    nics = {h: ["mlx5_0:1/IB", "mlx5_1:1/IB"] for h in _TWO}
    ports = {h: [("mlx5_0", 400), ("mlx5_1", 400)] for h in _TWO}
    run = analyze([_write_job(tmp_path, _TWO, 1, lambda s, d: "NET/IB/0/GDRDMA", nics=nics, ibstat=ports)])
    assert "N014" not in _codes(_mine(run))


def test_handwritten_ibstat_port_rates_differ(tmp_path):
    nics = {h: ["mlx5_0:1/IB", "mlx5_1:1/IB"] for h in _TWO}
    ports = {"ib-01": [("mlx5_0", 400), ("mlx5_1", 400)], "ib-02": [("mlx5_0", 400), ("mlx5_1", 200)]}
    run = analyze([_write_job(tmp_path, _TWO, 1, lambda s, d: "NET/IB/0/GDRDMA", nics=nics, ibstat=ports)])
    n014 = _one(_mine(run), "N014")
    assert "200/400 Gb/s" in n014.message and "ibstat" in n014.message


# -- real excerpts (../shared/real-data/logs/nccl, see its INDEX.md) ---------------------------------


def _real(real_logs, stem) -> list:
    path = next((real_logs / "nccl").glob(f"{stem}*"))
    return _mine(analyze([path]))


def test_real_300_shm_hops_are_reported_honestly(real_logs):
    """INDEX: the ring hops use SHM; report them (the lo bootstrap is fine on one node)."""
    n010 = _one(_real(real_logs, "nccl-issue-300-"), "N010")
    assert n010.details["hops"] == 2 and not n010.culprit and n010.confidence < 0.5


def test_real_1027_shm_hop_across_sockets_is_info(real_logs):
    """INDEX: one SHM hop 3->4 between the two PCIe halves; may be right on PCIe-only hardware."""
    found = _real(real_logs, "nccl-issue-1027-")
    n010 = _one(found, "N010")
    assert n010.severity == "info" and not n010.culprit
    assert "two-socket" in n010.message and "4f-56 and ce-d5" in n010.message
    assert "L001" not in _codes(found)


def test_real_horovod_intra_node_socket_hops(real_logs):
    """INDEX: intra-node hops over NET/Socket is a strong slow-link finding; AWS, no RDMA NICs shown."""
    found = _real(real_logs, "horovod-issue-3658")
    n011 = _one(found, "N011")
    assert n011.severity == "warning" and n011.culprit and n011.nodes == ["node01", "node02"]
    # its inter-node hops are on sockets too, with no RDMA NIC in sight: said, as information
    n012 = _one(found, "N012")
    assert n012.severity == "info" and not n012.culprit


def test_real_2183_pcie_topology_is_quiet(real_logs):
    """INDEX: PCIe-only topology: SHM/PCIe is right, nothing about NVLink."""
    found = _real(real_logs, "accelerate-issue-2183")
    assert not found


def test_real_1504_healthy_p2p_ring_is_quiet(real_logs):
    assert _real(real_logs, "nccl-issue-1504-") == []


def test_real_733_gdr_on_some_hops_only_is_low_confidence(real_logs):
    """INDEX: GDR on some hops only across pods; no topo -m, so the rule cannot tell whether it is right."""
    n013 = _one(_real(real_logs, "nccl-issue-733-"), "N013")
    assert not n013.culprit and n013.confidence < 0.5 and "topo -m" in n013.message


def test_real_373_plugin_traffic_is_not_called_sockets(real_logs):
    """INDEX: the IBext plugin carries the traffic; NCCL_IB_DISABLE does not switch it off."""
    found = _real(real_logs, "nccl-tests-issue-373")
    assert "N012" not in _codes(found)
    assert not any("socket" in f.message.lower() for f in found)


# -- postmortem hw with a run --------------------------------------------------------------------------


def test_hw_with_a_run_shows_the_bandwidth_map(shm_node, tmp_path, capsys):
    db = tmp_path / "run.duckdb"
    assert main(["ingest", str(FOLDERS["shm"]), "--db", str(db), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["hw", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "H20" in text and "machine balance 37" in text and "NVLink domain: the node" in text
    assert "SHM" in text and "~370" in text and "RoCE " in text
    assert main(["hw", "--db", str(db), "--gpu", "GB200", "--format", "json"]) == 0
    v = json.loads(capsys.readouterr().out)
    assert v["accelerator"]["id"] == "gb200" and "NVL72" in v["nvlink_domain"]
    tiers = {t["tier"]: t for t in v["bandwidth_map"]}
    assert tiers["SHM"]["intra_node_hops"] == tiers["SHM"]["hops"] > 0
    assert tiers["NVLink"]["gbyte_s"] == 770


def test_hw_with_a_folder_and_no_gpu_model(tmp_path, capsys):
    via = lambda s, d: "P2P/CUMEM" if s // 2 == d // 2 else "SHM/direct/direct"  # noqa: E731
    folder = _write_job(tmp_path, ["pc-01"], 4, via)
    assert main(["hw", str(folder), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "GPU model: unknown" in text and "SHM" in text
    assert main(["hw", str(folder), "--quiet", "--gpu", "L40S", "--format", "json"]) == 0
    v = json.loads(capsys.readouterr().out)
    assert v["nvlink_domain"] == "none (PCIe only)" and {t["tier"] for t in v["bandwidth_map"]} == {"P2P", "SHM"}


def test_hw_model_still_works(capsys):
    assert main(["hw", "H100"]) == 0
    assert "H100 SXM5" in capsys.readouterr().out
    assert main(["hw", "NoSuchGPU"]) == 2
