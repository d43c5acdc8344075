"""The HTML report is one self-contained page: verdict, findings, evidence and pictures, with
every piece of log text escaped; its pictures are right (issue 24): the memory chart draws the
Memory screen's numbers with the OOM marked, the per-rank chart sits around the hang's start or
the first failure with the node events drawn, the ring map turns into a node matrix above 16
nodes with labels that cover neither each other nor a box, every chart has axes with ticks and
units, and a dark variant follows prefers-color-scheme. Checked in the markup, and in headless
chromium where it is installed."""
from __future__ import annotations

import re

import pytest

from postmortem.html_report import html_report
from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report
from tests import html_geometry as geo
from tests.conftest import ROOT
from tests.scenario import write_scenario

HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)> \x1b[31mred\x1b[0m"
SAMPLES = ROOT / "sample_logs"
needs_chromium = pytest.mark.skipif(geo.CHROMIUM is None, reason="chromium is not installed")


def _page(folder):
    run = analyze([folder])
    report = build_report(run)
    return run, report, html_report(report, run)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    from postmortem.generator import RunSpec, generate_run

    out = tmp_path_factory.mktemp("html-run")
    generate_run(out, RunSpec(nodes=2, gpus_per_node=4, culprit=5, seed=3, config_files=True))
    return _page(out)[2]


@pytest.fixture(scope="module")
def memory_peak():
    return _page(SAMPLES / "memory-peak")


@pytest.fixture(scope="module")
def off_the_bus():
    return _page(SAMPLES / "gpu-fell-off-bus")


@pytest.fixture(scope="module")
def deadlock():
    return _page(SAMPLES / "silent-deadlock-40r")


@pytest.fixture(scope="module")
def twenty_nodes(tmp_path_factory):
    """More nodes than the ring map draws as boxes (one GPU each, to stay small)."""
    from postmortem.generator import RunSpec, generate_run

    out = tmp_path_factory.mktemp("html-20-nodes")
    generate_run(out, RunSpec(nodes=20, gpus_per_node=1, culprit=13, seed=5, node_logs=True, node_fault="xid79"))
    return _page(out)


# -- the page -----------------------------------------------------------------------------------

def test_a_log_line_with_markup_shows_as_text(tmp_path):
    folder = write_scenario(tmp_path / "run", ranks=4, culprit=2, culprit_last_line=HOSTILE)
    run = analyze([folder])
    page = html_report(build_report(run), run)
    assert "alert(1)" in page                      # the line is shown ...
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert not re.search(r"<\s*script", page, re.I)  # ... but never as markup
    assert not re.search(r"<\s*img", page, re.I)
    assert "\x1b" not in page and "\\x1b[31m" in page


def test_the_page_is_self_contained(generated):
    assert generated.startswith("<!DOCTYPE html>") and generated.rstrip().endswith("</html>")
    external = re.findall(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", generated, re.I)
    assert not external
    assert "<link" not in generated and "<script" not in generated
    assert set(re.findall(r"https?://[^\s\"'<>]+", generated)) <= {"http://www.w3.org/2000/svg"}


def test_the_pictures_are_drawn_from_the_run(generated):
    for title in ("Around the failure, per rank", "Ring transport map", "Memory peak per rank against capacity",
                  "Step time per iteration"):
        assert f"<h2>{title}</h2>" in generated
    assert generated.count('<svg class="pic"') == 4
    assert len(geo.svgs(generated)) == 4          # each one well-formed SVG
    assert '<rect class="culprit"' in generated   # the culprit's lane


def test_without_a_store_the_page_still_has_verdict_and_findings(tmp_path):
    report = build_report(analyze([write_scenario(tmp_path / "run", ranks=4, culprit=1)]))
    page = html_report(report)
    assert "<svg" not in page and report["verdict"]["status"] in page and "H001" in page


def test_every_chart_has_axes_with_ticks_and_units(off_the_bus):
    page = off_the_bus[2]
    units = {"per-rank timeline around the failure": "time of day", "memory peak per rank": "GiB",
             "step time per iteration": "s per step"}
    for label, unit in units.items():
        svg = geo.picture(page, label)
        axis = [el for el in svg.iter() if "axis" in (el.get("class") or "").split()]
        assert len(axis) >= 4, label                                  # an axis line and its ticks
        words = " ".join("".join(t.itertext()) for t in svg.iter(f"{geo.SVG}text"))
        assert unit in words, (label, unit)
    ticks = [t.label for t in geo.texts(geo.picture(page, "per-rank timeline around the failure"))
             if re.fullmatch(r"\d\d:\d\d(:\d\d)?", t.label)]
    assert len(ticks) >= 4


def test_a_dark_variant_follows_the_system_setting(generated):
    css = re.search(r"<style>(.*?)</style>", generated, re.S).group(1)
    dark = re.search(r"@media \(prefers-color-scheme: ?dark\)\{(.*?)\}\}", css, re.S)
    assert dark and "--bg:" in dark.group(1) and "--fg:" in dark.group(1)
    # the pictures take their colours from the variables, not from fixed fills
    for svg in re.findall(r'<svg class="pic".*?</svg>', generated, re.S):
        assert not re.search(r'\bfill="#', svg) and not re.search(r'\bstroke="#', svg)


# -- memory: the Memory screen's numbers, the OOM marked ----------------------------------------

def test_the_memory_chart_draws_the_memory_screens_numbers_with_the_oom(memory_peak):
    from postmortem.views.memory_view import gib, memory_view

    run, report, page = memory_peak
    view = memory_view(run, report)
    oom = next(r for r in view.rows if r.cuda_oom)
    assert oom.rank == 11 and (gib(oom.alloc), gib(oom.reserved)) == ("88.4 GiB", "92.2 GiB")
    svg = geo.picture(page, "memory peak per rank")
    labels = [t.label for t in geo.texts(svg)]
    assert "88.4 / 92.2 GiB (96%)" in labels                          # the TUI's 88.4 / 92.2 GiB
    assert not any(label.startswith("0.0 GiB") for label in labels)   # not "0.0 GiB (0%)"
    marks = [g for g in svg.iter(f"{geo.SVG}g") if g.get("class") == "oom-mark"]
    assert [g.get("data-rank") for g in marks] == ["11"]
    assert "CUDA OOM" in "".join(marks[0].itertext())
    # the mark sits at the end of rank 11's bar, and the bar reaches past 95% of the card
    circle = marks[0].find(f"{geo.SVG}circle")
    bars = [b for b in geo.rects(svg, "resv") if b.label.startswith("rank 11 ")]
    assert bars and abs(float(circle.get("cx")) - bars[0].x1) < 1.0
    cap = next(el for el in svg.iter(f"{geo.SVG}line") if el.get("class") == "cap")
    assert bars[0].x1 > float(cap.get("x1")) * 0.95


def test_host_oom_kills_are_marked_on_the_nodes_ranks():
    _, _, page = _page(SAMPLES / "host-oom-kill")
    svg = geo.picture(page, "memory peak per rank")
    marks = {g.get("data-rank"): "".join(g.itertext()) for g in svg.iter(f"{geo.SVG}g") if g.get("class") == "oom-mark"}
    assert set(marks) == {str(r) for r in range(8, 16)}
    assert "killed" in marks["13"] and all("host OOM" in m for m in marks.values())


# -- the per-rank chart: around the hang's start or the first failure, node events drawn ----------

def _timeline(page):
    svg = geo.picture(page, "per-rank timeline around the failure")
    return svg, " ".join(t.label for t in geo.texts(svg))


def _x_of_line(svg, cls):
    return [float(el.get("x1")) for el in svg.iter(f"{geo.SVG}line") if cls in (el.get("class") or "").split()]


def test_the_xid_is_drawn_between_the_last_step_and_the_first_failure(off_the_bus):
    svg, words = _timeline(off_the_bus[2])
    diamonds = [p for p in svg.iter(f"{geo.SVG}path") if p.get("class") == "m-node"
                and "Xid 79" in (p.find(f"{geo.SVG}title").text or "")]
    assert len(diamonds) >= 2                       # on the node's lane and on rank 13's
    assert "last step 09:21:14" in words and "first failure 09:32:57" in words and "Xid 79 on h20-node-02" in words
    step, node, bad = _x_of_line(svg, "an-step"), _x_of_line(svg, "an-node"), _x_of_line(svg, "an-bad")
    assert step[0] < node[0] < bad[0]
    # the stretch from the last step to the first failure fills most of the window (it was 10%)
    left, right = 190, 1040 - 16
    assert bad[0] - step[0] > 0.5 * (right - left)
    assert "no progress for 11.7 min" in " ".join(el.text or "" for el in svg.iter(f"{geo.SVG}title"))


def test_the_deadlock_chart_is_around_the_hang_not_the_last_minutes(deadlock):
    svg, words = _timeline(deadlock[2])
    ticks = [t for t in words.split() if re.fullmatch(r"\d\d:\d\d", t)]
    assert ticks and all("09:1" <= t <= "09:3" for t in ticks)        # not 14:08..14:22
    assert "last step 09:21:11" in words and "the logs go on to 14:22:53" in words
    # 39 ranks wait in a collective after the hang's start; rank 17 has nothing in flight
    states = {}
    for r in svg.iter(f"{geo.SVG}rect"):
        title = r.find(f"{geo.SVG}title")
        m = re.match(r"rank (\d+): (.*)", title.text or "") if title is not None else None
        if m and r.get("class", "").startswith("s-"):
            states.setdefault(int(m.group(1)), set()).add(m.group(2))
    assert len(states) == 40
    assert "waiting in a collective" not in states[17] and "nothing in flight" in states[17]
    assert all("waiting in a collective" in s for r, s in states.items() if r != 17)


def test_the_culprit_lane_comes_first(deadlock):
    svg, _ = _timeline(deadlock[2])
    labels = [t.label for t in geo.texts(svg) if t.label.startswith("rank ") and " · " in t.label]
    assert labels[0].startswith("rank 17 ")


# -- the ring map: boxes up to 16 nodes, a matrix above; labels clear of boxes ------------------

def test_five_node_ring_labels_cover_no_box_and_no_label(deadlock):
    svg = geo.picture(deadlock[2], "ring transport map")
    boxes, labels = geo.rects(svg, "box"), geo.texts(svg)
    assert len(boxes) == 5
    assert geo.straddles(labels, boxes) == []
    assert geo.collisions(labels) == []


def test_roce_hops_are_called_roce(deadlock):
    page = deadlock[2]
    ring = re.search(r"<h2>Ring transport map</h2>(.*?)<h2>", page, re.S).group(1)
    legend = re.search(r'<p class="legend">(.*?)</p>', ring, re.S).group(1)
    assert "RoCE GDR" in legend and ">IB<" not in legend and "IB" not in re.sub(r"<[^>]+>", " ", legend)


def test_above_sixteen_nodes_the_ring_is_a_node_matrix(twenty_nodes):
    _, report, page = twenty_nodes
    svg = geo.picture(page, "node matrix of the ring")
    cells = geo.rects(svg, "cell")
    assert len(cells) == 20 and not geo.rects(svg, "box")
    assert min(c.x1 - c.x0 for c in cells) > 20 and min(c.y1 - c.y0 for c in cells) > 15   # not a dotted line
    labels = geo.texts(svg)
    assert geo.collisions(labels) == [] and geo.straddles(labels, cells) == []
    culprit = report["verdict"]["culprit"]["nodes"]
    outlined = [r for r in geo.rects(svg, "culprit")]
    assert culprit and outlined and all(c in outlined[0].label for c in culprit)


def test_the_matrix_layout_holds_128_nodes():
    """Structural: 128 hosts in 8 rows of 16 cells, each wide enough for its number."""
    from postmortem import html_pictures as pictures

    hosts = [(f"h20-node-{i:03d}", [8 * i + k for k in range(8)]) for i in range(128)]
    intra = {h: "NVLink" for h, _ in hosts}
    inter = [{"src_rank": 8 * i + 7, "dst_rank": (8 * i + 8) % 1024, "src_host": h,
              "dst_host": hosts[(i + 1) % 128][0], "tier": "RoCE GDR"} for i, (h, _) in enumerate(hosts)]
    page = pictures._matrix(hosts, intra, inter, {}, set(), {"h20-node-113"})
    svg = geo.svgs(page)[0]
    cells = geo.rects(svg, "cell")
    assert len(cells) == 128 and len({round(c.y0) for c in cells}) == 8
    labels = geo.texts(svg)
    assert [t.label for t in labels][:3] == ["000", "001", "002"] and len(labels) == 128
    assert geo.straddles(labels, cells) == [] and geo.collisions(labels) == []
    assert len(geo.rects(svg, "culprit")) == 1


# -- in a real browser --------------------------------------------------------------------------

def _browser_checks(page, tmp_path):
    data = geo.measured(page, tmp_path)
    assert data["width"] <= 1280                                       # no horizontal scrolling at 1280 px
    for pic in data["pictures"]:
        labels = [i["box"] for i in pic["items"] if i["tag"] == "text" and not i["rotated"] and i["text"].strip()]
        assert geo.collisions(labels, tol=1.0) == [], pic["label"]
        boxes = [i["box"] for i in pic["items"] if i["tag"] == "rect" and set(i["cls"].split()) & {"box", "cell"}]
        assert geo.straddles(labels, boxes) == [], pic["label"]
        sx0, sy0, sx1, sy1 = pic["box"]
        for b in labels:   # nothing drawn outside its picture
            assert sx0 - 1 <= b.x0 and b.x1 <= sx1 + 1 and sy0 - 1 <= b.y0 and b.y1 <= sy1 + 1, (pic["label"], b.label)
    return data


@needs_chromium
def test_in_chromium_memory_peak_labels_clear_and_the_oom_mark_at_the_bar(memory_peak, tmp_path):
    data = _browser_checks(memory_peak[2], tmp_path)
    memory = next(p for p in data["pictures"] if p["label"] == "memory peak per rank")
    ring = next(i for i in memory["items"] if i["tag"] == "circle" and i["rank"] == "11")
    bar = next(i for i in memory["items"] if i["tag"] == "rect" and i["cls"].startswith("resv")
               and i["text"].startswith("rank 11 "))
    assert abs((ring["x0"] + ring["x1"]) / 2 - bar["x1"]) < 1.5
    assert any(i["tag"] == "text" and i["text"] == "CUDA OOM" for i in memory["items"])


@needs_chromium
def test_in_chromium_the_xid_sits_between_the_last_step_and_the_first_failure(off_the_bus, tmp_path):
    data = _browser_checks(off_the_bus[2], tmp_path)
    timeline = next(p for p in data["pictures"] if p["label"] == "per-rank timeline around the failure")
    lines = {c: i["x0"] for i in timeline["items"] for c in ("an-step", "an-node", "an-bad") if c in i["cls"].split()}
    xid = [i for i in timeline["items"] if i["cls"] == "m-node" and "Xid 79" in i["text"]]
    assert xid and lines["an-step"] < (xid[0]["x0"] + xid[0]["x1"]) / 2 < lines["an-bad"]


@needs_chromium
def test_in_chromium_five_nodes_and_twenty_nodes_keep_labels_apart(deadlock, twenty_nodes, tmp_path):
    _browser_checks(deadlock[2], tmp_path)
    data = _browser_checks(twenty_nodes[2], tmp_path)
    matrix = next(p for p in data["pictures"] if p["label"] == "node matrix of the ring")
    cells = [i["box"] for i in matrix["items"] if i["tag"] == "rect" and "cell" in i["cls"].split()]
    assert len(cells) == 20 and min(c.y1 - c.y0 for c in cells) > 15


@needs_chromium
def test_screenshots_light_and_dark(off_the_bus, tmp_path):
    page = tmp_path / "report.html"
    page.write_text(off_the_bus[2], encoding="utf-8")
    light = geo.screenshot(page, tmp_path / "light.png")
    dark = geo.screenshot(page, tmp_path / "dark.png", dark=True)
    assert light.stat().st_size > 50_000 and dark.stat().st_size > 50_000
    (w, h, light_rows), (_, _, dark_rows) = geo.png_pixels(light, 8), geo.png_pixels(dark, 8)
    assert (w, h) == (1280, 2000)
    assert min(light_rows[4][4]) > 240 and max(dark_rows[4][4]) < 40   # the page background
    assert geo.measured(off_the_bus[2], tmp_path, dark=True)["dark"]

