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


@pytest.fixture(scope="session")
def movie_reviews() -> list[tuple[str, bool]]:
    """The 2,000 movie reviews of ../shared/data/dsir (text, positive), in file order."""
    import gzip

    reviews = []
    with gzip.open(data_path("dsir", "raw_docs.jsonl.gz"), "rt", encoding="utf-8") as fh:
        for line in fh:
            if '"movie_' in line:
                record = json.loads(line)
                if record.get("subdomain") in ("movie_pos", "movie_neg"):
                    reviews.append((record["text"], record["subdomain"] == "movie_pos"))
    assert len(reviews) == 2000
    return reviews


@pytest.fixture(scope="session")
def sentiment_classifier(movie_reviews):
    """Logistic regression over salience's hashed terms, trained on every other review."""
    from salience.text.classifier import TextClassifier

    train = movie_reviews[::2]
    return TextClassifier().fit([t for t, _ in train], [y for _, y in train])
