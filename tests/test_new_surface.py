"""Nothing lost on the newer surface (issue 50): line separators inside documents, output folders
that hold the user's files, bounds, tracebacks, silent wrong results and misleading messages.
Each test failed before its fix (the service's cases: tests/server/test_new_surface_service.py; the
model-writing commands': tests/models/test_new_surface_models.py)."""

import json
from pathlib import Path

import numpy as np
import pytest

from salience.cli import main
from salience.search import BM25
from salience.search.dense import Dense

# characters str.splitlines() splits on but JSON leaves unescaped (with ensure_ascii=False)
SEPARATORS = ["\u0085", "\u2028", "\u2029"]
TRICKY = [{"id": f"sep{i}", "title": f"line{c}break", "text": f"one{c}two sensor{c}routing", "tag": f"t{c}"}
          for i, c in enumerate(SEPARATORS)]
PLAIN = [{"id": "a", "text": "boundary layer heat transfer"}, {"id": "b", "text": "lift of slender wings"}]


def _jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _bag(texts, dim=16):
    import zlib

    out = np.ones((len(texts), dim))
    for row, text in enumerate(texts):
        for word in text.lower().split():
            out[row, zlib.crc32(word.encode()) % dim] += 1.0
    return out


# --- 1. line separators inside documents -----------------------------------------------------
def test_separators_round_trip_through_save_add_commit_and_load(tmp_path):
    index = BM25().index(PLAIN + TRICKY[:1]).save(tmp_path / "ix")
    loaded = BM25.load(tmp_path / "ix")
    assert loaded.document("sep0") == {k: v for k, v in TRICKY[0].items() if k != "id"} | loaded.document("sep0")
    assert loaded.document("sep0")["text"] == TRICKY[0]["text"]
    index.add(TRICKY[1:]).commit()
    again = BM25.load(tmp_path / "ix")
    assert [again.document(d["id"])["text"] for d in TRICKY] == [d["text"] for d in TRICKY]
    assert again.search("routing", k=5).ids[:3] == index.search("routing", k=5).ids[:3]
    again.merge()
    assert BM25.load(tmp_path / "ix").document("sep2")["title"] == TRICKY[2]["title"]


def test_separators_round_trip_through_a_dense_index(tmp_path):
    index = Dense(encoder=_bag, encoder_name="bag16").index(PLAIN + TRICKY).save(tmp_path / "dense")
    loaded = Dense.load(tmp_path / "dense", encoder=_bag)
    assert [loaded.document(d["id"])["text"] for d in TRICKY] == [d["text"] for d in TRICKY]
    index.add([{"id": "z", "text": "z\u2028y"}]).commit()
    assert Dense.load(tmp_path / "dense", encoder=_bag).document("z")["text"] == "z\u2028y"


def test_separators_through_the_cli_index_add_and_bulk_build(tmp_path, capsys):
    corpus = _jsonl(tmp_path / "corpus.jsonl", PLAIN + TRICKY)
    out = tmp_path / "ix"
    assert main(["search", "index", str(corpus), "--out", str(out), "--quiet"]) == 0
    assert BM25.load(out).document("sep1")["text"] == TRICKY[1]["text"]
    more = _jsonl(tmp_path / "more.jsonl", [{"id": "m", "text": "more\u0085text routing"}])
    assert main(["search", "add", str(out), str(more), "--quiet"]) == 0
    assert BM25.load(out).document("m")["text"] == "more\u0085text routing"
    bulk = tmp_path / "bulk"
    assert main(["search", "index", str(corpus), "--out", str(bulk), "--memory-mb", "16", "--quiet"]) == 0
    assert BM25.load(bulk).document("sep2")["text"] == TRICKY[2]["text"]
    assert main(["search", "query", str(out), "routing", "-k", "5", "--json", "--quiet"]) == 0
    capsys.readouterr()


