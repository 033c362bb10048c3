"""Training-dynamics scores: hand-computed records, exact gradient norms, flipped labels found on
real data, determinism, bad input named."""

import numpy as np
import pytest

from salience.core.base import create
from salience.data import Aum, El2n, Forgetting, Grand, TracIn, TracInSelf
from salience.data.dynamics import Dynamics, _margins
from salience.exceptions import InvalidParameterError, ShapeError

sklearn = pytest.importorskip("sklearn")
from sklearn.base import BaseEstimator, ClassifierMixin  # noqa: E402


def test_forgetting_and_aum_of_a_hand_written_record():
    # 1 repeat, 4 epochs, 3 rows: row 0 learned and kept; row 1 forgotten twice; row 2 never learned
    correct = np.array([[[True, True, False], [True, False, False], [True, True, False], [True, False, False]]])
    margin = np.array([[[1.0, 0.5, -1.0], [2.0, -0.5, -2.0], [3.0, 0.5, -1.0], [2.0, -0.5, -4.0]]])
    dynamics = Dynamics(correct, margin, el2n=np.zeros((1, 3)), grand=np.zeros((1, 3)), at_epoch=1)
    assert dynamics.forgetting().tolist() == [0.0, 2.0, 4.0]  # never learned: epochs
    assert dynamics.aum().tolist() == [2.0, 0.0, -2.0]


def test_margin_is_the_given_label_less_the_largest_other():
    log_p = np.log(np.array([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3]]))
    assert np.allclose(_margins(log_p, np.array([0, 2])), [np.log(0.7 / 0.2), np.log(0.3 / 0.5)])


class FixedProbabilities(ClassifierMixin, BaseEstimator):
    """Predicts the same probabilities whatever it is trained on: the scores can be worked out by hand."""

    def __init__(self, probabilities=None):
        self.probabilities = probabilities

    def partial_fit(self, X, y, classes=None):
        self.classes_ = np.asarray(classes)
        return self

    def predict_proba(self, X):
        return np.asarray(self.probabilities, dtype=float)


def test_el2n_and_grand_by_hand_for_a_scikit_learn_model():
    X = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, 2.0]])
    y = [0, 1, 1]
    probabilities = [[0.8, 0.2], [0.5, 0.5], [0.9, 0.1]]
    model = FixedProbabilities(probabilities)
    el2n = El2n(model=model, epochs=3, at_epoch=2, repeats=2).score((X, y)).values
    error = np.array([[-0.2, 0.2], [0.5, -0.5], [0.9, -0.9]])
    assert np.allclose(el2n, np.linalg.norm(error, axis=1))
    # the last layer's gradient of a linear model: |p - y| * sqrt(|x|^2 + 1)
    grand = Grand(model=model, epochs=3, at_epoch=2, repeats=2).score((X, y)).values
    assert np.allclose(grand, np.linalg.norm(error, axis=1) * np.sqrt([26.0, 1.0, 6.0]))
    scorer = Aum(model=model, epochs=3, repeats=2)
    assert np.allclose(scorer.score((X, y)).values, [np.log(4.0), 0.0, np.log(1 / 9)])
    assert scorer.fits_ == 2 and scorer.dynamics_.margin.shape == (2, 3, 3)


