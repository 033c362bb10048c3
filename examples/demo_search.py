"""salience demo: search the Python standard library's own documentation with BM25.

Indexes every pydoc topic (``pydoc_data.topics``) and the docstrings of standard-library
modules, classes and functions (read with ``ast``, nothing is imported), saves the index,
reloads it, and answers three queries with per-term contributions.

It leaves in ``demo-out/`` what the README's command-line examples read: the corpus
(``stdlib.jsonl``), the saved index, two TREC runs of the queries and a text to summarise.
"""

from __future__ import annotations

import ast
import sys
import sysconfig
import json
import time
from pathlib import Path

from salience.search import BM25

QUERIES = [
    "read a compressed gzip file line by line",
    "sort a list in place with a key function",
    "parse command line arguments",
]
SKIP_DIRS = {"test", "tests", "idlelib", "lib2to3", "tkinter", "turtledemo", "site-packages", "ensurepip", "__pycache__"}


def stdlib_documents():
    from pydoc_data.topics import topics

    for name, text in sorted(topics.items()):
        yield {"_id": f"topic:{name}", "title": f"language reference: {name}", "text": text, "kind": "topic"}
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if SKIP_DIRS.intersection(rel.parts):
            continue
        module = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        doc = ast.get_docstring(tree)
        if doc:
            yield {"_id": module, "title": f"module {module}", "text": doc, "kind": "module"}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                doc = ast.get_docstring(node)
                if doc:
                    yield {"_id": f"{module}.{node.name}", "title": f"{module}.{node.name}", "text": doc, "kind": "api"}
                if isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("_"):
                            doc = ast.get_docstring(item)
                            if doc:
                                qual = f"{module}.{node.name}.{item.name}"
                                yield {"_id": qual, "title": qual, "text": doc, "kind": "api"}


def _write_example_inputs(out: Path, docs: list[dict], index: BM25) -> None:
    """The files the README's command-line examples read."""
    from pydoc_data.topics import topics

    with open(out / "stdlib.jsonl", "w", encoding="utf-8") as fh:
        for doc in docs:
            fh.write(json.dumps(doc, ensure_ascii=False) + "\n")
    # the language reference's section on exceptions, without its title and underline
    (out / "article.txt").write_text(topics["exceptions"].split("*\n", 1)[-1].strip() + "\n", encoding="utf-8")
    queries = dict(enumerate(QUERIES))
    index.retrieve(queries, k=100).write_trec(out / "bm25.trec", tag="bm25")
    BM25(variant="bm25+").index(docs).retrieve(queries, k=100).write_trec(out / "bm25plus.trec", tag="bm25plus")
    print(f"wrote {out}/stdlib.jsonl, {out}/article.txt, {out}/bm25.trec and {out}/bm25plus.trec "
          "(the README's command-line examples read them)\n")


def main() -> int:
    start = time.perf_counter()
    docs = list({doc["_id"]: doc for doc in stdlib_documents()}.values())  # a property's getter and setter share a name
    read_seconds = time.perf_counter() - start
    start = time.perf_counter()
    index = BM25(field_weights={"title": 2.0, "text": 1.0}).index(docs, show_progress=sys.stderr.isatty())
    index_seconds = time.perf_counter() - start
    print(f"Python {sys.version.split()[0]} standard library: {len(docs):,} documents read in {read_seconds:.1f}s, "
          f"indexed in {index_seconds:.2f}s ({len(index.vocabulary):,} terms)")
    out = Path("demo-out")
    out.mkdir(exist_ok=True)
    index.save(out / "stdlib-index")
    index = BM25.load(out / "stdlib-index")
    print(f"saved and reloaded from {out}/stdlib-index\n")
    _write_example_inputs(out, docs, index)
    for query in QUERIES:
        results = index.search(query, k=5)
        print(f"query: {query!r}")
        for rank, (doc_id, score) in enumerate(results, start=1):
            print(f"  {rank}. {score:7.3f}  {doc_id}")
            contributions = index.explain(query, doc_id).terms
            print("       " + "  ".join(f"{c.term}={c.contribution:.2f}" for c in contributions if c.contribution > 0))
        print()
    only_api = index.search(QUERIES[0], k=3, where={"kind": "api"})
    print(f"filtered to kind=api: {', '.join(only_api.ids)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
