"""The NCCL parser and transport model on the real excerpts (../shared/real-data/logs/nccl).

Each assertion restates what the excerpt's INDEX entry says the thread established (or what
the log plainly shows), not what the parser happens to output.
"""
from __future__ import annotations

import polars as pl
import pytest

from postmortem.analyzer.pipeline import analyze
from postmortem.parsers import nccl
from postmortem.parsers.lines import envelope

NCCL = "nccl"


def _parse(real_logs, name: str):
    (path,) = (real_logs / NCCL).glob(name + "*")
    return nccl.parse(envelope(path.read_bytes())).tables


def _run(real_logs, name: str):
    (path,) = (real_logs / NCCL).glob(name + "*")
    return analyze([path])


def test_at_least_98_percent_of_real_nccl_lines_are_typed(real_logs):
    total = typed = 0
    for path in sorted((real_logs / NCCL).glob("*.log")):
        lines = nccl.parse(envelope(path.read_bytes())).tables.get("nccl_lines")
        if lines is None:
            continue
        total += len(lines)
        typed += lines["kind"].is_not_null().sum()
    assert total > 350
    assert typed / total >= 0.98, f"{typed}/{total}"


def test_one_shm_hop_in_an_otherwise_p2p_ring(real_logs):
    # nccl#1027: 8 GPUs in one node, every ring hop P2P except 3 -> 4 over SHM.
    run = _run(real_logs, "nccl-issue-1027")
    hops = run.frame("SELECT * FROM nccl_hops WHERE channel = 0 AND phase = 'ring' ORDER BY src_rank")
    shm = hops.filter(pl.col("transport") == "SHM")
    assert shm.select("src_rank", "dst_rank").rows() == [(3, 4)]
    assert set(hops.filter(pl.col("transport") != "SHM")["transport"]) == {"P2P"}
    ring = run.frame("SELECT * FROM nccl_ring_order WHERE channel = 0")
    assert ring["order"].to_list() == [list(range(8))]


def test_intra_node_hops_over_sockets_are_seen(real_logs):
    # horovod#3658: every ring hop, intra-node ones included, goes via NET/Socket.
    run = _run(real_logs, "horovod-issue-3658")
    hops = run.frame("SELECT * FROM nccl_hops")
    assert set(hops["net"]) == {"Socket"}
    same = hops.filter(pl.col("same_host"))
    assert not same.is_empty() and set(same["tier"]) == {"NET on one host"}


def test_shm_instead_of_p2p_and_loopback_bootstrap_on_2_5(real_logs):
    # nccl#300 (2.5.6): ring hops `via direct shared memory`, bootstrap on lo.
    t = _parse(real_logs, "nccl-issue-300")
    conns = t["nccl_connections"]
    assert set(conns["transport"]) == {"SHM"}
    assert {(r["src"], r["src_dev"], r["dst"], r["dst_dev"]) for r in conns.iter_rows(named=True)} >= {(3, "b0", 0, "80")}
    boot = t["nccl_net"].filter(pl.col("kind") == "bootstrap_if")
    assert set(boot["name"]) == {"lo"} and set(boot["address"]) == {"127.0.0.1"}


def test_mixed_nccl_builds_are_told_apart_by_line_shapes(real_logs):
    # nccl-tests#185: rank 0 prints 2.19.3; the other node's lines have the <= 2.18 shapes.
    run = _run(real_logs, "nccl-tests-issue-185")
    procs = run.frame("SELECT host, version, version_min, version_max, network FROM nccl_processes WHERE network IS NOT NULL")
    by_host = {r["host"]: r for r in procs.iter_rows(named=True)}
    assert by_host["node02"]["version"] == "2.19.3"
    # the printed version stands (issue 22: facts over guesses); the shapes that disagree are kept
    procs = run.frame("SELECT host, version, version_source, version_max FROM nccl_processes WHERE network IS NOT NULL")
    node01 = next(r for r in procs.iter_rows(named=True) if r["host"] == "node01")
    assert node01["version"] == "2.19.3" and node01["version_max"] == "2.18"
    assert "line shapes say 2.16-2.18" in node01["version_source"]


def test_docker_bridge_bootstrap_and_its_errors(real_logs):
    # nccl#331 (2.4.8): bootstrap falls back to eth0 172.17.0.3, then bind fails.
    t = _parse(real_logs, "nccl-issue-331")
    boot = t["nccl_net"].filter(pl.col("kind") == "bootstrap_if")
    assert ("eth0", "172.17.0.3") in boot.select("name", "address").rows()
    classes = set(t["events"].filter(pl.col("kind") == "nccl_warn")["error_class"])
    assert {"no_interface", "bind_failed"} <= classes


