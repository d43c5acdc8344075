"""Every parser that writes a shared table (``postmortem.parsers.tables``) writes the columns
declared for it, in the declared dtypes: a shared column cannot drift between writers."""
import pytest

from postmortem import parsers
from postmortem.parsers import flight_recorder
from postmortem.parsers.lines import envelope
from postmortem.parsers.tables import SHARED

# Whole-file readers build their shared tables from these schemas (no sample lines to parse).
WHOLE_FILE = {("collectives", flight_recorder.NAME): flight_recorder.COLLECTIVES_SCHEMA,
              ("progress", flight_recorder.NAME): flight_recorder.PROGRESS_SCHEMA,
              ("stacks", flight_recorder.NAME): flight_recorder.STACKS_SCHEMA}


def _written() -> dict[tuple[str, str], dict]:
    """(table, parser) -> the schema of what the parser wrote for its own sample lines."""
    out = dict(WHOLE_FILE)
    for module in parsers.ALL_PARSERS:
        result = module.parse(envelope(("\n".join(module.SAMPLE_LINES) + "\n").encode()))
        for table, frame in result.tables.items():
            if table in SHARED:
                out[(table, module.NAME)] = dict(frame.schema)
    return out


@pytest.fixture(scope="module")
def written() -> dict[tuple[str, str], dict]:
    """Parsed when the module's tests run, not when every worker collects them (a second each)."""
    return _written()


@pytest.mark.parametrize("table", list(SHARED))
def test_every_writer_is_declared_with_its_columns(table, written):
    declared = SHARED[table]
    writers = {parser for t, parser in written if t == table}
    assert writers == set(declared.writers), (table, writers ^ set(declared.writers))
    for parser in writers:
        assert written[(table, parser)] == declared.columns_of(parser), (table, parser)


@pytest.mark.parametrize("table", list(SHARED))
def test_every_declared_column_has_a_writer(table):
    declared = SHARED[table]
    written = {c for parser in declared.writers for c in declared.columns_of(parser)}
    assert written == set(declared.columns)
