"""Configuration rules (E001-E007): settings and versions that differ between nodes.

Generated runs (bench's generator: per-node env and NCCL release), hand-written runs (their
own reading of the formats), the real excerpts, and quiet cases where nodes legitimately differ.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report
from postmortem.generator import RunSpec, generate_run

ROOT = Path(__file__).resolve().parents[1]

RULE_FIXTURES = {
    "E001": {"fires": ["test_proto_on_one_node_is_the_culprit", "test_echo_only_names_the_node",
                       "test_dump_only_names_the_node_with_less_confidence", "test_hand_written_algo_value_differs",
                       "test_two_nodes_disagree_without_majority"],
             "quiet": ["test_stale_dump_not_echoed_is_not_the_culprit",
                       "test_dump_contradicted_by_echo_is_believed_echo", "test_per_node_variables_are_never_flagged",
                       "test_healthy_sample_env_is_quiet", "test_real_env_table_lines_are_quiet"]},
    "E002": {"fires": ["test_error_handling_differs_is_a_warning"],
             "quiet": ["test_per_node_variables_are_never_flagged", "test_healthy_sample_env_is_quiet"]},
    "E003": {"fires": ["test_should_match_differs_is_a_warning"],
             "quiet": ["test_per_node_variables_are_never_flagged", "test_healthy_sample_env_is_quiet",
                       "test_real_env_table_lines_are_quiet"]},
    "E004": {"fires": ["test_generated_mixed_nccl_release_names_the_node", "test_hand_written_version_lines_differ",
                       "test_real_mixed_builds_are_reported_without_blame"],
             "quiet": ["test_proto_on_one_node_is_the_culprit", "test_real_too_old_nccl_is_not_a_mismatch"]},
    "E005": {"fires": ["test_driver_and_torch_differ_are_warnings"],
             "quiet": ["test_hand_written_version_lines_differ", "test_proto_on_one_node_is_the_culprit"]},
    "E006": {"fires": ["test_driver_and_torch_differ_are_warnings"],
             "quiet": ["test_hand_written_version_lines_differ", "test_healthy_sample_env_is_quiet"]},
    "E007": {"fires": ["test_real_too_old_nccl_is_not_a_mismatch"],
             "quiet": ["test_real_mixed_builds_are_reported_without_blame", "test_proto_on_one_node_is_the_culprit"]},
}

SMALL = {"gpus_per_node": 2, "scenario": "all-stuck", "network_fault": False, "pyspy": False,
         "iterations_before_hang": 2, "hang_seq": 30}


def _report(*paths) -> dict:
    return build_report(analyze([str(p) for p in paths]))


def _by_code(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


def _one(report: dict, code: str) -> dict:
    found = _by_code(report, code)
    assert len(found) == 1, [(f["code"], f["title"]) for f in report["findings"]]
    return found[0]


# -- generated runs -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def proto_report(tmp_path_factory):
    """3 nodes, NCCL_PROTO=Simple on node index 1 only: its env dump and its ranks' echoes."""
    out = tmp_path_factory.mktemp("proto")
    generate_run(out, RunSpec(nodes=3, node_env={1: {"NCCL_PROTO": "Simple"}}, **SMALL))
    return _report(out)


def test_proto_on_one_node_is_the_culprit(proto_report):
    e001 = _one(proto_report, "E001")
    assert e001["culprit"] and e001["severity"] == "error" and e001["category"] == "config"
    assert e001["nodes"] == ["h20-node-02"] and e001["ranks"] == [2, 3]
    assert e001["details"]["basis"] == "echo+dump" and e001["confidence"] >= 0.8
    notes = " ".join(e["note"] for e in e001["evidence"])
    assert "NCCL's own echo" in notes and "env dump agrees" in notes
    assert any("NCCL_PROTO set by environment to Simple" in e["text"] for e in e001["evidence"])
    assert "Unset NCCL_PROTO on h20-node-02" in e001["suggestion"]
    v = proto_report["verdict"]
    assert v["status"] == "culprit" and v["category"] == "config" and v["culprit"]["nodes"] == ["h20-node-02"]
    h003 = _one(proto_report, "H003")
    assert e001["id"] in h003["caused_by"]
    for code in ("E004", "E005", "E007"):
        assert not _by_code(proto_report, code)


