"""The line envelope: bytes in, one row per physical line out, launcher prefixes peeled.

This is the one helper every parser shares. It turns the bytes of one input into a Polars
frame with a row per line and does, vectorised over the whole file:

* splits on ``\\n`` and records each line's byte offset and length in the (decompressed)
  input, so any line can be read back later without copying its text into the store;
* decodes UTF-8; invalid bytes become ``\\xNN`` escapes (nothing is dropped, and the byte
  offsets still point at the original bytes);
* keeps the last non-empty ``\\r`` segment (tqdm redraws), with a launcher prefix that
  started the line in front of it, and drops a CRLF ``\\r``;
* removes ANSI escape sequences;
* peels launcher and collector prefixes, in any stacking order, and keeps what they said
  as columns (``docs/formats/nccl.md`` section 2, ``docs/formats/training-logs.md`` section 1,
  ``docs/formats/pytorch-failures.md`` section 1);
* finds c10d's ``[rankN]:`` prefix even when a progress bar is glued in front of it.

Offsets and lengths are bytes (``str.len_bytes``) into the input; everything that cuts text
works in characters: a prefix is cut by the text a regex matched (``strip_prefix``, or
``str.slice`` with ``str.len_chars``), never at a ``str.find`` position, which is a byte
offset (a progress bar of ``█`` before ``[rank3]:`` once shifted the cut to ``k3]:``).

Output columns (``ENVELOPE_SCHEMA``):

``line_no``   1-based physical line number
``offset``    byte offset of the line in the decompressed input
``length``    byte length of the line without its ``\\n``
``text``      the message after peeling (what parsers match against)
``prefix``    the peeled prefix text, or null
``ext_ts``    a timestamp a collector or launcher added (ISO-like string), or null
``srun_task`` Slurm ``srun --label`` task id
``mpi_rank``  Open MPI ``--tag-output`` rank
``local_rank`` torchrun ``[<role>N]:`` number (a local rank) for roles other than ``rank``; for
              a custom template ``[<role>N|M]:`` the first number N (the template decides
              whether it is the local or the global rank: ``postmortem.analyzer.identity`` reads N and M
              from ``prefix``)
``rank_tag``  ``[rankN]:`` number: c10d's global rank, or torchtitan's local rank (the
              identity resolver decides which, from the rest of the file)
``host_tag``  a host named by the prefix (pdsh ``host:``, ``host [stderr]``, Ray ``ip=``)
``ray_pid``   Ray worker pid
"""

from __future__ import annotations

import io
import re
from itertools import accumulate

import polars as pl

from postmortem.parsers.ascii_text import all_ascii, reading, rx
from postmortem.parsers.base import among

# Sample lines this module must understand (tests feed them through ``envelope``).
SAMPLE_LINES = [
    " 3: node03:38646:35596 [4] NCCL INFO Channel 00/0 : 3[4] -> 4[5] via P2P/CUMEM",
    "[1,5]<stdout>:node03:38646:35596 [4] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE",
    "Fri Aug 11 12:31:45 2023[1,0]<stdout>:NCCL version 2.18.3+cuda12.2",
    "gpu1504: [2023-03-24 10:26:51,118] [INFO] [launch.py:142:main] WORLD INFO DICT",
    "(RayTrainWorker pid=615, ip=10.100.2.6) host1:615:700 [0] NCCL INFO Bootstrap : Using eth0",
    "2025-11-24T03:20:21.001125857Z [rank3]:[E1124 03:20:21.001 ProcessGroupNCCL.cpp:1] x",
    "[default3]:[rank27]:[E909 09:55:29.307629539 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog",
    "dinov2-giant-nodes.cn-d004 [stderr] [rank14]:[E909 09:55:29.307 ProcessGroupNCCL.cpp:607] x",
    "Train:  20%|#9   | 375/1881 [3:40:16<14:52:25, 35.55s/it][rank3]:[E918 01:02:03.1 a.cpp:1] y",
    "\x1b[36m(WorkerDict pid=86559)\x1b[0m [rank0]:[E1120 01:02:03.4 ProcessGroupNCCL.cpp:1] z",
    "[trainer0|0]:1|25|Loss: 0.5",
    "│ node01:59194:59194 [0] NCCL INFO Using network IB                                │",
    "73e9f9f45158:6243:6442 [3] NCCL INFO Threads per block : 512/640/512                   [22/1819]",
    # real (tests/torch_runs/tqdm-bar): a bar of multi-byte blocks, CJK and an emoji, then the
    # traceback glued on by a worker that raised without a newline after its last redraw
    "[default3]:Train: 100%|██████████| 10/10 [00:010<00:00, 12.5it/s] 训练 🚀[rank3]: Traceback (most recent call last):",
]

ENVELOPE_SCHEMA = {
    "line_no": pl.UInt32,
    "offset": pl.UInt64,
    "length": pl.UInt32,
    "text": pl.String,
    "prefix": pl.String,
    "ext_ts": pl.String,
    "srun_task": pl.Int32,
    "mpi_rank": pl.Int32,
    "local_rank": pl.Int32,
    "rank_tag": pl.Int32,
    "host_tag": pl.String,
    "ray_pid": pl.Int64,
}

