"""NCCL output of generated runs, every version family and transport, against the generator's truth.

The generator shares our reading of nccl.md, so these tests prove internal consistency at
scale (every line typed, every connection's ranks/hosts/transport, every ring's order);
the real excerpts (test_nccl_real.py) and the reference-written line cases
(test_nccl_line_kinds.py) keep that reading honest.
"""
from __future__ import annotations

from collections import Counter

import polars as pl
import pytest

from postmortem.analyzer.pipeline import analyze
from postmortem.generator import RunSpec, generate_run

FULL = "INIT,ENV,GRAPH,TUNING,COLL"

CASES = {
    "2.4-ib": dict(nccl_version="2.4.8", nccl_fabric="ib", nccl_subsys=FULL),
    "2.5-shm": dict(nccl_version="2.5.6", nccl_intra="shm", nccl_fabric="socket"),
    "2.7-socket": dict(nccl_version="2.7.8", nccl_fabric="socket", nccl_subsys=FULL),
    "2.8-pcie-indirect": dict(nccl_version="2.8.4", nccl_intra="indirect", nccl_subsys=FULL),
    "2.12-roce": dict(nccl_version="2.12.12", nccl_subsys=FULL),
    "2.14-pxn": dict(nccl_version="2.14.3", nccl_pxn=True, nccl_fabric="ib"),
    "2.18-ofi": dict(nccl_version="2.18.3", nccl_fabric="ofi", nccl_subsys=FULL),
    "2.20-nogdr": dict(nccl_version="2.20.5", nccl_gdr=False, nccl_subsys=FULL),
    "2.22-nvls": dict(nccl_version="2.22.3", nccl_nvls=True, nccl_subsys=FULL),
    "2.23-pcie": dict(nccl_version="2.23.4", nccl_intra="pcie", nccl_subsys=FULL),
    "2.24-direct": dict(nccl_version="2.24.3", nccl_intra="direct", nccl_subsys=FULL),
    "2.26-shm-node": dict(nccl_version="2.26.2", nccl_shm_node=1, nccl_subsys=FULL),
    "2.29-socket-nodev": dict(nccl_version="2.29.7", nccl_fabric="socket-nodev", nccl_subsys=FULL),
    "2.30-ib": dict(nccl_version="2.30.7", nccl_fabric="ib", nccl_subsys=FULL),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def generated(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param.replace(".", "_"))
    spec = RunSpec(nodes=2, gpus_per_node=4, scenario="healthy", pyspy=False, nccl_connections="full",
                   seed=3, **CASES[request.param])
    truth = generate_run(out, spec)
    return request.param, analyze([out]), truth["nccl"]


def _comm_map(run, truth) -> dict[str, str]:
    """truth comm key -> our comm key, matched by the set of (host, pid, rank) members."""
    ours = {}
    for (key,), rows in run.frame("SELECT comm_key, host, pid, rank FROM nccl_members").group_by("comm_key"):
        ours[frozenset(rows.select("host", "pid", "rank").rows())] = key
    mapping = {}
    for comm in truth["comms"]:
        members = frozenset((m["host"], m["pid"], m["rank"]) for m in comm["members"])
        mapping[comm["key"]] = ours.get(members)
    return mapping


def test_every_nccl_line_is_typed(generated):
    name, run, truth = generated
    lines = run.frame("SELECT * FROM nccl_lines")
    untyped = lines.filter(pl.col("kind").is_null())
    assert untyped.is_empty(), run.frame(
        "SELECT l.text FROM nccl_lines n JOIN lines l USING (input_id, line_no) WHERE n.kind IS NULL LIMIT 5")
    assert len(lines.filter(pl.col("level") != "CONTINUATION")) == truth["lines"]


def test_every_connection_line_is_read_as_written(generated):
    name, run, truth = generated
    got = run.frame("SELECT host, pid, channel, conn_index, src, dst, side, transport, net, nic, gdr, shared, "
                    "pxn_via FROM nccl_connections")
    ours = Counter(got.rows())
    want = Counter((c["printed_by"]["host"], c["printed_by"]["pid"], c["channel"], c["conn_index"], c["src_rank"],
                    c["dst_rank"], c["side"], c["transport"], c["net"], c["nic"], c["gdr"], c["shared"], c["pxn_via"])
                   for c in truth["connections"])
    assert ours == want


def test_every_hop_has_the_right_communicator_hosts_and_phase(generated):
    name, run, truth = generated
    mapping = _comm_map(run, truth)
    assert None not in mapping.values(), mapping
    hops = run.frame("SELECT comm_key, channel, conn_index, src_rank, dst_rank, phase, src_host, dst_host, transport "
                     "FROM nccl_hops")
    # Before 2.12/2.14 no connection index is printed: a lazy p2p hop and a ring hop between the
    # same two ranks differ only by their phase, so the phase is part of the key.
    ours = {r[:6]: r[6:] for r in hops.rows()}
    assert len(ours) == len(hops), "two hops with the same key"
    want = {}
    for c in truth["connections"]:
        key = (mapping[c["comm"]], c["channel"], c["conn_index"], c["src_rank"], c["dst_rank"], c["kind"])
        want[key] = (c["src_host"], c["dst_host"], c["transport"])
    assert ours == want


def test_ring_order_is_rebuilt_for_every_channel(generated):
    name, run, truth = generated
    mapping = _comm_map(run, truth)
    rings = {(r["comm_key"], r["channel"]): r for r in run.frame("SELECT * FROM nccl_ring_order").iter_rows(named=True)}
    for ring in truth["rings"]:
        ours = rings.get((mapping[ring["comm"]], ring["channel"]))
        assert ours is not None, ring
        assert ours["order"] == ring["order"] and ours["complete"], (ours, ring)
        assert ours["agrees_with_hops"] in (True, None)


def test_network_per_process(generated):
    name, run, truth = generated
    procs = {(r["host"], r["pid"]): r for r in run.frame("SELECT * FROM nccl_processes").iter_rows(named=True)}
    for net in truth["net"]:
        ours = procs[(net["host"], net["pid"])]
        assert ours["network"] == net["network"]
        assert (ours["bootstrap_if"], ours["bootstrap_addr"]) == (net["bootstrap_if"], net["bootstrap_addr"])
        want_nics = [f"{n['name']}:{n['port']}/{n['link']}" for n in net["nics"] if n.get("link")]
        assert (ours["nics"] or []) == want_nics


def test_version_is_known_for_every_process(generated):
    name, run, truth = generated
    procs = run.frame("SELECT version, version_min, version_max FROM nccl_processes")
    minor = int(truth["version"].split(".")[1])
    for row in procs.iter_rows(named=True):
        if row["version"]:
            assert row["version"] == truth["version"]
        else:
            assert int(row["version_min"].split(".")[1]) <= minor <= int(row["version_max"].split(".")[1]), row


def _transports(out, *args) -> str:
    import contextlib
    import io

    from postmortem.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["transports", str(out), "--quiet", *args]) == 0
    return buf.getvalue()


