"""Every parser understands every one of its own SAMPLE_LINES (lnav-style format tests)."""
import pytest

import parsers
from parsers.lines import envelope


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
