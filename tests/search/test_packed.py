import json

import numpy as np
import pytest
import scipy.sparse as sp

from salience import CorruptIndexError
from salience.search import BM25, store
from salience.search.block_bounds import block_bound_files
from salience.search.packed import PackedPostings, pack_block, packed_files, write_packed

DOCS = [
    {"_id": f"d{i}", "title": f"title {i % 7}", "text": " ".join(f"w{(i * j) % 37}" for j in range(1, 3 + i % 13)),
     "year": 1990 + i % 30}
    for i in range(400)
]
QUERIES = ["w1 w2", "w3 title", "w5 w5 w30", "title 3", "w7", "nothing here", "w36 w2 w2 w11"]


def _packed(tmp_path, matrix: sp.csr_matrix, n_docs: int) -> PackedPostings:
    write_packed(tmp_path, np.diff(matrix.indptr), matrix.indices, matrix.data, np.ones(n_docs, dtype=np.float32))
    arrays = {name: np.load(tmp_path / name, mmap_mode="r") for name in packed_files()}
    return PackedPostings.check(matrix.indptr, arrays, n_docs)


def test_each_term_gets_the_narrowest_width_its_values_fit():
    counts = np.array([3, 0, 2, 2, 1])
    docs = np.array([0, 5, 300, 7, 70_000, 1, 2, 9])
    tf = np.array([1, 2, 255, 1.5, 1, 256, 3, 70_000], dtype=np.float32)
    packed = pack_block(counts, docs, tf)
    widths, parts = packed["docs"]
    # gaps: [0 5 295] [] [7 69993] [1 1] [9]
    assert widths.tolist() == [2, 1, 4, 1, 1]
    assert parts[1].tolist() == [1, 1, 9] and parts[2].tolist() == [0, 5, 295] and parts[4].tolist() == [7, 69_993]
    widths, parts = packed["tf"]
    assert widths.tolist() == [1, 1, 4, 2, 4]  # whole numbers <= 255, a fraction, <= 65535, larger
    assert parts[1].dtype == np.uint8 and parts[2].dtype == np.uint16 and parts[4].dtype == np.float32
    assert parts[2].tolist() == [256, 3] and parts[4].tolist() == [1.5, 1.0, 70_000.0]


@pytest.mark.parametrize("density", [0.5, 0.01, 0.0005])
def test_unpack_row_and_rows_give_back_the_postings(tmp_path, density):
    rng = np.random.default_rng(3)
    matrix = sp.random(200, 90_000, density=density, random_state=4, format="csr", dtype=np.float32)
    matrix.data = np.ceil(matrix.data * rng.choice([3, 300, 90_000], matrix.nnz)).astype(np.float32)
    matrix.data[::97] = 0.25
    matrix.sort_indices()
    packed = _packed(tmp_path, matrix, 90_000)
    docs, tf = packed.unpack()
    np.testing.assert_array_equal(docs, matrix.indices)
    np.testing.assert_array_equal(tf, matrix.data)
    for term in (0, 57, 199):
        docs, tf = packed.row(term)
        np.testing.assert_array_equal(docs, matrix[term].indices)
        np.testing.assert_array_equal(tf, matrix[term].data)
    terms = np.array([9, 2, 150])
    indptr, docs, tf = packed.rows(terms)
    sub = matrix[terms]
    np.testing.assert_array_equal(indptr, sub.indptr)
    np.testing.assert_array_equal(docs, sub.indices)
    np.testing.assert_array_equal(tf, sub.data)
    with pytest.raises(ValueError, match="beyond the segment's 1000"):
        PackedPostings.check(matrix.indptr, {name: np.load(tmp_path / name) for name in packed_files()}, 1000)


