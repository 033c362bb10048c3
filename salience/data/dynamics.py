"""Training dynamics: which examples a model finds hard while it learns, on the ``data`` contract.

The model is trained epoch by epoch (``repeats`` times from fresh seeds) and every training
row's prediction is recorded after each epoch (:func:`record_dynamics`); the scores are read
from that record:

* ``el2n``: the L2 norm of the error vector ``p(x) - onehot(y)`` early in training (Paul et al.,
  2021, "Deep Learning on a Data Diet");
* ``grand``: the norm of the loss gradient for the example at the same epoch (ibid.);
* ``forgetting``: how often the example goes from classified right to wrong between epochs;
  one never learned counts ``epochs`` (more than any learned one can; Toneva et al., 2019);
* ``aum``: the area under the margin, the mean over epochs of the given label's logit less the
  largest other (Pleiss et al., 2020);
* ``tracin`` and ``tracin_self``: TracIn (Pruthi et al., 2020) with a checkpoint after every
  epoch, ``sum_t lr_t grad loss(w_t, z) . grad loss(w_t, z')``: a row's influence on the mean test
  loss's descent (positive helps; the lowest are the suspects), or on its own loss (self-influence;
  the highest are the suspects).

The first three are difficulty: higher means harder, and the data-diet recipe keeps the hardest
(prune the lowest); among the hardest are the mislabelled, so as label-error detectors their
*highest* are the suspects (``suspects = "highest"``). AUM is the other way round: its lowest
are the suspects.

The model is a scikit-learn classifier trained by ``partial_fit`` (one pass per epoch over the
rows shuffled; default ``SGDClassifier(loss="log_loss")``) or a ``torch.nn.Module`` mapping
float rows to class logits, trained here by Adam on cross-entropy. GraNd is exact for a torch
module (per-example gradients over every parameter); for a scikit-learn model it is the
gradient of the last layer, ``|p - y| * sqrt(|h|^2 + 1)`` with ``h`` the last layer's input
(the features for a linear model, the last hidden layer of an ``MLPClassifier``). TracIn, likewise,
takes every parameter's gradient for a torch module (weighted by the learning rate) and the last
layer's for a scikit-learn model (every checkpoint weighted alike: its step sizes vary inside an
epoch).
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np

from salience.core.base import register_method
from salience.core.params import SEED, Interval, Options
from salience.data.utility import LabelledData, fresh, require_sklearn
from salience.data.valuation import Valuation
from salience.exceptions import InvalidParameterError, ShapeError
from salience.extras import require_torch
from salience.extras import torch

__all__ = ["Dynamics", "record_dynamics", "TrainingDynamics", "El2n", "Grand", "Forgetting", "Aum", "TracIn",
           "TracInSelf"]

_EPS = 1e-12


class Dynamics:
    """What training recorded, per repeat: ``correct`` and ``margin`` (repeats x epochs x rows),
    ``el2n`` and ``grand`` (repeats x rows, at ``at_epoch``), and where asked ``tracin``
    (repeats x rows: the TracIn sum over the epochs' checkpoints)."""

    def __init__(self, correct: np.ndarray, margin: np.ndarray, el2n: np.ndarray, grand: np.ndarray, at_epoch: int,
                 tracin: np.ndarray | None = None):
        self.correct, self.margin, self.el2n, self.grand, self.at_epoch = correct, margin, el2n, grand, at_epoch
        self.tracin = tracin

    @property
    def epochs(self) -> int:
        return self.margin.shape[1]

    def forgetting(self) -> np.ndarray:
        """Mean over repeats of the forgetting events (right after one epoch, wrong after the
        next); a row never classified right counts ``epochs``."""
        right = self.correct
        events = (right[:, :-1] & ~right[:, 1:]).sum(axis=1).astype(np.float64)
        events[~right.any(axis=1)] = self.epochs
        return events.mean(axis=0)

    def aum(self) -> np.ndarray:
        """Mean over repeats and epochs of the margin (the given label's logit less the largest other)."""
        return self.margin.mean(axis=(0, 1))


def _is_torch_module(model: Any) -> bool:
    return callable(getattr(model, "named_parameters", None)) and callable(getattr(model, "state_dict", None))


def default_model():
    """Logistic regression by stochastic gradient descent, one pass per epoch."""
    return require_sklearn("linear_model", "Training dynamics' default model").SGDClassifier(loss="log_loss")


def check_trainable(model: Any) -> Any:
    """``model`` if it can be trained epoch by epoch, else a clear error."""
    if model is None:
        return default_model()
    if _is_torch_module(model):
        require_torch("Training dynamics of a torch module")
        return model
    missing = [verb for verb in ("partial_fit", "predict_proba") if not callable(getattr(model, verb, None))]
    if missing:
        raise InvalidParameterError(
            f"model {type(model).__name__} cannot be trained epoch by epoch: it has no {' or '.join(missing)}. Training "
            "dynamics need a scikit-learn classifier with partial_fit and predict_proba (SGDClassifier(loss='log_loss'), "
            "MLPClassifier) or a torch.nn.Module mapping rows to class logits.")
    return model


def _one_hot(codes: np.ndarray, n_classes: int) -> np.ndarray:
    return np.eye(n_classes)[codes]


def _margins(log_probabilities: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The given label's log-probability less the largest other's (log-probabilities differ from
    logits by a constant per row, so this is the logit margin)."""
    rows = np.arange(len(codes))
    given = log_probabilities[rows, codes].copy()
    others = log_probabilities.copy()
    others[rows, codes] = -np.inf
    return given - others.max(axis=1)


def _last_hidden(model: Any, X: np.ndarray) -> np.ndarray:
    """The input of a scikit-learn model's last layer: an MLP's last hidden activations, else X."""
    coefs = getattr(model, "coefs_", None)
    if not coefs or len(coefs) < 2:
        return X
    activation = {"relu": lambda a: np.maximum(a, 0), "tanh": np.tanh, "identity": lambda a: a,
                  "logistic": lambda a: 1.0 / (1.0 + np.exp(-a))}[model.activation]
    hidden = X
    for weights, bias in zip(coefs[:-1], model.intercepts_[:-1]):
        hidden = activation(hidden @ weights + bias)
    return hidden


def _probabilities(model: Any, X: np.ndarray, n_classes: int) -> np.ndarray:
    """``predict_proba`` over all ``n_classes`` (a class the model has not seen yet: 0)."""
    probabilities = np.zeros((len(X), n_classes))
    probabilities[:, np.asarray(model.classes_, dtype=int)] = model.predict_proba(X)
    return probabilities


def _last_layer_residual(model: Any, X: np.ndarray, codes: np.ndarray, n_classes: int,
                         probabilities: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The loss gradient with respect to the last layer's outputs (``p - onehot(y)``; for two
    classes the one output's ``p_1 - y_1``) and that layer's input with a 1 for the bias."""
    if probabilities is None:
        probabilities = _probabilities(model, X, n_classes)
    residual = probabilities - _one_hot(codes, n_classes)
    if n_classes == 2:
        residual = residual[:, 1:]
    hidden = _last_hidden(model, X)
    return residual, np.hstack([hidden, np.ones((len(hidden), 1))])


def _sklearn_tracin(model: Any, X: np.ndarray, codes: np.ndarray, n_classes: int, influence_on: Any,
                    probabilities: np.ndarray | None = None) -> np.ndarray:
    """One checkpoint's last-layer TracIn term: the gradient of a row's loss dotted with its own
    (``influence_on == "self"``) or with the test rows' mean gradient (``(X_test, codes_test,
    cosine)``; with ``cosine`` every gradient scaled to unit length first)."""
    residual, hidden = _last_layer_residual(model, X, codes, n_classes, probabilities)
    if influence_on == "self":
        return (residual**2).sum(axis=1) * (hidden**2).sum(axis=1)
    X_test, test_codes, cosine = influence_on
    test_residual, test_hidden = _last_layer_residual(model, X_test, test_codes, n_classes)
    # the gradient of a row is the outer product residual x input: its norm is their norms' product
    if cosine:
        test_residual = test_residual / np.maximum(_gradient_length(test_residual, test_hidden), _EPS)[:, None]
    test_gradient = test_residual.T @ test_hidden / len(test_residual)  # outputs x (inputs + 1)
    products = np.einsum("io,od,id->i", residual, test_gradient, hidden)
    return products / np.maximum(_gradient_length(residual, hidden), _EPS) if cosine else products


def _gradient_length(residual: np.ndarray, hidden: np.ndarray) -> np.ndarray:
    return np.linalg.norm(residual, axis=1) * np.linalg.norm(hidden, axis=1)


def _sklearn_run(job: tuple) -> tuple:
    model, X, codes, n_classes, epochs, at_epoch, seed, influence_on = job
    rng = np.random.default_rng(seed)
    model = fresh(model)
    if "random_state" in model.get_params():
        model.set_params(random_state=int(seed))
    n, classes = len(codes), np.arange(n_classes)
    correct, margin = np.zeros((epochs, n), dtype=bool), np.zeros((epochs, n))
    el2n = grand = None
    tracin = np.zeros(n) if influence_on is not None else None
    target = _one_hot(codes, n_classes)
    for epoch in range(epochs):
        order = rng.permutation(n)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # one pass is not meant to converge
            model.partial_fit(X[order], codes[order], classes=classes)
        probabilities = _probabilities(model, X, n_classes)
        correct[epoch] = probabilities.argmax(axis=1) == codes
        margin[epoch] = _margins(np.log(np.maximum(probabilities, _EPS)), codes)
        if epoch + 1 == at_epoch:
            el2n = np.linalg.norm(probabilities - target, axis=1)
            hidden = _last_hidden(model, X)
            grand = el2n * np.sqrt((hidden**2).sum(axis=1) + 1.0)
        if tracin is not None:
            tracin += _sklearn_tracin(model, X, codes, n_classes, influence_on, probabilities)
    return correct, margin, el2n, grand, tracin


def _reset(module: Any) -> None:
    for layer in module.modules():
        if callable(getattr(layer, "reset_parameters", None)):
            layer.reset_parameters()


def _torch_run(job: tuple) -> tuple:
    module, X, codes, n_classes, epochs, at_epoch, seed, batch_size, learning_rate, influence_on = job
    torch = require_torch("Training dynamics of a torch module")
    functional = torch.nn.functional
    torch.manual_seed(int(seed))
    net = copy.deepcopy(module)
    _reset(net)
    inputs = torch.as_tensor(X, dtype=torch.float32)
    labels = torch.as_tensor(codes, dtype=torch.long)
    optimizer = torch.optim.Adam(net.parameters(), lr=learning_rate)
    order_rng = torch.Generator().manual_seed(int(seed))
    n = len(codes)
    with torch.no_grad():
        probe = net(inputs[:2])
    if probe.ndim != 2 or probe.shape[1] != n_classes:
        raise ShapeError(f"model {type(module).__name__} gave outputs of shape {tuple(probe.shape)} for 2 rows; training "
                         f"dynamics need one logit per class: ({n}, {n_classes}) for the {n} rows.")
    correct, margin = np.zeros((epochs, n), dtype=bool), np.zeros((epochs, n))
    el2n = grand = None
    tracin = np.zeros(n) if influence_on is not None else None
    if influence_on is not None and influence_on != "self":
        influence_on = (torch.as_tensor(influence_on[0], dtype=torch.float32), torch.as_tensor(influence_on[1]),
                        influence_on[2])
    for epoch in range(epochs):
        net.train()
        for batch in torch.randperm(n, generator=order_rng).split(batch_size):
            optimizer.zero_grad()
            functional.cross_entropy(net(inputs[batch]), labels[batch]).backward()
            optimizer.step()
        net.eval()
        with torch.no_grad():
            logits = torch.cat([net(part) for part in inputs.split(4096)])
        log_probabilities = torch.log_softmax(logits.double(), dim=1).numpy()
        correct[epoch] = log_probabilities.argmax(axis=1) == codes
        margin[epoch] = _margins(log_probabilities, codes)
        if epoch + 1 == at_epoch:
            el2n = np.linalg.norm(np.exp(log_probabilities) - _one_hot(codes, n_classes), axis=1)
            grand = _gradient_norms(net, inputs, labels)
        if tracin is not None:
            tracin += learning_rate * _gradient_products(net, inputs, labels, influence_on)
    return correct, margin, el2n, grand, tracin


def _per_example_gradients(net, inputs, labels, chunk: int = 256):
    """Each row's cross-entropy gradient over all of ``net``'s parameters (torch.func), in
    chunks of rows: yields ``{name: rows x parameter shape}``."""
    from torch.func import functional_call, grad, vmap

    params = {name: value.detach() for name, value in net.named_parameters()}

    def loss(p, x, y):
        return torch.nn.functional.cross_entropy(functional_call(net, p, (x[None],)), y[None])

    per_example = vmap(grad(loss), in_dims=(None, 0, 0))
    for x, y in zip(inputs.split(chunk), labels.split(chunk)):
        yield per_example(params, x, y)


def _gradient_norms(net, inputs, labels, chunk: int = 256) -> np.ndarray:
    """Each row's cross-entropy gradient norm over all of ``net``'s parameters."""
    norms = [torch.sqrt(sum(g.pow(2).flatten(1).sum(1) for g in grads.values())).double()
             for grads in _per_example_gradients(net, inputs, labels, chunk)]
    return torch.cat(norms).numpy()


def _gradient_products(net, inputs, labels, influence_on) -> np.ndarray:
    """Each row's loss gradient dotted with itself (``"self"``) or with the test rows' mean
    gradient (``(test inputs, test labels, cosine)``; with ``cosine`` every gradient scaled to
    unit length first), over all of ``net``'s parameters."""
    if influence_on == "self":
        return _gradient_norms(net, inputs, labels) ** 2
    test_inputs, test_labels, cosine = influence_on
    test_gradient: dict = {}
    for grads in _per_example_gradients(net, test_inputs, test_labels):
        scale = 1.0 / len(test_labels)
        if cosine:
            scale = scale / torch.sqrt(sum(g.pow(2).flatten(1).sum(1) for g in grads.values())).clamp_min(_EPS)
        for name, g in grads.items():
            summed = (g * scale.reshape(-1, *[1] * (g.ndim - 1)) if cosine else g * scale).sum(0)
            test_gradient[name] = test_gradient.get(name, 0) + summed
    products = []
    for grads in _per_example_gradients(net, inputs, labels):
        dot = sum((g * test_gradient[name]).flatten(1).sum(1) for name, g in grads.items())
        if cosine:
            dot = dot / torch.sqrt(sum(g.pow(2).flatten(1).sum(1) for g in grads.values())).clamp_min(_EPS)
        products.append(dot.double())
    return torch.cat(products).numpy()


def record_dynamics(model: Any, train: LabelledData, *, epochs: int = 10, at_epoch: int = 2, repeats: int = 3,
                    batch_size: int = 128, learning_rate: float = 1e-3, seed: Any = 0, runner=None,
                    influence_on: Any = None) -> Dynamics:
    """Train ``model`` (checked by :func:`check_trainable`) ``repeats`` times for ``epochs``
    epochs and record every row's predictions (``runner``: an executor spreading the repeats).
    ``influence_on`` adds TracIn over the epochs' checkpoints: ``"self"`` or ``(X_test,
    codes_test)`` with the test labels coded as ``train``'s."""
    model = check_trainable(model)
    if not 1 <= at_epoch <= epochs:
        raise InvalidParameterError(f"at_epoch={at_epoch} must lie between 1 and epochs={epochs}.")
    seeds = np.random.default_rng(seed).integers(2**31, size=repeats)
    n_classes = len(train.classes)
    if _is_torch_module(model):
        jobs = [(model, train.X, train.codes, n_classes, epochs, at_epoch, s, batch_size, learning_rate, influence_on)
                for s in seeds]
        run = _torch_run
    else:
        jobs = [(model, train.X, train.codes, n_classes, epochs, at_epoch, s, influence_on) for s in seeds]
        run = _sklearn_run
    results = runner.map(run, jobs) if runner is not None else [run(job) for job in jobs]
    correct, margin, el2n, grand, tracin = zip(*results)
    return Dynamics(np.stack(correct), np.stack(margin), np.stack(el2n), np.stack(grand), at_epoch,
                    np.stack(tracin) if influence_on is not None else None)


class TrainingDynamics(Valuation):
    """Base of the training-dynamics scores: ``model`` trained ``repeats`` times (seeds drawn
    from ``seed``) for ``epochs`` epochs; ``batch_size`` and ``learning_rate`` apply to torch
    modules. The test set is not used and may be omitted; ``fits_`` counts the training runs.
    After ``score``, ``dynamics_`` holds the record (:class:`Dynamics`)."""

    _parameter_constraints = {"epochs": [Interval("int", 1)], "repeats": [Interval("int", 1)],
                              "batch_size": [Interval("int", 1)],
                              "learning_rate": [Interval("real", 0, closed="neither")], "seed": SEED}
    uses_model = False  # trained epoch by epoch, checked by check_trainable, not refitted on coalitions
    needs_test = False
    suspects = "highest"

    def __init__(self, *, model: Any = None, epochs: int = 10, repeats: int = 3, batch_size: int = 128,
                 learning_rate: float = 1e-3, seed: Any = 0, n_jobs: int = 1, executor: Any = "local",
                 show_progress: bool = False):
        self.epochs, self.repeats, self.seed = epochs, repeats, seed
        self.batch_size, self.learning_rate = batch_size, learning_rate
        super().__init__(model=model, n_jobs=n_jobs, executor=executor, show_progress=show_progress)

    def _record(self, utility, at_epoch: int = 1, influence_on: Any = None) -> Dynamics:
        self.dynamics_ = record_dynamics(self.model, utility.train, epochs=self.epochs, at_epoch=at_epoch,
                                         repeats=self.repeats, batch_size=self.batch_size,
                                         learning_rate=self.learning_rate, seed=self.seed, runner=utility.runner,
                                         influence_on=influence_on)
        utility.fits += self.repeats
        return self.dynamics_


class _Early(TrainingDynamics):
    """A score read early in training, after ``at_epoch`` epochs (<= ``epochs``)."""

    _parameter_constraints = {"at_epoch": [Interval("int", 1)]}

    def __init__(self, *, model: Any = None, epochs: int = 10, at_epoch: int = 2, repeats: int = 3,
                 batch_size: int = 128, learning_rate: float = 1e-3, seed: Any = 0, n_jobs: int = 1,
                 executor: Any = "local", show_progress: bool = False):
        self.at_epoch = at_epoch
        super().__init__(model=model, epochs=epochs, repeats=repeats, batch_size=batch_size,
                         learning_rate=learning_rate, seed=seed, n_jobs=n_jobs, executor=executor,
                         show_progress=show_progress)


@register_method("valuation", "el2n", "error L2 norm early in training, averaged over seeds (Paul et al., 2021): "
                                 "higher is harder")
class El2n(_Early):
    """EL2N: ``|p(x) - onehot(y)|`` after ``at_epoch`` epochs, the mean over ``repeats`` seeds.
    Higher is harder: keep the highest to prune (the data diet); the highest are also the label-error suspects.

    >>> X, y = [[-1.0], [-0.9], [-1.1], [1.0], [0.9], [1.1], [-0.95]], [0, 0, 0, 1, 1, 1, 1]
    >>> values = El2n(epochs=5, at_epoch=5, repeats=2).score((X, y)).values
    >>> int(values.argmax())  # the row labelled 1 among the 0s
    6
    """

    def _values(self, utility):
        return self._record(utility, self.at_epoch).el2n.mean(axis=0)


@register_method("valuation", "grand", "gradient norm of the loss early in training, averaged over seeds (Paul et al., "
                                  "2021): higher is harder")
class Grand(_Early):
    """GraNd: the loss gradient's norm for each row after ``at_epoch`` epochs, the mean over
    ``repeats`` seeds (exact for torch modules; the last layer's for scikit-learn models)."""

    def _values(self, utility):
        return self._record(utility, self.at_epoch).grand.mean(axis=0)


@register_method("valuation", "forgetting", "forgetting events over training, never-learned rows counted highest "
                                       "(Toneva et al., 2019): higher is harder")
class Forgetting(TrainingDynamics):
    """Forgetting counts: transitions from right to wrong between consecutive epochs, the mean
    over ``repeats`` seeds; a row never classified right counts ``epochs``. Unforgettable rows
    (0) are the ones to prune first."""

    def _values(self, utility):
        return self._record(utility).forgetting()


@register_method("valuation", "aum", "area under the margin over training (Pleiss et al., 2020): lowest are the "
                                "label-error suspects")
class Aum(TrainingDynamics):
    """Area under the margin: the mean over epochs and seeds of the given label's logit less
    the largest other logit. Negative for rows the model keeps assigning another class: the
    lowest are the suspects."""

    suspects = "lowest"

    def _values(self, utility):
        return self._record(utility).aum()


@register_method("valuation", "tracin", "TracIn over the epochs' checkpoints (Pruthi et al., 2020): how much a row's "
                                   "gradient steps lowered the test loss; lowest are the suspects")
class TracIn(TrainingDynamics):
    """TracIn: ``sum_t lr_t g_t(x_i) . mean_j g_t(x_j)`` over a checkpoint after every epoch and
    the test rows ``x_j``, the mean over ``repeats`` seeds (``g_t``: the loss gradient at
    checkpoint ``t``; test rows whose label the training rows lack left out). ``similarity="dot"``
    is TracIn as published; ``"cosine"`` (the default) scales every gradient to unit length first,
    the gradient similarity Hanawa et al. (2021) found the most reliable: a few badly fitted test
    rows no longer outweigh the rest, nor large-gradient training rows the others. Positive rows
    pushed the model towards the test set; negative ones away from it (mislabelled rows, mostly):
    the lowest are the suspects.

    >>> X, y = [[-1.0], [-0.9], [-1.1], [1.0], [0.9], [1.1], [-0.95]], [0, 0, 0, 1, 1, 1, 1]
    >>> values = TracIn(epochs=5, repeats=2).score((X, y), ([[-1.0], [1.0]], [0, 1])).values
    >>> int(values.argmin())  # the row labelled 1 among the 0s
    6
    """

    _parameter_constraints = {"similarity": [Options(("cosine", "dot"))]}
    needs_test = True
    suspects = "lowest"

    def __init__(self, *, model: Any = None, similarity: str = "cosine", epochs: int = 10, repeats: int = 3,
                 batch_size: int = 128, learning_rate: float = 1e-3, seed: Any = 0, n_jobs: int = 1,
                 executor: Any = "local", show_progress: bool = False):
        self.similarity = similarity
        super().__init__(model=model, epochs=epochs, repeats=repeats, batch_size=batch_size,
                         learning_rate=learning_rate, seed=seed, n_jobs=n_jobs, executor=executor,
                         show_progress=show_progress)

    def _values(self, utility):
        test_codes = utility.train.codes_of(utility.test.y)
        known = test_codes >= 0  # some are (Valuation.score refuses test labels sharing no class)
        test = (utility.test.X[known], test_codes[known], self.similarity == "cosine")
        return self._record(utility, influence_on=test).tracin.mean(axis=0)


@register_method("valuation", "tracin_self", "TracIn self-influence over the epochs' checkpoints (Pruthi et al., 2020): "
                                        "how much a row's own loss drove training; highest are the suspects")
class TracInSelf(TrainingDynamics):
    """TracIn self-influence: ``sum_t lr_t |grad loss(w_t, x_i)|^2`` over a checkpoint after every
    epoch, the mean over ``repeats`` seeds. Rows whose loss stays high and pulls hard on the
    model (mislabelled, atypical) score highest: they are the suspects. No test set needed."""

    def _values(self, utility):
        return self._record(utility, influence_on="self").tracin.mean(axis=0)
