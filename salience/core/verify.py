"""Was the importance real? One removal protocol for any units, any scores and any outcome.

Given scores over ``n`` units and an *outcome* (what the importance is for: a model's output, a
test score after a refit, a log-probability, a perplexity), the units are removed in steps,
best-scored first, and the outcome recorded after each step: the *deletion curve* (or, with
``insertion=True``, the units are added to an empty input, best first). The same curve is drawn
for the reversed order and for ``n_random`` random orders (seeded). A faithful score makes the
outcome fall faster than random removal does: a lower area under its curve.

Is the gap to random real? The score's area is compared with the random orders' areas: under
the null hypothesis that the scores order the units no better than chance, the score's area is
one more draw from the distribution the random orders sample, so ``p_value`` is the chance that
a random order does at least as well (Student's t with ``n_random - 1`` degrees of freedom,
from the random areas' mean and spread, as a prediction interval; the empirical share of random
orders that did at least as well is reported beside it). A sign-flip test of the score's area
against the random areas' mean, paired per random order, would ignore that the score's own
area varies under the null and call a random score faithful about a third of the time; it is
the right test across *subjects* (documents, questions, inputs: :func:`verify_subjects` runs
the core's :func:`~salience.core.significance.paired_test` there). The verdict:

* ``faithful``: ``p_value < alpha`` (default 0.01);
* ``inverted``: the score's curve lies significantly on the wrong side of random's
  (``p_inverted < alpha``): its least important units matter most;
* ``undetermined``: the outcome did not change at all, whatever was removed (a model that does
  not move cannot tell a good ranking from a bad one);
* ``no better than random`` otherwise.

Every distinct set of kept units is evaluated once (the empty removal is shared by every
curve), so a verification costs at most ``n_random + 2`` curves of outcome evaluations, and
the outcome may take many masks at once (a batch of refits, of forward passes).

References: Petsiuk, Das and Saenko, RISE (2018): deletion and insertion; Hooker et al.,
ROAR (2019); Ghorbani and Zou, Data Shapley (2019) and OpenDataVal's point removal; Cohen-Wang
et al., ContextCite (2024): top-k log-probability drop.

>>> import numpy as np
>>> weights = 0.8 ** np.arange(40)                       # 40 units, each worth less than the last
>>> outcome = lambda kept: kept.astype(float) @ weights   # the outcome: the worth of what is kept
>>> good = verify(weights, outcome, seed=0)
>>> good.verdict, good.gap > 0
('faithful', True)
>>> verify(-weights, outcome, seed=0).verdict             # the least worth first
'inverted'
>>> verify(np.random.default_rng(1).random(40), outcome, seed=0).verdict
'no better than random'
"""

from __future__ import annotations

import abc
import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from salience.core.base import Scorer
from salience.core.checks import check_seed
from salience.core.params import SEED, Interval
from salience.exceptions import IdMismatchError, InvalidParameterError, ShapeError

__all__ = ["Verification", "SubjectsVerification", "Verifier", "verify", "verify_subjects", "VERDICTS",
           "check_unit_scores", "subject_seed"]

VERDICTS = ("faithful", "no better than random", "inverted", "undetermined")


