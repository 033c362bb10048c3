"""Training-data selection benchmark: salience's DSIR against the reference DSIR, one run.

Data: ../shared/data/dsir (raw_docs.jsonl.gz; targets biomed with k=5000 and wikipedia with
k=2000). The reference (`pip install data-selection==1.0.3 "nltk<3.10"`) reads plain jsonl and
silently drops documents of fewer than 100 wordpunct tokens; so that both systems see the same
eligible pool, the pool is first filtered by that rule (nltk's WordPunctTokenizer) into a plain
jsonl file that both read, and both get no length filter of their own.

Per system and target: precision (share of selected documents whose `domain` is the target's),
recall (selected target-domain documents / target-domain documents in the pool), KL reduction
(one protocol for both: salience's hashed unigram+bigram features, 10,000 buckets), end-to-end
documents per second over the pool (fit, weights, selection, writing), 2 workers each, and peak
memory (the largest resident set among the process and its children).

    python bench/data.py --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from salience.data import HashedNgrams, kl_reduction, select_documents  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "dsir"
TARGETS = {"biomed": 5000, "wikipedia": 2000}


def eligible_pool(work: Path) -> tuple[Path, list[dict]]:
    from nltk.tokenize import WordPunctTokenizer

    tokenize = WordPunctTokenizer().tokenize
    pool, records = work / "pool.jsonl", []
    with gzip.open(DATA / "raw_docs.jsonl.gz", "rt", encoding="utf-8") as fh, open(pool, "w", encoding="utf-8") as out:
        for line in fh:
            record = json.loads(line)
            if len(tokenize(record["text"].lower())) >= 100:
                out.write(line if line.endswith("\n") else line + "\n")
                records.append({"id": record["id"], "domain": record["domain"]})
    return pool, records


def isolated(fn, *args) -> tuple[list[dict], float, float, dict]:
    """Run ``fn`` in a forked process: (selected, seconds, peak resident MB of it and its workers, details)."""
    import multiprocessing

    result_file = args[-1] / "result.json"

    def child():
        selected, seconds, info = fn(*args)
        usage = resource.getrusage
        info.update({"main_mb": usage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                     "worker_mb": usage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024})
        peak = max(info["main_mb"], info["worker_mb"])
        result_file.write_text(json.dumps({"selected": selected, "seconds": seconds, "peak_mb": peak, "info": info}))

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join()
    if process.exitcode != 0:
        raise RuntimeError(f"{fn.__name__} failed with exit code {process.exitcode}")
    payload = json.loads(result_file.read_text())
    return payload["selected"], payload["seconds"], payload["peak_mb"], payload["info"]


def run_reference(pool: Path, target: Path, k: int, work: Path) -> tuple[list[dict], float]:
    from data_selection import HashedNgramDSIR

    start = time.perf_counter()
    dsir = HashedNgramDSIR([str(pool)], [str(target)], cache_dir=str(work / "cache"), num_proc=2, min_example_length=0)
    dsir.fit_importance_estimator(num_tokens_to_fit="auto")
    dsir.compute_importance_weights()
    dsir.resample(out_dir=str(work / "out"), num_to_sample=k, cache_dir=str(work / "resample_cache"))
    seconds = time.perf_counter() - start
    selected = []
    for path in sorted((work / "out").glob("*.jsonl")):
        selected += [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    return selected, seconds, {}


def run_salience(pool: Path, target: Path, k: int, work: Path) -> tuple[list[dict], float]:
    start = time.perf_counter()
    out = work / "selected.jsonl"
    report = select_documents([target], [pool], out, k=k, n_jobs=2, work_dir=work / "shards", keep_work=True)
    seconds = time.perf_counter() - start
    cache_bytes = sum(f.stat().st_size for f in (work / "shards").glob("*.npz"))
    info = {"seconds": report.seconds, "shards": report.shards, "pool": report.pool, "cache_bytes": cache_bytes}
    return [json.loads(line) for line in open(out, encoding="utf-8")], seconds, info


def measure(label: str, selected: list[dict], seconds: float, pool_records: list[dict], target_name: str,
            target_texts: list[str], pool_counts, features: HashedNgrams) -> dict:
    in_pool = sum(r["domain"] == target_name for r in pool_records)
    hits = sum(r["domain"] == target_name for r in selected)
    target_counts = features.transform(target_texts).counts(features.buckets)
    selected_counts = 0
    texts = [r["text"] for r in selected]
    for lo in range(0, len(texts), 2000):
        selected_counts = selected_counts + features.transform(texts[lo : lo + 2000]).counts(features.buckets)
    return {"target": target_name, "system": label, "k": len(selected), "precision": hits / max(len(selected), 1),
            "recall": hits / max(in_pool, 1), "kl_reduction": kl_reduction(target_counts, pool_counts, selected_counts),
            "docs_per_second": len(pool_records) / seconds, "seconds": seconds}


def render(rows: list[dict], command: str, pool_size: int, memory: dict) -> str:
    lines = ["## Data selection (`bench/data.py`)", "", f"Command: `{command}`", "",
             f"Pool: the {pool_size:,} documents of `raw_docs.jsonl.gz` with >= 100 wordpunct tokens (the reference's "
             "default filter, applied up front so both systems see the same pool), as plain jsonl. Both systems: "
             "unigrams + bigrams in 10,000 buckets, Gumbel top-k, 2 workers; KL reduction measured the same way for both "
             "(salience's features). docs/s = pool size / end-to-end seconds (fit, weights, selection, writing).", "",
             "| target | system | k | precision | recall | KL reduction | docs/s | x reference |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        ref = next(r for r in rows if r["target"] == row["target"] and r["system"] == "reference DSIR")
        lines.append(f"| {row['target']} | {row['system']} | {row['k']:,} | {row['precision']:.3f} | {row['recall']:.3f} | "
                     f"{row['kl_reduction']:.3f} | {row['docs_per_second']:,.0f} | "
                     f"{row['docs_per_second'] / ref['docs_per_second']:.1f} |")
    lines += ["", "Peak resident memory (MB, the run's process or its largest worker): " + ", ".join(f"{k} {v:,.0f}" for k, v in memory.items()) + ".", "",
              "Targets (issue 5): precision and KL reduction >= the reference on both targets; >= 20x its docs/s.", "",
              "| target | precision >= ref | KL >= ref | >= 20x docs/s |", "|---|---|---|---|"]
    for name in TARGETS:
        ours = next(r for r in rows if r["target"] == name and r["system"] == "salience dsir")
        ref = next(r for r in rows if r["target"] == name and r["system"] == "reference DSIR")
        lines.append(f"| {name} | {'yes' if ours['precision'] >= ref['precision'] else 'no'} "
                     f"({ours['precision']:.3f} vs {ref['precision']:.3f}) | "
                     f"{'yes' if ours['kl_reduction'] >= ref['kl_reduction'] else 'no'} "
                     f"({ours['kl_reduction']:.3f} vs {ref['kl_reduction']:.3f}) | "
                     f"{'yes' if ours['docs_per_second'] >= 20 * ref['docs_per_second'] else 'no'} "
                     f"({ours['docs_per_second'] / ref['docs_per_second']:.1f}x) |")
    lines += ["", scaling_estimate(rows)]
    return "\n".join(lines) + "\n"


def scaling_estimate(rows: list[dict]) -> str:
    """One billion documents, extrapolated from this run's per-shard figures (salience dsir, biomed)."""
    row = next(r for r in rows if r["system"] == "salience dsir")
    info = row["info"]
    pool, shards, t = info["pool"], info["shards"], info["seconds"]
    per_doc = {phase: seconds / pool for phase, seconds in t.items()}
    billion = 1e9
    hash_hours = per_doc["hash_raw"] * billion / 3600  # with the 2 workers of this run
    rest_hours = (per_doc["score_and_select"] + per_doc["write"]) * billion / 3600
    cache_gb = info["cache_bytes"] / pool * billion / 1e9
    return "\n".join([
        "### Scaling estimate: one billion documents",
        "",
        f"Measured here (biomed run): {pool:,} documents in {shards} shards of 8 MB "
        f"({pool / shards:,.0f} documents a shard); hashing {t['hash_raw'] / shards:.2f} s a shard with 2 workers "
        f"({per_doc['hash_raw'] * 1e6:.0f} us a document), scoring (on the workers) and selection {per_doc['score_and_select'] * 1e6:.0f} us, "
        f"writing {per_doc['write'] * 1e6:.0f} us a document; peak memory {info['main_mb']:,.0f} MB for the main process and "
        f"{info['worker_mb']:,.0f} MB for the largest worker; shard cache {info['cache_bytes'] / pool:,.0f} bytes a document.",
        "",
        f"For 10^9 documents like these: hashing about {hash_hours:,.0f} hours on 2 workers, i.e. "
        f"{hash_hours * 2:,.0f} worker-hours, which divide across workers (local processes or a Ray cluster: "
        f"{hash_hours * 2 / 64:,.1f} hours on 64); scoring, selection and writing about {rest_hours:,.0f} hours, most of it the main "
        f"process re-reading every shard to write the selection (sequential; the one part that does not divide). Memory per worker stays at one shard "
        f"in flight (the figure above, independent of the corpus); the main process holds 16 bytes a document (a float64 "
        f"score, shard and place as int32; 20 with a label field): 16 GB for 10^9 documents, plus "
        f"{cache_gb:,.0f} GB of shard cache on disk.",
        ""])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, default=None)
    parser.add_argument("--skip-reference", action="store_true")
    args = parser.parse_args(argv)
    features = HashedNgrams()
    rows, memory = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pool, pool_records = eligible_pool(tmp)
        pool_texts = [json.loads(line)["text"] for line in open(pool, encoding="utf-8")]
        pool_counts = sum(features.transform(pool_texts[lo : lo + 2000]).counts(features.buckets)
                          for lo in range(0, len(pool_texts), 2000))
        del pool_texts
        for name, k in TARGETS.items():
            target = DATA / f"target_{name}.jsonl"
            target_texts = [json.loads(line)["text"] for line in open(target, encoding="utf-8")]
            systems = [("salience dsir", run_salience)] + ([] if args.skip_reference else [("reference DSIR", run_reference)])
            for label, fn in systems:
                work = tmp / f"{name}-{label.split()[0]}"
                work.mkdir()
                selected, seconds, peak, info = isolated(fn, pool, target, k, work)
                memory[label] = max(memory.get(label, 0.0), peak)
                row = measure(label, selected, seconds, pool_records, name, target_texts, pool_counts, features)
                row["info"] = info
                rows.append(row)
                print(f"  {name:<10} {label:<16} precision {row['precision']:.3f} recall {row['recall']:.3f} "
                      f"KL {row['kl_reduction']:.3f} {row['docs_per_second']:,.0f} docs/s", file=sys.stderr, flush=True)
                shutil.rmtree(work, ignore_errors=True)
    command = "python bench/data.py" + (f" --write {args.write}" if args.write else "")
    text = render(rows, command, len(pool_records), memory) if not args.skip_reference else json.dumps(rows, indent=1)
    print(text)
    if args.write and not args.skip_reference:
        sys.path.insert(0, str(ROOT / "bench"))
        from search import write_section

        write_section(args.write, text, marker="bench/data.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