def test_ib_disabled_run_shows_socket_hops_between_nodes(tmp_path):
    generate_run(tmp_path, RunSpec(nodes=3, gpus_per_node=4, scenario="healthy", pyspy=False,
                                   nccl_version="2.21.5", nccl_fabric="socket", launcher="srun-per-gpu"))
    text = _transports(tmp_path)
    assert "Socket" in text
    import json
    view = json.loads(_transports(tmp_path, "--format", "json"))
    world = max(view["communicators"], key=lambda c: c["nranks"] or 0)
    inter = [h for h in world["hops"] if h["src_host"] != h["dst_host"]]
    assert inter and {h["tier"] for h in inter} == {"Socket"} and {h["net"] for h in inter} == {"Socket"}
    intra = [h for h in world["hops"] if h["src_host"] == h["dst_host"]]
    assert intra and {h["transport"] for h in intra} == {"P2P"}


def test_one_node_falling_back_to_shm_shows_shm_hops_on_that_node(tmp_path):
    generate_run(tmp_path, RunSpec(nodes=3, gpus_per_node=4, scenario="healthy", pyspy=False,
                                   nccl_version="2.19.3", nccl_shm_node=1))
    import json
    view = json.loads(_transports(tmp_path, "--format", "json"))
    world = max(view["communicators"], key=lambda c: c["nranks"] or 0)
    shm = [h for h in world["hops"] if h["transport"] == "SHM"]
    assert shm and {h["src_host"] for h in shm} == {"h20-node-02"} == {h["dst_host"] for h in shm}
    other = [h for h in world["hops"] if h["src_host"] == h["dst_host"] != "h20-node-02"]
    assert other and {h["transport"] for h in other} == {"P2P"}
    assert {h["src_host"] for h in world["attention"]} == {"h20-node-02"}
    assert "SHM" in _transports(tmp_path)
    assert view["p2p_refusals"] and {r["host"] for r in view["p2p_refusals"]} == {"h20-node-02"}