@dataclass
class Verification:
    """What removing the units in the scores' order did to the outcome, against random orders.

    ``fractions``: the share of units removed (or inserted) at each step; ``curves``: the outcome
    along them for ``"scores"``, ``"reversed"`` and each of ``"random"`` (a list); ``areas``:
    the normalised area under each (``random`` the list, ``random_mean``, ``random_sd``);
    ``gap``: how much better than the random orders' mean the scores did (positive: faithful
    side), with ``ci95`` (the uncertainty of that mean); ``p_value`` / ``p_inverted``: the
    chance that a random order does at least as well / at least as badly; ``share_random_as_good``:
    the empirical share of random orders at least as good; ``evaluations``: distinct outcome
    evaluations; ``costs``: what the verifier counted (fits, forward passes); ``notes``: what
    the protocol had to decide (where a removal stopped, points skipped)."""

    verdict: str
    p_value: float
    p_inverted: float
    gap: float
    ci95: tuple[float, float]
    share_random_as_good: float
    areas: dict
    fractions: np.ndarray
    curves: dict
    mode: str
    worse: str
    n_units: int
    alpha: float
    evaluations: int
    costs: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    unit: str | None = None
    method: str | None = None
    #: what a verifier measures besides the curves (layers: the rank correlation of the scores
    #: with each unit's measured one-removed change)
    extras: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """A JSON-ready dict: the verdict, the p-values, the areas and every curve."""
        return {"unit": self.unit, "method": self.method, "verdict": self.verdict, "p_value": self.p_value,
                "p_inverted": self.p_inverted, "gap": self.gap, "ci95": list(self.ci95),
                "share_random_as_good": self.share_random_as_good, "alpha": self.alpha, "mode": self.mode,
                "worse": self.worse, "n_units": self.n_units, "n_random": len(self.curves["random"]),
                "areas": _jsonable(self.areas), "fractions": self.fractions.tolist(),
                "curves": _jsonable(self.curves), "evaluations": self.evaluations, "costs": dict(self.costs),
                "notes": list(self.notes), **({"extras": _jsonable(self.extras)} if self.extras else {})}

    def __str__(self) -> str:
        lo, hi = self.ci95
        return (f"{self.verdict}: area {self.areas['scores']:.4f} against random {self.areas['random_mean']:.4f} "
                f"(sd {self.areas['random_sd']:.4f}, {len(self.curves['random'])} orders), gap {self.gap:+.4f} "
                f"(95% CI {lo:+.4f} to {hi:+.4f}), p = {self.p_value:.3g}; reversed {self.areas['reversed']:.4f}; "
                f"{self.evaluations} outcome evaluations")

    def save(self, path: str | Path) -> Path:
        """Write the report: JSON, or an HTML page with the curves drawn (``.html``); atomic."""
        from salience.io.files import atomic_write_text

        path = Path(path)
        text = self.html() if path.suffix.lower() in (".html", ".htm") else json.dumps(self.to_dict(), indent=1) + "\n"
        atomic_write_text(path, text)
        return path

    def html(self) -> str:
        """A self-contained page: the verdict, the numbers and the curves as an inline SVG."""
        title = f"Was the importance real? {self.unit or 'units'}" + (f" by {self.method}" if self.method else "")
        rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_short(v))}</td></tr>"
                       for k, v in self.to_dict().items() if k not in ("curves", "fractions", "areas"))
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
                f"<body><h1>{html.escape(title)}</h1><p><b>{html.escape(self.verdict)}</b>: "
                f"{html.escape(str(self).split(': ', 1)[1])}</p>{_svg(self)}<table>{rows}</table></body></html>\n")

    def plot(self, ax=None):
        """The curves on a matplotlib axis (``pip install 'salience[plot]'``)."""
        from salience.extras import require

        plt = require("matplotlib.pyplot", "plot", "Plotting verification curves")
        if ax is None:
            _, ax = plt.subplots(figsize=(5, 3.5))
        for i, curve in enumerate(self.curves["random"]):
            ax.plot(self.fractions, curve, color="0.75", lw=0.8, label="random" if i == 0 else None)
        ax.plot(self.fractions, self.curves["reversed"], color="tab:red", lw=1.2, label="reversed")
        ax.plot(self.fractions, self.curves["scores"], color="tab:blue", lw=2, label="scores")
        ax.set_xlabel(f"share of units {'removed' if self.mode == 'deletion' else 'inserted'}")
        ax.set_ylabel("outcome")
        ax.set_title(f"{self.verdict} (p = {self.p_value:.2g})")
        ax.legend(frameon=False)
        return ax


@dataclass
class SubjectsVerification:
    """A verification over many subjects (documents, questions, inputs): each subject's area
    against the mean of its random orders', paired across subjects (the core's paired test).
    Each subject needs random orders of its own (:func:`subject_seed`; a verifier's
    ``verify_batch`` draws them so)."""

    verdict: str
    p_value: float
    p_inverted: float
    gap: float
    ci95: tuple[float, float]
    subjects: list
    evaluations: int

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "p_value": self.p_value, "p_inverted": self.p_inverted, "gap": self.gap,
                "ci95": list(self.ci95), "n_subjects": len(self.subjects), "evaluations": self.evaluations,
                "subjects": [s.to_dict() for s in self.subjects]}

    def save(self, path: str | Path) -> Path:
        from salience.io.files import atomic_write_text

        atomic_write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")
        return Path(path)


