"""Which cached tokens matter: KV-cache eviction for causal language models
(``pip install 'salience[torch]' transformers``).

After the prompt is read (the prefill), every attention layer's cache holds one key and one
value per token and key-value head. A policy scores them and the cache keeps the ``budget``
best per head; the continuation then attends to the kept tokens only, at its original
positions (the kept keys carry their rotary positions, the new tokens get ``n_prompt + i``).
Policies (each a registered scorer of the ``compress`` family, higher = kept):

* ``streaming_llm``: the first ``n_sink`` tokens (attention sinks) and the most recent ones
  (Xiao et al., 2024);
* ``h2o``: heavy hitters, the attention a token received from every later query of the
  prompt, divided by how many queries could attend to it (Zhang et al., 2023; kvpress's
  ``ObservedAttentionPress``);
* ``snapkv``: the attention of the last ``window`` queries (the observation window), pooled
  over ``kernel_size`` neighbouring tokens; the window itself is always kept (Li et al., 2024);
* ``tova``: the attention of the last query, averaged over all heads; the last token is kept
  (Oren et al., 2024);
* ``key_norm``: a small key norm means a large attention share (Devoto et al., 2024);
* ``vatp``: ``h2o``'s attention times the L1 norm of the token's value vector (value-aware
  token pruning, Guo et al., 2024);
* ``caote``: the attention output error of evicting the token alone, ``a_j / (1 - a_j) x
  ||v_j - o||`` for each observation-window query (``o`` its attention output), averaged over
  the window; the window is kept (Goel et al., 2025).

A key-value head serves several query heads: attention-based scores are averaged over the
group (``tova``: over all heads). Exactly ``keep`` tokens stay per head, chosen by the core's
selector (ties: the earlier token is evicted first).

Use it around any forward pass or ``generate``: ``with evict(model, "snapkv", budget=0.25):
model.generate(ids, max_new_tokens=20)`` compresses the cache right after the prefill. Or
:func:`prefill` (the cache and the next position) then :func:`continue_from` for exact
control; :func:`kv_eval` measures continuation perplexity, :func:`passkey` retrieval.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from salience.core.checks import check_k, require_torch
from salience.core.base import FunctionScorer, register
from salience.core.scores import Scores
from salience.core.select import lowest_k_mask
from salience.exceptions import InvalidParameterError, unknown_choice

__all__ = ["KV_POLICIES", "KVImportance", "kv_token_scores", "evict", "prefill", "continue_from", "kv_eval",
           "passkey", "passkey_prompts", "Prefill", "KVEvalReport", "PasskeyReport", "decode_speed", "check_budget"]

KV_POLICIES = ("streaming_llm", "h2o", "snapkv", "tova", "key_norm", "vatp", "caote")
#: the queries each policy looks at: none, the last one, the observation window, or all
_QUERIES = {"streaming_llm": 0, "key_norm": 0, "tova": 1, "snapkv": "window", "caote": "window", "h2o": "all",
            "vatp": "all"}


def _torch():
    return require_torch("KV-cache eviction")


# ------------------------------------------------------------------------------------------
# scores
def _window_attention(torch, queries, keys, scaling: float):
    """Softmax attention (float32 or wider) of the last ``q`` queries over all ``n`` keys,
    causal (query i of the window sits at position n - q + i), shaped (b, heads, q, n)."""
    n, q = keys.shape[-2], queries.shape[-2]
    groups = queries.shape[1] // keys.shape[1]
    expanded = keys.repeat_interleave(groups, dim=1)
    logits = (queries @ expanded.transpose(-1, -2)).to(torch.promote_types(queries.dtype, torch.float32)) * scaling
    future = torch.arange(n)[None, :] > (n - q + torch.arange(q))[:, None]
    return torch.softmax(logits.masked_fill(future, float("-inf")), dim=-1)


def _received_attention(torch, queries, keys, scaling: float, block: int = 256):
    """For each key, the attention summed over every (causal) query, in blocks of queries:
    the whole attention matrix is never held. Shaped (b, heads, n)."""
    n = keys.shape[-2]
    total = None
    for lo in range(0, n, block):
        hi = min(lo + block, n)
        weights = _window_attention(torch, queries[:, :, lo:hi], keys[..., :hi, :], scaling).sum(dim=2)
        weights = torch.nn.functional.pad(weights, (0, n - hi))
        total = weights if total is None else total + weights
    return total


def _group_mean(scores, n_kv_heads: int):
    b, heads, n = scores.shape
    return scores.view(b, n_kv_heads, heads // n_kv_heads, n).mean(dim=2)


def kv_token_scores(policy: str, keys, values, queries=None, *, scaling: float | None = None, n_sink: int = 4,
                    window: int = 64, kernel_size: int = 5):
    """Scores (b, kv_heads, n) of a layer's cached tokens under ``policy``: ``keys`` and
    ``values`` (b, kv_heads, n, d) as cached (rotary positions applied), ``queries`` (b,
    heads, q, d) the prompt's last ``q`` queries with positions applied (all of them for
    ``h2o``/``vatp``, the observation window for ``snapkv``/``caote``, the last for ``tova``)."""
    torch = _torch()
    if policy not in KV_POLICIES:
        raise unknown_choice("KV-cache policy", policy, KV_POLICIES)
    b, n_kv, n, d = keys.shape
    scaling = 1.0 / math.sqrt(d) if scaling is None else scaling
    wide = torch.promote_types(keys.dtype, torch.float32)
    if policy == "streaming_llm":
        # sinks first, then the most recent tokens: score by position, sinks above all
        scores = torch.arange(n, dtype=wide).expand(b, n_kv, n).clone()
        scores[..., : min(n_sink, n)] = float(n + 1)
        return scores
    if policy == "key_norm":
        return -torch.linalg.vector_norm(keys, dim=-1, dtype=wide)
    need = _QUERIES[policy]
    if queries is None or queries.shape[-2] < 1:
        raise InvalidParameterError(f"policy {policy!r} needs the prompt's queries.")
    if policy == "tova":
        attention = _window_attention(torch, queries[:, :, -1:], keys, scaling)[:, :, 0]
        scores = attention.mean(dim=1, keepdim=True).expand(b, n_kv, n).clone()
        scores[..., -1] = scores.max() + 1  # the last token is kept
        return scores
    if need == "all":
        if queries.shape[-2] != n:
            raise InvalidParameterError(f"policy {policy!r} needs every query of the prompt ({n}); got {queries.shape[-2]}.")
        received = _received_attention(torch, queries, keys, scaling)
        scores = _group_mean(received / torch.arange(n, 0, -1, dtype=received.dtype), n_kv)
        if policy == "vatp":
            scores = scores * values.abs().sum(dim=-1).to(scores.dtype)
        return scores
    # observation-window policies: the window's own tokens are kept
    w = min(window, queries.shape[-2])
    if w >= n:
        raise InvalidParameterError(f"policy {policy!r}: the prompt ({n} tokens) must be longer than the observation "
                                    f"window ({w}).")
    attention = _window_attention(torch, queries[:, :, -w:], keys, scaling)  # (b, heads, w, n)
    if policy == "snapkv":
        scores = attention[..., : n - w].mean(dim=2)
        scores = torch.nn.functional.avg_pool1d(scores, kernel_size=kernel_size, padding=kernel_size // 2, stride=1)
        scores = _group_mean(scores, n_kv)
    else:  # caote: the output error of evicting token j alone, for each window query
        groups = attention.shape[1] // n_kv
        v = values.repeat_interleave(groups, dim=1).to(attention.dtype)  # (b, heads, n, d)
        output = attention @ v  # (b, heads, w, d)
        distance = torch.cdist(output, v)  # (b, heads, w, n): ||v_j - o||
        error = attention / (1 - attention).clamp_min(1e-6) * distance
        scores = _group_mean(error.mean(dim=2), n_kv)[..., : n - w]
    return torch.nn.functional.pad(scores, (0, w), value=float(scores.max()) + 1)


def _checked_layer(keys, values, queries):
    """One layer's cache as float arrays: keys and values (kv_heads, n, d), queries (heads, q,
    d) with heads a multiple of kv_heads; all finite."""
    arrays = {"keys": keys, "values": values} | ({} if queries is None else {"queries": queries})
    out = {}
    for name, array in arrays.items():
        a = np.asarray(array)
        if a.ndim != 3 or a.dtype.kind not in "fiu" or 0 in a.shape:
            raise InvalidParameterError(f"{name} must be a non-empty 3-D array (heads, tokens, head_dim) of numbers; "
                                        f"got shape {a.shape} of {a.dtype}.")
        if not np.isfinite(a).all():
            raise InvalidParameterError(f"{name} holds NaN or inf.")
        out[name] = a if a.dtype.kind == "f" else a.astype(np.float64)
    k, v = out["keys"], out["values"]
    if k.shape[:2] != v.shape[:2]:
        raise InvalidParameterError(f"keys {k.shape} and values {v.shape} must hold the same heads and tokens.")
    q = out.get("queries")
    if q is not None and (q.shape[0] % k.shape[0] or q.shape[2] != k.shape[2]):
        raise InvalidParameterError(f"queries {q.shape} must have a multiple of the keys' {k.shape[0]} heads and their "
                                    f"head size {k.shape[2]}.")
    return k, v, q


def _scores_of(policy):
    def score(keys, values, *, queries=None, scaling=None, n_sink=4, window=64, kernel_size=5) -> Scores:
        torch = _torch()
        k, v, q = _checked_layer(keys, values, queries)
        k, v = torch.as_tensor(k)[None], torch.as_tensor(v)[None]
        q = None if q is None else torch.as_tensor(q)[None]
        out = kv_token_scores(policy, k, v, q, scaling=scaling, n_sink=n_sink, window=window, kernel_size=kernel_size)[0]
        heads, n = out.shape
        return Scores(out.double().numpy().ravel(), ids=[f"{h}:{i}" for h in range(heads) for i in range(n)])

    score.__name__ = policy
    score.__doc__ = (f"{policy} importance of one layer's cached tokens: keys and values (kv_heads, n, d), queries "
                     "(heads, q, d); Scores over 'head:position'.")
    return score


class KVImportance(FunctionScorer):
    """A KV-cache policy as a scorer: ``KVImportance(method="snapkv").score(keys, values,
    queries=...)`` gives :class:`~salience.Scores` over a layer's cached tokens."""

    FAMILY = "compress"
    FUNCTIONS = {name: _scores_of(name) for name in KV_POLICIES}

    def __init__(self, *, method: str = "snapkv", options: dict | None = None):
        super().__init__(method=method, options=options)