@pytest.fixture(scope="module")
def echo_only_report(tmp_path_factory):
    """NCCL_ALGO=Ring on node index 2, no env dumps collected: only NCCL's lines show it."""
    out = tmp_path_factory.mktemp("echo")
    generate_run(out, RunSpec(nodes=3, node_env={2: {"NCCL_ALGO": "Ring"}}, **SMALL))
    shutil.rmtree(out / "env")
    return _report(out)


def test_echo_only_names_the_node(echo_only_report):
    e001 = _one(echo_only_report, "E001")
    assert e001["culprit"] and e001["nodes"] == ["h20-node-03"] and e001["details"]["basis"] == "echo"
    assert e001["details"]["key"] == "NCCL_ALGO" and e001["details"]["majority"] == "<unset>"
    assert echo_only_report["verdict"]["culprit"]["nodes"] == ["h20-node-03"]


@pytest.fixture(scope="module")
def dump_only_report(tmp_path_factory):
    """NCCL_BUFFSIZE on node index 0 in its dump, NCCL_DEBUG off: no NCCL lines to confirm it."""
    out = tmp_path_factory.mktemp("dump")
    generate_run(out, RunSpec(nodes=3, nccl_debug=False, node_env={0: {"NCCL_BUFFSIZE": "8388608"}}, **SMALL))
    return _report(out)


def test_dump_only_names_the_node_with_less_confidence(dump_only_report):
    e001 = _one(dump_only_report, "E001")
    assert e001["nodes"] == ["h20-node-01"] and e001["details"]["basis"] == "dump"
    assert e001["culprit"] and 0.5 <= e001["confidence"] <= 0.65
    assert "only the env dumps show it" in e001["message"]


@pytest.fixture(scope="module")
def stale_dump_report(tmp_path_factory):
    """A node's dump was taken in a login shell that exports NCCL_PROTO; the job's ranks never
    echoed it (NCCL prints NCCL_PROTO at every init when set): not the culprit."""
    out = tmp_path_factory.mktemp("stale")
    generate_run(out, RunSpec(nodes=3, **SMALL))
    dump = out / "env" / "h20-node-02.env"
    dump.write_text(dump.read_text() + "NCCL_PROTO=Simple\n")
    return _report(out)


def test_stale_dump_not_echoed_is_not_the_culprit(stale_dump_report):
    found = _by_code(stale_dump_report, "E001")
    assert all(not f["culprit"] and f["severity"] == "warning" for f in found)
    assert stale_dump_report["verdict"]["status"] == "no-single-culprit"


def test_generated_mixed_nccl_release_names_the_node(tmp_path):
    generate_run(tmp_path, RunSpec(nodes=3, node_nccl_version={1: "2.18.3"}, **SMALL))
    report = _report(tmp_path)
    e004 = _one(report, "E004")
    assert e004["culprit"] and e004["nodes"] == ["h20-node-02"] and e004["category"] == "config"
    assert "2.18" in e004["message"] and e004["details"]["from_line_shapes"]
    assert report["verdict"]["culprit"]["nodes"] == ["h20-node-02"]
    assert not _by_code(report, "E001")


def test_two_nodes_disagree_without_majority(tmp_path):
    """Deliberately ambiguous: 1 node against 1. The mismatch is real, the culprit is not decided."""
    generate_run(tmp_path, RunSpec(nodes=2, node_env={1: {"NCCL_PROTO": "LL128"}}, **SMALL))
    report = _report(tmp_path)
    e001 = _one(report, "E001")
    assert e001["severity"] == "error" and not e001["culprit"]
    assert e001["nodes"] == ["h20-node-01", "h20-node-02"] and "not decided" in e001["message"]
    assert report["verdict"]["status"] != "culprit"


# -- hand-written runs ----------------------------------------------------------------------------


