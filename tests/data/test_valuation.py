"""Data valuation on games small enough to enumerate: every estimator against the exact values
of the same utility, KNN-Shapley's closed form against brute force, and bad input named."""

import numpy as np
import pytest

from salience.core.base import create
from salience.core.games import all_coalitions, exact_semivalues, semivalue_weights
from salience.data import BetaShapley, DataBanzhaf, KnnShapley, LeaveOneOut, TmcShapley
from salience.data.valuation import coalition_values, exact_values
from salience.exceptions import DuplicateIdError, InvalidParameterError, SalienceError, ShapeError

pytest.importorskip("sklearn")
RNG = np.random.default_rng(3)
X_TRAIN = RNG.normal(size=(8, 2))
Y_TRAIN = np.array([0, 1, 2, 0, 1, 2, 0, 1])
X_TEST = RNG.normal(size=(6, 2))
Y_TEST = np.array([0, 1, 2, 2, 1, 0])
TRAIN, TEST = (X_TRAIN, Y_TRAIN), (X_TEST, Y_TEST)


def knn_utility(masks, k):
    """Jia et al.'s KNN utility by brute force: per test row, the share of the right label among
    the coalition's min(k, |S|) nearest rows; averaged over test rows (0 for the empty one)."""
    out = []
    for mask in np.atleast_2d(masks):
        members = np.flatnonzero(mask)
        if members.size == 0:
            out.append(0.0)
            continue
        total = 0.0
        for x, label in zip(X_TEST, Y_TEST):
            distances = ((X_TRAIN[members] - x) ** 2).sum(axis=1)
            nearest = members[np.argsort(distances, kind="stable")[: min(k, members.size)]]
            total += np.mean(Y_TRAIN[nearest] == label)
        out.append(total / len(X_TEST))
    return np.array(out)


@pytest.mark.parametrize("k", [1, 3, 10])
def test_knn_shapley_closed_form_equals_enumeration(k):
    exact = exact_semivalues(knn_utility(all_coalitions(8), k), 8, semivalue_weights(8))
    values = KnnShapley(k=k).score(TRAIN, TEST).values
    assert np.allclose(values, exact, atol=1e-12)
    # through the registry, with ids, and in blocks of test rows: the same
    again = create("valuation", "knn_shapley", k=k).score(TRAIN, TEST, ids=list("abcdefgh"))
    assert again.ids == list("abcdefgh") and np.allclose(again.values, exact, atol=1e-12)
    from salience.data.valuation import knn_shapley_values

    codes = Y_TRAIN
    assert np.allclose(knn_shapley_values(X_TRAIN, codes, X_TEST, Y_TEST, k, block_cells=8), exact, atol=1e-12)


def test_knn_shapley_of_labels_test_lacks_and_strings():
    strings = KnnShapley(k=2).score((X_TRAIN, [str(v) for v in Y_TRAIN]), (X_TEST, [str(v) for v in Y_TEST]))
    assert np.allclose(strings.values, KnnShapley(k=2).score(TRAIN, TEST).values)
    # no training row can vote for a label it lacks: every value would be 0, so it is refused (issue 50)
    with pytest.raises(InvalidParameterError, match=r"the test labels \(7\) share no class"):
        KnnShapley(k=2).score(TRAIN, (X_TEST, [7] * len(X_TEST)))
    partly = KnnShapley(k=2).score(TRAIN, (X_TEST, [7] + list(Y_TEST[1:])))  # some labels shared: valued
    assert np.isfinite(partly.values).all()


class NearestMean:
    """A classifier fast enough to refit thousands of times: the nearest class mean."""

    def fit(self, X, y):
        self.classes_ = np.unique(y)
        self.means_ = np.array([X[y == c].mean(axis=0) for c in self.classes_])
        return self

    def predict(self, X):
        return self.classes_[((X[:, None, :] - self.means_[None]) ** 2).sum(axis=2).argmin(axis=1)]

    def score(self, X, y):
        return float(np.mean(self.predict(X) == y))


def model_game(masks):
    from salience.data.utility import ModelUtility, labelled

    return ModelUtility(NearestMean(), labelled(TRAIN, "train"), labelled(TEST, "test"))(masks)


def test_leave_one_out_by_hand():
    values = LeaveOneOut(model=NearestMean()).score(TRAIN, TEST).values
    full = model_game(np.ones((1, 8), bool))[0]
    for i in range(8):
        mask = np.ones(8, bool)
        mask[i] = False
        assert values[i] == pytest.approx(full - model_game(mask)[0])


@pytest.fixture(scope="module")
def exact_tables():
    values = model_game(all_coalitions(8))
    return {kind: exact_semivalues(values, 8, semivalue_weights(8, kind, **options))
            for kind, options in (("shapley", {}), ("banzhaf", {}), ("beta", {"alpha": 16, "beta": 1}))}