for _method, _description in (
    ("streaming_llm", "KV cache: attention sinks + the most recent tokens (StreamingLLM, Xiao et al., 2024)"),
    ("h2o", "KV cache: heavy hitters, attention received from the prompt's queries (H2O, Zhang et al., 2023)"),
    ("snapkv", "KV cache: attention of the observation window, pooled (SnapKV, Li et al., 2024)"),
    ("tova", "KV cache: attention of the last query over all heads (TOVA, Oren et al., 2024)"),
    ("key_norm", "KV cache: small key norm = kept (Devoto et al., 2024)"),
    ("vatp", "KV cache: received attention x value L1 norm (value-aware token pruning, Guo et al., 2024)"),
    ("caote", "KV cache: attention output error of evicting the token (CAOTE, Goel et al., 2025)"),
):
    register("compress", _method, KVImportance, _description, method=_method)


# ------------------------------------------------------------------------------------------
# budgets and the cache
def _protected(policy: str, n_sink: int, window: int) -> int:
    """Tokens a policy always keeps: its budget must hold them."""
    return {"streaming_llm": n_sink + 1, "snapkv": window, "caote": window, "tova": 1}.get(policy, 1)


def check_budget(budget, n_tokens: int, policy: str, *, n_sink: int = 4, window: int = 64) -> int:
    """The tokens kept per head: ``budget`` a fraction in (0, 1] of ``n_tokens`` (0.25 keeps a
    quarter, kvpress's compression ratio 0.75) or a count >= 1. Refused when it cannot hold
    what the policy always keeps (the sinks and one recent token; the observation window)."""
    if isinstance(budget, bool) or not isinstance(budget, (int, float, np.integer, np.floating)) \
            or not np.isfinite(budget) or budget <= 0:
        raise InvalidParameterError(f"budget must be a fraction in (0, 1] of the prompt or a token count >= 1; "
                                    f"got {budget!r}.")
    if isinstance(budget, (float, np.floating)) and budget <= 1:
        keep = max(1, int(n_tokens * float(budget)))
    elif float(budget).is_integer():
        keep = min(int(budget), n_tokens)
    else:
        raise InvalidParameterError(f"budget {budget!r}: a fraction is at most 1, a token count is a whole number.")
    protected = _protected(policy, n_sink, window)
    if keep < n_tokens and keep < protected:
        what = {"streaming_llm": f"the {n_sink} sinks and at least one recent token",
                "snapkv": f"the observation window of {window} tokens", "caote": f"the observation window of {window} tokens",
                "tova": "the last token"}.get(policy, "one token")
        raise InvalidParameterError(f"budget {budget!r} keeps {keep} of {n_tokens} tokens, fewer than {policy} always "
                                    f"keeps ({what}: {protected}): raise the budget or lower n_sink/window.")
    return keep


