"""The tables several parsers write, declared once: every column with its dtype, and which parser
writes which columns.

``events``, ``collectives``, ``progress``, ``iterations``, ``memory`` and ``stacks`` are filled by more
than one parser (``postmortem.analyzer.ingest`` stacks their frames, a column missing from one
writer's frame is null on its rows). A shared column means one thing in one dtype: ``pid`` is an
Int64 whoever writes it. Each writer takes its ``*_SCHEMA`` from here (``columns_of(NAME)``), and
``tests/test_tables.py`` holds every writer's frames to the declaration, so a writer that adds a
column, changes a dtype or starts writing a table must say so in this file first.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

ALL = "all"   # a writer that writes every column of the table


@dataclass(frozen=True)
class SharedTable:
    columns: dict[str, pl.DataType]                 # every column any writer writes, and its dtype
    writers: dict[str, tuple[str, ...] | str]       # parser NAME -> the columns it writes (or ALL)

    def columns_of(self, writer: str) -> dict[str, pl.DataType]:
        """The columns ``writer`` writes, with their dtypes."""
        names = self.writers[writer]
        return dict(self.columns) if names == ALL else self.select(names)

    def select(self, names: tuple[str, ...]) -> dict[str, pl.DataType]:
        """``names`` with their dtypes, in that order."""
        return {c: self.columns[c] for c in names}


# What every training-framework parser writes (Megatron, DeepSpeed, HF Trainer, torchtitan/Lightning:
# their rows are built by ``postmortem.parsers.trainlog``).
FRAMEWORK_EVENTS = ("line_no", "ts", "level", "kind", "detail", "message", "framework", "iteration", "path",
                    "duration_s", "finished", "value", "reported_rank")
FRAMEWORK_MEMORY = ("line_no", "reported_rank", "label", "iteration", "allocated_mib", "max_allocated_mib",
                    "reserved_mib", "max_reserved_mib", "device_used_mib", "source_unit", "framework", "capacity_mib",
                    "pct_of_capacity")


SHARED: dict[str, SharedTable] = {
    "events": SharedTable(
        columns={
            "line_no": pl.UInt32, "ts": pl.Datetime("us"), "level": pl.String, "src_file": pl.String,
            "pg_id": pl.Int64, "pg_guid": pl.String, "pg_desc": pl.String, "pg_rank": pl.Int64, "kind": pl.String,
            "exc_type": pl.String, "detail": pl.String, "message": pl.String, "error_class": pl.String,
            "host": pl.String, "pid": pl.Int64, "tid": pl.Int64, "cuda_dev": pl.Int64, "cause": pl.String,
            "peer_rank": pl.Int64, "peer": pl.String, "errno_text": pl.String, "errno_name": pl.String,
            "errno": pl.Int64, "result_code": pl.Int64, "result": pl.String, "bytes": pl.Int64,
            "oom_requested_mib": pl.Float64, "oom_capacity_mib": pl.Float64, "oom_free_mib": pl.Float64,
            "oom_allocated_mib": pl.Float64, "oom_unallocated_mib": pl.Float64, "reported_rank": pl.Int64,
            "reported_local_rank": pl.Int64, "reported_pid": pl.Int64, "exitcode": pl.Int64, "signal": pl.String,
            "root_cause": pl.Boolean, "framework": pl.String, "iteration": pl.Int64, "path": pl.String,
            "duration_s": pl.Float64, "finished": pl.Boolean, "value": pl.Float64, "exc_line_no": pl.UInt32,
            "frames": pl.Int64, "op": pl.String, "device": pl.String,
        },
        writers={
            "c10d": ("line_no", "ts", "level", "src_file", "pg_id", "pg_guid", "pg_desc", "pg_rank", "kind",
                "exc_type", "detail", "message"),
            "nccl": ("line_no", "ts", "level", "src_file", "kind", "error_class", "detail", "message", "host", "pid",
                "tid", "cuda_dev", "cause", "peer_rank", "peer", "errno_text", "errno_name", "errno", "result_code",
                "result", "bytes", "oom_requested_mib", "oom_capacity_mib", "oom_free_mib", "oom_allocated_mib",
                "oom_unallocated_mib"),
            "torchrun": ("line_no", "kind", "exc_type", "detail", "message", "reported_rank", "reported_local_rank",
                "reported_pid", "exitcode", "signal", "root_cause"),
            "megatron": FRAMEWORK_EVENTS,
            "nccl_ras": ("line_no", "level", "kind", "detail", "message"),
            "nccl_inspector": ("line_no", "kind", "detail", "message", "level"),
            "torch_errors": ("line_no", "kind", "exc_type", "detail", "message", "exc_line_no", "frames", "value",
                "cause", "peer", "op", "ts", "oom_requested_mib", "oom_capacity_mib", "oom_free_mib",
                "oom_allocated_mib", "oom_unallocated_mib"),
            "deepspeed": FRAMEWORK_EVENTS,
            "hf_trainer": FRAMEWORK_EVENTS,
            "titan_lightning": FRAMEWORK_EVENTS,
            "hwtools": ("line_no", "kind", "level", "detail", "message", "device"),
        },
    ),
    "collectives": SharedTable(
        columns={
            "line_no": pl.UInt32, "ts": pl.Datetime("us"), "level": pl.String, "src_file": pl.String,
            "pg_id": pl.Int64, "pg_guid": pl.String, "pg_desc": pl.String, "pg_rank": pl.Int64, "kind": pl.String,
            "seq": pl.Int64, "op": pl.String, "numel_in": pl.Int64, "numel_out": pl.Int64, "timeout_ms": pl.Int64,
            "ran_for_ms": pl.Int64, "op_count": pl.Int64, "comm": pl.String, "nranks": pl.Int64, "count": pl.Int64,
            "datatype": pl.String, "bytes": pl.Int64, "red_op": pl.String, "root": pl.Int64, "sendbuff": pl.String,
            "recvbuff": pl.String, "stream": pl.String, "host": pl.String, "pid": pl.Int64, "tid": pl.Int64,
            "cuda_dev": pl.Int64, "rank": pl.Int64, "rank_source": pl.String, "rank_confidence": pl.String,
            "record_id": pl.Int64, "p2p_seq": pl.Int64, "op_id": pl.Int64, "profiling_name": pl.String,
            "is_p2p": pl.Boolean, "peer": pl.Int64, "state": pl.String, "retired": pl.Boolean,
            "input_sizes": pl.String, "output_sizes": pl.String, "input_dtypes": pl.String,
            "output_dtypes": pl.String, "duration_ms": pl.Float64, "time_created": pl.Datetime("us", "UTC"),
            "time_started": pl.Datetime("us", "UTC"), "time_completed": pl.Datetime("us", "UTC"),
            "thread_id": pl.String, "thread_name": pl.String, "fr_version": pl.String,
        },
        writers={
            "c10d": ("line_no", "ts", "level", "src_file", "pg_id", "pg_guid", "pg_desc", "pg_rank", "kind", "seq",
                "op", "numel_in", "numel_out", "timeout_ms", "ran_for_ms"),
            "nccl": ("line_no", "kind", "op", "op_count", "comm", "nranks", "count", "datatype", "bytes", "red_op",
                "root", "sendbuff", "recvbuff", "stream", "host", "pid", "tid", "cuda_dev"),
            "flight_recorder": ("line_no", "ts", "level", "src_file", "pg_id", "pg_guid", "pg_desc", "pg_rank",
                "kind", "seq", "op", "numel_in", "numel_out", "timeout_ms", "ran_for_ms", "rank", "rank_source",
                "rank_confidence", "record_id", "p2p_seq", "op_id", "profiling_name", "is_p2p", "peer", "state",
                "retired", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes", "duration_ms",
                "time_created", "time_started", "time_completed", "thread_id", "thread_name", "fr_version"),
        },
    ),
    "progress": SharedTable(
        columns={
            "line_no": pl.UInt32, "ts": pl.Datetime("us"), "level": pl.String, "src_file": pl.String,
            "pg_id": pl.Int64, "pg_guid": pl.String, "pg_desc": pl.String, "pg_rank": pl.Int64, "kind": pl.String,
            "failing_seq": pl.Int64, "last_enqueued": pl.Int64, "last_completed": pl.Int64,
            "detector_rank": pl.Int64, "last_started": pl.Int64, "rank": pl.Int64, "rank_source": pl.String,
            "rank_confidence": pl.String,
        },
        writers={
            "c10d": ("line_no", "ts", "level", "src_file", "pg_id", "pg_guid", "pg_desc", "pg_rank", "kind",
                "failing_seq", "last_enqueued", "last_completed", "detector_rank"),
            "flight_recorder": ("line_no", "ts", "pg_id", "pg_guid", "pg_desc", "pg_rank", "kind", "failing_seq",
                "last_enqueued", "last_started", "last_completed", "rank", "rank_source", "rank_confidence"),
        },
    ),
    "iterations": SharedTable(
        columns={
            "line_no": pl.UInt32, "ts": pl.Datetime("us"), "validation": pl.Boolean, "iteration": pl.Int64,
            "train_iters": pl.Int64, "consumed_samples": pl.Int64, "elapsed_ms": pl.Float64,
            "throughput_tflops": pl.Float64, "learning_rate": pl.Float64, "global_batch_size": pl.Int64,
            "lm_loss": pl.Float64, "loss_scale": pl.Float64, "grad_norm": pl.Float64, "skipped_iterations": pl.Int64,
            "nan_iterations": pl.Int64, "fields": pl.String, "framework": pl.String, "epoch": pl.Float64,
            "tokens_per_s": pl.Float64, "samples_per_s": pl.Float64, "mfu_pct": pl.Float64,
            "consumed_tokens": pl.Int64, "skipped_samples": pl.Int64, "num_zeros": pl.Float64,
            "params_norm": pl.Float64, "energy_j_per_gpu": pl.Float64, "power_w_per_gpu": pl.Float64,
        },
        writers={
            "megatron": ALL,
            "deepspeed": ALL,
            "hf_trainer": ALL,
            "titan_lightning": ALL,
        },
    ),
    "memory": SharedTable(
        columns={
            "line_no": pl.UInt32, "reported_rank": pl.Int64, "label": pl.String, "iteration": pl.Int64,
            "allocated_mib": pl.Float64, "max_allocated_mib": pl.Float64, "reserved_mib": pl.Float64,
            "max_reserved_mib": pl.Float64, "device_used_mib": pl.Float64, "source_unit": pl.String,
            "framework": pl.String, "capacity_mib": pl.Float64, "pct_of_capacity": pl.Float64,
            "oom_format": pl.String, "gpu": pl.Int64, "requested_mib": pl.Float64, "free_mib": pl.Float64,
            "reserved_unallocated_mib": pl.Float64, "private_pools_mib": pl.Float64,
            "process_in_use_mib": pl.Float64, "oom_pid": pl.Int64,
        },
        writers={
            "megatron": FRAMEWORK_MEMORY,
            "torch_errors": ("line_no", "label", "framework", "source_unit", "oom_format", "gpu", "requested_mib",
                "capacity_mib", "free_mib", "allocated_mib", "reserved_mib", "reserved_unallocated_mib",
                "private_pools_mib", "process_in_use_mib", "oom_pid"),
            "deepspeed": FRAMEWORK_MEMORY,
            "titan_lightning": FRAMEWORK_MEMORY,
        },
    ),
    "stacks": SharedTable(
        columns={
            "line_no": pl.UInt32, "dump_index": pl.Int64, "pid": pl.Int64, "cmdline": pl.String,
            "thread_id": pl.String, "thread_name": pl.String, "thread_state": pl.String, "depth": pl.Int64,
            "function": pl.String, "file": pl.String, "file_line": pl.Int64, "dump_line": pl.UInt32,
            "source": pl.String, "rank": pl.Int64, "record_id": pl.Int64,
        },
        writers={
            "pyspy": ("line_no", "dump_index", "pid", "cmdline", "thread_id", "thread_name", "thread_state", "depth",
                "function", "file", "file_line", "dump_line"),
            "torch_errors": ("line_no", "dump_index", "pid", "cmdline", "thread_id", "thread_name", "thread_state",
                "depth", "function", "file", "file_line", "source"),
            "flight_recorder": ("line_no", "dump_index", "pid", "cmdline", "thread_id", "thread_name",
                "thread_state", "depth", "function", "file", "file_line", "source", "rank", "record_id"),
        },
    ),
}