_ANSI = r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Z0-9]|\x1b[=>]"

# Each prefix: (name, anchored regex whose group 0 is the whole prefix, {column: group}).
# Order matters only inside one pass; the peel loop runs several passes so prefixes can stack.
_PREFIXES: list[tuple[str, str, dict[str, int]]] = [
    ("container_ts", r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?) ", {"ext_ts": 1}),
    ("platform_ts", r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)?)  +", {"ext_ts": 1}),
    ("cloudwatch", r"^\s*\|\s*(\d{4}-\d{2}-\d{2}T[\d:.]+Z?)\s*\|\s*", {"ext_ts": 1}),
    ("mpirun", r"^((?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})?)\[\d+,(\d+)\]<(?:stdout|stderr|stddiag)>:", {"ext_ts": 1, "mpi_rank": 2}),
    ("mpirun5", r"^\[[\w.-]+,(\d+)\]\[([\w.-]+):\d+\]<(?:stdout|stderr|stddiag)>:", {"mpi_rank": 1, "host_tag": 2}),
    ("srun", r"^\s*(\d{1,6}): ", {"srun_task": 1}),
    # A custom TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE such as `[${role_name}${rank}|${local_rank}]:`
    # or `[${role_name}${local_rank}|${rank}]:`: which number is the global rank depends on the
    # template, so neither is a `rank_tag` (that is c10d's certain `[rankN]:`). The first number
    # keeps the process's stream apart (`local_rank`); analyzer.identity reads both from `prefix`
    # and decides with the launcher's own statements (the failure summary, `[rankN]:` lines).
    ("torchrun_tpl", r"^\[([A-Za-z_]+)(\d+)\|(\d+)\]:", {"local_rank": 2}),
    ("rank_tag", r"^\[rank(\d+)\]: ?", {"rank_tag": 1}),
    ("torchrun", r"^\[[A-Za-z_]+?(\d+)\]:", {"local_rank": 1}),
    ("ray", r"^(?:\x1b?\[\d+m\s*)?\((?:\w+ )?pid=(\d+)(?:, ip=([\d.]+))?\)(?:\x1b?\[\d+m)? ", {"ray_pid": 1, "host_tag": 2}),
    ("host_stream", r"^([A-Za-z0-9][\w.-]*) \[(?:stdout|stderr)\] ", {"host_tag": 1}),
    ("stream", r"^(?:stdout|stderr): ", {}),
    ("determined", r"^\[(\d{4}-\d{2}-\d{2}T[^\]]+)\] [0-9a-f]+ \[rank=(\d+)\] \|\| ", {"ext_ts": 1, "rank_tag": 2}),
    ("markdown_quote", r"^(?:> ?)+", {}),
    ("lost_ansi", r"^\[\d{1,2}m ?", {}),
    ("box_border", r"^[│┃] ", {}),
    ("clock", r"^(\d{2}:\d{2}:\d{2}\.\d{3}) ", {"ext_ts": 1}),
]

# A run of launcher prefixes at the start of a line (``_clean`` keeps it across ``\r`` redraws).
_LEAD_PREFIXES = "^(?:" + "|".join(f"(?:{pattern[1:]})" for _name, pattern, _groups in _PREFIXES) + ")+"

# pdsh's `host: ` prefix looks like any `Word: message` line, so it is accepted only when one
# host-like token prefixes a good share of the file (decided per file, below).
_PDSH = r"^([A-Za-z0-9][\w.-]*): "
_HOSTLIKE = r"^(?:[A-Za-z][\w-]*\d[\w.-]*|[\w-]+\.[\w.-]+|[\w]+-[\w-]+|\d+\.\d+\.\d+\.\d+)$"
_NOT_HOSTS = {"stdout", "stderr", "Traceback", "NCCL", "WARNING", "INFO", "ERROR", "DEBUG"}

# Records glued after a progress bar with no newline (training-logs.md section 0 item 4):
# c10d's `[rankN]:` and a bare ProcessGroupNCCL glog header.
_C10D_RANK_ANYWHERE = r"\[rank\d+\]:|\[[EWIF](?:\d{3,4} [\d:.]+)? ProcessGroupNCCL\.cpp:\d+\]"
# What comes before the first such record on a line (group 1; at least one character).
_GLUED_BAR = rf"(?s)^(.+?)(?:{_C10D_RANK_ANYWHERE})"


