"""Profiled runs: per-rank Nsight Systems SQLite exports and PyTorch profiler (Kineto) traces.

Follows ``docs/formats/nsys-and-traces.md`` section 10. Each nsys file has the tables
``postmortem.parsers.nsys`` reads, created with the DDL (column names, types, NOT NULL) of a real
nsys 2026.2 export: ``META_DATA_EXPORT``, ``META_DATA_CAPTURE`` (with ``RANK="<r>"``),
``TARGET_INFO_SESSION_START_TIME`` (a distinct ``utcEpochNs`` per rank, ranks starting a few
hundred ms apart; event times are ns from 0), ``ANALYSIS_DETAILS`` (raw clock values, *not* the
time base), ``StringIds``, ``CUPTI_ACTIVITY_KIND_KERNEL``/``RUNTIME``/``MEMCPY``,
``NVTX_EVENTS`` (PyTorch ``ProfilerStep#k`` in domain 0; NCCL ``ncclAllReduce`` in domain 1,
registered string), ``PROCESSES``, ``ThreadNames``, ``TARGET_INFO_GPU``,
``CUDA_GPU_MEMORY_USAGE_EVENTS`` and the ``ENUM_*`` rows used.

Straggler scenario: rank ``late_rank`` launches every all-reduce ``delay_ns`` late. Every
other rank's NCCL kernel waits for it (starts on time, ends when the late rank's data
arrives); the late rank's own kernel is the shortest and starts last.

Rows are generated inside SQLite (recursive CTEs), so a 1M-kernel export costs no Python
objects per row (``bench/nsys_bench.py``).

    python -m postmortem.generator.rungen.nsys OUT_DIR [--ranks 8] [--steps 20] [--late-rank 3] [--kineto]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sqlite3
import struct
from datetime import datetime, timezone
from pathlib import Path

BASE_EPOCH_NS = 1_779_782_330_176_752_435   # 2026-05-26T07:58:50.176752435Z
GLOBAL_VID = 1 << 48

DDL = {
    "StringIds": "id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL",
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER, "
        "cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, "
        "gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, "
        "staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL, "
        "localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL, "
        "sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER, "
        "qmdBulkReleaseDone INTEGER, qmdPreexitDone INTEGER, qmdLastCtaDone INTEGER, graphId INTEGER, "
        "clusterX INTEGER, clusterY INTEGER, clusterZ INTEGER, clusterSchedulingPolicy INTEGER, "
        "maxPotentialClusterSize INTEGER, maxActiveClusters INTEGER, sharedMemoryRequestedPercentage INTEGER, "
        "tensorSizeMinusOneElements TEXT NOT NULL"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, "
        "correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER, "
        "dstKind INTEGER, srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, "
        "migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER, copyCount INTEGER"),
    "NVTX_EVENTS": (
        "start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER, "
        "color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, "
        "uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, "
        "floatValue REAL, jsonTextId INTEGER, jsonText TEXT, binaryData TEXT"),
    "PROCESSES": "globalPid INTEGER, pid INTEGER, name TEXT",
    "ThreadNames": "nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER",
    "TARGET_INFO_SESSION_START_TIME": "utcEpochNs INTEGER, utcTime TEXT, localTime TEXT, systemClockNs INTEGER",
    "ANALYSIS_DETAILS": ("globalVid INTEGER NOT NULL, duration INTEGER NOT NULL, startTime INTEGER NOT NULL, "
                         "stopTime INTEGER NOT NULL"),
    "META_DATA_EXPORT": "name TEXT NOT NULL, value TEXT",
    "META_DATA_CAPTURE": "name TEXT NOT NULL, value TEXT",
    "TARGET_INFO_SYSTEM_ENV": ("globalVid INTEGER, devStateName TEXT NOT NULL, name TEXT NOT NULL, "
                               "nameEnum INTEGER NOT NULL, value TEXT NOT NULL"),
    "TARGET_INFO_GPU": (
        "vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, isDiscrete INTEGER, "
        "l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER, smCount INTEGER, "
        "pwGpuId INTEGER, uuid TEXT, luid INTEGER, chipName TEXT, cuDevice INTEGER, computeMajor INTEGER, "
        "computeMinor INTEGER"),
    "CUDA_GPU_MEMORY_USAGE_EVENTS": (
        "start INTEGER NOT NULL, globalPid INTEGER, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "address INTEGER NOT NULL, pc INTEGER NOT NULL, bytes INTEGER NOT NULL, memKind INTEGER NOT NULL, "
        "memoryOperationType INTEGER NOT NULL, name TEXT, correlationId INTEGER, streamId INTEGER"),
    "NVTX_PAYLOAD_SCHEMAS": ("domainId INTEGER, schemaId INTEGER, name TEXT, type INTEGER, flags INTEGER, "
                             "numEntries INTEGER, payloadSize INTEGER, alignTo INTEGER"),
    "NVTX_PAYLOAD_SCHEMA_ENTRIES": ("domainId INTEGER NOT NULL, schemaId INTEGER NOT NULL, idx INTEGER NOT NULL, "
                                    "flags INTEGER, type INTEGER, name TEXT, description TEXT, "
                                    "arrayOrUnionDetail INTEGER, offset INTEGER"),
    "ENUM_CUDA_MEMCPY_OPER": "id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT",
    "ENUM_CUDA_MEM_KIND": "id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT",
    "ENUM_NSYS_EVENT_TYPE": "id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT",
}

STRINGS = {
    1: "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off",
    2: "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
    3: "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
    4: "cudaLaunchKernel_v7000",
    5: "ncclAllReduce",
    6: "pt_main_thread",
    7: "cuLaunchKernelEx",
    8: "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n",
    9: "ncclCommInitRankConfig",
}
COMM_HASH = 0x9F3C1A2B4D5E6F70          # > 2**63: uint64 payload fields must not go negative
SID_ALLREDUCE, SID_INIT = 0x1000000 + 5, 0x1000000 + 11   # NCCL NVTX_SID_AllReduce / CommInitRankConfig
# NCCL 2.25 payload schemas (reference 2.5): (schemaId, idx, type, name, offset)
SCHEMA_ENTRIES = [(SID_ALLREDUCE, 0, 18, "NCCL communicator ID", None), (SID_ALLREDUCE, 1, 22, "Message size [bytes]", 8),
                  (SID_ALLREDUCE, 2, 16777232, "Reduction operation", 16),
                  (SID_INIT, 0, 18, "NCCL communicator ID", None), (SID_INIT, 1, 5, "No. of ranks", 8),
                  (SID_INIT, 2, 5, "Rank", 12), (SID_INIT, 3, 5, "CUDA device", 16)]


def payload_blob(schema_id: int, body: bytes) -> bytes:
    """``binaryData`` as a third-party decoder reads it (reference 2.5, unverified): a 32-byte
    ``<IIIIQQ>`` header (third field schemaId, fifth payload size), then the packed struct."""
    return struct.pack("<IIIIQQ", 0, 0, schema_id, 0, len(body), 0) + body
STEP_NS = 50_000_000
COMPUTE_NS = 1_000_000
ALLREDUCE_BYTES = 64 << 20   # 32 Mi bf16 elements
TRANSFER_NS = 400_000        # the all-reduce itself, once everyone has arrived
NCCL_STREAM = 23


def write_nsys_export(path: str | Path, rank: int, world: int = 8, steps: int = 20, compute_per_step: int = 10,
                      late_rank: int | None = 3, delay_ns: int = 3_000_000, session_offset_ns: int | None = None,
                      gpus_per_node: int = 8, payloads: bool = True, record_env: bool = True,
                      host: str | None = None, gpu_name: str = "NVIDIA H100 80GB HBM3",
                      base_epoch_ns: int = BASE_EPOCH_NS) -> Path:
    """One rank's export. Everything below is set-based SQL: no Python row per event. ``host``,
    ``gpu_name`` and ``base_epoch_ns`` default to the standalone profile's (``node00``, H100, 2026-05-26)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    pid = 4000 + rank
    gpid = GLOBAL_VID | (pid << 24)
    gtid = gpid | pid
    device = rank % gpus_per_node
    epoch = base_epoch_ns + (session_offset_ns if session_offset_ns is not None else rank * 217_000_000)
    # Absolute schedule (the same for every rank), expressed on this rank's session timeline.
    t0 = base_epoch_ns + 2_000_000_000 - epoch
    con = sqlite3.connect(path)
    con.executescript("".join(f"CREATE TABLE {name} ({cols});\n" for name, cols in DDL.items()))
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", STRINGS.items())
    utc = datetime.fromtimestamp(epoch / 1e9, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, ?, ?, ?)", (epoch, utc, utc, 28_254_349_605))
    span = t0 + steps * STEP_NS + STEP_NS
    con.execute("INSERT INTO ANALYSIS_DETAILS VALUES (?, ?, ?, ?)",
                (GLOBAL_VID, span, 28_254_349_605, 28_254_349_605 + span))
    con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", [
        ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_PRODUCT_VERSION", "2026.2.1.210"),
        ("EXPORT_SCHEMA_VERSION", "3.25.0"), ("EXPORT_SCHEMA_VERSION_MAJOR", "3"),
        ("EXPORT_SCHEMA_VERSION_MINOR", "25"), ("EXPORT_SCHEMA_VERSION_MICRO", "0"),
        ("EXPORT_PARAM_EXPORT_TYPE", "SQLite"), ("EXPORT_PARAM_INCLUDE_BLOBS", "true" if payloads else "false"),
        ("EXPORT_PARAM_TIME_NORMALIZE", "false"), ("EXPORT_PARAM_TIME_SHIFT", "0"),
        ("EXPORT_PARAM_OUTPUT_FILE", path.name)])
    env = [("PROCESS_0:ENVIRONMENT_VARIABLE", f'{k}="{v}"') for k, v in
           (("RANK", rank), ("LOCAL_RANK", device), ("WORLD_SIZE", world), ("NCCL_VERSION", "2.25.1-1"))
           if record_env or k == "NCCL_VERSION"]
    con.executemany("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", [
        ("CAPTURE_EVENT_TYPE", "NvtxEvents"), ("CAPTURE_EVENT_TYPE", "Cuda"), ("COLLECT_GPU_MEMORY_USAGE", "true"),
        ("PROCESS_0:COMMAND", "python"), ("PROCESS_0:ARGUMENT_0", "train.py")] + env)
    con.executemany("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (?, 'host', ?, ?, ?)", [
        (GLOBAL_VID, "Hostname", 1, host or f"node{rank // gpus_per_node:02d}"), (GLOBAL_VID, "NvDriverVersion", 2, "580.95.05")])
    con.execute("INSERT INTO TARGET_INFO_GPU VALUES (?, ?, ?, ?, 1, 52428800, 85520809984, "
                "3352320000000, 1980000000, 132, 1, ?, 0, 'GH100', ?, 9, 0)",
                (GLOBAL_VID, device, gpu_name, f"0000:{0x18 + device:02x}:00.0", f"GPU-{rank:08x}-0000-0000-0000-000000000000",
                 device))
    con.executemany("INSERT INTO PROCESSES VALUES (?, ?, ?)", [(gpid, pid, "python3"),
                                                              (GLOBAL_VID | (100 << 24), 100, "torchrun")])
    con.execute("INSERT INTO ThreadNames VALUES (6, 10, ?)", (gtid,))
    con.executemany("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)",
                    [(1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"), (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"),
                     (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device")])
    con.executemany("INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?, ?, ?)",
                    [(0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"), (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
                     (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device")])
    con.executemany("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?, ?)",
                    [(34, "NvtxMark", "NvtxMark"), (59, "NvtxPushPopRange", "NvtxPushPopRange"),
                     (60, "NvtxStartEndRange", "NvtxStartEndRange"), (75, "NvtxDomainCreate", "NvtxDomainCreate")])
    late = 1 if late_rank == rank else 0
    params = {"t0": t0, "step": STEP_NS, "cns": COMPUTE_NS, "ncomp": compute_per_step, "steps": steps,
              "gpid": gpid, "gtid": gtid, "dev": device, "ctx": 1, "nstream": NCCL_STREAM, "late": late,
              "delay": delay_ns, "xfer": TRANSFER_NS, "rank": rank, "bytes": ALLREDUCE_BYTES,
              "anylate": 1 if late_rank is not None else 0, "wm1": world - 1}
    # Compute kernels: k = step * ncomp + j, back to back on stream 7; correlation ids 2k+1.
    con.execute("""
        WITH RECURSIVE s(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM s WHERE k + 1 < :steps * :ncomp)
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, greenContextId, streamId,
            correlationId, globalPid, demangledName, shortName, mangledName, launchType, cacheConfig,
            registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory,
            dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId, sharedMemoryExecuted,
            graphNodeId, sharedMemoryLimitConfig, tensorSizeMinusOneElements)
        SELECT :t0 + (k / :ncomp) * :step + (k % :ncomp) * :cns + (:rank * 997) % 5000,
               :t0 + (k / :ncomp) * :step + (k % :ncomp) * :cns + (:rank * 997) % 5000 + :cns - 20000,
               :dev, :ctx, 0, 7, 2 * k + 1, :gpid, 1, 8, NULL, 1, 0, 168, 132, 1, 1, 384, 1, 1, 0, 232448,
               0, 0, k, 233472, NULL, 1, '' FROM s""", params)
    # NCCL all-reduce per step: everyone arrives after its compute, the late rank `delay` later;
    # every kernel ends when the last rank has arrived plus the transfer time.
    arrive = ":t0 + i * :step + :ncomp * :cns + 50000 + :rank * 1500 + :late * :delay"
    last = ":t0 + i * :step + :ncomp * :cns + 50000 + :wm1 * 1500 + :anylate * :delay + :xfer"
    con.execute(f"""
        WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < :steps)
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, greenContextId, streamId,
            correlationId, globalPid, demangledName, shortName, mangledName, launchType, cacheConfig,
            registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory,
            dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId, sharedMemoryExecuted,
            graphNodeId, sharedMemoryLimitConfig, tensorSizeMinusOneElements)
        SELECT {arrive}, max({last}, {arrive} + :xfer), :dev, :ctx, 0, :nstream, 1000000000 + i, :gpid, 2, 3,
               NULL, 1, 0, 96, 16, 1, 1, 640, 1, 1, 21568, 82240, 0, 0, 1000000 + i, 103424, NULL, 1, ''
        FROM s""", params)
    con.execute("""
        WITH RECURSIVE s(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM s WHERE k + 1 < :steps * :ncomp)
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME
        SELECT :t0 + (k / :ncomp) * :step + (k % :ncomp) * :cns - 8000, :t0 + (k / :ncomp) * :step
               + (k % :ncomp) * :cns - 3000, 0, :gtid, 2 * k + 1, 4, 0, NULL FROM s""", params)
    con.execute(f"""
        WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < :steps)
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME
        SELECT {arrive} - 6000, {arrive} - 1000, 1, :gtid, 1000000000 + i, 7, 0, NULL FROM s""", params)
    # NVTX: ProfilerStep#i (PyTorch, domain 0, inline text), ncclAllReduce (NCCL, domain 1,
    # registered string) around the launch, and NCCL's domain-create row.
    con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                "VALUES (0, NULL, 75, 'NCCL', :gtid, 1)", params)
    con.execute("""
        WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < :steps)
        INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, endGlobalTid, domainId)
        SELECT :t0 + i * :step - 10000, :t0 + (i + 1) * :step - 20000, 59, 'ProfilerStep#' || i, :gtid, NULL, 0
        FROM s""", params)
    params["blob"] = payload_blob(SID_ALLREDUCE, struct.pack("<QQi4x", COMM_HASH, ALLREDUCE_BYTES, 0)) \
        if payloads else None
    con.execute(f"""
        WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < :steps)
        INSERT INTO NVTX_EVENTS (start, end, eventType, textId, globalTid, domainId, binaryData)
        SELECT {arrive} - 9000, {arrive} + 1000, 59, 5, :gtid, 1, :blob FROM s""", params)
    if payloads:
        con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, textId, globalTid, domainId, binaryData) "
                    "VALUES (?, ?, 59, 9, ?, 1, ?)",
                    (t0 - 900_000_000, t0 - 850_000_000, gtid,
                     payload_blob(SID_INIT, struct.pack("<Qiii4x", COMM_HASH, world, rank, device))))
        con.executemany("INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES (1, ?, ?, NULL, ?, ?, NULL, NULL, ?)",
                        SCHEMA_ENTRIES)
        con.executemany("INSERT INTO NVTX_PAYLOAD_SCHEMAS VALUES (1, ?, NULL, 1, NULL, ?, 24, NULL)",
                        [(SID_ALLREDUCE, 3), (SID_INIT, 4)])
    con.execute("""
        WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < :steps)
        INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, greenContextId, streamId,
            correlationId, globalPid, bytes, copyKind, srcKind, dstKind, srcDeviceId, dstDeviceId, copyCount)
        SELECT :t0 + i * :step - 500000, :t0 + i * :step - 200000, :dev, :ctx, 0, 7, 2000000000 + i, :gpid,
               8388608, 1, 1, 2, NULL, :dev, 1 FROM s""", params)
    con.execute("""
        WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < :steps * 2)
        INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS
        SELECT :t0 + (i / 2) * :step + (i % 2) * 30000000, :gpid, :dev, :ctx, 140000000000 + (i / 2) * 4096,
               0, 2147483648, 2, i % 2, NULL, 3000000000 + i, 7 FROM s""", params)
    con.commit()
    con.close()
    return path


def write_profiled_run(out_dir: str | Path, world: int = 8, steps: int = 20, late_rank: int | None = 3,
                       delay_ns: int = 3_000_000, kineto: str | None = None, hosts: list[str] | None = None,
                       gpus_per_node: int = 8, **export) -> list[Path]:
    """``out_dir/nsys/rank_<r>.sqlite`` for every rank, and with ``kineto`` ("relative" or
    "epoch") ``out_dir/kineto/rank_<r>.pt.trace.json`` too. ``hosts`` (one per node) name the
    profiles' hosts; ``export`` passes ``gpu_name``/``base_epoch_ns`` on to ``write_nsys_export``."""
    out = Path(out_dir)
    paths = [write_nsys_export(out / "nsys" / f"rank_{r}.sqlite", r, world=world, steps=steps, late_rank=late_rank,
                               delay_ns=delay_ns, gpus_per_node=gpus_per_node,
                               host=hosts[r // gpus_per_node] if hosts else None, **export) for r in range(world)]
    if kineto:
        paths += [write_kineto_trace(out / "kineto" / f"rank_{r}.pt.trace.json", r, world=world, steps=steps,
                                     late_rank=late_rank, delay_ns=delay_ns, convention=kineto)
                  for r in range(world)]
    return paths


def write_kineto_trace(path: str | Path, rank: int, world: int = 8, steps: int = 20, late_rank: int | None = 3,
                       delay_ns: int = 3_000_000, convention: str = "relative", gz: bool = False) -> Path:
    """A Kineto trace (``docs/formats/nsys-and-traces.md`` 8 and 10). ``convention="relative"``:
    ``baseTimeNanoseconds`` plus relative us floats; ``"epoch"``: no base, ``ts`` in epoch us."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    start_abs = BASE_EPOCH_NS + 2_000_000_000            # the same absolute schedule as the nsys files
    base = BASE_EPOCH_NS - 1_711_000_000_000 if convention == "relative" else 0
    pid, tid, dev, stream = 4000 + rank, 4000 + rank, rank % 8, NCCL_STREAM

    def us(abs_ns: int) -> float:
        return round((abs_ns - base) / 1000, 3)

    events = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python3"}},
              {"ph": "M", "name": "process_name", "pid": dev, "tid": 0, "args": {"name": f"GPU {dev}"}}]
    numel = ALLREDUCE_BYTES // 2
    for i in range(steps):
        step0 = start_abs + i * STEP_NS
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": pid, "tid": tid,
                       "ts": us(step0 - 10_000), "dur": (STEP_NS - 10_000) / 1000, "args": {"External id": 10 * i}})
        arrive = step0 + 10 * COMPUTE_NS + 50_000 + rank * 1500 + (delay_ns if rank == late_rank else 0)
        last = step0 + 10 * COMPUTE_NS + 50_000 + (world - 1) * 1500 + (delay_ns if late_rank is not None else 0) + TRANSFER_NS
        end = max(last, arrive + TRANSFER_NS)
        corr = 60000 + i
        events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": pid, "tid": tid,
                       "ts": us(arrive - 20_000), "dur": 15.0,
                       "args": {"External id": 10 * i + 1, "Collective name": "allreduce", "Seq": i + 1,
                                "Process Group Name": "0", "Process Group Description": "default_pg"}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernelExC", "pid": pid, "tid": tid,
                       "ts": us(arrive - 6000), "dur": 5.0, "args": {"External id": 10 * i + 1, "cbid": 430,
                                                                    "correlation": corr}})
        events.append({"ph": "X", "cat": "kernel", "pid": dev, "tid": stream,
                       "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                       "ts": us(arrive), "dur": (end - arrive) / 1000,
                       "args": {"External id": 10 * i + 1, "device": dev, "context": 1, "stream": stream,
                                "correlation": corr, "registers per thread": 96, "grid": [16, 1, 1],
                                "block": [640, 1, 1], "Collective name": "allreduce", "In msg nelems": numel,
                                "Out msg nelems": numel, "Group size": world, "dtype": "BFloat16",
                                "In split size": "[]", "Out split size": "[]", "Process Group Name": "0",
                                "Process Group Description": "default_pg",
                                "Process Group Ranks": str(list(range(world))), "Seq": i + 1}})
        events.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": pid, "tid": tid,
                       "ts": us(arrive - 6000)})
        events.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": dev, "tid": stream,
                       "ts": us(arrive), "bp": "e"})
        events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": pid, "tid": tid, "s": "t",
                       "ts": us(step0 + 100_000), "args": {"Device Type": 1, "Device Id": dev, "Addr": 140000000000 + i,
                                                          "Bytes": 1 << 30, "Total Allocated": (40 << 30) + (1 << 30),
                                                          "Total Reserved": 60 << 30}})
        events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": pid, "tid": tid, "s": "t",
                       "ts": us(step0 + 30_000_000), "args": {"Device Type": 1, "Device Id": dev,
                                                             "Addr": 140000000000 + i, "Bytes": -(1 << 30),
                                                             "Total Allocated": 40 << 30, "Total Reserved": 60 << 30}})
        events.append({"ph": "X", "cat": "kernel", "pid": dev, "tid": 7, "name": STRINGS[1] + "(Params)",
                       "ts": us(step0), "dur": 980.0, "args": {"device": dev, "stream": 7, "correlation": corr + 100000}})
    top = {"schemaVersion": 1,
           "deviceProperties": [{"id": dev, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984,
                                 "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
           "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world, "pg_count": 1,
                               "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                                              "pg_size": world, "ranks": list(range(world))}],
                               "nccl_version": "2.25.1"},
           "record_shapes": 1, "traceEvents": events, "traceName": str(path), "displayTimeUnit": "ms"}
    if convention == "relative":
        top["baseTimeNanoseconds"] = base
    else:
        top = {k: v for k, v in top.items() if k != "distributedInfo"} | {
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world}}
        for e in events:   # older traces: no NCCL args on kernels beyond what 2023 PyTorch gave
            if e.get("cat") == "kernel":
                e["args"] = {k: v for k, v in e["args"].items() if k not in ("Seq",)}
    data = json.dumps(top, indent=1).encode()
    if gz or path.suffix == ".gz":
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--late-rank", type=int, default=3)
    p.add_argument("--kineto", choices=["relative", "epoch"])
    a = p.parse_args(argv)
    for path in write_profiled_run(a.out, a.ranks, a.steps, a.late_rank, kineto=a.kineto):
        print(path)


if __name__ == "__main__":
    main()