def _attention_modules(model) -> list:
    from salience.compress.layers import decoder_layers

    layers = decoder_layers(model)
    if not all(hasattr(layer, "self_attn") for layer in layers):
        raise InvalidParameterError(f"{type(model).__name__}'s decoder layers have no self_attn (LLaMA-family layout): "
                                    "its cache cannot be evicted by salience.")
    return [layer.self_attn for layer in layers]


def _queries(torch, module, hidden_states, position_embeddings, count):
    """The last ``count`` queries of an attention module for its input, with rotary positions
    (recomputed from the layer's input: attention implementations do not return them)."""
    hidden = hidden_states[:, -count:]
    b, q, _ = hidden.shape
    queries = module.q_proj(hidden).view(b, q, -1, module.head_dim).transpose(1, 2)
    if hasattr(module, "q_norm"):  # Gemma-3, Qwen-3: a norm on the queries before the rotation
        queries = module.q_norm(queries)
    cos, sin = position_embeddings
    cos, sin = cos[:, -count:].unsqueeze(1), sin[:, -count:].unsqueeze(1)
    half = queries.shape[-1] // 2
    rotated = torch.cat([-queries[..., half:], queries[..., :half]], dim=-1)
    return queries * cos + rotated * sin


@dataclass
class _EvictionState:
    policy: str
    budget: Any
    kept: int | None = None
    prompt_tokens: int | None = None
    seconds: float = 0.0
    layers: int = 0


