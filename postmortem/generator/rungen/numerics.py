"""Numerics endings of a generated run (``RunSpec.nan_from_iteration``, issue 9).

From that iteration on, the Megatron iteration line carries what a NaN loss prints: the
``lm loss`` field is left out (Megatron prints a loss only when its average is > 0, and NaN is
not), ``grad norm: nan`` and ``number of nan iterations:   1``. With ``node_fault`` xid48/xid94
the Xid is written during that iteration (``node_logs.fault_time``): a GPU computing garbage
after an ECC error, and the job running on with NaN losses until the faulty rank stops.
"""

from __future__ import annotations

import re


def poison(line: str) -> str:
    """The iteration line of a NaN step."""
    line = re.sub(r" lm loss: [^|]*\|", "", line, count=1)
    line = re.sub(r"grad norm: [^|]*\|", "grad norm: nan |", line, count=1)
    return re.sub(r"number of nan iterations: +\d+ \|", f"number of nan iterations: {1:>3} |", line, count=1)


def fault_time(spec, attempt, default: float) -> float:
    """The Xid's job time: within the first NaN iteration when ``nan_from_iteration`` is set."""
    it = getattr(spec, "nan_from_iteration", None)
    if not it or len(attempt.iteration_ends) < it:
        return default
    return attempt.iteration_ends[it - 2] + 0.4 * spec.step_s
