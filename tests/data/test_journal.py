"""A valuation killed midway resumes from its coalition journal with the values of an unbroken run."""

import numpy as np
import pytest

from salience.data import DataBanzhaf, TmcShapley
from salience.data.utility import ModelUtility
from salience.exceptions import InputFormatError

pytest.importorskip("sklearn")


@pytest.fixture
def game():
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    order = np.random.default_rng(0).permutation(len(y))
    return (X[order[:24]], y[order[:24]]), (X[order[24:]], y[order[24:]])


def _killed_after(monkeypatch, batches):
    """Make the utility's evaluation raise KeyboardInterrupt (a kill) at its ``batches``-th batch."""
    evaluate, calls = ModelUtility._evaluate, []

    def dying(self, masks):
        calls.append(len(masks))
        if len(calls) == batches:
            raise KeyboardInterrupt
        return evaluate(self, masks)

    monkeypatch.setattr(ModelUtility, "_evaluate", dying)
    return calls


@pytest.mark.parametrize("method, kill_at", [(TmcShapley(budget=60, seed=3), 6), (DataBanzhaf(budget=64, seed=3), 2)],
                         ids=["tmc_shapley", "data_banzhaf"])
def test_a_killed_run_resumes_to_the_values_of_an_unbroken_one(game, tmp_path, monkeypatch, method, kill_at):
    train, test = game
    unbroken = method.score(train, test).values
    fits = method.fits_
    journal = tmp_path / "values.journal"
    with monkeypatch.context() as patch:
        _killed_after(patch, kill_at)
        with pytest.raises(KeyboardInterrupt):
            method.score(train, test, journal=journal)
    written = journal.read_text().splitlines()
    assert len(written) > 5  # a header and the coalitions of the batches that finished
    resumed = method.score(train, test, journal=journal).values
    assert np.array_equal(resumed, unbroken) and method.fits_ == fits
    # every journaled coalition replayed (and a coalition drawn again later, once journaled)
    assert method.replayed_fits_ >= len(written) - 1
    assert not journal.exists()  # removed once the values are returned


def test_a_journal_of_another_run_or_damaged_is_refused_and_a_cut_line_is_dropped(game, tmp_path, monkeypatch):
    train, test = game
    journal = tmp_path / "values.journal"
    with monkeypatch.context() as patch:
        _killed_after(patch, 3)
        with pytest.raises(KeyboardInterrupt):
            TmcShapley(budget=50, seed=1).score(train, test, journal=journal)
    with pytest.raises(InputFormatError, match="a journal of another run"):
        TmcShapley(budget=50, seed=2).score(train, test, journal=journal)
    with pytest.raises(InputFormatError, match="a journal of another run"):
        TmcShapley(budget=50, seed=1).score((train[0][:-1], train[1][:-1]), test, journal=journal)
    # a kill in the middle of a write leaves a cut last line: dropped, the rest replayed
    with open(journal, "a") as fh:
        fh.write("ffff 0.5")
    expected = TmcShapley(budget=50, seed=1).score(train, test).values
    assert np.array_equal(TmcShapley(budget=50, seed=1).score(train, test, journal=journal).values, expected)
    other = tmp_path / "notes.txt"
    other.write_text("my notes\n")
    with pytest.raises(InputFormatError, match="not a coalition journal"):
        TmcShapley(budget=50, seed=1).score(train, test, journal=other)
    assert other.read_text() == "my notes\n"