def decode_lines(data: bytes) -> pl.DataFrame:
    """Split bytes into lines with byte offsets; invalid UTF-8 becomes ``\\xNN`` escapes."""
    if not data:
        return pl.DataFrame(schema={"line_no": pl.UInt32, "offset": pl.UInt64,
                                    "length": pl.UInt32, "raw": pl.String})
    body = data[:-1] if data.endswith(b"\n") else data
    try:
        text = body.decode("utf-8")
        raw = pl.Series("raw", [text]).str.split("\n").explode()
        lengths = raw.str.len_bytes().cast(pl.UInt64)
    except UnicodeDecodeError:
        # Rare path: the byte lengths must come from the bytes, not from the escaped text.
        parts = body.split(b"\n")
        lengths = pl.Series("length", list(map(len, parts)), dtype=pl.UInt64)
        raw = pl.Series("raw", [p.decode("utf-8", "backslashreplace") for p in parts])
    offsets = (lengths + 1).cum_sum() - (lengths + 1)
    return pl.DataFrame({
        "line_no": pl.int_range(1, len(raw) + 1, eager=True).cast(pl.UInt32),
        "offset": offsets,
        "length": lengths.cast(pl.UInt32),
        "raw": raw,
    })


def decode_many(datas: list[bytes]) -> pl.DataFrame:
    """``decode_lines`` of many inputs as one frame with an ``_input`` column (the position in
    ``datas``). Valid UTF-8 inputs are split together by Polars' line reader (``scan_lines``:
    several times faster than splitting a string, and a fraction of the memory); it drops a
    ``\r`` before a ``\n``, so inputs with CRLF endings, like invalid UTF-8 ones, go one by one
    through ``decode_lines``, whose lengths count every byte."""
    bodies, index, odd = [], [], []
    for i, data in enumerate(datas):
        if not data:
            continue
        # whole inputs, not copies without their last newline: 32 MB a chunk copied twice less
        ended = data.endswith(b"\n")
        # (a lone byte is found by memchr, many times faster than a two-byte search)
        crlf = b"\r" in data and (b"\r\n" in data or data.endswith(b"\r"))
        if (data.isascii() or _is_utf8(data)) and not crlf:
            bodies.append(data if ended else data + b"\n")
            index.append(i)
        else:
            odd.append(decode_lines(data).with_columns(_input=pl.lit(i, dtype=pl.UInt32)))
    frames = odd
    if bodies:
        frames = [_split_bodies(bodies, index), *odd]
    if not frames:
        return decode_lines(b"").with_columns(_input=pl.lit(0, dtype=pl.UInt32))
    if len(frames) == 1:
        return frames[0]
    return pl.concat(frames, how="vertical").sort("_input", "line_no", maintain_order=True)


def _split_bodies(bodies: list[bytes], index: list[int]) -> pl.DataFrame:
    """Lines of valid UTF-8 bodies, each ending with a newline (so that a last empty line is a
    line, not a terminator): one scan over them all, each as a stream of its own (no joined copy
    of the chunk), and each line's input found from where it ends (``index``: the input of each
    body), not by counting every body's newlines in Python."""
    lengths = pl.col("raw").str.len_bytes().cast(pl.UInt64)
    if len(bodies) == 1:
        source, inputs = bodies[0], pl.lit(index[0], dtype=pl.UInt32)
    else:
        ends = list(accumulate(len(body) for body in bodies))
        if ends[-1] >= len(bodies) << 20:     # a megabyte a body on average: a stream each
            source = [io.BytesIO(body) for body in bodies]
        else:       # a stream costs about 40 µs: many small bodies are joined (a cheap copy) instead
            source = b"".join(bodies)
        body = pl.lit(pl.Series(ends, dtype=pl.UInt64)).search_sorted((lengths + 1).cum_sum(), side="left")
        inputs = pl.lit(pl.Series(index, dtype=pl.UInt32)).gather(body)
    # eager steps, as before: one lazy plan over the scan held about 100 MB more at a large log's peak
    df = pl.scan_lines(source, name="raw").collect().with_columns(_input=inputs)
    return df.with_columns(
        line_no=pl.int_range(1, pl.len() + 1, dtype=pl.UInt32).over("_input"),
        offset=((lengths + 1).cum_sum() - (lengths + 1)).over("_input"),
        length=lengths.cast(pl.UInt32)).select("line_no", "offset", "length", "raw", "_input")


def _is_utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _clean(raw: pl.Expr) -> pl.Expr:
    """Last non-empty carriage-return segment, ANSI removed. A launcher prefix that starts the
    line (``0: ``, ``[default3]:``, ``[1,0]<stderr>:``...) was written once, before the first
    segment: it is kept in front of the last one (a tqdm bar redrawn under ``srun --label``
    would otherwise lose its task label)."""
    no_crlf = raw.str.strip_suffix("\r")
    segments = no_crlf.str.split("\r")
    last_segment = (
        segments
        .list.eval(pl.element().filter(pl.element().str.strip_chars().str.len_chars() > 0))
        .list.last()
        .fill_null("")
    )
    lead = segments.list.first().str.extract(rx(_LEAD_PREFIXES), 0)
    last_segment = (pl.when((lead.str.len_chars() > 0) & ~last_segment.str.starts_with(lead.fill_null("")))
                    .then(pl.concat_str([lead, last_segment])).otherwise(last_segment))
    cleaned = pl.when(no_crlf.str.contains("\r", literal=True)).then(last_segment).otherwise(no_crlf)
    return (
        pl.when(cleaned.str.contains("\x1b", literal=True))
        .then(cleaned.str.replace_all(rx(_ANSI), ""))
        .otherwise(cleaned)
    )


