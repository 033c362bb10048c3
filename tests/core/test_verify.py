"""The removal protocol: curves by hand, the verdict's error rates, costs, reports, bad input."""

import json

import numpy as np
import pytest

from salience import Scores
from salience.core.verify import verify, verify_subjects
from salience.exceptions import IdMismatchError, InvalidParameterError, ShapeError


def kept_worth(worth):
    worth = np.asarray(worth, dtype=float)
    return lambda kept: np.asarray(kept, dtype=float) @ worth


def test_curves_and_areas_by_hand():
    worth = [4.0, 1.0, 2.0, 0.0]  # the outcome: the worth of what is kept
    result = verify([0.9, 0.1, 0.5, 0.0], kept_worth(worth), steps=4, n_random=3, keep_at_least=0, seed=0)
    # removing 2.. in score order: unit 0 (4), unit 2 (2), unit 1 (1), unit 3 (0)
    assert result.fractions.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert result.curves["scores"].tolist() == [7.0, 3.0, 1.0, 0.0, 0.0]
    assert result.curves["reversed"].tolist() == [7.0, 7.0, 6.0, 4.0, 0.0]
    # trapezoids: (7+3)/2 + (3+1)/2 + (1+0)/2 + 0, times 0.25
    assert result.areas["scores"] == pytest.approx((5 + 2 + 0.5 + 0) * 0.25)
    assert result.areas["reversed"] == pytest.approx((7 + 6.5 + 5 + 2) * 0.25)
    random_means = np.mean([np.mean((c[1:] + c[:-1]) / 2) for c in result.curves["random"]])
    assert result.areas["random_mean"] == pytest.approx(random_means)
    assert result.gap == pytest.approx(result.areas["random_mean"] - result.areas["scores"])
    # every curve starts from the whole input: evaluated once; at most R + 2 curves of evaluations
    assert result.evaluations <= 1 + (3 + 2) * 4
    assert len({tuple(c) for c in result.curves["random"]}) >= 1


def test_random_scores_are_no_better_than_random_and_reversed_ones_never_faithful():
    worth = 0.9 ** np.arange(30)
    outcome = kept_worth(worth)
    rng = np.random.default_rng(0)
    random_verdicts = [verify(rng.random(30), outcome, n_random=20, seed=trial).verdict for trial in range(100)]
    assert random_verdicts.count("no better than random") >= 90, random_verdicts
    reversed_verdicts = [verify(-worth + 0.01 * rng.random(30), outcome, n_random=20, seed=trial).verdict
                         for trial in range(100)]
    assert "faithful" not in reversed_verdicts
    assert reversed_verdicts.count("inverted") >= 90  # its curve lies significantly above random's
    faithful = [verify(worth, outcome, n_random=20, seed=trial).verdict for trial in range(20)]
    assert faithful.count("faithful") == 20


def test_a_curve_that_merely_slopes_is_not_faithful():
    # every unit worth the same: any order's curve falls alike, however steeply
    outcome = kept_worth(np.ones(20))
    result = verify(np.arange(20.0), outcome, seed=0)
    assert result.verdict == "no better than random" and result.gap == pytest.approx(0.0)


def test_an_outcome_that_does_not_move_is_undetermined():
    result = verify(np.arange(10.0), lambda kept: 0.97, seed=0)
    assert result.verdict == "undetermined" and result.p_value == 1.0
    assert any("did not change" in note for note in result.notes)


def test_insertion_and_an_outcome_that_rises_when_it_gets_worse():
    worth = 0.85 ** np.arange(25)
    loss = lambda kept: 10.0 - np.asarray(kept, dtype=float) @ worth  # noqa: E731 - a loss: higher is worse
    assert verify(worth, loss, worse="higher", seed=0).verdict == "faithful"
    inserted = verify(worth, kept_worth(worth), insertion=True, seed=0)
    assert inserted.verdict == "faithful" and inserted.mode == "insertion"
    assert inserted.fractions[0] > 0 and inserted.curves["scores"][-1] == pytest.approx(worth.sum())


def test_batches_are_taken_and_each_set_is_evaluated_once():
    calls = []

    def outcome(kept):
        kept = np.atleast_2d(kept)
        calls.append(len(kept))
        return kept.astype(float) @ (0.8 ** np.arange(12))

    result = verify(0.8 ** np.arange(12), outcome, n_random=5, steps=6, seed=0)
    assert sum(calls) == result.evaluations <= (5 + 2) * 6 + 1
    assert len(calls) == 7  # one batch per curve


def test_removal_stops_at_the_last_unit_and_says_so():
    seen = []

    def outcome(kept):
        kept = np.atleast_2d(kept)
        seen.extend(kept.sum(axis=1).tolist())
        return kept.astype(float) @ np.arange(6.0)

    result = verify(np.arange(6.0), outcome, steps=10, n_random=3, seed=0)
    assert min(seen) == 1 and result.fractions[-1] == pytest.approx(5 / 6)
    assert any("stops with 1 unit" in note for note in result.notes)


