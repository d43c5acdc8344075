"""The scoreboard: every labelled case the project has, analysed as a user would, and scored.

    python -m bench.accuracy [--json FILE] [--only SUBSTRING] [--markdown]

Cases and where their truth comes from:

* ``sample_logs/*/expected.json`` (generated runs): ``outcome``, ``verdict.status``,
  ``verdict.ranks``, ``verdict.nodes``;
* ``tests/corpus/*/truth.json`` (real torchrun jobs with injected faults, made here):
  ``outcome``, ``culprit_ranks``, ``culprit_nodes``, ``decidable``;
* ``../shared/real-data/logs/*/truth.json`` (real excerpts from public threads), the entries
  whose outcome is not ``unknown``, that name a culprit or that state a cause (``keywords``):
  ``outcome``, ``culprit``, ``not_culprit``, ``keywords``.

Each case scores one of:

* ``wrong blame``: the verdict names a culprit rank or node the truth rules out (a rank in
  ``not_culprit``, any rank where the truth says no rank is to blame, a rank outside a named
  culprit set). This must stay 0: it drains a healthy node.
* ``correct``: the outcome is right and the culprit is named exactly (or, where the truth has
  no culprit or the logs cannot decide, none is named wrongly and a healthy job gets no error).
* ``partial``: the outcome is right but a decidable culprit is not named (or named in part),
  or the culprit is right and the outcome wrong.
* ``missed``: neither.

A failed or hung job called ``healthy`` is counted separately too (``healthy on failure``), and
so is, for the excerpts whose truth states a cause (``keywords``), whether a warning or error
finding names it (``cause named``: every keyword in one finding's title or message).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "real-data" / "logs"


@dataclass
class Case:
    name: str
    group: str              # sample | corpus | real
    path: Path
    outcome: str            # completed | failed | hung | unknown
    culprit_ranks: list[int] | None = None   # None: not established
    culprit_nodes: list[str] = field(default_factory=list)
    not_culprit: list[int] = field(default_factory=list)
    decidable: bool = True
    healthy_expected: bool = False
    keywords: list[str] = field(default_factory=list)


@dataclass
class Score:
    case: str
    group: str
    score: str
    expected: str
    got: str
    healthy_on_failure: bool = False
    cause_named: bool | None = None     # None: the truth states no cause


def cases(only: str | None = None) -> list[Case]:
    out = _samples() + _corpus() + _real()
    return [c for c in out if not only or only in c.name]


def _samples() -> list[Case]:
    out = []
    for expected in sorted((ROOT / "sample_logs").glob("*/expected.json")):
        spec = json.loads(expected.read_text())
        v = spec["verdict"]
        calm = v["status"] in ("healthy", "degraded")
        ranks = v.get("ranks") or []
        outcome = spec.get("outcome") or ("completed" if calm else "failed")
        out.append(Case(expected.parent.name, "sample", expected.parent, outcome,
                        ranks if v["status"] == "culprit" else ([] if calm else None), v.get("nodes") or [],
                        healthy_expected=v["status"] == "healthy"))
    return out


def _corpus() -> list[Case]:
    out = []
    for truth in sorted((ROOT / "tests" / "corpus").glob("*/truth.json")):
        t = json.loads(truth.read_text())
        out.append(Case(truth.parent.name, "corpus", truth.parent, t["outcome"], list(t.get("culprit_ranks") or []),
                        list(t.get("culprit_nodes") or []), decidable=t.get("decidable", True),
                        healthy_expected=t["outcome"] == "completed" and not t.get("culprit_ranks")
                        and t.get("final_attempt_outcome") is None))
    return out


def _real() -> list[Case]:
    out = []
    for truth in sorted(REAL.glob("*/truth.json")) if REAL.is_dir() else []:
        for name, t in json.loads(truth.read_text()).items():
            if name.startswith("_") or not (truth.parent / name).is_file():
                continue
            if t.get("outcome", "unknown") == "unknown" and not t.get("culprit") and not t.get("keywords"):
                continue
            out.append(Case(name, "real", truth.parent / name, t.get("outcome", "unknown"), t.get("culprit"),
                            not_culprit=t.get("not_culprit") or [], keywords=list(t.get("keywords") or [])))
    return out


def score(case: Case, report: dict) -> Score:
    verdict = report["verdict"]
    outcome = (report.get("outcome") or {}).get("outcome", "unknown")
    named = set(verdict["culprit"]["ranks"]) if verdict["status"] == "culprit" else set()
    nodes = set(verdict["culprit"]["nodes"]) if verdict["status"] == "culprit" else set()
    got = f"{outcome}; {verdict['status']}" + (f" ranks {sorted(named)}" if named else "") + \
        (f" nodes {sorted(nodes)}" if nodes else "")
    truth = case.culprit_ranks
    expected = f"{case.outcome}; " + ("culprit not established" if truth is None else
                                      f"culprit ranks {truth}" if truth else "no culprit") + \
        (f" nodes {case.culprit_nodes}" if case.culprit_nodes else "") + ("" if case.decidable else " (undecidable)")
    healthy_on_failure = verdict["status"] == "healthy" and case.outcome in ("failed", "hung")
    wrong = bool(named & set(case.not_culprit)) or (truth is not None and bool(named - set(truth))) or \
        (bool(case.culprit_nodes) and bool(nodes - set(case.culprit_nodes)))
    outcome_ok = outcome == case.outcome or case.outcome == "unknown"
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    if truth and case.decidable:
        culprit_ok = named == set(truth) and (not case.culprit_nodes or nodes == set(case.culprit_nodes))
    elif case.healthy_expected:
        culprit_ok = not errors and verdict["status"] in ("healthy", "degraded")
    else:
        culprit_ok = not named or truth is None
    if wrong:
        result = "wrong blame"
    elif outcome_ok and culprit_ok:
        result = "correct"
    elif outcome_ok or (culprit_ok and truth):
        result = "partial"
    else:
        result = "missed"
    return Score(case.name, case.group, result, expected, got, healthy_on_failure, _cause_named(case, report))


def _cause_named(case: Case, report: dict) -> bool | None:
    """Whether one warning or error finding states the truth's cause: all its keywords in the
    finding's title or message (case-insensitive)."""
    if not case.keywords:
        return None
    for f in report["findings"]:
        if f["severity"] in ("error", "warning"):
            text = f"{f['title']} {f['message']}".lower()
            if all(k.lower() in text for k in case.keywords):
                return True
    return False