def test_a_written_segment_is_read_back_before_the_commit(tmp_path, monkeypatch):
    """A segment whose rows cannot be read back is never committed: the old index stays."""
    from salience.exceptions import CorruptIndexError
    from salience.search import store

    index = BM25().index(PLAIN).save(tmp_path / "ix")
    before = (tmp_path / "ix" / "manifest.json").read_bytes()
    real = store.write_document_rows

    def broken(index, folder, start, stop):
        real(index, folder, start, stop)
        with open(folder / "metadata.jsonl", "a", encoding="utf-8") as fh:
            fh.write("{}\n")  # one row too many: what a reader splitting on more than newlines saw

    monkeypatch.setattr(store, "write_document_rows", broken)
    with pytest.raises(CorruptIndexError, match="read back"):
        index.add([{"id": "c", "text": "c"}]).commit()
    assert (tmp_path / "ix" / "manifest.json").read_bytes() == before
    assert BM25.load(tmp_path / "ix").ids == ["a", "b"]
    with pytest.raises(CorruptIndexError, match="read back"):
        BM25().index(PLAIN).save(tmp_path / "new")
    assert not (tmp_path / "new").exists()


# --- 2. writing over a command's own earlier output keeps the user's files ---------------------
def _user_files(folder: Path) -> dict:
    """Put the user's files in an output folder (top level, a folder of their own, inside a
    folder the command owns); return them to compare after."""
    placed = {"notes.txt": "mine", "photos/cat.jpg": "\xff cat", "config.json.bak": "a backup"}
    for name, text in placed.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return placed


def _still_there(folder: Path, placed: dict) -> None:
    assert {name: (folder / name).read_text(encoding="utf-8") for name in placed} == placed


def test_search_index_with_shards_keeps_the_users_files(tmp_path):
    corpus = _jsonl(tmp_path / "corpus.jsonl", [{"id": f"d{i}", "text": f"heat layer {i} wing"} for i in range(40)])
    out = tmp_path / "ix"
    assert main(["search", "index", str(corpus), "--out", str(out), "--quiet"]) == 0
    placed = _user_files(out)
    assert main(["search", "index", str(corpus), "--out", str(out), "--shards", "2", "--quiet"]) == 0
    _still_there(out, placed)
    assert not (out / "seg-000000").exists() and not (out / "manifest.json").exists()  # the plain index's files went
    (out / "shard-000" / "mine.txt").write_text("inside a shard")
    placed["shard-000/mine.txt"] = "inside a shard"
    assert main(["search", "index", str(corpus), "--out", str(out), "--shards", "3", "--quiet"]) == 0
    _still_there(out, placed)
    from salience.search.shards import ShardedIndex

    assert ShardedIndex.load(out).n_docs == 40
    assert main(["search", "index", str(corpus), "--out", str(out), "--quiet"]) == 0  # back to one index
    _still_there(out, placed)
    assert not (out / "shards.json").exists() and not (out / "shard-001").exists()
    assert BM25.load(out).n_docs == 40
    ShardedIndex.build(corpus, n_shards=2, out=out)  # the Python API follows the same rule
    _still_there(out, placed)
    from salience.exceptions import InvalidParameterError

    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "a.txt").write_text("x")
    with pytest.raises(InvalidParameterError, match="did not write"):
        ShardedIndex.build(corpus, n_shards=2, out=stranger)
    with pytest.raises(InvalidParameterError, match="did not write"):
        ShardedIndex.load(out).save(stranger)
    assert (stranger / "a.txt").read_text() == "x"


# --- 3. a killed supervisor takes its workers with it ------------------------------------------
# --- 4. bounds ---------------------------------------------------------------------------------
def test_sharded_builds_and_loads_stay_bounded_with_one_long_term(tmp_path):
    """One 2,000-character token among 20,000 terms: numbering the shards' vocabularies through a
    fixed-width string array asked for 160 MB; the build of the folder itself keeps no document."""
    import tracemalloc

    from salience.search.shards import ShardedIndex

    rng = np.random.default_rng(0)
    docs = [{"id": f"d{i}", "text": " ".join(f"t{w}" for w in rng.integers(0, 20000, 12))} for i in range(3000)]
    docs.append({"id": "long", "text": "x" * 2000 + " t1"})
    corpus = _jsonl(tmp_path / "corpus.jsonl", docs)
    tracemalloc.start()
    try:
        counts = ShardedIndex.write(corpus, tmp_path / "sh", n_shards=2, memory_mb=4)
        written_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        index = ShardedIndex.load(tmp_path / "sh")
        loaded_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sum(counts) == 3001 and index.n_docs == 3001
    assert written_peak < 30e6 and loaded_peak < 60e6, (written_peak, loaded_peak)
    assert index.search("t1", k=3).ids == BM25().fit(docs).search("t1", k=3).ids


