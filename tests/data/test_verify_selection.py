"""The selection verifier: DSIR's KL of the kept pool by hand, DSIR's weights faithful on a
two-topic pool and on the shared pool against its biomedical target, random scores not."""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from salience.core.base import create
from salience.data.dsir import ImportanceResampler, kl_reduction
from salience.exceptions import IdMismatchError, InvalidParameterError
from salience.text.features import HashedNgrams

DSIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "dsir"
BIO = ["protein binding assay in the cell", "protein folding and enzyme kinetics", "gene expression in yeast cells"]
NEWS = ["stock prices fell on monday", "the central bank raised rates", "markets rallied after the vote"]


def _pool(n: int = 30):
    rng = np.random.default_rng(0)
    texts = [str(rng.choice(BIO if i % 3 == 0 else NEWS)) + f" item {i}" for i in range(n)]
    return texts, [BIO[0] + " and " + BIO[1], BIO[2] + " assay"]


def test_the_outcome_is_the_kl_of_the_kept_pool_by_hand():
    texts, target = _pool()
    verifier = create("verify", "selection", buckets=64, steps=2, n_random=3)
    scores = np.arange(len(texts), dtype=float)
    result = verifier.verify(scores, texts=texts, target=target)
    features = HashedNgrams(buckets=64)
    t_counts = features.transform(target).counts(64)
    everything = features.transform(texts).counts(64)
    kept = [t for i, t in enumerate(texts) if i < 15]  # half removed, the highest-scored (the last 15) first
    kept_counts = features.transform(kept).counts(64)

    def kl(counts):  # KL(target || counts), both smoothed by 1
        t = (t_counts + 1.0) / (t_counts + 1.0).sum()
        s = (counts + 1.0) / (counts + 1.0).sum()
        return float(np.sum(t * np.log(t / s)))

    assert result.curves["scores"][0] == pytest.approx(kl(everything))
    assert result.fractions[-1] == 0.5 and result.curves["scores"][-1] == pytest.approx(kl(kept_counts))
    # DSIR's kl_reduction is the same quantity seen from the whole pool
    assert kl(everything) - kl(kept_counts) == pytest.approx(kl_reduction(t_counts, everything, kept_counts))


def test_dsir_weights_are_faithful_and_random_scores_are_not():
    texts, target = _pool(60)
    weights = ImportanceResampler(HashedNgrams(buckets=256), min_target_tokens=1).fit(target, texts).log_weights(texts)
    verifier = create("verify", "selection", buckets=256, n_random=10)
    good = verifier.verify(weights.values, texts=texts, target=target)
    assert good.verdict == "faithful" and good.gap > 0
    assert verifier.verify(-weights.values, texts=texts, target=target).verdict != "faithful"
    assert verifier.verify(np.random.default_rng(4).random(60), texts=texts, target=target).verdict != "faithful"


def test_bad_input_is_named():
    texts, target = _pool(6)
    verifier = create("verify", "selection", n_random=2)
    with pytest.raises(InvalidParameterError, match="target holds no text"):
        verifier.verify(np.zeros(6), texts=texts, target=["  "])
    with pytest.raises(InvalidParameterError, match="texts must be a list"):
        verifier.verify(np.zeros(6), texts="one text", target=target)
    with pytest.raises(InvalidParameterError, match="ids hold 2 entries for 6 texts"):
        verifier.verify(np.zeros(6), texts=texts, target=target, ids=["a", "b"])
    with pytest.raises(IdMismatchError, match="'z'"):
        verifier.verify({"z": 1.0}, texts=texts, target=target, ids=list("abcdef"))
    with pytest.raises(InvalidParameterError, match="nan"):
        verifier.verify(np.full(6, np.nan), texts=texts, target=target)


@pytest.mark.skipif(not DSIR.exists(), reason="needs ../shared/data (dsir)")
def test_on_the_shared_pool_dsir_weights_for_the_biomedical_target_are_faithful():
    with gzip.open(DSIR / "raw_docs.jsonl.gz", "rt", encoding="utf-8") as fh:
        pool = [json.loads(line)["text"] for _, line in zip(range(2000), fh)]
    target = [json.loads(line)["text"] for line in open(DSIR / "target_biomed.jsonl", encoding="utf-8")][:500]
    weights = ImportanceResampler().fit(target, pool).log_weights(pool)
    verifier = create("verify", "selection", n_random=10, steps=5)
    assert verifier.verify(weights.values, texts=pool, target=target).verdict == "faithful"
    assert verifier.verify(np.random.default_rng(0).random(len(pool)), texts=pool, target=target).verdict != "faithful"


def test_verify_selection_from_the_command_line(tmp_path, capsys):
    from salience.cli import main

    texts, target = _pool(60)
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    wanted = tmp_path / "target.jsonl"
    wanted.write_text("".join(json.dumps({"text": t}) + "\n" for t in target * 200))
    report = tmp_path / "check.json"
    assert main(["verify", "selection", str(pool), "--target", str(wanted), "--random", "5", "--out", str(report),
                 "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["unit"] == "selection" and printed["method"] == "dsir" and printed["n_units"] == 60
    assert printed["verdict"] == "faithful" == json.loads(report.read_text())["verdict"]
    scores = tmp_path / "scores.jsonl"
    scores.write_text("".join(json.dumps({"id": f"d{i}", "salience_score": float(i % 3 == 0)}) + "\n"
                              for i in range(60)))
    assert main(["verify", "selection", str(pool), "--target", str(wanted), "--scores", str(scores), "--random", "5",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["method"] == "given"
    assert main(["verify", "selection", str(pool), "--target", str(wanted), "--method", "knn_shapley"]) == 2
    assert "knn_shapley" in capsys.readouterr().err
