"""Dynamic pruning (block-max MaxScore and block-max WAND) against exhaustive scoring of the same packed,
memory-mapped index, beside bm25s (numba backend) and tantivy, in one run.

Collections: the synthetic corpus of ``bench/scale.py`` (its Zipf vocabulary and lengths drawn
from the shared raw text) at each ``--sizes``. Query sets, each timed on every system:

* ``scale``: scale.py's queries, 3 words from below the 200 most frequent;
* ``zipf``: 1 to 5 words drawn by frequency from the whole vocabulary (common words included);
* ``mapped``: the shared sets' test queries, each word replaced by the synthetic vocabulary's
  word of the same frequency rank in its own collection.

Top 10, one thread, queries tokenized inside the timing. For salience the pruned results are
checked identical (ids and scores) to the exhaustive ones. The work column counts the postings
that pruning decoded against those exhaustive scoring reads. The roofline column gives the
exhaustive scan's posting bytes per second as a share of this machine's one-core read bandwidth
(``bench/limits.py``). Peers at their best: bm25s with its numba backend, tantivy with its own
query parser, each index built once per size.

    python bench/pruning.py --sizes 100000,1000000 --write BENCHMARKS.md

Each size's corpus is generated as a stream for each engine (10^7 documents as a list would
not fit in memory); bm25s, handed a list, runs up to ``--bm25s-max``. ``--rows-file`` keeps the
measurements of each size as it finishes; ``--section LABEL`` writes the run as a section of its
own beside the full run's (a rerun at some sizes, after a change). The last section refits
``bench/scale.py``'s cost model for 10^8 and 10^9 documents on the pruned curve's two largest
sizes.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from common import run_benchmark, search_set, split_heading

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # noqa: E402  (the synthetic corpus and the peers' harness)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "search"
WORD = re.compile(r"\w+")


def zipf_queries(vocabulary, probabilities, n: int = 500, seed: int = 2) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(vocabulary, int(rng.integers(1, 6)), p=probabilities / probabilities.sum()))
            for _ in range(n)]


def mapped_queries(vocabulary, limit: int = 500, split: str = "test") -> list[str]:
    """The shared sets' queries of ``split`` on the synthetic vocabulary, word by frequency rank."""
    out = []
    for name in ("scifact", "npl", "cranfield"):
        root = SHARED / name
        if not root.exists():
            continue
        corpus, queries, _ = search_set(root, split)
        counts = Counter()
        for record in corpus:
            counts.update(WORD.findall((record.get("title", "") + " " + record.get("text", "")).lower()))
        rank = {word: r for r, (word, _) in enumerate(counts.most_common())}
        for text in queries.values():
            words = [vocabulary[rank[w]] for w in WORD.findall(text.lower()) if w in rank and rank[w] < len(vocabulary)]
            if words:
                out.append(" ".join(words))
    return out[:limit]


def timed(run, n: int, repeats: int = 3) -> tuple[float, object]:
    best, result = 0.0, None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        best = max(best, n / (time.perf_counter() - start))
    return best, result


