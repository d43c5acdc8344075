"""Every line parser's kinds (``postmortem.parsers.kinds.Kind``) against their own sample lines: each
sample matches its kind's literal and pattern, and the parser's first-match-wins order gives it
that kind. Where another kind's pattern also matches a sample, the overlap is stated below with
the kind that wins; an overlap not listed (or one whose order flipped) fails the test."""
import polars as pl
import pytest

from postmortem.parsers import (c10d, deepspeed, hf_trainer, kernel, megatron, nccl_catalogue, nccl_ras, titan_lightning,
                                torch_errors)


def _c10d_messages(lines: list[str]) -> list[str]:
    frame = pl.DataFrame({"line_no": pl.Series(range(len(lines)), dtype=pl.UInt32), "text": pl.Series(lines, dtype=pl.String)})
    return c10d._split_header(frame)["msg"].to_list()


def _kernel_messages(lines: list[str]) -> list[str]:
    frame = pl.DataFrame({"line_no": pl.Series(range(len(lines)), dtype=pl.UInt32), "text": pl.Series(lines, dtype=pl.String)})
    return kernel._headers(frame)["message"].to_list()


def _deepspeed_messages(lines: list[str]) -> list[str]:
    """The message after DeepSpeed's logger header (what its settings kinds read)."""
    return pl.Series(lines).str.extract_groups(deepspeed._HEAD).struct.field("msg").to_list()


def _titan_messages(lines: list[str]) -> list[str]:
    """The message after torchtitan's logger header (what its event kinds read)."""
    return pl.Series(lines).str.extract_groups(titan_lightning._HEAD).struct.field("msg").to_list()


def _ras_info_messages(lines: list[str]) -> list[str]:
    """The ``RAS ...`` message after NCCL's ``host:pid:tid [dev] NCCL INFO`` header."""
    return pl.Series(lines).str.extract(nccl_ras._INFO, 1).to_list()


def _stripped(lines: list[str]) -> list[str]:
    """A RAS report line without its indentation (what the report kinds read)."""
    return [line.strip() for line in lines]


def _as_printed(lines: list[str]) -> list[str]:
    return lines


# parser -> (its kinds in the order it tries them, what the patterns read of a sample line)
PARSERS = {
    "nccl": (nccl_catalogue.KINDS, _as_printed),
    "c10d": (c10d.KINDS, _c10d_messages),
    "kernel": (kernel.KINDS, _kernel_messages),
    "megatron": (megatron.EVENT_KINDS, _as_printed),
    "hf_trainer": (hf_trainer.SETTING_KINDS, _as_printed),
    "lightning": (titan_lightning.LIGHTNING_SETTING_KINDS, _as_printed),
    "torchtitan": (titan_lightning.TITAN_EVENT_KINDS, _titan_messages),
    "deepspeed": (deepspeed.SETTING_KINDS, _deepspeed_messages),
    "torch_errors": (torch_errors.SINGLE_KINDS, _as_printed),
    "cuda_fault": (torch_errors.CUDA_FAULT_CLASSES, _as_printed),
    "nccl_ras_info": (nccl_ras.INFO_KINDS, _ras_info_messages),
    "nccl_ras": (nccl_ras.REPORT_KINDS, _stripped),
}

# (parser, the sample's kind, another kind its pattern also matches): the first wins, by order.
OVERLAPS = {
    # `NET/FastSocket plugin initialized` has the `NET/<id>` shape of a topology node: plugins first.
    ("nccl", "ofi", "topo_node"),
    # c10d::DistBackendError's what() and the watchdog's exception line carry the timeout message:
    # they are the collective's row (the timeout), not a generic exception or terminate event.
    ("c10d", "watchdog_timeout", "watchdog_exception"),
    ("c10d", "watchdog_timeout", "terminate"),
    # `XxxError: <message>` lines whose message has a kind of its own: the specific kind first,
    # `exception` (any exception line) last.
    ("c10d", "nccl_error", "exception"),
    ("c10d", "cuda_error", "exception"),
    ("c10d", "fingerprint_mismatch", "exception"),
    ("c10d", "ddp_model_mismatch", "exception"),
    ("c10d", "monitored_barrier", "exception"),
    ("c10d", "unique_id_store", "exception"),
    # gloo's size-mismatch enforce failure has the `gloo/<file>.cc:<line>]` shape of any gloo error:
    # the specific kind first.
    ("torch_errors", "gloo_size_mismatch", "gloo_error"),
}


def _matches(kinds, message: str) -> list[int]:
    """Indexes of the kinds whose literal and pattern both match ``message``."""
    texts = pl.Series([message])
    return [i for i, k in enumerate(kinds)
            if (k.literal is None or k.literal in message) and texts.str.contains(k.pattern).item()]


@pytest.mark.parametrize("parser", list(PARSERS))
def test_every_kinds_samples_match_it_and_only_it(parser):
    kinds, messages = PARSERS[parser]
    seen = set()
    for index, kind in enumerate(kinds):
        for sample, message in zip(kind.samples, messages(list(kind.samples))):
            hits = _matches(kinds, message)
            assert index in hits, (parser, kind.name, sample)
            first = kinds[hits[0]].name
            assert first == kind.name, (parser, kind.name, "taken first by", first, sample)
            for other in {kinds[i].name for i in hits} - {kind.name}:
                seen.add((parser, kind.name, other))
                assert (parser, kind.name, other) in OVERLAPS, (parser, kind.name, "also matches", other, sample)
    assert {o for o in OVERLAPS if o[0] == parser} <= seen, "a stated overlap no sample shows any more"


@pytest.mark.parametrize("parser", list(PARSERS))
def test_kind_fields(parser):
    kinds, _ = PARSERS[parser]
    for kind in kinds:
        assert kind.name and kind.pattern, kind
        assert kind.samples, (parser, kind.name, "has no sample line")