def check_unit_scores(scores, units: Sequence | None = None, what: str = "scores") -> np.ndarray:
    """The scores' values in the order of ``units`` (ids; None: the scores' own order). Scores
    whose ids are not the units', NaN or infinite values, and no units at all are refused."""
    from salience.core.scores import Scores

    if isinstance(scores, Scores):
        values, ids = np.asarray(scores.values, dtype=np.float64), list(scores.ids)
    elif isinstance(scores, Mapping):
        ids, values = list(scores), np.asarray(list(scores.values()), dtype=np.float64)
    else:
        try:
            values = np.asarray(scores, dtype=np.float64)
        except (TypeError, ValueError):
            raise InvalidParameterError(f"{what} must be numbers, one per unit.") from None
        ids = None
    if values.ndim != 1:
        raise ShapeError(f"{what} must be one value per unit; got shape {values.shape}.")
    if units is not None:
        units = [str(u) for u in units]
        if ids is None:
            if len(values) != len(units):
                raise ShapeError(f"{what} hold {len(values)} values for {len(units)} units.")
        else:
            ids = [str(i) for i in ids]
            missing, extra = sorted(set(units) - set(ids)), sorted(set(ids) - set(units))
            if missing or extra or len(set(ids)) != len(ids):
                raise IdMismatchError(
                    f"{what}' ids do not match the units: " + "; ".join(
                        part for part in (f"{len(missing)} units have no score (e.g. {missing[0]!r})" if missing else "",
                                          f"{len(extra)} ids are no unit (e.g. {extra[0]!r})" if extra else "",
                                          "an id is given twice" if len(set(ids)) != len(ids) else "") if part) + ".")
            position = {doc_id: i for i, doc_id in enumerate(ids)}
            values = values[[position[u] for u in units]]
    if len(values) == 0:
        raise InvalidParameterError(f"{what}: no units to verify.")
    if not np.isfinite(values).all():
        bad = int(np.flatnonzero(~np.isfinite(values))[0])
        name = units[bad] if units is not None else (ids[bad] if ids is not None else bad)
        raise InvalidParameterError(f"{what} hold {values[bad]} for unit {name!r}: every score must be a finite number.")
    return values


