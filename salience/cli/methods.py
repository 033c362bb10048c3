"""``salience methods``: every registered method with its parameters, read from the registry."""

from __future__ import annotations

from salience.cli._common import emit
from salience.core.base import method_rows


def _cmd_methods(args) -> int:
    rows = method_rows(args.domain)
    if args.json:
        emit(args, {"methods": rows})
        return 0
    if args.markdown:
        print(methods_markdown(rows), end="")
        return 0
    if args.families:
        print(families_markdown(), end="")
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


def methods_markdown(rows: list[dict]) -> str:
    """The method tables of docs/methods.md, one per family, from the registry."""
    lines = ["# Methods", "", "Every registered method, by family: this page is generated from the registry "
             "(`salience methods --markdown > docs/methods.md`; a test keeps it current). Build one with "
             "`salience.core.base.create(family, name, **params)`, or use the class named.", ""]
    family = None
    for row in rows:
        if row["family"] != family:
            family = row["family"]
            lines += ["", f"## {family}", "", "| method | class | parameters | what it does |", "|---|---|---|---|"]
        params = ", ".join(f"`{k}={v!r}`" for k, v in row["params"].items())
        lines.append(f"| `{row['name']}` | `{row['class']}` | {params} | {row['description']} |")
    lines += ["", "## The contract", "",
              "Every method follows one contract: parameters are keyword arguments of the constructor; "
              "`get_params`, `set_params` (validated; learned state is dropped) and `clone` (unfitted) come from "
              "`salience.core.base.Scorer`; `fit(...)` returns the scorer and keeps what it learned in attributes "
              "ending with an underscore; one scoring verb returns `Scores` and its `_batch` form a list of them; "
              "scorers pickle. An option that does nothing for the chosen method is refused.", "",
              "```python",
              "from salience.core.base import create",
              "",
              'extractor = create("keywords", "positionrank", k=3)',
              'print(extractor.get_params()["k"], extractor.clone().score("Graph kernels compare graphs.").ids)',
              'scorer = create("data", "dsir", buckets=256, min_target_tokens=1).fit(["protein binding"], ["stock prices"])',
              'print(scorer.score(["protein", "stock"], ids=["bio", "news"]).ranked_ids())   # the target-like text first',
              'print(create("fusion", "rrf", rrf_k=10).score([scorer.score(["a b"]), scorer.score(["a b"])]).ids)',
              "```", "",
              "```console", "$ salience methods --domain fusion", "$ salience methods --json", "```", ""]
    return "\n".join(lines)


def family_base(family: str) -> type:
    """The class every method of ``family`` derives from (the base a new method subclasses):
    the most specific class all its registered classes share; for a family of one class, that
    class's own base unless it is the contract's root."""
    import inspect

    from salience.core.base import FunctionMethod, Scorer, registered

    classes = [m.factory for m in registered(family) if inspect.isclass(m.factory)]
    common = next(c for c in classes[0].__mro__ if all(issubclass(k, c) for k in classes))
    if len(set(classes)) == 1 and common.__bases__[0] not in (Scorer, FunctionMethod, object):
        common = common.__bases__[0]
    return common


def families_markdown() -> str:
    """The family table of docs/contributing.md, from the registry (``salience methods
    --families``; a test keeps the guide's copy current)."""
    from salience.core.base import FAMILIES, registered

    lines = ["| family | base class | module | methods |", "|---|---|---|---|"]
    for family in FAMILIES:
        base = family_base(family)
        names = [m.name for m in registered(family)]
        shown = ", ".join(f"`{n}`" for n in names[:4]) + (f", ... ({len(names)})" if len(names) > 4 else "")
        lines.append(f"| `{family}` | `{base.__name__}` | `{base.__module__}` | {shown} |")
    return "\n".join(lines) + "\n"


def add_commands(domains) -> None:
    from salience.core.base import FAMILIES

    p = domains.add_parser("methods", help="list every registered method with its parameters")
    p.add_argument("--domain", default=None, choices=tuple(FAMILIES), help="only this family")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--markdown", action="store_true", help="print the tables of docs/methods.md")
    p.add_argument("--families", action="store_true",
                   help="print the family table of docs/contributing.md (each family's base class)")
    p.add_argument("--quiet", action="store_true", help="accepted for symmetry; nothing is shown on standard error")
    p.set_defaults(func=_cmd_methods)
