"""What every benchmark script ends with: parse its options, run, render the markdown section,
print it and, with ``--write FILE``, replace the script's section of FILE."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def run_benchmark(script: str, parser: argparse.ArgumentParser, run, render, argv=None) -> int:
    """``run(args) -> result`` then ``render(result, command, seconds) -> markdown``; the
    command line that reproduces it is part of the section."""
    parser.add_argument("--write", type=Path, default=None,
                        help="replace this benchmark's section of a markdown file (e.g. BENCHMARKS.md)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = run(args)
    command = f"python bench/{script} " + " ".join(argv if argv is not None else sys.argv[1:])
    section = render(result, command.strip(), time.perf_counter() - started)
    print(section)
    if args.write:
        from search import write_section

        write_section(args.write, section, marker=f"bench/{script}")
    return 0
