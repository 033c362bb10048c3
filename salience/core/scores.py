"""``Scores``: importance values aligned with item ids, and the ranking rule every domain shares.

Ranking rule (used everywhere in salience): higher value first; ties keep the
order in which the items were given (stable by position). NaN values are refused.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from salience.core.checks import check_k
from salience.exceptions import InvalidParameterError, ShapeError, unknown_choice

__all__ = ["Scores", "rank_order", "first_duplicate", "normalized_values"]

_NORMALIZATIONS = ("minmax", "zscore", "sum", "max", "rank")
_FLOOR = 1e-9


def first_duplicate(items: Iterable[Any]) -> Any | None:
    """The first item met a second time, or ``None`` when all are distinct.

    >>> first_duplicate(["a", "b", "a", "b"])
    'a'
    """
    seen: set = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None


def rank_order(values: np.ndarray) -> np.ndarray:
    """Indices that sort ``values`` descending, ties by position (stable)."""
    return np.argsort(-np.asarray(values, dtype=np.float64), kind="stable")


def normalized_values(v: np.ndarray, method: str) -> np.ndarray:
    """:meth:`Scores.normalize`'s rescaling of finite, non-empty float64 values by a method
    that needs no ranks (``minmax``, ``zscore``, ``sum``, ``max``)."""
    if method == "minmax":
        return (v - v.min()) / max(v.max() - v.min(), _FLOOR)
    if method == "zscore":
        return (v - v.mean()) / max(v.std(), _FLOOR)
    if method == "sum":
        return (v - v.min()) / max(v.sum() - v.min() * len(v), _FLOOR)
    if method == "max":
        return v / max(v.max(), _FLOOR)
    raise unknown_choice("normalization", method, _NORMALIZATIONS[:-1])


class Scores:
    """Float scores for a set of items, with optional ids.

    Parameters
    ----------
    values : array-like of float
        One score per item. NaN is refused; +-inf is allowed.
    ids : sequence, optional
        One id per item (any hashable, usually str). Defaults to positions ``0..n-1``.

    Examples
    --------
    >>> s = Scores([0.2, 0.9, 0.2], ids=["a", "b", "c"])
    >>> s.ranked_ids()
    ['b', 'a', 'c']
    >>> s.top_k(2).to_dict()
    {'b': 0.9, 'a': 0.2}
    >>> s.rank().tolist()
    [2, 1, 3]
    """

    __slots__ = ("values", "ids", "_index")

    def __init__(self, values: Iterable[float], ids: Sequence[Any] | None = None):
        arr = np.asarray(values if not isinstance(values, Iterator) else list(values), dtype=np.float64)
        if arr.ndim != 1:
            raise ShapeError(f"Scores values must be one-dimensional; got shape {arr.shape}.")
        if np.isnan(arr).any():
            bad = int(np.flatnonzero(np.isnan(arr))[0])
            raise InvalidParameterError(
                f"Scores values contain NaN (first at position {bad}"
                + (f", id {list(ids)[bad]!r}" if ids is not None and len(ids) == len(arr) else "")
                + "). Replace NaN with a number or drop the item."
            )
        if ids is None:
            ids = list(range(len(arr)))
        else:
            ids = list(ids)
            if len(ids) != len(arr):
                raise ShapeError(
                    f"Scores needs one id per value; got {len(arr)} values and {len(ids)} ids. "
                    "Pass one id per item, or omit ids to use positions."
                )
            duplicate = first_duplicate(ids)
            if duplicate is not None:
                from salience.exceptions import DuplicateIdError

                raise DuplicateIdError(f"Scores ids must be distinct; {duplicate!r} appears more than once. Combine "
                                      "its scores first (salience.core.aggregate), or give each item its own id.")
        self.values = arr
        self.ids = ids
        self._index: dict | None = None

    # construction -------------------------------------------------------------------------
    @classmethod
    def unchecked(cls, values: np.ndarray, ids: list) -> "Scores":
        """Build without validation, for callers that guarantee float64 values, no NaN and one id
        per value (hot paths that made the values themselves: search, keyphrases, fusion)."""
        obj = cls.__new__(cls)
        obj.values = np.asarray(values, dtype=np.float64)
        obj.ids = ids
        obj._index = None
        return obj

    @classmethod
    def unchecked_rows(cls, values: np.ndarray, ids: list[list], counts: list[int]) -> list["Scores"]:
        """:meth:`unchecked` for each row of a float64 matrix (a batch's top-k rows): row ``r``'s
        first ``counts[r]`` values with the first ``counts[r]`` of ``ids[r]``."""
        values = np.asarray(values, dtype=np.float64)
        width = values.shape[1] if values.ndim == 2 else 0
        out = []
        new = cls.__new__
        for row, row_ids, count in zip(values, ids, counts):
            obj = new(cls)
            obj.values = row if count == width else row[:count]
            obj.ids = row_ids if count == width else row_ids[:count]
            obj._index = None
            out.append(obj)
        return out

    @classmethod
    def from_dict(cls, mapping: Mapping[Any, float]) -> "Scores":
        """Build from ``{id: score}``, keeping the mapping's order."""
        return cls(list(mapping.values()), ids=list(mapping.keys()))

    # container protocol -------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[tuple[Any, float]]:
        return iter(zip(self.ids, self.values.tolist()))

    def __contains__(self, item_id: Any) -> bool:
        return item_id in self._id_index()

    def __getitem__(self, item_id: Any) -> float:
        try:
            return float(self.values[self._id_index()[item_id]])
        except KeyError:
            from salience.exceptions import IdMismatchError

            raise IdMismatchError(f"unknown id {item_id!r}; these Scores hold {len(self)} ids.") from None

    def __repr__(self) -> str:
        head = ", ".join(f"{i!r}: {v:.4g}" for i, v in list(self.top_k(min(len(self), 3))) ) if len(self) else ""
        more = ", ..." if len(self) > 3 else ""
        return f"Scores(n={len(self)}, top={{{head}{more}}})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Scores):
            return NotImplemented
        return self.ids == other.ids and np.array_equal(self.values, other.values)

    def _id_index(self) -> dict:
        if self._index is None:
            self._index = {item_id: i for i, item_id in enumerate(self.ids)}
        return self._index

    def to_dict(self) -> dict:
        """``{id: score}`` in the current item order."""
        return dict(zip(self.ids, self.values.tolist()))

    # ranking ------------------------------------------------------------------------------
    def order(self) -> np.ndarray:
        """Positions of the items from most to least important (ties by position)."""
        return rank_order(self.values)

    def rank(self) -> np.ndarray:
        """Rank of each item, 1 = most important, ties broken by position."""
        ranks = np.empty(len(self), dtype=np.int64)
        ranks[self.order()] = np.arange(1, len(self) + 1)
        return ranks

    def ranked_ids(self) -> list:
        """Ids from most to least important."""
        return [self.ids[i] for i in self.order()]

    def _in_rank_order(self) -> bool:
        """Whether the items already stand in rank order (values never rising: ties are then in
        position order too), as the rankings of a search come: one vectorised pass, no sort."""
        v = self.values
        return len(v) < 2 or bool((v[:-1] >= v[1:]).all())

    def sorted(self) -> "Scores":
        """A copy with items in rank order."""
        if self._in_rank_order():
            return Scores.unchecked(self.values.copy(), list(self.ids))
        return self.take(self.order())

    def take(self, positions: Sequence[int] | np.ndarray) -> "Scores":
        """A new ``Scores`` with the items at ``positions``, in that order."""
        positions = np.asarray(positions, dtype=np.int64)
        return Scores.unchecked(self.values[positions], list(map(self.ids.__getitem__, positions.tolist())))

    def top_k(self, k: int) -> "Scores":
        """The ``k`` most important items in rank order; ``k`` above the size is clamped."""
        k = check_k(k)
        n = len(self)
        if k >= n:
            return self.sorted()
        if self._in_rank_order():
            return Scores.unchecked(self.values[:k].copy(), list(self.ids[:k]))
        # argpartition finds the k best in O(n); then break ties at the boundary by position.
        neg = -self.values
        part = np.argpartition(neg, k - 1)[:k]
        kth = neg[part].max()
        better = np.flatnonzero(neg < kth)
        tied = np.flatnonzero(neg == kth)[: k - len(better)]
        chosen = np.concatenate([better, tied])
        chosen = chosen[np.lexsort((chosen, neg[chosen]))]
        return self.take(chosen)

    def normalize(self, method: str = "minmax") -> "Scores":
        """Rescale values (the definitions of ranx, so fusion agrees with it exactly).

        ``minmax``: ``(x - min) / (max - min)``; ``zscore``: ``(x - mean) / std``;
        ``sum``: ``(x - min) / sum(x - min)``; ``max``: ``x / max``; ``rank``: ``1 - i / n`` for
        the item at 0-based rank ``i`` (1 for the best). Denominators are floored at 1e-9, so
        constant inputs map to 0.
        """
        v = self.values
        if method not in _NORMALIZATIONS:
            raise unknown_choice("normalization", method, _NORMALIZATIONS)
        if len(v) == 0:
            return Scores([], ids=[])
        if not np.isfinite(v).all():
            raise InvalidParameterError(f"cannot {method}-normalize scores that contain +-inf.")
        out = 1.0 - (self.rank() - 1) / len(v) if method == "rank" else normalized_values(v, method)
        return Scores.unchecked(out, list(self.ids))
