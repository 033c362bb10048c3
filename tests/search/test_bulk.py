"""Bounded-memory indexing (``BM25.build``): runs flushed at a memory budget and merged on
disk give the index an in-memory build gives, resumably; bad budgets and inputs are named."""

from __future__ import annotations

import json

import numpy as np
import pytest

from salience.exceptions import CorruptIndexError, DuplicateIdError, InputFormatError, InvalidParameterError
from salience.search import BM25
from salience.search import bulk


def _corpus(n: int = 1500, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(2000)])
    p = 1 / np.arange(1, 2001)
    p /= p.sum()
    return [{"id": f"d{i}", "title": " ".join(rng.choice(words, 3, p=p)),
             "text": " ".join(rng.choice(words, int(rng.integers(0 if i % 97 else 1, 120)), p=p)),
             "year": 2000 + i % 9} for i in range(n)]


def _write(path, docs) -> str:
    with open(path, "w", encoding="utf-8") as fh:
        for doc in docs:
            fh.write(json.dumps(doc) + "\n")
    return str(path)


def _queries(n: int = 60, seed: int = 1) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(f"w{j}" for j in rng.integers(0, 300, 3)) for _ in range(n)]


def _memory_mapped(array) -> bool:
    import mmap

    while array is not None and not isinstance(array, mmap.mmap):
        array = getattr(array, "base", None)
    return array is not None


def _same(a: BM25, b: BM25, queries) -> None:
    for x, y in zip(a.search_batch(queries, k=10), b.search_batch(queries, k=10)):
        assert x.ids == y.ids
        np.testing.assert_array_equal(x.values, y.values)


@pytest.mark.parametrize("params", [{}, {"variant": "bm25l", "k1": 1.2, "field_weights": {"title": 2.0}},
                                    {"variant": "bm25+", "b": 0.3}])
def test_runs_merged_on_disk_equal_an_in_memory_build(tmp_path, params, monkeypatch):
    docs = _corpus()
    source = _write(tmp_path / "corpus.jsonl", docs)
    flushed = []
    real_flush = bulk._Runs.flush
    monkeypatch.setattr(bulk._Runs, "flush", lambda self, *a: (flushed.append(1), real_flush(self, *a))[1])
    built = BM25(**params).build(source, tmp_path / "index", memory_mb=0.2)
    assert len(flushed) >= 5  # the budget forced several runs
    # search reads the packed postings the build wrote, memory-mapped, and a reload does too
    assert built._packed is not None and _memory_mapped(built._packed._kinds["docs"][2][1])
    reference = BM25(**params).fit(source)
    _same(built, reference, _queries())
    # the postings themselves, and what the store keeps
    np.testing.assert_array_equal(built._tf.toarray(), reference._tf[:, :].toarray()[
        [reference._encoder.vocab[t] for t in built.vocabulary]])
    assert built.ids == reference.ids
    assert built.document("d7") == reference.document("d7")
    assert built.search("w1 w2", k=5, where={"year": 2003}).ids == reference.search("w1 w2", k=5, where={"year": 2003}).ids
    again = BM25.load(tmp_path / "index")
    assert again._packed is not None and _memory_mapped(again._packed._kinds["docs"][2][1])
    _same(again, reference, _queries())
    assert again._packed is not None  # searching did not unpack it
    assert not (tmp_path / "index.building").exists()


def test_parallel_tokenizing_gives_the_same_index(tmp_path):
    source = _write(tmp_path / "corpus.jsonl", _corpus(800))
    one = BM25().build(source, tmp_path / "one", memory_mb=0.2)
    two = BM25().build(source, tmp_path / "two", memory_mb=0.2, n_jobs=2)
    _same(one, two, _queries())


def test_an_interrupted_build_resumes_from_its_last_run(tmp_path, monkeypatch):
    source = _write(tmp_path / "corpus.jsonl", _corpus())
    real_flush = bulk._Runs.flush
    calls = []

    def interrupted(self, *args):
        calls.append(len(self.runs))
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real_flush(self, *args)

    monkeypatch.setattr(bulk._Runs, "flush", interrupted)
    with pytest.raises(KeyboardInterrupt):
        BM25().build(source, tmp_path / "index", memory_mb=0.2)
    assert not (tmp_path / "index").exists()
    state = json.loads((tmp_path / "index.building" / "state.json").read_text())
    assert len(state["runs"]) == 3
    calls.clear()
    monkeypatch.setattr(bulk._Runs, "flush", lambda self, *a: (calls.append(len(self.runs)), real_flush(self, *a))[1])
    resumed = BM25().build(source, tmp_path / "index", memory_mb=0.2)
    assert calls[0] == 3  # the first three runs were not made again
    _same(resumed, BM25().fit(source), _queries())
    # resume=False, or another source, starts afresh
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        monkeypatch.setattr(bulk._Runs, "flush", interrupted)
        BM25().build(source, tmp_path / "again", memory_mb=0.2)
    monkeypatch.setattr(bulk._Runs, "flush", lambda self, *a: (calls.append(len(self.runs)), real_flush(self, *a))[1])
    BM25().build(source, tmp_path / "again", memory_mb=0.2, resume=False)
    assert calls[0] == 0