def test_centroid_summaries_are_linear_in_the_text():
    import tracemalloc

    from salience.summarize import Centroid

    sentences = ["heat flows in the wing", "the wing bends", "markets fell", "heat and the wing"]
    # by hand: tf-idf rows against their column sum, both scaled to unit length
    counts = np.array([[1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1], [1, 0, 1, 0, 0, 0]], float)
    idf = np.log(5 / (1 + counts.astype(bool).sum(axis=0))) + 1
    weights = counts * idf
    centroid = weights.sum(axis=0)
    expected = weights @ centroid / np.linalg.norm(weights, axis=1) / np.linalg.norm(centroid)
    got = Centroid(language="en").score_sentences(sentences)
    assert np.allclose(got.values, expected)
    many = [f"the wing number w{i} and heat" for i in range(6000)]  # one shared term: a dense graph
    tracemalloc.start()
    try:
        Centroid(language="en").score_sentences(many)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 40e6, peak  # the cosine matrix alone was 6000^2 entries


# --- 5 and 10. training pairs read through the shared readers; --on-error where it is offered ---
def _corpus_rows(n=40):
    return [{"_id": f"d{i}", "title": f"heat wing {i} flow", "text": f"the heat flow of a wing number {i} . "
             f"a shock wave in the wing {i} ."} for i in range(n)]


