"""Rules: one module per rule, each with CODE, NAME, SEVERITY, a docstring and ``check``."""

from __future__ import annotations

from rules import (h001_rank_never_entered, h002_collective_mismatch, h003_all_ranks_stuck,
                   h004_watchdog_timeouts, h005_hang_inconclusive, x001_first_process_failure,
                   x002_rendezvous_failed)

RULES = [h001_rank_never_entered, h002_collective_mismatch, h003_all_ranks_stuck,
         h004_watchdog_timeouts, h005_hang_inconclusive, x001_first_process_failure,
         x002_rendezvous_failed]
BY_CODE = {rule.CODE: rule for rule in RULES}