def test_ids_are_matched_to_units_and_bad_input_is_named():
    outcome = kept_worth([3.0, 2.0, 1.0])
    by_id = verify(Scores([0.1, 0.9, 0.5], ids=["c", "a", "b"]), outcome, units=["a", "b", "c"], n_random=4,
                   seed=0, keep_at_least=0)
    assert by_id.curves["scores"][1] == pytest.approx(3.0)  # 'a' (worth 3) removed first
    with pytest.raises(IdMismatchError, match=r"1 units have no score \(e.g. 'c'\); 1 ids are no unit \(e.g. 'x'\)"):
        verify(Scores([0.1, 0.9, 0.5], ids=["x", "a", "b"]), outcome, units=["a", "b", "c"])
    with pytest.raises(InvalidParameterError, match="nan for unit 1"):
        verify([0.1, float("nan"), 0.3], outcome)
    with pytest.raises(ShapeError, match="3 values for 2 units"):
        verify([0.1, 0.2, 0.3], outcome, units=["a", "b"])
    with pytest.raises(InvalidParameterError, match="n_random must be a whole number >= 2"):
        verify([0.1, 0.2, 0.3], outcome, n_random=1)
    with pytest.raises(InvalidParameterError, match="nothing can be removed"):
        verify([0.5], outcome)
    with pytest.raises(InvalidParameterError, match="infinity"):
        verify([0.1, 0.2, 0.3], lambda kept: float("inf"))
    with pytest.raises(InvalidParameterError, match="fewer than 2 steps"):
        verify([0.1, 0.2, 0.3], lambda kept: float("nan"))
    with pytest.raises(InvalidParameterError, match="worse must be"):
        verify([0.1, 0.2, 0.3], outcome, worse="down")


def test_reports_save_as_json_and_html(tmp_path):
    result = verify(0.8 ** np.arange(15), kept_worth(0.8 ** np.arange(15)), seed=0, unit="features", method="toy")
    saved = json.loads(result.save(tmp_path / "report.json").read_text())
    assert saved["verdict"] == "faithful" and saved["p_value"] == result.p_value
    assert len(saved["curves"]["random"]) == 20 and saved["fractions"] == result.fractions.tolist()
    page = result.save(tmp_path / "report.html").read_text()
    assert "<svg" in page and "faithful" in page and "polyline" in page
    assert "faithful:" in str(result)


def test_many_subjects_are_paired_across_subjects():
    rng = np.random.default_rng(3)
    subjects = [0.85 ** rng.permutation(20) for _ in range(12)]
    good = verify_subjects([verify(w, kept_worth(w), n_random=5, seed=i) for i, w in enumerate(subjects)])
    assert good.verdict == "faithful" and good.p_value < 0.01 and good.to_dict()["n_subjects"] == 12
    random = verify_subjects([verify(rng.random(20), kept_worth(w), n_random=5, seed=i)
                              for i, w in enumerate(subjects)])
    assert random.verdict == "no better than random"
    with pytest.raises(InvalidParameterError, match="at least 2"):
        verify_subjects(good.subjects[:1])


def test_steps_the_outcome_cannot_be_had_at_are_left_out_of_every_curve():
    worth = 0.8 ** np.arange(20)

    def outcome(kept):  # fails (NaN) once fewer than 5 units are kept, as a refit on a tiny coalition
        kept = np.atleast_2d(kept)
        return np.where(kept.sum(axis=1) < 5, np.nan, kept.astype(float) @ worth)

    result = verify(worth, outcome, steps=19, seed=0)
    assert result.fractions[-1] == pytest.approx(15 / 20) and len(result.fractions) == 16
    assert all(len(c) == 16 for c in result.curves["random"]) and result.verdict == "faithful"
    assert any("4 of 20 steps left out" in note for note in result.notes)
    half = verify(worth, outcome, steps=10, max_fraction=0.5, seed=0)
    assert half.fractions[-1] == pytest.approx(0.5) and not any("left out" in n for n in half.notes)


def test_subjects_get_random_orders_of_their_own_so_random_scores_stay_random():
    """Units listed in an order that means something (here: by worth) and one fixed set of
    random permutations shared by every subject make a biased baseline; verify_batch gives each
    subject its own, and random scores are then no better than random across subjects."""
    from salience.core.verify import Verifier, subject_seed

    class Worth(Verifier):
        def verify(self, scores, *, weights):
            return self._run(scores, lambda kept: np.atleast_2d(kept).astype(float) @ weights)

    weights = 0.7 ** np.arange(12)  # unit i is worth less than unit i - 1
    rng = np.random.default_rng(11)
    items = [(rng.random(12), {"weights": weights}) for _ in range(150)]
    verifier = Worth(n_random=3, seed=0)
    own = verifier.verify_batch(items)
    assert len({tuple(np.round(v.areas["random"], 12)) for v in own}) > 100  # each its own orders
    assert own[0].areas["random"] == verifier.verify(*items[0][:1], **items[0][1]).areas["random"]
    assert verify_subjects(own).verdict == "no better than random"
    assert subject_seed(None, 3) is None and subject_seed(7, 0) == 7 and subject_seed(7, 1) != subject_seed(7, 2)
