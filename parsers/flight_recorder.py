"""PyTorch Flight Recorder (FR) dumps: pickle and JSON, every format version.

Reference: ``docs/formats/pytorch-failures.md`` section 9. A dump is one file per rank, named
``<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><global rank>`` (default ``/tmp/nccl_trace_rank_<rank>``;
any prefix, optionally with ``.pkl`` / ``.pickle`` / ``.json``). Top level::

    version            dump-format version ("1.1" .. "2.10"), not the PyTorch version
    pg_config          {pg name: {"name", "desc", "ranks": "[0, 1, ...]"}}   (>= 1.2; ranks are global)
    pg_status          {pg id: {"last_enqueued_collective", "last_started_collective",
                                 "last_completed_collective"}}
    entries            [{record_id, pg_id, process_group: (name, desc), collective_seq_id,
                         p2p_seq_id, op_id, profiling_name, time_created_ns,
                         time_discovered_started_ns, time_discovered_completed_ns,
                         input_sizes, output_sizes, input_dtypes, output_dtypes, state,
                         retired, timeout_ms, duration_ms, is_p2p, frames,
                         thread_id, thread_name}, ...]
    nccl_comm_state    {comm: {key: value}}
    nccl_version / comm_lib_version

The JSON variant (``_dump_nccl_trace_json``) has no stacks and may hold every value as a
string; both are normalised the same way.

**Pickles are untrusted.** They are read with ``SafeUnpickler``, whose ``find_class`` refuses
every global: the FR format needs only dicts, lists, tuples, str, bytes, int, float, bool
and None, which pickle builds without ``find_class``. A pickle that names any class or
callable (``os.system``, ``builtins.eval``, a ``__reduce__`` payload) stops at that opcode,
before anything is called, and yields a problem message instead.

Tables (rows carry ``rank`` from the file name, ``rank_source``, ``rank_confidence``;
``line_no`` is the 1-based entry index, 0 for dump-level rows):

* ``collectives`` -- kind ``flight_recorder``: one row per entry (seq = collective_seq_id,
  p2p_seq, op_id, record_id, op (profiling name without ``nccl:``), profiling_name,
  sizes/dtypes as JSON text, numel_in/out, state, retired, is_p2p, timeout_ms, duration_ms,
  ts = time_created, time_created / time_started / time_completed as UTC timestamps, pg
  id/guid/desc, pg_rank, peer, fr_version);
* ``progress`` -- kind ``flight_recorder``: per PG id from ``pg_status``
  (last_enqueued / last_started / last_completed);
* ``stacks`` -- the entries' frames, the shape ``parsers.pyspy`` uses plus ``source``,
  ``rank`` and ``record_id``;
* ``pg_ranks`` -- from ``pg_config``: pg_guid, pg_desc, group_rank -> global_rank, group_size;
* ``fr_dumps`` -- one row per dump: version, library version, entry count, first/last
  record id, whether stacks were included, the problems found;
* ``fr_comm_state`` -- ``nccl_comm_state`` flattened to (comm, key, value).
"""

from __future__ import annotations

import ast
import io
import json
import math
import pickle
import re
from datetime import UTC, datetime
from struct import error as struct_error

import polars as pl

from parsers.base import ParseResult

NAME = "flight_recorder"
SAMPLE_LINES: list[str] = []   # not a line format: read whole files with ``parse_dump``

KIND = "flight_recorder"
RANK_SOURCE = "Flight Recorder file name (<prefix><global rank>)"

