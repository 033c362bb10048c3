"""What every ``salience verify`` command shares: the protocol's options, checked as the command
line spells them, and the report (JSON, or HTML with the curves) that a rerun may replace."""

from __future__ import annotations

import json
from pathlib import Path

from salience.cli._common import add_seed, positive_int
from salience.exceptions import InputFormatError, InvalidParameterError

#: written in every report the command writes, so that a rerun may replace it
MARK = "salience.verification"


def _add_protocol_options(p) -> None:
    p.add_argument("--steps", type=positive_int, default=10, help="removal steps (default 10)")
    p.add_argument("--random", type=int, default=20, dest="n_random",
                   help="random orders the scores are compared with (default 20; at least 2)")
    p.add_argument("--alpha", type=float, default=0.01, help="significance level of the verdict (default 0.01)")
    add_seed(p)
    p.add_argument("--out", default=None,
                   help="the report: JSON, or an HTML page with the curves when it ends in .html; refused when it "
                        "exists and is not an earlier report, or is an input")


def _check_protocol(args) -> None:
    """The protocol's options, named as the command line spells them, before any work."""
    if args.n_random < 2:
        raise InvalidParameterError(f"--random must be at least 2 (the spread of random orders needs two); got "
                                    f"{args.n_random}.")
    if not 0 < args.alpha < 1:
        raise InvalidParameterError(f"--alpha must lie between 0 and 1; got {args.alpha}.")


def _is_own_report(path: Path) -> bool:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")[:4096] if path.is_file() else ""
    except OSError:
        return False
    return MARK in text


def _write(args, result, inputs) -> None:
    if args.out is None:
        return
    from salience.io.files import atomic_write_text, check_output_path

    out = check_output_path(args.out, inputs, what="report", is_own=_is_own_report)
    body = result.to_dict()
    if out.suffix.lower() in (".html", ".htm"):
        text = result.html().replace("<body>", f"<body><!-- {MARK} -->", 1)
    else:
        text = json.dumps({"format": MARK, **body}, indent=1) + "\n"
    atomic_write_text(out, text)


def read_score_list(path: str, command: str, unit: str) -> tuple[list[float], str]:
    """(scores, method) of a command's JSON report holding ``scores``, a list of numbers (one per
    ``unit``) and the ``method`` that gave them; anything else is refused naming ``command``."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8", errors="strict"))
    except UnicodeDecodeError:
        raise InputFormatError(f"{path}: not UTF-8 text.") from None
    except ValueError as err:
        raise InputFormatError(f"{path}: not JSON ({err}).") from None
    values = data.get("scores") if isinstance(data, dict) else None
    if not isinstance(values, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                               for v in values):
        raise InputFormatError(f"{path}: not {command}'s output (an object with a list of numeric scores, one per "
                               f"{unit}).")
    return [float(v) for v in values], str(data.get("method") or path)
