import numpy as np
import pytest

from salience import IdMismatchError, InvalidParameterError
from salience.core.metrics import evaluate
from salience.core.significance import paired_test


def test_exact_randomization_by_hand():
    # differences +0.1, +0.1, +0.1, -0.1: |sum| >= 0.2 for 10 of the 16 sign assignments
    a = {"q1": 0.2, "q2": 0.5, "q3": 0.4, "q4": 0.3}
    b = {"q1": 0.3, "q2": 0.6, "q3": 0.5, "q4": 0.2}
    result = paired_test(a, b)
    assert result.n == 4 and result.difference == pytest.approx(0.05)
    assert result.p_value == pytest.approx(10 / 16)
    assert paired_test(a, a).p_value == 1.0


def test_sampled_randomization_and_t_agree_with_scipy():
    from scipy import stats

    rng = np.random.default_rng(0)
    a = {f"q{i}": float(v) for i, v in enumerate(rng.uniform(size=60))}
    b = {q: v + 0.05 + float(rng.normal(0, 0.1)) for q, v in a.items()}
    t = paired_test(a, b, test="t")
    reference = stats.ttest_rel(list(b.values()), list(a.values()))
    assert t.p_value == pytest.approx(reference.pvalue, rel=1e-12)
    fisher = paired_test(a, b, n_resamples=20_000, seed=1)
    scipy_perm = stats.permutation_test((np.array(list(b.values())) - np.array(list(a.values())),),
                                        np.mean, permutation_type="samples", n_resamples=20_000,
                                        random_state=2).pvalue
    assert fisher.p_value == pytest.approx(scipy_perm, abs=0.01)
    low, high = fisher.ci95
    assert low < fisher.difference < high


def test_reports_of_evaluate_and_bad_input():
    qrels = {"q1": {"d1": 1}, "q2": {"d2": 1}, "q3": {"d3": 1}}
    good = evaluate(qrels, {q: {d: 1.0} for q, j in qrels.items() for d in j}, ["ndcg@10", "mrr@10"])
    bad = evaluate(qrels, {q: {"x": 1.0} for q in qrels}, ["ndcg@10", "mrr@10"])
    result = paired_test(bad, good, metric="ndcg@10")
    assert result.difference == 1.0 and result.p_value == pytest.approx(2 / 8)
    with pytest.raises(InvalidParameterError, match="pass metric="):
        paired_test(bad, good)
    with pytest.raises(IdMismatchError, match="share 0"):
        paired_test({"a": 1.0}, {"b": 1.0})
    with pytest.raises(InvalidParameterError, match="significance test"):
        paired_test({"a": 1.0, "b": 0.0}, {"a": 1.0, "b": 0.0}, test="wilcoxon")


def test_rank_compare_command(tmp_path, capsys):
    import json

    from salience.cli import main

    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(6)))
    a, b = tmp_path / "a.trec", tmp_path / "b.trec"
    a.write_text("".join(f"q{i} Q0 x 1 2.0 a\nq{i} Q0 d{i} 2 1.0 a\n" for i in range(6)))  # relevant at rank 2
    b.write_text("".join(f"q{i} Q0 d{i} 1 2.0 b\n" for i in range(6)))  # relevant at rank 1
    assert main(["rank", "compare", str(qrels), str(a), str(b), "--metrics", "mrr@10", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["metrics"]["mrr@10"]
    assert result["difference"] == 0.5 and result["p_value"] == pytest.approx(2 / 64) and result["subjects"] == 6
