"""The contract every scorer follows, and the registry of methods by family.

A scorer (as in scikit-learn's estimators):

* takes its parameters as keyword arguments of ``__init__`` and stores each under the same
  name, so :meth:`Scorer.get_params`, :meth:`Scorer.set_params` and :meth:`Scorer.clone` work
  without per-class code;
* learns in ``fit(...)``, which returns ``self``; learned state lives in attributes whose names
  end with an underscore (``coef_``), and a method that needs it before ``fit`` raises
  :class:`~salience.exceptions.NotFittedError`;
* has one scoring verb per family returning :class:`~salience.Scores`, and a batch form with
  the suffix ``_batch`` (``score`` / ``score_batch``, ``search`` / ``search_batch``);
* pickles (process and Ray executors ship scorers to workers).

Every method is registered under its family (``search``, ``keywords``, ``summarize``, ``data``,
``fusion``, ``aggregate``, ``sort``, ``select``, ``explain``) and name; the CLI's choices, "did you mean"
suggestions, the docs' method tables, ``salience methods`` and the contract test read the
registry.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

from salience.exceptions import InvalidParameterError, NotFittedError, unknown_choice

__all__ = ["Scorer", "FunctionScorer", "register", "create", "method_names", "registered", "Method", "FAMILIES", "check_fitted",
           "reject_options"]

#: families, and the module whose import registers their methods
FAMILIES = {
    "search": "salience.search",
    "keywords": "salience.keywords",
    "summarize": "salience.summarize",
    "data": "salience.data",
    "fusion": "salience.core.fusion",
    "aggregate": "salience.core.aggregate",
    "sort": "salience.core.sort",
    "select": "salience.core.select",
    "explain": "salience.explain",
    "compress": "salience.compress",
}


class Scorer:
    """Base of every scorer; see the module docstring for the contract."""

    @classmethod
    def _param_names(cls) -> list[str]:
        signature = inspect.signature(cls.__init__)
        names = []
        for name, parameter in signature.parameters.items():
            if name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                continue
            names.append(name)
        return names

    def get_params(self) -> dict[str, Any]:
        """The constructor's parameters and their current values."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> "Scorer":
        """Change parameters (validated as the constructor validates them); returns ``self``.

        Learned state is dropped: refit after changing parameters.
        """
        valid = self._param_names()
        for name in params:
            if name not in valid:
                raise unknown_choice(f"parameter of {type(self).__name__}", name, valid)
        fresh = type(self)(**{**self.get_params(), **params})
        self.__dict__.clear()
        self.__dict__.update(fresh.__dict__)
        return self

    def clone(self) -> "Scorer":
        """A new, unfitted scorer with the same parameters."""
        return type(self)(**self.get_params())

    def __repr__(self) -> str:
        defaults = {name: p.default for name, p in inspect.signature(type(self).__init__).parameters.items()}
        shown = []
        for name, value in self.get_params().items():
            default = defaults.get(name, inspect.Parameter.empty)
            try:
                same = value == default
                same = bool(same) if not hasattr(same, "all") else bool(same.all())
            except Exception:  # noqa: BLE001 - values without a usable ==, such as arrays of other shapes
                same = False
            if not same:
                shown.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(shown)})"


class FunctionScorer(Scorer):
    """A registered function with fixed options, as a scorer: ``score(*data, **per_call)``
    calls ``FUNCTIONS[method](*data, **options, **per_call)``. Subclasses name the family's
    functions; options are checked against the function's signature when the scorer is made."""

    FUNCTIONS: dict[str, Callable[..., Any]] = {}
    FAMILY = ""

    def __init__(self, *, method: str, options: dict | None = None):
        if method not in self.FUNCTIONS:
            raise unknown_choice(f"{self.FAMILY} method", method, self.FUNCTIONS)
        options = dict(options or {})
        accepted = inspect.signature(self.FUNCTIONS[method]).parameters
        for name in options:
            if name not in accepted or accepted[name].kind not in (inspect.Parameter.KEYWORD_ONLY,
                                                                     inspect.Parameter.POSITIONAL_OR_KEYWORD):
                valid = [n for n, p in accepted.items() if p.default is not inspect.Parameter.empty]
                raise InvalidParameterError(f"option {name!r} does not apply to {self.FAMILY} method {method!r}; "
                                            f"its options are: {', '.join(valid) or 'none'}.")
        self.method, self.options = method, options

    def score(self, *data: Any, **per_call: Any):
        return self.FUNCTIONS[self.method](*data, **{**self.options, **per_call})

    def score_batch(self, batch, **per_call: Any) -> list:
        """``score`` of each item of ``batch`` (a tuple of arguments, or one argument)."""
        return [self.score(*(item if isinstance(item, tuple) else (item,)), **per_call) for item in batch]