def test_docker0_bootstrap_on_one_node_is_in_nccl_net(tmp_path):
    generate_run(tmp_path, RunSpec(nodes=3, gpus_per_node=2, scenario="healthy", pyspy=False,
                                   nccl_version="2.23.4", nccl_bootstrap_if={2: "docker0:172.17.0.2"}))
    run = analyze([tmp_path])
    boot = run.frame("SELECT DISTINCT host, name, address FROM nccl_net WHERE kind = 'bootstrap_if' ORDER BY host")
    assert boot.rows() == [("h20-node-01", "eth0", boot["address"][0]), ("h20-node-02", "eth0", boot["address"][1]),
                           ("h20-node-03", "docker0", "172.17.0.2")]
    assert "docker0 172.17.0.2" in _transports(tmp_path)


def test_algo_env_and_tuning_table_belong_to_each_communicator_init(tmp_path):
    # NCCL_PROTO is echoed by every rank at every communicator init (nccl.md 3.14.4); the
    # tuning table by rank 0 of each communicator.
    truth = generate_run(tmp_path, RunSpec(nodes=2, gpus_per_node=4, scenario="healthy", pyspy=False,
                                           nccl_version="2.24.3", nccl_subsys="INIT,ENV,TUNING",
                                           nccl_env={"NCCL_PROTO": "^LL128"}))["nccl"]
    run = analyze([tmp_path])
    mapping = _comm_map(run, truth)
    env = run.frame("SELECT comm_key, count(*) AS n FROM nccl_env WHERE key = 'NCCL_PROTO' GROUP BY 1")
    assert dict(env.rows()) == {mapping[c["key"]]: c["nranks"] for c in truth["comms"]}
    tables = run.frame("SELECT DISTINCT comm_key FROM nccl_tuning WHERE kind = 'table_cell'")["comm_key"].to_list()
    assert sorted(tables) == sorted(mapping.values())


def test_a_ring_is_walked_from_rank_0_until_a_missing_or_repeated_pointer():
    """``nccl_model._chains``: per (communicator, channel), the ranks from 0 along the first
    pointer each rank states, up to the first rank with none or seen before; a ring without a
    communicator stays at [0], a ring without rank 0 has no row; a 10,000-rank ring is walked
    whole."""
    import polars as pl

    from postmortem.analyzer.nccl_model import _chains

    big = 10_000
    rows = [("c1", 0, 0, 2, "a"), ("c1", 0, 2, 1, "a"), ("c1", 0, 1, 3, "a"), ("c1", 0, 1, 0, "a"),  # 1 -> 3 first
            ("c1", 1, 0, 1, "b"), ("c1", 1, 1, 0, "b"),                                                # back to 0
            ("c1", 2, 0, 5, "c"), ("c1", 2, 5, None, "c"),                                              # a null pointer
            ("c1", 3, 4, 0, "d"),                                                                       # no rank 0
            (None, 0, 0, 1, "e"), (None, 0, 1, 0, "e")]                                                 # no communicator
    rows += [("big", 0, r, (r + 1) % big, "f") for r in range(big)]
    nxt = pl.DataFrame(rows, schema={"comm_key": pl.String, "channel": pl.Int64, "src": pl.Int64, "dst": pl.Int64,
                                     "source": pl.String}, orient="row")
    walks = {(c, ch): (order, source) for c, ch, order, source in _chains(nxt).iter_rows()}
    assert walks.pop(("big", 0)) == (list(range(big)), "f")
    assert walks == {("c1", 0): ([0, 2, 1, 3], "a"), ("c1", 1): ([0, 1], "b"), ("c1", 2): ([0, 5], "c"),
                     (None, 0): ([0], None)}   # (nor a source: joins match no null key)