COLLECTIVES_SCHEMA = {
    "line_no": pl.UInt32, "ts": pl.Datetime("us"), "level": pl.String, "src_file": pl.String,
    "pg_id": pl.Int64, "pg_guid": pl.String, "pg_desc": pl.String, "pg_rank": pl.Int64,
    "kind": pl.String, "seq": pl.Int64, "op": pl.String, "numel_in": pl.Int64,
    "numel_out": pl.Int64, "timeout_ms": pl.Int64, "ran_for_ms": pl.Int64,
    "rank": pl.Int64, "rank_source": pl.String, "rank_confidence": pl.String,
    "record_id": pl.Int64, "p2p_seq": pl.Int64, "op_id": pl.Int64, "profiling_name": pl.String,
    "is_p2p": pl.Boolean, "peer": pl.Int64, "state": pl.String, "retired": pl.Boolean,
    "input_sizes": pl.String, "output_sizes": pl.String, "input_dtypes": pl.String,
    "output_dtypes": pl.String, "duration_ms": pl.Float64, "time_created": pl.Datetime("us", "UTC"),
    "time_started": pl.Datetime("us", "UTC"), "time_completed": pl.Datetime("us", "UTC"),
    "thread_id": pl.String, "thread_name": pl.String, "fr_version": pl.String,
}
PROGRESS_SCHEMA = {
    "line_no": pl.UInt32, "ts": pl.Datetime("us"), "pg_id": pl.Int64, "pg_guid": pl.String,
    "pg_desc": pl.String, "pg_rank": pl.Int64, "kind": pl.String, "failing_seq": pl.Int64,
    "last_enqueued": pl.Int64, "last_started": pl.Int64, "last_completed": pl.Int64,
    "rank": pl.Int64, "rank_source": pl.String, "rank_confidence": pl.String,
}
STACKS_SCHEMA = {
    "line_no": pl.UInt32, "dump_index": pl.Int64, "pid": pl.Int64, "cmdline": pl.String,
    "thread_id": pl.String, "thread_name": pl.String, "thread_state": pl.String, "depth": pl.Int64,
    "function": pl.String, "file": pl.String, "file_line": pl.Int64,
    "source": pl.String, "rank": pl.Int64, "record_id": pl.Int64,
}
PG_RANKS_SCHEMA = {
    "line_no": pl.UInt32, "rank": pl.Int64, "pg_guid": pl.String, "pg_desc": pl.String,
    "group_rank": pl.Int64, "global_rank": pl.Int64, "group_size": pl.Int64,
}
DUMPS_SCHEMA = {
    "line_no": pl.UInt32, "rank": pl.Int64, "format": pl.String, "fr_version": pl.String,
    "lib_version": pl.String, "entries": pl.Int64, "first_record_id": pl.Int64,
    "last_record_id": pl.Int64, "with_stacks": pl.Boolean, "problems": pl.String,
}
COMM_STATE_SCHEMA = {"line_no": pl.UInt32, "rank": pl.Int64, "comm": pl.String, "key": pl.String,
                     "value": pl.String}

_FR_KEYS = {"version", "entries", "pg_config", "pg_status"}


class NotFlightRecorder(Exception):
    """The file cannot be read as a Flight Recorder dump; the message says why."""


class SafeUnpickler(pickle.Unpickler):
    """An unpickler that refuses every global: no class is looked up, no callable is called.

    Plain containers and scalars need no ``find_class``; every opcode that could construct an
    object or call a function (GLOBAL, STACK_GLOBAL, INST, OBJ, EXT*, and REDUCE/NEWOBJ/BUILD,
    which need such an object on the stack first) goes through here or ``persistent_load``.
    """

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refused to load the global {module}.{name} "
                                     "(only plain containers and scalars are accepted)")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refused a persistent id (only plain containers and scalars are accepted)")


_FORBIDDEN_OPS = {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "BUILD", "NEWOBJ", "NEWOBJ_EX",
                  "EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID"}


def check_opcodes(data: bytes) -> None:
    """A first, independent check: walk the opcodes (``pickletools.genops`` only decodes, it
    executes nothing) and refuse any that names a global, calls, builds an object or uses the
    extension registry (whose cache would bypass ``find_class``). Damage is left to the loaders."""
    import pickletools

    strings: list[str] = []
    try:
        for op, arg, pos in pickletools.genops(data):
            if isinstance(arg, str):
                strings = (strings + [arg])[-2:]
            if op.name in _FORBIDDEN_OPS:
                if op.name == "GLOBAL" and isinstance(arg, str):
                    name = arg.replace(" ", ".")
                elif op.name == "STACK_GLOBAL" and len(strings) == 2:
                    name = ".".join(strings)
                else:
                    raise pickle.UnpicklingError(f"refused the pickle opcode {op.name} at byte {pos} "
                                                 "(only plain containers and scalars are accepted)")
                raise pickle.UnpicklingError(f"refused to load the global {name} "
                                             "(only plain containers and scalars are accepted)")
    except (ValueError, EOFError, TypeError, struct_error):
        return