def check_fitted(scorer: Scorer, attribute: str, how: str = "fit(...)") -> None:
    """Raise :class:`NotFittedError` when ``scorer`` lacks the learned ``attribute``."""
    if getattr(scorer, attribute, None) is None:
        raise NotFittedError(f"this {type(scorer).__name__} is not fitted yet; call {how} first.")


def reject_options(method: str, options: dict[str, Any], allowed: tuple[str, ...], defaults: dict[str, Any] | None = None,
                   used_by: dict[str, str] | None = None) -> None:
    """Refuse options that do nothing for ``method``: any in ``options`` not in ``allowed``
    whose value differs from its default (``None`` unless ``defaults`` says otherwise).
    ``used_by`` names, per option, the methods that do use it (for the message)."""
    defaults = defaults or {}
    for name, value in options.items():
        if name in allowed:
            continue
        if value is not defaults.get(name) and value != defaults.get(name):
            users = (used_by or {}).get(name)
            raise InvalidParameterError(
                f"option {name!r} does not apply to method {method!r}" + (f"; it is used by {users}" if users else "")
                + ". Remove it, or choose a method that uses it (salience methods lists them)."
            )


@dataclass(frozen=True)
class Method:
    """A registered method: ``factory(**fixed, **params)`` builds its scorer."""

    family: str
    name: str
    factory: Callable[..., Any]
    description: str
    fixed: dict = field(default_factory=dict)

    def create(self, **params: Any) -> Any:
        clash = set(params) & set(self.fixed)
        if clash:
            name = sorted(clash)[0]
            raise InvalidParameterError(f"{self.family} method {self.name!r} fixes {name}={self.fixed[name]!r}; do not pass {name}.")
        return self.factory(**self.fixed, **params)

    def params(self) -> dict[str, Any]:
        """Parameters a user may set, with their defaults (fixed ones left out)."""
        target = self.factory.__init__ if inspect.isclass(self.factory) else self.factory
        out = {}
        for name, p in inspect.signature(target).parameters.items():
            if name == "self" or name in self.fixed or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            out[name] = None if p.default is inspect.Parameter.empty else p.default
        return out


_REGISTRY: dict[str, dict[str, Method]] = {family: {} for family in FAMILIES}


def register(family: str, name: str, factory: Callable[..., Any], description: str, **fixed: Any) -> Method:
    """Register ``factory`` as method ``name`` of ``family`` (``fixed`` parameters are set by the name)."""
    if family not in _REGISTRY:
        raise unknown_choice("method family", family, _REGISTRY)
    method = Method(family, name, factory, description, dict(fixed))
    _REGISTRY[family][name] = method
    return method


def _load(family: str | None = None) -> None:
    for fam, module in FAMILIES.items():
        if family is None or fam == family:
            importlib.import_module(module)


def registered(family: str | None = None) -> list[Method]:
    """Every registered method (of ``family``), family by family in registration order."""
    if family is not None and family not in _REGISTRY:
        raise unknown_choice("method family", family, _REGISTRY)
    _load(family)
    return [m for fam, methods in _REGISTRY.items() if family in (None, fam) for m in methods.values()]


def method_names(family: str) -> tuple[str, ...]:
    """Names of the registered methods of ``family`` (CLI choices read this)."""
    return tuple(m.name for m in registered(family))


def create(family: str, name: str, **params: Any) -> Any:
    """Build the scorer of method ``name`` in ``family``; unknown names get a did-you-mean."""
    _load(family)
    methods = _REGISTRY.get(family)
    if methods is None:
        raise unknown_choice("method family", family, _REGISTRY)
    if name not in methods:
        raise unknown_choice(f"{family} method", name, methods)
    return methods[name].create(**params)
