"""Run every example of the user guides: python blocks in one namespace, console blocks as commands."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from salience.exceptions import MissingDependencyError

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"```(python|console)\n(.*?)```", re.S)


def _env() -> dict:
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}


def _blocks(path: Path):
    return BLOCK.findall(path.read_text(encoding="utf-8"))


@pytest.fixture
def restored_registry():
    """A guide may register a method (docs/contributing.md does): the registry is put back after it."""
    from salience.core import base

    base.registered()  # every family loaded first: a family a guide loads would be emptied on restore
    saved = {family: dict(methods) for family, methods in base._REGISTRY.items()}
    yield
    for family, methods in saved.items():
        base._REGISTRY[family].clear()
        base._REGISTRY[family].update(methods)


@pytest.mark.parametrize("guide", sorted(p.name for p in DOCS.glob("*.md")))
def test_guide_examples_run(guide, tmp_path, monkeypatch, restored_registry):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    blocks = _blocks(DOCS / guide)
    assert blocks, f"{guide} has no runnable examples"
    for kind, code in blocks:
        if kind == "python":
            try:
                exec(compile(code, f"{guide}", "exec"), namespace)
            except (MissingDependencyError, ModuleNotFoundError) as err:
                # A guide may import an extra's library itself (`import torch`): without the extra
                # the rest of that guide skips; the full test environment has every extra.
                if os.environ.get("SALIENCE_ALL_EXTRAS") or (getattr(err, "name", "") or "").startswith("salience"):
                    raise
                pytest.skip(f"{guide}: the rest of its examples need an extra ({err})")
            continue
        for line in code.splitlines():
            if not line.startswith("$ "):
                continue
            argv = shlex.split(line[2:])
            assert argv[0] == "salience"
            done = subprocess.run(
                [sys.executable, "-m", "salience", *argv[1:]], capture_output=True, text=True, env=_env()
            )
            assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"


def test_readme_examples_run_on_what_the_demo_leaves(tmp_path):
    """The README's examples name only files a newcomer has: the demo's outputs and the shared data."""
    root = Path(__file__).resolve().parents[1]
    shared = root.parent / "shared" / "data"
    if not shared.is_dir():
        pytest.skip("../shared/data is absent (CI always has it)")
    demo = subprocess.run([sys.executable, str(root / "examples" / "demo_search.py")], cwd=tmp_path,
                          capture_output=True, text=True, env=_env())
    assert demo.returncode == 0, demo.stderr
    (tmp_path / "work").mkdir()
    os.symlink(shared.parent, tmp_path / "shared")  # ../shared seen from the work folder
    os.symlink(tmp_path / "demo-out", tmp_path / "work" / "demo-out")
    readme = (root / "README.md").read_text(encoding="utf-8")
    commands = [block for kind, block in BLOCK.findall(readme) if kind == "console"]
    assert commands, "the README has no command-line examples"
    ran = 0
    for line in "\n".join(commands).replace("\\\n", " ").splitlines():
        if not line.startswith("$ "):
            continue
        argv = shlex.split(line[2:])
        assert argv[0] == ".venv/bin/salience", line
        argv = argv[1:]
        if argv[:2] == ["data", "select"]:
            argv[argv.index("-k") + 1] = "50"  # the same command on a smaller selection
        done = subprocess.run([sys.executable, "-m", "salience", *argv], capture_output=True, text=True,
                              env=_env(), cwd=tmp_path / "work")
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        ran += 1
    assert ran >= 8