def safe_loads(data: bytes):
    """Unpickle ``data`` without ever resolving a global. Raises ``pickle.UnpicklingError``
    (or EOFError/ValueError/...) on anything else."""
    check_opcodes(data)
    return SafeUnpickler(io.BytesIO(data)).load()


class _SalvageUnpickler(pickle._Unpickler):  # the pure-Python unpickler keeps its stacks on error
    find_class = SafeUnpickler.find_class
    persistent_load = SafeUnpickler.persistent_load


def salvage_loads(data: bytes):
    """What a truncated pickle had built before it ended, or None.

    The pure-Python unpickler leaves its work in ``stack`` / ``metastack`` (one level per
    MARK) when the data runs out: the items pushed since each MARK are folded into the dict
    or list they were destined for, innermost first, so a dump cut inside its entries keeps
    every entry before the cut (the last may be partial). Globals stay refused."""
    unpickler = _SalvageUnpickler(io.BytesIO(data))
    try:
        return unpickler.load()
    except pickle.UnpicklingError as exc:
        if str(exc).startswith("refused"):
            raise
    except (EOFError, ValueError, TypeError, IndexError, KeyError, OverflowError, AttributeError,
            struct_error, RecursionError, MemoryError):
        pass
    frames = [list(f) for f in getattr(unpickler, "metastack", [])] + [list(getattr(unpickler, "stack", []))]
    pending = frames[-1]
    for parent in reversed(frames[:-1]):
        container = parent[-1] if parent else None
        if isinstance(container, dict):
            for key, value in zip(pending[0::2], pending[1::2]):
                try:
                    container[key] = value
                except TypeError:  # an unhashable key: drop the pair
                    pass
        elif isinstance(container, list):
            container.extend(pending)
        pending = parent
    top = frames[0][0] if frames and frames[0] else None
    return top if isinstance(top, dict) else None


def looks_like_pickle(head: bytes) -> bool:
    return head[:1] == b"\x80" and len(head) > 1 and head[1] in (2, 3, 4, 5)


def looks_like_json_dump(head: bytes) -> bool:
    """A JSON object with FR's top-level keys near the start."""
    stripped = head.lstrip()
    return stripped[:1] == b"{" and (b'"entries"' in head or b'"pg_status"' in head or b'"pg_config"' in head)


def rank_from_name(name: str) -> int | None:
    """``nccl_trace_rank_12`` / ``myjob_host3_rank_12.pkl`` / ``fr_7.json`` -> the trailing number."""
    base = name.rsplit("/", 1)[-1]
    base = re.sub(r"\.(?:pkl|pickle|json|bin|dump|gz|zst|bz2|xz)$", "", base, flags=re.IGNORECASE)
    base = re.sub(r"\.(?:pkl|pickle|json)$", "", base, flags=re.IGNORECASE)
    match = re.search(r"(\d+)$", base)
    return int(match.group(1)) if match else None


_TRUNCATED = "\x00truncated"   # marker key set by _salvaged (not a str any dump can hold as a key)


def _salvaged(data: bytes, exc: Exception) -> dict:
    """A truncated or corrupt pickle: keep what was built before the damage, if it is FR-shaped."""
    reason = f"{type(exc).__name__}: {exc or 'ran out of data'}"
    try:
        obj = salvage_loads(data)
    except pickle.UnpicklingError as refused:
        raise NotFlightRecorder(f"Python pickle that is not a readable Flight Recorder dump ({refused}); "
                                "skipped, nothing in it was run (pickles are never unpickled with plain "
                                "pickle.load)") from None
    if not isinstance(obj, dict) or not (_FR_KEYS & set(map(str, obj))):
        raise NotFlightRecorder(f"Python pickle that is truncated or corrupt ({reason}); not read as a Flight "
                                "Recorder dump (pickles are never unpickled with plain pickle.load)")
    obj[_TRUNCATED] = reason
    return obj


