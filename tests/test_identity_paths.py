"""Ranks guessed from torchrun's log layout follow the node folders, and stay marked as guesses."""
import re

from postmortem.analyzer.pipeline import analyze
from tests.scenario import write_scenario


def test_guessed_ranks_follow_node_folder_order_and_local_rank(tmp_path):
    # node-0N/run_x/attempt_0/<local>/stderr.log; rank 2 prints nothing that states its rank.
    write_scenario(tmp_path / "logs", ranks=6, culprit=2, guessed=True)
    # Analyse the parent: the paths then start with logs/, and the node folder is below it.
    rows = analyze([tmp_path]).frame("SELECT DISTINCT i.path, l.rank, l.rank_confidence FROM lines l "
                                     "JOIN inputs i USING (input_id) WHERE l.rank IS NOT NULL")
    for path, rank, confidence in rows.iter_rows():
        node, local = map(int, re.search(r"node-(\d+)/run_x/attempt_0/(\d+)/", path).groups())
        assert rank == (node - 1) * 2 + local, path  # the stated ranks agree with the layout
    culprit = rows.filter(rows["path"].str.contains("node-02/run_x/attempt_0/0/"))
    assert culprit.rows() and all(c == "guessed" for _, _, c in culprit.rows())


def test_path_parts_are_a_posix_paths_parts():
    """``discover.path_parts`` stands in for ``PurePosixPath(...).parts`` on every input's path
    (thousands of them): the same parts for doubled, tripled and leading slashes and ``.``."""
    import random
    from pathlib import PurePosixPath

    from postmortem.analyzer.discover import path_parts

    rnd = random.Random(3)
    atoms = ["a", "b.log", "", ".", "..", "attempt_0", "0", "x y", "é", "/", "//", "///"]
    for _ in range(5000):
        path = "".join(rnd.choice(atoms) for _ in range(rnd.randint(0, 7)))
        assert path_parts(path) == PurePosixPath(path).parts, path


def test_path_hints_read_every_inputs_path_at_once():
    """``identity.path_hints``: torchrun's attempt and local rank from an ``attempt_N/L/`` folder,
    and the folders above it joined from ``path_parts`` (a root, ``//``, ``.`` and empty parts as
    it gives them; an archive member's path inside its archive); nothing for any other path."""
    import polars as pl

    from postmortem.analyzer.discover import path_parts
    from postmortem.analyzer.identity import path_hints

    expected = {
        "n1/run_x/attempt_0/1/stdout.log": (0, 1, "n1/run_x"),
        "/a/./b//attempt_2/13/stderr.log": (2, 13, "//a/b"),
        "//h/attempt_0/3/stdout.log": (0, 3, "///h"),
        "///h/attempt_0/3/stdout.log": (0, 3, "//h"),
        "job.tar!/x!/run/attempt_1/0/stderr.log": (1, 0, "run"),
        "attempt_00/010/stdout.log": (0, 10, ""),
        "q/attempt_0/1/stdout.log.bak": (0, 1, "q"),
        "a/attempt_x/1/stdout.log": (None, None, None),
        "attempt_0/1/other.log": (None, None, None),
        "": (None, None, None),
    }
    frame = path_hints(pl.DataFrame({"input_id": [7, 3, 9, 1, 2, 5, 4, 6, 8, 0], "path": list(expected)}))
    assert frame["input_id"].to_list() == [7, 3, 9, 1, 2, 5, 4, 6, 8, 0]
    assert frame.select("attempt", "local_rank", "node_dir").rows() == list(expected.values())
    assert "/".join(path_parts("/a/./b//attempt_2/13/stderr.log")[:-3]) == "//a/b"
