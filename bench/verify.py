"""Was the importance real? The removal protocol (``salience.verify``) over the verifiers built so
far, each on data that ships or the shared sets' test split, with random scores beside them.

1. **sentences**: every summarizer on the BBC set's **test split** (documents of 4 sentences or
   more): per document the content left (tf-idf cosine with the whole) as its top sentences go,
   against 20 random orders; across documents, each document's area against its random orders'
   mean, paired (Fisher's randomization test).
2. **examples**: scikit-learn's breast_cancer, wine and digits (standardised; 200 training rows
   with 10% of their labels flipped, 200 test rows; wine: 89 and 89; no split is shared for them,
   and nothing was tuned on them): each valuation method's values verified with the model they are for (KNN-Shapley:
   a 10-nearest-neighbour refit; leave-one-out and Data Banzhaf: logistic regression), against
   20 random removal orders up to half the rows; random values beside them.
3. **features**: a logistic regression on breast_cancer (trained on 300 rows); for 30 test rows,
   the probability of the class it predicts as features take their training mean, ordered by the
   exact attribution of the linear logit (w x (x - mean)), by Kernel SHAP (salience's, 256
   samples) and at random; the deletion curve written out as Quantus computes it (the model on
   the row with its top-k features replaced) beside the protocol's, the largest difference.

4. **layers**: SmolLM2-135M's 30 decoder layers scored on windows of the first half of the
   standard library's docstrings (block influence, the default, and perplexity change) and at
   random; verified on 4 windows of 128 tokens of the second half, removal up to half the layers
   in 5 steps; beside it, the scores' Spearman correlation with each layer's measured
   one-removed perplexity change (``--no-layers`` leaves it out).

Costs are outcome evaluations (refits, model calls, forward passes); the verdict is at
alpha = 0.01.

    python bench/verify.py --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import SHARED_DATA, document_set, run_benchmark, split_heading  # noqa: E402
from verify_parts import compress, game, keyphrases, passages, point_removal_parity  # noqa: E402

from salience.core.verify import subject_seed  # noqa: E402

BBC = SHARED_DATA / "summarize" / "bbc_news_summary_100"


def _sentences(args) -> list[dict]:
    from salience.core.base import create
    from salience.core.verify import verify_subjects
    from salience.summarize import score_sentences, split_sentences

    texts = [[s.text for s in split_sentences(d["text"])] for d in document_set(BBC, "test")]
    texts = [t for t in texts if len(t) >= 4]
    verifier = create("verify", "sentences", language="en", n_random=args.random)
    rng = np.random.default_rng(0)
    rows = []
    for method in ("lexrank", "textrank", "centroid", "lead", "random"):
        started = time.perf_counter()
        checks = verifier.verify_batch([(rng.random(len(t)) if method == "random" else score_sentences(t, method=method),
                                         {"sentences": t}) for t in texts])
        together = verify_subjects(checks)
        rows.append({"method": method, "documents": len(checks), "faithful": sum(c.verdict == "faithful" for c in checks),
                     "inverted": sum(c.verdict == "inverted" for c in checks), "verdict": together.verdict,
                     "p": together.p_value, "gap": together.gap, "ci": together.ci95,
                     "evaluations": together.evaluations / len(checks), "seconds": time.perf_counter() - started})
    return rows


def _examples(args) -> list[dict]:
    from sklearn.neighbors import KNeighborsClassifier

    from salience.core.base import create

    rows = []
    for name in ("breast_cancer", "wine", "digits"):
        train, test = game(name)
        methods = {"knn_shapley": (create("valuation", "knn_shapley", k=10), KNeighborsClassifier(10)),
                   "loo": (create("valuation", "loo"), None),
                   "data_banzhaf": (create("valuation", "data_banzhaf", budget=500, seed=0), None)}
        rng = np.random.default_rng(1)
        for method, (valuation, model) in list(methods.items()) + [("random", (None, None))]:
            started = time.perf_counter()
            values = rng.random(len(train[1])) if valuation is None else valuation.score(train, test).values
            valued = time.perf_counter() - started
            started = time.perf_counter()
            check = create("verify", "examples", model=model, n_random=args.random).verify(values, train=train,
                                                                                            test=test)
            rows.append({"set": name, "method": method, "model": "knn" if model is not None else "logistic",
                         "verdict": check.verdict, "p": check.p_value, "gap": check.gap, "ci": check.ci95,
                         "reversed_gain": check.areas["reversed"] - check.areas["random_mean"],
                         "fits": check.costs["fits"], "valuation_seconds": valued,
                         "seconds": time.perf_counter() - started})
    return rows


def _features(args) -> dict:
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression

    from salience.core.base import create
    from salience.core.verify import verify_subjects

    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    order = np.random.default_rng(0).permutation(len(y))
    train, rows = order[:300], order[300:330]
    model = LogisticRegression(max_iter=1000).fit(X[train], y[train])
    mean = X[train].mean(axis=0)
    verifier = create("verify", "features", steps=X.shape[1], n_random=args.random)
    rng = np.random.default_rng(2)
    out, largest = [], 0.0
    for method in ("exact", "kernel_shap", "random"):
        started = time.perf_counter()
        checks = []
        for i in rows:
            x = X[i]
            target = int(model.predict(x[None])[0])
            prob = lambda batch, t=target: model.predict_proba(np.atleast_2d(batch))[:, t]  # noqa: E731
            if method == "exact":
                scores = model.coef_[0] * (x - mean) * (1 if target == 1 else -1)
            elif method == "kernel_shap":
                scores = create("explain", "kernel_shap", model=prob).score(x, baselines=mean, n_samples=256,
                                                                             seed=0).values
            else:
                scores = rng.normal(size=len(x))
            check = verifier.set_params(seed=subject_seed(0, len(checks))).verify(scores, model=prob, x=x,
                                                                                  baseline=mean)
            checks.append(check)
            # Quantus' deletion written out: the model on the row with its k best features replaced
            ranked = np.argsort(-np.asarray(scores), kind="stable")
            written = []
            for fraction in check.fractions:
                k = int(round(fraction * len(x)))
                row = x.copy()
                row[ranked[:k]] = mean[ranked[:k]]
                written.append(prob(row)[0])
            largest = max(largest, float(np.abs(np.array(written) - check.curves["scores"]).max()))
        together = verify_subjects(checks)
        out.append({"method": method, "rows": len(checks), "faithful": sum(c.verdict == "faithful" for c in checks),
                    "verdict": together.verdict, "p": together.p_value, "gap": together.gap, "ci": together.ci95,
                    "calls": together.evaluations / len(checks), "seconds": time.perf_counter() - started})
    return {"rows": out, "largest_difference": largest}


def _layers(args) -> list[dict]:
    import torch

    from salience.compress import calibration_windows, stdlib_docstrings
    from salience.compress.evaluate import windows as consecutive_windows
    from salience.core.base import create
    from salience.models.lm import load_causal_lm

    torch.set_num_threads(2)
    model, tokenizer = load_causal_lm("smollm2")
    ids = tokenizer.encode(stdlib_docstrings(max_chars=400_000), add_special_tokens=False)
    half = len(ids) // 2
    scoring = calibration_windows(ids[:half], seqlen=128, n_samples=8, seed=0)
    held_out = consecutive_windows(ids[half:], 128, 4)
    verifier = create("verify", "layers", steps=5, n_random=args.random)
    rows = []
    measured = None
    for method in ("block_influence", "perplexity_change", "random"):
        started = time.perf_counter()
        scores = (np.random.default_rng(3).random(30) if method == "random"
                  else create("layers", method).score(model, scoring).values)
        scored = time.perf_counter() - started
        started = time.perf_counter()
        check = verifier.set_params(one_removed=measured is None).verify(scores, model=model, windows=held_out)
        if measured is None:
            measured = np.array(check.extras["one_removed"]["perplexity_change"])
        from salience.core.correlation import spearman_rho

        rows.append({"method": method, "verdict": check.verdict, "p": check.p_value, "gap": check.gap,
                     "ci": check.ci95, "rho": float(spearman_rho(scores, measured)),
                     "passes": check.costs["forward_passes"], "scoring_seconds": scored,
                     "seconds": time.perf_counter() - started})
    return rows


def run(args) -> dict:
    parts = set(args.parts.split(","))
    return {"sentences": _sentences(args) if "sentences" in parts else [],
            "examples": _examples(args) if "examples" in parts else [],
            "point_removal": point_removal_parity(args) if "examples" in parts else None,
            "features": _features(args) if "features" in parts else None,
            "keyphrases": keyphrases(args) if "keyphrases" in parts else None,
            "passages": passages(args) if "passages" in parts else None,
            "layers": _layers(args) if "layers" in parts else [],
            "compress": compress(args) if "compress" in parts else None, "random": args.random}


def _p(value: float) -> str:
    return f"{value:.2g}" if value >= 1e-4 else "< 1e-4"


def _ci(r: dict) -> str:
    return f"{r['gap']:+.4f} ({r['ci'][0]:+.4f} to {r['ci'][1]:+.4f})"


def render(result: dict, command: str, seconds: float) -> str:
    p = _p
    lines = ["## Was the importance real? The removal protocol (`bench/verify.py`)", "",
             f"Command: `{command}` ({seconds:.0f} s). Verdicts at alpha = 0.01 against {result['random']} random "
             "orders per subject; across subjects, each subject's area against its random orders' mean, paired "
             "(Fisher's randomization test). Nothing here was tuned: every verifier and scorer at its defaults.", ""]
    lines += _summary(result)
    if result["sentences"]:
        lines += [f"**Summary sentences, BBC {split_heading('test')}** (content left: tf-idf cosine of the remaining "
                  "sentences with the whole; gap: area above the random orders' mean, in cosine)", "",
                  "| summarizer | documents | faithful alone | inverted alone | across documents | p | gap (95% CI) | "
                  "evaluations / document | seconds |", "|---|---:|---:|---:|---|---:|---|---:|---:|"]
        for r in result["sentences"]:
            lines.append(f"| {r['method']}{' (default)' if r['method'] == 'lexrank' else ''} | {r['documents']} | "
                         f"{r['faithful']} | {r['inverted']} | {r['verdict']} | {p(r['p'])} | {_ci(r)} | "
                         f"{r['evaluations']:.0f} | {r['seconds']:.1f} |")
        lines.append("")
    if result["examples"]:
        lines += ["**Training examples** (point removal up to half the rows, the model the values are for refitted "
                  "at every step; gap in test accuracy area; reversed: the low-valued-first curve above random's)", "",
                  "| set | values | model | verdict | p | gap (95% CI) | reversed - random | refits | seconds |",
                  "|---|---|---|---|---:|---|---:|---:|---:|"]
        for r in result["examples"]:
            lines.append(f"| {r['set']} | {r['method']} | {r['model']} | {r['verdict']} | {p(r['p'])} | {_ci(r)} | "
                         f"{r['reversed_gain']:+.4f} | {r['fits']} | {r['seconds']:.1f} |")
        removal = result["point_removal"]
        lines += ["", "Parity with pyDVL 0.10's point-removal experiment (`compute_removal_score`, best first, its own "
                  "refits and accuracy, run in `.venv-pydvl`): " + (
                      f"{removal['curves']} curves ({removal['points']} points; KNN-Shapley with the 10-NN model and "
                      f"leave-one-out with logistic regression on the three sets), largest difference "
                      f"{removal['largest']:.1e}." if removal else "not run (pass --pydvl-python)."), ""]
    features = result["features"]
    if features:
        lines += ["**Input features** (breast_cancer, logistic regression, 30 test rows; the predicted class's "
                  "probability as features take their training mean)", "",
                  "| attribution | rows | faithful alone | across rows | p | gap (95% CI) | model calls / row | seconds |",
                  "|---|---:|---:|---|---:|---|---:|---:|"]
        for r in features["rows"]:
            lines.append(f"| {r['method']} | {r['rows']} | {r['faithful']} | {r['verdict']} | {p(r['p'])} | {_ci(r)} | "
                         f"{r['calls']:.0f} | {r['seconds']:.1f} |")
        lines += ["", "Parity: the protocol's deletion curve against Quantus' formula written out (the model on the "
                  "row with its top-k features replaced), largest difference over every row and step: "
                  f"{features['largest_difference']:.1e}.", ""]
    lines += _keyphrase_lines(result.get("keyphrases"))
    lines += _passage_lines(result.get("passages"))
    if result["layers"]:
        lines += ["**Decoder layers** (SmolLM2-135M, 30 layers; held-out log perplexity on 4 windows of 128 tokens "
                  "of the docstrings' second half as up to half the layers go; rho: Spearman with each layer's measured "
                  "one-removed perplexity change)", "",
                  "| layer scores | verdict | p | gap (95% CI) | rho | forward passes | seconds |",
                  "|---|---|---:|---|---:|---:|---:|"]
        for r in result["layers"]:
            lines.append(f"| {r['method']}{' (default)' if r['method'] == 'block_influence' else ''} | {r['verdict']} | "
                         f"{p(r['p'])} | {_ci(r)} | {r['rho']:+.3f} | {r['passes']} | {r['seconds']:.0f} |")
        lines.append("")
    lines += _compress_lines(result.get("compress"))
    return "\n".join(lines) + "\n"


def _summary(result: dict) -> list[str]:
    """Each unit kind's default: faithful on test or not, in one line each."""
    out = []
    defaults = [("sentences", "lexrank", result["sentences"]), ("examples (KNN-Shapley, breast_cancer)", "knn_shapley",
                [r for r in result["examples"] if r["set"] == "breast_cancer"])]
    if result.get("features"):
        defaults.append(("features (exact, breast_cancer)", "exact", result["features"]["rows"]))
    if result.get("keyphrases"):
        defaults += [(f"keyphrases ({r['set']})", "yake", [r]) for r in result["keyphrases"]["rows"]
                     if r["method"] == "yake"]
    if result.get("passages"):
        defaults.append(("passages (SciFact)", "bm25", result["passages"]["rows"]))
    if result["layers"]:
        defaults.append(("layers (SmolLM2)", "block_influence", result["layers"]))
    if result.get("compress"):
        for unit, method in (("attention heads", "magnitude (default)"), (f"weights ({result['compress']['module']})",
                                                                          "wanda (default)")):
            defaults.append((unit, method, [r for r in result["compress"]["rows"] if r["unit"] == unit]))
    for unit, method, rows in defaults:
        row = next((r for r in rows if r["method"] in (method, f"{method} (default)")), None)
        if row is not None:
            out.append(f"- {unit}: the default ({method.replace(' (default)', '')}) is **{row['verdict']}** "
                       f"(p {_p(row['p'])}).")
    return (["Summary, each unit kind's default on test:", ""] + out + [""]) if out else []