def _cleaned(df: pl.DataFrame) -> pl.DataFrame:
    """``raw`` -> ``text`` (``_clean``), the carriage-return and ANSI work only on the lines that
    have a ``\r`` or an ESC (few: the rest are renamed, not copied)."""
    dirty = df.select(pl.col("raw").str.contains("\r", literal=True)
                      | pl.col("raw").str.contains("\x1b", literal=True)).to_series()
    if not dirty.any():
        return df.rename({"raw": "text"})
    if dirty.all():
        return df.with_columns(text=_clean(pl.col("raw"))).drop("raw")
    fixed = df.filter(dirty).with_columns(raw=_clean(pl.col("raw")))
    return pl.concat([df.filter(~dirty), fixed]).rename({"raw": "text"})   # envelope_frame sorts at the end


def _alternation(prefixes: list[tuple[str, str, dict[str, int]]]) -> tuple[str, list[tuple[int, dict[str, int]]]]:
    """The prefixes as one anchored regex, each pattern a capture group of its own, in order,
    and per pattern (the number of its group, {column: number of the group that holds it}).

    Every pattern is anchored at the line start, so the regex's leftmost-first choice is the
    first pattern (in order) that matches, with the match and groups it has alone: one regex
    does what a ``contains`` and a few ``extract`` per pattern did."""
    bodies, layout, at = [], [], 1
    for name, pattern, groups in prefixes:
        # ``_peel_pass`` reads the groups from the matched prefix alone, which gives the groups
        # the whole line gives only while no pattern looks past its match
        if not pattern.startswith("^") or re.search(r"\\[bBzZ]|\$", pattern):
            raise ValueError(f"prefix {name}: anchored at the start only, please: {pattern}")
        bodies.append(f"({pattern[1:]})")
        layout.append((at, {column: at + group for column, group in groups.items()}))
        at += 1 + re.compile(pattern).groups
    return "^(?:" + "|".join(bodies) + ")", layout


def _peel_pass(df: pl.DataFrame, pattern: str, layout: list[tuple[int, dict[str, int]]]) -> pl.DataFrame:
    """Strip one prefix from every line (each matches ``pattern``: ``_alternation``); its groups
    fill their columns where these are still empty (an outer prefix's value wins over an inner
    one of the same column).

    The groups are read once per distinct prefix (``[rank0]:`` on every other line of a
    training log, ``[rankN]:`` for the 1,000 ranks of a job folder), not once per line:
    capturing with the regex of all prefixes costs ten times a plain match. ``replace`` finds
    the match without its groups, and what it removed is the prefix."""
    text = pl.col("text")
    df = df.with_columns(_rest=text.str.replace(pattern, ""))
    df = df.with_columns(_stripped=text.str.strip_suffix(pl.col("_rest")))
    found = pl.col("_m").struct.field
    candidates: dict[str, list[pl.Expr]] = {}
    for _whole, columns in layout:
        for column, group in columns.items():
            candidates.setdefault(column, []).append(found(str(group)))
    values = {}
    for column, groups in candidates.items():
        # one pattern matched: the other patterns' groups are null
        value = groups[0] if len(groups) == 1 else pl.coalesce(groups)
        dtype = ENVELOPE_SCHEMA[column]
        values[f"_v_{column}"] = value.cast(dtype, strict=False) if dtype != pl.String else \
            pl.when(value == "").then(None).otherwise(value)
    distinct = (df.select(pl.col("_stripped").unique())
                .with_columns(_m=pl.col("_stripped").str.extract_groups(pattern)).select("_stripped", **values))
    df = df.join(distinct, on="_stripped", how="left", maintain_order="left")
    return df.with_columns(
        text=pl.col("_rest"),
        prefix=pl.concat_str([pl.col("prefix").fill_null(""), pl.col("_stripped")]),
        **{column: pl.coalesce(pl.col(column), pl.col(f"_v_{column}")) for column in candidates},
    ).drop("_rest", "_stripped", *values)


# A user launcher's `[155] ` rank tag (nccl.md section 2). `[N] ` also starts other lines, so
# it is peeled only where it prefixes a good share of the file, like pdsh's tag.
_RANK_BRACKET = r"^\[(\d+)\] "


def envelope(data: bytes, passes: int = 4) -> pl.DataFrame:
    """Bytes of one input -> one row per physical line with prefixes peeled (see module doc)."""
    return split_inputs(envelope_frame([data], passes), 1)[0]


def envelope_frame(datas: list[bytes], passes: int = 4, ascii: bool | None = None) -> pl.DataFrame:
    """All inputs' lines as one frame: ``ENVELOPE_SCHEMA`` plus ``_input`` (the position in
    ``datas``), in input and line order. A job folder holds hundreds of small per-rank files,
    and a few dozen Polars calls per file cost more than the parsing. The per-file decisions
    (pdsh host tags, ``[N]`` rank tags) are taken per input, and inputs that decided alike are
    peeled together with the same prefix list. Where every input is ASCII (``ascii``, when the
    caller knows), the patterns are compiled with ASCII classes (``postmortem.parsers.ascii_text``)."""
    with reading(all_ascii(datas) if ascii is None else ascii):
        return _envelope_frame(datas, passes)