def test_train_reranker_pairs_files_are_read_by_the_shared_readers(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.models.tiny import tiny_encoder_folder

    base = str(tiny_encoder_folder(tmp_path / "encoder"))
    corpus = _jsonl(tmp_path / "corpus.jsonl", _corpus_rows())
    bad_utf8 = tmp_path / "latin1.jsonl"
    bad_utf8.write_bytes(b'{"query": "caf\xe9", "passage": "x"}\n')
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(bytes(range(256)) * 4)
    malformed = tmp_path / "malformed.jsonl"
    malformed.write_text('{"query": "heat", "passage": "x"}\n{"query": \n')
    cases = {tmp_path / "missing.jsonl": "missing.jsonl: file not found", bad_utf8: "latin1.jsonl:1: invalid UTF-8",
             binary: "binary.jsonl:1:", malformed: "malformed.jsonl:2: invalid JSON",
             corpus: "corpus.jsonl:1: record has no query"}
    for pairs, expected in cases.items():
        code = main(["search", "train-reranker", str(corpus), "--pairs", str(pairs), "--out", str(tmp_path / "m"),
                     "--base", base, "--quiet"])
        err = capsys.readouterr().err
        assert code == 2 and expected in err and "Traceback" not in err, (pairs, err)
    assert not (tmp_path / "m").exists()
    # a base that is no encoder is refused before any pair is made
    assert main(["search", "train-reranker", str(corpus), "--out", str(tmp_path / "m"), "--base", str(tmp_path),
                 "--quiet"]) == 2
    assert "not a model folder" in capsys.readouterr().err


def test_commands_that_suggest_on_error_have_it(tmp_path, capsys):
    """Every command that reads a jsonl the user gives offers the --on-error its errors suggest."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.models.tiny import tiny_encoder_folder

    rows = _corpus_rows()
    corpus = _jsonl(tmp_path / "good.jsonl", rows)
    lines = corpus.read_bytes().split(b"\n")
    lines[3] = lines[3].replace(b"heat", b"he\xffat")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join(lines))
    encoder = str(tiny_encoder_folder(tmp_path / "encoder"))
    assert main(["search", "index", str(corpus), "--out", str(tmp_path / "ix"), "--quiet"]) == 0
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 1.0 t\nq1 Q0 d2 2 0.5 t\n")
    queries = tmp_path / "queries.jsonl"
    queries.write_bytes(b'{"_id": "q1", "text": "he\\u0061t wing"}\n{"_id": "q2", "text": "fl\xffow"}\n')
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_bytes(b"".join(b'{"id": "r%d", "x": [%d, %d], "label": %d}\n' % (i, i, i % 3, i % 2)
                                  for i in range(30)) + b'{"id": "bad\xff", "x": [1, 1], "label": 0}\n')
    commands = [
        ["search", "queries", str(bad), "--out", str(tmp_path / "pairs.jsonl")],
        ["search", "train-reranker", str(bad), "--kind", "bi", "--base", encoder, "--epochs", "1", "--max-length",
         "16", "--out", str(tmp_path / "bi")],
        ["search", "distill", encoder, "--corpus", str(bad), "--dims", "4", "--out", str(tmp_path / "static")],
        ["search", "rerank", str(tmp_path / "run.trec"), "--index", str(tmp_path / "ix"), "--queries", str(queries),
         "--judge", "encoder", "--model", encoder, "--out", str(tmp_path / "reranked.trec")],
        ["data", "value", str(labelled), "--test", str(labelled), "--features", "x", "--out",
         str(tmp_path / "values.jsonl")],
    ]
    for command in commands:
        assert main(command + ["--quiet"]) == 2, command
        err = capsys.readouterr().err
        assert "--on-error replace" in err and "Traceback" not in err, (command, err)
        assert main(command + ["--quiet", "--on-error", "skip"]) == 0, (command, capsys.readouterr().err)
    capsys.readouterr()


# --- 6. a model of the wrong kind, a NaN grade ---------------------------------------------------
def test_a_qrels_grade_that_is_not_a_whole_number_is_named():
    from salience import Qrels
    from salience.exceptions import InvalidParameterError

    assert Qrels({"q1": {"d1": 2.0, "d2": "1", "d3": np.int64(0)}})["q1"] == {"d1": 2, "d2": 1, "d3": 0}
    for grade in (float("nan"), 1.5, "high", None, float("inf")):
        with pytest.raises(InvalidParameterError, match="grade of 'd1' for 'q1'"):
            Qrels({"q1": {"d1": grade}})


# --- 7. search run: every query searched once, every line of the run readable --------------------
def test_search_run_refuses_queries_it_would_drop_or_write_unreadably(tmp_path, capsys):
    from salience.core.run import Run
    from salience.exceptions import InvalidParameterError

    corpus = _jsonl(tmp_path / "corpus.jsonl", _corpus_rows())
    assert main(["search", "index", str(corpus), "--out", str(tmp_path / "ix"), "--quiet"]) == 0
    out = tmp_path / "run.trec"
    cases = {
        "twice.jsonl": ([{"_id": "q1", "text": "heat"}, {"_id": "q1", "text": "wing"}], "given twice (first on line 1)"),
        "no_id.jsonl": ([{"_id": "q1", "text": "heat"}, {"text": "wing"}], "no_id.jsonl:2: the record has no id"),
        "no_text.jsonl": ([{"_id": "q1", "text": "heat"}, {"_id": "q2"}], "no_text.jsonl:2: query 'q2' has no text"),
        "spaced.jsonl": ([{"_id": "q 1", "text": "heat"}], "query id (in"),
    }
    for name, (rows, expected) in cases.items():
        queries = _jsonl(tmp_path / name, rows)
        assert main(["search", "run", str(tmp_path / "ix"), "--queries", str(queries), "--out", str(out),
                     "--quiet"]) == 2, name
        err = capsys.readouterr().err
        assert expected in err and "Traceback" not in err, (name, err)
        assert not out.exists()
    good = _jsonl(tmp_path / "good.jsonl", [{"_id": "q1", "text": "heat"}, {"_id": "q2", "text": "wing shock"}])
    assert main(["search", "run", str(tmp_path / "ix"), "--queries", str(good), "--out", str(out), "--tag",
                 "my tag", "--quiet"]) == 2
    assert "--tag 'my tag' cannot be written" in capsys.readouterr().err and not out.exists()
    assert main(["search", "run", str(tmp_path / "ix"), "--queries", str(good), "--out", str(out), "--quiet"]) == 0
    assert set(Run.read_trec(out)) == {"q1", "q2"}
    with pytest.raises(InvalidParameterError, match=r"item id \(of subject 'q1'\) 'd 1'"):
        Run({"q1": {"d 1": 1.0}}).write_trec(tmp_path / "x.trec")
    with pytest.raises(InvalidParameterError, match="tag"):
        Run({"q1": {"d1": 1.0}}).write_trec(tmp_path / "x.trec", tag="a\tb")
    assert not (tmp_path / "x.trec").exists()


# --- 8. data value: labels that cannot match, a damaged journal ---------------------------------
def test_data_value_refuses_test_labels_that_share_no_class(tmp_path, capsys):
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(0)
    train = [{"id": f"r{i}", "x": rng.normal(size=2).tolist(), "label": i % 2} for i in range(30)]
    test = [{"id": f"t{i}", "x": rng.normal(size=2).tolist(), "label": f"c{i % 2}"} for i in range(10)]
    out = tmp_path / "values.jsonl"
    code = main(["data", "value", str(_jsonl(tmp_path / "train.jsonl", train)), "--test",
                 str(_jsonl(tmp_path / "test.jsonl", test)), "--features", "x", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "the test labels ('c0', 'c1') share no class with the training labels (0, 1)" in err
    assert not out.exists()


def test_a_bit_flipped_journal_resumes_to_the_same_values(tmp_path):
    pytest.importorskip("sklearn")
    import warnings

    from salience.core.base import create

    rng = np.random.default_rng(1)
    X = rng.normal(size=(24, 2))
    y = (X[:, 0] + 0.3 * rng.normal(size=24) > 0).astype(int)
    train, test = (X[:16], y[:16]), (X[16:], y[16:])
    method = create("valuation", "data_banzhaf", budget=200, seed=0)
    expected = method.score(train, test).values
    journal = tmp_path / "coalitions.journal"
    from salience.data import utility

    real, calls = utility.ModelUtility.__call__, []

    def die_after_two_batches(self, masks):
        calls.append(1)
        if len(calls) > 2:
            raise KeyboardInterrupt
        return real(self, masks)

    utility.ModelUtility.__call__ = die_after_two_batches
    try:
        with pytest.raises(KeyboardInterrupt):
            create("valuation", "data_banzhaf", budget=200, seed=0).score(train, test, journal=journal)
    finally:
        utility.ModelUtility.__call__ = real
    data = bytearray(journal.read_bytes())
    lines = data.split(b"\n")
    assert len(lines) > 3
    spot = len(lines[0]) + 1 + lines[1].index(b" ") + 3  # a digit of the first recorded value
    data[spot] ^= 0x01
    journal.write_bytes(bytes(data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = create("valuation", "data_banzhaf", budget=200, seed=0).score(train, test, journal=journal).values
    assert any("damaged line" in str(w.message) for w in caught)
    assert np.array_equal(resumed, expected)


# --- 9. a bit flipped inside a gzip member: its records are suspect, the range reported -----------
def test_a_failed_gzip_members_records_are_not_kept_and_its_range_is_reported(tmp_path, capsys):
    import gzip
    import random

    rng = random.Random(0)
    words = [f"w{i}" for i in range(3000)]
    members = []
    for m in range(4):  # four members of 500 records each (as bgzip or a chunked writer makes)
        rows = [{"id": f"m{m}r{i}", "text": " ".join(rng.choice(words) for _ in range(30))} for i in range(500)]
        members.append(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode(), mtime=0))
    damaged = bytearray(members[2])
    damaged[len(damaged) // 3] ^= 0x10  # one bit, a third into the third member
    path = tmp_path / "pool.jsonl.gz"
    path.write_bytes(members[0] + members[1] + bytes(damaged) + members[3])
    out = tmp_path / "kept.jsonl"
    assert main(["data", "dedup", str(path), "--out", str(out), "--on-error", "skip", "--n-jobs", "1", "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    (loss,) = report["truncated_files"]
    assert report["documents"] == 1000 and loss["after_line"] == 1000  # the two members that checked out
    first, last = loss["suspect_lines"]
    assert first == 1001 and 1001 <= last <= 1500  # where the damage lies, honestly: within member three
    assert loss["estimated_records"] >= 500
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["id"][:2] for r in kept} == {"m0", "m1"}  # nothing of the damaged member or after it
    assert "1001" in captured.err
    # the strict default stops, naming the file
    assert main(["data", "dedup", str(path), "--out", str(tmp_path / "strict.jsonl"), "--n-jobs", "1",
                 "--quiet"]) == 2


# --- 11. messages that say what is wrong ----------------------------------------------------------
def test_a_shard_folder_is_named_as_a_shard_and_its_manifest_counts_follow_changes(tmp_path, capsys):
    from salience.search.shards import ShardedIndex

    corpus = _jsonl(tmp_path / "corpus.jsonl", [{"id": f"d{i}", "text": f"heat wing {i}"} for i in range(40)])
    assert main(["search", "index", str(corpus), "--out", str(tmp_path / "sh"), "--shards", "2", "--quiet"]) == 0
    more = _jsonl(tmp_path / "more.jsonl", [{"id": f"m{i}", "text": f"wing {i}"} for i in range(6)])
    assert main(["search", "add", str(tmp_path / "sh" / "shard-000"), str(more), "--quiet"]) == 2
    assert "is shard 0 of the 2 of the sharded index" in capsys.readouterr().err
    assert main(["search", "query", str(tmp_path / "sh" / "shard-001"), "wing", "-k", "1", "--quiet"]) == 0
    assert "its documents and statistics are that shard's" in capsys.readouterr().err
    assert main(["search", "add", str(tmp_path / "sh"), str(more), "--quiet"]) == 0
    assert main(["search", "delete", str(tmp_path / "sh"), "d1", "d2", "d3", "--quiet"]) == 0
    manifest = json.loads((tmp_path / "sh" / "shards.json").read_text())
    index = ShardedIndex.load(tmp_path / "sh")
    assert sum(manifest["documents"]) == index.n_docs == 43
    assert manifest["documents"] == [shard.call("get_params") and shard.index.n_docs for shard in index._shards]


# --- 12. defaults that run, options that do something ---------------------------------------------
def test_options_that_would_do_nothing_are_refused_naming_what_enables_them(tmp_path, capsys):
    corpus = _jsonl(tmp_path / "corpus.jsonl", _corpus_rows())
    cases = [
        (["data", "dedup", str(corpus), "--out", str(tmp_path / "d.jsonl"), "--similarity", "0.9"],
         "--similarity does nothing here: it applies to --semantic"),
        (["data", "dedup", str(corpus), "--out", str(tmp_path / "d.jsonl"), "--threshold", "0.5"],
         "--threshold does nothing here: it applies to --near"),
        (["data", "select", "--raw", str(corpus), "--method", "el2n", "--fraction", "0.5", "--buckets", "100",
          "--out", str(tmp_path / "s.jsonl")], "--buckets does nothing here: it applies to selection toward a target"),
        (["search", "index", str(corpus), "--dense", "--memory-mb", "64", "--out", str(tmp_path / "ix")],
         "--memory-mb does nothing here: it applies to BM25 builds"),
    ]
    for command, expected in cases:
        assert main(command + ["--quiet"]) == 2, command
        assert expected in capsys.readouterr().err
    assert not any((tmp_path / name).exists() for name in ("d.jsonl", "s.jsonl", "ix"))
    # the same options where they apply still work
    assert main(["data", "dedup", str(corpus), "--near", "--threshold", "0.5", "--out", str(tmp_path / "d.jsonl"),
                 "--n-jobs", "1", "--quiet"]) == 0
    assert main(["search", "index", str(corpus), "--memory-mb", "64", "--out", str(tmp_path / "ix"), "--quiet"]) == 0


def test_separators_through_a_dense_build_from_the_command_line(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.models.tiny import tiny_encoder_folder

    encoder = tiny_encoder_folder(tmp_path / "encoder")
    corpus = _jsonl(tmp_path / "corpus.jsonl", PLAIN + TRICKY)
    out = tmp_path / "dense"
    assert main(["search", "index", str(corpus), "--dense", "--encoder", str(encoder), "--out", str(out),
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["search", "query", str(out), "routing", "-k", "5", "--json"]) == 0
    texts = {r["id"]: r["text"] for r in json.loads(capsys.readouterr().out)["results"]}
    assert all(texts[d["id"]] == d["text"] for d in TRICKY if d["id"] in texts) and len(texts) == 5


def test_zero_padding_between_gzip_members_is_no_damage_and_moves_no_range(tmp_path):
    import gzip

    from salience.io.shards import iter_shards

    first = gzip.compress(b"".join(b'{"t": %d}\n' % i for i in range(100)))
    second = bytearray(gzip.compress(b"".join(b'{"t": %d}\n' % i for i in range(100, 200))))
    path = tmp_path / "padded.jsonl.gz"
    path.write_bytes(first + b"\0" * 10 + bytes(second) + b"\0" * 7)  # gzip allows zeros between members
    losses: list = []
    assert sum(s.blob.count(b"\n") for s in iter_shards([path], on_error="skip", losses=losses)) == 200 and not losses
    second[len(second) // 2] ^= 1
    path.write_bytes(first + b"\0" * 10 + bytes(second))
    kept = sum(s.blob.count(b"\n") for s in iter_shards([path], on_error="skip", losses=losses))
    (loss,) = losses
    assert kept == 100 and loss.after_line == 100 and loss.suspect_lines[0] == 101 and "data check" in loss.reason
    assert 150 <= loss.suspect_lines[1] <= 200 and loss.estimated_records >= 50  # the member decoded, then failed
