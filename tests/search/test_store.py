import json

import numpy as np
import pytest

from salience import CorruptIndexError, NotFittedError
from salience.search import BM25
from salience.text import Tokenizer

DOCS = [
    {"_id": f"d{i}", "title": f"title {i % 7}", "text": " ".join(f"w{(i * j) % 31}" for j in range(1, 3 + i % 11)), "year": 1990 + i}
    for i in range(120)
]
QUERIES = ["w1 w2", "w3 title", "w5 w5 w30", "title 3", "w7"]


def _results(index, k=20):
    return [index.search(q, k=k).to_dict() for q in QUERIES]


def test_save_load_round_trip(tmp_path):
    index = BM25(variant="bm25+", k1=1.2, b=0.6, tokenizer=Tokenizer(stemmer=None)).index(DOCS)
    index.save(tmp_path / "ix")
    loaded = BM25.load(tmp_path / "ix")
    assert loaded._packed is not None  # searched packed, memory-mapped
    assert loaded.resolved_params() == index.resolved_params()  # the parameters as it computes with them
    assert loaded.tokenizer_.get_config() == index.tokenizer_.get_config()
    assert _results(loaded) == _results(index)
    assert loaded.document("d5")["year"] == 1995
    assert loaded.search("w1", where={"year": {"<": 2000}}).ids == index.search("w1", where={"year": {"<": 2000}}).ids
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert manifest["format_version"] == 4 and manifest["n_docs"] == 120 and manifest["checksum"].startswith("sha256:")


def test_add_delete_merge_equal_fresh_build(tmp_path):
    path = tmp_path / "ix"
    BM25().index(DOCS[:80]).save(path)
    index = BM25.load(path)
    index.add(DOCS[80:]).delete(["d3", "d90", "d41"])
    index.commit()
    live = [d for d in DOCS if d["_id"] not in {"d3", "d90", "d41"}]
    fresh = BM25().index(live)
    reopened = BM25.load(path)
    assert len(reopened._segments) == 2
    assert reopened.n_docs == fresh.n_docs == 117
    for a, b in zip(_results(reopened), _results(fresh)):  # before the merge
        assert list(a) == list(b) and np.allclose(list(a.values()), list(b.values()), rtol=1e-6)
    reopened.merge()
    merged = BM25.load(path)
    assert len(merged._segments) == 1
    assert sorted(p.name for p in path.iterdir()) == ["manifest.json", merged._segments[0]["name"]]
    assert _results(merged) == _results(fresh)
    for q in QUERIES:  # the uncompacted in-memory index scores live documents as a fresh build does
        assert np.allclose(index.get_scores(q).values, fresh.get_scores(q).values, rtol=1e-6)


def test_saving_over_an_index_or_merging_keeps_the_users_files(tmp_path):
    """An index folder is the user's folder too: a save over an earlier index and a merge
    change only the manifest and the segment folders it lists (issue 25)."""
    path = tmp_path / "ix"
    BM25().index(DOCS[:80]).save(path)
    (path / "README.txt").write_text("notes on this index")
    (path / "seg-notes").mkdir()  # a folder named like a segment but not one
    (path / "seg-notes" / "a.txt").write_text("kept")
    BM25().index(DOCS[40:]).save(path)
    assert (path / "README.txt").read_text() == "notes on this index" and (path / "seg-notes" / "a.txt").is_file()
    assert _results(BM25.load(path)) == _results(BM25().index(DOCS[40:]))
    index = BM25.load(path)
    index.add(DOCS[:40]).commit()
    index.delete(["d50"]).merge()
    merged = BM25.load(path)
    assert (path / "README.txt").read_text() == "notes on this index" and (path / "seg-notes" / "a.txt").is_file()
    assert sorted(p.name for p in path.iterdir()) == ["README.txt", "manifest.json", merged._segments[0]["name"],
                                                       "seg-notes"]
    assert _results(merged) == _results(BM25().index([d for d in DOCS[40:] + DOCS[:40] if d["_id"] != "d50"]))


