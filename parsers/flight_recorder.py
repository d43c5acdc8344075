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

**Pickles are untrusted.** They are never unpickled: ``read_pickle`` is a pickle machine of
its own that knows only the opcodes of dicts, lists, tuples, str, bytes, int, float, bool and
None (all a dump needs), so a pickle that names any class or callable (``os.system``,
``builtins.eval``, a ``__reduce__`` payload) stops at that opcode with a problem message, and
lengths, memo indices and the expansion of shared references are bounded by the file's size
(see "the bounded pickle reader" below; docs/security.md).

Tables (rows carry ``rank`` from the file name, ``rank_source``, ``rank_confidence``;
``line_no`` is the 1-based entry index, 0 for dump-level rows):

* ``collectives`` -- kind ``flight_recorder``: one row per entry (seq = collective_seq_id,
  p2p_seq, op_id, record_id, op (profiling name without ``nccl:``), profiling_name,
  sizes/dtypes as JSON text, numel_in/out, state, retired, is_p2p, timeout_ms, duration_ms,
  ts = time_created, time_created / time_started / time_completed as UTC timestamps, pg
  id/guid/desc, pg_rank, peer, fr_version);
* ``progress`` -- kind ``flight_recorder``: per PG id from ``pg_status``
  (last_enqueued / last_started / last_completed);
* ``stacks`` -- the entries' frames, the shape ``postmortem.parsers.pyspy`` uses plus ``source``,
  ``rank`` and ``record_id``;
* ``pg_ranks`` -- from ``pg_config``: pg_guid, pg_desc, group_rank -> global_rank, group_size;
* ``fr_dumps`` -- one row per dump: version, library version, entry count, first/last
  record id, whether stacks were included, the problems found;
