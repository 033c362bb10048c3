"""Semantic deduplication on the DSIR pool, beside exact and MinHash deduplication: salience
(SemDeDup over a static encoder distilled from the packaged MiniLM; its MinHash LSH) against
datasketch 2.0's MinHashLSH, in one run on the same texts.

The pool: ../shared/data/dsir/raw_docs.jsonl.gz (36,155 documents). Every method runs in a
process of its own (spawned) on the texts already in memory, so its seconds and peak RSS are
its own; documents/s is over that whole scope (hashing or embedding, then deciding).

* exact: salience's lower-case word hashes;
* MinHash: word 5-gram shingles, 128 permutations, Jaccard 0.8 (salience: LSH candidates
  checked against the signatures' estimate; datasketch: the usual streaming use, a document
  whose LSH query returns any earlier one is a duplicate);
* SemDeDup at cosine similarity 0.95 and 0.90 (no value was tuned: the paper's range), after
  exact deduplication, about sqrt(n) k-means clusters, SemDeDup's "hard" keep order; its
  recall against comparing all pairs (the documents that have a neighbour at the threshold
  anywhere in the pool, found by one pass over all 36,155^2 similarities) and its overlap
  with MinHash's pairs; on a sample of the pool, the static encoder against MiniLM itself.

SemDeDup centres the vectors (salience.data.semantic_dedup says why): a choice made on the
pool's first 1,500 documents against MiniLM, so the sample comparing the two encoders is drawn
from the documents after them.

    python bench/semdedup.py --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import SHARED_DATA, run_benchmark  # noqa: E402

POOL = SHARED_DATA / "dsir" / "raw_docs.jsonl.gz"
#: the pool's first documents, on which SemDeDup's centring was chosen
DEV_DOCUMENTS = 1500


def read_pool(limit: int | None = None) -> list[str]:
    texts = []
    with gzip.open(POOL, "rt", encoding="utf-8") as fh:
        for line in fh:
            texts.append(json.loads(line)["text"])
            if limit and len(texts) >= limit:
                break
    return texts


def _rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _isolated(job, *args):
    """``job(*args)`` in a fresh spawned process: (its result, seconds inside, its peak RSS)."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return pool.submit(_timed_job, job, args).result()


def _timed_job(job, args):
    started = time.perf_counter()
    result = job(*args)
    return result, time.perf_counter() - started, _rss_mb()


def salience_dedup(texts, near: bool, semantic: bool, encoder=None, similarity: float = 0.95) -> list[int]:
    from salience.data.dedup import dedup_texts

    return dedup_texts(texts, near=near, semantic=semantic, encoder=encoder, similarity=similarity).ids


def datasketch_dedup(texts, threshold: float = 0.8, num_perm: int = 128) -> list[int]:
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    kept = []
    for i, text in enumerate(texts):
        words = re.findall(r"\w+", text.lower())
        shingles = {" ".join(words[j : j + 5]).encode() for j in range(max(1, len(words) - 4))}
        signature = MinHash(num_perm=num_perm)
        signature.update_batch(list(shingles))
        if not lsh.query(signature):
            kept.append(i)
            lsh.insert(str(i), signature)
    return kept


def embed(texts, encoder) -> np.ndarray:
    from salience.models.encoders import encode_normalized, get_encoder

    return encode_normalized(get_encoder(encoder), texts).astype(np.float32)


def have_a_neighbour(vectors: np.ndarray, similarity: float, block: int = 2048) -> np.ndarray:
    """Whether each row has another row at cosine similarity >= ``similarity``: all pairs, in blocks."""
    found = np.zeros(len(vectors), dtype=bool)
    for start in range(0, len(vectors), block):
        S = vectors[start : start + block] @ vectors.T
        S[np.arange(len(S)), start + np.arange(len(S))] = -np.inf
        found[start : start + block] = S.max(axis=1) >= similarity - 1e-6
    return found


def _centred(vectors: np.ndarray) -> np.ndarray:
    """As SemDeDup compares them: the mean subtracted, rows scaled to unit length."""
    centred = vectors - vectors.mean(axis=0)
    return centred / np.maximum(np.linalg.norm(centred, axis=1, keepdims=True), 1e-12)


def in_groups(groups: np.ndarray) -> np.ndarray:
    """Rows in a duplicate group: dropped, or kept for one dropped."""
    dropped = groups != np.arange(len(groups))
    member = dropped.copy()
    member[groups[dropped]] = True
    return member


def semantic_quality(vectors: np.ndarray, similarity: float) -> dict:
    from salience.data.semantic_dedup import semantic_duplicate_groups

    started = time.perf_counter()
    groups = semantic_duplicate_groups(vectors, similarity=similarity)
    seconds = time.perf_counter() - started
    started = time.perf_counter()
    everywhere = have_a_neighbour(_centred(vectors), similarity)
    all_pairs_seconds = time.perf_counter() - started
    found = in_groups(groups)
    return {"similarity": similarity, "dropped": int((groups != np.arange(len(groups))).sum()),
            "in_groups": int(found.sum()), "with_a_neighbour": int(everywhere.sum()),
            "recall": float(found.sum() / max(everywhere.sum(), 1)), "decide_seconds": seconds,
            "all_pairs_seconds": all_pairs_seconds, "groups": groups}