def _envelope_frame(datas: list[bytes], passes: int) -> pl.DataFrame:
    # the row in input and line order: the frame is put back in it with one sort on this key
    # (sorting on `_input` and `line_no` costs four times as much)
    df = decode_many(datas).with_row_index("_row")
    df = _cleaned(df)
    df = df.with_columns(
        [pl.lit(None, dtype=dtype).alias(name)
         for name, dtype in ENVELOPE_SCHEMA.items() if name not in df.columns]
    )
    columns = [*ENVELOPE_SCHEMA, "_input"]
    if df.is_empty():
        return df.select(columns)
    hosts = _pdsh_hosts_per_input(df)
    brackets = _rank_brackets_per_input(df)
    groups: dict[tuple, list[int]] = {}
    for i in range(len(datas)):
        groups.setdefault((hosts.get(i, frozenset()), i in brackets), []).append(i)
    done = []
    for (group_hosts, group_brackets), members in groups.items():
        part = df.filter(pl.col("_input").is_in(members)) if len(groups) > 1 else df
        done.append(_peel_all(part, _prefixes_for(group_hosts, group_brackets), passes))
    out = pl.concat(done, how="vertical") if len(done) > 1 else done[0]
    return out.sort("_row").select(columns)


def split_inputs(frame: pl.DataFrame, count: int) -> list[pl.DataFrame]:
    """``envelope_frame``'s rows as one frame per input (an empty one where an input has none)."""
    return slice_inputs(by_input(frame), count)


def by_input(frame: pl.DataFrame, input_ids: list[int] | None = None) -> pl.DataFrame:
    """``envelope_frame``'s rows in input order, with ``_input`` and (given ``input_ids``, one per
    input) ``input_id``: what ``slice_inputs`` cuts into one frame per input."""
    frame = frame.select(*ENVELOPE_SCHEMA, "_input")
    if not frame["_input"].is_sorted():
        frame = frame.sort("_input", maintain_order=True)
    if input_ids is not None:
        frame = frame.with_columns(input_id=pl.lit(pl.Series(input_ids, dtype=pl.UInt32)).gather(pl.col("_input")))
    return frame


def slice_inputs(frame: pl.DataFrame, count: int) -> list[pl.DataFrame]:
    """``by_input``'s frame as one frame per input, without ``_input``: slices of one frame (each
    a view, not a copy: thousands of small inputs)."""
    bounds = input_bounds(frame)
    frame = frame.drop("_input")
    empty = frame.clear()
    return [frame.slice(*bounds[i]) if i in bounds else empty for i in range(count)]


def input_bounds(frame: pl.DataFrame) -> dict[int, tuple[int, int]]:
    """Where each input's rows are in ``by_input``'s frame: ``_input`` -> (first row, rows)."""
    sizes = frame["_input"].value_counts(sort=False).rows()
    bounds, at = {}, 0
    for input_index, size in sorted(sizes):
        bounds[input_index] = (at, size)
        at += size
    return bounds


def _prefixes_for(hosts: frozenset[str], rank_brackets: bool) -> list[tuple[str, str, dict[str, int]]]:
    prefixes = [(name, rx(pattern), groups) for name, pattern, groups in _PREFIXES]
    if hosts:
        alternatives = "|".join(sorted((h.replace(".", r"\.") for h in hosts), key=len, reverse=True))
        prefixes.append(("pdsh", rf"^({alternatives}): ", {"host_tag": 1}))
    if rank_brackets:
        prefixes.append(("rank_bracket", rx(_RANK_BRACKET), {"mpi_rank": 1}))
    return prefixes


def _pdsh_hosts_per_input(df: pl.DataFrame) -> dict[int, frozenset[str]]:
    """Per input: host-like tokens that prefix enough of its lines to be pdsh's ``host:`` tag."""
    # the tokens of the lines that have one (few: most lines have no `word: ` at their start)
    tagged = df.filter(pl.col("text").str.contains(rx(_PDSH)))
    if tagged.is_empty():
        return {}
    sizes = df.group_by("_input").agg(_n=pl.len())
    tokens = (tagged.select("_input", token=pl.col("text").str.extract(rx(_PDSH), 1)).drop_nulls("token")
              .group_by("_input", "token").agg(count=pl.len()).join(sizes, on="_input")
              .filter((pl.col("count") >= pl.max_horizontal(pl.lit(3), (pl.col("_n") * 0.1).floor().cast(pl.Int64)))
                      & pl.col("token").str.contains(rx(_HOSTLIKE)) & ~pl.col("token").is_in(list(_NOT_HOSTS))))
    out: dict[int, set[str]] = {}
    for i, token in tokens.select("_input", "token").iter_rows():
        out.setdefault(i, set()).add(token)
    return {i: frozenset(h) for i, h in out.items()}


