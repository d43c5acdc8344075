"""Both sides of every network hop, and one judgement of which hops are slow (issue 22, bullets
4-5): GDR per side in the store, in ``postmortem transports`` (text and JSON) and in N013; TCP
sockets between hosts always reported (a warning where RDMA was possible, information where
not); and the transports view never lists a hop as slower than expected without a finding in
the report that covers it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report
from postmortem.views.transports import render_text, view
from postmortem.generator import RunSpec, generate_run
from tests.test_rules_transport import _TWO, _pcie_pairs, _topo, _write_job

RULE_FIXTURES = {
    "N013": {"fires": ["test_one_node_without_gdr_is_named_from_its_own_sides",
                       "test_without_a_reason_the_node_lacking_gdr_is_named_at_low_confidence"],
             "quiet": ["test_gdr_off_across_cpu_sockets_is_quiet_in_both_views"]},
    "N012": {"fires": ["test_ib_disable_says_where_it_was_set", "test_sockets_without_rdma_nics_are_information"],
             "quiet": ["test_single_node_on_shm_by_design_is_quiet"]},
}

THREE = ["ib-01", "ib-02", "ib-03"]
NO_MODULE = "NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)"


def _host(rank: int, gpus: int = 2, hosts=THREE) -> str:
    return hosts[rank // gpus]


def _side(bad: str):
    """``via`` for one side of each hop: GDR unless that side's host is ``bad``."""
    def via(src: int, dst: int, side: str) -> str:
        if _host(src) == _host(dst):
            return "P2P/CUMEM/read"
        host = _host(src) if side == "send" else _host(dst)
        return "NET/IB/0" + ("" if host == bad else "/GDRDMA")
    return (lambda s, d: via(s, d, "send")), (lambda s, d: via(s, d, "receive"))


def _report(folder: Path) -> tuple[dict, dict]:
    run = analyze([folder])
    try:
        return build_report(run), view(run)
    finally:
        run.con.close()


