"""Is one system better than another, or is the margin noise? Paired significance tests over
per-subject metric values, as ranx's ``compare`` and trec_eval users run them.

* ``fisher``: Fisher's randomization (permutation) test: the sign of each subject's difference
  is flipped at random ``n_resamples`` times; the p-value is the share of flips whose mean
  difference is at least as far from zero as the observed one (two-sided, with the observed
  assignment counted, so it is never 0). With 2^n <= ``n_resamples`` every assignment is
  enumerated: the exact p-value. Smucker, Allan and Carterette (CIKM 2007) recommend
  it for IR evaluation.
* ``t``: the paired Student t-test (scipy's ``ttest_rel``).

Both take the subjects the two sides share; the confidence interval of the mean difference is
the t-interval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from salience.core.checks import check_k, check_seed
from salience.exceptions import IdMismatchError, InvalidParameterError, unknown_choice

__all__ = ["Significance", "paired_test", "TESTS"]

TESTS = ("fisher", "t")


@dataclass(frozen=True)
class Significance:
    """The outcome of a paired test: ``difference`` is mean(b - a) over ``n`` shared subjects."""

    metric: str | None
    test: str
    n: int
    mean_a: float
    mean_b: float
    difference: float
    p_value: float
    ci95: tuple[float, float]

    def significant(self, alpha: float = 0.05) -> bool:
        return self.p_value < alpha

    def __str__(self) -> str:
        what = f"{self.metric}: " if self.metric else ""
        return (f"{what}{self.mean_b:.4f} vs {self.mean_a:.4f} ({self.difference:+.4f}, 95% CI "
                f"{self.ci95[0]:+.4f} to {self.ci95[1]:+.4f}), p = {self.p_value:.4f} ({self.test}, {self.n} subjects)")


def _values(side: Any, metric: str | None) -> tuple[dict, str | None]:
    """({subject: value}, the metric) from a :class:`~salience.core.metrics.Report` or a mapping."""
    per_subject = getattr(side, "per_subject", None)
    if per_subject is not None:
        if metric is None:
            if len(side.means) != 1:
                raise InvalidParameterError(f"the report holds {len(side.means)} metrics: pass metric= (one of "
                                            f"{', '.join(side.means)}).")
            metric = next(iter(side.means))
        if metric not in side.means:
            raise InvalidParameterError(f"the report has no metric {metric!r} (it has {', '.join(side.means)}).")
        return {subject: values[metric] for subject, values in per_subject.items()}, metric
    if isinstance(side, Mapping):
        return dict(side), metric
    raise InvalidParameterError(f"compare evaluation Reports or {{subject: value}} mappings; got {type(side).__name__}.")


def paired_test(a, b, *, metric: str | None = None, test: str = "fisher", n_resamples: int = 10_000,
                seed: int | None = 0) -> Significance:
    """Paired significance of ``b`` against ``a`` (Reports of :func:`~salience.core.metrics.evaluate`
    on the same qrels, or ``{subject: value}`` mappings) over the subjects both hold.

    >>> a = {"q1": 0.2, "q2": 0.5, "q3": 0.4, "q4": 0.1}
    >>> b = {"q1": 0.3, "q2": 0.6, "q3": 0.5, "q4": 0.2}
    >>> result = paired_test(a, b)
    >>> round(result.difference, 4), round(result.p_value, 3)
    (0.1, 0.125)
    """
    if test not in TESTS:
        raise unknown_choice("significance test", test, TESTS)
    n_resamples = check_k(n_resamples, "n_resamples")
    check_seed(seed)
    (left, metric), (right, _) = _values(a, metric), _values(b, metric)
    shared = [s for s in left if s in right]
    if len(shared) < 2:
        raise IdMismatchError(f"a paired test needs subjects both sides have; they share {len(shared)} of "
                              f"{len(left)} and {len(right)}.")
    x = np.array([left[s] for s in shared], dtype=np.float64)
    y = np.array([right[s] for s in shared], dtype=np.float64)
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise InvalidParameterError("the per-subject values hold NaN or infinity.")
    d = y - x
    n = len(d)
    mean = float(d.mean())
    spread = float(d.std(ddof=1))
    from scipy import stats

    half = float(stats.t.ppf(0.975, n - 1) * spread / np.sqrt(n)) if spread > 0 else 0.0
    if test == "t":
        # every difference equal: nothing varies to test against (t is infinite, or undefined at 0)
        p = float(stats.ttest_rel(y, x).pvalue) if spread > 0 else (1.0 if mean == 0 else 0.0)
    else:
        observed = abs(d.sum()) - 1e-12 * max(1.0, float(np.abs(d).sum()))  # ties of the observed count
        if 2**n <= n_resamples:  # few subjects: every sign assignment, an exact p-value
            signs = 1.0 - 2.0 * ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1)
            p = float((np.abs(signs @ d) >= observed).mean())
        else:
            rng = np.random.default_rng(seed)
            extreme = 0
            for start in range(0, n_resamples, 1000):  # a thousand sign assignments at a time
                signs = rng.choice((-1.0, 1.0), size=(min(1000, n_resamples - start), n))
                extreme += int((np.abs(signs @ d) >= observed).sum())
            p = (extreme + 1) / (n_resamples + 1)
    return Significance(metric, test, n, float(x.mean()), float(y.mean()), mean, p, (mean - half, mean + half))