def run_case(case: Case) -> dict:
    from postmortem.analyzer.pipeline import analyze
    from postmortem.rules.report import build_report

    run = analyze([case.path], use_cache=False)
    try:
        return build_report(run)
    finally:
        run.con.close()


def table(scores: list[Score]) -> str:
    lines = ["| group | cases | correct | partial | missed | wrong blame | healthy on failure | cause named |",
             "|---|---|---|---|---|---|---|---|"]
    for group in ("sample", "corpus", "real", "all"):
        rows = [s for s in scores if group in ("all", s.group)]
        if not rows:
            continue
        count = {k: sum(s.score == k for s in rows) for k in ("correct", "partial", "missed", "wrong blame")}
        stated = [s for s in rows if s.cause_named is not None]
        named = f"{sum(bool(s.cause_named) for s in stated)}/{len(stated)}" if stated else "-"
        lines.append(f"| {group} | {len(rows)} | {count['correct']} | {count['partial']} | {count['missed']} | "
                     f"{count['wrong blame']} | {sum(s.healthy_on_failure for s in rows)} | {named} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", help="write every case's score to this file")
    p.add_argument("--only", help="only cases whose name contains this")
    p.add_argument("--markdown", action="store_true", help="print the per-case table in Markdown")
    args = p.parse_args(argv)
    os.environ.setdefault("POSTMORTEM_CACHE", "off")
    scores = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pm-accuracy-"):
        for case in cases(args.only):
            try:
                scores.append(score(case, run_case(case)))
            except Exception as exc:  # noqa: BLE001 -- a case that crashes the analyzer is a miss, not the end
                scores.append(Score(case.name, case.group, "missed", case.outcome, f"crashed: {exc!r}"))
            s = scores[-1]
            mark = {"correct": "ok", "partial": "~", "missed": "MISS", "wrong blame": "WRONG"}[s.score]
            cause = {None: "", True: " | cause named", False: " | CAUSE NOT NAMED"}[s.cause_named]
            print(f"{mark:5} {s.group:6} {s.case[:58]:58} expected {s.expected} | got {s.got}{cause}", flush=True)
    print()
    print(table(scores))
    print(f"\n{len(scores)} cases in {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(s) for s in scores], indent=2) + "\n")
    return 1 if any(s.score == "wrong blame" for s in scores) else 0


if __name__ == "__main__":
    sys.exit(main())