def _hand_run(folder: Path, nodes: int = 3, echoes: dict | None = None, dumps: dict | None = None,
              versions: dict | None = None, drivers: dict | None = None, files: dict | None = None) -> Path:
    """node-0N/rankR.log with NCCL INFO lines (2 ranks a node), env/node-0N.env dumps.

    echoes/dumps: node index -> {KEY: VALUE} on top of a common base; versions/drivers: node
    index -> NCCL version / cudaDriverVersion (default 2.22.3 / 12040)."""
    echoes, dumps, versions, drivers = echoes or {}, dumps or {}, versions or {}, drivers or {}
    world = 2 * nodes
    for n in range(nodes):
        host = f"node-{n + 1:02d}"
        base_echo = {"NCCL_SOCKET_IFNAME": "bond0", "NCCL_IB_GID_INDEX": "3", **echoes.get(n, {})}
        for local in range(2):
            rank, pid = 2 * n + local, 5000 + 10 * n + local
            head = f"{host}:{pid}:{pid} [{local}] NCCL INFO "
            lines = [head + f"cudaDriverVersion {drivers.get(n, 12040)}",
                     head + f"NCCL version {versions.get(n, '2.22.3')}+cuda12.6"]
            lines += [head + f"{k} set by environment to {v}" + ("." if v.isdigit() else "")
                      for k, v in base_echo.items()]
            lines.append(head + f"ncclCommInitRank comm 0x7f{rank:04x} rank {rank} nranks {world} cudaDev {local} "
                                f"nvmlDev {local} busId {['18000', '2a000'][local]} commId 0xabc - Init COMPLETE")
            path = folder / host / f"rank{rank}.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(lines) + "\n")
        env = {"HOSTNAME": host, "SLURMD_NODENAME": host, "SLURM_NODEID": str(n), "SLURM_JOB_ID": "77",
               "CUDA_VISIBLE_DEVICES": "0,1", "MASTER_ADDR": "node-01", "MASTER_PORT": "29500",
               "NCCL_SOCKET_IFNAME": "bond0", "NCCL_IB_HCA": "mlx5", "NCCL_IB_TIMEOUT": "22",
               "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", **dumps.get(n, {})}
        (folder / "env").mkdir(exist_ok=True)
        (folder / "env" / f"{host}.env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    for rel, text in (files or {}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


def test_hand_written_algo_value_differs(tmp_path):
    report = _report(_hand_run(tmp_path, echoes={0: {"NCCL_ALGO": "Ring"}, 1: {"NCCL_ALGO": "Ring"},
                                                 2: {"NCCL_ALGO": "Tree"}}))
    e001 = _one(report, "E001")
    assert e001["culprit"] and e001["nodes"] == ["node-03"] and e001["details"]["majority"] == "Ring"
    assert e001["confidence"] >= 0.85 and "NCCL_ALGO=Ring on node-03" in e001["suggestion"]


def test_dump_contradicted_by_echo_is_believed_echo(tmp_path):
    """node-02's dump (another shell) says Simple; its ranks echo LL128 like everyone: quiet."""
    echo = {"NCCL_PROTO": "LL128"}
    report = _report(_hand_run(tmp_path, echoes={0: echo, 1: echo, 2: echo}, dumps={1: {"NCCL_PROTO": "Simple"}}))
    assert not _by_code(report, "E001")


def test_per_node_variables_are_never_flagged(tmp_path):
    dumps = {1: {"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_SOCKET_IFNAME": "ens3", "SLURM_JOB_NODELIST": "x",
                 "CUDA_VISIBLE_DEVICES": "2,3", "PMIX_RANK": "7", "SLURM_TOPOLOGY_ADDR": "sw1.node-02"},
             2: {"NCCL_IB_HCA": "=mlx5_2", "SLURM_CPUS_ON_NODE": "96"}}
    report = _report(_hand_run(tmp_path, echoes={1: {"NCCL_SOCKET_IFNAME": "ens3"}, 2: {"NCCL_IB_HCA": "mlx5_2"}},
                               dumps=dumps))
    for code in ("E001", "E002", "E003"):
        assert not _by_code(report, code), code


def test_error_handling_differs_is_a_warning(tmp_path):
    report = _report(_hand_run(tmp_path, dumps={2: {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}}))
    e002 = _one(report, "E002")
    assert e002["severity"] == "warning" and not e002["culprit"] and e002["nodes"] == ["node-03"]
    assert not _by_code(report, "E001")


def test_should_match_differs_is_a_warning(tmp_path):
    report = _report(_hand_run(tmp_path, dumps={0: {"NCCL_IB_TIMEOUT": "18"}}))
    e003 = _one(report, "E003")
    assert e003["severity"] == "warning" and not e003["culprit"] and e003["nodes"] == ["node-01"]


def test_hand_written_version_lines_differ(tmp_path):
    report = _report(_hand_run(tmp_path, versions={1: "2.22.5"}))
    e004 = _one(report, "E004")
    assert e004["culprit"] and e004["nodes"] == ["node-02"] and e004["confidence"] >= 0.85
    assert "2.22.5" in e004["message"] and "2.22.3" in e004["message"]
    assert not _by_code(report, "E005") and not _by_code(report, "E006")


PIP = "numpy==1.26.4\npackaging==24.1\nsafetensors==0.4.4\ntorch=={torch}\ntriton==3.0.0\n"


def test_driver_and_torch_differ_are_warnings(tmp_path):
    files = {f"node-0{n}/pip-freeze.txt": PIP.format(torch=t)
             for n, t in ((1, "2.4.0+cu124"), (2, "2.4.0+cu124"), (3, "2.3.1+cu121"))}
    report = _report(_hand_run(tmp_path, drivers={2: 12020}, files=files))
    e005, e006 = _one(report, "E005"), _one(report, "E006")
    assert e005["severity"] == "warning" and e005["nodes"] == ["node-03"] and "12020" in e005["message"]
    assert e006["severity"] == "warning" and e006["nodes"] == ["node-03"] and "2.3.1" in e006["message"]
    assert not e005["culprit"] and not e006["culprit"]


# -- samples and real excerpts --------------------------------------------------------------------


def test_healthy_sample_env_is_quiet():
    """The bundled healthy run's env dumps and config files (the rest of it is other rules' business)."""
    sample = ROOT / "sample_logs" / "healthy-40r"
    report = _report(sample / "env", sample / "config")
    assert not [f for f in report["findings"] if f["code"].startswith("E")]


def test_real_mixed_builds_are_reported_without_blame(real_logs):
    """nccl-tests#185: node02 prints the 2.19 plugin wording (rank 0: 2.19.3), node01 the <=2.18
    wording. One against one: a mismatch, but not a culprit."""
    report = _report(real_logs / "nccl" / "nccl-tests-issue-185-roce-ibv-modify-qp-unreachable-2.19.3.log")
    e004 = _one(report, "E004")
    assert e004["severity"] == "error" and not e004["culprit"]
    assert e004["nodes"] == ["node01", "node02"] and "2.16-2.18" in e004["message"]
    assert not _by_code(report, "E007")


def test_real_too_old_nccl_is_not_a_mismatch(real_logs):
    """nccl#1637: `ncclMaxSharedMem ... exceeds device/fn maxSharedMem`: NCCL 2.25.1 too old for the GPU."""
    report = _report(real_logs / "nccl" / "nccl-issue-1637-rtx5090-2.25.1-p2p-disabled-shared-mem-limit.log")
    e007 = _one(report, "E007")
    assert e007["severity"] == "error" and not e007["culprit"] and "too old for this GPU" in e007["title"]
    assert "2.25.1" in e007["title"]
    assert not _by_code(report, "E004")


@pytest.mark.parametrize("name", ["nccl-issue-1814-roce-status12-nvls-64ranks.log",
                                  "nccl-issue-529-bootstrap-on-ip6tnl0-linklocal-2.5.6.log",
                                  "nccl-tests-issue-373-ibext-plugin-merged-nics-ib-disable-ignored.log"])
def test_real_env_table_lines_are_quiet(real_logs, name):
    """Real 'set by environment' lines, read lazily on some tids only: nothing differs between nodes."""
    report = _report(real_logs / "nccl" / name)
    assert not [f for f in report["findings"] if f["code"] in ("E001", "E002", "E003")]


def test_generator_rejects_node_config_it_cannot_write():
    for kwargs in ({"node_env": {5: {"NCCL_PROTO": "Simple"}}}, {"node_env": {0: {"NCCL_IB_HCA": "mlx5_1"}}},
                   {"node_nccl_version": {1: "2.23.4"}}, {"node_nccl_version": {1: "2.17.1"}}):
        with pytest.raises(ValueError):
            RunSpec(nodes=2, scenario="all-stuck", **kwargs).validate()
    spec = RunSpec(nodes=2, scenario="all-stuck", node_env={"1": {"NCCL_ALGO": "Tree"}}, node_nccl_version={"1": "2.20.5"})
    spec.validate()      # expected.json gives node keys as strings
    assert spec.node_env == {1: {"NCCL_ALGO": "Tree"}} and spec.node_nccl_version == {1: "2.20.5"}