@contextlib.contextmanager
def evict(model, policy: str, *, budget, n_sink: int = 4, window: int = 64, kernel_size: int = 5):
    """Within the block, every prefill (a forward pass that fills an empty cache, as the first
    step of ``generate``) leaves only ``budget`` tokens per head in each layer's cache, chosen
    by ``policy``. Yields a record of what was done (tokens kept, scoring seconds). Later
    forward passes and decoding steps are unchanged; their positions continue from the prompt's
    length (pass ``position_ids`` when calling the model directly, or use :func:`continue_from`)."""
    torch = _torch()
    if policy not in KV_POLICIES:
        raise unknown_choice("KV-cache policy", policy, KV_POLICIES)
    for name, value in (("n_sink", n_sink), ("window", window), ("kernel_size", kernel_size)):
        if not isinstance(value, (int, np.integer)) or value < (0 if name == "n_sink" else 1):
            raise InvalidParameterError(f"{name} must be a {'non-negative' if name == 'n_sink' else 'positive'} "
                                        f"integer; got {value!r}.")
    if kernel_size % 2 == 0:
        raise InvalidParameterError(f"kernel_size must be odd (the pooled scores keep their length); got {kernel_size}.")
    modules = _attention_modules(model)
    state = _EvictionState(policy, budget)
    need = _QUERIES[policy]

    def hook(module, args, kwargs, output):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        if cache is None or hidden is None or getattr(module, "is_sliding", False):
            return output  # no cache, or a sliding-window layer that evicts by itself
        layer = cache.layers[module.layer_idx]
        keys, values = layer.keys, layer.values
        n = keys.shape[-2]
        if hidden.shape[1] != n:  # not a prefill: decoding, or a continuation
            return output
        start = time.perf_counter()
        keep = check_budget(budget, n, policy, n_sink=n_sink, window=window)
        if keep < n:
            count = {0: 0, 1: 1, "window": min(window, n), "all": n}[need]
            with torch.no_grad():
                queries = (_queries(torch, module, hidden, kwargs["position_embeddings"], count) if count else None)
                scores = kv_token_scores(policy, keys, values, queries, scaling=getattr(module, "scaling", None),
                                         n_sink=n_sink, window=window, kernel_size=kernel_size)
            b, n_kv, _ = scores.shape
            # the core's selector: exactly n - keep evicted per head, earlier tokens first on ties
            evicted = lowest_k_mask(scores.reshape(b * n_kv, n).double().numpy(), n - keep)
            kept = torch.as_tensor(np.flatnonzero(~evicted.ravel()) % n).view(b, n_kv, keep)
            index = kept[..., None].expand(-1, -1, -1, keys.shape[-1])
            layer.keys = keys.gather(2, index).contiguous()
            layer.values = values.gather(2, index.expand(-1, -1, -1, values.shape[-1])).contiguous()
        state.kept, state.prompt_tokens = keep, n
        state.layers += 1
        state.seconds += time.perf_counter() - start
        return output

    handles = [module.register_forward_hook(hook, with_kwargs=True) for module in modules]
    try:
        yield state
    finally:
        for handle in handles:
            handle.remove()


