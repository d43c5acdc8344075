"""Per-node clock offsets and a cross-node UTC time for node events.

Every node prints times with its own clock: glog headers (no year), Megatron and NCCL 2.26+
local times without a zone, container UTC next to host local time, ``dmesg -T`` (host local)
next to the journal. Nothing here trusts one node's clock against another's without
evidence.

Evidence used, per node:

* **Synchronised anchors.** Some events happen at nearly the same moment on every rank: the
  c10d watchdog timeouts of one collective (``collectives`` rows of kind ``watchdog_timeout``
  with the same ``seq``), the dump signal a timing-out rank broadcasts through the TCPStore,
  the ``pg_status`` lines that follow it. For each anchor, a node's median time minus the
  median over all nodes is that node's deviation; the node's ``offset_s`` is the median of its
  deviations. With two nodes it is impossible to say which clock is off (confidence ``low``);
  with three or more the median node is the reference (``medium``; ``high`` when two or more
  anchor kinds agree within 2 s).
* **Zone.** A whole-hour (15-minute) part of the offset is reported as a zone difference
  (``zone``), the rest as skew. Journal ``short-iso`` lines carry their zone and are converted
  to UTC by the parser; ``dmesg -T`` and syslog lines are local time with the zone unknown:
  they are taken as UTC plus the node's zone estimate, and say so.
* **Boot time.** ``dmesg`` prints seconds since boot; the boot time comes from lines that have
  both (``kern.log``) or from the same message in the node's journal. Without either, plain
  dmesg rows keep ``ts_utc`` null.

``node_clocks``: ``node``, ``offset_s`` (node clock minus the reference; subtract it),
``zone``, ``skew_s``, ``anchors``, ``evidence``, ``confidence`` (high, medium, low, none).
"""

from __future__ import annotations

import polars as pl

NODE_CLOCKS_SCHEMA = {"node": pl.String, "offset_s": pl.Float64, "zone": pl.String, "skew_s": pl.Float64,
                      "boot_utc": pl.Datetime("us"), "anchors": pl.Int64, "evidence": pl.String,
                      "confidence": pl.String}

_ANCHOR_EVENTS = ["dump_signal", "watchdog_timeout", "pg_status"]


