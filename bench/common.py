"""What every benchmark script shares: the shared sets' dev/test splits (``../shared/benchmarks.md``:
choose on dev, report targets on test) and the ending of a script (parse its options, run, render
the markdown section, print it and, with ``--write FILE``, replace the script's section of FILE)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

SPLITS = ("dev", "test")
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def split(set_dir: Path | str, name: str) -> list[str]:
    """The ids (queries of a search set, documents of a keyphrase or summary set) of ``name``
    ("dev" or "test") in ``set_dir/splits.json``, in the file's order."""
    if name not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}; got {name!r}")
    path = Path(set_dir) / "splits.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: every shared set carries its dev/test split there")
    return [str(i) for i in json.loads(path.read_text(encoding="utf-8"))[name]]


def split_heading(name: str) -> str:
    """The words a table heading carries to name its split (a test in tests/test_bench_splits.py
    reads them)."""
    return f"{name} split"


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def search_set(set_dir: Path, name: str):
    """A BEIR folder's corpus, its judged queries of split ``name`` (``{id: text}``, in the
    queries file's order) and those queries' qrels alone: ``evaluate`` averages over every
    query of its qrels (trec_eval's ``-c``), so the whole set's qrels would count the other
    split's queries as zeros."""
    from salience import Qrels

    wanted = set(split(set_dir, name))
    queries = {q["_id"]: q["text"] for q in read_jsonl(Path(set_dir) / "queries.jsonl")}
    qrels = Qrels.read(Path(set_dir) / "qrels.tsv")
    judged = {q: text for q, text in queries.items() if q in qrels and q in wanted}
    return read_jsonl(Path(set_dir) / "corpus.jsonl"), judged, Qrels({q: qrels[q] for q in judged}, name=qrels.name)


def split_docs(set_dir: Path, docs: list[dict], name: str, key: str = "id") -> list[dict]:
    """The records of ``docs`` whose ``key`` is in split ``name``, in their order."""
    wanted = set(split(set_dir, name))
    return [d for d in docs if str(d[key]) in wanted]


def document_set(set_dir: Path, name: str) -> list[dict]:
    """A keyphrase or summary set's records (``set_dir/docs.jsonl``) of split ``name``."""
    return split_docs(set_dir, read_jsonl(Path(set_dir) / "docs.jsonl"), name)


def write_section(path: Path, section: str, marker: str = "bench/search.py") -> None:
    """Replace (or append) the section between this benchmark's markers in ``path``."""
    from salience.io.files import atomic_write_text

    begin, end = f"<!-- {marker} begin -->", f"<!-- {marker} end -->"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n\n"
    block = f"{begin}\n{section}{end}"
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    atomic_write_text(path, text)


def run_benchmark(script: str, parser: argparse.ArgumentParser, run, render, argv=None, *, variant="") -> int:
    """``run(args) -> result`` then ``render(result, command, seconds) -> markdown``; the
    command line that reproduces it is part of the section (``variant``: a second section of
    the same script, e.g. a configuration chosen on dev beside the defaults; a string, or a
    function of the parsed arguments that gives it)."""
    parser.add_argument("--write", type=Path, default=None,
                        help="replace this benchmark's section of a markdown file (e.g. BENCHMARKS.md)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = run(args)
    command = f"python bench/{script} " + shlex.join(argv if argv is not None else sys.argv[1:])
    section = render(result, command.strip(), time.perf_counter() - started)
    print(section)
    if args.write:
        variant = variant(args) if callable(variant) else variant
        write_section(args.write, section, marker=f"bench/{script}" + (f" {variant}" if variant else ""))
    return 0