* ``fr_comm_state`` -- ``nccl_comm_state`` flattened to (comm, key, value).
"""

from __future__ import annotations

import ast
import json
import math
import re
import struct as _struct
from datetime import UTC, datetime

import polars as pl

from postmortem.parsers.base import ParseResult, Unreadable, WholeFile
from postmortem.parsers.tables import SHARED

NAME = "flight_recorder"
LABEL = "Flight Recorder"
SAMPLE_LINES: list[str] = []   # not a line format: read whole files with ``parse_dump``

KIND = "flight_recorder"
RANK_SOURCE = "Flight Recorder file name (<prefix><global rank>)"

COLLECTIVES_SCHEMA = SHARED["collectives"].columns_of(NAME)
PROGRESS_SCHEMA = SHARED["progress"].columns_of(NAME)
STACKS_SCHEMA = SHARED["stacks"].columns_of(NAME)
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


# -- the bounded pickle reader ---------------------------------------------------------------
#
# A Flight Recorder pickle needs nothing but dicts, lists, tuples, str, bytes, ints, floats, bools
# and None. ``read_pickle`` is a pickle machine of its own for exactly those (protocols 0-5): it
# never imports or calls anything (there is no opcode here that could), and it bounds what a
# hostile file can make it hold:
#
# * a length (strings, bytes, bytearrays, longs, frames) beyond the bytes left in the file ends
#   the read as a truncation: nothing is allocated for it (a 12-byte BYTEARRAY8 of 3 GiB);
# * a memo index beyond the objects created so far is refused (``\x80\x02N r <2^28> .`` made
#   the C unpickler grow its memo to 2^28 slots: 4.3 GB); the memo is a dict;
# * the objects reachable from the result are counted with every shared reference counted again
#   (what the rows built from them will cost), up to ``MAX_EXPANSION`` times the file's size plus
#   ``MIN_OUTPUT``: shared-reference tuples and ``entries=[E]*n`` are refused, not expanded, and
#   so is a structure that contains itself; nesting deeper than ``MAX_DEPTH`` too.
#
# Opcodes that name a global, build an object or call (GLOBAL, STACK_GLOBAL, INST, OBJ, REDUCE,
# BUILD, NEWOBJ, NEWOBJ_EX, EXT1/2/4, PERSID, BINPERSID, buffers) are refused where they stand.

MAX_EXPANSION = 32          # output units per byte of file ...
MIN_OUTPUT = 64 << 20       # ... plus this many
MAX_DEPTH = 100
_DOUBLE = _struct.Struct('>d')


class Refused(ValueError):
    """The pickle holds something a Flight Recorder dump never does (a global, a call)."""


class Damaged(ValueError):
    """The pickle ends early or is corrupt; ``stack`` and ``metastack`` hold what was built."""

    def __init__(self, message: str, stack=None, metastack=None) -> None:
        super().__init__(message)
        self.stack, self.metastack = stack or [], metastack or []


class TooLarge(ValueError):
    """The pickle would expand past the bound (``MAX_EXPANSION``)."""


_GLOBALS = {b"c": "GLOBAL", b"\x93": "STACK_GLOBAL", b"i": "INST", b"o": "OBJ", b"R": "REDUCE", b"b": "BUILD",
            b"\x81": "NEWOBJ", b"\x92": "NEWOBJ_EX", b"\x82": "EXT1", b"\x83": "EXT2", b"\x84": "EXT4",
            b"P": "PERSID", b"Q": "BINPERSID", b"\x97": "NEXT_BUFFER", b"\x98": "READONLY_BUFFER"}


def read_pickle(data: bytes):
    """The object a pickle of plain containers and scalars describes (``Refused``, ``Damaged``,
    ``TooLarge`` otherwise); see the bounds above."""
    stack, metastack = _run(data)
    if len(stack) != 1:
        raise Damaged("the pickle does not end with one object", stack, metastack)
    _account(stack[0], MAX_EXPANSION * len(data) + MIN_OUTPUT)
    return stack[0]


def _refuse(op: int, at: int, data: bytes, stack: list):
    name = _GLOBALS[bytes([op])]
    if name == "GLOBAL":
        end = data.find(b"\n", at + 1)
        end2 = data.find(b"\n", end + 1) if end >= 0 else -1
        if end2 >= 0:
            module, attr = data[at + 1:end].decode("utf-8", "replace"), data[end + 1:end2].decode("utf-8", "replace")
            raise Refused(f"refused to load the global {module}.{attr} (only plain containers and scalars are accepted)")
    if name == "STACK_GLOBAL" and len(stack) >= 2 and all(isinstance(x, str) for x in stack[-2:]):
        raise Refused(f"refused to load the global {stack[-2]}.{stack[-1]} "
                      "(only plain containers and scalars are accepted)")
    raise Refused(f"refused the pickle opcode {name} at byte {at} (only plain containers and scalars are accepted)")


_REFUSED = frozenset(op[0] for op in _GLOBALS)
_FROM = int.from_bytes


def _run(data: bytes):
    """The pickle machine: one loop, the common opcodes of a dump first. Every length is checked
    against the bytes left before anything is read or made."""
    n = len(data)
    pos = 0
    stack: list = []
    metastack: list = []
    memo: dict[int, object] = {}
    created = 0
    at = 0
    try:
        while True:
            if pos >= n:
                raise EOFError("the pickle ends before its STOP opcode")
            at = pos
            op = data[pos]
            pos += 1
            if op == 0x68:                                  # BINGET
                stack.append(memo[data[pos]])
                pos += 1
            elif op == 0x94:                                # MEMOIZE
                memo[len(memo)] = stack[-1]
            elif op == 0x28:                                # MARK
                metastack.append(stack)
                stack = []
            elif op == 0x7D:                                # EMPTY_DICT
                stack.append({})
                created += 1
            elif op == 0x4B:                                # BININT1
                stack.append(data[pos])
                pos += 1
                created += 1
            elif op == 0x8C:                                # SHORT_BINUNICODE
                size = data[pos]
                end = pos + 1 + size
                if end > n:
                    raise EOFError(f"a length of {size} bytes at byte {at}, past the end of the file")
                stack.append(data[pos + 1:end].decode("utf-8", "surrogatepass"))
                pos = end
                created += 1
            elif op == 0x75:                                # SETITEMS
                items = stack
                stack = metastack.pop()
                _pairs(stack[-1], items)
            elif op == 0x71:                                # BINPUT
                index = data[pos]
                pos += 1
                if index > created:
                    raise ValueError(f"memo index {index} beyond the {created} objects created (byte {at})")
                memo[index] = stack[-1]
            elif op == 0x5D:                                # EMPTY_LIST
                stack.append([])
                created += 1
            elif op == 0x65:                                # APPENDS
                items = stack
                stack = metastack.pop()
                _extend(stack[-1], items)
            elif op == 0x4E:                                # NONE
                stack.append(None)
                created += 1
            elif op == 0x4D:                                # BININT2
                stack.append(data[pos] | data[pos + 1] << 8)
                pos += 2
                created += 1
            elif op == 0x4A:                                # BININT
                if pos + 4 > n:
                    raise EOFError("an int past the end of the file")
                stack.append(_FROM(data[pos:pos + 4], "little", signed=True))
                pos += 4
                created += 1
            elif op == 0x88:
                stack.append(True)
                created += 1
            elif op == 0x89:
                stack.append(False)
                created += 1
            elif op == 0x47:                                # BINFLOAT
                if pos + 8 > n:
                    raise EOFError("a float past the end of the file")
                stack.append(_DOUBLE.unpack_from(data, pos)[0])
                pos += 8
                created += 1
            elif op == 0x61:                                # APPEND
                value = stack.pop()
                _extend(stack[-1], [value])
            elif op == 0x73:                                # SETITEM
                value = stack.pop()
                key = stack.pop()
                _pairs(stack[-1], [key, value])
            elif op == 0x2E:                                # STOP
                return stack, metastack
            elif op in _REFUSED:
                _refuse(op, at, data, stack)
            elif op in (0x6C, 0x74, 0x91, 0x64, 0x31, 0x90):  # LIST, TUPLE, FROZENSET, DICT, POP_MARK, ADDITEMS
                items = stack
                stack = metastack.pop()
                if op == 0x6C:
                    stack.append(items)
                elif op in (0x74, 0x91):
                    stack.append(tuple(items))
                elif op == 0x64:
                    stack.append(_pairs({}, items))
                elif op == 0x90:
                    _extend(stack[-1], items)
                if op != 0x31 and op != 0x90:
                    created += 1
            else:
                pos, created = _other(op, at, pos, data, stack, memo, created)
    except (Refused, TooLarge):
        raise
    except (EOFError, ValueError, TypeError, IndexError, KeyError, OverflowError, UnicodeError, SyntaxError,
            MemoryError, RecursionError, _struct.error) as exc:
        if isinstance(exc, IndexError) and pos >= n:
            exc = EOFError(f"the pickle ends inside the opcode at byte {at}")
        raise Damaged(f"{type(exc).__name__}: {exc}", stack, metastack) from None


def _other(op: int, at: int, pos: int, data: bytes, stack: list, memo: dict, created: int) -> tuple[int, int]:
    """The opcodes a dump rarely uses (protocols 0-1 text forms, long strings and bytes, big ints,
    tuples, DUP, POP, memo by text or 4-byte index): ``(pos, created)`` after it."""
    n = len(data)

    def take(size: int) -> bytes:
        nonlocal pos
        if size < 0 or size > n - pos:
            raise EOFError(f"a length of {size} bytes at byte {at}, past the end of the file ({n - pos} bytes left)")
        out = data[pos:pos + size]
        pos += size
        return out

    def line() -> bytes:
        nonlocal pos
        end = data.find(b"\n", pos)
        if end < 0:
            raise EOFError(f"no end of line after byte {pos}")
        out = data[pos:end]
        pos = end + 1
        return out

    def uint(size: int) -> int:
        return _FROM(take(size), "little")

    push = stack.append
    if op == 0x80:                                  # PROTO
        if uint(1) > 5:
            raise ValueError("unsupported pickle protocol")
        return pos, created
    if op == 0x95:                                  # FRAME: a hint for buffering, nothing is allocated
        uint(8)
        return pos, created
    if op in (0x70, 0x72):                          # PUT, LONG_BINPUT
        index = int(line()) if op == 0x70 else uint(4)
        if index > created:
            raise ValueError(f"memo index {index} beyond the {created} objects created (byte {at})")
        memo[index] = stack[-1]
        return pos, created
    if op in (0x67, 0x6A):                          # GET, LONG_BINGET
        index = int(line()) if op == 0x67 else uint(4)
        if index not in memo:
            raise ValueError(f"memo index {index} was never stored (byte {at})")
        push(memo[index])
        return pos, created
    if op == 0x30:                                  # POP
        stack.pop()
        return pos, created
    if op == 0x32:                                  # DUP
        push(stack[-1])
        return pos, created
    if op == 0x85:                                  # TUPLE1..3
        stack[-1:] = [(stack[-1],)]
    elif op == 0x86:
        if len(stack) < 2:
            raise IndexError("TUPLE2 on a short stack")
        stack[-2:] = [(stack[-2], stack[-1])]
    elif op == 0x87:
        if len(stack) < 3:
            raise IndexError("TUPLE3 on a short stack")
        stack[-3:] = [(stack[-3], stack[-2], stack[-1])]
    elif op == 0x29:                                # EMPTY_TUPLE
        push(())
    elif op == 0x8F:                                # EMPTY_SET: a list (sets are not dump data)
        push([])
    elif op == 0x49:                                # INT (text; 00 and 01 are False and True)
        raw = line()
        push({b"00": False, b"01": True}[raw] if raw in (b"00", b"01") else int(raw))
    elif op == 0x4C:                                # LONG (text)
        push(int(line().rstrip(b"L")))
    elif op == 0x8A:                                # LONG1
        push(_FROM(take(uint(1)), "little", signed=True))
    elif op == 0x8B:                                # LONG4
        push(_FROM(take(uint(4)), "little", signed=True))
    elif op == 0x46:                                # FLOAT (text)
        push(float(line()))
    elif op == 0x53:                                # STRING (text, quoted)
        raw = line()
        if len(raw) < 2 or raw[:1] not in (b"'", b'"') or raw[-1:] != raw[:1]:
            raise ValueError("STRING opcode argument must be quoted")
        push(raw[1:-1].decode("unicode_escape", "replace"))
    elif op == 0x56:                                # UNICODE (text)
        push(line().decode("raw_unicode_escape"))
    elif op in (0x54, 0x55):                        # BINSTRING, SHORT_BINSTRING
        push(take(uint(4) if op == 0x54 else uint(1)).decode("latin-1"))
    elif op in (0x58, 0x8D):                        # BINUNICODE, BINUNICODE8
        push(take(uint(4) if op == 0x58 else uint(8)).decode("utf-8", "surrogatepass"))
    elif op in (0x42, 0x43, 0x8E, 0x96):            # BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8
        push(take(uint({0x42: 4, 0x43: 1}.get(op, 8))))
    else:
        raise ValueError(f"unknown pickle opcode {bytes([op])!r} at byte {at}")
    return pos, created + 1


def _extend(target, items: list) -> None:
    if not isinstance(target, list):
        raise TypeError(f"cannot append to a {type(target).__name__}")
    target.extend(items)


def _pairs(target, items: list):
    if type(target) is not dict or len(items) % 2:
        raise TypeError("SETITEMS needs a dict and key/value pairs")
    try:
        target.update(zip(items[0::2], items[1::2]))
    except TypeError:           # an unhashable key: that pair is dropped
        for key, value in zip(items[0::2], items[1::2]):
            try:
                target[key] = value
            except TypeError:
                pass
    return target


def _account(obj, limit: int) -> None:
    """``TooLarge`` when the objects reachable from ``obj``, each shared reference counted again
    (what rows built from them cost), pass ``limit`` units (about bytes), nest deeper than
    ``MAX_DEPTH``, or contain themselves. Each distinct container is costed once (a cost of its
    own plus its children's): time grows with the file, not with what it would expand to."""
    known: dict[int, tuple[int, int]] = {}     # id -> (cost, height)
    active: set[int] = set()

    def cost(value, depth: int) -> tuple[int, int]:
        if isinstance(value, (str, bytes)):
            return 50 + len(value), 0
        if not isinstance(value, (dict, list, tuple)):
            return 32, 0
        key = id(value)
        if key in known:
            total, height = known[key]
        else:
            if key in active:
                raise TooLarge("it contains itself (a reference cycle)")
            if depth > MAX_DEPTH:
                raise TooLarge(f"nested deeper than {MAX_DEPTH} levels")
            active.add(key)
            if isinstance(value, dict):
                children = value.values()
                total = 100 + 30 * len(value) + sum(50 + len(k) if type(k) is str else 32 for k in value)
            else:
                children = value
                total = 60 + 8 * len(value)
            height = 0
            for child in children:
                kind = type(child)
                if kind is str or kind is bytes:        # the common leaves, costed here (speed)
                    total += 50 + len(child)
                    continue
                if kind is int or kind is float or kind is bool or child is None:
                    total += 32
                    continue
                c, h = cost(child, depth + 1)
                total += c
                if h + 1 > height:
                    height = h + 1
                if total > limit:
                    break
            active.discard(key)
            known[key] = total, height
        if depth + height > MAX_DEPTH:
            raise TooLarge(f"nested deeper than {MAX_DEPTH} levels")
        if total > limit:
            raise TooLarge(f"it expands to more than {limit // 2**20} MiB of objects ({MAX_EXPANSION} times the "
                           f"file's size plus {MIN_OUTPUT >> 20} MiB; shared references count each time they are "
                           "used)")
        return total, height

    cost(obj, 0)


def salvage(exc: Damaged):
    """What a truncated or damaged pickle had built before it ended, or None: the items pushed
    since each MARK are folded into the dict or list they were destined for, innermost first, so
    a dump cut inside its entries keeps every entry before the cut (the last may be partial)."""
    frames = [list(f) for f in exc.metastack] + [list(exc.stack)]
    pending = frames[-1]
    for parent in reversed(frames[:-1]):
        container = parent[-1] if parent else None
        if isinstance(container, dict):
            _pairs(container, pending[:len(pending) // 2 * 2])
        elif isinstance(container, list):
            container.extend(pending)
        pending = parent
    top = frames[0][0] if frames and frames[0] else None
    return top if isinstance(top, dict) else None


# -- the whole-file hooks (postmortem.parsers.base) ------------------------------------------------

_DUMP_NAME = re.compile(r"(?:nccl_trace|flight_?recorder|fr_?trace|fr)[_-]?(?:rank[_-]?)?\d+(?:\.(?:pkl|pickle|bin|dump))?$"
                        r"|\.(?:pkl|pickle)$", re.IGNORECASE)
_DUMP_KEYS = (b"entries", b"pg_status", b"pg_config", b"version")


def sniff(name: str, head: bytes, data: bytes) -> bool:
    """Whether an input is offered to this reader: a pickle (protocol 2-5) whose file name has a
    dump's shape (``nccl_trace_rank_3``, ``*.pkl``) or whose content opens with a dict holding
    one of the dump's keys; a JSON object with the dump's keys. Any other pickle is a binary
    file, never unpickled (and this reader never unpickles either: ``read_pickle``)."""
    if looks_like_pickle(head):
        if _DUMP_NAME.search(name):
            return True
        body = head[2:]
        if body[:1] == b"\x95":          # a protocol 4+ FRAME and its 8-byte length
            body = body[9:]
        return body[:1] == b"}" and any(k in head[:4096] for k in _DUMP_KEYS)
    return looks_like_json_dump(head)


def read_whole(source: WholeFile) -> tuple[dict[str, pl.DataFrame], list[str]]:
    """A dump's tables (``parse_dump``) and its problems, said to be the dump's."""
    try:
        parsed, problems = parse_dump(source.data(), source.display)
    except NotFlightRecorder as exc:
        raise Unreadable(f"{source.display}: {exc}") from None
    return parsed.tables, [f"Flight Recorder dump: {p}" for p in problems]


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


def _not_read(why) -> NotFlightRecorder:
    return NotFlightRecorder(f"Python pickle that is not a readable Flight Recorder dump ({why}); skipped, nothing "
                             "in it was run (pickles are read by postmortem's own bounded reader, never unpickled "
                             "with pickle.load)")


def load(data: bytes, name: str) -> tuple[dict, str]:
    """The dump as a dict and its format ("pickle" | "json"); NotFlightRecorder otherwise."""
    if looks_like_pickle(data[:2]):
        try:
            obj = read_pickle(data)
        except (Refused, TooLarge) as exc:
            raise _not_read(exc) from None
        except Damaged as exc:
            obj = salvage(exc)
            if not isinstance(obj, dict) or not (_FR_KEYS & set(map(str, obj))):
                raise NotFlightRecorder(f"Python pickle that is truncated or corrupt ({exc}); not read as a Flight "
                                        "Recorder dump (pickles are never unpickled with pickle.load)") from None
            try:
                _account(obj, MAX_EXPANSION * len(data) + MIN_OUTPUT)
            except TooLarge as too:
                raise _not_read(too) from None
            obj[_TRUNCATED] = str(exc)
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
