"""The features verifier: the protocol over a model's input features, equal to the deletion and
insertion curves the core had (behaviour unchanged), with verdicts that can fail."""

import numpy as np
import pytest

from salience.core.base import create
from salience.core.faithfulness import deletion_curve, insertion_curve
from salience.exceptions import InvalidParameterError, ShapeError

WEIGHTS = 0.8 ** np.arange(24) * np.where(np.arange(24) % 2, 1.0, -1.0)
X = np.random.default_rng(0).normal(size=24) + 2.0


def model(rows):
    return np.asarray(rows) @ WEIGHTS


def test_exact_attributions_are_faithful_and_the_curve_is_the_deletion_curve():
    exact = WEIGHTS * X  # the linear model's exact attribution against a zero baseline
    verifier = create("verify", "features", steps=24)
    result = verifier.verify(exact, model=model, x=X)
    assert result.verdict == "faithful" and result.unit == "features"
    reference = deletion_curve(model, X, exact, steps=24)
    assert np.allclose(result.curves["scores"], reference.outputs) and result.areas["scores"] == pytest.approx(reference.auc)
    inserted = create("verify", "features", insertion=True, steps=24).verify(exact, model=model, x=X)
    assert np.allclose(inserted.curves["scores"], insertion_curve(model, X, exact, steps=24).outputs)
    assert inserted.verdict == "faithful"
    assert result.costs["model_calls"] == result.evaluations <= (20 + 2) * 24 + 1


def test_random_and_reversed_attributions_are_named_as_such():
    exact = WEIGHTS * X
    verifier = create("verify", "features")
    rng = np.random.default_rng(1)
    verdicts = [verifier.set_params(seed=s).verify(rng.normal(size=24), model=model, x=X).verdict for s in range(30)]
    assert verdicts.count("no better than random") >= 26
    assert verifier.verify(-exact, model=model, x=X).verdict == "inverted"


def test_bad_input_is_named():
    verifier = create("verify", "features")
    with pytest.raises(InvalidParameterError, match="n_random"):
        create("verify", "features", n_random=1)
    with pytest.raises(ShapeError, match="5 values for the 24 features"):
        verifier.verify(np.ones(5), model=model, x=X)
    with pytest.raises(InvalidParameterError, match="nan"):
        verifier.verify(np.full(24, np.nan), model=model, x=X)
    with pytest.raises(InvalidParameterError, match="model must be a callable"):
        verifier.verify(np.ones(24), model="not a model", x=X)
