"""Fabric rules (N001 IB/RoCE completion errors, N002 bootstrap interfaces): generated runs,
hand-written runs (independent of the generator) and the real excerpts."""
from __future__ import annotations

from pathlib import Path

import pytest

from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report
from postmortem.generator import RunSpec, generate_run
from tests.scenario import write_files

RULE_FIXTURES = {
    "N001": {"fires": ["test_flapping_nic_is_voted_and_joined_with_the_kernel_log",
                       "test_three_nodes_shared_endpoint_wins_in_the_2_18_wording",
                       "test_one_pair_with_a_flap_on_one_side_names_that_side",
                       "test_one_pair_of_two_nodes_is_not_a_culprit",
                       "test_one_sided_generated_errors_name_no_culprit",
                       "test_real_plugin_status12_from_one_side_names_no_culprit",
                       "test_real_modify_qp_unreachable_is_not_blamed_on_a_node"],
             "quiet": ["test_flush_and_errors_after_the_abort_do_not_vote",
                       "test_real_excerpts_without_completion_errors_do_not_blame_the_network",
                       "test_healthy_generated_run_has_no_fabric_finding"]},
    "N002": {"fires": ["test_docker_bridge_on_one_node_is_the_odd_one_out",
                       "test_same_docker_address_on_two_hosts",
                       "test_real_docker_bridge_subnet_bind_failure",
                       "test_real_link_local_bootstrap_and_socket_list",
                       "test_socket_list_over_a_docker_bridge_between_hosts_is_a_warning",
                       "test_bootstrap_on_virbr0_of_every_host_is_reported"],
             "quiet": ["test_loopback_on_one_node_and_single_node_socket_list_are_fine",
                       "test_healthy_generated_run_has_no_fabric_finding",
                       "test_pod_eth0_everywhere_on_one_network_is_fine"]},
}

NCCL = Path(__file__).resolve().parents[2] / "shared" / "real-data" / "logs" / "nccl"


def _report(*paths):
    return build_report(analyze([Path(p) for p in paths]))


def _find(report, code):
    return [f for f in report["findings"] if f["code"] == code]


def _real(real_logs, stem):
    return next((real_logs / "nccl").glob(stem + "*"))


# -- generated runs ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def flap_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("flap")
    truth = generate_run(out, RunSpec(nodes=3, gpus_per_node=3, scenario="all-stuck", node_fault="link-flap",
                                      flap_node=1, flap_nic=2, nccl_version="2.23.4", timeout_s=600,
                                      hang_duration_s=3000, pyspy=False))
    return truth, _report(out)


def test_flapping_nic_is_voted_and_joined_with_the_kernel_log(flap_report):
    truth, report = flap_report
    assert truth["node_fault"]["host"] == "h20-node-02" and truth["node_fault"]["nic"] == "mlx5_2"
    v = report["verdict"]
    assert v["status"] == "culprit" and v["category"] == "network" and v["culprit"]["nodes"] == ["h20-node-02"]
    n001 = _find(report, "N001")[0]
    assert n001["culprit"] and n001["confidence"] >= 0.85
    assert n001["details"]["votes"]["h20-node-02"] == 2 and n001["details"]["peers"] == ["h20-node-01", "h20-node-03"]
    assert n001["details"]["nics"] == ["mlx5_2"] and n001["details"]["flapped_ports"] == ["ens14f0np0"]
    assert any("Link down" in e["text"] for e in n001["evidence"])
    assert "perfquery" in n001["suggestion"] and "ibstat mlx5_2" in n001["suggestion"]
    assert report["actions"]["drain_hostlist"] == "h20-node-02"
    h003 = _find(report, "H003")[0]
    assert n001["id"] in h003["caused_by"]


@pytest.fixture(scope="module")
def one_sided_report(tmp_path_factory):
    # The plain all-stuck story: three ranks of one node report one peer; no kernel log.
    out = tmp_path_factory.mktemp("onesided")
    generate_run(out, RunSpec(nodes=3, gpus_per_node=2, scenario="all-stuck", timeout_s=600, hang_duration_s=3000,
                              pyspy=False))
    return _report(out)


def test_one_sided_generated_errors_name_no_culprit(one_sided_report):
    n001 = _find(one_sided_report, "N001")[0]
    assert not n001["culprit"] and n001["confidence"] <= 0.5
    assert sorted(n001["nodes"]) == ["h20-node-02", "h20-node-03"]
    assert one_sided_report["verdict"]["status"] != "culprit"