def _keyphrase_lines(part) -> list[str]:
    if not part:
        return []
    lines = [f"**Keyphrases, {part['split']}s** (each document searched by its title among the split's "
             "documents as its top 20 keyphrases are deleted from it; gap: BM25 margin area above random's; F1@10 "
             "against the gold keyphrases)", "",
             "| set | extractor | documents | faithful alone | across documents | p | gap (95% CI) | F1@10 | seconds |",
             "|---|---|---:|---:|---|---:|---|---:|---:|"]
    for r in part["rows"]:
        lines.append(f"| {r['set']} | {r['method']}{' (default)' if r['method'] == 'yake' else ''} | {r['documents']} | "
                     f"{r['faithful']} | {r['verdict']} | {_p(r['p'])} | {_ci(r)} | {r['f1']:.3f} | "
                     f"{r['seconds']:.1f} |")
    lines += ["", "Agreement of the label-free check with the gold labels (Spearman of each document's gap with its "
              "F1@10, the three extractors pooled): " + "; ".join(
                  f"{a['set']} {a['rho']:+.3f} over {a['pairs']} documents" for a in part["agreement"]) + ".", "",
              f"Embedding outcome (cosine of the rest with the whole, all-MiniLM-L6-v2), first "
              f"{part['embedding'][0]['documents'] if part['embedding'] else 0} Inspec test documents:", "",
              "| extractor | documents | across documents | p | gap (95% CI) | seconds |", "|---|---:|---|---:|---|---:|"]
    for r in part["embedding"]:
        lines.append(f"| {r['method']} | {r['documents']} | {r['verdict']} | {_p(r['p'])} | {_ci(r)} | "
                     f"{r['seconds']:.1f} |")
    return lines + [""]


