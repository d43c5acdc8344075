"""Compact rank ranges (``0-12,14-39``) and Slurm hostlists (``gpu-[01-05]``)."""

from __future__ import annotations

import re
from itertools import groupby


def rank_ranges(ranks) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'."""
    values = sorted({int(r) for r in ranks})
    parts = []
    for _, run in groupby(enumerate(values), key=lambda pair: pair[1] - pair[0]):
        run = [v for _, v in run]
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(parts)


_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def hostlist(hosts) -> str:
    """['gpu-01', 'gpu-02', 'gpu-05', 'login'] -> 'gpu-[01-02,05],login' (Slurm syntax)."""
    groups: dict[tuple[str, int], list[str]] = {}
    plain: list[str] = []
    for host in sorted(set(hosts)):
        match = _NUMBERED.match(host)
        if match:
            groups.setdefault((match.group(1), len(match.group(2))), []).append(match.group(2))
        else:
            plain.append(host)
    parts = []
    for (prefix, width), numbers in sorted(groups.items()):
        if len(numbers) == 1:
            parts.append(prefix + numbers[0])
            continue
        spans = []
        values = sorted(int(n) for n in numbers)
        for _, run in groupby(enumerate(values), key=lambda pair: pair[1] - pair[0]):
            run = [v for _, v in run]
            a, b = str(run[0]).zfill(width), str(run[-1]).zfill(width)
            spans.append(a if a == b else f"{a}-{b}")
        parts.append(f"{prefix}[{','.join(spans)}]")
    return ",".join(parts + plain)