@pytest.fixture(scope="module")
def docker_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("docker")
    generate_run(out, RunSpec(nodes=3, gpus_per_node=2, scenario="all-stuck",
                              nccl_bootstrap_if={2: "docker0:172.17.0.2"}, network_fault=False, timeout_s=600,
                              hang_duration_s=3000, pyspy=False))
    return _report(out)


def test_docker_bridge_on_one_node_is_the_odd_one_out(docker_report):
    n002 = [f for f in _find(docker_report, "N002") if f["details"]["check"] == "subnets"]
    assert len(n002) == 1 and n002[0]["nodes"] == ["h20-node-03"]
    assert "docker0" in n002[0]["message"] and "NCCL_SOCKET_IFNAME=eth0" in n002[0]["suggestion"]
    assert n002[0]["details"]["drain"] is False


@pytest.fixture(scope="module")
def healthy_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("healthy")
    generate_run(out, RunSpec(nodes=2, gpus_per_node=2, scenario="healthy", node_logs=True))
    return _report(out)


def test_healthy_generated_run_has_no_fabric_finding(healthy_report):
    assert not _find(healthy_report, "N001") and not _find(healthy_report, "N002")


# -- hand-written runs ------------------------------------------------------------------------------

def _rank_file(host: str, ip: str, rank: int, nranks: int, extra: list[str], ifname: str = "eth0") -> list[str]:
    pid = 5000 + rank
    head = f"{host}:{pid}:{pid} [0] NCCL INFO"
    return [f"{head} Bootstrap : Using {ifname}:{ip}<0>",
            f"{head} NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB {ifname}:{ip}<0>",
            f"{head} NCCL version 2.18.5+cuda12.2",
            f"{head} comm 0xa{rank} rank {rank} nranks {nranks} cudaDev 0 busId 18000 commId 0xbeef - Init COMPLETE",
            *[line.replace("HEAD", f"{host}:{pid}:{pid + 7} [0]") for line in extra]]


def _ib(peer: str, local: str, remote: str, status: int = 12, direction: str = "Send") -> str:
    return (f"HEAD transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer {peer}<4123> "
            f"with error {status}, opcode 0, len 0, vendor err 129 ({direction}) localGid ::ffff:{local} "
            f"remoteGid ::ffff:{remote}")


def _ib226(peer: str, local: str, remote: str, when: str) -> str:
    return (f"[2026-07-24 {when}] HEAD transport/net_ib.cc:1696 NCCL WARN NET: Got completion from peer {peer}<4123> "
            f"with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:{local} remoteGids::ffff:{remote} "
            "hca mlx5_0")