def run(args) -> dict:
    texts = read_pool(args.limit)
    n = len(texts)
    static = args.static_encoder
    result = {"documents": n, "rows": []}
    if static is None:
        from salience.models.static import distill

        started = time.perf_counter()
        static = str(distill(out=Path(args.work) / "static-minilm"))
        result["distill_seconds"] = time.perf_counter() - started
    print(f"{n} documents; static encoder {static}", file=sys.stderr, flush=True)

    def add(method, library, kept, seconds, peak, **extra):
        result["rows"].append({"method": method, "library": library, "kept": len(kept), "removed": n - len(kept),
                               "seconds": seconds, "docs_per_s": n / seconds, "peak_mb": peak, **extra})
        print(f"  {method} ({library}): removed {n - len(kept)} in {seconds:.1f} s", file=sys.stderr, flush=True)
        return set(kept)

    exact, seconds, peak = _isolated(salience_dedup, texts, False, False)
    add("exact", "salience", exact, seconds, peak)
    minhash, seconds, peak = _isolated(salience_dedup, texts, True, False)
    minhash = add("exact + MinHash 0.8", "salience", minhash, seconds, peak)
    theirs, seconds, peak = _isolated(datasketch_dedup, texts)
    theirs = add("MinHash 0.8", "datasketch 2.0", theirs, seconds, peak)
    result["minhash_agreement"] = len(minhash ^ theirs)
    for similarity in args.similarities:
        kept, seconds, peak = _isolated(salience_dedup, texts, False, True, static, similarity)
        add(f"exact + SemDeDup {similarity}", "salience (static encoder)", kept, seconds, peak)
    # quality of the clustered search, on the exact-deduplicated pool's vectors
    first = sorted(exact)
    vectors, embed_seconds, _ = _isolated(embed, [texts[i] for i in first], static)
    result["embed_seconds"] = embed_seconds
    minhash_dropped = {i for i in first if i not in minhash}
    quality = []
    for similarity in args.similarities:
        q = semantic_quality(vectors, similarity)
        dropped = {first[j] for j in np.flatnonzero(q.pop("groups") != np.arange(len(first)))}
        q["also_minhash"] = len(dropped & minhash_dropped)
        q["minhash_dropped"] = len(minhash_dropped)
        quality.append(q)
    result["quality"] = quality
    # the static encoder against MiniLM on a sample
    rng = np.random.default_rng(0)
    held_out = [i for i in first if i >= DEV_DOCUMENTS]  # the centring was chosen on the first ones
    sample = sorted(rng.choice(held_out, min(args.sample, len(held_out)), replace=False).tolist())
    minilm, minilm_seconds, _ = _isolated(embed, [texts[i] for i in sample], None)
    static_sample = vectors[np.searchsorted(first, sample)]
    comparison = []
    for similarity in args.similarities:
        a, b = have_a_neighbour(_centred(static_sample), similarity), have_a_neighbour(_centred(minilm), similarity)
        comparison.append({"similarity": similarity, "static": int(a.sum()), "minilm": int(b.sum()),
                           "both": int((a & b).sum())})
    result["sample"] = {"documents": len(sample), "minilm_seconds": minilm_seconds, "rows": comparison}
    return result


def render(result: dict, command: str, seconds: float) -> str:
    n = result["documents"]
    lines = ["## Semantic deduplication: SemDeDup beside exact and MinHash (salience, datasketch)", "",
             f"`{command}` ({seconds / 60:.0f} minutes, 2 cores). The DSIR pool, {n:,} documents; each method in a "
             "process of its own on the texts in memory (seconds and peak RSS its own)."
             + (f" The static encoder was distilled from MiniLM first ({result['distill_seconds']:.0f} s, not in the "
                "rows)." if "distill_seconds" in result else ""), "",
             "| method | library | removed | kept | seconds | documents/s | peak RSS MB |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['method']} | {r['library']} | {r['removed']:,} | {r['kept']:,} | {r['seconds']:.1f} | "
                     f"{r['docs_per_s']:,.0f} | {r['peak_mb']:.0f} |")
    lines += ["", f"salience's and datasketch's MinHash keep sets differ by {result['minhash_agreement']:,} documents.",
              "", "**SemDeDup's clustered search against all pairs** (the "
              f"exact-deduplicated pool embedded once, {result['embed_seconds']:.0f} s): documents in a duplicate group "
              "found within clusters, against the documents that have a neighbour at the threshold anywhere; and "
              "how many of SemDeDup's drops MinHash drops too.", "",
              "| similarity | dropped | in groups | with a neighbour anywhere | recall | decide s | all pairs s | "
              "also dropped by MinHash |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for q in result["quality"]:
        lines.append(f"| {q['similarity']} | {q['dropped']:,} | {q['in_groups']:,} | {q['with_a_neighbour']:,} | "
                     f"{q['recall']:.3f} | {q['decide_seconds']:.1f} | {q['all_pairs_seconds']:.1f} | "
                     f"{q['also_minhash']:,} of {q['minhash_dropped']:,} |")
    sample = result["sample"]
    lines += ["", f"**Static encoder against MiniLM** ({sample['documents']:,} documents drawn from the pool after its first "
              f"{DEV_DOCUMENTS:,}, where the centring was chosen; vectors centred; MiniLM "
              f"embedded them in {sample['minilm_seconds']:.0f} s): documents with a neighbour at the threshold.", "",
              "| similarity | static encoder | MiniLM | both |", "|---:|---:|---:|---:|"]
    for r in sample["rows"]:
        lines.append(f"| {r['similarity']} | {r['static']:,} | {r['minilm']:,} | {r['both']:,} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="read only the first documents of the pool")
    parser.add_argument("--similarities", type=lambda t: [float(v) for v in t.split(",")], default=[0.95, 0.9])
    parser.add_argument("--static-encoder", default=None, help="a distilled static encoder folder (default: distil "
                                                               "one into --work first)")
    parser.add_argument("--work", default="/tmp/salience-semdedup", help="where a distilled encoder is written")
    parser.add_argument("--sample", type=int, default=1000, help="documents the static encoder is compared to "
                                                                 "MiniLM on")
    return run_benchmark("semdedup.py", parser, run, render, argv)


if __name__ == "__main__":
    raise SystemExit(main())