def verify(scores, outcome: Callable[[np.ndarray], Any], *, units: Sequence | None = None, steps: int = 10,
           n_random: int = 20, seed: int | None = 0, insertion: bool = False, worse: str = "lower",
           alpha: float = 0.01, keep_at_least: int = 1, max_fraction: float = 1.0, unit: str | None = None,
           method: str | None = None, costs: Callable[[], dict] | None = None) -> Verification:
    """Verify ``scores`` over units against random orders (see the module docstring).

    ``outcome(kept)``: ``kept`` a boolean array over the units (1-D for one set, or 2-D, a row
    per set, when the outcome takes batches), the outcome of each set of kept units. ``units``:
    the units' ids in the outcome's order (the scores' ids must be these). ``steps``: removal
    steps (the curve has ``steps + 1`` points); ``n_random``: random orders (at least 2);
    ``insertion``: add units to an empty input instead of removing them; ``worse``: which way
    removing the important units should move the outcome (``lower``: a probability, an accuracy,
    a log-probability; ``higher``: a perplexity, a loss); ``keep_at_least``: a removal stops
    with this many units left (0: it may empty the input; the stop is stated in ``notes``);
    ``max_fraction``: the largest share of units a curve removes (or inserts); ``costs``: a
    callable giving the verifier's counts (fits, forward passes) at the end. An outcome that
    cannot be had for a set (a model that fails to refit on a tiny coalition) is NaN: that step is
    left out of every curve, so that the areas still compare, and counted in ``notes``.
    """
    from scipy import stats

    values = check_unit_scores(scores, units)
    n = len(values)
    if isinstance(n_random, bool) or not isinstance(n_random, (int, np.integer)) or n_random < 2:
        raise InvalidParameterError(f"n_random must be a whole number >= 2 (the spread of random orders needs two); "
                                    f"got {n_random!r}.")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise InvalidParameterError(f"steps must be a whole number >= 1; got {steps!r}.")
    if worse not in ("lower", "higher"):
        raise InvalidParameterError(f"worse must be 'lower' or 'higher'; got {worse!r}.")
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise InvalidParameterError(f"alpha must lie in (0, 1); got {alpha!r}.")
    if isinstance(keep_at_least, bool) or not isinstance(keep_at_least, (int, np.integer)) or keep_at_least < 0:
        raise InvalidParameterError(f"keep_at_least must be a whole number >= 0; got {keep_at_least!r}.")
    if not (isinstance(max_fraction, (int, float)) and not isinstance(max_fraction, bool) and 0 < max_fraction <= 1):
        raise InvalidParameterError(f"max_fraction must lie in (0, 1]; got {max_fraction!r}.")
    if not callable(outcome):
        raise InvalidParameterError(f"outcome must be a callable of the kept units; got {type(outcome).__name__}.")
    check_seed(seed)
    if n <= keep_at_least:
        raise InvalidParameterError(f"{n} unit(s) with keep_at_least={keep_at_least}: nothing can be removed.")
    notes = []
    last = min(n - keep_at_least, int(np.floor(max_fraction * n + 1e-9)))  # the most units a curve removes
    if last < 1:
        raise InvalidParameterError(f"max_fraction={max_fraction} of {n} units removes none: raise it.")
    if keep_at_least and last == n - keep_at_least:
        notes.append(f"the {'removal' if not insertion else 'insertion'} stops with {keep_at_least} unit(s) "
                     f"{'left' if not insertion else 'in'}: an empty input is not evaluated")
    counts = np.unique(np.round(np.linspace(0, last, min(steps, last) + 1)).astype(int))
    if insertion:
        counts = n - counts[::-1]  # units inserted: from keep_at_least up to all of them
    fractions = counts / n

    order = np.argsort(-values, kind="stable")
    rng = np.random.default_rng(seed)
    orders = {"scores": order, "reversed": order[::-1].copy()}
    random_orders = [rng.permutation(n) for _ in range(n_random)]
    evaluator = _CachedOutcome(outcome, n)
    curves: dict = {}
    for name, unit_order in list(orders.items()) + [(f"random{i}", o) for i, o in enumerate(random_orders)]:
        rank = np.empty(n, dtype=np.int64)
        rank[unit_order] = np.arange(n)
        taken = rank[None, :] < counts[:, None]  # the first `count` units of the order, per step
        masks = taken if insertion else ~taken
        curves[name] = evaluator(masks)
    random_curves = [curves.pop(f"random{i}") for i in range(n_random)]
    missing = np.zeros(len(fractions), dtype=bool)
    for c in list(curves.values()) + random_curves:
        missing |= np.isnan(c)
    if missing.any():  # steps the outcome could not be had at, left out of every curve alike
        notes.append(f"{int(missing.sum())} of {len(fractions)} steps left out: the outcome could not be had for "
                     "some set of kept units there")
        if (~missing).sum() < 2:
            raise InvalidParameterError("the outcome could be had at fewer than 2 steps: nothing to compare.")
        fractions = fractions[~missing]
        curves = {name: c[~missing] for name, c in curves.items()}
        random_curves = [c[~missing] for c in random_curves]
    area = {name: _area(fractions, c) for name, c in curves.items()}
    random_areas = np.array([_area(fractions, c) for c in random_curves])
    # the faithful side: removing the best lowers a "lower"-is-worse outcome fastest (low area);
    # inserting the best raises it fastest (high area)
    sign = (1.0 if worse == "lower" else -1.0) * (-1.0 if insertion else 1.0)
    gaps = sign * (random_areas - area["scores"])  # per random order, positive: the scores did better
    gap = float(gaps.mean())
    spread = float(random_areas.std(ddof=1))
    every = np.concatenate([np.ravel(c) for c in list(curves.values()) + random_curves])
    scale = max(1.0, float(np.abs(every).max()))
    if float(every.max() - every.min()) <= 1e-12 * scale:
        verdict, p_value, p_inverted = "undetermined", 1.0, 1.0
        notes.append("the outcome did not change whatever was removed: the scores cannot be told from random")
    else:
        if spread > 0:
            t = gap / (spread * np.sqrt(1.0 + 1.0 / n_random))
            p_value, p_inverted = float(stats.t.sf(t, n_random - 1)), float(stats.t.cdf(t, n_random - 1))
        else:  # every random order alike: the scores' area is on one side of it or on it
            p_value, p_inverted = (0.0, 1.0) if gap > 0 else (1.0, 0.0) if gap < 0 else (1.0, 1.0)
        verdict = ("faithful" if p_value < alpha else "inverted" if p_inverted < alpha else "no better than random")
    half = float(stats.t.ppf(0.975, n_random - 1) * spread / np.sqrt(n_random))
    share = float((1 + np.sum(gaps <= 0)) / (n_random + 1))
    areas = {**area, "random": random_areas.tolist(), "random_mean": float(random_areas.mean()), "random_sd": spread}
    return Verification(verdict, p_value, p_inverted, gap, (gap - half, gap + half), share, areas, fractions,
                        {**curves, "random": random_curves}, "insertion" if insertion else "deletion", worse, n,
                        float(alpha), evaluator.evaluations, dict(costs() if costs else {}), notes, unit, method)