def test_a_segment_left_by_a_killed_commit_is_replaced(tmp_path):
    """A commit killed after renaming its segment into place but before replacing the manifest
    leaves a folder the index does not list; the next commit of that number writes over it."""
    path = tmp_path / "ix"
    BM25().index(DOCS[:80]).save(path)
    (path / "seg-000001").mkdir()
    (path / "seg-000001" / "terms.json").write_text("half")
    assert BM25.load(path).n_docs == 80  # the manifest is the commit point: the orphan is not read
    index = BM25.load(path)
    index.add(DOCS[80:]).commit()
    reopened = BM25.load(path)
    assert reopened.n_docs == 120 and _results(reopened) == _results(BM25().index(DOCS))


def test_sweep_leftovers_removes_what_killed_writers_left(tmp_path):
    path = tmp_path / "ix"
    BM25().index(DOCS[:80]).save(path)
    before = sorted(p.name for p in path.iterdir())
    (path / "seg-000001").mkdir()  # renamed into place by a commit killed before its manifest
    stale = path / ".manifest.json.999999999.x.tmp"  # a dead process's temporary
    stale.write_text("half")
    index = BM25.load(path)
    index.sweep_leftovers()
    assert sorted(p.name for p in path.iterdir()) == before and _results(BM25.load(path)) == _results(index)
    BM25().index(DOCS[:5]).sweep_leftovers()  # never saved: nothing to sweep


def test_a_copy_changes_and_commits_while_the_original_answers_as_before(tmp_path):
    path = tmp_path / "ix"
    BM25().index(DOCS[:80]).save(path)
    original = BM25.load(path)
    before = _results(original)
    clone = original.copy()
    clone.add(DOCS[80:]).delete(["d3", "d41"])
    clone.commit()
    assert _results(original) == before and original.n_docs == 80 and "d3" in original.ids
    assert len(original._segments) == 1 and original._segments[0]["name"] == "seg-000000"
    live = [d for d in DOCS if d["_id"] not in {"d3", "d41"}]
    for a, b in zip(_results(BM25.load(path)), _results(BM25().index(live))):
        assert list(a) == list(b) and np.allclose(list(a.values()), list(b.values()), rtol=1e-6)
    clone.copy().merge()  # a copy of the copy rewrites the folder; the first copy still answers
    assert _results(BM25.load(path)) == _results(BM25().index(live)) and clone.n_docs == 118


def _same_state(a, b):
    assert a.ids == b.ids and a.n_docs == b.n_docs and [s["name"] for s in a._segments] == [s["name"] for s in b._segments]
    assert np.array_equal(a._scores.toarray(), b._scores.toarray()) and _results(a) == _results(b)
    assert a.search("w1", where={"year": {">=": 2060}}).ids == b.search("w1", where={"year": {">=": 2060}}).ids


def test_reopen_reads_only_what_another_process_committed(tmp_path, monkeypatch):
    from salience.search import segments

    path = tmp_path / "ix"
    BM25().index(DOCS[:60]).save(path)
    reader, writer = BM25.load(path), BM25.load(path)
    before = _results(reader)
    writer.add(DOCS[60:90]).commit()
    writer.delete(["d3", "d70"]).commit()
    writer.add(DOCS[90:]).delete("d100").commit()
    read = []
    original_read = segments._read_segment
    monkeypatch.setattr(segments, "_read_segment", lambda path, segment, *a: read.append(segment["name"]) or original_read(path, segment, *a))
    reopened = reader.reopen()
    assert read == ["seg-000001", "seg-000002"]  # the first segment is not read again
    _same_state(reopened, BM25.load(path))
    assert reopened.document("d95")["year"] == 2085 and "d3" not in reopened and "d100" not in reopened
    assert _results(reader) == before and reader.n_docs == 60  # the reader itself is unchanged
    assert reopened.reopen() is not reopened and _results(reopened.reopen()) == _results(reopened)

    writer.merge()  # the segments were rewritten: reopening reads the folder whole
    read.clear()
    merged = reopened.reopen()
    assert read == [writer._segments[0]["name"]]
    _same_state(merged, BM25.load(path))