def _findings(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


def _gdr_job(tmp_path: Path, no_module: bool, topo: dict | None = None) -> Path:
    send, recv = _side("ib-02")
    nics = {h: ["mlx5_0:1/RoCE"] for h in THREE}
    return _write_job(tmp_path, THREE, 2, send, via_recv=recv, nics=nics, topo=topo,
                      extra={"ib-02": [NO_MODULE]} if no_module else None)


def test_one_node_without_gdr_is_named_from_its_own_sides(tmp_path):
    report, v = _report(_gdr_job(tmp_path, no_module=True))
    n013 = _findings(report, "N013")
    assert len(n013) == 1 and n013[0]["nodes"] == ["ib-02"] and n013[0]["culprit"]
    assert "no module" in n013[0]["message"] and "ib-01" in n013[0]["message"]   # the others have it
    assert n013[0]["details"]["nodes_with_gdr"] == ["ib-01", "ib-03"]
    # the store and the view keep the two sides apart: into ib-02, the sender has GDR, the receiver not
    hops = [h for c in v["communicators"] for h in c["hops"] if h["transport"] == "NET"]
    into = next(h for h in hops if h["dst_host"] == "ib-02")
    assert (into["send_gdr"], into["recv_gdr"], into["gdr_sides"], into["gdr"]) == (True, False, "send only", False)
    out_of = next(h for h in hops if h["src_host"] == "ib-02")
    assert (out_of["send_gdr"], out_of["recv_gdr"], out_of["gdr_sides"]) == (False, True, "receive only")
    between = next(h for h in hops if "ib-02" not in (h["src_host"], h["dst_host"]))
    assert between["gdr_sides"] == "both" and between["tier"] == "RoCE GDR"
    text = render_text(v, all_hops=True)
    assert "[send mlx5_0 GDR -> receive mlx5_0 no GDR]" in text
    assert "[send mlx5_0 no GDR -> receive mlx5_0 GDR]" in text
    data = json.loads(json.dumps(v, default=str))
    assert {"send_gdr", "recv_gdr", "gdr_sides", "send_flags", "recv_flags"} <= set(data["communicators"][0]["hops"][0])


def test_without_a_reason_the_node_lacking_gdr_is_named_at_low_confidence(tmp_path):
    report, _ = _report(_gdr_job(tmp_path, no_module=False))
    n013 = _findings(report, "N013")
    assert len(n013) == 1 and n013[0]["nodes"] == ["ib-02"] and not n013[0]["culprit"]
    assert n013[0]["confidence"] < 0.5 and "ib-01, ib-03 use it" in n013[0]["message"]


def test_gdr_off_across_cpu_sockets_is_quiet_in_both_views(tmp_path):
    # ib-02's NIC sits across the CPU interconnect from its GPUs (SYS): GDR off is NCCL's right choice.
    near = _topo(2, lambda a, b: "NV18", lambda g, n: "PIX", nics=1)
    far = _topo(2, lambda a, b: "NV18", lambda g, n: "SYS", nics=1)
    report, v = _report(_gdr_job(tmp_path, no_module=False, topo={"ib-01": near, "ib-02": far, "ib-03": near}))
    assert not _findings(report, "N013")
    assert not [h for c in v["communicators"] for h in c["attention"]]


def test_ib_disable_says_where_it_was_set(tmp_path):
    folder = _write_job(tmp_path, _TWO, 2, lambda s, d: "NET/Socket/0" if s // 2 != d // 2 else "P2P/CUMEM/read",
                        extra={"ib-01": ["NCCL_IB_DISABLE set by environment to 1."]})
    report, v = _report(folder)
    n012 = _findings(report, "N012")
    assert len(n012) == 1 and n012[0]["severity"] == "warning"
    assert "NCCL_IB_DISABLE=1 set on ib-01" in n012[0]["message"]
    assert {h["covered_by"] for c in v["communicators"] for h in c["attention"]} == {"N012"}


def test_sockets_without_rdma_nics_are_information(tmp_path):
    folder = _write_job(tmp_path, _TWO, 2, lambda s, d: "NET/Socket/0" if s // 2 != d // 2 else "P2P/CUMEM/read")
    report, _ = _report(folder)
    n012 = _findings(report, "N012")
    assert len(n012) == 1 and n012[0]["severity"] == "info" and not n012[0]["culprit"]
    assert "If these nodes have RDMA NICs" in n012[0]["suggestion"]


def test_single_node_on_shm_by_design_is_quiet(tmp_path):
    via = lambda s, d: "SHM/direct/direct" if s // 2 != d // 2 else "P2P/CUMEM"  # noqa: E731
    folder = _write_job(tmp_path, ["pc-01"], 4, via, topo={"pc-01": _topo(4, _pcie_pairs)}, gpu_name="NVIDIA L40S",
                        extra={"pc-01": ["NET/Socket : Using [0]eth0:10.0.0.1<0>", "Using network Socket"]})
    report, v = _report(folder)
    assert not {"N010", "N012", "N013"} & {f["code"] for f in report["findings"]}
    assert not [h for c in v["communicators"] for h in c["attention"]]


# -- the two views agree ------------------------------------------------------------------------------


def _generated(tmp_path_factory, name: str, **kw) -> Path:
    out = tmp_path_factory.mktemp(name)
    generate_run(out, RunSpec(seed=0, scenario="healthy", nodes=kw.pop("nodes", 2), gpus_per_node=4,
                              iterations_before_hang=4, **kw))
    return out


def _runs(tmp_path_factory) -> list[Path]:
    real = Path(__file__).resolve().parents[2] / "shared" / "real-data" / "logs" / "nccl"
    runs = [_generated(tmp_path_factory, "shm", nodes=3, nccl_shm_node=1, nccl_gdr=False, config_files=True),
            _generated(tmp_path_factory, "sockets", nccl_fabric="socket", config_files=True),
            _generated(tmp_path_factory, "nodev", nccl_fabric="socket-nodev")]
    hand = tmp_path_factory.mktemp("hand")
    runs.append(_gdr_job(hand / "gdr", no_module=False))
    runs.append(_write_job(hand / "sock", _TWO, 2, lambda s, d: "NET/Socket/0" if s // 2 != d // 2 else "SHM/direct/direct"))
    runs += sorted(real.glob("*.log")) if real.is_dir() else []
    return runs


@pytest.fixture(scope="module")
def all_runs(tmp_path_factory):
    return _runs(tmp_path_factory)


def test_every_hop_transports_calls_slow_is_covered_by_a_finding(all_runs):
    checked = 0
    for path in all_runs:
        report, v = _report(path)
        for c in v["communicators"]:
            for h in c["attention"]:
                code = h["covered_by"]
                assert code, (path.name, h)
                hosts = {h["src_host"], h["dst_host"]} - {None}
                covering = [f for f in _findings(report, code)
                            if not hosts or not f["nodes"] or hosts & set(f["nodes"])]
                assert covering, (path.name, code, h["reason"], hosts, [f["nodes"] for f in _findings(report, code)])
                checked += 1
    assert checked >= 10


@pytest.mark.parametrize("sample", ["slow-ring", "rendezvous-missing-node"])
def test_the_ring_maps_view_is_the_communicator_the_full_view_would_give_it(sample):
    """``view(ring_map=True)`` builds only the communicator the HTML ring map draws (the most
    ranks among those with a ring order, then the largest key), as the full view has it but for
    the list of its every hop, which the ring map does not read."""
    run = analyze([Path(__file__).resolve().parents[1] / "sample_logs" / sample])
    try:
        full = view(run)["communicators"]
        ringed = [c for c in full if c.get("rings")]
        want = [{**max(ringed, key=lambda c: (c["nranks"] or 0, c["comm_key"])), "hops": []}] if ringed else []
        assert view(run, ring_map=True)["communicators"] == want
        assert bool(want) == (sample == "slow-ring")
    finally:
        run.con.close()


def test_the_ring_maps_communicator_ties_go_to_the_larger_key_and_unknown_sizes_count_as_zero():
    import polars as pl

    from postmortem.views.transports import _by_comm, _largest_ringed

    comms = pl.DataFrame({"comm_key": ["a", "b", "c"], "nranks": [8, 8, None]})
    rings = pl.DataFrame({"comm_key": ["a", "b", "c", "d"], "channel": [0, 0, 0, 0]})
    per_comm = {"nccl_communicators": _by_comm(comms), "nccl_ring_order": _by_comm(rings)}
    assert _largest_ringed(["a", "b", "c", "d"], per_comm) == ["b"]
    assert _largest_ringed(["c", "d"], per_comm) == ["d"]       # no size known: the larger key
    assert _largest_ringed(["e"], per_comm) == []               # no ring order at all