def _rank_brackets_per_input(df: pl.DataFrame) -> set[int]:
    """Inputs where a user launcher's ``[N] `` tag prefixes a good share of the lines."""
    if not df.select(pl.col("text").str.contains(rx(_RANK_BRACKET)).any()).item():
        return set()
    counts = df.group_by("_input").agg(
        hits=pl.col("text").str.contains(rx(_RANK_BRACKET)).sum(),
        filled=(pl.col("text").str.strip_chars() != "").sum(), n=pl.len())
    chosen = counts.filter(
        (pl.col("hits") >= pl.max_horizontal(pl.lit(3), (pl.col("n") * 0.1).floor().cast(pl.Int64)))
        | ((pl.col("hits") > 0) & (pl.col("hits") == pl.col("filled"))))
    return set(chosen["_input"].to_list())


def _peel_all(df: pl.DataFrame, prefixes: list[tuple[str, str, dict[str, int]]], passes: int) -> pl.DataFrame:
    """Peel every line that could change (``_may_change``); the others (nearly all lines of a
    per-rank log: NCCL and framework lines start with their own header) pass untouched, so the
    dozens of prefix patterns run over the few lines a launcher or collector touched."""
    mask = df.select(_may_change(prefixes)).to_series()
    if not mask.any():
        return df
    if mask.all():
        return _peel_rows(df, prefixes, passes)
    return pl.concat([_peel_rows(df.filter(mask), prefixes, passes), df.filter(~mask)], how="vertical")


def _may_change(prefixes: list[tuple[str, str, dict[str, int]]]) -> pl.Expr:
    """True for a line some step of ``_peel_rows`` could alter: a prefix at its start (every
    pattern is anchored), c10d's rank tag or glog header anywhere, a pager marker or box border."""
    text = pl.col("text")
    starts = "|".join(f"(?:{pattern})" for _name, pattern, _groups in prefixes)
    return (text.str.contains(starts) | text.str.contains_any(["[rank", "ProcessGroupNCCL.cpp:", "│", "┃"])
            | text.str.ends_with("]"))


def _peel_rows(df: pl.DataFrame, prefixes: list[tuple[str, str, dict[str, int]]], passes: int) -> pl.DataFrame:
    # Only a line a pass peeled can have another prefix under it: each pass takes those alone.
    pattern, layout = _alternation(prefixes)
    settled, todo = [], df
    for _ in range(passes):
        hit = todo.select(pl.col("text").str.contains(pattern).fill_null(False)).to_series()
        if not hit.any():
            break
        if not hit.all():
            settled.append(todo.filter(~hit))
            todo = todo.filter(hit)
        todo = _peel_pass(todo, pattern, layout)
    df = pl.concat([*settled, todo], how="vertical") if settled else todo   # envelope_frame sorts
    # the few lines with a glued record, a right-edge artefact or c10d's rank tag left
    edges = df.select(_has_edges()).to_series()
    if not edges.any():
        return df
    if edges.all():
        return _cut_edges(df)
    return pl.concat([df.filter(~edges), _cut_edges(df.filter(edges))], how="vertical")


# c10d's records as they appear glued after a bar (``_GLUED_BAR`` without its `^(.+?)`).
_C10D_RECORD = rf"(?:{_C10D_RANK_ANYWHERE})"
_PAGER_MARK = r"\s{3,}\[\d+/\d+\]$"
_BOX_EDGE = r"\s*[│┃]\s*$"
_RANK_TAG = r"^\[rank(\d+)\]: ?"


def _has_edges() -> pl.Expr:
    """True for a line ``_cut_edges`` changes (false for the others, which it leaves as they are)."""
    text = pl.col("text")
    # `^(.+?)X` matches where X starts after the first character: X anywhere in the rest of
    # the line (a plain match, several times cheaper than the lazy group over every line)
    glued = text.str.slice(1).str.contains(rx(_C10D_RECORD))
    return (glued | text.str.contains(rx(_PAGER_MARK)) | text.str.contains(rx(_BOX_EDGE))
            | pl.col("prefix").str.contains("│", literal=True) | text.str.contains(rx(_RANK_TAG))).fill_null(False)


