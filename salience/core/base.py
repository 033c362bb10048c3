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

Every method is registered under its family (a key of :data:`FAMILIES`; ``salience methods
--families`` lists each with its base class) and name; the CLI's choices and ``--param``
options, the service's ``params``, "did you mean" suggestions, the docs' method tables,
``salience methods`` and the contract test read the registry.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from salience.core.params import check_params
from salience.exceptions import InvalidParameterError, NotFittedError, unknown_choice

__all__ = ["Scorer", "FunctionMethod", "function_method", "register", "register_method", "create", "method_names",
           "registered", "registered_name", "method_rows", "method_factory", "Method", "FAMILIES", "check_fitted", "reject_options", "method_of"]

#: families, and the module whose import registers their methods
FAMILIES = {
    "search": "salience.search",
    "keywords": "salience.keywords",
    "summarize": "salience.summarize",
    "data": "salience.data",
    "valuation": "salience.data",
    "fusion": "salience.core.fusion",
    "aggregate": "salience.core.aggregate",
    "sort": "salience.core.sort",
    "select": "salience.core.select",
    "judge": "salience.search",
    "pack": "salience.search",
    "rerank": "salience.search",
    "explain": "salience.explain",
    "global": "salience.explain",
    "prompt": "salience.explain",
    "context": "salience.explain",
    "classify": "salience.text.classifier",
    "weights": "salience.compress",
    "structure": "salience.compress",
    "layers": "salience.compress",
    "kv": "salience.compress",
    "kv_channels": "salience.compress",
    "quantizers": "salience.compress",
    "precision": "salience.compress",
    # the verifiers live with the units they verify: each domain registers its own
    "verify": ("salience.explain", "salience.data", "salience.summarize", "salience.compress", "salience.search",
               "salience.keywords"),
}


