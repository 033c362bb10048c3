"""KV-cache eviction for causal language models (``pip install 'salience[lm]'``).

After the prompt is read (the prefill), a policy of the ``kv`` family
(:mod:`salience.compress.kv_policies`) scores every layer's cached tokens and the cache keeps
the ``budget`` best per head; the continuation then attends to the kept tokens only, at their
original positions (the kept keys carry their rotary positions, the new tokens get
``n_prompt + i``). Exactly ``keep`` tokens stay per head, chosen by the core's selector (ties:
the earlier token is evicted first).

Use it around any forward pass or ``generate``: ``with evict(model, "snapkv", budget=0.25):
model.generate(ids, max_new_tokens=20)`` compresses the cache right after the prefill. Or
:func:`prefill` (the cache and the next position) then :func:`continue_from` for exact
control; :mod:`salience.compress.kv_eval` measures continuation perplexity and passkey
retrieval.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from salience.compress.kv_policies import KVPolicy, _torch
from salience.core.base import method_of
from salience.core.masks import lowest_k_mask
from salience.exceptions import InvalidParameterError
from salience.models.kv import cache_argument

__all__ = ["evict", "prefill", "continue_from", "Prefill", "check_budget", "kv_policy"]


def kv_policy(policy: str | KVPolicy, **params) -> KVPolicy:
    """A registered ``kv`` policy by name, built with ``params``, or a :class:`KVPolicy` as it is."""
    return method_of("kv", policy, KVPolicy, **params)


def check_budget(budget, n_tokens: int, policy: str | KVPolicy, **params) -> int:
    """The tokens kept per head: ``budget`` a fraction in (0, 1] of ``n_tokens`` (0.25 keeps a
    quarter, kvpress's compression ratio 0.75) or a count >= 1. Refused when it cannot hold
    what the policy always keeps (the sinks and one recent token; the observation window)."""
    policy = kv_policy(policy, **params)
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
    protected, what = policy.protected()
    if keep < n_tokens and keep < protected:
        raise InvalidParameterError(f"budget {budget!r} keeps {keep} of {n_tokens} tokens, fewer than {policy.name} "
                                    f"always keeps ({what}: {protected}): raise the budget or lower n_sink/window.")
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
def evict(model, policy: str | KVPolicy, *, budget, **params):
    """Within the block, every prefill (a forward pass that fills an empty cache, as the first
    step of ``generate``) leaves only ``budget`` tokens per head in each layer's cache, chosen
    by ``policy`` (a registered ``kv`` name built with ``params``, or a :class:`KVPolicy`).
    Yields a record of what was done (tokens kept, scoring seconds). Later forward passes and
    decoding steps are unchanged; their positions continue from the prompt's length (pass
    ``position_ids`` when calling the model directly, or use :func:`continue_from`)."""
    torch = _torch()
    policy = kv_policy(policy, **params)
    modules = _attention_modules(model)
    state = _EvictionState(policy.name, budget)

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
        keep = check_budget(budget, n, policy)
        if keep < n:
            count = policy.query_count(n)
            with torch.no_grad():
                queries = (_queries(torch, module, hidden, kwargs["position_embeddings"], count) if count else None)
                scores = policy.token_scores(keys, values, queries, scaling=getattr(module, "scaling", None))
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


def prefill(model, prompt_ids, *, policy: str | KVPolicy | None = None, budget=None, **params) -> Prefill:
    """Read ``prompt_ids`` (1-D or (1, n)) into a fresh cache, evicted by ``policy`` (built
    with ``params``) to ``budget`` (no policy: the full cache)."""
    torch = _torch()
    ids = torch.as_tensor(np.asarray(prompt_ids), dtype=torch.long).reshape(1, -1)
    if ids.shape[1] == 0:
        raise InvalidParameterError("the prompt holds no tokens.")
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    context = evict(model, policy, budget=budget, **params) if policy is not None else contextlib.nullcontext()
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
