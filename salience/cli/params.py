"""``--param NAME=VALUE``: any parameter of the methods a command runs, set from the shell.

The names and the types come from the registry: a method's constructor parameters and its
``_parameter_constraints`` (:mod:`salience.core.params`). A parameter added to a method in its
own file is therefore reachable from every command that runs the method, with no edit here or
in the command. A command running several methods (``search rerank``: a judge and a sorting
algorithm) gives each a role; ``--param band=3`` goes to the one method that has ``band``, and
``--param algorithm.band=3`` names the role when more than one has it.

A value is read as the first of these its constraints accept: ``none`` / ``null``, ``true`` /
``false``, an integer, a number, a JSON list or object, the text itself.
"""

from __future__ import annotations

import json
from typing import Any

from salience.core.params import Exempt, surface_params
from salience.exceptions import InvalidParameterError, unknown_choice

__all__ = ["add_param_option", "method_params", "role_params", "parse_value"]


def add_param_option(parser, what: str = "the method") -> None:
    """The repeatable ``--param NAME=VALUE`` option (collected in ``args.params``)."""
    parser.add_argument("--param", action="append", default=None, metavar="NAME=VALUE", dest="params",
                        help=f"set any parameter of {what}, repeatable (salience methods lists each method's "
                             "parameters; typed by the method's constraints: none, true/false, numbers, JSON lists "
                             "and objects, text); a parameter the command must set itself (-k, --k1, a loaded model) is "
                             "refused, naming its option")


def method_params(args, family: str, name: str, own: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``--param`` values of a command running one method: ``name`` of ``family``;
    ``own`` maps the parameters the command's own options set to those options."""
    return role_params(args, {"method": (family, name)}, own)["method"]


def role_params(args, roles: dict[str, tuple[str, str | None]], own: dict[str, str] | None = None
                ) -> dict[str, dict[str, Any]]:
    """The ``--param`` values of a command running several methods, per role: ``roles`` maps a
    role (the option's name, such as ``algorithm``) to its method's family and name (None: the
    role is not used in this run). A bare name goes to the one role whose method has it; the
    names the command sets itself (:func:`~salience.core.params.surface_params`; ``own``: name
    -> the option that sets it) are refused."""
    from salience.core.base import _method

    methods = {role: _method(family, name) for role, (family, name) in roles.items() if name is not None}
    out: dict[str, dict[str, Any]] = {role: {} for role in roles}
    pairs = getattr(args, "params", None) or []
    if pairs and not methods:
        raise InvalidParameterError(f"--param {pairs[0]}: this run uses none of the methods it would set "
                                    f"({', '.join(roles)}).")
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidParameterError(f"--param takes NAME=VALUE; got {pair!r}.")
        role, dot, name = key.rpartition(".")
        surface_params({name: None}, own, "--param", "command")
        if dot:
            if role not in methods:
                raise unknown_choice("--param role", role, methods)
            owners = [role] if name in methods[role].params() else []
        else:
            owners = [r for r, m in methods.items() if name in m.params()]
        if not owners:
            scope = methods[role] if dot else None
            valid = sorted({p for m in ([scope] if scope else methods.values()) for p in m.params()})
            described = ", ".join(f"{m.family} method {m.name!r}" for m in ([scope] if scope else methods.values()))
            raise unknown_choice(f"--param name (parameters of {described})", name, valid)
        if len(owners) > 1:
            raise InvalidParameterError(f"--param {name}: {' and '.join(owners)} both have {name}; name one: "
                                        + ", ".join(f"--param {r}.{name}=..." for r in owners) + ".")
        method = methods[owners[0]]
        if name in out[owners[0]]:
            raise InvalidParameterError(f"--param {key} is given twice.")
        out[owners[0]][name] = parse_value(text, method, name)
    return out


def parse_value(text: str, method, name: str) -> Any:
    """``text`` as the value of parameter ``name`` of the registered ``method``: the first
    reading its constraints accept (see the module docstring), else an error naming both."""
    from salience.core.params import _accepts, check_params

    factory = method.factory
    # every registered parameter is constrained or Exempt (the contract test holds it): an
    # unconstrained one, as an exempt one, takes its most specific reading
    constraints = (factory._constraints().get(name) if hasattr(factory, "_constraints") else None) or [Exempt("")]
    readings = _readings(text)
    for value in readings:
        if any(_accepts(c, value) for c in constraints):
            return value
    shown = next((v for v in readings if v is not None), text)  # 2, not '2', in the message
    check_params(f"{method.family} method {method.name!r}", {name: shown}, {name: constraints})
    raise InvalidParameterError(f"--param {name}: {text!r} is not a value {method.name!r} takes.")


def _readings(text: str) -> list[Any]:
    """The values ``text`` may stand for, most specific first; the text itself last."""
    readings: list[Any] = []
    lowered = text.strip().lower()
    if lowered in ("none", "null"):
        readings.append(None)
    if lowered in ("true", "false"):
        readings.append(lowered == "true")
    for kind in (int, float):
        try:
            readings.append(kind(text))
        except ValueError:
            pass
    if text.strip()[:1] in ("[", "{"):
        try:
            readings.append(json.loads(text))
        except json.JSONDecodeError:
            pass
    readings.append(text)
    return readings
