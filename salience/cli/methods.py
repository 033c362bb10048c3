"""``salience methods``: every registered method with its parameters, read from the registry."""

from __future__ import annotations

from salience.cli._common import emit


def _cmd_methods(args) -> int:
    from salience.core.base import registered

    rows = [{"family": m.family, "name": m.name, "class": m.factory.__name__, "description": m.description,
             "params": m.params()} for m in registered(args.domain)]
    if args.json:
        emit(args, {"methods": rows})
        return 0
    lines, family = [], None
    for row in rows:
        if row["family"] != family:
            family = row["family"]
            lines.append(f"{family}:")
        params = ", ".join(f"{k}={v!r}" for k, v in row["params"].items())
        lines.append(f"  {row['name']:<14} {row['description']}")
        lines.append(f"  {'':<14} {row['class']}({params})")
    print("\n".join(lines))
    return 0


def add_commands(domains) -> None:
    from salience.core.base import FAMILIES

    p = domains.add_parser("methods", help="list every registered method with its parameters")
    p.add_argument("--domain", default=None, choices=tuple(FAMILIES), help="only this family")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="accepted for symmetry; nothing is shown on standard error")
    p.set_defaults(func=_cmd_methods)