def salience_rows(corpus, query_sets: dict, work: Path, read_gb_s: float, forced: bool = True) -> tuple[list[dict], dict]:
    """Build the packed index from the stream ``corpus()`` in bounded memory (one process), then
    time each query set exhaustively, with ``auto`` and (``forced``) with MaxScore and with
    block-max WAND forced on every query."""
    from salience.search import BM25
    from salience.search.pruning import pruned_top_k

    folder = work / "salience"
    reset_peak_rss()
    start = time.perf_counter()
    BM25(fields=("text",), store_documents=False).build(({"id": i, "text": t} for i, t in corpus()), folder)
    build = {"index_s": time.perf_counter() - start, "bytes": scale.folder_bytes(folder), "build_rss_mb": peak_rss_mb()}
    gc.collect()
    index = BM25.load(folder, verify=False)
    packed, budget = index._packed, index.score_cache_mb
    modes = ("off", "maxscore", "bmw", "auto") if forced else ("off", "auto")
    rows, all_queries = [], [q for qs in query_sets.values() for q in qs]
    for name, queries in [*query_sets.items(), ("all", all_queries)]:
        encoded = index._encode_queries(queries)
        postings = sum(int(packed.counts[q].sum()) for q in encoded if q)
        found = {}
        for mode in ("nocache", *modes):
            # "nocache": exhaustive scoring computing every contribution (score_cache_mb=0)
            index.pruning, index.score_cache_mb = ("off", 0) if mode == "nocache" else (mode, budget)
            index.search_batch(queries[:5], k=10)
            found[mode] = timed(lambda: index.search_batch(queries, k=10), len(queries))
        same = all(a.ids == b.ids and np.array_equal(a.values, b.values)
                   for mode in (*modes[1:], "nocache") for a, b in zip(found["off"][1], found[mode][1]))
        # bytes read by exhaustive scoring: the gaps, and each term's frequencies or, cached, its contributions
        cached = index._score_cache().offsets >= 0 if budget else np.zeros(packed.n_terms, dtype=bool)
        nbytes = sum(int(packed.counts[t]) * (_width(packed, "docs", t) + (4 if cached[t] else _width(packed, "tf", t)))
                     for q in encoded for t in q)
        row = {"set": name, "queries": len(queries), "postings_per_query": postings / len(queries),
               "off_qps": found["off"][0], "auto_qps": found["auto"][0], "nocache_qps": found["nocache"][0],
               "identical": same, "exhaustive_gb_s": nbytes / len(queries) * found["off"][0] / 1e9}
        row["roofline"] = row["exhaustive_gb_s"] / read_gb_s if read_gb_s else float("nan")
        if forced:
            counter = np.zeros(2, dtype=np.int64)
            pruned_top_k(index, encoded, 10, None, counter, strategy="maxscore")
            row.update(maxscore_qps=found["maxscore"][0], decoded=counter[0] / max(postings, 1),
                       scored_per_query=counter[1] / len(queries))
            counter = np.zeros(2, dtype=np.int64)
            pruned_top_k(index, encoded, 10, None, counter, strategy="bmw")
            row.update(bmw_qps=found["bmw"][0], bmw_decoded=counter[0] / max(postings, 1),
                       bmw_scored_per_query=counter[1] / len(queries))
        rows.append(row)
        print(f"    {name}: exhaustive {row['off_qps']:,.0f} q/s, auto {row['auto_qps']:,.0f} q/s", file=sys.stderr,
              flush=True)
    index.pruning = "auto"
    p50, p99 = scale.latency_ms(lambda q: index.search(q, k=10), all_queries)
    cache = index._score_cache()
    return rows, {"p50_ms": p50, "p99_ms": p99, "search_rss_mb": scale.current_rss_mb(), **build,
                  "cache_mb": cache.nbytes / 2**20 if cache else 0.0, "cache_budget_mb": budget,
                  "top": [r.ids for r in found["auto"][1]]}


def reset_peak_rss() -> None:
    """Start this process's peak resident memory afresh (Linux: the earlier sizes and peers'
    peaks would otherwise count)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_rss_mb() -> float:
    """Peak resident memory since :func:`reset_peak_rss`, from /proc (the process's lifetime
    peak where /proc cannot be read)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return scale.rss_mb()


def _width(packed, kind: str, term: int) -> int:
    widths, _, parts = packed._kinds[kind]
    return int(parts[int(widths[term])].dtype.itemsize)


def run(args) -> dict:
    limits = json.loads(Path(args.limits).read_text()) if Path(args.limits).exists() else {}
    read_gb_s = limits.get("by_threads", {}).get("1", {}).get("read_gb_s", float("nan"))
    vocabulary, probabilities, lengths = scale.source_statistics()
    query_sets = {"scale": scale.synthetic_queries(vocabulary, probabilities),
                  "zipf": zipf_queries(vocabulary, probabilities), "mapped": mapped_queries(vocabulary)}
    all_queries = [q for qs in query_sets.values() for q in qs]
    out = {"sizes": [], "read_gb_s": read_gb_s, "bm25s_max": args.bm25s_max, "maxscore_max": args.maxscore_max,
           "section": args.section, "doc_order": args.doc_order}
    for n in [int(s) for s in args.sizes.split(",")]:
        # the corpus is generated as a stream for each engine that reads it (10^7 documents as a
        # list would not fit in memory); bm25s alone is handed a list, up to --bm25s-max
        corpus = lambda n=n: scale.synthetic_corpus(n, vocabulary, probabilities, lengths)  # noqa: E731
        if args.doc_order == "length":
            corpus = _in_length_order(corpus, n)
        with tempfile.TemporaryDirectory(dir=args.work) as tmp:
            rows, ours = salience_rows(corpus, query_sets, Path(tmp), read_gb_s, forced=n <= args.maxscore_max)
            print(f"  {n:,} documents: salience measured", file=sys.stderr, flush=True)
            peers = {}
            for peer in args.peers.split(","):
                gc.collect()
                if peer == "bm25s" and n <= args.bm25s_max:
                    result = scale.bm25s_index(list(corpus()), all_queries, Path(tmp), backend="numba",
                                               query_sets=query_sets)
                elif peer == "tantivy":
                    result = scale.tantivy_index(corpus, all_queries, Path(tmp), query_sets=query_sets)
                else:
                    continue
                result["overlap"] = scale.overlap(result.pop("top"), ours["top"])
                peers[peer] = result
                print(f"  {n:,} documents: {peer} measured", file=sys.stderr, flush=True)
        out["sizes"].append({"n": n, "rows": rows, "latency": {k: v for k, v in ours.items() if k != "top"},
                             "peers": peers})
        if args.rows_file:  # each size kept as it finishes: a long run that stops keeps the sizes it measured
            from salience.io.files import atomic_write_text

            atomic_write_text(args.rows_file, json.dumps(out, indent=1))
    return out