def load(data: bytes, name: str) -> tuple[dict, str]:
    """The dump as a dict and its format ("pickle" | "json"); NotFlightRecorder otherwise."""
    if looks_like_pickle(data[:2]):
        try:
            obj = safe_loads(data)
        except pickle.UnpicklingError as exc:
            if not str(exc).startswith("refused"):
                obj = _salvaged(data, exc)
            else:
                raise NotFlightRecorder(f"Python pickle that is not a readable Flight Recorder dump ({exc}); "
                                    "skipped, nothing in it was run (pickles are never unpickled with plain "
                                    "pickle.load)") from None
        except (EOFError, ValueError, TypeError, IndexError, KeyError, OverflowError, MemoryError,
                AttributeError, RecursionError, struct_error) as exc:
            obj = _salvaged(data, exc)
        fmt = "pickle"
    else:
        try:
            obj = json.loads(data.decode("utf-8", "replace"))
        except (ValueError, RecursionError) as exc:
            raise NotFlightRecorder(f"Flight Recorder JSON dump that is truncated or corrupt ({exc})") from None
        fmt = "json"
    if not isinstance(obj, dict) or not (_FR_KEYS & set(map(str, obj))):
        what = type(obj).__name__
        raise NotFlightRecorder(f"{'Python pickle' if fmt == 'pickle' else 'JSON file'} holding a {what} "
                                "without Flight Recorder keys (version, entries, pg_config, pg_status); skipped")
    return {(k if k == _TRUNCATED else str(k)): v for k, v in obj.items()}, fmt


# -- value normalisation (the JSON variant may hold every value as a string) -------------------

def _int(value) -> int | None:
    if value is None or isinstance(value, bool):
        return None if value is None else int(value)
    if isinstance(value, int):
        return value if -(1 << 63) <= value < (1 << 63) else None
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and abs(value) < 9e18 else None
    if isinstance(value, (str, bytes)):
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        try:
            return _int(int(text.strip()))
        except ValueError:
            try:
                return _int(float(text))
            except ValueError:
                return None
    return None


def _float(value) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _bool(value) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    if isinstance(value, str):
        return {"true": True, "false": False, "1": True, "0": False}.get(value.strip().lower())
    return None