def _equal_results(a: BM25, b: BM25):
    for x, y in zip(a.search_batch(QUERIES, k=15), b.search_batch(QUERIES, k=15)):
        assert x.ids == y.ids
        np.testing.assert_array_equal(x.values, y.values)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("params", [{}, {"variant": "bm25+", "b": 0.3}, {"variant": "bm25l", "field_weights": {"title": 2.5}},
                                    {"variant": "tfidf"}, {"variant": "atire", "k1": 0.9}, {"variant": "robertson"}])
def test_a_packed_index_answers_as_the_index_in_memory(tmp_path, params, backend):
    if backend == "numba":
        pytest.importorskip("numba")  # the kernel that decodes and scores packed postings
    params = {**params, "backend": backend}
    memory = BM25(**params).index(DOCS)
    memory.save(tmp_path / "ix")
    packed = BM25.load(tmp_path / "ix")
    assert packed._packed is not None
    _equal_results(packed, memory)
    assert packed.search("w1", where={"year": {"<": 2000}}).ids == memory.search("w1", where={"year": {"<": 2000}}).ids
    for query in QUERIES[:4]:
        np.testing.assert_array_equal(packed.get_scores(query).values, memory.get_scores(query).values)
        np.testing.assert_array_equal(packed.score(query, ["d5", "d44"]).values, memory.score(query, ["d5", "d44"]).values)
        assert packed.explain(query, "d12").to_dict() == memory.explain(query, "d12").to_dict()
        ids = ["d12", "d0", "d44", "d12"]  # a search's results explained together, each term's postings read once
        assert ([e.to_dict() for e in packed.explain_batch(query, ids)] ==
                [e.to_dict() for e in memory.explain_batch(query, ids)] == [memory.explain(query, i).to_dict() for i in ids])
    assert packed._packed is not None  # nothing above unpacked it
    # a copy shares the packed postings and unpacks only itself when it changes
    copy = packed.copy().add([{"_id": "new", "text": "w1 w2 w2"}]).delete(["d3"])
    assert packed._packed is not None and copy._packed is None
    _equal_results(copy, BM25(**params).index([d for d in DOCS if d["_id"] != "d3"] + [{"_id": "new", "text": "w1 w2 w2"}]))
    _equal_results(packed, memory)


@pytest.mark.parametrize("chunk", [1, 7, 64, 399, 400, 1 << 15])
def test_the_packed_kernel_gives_the_same_top_k_whatever_documents_it_scores_at_a_time(tmp_path, monkeypatch, chunk):
    # chunks of one document, chunks that end inside a term's gaps, one chunk, chunks whose
    # touched documents exceed the room kept for them (then the chunk is scanned whole), and, for
    # the small chunks, queries with postings enough to scan every chunk whole ("title": all 400)
    pytest.importorskip("numba")
    from salience.search import topk

    memory = BM25(backend="numba").index(DOCS)
    memory.save(tmp_path / "ix")
    packed = BM25.load(tmp_path / "ix")
    monkeypatch.setattr(topk.top_k_packed_numba, "__defaults__", (chunk, True, None))  # (chunk, ordered, cache)
    _equal_results(packed, memory)
    mask = {"year": {"<": 2000}}
    for query in QUERIES:
        assert packed.search(query, k=400, where=mask).ids == memory.search(query, k=400, where=mask).ids


