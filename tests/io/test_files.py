import os
import subprocess
import sys

import pytest

from salience.io.files import atomic_directory, exchange_paths, sweep_stale_temporaries, temporary_prefix


def _tree(folder):
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_exchange_paths_swaps_two_folders_in_one_step(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "f").write_text("A")
    (b / "f").write_text("B")
    if not exchange_paths(a, b):
        pytest.skip("this file system cannot exchange paths atomically (the two-rename fallback is tested below)")
    assert (a / "f").read_text() == "B" and (b / "f").read_text() == "A"


def test_atomic_directory_replaces_a_folder_and_leaves_no_temporaries(tmp_path):
    target = tmp_path / "index"
    for version in ("old", "new"):
        with atomic_directory(target) as folder:
            (folder / "data").write_text(version)
            (folder / "sub").mkdir()
            (folder / "sub" / "more").write_text(version * 2)
    assert _tree(target) == {"data": "new", "sub/more": "newnew"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_a_failed_build_leaves_the_old_folder(tmp_path):
    target = tmp_path / "index"
    with atomic_directory(target) as folder:
        (folder / "data").write_text("old")
    with pytest.raises(RuntimeError), atomic_directory(target) as folder:
        (folder / "data").write_text("half")
        raise RuntimeError("killed mid-build")
    assert _tree(target) == {"data": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_a_writer_killed_between_two_renames_gets_its_old_folder_back(tmp_path):
    """Where the file system cannot exchange paths, the fallback's gap (old moved aside, new not
    yet in place) is closed by the next writer's sweep: it moves the old folder back."""
    prefix = temporary_prefix("index").replace(str(os.getpid()), str(_dead_pid()))
    aside = tmp_path / f"{prefix}abc.old"
    (aside / "index").mkdir(parents=True)
    (aside / "index" / "data").write_text("old")
    (tmp_path / f"{prefix}def.tmp").mkdir()  # the new folder, half built
    assert not (tmp_path / "index").exists()
    assert sweep_stale_temporaries(tmp_path, "index") == 2
    assert _tree(tmp_path / "index") == {"data": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_sweeping_several_names_at_once_removes_only_their_dead_writers_temporaries(tmp_path):
    dead, alive = _dead_pid(), os.getpid()
    names = [f".manifest.json.{dead}.a1.tmp", f".seg-000001.{dead}.b2.tmp", f".seg-000001.{dead}.old",
             f".manifest.json.{alive}.c3.tmp", f".other.{dead}.d4.tmp", f".manifest.json.{dead}.e5.kept",
             f".v1.2.{dead}.f6.tmp", "manifest.json"]
    for name in names:
        (tmp_path / name).write_text("x")
    (tmp_path / f".seg-000002.{dead}.g7.tmp").mkdir()
    removed = sweep_stale_temporaries(tmp_path, ["manifest.json", "seg-000001", "seg-000002", "v1.2"])
    assert removed == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f".manifest.json.{alive}.c3.tmp", f".other.{dead}.d4.tmp",
                                                                 f".manifest.json.{dead}.e5.kept", "manifest.json"])
    assert sweep_stale_temporaries(tmp_path / "absent", "manifest.json") == 0