def _str(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _literal(value):
    """A size/dtype list given as text (JSON dumps) -> a Python list; lists pass through."""
    if isinstance(value, str) and len(value) <= 1 << 16:  # a shape list is short; a huge one only costs time
        try:
            return ast.literal_eval(value)   # literals only: never evaluates code
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return value
    return value


def _shape_list(value) -> list | None:
    value = _literal(value)
    if isinstance(value, tuple):
        value = list(value)
    return value if isinstance(value, list) else None


def _numel(sizes) -> int | None:
    shapes = _shape_list(sizes)
    if shapes is None:
        return None
    total = 0
    for shape in shapes:
        shape = _shape_list(shape)
        if shape is None:
            return None
        n = 1
        for dim in shape:
            d = _int(dim)
            if d is None:
                return None
            n *= d
        total += n
    return total if total < (1 << 63) else None


def _json_text(value) -> str | None:
    value = _literal(value)
    if value is None:
        return None
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return str(value)


def _ts(ns) -> datetime | None:
    n = _int(ns)
    if n is None or n <= 0:
        return None
    try:
        return datetime.fromtimestamp(n / 1e9, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _ranks_list(value) -> list[int] | None:
    value = _literal(value)
    if isinstance(value, (list, tuple)):
        ranks = [_int(r) for r in value]
        return None if any(r is None for r in ranks) else ranks
    return None


_PEER = re.compile(r"(?:send|recv) (\d+)\s*(?:->|<-)\s*(\d+)")


def _op(profiling_name: str | None) -> tuple[str | None, int | None]:
    """``nccl:all_reduce`` -> ("all_reduce", None); ``nccl:send 1->2`` -> ("send", 2)."""
    if not profiling_name:
        return None, None
    name = profiling_name.split(":", 1)[1] if ":" in profiling_name else profiling_name
    peer = None
    match = _PEER.search(name)
    if match:
        peer = int(match.group(2))
    return name.split(" ", 1)[0] or None, peer


# -- the reader --------------------------------------------------------------------------------

def parse_dump(data: bytes, name: str) -> tuple[ParseResult, list[str]]:
    """One dump file -> tables and the problems found (missing keys, bad entries).

    Raises ``NotFlightRecorder`` when the file is not a readable FR dump at all.
    """
    dump, fmt = load(data, name)
    problems: list[str] = []
    if _TRUNCATED in dump:
        problems.append(f"truncated or corrupt pickle ({dump.pop(_TRUNCATED)}); kept what was written before "
                        "the damage (the last entry may be partial)")
    rank = rank_from_name(name)
    if rank is None:
        problems.append("no rank number at the end of the file name; rows have a null rank")
    version = _str(dump.get("version"))
    if version is None:
        problems.append("no 'version' key")
    lib_version = _str(dump.get("comm_lib_version", dump.get("nccl_version")))
    confidence = "derived" if rank is not None else None

    # pg_config: name -> (desc, ranks)
    pg_config = dump.get("pg_config")
    pg_rows = []
    members: dict[str, list[int]] = {}
    descs: dict[str, str | None] = {}
    if isinstance(pg_config, dict):
        for key, cfg in pg_config.items():
            if not isinstance(cfg, dict):
                problems.append(f"pg_config[{key!r}] is not a dict")
                continue
            guid = _str(cfg.get("name", key))
            descs[guid] = _str(cfg.get("desc"))
            ranks = _ranks_list(cfg.get("ranks"))
            if ranks is None:
                problems.append(f"pg_config[{key!r}] has unreadable ranks {cfg.get('ranks')!r}")
                continue
            members[guid] = ranks
            for group_rank, global_rank in enumerate(ranks):
                pg_rows.append({"line_no": 0, "rank": rank, "pg_guid": guid, "pg_desc": descs[guid],
                                "group_rank": group_rank, "global_rank": global_rank, "group_size": len(ranks)})
    elif pg_config is not None:
        problems.append("pg_config is not a dict")
    elif version not in ("1.0", "1.1"):
        problems.append("no 'pg_config' key (group membership unknown)")

    entries = dump.get("entries")
    if entries is None:
        # Not damage: dumps taken with includeCollectives=False, and JSON dumps of an empty ring,
        # have no entries key (fr_dumps.entries says 0).
        entries = []
    elif not isinstance(entries, (list, tuple)):
        problems.append("'entries' is not a list")
        entries = []
    coll_rows = []
    stack_cols: dict[str, list] = {k: [] for k in ("line_no", "thread_id", "thread_name", "depth", "function",
                                                   "file", "file_line", "record_id")}
    pg_names: dict[int, tuple[str | None, str | None]] = {}
    bad = 0
    with_stacks = False
    for index, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            bad += 1
            continue
        pg = entry.get("process_group")
        pg = _literal(pg)
        guid, desc = (None, None)
        if isinstance(pg, (list, tuple)) and pg:
            guid = _str(pg[0])
            desc = _str(pg[1]) if len(pg) > 1 else None
        pg_id = _int(entry.get("pg_id"))
        if pg_id is not None and guid is not None:
            pg_names.setdefault(pg_id, (guid, desc))
        profiling = _str(entry.get("profiling_name"))
        op, peer = _op(profiling)
        group = members.get(guid) if guid is not None else None
        pg_rank = group.index(rank) if group and rank in group else None
        created = _ts(entry.get("time_created_ns"))
        coll_rows.append({
            "line_no": index, "ts": created.replace(tzinfo=None) if created else None, "level": None,
            "src_file": None, "pg_id": pg_id, "pg_guid": guid, "pg_desc": desc, "pg_rank": pg_rank,
            "kind": KIND, "seq": _int(entry.get("collective_seq_id")), "op": op,
            "numel_in": _numel(entry.get("input_sizes")), "numel_out": _numel(entry.get("output_sizes")),
            "timeout_ms": _int(entry.get("timeout_ms")), "ran_for_ms": None,
            "rank": rank, "rank_source": RANK_SOURCE if rank is not None else None, "rank_confidence": confidence,
            "record_id": _int(entry.get("record_id")), "p2p_seq": _int(entry.get("p2p_seq_id")),
            "op_id": _int(entry.get("op_id")), "profiling_name": profiling,
            "is_p2p": _bool(entry.get("is_p2p")), "peer": peer, "state": _str(entry.get("state")),
            "retired": _bool(entry.get("retired")),
            "input_sizes": _json_text(entry.get("input_sizes")), "output_sizes": _json_text(entry.get("output_sizes")),
            "input_dtypes": _json_text(entry.get("input_dtypes")), "output_dtypes": _json_text(entry.get("output_dtypes")),
            "duration_ms": _float(entry.get("duration_ms")), "time_created": created,
            "time_started": _ts(entry.get("time_discovered_started_ns")),
            "time_completed": _ts(entry.get("time_discovered_completed_ns")),
            "thread_id": _str(entry.get("thread_id")), "thread_name": _str(entry.get("thread_name")),
            "fr_version": version,
        })
        frames = entry.get("frames")
        if isinstance(frames, (list, tuple)):
            # Columns, not row dicts: a 2000-entry dump with stacks has tens of thousands of frames.
            record_id, thread_id, thread_name = _int(entry.get("record_id")), _str(entry.get("thread_id")), \
                _str(entry.get("thread_name"))
            for depth, frame in enumerate(frames):
                if not isinstance(frame, dict):
                    continue
                with_stacks = True
                stack_cols["line_no"].append(index)
                stack_cols["thread_id"].append(thread_id)
                stack_cols["thread_name"].append(thread_name)
                stack_cols["depth"].append(depth)
                stack_cols["function"].append(_str(frame.get("name")))
                stack_cols["file"].append(_str(frame.get("filename")))
                stack_cols["file_line"].append(_int(frame.get("line")))
                stack_cols["record_id"].append(record_id)
    if bad:
        problems.append(f"{bad} entries are not dicts and were skipped")

    progress_rows = []
    pg_status = dump.get("pg_status")
    if isinstance(pg_status, dict):
        for key, status in pg_status.items():
            if not isinstance(status, dict):
                problems.append(f"pg_status[{key!r}] is not a dict")
                continue
            pg_id = _int(key)
            guid, desc = pg_names.get(pg_id, (None, None)) if pg_id is not None else (None, None)
            if guid is None and pg_id is not None and str(pg_id) in descs:
                guid = str(pg_id)   # no entry of this PG left in the ring; the default PG's name is its id
                desc = descs.get(guid)
            group = members.get(guid) if guid is not None else None
            progress_rows.append({
                "line_no": 0, "ts": None, "pg_id": pg_id, "pg_guid": guid, "pg_desc": desc,
                "pg_rank": group.index(rank) if group and rank in group else None, "kind": KIND,
                "failing_seq": None,
                "last_enqueued": _int(status.get("last_enqueued_collective")),
                "last_started": _int(status.get("last_started_collective")),
                "last_completed": _int(status.get("last_completed_collective")),
                "rank": rank, "rank_source": RANK_SOURCE if rank is not None else None,
                "rank_confidence": confidence,
            })
    elif pg_status is not None:
        problems.append("pg_status is not a dict")
    elif version not in ("1.0", "1.1"):
        problems.append("no 'pg_status' key (per-group progress unknown)")

    comm_rows = []
    comm_state = dump.get("nccl_comm_state")
    if isinstance(comm_state, dict):
        for comm, state in comm_state.items():
            items = state.items() if isinstance(state, dict) else [("value", state)]
            for key, value in items:
                comm_rows.append({"line_no": 0, "rank": rank, "comm": _str(comm), "key": _str(key),
                                  "value": _str(value)})

    record_ids = [r["record_id"] for r in coll_rows if r["record_id"] is not None]
    dumps = pl.DataFrame([{
        "line_no": 0, "rank": rank, "format": fmt, "fr_version": version, "lib_version": lib_version,
        "entries": len(coll_rows), "first_record_id": min(record_ids) if record_ids else None,
        "last_record_id": max(record_ids) if record_ids else None, "with_stacks": with_stacks,
        "problems": "; ".join(problems) or None,
    }], schema=DUMPS_SCHEMA)
    tables = {
        "collectives": pl.DataFrame(coll_rows, schema=COLLECTIVES_SCHEMA),
        "progress": pl.DataFrame(progress_rows, schema=PROGRESS_SCHEMA),
        "stacks": pl.DataFrame(stack_cols, schema={k: STACKS_SCHEMA[k] for k in stack_cols}).with_columns(
            source=pl.lit(KIND), rank=pl.lit(rank, dtype=pl.Int64)).select(
            [pl.col(k) if k in stack_cols or k in ("source", "rank") else pl.lit(None, dtype=t).alias(k)
             for k, t in STACKS_SCHEMA.items()]).cast(STACKS_SCHEMA),
        "pg_ranks": pl.DataFrame(pg_rows, schema=PG_RANKS_SCHEMA),
        "fr_dumps": dumps,
        "fr_comm_state": pl.DataFrame(comm_rows, schema=COMM_STATE_SCHEMA),
    }
    return ParseResult(tables=tables, consumed=pl.Series("line_no", [], dtype=pl.UInt32)), problems
