"""Options every command shares, so that one concept has one name everywhere:
``-k``, ``--seed``, ``--n-jobs``, ``--quiet`` / ``--progress``, ``--on-error``, ``--json``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from salience.exceptions import InvalidParameterError
from salience.io.files import ON_ERROR

__all__ = ["add_output_options", "add_on_error", "add_n_jobs", "add_seed", "show_progress", "read_text", "emit",
           "positive_int", "nonnegative_int", "refuse_unused", "positive_float", "ks_list", "choices_of", "method_option", "given"]


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """``--json`` (one JSON object on standard output) and ``--quiet`` / ``--progress``."""
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument("--quiet", action="store_true", help="no progress bars or notes on standard error")
    progress.add_argument("--progress", action="store_true",
                          help="progress bars even when standard error is not a terminal")


def show_progress(args) -> bool:
    if getattr(args, "quiet", False):
        return False
    return bool(getattr(args, "progress", False)) or sys.stderr.isatty()


def add_on_error(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--on-error", default="raise", choices=ON_ERROR,
                        help="unreadable input (invalid UTF-8 or JSON, corrupt gzip): raise (stop, naming file and "
                             "line; default), skip the record (counted) or replace invalid UTF-8 with U+FFFD")


def add_n_jobs(parser: argparse.ArgumentParser, default: int = 1) -> None:
    parser.add_argument("--n-jobs", type=int, default=default,
                        help=f"parallel jobs, -1 for one per core (default {default})")


def add_seed(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=nonnegative_int, default=0,
                        help="random seed, a non-negative integer (default 0): the same seed, the same output")


def _int_at_least(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a {what}; got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be a {what}; got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type for counts: a positive integer, refused with a clear message otherwise."""
    return _int_at_least(text, 1, "positive integer")


def nonnegative_int(text: str) -> int:
    """argparse type for seeds and offsets: an integer >= 0."""
    return _int_at_least(text, 0, "non-negative integer")


def positive_float(text: str) -> float:
    """argparse type for sizes: a finite number > 0 (``nan``, ``inf`` and negatives refused)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number; got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0; got {text}")
    return value


def ks_list(text: str) -> list[int]:
    """``5,10,15`` -> ``[5, 10, 15]`` (sorted, each positive)."""
    try:
        values = sorted({int(v) for v in str(text).split(",") if v.strip()})
    except ValueError:
        raise InvalidParameterError(f"-k must be an integer or a comma-separated list; got {text!r}.") from None
    if not values or values[0] <= 0:
        raise InvalidParameterError(f"-k must hold positive integers; got {text!r}.")
    return values


def given(args, *names: str) -> dict:
    """The options among ``names`` that the user set (not None): the library refuses options that
    do not apply to the chosen method, so only what was asked for is passed on."""
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def refuse_unused(args, applies: bool, names, needs: str) -> None:
    """Refuse the options among ``names`` that the user set (not None, not False) when they do
    nothing here (``applies`` false): ``needs`` says what they apply to. Such options default to
    None on the command line, so that setting one can be told from the default."""
    used = [name for name in names if getattr(args, name) not in (None, False)]
    if used and not applies:
        flags = ", ".join("--" + name.replace("_", "-") for name in used)
        raise InvalidParameterError(f"{flags} {'does' if len(used) == 1 else 'do'} nothing here: "
                                    f"{'it applies' if len(used) == 1 else 'they apply'} {needs}.")


def choices_of(family: str) -> tuple[str, ...]:
    """CLI choices read from the registry, never copied by hand."""
    from salience.core.base import method_names

    return method_names(family)


def method_option(parser, flag: str, family: str | tuple[str, ...], default: str, what: str, *,
                  kind: type | None = None, subclass_of: type | None = None) -> None:
    """``--method``-like option whose values come from the registry: the methods of ``family``
    (or of each family of a tuple), those of class ``kind`` only, or of subclasses of
    ``subclass_of``, when given; an unknown one gets a did-you-mean (argparse's own ``choices``
    offers none)."""
    from salience.core.base import registered
    from salience.exceptions import unknown_choice

    families = (family,) if isinstance(family, str) else tuple(family)
    names = tuple(m.name for one in families for m in registered(one)
                  if (kind is None or m.factory is kind)
                  and (subclass_of is None or (isinstance(m.factory, type) and issubclass(m.factory, subclass_of))))

    def parse(text: str) -> str:
        if text not in names:
            raise argparse.ArgumentTypeError(str(unknown_choice(what, text, names)))
        return text

    parse.__name__ = what  # argparse names the type in some messages
    parser.add_argument(flag, default=default, type=parse, metavar="{" + ",".join(names) + "}",
                        help=f"{what} (default {default}; salience methods --domain {' / '.join(families)} "
                             "describes each)")


def read_text(source: str, on_error: str) -> str:
    """A text file (or ``-`` for standard input) as UTF-8, under the ``on_error`` policy."""
    if source == "-":
        data = sys.stdin.buffer.read()
        where = "standard input"
    else:
        try:
            data = Path(source).read_bytes()
        except OSError as err:
            raise InvalidParameterError(f"{source}: cannot read ({err.strerror}).") from None
        where = source
    try:
        return data.decode("utf-8", errors="replace" if on_error == "replace" else "strict")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        if on_error == "skip":
            return data.decode("utf-8", errors="ignore")
        raise InvalidParameterError(f"{where}:{line}: invalid UTF-8; fix the file or pass --on-error replace.") from None


def emit(args, result: dict, text: str | None = None) -> None:
    """Print ``result`` as JSON with ``--json``, else ``text`` (or ``key  value`` lines)."""
    if getattr(args, "json", False):
        print(json.dumps(result, ensure_ascii=False, default=_jsonable))
        return
    if text is None:
        lines = []
        for key, value in result.items():
            if isinstance(value, float):
                lines.append(f"{key:>24}  {value:.4f}")
            elif isinstance(value, (dict, list)):
                lines.append(f"{key:>24}  {json.dumps(value, default=_jsonable)}")
            else:
                lines.append(f"{key:>24}  {value}")
        text = "\n".join(lines)
    print(text)


def _jsonable(value: Any):
    try:
        return value.item()  # numpy scalars
    except AttributeError:
        return str(value)
