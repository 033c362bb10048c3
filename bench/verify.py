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
        checks = [verifier.verify(rng.random(len(t)) if method == "random" else score_sentences(t, method=method),
                                  sentences=t) for t in texts]
        together = verify_subjects(checks)
        rows.append({"method": method, "documents": len(checks), "faithful": sum(c.verdict == "faithful" for c in checks),
                     "inverted": sum(c.verdict == "inverted" for c in checks), "verdict": together.verdict,
                     "p": together.p_value, "gap": together.gap, "ci": together.ci95,
                     "evaluations": together.evaluations / len(checks), "seconds": time.perf_counter() - started})
    return rows


def _game(name: str, seed: int = 0):
    from sklearn import datasets

    X, y = {"breast_cancer": datasets.load_breast_cancer, "wine": datasets.load_wine,
            "digits": datasets.load_digits}[name](return_X_y=True)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    X = (X - X.mean(axis=0)) / np.where(X.std(axis=0) > 0, X.std(axis=0), 1.0)
    half = min(len(y), 400) // 2
    train_rows, test_rows = order[:half], order[half : 2 * half]
    y_train = y[train_rows].copy()
    flipped = rng.choice(half, half // 10, replace=False)
    classes = np.unique(y)
    y_train[flipped] = [rng.choice(classes[classes != label]) for label in y_train[flipped]]
    return (X[train_rows], y_train), (X[test_rows], y[test_rows])


def _examples(args) -> list[dict]:
    from sklearn.neighbors import KNeighborsClassifier

    from salience.core.base import create

    rows = []
    for name in ("breast_cancer", "wine", "digits"):
        train, test = _game(name)
        methods = {"knn_shapley": (create("data", "knn_shapley", k=10), KNeighborsClassifier(10)),
                   "loo": (create("data", "loo"), None),
                   "data_banzhaf": (create("data", "data_banzhaf", budget=500, seed=0), None)}
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
            check = verifier.verify(scores, model=prob, x=x, baseline=mean)
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
    return {"sentences": _sentences(args), "examples": _examples(args), "features": _features(args),
            "layers": [] if args.no_layers else _layers(args), "random": args.random}


def render(result: dict, command: str, seconds: float) -> str:
    def p(value: float) -> str:
        return f"{value:.2g}" if value >= 1e-4 else "< 1e-4"

    lines = ["## Was the importance real? The removal protocol (`bench/verify.py`)", "",
             f"Command: `{command}` ({seconds:.0f} s). Verdicts at alpha = 0.01 against {result['random']} random "
             "orders per subject; across subjects, each subject's area against its random orders' mean, paired "
             "(Fisher's randomization test). Nothing here was tuned: every verifier and scorer at its defaults.", "",
             f"**Summary sentences, BBC {split_heading('test')}** (content left: tf-idf cosine of the remaining "
             "sentences with the whole; gap: area above the random orders' mean, in cosine)", "",
             "| summarizer | documents | faithful alone | inverted alone | across documents | p | gap (95% CI) | "
             "evaluations / document | seconds |", "|---|---:|---:|---:|---|---:|---|---:|---:|"]
    for r in result["sentences"]:
        lines.append(f"| {r['method']}{' (default)' if r['method'] == 'lexrank' else ''} | {r['documents']} | "
                     f"{r['faithful']} | {r['inverted']} | {r['verdict']} | {p(r['p'])} | {r['gap']:+.4f} "
                     f"({r['ci'][0]:+.4f} to {r['ci'][1]:+.4f}) | {r['evaluations']:.0f} | {r['seconds']:.1f} |")
    lines += ["", "**Training examples** (point removal up to half the rows, the model the values are for refitted "
              "at every step; gap in test accuracy area; reversed: the low-valued-first curve above random's)", "",
              "| set | values | model | verdict | p | gap (95% CI) | reversed - random | refits | seconds |",
              "|---|---|---|---|---:|---|---:|---:|---:|"]
    for r in result["examples"]:
        lines.append(f"| {r['set']} | {r['method']} | {r['model']} | {r['verdict']} | {p(r['p'])} | {r['gap']:+.4f} "
                     f"({r['ci'][0]:+.4f} to {r['ci'][1]:+.4f}) | {r['reversed_gain']:+.4f} | {r['fits']} | "
                     f"{r['seconds']:.1f} |")
    features = result["features"]
    lines += ["", "**Input features** (breast_cancer, logistic regression, 30 test rows; the predicted class's "
              "probability as features take their training mean)", "",
              "| attribution | rows | faithful alone | across rows | p | gap (95% CI) | model calls / row | seconds |",
              "|---|---:|---:|---|---:|---|---:|---:|"]
    for r in features["rows"]:
        lines.append(f"| {r['method']} | {r['rows']} | {r['faithful']} | {r['verdict']} | {p(r['p'])} | "
                     f"{r['gap']:+.4f} ({r['ci'][0]:+.4f} to {r['ci'][1]:+.4f}) | {r['calls']:.0f} | "
                     f"{r['seconds']:.1f} |")
    if result["layers"]:
        lines += ["", "**Decoder layers** (SmolLM2-135M, 30 layers; held-out log perplexity on 4 windows of 128 tokens "
                  "of the docstrings' second half as up to half the layers go; rho: Spearman with each layer's measured "
                  "one-removed perplexity change)", "",
                  "| layer scores | verdict | p | gap (95% CI) | rho | forward passes | seconds |",
                  "|---|---|---:|---|---:|---:|---:|"]
        for r in result["layers"]:
            lines.append(f"| {r['method']}{' (default)' if r['method'] == 'block_influence' else ''} | {r['verdict']} | "
                         f"{p(r['p'])} | {r['gap']:+.4f} ({r['ci'][0]:+.4f} to {r['ci'][1]:+.4f}) | {r['rho']:+.3f} | "
                         f"{r['passes']} | {r['seconds']:.0f} |")
    lines += ["", f"Parity: the protocol's deletion curve against Quantus' formula written out (the model on the row "
              f"with its top-k features replaced), largest difference over every row and step: "
              f"{features['largest_difference']:.1e}. Not run here yet: OpenDataVal / pyDVL's point-removal "
              "experiment in its own environment, context-cite's top-k drop, and the keyphrases, passages, weights, "
              "structures and KV-cache verifiers (issue 51 continues).", ""]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--random", type=int, default=20, help="random orders per subject (default 20)")
    parser.add_argument("--no-layers", action="store_true", help="leave out the SmolLM2 layers part (minutes)")
    return run_benchmark("verify.py", parser, run, render, argv)


if __name__ == "__main__":
    sys.exit(main())
