import numpy as np
import pytest

from salience import InvalidParameterError, ShapeError
from salience.explain import (Attribution, ExactShapley, ShapleyInteraction, mean_abs_attribution,
                              permutation_importance)


def test_interaction_values_by_hand():
    # f = x0 x1 + x2 at (1, 2, 3) against zeros: v(S) is 2 on {0, 1}, 3 with feature 2.
    # I_01 = mean over S in {{}, {2}} of [v(S+0+1) - v(S+0) - v(S+1) + v(S)] = 2, split in halves.
    f = lambda X: X[:, 0] * X[:, 1] + X[:, 2]  # noqa: E731
    a = ShapleyInteraction(f, feature_names=["a", "b", "c"]).attribute([[1.0, 2.0, 3.0]])
    assert a.values.shape == (1, 3, 3)
    assert a.values[0].tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 3.0]]
    scores = a.to_scores()
    assert scores.ids == ["a x b", "a x c", "b x c"] and scores.values.tolist() == [1.0, 0.0, 0.0]


def test_interaction_rows_add_up_to_shapley_values():
    rng = np.random.default_rng(0)
    w = rng.normal(size=6)
    f = lambda X: np.tanh(X[:, :5] @ w[:5]) + X[:, 0] * X[:, 1] * X[:, 2] - X[:, 3] * X[:, 4] + X[:, 5]  # noqa: E731
    x, background = rng.normal(size=(2, 6)), rng.normal(size=(5, 6))
    inter = ShapleyInteraction(f).attribute(x, baselines=background)
    exact = ExactShapley(f).attribute(x, baselines=background)
    assert np.allclose(inter.values.sum(axis=2), exact.values, atol=1e-12)
    assert np.allclose(inter.values.sum(axis=(1, 2)) + inter.base_value, f(x), atol=1e-10)
    assert np.allclose(inter.values, inter.values.transpose(0, 2, 1))
    # the additive feature 5 interacts with nothing
    assert np.abs(inter.values[:, 5, :5]).max() < 1e-12
    with pytest.raises(InvalidParameterError, match="KernelShap"):
        ShapleyInteraction(f).attribute(np.zeros((1, 17)))


def test_permutation_importance_by_hand_and_against_scikit_learn():
    x = np.array([[0.0, 5.0], [1.0, 5.0], [2.0, 5.0], [3.0, 5.0]])
    unlabelled = permutation_importance(lambda rows: 2 * rows[:, 0], x, n_repeats=4, seed=1, feature_names=["u", "v"])
    assert unlabelled.importances.shape == (4, 2) and unlabelled.mean[1] == 0.0 and unlabelled.mean[0] > 0
    assert unlabelled.to_scores().ranked_ids() == ["u", "v"]
    # the unlabelled importance is the mean |change|: shuffling [0, 1, 2, 3] moves each value
    # by |x_perm - x| times 2
    rng = np.random.default_rng(1)
    expected = [2 * np.abs(x[rng.permutation(4), 0] - x[:, 0]).mean() for _ in range(1)]
    assert unlabelled.importances[0, 0] == pytest.approx(expected[0])
    assert unlabelled.model_calls == 4 + 4 * 2 * 4

    sklearn = pytest.importorskip("sklearn")
    from sklearn.datasets import load_diabetes
    from sklearn.inspection import permutation_importance as sk_permutation_importance
    from sklearn.linear_model import Ridge
    from sklearn.metrics import r2_score

    data = load_diabetes()
    model = Ridge(alpha=1.0).fit(data.data, data.target)
    ours = permutation_importance(model.predict, data.data, data.target, metric=r2_score, n_repeats=20, seed=0)
    theirs = sk_permutation_importance(model, data.data, data.target, scoring="r2", n_repeats=20, random_state=0)
    assert sklearn.__version__
    # different shuffles, the same quantity: agreement within the repeats' spread
    assert np.abs(ours.mean - theirs.importances_mean).max() < 3 * (theirs.importances_std.max() / np.sqrt(20) + 0.01)
    assert list(np.argsort(-ours.mean)[:3]) == list(np.argsort(-theirs.importances_mean)[:3])


def test_permutation_importance_refuses_bad_input():
    f = lambda rows: rows[:, 0]  # noqa: E731
    with pytest.raises(InvalidParameterError, match="at least 2 rows"):
        permutation_importance(f, [[1.0, 2.0]])
    with pytest.raises(ShapeError, match="labels"):
        permutation_importance(f, np.zeros((3, 2)), [1, 2])
    with pytest.raises(InvalidParameterError, match="labels"):
        permutation_importance(f, np.zeros((3, 2)), metric=lambda a, b: 0.0)
    with pytest.raises(InvalidParameterError, match="n_repeats"):
        permutation_importance(f, np.zeros((3, 2)), n_repeats=0)
    with pytest.raises(InvalidParameterError, match="finite"):
        permutation_importance(f, [[1.0, np.nan], [0.0, 0.0]])


def test_mean_abs_attribution():
    a = Attribution(np.array([[1.0, -3.0], [-1.0, 1.0]]), np.zeros(2), "x", 0, ["p", "q"])
    scores = mean_abs_attribution(a)
    assert scores.ids == ["p", "q"] and scores.values.tolist() == [1.0, 2.0]
    with pytest.raises(InvalidParameterError):
        mean_abs_attribution(np.zeros(3))


class _Tokenizer:
    def encode(self, text, add_special_tokens=True):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(map(chr, ids))


def test_a_missing_extra_is_named(monkeypatch):
    import sys

    from salience.exceptions import MissingDependencyError
    from salience.explain import IntegratedGradients, LMAttribution, load_causal_lm

    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    with pytest.raises(MissingDependencyError, match=r"salience\[torch\]"):
        IntegratedGradients(lambda rows: rows.sum(1)).attribute([[1.0, 2.0]])
    with pytest.raises(MissingDependencyError, match=r"salience\[torch\]"):
        LMAttribution(lambda **inputs: None, tokenizer=_Tokenizer()).attribute("a prompt", target=" more")
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(MissingDependencyError, match="transformers"):
        load_causal_lm("smollm2")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    from salience import Scores
    from salience.core.plots import plot_attribution

    with pytest.raises(MissingDependencyError, match=r"salience\[plot\]"):
        plot_attribution(Scores([1.0]))
