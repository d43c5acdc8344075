"""Commands the report prints (``scontrol update NodeName=... State=DRAIN``, ``ssh HOST py-spy
dump``, ``ibstat DEV``): values from the logs enter them only when they have the shape of what
they stand for (a host name, a PCI bus id, a device name), and always shell-quoted.

The logs are written by the job, so a node "named" ``h20-node-02&&reboot`` in them is text the
job's user chose: a responder who pastes the printed command must run what it says and nothing
else. A value of the wrong shape is left out of the command (the command is not printed, or
shows a placeholder such as ``NODE``) and the report says why (docs/security.md).
"""

from __future__ import annotations

import ipaddress
import re
import shlex

# RFC 1123 labels (Slurm node names, FQDNs, Kubernetes pod names); at most 253 characters.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*\.?$")
_BUS = re.compile(r"^(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_DEVICE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


def host(value) -> str | None:
    """``value`` when it is a host name or an IP address, else None."""
    if not isinstance(value, str):
        return None
    if _HOST.match(value):
        return value
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return None
    return value


def bus_id(value) -> str | None:
    """``value`` when it is a PCI bus id (``0000:1a:00.0``, ``1A:00.0``), else None."""
    return value if isinstance(value, str) and _BUS.match(value) else None


def device(value) -> str | None:
    """``value`` when it is a device or interface name (``mlx5_0``, ``eth0``, ``ib0:1``), else None."""
    return value if isinstance(value, str) and _DEVICE.match(value) else None


def number(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def sh(*args) -> str:
    """A command line: every argument shell-quoted (a plain word stays as it is)."""
    return " ".join(shlex.quote(str(a)) for a in args)


def hosts(values) -> tuple[list[str], list[str]]:
    """(valid host names, the rest) of ``values``."""
    good, bad = [], []
    for value in values:
        (good if host(value) else bad).append(value)
    return good, bad


def shown(value, checked) -> str:
    """``value`` for a command: itself when ``checked`` accepts it, else a placeholder."""
    return value if checked(value) else {host: "NODE", bus_id: "BUS_ID", device: "DEVICE"}.get(checked, "VALUE")


NOT_A_HOST = "is not a valid host name: it was left out of the commands (log text is never a command)"