def _passage_lines(part) -> list[str]:
    if not part:
        return []
    lines = [f"**Passages, SciFact {part['split']}** (the first {part['rows'][0]['questions']} claims; BM25's "
             "top 5 abstracts cut to 60 words, the context of SmolLM2-135M's greedy answer (32 tokens); outcome: the "
             "answer's log-probability as the top-scored passages leave the context; top-k: ContextCite's drop)", "",
             "| passage scores | questions | faithful alone | across questions | p | gap (95% CI) | top-1 drop | "
             "top-3 drop | forward passes / question | seconds |", "|---|---:|---:|---|---:|---|---:|---:|---:|---:|"]
    for r in part["rows"]:
        lines.append(f"| {r['method']}{' (default)' if r['method'] == 'bm25' else ''} | {r['questions']} | "
                     f"{r['faithful']} | {r['verdict']} | {_p(r['p'])} | {_ci(r)} | {r['top1']:+.3f} | "
                     f"{r['top3']:+.3f} | {r['passes']:.0f} | {r['seconds']:.0f} |")
    parity = part["parity"]
    if parity:
        low, high = parity["float32"], parity["float64"]
        text = (f"{parity['masks']} masks over {parity['questions']} questions (0 to 5 of BM25's top passages "
                f"removed). As context-cite ships (float32: each token's logit difference and their sum in "
                f"float32, salience's log-softmax in float64) the largest difference is {low['largest']:.1e} "
                f"(relative {low['relative']:.1e}), float32's rounding; with both in float64 (context-cite's own "
                f"code under torch's float64 default dtype, the model in double) it is {high['largest']:.1e} "
                f"(relative {high['relative']:.1e}): the formula is the same. The same greedy answer in "
                f"{parity['same_answer']} of {parity['questions']} questions; seconds (float32): context-cite "
                f"{low['peer_seconds']:.0f} (with its model load), salience {low['ours_seconds']:.0f}.")
    else:
        text = "not run (pass --contextcite-python)."
    lines += ["", "Parity with context-cite 0.0.4 (its own generation, prompt, ablated contexts and "
              "`aggregate_logit_probs(..., 'log_prob')`, run in `.venv-contextcite`): " + text, ""]
    return lines