#: the most documents --doc-order length sorts in memory (about 1.4 GB of text a million)
LENGTH_ORDER_MAX = 2_000_000


def _in_length_order(corpus, n: int):
    """The collection with its documents in order of length, shortest first (equal lengths in
    the generated order): docid reordering, so that a block of 128 postings holds documents of
    alike length and its score bound says more. Sorted in memory."""
    if n > LENGTH_ORDER_MAX:
        raise SystemExit(f"--doc-order length sorts the collection in memory: at most {LENGTH_ORDER_MAX:,} documents")
    docs = sorted(corpus(), key=lambda doc: doc[1].count(" "))
    return lambda: iter(docs)


KERNEL_NAMES = {"maxscore": "block-max MaxScore", "bmw": "block-max WAND"}


def render(result: dict, command: str, seconds: float) -> str:
    from salience.search.pruning import AUTO_MAX_K, AUTO_MAX_TERMS, AUTO_MIN_POSTINGS, AUTO_MIN_SHARE, AUTO_STRATEGY

    label = f": {result['section']}" if result.get("section") else ""
    heading = ("## Dynamic pruning: block-max MaxScore and block-max WAND against exhaustive scoring and the peers "
               "(`bench/pruning.py`)")
    lines = [heading + label, "",
             "The synthetic corpus of `bench/scale.py` (no split: the ground truth is the exhaustive search's own top "
             "10, which pruning must equal). Query sets: `scale` (scale.py's 3 words from below the 200 most "
             "frequent), `zipf` (1-5 words by frequency, common words included), `mapped` (the shared sets' queries of the "
             f"{split_heading('test')}, each word moved to the synthetic word of the same frequency rank); `all` is the three "
             f"together. `auto`'s rule (prune a query of at most {AUTO_MAX_TERMS} terms, with {KERNEL_NAMES[AUTO_STRATEGY]}, "
             f"when one term holds >= {AUTO_MIN_POSTINGS:,} postings and >= {AUTO_MIN_SHARE:.0%} of the query's, k <= "
             f"{AUTO_MAX_K}) was set on dev data (`bench/pruning_rule.py`): a separate "
             "synthetic collection of 10^6 documents (its own seed) with its own seeded queries and the shared sets' "
             "**dev** queries moved onto it by rank, each query timed exhaustively and by both kernels, never on these rows. Exhaustive scoring goes a chunk of 32,768 documents at a time (their "
             "accumulator and length norms stay in the core's L2 cache). Top 10, one thread, best of 3 runs.", "",
             f"Command: `{command}` ({seconds:.0f} s)", "",
             *_order_note(result),
             *_cache_note(result),
             "| documents | queries | n | postings/query | exhaustive, no cache q/s | exhaustive q/s | cache speed-up | "
             "maxscore q/s | bmw q/s | auto q/s | "
             "maxscore / exhaustive | bmw / exhaustive | auto / exhaustive | postings decoded (maxscore / bmw) | "
             "documents scored/query (maxscore / bmw) | identical | exhaustive GB/s of postings | of one core's read "
             "bandwidth |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for size in result["sizes"]:
        for row in size["rows"]:
            forced = "maxscore_qps" in row
            both = "bmw_qps" in row  # runs before block-max WAND have MaxScore's columns alone
            maxscore = (f"{row['maxscore_qps']:,.0f} | " if forced else "— | ") + \
                (f"{row['bmw_qps']:,.0f} | " if both else "— | ")
            ratio = (f"{row['maxscore_qps'] / row['off_qps']:.2f}x | " if forced else "— | ") + \
                (f"{row['bmw_qps'] / row['off_qps']:.2f}x | " if both else "— | ")
            work = (f"{row['decoded']:.0%} / {row['bmw_decoded']:.0%} | {row['scored_per_query']:,.0f} / "
                    f"{row['bmw_scored_per_query']:,.0f} | " if both else
                    f"{row['decoded']:.0%} | {row['scored_per_query']:,.0f} | " if forced else "— | — | ")
            nocache = (f"{row['nocache_qps']:,.0f} | {row['off_qps']:,.0f} | {row['off_qps'] / row['nocache_qps']:.2f}x | "
                       if "nocache_qps" in row else f"— | {row['off_qps']:,.0f} | — | ")
            lines.append(f"| {size['n']:,} | {row['set']} | {row['queries']} | {row['postings_per_query']:,.0f} | "
                         f"{nocache}{maxscore}{row['auto_qps']:,.0f} | "
                         f"{ratio}{row['auto_qps'] / row['off_qps']:.2f}x | {work}"
                         f"{'yes' if row['identical'] else '**no**'} | {row['exhaustive_gb_s']:.2f} | "
                         f"{row['roofline']:.0%} |")
    if any("maxscore_qps" not in row for size in result["sizes"] for row in size["rows"]):
        lines += ["", f"Past {result.get('maxscore_max', 0):,} documents MaxScore and WAND are not forced on every query (—): "
                  "their columns would take longer than the rest of the size together; `auto` still prunes the queries "
                  "its rule picks, and its results are checked identical to exhaustive scoring."]
    lines += ["", "All queries together against the peers (the same queries, each system's own tokenizer):", "",
              "| documents | system | queries/s | p50 ms | p99 ms | salience (auto) / system | top-10 overlap with salience |",
              "|---:|---|---:|---:|---:|---:|---:|"]
    for size in result["sizes"]:
        ours = next(r for r in size["rows"] if r["set"] == "all")
        lines.append(f"| {size['n']:,} | salience BM25, packed and memory-mapped, pruning auto | {ours['auto_qps']:,.0f} | "
                     f"{size['latency']['p50_ms']:.2f} | {size['latency']['p99_ms']:.2f} | | |")
        for peer, found in size["peers"].items():
            name = PEER_NAMES.get(peer, peer)
            lines.append(f"| {size['n']:,} | {name} | {found['qps']:,.0f} | {found['p50_ms']:.2f} | "
                         f"{found['p99_ms']:.2f} | {ours['auto_qps'] / found['qps']:.2f}x | {found['overlap']:.3f} |")
    if not _peers(result):  # no peer ran: the set rows above give salience's own figures
        return "\n".join(lines + _roofline(result) + cost_model(result))
    lines += ["", "Each query set against the peers (queries/s; salience with `pruning=\"auto\"`, the default):", "",
              "| documents | queries | salience | " + " | ".join(PEER_NAMES.get(p, p) for p in _peers(result)) + " | "
              + " | ".join(f"salience / {PEER_NAMES.get(p, p)}" for p in _peers(result)) + " |",
              "|---:|---|---:|" + "---:|" * (2 * len(_peers(result)))]
    for size in result["sizes"]:
        for row in size["rows"]:
            peers = [size["peers"][p]["qps_by_set"].get(row["set"], size["peers"][p]["qps"]) if p in size["peers"]
                     else float("nan") for p in _peers(result)]
            lines.append(f"| {size['n']:,} | {row['set']} | {row['auto_qps']:,.0f} | "
                         + " | ".join(f"{q:,.0f}" if q == q else "—" for q in peers) + " | "
                         + " | ".join(f"{row['auto_qps'] / q:.2f}x" if q == q else "—" for q in peers) + " |")
        # every system's three set passes added up: the same queries as "all", timed in the passes
        # that also give the per-set rows (one slow pass of "all" cannot tilt the ratio alone)
        sets = [row for row in size["rows"] if row["set"] != "all"]
        total = sum(row["queries"] for row in sets)
        ours_sets = total / sum(row["queries"] / row["auto_qps"] for row in sets)
        peers = [total / sum(row["queries"] / size["peers"][p]["qps_by_set"][row["set"]] for row in sets)
                 if p in size["peers"] and all(row["set"] in size["peers"][p]["qps_by_set"] for row in sets)
                 else float("nan") for p in _peers(result)]
        lines.append(f"| {size['n']:,} | all, from the set passes | {ours_sets:,.0f} | "
                     + " | ".join(f"{q:,.0f}" if q == q else "—" for q in peers) + " | "
                     + " | ".join(f"{ours_sets / q:.2f}x" if q == q else "—" for q in peers) + " |")
    lines += _roofline(result)
    if result.get("bm25s_max") and any(size["n"] > result["bm25s_max"] for size in result["sizes"]):
        lines += [f"bm25s runs up to {result['bm25s_max']:,} documents: it is handed the corpus as a list and holds "
                  "its scores in memory (11.8 GB at 10^6 in `bench/scale.py`'s run 1), which 10^7 would not fit.", ""]
    lines += cost_model(result)
    return "\n".join(lines)


def _roofline(result: dict) -> list[str]:
    return ["", f"The roofline: exhaustive scoring reads each query term's packed postings once (gaps and term "
                  f"frequencies, 1-4 bytes each, or for a cached term its contributions, 4 bytes each). The share is "
                  f"of one core's measured read bandwidth ({result['read_gb_s']:.1f} GB/s, `bench/limits.py`). The "
                  "scan is not bound by reading the postings: per posting it decodes a gap (a serial running sum), "
                  "and for a term not cached gathers the document's length norm and divides once (the BM25 formula); "
                  "then it adds to the accumulator, held in L2 for the chunk. Pruning decodes fewer postings "
                  "per query (a block is decoded, and its contributions computed, when a document is looked up in "
                  "it); the table gives the share decoded.", ""]


def _order_note(result: dict) -> list[str]:
    if result.get("doc_order") != "length":
        return []
    return ["Documents indexed **in order of length** (shortest first; equal lengths in the generated order), the "
            "same documents and queries as the generated order's rows: each block of 128 postings then holds "
            "documents of alike length, whose BM25 contributions are alike, so a block's bound is close to its "
            "postings' scores and more blocks fall below the k-th score. Identical results, as in every order.", ""]


def _cache_note(result: dict) -> list[str]:
    held = [(size["n"], size["latency"]["cache_mb"], size["latency"]["cache_budget_mb"]) for size in result["sizes"]
            if "cache_mb" in size["latency"]]
    if not held:
        return []
    return ["Every column but the first exhaustive one reads the score cache at the index's default budget "
            "(`score_cache_mb`, chosen on dev by `bench/pruning_rule.py`): the longest posting lists' contributions, "
            "computed when a query first reads them (the first of the 3 runs) and read from then on; held at the end "
            "of the run: " + ", ".join(f"{mb:,.0f} MiB of {budget:g} at {n:,} documents" for n, mb, budget in held)
            + ". The first exhaustive column computes every contribution (`score_cache_mb=0`), as before the cache "
              "existed.", ""]


def cost_model(result: dict) -> list[str]:
    """`bench/scale.py`'s cost model for 10^8 and 10^9 documents, refitted on this run's curve:
    the p99 of one query at a time with ``pruning="auto"`` (the default), the bounded build's
    bytes, rate and memory, at the two largest sizes."""
    sizes = [size for size in result["sizes"] if "index_s" in size["latency"]]
    if len(sizes) < 2:
        return []
    rows = [{"n": size["n"], "salience_bulk": {**size["latency"], "rss_mb": size["latency"]["search_rss_mb"]}}
            for size in sizes]
    lines = scale.cost_model(rows, gather_ms=result.get("gather_ms", 1.39))
    lines[0] = "### What 10^8 and 10^9 documents would need, refitted on the pruned (`auto`) curve"
    lines.insert(2, "The p99 below is of one query at a time over all the query sets with `pruning=\"auto\"` (the "
                    "default), each size built in bounded memory by one process (the build rate and memory are this "
                    "run's); the scatter-gather overhead is `bench/scale.py`'s run 1 (4 shards). ")
    return lines


PEER_NAMES = {"bm25s": "bm25s 0.3.16, numba backend", "tantivy": "tantivy-py"}


def _peers(result: dict) -> list[str]:
    return list(dict.fromkeys(p for size in result["sizes"] for p in size["peers"]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--peers", default="bm25s,tantivy", help="comma-separated: bm25s, tantivy (or none)")
    parser.add_argument("--limits", default=str(ROOT / "bench-out" / "limits.json"))
    parser.add_argument("--work", default=None, help="folder for the indexes (a temporary folder by default)")
    parser.add_argument("--bm25s-max", type=int, default=1_000_000, help="largest size run with bm25s")
    parser.add_argument("--maxscore-max", type=int, default=1_000_000,
                        help="largest size where MaxScore is also forced on every query")
    parser.add_argument("--rows-file", type=Path, default=None, help="write the measurements here after each size")
    parser.add_argument("--doc-order", choices=("generated", "length"), default="generated",
                        help="index the documents as generated, or in order of length (docid reordering)")
    parser.add_argument("--section", default="",
                        help="a label for a section of its own beside the full run's (a rerun at some sizes)")
    if not scale.RAW.exists():
        print(f"skipping: {scale.RAW} is absent (the shared evaluation data)", file=sys.stderr)
        return 0
    return run_benchmark("pruning.py", parser, run, render, argv, variant=lambda args: args.section)


if __name__ == "__main__":
    raise SystemExit(main())
