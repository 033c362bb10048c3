"""RAG context packing: which retrieved passages a prompt should hold under a token budget.

Retrieval ranks passages; a prompt holds a fixed number of tokens. Filling it in rank order
(top-k truncation) stops at the first passage that does not fit and spends the budget on
long passages. Packing chooses a *set* instead, with the core's selectors (the ``pack`` family,
:class:`Packer`):

* ``method="knapsack"``: the subset with the largest expected number of relevant passages
  whose tokens fit (:func:`~salience.core.select.select_budget`, exact dynamic programming),
  given relevance probabilities: a :class:`ScoreCalibrator` fitted on judged queries turns
  retrieval scores into them (Platt scaling on the score relative to the query's best and
  the log rank);
* ``method="mmr"``: maximal marginal relevance over passage similarities, filled in that
  order while passages fit;
* ``method="topk"``: rank order, the baseline.

``cutoff="f1"`` or ``"dcg"`` first keeps only the top passages that maximise the expected F1
(or DCG) of the kept list (:func:`~salience.core.select.select_cutoff`): it predicts how
many passages are worth keeping at all, so a prompt need not be filled with likely noise.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from salience.core.base import Scorer, register_method
from salience.core.params import Interval, Options
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError, ShapeError

__all__ = ["pack", "Packing", "Packer", "KnapsackPacking", "MMRPacking", "TopKPacking", "ScoreCalibrator",
           "approximate_tokens"]
_PIECES = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def approximate_tokens(text: str) -> int:
    """A tokenizer-free estimate of a text's LLM tokens: words and punctuation marks, words
    longer than 6 characters counted as two (subword tokenizers split long words)."""
    return sum(2 if len(piece) > 6 else 1 for piece in _PIECES.findall(text))


@dataclass
class Packing:
    """The passages chosen for a prompt (``ids`` in rank order), their ``tokens``, the
    ``budget``, and the expected number of relevant passages among them (when probabilities
    were given)."""

    ids: list
    tokens: int
    budget: int
    method: str
    expected_relevant: float | None = None
    kept_by_cutoff: int | None = None
    info: dict = field(default_factory=dict)


class ScoreCalibrator:
    """Relevance probabilities from retrieval scores: logistic regression on (score / the
    query's best score, log rank), fitted on judged queries (Platt scaling with the rank as a
    second feature, so that one calibration serves queries whose scores differ in scale)."""

    def __init__(self, l2: float = 1e-3):
        self.l2 = l2
        self.coef_: np.ndarray | None = None
        self.intercept_ = 0.0

    @staticmethod
    def _features(scores: Scores) -> np.ndarray:
        ranked = scores.sorted()
        values = ranked.values
        best = values[0] if len(values) and values[0] != 0 else 1.0
        return np.column_stack([values / best, np.log1p(np.arange(len(values)))])

    def fit(self, rankings: Mapping[str, Scores], qrels) -> "ScoreCalibrator":
        from salience.core.linear import fit_logistic_regression

        rows, labels = [], []
        for query, ranked in rankings.items():
            judged = qrels[query] if query in qrels else {}
            if not len(ranked):
                continue
            ordered = ranked.sorted()
            rows.append(self._features(ordered))
            labels.extend(float(judged.get(doc, 0) > 0) for doc in ordered.ids)
        if not rows:
            raise InvalidParameterError("the calibrator needs rankings of judged queries to fit on.")
        if len(set(labels)) < 2:
            raise InvalidParameterError("the calibrator's rankings hold only relevant or only non-relevant passages: "
                                        "retrieve deeper (more passages per query) or give more judged queries.")
        self.coef_, self.intercept_ = fit_logistic_regression(np.vstack(rows), np.array(labels), l2=self.l2,
                                                              max_iter=500)
        return self

    def probabilities(self, scores: Scores) -> Scores:
        """The scores' items, best first, with their probability of being relevant."""
        if self.coef_ is None:
            raise InvalidParameterError("the calibrator is not fitted: call fit(rankings, qrels).")
        ranked = scores.sorted()
        z = self._features(ranked) @ self.coef_ + self.intercept_
        return Scores(1.0 / (1.0 + np.exp(-z)), ids=ranked.ids)