def _compress_lines(part) -> list[str]:
    if not part:
        return []
    lines = ["**Compression** (SmolLM2-135M; scores from 8 windows of 128 tokens of the docstrings' first half, "
             "verified on 4 held-out windows of the second half: log perplexity as up to half the heads or weights "
             "are removed, in 5 steps; KV-cache: the NLL of the 64 tokens after a 256-token context of the second "
             "half as up to 90% of the context is evicted, in 8 steps; rho: Spearman with each head group's "
             "one-removed change)", "",
             "| units | scores | verdict | p | gap (95% CI) | rho | forward passes | scoring seconds | seconds |",
             "|---|---|---|---:|---|---:|---:|---:|---:|"]
    for r in part["rows"]:
        rho = "" if r["rho"] is None else f"{r['rho']:+.3f}"
        lines.append(f"| {r['unit']} | {r['method']} | {r['verdict']} | {_p(r['p'])} | {_ci(r)} | {rho} | "
                     f"{r['passes']} | {r['scoring_seconds']:.0f} | {r['seconds']:.0f} |")
    return lines + [""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--random", type=int, default=20, help="random orders per subject (default 20)")
    parser.add_argument("--parts", default="sentences,examples,features,keyphrases,passages,layers,compress",
                        help="which parts to run, comma-separated (default all; the LM parts take minutes)")
    parser.add_argument("--questions", type=int, default=15, help="SciFact test claims for the passages (default 15)")
    parser.add_argument("--embedding-docs", type=int, default=15,
                        help="Inspec test documents for the keyphrases' embedding outcome (default 15)")
    parser.add_argument("--contextcite-python", default=None,
                        help="python of an environment with context-cite 0.0.4 (make .venv-contextcite/bin/python)")
    parser.add_argument("--pydvl-python", default=None,
                        help="python of an environment with pyDVL 0.10 (make .venv-pydvl/bin/python)")
    return run_benchmark("verify.py", parser, run, render, argv)


if __name__ == "__main__":
    sys.exit(main())
