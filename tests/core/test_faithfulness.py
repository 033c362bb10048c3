import numpy as np
import pytest

from salience import InvalidParameterError, Scores, ShapeError
from salience.core.faithfulness import comprehensiveness, deletion_curve, insertion_curve, sufficiency


def weighted(rows):
    return rows @ np.array([4.0, 2.0, 1.0, 0.5])


def test_curves_by_hand():
    x = np.array([1.0, 1.0, 1.0, 1.0])
    faithful, reversed_ = [4.0, 2.0, 1.0, 0.5], [0.5, 1.0, 2.0, 4.0]
    good, bad = deletion_curve(weighted, x, faithful), deletion_curve(weighted, x, reversed_)
    assert good.outputs.tolist() == [7.5, 3.5, 1.5, 0.5, 0.0] and good.fractions.tolist() == [0, 0.25, 0.5, 0.75, 1.0]
    # trapezoids: 0.25 * ((7.5 + 3.5) + (3.5 + 1.5) + (1.5 + 0.5) + (0.5 + 0)) / 2
    assert good.auc == pytest.approx(0.25 * (11 + 5 + 2 + 0.5) / 2) and good.model_calls == 5
    assert bad.auc > good.auc  # a wrong ranking keeps the output up longer
    ins_good, ins_bad = insertion_curve(weighted, x, faithful), insertion_curve(weighted, x, reversed_)
    assert ins_good.outputs.tolist() == [0.0, 4.0, 6.0, 7.0, 7.5] and ins_good.auc > ins_bad.auc
    # Scores work as well as arrays; steps coarsen the curve; the baseline is the removed value
    assert deletion_curve(weighted, x, Scores(faithful), steps=2).outputs.tolist() == [7.5, 1.5, 0.0]
    assert deletion_curve(weighted, x, faithful, baseline=[1.0, 1.0, 0.0, 0.0]).outputs.tolist() == [7.5, 7.5, 7.5, 6.5, 6.0]


def test_comprehensiveness_and_sufficiency_by_hand():
    x = np.ones(4)
    # remove the top 1 (ceil(0.25 * 4)) then the top 2: drops 4 and 6
    assert comprehensiveness(weighted, x, [4.0, 2.0, 1.0, 0.5], fractions=[0.25, 0.5]) == pytest.approx(5.0)
    # keep only the top 1, then the top 2: drops 3.5 and 1.5
    assert sufficiency(weighted, x, [4.0, 2.0, 1.0, 0.5], fractions=[0.25, 0.5]) == pytest.approx(2.5)
    assert comprehensiveness(weighted, x, [0.5, 1.0, 2.0, 4.0], fractions=[0.25, 0.5]) == pytest.approx(1.0)  # drops 0.5, 1.5


def test_the_explainers_rankings_are_faithful_on_a_real_model():
    pytest.importorskip("sklearn")
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    from salience.explain import KernelShap

    data = load_breast_cancer()
    X = StandardScaler().fit_transform(data.data[:, :10])
    model = LogisticRegression(max_iter=1000).fit(X, data.target)
    f = lambda rows: model.decision_function(rows)  # noqa: E731
    background = X[:50]
    row = X[100]
    shap_values = KernelShap(f).attribute(row, baselines=background, n_samples=256, seed=0).values[0]
    mean = background.mean(axis=0)
    rng = np.random.default_rng(0)
    explained = deletion_curve(f, row, shap_values, baseline=mean).auc
    random_aucs = [deletion_curve(f, row, rng.normal(size=10), baseline=mean).auc for _ in range(20)]
    # the output falls faster when the explained features go first than in a random order
    if f(row[None])[0] > f(mean[None])[0]:
        assert explained < np.mean(random_aucs)
    else:
        assert explained > np.mean(random_aucs)


def test_bad_input():
    with pytest.raises(ShapeError, match="one value per feature"):
        deletion_curve(weighted, np.ones(4), [1.0, 2.0])
    with pytest.raises(InvalidParameterError, match="scores must be finite"):
        deletion_curve(weighted, np.ones(4), [1.0, np.nan, 0.0, 0.0])
    with pytest.raises(ShapeError, match="x must be one row"):
        deletion_curve(weighted, np.ones((2, 4)), [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(InvalidParameterError, match="fractions"):
        comprehensiveness(weighted, np.ones(4), [1.0, 2.0, 3.0, 4.0], fractions=[0.0])
    with pytest.raises(InvalidParameterError, match="steps"):
        insertion_curve(weighted, np.ones(4), [1.0, 2.0, 3.0, 4.0], steps=0)


def test_remove_and_retrain_tells_an_informative_ranking_from_a_random_one():
    pytest.importorskip("sklearn")
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    from salience.core.faithfulness import remove_and_retrain

    data = load_breast_cancer()
    x = StandardScaler().fit_transform(data.data)
    order = np.random.default_rng(0).permutation(len(x))
    train, test = order[:400], order[400:]
    model = LogisticRegression(max_iter=5000)
    fitted = model.fit(x[train], data.target[train])
    # gradient x input of the linear log-odds: each feature's share of the decision
    informative = fitted.coef_[0] * x
    random = np.random.default_rng(1).normal(size=x.shape)
    args = (model, x[train], data.target[train], x[test], data.target[test])
    roar = remove_and_retrain(*args, informative[train], informative[test], fractions=(0.0, 0.5, 0.8, 0.95))
    roar_random = remove_and_retrain(*args, random[train], random[test], fractions=(0.0, 0.5, 0.8, 0.95))
    assert roar.scores[0] == roar_random.scores[0] > 0.95  # nothing removed: the same model
    assert roar.auc < roar_random.auc and roar.scores[-1] < roar_random.scores[-1]
    kar = remove_and_retrain(*args, informative[train], informative[test], fractions=(0.05, 0.2), keep=True)
    assert kar.keep and kar.scores.min() > 0.85  # the top 5% of features alone keep most of the accuracy
    with pytest.raises(ShapeError, match="test_scores"):
        remove_and_retrain(*args, informative[train], informative[test][:, :3])
    with pytest.raises(InvalidParameterError, match="fractions"):
        remove_and_retrain(*args, informative[train], informative[test], fractions=(1.5,))