def _cut_edges(df: pl.DataFrame) -> pl.DataFrame:
    # A progress bar glued in front of c10d's `[rankN]:` (no newline between them): cut there.
    # The bar is taken as text (a regex group), never as a position: ``str.find`` gives a byte
    # offset and ``str.slice`` counts characters, so one `█` (3 bytes) in the bar shifted the cut
    # by two characters and `[rank3]:` came out as `k3]:` (rank lost, line misattributed).
    glued_bar = pl.col("text").str.extract(rx(_GLUED_BAR), 1)
    df = df.with_columns(_bar=glued_bar).with_columns(
        prefix=pl.when(pl.col("_bar").is_not_null())
        .then(pl.concat_str([pl.col("prefix").fill_null(""), pl.col("_bar")]))
        .otherwise(pl.col("prefix")),
        text=pl.when(pl.col("_bar").is_not_null())
        .then(pl.col("text").str.strip_prefix(pl.col("_bar"))).otherwise(pl.col("text")),
    ).drop("_bar")
    # Right-edge artefacts of terminal copies: a pager's `[22/1819]` position marker, and the
    # closing border plus padding of a k9s/TUI box (nccl.md section 2).
    df = df.with_columns(text=pl.col("text").str.replace(rx(_PAGER_MARK), "").str.replace(rx(_BOX_EDGE), ""))
    df = df.with_columns(text=pl.when(pl.col("prefix").str.contains("│", literal=True))
                         .then(pl.col("text").str.strip_chars_end()).otherwise(pl.col("text")))
    glued = pl.col("text").str.extract(rx(_RANK_TAG), 1).cast(pl.Int32, strict=False)
    return df.with_columns(
        rank_tag=pl.coalesce(pl.col("rank_tag"), glued),
        text=pl.col("text").str.replace(rx(r"^\[rank\d+\]: ?"), ""),
    )


STREAM_COLUMNS = ("srun_task", "mpi_rank", "host_tag", "ray_pid", "local_rank", "rank_tag")


def with_stream(lines: pl.DataFrame, seq: pl.Series | None = None) -> pl.DataFrame:
    """``line_no``, ``text``, plus ``_stream`` (the launcher-prefix identity of a line: lines of
    one process in an interleaved file share it) and ``_seq`` (the row's position within its
    stream), so multi-line blocks can be followed per process. ``seq``: the ``_seq`` the caller
    already knows (``with_stream_holding``)."""
    text = pl.col("text").fill_null("")
    split = _stream_split(lines) if seq is None else None
    if split is not None:   # the streams known from their columns: one query
        return lines.select("line_no", text, _stream=_stream_key(lines), _seq=_stream_seq(split))
    df = lines.select("line_no", text, _stream=_stream_key(lines))
    if seq is None:
        if df.height > 0 and df["_stream"].n_unique() > 1:
            return df.with_columns(_seq=pl.int_range(pl.len(), dtype=pl.Int64).over("_stream"))
        seq = df["line_no"].cast(pl.Int64)
    # a Series added by position, not by a query: a Polars call costs more than this work
    return df.hstack([seq.alias("_seq")])


def _stream_key(lines: pl.DataFrame) -> pl.Expr:
    """``with_stream``'s ``_stream``: the stream columns' values joined by ``|`` (a null as "")."""
    # ``input_id`` is there when a batched parser sees many inputs at once (postmortem.analyzer.ingest):
    # lines of different inputs are never one stream.
    cols = [c for c in ("input_id", *STREAM_COLUMNS) if c in lines.columns]
    if not cols:
        return pl.lit("")
    return pl.concat_str([pl.col(c).cast(pl.String).fill_null("") for c in cols], separator="|")


def _stream_seq(split: list[pl.Expr]) -> pl.Expr:
    """``_seq`` of the streams ``split`` (``_stream_split``, not None) makes: a row's position in
    its stream, or its line number where the frame is one stream."""
    return pl.int_range(pl.len(), dtype=pl.Int64).over(split) if split else pl.col("line_no").cast(pl.Int64)


# A per-file parser can be handed several inputs at once (``postmortem.analyzer.ingest``, ``AT_ONCE``):
# its frame then has ``input_id``, and what one input's lines say must stay that input's. These
# three give such a parser the input of a line (``_file``), and which inputs hold what.

def file_of(lines: pl.DataFrame) -> pl.Expr | pl.Series:
    """The input of each line of ``lines``: its ``input_id``, or 0 where the frame is one input."""
    return lines["input_id"] if "input_id" in lines.columns else pl.lit(0, dtype=pl.UInt32)


def files_where(lines: pl.DataFrame, **flags: pl.Expr) -> pl.DataFrame:
    """``_file`` and, per input, each of ``flags`` (an aggregation over its lines, such as
    ``text.str.contains(X).any()``): one row per input of ``lines``."""
    if "input_id" in lines.columns:
        return lines.group_by(pl.col("input_id").alias("_file")).agg(**flags)
    return lines.select(_file=pl.lit(0, dtype=pl.UInt32), **flags)


def of_files(frame: pl.DataFrame, found: pl.DataFrame, flag: str) -> pl.DataFrame | None:
    """The rows of ``frame`` (with ``_file``) of the inputs ``found`` (``files_where``) flags;
    None when no input is flagged."""
    files = found["_file"].filter(found[flag])     # a null flag is no input (Series.filter drops it)
    if files.is_empty():
        return None
    return frame if len(files) == found.height else frame.filter(pl.col("_file").is_in(among(files)))