@pytest.mark.parametrize("variant", ["lucene", "bm25l", "tfidf"])
def test_the_packed_kernel_scores_long_lists_a_batch_at_a_time_as_the_index_in_memory(tmp_path, monkeypatch, variant):
    # a term in every document (many decoding batches of POSTING_BATCH postings, some frequencies
    # past 255: two-byte widths), one every 300 documents (two-byte gaps), both in one query, and
    # batches that end exactly at a chunk's end
    pytest.importorskip("numba")
    from salience.search import topk
    from salience.search._numba_kernels import POSTING_BATCH

    n = 3 * POSTING_BATCH + 5
    docs = [{"_id": f"d{i}", "text": " ".join(["every"] * (1 + (i * 7) % 300) + ["rare"] * (i % 300 == 0)
                                              + [f"w{i % 11}"])} for i in range(n)]
    memory = BM25(variant=variant, fields=("text",), backend="numba").index(docs)
    memory.save(tmp_path / "ix")
    packed = BM25.load(tmp_path / "ix")
    assert packed._packed is not None
    for chunk in (POSTING_BATCH, 1 << 15):
        monkeypatch.setattr(topk.top_k_packed_numba, "__defaults__", (chunk, True, None))  # (chunk, ordered, cache)
        for query in ("every", "every rare", "rare every w3", "w3 w4 every"):
            for k in (1, 10, 200):
                x, y = packed.search(query, k=k), memory.search(query, k=k)
                assert x.ids == y.ids
                np.testing.assert_array_equal(x.values, y.values)


def test_packed_postings_are_smaller_than_unpacked(tmp_path):
    BM25().index(DOCS).save(tmp_path / "ix")
    folder = tmp_path / "ix" / "seg-000000"
    nnz = int(np.load(folder / "postings_indptr.npy")[-1])
    packed_bytes = sum((folder / name).stat().st_size - 128 for name in packed_files())
    assert packed_bytes <= 2.5 * nnz  # against 8 bytes a posting unpacked (int32 + float32)


def test_indexes_saved_unpacked_by_earlier_versions_still_load(tmp_path):
    index = BM25().index(DOCS)
    index.save(tmp_path / "ix")
    folder = tmp_path / "ix" / "seg-000000"
    docs, tf = BM25.load(tmp_path / "ix")._packed.unpack()
    np.save(folder / "postings_docs.npy", docs.astype(np.int32))
    np.save(folder / "postings_tf.npy", tf)
    for name in packed_files():
        (folder / name).unlink()
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    manifest.pop("checksum")
    manifest["format_version"] = 2
    manifest["segments"][0]["files"] = store.file_table(folder)
    manifest["checksum"] = store._manifest_digest(manifest)
    (tmp_path / "ix" / "manifest.json").write_text(json.dumps(manifest))
    old = BM25.load(tmp_path / "ix")
    assert old._packed is None
    _equal_results(old, index)
    old.add([{"_id": "new", "text": "w1"}]).commit()  # a commit to it writes a packed segment beside the old one
    again = BM25.load(tmp_path / "ix")
    assert (tmp_path / "ix" / "seg-000001" / "postings_docs_width.npy").is_file() and "new" in again
    with pytest.raises(CorruptIndexError, match="postings_docs.npy"):
        (folder / "postings_docs.npy").write_bytes(b"garbage")
        BM25.load(tmp_path / "ix", verify=False)


def test_writing_a_block_of_terms_at_a_time_gives_the_same_files(tmp_path, monkeypatch):
    import salience.search.packed as packed_module

    matrix = sp.random(300, 5_000, density=0.02, random_state=7, format="csr", dtype=np.float32)
    matrix.data = np.ceil(matrix.data * 40).astype(np.float32)
    matrix.sort_indices()
    (tmp_path / "whole").mkdir()
    (tmp_path / "blocks").mkdir()
    lengths = np.random.default_rng(3).integers(1, 50, 5_000).astype(np.float32)
    write_packed(tmp_path / "whole", np.diff(matrix.indptr), matrix.indices, matrix.data, lengths)
    monkeypatch.setattr(packed_module, "_BLOCK_POSTINGS", 5)
    write_packed(tmp_path / "blocks", np.diff(matrix.indptr), matrix.indices, matrix.data, lengths)
    for name in packed_files() + block_bound_files():  # the block bounds too, written a few terms at a time
        assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "blocks" / name).read_bytes()
    (tmp_path / "empty").mkdir()
    write_packed(tmp_path / "empty", np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), np.zeros(0))
    assert all(np.load(tmp_path / "empty" / name).size == 0 for name in packed_files() + block_bound_files())
