"""Which files a folder yields, in which order, under which names (``postmortem.analyzer.discover``).

The walk is ``os.scandir`` per folder (``_files_under``); these hold it to what ``Path.rglob``
gave before it: input ids, and so every table's row order, follow this order."""

from __future__ import annotations

import os
from pathlib import Path

from postmortem.analyzer.discover import discover


def tree(root: Path) -> Path:
    for name in ("a/b/f.log", "a-c/g.log", ".hidden/h.log", "a/.dot.log", "z.log", "real/r.log"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"{name}\n")
    (root / "links").mkdir()
    os.symlink("../a", root / "links" / "to_folder")
    os.symlink("../real/r.log", root / "links" / "to_file.log")
    os.symlink("/nonexistent/target", root / "links" / "broken.log")
    (root / "store.duckdb").write_text("not a log")
    return root


def test_the_walk_skips_hidden_and_broken_and_follows_only_file_links(tmp_path):
    root = tree(tmp_path / "run")
    items, errors = discover([root])
    assert errors == []
    # sorted part by part, as paths sort: a/b/f.log before a-c/g.log ("/" sorts after "-")
    assert [i.display for i in items] == ["a/b/f.log", "a-c/g.log", "links/to_file.log", "real/r.log", "z.log"]
    by_name = {i.display: i for i in items}
    assert by_name["links/to_file.log"].path == (root / "real" / "r.log").resolve()
    assert by_name["a/b/f.log"].path == (root / "a" / "b" / "f.log").resolve()
    assert by_name["z.log"].size == len("z.log\n")


def test_a_folder_reached_through_a_link_resolves_to_its_target(tmp_path):
    root = tree(tmp_path / "run")
    os.symlink(root, tmp_path / "alias")
    items, _ = discover([tmp_path / "alias"])
    assert [i.display for i in items] == ["a/b/f.log", "a-c/g.log", "links/to_file.log", "real/r.log", "z.log"]
    assert all(i.path == (root / i.display).resolve() for i in items)


def test_an_excluded_folder_inside_the_run_is_not_read(tmp_path):
    root = tree(tmp_path / "run")
    items, _ = discover([root], exclude={root / "a"})
    assert [i.display for i in items] == ["a-c/g.log", "links/to_file.log", "real/r.log", "z.log"]


def test_a_file_given_alone_is_its_own_name(tmp_path):
    root = tree(tmp_path / "run")
    items, _ = discover([root / "a" / "b" / "f.log", root / "missing"])
    assert [(i.display, i.path) for i in items] == [("f.log", (root / "a" / "b" / "f.log").resolve())]