def test_ipv6_link_local_bootstrap_keeps_its_zone(real_logs):
    # nccl#529 (2.5.6): ip6tnl0 with fe80::...%ip6tnl0 listed first.
    t = _parse(real_logs, "nccl-issue-529")
    boot = t["nccl_net"].filter(pl.col("kind") == "bootstrap_if").sort("line_no", "item")
    first = boot.row(0, named=True)
    assert first["name"] == "ip6tnl0" and first["address"].startswith("fe80::") and first["address"].endswith("%ip6tnl0")


def test_plugin_net_name_with_a_space(real_logs):
    # nccl#1176: `via NET/AWS Libfabric/1/GDRDMA/Shared` on connection index 1 (p2p).
    t = _parse(real_logs, "nccl-issue-1176")
    conns = t["nccl_connections"]
    assert set(conns["net"]) == {"AWS Libfabric"}
    assert conns["nic"].to_list() == [1, 1] and conns["gdr"].all() and conns["shared"].all()
    assert set(conns["phase"]) == {"p2p"}
    classes = set(t["events"].filter(pl.col("kind") == "nccl_warn")["error_class"])
    assert "size_mismatch" in classes  # bootstrap `Message truncated`


def test_merged_plugin_nics(real_logs):
    # nccl-tests#373: HPC-X IBext merges two ports per virtual device.
    t = _parse(real_logs, "nccl-tests-issue-373")
    nics = t["nccl_net"].filter(pl.col("kind") == "ib_nics")
    assert nics.select("index", "name").rows() == [(0, "mlx5_2"), (0, "mlx5_3"), (1, "mlx5_0"), (1, "mlx5_1")]
    assert set(t["nccl_net"].filter(pl.col("kind") == "network")["name"]) == {"IBext_v8"}


def test_redacted_pid_and_nccl_warn_timestamp(real_logs):
    # nccl#1920: `gpu-server320 [5] NCCL INFO ...` (no pid/tid) and a 2.26+ WARN timestamp.
    t = _parse(real_logs, "nccl-issue-1920")
    lines = t["nccl_lines"]
    assert lines["kind"].is_not_null().all() and set(lines["host"]) == {"gpu-server320"}
    warn = t["events"].filter(pl.col("kind") == "nccl_warn").row(0, named=True)
    assert warn["error_class"] == "peer_closed" and warn["ts"] is not None


def test_torn_ray_lines_are_counted_not_lost(real_logs):
    t = _parse(real_logs, "nccl-issue-1672")
    torn = t["events"].filter(pl.col("kind") == "torn_line")
    assert len(torn) >= 7


def test_k9s_box_borders(real_logs):
    t = _parse(real_logs, "nccl-issue-733")
    assert len(t["nccl_lines"]) == 17
    assert set(t["nccl_net"].filter(pl.col("kind") == "network")["name"]) == {"IB"}


def test_env_lines_drop_the_integer_period(real_logs):
    t = _parse(real_logs, "nccl-issue-1814")
    env = t["nccl_env"]
    assert ("NCCL_IB_TIMEOUT", "18") in env.select("key", "value").rows()


@pytest.mark.parametrize("name", ["nccl-issue-1027", "horovod-issue-3658", "nccl-issue-331"])
def test_transports_command_runs_on_real_excerpts(real_logs, name, capsys):
    from postmortem.cli import main

    (path,) = (real_logs / NCCL).glob(name + "*")
    assert main(["transports", str(path), "--quiet"]) == 0
    assert capsys.readouterr().out.strip()




def test_hops_come_in_one_order_whatever_the_run(real_logs):
    """Hops of one channel whose ranks are unknown tie on the sort key (``_hops``); their lines
    break the tie, and settling their phase keeps the order. Two analyses of these excerpts
    used to store such hops in different orders."""
    from postmortem.analyzer import nccl_model

    run = analyze([real_logs])
    hops = run.frame("SELECT rowid AS _at, * FROM nccl_hops ORDER BY rowid")
    key = ["comm_key", "channel", "phase", "src_rank"]
    tied = hops.filter(pl.len().over(key) > 1)
    assert not tied.is_empty()       # the excerpts hold such hops
    in_line_order = tied.sort(*key, "input_id", "line_no", nulls_last=True)["_at"]
    assert in_line_order.to_list() == tied.sort(*key, "_at", nulls_last=True)["_at"].to_list()
    rings = run.frame("SELECT * FROM nccl_ring_order")
    for seed in range(3):
        shuffled = hops.sample(fraction=1.0, shuffle=True, seed=seed)
        assert nccl_model._settle_phase(shuffled, rings).drop("phase").equals(shuffled.drop("phase"))
