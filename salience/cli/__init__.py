"""The ``salience`` command: a sub-command group per domain, one module each.

    salience search index|query|evaluate|add|delete|merge ...
    salience rank fuse|evaluate ...
    salience keywords extract FILE | keywords evaluate GOLD.jsonl
    salience summarize extract FILE | summarize evaluate GOLD.jsonl
    salience data select|dedup|report ...
    salience explain search|text|lm ...
    salience methods [--domain D] [--json]
    salience cache list|clear [--name NAME]
    salience serve INDEX_DIR... [--port 8080] [--api-key-file F]

Every leaf command takes ``--json`` and ``--quiet``; shared options keep one name everywhere
(``-k``, ``--seed``, ``--n-jobs``, ``--on-error``, ``--quiet``/``--progress``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from salience.exceptions import SalienceError

__all__ = ["main", "build_parser"]


#: the module that registers each top-level command; ``main`` imports only the one a command
#: line names, so ``salience data select`` does not pay for the search and model imports
COMMAND_MODULES = {"search": "search", "rank": "rank", "keywords": "text", "summarize": "text", "data": "data",
                   "explain": "explain", "compress": "compress", "methods": "methods", "cache": "cache", "serve": "serve",
                   "verify": "verify"}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``command`` (a key of :data:`COMMAND_MODULES`) only that command's
    module is imported and registered."""
    import importlib

    parser = argparse.ArgumentParser(prog="salience", description="Score, rank and select what matters.")
    domains = parser.add_subparsers(dest="domain", required=True)
    names = [COMMAND_MODULES[command]] if command in COMMAND_MODULES else list(dict.fromkeys(COMMAND_MODULES.values()))
    for name in names:
        importlib.import_module(f"salience.cli.{name}").add_commands(domains)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv[0] if argv else None)
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse's usage errors: exit status 2, message already printed
        return int(stop.code or 0)
    import warnings

    formatwarning = warnings.formatwarning
    _quiet_libraries(args)
    try:
        return args.func(args)
    except SalienceError as err:
        print(f"salience: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("salience: interrupted; nothing was left half-written.", file=sys.stderr)
        return 130
    except MemoryError:
        print("salience: error: out of memory; the command stopped and wrote no output (outputs are written whole "
              "at the end). Give it a smaller input or fewer --n-jobs, or run it on a machine with more memory.",
              file=sys.stderr)
        return 1
    except BrokenPipeError:
        # the reader went away (``salience ... | head -1``): stop quietly, as Unix tools do
        _silence_stdout()
        return 141  # 128 + SIGPIPE, the status a tool killed by the signal reports
    finally:
        warnings.formatwarning = formatwarning  # main() called in a process (tests) leaves it as it was


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """Not Python's source-line format, which users do not read: salience's own warnings as
    salience's, a library's with its category."""
    import os

    import salience

    if str(filename).startswith(os.path.dirname(salience.__file__)):
        return f"salience: warning: {message}\n"
    return f"warning ({category.__name__}): {message}\n"


def _quiet_libraries(args) -> None:
    """Warnings read as salience's own; without progress bars (``--quiet``, or standard error
    not a terminal) the model libraries' bars ("Loading weights") are off too."""
    import os
    import warnings

    from salience.cli._common import show_progress

    warnings.formatwarning = _format_warning
    if not show_progress(args):
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read by huggingface_hub and transformers
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        if "transformers" in sys.modules:  # imported already: its bar switch was read then
            sys.modules["transformers"].utils.logging.disable_progress_bar()


def _silence_stdout() -> None:
    """Point standard output at /dev/null, so the interpreter's last flush at exit does not
    fail again on the closed pipe."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (a captured stream): nothing to flush there
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