def subject_seed(seed: int | None, subject: int) -> int | None:
    """The seed of subject ``subject``'s random orders in a verification over many subjects:
    ``seed`` itself for the first, then one drawn from ``(seed, subject)``. Subjects must not share
    their random orders: units are often listed in an order that means something (sentences by
    position, keyphrases by an extractor's rank), and one fixed set of permutations of those
    positions is a biased baseline for every subject at once (random scores would be judged
    faithful across subjects)."""
    if seed is None or subject == 0:
        return seed
    return int(np.random.SeedSequence([int(seed), int(subject)]).generate_state(1)[0])


def verify_subjects(verifications: Sequence[Verification], *, alpha: float = 0.01, seed: int | None = 0,
                    n_resamples: int = 10_000) -> SubjectsVerification:
    """Many subjects' verifications as one: each subject's scores area against the mean of its
    random orders', paired across subjects (Fisher's randomization test,
    :func:`~salience.core.significance.paired_test`)."""
    from salience.core.significance import paired_test

    verifications = list(verifications)
    if len(verifications) < 2:
        raise InvalidParameterError(f"a paired test across subjects needs at least 2; got {len(verifications)}.")
    kinds = {(v.mode, v.worse) for v in verifications}
    if len(kinds) != 1:
        raise InvalidParameterError(f"the subjects were verified in different ways ({sorted(kinds)}): verify them alike.")
    mode, worse = kinds.pop()
    sign = (1.0 if worse == "lower" else -1.0) * (-1.0 if mode == "insertion" else 1.0)
    # oriented so that larger is better: b (the scores) against a (random orders' mean)
    a = {i: -sign * v.areas["random_mean"] for i, v in enumerate(verifications)}
    b = {i: -sign * v.areas["scores"] for i, v in enumerate(verifications)}
    evaluations = sum(v.evaluations for v in verifications)
    if all(v.verdict == "undetermined" for v in verifications):
        return SubjectsVerification("undetermined", 1.0, 1.0, 0.0, (0.0, 0.0), verifications, evaluations)
    result = paired_test(a, b, seed=seed, n_resamples=n_resamples)
    two_sided = result.p_value
    p_value = two_sided / 2 if result.difference > 0 else 1 - two_sided / 2
    p_inverted = two_sided / 2 if result.difference < 0 else 1 - two_sided / 2
    verdict = "faithful" if p_value < alpha else "inverted" if p_inverted < alpha else "no better than random"
    return SubjectsVerification(verdict, float(p_value), float(p_inverted), result.difference, result.ci95,
                                verifications, evaluations)


class Verifier(Scorer, abc.ABC):
    """Base of the registered verifiers (family ``verify``), one per kind of unit: each knows the
    outcome its domain is about and how units are removed, and runs :func:`verify` with its
    parameters. ``steps``, ``n_random``, ``seed`` and ``alpha`` are the protocol's; a subclass
    adds its own and implements :meth:`verify` (scores and the inputs the outcome needs, keyword
    arguments after the scores) returning a :class:`Verification`."""

    _parameter_constraints = {"steps": [Interval("int", 1)], "n_random": [Interval("int", 2)], "seed": SEED,
                              "alpha": [Interval("real", 0, 1, closed="neither")]}
    #: what the units are (the report's ``unit``)
    unit = "units"

    def __init__(self, *, steps: int = 10, n_random: int = 20, seed: int | None = 0, alpha: float = 0.01):
        self.steps, self.n_random, self.seed, self.alpha = steps, n_random, seed, alpha
        self._validate_params()

    @abc.abstractmethod
    def verify(self, scores, **inputs) -> Verification:
        """Verify ``scores`` with the inputs the verifier's outcome needs (each verifier's own)."""

    def verify_batch(self, items: Sequence[tuple], **options) -> list[Verification]:
        """``verify`` of each ``(scores, inputs)`` pair (``inputs`` a dict of the verb's keywords),
        each subject with random orders of its own (:func:`subject_seed`), ready for
        :func:`verify_subjects`."""
        return [self.clone().set_params(seed=subject_seed(self.seed, i)).verify(scores, **{**inputs, **options})
                for i, (scores, inputs) in enumerate(items)]

    def _run(self, scores, outcome: Callable, *, seed: int | None = None, **options) -> Verification:
        """The protocol with this verifier's parameters (``seed``: a subject's own, else the
        verifier's)."""
        return verify(scores, outcome, steps=self.steps, n_random=self.n_random,
                      seed=self.seed if seed is None else seed, alpha=self.alpha, unit=self.unit, **options)


