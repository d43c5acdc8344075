"""GPU and NIC health snapshots: ``nvidia-smi -q``, ``nvidia-smi --query-gpu ... --format=csv``,
``ethtool -S`` and ``perfquery``.

``gpu_health`` -- one row per GPU block of ``nvidia-smi -q`` (or csv row): ``bus_id`` (PCI address,
lower case, 4-digit domain: ``0000:18:00.0``), ``uuid``, ``serial``, ``product``, ``minor``,
``ecc_volatile_corrected`` / ``_uncorrected``, ``ecc_aggregate_corrected`` / ``_uncorrected``
(SRAM + DRAM, or the older Single/Double Bit totals), ``retired_sbe``, ``retired_dbe``,
``retired_pending``, ``remapped_correctable``, ``remapped_uncorrectable``, ``remap_pending``,
``remap_failure``, ``pcie_gen_cur``/``pcie_gen_max``, ``pcie_width_cur``/``pcie_width_max``,
``sm_clock_mhz``/``sm_clock_max_mhz``, ``temp_c``, ``throttle`` (active clock event reasons,
comma separated), ``memory_total_mib``, ``memory_used_mib``, ``state`` (``ok``, or
``unreachable`` for nvidia-smi's ``Unable to determine the device handle`` line), ``snapshot_ts``
(the block's ``Timestamp``, host local time as printed), ``mig_mode`` (``MIG Mode / Current``, or the
csv field ``mig.mode.current``: ``Enabled``, ``Disabled``, ``N/A``).

``nic_counters`` -- one row per counter: ``device`` (from a preceding ``ethtool -S DEV`` /
``perfquery ... -C DEV -P N`` command line or the perfquery ``Lid L port P`` header; null when the
paste has neither), ``port``, ``counter``, ``value``, ``is_error``, ``source``.

Multi-line blocks are followed with forward-filled section headers (one per indentation level)
over the whole file; no Python loop over lines.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.ascii_text import rx
from postmortem.parsers.base import ParseResult, among, collect_each, consumed_of, to_int
from postmortem.parsers.lines import file_of, files_where, of_files

NAME = "health"

SAMPLE_LINES = [
    "==============NVSMI LOG==============",
    "Timestamp                                 : Fri Jul 24 08:00:05 2026",
    "Driver Version                            : 535.129.03",
    "Attached GPUs                             : 8",
    "GPU 00000000:18:00.0",
    "    Product Name                          : NVIDIA H20",
    "    Serial Number                         : 1652123456789",
    "    GPU UUID                              : GPU-0a1b2c3d-0000-4000-8000-000000000018",
    "    Minor Number                          : 0",
    "    PCI",
    "        Bus Id                            : 00000000:18:00.0",
    "        GPU Link Info",
    "            PCIe Generation",
    "                Max                       : 5",
    "                Current                   : 4",
    "            Link Width",
    "                Max                       : 16x",
    "                Current                   : 8x",
    "    MIG Mode",
    "        Current                           : Enabled",
    "        Pending                           : Enabled",
    "    Clocks Event Reasons",
    "        Idle                              : Not Active",
    "        HW Slowdown                       : Active",
    "    ECC Errors",
    "        Volatile",
    "            SRAM Correctable              : 0",
    "            SRAM Uncorrectable            : 0",
    "            DRAM Correctable              : 12",
    "            DRAM Uncorrectable            : 1",
    "        Aggregate",
    "            DRAM Correctable              : 40",
    "            DRAM Uncorrectable            : 2",
    "    Retired Pages",
    "        Single Bit ECC                    : 0",
    "        Double Bit ECC                    : 1",
    "        Pending Page Blacklist            : No",
    "    Remapped Rows",
    "        Correctable Error                 : 0",
    "        Uncorrectable Error               : 1",
    "        Pending                           : Yes",
    "        Remapping Failure Occurred        : No",
    "    Temperature",
    "        GPU Current Temp                  : 41 C",
    "    Clocks",
    "        SM                                : 1980 MHz",
    "    Max Clocks",
    "        SM                                : 1980 MHz",
    "Unable to determine the device handle for GPU0000:2A:00.0: Unknown Error",
    "memory.total [MiB], memory.used [MiB]",
    "81559 MiB, 18560 MiB",
    "# ethtool -S ens12f0np0",
    "NIC statistics:",
    "     rx_symbol_err_phy: 7",
    "     link_down_events_phy: 3",
    "# Port counters: Lid 12 port 1 (CapMask: 0x5A00)",
    "SymbolErrorCounter:..............4",
    "LinkDownedCounter:...............1",
    "PortRcvErrors:...................0",
]

GPU_HEALTH_SCHEMA = {
    "line_no": pl.UInt32, "bus_id": pl.String, "uuid": pl.String, "serial": pl.String, "product": pl.String,
    "minor": pl.Int64, "state": pl.String, "snapshot_ts": pl.String, "driver": pl.String,
    "ecc_volatile_corrected": pl.Int64, "ecc_volatile_uncorrected": pl.Int64,
    "ecc_aggregate_corrected": pl.Int64, "ecc_aggregate_uncorrected": pl.Int64,
    "retired_sbe": pl.Int64, "retired_dbe": pl.Int64, "retired_pending": pl.String,
    "remapped_correctable": pl.Int64, "remapped_uncorrectable": pl.Int64, "remap_pending": pl.String,
    "remap_failure": pl.String, "pcie_gen_cur": pl.Int64, "pcie_gen_max": pl.Int64,
    "pcie_width_cur": pl.Int64, "pcie_width_max": pl.Int64, "sm_clock_mhz": pl.Int64, "sm_clock_max_mhz": pl.Int64,
    "temp_c": pl.Int64, "throttle": pl.String, "memory_total_mib": pl.Int64, "memory_used_mib": pl.Int64,
    "mig_mode": pl.String,
}
NIC_SCHEMA = {"line_no": pl.UInt32, "device": pl.String, "port": pl.Int64, "counter": pl.String,
              "value": pl.Int64, "is_error": pl.Boolean, "source": pl.String}

# Where this parser's records start: literals, the `nvidia-smi -q` GPU header and the
# `--query-gpu` CSV header (as patterns: literals such as `memory.` or `GPU 0` match every
# py-spy `pin_memory.py` frame and many training-log lines).
_NIC_LITERALS = ["NIC statistics", "ethtool -S", "perfquery", "Port counters", "Counter:."]
_GATE = ["device handle", *_NIC_LITERALS]
_NVSMI_HEAD = r"^GPU [0-9A-Fa-f]{4,8}:"
_CSV_HEAD = r"^(?:[a-z_]+\.[a-z_.]+|index|name|uuid|serial)(?: \[[^\]]+\])?(?:, ?[a-z_.]+(?: \[[^\]]+\])?)+\s*$"
_ERRORISH = r"(?i)err|discard|drop|link_?down|symbol|crc|timeout|retry|out_of_buffer|Downed|Recovery|Violation|Constraint"

# path (sections joined by "/") -> column, for single values
_PATHS = {
    "Product Name": "product", "Serial Number": "serial", "GPU UUID": "uuid", "Minor Number": "minor",
    "PCI/Bus Id": "bus_id",
    "PCI/GPU Link Info/PCIe Generation/Max": "pcie_gen_max",
    "PCI/GPU Link Info/PCIe Generation/Current": "pcie_gen_cur",
    "PCI/GPU Link Info/Link Width/Max": "pcie_width_max",
    "PCI/GPU Link Info/Link Width/Current": "pcie_width_cur",
    "Retired Pages/Single Bit ECC": "retired_sbe", "Retired Pages/Double Bit ECC": "retired_dbe",
    "Retired Pages/Pending Page Blacklist": "retired_pending", "Retired Pages/Pending Page Retirement": "retired_pending",
    "Remapped Rows/Correctable Error": "remapped_correctable", "Remapped Rows/Uncorrectable Error": "remapped_uncorrectable",
    "Remapped Rows/Pending": "remap_pending", "Remapped Rows/Remapping Failure Occurred": "remap_failure",
    "Temperature/GPU Current Temp": "temp_c", "Clocks/SM": "sm_clock_mhz", "Max Clocks/SM": "sm_clock_max_mhz",
    "FB Memory Usage/Total": "memory_total_mib", "FB Memory Usage/Used": "memory_used_mib",
    "MIG Mode/Current": "mig_mode",
}
_CSV_COLUMNS = {"index": "minor", "pci.bus_id": "bus_id", "uuid": "uuid", "serial": "serial", "name": "product",
                "memory.total": "memory_total_mib", "memory.used": "memory_used_mib", "temperature.gpu": "temp_c",
                "clocks.sm": "sm_clock_mhz", "clocks.max.sm": "sm_clock_max_mhz",
                "pcie.link.gen.current": "pcie_gen_cur", "pcie.link.gen.max": "pcie_gen_max",
                "pcie.link.width.current": "pcie_width_cur", "pcie.link.width.max": "pcie_width_max",
                "ecc.errors.uncorrected.volatile.total": "ecc_volatile_uncorrected",
                "ecc.errors.corrected.volatile.total": "ecc_volatile_corrected",
                "ecc.errors.uncorrected.aggregate.total": "ecc_aggregate_uncorrected",
                "ecc.errors.corrected.aggregate.total": "ecc_aggregate_corrected", "mig.mode.current": "mig_mode"}


def normalise_bus_id(expr: pl.Expr) -> pl.Expr:
    """``00000000:18:00.0`` / ``0000:2A:00.0`` -> ``0000:18:00.0``."""
    e = expr.str.strip_chars().str.to_lowercase()
    return e.str.replace(r"^[0-9a-f]{4}([0-9a-f]{4}:)", "$1")


def _nvsmi(df: pl.DataFrame) -> tuple[pl.DataFrame, list[int]]:
    t = pl.col("text")
    gpu_head = t.str.extract(rx(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$"), 1)
    if not df.select(gpu_head.is_not_null().any()).item():
        return pl.DataFrame(), []
    # the line steps as plans, collected together (a Polars call a step cost more than its work)
    rows = df.lazy().with_columns(
        _gpu=gpu_head,
        _ind=t.str.extract(r"^( *)", 1).str.len_chars(),
        _key=t.str.extract(rx(r"^\s*([^:]*?\S)\s+: ?(.*?)\s*$"), 1),
        _val=t.str.extract(rx(r"^\s*([^:]*?\S)\s+: ?(.*?)\s*$"), 2),
        _head=pl.when(~t.str.contains(":", literal=True) & t.str.contains(rx(r"^\s+\S"))).then(t.str.strip_chars()),
    )
    top_ts = pl.when((pl.col("_ind") == 0) & (pl.col("_key") == "Timestamp")).then(pl.col("_val"))
    top_drv = pl.when((pl.col("_ind") == 0) & (pl.col("_key") == "Driver Version")).then(pl.col("_val"))
    new_file = t.str.contains("NVSMI LOG", literal=True)
    rows = rows.with_columns(
        _gpu_block=pl.when(pl.col("_gpu").is_not_null()).then(pl.col("line_no"))
        .when((pl.col("_ind") == 0) & (t.str.strip_chars() != "")).then(pl.lit(0, dtype=pl.UInt32))
        .forward_fill().over("_file"),
        _ts=pl.when(new_file).then(pl.lit("")).otherwise(top_ts).forward_fill().over("_file"),
        _drv=pl.when(new_file).then(pl.lit("")).otherwise(top_drv).forward_fill().over("_file"),
    )
    rows = rows.with_columns(_bus=pl.when(pl.col("_gpu_block") > 0).then(pl.col("_gpu")).forward_fill().over("_file"))
    # section headers per indentation level (4, 8, 12): a line at a level resets the deeper ones
    secs = [f"_s{level}" for level in (4, 8, 12)]
    rows = rows.with_columns(
        pl.when(pl.col("_ind") < level).then(pl.lit(""))
        .when((pl.col("_ind") == level) & pl.col("_head").is_not_null()).then(pl.col("_head"))
        .when(pl.col("_ind") == level).then(pl.lit(""))
        .otherwise(None).forward_fill().over("_file").alias(name) for level, name in zip((4, 8, 12), secs))
    body = rows.filter((pl.col("_gpu_block") > 0) & pl.col("_key").is_not_null() & (pl.col("_ind") >= 4))
    body = body.with_columns(_path=pl.concat_str(
        [pl.when(pl.col(s) != "").then(pl.col(s)) for s in secs] + [pl.col("_key")], separator="/", ignore_nulls=True))
    path = pl.col("_path")
    num = to_int(pl.col("_val").str.extract(rx(r"^(\d+)"), 1))
    volatile = path.str.starts_with("ECC Errors/Volatile/")
    aggregate = path.str.starts_with("ECC Errors/Aggregate/")
    unc = path.str.contains(r"(?:Uncorrectable(?: Parity| SEC-DED)?|Double Bit/Total)$")
    cor = path.str.contains(r"(?:[^n]Correctable|Single Bit/Total)$")
    throttle = path.str.contains(r"^Clocks (?:Event|Throttle) Reasons/") & (pl.col("_val") == "Active")
    single = body.filter(path.is_in(list(_PATHS))).with_columns(
        _col=path.replace_strict(_PATHS, return_dtype=pl.String))
    used = rows.filter(pl.col("_gpu_block").is_not_null() | new_file | (pl.col("_ind") == 0) & pl.col("_key").is_in(
        ["Timestamp", "Driver Version", "CUDA Version", "Attached GPUs"])).filter(t.str.strip_chars() != "")
    body, single, used = collect_each([body, single, used.select("line_no")])
    agg_exprs = [pl.col("_val").filter(pl.col("_col") == c).first().alias(c) for c in set(_PATHS.values())]
    gpus = single.group_by("_gpu_block").agg(*agg_exprs) if not single.is_empty() else None
    extra = body.group_by("_gpu_block").agg(
        line_no=pl.col("line_no").min(), head_bus=pl.col("_bus").first(), snapshot_ts=pl.col("_ts").first(),
        driver=pl.col("_drv").first(),
        ecc_volatile_corrected=num.filter(volatile & cor).sum(), ecc_volatile_uncorrected=num.filter(volatile & unc).sum(),
        ecc_aggregate_corrected=num.filter(aggregate & cor).sum(),
        ecc_aggregate_uncorrected=num.filter(aggregate & unc).sum(),
        _has_ecc=(volatile | aggregate).any(),
        throttle=pl.col("_key").filter(throttle).str.join(","),
    )
    out = extra.join(gpus, on="_gpu_block", how="left") if gpus is not None else extra
    columns = out.columns
    out = out.lazy().with_columns(
        pl.when(pl.col("_has_ecc")).then(pl.col(c)).alias(c)
        for c in ("ecc_volatile_corrected", "ecc_volatile_uncorrected", "ecc_aggregate_corrected",
                  "ecc_aggregate_uncorrected"))
    ints = ["minor", "retired_sbe", "retired_dbe", "remapped_correctable", "remapped_uncorrectable", "pcie_gen_cur",
            "pcie_gen_max", "pcie_width_cur", "pcie_width_max", "sm_clock_mhz", "sm_clock_max_mhz", "temp_c",
            "memory_total_mib", "memory_used_mib"]
    out = out.with_columns([to_int(pl.col(c).str.extract(rx(r"^(\d+)"), 1)).alias(c) for c in ints if c in columns])
    out = out.with_columns(
        bus_id=normalise_bus_id(pl.coalesce(pl.col("bus_id") if "bus_id" in columns else pl.lit(None, pl.String),
                                            pl.col("head_bus"))),
        state=pl.lit("ok"), snapshot_ts=pl.when(pl.col("snapshot_ts") != "").then(pl.col("snapshot_ts")),
        driver=pl.when(pl.col("driver") != "").then(pl.col("driver")),
        throttle=pl.when(pl.col("throttle") != "").then(pl.col("throttle")),
    ).collect(engine="in-memory")
    return out, used["line_no"].to_list()


def _unreachable(df: pl.DataFrame) -> pl.DataFrame:
    t = pl.col("text")
    sub = df.filter(t.str.contains("Unable to determine the device handle", literal=True))
    if sub.is_empty():
        return pl.DataFrame()
    return sub.select("line_no", bus_id=normalise_bus_id(t.str.extract(r"for GPU ?([0-9A-Fa-f:.]+?):? ", 1)),
                      state=pl.lit("unreachable"), _msg=t.str.extract(r"device handle for GPU ?[0-9A-Fa-f:.]+: (.*)$", 1))


def _csv(df: pl.DataFrame) -> tuple[pl.DataFrame, list[int]]:
    """``nvidia-smi --query-gpu`` CSV blocks: a header, then the rows after it (in its input)
    with as many commas, up to the first that has not or the next header. Every header of the
    frame at once; one split per distinct header."""
    t = pl.col("text")
    head = t.str.contains(rx(_CSV_HEAD))
    commas = t.str.count_matches(",")
    d = df.with_columns(_head=head, _commas=commas).with_columns(
        _hdr=pl.when("_head").then(pl.col("line_no")).forward_fill().over("_file"),
        _hc=pl.when("_head").then(pl.col("_commas")).forward_fill().over("_file"))
    schemas: dict[tuple, list[int]] = {}   # a header's column names -> the headers that have them
    for line_no, text in d.filter("_head").select("line_no", "text").iter_rows():
        fields = [h.strip().split(" [")[0] for h in text.split(",")]
        names = [_CSV_COLUMNS.get(f) for f in fields]
        if any(n and "." in f for n, f in zip(names, fields)):   # else not an nvidia-smi --query-gpu header
            schemas.setdefault(tuple(names), []).append(line_no)
    used = sorted(line for lines in schemas.values() for line in lines)
    if not schemas:
        return pl.DataFrame(), used

    def under(headers: list[int]) -> pl.Expr:
        return pl.col("_hdr").is_in(among(pl.Series(headers, dtype=d["line_no"].dtype)))
    body = d.filter(~pl.col("_head") & under(used)).with_columns(
        _stop=(pl.col("_commas") != pl.col("_hc")).cum_max().over("_hdr")).filter(~pl.col("_stop"))
    used += body["line_no"].to_list()
    frames = []
    for names, headers in schemas.items():
        rows = body.filter(under(headers)) if len(schemas) > 1 else body
        if rows.is_empty():
            continue
        parts = pl.col("text").str.split(",")    # every field in one Polars call
        frames.append(rows.select("line_no", **{n: parts.list.get(i, null_on_oob=True).str.strip_chars()
                                                for i, n in enumerate(names) if n}))
    if not frames:
        return pl.DataFrame(), used
    out = pl.concat(frames, how="diagonal_relaxed")
    ints = [c for c in out.columns if c in GPU_HEALTH_SCHEMA and GPU_HEALTH_SCHEMA[c] == pl.Int64]
    out = out.with_columns([to_int(pl.col(c).str.extract(rx(r"^(\d+)"), 1)).alias(c) for c in ints], state=pl.lit("ok"))
    if "bus_id" in out.columns:
        out = out.with_columns(bus_id=normalise_bus_id(pl.col("bus_id")))
    return out, used


def _nics(df: pl.DataFrame) -> pl.DataFrame:
    t = pl.col("text")
    cmd_dev = pl.coalesce(t.str.extract(rx(r"ethtool -S (\S+)"), 1), t.str.extract(rx(r"perfquery\b.*?-C (\S+)"), 1))
    cmd_port = to_int(t.str.extract(rx(r"perfquery\b.*?-P (\d+)"), 1))
    lid = t.str.extract(rx(r"# Port (?:extended )?counters: (Lid \d+ port \d+)"), 1)
    eth_head = t.str.contains(rx(r"^\s*NIC statistics:\s*$"))
    # a Lid header right after a `perfquery -C DEV` command line belongs to that device
    rows = df.with_columns(_dev=pl.coalesce(cmd_dev, pl.when(lid.is_not_null()).then(cmd_dev.shift(1).over("_file"))),
                           _lid=lid, _port=pl.coalesce(cmd_port, to_int(lid.str.extract(rx(r"port (\d+)"), 1))),
                           _src=pl.when(cmd_dev.is_not_null() & t.str.contains("ethtool", literal=True)).then(pl.lit("ethtool"))
                           .when(eth_head).then(pl.lit("ethtool"))
                           .when(lid.is_not_null() | t.str.contains("perfquery", literal=True)).then(pl.lit("perfquery")))
    mark = cmd_dev.is_not_null() | lid.is_not_null() | eth_head
    rows = rows.with_columns(
        _dev=pl.when(mark & ~eth_head).then(pl.coalesce("_dev", "_lid")).when(eth_head).then(None)
        .forward_fill().over("_file"),
        _port=pl.when(mark & ~eth_head).then(pl.coalesce(pl.col("_port"), pl.col("_port").shift(1).over("_file")))
        .forward_fill().over("_file"),
        _src=pl.when(mark).then(pl.col("_src")).forward_fill().over("_file"),
    )
    eth = t.str.extract_groups(rx(r"^\s{2,}(?P<c>[\w\[\]./-]+): (?P<v>-?\d+)\s*$"))
    pq = t.str.extract_groups(rx(r"^(?P<c>[A-Z]\w+):\.{2,}(?P<v>(?:0x)?[0-9a-fA-F]+)\s*$"))
    rows = rows.with_columns(_e=eth, _q=pq).with_columns(
        counter=pl.coalesce(pl.col("_q").struct.field("c"), pl.when(pl.col("_src") == "ethtool").then(pl.col("_e").struct.field("c"))),
        value=pl.coalesce(pl.col("_q").struct.field("v"), pl.when(pl.col("_src") == "ethtool").then(pl.col("_e").struct.field("v"))),
    )
    heads = rows.filter(mark).select("line_no", device=pl.col("_dev"), port=pl.col("_port"), source=pl.col("_src"),
                                     counter=pl.lit(None, pl.String), value=pl.lit(None, pl.String))
    counters = rows.filter(pl.col("counter").is_not_null() & pl.col("_src").is_not_null()).select(
        "line_no", device=pl.col("_dev"), port=pl.col("_port"), source=pl.col("_src"), counter="counter", value="value")
    if counters.is_empty():
        return pl.DataFrame()
    counters = counters.with_columns(
        value=pl.when(pl.col("value").str.starts_with("0x")).then(None).otherwise(to_int(pl.col("value"))),
        is_error=pl.col("counter").str.contains(rx(_ERRORISH)))
    return counters, heads["line_no"]



def file_gate(text: pl.Expr) -> pl.Expr:
    """A line this parser could start from: an input with none gives nothing (postmortem.analyzer.ingest
    skips the parser there; tests/test_batched_parsing.py holds the skip to the full run)."""
    # The literals as one regex (its SIMD literal search is several times faster here than
    # ``contains_any``'s automaton), the two line-start patterns as another.
    text = text.fill_null("")
    return (text.str.contains(rx("|".join(pl.escape_regex(literal) for literal in _GATE)))
            | text.str.contains(rx(f"(?:{_NVSMI_HEAD})|(?:{_CSV_HEAD})")))


def parse(lines: pl.DataFrame) -> ParseResult:
    empty = ParseResult(tables={"gpu_health": pl.DataFrame(schema=GPU_HEALTH_SCHEMA),
                                "nic_counters": pl.DataFrame(schema=NIC_SCHEMA)})
    if lines is None or lines.is_empty() or "text" not in lines.columns:
        return empty
    df = lines.select("line_no", pl.col("text").fill_null(""), _file=file_of(lines))
    # which outputs are in which input (several at once carry ``input_id``: postmortem.analyzer.ingest);
    # a training log without any health output costs one scan
    text = pl.col("text")
    found = files_where(lines, gate=file_gate(text).any(), nvsmi=text.str.contains(rx(_NVSMI_HEAD)).any(),
                        unreachable=text.str.contains("device handle", literal=True).any(),
                        csv=text.str.contains(rx(r"^[a-z_.]+(?: \[[^\]]+\])?, ")).any(),
                        nic=text.str.contains_any(_NIC_LITERALS).any())
    if not found["gate"].any():
        return empty
    found = found.with_columns(pl.col(c) & pl.col("gate") for c in ("nvsmi", "unreachable", "csv", "nic"))
    gpu_frames, used = [], []
    if (mine := of_files(df, found, "nvsmi")) is not None:
        frame, lines_used = _nvsmi(mine)
        used += lines_used
        if not frame.is_empty():
            gpu_frames.append(frame)
    if (mine := of_files(df, found, "unreachable")) is not None:
        frame = _unreachable(mine)
        if not frame.is_empty():
            gpu_frames.append(frame)
            used += frame["line_no"].to_list()
    if (mine := of_files(df, found, "csv")) is not None:
        frame, lines_used = _csv(mine)
        used += lines_used
        if not frame.is_empty():
            gpu_frames.append(frame)
    nic = pl.DataFrame(schema=NIC_SCHEMA)
    if (mine := of_files(df, found, "nic")) is not None:
        got = _nics(mine)
        if isinstance(got, tuple):
            frame, head_lines = got
            nic = frame.select([pl.col(c).cast(t, strict=False) if c in frame.columns else pl.lit(None, dtype=t).alias(c)
                                for c, t in NIC_SCHEMA.items()])
            used += head_lines.to_list() + nic["line_no"].to_list()
    gpu = pl.DataFrame(schema=GPU_HEALTH_SCHEMA)
    if gpu_frames:
        g = pl.concat(gpu_frames, how="diagonal_relaxed")
        gpu = g.select([pl.col(c).cast(t, strict=False) if c in g.columns else pl.lit(None, dtype=t).alias(c)
                        for c, t in GPU_HEALTH_SCHEMA.items()]).sort("line_no")
    if gpu.is_empty() and nic.is_empty() and not used:
        return empty
    consumed = pl.Series("line_no", used, dtype=pl.UInt32).unique()
    return ParseResult(tables={"gpu_health": gpu, "nic_counters": nic},
                       consumed=consumed_of(gpu, nic, pl.DataFrame({"line_no": consumed})))
