"""Whole-file parsers own their formats: each module in ``postmortem.parsers.WHOLE_FILE`` has the
two hooks (``sniff``, ``read_whole``), discover and ingest name no format, and a new format needs
only its registry entry (a fake one registered here is sniffed, read, refused and survived)."""
import gzip
import re
import types
from pathlib import Path

import polars as pl
import pytest

from postmortem import parsers
from postmortem.analyzer import discover, ingest
from postmortem.parsers.base import Unreadable

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("module", parsers.WHOLE_FILE, ids=lambda m: m.NAME)
def test_every_whole_file_parser_has_both_hooks(module):
    assert isinstance(module.NAME, str) and module.NAME
    assert isinstance(module.LABEL, str) and module.LABEL
    assert callable(module.sniff) and callable(module.read_whole)


def test_whole_file_names_are_distinct_and_not_line_parsers():
    names = [m.NAME for m in parsers.WHOLE_FILE]
    assert len(set(names)) == len(names)
    assert not set(names) & {m.NAME for m in parsers.ALL_PARSERS}
    assert not set(names) & {"log", "pyspy", "env", "skipped"}


@pytest.mark.parametrize("source", ["analyzer/discover.py", "analyzer/ingest.py"])
def test_discover_and_ingest_name_no_whole_file_format(source):
    text = (ROOT / source).read_text(encoding="utf-8")
    for module in parsers.WHOLE_FILE:
        stem = module.__name__.rsplit(".", 1)[-1]
        for word in {module.NAME, stem}:
            assert not re.search(rf"\b{re.escape(word)}\b", text, re.I), (source, word)


def _fake_format():
    """A whole-file format the code base has never heard of: files that start with ``FAKEFMT``."""
    def sniff(name, head, data):
        return head.startswith(b"FAKEFMT\n")

    def read_whole(source):
        data = source.data()
        if b"refuse" in data:
            raise Unreadable(f"{source.display}: a refused fake; skipped")
        if b"crash" in data:
            raise ZeroDivisionError("fake bug")
        values = data.split(b"\n")[1:]
        frame = pl.DataFrame({"line_no": pl.Series(range(1, len(values) + 1), dtype=pl.UInt32),
                              "value": [v.decode() for v in values]})
        return {"fake_rows": frame}, [f"read from {'the file' if source.path else 'memory'}"]
    return types.SimpleNamespace(NAME="fakefmt", LABEL="Fake", sniff=sniff, read_whole=read_whole)


@pytest.fixture
def fake(monkeypatch):
    module = _fake_format()
    monkeypatch.setattr(parsers, "WHOLE_FILE", [module, *parsers.WHOLE_FILE])
    return module


def _read(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    (item,), errors = discover.discover([path])
    assert not errors
    result, text, claim = ingest.read_input(0, item)
    ingest._read_wholes([(result, claim)] if claim is not None else [])
    return item, result, text


@pytest.mark.parametrize("name, compress", [("a.fake", False), ("a.fake.gz", True)])
def test_a_registered_whole_file_parser_is_sniffed_and_read(fake, tmp_path, name, compress):
    data = b"FAKEFMT\nx\ny"
    item, result, text = _read(tmp_path, name, gzip.compress(data) if compress else data)
    assert text is None and result.error is None
    assert item.kind == "fakefmt"
    assert result.tables["fake_rows"]["value"].to_list() == ["x", "y"]
    assert set(result.tables["fake_rows"]["parser"]) == {"fakefmt"}
    assert item.problems == [f"read from {'memory' if compress else 'the file'}"]


def test_a_registered_whole_file_parsers_refusal_and_bug_skip_the_file(fake, tmp_path):
    item, result, _ = _read(tmp_path, "r.fake", b"FAKEFMT\nrefuse")
    assert (item.kind, result.error) == ("skipped", "r.fake: a refused fake; skipped")
    item, result, _ = _read(tmp_path, "c.fake", b"FAKEFMT\ncrash")
    assert item.kind == "skipped"
    assert result.error == "c.fake: Fake reader failed (ZeroDivisionError: fake bug); skipped"


def test_an_input_no_whole_file_parser_claims_is_text(fake, tmp_path):
    item, result, text = _read(tmp_path, "rank0.log", b"FAKEFMT is only a word here\n")
    assert item.kind == "log" and text == b"FAKEFMT is only a word here\n"