class _CachedOutcome:
    """The outcome of each distinct set of kept units, evaluated once, many sets per call."""

    def __init__(self, outcome: Callable, n: int):
        self.outcome, self.n = outcome, n
        self.known: dict[bytes, float] = {}

    @property
    def evaluations(self) -> int:
        return len(self.known)

    def __call__(self, masks: np.ndarray) -> np.ndarray:
        keys = [np.packbits(m).tobytes() for m in masks]
        todo = [i for i, key in enumerate(keys) if key not in self.known]
        fresh = {}
        for i in todo:
            fresh.setdefault(keys[i], i)
        if fresh:
            rows = masks[list(fresh.values())]
            values = self._evaluate(rows)
            for key, value in zip(fresh, values):
                self.known[key] = value
        return np.array([self.known[key] for key in keys], dtype=np.float64)

    def _evaluate(self, rows: np.ndarray) -> np.ndarray:
        try:  # the outcome may take every set at once (a batch of forward passes, of refits)
            values = np.asarray(self.outcome(rows), dtype=np.float64)
            batched = values.shape == (len(rows),)
        except (TypeError, ValueError, IndexError):
            batched = False
        if not batched:
            values = np.array([float(np.asarray(self.outcome(row), dtype=np.float64).reshape(())) for row in rows])
        if np.isinf(values).any():
            raise InvalidParameterError("the outcome gave infinity for a set of kept units; an outcome is a finite "
                                        "number, or NaN where it cannot be had (that step is then left out).")
        return values


def _area(fractions: np.ndarray, outputs: np.ndarray) -> float:
    span = float(fractions[-1] - fractions[0])
    if span <= 0:
        return float(outputs[0])
    return float(np.sum((outputs[1:] + outputs[:-1]) / 2 * np.diff(fractions)) / span)


def _jsonable(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _short(value) -> str:
    text = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return text if len(text) <= 200 else text[:197] + "..."


def _svg(result: Verification, width: int = 480, height: int = 300) -> str:
    """The curves as an inline SVG (no plotting library needed)."""
    curves = [*result.curves["random"], result.curves["reversed"], result.curves["scores"]]
    low = min(float(np.min(c)) for c in curves)
    high = max(float(np.max(c)) for c in curves)
    high = high if high > low else low + 1.0
    pad = 30

    def points(curve) -> str:
        return " ".join(f"{pad + f * (width - 2 * pad):.1f},{height - pad - (v - low) / (high - low) * (height - 2 * pad):.1f}"
                        for f, v in zip(result.fractions, curve))

    lines = [f"<polyline fill='none' stroke='#bbb' stroke-width='1' points='{points(c)}'/>" for c in result.curves["random"]]
    lines.append(f"<polyline fill='none' stroke='#d62728' stroke-width='1.5' points='{points(result.curves['reversed'])}'/>")
    lines.append(f"<polyline fill='none' stroke='#1f77b4' stroke-width='2.5' points='{points(result.curves['scores'])}'/>")
    axis = (f"<line x1='{pad}' y1='{height - pad}' x2='{width - pad}' y2='{height - pad}' stroke='black'/>"
            f"<line x1='{pad}' y1='{pad}' x2='{pad}' y2='{height - pad}' stroke='black'/>"
            f"<text x='{width / 2}' y='{height - 5}' text-anchor='middle' font-size='12'>share of units "
            f"{'removed' if result.mode == 'deletion' else 'inserted'}</text>"
            f"<text x='{pad}' y='{pad - 8}' font-size='11'>{high:.4g}</text>"
            f"<text x='{pad}' y='{height - pad + 14}' font-size='11'>{low:.4g}</text>")
    legend = ("<text x='360' y='40' font-size='12' fill='#1f77b4'>scores</text>"
              "<text x='360' y='56' font-size='12' fill='#d62728'>reversed</text>"
              "<text x='360' y='72' font-size='12' fill='#888'>random</text>")
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
            f"aria-label='removal curves'>{axis}{''.join(lines)}{legend}</svg>")