def any_literal(text: pl.Expr, literals) -> pl.Expr:
    """True where ``text`` holds one of ``literals`` (plain substrings). One regex of escaped
    alternatives: the regex engine's SIMD multi-literal search reads a 50 MB chunk several times
    faster than one ``str.contains`` per literal, and than ``str.contains_any`` (plain Aho-Corasick)."""
    literals = _without_superstrings(literals)
    # A one-character literal is searched alone (memchr): in the alternation it would make the
    # multi-literal search stop at every other byte.
    short = [literal for literal in literals if len(literal) <= 1]
    long = [literal for literal in literals if len(literal) > 1]
    parts = [text.str.contains(literal, literal=True) for literal in short]
    if long:
        parts.append(text.str.contains("|".join(pl.escape_regex(literal) for literal in long)))
    return pl.any_horizontal(parts) if len(parts) > 1 else parts[0] if parts else pl.lit(False)


def _without_superstrings(literals) -> list[str]:
    """``literals`` less those that hold another (a line holding ``"saving checkpoint"`` holds
    ``"checkpoint"``): the same lines match, and fewer alternatives search faster."""
    unique = sorted(set(literals), key=lambda literal: (len(literal), literal))
    return [a for i, a in enumerate(unique) if not any(b in a for b in unique[:i])]


def with_stream_where(lines: pl.DataFrame, keep: pl.Expr, carry: tuple[str, ...] = ()) -> pl.DataFrame:
    """``with_stream(lines).filter(keep)`` (``keep`` read on ``text``, a null text as ""), without
    building the stream key of the rows ``keep`` drops: a parser routes its candidate lines with
    it, so the lines that are not its own cost one scan. ``_stream`` and ``_seq`` of the rows kept
    are those of the whole frame (``_seq`` counts every line of the stream, so that two rows
    are contiguous exactly when no line of their stream lies between them). ``carry``: columns of
    ``lines`` the rows kept keep too."""
    split = _stream_split(lines)
    if split is None:   # a stream key this shortcut cannot vouch for: the whole frame's
        mask = lines.lazy().select(pl.col("text").fill_null("")).select(keep).collect(engine="in-memory").to_series()
        return with_stream(lines).filter(mask).hstack([lines[c].filter(mask) for c in carry])
    # one query: _seq numbered over every line (a window, which the filter after it cannot skip)
    plan = lines.lazy().with_columns(pl.col("text").fill_null(""))
    if split:
        plan = plan.with_columns(_seq=_stream_seq(split))
    seq = pl.col("_seq") if split else _stream_seq(split).alias("_seq")
    return plan.filter(keep).select("line_no", "text", _stream_key(lines).alias("_stream"), seq, *carry) \
        .collect(engine="in-memory")


def with_stream_holding(lines: pl.DataFrame, mark: pl.Expr) -> pl.DataFrame:
    """``with_stream(lines)`` at every line of the streams that hold a line ``mark`` picks (read
    on ``text``, a null text as ""): a parser that follows blocks through any line of a stream
    (tracebacks, faulthandler dumps) reads only the streams it has something in. ``_stream`` and
    ``_seq`` are the whole frame's."""
    split = _stream_split(lines)
    if split is None:   # a stream key this shortcut cannot vouch for: the whole frame's
        return with_stream(lines).filter(mark.any().over("_stream"))
    filled = lines.with_columns(pl.col("text").fill_null(""))
    if not split:       # one stream
        return with_stream(lines if filled.select(mark.any()).item() else lines.clear())
    picked = filled.select(_keep=mark.any().over(split), _seq=pl.int_range(pl.len(), dtype=pl.Int64).over(split))
    return with_stream(lines.filter(picked["_keep"]), seq=picked["_seq"].filter(picked["_keep"]))


def _stream_split(lines: pl.DataFrame) -> list[pl.Expr] | None:
    """Columns that split ``lines`` into ``with_stream``'s streams as its key does ([]: one stream),
    or None where that is not certain. The key joins the stream columns' text (null as "") with
    ``|``: a column holding one value throughout splits nothing, and the others split the frame as
    their tuple does (an integer prints without ``|``, so the joined text is ambiguous only where a
    string column holding ``|`` varies beside another varying column)."""
    cols = [c for c in ("input_id", *STREAM_COLUMNS) if c in lines.columns]
    schema = lines.schema
    if not cols:
        return []
    if any(not (schema[c].is_integer() or schema[c] == pl.String) for c in cols):
        return None
    key = {c: pl.col(c).fill_null("") if schema[c] == pl.String else pl.col(c) for c in cols}
    varying = [c for c in cols if not _one_value(lines.get_column(c))]
    texts = [c for c in varying if schema[c] == pl.String]
    if len(varying) > 1 and texts and lines.select(
            pl.any_horizontal(pl.col(c).str.contains("|", literal=True).any() for c in texts)).item():
        return None
    return [key[c] for c in varying]


def _one_value(column: pl.Series) -> bool:
    """Whether ``column`` reads as one value in ``with_stream``'s key (a null as "")."""
    nulls = column.null_count()      # kept by the column: the common all-null case costs nothing
    if nulls == column.len():
        return True
    if column.dtype == pl.String:
        return column.fill_null("").n_unique() == 1
    return nulls == 0 and column.min() == column.max()