class Scorer:
    """Base of every scorer; see the module docstring for the contract.

    ``_parameter_constraints`` (merged down the class hierarchy) states what each parameter
    accepts (:mod:`salience.core.params`); ``_validate_params()`` checks the current values
    against it, and constructors call it once their attributes are set."""

    _parameter_constraints: dict = {}

    @classmethod
    def _init_parameters(cls) -> list[inspect.Parameter]:
        """The constructor's parameters a user sets (``self`` and ``*args``/``**kwargs`` left out),
        read once per class and constructor: ``inspect.signature`` costs tens of microseconds, and
        every construction validates its parameters."""
        source = cls._parameter_source()
        cached = cls.__dict__.get("_init_parameters_read")
        if cached is None or cached[0] is not source:
            cached = (source, tuple(cls._read_init_parameters()))
            cls._init_parameters_read = cached
        return list(cached[1])

    @classmethod
    def _parameter_source(cls) -> Callable[..., Any]:
        """What the parameters are read from (re-read when it changes)."""
        return cls.__init__

    @classmethod
    def _read_init_parameters(cls) -> list[inspect.Parameter]:
        return [p for name, p in inspect.signature(cls.__init__).parameters.items()
                if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    @classmethod
    def _param_names(cls) -> list[str]:
        return [p.name for p in cls._init_parameters()]

    @classmethod
    def _constraints(cls) -> dict:
        merged: dict = {}
        for klass in reversed(cls.__mro__):
            merged.update(klass.__dict__.get("_parameter_constraints", {}))
        return merged

    def _validate_params(self) -> None:
        check_params(type(self).__name__, self.get_params(), self._constraints())

    def get_params(self) -> dict[str, Any]:
        """The constructor's parameters and their current values."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> "Scorer":
        """Change parameters (validated as the constructor validates them); returns ``self``.

        A scorer holding data it cannot rebuild (an index with documents) refuses, rather than
        silently emptying it: ``clone().set_params(...)`` and index again. Other learned state
        is dropped: refit after changing parameters.
        """
        valid = self._param_names()
        for name in params:
            if name not in valid:
                raise unknown_choice(f"parameter of {type(self).__name__}", name, valid)
        if params and self._holds_data():
            raise InvalidParameterError(f"this {type(self).__name__} holds indexed documents, which set_params would "
                                        f"drop: build a new one (clone().set_params({', '.join(params)}=...)) and "
                                        "index again.")
        fresh = type(self)(**{**self.get_params(), **params})
        self.__dict__.clear()
        self.__dict__.update(fresh.__dict__)
        return self

    def _holds_data(self) -> bool:
        """Whether the scorer holds data given to it that its parameters cannot rebuild (an
        index's documents: ``_has_data``)."""
        has_data = getattr(self, "_has_data", None)
        return bool(has_data()) if callable(has_data) else False

    def clone(self) -> "Scorer":
        """A new, unfitted scorer with the same parameters, by value: a parameter that is a
        scorer is cloned (an index holding documents is shared: it is an input), plain data
        (lists, dicts, sets, arrays) copied deeply; models, tokenizers and functions are
        shared, as fitting does not change them."""
        return type(self)(**{name: _cloned(value) for name, value in self.get_params().items()})

    def __repr__(self) -> str:
        defaults = {p.name: p.default for p in self._init_parameters()}
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


def _cloned(value: Any) -> Any:
    """A parameter's value for :meth:`Scorer.clone`."""
    import copy

    import numpy as np

    if isinstance(value, Scorer):  # one holding data given to it (an index) is an input: shared
        return value if value._holds_data() else value.clone()
    if isinstance(value, (list, tuple, dict, set, frozenset, np.ndarray)):
        try:
            return copy.deepcopy(value)
        except Exception:  # noqa: BLE001 - a container holding something that does not copy: shared
            return value
    return value


class FunctionMethod(Scorer):
    """Base of a family whose methods are plain functions (selectors, judge sorts): a subclass
    per function, made by :func:`function_method`, whose parameters are the function's keyword
    parameters, except those named in ``per_call`` (data given to each ``score`` call, such as a
    query). ``score(*data, **per_call)`` calls ``function(*data, **params, **per_call)``."""

    function: Callable[..., Any]
    per_call: tuple[str, ...] = ()

    @classmethod
    def _parameter_source(cls) -> Callable[..., Any]:
        return cls.function

    @classmethod
    def _read_init_parameters(cls) -> list[inspect.Parameter]:
        return [p.replace(kind=p.KEYWORD_ONLY) for p in inspect.signature(cls.function).parameters.values()
                if p.kind == p.KEYWORD_ONLY and p.name not in cls.per_call]

    def __init__(self, **params: Any):
        accepted = {p.name: p for p in self._init_parameters()}
        for name in params:
            if name not in accepted:
                raise unknown_choice(f"parameter of {type(self).__name__}", name, accepted)
        for name, p in accepted.items():
            if name not in params and p.default is inspect.Parameter.empty:
                raise InvalidParameterError(f"{type(self).__name__} needs {name}=...")
            setattr(self, name, params.get(name, p.default))
        self._validate_params()

    def score(self, *data: Any, **per_call: Any):
        for name in per_call:
            if name not in self.per_call:
                raise InvalidParameterError(f"{name}= is a parameter of {type(self).__name__}: set it when building the "
                                            f"method (create(..., {name}=...)), not per call.")
        return type(self).function(*data, **self.get_params(), **per_call)

    def score_batch(self, batch, **per_call: Any) -> list:
        """``score`` of each item of ``batch`` (a tuple of arguments, or one argument)."""
        return [self.score(*(item if isinstance(item, tuple) else (item,)), **per_call) for item in batch]


def function_method(base: type, function: Callable[..., Any], class_name: str, *,
                    constraints: dict | None = None) -> type:
    """A subclass of ``base`` (a :class:`FunctionMethod`) for ``function``, named ``class_name``
    and placed in ``base``'s module (so it pickles by name); its parameter constraints are the
    function's (:func:`~salience.core.params.validate_params`) and ``constraints``."""
    namespace = {"function": staticmethod(function), "__doc__": function.__doc__, "__module__": base.__module__,
                 "__qualname__": class_name,
                 "_parameter_constraints": {**getattr(function, "_parameter_constraints", {}), **(constraints or {})}}
    cls = type(class_name, (base,), namespace)
    setattr(sys.modules[base.__module__], class_name, cls)
    return cls


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
        valid = self.params()
        for name in list(params):
            if name not in valid:
                users = [m.name for m in registered(self.family) if name in m.params()]
                if users and params[name] is None:
                    del params[name]  # another method's parameter, left unset: it asks for nothing
                    continue
                raise InvalidParameterError(
                    f"{self.family} method {self.name!r} has no parameter {name!r}"
                    + (f" (it is a parameter of {', '.join(users)})" if users else "")
                    + f"; its parameters are: {', '.join(valid) or 'none'}.")
        if inspect.isclass(self.factory) and issubclass(self.factory, Scorer):
            for p in self.factory._init_parameters():
                if p.default is inspect.Parameter.empty and p.name not in params and p.name not in self.fixed:
                    raise InvalidParameterError(f"{self.family} method {self.name!r} needs {p.name}=...")
        return self.factory(**self.fixed, **params)

    def params(self) -> dict[str, Any]:
        """Parameters a user may set, with their defaults (fixed ones left out)."""
        if inspect.isclass(self.factory) and issubclass(self.factory, Scorer):
            parameters = self.factory._init_parameters()
        else:
            target = self.factory.__init__ if inspect.isclass(self.factory) else self.factory
            parameters = [p for name, p in inspect.signature(target).parameters.items()
                          if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        return {p.name: None if p.default is inspect.Parameter.empty else p.default
                for p in parameters if p.name not in self.fixed}


_REGISTRY: dict[str, dict[str, Method]] = {family: {} for family in FAMILIES}


def register(family: str, name: str, factory: Callable[..., Any], description: str, **fixed: Any) -> Method:
    """Register ``factory`` as method ``name`` of ``family`` (``fixed`` parameters are set by the name)."""
    if family not in _REGISTRY:
        raise unknown_choice("method family", family, _REGISTRY)
    method = Method(family, name, factory, description, dict(fixed))
    _REGISTRY[family][name] = method
    return method


def register_method(family: str, name: str, description: str, **fixed: Any):
    """Class decorator: register the class as method ``name`` of ``family``::

        @register_method("kv", "snapkv", "attention of the observation window, pooled")
        class SnapKV(KVPolicy):
            ...
    """
    def decorate(cls):
        register(family, name, cls, description, **fixed)
        return cls

    return decorate


def _load(family: str | None = None) -> None:
    for fam, modules in FAMILIES.items():
        if family is None or fam == family:
            for module in (modules,) if isinstance(modules, str) else modules:
                importlib.import_module(module)


def registered(family: str | None = None) -> list[Method]:
    """Every registered method (of ``family``), family by family in registration order."""
    if family is not None and family not in _REGISTRY:
        raise unknown_choice("method family", family, _REGISTRY)
    _load(family)
    out = []
    for fam, methods in _REGISTRY.items():
        if family in (None, fam):
            # a family several modules register into lists by name: import order must not reorder it
            out += sorted(methods.values(), key=lambda m: m.name) if not isinstance(FAMILIES[fam], str) else \
                list(methods.values())
    return out


def method_rows(family: str | None = None) -> list[dict]:
    """Every registered method (of ``family``, or all) as plain data: family, name, class,
    description and parameters with their defaults (``salience methods`` and the service's
    ``/methods`` show these)."""
    return [{"family": m.family, "name": m.name, "class": m.factory.__name__, "description": m.description,
             "params": m.params()} for m in registered(family)]


def _method(family: str, name: str) -> Method:
    """The registered method ``name`` of ``family``; unknown names get a did-you-mean."""
    _load(family)
    methods = _REGISTRY.get(family)
    if methods is None:
        raise unknown_choice("method family", family, _REGISTRY)
    if name not in methods:
        raise unknown_choice(f"{family} method", name, methods)
    return methods[name]


def method_factory(family: str, name: str) -> Any:
    """The class (or factory) registered as ``name`` in ``family``: what a method's class says
    of itself, before it is built."""
    return _method(family, name).factory


def registered_name(scorer: Any, family: str) -> str:
    """The name ``scorer``'s class is registered under in ``family`` (runs, reports and
    messages are named by it); its class name when it is not registered."""
    cls = type(scorer)
    return next((m.name for m in registered(family) if m.factory is cls), cls.__name__)


def method_names(family: str) -> tuple[str, ...]:
    """Names of the registered methods of ``family`` (CLI choices read this)."""
    return tuple(m.name for m in registered(family))


def create(family: str, name: str, **params: Any) -> Any:
    """Build the scorer of method ``name`` in ``family``; unknown names get a did-you-mean."""
    return _method(family, name).create(**params)


def method_of(family: str, method: Any, base: type, **params: Any) -> Any:
    """``method`` as a scorer of ``family``: a registered name built with ``params``, or an
    instance of ``base`` used as it is (then ``params`` must be empty). Every function that
    takes a method by name (``prune``, ``evict``, ``rerank``, ``aggregate``) resolves it here."""
    if isinstance(method, base):
        if params:
            raise InvalidParameterError(f"pass {', '.join(sorted(params))} to the {type(method).__name__} you built, "
                                        "not beside it.")
        return method
    if not isinstance(method, str):
        raise InvalidParameterError(f"a {family} method is a registered name or a {base.__name__}; got "
                                    f"{type(method).__name__}.")
    return create(family, method, **params)
