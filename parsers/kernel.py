"""Kernel logs: ``dmesg``, ``dmesg -T``, ``journalctl -k`` (short, short-precise, short-iso),
``/var/log/kern.log`` (rsyslog) and the kernel sections of an ``nvidia-bug-report.log``.

One table, ``node_events``: one row per kernel message this parser understands.

Headers (any of them, or none: a bare message pasted from a bug report is still read)::

    [  123.456789] msg                               dmesg: seconds since boot -> ``rel_s``
    [Mon Jul 24 08:01:02 2026] msg                   dmesg -T: host local time, zone not printed
    Jul 24 08:01:02 host kernel: msg                 journalctl -k / kern.log: no year, no zone
    Jul 24 08:01:02.123456 host kernel: msg          journalctl -o short-precise
    2026-07-24T08:01:02+0000 host kernel: msg        journalctl -o short-iso / rsyslog RFC 3339
                                                     (the envelope peels the stamp into ``ext_ts``)
    Jul 24 08:01:02 host kernel: [  123.45] msg      kern.log with the printk time kept

``ts`` is UTC where the line carries a zone (short-iso), otherwise the time as printed (year
2000 placeholder where no year is printed: ``postmortem.analyzer.timeline`` fixes it), and ``ts_zone``
says which (``UTC``, ``local`` or ``local-no-year``). ``postmortem.analyzer.clocks`` turns them into
cross-node ``ts_utc``.

Messages (``kind``):

* ``xid`` -- ``NVRM: Xid (PCI:0000:2a:00): 79, pid=..., GPU has fallen off the bus.``; ``code`` is
  the Xid number, ``meaning``/``category`` from ``XID_CATALOGUE`` (NVIDIA's public Xid table);
* ``gpu_identity`` -- ``NVRM: GPU at PCI:0000:2a:00: GPU-<uuid>`` and ``NVRM: GPU Board Serial
  Number: ...`` (the serial line names no device: it belongs to the preceding ``GPU at`` line);
* ``gpu_off_bus`` -- ``NVRM: GPU 0000:2a:00.0: GPU has fallen off the bus.``; ``nvrm_driver`` --
  the driver banner;
* ``link_down`` / ``link_up`` -- ``mlx5_core 0000:5e:00.0 ens12f0np0: Link down`` (and other
  drivers' ``NIC Link is Down``); ``flaps`` counts the downs of the device in the input;
  ``nic_module`` -- mlx5 port module events; ``nic_health`` -- mlx5 health/fatal/timeouts;
* ``aer`` / ``aer_detail`` -- PCIe AER errors (severity in ``code``);
* ``hung_task`` -- ``INFO: task X:pid blocked for more than N seconds`` (``code`` = N);
* ``oom_invoked``, ``oom_constraint`` (``oom-kill:constraint=CONSTRAINT_MEMCG,...``),
  ``oom_kill`` (host or cgroup ``Out of memory: Killed process``), ``oom_reaped``;
* ``nfs_not_responding`` / ``nfs_ok``; ``mce`` (machine check), ``edac`` (memory CE/UE).
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.ascii_text import rx
from postmortem.parsers.base import ParseResult, among, consumed_of, to_int
from postmortem.parsers.kinds import Kind, literals_held, samples_of

NAME = "kernel"

# NVIDIA's public Xid catalogue (docs.nvidia.com/deploy/xid-errors), condensed:
# code -> (meaning, category). Categories: app (usually the program), driver, memory (ECC /
# remapping), nvlink, bus (PCIe / fallen off), firmware (GSP / micro-controllers), hw.
XID_CATALOGUE: dict[int, tuple[str, str]] = {
    8: ("GPU stopped processing (robust channel timeout)", "driver"),
    13: ("Graphics engine exception (illegal instruction / out-of-range address in a kernel)", "app"),
    31: ("GPU memory page fault (MMU fault; usually an illegal address in the application)", "app"),
    32: ("Invalid or corrupted push buffer stream", "driver"),
    38: ("Driver firmware error", "firmware"),
    43: ("GPU stopped processing (channel reset after a fault; usually the application)", "app"),
    44: ("Graphics engine fault during context switch", "driver"),
    45: ("Preemptive cleanup after previous errors (processes on the GPU were killed)", "app"),
    48: ("Double-bit ECC error (uncorrectable memory error)", "memory"),
    56: ("Display engine error", "hw"),
    57: ("Error programming video memory interface", "memory"),
    58: ("Unstable video memory interface detected", "memory"),
    61: ("Internal micro-controller breakpoint/warning", "firmware"),
    62: ("Internal micro-controller halt", "firmware"),
    63: ("ECC page retirement or row remapping recorded", "memory"),
    64: ("ECC page retirement or row remapping recording failure", "memory"),
    68: ("Video processor (NVDEC) exception", "hw"),
    69: ("Graphics engine class error", "driver"),
    74: ("NVLink error", "nvlink"),
    79: ("GPU has fallen off the bus", "bus"),
    92: ("High single-bit ECC error rate", "memory"),
    94: ("Contained ECC error (row remapping pending; affected processes killed)", "memory"),
    95: ("Uncontained ECC error (GPU reset required)", "memory"),
    109: ("Context switch timeout", "driver"),
    119: ("GSP RPC timeout", "firmware"),
    120: ("GSP error", "firmware"),
    121: ("C2C link error", "nvlink"),
    122: ("SPI PMU RPC read failure", "firmware"),
    123: ("SPI PMU RPC write failure", "firmware"),
    124: ("SPI PMU RPC erase failure", "firmware"),
    140: ("Unrecovered ECC error", "memory"),
    144: ("NVLink error (Blackwell NVLink / NVSwitch fault)", "nvlink"),
    145: ("NVLink error (Blackwell NVLink / NVSwitch fault)", "nvlink"),
    146: ("NVLink error (Blackwell NVLink / NVSwitch fault)", "nvlink"),
    147: ("NVLink error (Blackwell NVLink / NVSwitch fault)", "nvlink"),
    148: ("NVLink error (Blackwell NVLink / NVSwitch fault)", "nvlink"),
    149: ("NVLink error (Blackwell NVLink / NVSwitch fault)", "nvlink"),
    150: ("NVLink error (Blackwell NVLink / NVSwitch fault)", "nvlink"),
    154: ("GPU recovery action changed (reset or reboot required)", "hw"),
}

NODE_EVENTS_SCHEMA = {
    "line_no": pl.UInt32,
    "host": pl.String,          # host named by the line (journal/syslog header), else null
    "ts": pl.Datetime("us"),    # see module doc; null for plain dmesg
    "ts_zone": pl.String,       # UTC | local | local-no-year | null
    "rel_s": pl.Float64,        # dmesg seconds since boot
    "device": pl.String,        # PCI address 0000:2a:00.0, NIC name or NFS server
    "pci": pl.String,           # PCI address of the device, when the line gives one
    "code": pl.String,          # Xid number, AER severity, hung seconds, OOM constraint
    "kind": pl.String,
    "category": pl.String,
    "meaning": pl.String,
    "pid": pl.Int64,
    "process": pl.String,
    "uuid": pl.String,
    "serial": pl.String,
    "flaps": pl.Int64,
    "message": pl.String,
}

_LITERALS = ["NVRM", "mlx5_core", "NIC Link is", "AER", "error status/mask", "blocked for more than",
             "hung_task_timeout_secs", "oom-kill", "Out of memory", "out of memory", "oom_reaper",
             "nfs: server", "mce:", "EDAC"]

_MONTHS = {m: i for i, m in enumerate(["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                       "Dec"], 1)}

_HEADER = (
    r"^(?:(?:[a-z]+ *:[a-z]+ *: )?)"                                   # dmesg -x facility:level
    r"(?:(?P<mon>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) (?P<hms>\d{2}:\d{2}:\d{2}(?:\.\d+)?) (?P<host>[\w.-]+) kernel: ?"
    r"|(?P<host2>[\w.-]+) kernel: ?)?"
    r"(?:\[(?:[A-Z][a-z]{2} (?P<tmon>[A-Z][a-z]{2}) +(?P<tday>\d{1,2}) (?P<thms>\d{2}:\d{2}:\d{2}) (?P<tyear>\d{4})"
    r"|\s*(?P<rel>\d+\.\d+))\] ?)?"
    r"(?P<msg>.*)$"
)
_PCI = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_PCI3 = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"

# The message kinds (``postmortem.parsers.kinds``): regex with named groups over the message, tried
# in order on the lines holding the literal that no earlier kind took.
KINDS: list[Kind] = [
    Kind("xid", "node_events", r"NVRM: Xid \((?:PCI:)?(?P<dev3>" + _PCI3 + r")\): (?P<code>\d+),? ?(?P<rest>.*)$", literal="NVRM: Xid",
         samples=(
             "[ 8812.402823] NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
             '[Fri Jul 24 08:01:02 2026] NVRM: Xid (PCI:0000:ab:00): 48, pid=31337, name=python, DBE (double bit error) ECC error',
             'Jul 24 08:01:02 h20-node-03 kernel: NVRM: Xid (PCI:0000:18:00): 63, pid=1234, Row Remapper: New row marked for remapping',
             '2026-07-24T08:01:02+0000 h20-node-03 kernel: NVRM: Xid (PCI:0000:18:00): 94, pid=1234, name=python, Contained: SM (0x1).',
             'Jul 24 08:01:02.123456 gpu-07 kernel: NVRM: Xid (PCI:0000:3a:00): 119, pid=2277, name=python, Timeout after 6s of waiting for RPC response from GPU0 GSP!',)),
    Kind("gpu_identity", "node_events", r"NVRM: GPU at (?:PCI:)?(?P<dev3>" + _PCI3 + r")(?:\.\d)?: (?P<uuid>GPU-[0-9a-fA-F-]+)", literal="NVRM: GPU at",
         samples=('[ 8812.402817] NVRM: GPU at PCI:0000:2a:00: GPU-5f4e7b0a-3c1d-4e2f-9a8b-7c6d5e4f3a2b',)),
    Kind("gpu_identity", "node_events", r"NVRM: GPU Board Serial Number: ?(?P<serial>\S+)", literal="Serial Number",
         samples=('[ 8812.402820] NVRM: GPU Board Serial Number: 1321021034567',)),
    Kind("gpu_off_bus", "node_events", r"NVRM: GPU (?P<dev>" + _PCI + r"): GPU has fallen off the bus", literal="fallen off the bus",
         samples=('[ 8812.402830] NVRM: GPU 0000:2a:00.0: GPU has fallen off the bus.',)),
    Kind("gpu_identity", "node_events", r"NVRM: GPU (?P<dev>" + _PCI + r"): GPU serial number is (?P<serial>\w+)", literal="serial number is",
         samples=("[ 8812.402821] NVRM: GPU 0000:2a:00.0: GPU serial number is 1321021034567.",)),
    Kind("nvrm_driver", "node_events", r"NVRM: loading NVIDIA .*?Kernel Module\s+(?P<code>[\d.]+)", literal="NVRM: loading",
         samples=('[  101.123456] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023',)),
    Kind("link_down", "node_events", r"mlx5_core (?P<dev>" + _PCI + r")(?: (?P<ifname>[\w.-]+))?: Link down", literal="Link down",
         samples=('[ 9001.000001] mlx5_core 0000:5e:00.0 ens12f0np0: Link down',)),
    Kind("link_up", "node_events", r"mlx5_core (?P<dev>" + _PCI + r")(?: (?P<ifname>[\w.-]+))?: Link up", literal="Link up",
         samples=('[ 9003.500000] mlx5_core 0000:5e:00.0 ens12f0np0: Link up',)),
    Kind("link_down", "node_events", r"\w+ (?P<dev>" + _PCI + r") (?P<ifname>[\w.-]+): NIC Link is Down", literal="NIC Link is Down",
         samples=('[ 9006.000000] ice 0000:b1:00.0 ens5f0: NIC Link is Down',)),
    Kind("link_up", "node_events", r"\w+ (?P<dev>" + _PCI + r") (?P<ifname>[\w.-]+): NIC Link is Up", literal="NIC Link is Up",
         samples=("[ 9007.000000] ice 0000:b1:00.0 ens5f0: NIC Link is Up 100 Gbps Full Duplex, FEC: RS-FEC, "
                  "Autoneg Advertised: On, Autoneg Negotiated: False, Flow Control: None",)),
    Kind("nic_module", "node_events", r"mlx5_core (?P<dev>" + _PCI + r")(?: [\w.-]+)?: Port module event(?P<rest>.*)$", literal="Port module event",
         samples=('[ 9004.000000] mlx5_core 0000:5e:00.0: Port module event: module 0, Cable unplugged',)),
    Kind("nic_health", "node_events", r"mlx5_core (?P<dev>" + _PCI + r")(?: [\w.-]+)?: (?P<rest>.*(?:health|fatal|error state|"
         r"timeout|FW|firmware).*)$", literal="mlx5_core",
         samples=('[ 9005.000000] mlx5_core 0000:5e:00.0: mlx5_fw_fatal_reporter_err_work:740:(pid 123): Driver is in error state. Unloading',)),
    Kind("aer", "node_events", r"[\w-]+ (?P<dev>" + _PCI + r"): AER: (?P<rest>.*)$", literal="AER:",
         samples=(
             '[ 9100.000000] pcieport 0000:16:02.0: AER: Uncorrected (Non-Fatal) error received: 0000:18:00.0',
             '[ 9100.000010] nvidia 0000:18:00.0: AER: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester ID)',)),
    Kind("aer_detail", "node_events", r"[\w-]+ (?P<dev>" + _PCI + r"):\s+device \[[0-9a-f:]+\] error status/mask", literal="error status/mask",
         samples=('[ 9100.000020] nvidia 0000:18:00.0:   device [10de:2329] error status/mask=00004000/00000000',)),
    Kind("hung_task", "node_events", r"INFO: task (?P<process>.+?):(?P<pid>\d+) blocked for more than (?P<code>\d+) seconds", literal="blocked for more than",
         samples=('[ 9200.000000] INFO: task python:48211 blocked for more than 120 seconds.',)),
    Kind("hung_task_detail", "node_events", r"hung_task_timeout_secs", literal="hung_task_timeout_secs",
         samples=('[ 9200.000100] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.',)),
    Kind("oom_invoked", "node_events", r"(?P<process>\S+) invoked oom-killer", literal="invoked oom-killer",
         samples=('[ 9300.000000] python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0',)),
    Kind("oom_constraint", "node_events", r"oom-kill:constraint=(?P<code>\w+)", literal="oom-kill:constraint",
         samples=('[ 9300.000100] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,oom_memcg=/slurm/uid_1000/job_4242,task_memcg=/slurm/uid_1000/job_4242/step_0,task=python,pid=48211,uid=1000',)),
    Kind("oom_kill", "node_events", r"(?P<memcg>Memory cgroup )?[Oo]ut of memory: Kill(?:ed)? process (?P<pid>\d+) \((?P<process>[^)]*)\)", literal="ut of memory: Kill",
         samples=(
             '[ 9300.000200] Memory cgroup out of memory: Killed process 48211 (python) total-vm:98765432kB, anon-rss:87654321kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:180000kB oom_score_adj:0',
             '[ 9300.000300] Out of memory: Killed process 48212 (python) total-vm:1234kB, anon-rss:1000kB',)),
    Kind("oom_reaped", "node_events", r"oom_reaper: reaped process (?P<pid>\d+) \((?P<process>[^)]*)\)", literal="oom_reaper",
         samples=('[ 9300.000400] oom_reaper: reaped process 48211 (python), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB',)),
    Kind("nfs_not_responding", "node_events", r"nfs: server (?P<dev>\S+) not responding(?P<rest>.*)$", literal="nfs: server",
         samples=('[ 9400.000000] nfs: server nfs01 not responding, still trying',)),
    Kind("nfs_ok", "node_events", r"nfs: server (?P<dev>\S+) OK", literal="nfs: server",
         samples=('[ 9460.000000] nfs: server nfs01 OK',)),
    Kind("mce", "node_events", r"mce: \[Hardware Error\]: ?(?P<rest>.*)$", literal="mce:",
         samples=('[ 9500.000000] mce: [Hardware Error]: Machine check events logged',)),
    Kind("edac", "node_events", r"EDAC \w+: (?P<code>\d+ [CU]E) (?P<rest>.*)$", literal="EDAC",
         samples=('[ 9500.000100] EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0',)),
    # AER per-bit detail lines (`pcieport 0000:00:01.1:    [ 0] RxErr   (First)`): no literal of their own
    Kind("aer_detail", "node_events", r"^[\w-]+ (?P<dev>" + _PCI + r"):\s+\[\s*\d+\] (?P<rest>\w+)", literal="] ",
         samples=('[ 9100.000030] nvidia 0000:18:00.0:    [14] CmpltTO                (First)',)),
]
# journalctl's own markers are understood but are no kind's: they give no row
SAMPLE_LINES = samples_of(KINDS) + ['-- Logs begin at Tue 2026-07-21 07:23:15 UTC, end at Fri 2026-07-24 09:00:00 UTC. --']


def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema=NODE_EVENTS_SCHEMA)


def _headers(df: pl.DataFrame) -> pl.DataFrame:
    """Split the (optional) syslog / dmesg header off; times as Datetime + zone note."""
    h = pl.col("text").str.extract_groups(rx(_HEADER))
    df = df.with_columns(_h=h).unnest("_h")
    month = pl.col("mon").replace_strict(_MONTHS, default=None, return_dtype=pl.Int64)
    tmonth = pl.col("tmon").replace_strict(_MONTHS, default=None, return_dtype=pl.Int64)
    # journal / syslog: no year (placeholder 2000, postmortem.analyzer.timeline fixes it), no zone
    syslog = pl.concat_str([pl.lit("2000-"), month.cast(pl.String).str.pad_start(2, "0"), pl.lit("-"),
                            pl.col("day").str.pad_start(2, "0"), pl.lit(" "), pl.col("hms")])
    dmesg_t = pl.concat_str([pl.col("tyear"), pl.lit("-"), tmonth.cast(pl.String).str.pad_start(2, "0"), pl.lit("-"),
                             pl.col("tday").str.pad_start(2, "0"), pl.lit(" "), pl.col("thms")])
    iso = pl.col("ext_ts") if "ext_ts" in df.columns else pl.lit(None, dtype=pl.String)
    iso_zoned = iso.str.contains(rx(r"(?:Z|[+-]\d{2}:?\d{2})$")).fill_null(False)
    iso_ts = (iso.str.replace(rx(r"([+-]\d{2})(\d{2})$"), "$1:$2").str.replace(r"Z$", "+00:00")
              .str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%:z", time_zone="UTC", strict=False)
              .dt.replace_time_zone(None))
    iso_local = iso.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f", strict=False)
    ts = (pl.when(pl.col("host2").is_not_null() & iso_zoned).then(iso_ts)
          .when(pl.col("host2").is_not_null()).then(iso_local)
          .when(pl.col("hms").is_not_null()).then(syslog.str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False))
          .when(pl.col("thms").is_not_null()).then(dmesg_t.str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False)))
    zone = (pl.when(pl.col("host2").is_not_null() & iso_zoned).then(pl.lit("UTC"))
            .when(pl.col("host2").is_not_null()).then(pl.lit("local"))
            .when(pl.col("hms").is_not_null()).then(pl.lit("local-no-year"))
            .when(pl.col("thms").is_not_null()).then(pl.lit("local")))
    return df.with_columns(
        host=pl.coalesce("host", "host2"), ts=ts.cast(pl.Datetime("us")), ts_zone=zone,
        rel_s=pl.col("rel").cast(pl.Float64, strict=False), message=pl.col("msg"),
    )


def _pci3(expr: pl.Expr) -> pl.Expr:
    """``0000:2A:00`` (the Xid form) -> ``0000:2a:00.0``."""
    return pl.concat_str([expr.str.to_lowercase(), pl.lit(".0")])


def _classify(df: pl.DataFrame) -> pl.DataFrame:
    msg = pl.col("message")
    frames = []
    taken = pl.Series("line_no", [], dtype=pl.UInt32)
    # which kinds' literals occur at all, in one call: most kernel logs hold a few of the kinds
    held = literals_held(df, msg, [kind.literal for kind in KINDS])
    for kind in KINDS:
        if kind.literal not in held:
            continue
        sub = df.filter(msg.str.contains(kind.literal, literal=True), ~pl.col("line_no").is_in(among(taken)))
        if sub.is_empty():
            continue
        plan = sub.lazy().with_columns(_m=msg.str.extract_groups(rx(kind.pattern))).unnest("_m")
        first = [c for c in plan.collect_schema().names() if c not in df.columns]
        matched = pl.any_horizontal([pl.col(c).is_not_null() for c in first]) if first else pl.lit(True)
        if kind.name == "hung_task_detail":
            matched = msg.str.contains("hung_task_timeout_secs", literal=True)
        sub = plan.filter(matched).with_columns(kind=pl.lit(kind.name)).collect(engine="in-memory")   # one call
        if sub.is_empty():
            continue
        frames.append(sub)
        taken = pl.concat([taken, sub["line_no"]])
    if not frames:
        return _empty()
    out = pl.concat(frames, how="diagonal_relaxed")
    out = out.with_columns([pl.lit(None, dtype=pl.String).alias(c) for c in     # the missing ones, in one call
                            ("dev", "dev3", "code", "rest", "uuid", "serial", "ifname", "process", "pid", "src", "sev",
                             "memcg") if c not in out.columns])
    aer = pl.col("kind") == "aer"
    oomc = pl.col("kind") == "oom_constraint"
    out = out.with_columns(
        src=pl.when(aer).then(pl.col("rest").str.extract(rx(r"error received: (" + _PCI + ")"), 1)),
        sev=pl.when(aer).then(pl.col("rest").str.extract(rx(r"severity=([\w-]+(?: \([\w-]+\))?)"), 1)),
        process=pl.when(oomc).then(pl.col("message").str.extract(r"[,:]task=([^,]+)", 1)).otherwise(pl.col("process")),
        pid=pl.when(oomc).then(pl.col("message").str.extract(rx(r",pid=(\d+)"), 1)).otherwise(pl.col("pid")),
    )
    out = out.sort("line_no").with_columns(
        pci=pl.coalesce(pl.col("src"), pl.col("dev").str.to_lowercase(), _pci3(pl.col("dev3"))),
    )
    # A serial-number line names no device: it belongs to the `GPU at` line before it.
    nvrm = pl.col("kind").is_in(["gpu_identity", "xid", "gpu_off_bus"])
    # (within the input: several at once carry ``input_id``, see ``parse``)
    files = ["input_id"] if "input_id" in out.columns else []
    filled = pl.col("pci").forward_fill().over(files) if files else pl.col("pci").forward_fill()
    out = out.with_columns(pci=pl.when(nvrm).then(filled).otherwise(pl.col("pci")))
    xid = pl.col("kind") == "xid"
    code_int = to_int(pl.col("code"))
    meaning = code_int.replace_strict({k: v[0] for k, v in XID_CATALOGUE.items()}, default=None, return_dtype=pl.String)
    category = code_int.replace_strict({k: v[1] for k, v in XID_CATALOGUE.items()}, default=None,
                                       return_dtype=pl.String)
    kind = pl.col("kind")
    out = out.with_columns(
        code=(pl.when(kind == "aer").then(pl.coalesce(pl.col("sev"), pl.col("rest").str.extract(
            rx(r"^((?:Multiple )?(?:Corrected|Uncorrected(?: \([\w-]+\))?))"), 1)))
              .when(kind == "oom_kill").then(pl.when(pl.col("memcg").is_not_null()).then(pl.lit("CONSTRAINT_MEMCG"))
                                              .otherwise(pl.lit("host")))
              .otherwise(pl.col("code"))),
        pid=pl.coalesce(to_int(pl.col("pid")),
                        pl.when(xid).then(to_int(pl.col("rest").str.extract(rx(r"pid=(\d+)"), 1)))),
        process=pl.coalesce(pl.col("process"), pl.when(xid).then(pl.col("rest").str.extract(rx(r"name=([^,\s]+)"), 1))),
        device=pl.coalesce(pl.col("ifname"), pl.col("pci"), pl.col("dev")),
        category=(pl.when(xid).then(pl.coalesce(category, pl.lit("unknown")))
                  .when(kind.is_in(["link_down", "link_up", "nic_module", "nic_health"])).then(pl.lit("nic"))
                  .when(kind.str.starts_with("aer")).then(pl.lit("pcie"))
                  .when(kind == "gpu_off_bus").then(pl.lit("bus"))
                  .when(kind.str.starts_with("oom")).then(pl.lit("host_memory"))
                  .when(kind.str.starts_with("nfs")).then(pl.lit("storage"))
                  .when(kind.str.starts_with("hung")).then(pl.lit("host"))
                  .when(kind.is_in(["mce", "edac"])).then(pl.lit("host_hw"))
                  .when(kind.str.starts_with("gpu") | kind.str.starts_with("nvrm")).then(pl.lit("gpu"))),
        meaning=(pl.when(xid).then(pl.coalesce(meaning, pl.lit("Xid not in the catalogue (see NVIDIA's Xid table)")))
                 .when(kind == "gpu_off_bus").then(pl.lit("GPU has fallen off the bus"))
                 .when(kind == "link_down").then(pl.lit("NIC port link went down"))
                 .when(kind == "link_up").then(pl.lit("NIC port link came up"))
                 .when(kind == "hung_task").then(pl.lit("a task was blocked in the kernel (D state) too long"))
                 .when(kind == "oom_kill").then(pl.lit("the kernel OOM killer killed a process"))
                 .when(kind == "oom_constraint").then(pl.lit("OOM kill constraint (CONSTRAINT_MEMCG: a cgroup limit, "
                                                             "e.g. the Slurm job's memory)"))
                 .when(kind == "nfs_not_responding").then(pl.lit("NFS server not responding (I/O stalls)"))
                 .when(kind == "nfs_ok").then(pl.lit("NFS server responding again"))
                 .when(kind == "aer").then(pl.lit("PCIe Advanced Error Reporting error"))),
    )
    downs = out.filter(kind == "link_down").group_by(*files, "device").agg(flaps=pl.len().cast(pl.Int64))
    out = out.join(downs, on=[*files, "device"], how="left") if not downs.is_empty() else out.with_columns(
        flaps=pl.lit(None, dtype=pl.Int64))
    out = out.with_columns(flaps=pl.when(kind.str.starts_with("link_")).then(pl.col("flaps").fill_null(0)))
    return out



def file_gate(text: pl.Expr) -> pl.Expr:
    """A line this parser could start from: an input with none gives nothing (postmortem.analyzer.ingest
    skips the parser there; tests/test_batched_parsing.py holds the skip to the full run)."""
    # its literals, AER's per-bit lines (gated by "pcieport" among others), journalctl's markers
    # (one regex of the literals: its SIMD literal search is several times faster here than
    # ``contains_any``'s automaton)
    text = text.fill_null("")
    literals = "|".join(pl.escape_regex(literal) for literal in [*_LITERALS, "AER:", "pcieport", "error status/mask"])
    return text.str.contains(rx(literals)) | text.str.starts_with("-- ")


def parse(lines: pl.DataFrame) -> ParseResult:
    """The kernel messages of one input, or of several at once (an ``input_id`` column:
    ``postmortem.analyzer.ingest`` hands a chunk's inputs that pass ``file_gate`` over in one
    frame); what one input says (the device a serial line belongs to, a port's flaps) stays its own."""
    if lines is None or lines.is_empty() or "text" not in lines.columns:
        return ParseResult(tables={"node_events": _empty()})
    files = ["input_id"] if "input_id" in lines.columns else []
    cols = ["line_no", "text"] + (["ext_ts"] if "ext_ts" in lines.columns else []) + files
    text = pl.col("text").fill_null("")
    # journalctl's own markers (`-- Logs begin at ...`, `-- Boot 3f2a... --`, `-- No entries --`): understood, no row
    markers = lines.filter(text.str.starts_with("-- ") & text.str.contains(
        r"^-- (?:Logs begin at|Journal begins at|Boot [0-9a-f]+|Reboot|No entries)"))["line_no"]
    hit = text.str.contains_any(_LITERALS)
    aer = text.str.contains_any(["AER:", "pcieport", "error status/mask"])
    if lines.select(aer.any()).item():  # AER's per-bit lines name no literal: read in the inputs with AER
        bits = text.str.contains(rx(r":\s+\[\s*\d+\] \w"))
        hit = hit | (bits & aer.any().over(files) if files else bits)
    df = lines.select(cols).filter(hit)
    none = ParseResult(tables={"node_events": _empty()}, consumed=markers.cast(pl.UInt32))
    if df.is_empty():
        return none
    df = _headers(df)
    out = _classify(df)
    if out.is_empty():
        return none
    out = out.select([pl.col(c).cast(t, strict=False) if c in out.columns else pl.lit(None, dtype=t).alias(c)
                      for c, t in NODE_EVENTS_SCHEMA.items()]).sort("line_no")
    return ParseResult(tables={"node_events": out}, consumed=consumed_of(out, pl.DataFrame({"line_no": markers})))