def test_tracin_by_hand_for_a_scikit_learn_model():
    # two classes: the last layer's one output has residual p_1 - y_1 (0.2, -0.5, -0.9) and input
    # [x, 1]; every one of the 3 checkpoints weighs 1
    X = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, 2.0]])
    model = FixedProbabilities([[0.8, 0.2], [0.5, 0.5], [0.9, 0.1]])
    self_influence = TracInSelf(model=model, epochs=3, repeats=2).score((X, [0, 1, 1])).values
    assert np.allclose(self_influence, 3 * np.array([0.04 * 26, 0.25 * 1, 0.81 * 6]))
    # test rows: the same three with labels 0, 0, 1: mean test gradient [-0.1, -1/3, -1/15]
    scorer = TracIn(model=model, similarity="dot", epochs=3, repeats=2)
    values = scorer.score((X, [0, 1, 1]), (X, [0, 0, 1])).values
    assert np.allclose(values, 3 * np.array([0.2 * -1.7, -0.5 * -1 / 15, -0.9 * (-0.1 - 2 / 3 - 1 / 15)]))
    assert scorer.fits_ == 2 and scorer.dynamics_.tracin.shape == (2, 3)
    # cosine: every gradient (residual x input) at unit length, norms |r| |[x, 1]|
    unit = lambda r, h: r * np.array(h) / (abs(r) * np.linalg.norm(h))  # noqa: E731
    rows = [[3.0, 4.0, 1.0], [0.0, 0.0, 1.0], [1.0, 2.0, 1.0]]
    test_mean = (unit(0.2, rows[0]) + unit(0.5, rows[1]) + unit(-0.9, rows[2])) / 3
    expected = [3 * unit(r, h) @ test_mean for r, h in zip([0.2, -0.5, -0.9], rows)]
    cosine = TracIn(model=model, epochs=3, repeats=1).score((X, [0, 1, 1]), (X, [0, 0, 1])).values
    assert np.allclose(cosine, expected)
    with pytest.raises(InvalidParameterError, match=r"the test labels \(7\) share no class with the training labels"):
        TracIn(model=model, epochs=1, repeats=1).score((X, [0, 1, 1]), (X, [7, 7, 7]))
    with pytest.raises(InvalidParameterError, match="pass test="):
        TracIn(model=model).score((X, [0, 1, 1]))


def _flipped_digits(n=900, seed=0):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X, y = X[:n] / 16.0, y[:n].copy()
    rng = np.random.default_rng(seed)
    flipped = rng.random(n) < 0.1
    y[flipped] = (y[flipped] + rng.integers(1, 10, flipped.sum())) % 10
    return X, y, flipped


def _auc(values, flipped, suspects):
    from sklearn.metrics import roc_auc_score

    return roc_auc_score(flipped, values if suspects == "highest" else -values)


@pytest.mark.parametrize("name", ["el2n", "grand", "forgetting", "aum", "tracin", "tracin_self"])
def test_flipped_labels_are_the_suspects_on_digits(name):
    from sklearn.datasets import load_digits

    X, y, flipped = _flipped_digits()
    scorer = create("valuation", name, epochs=8, seed=1)
    X_all, y_all = load_digits(return_X_y=True)
    test = (X_all[900:1200] / 16.0, y_all[900:1200]) if scorer.needs_test else None  # clean labels, unseen rows
    values = scorer.score((X, y), test, ids=[f"d{i}" for i in range(len(y))])
    assert values.ids[0] == "d0" and scorer.fits_ == 3
    # TracIn against a test set values rows for that set, a weaker detector than the difficulty scores
    assert _auc(values.values, flipped, scorer.suspects) > (0.85 if name == "tracin" else 0.9)


