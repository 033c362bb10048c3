import math

import numpy as np
import pytest

from salience import InvalidParameterError, SalienceError, ShapeError
from salience.explain import Banzhaf, ExactShapley, KernelShap, Occlusion, PermutationShapley


def interaction(rows):
    return 2.0 * rows[:, 0] + rows[:, 0] * rows[:, 1]


def test_hand_computed_values_for_two_features():
    # v(empty) = 0, v({0}) = 2, v({1}) = 0, v({0, 1}) = 3 at x = (1, 1) against a zero baseline
    x = [[1.0, 1.0]]
    exact = ExactShapley(interaction).attribute(x)
    assert exact.values.tolist() == [[2.5, 0.5]] and exact.base_value.tolist() == [0.0]
    assert exact.model_calls == 4 and exact.method == "exact_shapley"
    assert Banzhaf(interaction).attribute(x).values.tolist() == [[2.5, 0.5]]  # mean of (2, 3) and of (0, 1)
    # occlusion: f(x) minus the value without the feature: 3 - 0 and 3 - 2
    assert Occlusion(interaction).attribute(x).values.tolist() == [[3.0, 1.0]]
    assert Occlusion(interaction, feature_groups=[[0, 1]]).attribute(x).values.tolist() == [[1.5, 1.5]]
    assert KernelShap(interaction).attribute(x).values == pytest.approx(np.array([[2.5, 0.5]]), abs=1e-12)
    # a background set: v(S) averages over its rows
    background = np.array([[0.0, 0.0], [2.0, 2.0]])
    with_background = ExactShapley(interaction).attribute(x, baselines=background)
    f = lambda a, b: 2 * a + a * b  # noqa: E731
    v = {(): (f(0, 0) + f(2, 2)) / 2, (0,): (f(1, 0) + f(1, 2)) / 2, (1,): (f(0, 1) + f(2, 1)) / 2, (0, 1): f(1, 1)}
    expected = [0.5 * (v[(0,)] - v[()]) + 0.5 * (v[(0, 1)] - v[(1,)]), 0.5 * (v[(1,)] - v[()]) + 0.5 * (v[(0, 1)] - v[(0,)])]
    assert with_background.values[0] == pytest.approx(expected) and with_background.base_value[0] == v[()]


def _model(seed=0, m=7):
    w = np.random.default_rng(seed).normal(size=m)
    return lambda X: np.tanh(X @ w) + X[:, 0] * X[:, 1] - X[:, 2] * X[:, 3] * X[:, 4]


def test_efficiency_and_the_sampling_methods_against_exact():
    rng = np.random.default_rng(1)
    f = _model()
    x, background = rng.normal(size=(3, 7)), rng.normal(size=(25, 7))
    exact = ExactShapley(f).attribute(x, baselines=background)
    output = f(x)
    assert np.abs(exact.values.sum(axis=1) + exact.base_value - output).max() < 1e-8
    # KernelSHAP is exact once its budget covers every coalition (2^7 - 2 = 126)
    kernel = KernelShap(f).attribute(x, baselines=background, n_samples=126)
    assert np.abs(kernel.values - exact.values).max() < 1e-8
    # each row's coalitions over every background row and its f(x); f(b) once for the three rows
    assert kernel.model_calls == 3 * (126 * 25 + 1) + 25
    errors = []
    for budget in (32, 64, 96):
        sampled = KernelShap(f).attribute(x, baselines=background, n_samples=budget, seed=0)
        assert np.abs(sampled.values.sum(axis=1) + sampled.base_value - output).max() < 1e-8  # constrained
        errors.append(np.abs(sampled.values - exact.values).mean())
    assert errors[-1] < errors[0] and errors[-1] < 0.05 * np.abs(exact.values).mean() + 0.02
    perm = PermutationShapley(f).attribute(x, baselines=background, n_samples=2000, seed=0)
    assert np.abs(perm.values.sum(axis=1) + perm.base_value - output).max() < 1e-8
    assert np.abs(perm.values - exact.values).max() < 0.05
    # the same seed, the same values; a row's values do not depend on the rows explained with it
    again = PermutationShapley(f).attribute(x[1:2], baselines=background, n_samples=2000, seed=0)
    assert np.array_equal(again.values[0], perm.values[1])