def test_exact_values_helper(exact_tables):
    model = NearestMean()
    assert np.allclose(exact_values(TRAIN, TEST, model=model).values, exact_tables["shapley"])
    assert np.allclose(exact_values(TRAIN, TEST, model=model, kind="beta", alpha=16, beta=1).values,
                       exact_tables["beta"])
    # every kind from one set of 2^n fits
    coalitions = coalition_values(TRAIN, TEST, model=model)
    for kind in ("shapley", "banzhaf"):
        assert np.allclose(exact_values(TRAIN, TEST, kind=kind, coalitions=coalitions).values, exact_tables[kind])
    with pytest.raises(ShapeError, match="8 rows have 256 coalitions"):
        exact_values(TRAIN, TEST, coalitions=coalitions[:10])


@pytest.mark.parametrize("method, kind, budget", [(TmcShapley, "shapley", 6000), (BetaShapley, "beta", 6000),
                                                  (DataBanzhaf, "banzhaf", 6000)])
def test_sampling_estimators_approach_the_exact_values(method, kind, budget, exact_tables):
    options = {"truncation": None} if method is not DataBanzhaf else {}
    scorer = method(model=NearestMean(), budget=budget, seed=0, **options)
    values = scorer.score(TRAIN, TEST).values
    exact = exact_tables[kind]
    # within four standard errors of the exact values, which are small
    assert np.all(np.abs(values - exact) <= 4 * scorer.standard_errors_)
    assert np.all(scorer.standard_errors_ < 0.01)
    assert scorer.fits_ <= budget + 8 * 7
    # the same seed gives the same values, on one process or two
    again = method(model=NearestMean(), budget=600, seed=4, n_jobs=1, **options)
    twice = method(model=NearestMean(), budget=600, seed=4, n_jobs=2, **options)
    assert np.array_equal(again.score(TRAIN, TEST).values, twice.score(TRAIN, TEST).values)


def test_tolerance_stops_before_the_budget():
    scorer = TmcShapley(model=NearestMean(), budget=100_000, tolerance=0.2, seed=0)
    scorer.score(TRAIN, TEST)
    assert scorer.converged_ and scorer.fits_ < 100_000


def test_truncation_saves_fits():
    full = TmcShapley(model=NearestMean(), budget=700, truncation=None, seed=1)
    cut = TmcShapley(model=NearestMean(), budget=700, truncation=0.2, seed=1)
    full.score(TRAIN, TEST), cut.score(TRAIN, TEST)
    assert cut.fits_ <= full.fits_


def test_walks_are_antithetic_and_a_walk_the_budget_cuts_is_dropped():
    import itertools

    from salience.core.games import random_orders

    orders = list(itertools.islice(random_orders(np.random.default_rng(0), 5), 4))
    assert orders[0].tolist() == np.random.default_rng(0).permutation(5).tolist()
    assert orders[1].tolist() == orders[0][::-1].tolist() and orders[3].tolist() == orders[2][::-1].tolist()
    plain = list(itertools.islice(random_orders(np.random.default_rng(0), 5, antithetic=False), 2))
    rng = np.random.default_rng(0)
    assert [o.tolist() for o in plain] == [rng.permutation(5).tolist(), rng.permutation(5).tolist()]
    full, empty = model_game(np.ones((1, 8), bool))[0], 0.0
    for budget in (8, 20, 33):  # 8 fits finish one walk; 20 and 33 leave a walk cut short
        for antithetic in (True, False):
            scorer = TmcShapley(model=NearestMean(), budget=budget, truncation=None, antithetic=antithetic, seed=2)
            values = scorer.score(TRAIN, TEST).values
            # only whole walks are averaged: each sums to v(full) - v(empty), so the mean does too
            assert values.sum() == pytest.approx(full - empty, abs=1e-12)
            assert scorer.fits_ <= budget


class NoFit:
    def predict(self, X):
        return np.zeros(len(X))


def test_bad_input_is_named():
    with pytest.raises(InvalidParameterError, match="model NoFit cannot be refitted: it has no fit"):
        LeaveOneOut(model=NoFit()).score(TRAIN, TEST)
    with pytest.raises(InvalidParameterError, match="single class"):
        LeaveOneOut().score((X_TRAIN, np.zeros(8)), TEST)
    bad = X_TRAIN.copy()
    bad[2, 1] = np.nan
    with pytest.raises(InvalidParameterError, match="train: X holds nan at row 2, feature 1"):
        KnnShapley().score((bad, Y_TRAIN), TEST)
    with pytest.raises(InvalidParameterError, match="label 0 .* is not hashable"):
        KnnShapley().score((X_TRAIN, [[0]] * 8), TEST)
    with pytest.raises(DuplicateIdError, match="'a' is given twice"):
        KnnShapley().score(TRAIN, TEST, ids=["a"] * 8)
    with pytest.raises(InvalidParameterError, match="less than one permutation of the 8 training rows"):
        TmcShapley(budget=5).score(TRAIN, TEST)
    with pytest.raises(ShapeError, match="8 rows of X but 7 labels"):
        KnnShapley().score((X_TRAIN, Y_TRAIN[:7]), TEST)
    with pytest.raises(ShapeError, match="train has 2 features, test 3"):
        KnnShapley().score(TRAIN, (np.ones((2, 3)), [0, 1]))
    with pytest.raises(InvalidParameterError, match="must be a pair"):
        KnnShapley().score(X_TRAIN, TEST)
    with pytest.raises(InvalidParameterError, match="budget must be"):
        create("valuation", "tmc_shapley", budget=0)
    with pytest.raises(SalienceError, match="scikit-learn scorer name"):
        LeaveOneOut(scoring="no such metric").score(TRAIN, TEST)