def test_reopen_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(NotFittedError, match="save"):
        BM25().index(DOCS).reopen()
    path = tmp_path / "ix"
    BM25().index(DOCS[:60]).save(path)
    reader, writer = BM25.load(path), BM25.load(path)
    writer.add(DOCS[60:]).commit()
    (path / "seg-000001" / "ids.json").write_text("[not json")
    with pytest.raises(CorruptIndexError, match="seg-000001.*ids.json"):
        reader.reopen()
    assert reader.n_docs == 60
    (path / "seg-000001" / "ids.json").write_text(json.dumps(["d1"] * 60))  # an id the first segment holds
    with pytest.raises(CorruptIndexError, match="share an id"):
        reader.reopen()


def test_delete_accepts_any_iterable():
    index = BM25().index(DOCS[:10]).delete(d for d in ("d1", "d2", "d2"))
    assert index.n_docs == 8 and "d1" not in index.ids and "d2" not in index.ids


def test_deleted_ids_can_be_added_again():
    index = BM25().index(DOCS[:10]).delete("d1").add([{"_id": "d1", "text": "w1 fresh"}])
    assert index.search("fresh").ids == ["d1"]
    assert index.document("d1")["text"] == "w1 fresh"


def test_commit_needs_a_folder():
    with pytest.raises(NotFittedError, match="save"):
        BM25().index(DOCS).commit()


def _saved(tmp_path):
    path = tmp_path / "ix"
    BM25().index(DOCS).save(path)
    return path


def test_truncated_array_named(tmp_path):
    path = _saved(tmp_path)
    target = path / "seg-000000" / "postings_tf_1.npy"
    target.write_bytes(target.read_bytes()[:-7])
    with pytest.raises(CorruptIndexError, match="postings_tf_1.npy.*partial write"):
        BM25.load(path)
    with pytest.raises(CorruptIndexError, match="postings_tf_1.npy"):
        BM25.load(path, verify=False)


def test_flipped_byte_named(tmp_path):
    path = _saved(tmp_path)
    target = path / "seg-000000" / "postings_docs_1.npy"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(CorruptIndexError, match="postings_docs_1.npy: checksum mismatch"):
        BM25.load(path)


def test_missing_file_and_manifest(tmp_path):
    path = _saved(tmp_path)
    (path / "seg-000000" / "terms.json").unlink()
    with pytest.raises(CorruptIndexError, match="terms.json: file is missing"):
        BM25.load(path)
    (path / "manifest.json").unlink()
    with pytest.raises(CorruptIndexError, match="manifest.json: missing"):
        BM25.load(path)
    with pytest.raises(CorruptIndexError, match="no such index folder"):
        BM25.load(tmp_path / "nothing")


def test_garbage_manifest(tmp_path):
    path = _saved(tmp_path)
    (path / "manifest.json").write_text("{not json")
    with pytest.raises(CorruptIndexError, match="manifest.json: cannot be read as JSON"):
        BM25.load(path)
    (path / "manifest.json").write_text(json.dumps({"format": "salience.bm25", "format_version": 99}))
    with pytest.raises(CorruptIndexError, match="newer than this salience"):
        BM25.load(path)


def test_failed_save_keeps_previous_index(tmp_path, monkeypatch):
    path = _saved(tmp_path)
    before = _results(BM25.load(path))
    from salience.search import store

    def explode(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(store, "_manifest", explode)
    with pytest.raises(KeyboardInterrupt):
        BM25().index(DOCS[:5]).save(path)
    monkeypatch.undo()
    assert _results(BM25.load(path)) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ix"]  # no temporary folder left behind
