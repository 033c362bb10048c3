"""Metadata filters evaluated as boolean masks over documents.

``where`` is a mapping ``{field: condition}``; every field's condition must hold (AND).
A condition is a plain value (equality) or a mapping of operators to operands:
``==  !=  >  >=  <  <=  in  not in  exists`` (MongoDB spellings ``$eq $ne $gt $gte $lt $lte
$in $nin $exists`` are accepted too). A document lacking the field fails every operator
except ``!=``, ``not in`` and ``exists: False``.
"""

from __future__ import annotations

import numbers
from typing import Any, Mapping, Sequence

import numpy as np

from salience.exceptions import InvalidParameterError, unknown_choice

__all__ = ["MetadataColumns", "OPERATORS"]

OPERATORS = ("==", "!=", ">", ">=", "<", "<=", "in", "not in", "exists")
_MONGO = {"$eq": "==", "$ne": "!=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<=", "$in": "in", "$nin": "not in", "$exists": "exists"}
_MISSING = object()


def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


class MetadataColumns:
    """Column view of per-document metadata, built lazily per field and cached."""

    def __init__(self, rows: Sequence[Mapping[str, Any]]):
        self._rows = rows
        self._columns: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def _column(self, name: str):
        col = self._columns.get(name)
        if col is None:
            raw = [row.get(name, _MISSING) if row else _MISSING for row in self._rows]
            present = np.fromiter((v is not _MISSING for v in raw), dtype=bool, count=len(raw))
            numeric = np.fromiter((float(v) if _is_number(v) else np.nan for v in raw), dtype=np.float64, count=len(raw))
            objects = np.empty(len(raw), dtype=object)
            objects[:] = [None if v is _MISSING else v for v in raw]
            col = self._columns[name] = (present, numeric, objects)
        return col

    def mask(self, where: Mapping[str, Any] | None) -> np.ndarray | None:
        """Boolean mask of documents satisfying ``where`` (``None`` when there is no filter)."""
        if where is None:
            return None
        if not isinstance(where, Mapping):
            raise InvalidParameterError(f"where must be a mapping {{field: condition}}; got {type(where).__name__}.")
        mask = np.ones(len(self._rows), dtype=bool)
        for name, condition in where.items():
            if isinstance(condition, Mapping):
                items = list(condition.items())
            else:
                items = [("==", condition)]
            for op, operand in items:
                op = _MONGO.get(op, op)
                if op not in OPERATORS:
                    raise unknown_choice(f"filter operator for field {name!r}", op, OPERATORS)
                mask &= self._apply(name, op, operand)
        return mask

    def _apply(self, name: str, op: str, operand: Any) -> np.ndarray:
        present, numeric, objects = self._column(name)
        if op == "exists":
            return present if operand else ~present
        self._check_operand(name, op, operand, present, numeric, objects)
        if op in (">", ">=", "<", "<="):
            if not _is_number(operand):
                if isinstance(operand, str):
                    cmp = {">": str.__gt__, ">=": str.__ge__, "<": str.__lt__, "<=": str.__le__}[op]
                    return np.fromiter((isinstance(v, str) and cmp(v, operand) for v in objects), dtype=bool, count=len(objects))
                raise InvalidParameterError(f"filter {name!r} {op} needs a number or a string; got {operand!r}.")
            with np.errstate(invalid="ignore"):
                return {">": np.greater, ">=": np.greater_equal, "<": np.less, "<=": np.less_equal}[op](numeric, float(operand))
        if op in ("in", "not in"):
            if isinstance(operand, (str, bytes)) or not isinstance(operand, (list, tuple, set, frozenset)):
                raise InvalidParameterError(f"filter {name!r} {op!r} needs a list of values; got {operand!r}.")
            values = list(operand)
            hit = np.zeros(len(objects), dtype=bool)
            for value in values:
                hit |= self._equal(present, numeric, objects, value)
            return hit if op == "in" else ~hit
        eq = self._equal(present, numeric, objects, operand)
        return eq if op == "==" else ~eq

    @staticmethod
    def _check_operand(name: str, op: str, operand: Any, present, numeric, objects) -> None:
        """Refuse a condition that could only match nothing: a NaN bound (it compares false with
        everything), a field no document has, or a bound of another type than every value of
        the field (a number against strings: ``"1995" > 2000`` is never true)."""
        operands = list(operand) if op in ("in", "not in") and isinstance(operand, (list, tuple, set, frozenset)) \
            else [operand]
        if any(isinstance(v, float) and np.isnan(v) for v in operands):
            raise InvalidParameterError(f"filter {name!r} {op} NaN matches nothing (NaN compares false with every "
                                        "value); give a number.")
        if op in ("!=", "not in") or not len(present):
            return
        if not present.any():
            raise InvalidParameterError(f"filter on {name!r}: no document has this field, so {op} matches nothing "
                                        "(check its spelling).")
        has_numbers = bool((~np.isnan(numeric[present])).any())
        example = objects[present][0]
        for value in operands:
            if _is_number(value) and not has_numbers:
                raise InvalidParameterError(f"filter {name!r} {op} {value!r}: the field holds no numbers (e.g. "
                                            f"{example!r}); compare it with a value of its type.")
            if isinstance(value, str) and not any(isinstance(v, str) for v in objects[present]):
                raise InvalidParameterError(f"filter {name!r} {op} {value!r}: the field holds no strings (e.g. "
                                            f"{example!r}); compare it with a value of its type.")

    @staticmethod
    def _equal(present, numeric, objects, value) -> np.ndarray:
        if _is_number(value):
            return numeric == float(value)
        return present & np.fromiter((v == value for v in objects), dtype=bool, count=len(objects))