def test_attributions_become_scores():
    attribution = ExactShapley(interaction, feature_names=["dose", "age"]).attribute([[1.0, 1.0]])
    scores = attribution.to_scores()
    assert scores.ranked_ids() == ["dose", "age"] and scores.values.tolist() == [2.5, 0.5]
    assert ExactShapley(interaction).score([1.0, 1.0]).ranked_ids() == [0, 1]


def test_bad_input_is_named():
    with pytest.raises(ShapeError, match="returned shape"):
        ExactShapley(lambda X: np.ones((len(X), 2, 2))).attribute([[1.0, 2.0]])
    with pytest.raises(ShapeError, match="pass target="):
        ExactShapley(lambda X: np.ones((len(X), 2))).attribute([[1.0, 2.0]])
    assert ExactShapley(lambda X: np.stack([X[:, 0], X[:, 1]], 1)).attribute([[1.0, 2.0]], target=1).values.tolist() == [[0.0, 2.0]]
    with pytest.raises(InvalidParameterError, match="returned nan for row"):
        ExactShapley(lambda X: X[:, 0] / 0.0 * 0.0).attribute([[1.0, 2.0]])
    with pytest.raises(InvalidParameterError, match="holds nan at row 0, feature 1"):
        ExactShapley(interaction).attribute([[1.0, float("nan")]])
    with pytest.raises(ShapeError, match="baselines must have 2 features"):
        ExactShapley(interaction).attribute([[1.0, 1.0]], baselines=np.zeros((3, 5)))
    with pytest.raises(InvalidParameterError, match="limited to 16 features: use KernelShap"):
        ExactShapley(lambda X: X.sum(1)).attribute(np.zeros((1, 17)))
    with pytest.raises(InvalidParameterError, match="the model failed .*ZeroDivisionError"):
        ExactShapley(lambda X: 1 / 0).attribute([[1.0, 2.0]])
    with pytest.raises(InvalidParameterError, match="must be a callable"):
        ExactShapley("not a model").attribute([[1.0]])
    with pytest.raises(InvalidParameterError, match="disjoint lists"):
        Occlusion(interaction, feature_groups=[[0], [0, 1]]).attribute([[1.0, 1.0]])
    with pytest.raises(SalienceError):
        KernelShap(interaction).attribute([[1.0, 1.0]], n_samples=0)


def test_kernel_shap_deals_the_background_rows_to_designs():
    # the background rows are dealt to several designs, so their sampling errors average out:
    # at 64 of 126 coalitions (2 designs by default) the error is about 4.7% here; one design
    # for every row about 9.6%, one per background row about 4.3%
    rng = np.random.default_rng(1)
    f = _model()
    x, background = rng.normal(size=(3, 7)), rng.normal(size=(25, 7))
    exact = ExactShapley(f).attribute(x, baselines=background).values

    def error(**options):
        return np.mean([np.linalg.norm(KernelShap(f, **options).attribute(x, baselines=background, n_samples=64,
                                                                       seed=seed).values - exact)
                        / np.linalg.norm(exact) for seed in range(8)])

    auto, one, each = error(), error(n_designs=1), error(n_designs=25)
    assert auto < 0.055 and each < auto < one
    assert KernelShap(f).attribute(x, baselines=background, n_samples=64).info["designs"] == 2  # ceil(126 / 64)
    rows = []

    def recording(batch):
        rows.append(batch.copy())
        return f(batch)

    KernelShap(recording, n_designs=2).attribute(x[:1], baselines=background[:4], n_samples=40, seed=0)
    # f(x) and the 4 f(b) first; then design 0 (background rows 0 and 2), design 1 (rows 1 and 3):
    # each coalition over its design's background rows in turn
    seen = np.concatenate(rows)[5:].reshape(2, 40, 2, 7)
    kept = np.isclose(seen, x[0])
    assert np.array_equal(seen[0, :, 0][~kept[0, :, 0]], np.broadcast_to(background[0], (40, 7))[~kept[0, :, 0]])
    assert np.array_equal(seen[1, :, 1][~kept[1, :, 1]], np.broadcast_to(background[3], (40, 7))[~kept[1, :, 1]])
    coalitions = kept[:, :, 0]
    assert np.array_equal(coalitions, kept[:, :, 1])  # the design's rows share its coalitions
    assert not np.array_equal(coalitions[0], coalitions[1])  # the two designs take different ones
    # a Gray-code walk: consecutive coalitions differ in fewer features than random ones would (3.5)
    assert np.abs(np.diff(coalitions.astype(int), axis=1)).sum(axis=2).mean() < 2.5


