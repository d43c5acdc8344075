"""The clock, the simulated processes and the cluster identity shared by every line kind.

Time inside the generator is a float: seconds since the job started. Every source formats it
its own way (glog without a year, Megatron with one, Slurm in ISO form), which is exactly what
the analyzer has to cope with, so the formatting lives here in one place.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

# The PCI bus ids of the eight GPUs of an HGX H20 box, as NCCL prints them (busId 18000).
HGX_BUS_IDS = ["18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000"]


class Clock:
    """Formats simulated seconds-since-start in the shapes the different sources print."""

    def __init__(self, start: str):
        self.start = datetime.strptime(start, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)

    def at(self, t: float) -> datetime:
        return self.start + timedelta(seconds=t)

    @staticmethod
    def _nanos(t: float) -> int:
        # Deterministic sub-second digits: the float carries jitter from the rng already.
        return int(round(t * 1e9)) % 1_000_000_000

    def glog(self, t: float) -> str:
        """``0724 13:05:29.307629539`` (c10 logging; no year, 9 fractional digits)."""
        return f"{self.at(t):%m%d %H:%M:%S}.{self._nanos(t):09d}"

    def glog_py(self, t: float) -> str:
        """``0724 13:05:36.816000`` (torch.distributed.elastic's Python glog style: micros, 000 tail)."""
        return f"{self.at(t):%m%d %H:%M:%S}.{self._nanos(t) // 1_000_000:03d}000"

    def pylog(self, t: float) -> str:
        """``2026-07-24 13:05:36,816`` (Python logging's asctime)."""
        return f"{self.at(t):%Y-%m-%d %H:%M:%S},{self._nanos(t) // 1_000_000:03d}"

    def megatron(self, t: float) -> str:
        """``2026-07-24 13:05:36`` (Megatron's datetime prefix, local time of the printing rank)."""
        return f"{self.at(t):%Y-%m-%d %H:%M:%S}"

    def elastic_failure(self, t: float) -> str:
        """``2026-07-24_13:05:36`` (the ``time`` field of a ChildFailedError block)."""
        return f"{self.at(t):%Y-%m-%d_%H:%M:%S}"

    def slurm(self, t: float) -> str:
        """``2026-07-24T13:22:05`` (slurmstepd's CANCELLED AT)."""
        return f"{self.at(t):%Y-%m-%dT%H:%M:%S}"


_ORDER = itertools.count()


def next_order() -> int:
    """A tie-breaker for lines printed at the same instant: the order they were produced in."""
    return next(_ORDER)


def reset_order() -> None:
    """Restart the tie-breaker so that two runs of the generator write identical bytes."""
    global _ORDER
    _ORDER = itertools.count()


@dataclass
class Line:
    t: float
    order: int
    stream: str          # "out" (stdout) or "err" (stderr)
    text: str


@dataclass(frozen=True)
class Slot:
    """The fixed identity of one rank: where it runs, whatever the attempt."""

    rank: int
    node: int
    local_rank: int
    host: str
    bus_id: str
    ip: str              # the node's eth0 address (bootstrap and OOB)


@dataclass
class Proc:
    """One worker process (one rank in one attempt) and everything it printed."""

    slot: Slot
    attempt: int
    pid: int
    tids: dict[str, int]
    lines: list[Line] = field(default_factory=list)
    exit_code: int | None = None
    exit_t: float | None = None
    timed_out: bool = False

    @property
    def rank(self) -> int:
        return self.slot.rank

    def alive_at(self, t: float) -> bool:
        return self.exit_t is None or t < self.exit_t

    def print(self, t: float, stream: str, *texts: str) -> None:
        """Lines written together (one message, possibly multi-line) at time ``t``."""
        if not self.alive_at(t):
            return
        for text in texts:
            for physical in text.split("\n"):
                self.lines.append(Line(t, next_order(), stream, physical))

    def out(self, t: float, *texts: str) -> None:
        self.print(t, "out", *texts)

    def err(self, t: float, *texts: str) -> None:
        self.print(t, "err", *texts)

    def end(self, t: float, code: int) -> None:
        """The process ends at ``t``; the first end wins (a dead process cannot die twice)."""
        if self.exit_t is None:
            self.exit_t, self.exit_code = t, code
            # Nothing printed after death survives.
            self.lines = [line for line in self.lines if line.t <= t]


@dataclass
class Agent:
    """One torchrun agent (one per node and attempt), or the batch script's own output."""

    node: int
    host: str
    pid: int
    lines: list[Line] = field(default_factory=list)

    def log(self, t: float, *texts: str) -> None:
        for text in texts:
            for physical in text.split("\n"):
                self.lines.append(Line(t, next_order(), "err", physical))


@dataclass
class Cluster:
    hosts: list[str]
    gpus_per_node: int
    slots: list[Slot]
    job_id: int = 4242

    @property
    def world(self) -> int:
        return len(self.slots)

    @property
    def nodes(self) -> int:
        return len(self.hosts)

    def node_slots(self, node: int) -> list[Slot]:
        per_node = self.gpus_per_node
        return self.slots[node * per_node:(node + 1) * per_node]

    def nodelist(self) -> str:
        """Slurm's compressed host list, e.g. ``h20-node-[01-05]`` (falls back to a comma list)."""
        prefixes = {h.rstrip("0123456789") for h in self.hosts}
        if len(prefixes) == 1 and len(self.hosts) > 1:
            prefix = prefixes.pop()
            numbers = [h[len(prefix):] for h in self.hosts]
            if all(numbers) and numbers == sorted(numbers):
                return f"{prefix}[{numbers[0]}-{numbers[-1]}]"
        return ",".join(self.hosts)


def default_hosts(nodes: int) -> list[str]:
    width = max(2, len(str(nodes)))
    return [f"h20-node-{i:0{width}d}" for i in range(1, nodes + 1)]


def build_cluster(hosts: list[str], gpus_per_node: int) -> Cluster:
    slots = []
    for node, host in enumerate(hosts):
        ip = f"10.20.{1 + node // 200}.{11 + node % 200}"
        for local in range(gpus_per_node):
            slots.append(Slot(rank=node * gpus_per_node + local, node=node, local_rank=local, host=host,
                              bus_id=HGX_BUS_IDS[local % len(HGX_BUS_IDS)], ip=ip))
    return Cluster(hosts=list(hosts), gpus_per_node=gpus_per_node, slots=slots)


def pointer(rng: random.Random) -> str:
    """A heap pointer as glibc hands them out to a CUDA process: ``0x55d1c3a4b6f0``."""
    return f"0x55{rng.randrange(1 << 36):09x}0"


def lib_address(rng: random.Random) -> int:
    """Base of a shared library mapping (``0x7f93...``), for C++ frame lines."""
    return 0x7F0000000000 + rng.randrange(0, 0xFFFFFF) * 0x1000


def comm_id(rng: random.Random) -> str:
    return f"0x{rng.randrange(1 << 60, 1 << 64):016x}"


def jitter(rng: random.Random, low: float, high: float) -> float:
    # Microsecond-free floats would make every glog fraction end in zeros.
    return rng.uniform(low, high) + rng.randrange(1000) * 1e-9
