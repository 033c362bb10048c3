"""BENCHMARKS.md is a report, not a log: one current section per capability (a bench's rerun
replaces its section), so no two sections share a heading and each bench's markers occur once."""

import re
from collections import Counter
from pathlib import Path

REPORT = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def test_no_two_sections_share_a_heading():
    text = REPORT.read_text(encoding="utf-8")
    headings = Counter(line.strip() for line in text.splitlines() if re.match(r"#{2,3} ", line))
    repeated = [h for h, n in headings.items() if n > 1]
    assert not repeated, f"sections sharing a heading (rerun the bench to replace its section): {repeated}"


def test_each_bench_section_is_written_once():
    text = REPORT.read_text(encoding="utf-8")
    begins = Counter(re.findall(r"<!-- (.+?) begin -->", text))
    ends = Counter(re.findall(r"<!-- (.+?) end -->", text))
    assert begins == ends and all(n == 1 for n in begins.values()), begins
    assert text.startswith("# Benchmarks\n")


def test_make_bench_runs_every_bench_that_writes_a_section():
    makefile = (REPORT.parent / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    run = set(re.findall(r"bench/(\w+)\.py", recipe))
    written = set(re.findall(r"<!-- bench/(\w+)\.py.*? begin -->", REPORT.read_text(encoding="utf-8")))
    assert written <= run, f"sections no make bench target rebuilds: {sorted(written - run)}"