def cache_argument(model) -> str:
    """The name a model's forward gives its cache: ``cache`` from transformers 5.24 on,
    ``past_key_values`` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def returned_cache(output):
    """The key/value cache a forward pass returned: ``cache`` in recent transformers (where
    ``past_key_values`` is deprecated), ``past_key_values`` before."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


@dataclass
class Prefill:
    """A prompt read into a cache: the cache, the logits of the prompt's last token (they
    predict the first continuation token), the prompt's length (where the continuation's
    positions start), the tokens kept per head and the seconds spent scoring them."""

    cache: Any
    logits: Any
    length: int
    kept: int
    scoring_seconds: float = 0.0


def prefill(model, prompt_ids, *, policy: str | None = None, budget=None, **options) -> Prefill:
    """Read ``prompt_ids`` (1-D or (1, n)) into a fresh cache, evicted by ``policy`` to
    ``budget`` (no policy: the full cache)."""
    torch = _torch()
    ids = torch.as_tensor(np.asarray(prompt_ids), dtype=torch.long).reshape(1, -1)
    if ids.shape[1] == 0:
        raise InvalidParameterError("the prompt holds no tokens.")
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    context = evict(model, policy, budget=budget, **options) if policy is not None else contextlib.nullcontext()
    with torch.no_grad(), context as state:
        out = model(input_ids=ids, **{cache_argument(model): cache}, use_cache=True, logits_to_keep=1)
    n = ids.shape[1]
    return Prefill(cache, out.logits[:, -1], n, state.kept if state is not None else n,
                   state.seconds if state is not None else 0.0)


def continue_from(model, cache, ids, start: int):
    """Logits (1, m, vocab) of a continuation ``ids`` read onto ``cache`` at its original
    positions ``start .. start + m - 1`` (whatever the cache kept)."""
    torch = _torch()
    ids = torch.as_tensor(np.asarray(ids), dtype=torch.long).reshape(1, -1)
    positions = torch.arange(start, start + ids.shape[1])[None]
    with torch.no_grad():
        return model(input_ids=ids, **{cache_argument(model): cache}, position_ids=positions, use_cache=True).logits


