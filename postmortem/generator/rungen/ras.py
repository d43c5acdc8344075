"""The ``ncclras`` status report, text and JSON, from a small description of a job's communicators.

Formats: ``docs/formats/nccl.md`` section 3.13. The layout follows the client's own rules (NCCL
2.26+ text: per-collective operation counts, ``NOCOMM``; JSON as of 2.28.7), so a test can
write a report from a known state and check that ``postmortem.parsers.nccl_ras`` reads the same state
back:

* the job summary is one row when every node runs the same number of processes and every
  process drives the same number of GPUs, otherwise the mixed layouts and the outlier nodes;
* communicators are sorted by size, node count, status and errors (largest first) and grouped
  when those are equal; ``#G-C`` names the C-th communicator of group G;
* rank groups (same operation count, same status, same error) are listed most frequent first;
  a group's ranks are printed only when it is an *outlier*: one rank, or (default) at most 10
  ranks and at most 25 % of the communicator (verbose: under 50 %). A single-rank group is
  printed as one ``Rank R has ... -- GPU ...`` line instead of a count line.
  So in a MISMATCH the ranks listed are the minority -- usually the ones *ahead* -- and the
  stragglers are the majority count line (nccl#1911).

Standard library only. Nothing here parses.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

OPS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
STATUS = ("NOCOMM", "INIT", "RUNNING", "FINALIZE", "ABORT")  # bit i of the client's status mask
ERROR_NAMES = {1: "Unhandled CUDA error", 2: "System error", 3: "Internal error", 4: "Invalid argument",
               5: "Invalid usage", 6: "Remote process error"}
IN_PROGRESS = 7
MISMATCH, ERROR, INCOMPLETE = 1, 2, 4
_ERROR_TEXT = ["OK", "MISMATCH", "ERROR", "ERROR,MISMATCH", "INCOMPLETE", "INCOMPLETE,MISMATCH",
               "INCOMPLETE,ERROR", "INCOMPLETE,ERROR,MISMATCH"]


@dataclass
class Rank:
    """One communicator rank. ``state``: ``ok``; ``nocomm`` (its process answered but no longer
    counts itself a member); ``missing`` (its process did not answer); ``dead`` (its process was
    declared dead). ``missing``/``dead`` apply to the whole process (every rank it drives)."""

    rank: int
    node: str
    pid: int
    gpu: int
    nvml: int | None = None
    counts: dict[str, int] = field(default_factory=dict)
    init_state: int = 0
    async_error: int = 0
    finalize_called: bool = False
    destroy_flag: bool = False
    abort_flag: bool = False
    state: str = "ok"

    @property
    def nvml_dev(self) -> int:
        return self.gpu if self.nvml is None else self.nvml

    @property
    def status(self) -> int:
        """Index into ``STATUS``."""
        if self.abort_flag:
            return 4
        if self.finalize_called or self.destroy_flag:
            return 3
        return 2 if self.init_state == 0 else 1

    def gpu_text(self) -> str:
        return f"{self.gpu}" if self.nvml_dev == self.gpu else f"{self.gpu} (NVML {self.nvml_dev})"


@dataclass
class Comm:
    hash: int
    ranks: list[Rank]
    host_hash: int = 0x5EED0001
    pid_hash: int = 0x5EED0002


@dataclass
class Job:
    comms: list[Comm]
    nccl_version: str = "2.26.2"
    cuda: str = "12.6"
    cuda_runtime: int = 12060
    cuda_driver: int = 12060
    collection_s: float = 0.01
    timeouts: int = 0
    verbose: bool = False
    timestamp: str = "2026-03-02 10:11:12"
    # Processes of the job that belong to no communicator: (node, pid, [cuda devs], state).
    extra_processes: list[tuple[str, int, list[int], str]] = field(default_factory=list)


def _outlier(count: int, verbose: bool, total: int = -1) -> bool:
    if count == 1:
        return True
    if verbose:
        return count < total * 0.5 if total != -1 else True
    return count <= 10 and (total == -1 or count <= total * 0.25)


def _node_key(node: str):
    try:
        ip = ipaddress.ip_address(node)
        return (0 if ip.version == 4 else 1, int(ip), "")
    except ValueError:
        return (2, 0, node)


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


class _View:
    """The job as the client sees it after collection."""

    def __init__(self, job: Job):
        self.job = job
        procs: dict[tuple[str, int], dict] = {}
        for comm in job.comms:
            for r in comm.ranks:
                p = procs.setdefault((r.node, r.pid), {"gpus": set(), "nvml": set(), "state": "ok"})
                p["gpus"].add(r.gpu)
                p["nvml"].add(r.nvml_dev)
                if r.state in ("missing", "dead") and p["state"] != "dead":
                    p["state"] = r.state
        for node, pid, gpus, state in job.extra_processes:
            p = procs.setdefault((node, pid), {"gpus": set(), "nvml": set(), "state": "ok"})
            p["gpus"].update(gpus)
            p["nvml"].update(gpus)
            if state in ("missing", "dead"):
                p["state"] = state
        self.procs = dict(sorted(procs.items(), key=lambda kv: (_node_key(kv[0][0]), kv[0][1])))
        self.comms = [self._comm(c) for c in job.comms]

    def state(self, r: Rank) -> str:
        proc = self.procs[(r.node, r.pid)]["state"]
        return proc if proc != "ok" else ("nocomm" if r.state == "nocomm" else "ok")

    def _comm(self, comm: Comm) -> dict:
        members = [r for r in comm.ranks if self.state(r) == "ok"]
        nocomm = [r for r in comm.ranks if self.state(r) == "nocomm"]
        incomplete = [r for r in comm.ranks if self.state(r) in ("missing", "dead")]
        per_node: dict[str, int] = {}
        for r in members:
            per_node[r.node] = per_node.get(r.node, 0) + 1
        status = 0
        for r in members:
            status |= 1 << r.status
        if nocomm:
            status |= 1
        errors = 0
        if nocomm or bin(status).count("1") > 1:
            errors |= MISMATCH
        if any(len({r.counts.get(op, 0) for r in members}) > 1 for op in OPS):
            errors |= MISMATCH
        if any(r.init_state not in (0, IN_PROGRESS) or r.async_error not in (0, IN_PROGRESS) for r in members):
            errors |= ERROR
        if incomplete:
            errors |= INCOMPLETE
        return {"comm": comm, "members": members, "nocomm": nocomm, "incomplete": incomplete,
                "nodes": len(per_node), "rpn_min": min(per_node.values(), default=0),
                "rpn_max": max(per_node.values(), default=0), "status": status, "errors": errors}


def _rank_where(view: _View, r: Rank) -> str:
    return f"GPU {r.gpu_text()} managed by process {r.pid} on node {r.node}"


def _process_line(view: _View, key: tuple[str, int]) -> str:
    p = view.procs[key]
    gpus = ",".join(str(g) for g in sorted(p["gpus"]))
    if sorted(p["nvml"]) != sorted(p["gpus"]):
        gpus += " (NVML " + ",".join(str(g) for g in sorted(p["nvml"])) + ")"
    return f"  Process {key[1]} on node {key[0]} managing GPU{'s' if len(p['gpus']) > 1 else ''} {gpus}"


def _summary(view: _View) -> list[str]:
    out = ["Job summary", "===========", ""]
    nodes: dict[str, list[tuple[int, int]]] = {}
    for (node, pid), p in view.procs.items():
        nodes.setdefault(node, []).append((pid, len(p["gpus"])))
    ngpus = [g for procs in nodes.values() for _, g in procs]
    nprocs = [len(procs) for procs in nodes.values()]
    gpus_ok = len(set(ngpus)) <= 1
    ppn_ok = len(set(nprocs)) <= 1
    total_nodes, total_procs, total_gpus = len(nodes), len(view.procs), sum(ngpus)
    if gpus_ok and ppn_ok:
        out += ["  Nodes  Processes         GPUs  Processes     GPUs",
                "(total)   per node  per process    (total)  (total)",
                f"{total_nodes:7d}  {nprocs[0] if nprocs else 0:9d}  {ngpus[0] if ngpus else 0:11d}  "
                f"{total_procs:9d}  {total_gpus:7d}"]
        return out
    ppn_counts: dict[int, int] = {}
    for n in nprocs:
        ppn_counts[n] = ppn_counts.get(n, 0) + 1
    ppn_rows = sorted(ppn_counts.items(), key=lambda kv: (-kv[1], -kv[0]))
    if gpus_ok:
        out += ["  Nodes  Processes         GPUs", "          per node  per process"]
        out += [f"{count:7d}  {value:9d}  {ngpus[0]:11d}" for value, count in ppn_rows]
    else:
        out += ["  Nodes  Processes", "          per node"]
        out += [f"{count:7d}  {value:9d}" for value, count in ppn_rows]
        gpp: dict[int, int] = {}
        for g in ngpus:
            gpp[g] = gpp.get(g, 0) + 1
        out += ["", "         Processes         GPUs", "                    per process"]
        out += [f"         {count:9d}  {value:11d}"
                for value, count in sorted(gpp.items(), key=lambda kv: (-kv[1], -kv[0]))]
    out += ["", "  Nodes  Processes         GPUs", "(total)    (total)      (total)",
            f"{total_nodes:7d}  {total_procs:9d}  {total_gpus:11d}"]
    if gpus_ok:
        for value, count in ppn_rows[1:]:
            if _outlier(count, view.job.verbose, total_nodes):
                out += ["", f"The outlier node{'s' if count > 1 else ''}:"]
                for node, procs in nodes.items():
                    if len(procs) == value:
                        pids = ",".join(str(pid) for pid, _ in procs)
                        out.append(f"  Node {node} running process{'es' if value > 1 else ''} {pids}")
    return out


def _order(view: _View) -> list[list[dict]]:
    def key(c: dict):
        return (-len(c["comm"].ranks), -c["nodes"], -(c["status"].bit_length()), -c["errors"], len(c["members"]))
    comms = sorted(view.comms, key=key)
    groups: list[list[dict]] = []
    for c in comms:
        g = groups[-1][0] if groups else None
        if g and (len(g["comm"].ranks), g["nodes"], g["status"].bit_length(), g["errors"]) == \
                (len(c["comm"].ranks), c["nodes"], c["status"].bit_length(), c["errors"]):
            groups[-1].append(c)
        else:
            groups.append([c])
    return groups


def _table(groups: list[list[dict]]) -> list[str]:
    if not groups:
        return ["No communicator data collected!"]
    out = ["Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors",
           "    #  in group  per comm  per node  per comm  in group"]
    for gi, group in enumerate(groups):
        first = group[0]
        lo = min(c["rpn_min"] for c in group)
        hi = max(c["rpn_max"] for c in group)
        rpn = f"{lo}" if lo == hi else f"{lo}-{hi}"
        unique = {(r.node, r.pid, r.nvml_dev) for c in group for r in c["members"]}
        status = STATUS[first["status"].bit_length() - 1] if first["status"] else "NOCOMM"
        out.append(f"{gi:5d}  {len(group):8d}  {first['nodes']:8d}  {rpn:>8s}  {len(first['comm'].ranks):8d}  "
                   f"{len(unique):8d}  {status:>8s}  {_ERROR_TEXT[first['errors']]:>6s}")
    return out


def _error_breakdown(view: _View, members: list[Rank], attr: str) -> list[str]:
    out = []
    counts: dict[int, int] = {}
    for r in members:
        code = getattr(r, attr)
        if code in ERROR_NAMES:
            counts[code] = counts.get(code, 0) + 1
    for code, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        name = ERROR_NAMES[code]
        if n > 1:
            out.append(f"  {n} ranks reported {name}")
        if _outlier(n, view.job.verbose):
            for r in members:
                if getattr(r, attr) == code:
                    out.append(f"  Rank {r.rank} -- {_rank_where(view, r)}" if n > 1
                               else f"  Rank {r.rank} reported {name} -- {_rank_where(view, r)}")
    return out


def _errors(view: _View, groups: list[list[dict]]) -> list[str]:
    job = view.job
    out = ["", "Errors", "======", ""]
    missing = [k for k, p in view.procs.items() if p["state"] == "missing"]
    dead = [k for k, p in view.procs.items() if p["state"] == "dead"]
    if missing:
        out += ["INCOMPLETE", f"  Missing communicator data from {len(missing)} job "
                              f"{_plural(len(missing), 'process', 'processes')}"]
        if _outlier(len(missing), job.verbose):
            out += [_process_line(view, k) for k in missing]
        out.append("")
    if dead:
        out += ["DEAD", f"  {len(dead)} job {_plural(len(dead), 'process is', 'processes are')} considered dead "
                        "(unreachable via the RAS network)"]
        if _outlier(len(dead), job.verbose):
            out += [_process_line(view, k) for k in dead]
        out.append("")
    for gi, group in enumerate(groups):
        for ci, c in enumerate(group):
            comm = c["comm"]
            if c["errors"] & INCOMPLETE:
                n = len(c["incomplete"])
                out += [f"#{gi}-{ci} ({comm.hash:016x}) INCOMPLETE",
                        f"  Missing communicator data from {n} {_plural(n, 'rank', 'ranks')}"]
                if _outlier(n, job.verbose):
                    out += [f"  Rank {r.rank} -- {_rank_where(view, r)}" for r in c["incomplete"]]
                out.append("")
            if c["errors"] & ERROR:
                out.append(f"#{gi}-{ci} ({comm.hash:016x}) ERROR")
                for attr, word in (("init_state", "Initialization"), ("async_error", "Asynchronous")):
                    n = sum(1 for r in c["members"] if getattr(r, attr) not in (0, IN_PROGRESS))
                    if n:
                        out.append(f"  {word} error{'s' if n > 1 else ''} on {n} rank{'s' if n > 1 else ''}")
                        out += _error_breakdown(view, c["members"], attr)
                out.append("")
    return out


def _warnings(view: _View, groups: list[list[dict]]) -> list[str]:
    job = view.job
    out = ["Warnings", "========", ""]
    if job.timeouts:
        out += ["TIMEOUT", f"  Encountered {job.timeouts} communication "
                           f"{_plural(job.timeouts, 'timeout', 'timeouts')} while gathering communicator data", ""]
    for gi, group in enumerate(groups):
        for ci, c in enumerate(group):
            if not c["errors"] & MISMATCH:
                continue
            comm, members, size = c["comm"], c["members"], len(c["comm"].ranks)
            out.append(f"#{gi}-{ci} ({comm.hash:016x}) MISMATCH")
            if bin(c["status"]).count("1") > 1:
                out.append("  Communicator ranks have different status")
                by_status: dict[int, list[Rank]] = {}
                for r in sorted(members, key=lambda r: r.rank):
                    by_status.setdefault(r.status, []).append(r)
                if c["nocomm"]:
                    by_status[0] = sorted(c["nocomm"], key=lambda r: r.rank)
                for value, ranks in sorted(by_status.items(), key=lambda kv: (-len(kv[1]), -kv[0])):
                    n = len(ranks)
                    if n > 1:
                        out.append(f"  {n} ranks have status {STATUS[value]}")
                    if _outlier(n, job.verbose, size):
                        out += [f"  Rank {r.rank} -- {_rank_where(view, r)}" if n > 1 else
                                f"  Rank {r.rank} has status {STATUS[value]} -- {_rank_where(view, r)}"
                                for r in ranks]
            for op in OPS:
                values: dict[int, list[Rank]] = {}
                for r in sorted(members, key=lambda r: r.rank):
                    values.setdefault(r.counts.get(op, 0), []).append(r)
                if len(values) <= 1:
                    continue
                out.append(f"  Communicator ranks have different {op} operation counts")
                for value, ranks in sorted(values.items(), key=lambda kv: (-len(kv[1]), -kv[0])):
                    n = len(ranks)
                    if n > 1:
                        out.append(f"  {n} ranks have launched up to operation {value}" if value > 0
                                   else f"  {n} ranks have not launched any operations")
                    if _outlier(n, job.verbose, size):
                        for r in ranks:
                            if n > 1:
                                out.append(f"  Rank {r.rank} -- {_rank_where(view, r)}")
                            elif value > 0:
                                out.append(f"  Rank {r.rank} has launched up to operation {value} -- "
                                           f"{_rank_where(view, r)}")
                            else:
                                out.append(f"  Rank {r.rank} has not launched any operations -- "
                                           f"{_rank_where(view, r)}")
                out.append("")
    return out


def text_report(job: Job) -> str:
    """What ``ncclras`` prints for ``job`` (2.26+ text layout)."""
    view = _View(job)
    groups = _order(view)
    minor = int(job.nccl_version.split(".")[1]) if job.nccl_version.count(".") >= 1 else 26
    secs = f"{job.collection_s:.2f}" if minor <= 26 else f"{job.collection_s:.3f}"
    lines = [f"NCCL version {job.nccl_version} compiled with CUDA {job.cuda}",
             f"CUDA runtime version {job.cuda_runtime}, driver version {job.cuda_driver}", ""]
    lines += _summary(view)
    lines += ["", f"Communicators... ({secs}s)", "=============", ""]
    lines += _table(groups)
    lines += _errors(view, groups)
    lines += _warnings(view, groups)
    return "\n".join(lines) + "\n"


def json_report(job: Job) -> str:
    """What ``ncclras -f json`` prints for ``job`` (2.28.7+ layout, key order as NCCL writes it)."""
    view = _View(job)
    out = ["{", f'  "nccl_version": "{job.nccl_version}",', f'  "cuda_runtime_version": {job.cuda_runtime},',
           f'  "cuda_driver_version": {job.cuda_driver},', f'  "timestamp": "{job.timestamp}",',
           f'  "communicators_count": {len(job.comms)},', '  "communicators": [']
    for ci, c in enumerate(view.comms):
        comm = c["comm"]
        missing = c["nocomm"] + c["incomplete"]
        head = [] if ci == 0 else [","]
        body = ["    {", f'      "hash": "0x{comm.hash:x}",',
                f'      "secondary_hash": "0x{comm.host_hash:x}:0x{comm.pid_hash:x}",',
                f'      "size": {len(comm.ranks)},', f'      "ranks_count": {len(c["members"])},',
                f'      "missing_ranks_count": {len(missing)},', '      "ranks": [']
        for ri, r in enumerate(c["members"]):
            counts = [f'            "{op}": {r.counts.get(op, 0)}' for op in OPS]
            body += ([] if ri == 0 else [","]) + [
                "        {", f'          "rank": {r.rank},', f'          "host": "{r.node}",',
                f'          "pid": {r.pid},', f'          "cuda_dev": {r.gpu},', f'          "nvml_dev": {r.nvml_dev},',
                '          "status": {', f'            "init_state": {r.init_state},',
                f'            "async_error": {r.async_error},',
                f'            "finalize_called": {str(r.finalize_called).lower()},',
                f'            "destroy_flag": {str(r.destroy_flag).lower()},',
                f'            "abort_flag": {str(r.abort_flag).lower()}', "          },",
                '          "collective_counts": {', ",\n".join(counts), "          }", "        }"]
        body += ["      ],", '      "missing_ranks": [']
        for ri, r in enumerate(missing):
            state = view.state(r)
            body += ([] if ri == 0 else [","]) + [
                "        {", f'          "rank": {r.rank},', f'          "host": "{r.node}",',
                f'          "pid": {r.pid},', f'          "cuda_dev": {r.gpu},', f'          "nvml_dev": {r.nvml_dev},',
                '          "status": {', f'            "unresponsive": {str(state != "nocomm").lower()},',
                f'            "considered_dead": {str(state == "dead").lower()}', "          }", "        }"]
        body += ["      ]", "    }"]
        out += head + body
    out += ["  ],", '  "ras": {', f'    "collection_time_sec": {job.collection_s:.3f},',
            f'    "timeouts_count": {job.timeouts}', "  }", "}"]
    # NCCL writes ",\n" between array elements: glue the lone commas to the closing brace before them.
    text = "\n".join(out).replace("\n,\n", ",\n")
    return text + "\n"