def test_three_nodes_shared_endpoint_wins_in_the_2_18_wording(tmp_path):
    # n2 is shared by both failing pairs; the peer address of n2 is only known from its Bootstrap line,
    # and n3 names it by its GID alone (no peer address in the resolution table for 10.9.9.9).
    ips = {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"}
    files = {
        "n1/rank0.log": _rank_file("n1", ips["n1"], 0, 3, [_ib(ips["n2"], "10.30.0.1", "10.30.0.2")]),
        "n2/rank1.log": _rank_file("n2", ips["n2"], 1, 3, [_ib(ips["n1"], "10.30.0.2", "10.30.0.1", direction="Recv"),
                                                           _ib(ips["n3"], "10.30.0.2", "10.30.0.3")]),
        "n3/rank2.log": _rank_file("n3", ips["n3"], 2, 3,
                                   [_ib("10.9.9.9", "10.30.0.3", "10.30.0.2", direction="Recv")]),
    }
    report = _report(write_files(tmp_path, files))
    n001 = _find(report, "N001")[0]
    assert n001["culprit"] and n001["nodes"] == ["n2"] and n001["category"] == "network"
    assert n001["details"]["votes"] == {"n1": 1, "n2": 2, "n3": 1}
    assert 0.7 <= n001["confidence"] < 0.85           # no kernel log to confirm it
    assert report["verdict"]["culprit"]["nodes"] == ["n2"]


def _two_nodes(tmp_path: Path, flap_on: str | None) -> Path:
    files = {
        "n1/rank0.log": _rank_file("n1", "10.0.0.1", 0, 2, [_ib226("10.0.0.2", "10.30.0.1", "10.30.0.2", "09:12:10")]),
        "n2/rank1.log": _rank_file("n2", "10.0.0.2", 1, 2, [_ib226("10.0.0.1", "10.30.0.2", "10.30.0.1", "09:12:11")]),
    }
    for host in ("n1", "n2"):
        journal = [f"2026-07-24T08:00:00+0000 {host} kernel: mlx5_core 0000:1f:00.0 ens12f0np0: Link up"]
        if host == flap_on:
            journal += [f"2026-07-24T09:12:01+0000 {host} kernel: mlx5_core 0000:1f:00.0 ens12f0np0: Link down",
                        f"2026-07-24T09:12:04+0000 {host} kernel: mlx5_core 0000:1f:00.0 ens12f0np0: Link up"]
        files[f"node_logs/{host}/journal-kernel.txt"] = journal
    return write_files(tmp_path, files)


def test_one_pair_of_two_nodes_is_not_a_culprit(tmp_path):
    report = _report(_two_nodes(tmp_path, flap_on=None))
    n001 = _find(report, "N001")[0]
    assert not n001["culprit"] and n001["nodes"] == ["n1", "n2"] and n001["confidence"] <= 0.5
    assert report["verdict"]["status"] == "inconclusive" and report["actions"]["drain_hostlist"] is None


def test_one_pair_with_a_flap_on_one_side_names_that_side(tmp_path):
    report = _report(_two_nodes(tmp_path, flap_on="n2"))
    n001 = _find(report, "N001")[0]
    assert n001["culprit"] and n001["nodes"] == ["n2"] and n001["confidence"] == pytest.approx(0.7)
    assert report["verdict"]["culprit"]["nodes"] == ["n2"]


def test_flush_and_errors_after_the_abort_do_not_vote(tmp_path):
    timeout = ("[rank{r}]:[E0724 09:12:0{r}.1 ProcessGroupNCCL.cpp:1] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
               "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=10, OpType=ALLREDUCE, NumelIn=5, "
               "NumelOut=5, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.")
    files = {
        "n1/rank0.log": _rank_file("n1", "10.0.0.1", 0, 3,
                                   [timeout.format(r=0), _ib("10.0.0.2", "10.30.0.1", "10.30.0.2")]),
        "n2/rank1.log": _rank_file("n2", "10.0.0.2", 1, 3, [_ib("10.0.0.1", "10.30.0.2", "10.30.0.1", status=5)]),
        "n3/rank2.log": _rank_file("n3", "10.0.0.3", 2, 3,
                                   [timeout.format(r=2), _ib("10.0.0.2", "10.30.0.3", "10.30.0.2")]),
    }
    report = _report(write_files(tmp_path, files))
    n001 = _find(report, "N001")
    assert len(n001) == 1 and not n001[0]["culprit"] and n001[0]["category"] == "symptom"
    assert n001[0]["severity"] == "info"


def test_same_docker_address_on_two_hosts(tmp_path):
    files = {f"{h}/rank{r}.log": _rank_file(h, "172.17.0.2", r, 2, [], ifname="docker0")
             for r, h in enumerate(("hostA", "hostB"))}
    report = _report(write_files(tmp_path, files))
    dup = [f for f in _find(report, "N002") if f["details"]["check"] == "duplicate"]
    assert len(dup) == 1 and dup[0]["nodes"] == ["hostA", "hostB"] and "172.17.0.2" in dup[0]["title"]


def test_pod_eth0_everywhere_on_one_network_is_fine(tmp_path):
    files = {f"pod-{r}/rank{r}.log": _rank_file(f"pod-{r}", f"10.244.{r}.7", r, 3, []) for r in range(3)}
    report = _report(write_files(tmp_path, files))
    assert not _find(report, "N002")


def test_loopback_on_one_node_and_single_node_socket_list_are_fine(tmp_path, real_logs):
    files = {f"box/rank{r}.log": _rank_file("box", "127.0.0.1", r, 2, [], ifname="lo")[:1] for r in range(2)}
    files["box/rank0.log"] += ["box:5000:5007 [0] NCCL INFO Channel 00 : 0[18000] -> 1[2a000] via SHM/direct/direct"]
    assert not _find(_report(write_files(tmp_path, files)), "N002")
    assert not _find(_report(_real(real_logs, "nccl-issue-300-")), "N002")     # lo on one node
    # single-node TP: lxcbr0 / tailscale0 in the socket list are reported (issue 22), but only as
    # information: the excerpt does not show the job leave its host
    found = _find(_report(_real(real_logs, "vllm-issue-6370-")), "N002")
    assert [f["severity"] for f in found] == ["info"] and "lxcbr0" in found[0]["message"]


def test_socket_list_over_a_docker_bridge_between_hosts_is_a_warning(tmp_path):
    files = {f"n{r}/rank{r}.log": _rank_file(f"n{r}", f"10.0.0.{r + 1}", r, 2, [
        f"n{r}:{5000 + r}:{5007 + r} [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.{r + 1}<0> "
        f"[1]docker0:172.17.0.1<0> [2]veth12ab:fe80::1%veth12ab<0>",
        f"n{r}:{5000 + r}:{5007 + r} [0] NCCL INFO Using network Socket"]) for r in range(2)}
    found = [f for f in _find(_report(write_files(tmp_path, files)), "N002") if f["details"]["check"] == "socket_list"]
    assert len(found) == 1 and found[0]["severity"] == "warning" and found[0]["nodes"] == ["n0", "n1"]
    assert "docker0" in found[0]["message"] and "veth12ab" in found[0]["message"]


def test_bootstrap_on_virbr0_of_every_host_is_reported(tmp_path):
    files = {f"v{r}/rank{r}.log": _rank_file(f"v{r}", f"192.168.122.{r + 1}", r, 2, [], ifname="virbr0")
             for r in range(2)}
    found = [f for f in _find(_report(write_files(tmp_path, files)), "N002") if f["details"]["check"] == "virtual"]
    assert found and "virbr0" in found[0]["title"] and found[0]["nodes"] == ["v0", "v1"]


# -- real excerpts --------------------------------------------------------------------------------

def test_real_plugin_status12_from_one_side_names_no_culprit(real_logs):
    report = _report(_real(real_logs, "nccl-issue-1405-"))
    n001 = _find(report, "N001")[0]
    assert not n001["culprit"] and n001["confidence"] <= 0.5 and n001["details"]["statuses"] == [12]
    assert "10.100.1.236" in n001["title"] and report["actions"]["drain_hostlist"] is None


def test_real_modify_qp_unreachable_is_not_blamed_on_a_node(real_logs):
    report = _report(_real(real_logs, "nccl-tests-issue-185-"))
    n001 = _find(report, "N001")[0]
    assert not n001["culprit"] and "NCCL_IB_GID_INDEX" in n001["suggestion"]
    assert report["actions"]["drain_hostlist"] is None


def test_real_excerpts_without_completion_errors_do_not_blame_the_network(real_logs):
    # 1814: the status-12 WARN is only in the thread title; 1920: a socket reset; 22363: an application
    # hang (full_determinism) with healthy NCCL; 1730: RAS says OK while the watchdog timed out.
    for stem in ("nccl-issue-1814-", "nccl-issue-1920-", "transformers-issue-22363-", "nccl-issue-1730-"):
        report = _report(_real(real_logs, stem))
        assert not _find(report, "N001"), stem
        assert report["verdict"]["category"] != "network", stem
    assert _report(_real(real_logs, "nccl-issue-1730-"))["verdict"]["status"] != "healthy"


def test_real_docker_bridge_subnet_bind_failure(real_logs):
    report = _report(_real(real_logs, "nccl-issue-331-"))
    n002 = _find(report, "N002")[0]
    assert n002["severity"] == "error" and n002["details"]["remote"] == "10.100.1.91"
    assert "172.17" in n002["message"] and "--network=host" in n002["suggestion"]
    assert report["verdict"]["category"] == "config" and report["actions"]["drain_hostlist"] is None


def test_real_link_local_bootstrap_and_socket_list(real_logs):
    n002 = _find(_report(_real(real_logs, "nccl-issue-529-")), "N002")[0]
    assert n002["details"]["what"] == "link-local" and "NCCL_SOCKET_IFNAME=veth0" in n002["suggestion"]
    veth = _find(_report(_real(real_logs, "pytorch-issue-68893-")), "N002")[0]
    assert veth["details"]["check"] == "socket_list" and not veth["culprit"] and "veth75fa783" in veth["title"]


def test_the_suggested_interface_breaks_a_tie_by_the_first_host():
    """Two hosts bootstrap on two routable interfaces, once each: the suggestion names the first
    host's, whatever the string hash seed (a set's order made it eth0, bond0 or eno1 by run)."""
    from postmortem.rules.network.n002_bootstrap_interface import _good_interface
    by_host = {"node-b": ("bond0", "10.0.0.2"), "node-a": ("eno1", "10.0.0.1"), "node-c": ("eth0", "10.0.0.3")}
    assert _good_interface(by_host, exclude=set()) == "bond0"
    assert _good_interface(by_host, exclude={"node-b"}) == "eno1"
    assert _good_interface({**by_host, "node-d": ("eth0", "10.0.0.4")}, exclude=set()) == "eth0"
    assert _good_interface({"node-a": ("docker0", "172.17.0.1")}, exclude=set()) == "<routable interface>"
