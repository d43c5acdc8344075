"""Every parser understands every one of its own SAMPLE_LINES (lnav-style format tests)."""
import pytest

from postmortem import parsers
from postmortem.parsers.lines import envelope


@pytest.mark.parametrize("module", parsers.ALL_PARSERS, ids=lambda m: m.NAME)
def test_every_sample_line_is_consumed(module):
    lines = envelope(("\n".join(module.SAMPLE_LINES) + "\n").encode())
    result = module.parse(lines)
    consumed = set(result.consumed.to_list())
    missing = [text for n, text in lines.select("line_no", "text").iter_rows()
               if n not in consumed and text.strip()]
    assert not missing, missing


@pytest.mark.parametrize("module", parsers.ALL_PARSERS, ids=lambda m: m.NAME)
def test_garbage_never_raises(module):
    for data in (b"", b"\x00\xff" * 1000, b"x" * (1 << 20), b"[Rank 99999999999999999999] WorkNCCL(SeqNum=-5"):
        module.parse(envelope(data))


@pytest.mark.parametrize("module", parsers.ALL_PARSERS, ids=lambda m: m.NAME)
def test_lines_a_parser_reads_none_of_give_the_tables_its_samples_give(module):
    """A parser that returns early (its router kept no line: most chunks of a large run) returns
    what it returns for no input, and each table with the columns its own sample lines give."""
    def shapes(data: bytes) -> dict:
        return {name: dict(frame.schema) for name, frame in module.parse(envelope(data)).tables.items()}

    own = shapes(("\n".join(module.SAMPLE_LINES) + "\n").encode())
    empty, unread = shapes(b""), shapes(b"nothing to read here\n" * 50)
    assert unread == empty
    assert all(own.get(name) == schema for name, schema in unread.items()), module.NAME


def test_torn_nccl_line_keeps_the_record_that_survived():
    from postmortem.parsers import nccl

    text = "node02:32619:32711 [2] NCCL INFO node02:28579:28579 [7] NCCL INFO comm 0x7f01 rank 7 nranks 8 " \
           "cudaDev 7 busId db000 - Init COMPLETE"
    result = nccl.parse(envelope(text.encode()))
    comm = result.tables["nccl_comms"].row(0, named=True)
    assert (comm["host"], comm["pid"], comm["rank"], comm["bus_id"]) == ("node02", 28579, 7, "db000")
    assert result.tables["events"]["kind"].to_list() == ["torn_line"]