def _anchors(tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    parts = []
    coll = tables.get("collectives")
    if coll is not None and not coll.is_empty() and {"ts", "node", "kind"} <= set(coll.columns):
        seq = pl.col("seq").cast(pl.String) if "seq" in coll.columns else pl.lit("")
        parts.append(coll.filter(pl.col("kind") == "watchdog_timeout").select(
            "node", "ts", key=pl.concat_str([pl.lit("watchdog timeout of seq "), seq.fill_null("?")])))
    ev = tables.get("events")
    if ev is not None and not ev.is_empty() and {"ts", "node", "kind"} <= set(ev.columns):
        parts.append(ev.filter(pl.col("kind").is_in(_ANCHOR_EVENTS)).select("node", "ts", key=pl.col("kind")))
    if not parts:
        return pl.DataFrame(schema={"node": pl.String, "ts": pl.Datetime("us"), "key": pl.String})
    both = pl.concat([p.with_columns(pl.col("ts").cast(pl.Datetime("us"))) for p in parts], how="vertical_relaxed")
    return both.drop_nulls(["node", "ts"])


def estimate(tables: dict[str, pl.DataFrame], nodes: list[str]) -> pl.DataFrame:
    """``node_clocks`` for ``nodes`` (every node the run knows of)."""
    anchors = _anchors(tables)
    rows = {n: {"node": n, "offset_s": None, "zone": None, "skew_s": None, "anchors": 0,
                "evidence": "no synchronised event seen on this node: its clock is not checked against the others",
                "confidence": "none"} for n in nodes}
    if not anchors.is_empty():
        per = anchors.group_by("key", "node").agg(t=pl.col("ts").dt.epoch("us").median() / 1e6, n=pl.len())
        spread = per.group_by("key").agg(nodes=pl.len(), ref=pl.col("t").median())
        per = per.join(spread, on="key").filter(pl.col("nodes") >= 2).with_columns(dev=pl.col("t") - pl.col("ref"))
        stats = per.group_by("node").agg(offset=pl.col("dev").median(), kinds=pl.len(), spread=pl.col("dev").max() -
                                         pl.col("dev").min(), nodes=pl.col("nodes").max(), keys=pl.col("key"))
        for node, offset, kinds, spr, nn, keys in stats.iter_rows():
            zone_s = round(offset / 900.0) * 900 if abs(offset) >= 1800 else 0
            zone = "same as the other nodes" if zone_s == 0 else f"UTC{'+' if zone_s > 0 else '-'}{abs(zone_s) // 3600:02d}:" \
                                                                  f"{abs(zone_s) % 3600 // 60:02d} relative to the other nodes"
            if nn < 3:
                conf = "low"
            elif kinds >= 2 and spr < 2.0:
                conf = "high"
            else:
                conf = "medium"
            rows[node] = {
                "node": node, "offset_s": round(offset, 3), "zone": zone, "skew_s": round(offset - zone_s, 3),
                "anchors": int(kinds),
                "evidence": (f"median deviation {offset:+.2f} s from the other nodes over {kinds} synchronised "
                             f"event kind(s) ({', '.join(sorted(keys))}) seen on {nn} nodes; spread {spr:.2f} s"
                             + ("; with two nodes either clock may be the wrong one" if nn < 3 else "")),
                "confidence": conf,
            }
    return pl.LazyFrame(list(rows.values()), schema={k: v for k, v in NODE_CLOCKS_SCHEMA.items() if k != "boot_utc"}) \
        .with_columns(boot_utc=pl.lit(None, dtype=pl.Datetime("us"))).select(list(NODE_CLOCKS_SCHEMA)).sort("node") \
        .collect(engine="in-memory")


def boot_times(events: pl.DataFrame) -> pl.DataFrame:
    """Per node, the boot time on the node's clock (zone-converted where the source had one):
    from rows with both a wall time and a dmesg relative time, or from the same message found
    once with each."""
    empty = pl.DataFrame(schema={"node": pl.String, "boot": pl.Datetime("us"), "boot_source": pl.String})
    if events.is_empty() or "node" not in events.columns:
        return empty
    base = events.filter(pl.col("node").is_not_null())
    both = base.filter(pl.col("ts").is_not_null() & pl.col("rel_s").is_not_null()).select(
        "node", "ts", "rel_s", src=pl.lit("kernel lines with both a wall time and a boot-relative time"))
    timed = base.filter(pl.col("ts").is_not_null() & pl.col("rel_s").is_null()).select("node", "message", "ts")
    rel = base.filter(pl.col("ts").is_null() & pl.col("rel_s").is_not_null()).select("node", "message", "rel_s")
    matched = rel.join(timed, on=["node", "message"], how="inner").select(
        "node", "ts", "rel_s", src=pl.lit("the same kernel message in dmesg and in the journal"))
    allb = pl.concat([both, matched], how="vertical_relaxed")
    if allb.is_empty():
        return empty
    allb = allb.with_columns(boot_us=pl.col("ts").dt.epoch("us") - (pl.col("rel_s") * 1e6).cast(pl.Int64))
    return allb.group_by("node").agg(boot=pl.from_epoch(pl.col("boot_us").median().cast(pl.Int64), time_unit="us"),
                                     boot_source=pl.col("src").first())


def host_zones(events: pl.DataFrame) -> pl.DataFrame:
    """Per node, the zone of its local-time kernel lines (``dmesg -T``, syslog): the same message
    with a zoned journal time gives local minus UTC, rounded to 15 minutes."""
    empty = pl.DataFrame(schema={"node": pl.String, "zone_s": pl.Int64, "zone": pl.String})
    if events.is_empty() or not {"node", "ts_zone", "message"} <= set(events.columns):
        return empty
    base = events.filter(pl.col("node").is_not_null() & pl.col("ts").is_not_null())
    local = base.filter(pl.col("ts_zone").is_in(["local", "local-no-year"])).select("node", "message", lts="ts")
    utc = base.filter(pl.col("ts_zone") == "UTC").select("node", "message", uts="ts")
    m = local.join(utc, on=["node", "message"], how="inner")
    if m.is_empty():
        return empty
    # a year-less syslog time carries the placeholder/inferred year: compare within the year
    m = m.with_columns(d=(pl.col("lts").dt.replace(year=2000) - pl.col("uts").dt.replace(year=2000)).dt.total_seconds())
    z = m.group_by("node").agg(zone_s=((pl.col("d").median() / 900).round() * 900).cast(pl.Int64))
    sign = pl.when(pl.col("zone_s") < 0).then(pl.lit("-")).otherwise(pl.lit("+"))
    a = pl.col("zone_s").abs()
    return z.with_columns(zone=pl.concat_str([pl.lit("UTC"), sign, (a // 3600).cast(pl.String).str.pad_start(2, "0"),
                                              pl.lit(":"), (a % 3600 // 60).cast(pl.String).str.pad_start(2, "0")]))


def apply(events: pl.DataFrame, clocks: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``node_events`` with ``ts_utc``, ``ts_basis`` and ``order_confidence``; ``node_clocks``
    with the boot time filled in."""
    if events.is_empty():
        return events.with_columns(ts_utc=pl.lit(None, dtype=pl.Datetime("us")), ts_basis=pl.lit(None, dtype=pl.String),
                                   order_confidence=pl.lit(None, dtype=pl.String)), clocks
    boots = boot_times(events)
    zones = host_zones(events)
    df = events.join(boots, on="node", how="left").join(
        clocks.select("node", "offset_s", "confidence"), on="node", how="left").join(zones, on="node", how="left")
    local = pl.col("ts_zone").is_in(["local", "local-no-year"])
    to_utc = pl.duration(seconds=pl.col("zone_s").fill_null(0))
    wall = pl.coalesce(pl.when(local).then(pl.col("ts") - to_utc).otherwise(pl.col("ts")),
                       pl.col("boot") + pl.duration(microseconds=(pl.col("rel_s") * 1e6).cast(pl.Int64)))
    off = pl.duration(microseconds=(pl.col("offset_s").fill_null(0.0) * 1e6).cast(pl.Int64))
    df = df.with_columns(ts_utc=(wall - off).cast(pl.Datetime("us")))
    zoned = pl.col("ts_zone") == "UTC"
    basis = (pl.when(pl.col("ts").is_null() & pl.col("boot").is_not_null())
             .then(pl.concat_str([pl.lit("dmesg seconds since boot + boot time from "), pl.col("boot_source")]))
             .when(zoned).then(pl.lit("journal time with its zone"))
             .when(local & pl.col("zone_s").is_not_null()).then(pl.concat_str([
                 pl.lit("host local time, zone "), pl.col("zone"), pl.lit(" from the same messages in the journal")]))
             .when(pl.col("ts_zone") == "local-no-year").then(pl.lit("syslog/journal local time, year inferred, zone assumed UTC"))
             .when(pl.col("ts_zone") == "local").then(pl.lit("local time as printed (dmesg -T), zone assumed UTC")))
    basis = pl.when(pl.col("offset_s").is_not_null() & (pl.col("offset_s") != 0) & basis.is_not_null()).then(
        pl.concat_str([basis, pl.lit(", minus the node's clock offset "), pl.col("offset_s").round(2).cast(pl.String),
                       pl.lit(" s")])).otherwise(basis)
    conf = (pl.when(pl.col("ts_utc").is_null()).then(None)
            .when(pl.col("confidence").is_in(["high", "medium"]) & (zoned | pl.col("boot").is_not_null()
                                                                    | pl.col("zone_s").is_not_null()))
            .then(pl.lit("high"))
            .when(pl.col("confidence").is_in(["high", "medium", "low"])).then(pl.lit("medium"))
            .otherwise(pl.lit("low")))
    df = df.with_columns(ts_basis=basis, order_confidence=conf).drop("zone_s", "zone")
    clocks = clocks.join(zones.rename({"zone": "_hz"}), on="node", how="left").with_columns(
        zone=pl.when(pl.col("_hz").is_not_null()).then(pl.concat_str([
            pl.lit("host local time is "), pl.col("_hz"), pl.lit(" (dmesg -T / syslog vs the journal's zoned times); "),
            pl.col("zone").fill_null("")])).otherwise(pl.col("zone"))).drop("_hz", "zone_s")
    clocks = clocks.drop("boot_utc").join(boots.select("node", boot_utc=pl.col("boot")), on="node", how="left")
    clocks = clocks.with_columns(boot_utc=(pl.col("boot_utc") - pl.duration(
        microseconds=(pl.col("offset_s").fill_null(0.0) * 1e6).cast(pl.Int64))).cast(pl.Datetime("us")))
    return df.drop("boot", "boot_source", "offset_s", "confidence"), clocks.select(list(NODE_CLOCKS_SCHEMA))
