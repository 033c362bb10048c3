"""Outputs of every method family on the shared sets, as one JSON of digests: run it before and
after a refactor that must leave behaviour unchanged, and compare (``--compare OLD.json``).

It calls only the library's long-standing functions (``BM25``, ``extract_keyphrases_batch``,
``summarize``, ``fuse``, ``aggregate``, the selectors, the explainers, DSIR, dedup, pruning and
KV eviction on a small seeded model), so the same script runs on an older checkout::

    python bench/fingerprint.py --out after.json
    git worktree add /tmp/before <commit> && (cd /tmp/before && python /path/to/bench/fingerprint.py --out before.json)
    python bench/fingerprint.py --compare before.json after.json

Each entry is a digest of the outputs rounded to 9 significant digits (ids and order exact).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import zlib
from pathlib import Path

import numpy as np

from common import document_set, search_set, split_heading

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _digest(value) -> str:
    def clean(v):
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        if isinstance(v, (float, np.floating)):
            return float(f"{float(v):.9g}")
        if isinstance(v, np.ndarray):
            return clean(v.tolist())
        if isinstance(v, (np.integer,)):
            return int(v)
        return v

    return hashlib.sha256(json.dumps(clean(value), sort_keys=True).encode()).hexdigest()[:16]


def _scores(s) -> list:
    return [[str(i) for i in s.ids], [float(v) for v in s.values]]


def _jsonl(path: Path, n: int | None = None) -> list[dict]:
    out = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            out.append(json.loads(line))
            if n is not None and len(out) >= n:
                break
    return out


def search_and_ranking(out: dict) -> None:
    from salience import fuse
    from salience.core.aggregate import aggregate
    from salience.search import BM25

    root = SHARED / "search" / "scifact"
    _, dev_queries, _ = search_set(root, "dev")  # the dev split: nothing is chosen here, outputs only compared
    queries = [{"_id": q, "text": text} for q, text in list(dev_queries.items())[:60]]
    runs = {}
    for variant in ("lucene", "robertson", "atire", "bm25l", "bm25+", "tfidf"):
        index = BM25(variant=variant).index(root)
        results = index.search_batch([q["text"] for q in queries], k=20)
        runs[variant] = {q["_id"]: r for q, r in zip(queries, results)}
        out[f"search/{variant}"] = _digest([_scores(r) for r in results])
    subjects = list(runs["lucene"])
    as_dicts = [{q: dict(zip(runs[v][q].ids, runs[v][q].values.tolist())) for q in subjects} for v in runs]
    for method, extra in (("rrf", {}), ("borda", {}), ("combsum", {"normalize": "minmax"}),
                          ("combmnz", {"normalize": "zscore"}), ("combmax", {"normalize": "minmax"}),
                          ("combmin", {"normalize": "max"}), ("wsum", {"normalize": "minmax", "weights": [1, 2, 1, 1, 1, 1]})):
        fused = fuse(as_dicts, method=method, **extra)
        out[f"fusion/{method}"] = _digest([_scores(fused[q]) for q in subjects])
    try:
        from salience.search import Dense

        docs = _jsonl(root / "corpus.jsonl", 300)
        dense = Dense().index(docs)
        results = dense.search_batch([q["text"] for q in queries[:20]], k=10)
        out["search/dense"] = _digest([[r.ids, np.round(r.values, 5).tolist()] for r in results])
    except ImportError:
        pass
    rankings = [runs[v][subjects[0]].ids[:12] for v in runs]
    for method in ("borda", "copeland", "kemeny", "mc4", "pagerank", "winrate", "bradley_terry"):
        out[f"aggregate/{method}"] = _digest(_scores(aggregate(rankings, method=method)))


def selection(out: dict) -> None:
    from salience import Scores
    from salience.core import select

    rng = np.random.default_rng(0)
    s = Scores(rng.normal(size=200), ids=[f"i{i}" for i in range(200)])
    out["select/top_k"] = _digest(_scores(select.select_top_k(s, k=17)))
    out["select/threshold"] = _digest(_scores(select.select_threshold(s, threshold=0.3)))
    out["select/fraction"] = _digest(_scores(select.select_fraction(s, fraction=0.2)))
    probabilities = Scores(1 / (1 + np.exp(-s.values)), ids=s.ids)
    out["select/cutoff"] = _digest(_scores(select.select_cutoff(probabilities)))
    out["select/sample"] = _digest(_scores(select.select_sample(s, k=20, seed=3)))
    out["select/mmr"] = _digest(_scores(select.select_mmr(s.take(range(30)), np.corrcoef(rng.normal(size=(30, 8))),
                                                          k=10)))
    out["select/budget"] = _digest(_scores(select.select_budget(s, rng.integers(1, 9, 200).tolist(), budget=40)))


def judge_sorts(out: dict) -> None:
    from salience.core import sort
    from salience.core.judges import ScorerJudge

    rng = np.random.default_rng(1)
    strength = {f"d{i}": float(v) for i, v in enumerate(rng.normal(size=24))}
    items = list(strength)

    def judge():
        return ScorerJudge(lambda q, ids: [strength[i] + 0.3 * np.sin(len(q) * zlib.crc32(i.encode()) % 7) for i in ids])

    out["sort/allpairs"] = _digest(_scores(sort.allpairs(items, judge(), query="q")))
    out["sort/heapsort"] = _digest(_scores(sort.heapsort_top_k(items, judge(), k=5, query="q")))
    out["sort/bubble"] = _digest(_scores(sort.bubble_top_k(items, judge(), k=5, query="q")))
    out["sort/sliding_window"] = _digest(_scores(sort.sliding_window(items, judge(), window=6, stride=3, query="q")))
    out["sort/setwise"] = _digest(_scores(sort.setwise_top_k(items, judge(), k=5, query="q")))
    out["sort/jointrank"] = _digest(_scores(sort.jointrank(items, judge(), block_size=6, query="q")))
    out["sort/psc"] = _digest(_scores(sort.permutation_self_consistency(items[:8], judge(), shuffles=4, query="q")))


def keyphrases(out: dict) -> None:
    from salience.keywords.extract import extract_keyphrases_batch

    for name in ("inspec", "semeval2010", "wikinews_fr"):
        docs = document_set(SHARED / "keyphrase" / name, "dev")[: 40 if name != "semeval2010" else 8]
        texts = [d["text"] for d in docs]
        for method in ("yake", "rake", "tfidf", "textrank", "singlerank", "positionrank", "topicrank", "multipartite"):
            found = extract_keyphrases_batch(texts, k=10, method=method)
            out[f"keywords/{name}/{method}"] = _digest([_scores(s) for s in found])
        out[f"keywords/{name}/yake-corpus"] = _digest([_scores(s) for s in
                                                       extract_keyphrases_batch(texts, k=10, corpus_df=True)])


def summaries(out: dict) -> None:
    from salience.summarize import summarize

    docs = document_set(SHARED / "summarize" / "bbc_news_summary_100", "dev")[:30]
    for method in ("lexrank", "textrank", "centroid", "lead"):
        result = [summarize(d["text"], sentences=3, method=method) for d in docs]
        out[f"summarize/{method}"] = _digest([[r.sentences, _scores(r.scores)] for r in result])


def data(out: dict) -> None:
    import gzip

    from salience.data import HashedNgrams, ImportanceResampler
    from salience.data.dedup import dedup_texts, minhash_signatures

    with gzip.open(SHARED / "dsir" / "raw_docs.jsonl.gz", "rt", encoding="utf-8") as f:
        raw = [json.loads(next(f))["text"] for _ in range(600)]
    target = [d["text"] for d in _jsonl(SHARED / "dsir" / "target_biomed.jsonl", 200)]
    scores = ImportanceResampler(HashedNgrams(buckets=4096)).fit(target, raw).log_weights(raw)
    out["data/dsir"] = _digest(_scores(scores))
    out["data/minhash"] = _digest(minhash_signatures(raw[:100]))
    out["data/dedup"] = _digest(np.asarray(dedup_texts(raw + raw[:20], near=True, threshold=0.8)))


def explainers(out: dict) -> None:
    from salience.core.base import create

    rng = np.random.default_rng(2)
    w = rng.normal(size=6)

    def model(rows):
        rows = np.asarray(rows, dtype=np.float64)
        return rows @ w + np.tanh(rows[:, 0] * rows[:, 1])

    rows = rng.normal(size=(3, 6))
    for name in ("exact_shapley", "kernel_shap", "permutation_shapley", "banzhaf", "occlusion", "lime"):
        attribution = create("explain", name, model=model).attribute(rows, baselines=np.zeros((1, 6)), n_samples=64,
                                                                      seed=0)
        out[f"explain/{name}"] = _digest(attribution.values)


def compression(out: dict) -> None:
    try:
        import torch
        import transformers
    except ImportError:
        return
    from salience.compress import calibration_windows, prune
    from salience.compress import prefill

    def model():
        torch.manual_seed(0)
        config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
        return transformers.LlamaForCausalLM(config).eval()

    ids = np.random.default_rng(3).integers(0, 64, 4000)
    windows = calibration_windows(ids, seqlen=32, n_samples=8)
    for method, extra in (("magnitude", {}), ("wanda", {}), ("lamp", {}), ("taylor", {}), ("sparsegpt", {}),
                          ("wanda", {"pattern": "2:4", "sparsity": None})):
        m = model()
        options = {"sparsity": 0.5, **extra}
        prune(m, method=method, calibration=windows, **options)
        key = f"weights/{method}" + ("-2:4" if "pattern" in extra else "")
        out[key] = _digest([p.detach().double().numpy().round(7).ravel()[::97].tolist() for p in m.parameters()])
    m = model()
    for policy in ("streaming_llm", "h2o", "snapkv", "tova", "key_norm", "vatp", "caote"):
        read = prefill(m, ids[:240], policy=policy, budget=0.5)
        out[f"kv/{policy}"] = _digest([layer.keys.double().numpy().round(7).ravel()[::31].tolist()
                                       for layer in read.cache.layers])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the digests here")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two digest files")
    args = parser.parse_args(argv)
    if args.compare:
        before, after = (json.loads(Path(p).read_text()) for p in args.compare)
        same = [k for k in before if after.get(k) == before[k]]
        differ = [k for k in before if k in after and after[k] != before[k]]
        missing = [k for k in before if k not in after]
        print(f"{split_heading('dev')}: {len(same)} of {len(before)} outputs identical; differ: {differ or 'none'}; "
              f"missing: {missing or 'none'}")
        return 1 if differ or missing else 0
    out: dict = {}
    for part in (search_and_ranking, selection, judge_sorts, keyphrases, summaries, data, explainers, compression):
        part(out)
        print(f"{part.__name__}: done ({len(out)} outputs)", file=sys.stderr, flush=True)
    text = json.dumps(out, indent=1, sort_keys=True)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