def test_torch_module_dynamics_and_exact_gradient_norms():
    torch = pytest.importorskip("torch")
    from salience.data.dynamics import _gradient_norms

    X, y, flipped = _flipped_digits(600)
    net = torch.nn.Sequential(torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))
    scorer = Aum(model=net, epochs=6, repeats=2, learning_rate=1e-2, batch_size=64)
    assert _auc(scorer.score((X, y)).values, flipped, "lowest") > 0.9
    # per-example gradients over every parameter, against one backward pass per row
    torch.manual_seed(0)
    inputs, labels = torch.as_tensor(X[:20], dtype=torch.float32), torch.as_tensor(y[:20])
    norms = _gradient_norms(net, inputs, labels, chunk=7)
    for row in range(20):
        net.zero_grad()
        torch.nn.functional.cross_entropy(net(inputs[row : row + 1]), labels[row : row + 1]).backward()
        expected = torch.sqrt(sum(p.grad.pow(2).sum() for p in net.parameters())).item()
        assert norms[row] == pytest.approx(expected, rel=1e-5)
    # TracIn's products: each row's gradient against the mean test loss's, one backward pass per row
    from salience.data.dynamics import _gradient_products

    test_inputs, test_labels = torch.as_tensor(X[20:50], dtype=torch.float32), torch.as_tensor(y[20:50])
    products = _gradient_products(net, inputs, labels, (test_inputs, test_labels, False))
    net.zero_grad()
    torch.nn.functional.cross_entropy(net(test_inputs), test_labels).backward()
    test_gradient = [p.grad.clone() for p in net.parameters()]
    for row in range(20):
        net.zero_grad()
        torch.nn.functional.cross_entropy(net(inputs[row : row + 1]), labels[row : row + 1]).backward()
        expected = sum((p.grad * g).sum() for p, g in zip(net.parameters(), test_gradient)).item()
        assert products[row] == pytest.approx(expected, rel=1e-4, abs=1e-7)
    assert np.allclose(_gradient_products(net, inputs, labels, "self"), norms**2, rtol=1e-5)
    # cosine: the same with every test row's gradient, and the row's own, at unit length
    unit_test = [torch.zeros_like(p) for p in net.parameters()]
    for row in range(30):
        net.zero_grad()
        torch.nn.functional.cross_entropy(net(test_inputs[row : row + 1]), test_labels[row : row + 1]).backward()
        length = torch.sqrt(sum(p.grad.pow(2).sum() for p in net.parameters()))
        unit_test = [u + p.grad / length / 30 for u, p in zip(unit_test, net.parameters())]
    cosine = _gradient_products(net, inputs, labels, (test_inputs, test_labels, True))
    for row in range(20):
        net.zero_grad()
        torch.nn.functional.cross_entropy(net(inputs[row : row + 1]), labels[row : row + 1]).backward()
        expected = sum((p.grad * u).sum() for p, u in zip(net.parameters(), unit_test)).item() / norms[row]
        assert cosine[row] == pytest.approx(expected, rel=1e-4, abs=1e-7)
    from sklearn.datasets import load_digits

    X_all, y_all = load_digits(return_X_y=True)
    clean = (X_all[900:1200] / 16.0, y_all[900:1200])
    tracin = TracIn(model=net, epochs=6, repeats=1, learning_rate=1e-2, batch_size=64).score((X, y), clean).values
    assert _auc(tracin, flipped, "lowest") > 0.75
    # the module the user passed is not trained in place
    before = [p.detach().clone() for p in net.parameters()]
    Grand(model=net, epochs=2, at_epoch=1, repeats=1).score((X, y))
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))


def test_seeded_and_the_same_on_several_processes():
    X, y, _ = _flipped_digits(300)
    one = El2n(epochs=4, repeats=2, seed=5).score((X, y)).values
    assert np.array_equal(one, El2n(epochs=4, repeats=2, seed=5).score((X, y)).values)
    assert np.array_equal(one, El2n(epochs=4, repeats=2, seed=5, n_jobs=2).score((X, y)).values)
    assert not np.array_equal(one, El2n(epochs=4, repeats=2, seed=6).score((X, y)).values)


def test_bad_input_is_named():
    from sklearn.linear_model import LogisticRegression

    X, y, _ = _flipped_digits(100)
    with pytest.raises(InvalidParameterError, match="partial_fit"):
        El2n(model=LogisticRegression()).score((X, y))
    with pytest.raises(InvalidParameterError, match="at_epoch=5 must lie between 1 and epochs=3"):
        El2n(epochs=3, at_epoch=5).score((X, y))
    with pytest.raises(InvalidParameterError, match="single class"):
        Aum().score((X, np.zeros(len(y))))
    bad = X.copy()
    bad[3, 2] = np.nan
    with pytest.raises(InvalidParameterError, match="row 3"):
        Forgetting().score((bad, y))
    with pytest.raises(InvalidParameterError):
        El2n(repeats=0)
    torch = pytest.importorskip("torch")
    with pytest.raises(ShapeError, match=r"one logit per class: \(100, 10\)"):
        Aum(model=torch.nn.Linear(64, 3), epochs=1, repeats=1).score((X, y))
