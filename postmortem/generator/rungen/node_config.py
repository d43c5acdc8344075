"""Per-node configuration drift: one node's environment or NCCL build differs from the rest.

``RunSpec.node_env`` (node index -> extra variables) is what a stale shell profile or a
different image leaves on one node: the variables appear in that node's env dump
(``envdump``) and, for ``NCCL_*`` variables, in NCCL's own ``X set by environment to Y`` lines
of that node's ranks (``docs/formats/nccl.md`` 3.8). ``RunSpec.node_nccl_version`` (node index ->
release) makes that node's processes print the line shapes of another NCCL release (its plugin
wording, init lines, channel counts; before 2.22 only global rank 0 prints the version line, so
the other nodes' release shows only in those shapes).

Nothing here draws from the story's random streams: a spec without these fields writes the
same bytes as before.
"""

from __future__ import annotations

from dataclasses import replace

from .nccl import NcclVersion
from .nccl_topology import NcclSetup

# Release boundaries at which the story itself changes shape (communicator splits 2.18+,
# connections at the first collective 2.22+, split comms without commId 2.23+): a node's
# release must sit on the same side of each as the job's, or the story would contradict itself.
_STORY_BOUNDARIES = (18, 22, 23)
# Variables the generator derives from other fields (the node's NCCL lines would not show an override).
_MANAGED = {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX",
            "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE", "NCCL_CUMEM_ENABLE"}


def _index(node):
    """A node index; JSON (a sample's expected.json) gives the keys as strings."""
    return int(node) if isinstance(node, str) and node.isdigit() else node


def validate(spec) -> None:
    """Check (and normalise: string node keys become ints) ``node_env`` and ``node_nccl_version``."""
    spec.node_env = {_index(k): dict(v) for k, v in spec.node_env.items()}
    spec.node_nccl_version = {_index(k): v for k, v in spec.node_nccl_version.items()}
    job = NcclVersion.parse(spec.nccl_version)
    for node, env in spec.node_env.items():
        if not (isinstance(node, int) and 0 <= node < spec.nodes):
            raise ValueError(f"node_env: {node!r} is not a node index of this {spec.nodes}-node job")
        for key in env:
            if not key or "=" in key or key in _MANAGED:
                raise ValueError(f"node_env: {key!r} cannot be set per node "
                                 f"({', '.join(sorted(_MANAGED))} follow from the nccl_* fields)")
    for node, text in spec.node_nccl_version.items():
        if not (isinstance(node, int) and 0 <= node < spec.nodes):
            raise ValueError(f"node_nccl_version: {node!r} is not a node index of this {spec.nodes}-node job")
        version = NcclVersion.parse(text)
        for minor in _STORY_BOUNDARIES:
            if version.at_least(minor) != job.at_least(minor):
                raise ValueError(f"node_nccl_version: {text} and the job's {spec.nccl_version} must both be "
                                 f"before or both from 2.{minor} (the communicator layout changes there)")


def nccl_version(spec, node: int, job: NcclVersion) -> NcclVersion:
    """The NCCL release a node's processes run."""
    text = getattr(spec, "node_nccl_version", {}).get(node)
    return NcclVersion.parse(text) if text else job


def nccl_setup(spec, node: int, setup: NcclSetup) -> NcclSetup:
    """The job's NCCL settings with the node's own ``NCCL_*`` variables on top."""
    extra = {k: v for k, v in getattr(spec, "node_env", {}).get(node, {}).items() if k.startswith("NCCL_")}
    if not extra:
        return setup
    env = dict(setup.env)
    env.update(extra)
    return replace(setup, env=tuple(env.items()))


def env_pairs(spec, node: int) -> list[tuple[str, str]]:
    """The node's extra variables as its env dump shows them."""
    return list(getattr(spec, "node_env", {}).get(node, {}).items())


def parse_node_env(items: list[str] | None) -> dict[int, dict[str, str]]:
    """``NODE:KEY=VALUE`` items (``2:NCCL_PROTO=Simple``) -> {2: {"NCCL_PROTO": "Simple"}}."""
    out: dict[int, dict[str, str]] = {}
    for item in items or []:
        node, colon, pair = item.partition(":")
        key, eq, value = pair.partition("=")
        if not colon or not eq or not node.strip().isdigit() or not key:
            raise ValueError(f"--node-env takes NODE:KEY=VALUE (e.g. 1:NCCL_PROTO=Simple), got {item!r}")
        out.setdefault(int(node), {})[key] = value
    return out