class Packer(Scorer, abc.ABC):
    """Base of the packing methods (the ``pack`` family): which passages a prompt of ``tokens``
    tokens holds. ``pack(scores, lengths, similarity=None)`` gives a :class:`Packing`;
    ``score(...)`` the chosen passages' :class:`~salience.Scores` in rank order. ``cutoff``:
    ``"f1"`` or ``"dcg"`` keeps only the top passages that maximise the expected F1 (or DCG)
    of the kept list first (scores must then be relevance probabilities).

    A method orders or chooses the candidates in :meth:`choose`."""

    _parameter_constraints = {"tokens": [Interval("int", 1)], "cutoff": [None, Options(("f1", "dcg"))]}
    #: whether ``pack`` needs the passages' ``similarity``
    needs_similarity = False

    def __init__(self, *, tokens: int, cutoff: str | None = None):
        self.tokens, self.cutoff = tokens, cutoff
        self._validate_params()

    @property
    def name(self) -> str:
        from salience.core.base import registered_name

        return registered_name(self, "pack")

    @abc.abstractmethod
    def choose(self, candidates: Scores, cost: np.ndarray, position: dict, index: np.ndarray, similarity) -> list:
        """The subclass's part (see the class docstring)."""

    def _fill(self, order: list, cost: np.ndarray, position: dict, stop_at_first_misfit: bool) -> list:
        """The passages of ``order`` that fit, in that order."""
        chosen, used = [], 0.0
        for item in order:
            c = cost[position[item]]
            if used + c > self.tokens:
                if stop_at_first_misfit:
                    break  # truncation: the list ends at the first passage that does not fit
                continue
            chosen.append(item)
            used += c
        return chosen

    def pack(self, scores: Scores, lengths: Mapping | Sequence[int], *, similarity=None) -> Packing:
        """Choose passages (see the module docstring). ``scores``: the retrieved passages'
        scores, or relevance probabilities in [0, 1] (needed by ``cutoff`` and what the
        knapsack should maximise: see :class:`ScoreCalibrator`); ``lengths``: each passage's
        tokens, by id (a mapping) or in the scores' order; ``similarity``: passages x passages,
        for ``mmr``."""
        tokens = self.tokens
        if isinstance(lengths, Mapping):
            missing = [i for i in scores.ids if i not in lengths]
            if missing:
                raise ShapeError(f"lengths has no entry for passage {missing[0]!r}.")
            cost = np.array([lengths[i] for i in scores.ids], dtype=np.float64)
        else:
            cost = np.asarray(lengths, dtype=np.float64)
            if cost.shape != (len(scores),):
                raise ShapeError(f"lengths has {cost.size} entries for {len(scores)} passages.")
        if not np.isfinite(cost).all() or (cost < 0).any():
            raise InvalidParameterError("passage lengths must be finite, non-negative token counts.")
        if len(scores) and cost.min() > tokens:
            raise InvalidParameterError(f"a budget of {tokens} tokens holds no passage: the shortest has "
                                        f"{int(cost.min())}; raise tokens or split the passages.")
        from salience.core.select import select_cutoff

        kept_by_cutoff = None
        candidates = scores
        if self.cutoff is not None:
            candidates = select_cutoff(scores, objective=self.cutoff)
            kept_by_cutoff = len(candidates)
        position = {item: i for i, item in enumerate(scores.ids)}
        index = np.array([position[i] for i in candidates.ids], dtype=np.int64)
        chosen_set = set(self.choose(candidates, cost, position, index, similarity))
        ranked = [i for i in scores.sorted().ids if i in chosen_set]
        used = int(sum(cost[position[i]] for i in ranked))
        values = scores.values
        expected = float(sum(values[position[i]] for i in ranked)) if len(values) and values.min() >= 0 and \
            values.max() <= 1 else None
        return Packing(ranked, used, int(tokens), self.name, expected, kept_by_cutoff)

    def score(self, scores: Scores, lengths: Mapping | Sequence[int], *, similarity=None) -> Scores:
        """The chosen passages and their scores, in rank order."""
        chosen = self.pack(scores, lengths, similarity=similarity).ids
        lookup = dict(zip(scores.ids, scores.values))
        return Scores([lookup[i] for i in chosen], ids=chosen)

    def score_batch(self, batch, **per_call) -> list[Scores]:
        return [self.score(scores, lengths, **per_call) for scores, lengths in batch]


@register_method("pack", "knapsack", "the subset with the largest expected number of relevant passages that fits "
                                     "(exact 0/1 knapsack over relevance probabilities)")
class KnapsackPacking(Packer):
    def choose(self, candidates, cost, position, index, similarity) -> list:
        from salience.core.select import select_budget

        return select_budget(candidates, cost[index], budget=self.tokens).ids


@register_method("pack", "mmr", "maximal marginal relevance over passage similarities, filled in that order while "
                                "passages fit")
class MMRPacking(Packer):
    _parameter_constraints = {"diversity": [Interval("real", 0, 1)]}
    needs_similarity = True

    def __init__(self, *, tokens: int, diversity: float = 0.3, cutoff: str | None = None):
        self.diversity = diversity
        super().__init__(tokens=tokens, cutoff=cutoff)

    def choose(self, candidates, cost, position, index, similarity) -> list:
        from salience.core.select import select_mmr

        if similarity is None:
            raise InvalidParameterError("method='mmr' needs similarity= (passages x passages).")
        n = len(position)
        S = np.asarray(similarity, dtype=np.float64)
        if S.shape != (n, n):
            raise ShapeError(f"similarity must be {n} x {n}; got {S.shape}.")
        sub = S[np.ix_(index, index)]
        order = select_mmr(candidates, sub, k=max(len(candidates), 1), diversity=self.diversity,
                           normalize="minmax").ids if len(candidates) else []
        return self._fill(order, cost, position, stop_at_first_misfit=False)


@register_method("pack", "topk", "rank order, truncated at the first passage that does not fit (the baseline)")
class TopKPacking(Packer):
    def choose(self, candidates, cost, position, index, similarity) -> list:
        return self._fill(candidates.sorted().ids, cost, position, stop_at_first_misfit=True)


def pack(scores: Scores, lengths: Mapping | Sequence[int], *, tokens: int, method: str = "knapsack",
         similarity=None, cutoff: str | None = None, **params) -> Packing:
    """Choose passages for a prompt of ``tokens`` tokens by ``method`` (a registered ``pack``
    method built with ``params``: ``diversity`` for ``mmr``); see :meth:`Packer.pack`."""
    from salience.core.base import create

    return create("pack", method, tokens=tokens, cutoff=cutoff, **params).pack(scores, lengths, similarity=similarity)