def _token_nll(torch, predicting, ids) -> tuple[float, np.ndarray]:
    """Summed NLL of ``ids`` under ``predicting`` logits (1, m, vocab), one row per token, and
    each token's rank (1 = the model's top choice)."""
    ids = torch.as_tensor(np.asarray(ids), dtype=torch.long)
    log_probs = torch.log_softmax(predicting[0].double(), dim=-1)
    picked = log_probs.gather(1, ids[:, None])[:, 0]
    ranks = (log_probs > picked[:, None]).sum(dim=1) + 1
    return float(-picked.sum()), ranks.numpy()


@dataclass
class KVEvalReport:
    policy: str | None
    budget: Any
    perplexity: float
    windows: int
    context: int
    continuation: int
    kept: int | None
    prefill_seconds: float
    scoring_seconds: float
    nll: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(vars(self))


def _check_lengths(model, context: int, continuation: int) -> None:
    for name, value in (("context", context), ("continuation", continuation)):
        if not isinstance(value, (int, np.integer)) or value < 2:
            raise InvalidParameterError(f"{name} must be an integer of at least 2 tokens; got {value!r}.")
    window = getattr(model.config, "max_position_embeddings", None)
    if window is not None and context + continuation > window:
        raise InvalidParameterError(f"context + continuation ({context + continuation} tokens) exceed the model's "
                                    f"window of {window}.")


def kv_eval(model, ids: Sequence[int], *, policy: str | None, budget=None, context: int = 768,
            continuation: int = 256, max_windows: int | None = 8, **options) -> KVEvalReport:
    """Continuation perplexity under a cache policy: ``ids`` cut into windows of ``context +
    continuation`` tokens; each window's context is prefilled and evicted to ``budget``, and
    the continuation's tokens are scored on what the cache kept (the first by the context's
    last logits). ``policy=None``: the full cache, the reference."""
    torch = _torch()
    from salience.compress.evaluate import windows as cut

    _check_lengths(model, context, continuation)
    if policy is not None:
        check_budget(budget, context, policy, n_sink=options.get("n_sink", 4), window=options.get("window", 64))
    batch = cut(ids, context + continuation, max_windows)
    nll, total_prefill, total_scoring, kept = [], 0.0, 0.0, None
    for window in batch:
        start = time.perf_counter()
        read = prefill(model, window[:context], policy=policy, budget=budget, **options)
        total_prefill += time.perf_counter() - start
        total_scoring += read.scoring_seconds
        kept = read.kept
        logits = continue_from(model, read.cache, window[context:], read.length)
        predicting = torch.cat([read.logits[:, None], logits[:, :-1]], dim=1)
        value, _ = _token_nll(torch, predicting, window[context:])
        nll.append(value / continuation)
    value = float(np.exp(np.mean(nll)))
    return KVEvalReport(policy, budget, value, len(batch), context, continuation, kept, total_prefill, total_scoring,
                        [float(x) for x in nll])


# ------------------------------------------------------------------------------------------
# passkey retrieval
_FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "


@dataclass
class PasskeyReport:
    policy: str | None
    budget: Any
    needles: int
    context: int
    nll: float  # mean over needles of the key's summed negative log-likelihood
    rank: float  # mean over needles and the key's tokens of the token's rank (1 = top choice)
    accuracy: float  # share of needles whose every key token is the model's top choice
    depths: list = field(default_factory=list)
    per_needle_nll: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(vars(self))


