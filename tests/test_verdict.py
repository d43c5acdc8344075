"""The verdict and cause links on hand-built findings: the deepest culprit that nothing explains
is named, independent causes that compete make it inconclusive, warnings alone are degraded."""
from __future__ import annotations

from postmortem.rules.report import _actions, _verdict, link_causes
from postmortem.rules.base import Finding


def _f(code, category, ranks=(), nodes=(), severity="error", culprit=True, confidence=0.9, gpus=(), **details):
    f = Finding(code, code.lower(), severity, confidence, f"{code} title", f"{code} message", ranks=list(ranks),
                nodes=list(nodes), gpus=list(gpus), category=category, culprit=culprit, details=details)
    f.id = f"a0-{code}-1"
    return f


class _Ctx:
    """Enough of rules.base.Context for _actions: no tables, no world size."""
    world_size = None

    def table(self, name):
        import polars as pl
        return pl.DataFrame()


def _decide(*findings):
    findings = list(findings)
    link_causes(findings)
    verdict = _verdict(findings)
    return verdict, _actions(_Ctx(), findings, verdict)


def test_a_gpu_fault_explains_the_rank_that_never_entered_and_is_drained():
    gpu = {"rank": 9, "node": "n2", "cuda_dev": 1, "bus_id": "0000:2a:00.0", "serial": "1654", "uuid": "GPU-1"}
    g, h, timeouts = (_f("G001", "hardware", [9], ["n2"], gpus=[gpu]), _f("H001", "hang", [9], ["n2"]),
                      _f("H004", "symptom", severity="warning", culprit=False))
    verdict, actions = _decide(h, timeouts, g)
    assert h.caused_by == ["a0-G001-1"] and set(timeouts.caused_by) == {"a0-G001-1", "a0-H001-1"}
    assert verdict["status"] == "culprit" and verdict["category"] == "hardware"
    assert verdict["finding_ids"] == ["a0-G001-1"] and verdict["culprit"]["gpus"][0]["serial"] == "1654"
    assert actions["drain_hostlist"] == "n2" and actions["rma_gpus"][0]["bus_id"] == "0000:2a:00.0"
    assert actions["note"] is None


def test_a_code_path_hang_is_inspected_not_drained():
    verdict, actions = _decide(_f("H001", "hang", [17], ["n3"]))
    assert verdict["status"] == "culprit" and actions["drain_hostlist"] is None
    assert actions["inspect_hostlist"] == "n3" and "do not drain" in actions["note"]


def test_independent_causes_of_similar_confidence_are_inconclusive():
    verdict, actions = _decide(_f("G001", "hardware", [3], ["n1"], confidence=0.7),
                               _f("N001", "network", [], ["n4"], confidence=0.65))
    assert verdict["status"] == "inconclusive" and len(verdict["competing"]) == 2
    assert actions["drain_hostlist"] is None and actions["inspect_hostlist"] == "n[1,4]"


def test_a_much_surer_cause_wins_and_lists_the_weaker_one():
    verdict, _ = _decide(_f("G001", "hardware", [3], ["n1"], confidence=0.9),
                         _f("E001", "config", [], ["n4"], confidence=0.5))
    assert verdict["status"] == "culprit" and verdict["culprit"]["nodes"] == ["n1"]
    assert verdict["competing"] and "E001" in verdict["competing"][0]


def test_one_rule_naming_two_places_is_one_culprit():
    verdict, _ = _decide(_f("G001", "hardware", [3], ["n1"]), _f("G001", "hardware", [12], ["n2"]))
    assert verdict["status"] == "culprit" and verdict["culprit"]["nodes"] == ["n1", "n2"]


def test_a_low_confidence_cause_is_not_drained():
    _, actions = _decide(_f("N001", "network", [], ["n4"], confidence=0.6))
    assert actions["drain_hostlist"] is None and actions["inspect_hostlist"] == "n4"


def test_an_external_kill_explains_the_first_failure_but_drains_nothing():
    x3, x1 = _f("X003", "external", [5], ["n2"]), _f("X001", "crash", [5], ["n2"])
    verdict, actions = _decide(x1, x3)
    assert x1.caused_by == ["a0-X003-1"] and verdict["finding_ids"] == ["a0-X003-1"]
    assert actions["drain_hostlist"] is None


def test_a_rule_can_ask_for_a_drain():
    _, actions = _decide(_f("X005", "external", [], ["n2"], drain=True))
    assert actions["drain_hostlist"] == "n2"


def test_everyone_stuck_with_no_deeper_cause_is_no_single_culprit():
    verdict, _ = _decide(_f("H003", "hang", culprit=False))
    assert verdict["status"] == "no-single-culprit"


def test_everyone_stuck_explained_by_a_config_mismatch():
    h3, e1 = _f("H003", "hang", culprit=False), _f("E001", "config", [], ["n3"])
    verdict, _ = _decide(h3, e1)
    assert h3.caused_by == ["a0-E001-1"] and verdict["status"] == "culprit" and verdict["culprit"]["nodes"] == ["n3"]


def test_warnings_alone_are_degraded_and_infos_alone_healthy():
    verdict, _ = _decide(_f("N010", "network", [], ["n2"], severity="warning"))
    assert verdict["status"] == "degraded" and verdict["culprit"]["nodes"] == ["n2"]
    verdict, _ = _decide(_f("N010", "network", [], ["n2"], severity="info", culprit=False))
    assert verdict["status"] == "healthy"


def test_an_unrelated_finding_is_not_linked():
    h, g = _f("H001", "hang", [17], ["n3"]), _f("G002", "hardware", [], ["n1"], severity="warning", culprit=True)
    _decide(h, g)
    assert h.caused_by == []


def test_a_link_error_that_cannot_choose_its_end_is_inconclusive_not_no_single_culprit():
    n1 = _f("N001", "network", [], ["n1", "n2"], culprit=False, confidence=0.4, competing=["n1", "n2"])
    verdict, actions = _decide(_f("H003", "hang", culprit=False), n1)
    assert verdict["status"] == "inconclusive" and verdict["competing"] == ["N001 points at n1", "N001 points at n2"]
    assert actions["drain_hostlist"] is None


def test_info_findings_are_not_linked_and_sentences_end_once():
    info = _f("G001", "hardware", [9], ["n2"], severity="info", culprit=False)
    h = _f("H001", "hang", [9], ["n2"])
    h.message = "it stopped."
    verdict, _ = _decide(h, info)
    assert info.caused_by == [] and verdict["sentence"].endswith("It stopped.") and ".." not in verdict["sentence"]


def test_the_last_complete_checkpoint_and_a_save_that_never_finished(tmp_path):
    from postmortem.analyzer.pipeline import analyze
    from postmortem.rules.report import build_report
    from tests.scenario import write_scenario

    folder = write_scenario(tmp_path / "run", ranks=4, culprit=2)
    (folder / "train.log").write_text(
        "[2026-07-24 08:10:00.000001] saving checkpoint at iteration     200 to /ckpt/run1 in torch_dist format\n"
        "  [2026-07-24 08:10:41.300001] successfully saved checkpoint from iteration     200 to /ckpt/run1 "
        "[ t 1/1, p 1/1 ]\n"
        "[2026-07-24 09:10:00.000001] saving checkpoint at iteration     400 to /ckpt/run1 in torch_dist format\n")
    checkpoint = build_report(analyze([folder]))["actions"]["checkpoint"]
    assert checkpoint["last_complete_iteration"] == 200 and checkpoint["last_complete_path"] == "/ckpt/run1"
    assert checkpoint["unfinished_save_iteration"] == 400 and "never finished" in checkpoint["warning"]
