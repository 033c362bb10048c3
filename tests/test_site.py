"""``make docs``: the site builds offline from the guides and the docstrings with every warning
an error, and its API reference holds the classes it names."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_documentation_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="the site needs salience[docs] (mkdocs, mkdocstrings-python)")
    pytest.importorskip("mkdocstrings_handlers.python", reason="the API reference needs mkdocstrings-python")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    api = (tmp_path / "site" / "api.html").read_text(encoding="utf-8")
    for name in ("salience.core.scores.Scores", "salience.search.bm25.BM25", "salience.answer.answer",
                 "salience.compress.kv.policy.KVPolicy"):
        assert f'id="{name}"' in api, name
    guides = {p.stem for p in (ROOT / "docs").glob("*.md")}
    assert guides <= {p.stem for p in (tmp_path / "site").glob("*.html")}  # every guide is a page
