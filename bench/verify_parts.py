"""The parts of bench/verify.py that need the shared keyphrase and search sets, a language model,
or a peer's own environment: keyphrases (with their agreement with F1@10), passages (with
context-cite 0.0.4's log-probabilities on the same masks), the compression verifiers (FFN
channels and heads, weights, KV-cache tokens) and pyDVL's point-removal experiment beside the
examples verifier. Each returns rows for bench/verify.py's render."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from common import SHARED_DATA, document_set, search_set, split_heading
from contextcite_runner import run_contextcite

from salience.core.verify import subject_seed


def game(name: str, seed: int = 0):
    """A scikit-learn set standardised, 200 training rows (wine: 89) with 10% of their labels
    flipped, and as many test rows."""
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


KEYPHRASE_SETS = ("inspec", "semeval2017")


def keyphrases(args) -> dict:
    """Per set's test split: each extractor's top 20 keyphrases verified per document (searched
    by its first line, the title, among the split's documents), pooled across documents; the
    Spearman correlation of each document's gap with its F1@10 against the gold keyphrases;
    the embedding outcome on the first documents of Inspec."""
    from salience.core.base import create
    from salience.core.correlation import spearman_rho
    from salience.core.verify import verify_subjects
    from salience.keywords import evaluate_keyphrases, extract_keyphrases_batch

    rows, agreement = [], []
    for name in KEYPHRASE_SETS:
        docs = document_set(SHARED_DATA / "keyphrase" / name, "test")
        texts = [d["text"] for d in docs]
        titles = [t.strip().split("\n", 1)[0] if "\n" in t.strip() else None for t in texts]
        verifier = create("verify", "keyphrases", n_random=args.random)
        gaps, f1s = [], []
        for method in ("yake", "textrank", "positionrank", "random"):
            started = time.perf_counter()
            base = extract_keyphrases_batch(texts, k=20, method="yake" if method == "random" else method, language="en")
            if method == "random":
                rng = np.random.default_rng(5)
                base = [type(s)(rng.random(len(s)), ids=s.ids) for s in base]
            subjects = [i for i, s in enumerate(base) if len(s) >= 2]
            checks = verifier.verify_collection([base[i] for i in subjects], texts,
                                                titles=[titles[i] for i in subjects], subjects=subjects)
            together = verify_subjects(checks)
            f1 = evaluate_keyphrases([base[i].top_k(10).ids for i in subjects], [texts[i] for i in subjects],
                                     [docs[i]["keyphrases"] for i in subjects], [10]).per_subject
            doc_f1 = [f1[d]["F1@10"] for d in range(len(subjects))]
            if method != "random":
                gaps += [c.gap for c in checks]
                f1s += doc_f1
            rows.append({"set": name, "method": method, "documents": len(checks),
                         "faithful": sum(c.verdict == "faithful" for c in checks), "verdict": together.verdict,
                         "p": together.p_value, "gap": together.gap, "ci": together.ci95,
                         "f1": float(np.mean(doc_f1)), "seconds": time.perf_counter() - started})
        agreement.append({"set": name, "rho": float(spearman_rho(np.array(gaps), np.array(f1s))), "pairs": len(gaps)})
    docs = document_set(SHARED_DATA / "keyphrase" / "inspec", "test")[: args.embedding_docs]
    embedding = []
    verifier = create("verify", "keyphrases", outcome="embedding", n_random=args.random)
    for method in ("yake", "textrank", "positionrank"):
        started = time.perf_counter()
        scores = extract_keyphrases_batch([d["text"] for d in docs], k=20, method=method, language="en")
        checks = verifier.verify_batch([(s, {"document": d["text"]}) for s, d in zip(scores, docs) if len(s) >= 2])
        together = verify_subjects(checks)
        embedding.append({"method": method, "documents": len(checks), "verdict": together.verdict,
                          "p": together.p_value, "gap": together.gap, "ci": together.ci95,
                          "seconds": time.perf_counter() - started})
    return {"rows": rows, "agreement": agreement, "embedding": embedding, "split": split_heading("test")}


def _scifact_questions(n: int):
    """SciFact's first ``n`` test claims with BM25's top 5 abstracts (cut to 60 words) and
    their BM25 scores."""
    from salience.search import BM25

    corpus, queries, _ = search_set(SHARED_DATA / "search" / "scifact", "test")
    index = BM25().index([{"id": d["_id"], "text": f"{d.get('title', '')} {d['text']}"} for d in corpus])
    text = {d["_id"]: " ".join(f"{d.get('title', '')}. {d['text']}".split()[:60]) for d in corpus}
    out = []
    for qid, question in list(queries.items())[:n]:
        hits = index.search(question, k=5)
        out.append((question, {doc_id: text[doc_id] for doc_id, _ in hits}, {doc_id: float(s) for doc_id, s in hits}))
    return out


def passages(args) -> dict:
    """SciFact test claims answered by SmolLM2 from BM25's top 5: the passages' BM25 scores, a
    dense encoder's cosines and SmolLM2's pointwise judgement verified by the answer's
    log-probability as the top passages leave the context; context-cite 0.0.4 computes the
    same log-probabilities (its own generation, prompt and forward passes) on the BM25 masks."""
    import torch

    from salience.core.base import create
    from salience.core.verify import verify_subjects
    from salience.models import load_causal_lm
    from salience.models.answering import SourcedQuestion

    torch.set_num_threads(2)
    model, tokenizer = load_causal_lm("smollm2")
    questions = _scifact_questions(args.questions)
    dense = create("judge", "encoder")
    judge = create("judge", "pointwise", model=model, tokenizer=tokenizer)
    verifier = create("verify", "passages", n_random=args.random, max_new_tokens=32)
    answers = [SourcedQuestion(model, tokenizer, list(p.values()), q, max_new_tokens=32).response_ids
               for q, p, _ in questions]
    rows = []
    for method in ("bm25", "dense", "lm_pointwise", "random"):
        started = time.perf_counter()
        checks = []
        for (question, texts, bm25), response in zip(questions, answers):
            ids = list(texts)
            if method == "bm25":
                scores = bm25
            elif method == "dense":
                scores = dict(zip(ids, dense.scores(question, list(texts.values())).tolist()))
            elif method == "lm_pointwise":
                scores = dict(zip(ids, judge.scores(question, list(texts.values())).tolist()))
            else:
                scores = dict(zip(ids, np.random.default_rng(len(checks)).random(len(ids)).tolist()))
            checks.append(verifier.set_params(seed=subject_seed(0, len(checks))).verify(
                scores, passages=texts, question=question, model=model, tokenizer=tokenizer, response=response))
        together = verify_subjects(checks)
        rows.append({"method": method, "questions": len(checks), "faithful": sum(c.verdict == "faithful" for c in checks),
                     "verdict": together.verdict, "p": together.p_value, "gap": together.gap, "ci": together.ci95,
                     "top1": float(np.mean([c.extras["top_k_drop"]["1"] for c in checks])),
                     "top3": float(np.mean([c.extras["top_k_drop"]["3"] for c in checks])),
                     "passes": float(np.mean([c.costs["forward_passes"] for c in checks])),
                     "seconds": time.perf_counter() - started})
    parity = _contextcite_parity(args, model, tokenizer, questions) if args.contextcite_python else None
    return {"rows": rows, "parity": parity, "split": split_heading("test")}


def _contextcite_parity(args, model, tokenizer, questions) -> dict:
    """context-cite's log-probabilities of its own answer with 0, 1, ..., 5 of BM25's top
    passages removed, against salience's on the same masks and answer tokens: as context-cite
    ships (float32) and with both in float64 (context-cite's own code under torch's float64
    default dtype: the formula compared without float32's rounding)."""
    import copy

    from salience.models.answering import SourcedQuestion

    jobs, masks_of = [], []
    for question, texts, bm25 in questions:
        order = sorted(range(len(texts)), key=lambda i: -list(bm25.values())[i])
        masks = []
        for k in range(len(texts) + 1):
            kept = np.ones(len(texts), dtype=bool)
            kept[order[:k]] = False
            masks.append(kept.tolist())
        masks_of.append(masks)
        jobs.append({"sources": list(texts.values()), "query": question, "separator": "\n\n", "max_new_tokens": 32,
                     "masks": masks})
    result = {"questions": len(questions), "masks": sum(len(m) for m in masks_of)}
    for dtype in ("float32", "float64"):
        ours_model = model if dtype == "float32" else copy.deepcopy(model).double()
        peer, seconds = run_contextcite(args.contextcite_python, ours_model, tokenizer, jobs, dtype)
        largest, relative, same_answer, ours_seconds = 0.0, 0.0, 0, 0.0
        for (question, texts, _), masks, theirs in zip(questions, masks_of, peer):
            started = time.perf_counter()
            asked = SourcedQuestion(ours_model, tokenizer, list(texts.values()), question,
                                    response=theirs["response_ids"])
            ours = asked.log_probs(np.array(masks))
            ours_seconds += time.perf_counter() - started
            if dtype == "float32":
                generated = SourcedQuestion(model, tokenizer, list(texts.values()), question,
                                            max_new_tokens=32).response_ids
                same_answer += generated == [t for t in theirs["response_ids"] if t != tokenizer.eos_token_id]
            difference = np.abs(ours - np.array(theirs["log_probs"]))
            largest = max(largest, float(difference.max()))
            relative = max(relative, float((difference / np.abs(np.array(theirs["log_probs"]))).max()))
        result[dtype] = {"largest": largest, "relative": relative, "peer_seconds": seconds,
                         "ours_seconds": ours_seconds}
        if dtype == "float32":
            result["same_answer"] = same_answer
    return result


def compress(args) -> dict:
    """SmolLM2-135M on the standard library's docstrings: units scored on the first half's
    windows, verified on 4 held-out windows of 128 tokens of the second half."""
    import torch

    from salience.compress import calibration_windows, stdlib_docstrings
    from salience.compress.evaluate import windows as consecutive_windows
    from salience.compress.kv.eviction import prefill
    from salience.compress.weights import weight_scores
    from salience.core.base import create
    from salience.models.lm import load_causal_lm

    torch.set_num_threads(2)
    model, tokenizer = load_causal_lm("smollm2")
    ids = tokenizer.encode(stdlib_docstrings(max_chars=400_000), add_special_tokens=False)
    half = len(ids) // 2
    scoring = calibration_windows(ids[:half], seqlen=128, n_samples=8, seed=0)
    held_out = consecutive_windows(ids[half:], 128, 4)
    rows = []

    def add(unit, method, check, started, scored, default=False):
        rows.append({"unit": unit, "method": method + (" (default)" if default else ""), "verdict": check.verdict,
                     "p": check.p_value, "gap": check.gap, "ci": check.ci95,
                     "rho": check.extras.get("one_removed", {}).get("spearman"),
                     "passes": check.costs["forward_passes"], "scoring_seconds": scored,
                     "seconds": time.perf_counter() - started})

    heads = create("verify", "structures", structure="attention_heads", steps=5, n_random=args.random)
    for criterion in ("magnitude", "taylor", "output", "random"):
        started = time.perf_counter()
        scores = (create("structure", "attention_heads", criterion=criterion).score(model, scoring)
                  if criterion != "random" else np.random.default_rng(6).random(90))
        scored = time.perf_counter() - started
        started = time.perf_counter()
        add("attention heads", criterion, heads.set_params(one_removed=criterion == "magnitude").verify(
            scores, model=model, windows=held_out), started, scored, criterion == "magnitude")
    module = "model.layers.10.mlp.down_proj"
    weights = create("verify", "weights", steps=5, n_random=args.random)
    for criterion in ("wanda", "magnitude", "taylor", "random"):
        started = time.perf_counter()
        if criterion == "random":
            shape = tuple(model.get_submodule(module).weight.shape)
            scores = {module: np.random.default_rng(7).random(shape)}
        else:
            scores = weight_scores(model, [module], method=criterion, calibration=scoring)
        scored = time.perf_counter() - started
        started = time.perf_counter()
        add(f"weights ({module})", criterion, weights.verify(scores, model=model, windows=held_out), started, scored,
            criterion == "wanda")
    kv = create("verify", "kv", steps=8, n_random=args.random)
    context, continuation = np.asarray(ids[half:half + 256]), np.asarray(ids[half + 256:half + 320])
    started = time.perf_counter()
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            attentions = model(input_ids=torch.as_tensor(context)[None], output_attentions=True).attentions
    finally:
        model.set_attn_implementation("sdpa")
    window = torch.stack([a[0] for a in attentions])[:, :, -32:, :].mean(dim=(0, 1, 2)).numpy()
    cached = prefill(model, context).cache
    key_norm = -np.mean([layer.keys[0].norm(dim=-1).mean(0).numpy() for layer in cached.layers], axis=0)
    scored = time.perf_counter() - started
    token_scores = {"observation window attention (SnapKV's, layers and heads averaged)": window,
                    "key norm, negated": key_norm, "recency (StreamingLLM's order)": np.arange(len(context), dtype=float),
                    "random": np.random.default_rng(8).random(len(context))}
    for method, scores in token_scores.items():
        started = time.perf_counter()
        add("KV-cache tokens", method, kv.verify(scores, model=model, context_ids=context, continuation_ids=continuation),
            started, scored)
    return {"rows": rows, "module": module}


def point_removal_parity(args) -> dict | None:
    """The examples verifier's curve beside pyDVL 0.10's ``compute_removal_score`` (its own
    refits and accuracy) at the same removal counts, in the same order (the values given as
    distinct ranks so that no tie is broken two ways)."""
    if not args.pydvl_python:
        return None
    from sklearn.neighbors import KNeighborsClassifier

    from salience.core.base import create

    largest, checked, jobs, ours = 0.0, 0, [], []
    arrays = {}
    for name in ("breast_cancer", "wine", "digits"):
        train, test = game(name)
        arrays.update({f"{name}_X_train": train[0], f"{name}_y_train": train[1], f"{name}_X_test": test[0],
                       f"{name}_y_test": test[1]})
        for method, model, label in (("knn_shapley", KNeighborsClassifier(10), "knn"), ("loo", None, "logistic")):
            values = create("valuation", method, **({"k": 10} if method == "knn_shapley" else {})).score(train, test).values
            check = create("verify", "examples", model=model, n_random=2).verify(values, train=train, test=test)
            order = np.argsort(-values, kind="stable")
            ranks = np.empty(len(values))
            ranks[order] = np.arange(len(values), 0, -1)  # distinct, the same order
            counts = np.round(check.fractions * len(values)).astype(int)
            jobs.append({"game": name, "library": "pydvl-removal", "method": method, "model": label,
                         "values": ranks.tolist(), "percentages": [(c + 0.5) / len(values) for c in counts]})
            ours.append(check.curves["scores"])
    with tempfile.TemporaryDirectory() as tmp:
        np.savez(Path(tmp) / "arrays.npz", **arrays)
        (Path(tmp) / "jobs.json").write_text(json.dumps({"arrays": str(Path(tmp) / "arrays.npz"), "jobs": jobs}))
        subprocess.run([args.pydvl_python, str(Path(__file__).with_name("pydvl_runner.py")), str(Path(tmp) / "jobs.json"),
                        str(Path(tmp) / "out.json")], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        theirs = json.loads((Path(tmp) / "out.json").read_text())
    for curve, job in zip(ours, theirs):
        largest = max(largest, float(np.abs(np.asarray(curve) - np.asarray(job["values"])).max()))
        checked += len(curve)
    return {"curves": len(ours), "points": checked, "largest": largest}