def test_influence_predicts_the_test_loss_of_leaving_each_row_out():
    from sklearn.datasets import load_wine
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss

    from salience.data import Influence

    X, y = load_wine(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    order = np.random.default_rng(0).permutation(len(y))
    train, test = order[:60], order[60:]
    scorer = Influence(C=0.1)
    values = scorer.score((X[train], y[train]), (X[test], y[test])).values
    assert scorer.fits_ == 1

    def test_loss(rows):
        model = LogisticRegression(C=0.1, max_iter=10_000, tol=1e-10).fit(X[rows], y[rows])
        return log_loss(y[test], model.predict_proba(X[test]), labels=model.classes_)

    base = test_loss(train)
    actual = [test_loss(np.delete(train, i)) - base for i in range(len(train))]
    assert np.corrcoef(values, actual)[0, 1] > 0.98
    # binary: one weight vector
    binary = y[train] > 0
    two = Influence(C=0.1).score((X[train], binary), (X[test], y[test] > 0)).values
    assert two.shape == (60,) and np.isfinite(two).all()


def test_confident_learning_finds_flipped_labels():
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    from salience.data import ConfidentLearning

    X, y = load_digits(return_X_y=True)
    X, y = X[:600] / 16, y[:600]
    rng = np.random.default_rng(0)
    flipped = rng.choice(len(y), 60, replace=False)
    noisy = y.copy()
    noisy[flipped] = (y[flipped] + rng.integers(1, 10, 60)) % 10
    scorer = ConfidentLearning(model=LogisticRegression(max_iter=2000), folds=4)
    quality = scorer.score((X, noisy)).values
    assert scorer.fits_ == 4
    suspects = set(np.argsort(quality, kind="stable")[:60].tolist())
    assert len(suspects & set(flipped.tolist())) >= 50  # precision at the noise rate
    issues = np.flatnonzero(scorer.label_issues_)
    assert len(set(issues.tolist()) & set(flipped.tolist())) >= 0.8 * len(issues)
    assert scorer.probabilities_.shape == (600, 10) and np.allclose(scorer.probabilities_.sum(axis=1), 1)
    margin = ConfidentLearning(model=LogisticRegression(max_iter=2000), folds=4, rank_by="normalized_margin")
    assert np.all(margin.score((X, noisy)).values <= quality + 1e-12)
    with pytest.raises(InvalidParameterError, match="train has 3 rows, fewer than folds=4"):
        ConfidentLearning(folds=4).score((X[:3], [0, 1, 1]))
    with pytest.raises(InvalidParameterError, match="has no predict_proba"):
        ConfidentLearning(model=NearestMean()).score((X, noisy))


def test_confident_learning_neighbour_vote_by_hand():
    from salience.data import ConfidentLearning
    from salience.data.label_errors import neighbor_agreement

    # a line of rows: 0, 1, 2 labelled a; 3 labelled b sits among them; 10, 11, 12 labelled b
    X = np.array([[0.0], [1.0], [2.0], [1.5], [10.0], [11.0], [12.0], [13.0]])
    codes = np.array([0, 0, 0, 1, 1, 1, 1, 1])
    # 2 nearest others: row 0 -> 1, 3 (a, b); row 1 -> 3 and 0 or 2 (b, a); row 3 -> 1, 2 (a, a); row 4 -> 5, 6
    assert neighbor_agreement(X, codes, 2).tolist() == [0.5, 0.5, 0.5, 0.0, 1.0, 1.0, 1.0, 1.0]
    # a row's copy may be listed before it: the row itself is still left out
    copies = np.array([[0.0], [0.0], [5.0]])
    assert neighbor_agreement(copies, np.array([0, 1, 1]), 1).tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(InvalidParameterError, match="neighbors=8 needs more than 8 training rows; train has 8"):
        neighbor_agreement(X, codes, 8)
    plain = ConfidentLearning(folds=2, seed=3)
    quality = plain.score((X, codes)).values
    blended = ConfidentLearning(folds=2, seed=3, neighbors=2)
    assert np.allclose(blended.score((X, codes)).values, (quality + neighbor_agreement(X, codes, 2)) / 2, atol=1e-12)
    assert blended.fits_ == 2  # the vote fits nothing
    assert np.array_equal(blended.label_issues_, plain.label_issues_)
    with pytest.raises(InvalidParameterError, match="neighbors"):
        ConfidentLearning(neighbors=0)
