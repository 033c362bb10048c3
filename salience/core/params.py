"""Declarative parameter constraints, as scikit-learn's ``_parameter_constraints``.

A scorer states what each parameter accepts in a class attribute and the base class checks
every value against it, so the error for a bad value is written once::

    class SnapKV(KVPolicy):
        _parameter_constraints = {"window": [Interval("int", 1)], "kernel_size": [Interval("int", 1)]}

A constraint is an :class:`Interval`, an :class:`Options`, ``None`` (the value may be None), a
type (``str``, ``dict``, ``"array-like"``, ``callable``) or a :class:`Check` (any predicate with
its description). A value passes when it meets any constraint of its list.

A public function states its constraints the same way with :func:`validate_params` (as
scikit-learn's decorator of the same name); a method made from the function
(:func:`salience.core.base.function_method`) inherits them.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from salience.exceptions import InvalidParameterError, unknown_choice

__all__ = ["Interval", "Options", "Check", "Exempt", "check_params", "describe", "validate_params", "SEED", "SET_BY_SURFACE",
           "surface_params"]


@dataclass(frozen=True)
class Interval:
    """Numbers of ``kind`` ("int" or "real") between ``low`` and ``high`` (None: unbounded),
    ``closed`` at "both", "left", "right" or "neither" end. Booleans, NaN and inf never pass."""

    kind: str
    low: float | None = None
    high: float | None = None
    closed: str = "both"

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.kind == "int" and not isinstance(value, numbers.Integral):
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (value == self.low and self.closed in ("right", "neither"))):
            return False
        if self.high is not None and (value > self.high or (value == self.high and self.closed in ("left", "neither"))):
            return False
        return True

    def describe(self) -> str:
        what = "an integer" if self.kind == "int" else "a number"
        if self.kind == "int" and self.high is None and self.closed in ("both", "left") and self.low in (0, 1):
            return "a positive integer" if self.low == 1 else "a non-negative integer"
        if self.low is None and self.high is None:
            return "a finite number" if self.kind == "real" else what
        if self.high is None:
            return f"{what} {'>=' if self.closed in ('both', 'left') else '>'} {self.low:g}"
        if self.low is None:
            return f"{what} {'<=' if self.closed in ('both', 'right') else '<'} {self.high:g}"
        left = "[" if self.closed in ("both", "left") else "("
        right = "]" if self.closed in ("both", "right") else ")"
        return f"{what} in {left}{self.low:g}, {self.high:g}{right}"


@dataclass(frozen=True)
class Options:
    """One of a fixed set of values (strings, usually)."""

    values: tuple

    def __init__(self, values: Iterable):
        object.__setattr__(self, "values", tuple(values))

    def accepts(self, value: Any) -> bool:
        return isinstance(value, type(self.values[0])) and value in self.values if self.values else False

    def describe(self) -> str:
        return "one of " + ", ".join(repr(v) for v in self.values)


@dataclass(frozen=True)
class Check:
    """Any predicate, with what it asks for in words (``Check(callable, "a callable")``)."""

    predicate: Callable[[Any], bool]
    description: str

    def accepts(self, value: Any) -> bool:
        return bool(self.predicate(value))

    def describe(self) -> str:
        return self.description


@dataclass(frozen=True)
class Exempt:
    """A parameter deliberately not validated here, with the reason (scikit-learn's
    ``"no_validation"``): an object checked where it is used (a model, a tokenizer, a press).
    Every parameter of a registered method is either constrained or exempt; the contract test
    holds that."""

    reason: str

    def accepts(self, value: Any) -> bool:
        return True

    def describe(self) -> str:
        return f"anything ({self.reason})"


def _is_numpy_seed(value: Any) -> bool:
    import numpy as np

    return isinstance(value, (np.random.SeedSequence, np.random.Generator))


#: parameters the command line and the service set from their own inputs (a loaded model, the
#: method a wrapper wraps), never from a ``--param`` or a request's ``params``
SET_BY_SURFACE = ("model", "tokenizer", "feature_names", "method", "press", "prefill")

#: a random seed: None, a non-negative integer, or what numpy's ``default_rng`` takes
SEED = [None, Interval("int", 0), Check(_is_numpy_seed, "a numpy SeedSequence or Generator")]

_TYPES = {str: "a string", dict: "a dict", list: "a list", bool: "True or False", callable: "a callable",
          "array-like": "a sequence of numbers"}


def _accepts(constraint: Any, value: Any) -> bool:
    if constraint is None:
        return value is None
    if constraint is callable:
        return callable(value)
    if constraint == "array-like":
        return hasattr(value, "__len__") and not isinstance(value, (str, bytes, dict))
    if isinstance(constraint, type):
        return isinstance(value, constraint) and (constraint is bool or not isinstance(value, bool))
    return constraint.accepts(value)


def describe(constraint: Any) -> str:
    """A constraint in words, as error messages show it."""
    if constraint is None:
        return "None"
    if constraint is callable or constraint == "array-like" or isinstance(constraint, type):
        return _TYPES.get(constraint, getattr(constraint, "__name__", str(constraint)))
    return constraint.describe()


def check_params(owner: str, params: dict[str, Any], constraints: dict[str, list]) -> None:
    """Refuse the first value of ``params`` that meets none of its constraints, naming the
    parameter, what it accepts and the value (choices get a did-you-mean)."""
    for name, allowed in constraints.items():
        if name not in params:
            continue
        value = params[name]
        if any(_accepts(c, value) for c in allowed):
            continue
        options = [c for c in allowed if isinstance(c, Options)]
        if isinstance(value, str) and len(options) == 1 and all(c is None or c in options for c in allowed):
            raise unknown_choice(f"{name} of {owner}", value, options[0].values)
        wants = " or ".join(describe(c) for c in allowed)
        raise InvalidParameterError(f"{owner}: {name} must be {wants}; got {value!r}.")


def validate_params(constraints: dict[str, list]):
    """Decorate a function so that each call checks the arguments named in ``constraints``
    (:func:`check_params`, the function's name as owner); the constraints stay readable as the
    function's ``_parameter_constraints``."""

    def decorate(function):
        signature = inspect.signature(function)
        unknown = set(constraints) - set(signature.parameters)
        if unknown:
            raise TypeError(f"{function.__name__} has no parameters {sorted(unknown)} to constrain")

        @functools.wraps(function)
        def checked(*args, **kwargs):
            try:
                given = signature.bind(*args, **kwargs).arguments
            except TypeError:
                return function(*args, **kwargs)  # Python's own message for a wrong call
            check_params(function.__name__, given, constraints)
            return function(*args, **kwargs)

        checked._parameter_constraints = dict(constraints)
        return checked

    return decorate


def surface_params(params: dict | None, own: dict[str, str] | None = None, where: str = "params",
                   what: str = "request") -> dict:
    """A method's parameters as a user sent them (a request's ``params``): a copy, with the
    names the surface sets itself refused (:data:`SET_BY_SURFACE`, and ``own``: name -> the
    option or field that sets it). Unknown names and bad values are the method's to refuse."""
    params = dict(params or {})
    for name in params:
        if name in (own or {}):
            raise InvalidParameterError(f"{where} {name}: set {name} with {own[name]}.")
        if name in SET_BY_SURFACE:
            raise InvalidParameterError(f"{where} {name}: {name} is set by the {what} itself, not in {where}.")
    return params