@pytest.mark.parametrize("n_designs", [1, 3, 25])
def test_kernel_shap_is_exact_for_any_designs_and_blocks(n_designs, monkeypatch):
    import salience.explain.kernel_shap as shapley

    rng = np.random.default_rng(2)
    f = _model()
    x, background = rng.normal(size=(4, 7)), rng.normal(size=(25, 7))
    exact = ExactShapley(f).attribute(x, baselines=background).values
    whole = KernelShap(f, n_designs=n_designs).attribute(x, baselines=background, n_samples=126)
    sampled = KernelShap(f, n_designs=n_designs).attribute(x, baselines=background, n_samples=48, seed=3)
    assert np.abs(whole.values - exact).max() < 1e-8
    # memory stays bounded: at most a block of hybrids (2000 values) per call, a design split
    # by its background rows; down to one row when a block is smaller than that (126
    # coalitions x 7 features = 882 values, over a 500 block)
    monkeypatch.setattr(shapley, "_BLOCK_ELEMENTS", 2000)
    sizes = []

    def counted(rows):
        sizes.append(len(rows))
        return f(rows)

    blocked = KernelShap(counted, n_designs=n_designs).attribute(x, baselines=background, n_samples=126)
    assert np.abs(blocked.values - whole.values).max() < 1e-12 and blocked.info["batches"] > whole.info["batches"]
    assert max(sizes[1:]) * 7 <= 2000 and sizes[0] - 4 - 25 <= 2000 // 7
    monkeypatch.setattr(shapley, "_BLOCK_ELEMENTS", 500)
    tiny = KernelShap(f, n_designs=n_designs).attribute(x, baselines=background, n_samples=126)
    assert np.abs(tiny.values - whole.values).max() < 1e-12
    again = KernelShap(f, n_designs=n_designs).attribute(x, baselines=background, n_samples=48, seed=3)
    assert np.abs(again.values - sampled.values).max() < 1e-12
    with pytest.raises(InvalidParameterError, match="n_designs"):
        KernelShap(f, n_designs=0)


@pytest.mark.parametrize("m", [2, 3, 9, 70])  # past 64 features the Gray walk orders by the first 64
def test_kernel_shap_adds_up_at_any_budget_and_width(m):
    rng = np.random.default_rng(m)
    w = rng.normal(size=m)
    f = lambda X: np.tanh(X @ w) + X[:, 0] * X[:, 1]  # noqa: E731
    x, background = rng.normal(size=(3, m)), rng.normal(size=(7, m))
    for budget in (1, 2, 3, 50):
        a = KernelShap(f).attribute(x, baselines=background, n_samples=budget, seed=0, batch_size=100)
        assert np.abs(a.values.sum(axis=1) + a.base_value - f(x)).max() < 1e-8
    # a budget of one coalition holds none (they come in pairs): f(x) and f(b) only
    assert KernelShap(f).attribute(x, baselines=background, n_samples=1).model_calls == 3 + 7


def test_the_model_is_called_in_batches():
    sizes = []

    def model(rows):
        sizes.append(len(rows))
        return rows.sum(axis=1)

    ExactShapley(model).attribute(np.ones((2, 4)), baselines=np.zeros((3, 4)), batch_size=16)
    assert max(sizes) <= 16 and sum(sizes) == 2 * 16 * 3 and min(sizes) > 1
    sizes.clear()
    KernelShap(model).attribute(np.ones((1, 10)), n_samples=200, seed=0)
    assert len(sizes) == 1 and sum(sizes) == 2 + 200  # the ends and every sampled coalition at once
    assert math.isclose(sum(KernelShap(model).attribute(np.ones((1, 10)), n_samples=200, seed=0).values[0]), 10.0)
