"""The benchmark protocol (../shared/benchmarks.md), checked on the benches themselves: every
bench that measures on a shared search, keyphrase or summary set selects its data through
bench/common.py's dev/test split, and every section it wrote to BENCHMARKS.md names the split
its table reports."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from tests.conftest import data_path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"

# reading one of these files directly bypasses the split
_DIRECT_READ = re.compile(r"""["'](queries\.jsonl|qrels\.tsv|docs\.jsonl)["']""")
# what marks a bench as one that measures on a shared split set
_SHARED_SETS = re.compile(r"""["'](search|keyphrase|summarize)["']|search_set\(|document_set\(|split_docs\(|KEYPHRASE_DATA""")
# bench/service.py replays SciFact's query texts as load; it reports no quality target
_LOAD_ONLY = {"service.py"}


def _common():
    spec = importlib.util.spec_from_file_location("bench_common", BENCH / "common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _split_users() -> list[Path]:
    return sorted(p for p in BENCH.glob("*.py")
                  if p.name not in _LOAD_ONLY | {"common.py"} and _SHARED_SETS.search(p.read_text(encoding="utf-8")))


def _sections(text: str) -> dict[str, str]:
    return dict(re.findall(r"<!-- (bench/\S+(?: [^>]*?)?) begin -->\n(.*?)<!-- \1 end -->", text, flags=re.S))


def test_benches_on_shared_sets_select_through_the_split():
    users = _split_users()
    assert {p.name for p in users} >= {"search.py", "neural.py", "rerank.py", "text.py", "ranking.py", "pack.py", "ann.py"}
    for path in users:
        source = path.read_text(encoding="utf-8")
        assert "from common import" in source and re.search(r"\b(search_set|document_set|split_docs|split)\(", source), \
            f"{path.name} reads a shared set without bench/common.py's split"
        assert not _DIRECT_READ.search(source), f"{path.name} reads a shared set's queries, qrels or docs directly"
        assert "split_heading(" in source, f"{path.name} renders a table without naming its split"


def test_every_section_of_a_split_bench_names_its_split():
    sections = _sections((ROOT / "BENCHMARKS.md").read_text(encoding="utf-8"))
    users = {p.name for p in _split_users()}
    checked = 0
    for marker, body in sections.items():
        script = marker.split()[0].removeprefix("bench/")
        if script not in users:
            continue
        checked += 1
        assert "test split" in body, f"BENCHMARKS.md's section '{marker}' reports a shared set without its test split"
    assert checked >= 7


def test_split_heading_is_what_the_check_reads():
    common = _common()
    assert common.split_heading("test") == "test split"
    with pytest.raises(ValueError):
        common.split(BENCH, "train")


def test_split_reads_the_shared_ids():
    common = _common()
    root = data_path("search", "scifact")
    raw = json.loads((root / "splits.json").read_text(encoding="utf-8"))
    dev, test = common.split(root, "dev"), common.split(root, "test")
    assert dev == [str(i) for i in raw["dev"]] and test == [str(i) for i in raw["test"]]
    assert not set(dev) & set(test)
    _, queries, qrels = common.search_set(root, "test")
    assert set(queries) <= set(test) and set(qrels) == set(queries)  # the split's qrels alone
    docs = [{"id": i} for i in dev[:3] + test[:2]]
    assert common.split_docs(root, docs, "test") == [{"id": i} for i in test[:2]]