def _passkey_prompt(tokenizer, key: str, depth: float, context: int, filler: str):
    """(prompt ids, question ids, key ids): a haystack of ``context`` tokens with the needle at
    ``depth`` (0 = start, 1 = end), the question after it."""
    encode = (lambda text: list(tokenizer.encode(text, add_special_tokens=False)))
    needle = encode(f" The pass key is {key}. Remember it. {key} is the pass key. ")
    question = encode(" What is the pass key? The pass key is")
    key_ids = encode(f" {key}")
    fill = encode(filler)
    room = context - len(needle)
    if room < 1:
        raise InvalidParameterError(f"context of {context} tokens cannot hold the needle ({len(needle)} tokens).")
    hay = (fill * (room // len(fill) + 1))[:room]
    at = int(round(depth * room))
    return hay[:at] + needle + hay[at:], question, key_ids


def passkey_prompts(tokenizer, *, needles: int = 50, context: int = 768, seed: int = 0,
                    filler: str | None = None) -> list[dict]:
    """The needles of :func:`passkey`: for each, the haystack's token ids with the needle at its
    depth, the question's and the key's, the key and the depth."""
    needles = check_k(needles, "needles")
    rng = np.random.default_rng(seed)
    keys = rng.integers(10000, 100000, size=needles)
    out = []
    for key, depth in zip(keys.tolist(), np.linspace(0.0, 1.0, needles).tolist()):
        prompt, question, key_ids = _passkey_prompt(tokenizer, str(key), depth, context, filler or _FILLER)
        out.append({"prompt": prompt, "question": question, "key": key_ids, "passkey": str(key), "depth": depth})
    return out


def passkey(model, tokenizer, *, policy: str | None, budget=None, needles: int = 50, context: int = 768,
            seed: int = 0, filler: str | None = None, **options) -> PasskeyReport:
    """Passkey retrieval (Mohtashami and Jaggi, 2023): a 5-digit key hidden in ``context``
    tokens of filler at evenly spread depths, ``needles`` times with keys drawn from ``seed``;
    the haystack is prefilled (and evicted), then the question and the key are read at their
    original positions. Reports the key's negative log-likelihood, its tokens' ranks and
    exact retrieval (every key token the top choice)."""
    torch = _torch()
    items = passkey_prompts(tokenizer, needles=needles, context=context, seed=seed, filler=filler)
    if policy is not None:
        check_budget(budget, len(items[0]["prompt"]), policy, n_sink=options.get("n_sink", 4),
                     window=options.get("window", 64))
    nlls, ranks, exact = [], [], []
    for item in items:
        read = prefill(model, item["prompt"], policy=policy, budget=budget, **options)
        logits = continue_from(model, read.cache, item["question"] + item["key"], read.length)
        # the logits that predict the key's tokens: from the question's last token on
        value, token_ranks = _token_nll(torch, logits[:, len(item["question"]) - 1 : -1], item["key"])
        nlls.append(value)
        ranks.extend(token_ranks.tolist())
        exact.append(bool((token_ranks == 1).all()))
    return PasskeyReport(policy, budget, needles, context, float(np.mean(nlls)), float(np.mean(ranks)),
                         float(np.mean(exact)), [round(item["depth"], 4) for item in items], [float(x) for x in nlls])


def decode_speed(model, prompt_ids, *, policy: str | None, budget=None, new_tokens: int = 32, **options) -> dict:
    """Greedy decoding speed after a prompt: prefill seconds and decoded tokens per second, the
    cache evicted by ``policy`` (or full). Decoding attends to the kept tokens only."""
    torch = _torch()
    start = time.perf_counter()
    read = prefill(model, prompt_ids, policy=policy, budget=budget, **options)
    prefill_seconds = time.perf_counter() - start
    token, cache, n = read.logits.argmax(dim=-1), read.cache, read.length
    start = time.perf_counter()
    with torch.no_grad():
        for step in range(new_tokens):
            out = model(input_ids=token[:, None], **{cache_argument(model): cache},
                        position_ids=torch.tensor([[n + step]]), use_cache=True)
            token = out.logits[:, -1].argmax(dim=-1)
    seconds = time.perf_counter() - start
    return {"policy": policy, "budget": budget, "prefill_seconds": prefill_seconds,
            "tokens_per_second": new_tokens / seconds, "cache_tokens": int(cache.get_seq_length())}
