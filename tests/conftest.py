from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def data_path(*parts: str) -> Path:
    """Path under ../shared/data, skipping the test with a reason when it is absent."""
    path = DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"needs the shared evaluation data at {path} (present in CI; absent here)")
    return path


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _collection(name: str) -> dict:
    root = data_path("search", name)
    return {
        "root": root,
        "corpus": read_jsonl(root / "corpus.jsonl"),
        "queries": {q["_id"]: q["text"] for q in read_jsonl(root / "queries.jsonl")},
    }


@pytest.fixture(scope="session")
def scifact():
    return _collection("scifact")