def test_a_built_index_changes_like_any_other(tmp_path):
    docs = _corpus(600)
    built = BM25().build(docs[:500], tmp_path / "index", memory_mb=0.2)
    built.add(docs[500:]).delete(["d3", "d550"]).commit()
    reference = BM25().fit([d for d in docs if d["id"] not in ("d3", "d550")])
    _same(BM25.load(tmp_path / "index"), reference, _queries())
    _same(built.merge(), reference, _queries())


def test_the_same_id_twice_is_named_across_runs_and_within_a_batch(tmp_path):
    docs = _corpus(900)
    with pytest.raises(DuplicateIdError, match="'d5'"):
        BM25().build(docs + [dict(docs[5])], tmp_path / "a", memory_mb=0.2)
    assert not (tmp_path / "a").exists() and not (tmp_path / "a.building").exists()  # bad input: nothing to resume
    with pytest.raises(DuplicateIdError, match="'d5'"):
        BM25().build(docs[:10] + [dict(docs[5])], tmp_path / "b", memory_mb=64)


def test_a_budget_too_small_for_one_document_names_the_minimum(tmp_path):
    docs = [{"id": "short", "text": "a few words"}, {"id": "long", "text": " ".join(f"w{i}" for i in range(5000))}]
    with pytest.raises(InvalidParameterError, match=r"too small for document 'long' \(5,000 terms\): give at least"):
        BM25().build(docs, tmp_path / "index", memory_mb=0.1)
    assert not (tmp_path / "index").exists()


@pytest.mark.parametrize("budget", [0, -5, float("nan"), "lots", True])
def test_a_budget_that_is_not_a_positive_number_is_refused(tmp_path, budget):
    with pytest.raises(InvalidParameterError, match="memory_mb"):
        BM25().build(["a b"], tmp_path / "index", memory_mb=budget)


def test_bad_sources_and_outputs_are_named(tmp_path):
    with pytest.raises(InvalidParameterError, match="empty corpus"):
        BM25().build([], tmp_path / "empty")
    with pytest.raises(InputFormatError, match="none of the 2 documents"):
        BM25().build([{"id": "a", "other": "x"}, {"id": "b", "other": "y"}], tmp_path / "blank")
    source = _write(tmp_path / "corpus.jsonl", _corpus(20))
    with pytest.raises(InvalidParameterError):
        BM25().build(source, source)  # never over the input
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(InvalidParameterError):
        BM25().build(source, mine)
    assert (mine / "notes.txt").read_text() == "keep"
    # a folder named like the work folder that a build did not make is left alone
    (tmp_path / "x.building").mkdir()
    (tmp_path / "x.building" / "data.csv").write_text("1,2")
    with pytest.raises(InvalidParameterError, match="not a salience build's work folder"):
        BM25().build(source, tmp_path / "x")
    assert (tmp_path / "x.building" / "data.csv").is_file()


def test_damaged_packed_postings_are_named(tmp_path):
    BM25().build(_corpus(50), tmp_path / "index")
    gaps = tmp_path / "index" / "seg-000000" / "postings_docs_1.npy"
    np.save(gaps, np.zeros(3, dtype=np.uint8))
    with pytest.raises(CorruptIndexError, match="postings_docs_1.npy"):
        BM25.load(tmp_path / "index")  # its size and checksum
    with pytest.raises(CorruptIndexError, match="postings_docs_1.npy holds 3 values"):
        BM25.load(tmp_path / "index", verify=False)  # its length


def test_the_cli_builds_within_the_budget(tmp_path, capsys):
    from salience.cli import main

    source = _write(tmp_path / "corpus.jsonl", _corpus(400))
    assert main(["search", "index", source, "--out", str(tmp_path / "index"), "--memory-mb", "0.2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["documents"] == 400
    _same(BM25.load(tmp_path / "index"), BM25().fit(source), _queries())
    assert main(["search", "index", source, "--out", str(tmp_path / "other"), "--memory-mb", "0"]) != 0
    assert "memory_mb" in capsys.readouterr().err
