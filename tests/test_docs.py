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


@pytest.mark.parametrize("guide", sorted(p.name for p in DOCS.glob("*.md")))
def test_guide_examples_run(guide, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    blocks = _blocks(DOCS / guide)
    assert blocks, f"{guide} has no runnable examples"
    for kind, code in blocks:
        if kind == "python":
            try:
                exec(compile(code, f"{guide}", "exec"), namespace)
            except MissingDependencyError as err:
                if os.environ.get("SALIENCE_ALL_EXTRAS"):  # the full test environment has every extra
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
