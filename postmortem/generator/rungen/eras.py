"""What changes between PyTorch releases, in one table per era.

Sources: ``docs/formats/pytorch-failures.md`` sections 1-3 and 7, and the real excerpts under
``real-data/logs/torch`` and ``real-data/logs/training``. Where a real log and the notes disagree,
the real log wins (for example: the 2.1 logs show no PG status line and no ``[Rank N]`` on the
teardown lines).

ProcessGroupNCCL.cpp line numbers change with every release; the numbers below are plausible per
era (several are taken from public logs of that era) and are never meant to be used as keys.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Era:
    name: str
    glog_date: bool                # [E0724 13:05:29.307629539 file:line] (>= 2.4) or [E file:line]
    rank_prefix: bool              # c10 logging's [rankN]: in front of c10d lines and tracebacks (>= 2.3)
    pg_form: str                   # "none" | "pg" | "pg-desc" | "pg-guid"  (section 1, layer 4)
    status: str | None             # PG status line wording: None | "timeout-at" | "exception" | "failure-detected"
    dump_signal: bool              # cross-rank dump coordination through the TCPStore (>= 2.3)
    observed_signal: bool          # "Observed flight recorder dump signal from another rank via TCPStore."
    first_pg_signal: bool          # "First PG on this rank to signal dumping."
    stack_trace: str | None        # None | "not-found" | "frames"  (Stack trace of the failed collective, >= 2.6)
    preparing_suffix: str | None   # None: no "preparing to dump" line
    dump_msg_tail: str             # what follows "..., etc." in the dump-signal line
    terminated_wording: str        # "NCCL watchdog thread terminated" (<= 2.1) or "Process group watchdog thread terminated"
    teardown_rank_prefix: bool     # "[Rank N] Some NCCL operations ..." (2.1 printed no prefix)
    teardown_delay: tuple[float, float]   # seconds between detection and teardown (dump wait)
    watchdog_frames: tuple[str, ...]      # C++ frames of the watchdog thread under checkTimeout
    outer_frame_fn: str                   # the function of the second "Exception raised from"
    heartbeat_s: int
    dump_wait_ms: int
    work_updates: bool             # periodic "NCCL Work update periodically" at INFO (>= 2.3)
    env_banners: str | None        # None | "environments" (2.4) | "monitor" (>= 2.6)
    cpp: dict[str, int]            # ProcessGroupNCCL.cpp line per message kind
    python: str                    # interpreter version of the era's usual container
    elastic_log: str               # agent log style: "bracket" (2.1-2.3) | "glog-thread" (2.4) | "glog-pid" (>= 2.6)
    monitor_interval_s: float      # torchrun --monitor-interval default (5 s until 2.3, 0.1 s from 2.4)
    oom_class: str
    oom_capacity: str              # 2.1 printed "total capacty" (sic)
    error_frame0: str              # c10::Error::Error signature in frame #0
    torch_version: str


_FRAME0_OLD = "c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >)"
_FRAME0_NEW = "c10::Error::Error(c10::SourceLocation, std::string)"

ERAS: dict[str, Era] = {
    "2.1": Era(
        name="2.1", glog_date=False, rank_prefix=False, pg_form="none", status=None,
        dump_signal=False, observed_signal=False, first_pg_signal=False, stack_trace=None,
        preparing_suffix=None, dump_msg_tail="", terminated_wording="NCCL watchdog thread terminated",
        teardown_rank_prefix=False, teardown_delay=(0.004, 0.04),
        watchdog_frames=("c10d::ProcessGroupNCCL::workCleanupLoop()", "c10d::ProcessGroupNCCL::ncclCommWatchdog()"),
        outer_frame_fn="ncclCommWatchdog", heartbeat_s=0, dump_wait_ms=0, work_updates=False,
        env_banners=None,
        cpp={"timeout": 475, "raise": 525, "some_ops": 489, "take_down": 495, "terminated": 916, "outer": 920},
        python="3.10", elastic_log="bracket", monitor_interval_s=5.0,
        oom_class="torch.cuda.OutOfMemoryError", oom_capacity="capacty", error_frame0=_FRAME0_OLD,
        torch_version="2.1.2",
    ),
    "2.3": Era(
        name="2.3", glog_date=False, rank_prefix=True, pg_form="pg", status="timeout-at",
        dump_signal=True, observed_signal=False, first_pg_signal=False, stack_trace=None,
        preparing_suffix="", dump_msg_tail=" ", terminated_wording="Process group watchdog thread terminated",
        teardown_rank_prefix=True, teardown_delay=(1.05, 1.5),
        watchdog_frames=("c10d::ProcessGroupNCCL::watchdogHandler()", "c10d::ProcessGroupNCCL::ncclCommWatchdog()"),
        outer_frame_fn="ncclCommWatchdog", heartbeat_s=600, dump_wait_ms=60000, work_updates=True,
        env_banners=None,
        cpp={"timeout": 565, "raise": 567, "status": 1537, "some_ops": 577, "take_down": 583,
             "terminated": 1182, "outer": 1186, "received": 1332, "preparing": 1146, "update": 1459},
        python="3.10", elastic_log="bracket", monitor_interval_s=5.0,
        oom_class="torch.cuda.OutOfMemoryError", oom_capacity="capacity", error_frame0=_FRAME0_NEW,
        torch_version="2.3.1",
    ),
    "2.4": Era(
        name="2.4", glog_date=True, rank_prefix=True, pg_form="pg-desc", status="exception",
        dump_signal=True, observed_signal=True, first_pg_signal=False, stack_trace=None,
        preparing_suffix="", dump_msg_tail=" ", terminated_wording="Process group watchdog thread terminated",
        teardown_rank_prefix=True, teardown_delay=(1.05, 1.5),
        watchdog_frames=("c10d::ProcessGroupNCCL::watchdogHandler()", "c10d::ProcessGroupNCCL::ncclCommWatchdog()"),
        outer_frame_fn="ncclCommWatchdog", heartbeat_s=600, dump_wait_ms=60000, work_updates=True,
        env_banners="environments",
        cpp={"timeout": 607, "raise": 609, "status": 1664, "some_ops": 621, "take_down": 627,
             "terminated": 1316, "outer": 1322, "received": 1392, "observed": 1367, "preparing": 1223,
             "update": 1799, "options": 852, "env": 858},
        python="3.10", elastic_log="glog-thread", monitor_interval_s=0.1,
        oom_class="torch.cuda.OutOfMemoryError", oom_capacity="capacity", error_frame0=_FRAME0_NEW,
        torch_version="2.4.1",
    ),
    "2.6": Era(
        name="2.6", glog_date=True, rank_prefix=True, pg_form="pg-guid", status="exception",
        dump_signal=True, observed_signal=True, first_pg_signal=True, stack_trace="not-found",
        preparing_suffix="", dump_msg_tail=" ", terminated_wording="Process group watchdog thread terminated",
        teardown_rank_prefix=True, teardown_delay=(1.05, 1.5),
        watchdog_frames=("c10d::ProcessGroupNCCL::watchdogHandler()", "c10d::ProcessGroupNCCL::ncclCommWatchdog()"),
        outer_frame_fn="ncclCommWatchdog", heartbeat_s=480, dump_wait_ms=15000, work_updates=True,
        env_banners="monitor",
        cpp={"timeout": 616, "raise": 618, "status": 1785, "stack": 667, "first_pg": 1834, "some_ops": 630,
             "take_down": 636, "terminated": 1901, "outer": 1907, "received": 1594, "observed": 1568,
             "preparing": 1394, "update": 2076, "options": 943, "env": 1197, "monitor_env": 1251},
        python="3.12", elastic_log="glog-pid", monitor_interval_s=0.1,
        oom_class="torch.OutOfMemoryError", oom_capacity="capacity", error_frame0=_FRAME0_NEW,
        torch_version="2.6.0",
    ),
    "2.8": Era(
        name="2.8", glog_date=True, rank_prefix=True, pg_form="pg-guid", status="failure-detected",
        dump_signal=True, observed_signal=True, first_pg_signal=True, stack_trace="frames",
        preparing_suffix=", only active collectives: 0", dump_msg_tail="",
        terminated_wording="Process group watchdog thread terminated",
        teardown_rank_prefix=True, teardown_delay=(60.0, 60.4),
        watchdog_frames=("c10d::ProcessGroupNCCL::Watchdog::runLoop()", "c10d::ProcessGroupNCCL::Watchdog::run()"),
        outer_frame_fn="run", heartbeat_s=480, dump_wait_ms=15000, work_updates=True,
        env_banners="monitor",
        cpp={"timeout": 758, "raise": 760, "status": 2385, "stack": 801, "first_pg": 2732, "some_ops": 818,
             "take_down": 832, "terminated": 2197, "outer": 2203, "received": 1987, "observed": 1922,
             "preparing": 1700, "update": 2401, "options": 1014, "env": 1277, "monitor_env": 1321},
        python="3.12", elastic_log="glog-pid", monitor_interval_s=0.1,
        oom_class="torch.OutOfMemoryError", oom_capacity="capacity", error_frame0=_FRAME0_NEW,
        torch_version="2.8.0",
    ),
}

# Neighbouring releases print like the nearest era above.
ALIASES = {"2.2": "2.3", "2.5": "2.6", "2.7": "2.8", "2.9": "2.8"}


def era_for(name: str) -> Era:
    key = ALIASES.get(name, name)
    if key not in ERAS:
        raise ValueError(f"unknown torch era {name!r}; choose one of {', '.join(ERAS)}")
    return ERAS[key]
