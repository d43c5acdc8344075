"""Geometry of the HTML report's pictures, read two ways: from the markup (the SVG's own numbers,
text widths estimated as the drawing code estimates them) and from headless chromium (the boxes
the browser really drew, measured by a script added to a copy of the page: the report itself has
no script). Plus a small PNG reader for screenshot pixels (no imaging library needed)."""
from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
import zlib
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from postmortem.html_pictures import CHAR_W

SVG = "{http://www.w3.org/2000/svg}"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Box:
    kind: str          # "text" or the element's tag
    cls: str
    label: str
    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: "Box", tol: float = 0.5) -> bool:
        return (min(self.x1, other.x1) - max(self.x0, other.x0) > tol and
                min(self.y1, other.y1) - max(self.y0, other.y0) > tol)

    def inside(self, other: "Box", tol: float = 0.5) -> bool:
        return (self.x0 >= other.x0 - tol and self.x1 <= other.x1 + tol and
                self.y0 >= other.y0 - tol and self.y1 <= other.y1 + tol)


def svgs(page: str) -> list[ET.Element]:
    """Every picture of the page (``<svg class="pic">``) as an XML element."""
    return [ET.fromstring(m) for m in re.findall(r'<svg class="pic".*?</svg>', page, re.S)]


def picture(page: str, label: str) -> ET.Element:
    found = [s for s in svgs(page) if s.get("aria-label") == label]
    assert found, f"no picture {label!r}"
    return found[0]


def texts(svg: ET.Element) -> list[Box]:
    """Each unrotated ``<text>``'s box, its width estimated as html_pictures estimates it."""
    out = []
    for t in svg.iter(f"{SVG}text"):
        if t.get("transform"):
            continue
        body = "".join(t.itertext())
        size = float(t.get("font-size", 11))
        x, y, w = float(t.get("x")), float(t.get("y")), len(body) * size * CHAR_W
        x0 = {"start": x, "middle": x - w / 2, "end": x - w}[t.get("text-anchor", "start")]
        out.append(Box("text", t.get("class", ""), body, x0, y - 0.8 * size, x0 + w, y + 0.25 * size))
    return out


def rects(svg: ET.Element, cls: str) -> list[Box]:
    out = []
    for r in svg.iter(f"{SVG}rect"):
        if cls in (r.get("class") or "").split():
            x, y, w, h = (float(r.get(k)) for k in ("x", "y", "width", "height"))
            title = r.find(f"{SVG}title")
            out.append(Box("rect", r.get("class"), title.text if title is not None else "", x, y, x + w, y + h))
    return out


def collisions(boxes: list[Box], tol: float = 0.5) -> list[tuple[str, str]]:
    return [(a.label, b.label) for i, a in enumerate(boxes) for b in boxes[i + 1:] if a.overlaps(b, tol)]


def straddles(labels: list[Box], boxes: list[Box]) -> list[tuple[str, str]]:
    """Labels that are neither inside a box nor clear of it (a label across a box's edge)."""
    return [(t.label, b.label) for t in labels for b in boxes if t.overlaps(b) and not t.inside(b)]


# -- the browser ---------------------------------------------------------------------------------

_MEASURE = """<script>
const out = [];
document.querySelectorAll('svg.pic').forEach(svg => {
  const items = [];
  svg.querySelectorAll('text, rect, circle, path, line').forEach(el => {
    const r = el.getBoundingClientRect();
    const g = el.closest('g');
    items.push({tag: el.tagName, cls: el.getAttribute('class') || '', rotated: !!el.getAttribute('transform'),
                text: el.tagName === 'text' ? el.textContent : (el.querySelector('title') || {}).textContent || '',
                rank: g && g.dataset ? (g.dataset.rank || null) : null,
                x0: r.left, y0: r.top, x1: r.right, y1: r.bottom});
  });
  const s = svg.getBoundingClientRect();
  out.push({label: svg.getAttribute('aria-label'), box: [s.left, s.top, s.right, s.bottom], items});
});
document.body.setAttribute('data-geometry', JSON.stringify({width: document.documentElement.scrollWidth,
  dark: matchMedia('(prefers-color-scheme: dark)').matches, pictures: out}));
</script>"""


def chromium(args: list[str], timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           *args], capture_output=True, timeout=timeout)


def measured(page: str, folder: Path, width: int = 1280, dark: bool = False) -> dict:
    """What chromium drew: per picture, the screen box of every text, rect, circle, path and line,
    in a window ``width`` px wide. The script that measures is added to a copy of the page."""
    copy = folder / "measure.html"
    copy.write_text(page.replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    done = chromium([f"--window-size={width},2000", *(["--force-dark-mode"] if dark else []),
                     "--virtual-time-budget=5000", "--dump-dom", copy.as_uri()])
    found = re.search(r'data-geometry="([^"]*)"', done.stdout.decode("utf-8", "replace"))
    assert found, done.stderr.decode("utf-8", "replace")[-2000:]
    data = json.loads(html.unescape(found.group(1)))
    for pic in data["pictures"]:
        pic["items"] = [dict(i, box=Box(i["tag"], i["cls"], i["text"], i["x0"], i["y0"], i["x1"], i["y1"]))
                        for i in pic["items"]]
    return data


def screenshot(page_path: Path, shot: Path, width: int = 1280, height: int = 2000, dark: bool = False) -> Path:
    chromium([f"--window-size={width},{height}", *(["--force-dark-mode"] if dark else []),
              f"--screenshot={shot}", page_path.as_uri()])
    return shot


# -- PNG pixels ----------------------------------------------------------------------------------

def png_pixels(path: Path, max_rows: int | None = None):
    """(width, height, rows): the first ``max_rows`` rows (all by default) of (r, g, b) tuples of
    an 8-bit RGB or RGBA, non-interlaced PNG (what chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and not interlace, (depth, colour, interlace)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(min(height, max_rows or height)):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return width, height, rows
