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
  with MinHash's groups; and a sample of its pairs embedded by MiniLM itself (do they look
  like duplicates to the model the static encoder was distilled from?).

SemDeDup centres the vectors (salience.data.semantic_dedup says why): a choice made on the
pool's first 1,500 documents against MiniLM, so the pairs MiniLM checks lie after them.

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
    from salience.core.cluster import unit_rows

    return unit_rows(vectors - vectors.mean(axis=0))


def in_groups(groups: np.ndarray) -> np.ndarray:
    """Rows in a duplicate group: dropped, or kept for one dropped."""
    dropped = groups != np.arange(len(groups))
    member = dropped.copy()
    member[groups[dropped]] = True
    return member


def minhash_groups(texts, threshold: float = 0.8, num_perm: int = 128) -> np.ndarray:
    """salience's MinHash LSH groups (each row's kept representative) of ``texts``."""
    from salience.data.dedup import band_hashes, lsh_params, minhash_signatures, near_duplicate_groups

    signatures = minhash_signatures(texts, num_perm)
    bands, rows = lsh_params(threshold, num_perm)
    return near_duplicate_groups(band_hashes(signatures, bands, rows),
                                 lambda i, j: float(np.mean(signatures[i] == signatures[j])), threshold)


def semantic_quality(vectors: np.ndarray, similarity: float, lexical: np.ndarray) -> tuple[dict, np.ndarray]:
    from salience.data.semantic_dedup import semantic_duplicate_groups

    started = time.perf_counter()
    groups = semantic_duplicate_groups(vectors, similarity=similarity)
    seconds = time.perf_counter() - started
    started = time.perf_counter()
    everywhere = have_a_neighbour(_centred(vectors), similarity)
    all_pairs_seconds = time.perf_counter() - started
    found, lexical_members = in_groups(groups), in_groups(lexical)
    return ({"similarity": similarity, "dropped": int((groups != np.arange(len(groups))).sum()),
             "in_groups": int(found.sum()), "with_a_neighbour": int(everywhere.sum()),
             "recall": float(found.sum() / max(everywhere.sum(), 1)), "decide_seconds": seconds,
             "all_pairs_seconds": all_pairs_seconds, "minhash_members": int(lexical_members.sum()),
             "minhash_covered": int((lexical_members & found).sum())}, groups)


def run(args) -> dict:
    texts = read_pool(args.limit)
    n = len(texts)
    static = args.static_encoder
    result = {"documents": n, "rows": []}
    if static is None:
        from salience.models.distill import distill

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
    first = np.array(sorted(exact))
    unique_texts = [texts[i] for i in first.tolist()]
    vectors, embed_seconds, _ = _isolated(embed, unique_texts, static)
    result["embed_seconds"] = embed_seconds
    lexical = minhash_groups(unique_texts)
    result["quality"], result["against_minilm"] = [], []
    rng = np.random.default_rng(0)
    for similarity in args.similarities:
        quality, groups = semantic_quality(vectors, similarity, lexical)
        result["quality"].append(quality)
        # the static encoder's pairs as MiniLM sees them (pairs past the documents the centring was chosen on)
        pairs = [(j, int(groups[j])) for j in np.flatnonzero(groups != np.arange(len(groups))).tolist()
                 if first[j] >= DEV_DOCUMENTS and first[groups[j]] >= DEV_DOCUMENTS]
        pairs = [pairs[i] for i in rng.choice(len(pairs), min(args.pairs, len(pairs)), replace=False)]
        minilm, minilm_seconds, _ = _isolated(embed, [unique_texts[a] for a, _ in pairs] +
                                              [unique_texts[b] for _, b in pairs], None)
        cosine = (minilm[: len(pairs)] * minilm[len(pairs) :]).sum(axis=1)
        result["against_minilm"].append({"similarity": similarity, "pairs": len(pairs), "seconds": minilm_seconds,
                                         "median": float(np.median(cosine)),
                                         **{f"at_least_{t}": float(np.mean(cosine >= t)) for t in (0.95, 0.9, 0.8)}})
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
              "found within clusters, against the documents that have a neighbour at the threshold anywhere (all "
              "pairs); and the documents in MinHash 0.8 groups (same pool) that SemDeDup also puts in a group.", "",
              "| similarity | dropped | in groups | with a neighbour anywhere | recall | decide s | all pairs s | "
              "MinHash group members also in a SemDeDup group |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for q in result["quality"]:
        lines.append(f"| {q['similarity']} | {q['dropped']:,} | {q['in_groups']:,} | {q['with_a_neighbour']:,} | "
                     f"{q['recall']:.3f} | {q['decide_seconds']:.1f} | {q['all_pairs_seconds']:.1f} | "
                     f"{q['minhash_covered']:,} of {q['minhash_members']:,} |")
    lines += ["", "**The static encoder's pairs as MiniLM sees them** (a sample of SemDeDup's dropped documents, each "
              f"with the document kept for it, both after the pool's first {DEV_DOCUMENTS:,} where the centring was "
              "chosen; MiniLM's own cosine, uncentred):", "",
              "| similarity | pairs | MiniLM median cosine | >= 0.95 | >= 0.9 | >= 0.8 | MiniLM seconds |",
              "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["against_minilm"]:
        lines.append(f"| {r['similarity']} | {r['pairs']} | {r['median']:.3f} | {r['at_least_0.95']:.2f} | "
                     f"{r['at_least_0.9']:.2f} | {r['at_least_0.8']:.2f} | {r['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="read only the first documents of the pool")
    parser.add_argument("--similarities", type=lambda t: [float(v) for v in t.split(",")], default=[0.95, 0.9])
    parser.add_argument("--static-encoder", default=None, help="a distilled static encoder folder (default: distil "
                                                               "one into --work first)")
    parser.add_argument("--work", default="/tmp/salience-semdedup", help="where a distilled encoder is written")
    parser.add_argument("--pairs", type=int, default=150, help="SemDeDup pairs per threshold MiniLM embeds")
    return run_benchmark("semdedup.py", parser, run, render, argv)


if __name__ == "__main__":
    raise SystemExit(main())
