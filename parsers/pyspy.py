"""py-spy ``dump`` output (``docs/formats/pytorch-failures.md`` section 8).

Line kinds handled (py-spy 0.3.x and 0.4.x print the same shapes):

* ``Process <pid>: <command line>`` -- starts a dump (``dump_index`` counts these, from 0, in
  input order; ``dump_line`` is its line, so ``postmortem.analyzer.identity`` can give the whole dump
  the rank of that pid); only when the next line of its stream is py-spy's
  ``Python v3.11.8 (<interpreter path>)``, so a log line ``Process 12: started`` is not a dump;
* ``Thread <tid> (idle|active|active+gil|gil): "<name>"`` -- ``tid`` as printed: decimal (the
  OS thread id) or hex (``0x7FA6E7C01740``, the pthread id when the OS id is unknown); the
  name part is absent for unnamed threads;
* frames ``    <function> (<file>:<line>)``, innermost first (``depth`` 0), and native
  frames from ``--native``: ``    poll (libc.so.6)`` (no line: ``file_line`` null) or
  ``    pollForEvents (glfw/backend_utils.c:321)``; C++ names with spaces and parentheses
  (``c10d::ProcessGroupNCCL::WorkNCCL::wait(std::chrono::duration<long, ...>)``) keep them;
* ``--locals`` output under a frame (``        Arguments:``, ``        Locals:``, and
  ``            name: repr`` lines): consumed, not tabulated.

Dumps can be concatenated in one file or embedded in a log, behind launcher prefixes (the
envelope peeled them). A thread block is followed per prefix stream, so dumps that several
``srun`` tasks print at once stay apart; a block ends at the first line of its stream that is
not a frame or ``--locals`` line. Frames of a thread header that has no ``Process`` line
before it (a partial paste) get null ``dump_index``/``pid``/``cmdline``.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.ascii_text import rx
from postmortem.parsers.lines import with_stream_where

from postmortem.parsers.base import ParseResult, consumed_of, to_int
from postmortem.parsers.tables import SHARED

NAME = "pyspy"

SAMPLE_LINES = [
    "Process 1732: /usr/bin/python3 -u pretrain_gpt.py --tensor-model-parallel-size 1",
    "Python v3.11.8 (/usr/bin/python3.11)",
    'Thread 1732 (active+gil): "MainThread"',
    "    all_reduce (torch/distributed/distributed_c10d.py:2050)",
    "    wrapper (torch/distributed/c10d_logger.py:47)",
    "    train_step (megatron/training/training.py:915)",
    "        Arguments:",
    "            model: [DistributedDataParallel]",
    "        Locals:",
    "            iteration: 1200",
    "    <module> (pretrain_gpt.py:300)",
    'Thread 0x7FA6E7C01740 (idle): "Thread-2 (_pin_memory_loop)"',
    "    wait (threading.py:324)",
    "    poll (libc.so.6)",
    "    pollForEvents (glfw/backend_utils.c:321)",
    "Thread 1801 (active)",
    "    c10d::ProcessGroupNCCL::WorkNCCL::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)"
    " (libtorch_cuda.so)",
]

STACKS_SCHEMA = SHARED["stacks"].columns_of(NAME)
# ``dump_line`` holds a line number (the dump's ``Process`` header): analyzer.ingest maps it
# back when it parses many inputs at once.
LINE_NUMBER_COLUMNS = {"stacks": ("dump_line",)}


_PROCESS = r"^\s*Process (?P<pid>\d+): (?P<cmdline>.*?)\s*$"
_PYTHON = r"^\s*Python v\d+\.\d+(?:\.\d+)?\S* \(.*\)\s*$"
_THREAD = (
    r'^\s*Thread (?P<tid>0[xX][0-9A-Fa-f]+|\d+) \((?P<state>idle|active\+gil|active|gil)\)'
    r'(?:: "(?P<name>.*)")?\s*$'
)
# Frame: two to seven spaces, a name, then the last parenthesised group `(file[:line])`.
_FRAME = r"^ {2,7}(?P<function>\S.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)\s*$"
_LOCALS_HEAD = r"^ {6,}(?:Arguments|Locals):\s*$"
_LOCAL_VAR = r"^ {8,}\S"




def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema=STACKS_SCHEMA)



def file_gate(text: pl.Expr) -> pl.Expr:
    """A line this parser could start from: an input without one gives nothing, so the batch
    leaves it out (``postmortem.analyzer.ingest._parse_batched``). A thread header, or the ``Python
    v`` line of a dump's header pair (a dump cut short after its header, as py-spy leaves one it
    could not sample, is understood too). tests/test_batched_parsing.py holds the skip to the full
    run."""
    return text.str.contains("Thread ", literal=True) | text.str.contains("Python v", literal=True)


def parse(lines: pl.DataFrame) -> ParseResult:
    if lines is None or lines.is_empty() or "text" not in lines.columns:
        return ParseResult(tables={"stacks": _empty()})
    t = pl.col("text")
    # Cheap gate: no thread header nor header pair anywhere means no dump in these inputs. (A
    # header pair counts alone too: read with other inputs, as it is in a batch, it did.)
    if not lines.select(file_gate(t).any()).item():
        return ParseResult(tables={"stacks": _empty()})
    # Only the candidate lines get a stream key (with the whole frame's line count per stream).
    # Many inputs at once (postmortem.analyzer.ingest): dumps are numbered per input, as for one input.
    many = "input_id" in lines.columns
    cand = with_stream_where(lines, t.str.contains("Thread ", literal=True)
                             | t.str.contains("Process ", literal=True)
                             | t.str.contains("Python v", literal=True)
                             | t.str.starts_with("  "), carry=("input_id",) if many else ())
    cand = cand.rename({"input_id": "_input"}) if many else cand.with_columns(_input=pl.lit(0))
    thread = t.str.extract_groups(rx(_THREAD))
    process = t.str.extract_groups(rx(_PROCESS))
    cand = cand.with_columns(
        tid=thread.struct.field("tid"),
        state=thread.struct.field("state"),
        tname=thread.struct.field("name"),
        pid=to_int(process.struct.field("pid")),
        cmdline=process.struct.field("cmdline"),
    ).with_columns(
        kind=pl.when(pl.col("tid").is_not_null()).then(pl.lit("thread"))
        .when(pl.col("cmdline").is_not_null()).then(pl.lit("process"))
        .when(t.str.contains(rx(_PYTHON))).then(pl.lit("python"))
        .when(t.str.contains(rx(_LOCALS_HEAD))).then(pl.lit("locals"))
        .when(t.str.contains(rx(_FRAME))).then(pl.lit("frame"))
        .when(t.str.contains(rx(_LOCAL_VAR))).then(pl.lit("var"))
        .otherwise(None)
    ).filter(pl.col("kind").is_not_null())
    if cand.is_empty():
        return ParseResult(tables={"stacks": _empty()})

    s = "_stream"
    contiguous_prev = (pl.col("_seq").shift(1).over(s) == pl.col("_seq") - 1).fill_null(False)
    contiguous_next = (pl.col("_seq").shift(-1).over(s) == pl.col("_seq") + 1).fill_null(False)
    # `Process <pid>: ...` counts only when py-spy's `Python v...` line follows it.
    header_pair = (
        (pl.col("kind") == "process") & contiguous_next & (pl.col("kind").shift(-1).over(s) == "python")
    ) | ((pl.col("kind") == "python") & contiguous_prev & (pl.col("kind").shift(1).over(s) == "process"))
    cand = cand.filter(~pl.col("kind").is_in(["process", "python"]) | header_pair.fill_null(False))
    if cand.is_empty():
        return ParseResult(tables={"stacks": _empty()})
    # A thread block: the header and the frame / locals lines right after it, contiguous.
    inner = pl.col("kind").is_in(["frame", "locals", "var"])
    breaks = ~inner | ~contiguous_prev
    cand = cand.with_columns(_run=breaks.cast(pl.Int64).cum_sum().over(s))
    cand = cand.with_columns(_lead=pl.col("kind").first().over([s, "_run"]))
    # `--locals` variable lines only count under a locals heading of the same block.
    cand = cand.with_columns(
        _in_locals=pl.when(pl.col("kind") == "locals").then(True)
        .when(pl.col("kind") == "frame").then(False)
        .forward_fill().over([s, "_run"]).fill_null(False)
    )
    in_thread = pl.col("_lead") == "thread"
    understood = (
        pl.col("kind").is_in(["thread", "process", "python"])
        | (in_thread & pl.col("kind").is_in(["frame", "locals"]))
        | (in_thread & (pl.col("kind") == "var") & pl.col("_in_locals"))
    )
    # Lines after a stray `var` that is not under a locals heading end the block.
    cand = cand.filter(understood)
    if cand.is_empty():
        return ParseResult(tables={"stacks": _empty()})
    contiguous_prev = (pl.col("_seq").shift(1).over(s) == pl.col("_seq") - 1).fill_null(False)
    breaks = ~pl.col("kind").is_in(["frame", "locals", "var"]) | ~contiguous_prev
    cand = cand.with_columns(_run=breaks.cast(pl.Int64).cum_sum().over(s))
    cand = cand.with_columns(_lead=pl.col("kind").first().over([s, "_run"]))
    cand = cand.filter(
        ~pl.col("kind").is_in(["frame", "locals", "var"]) | (pl.col("_lead") == "thread")
    )

    # Dump identity: global index of each Process header, carried down its stream; each
    # frame points at its thread header (a Process header in between resets it).
    is_process = pl.col("kind") == "process"
    is_thread = pl.col("kind") == "thread"
    cand = cand.with_columns(
        dump_index=pl.when(is_process).then(is_process.cast(pl.Int64).cum_sum().over("_input") - 1),
        _proc_ln=pl.when(is_process).then(pl.col("line_no")).forward_fill().over(s),
        _thread_ln=pl.when(is_thread).then(pl.col("line_no")).when(is_process).then(0)
        .forward_fill().over(s),
    )
    processes = cand.filter(is_process).select(
        _proc_ln="line_no", dump_index="dump_index", pid="pid", cmdline="cmdline",
        dump_line=pl.col("line_no"),
    )
    threads = cand.filter(is_thread).select(
        _thread_ln="line_no", thread_id="tid", thread_name="tname", thread_state="state"
    )
    frames = cand.filter((pl.col("kind") == "frame") & (pl.col("_lead") == "thread"))
    fr = pl.col("text").str.extract_groups(rx(_FRAME))
    frames = frames.with_columns(
        function=fr.struct.field("function"),
        file=fr.struct.field("file"),
        file_line=to_int(fr.struct.field("line")),
        depth=pl.int_range(pl.len(), dtype=pl.Int64).over([s, "_thread_ln"]),
    ).drop("dump_index", "pid", "cmdline")
    frames = frames.join(threads, on="_thread_ln", how="left", maintain_order="left").join(
        processes, on="_proc_ln", how="left", maintain_order="left"
    )
    stacks = frames.select(
        [pl.col(c).cast(dtype, strict=False) for c, dtype in STACKS_SCHEMA.items()]
    )
    consumed = consumed_of(cand.select("line_no"))
    return ParseResult(tables={"stacks": stacks}, consumed=consumed)
