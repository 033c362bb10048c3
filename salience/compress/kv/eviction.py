"""KV-cache eviction for causal language models (``pip install 'salience[lm]'``).

After the prompt is read (the prefill), a policy of the ``kv`` family
(:mod:`salience.compress.kv.policy`) scores every layer's cached tokens and the cache keeps
the ``budget`` best per head; the continuation then attends to the kept tokens only, at their
original positions (the kept keys carry their rotary positions, the new tokens get
``n_prompt + i``), unless the policy rerotates the kept keys to consecutive positions
(``rerotate``, ``finch``: the new tokens then follow the kept ones). Exactly ``keep`` tokens stay per head, chosen by the core's selector (ties:
the earlier token is evicted first).

Use it around any forward pass or ``generate``: ``with evict(model, "snapkv", budget=0.25):
model.generate(ids, max_new_tokens=20)`` compresses the cache right after the prefill. Or
:func:`prefill` (the cache and the next position) then :func:`continue_from` for exact
control; :mod:`salience.compress.kv.evaluation` measures continuation perplexity and passkey
retrieval.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from salience.compress.kv.channels import KeyChannelPolicy, check_key_channels, key_channel_policy, prune_key_channels
from salience.compress.kv.model_layers import attention_modules, layer_queries, layer_scores, rotary_of
from salience.compress.kv.policy import KVPolicy, _torch
from salience.core.base import method_of
from salience.exceptions import InvalidParameterError
from salience.models.kv import cache_argument
from salience.extras import torch

__all__ = ["evict", "prefill", "continue_from", "prefill_and_continue", "attend_kept", "Prefill", "check_budget", "kv_policy",
           "policy_token_scores"]


def kv_policy(policy: str | KVPolicy, **params) -> KVPolicy:
    """A registered ``kv`` policy by name, built with ``params``, or a :class:`KVPolicy` as it is."""
    return method_of("kv", policy, KVPolicy, **params)


def check_budget(budget, n_tokens: int, policy: str | KVPolicy, **params) -> int:
    """The tokens kept per head: ``budget`` a fraction in (0, 1] of ``n_tokens`` (0.25 keeps a
    quarter, kvpress's compression ratio 0.75) or a count >= 1. Refused when it cannot hold
    what the policy always keeps (the sinks and one recent token; the observation window)."""
    policy = kv_policy(policy, **params)
    if not policy.needs.budgeted:
        if budget is not None:
            raise InvalidParameterError(f"policy {policy.name!r} evicts by its threshold, not a budget: give "
                                        f"budget=None (got {budget!r}).")
        return n_tokens
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
                                    f"always keeps ({what}: {protected}): raise the budget or shrink what it keeps.")
    return keep


@dataclass
class _EvictionState:
    policy: str | None
    budget: Any
    kept: int | None = None
    kept_by_layer: dict = field(default_factory=dict)
    prompt_tokens: int | None = None
    seconds: float = 0.0
    layers: int = 0
    continue_at: int | None = None  # where the continuation's positions start, for a rerotating policy
    held: list = field(default_factory=list)  # an unbudgeted policy's mean tokens per head, layer by layer


@contextlib.contextmanager
def evict(model, policy: str | KVPolicy | None, *, budget=None, keep_last: int = 0, key_channels: float | None = None,
          channel_policy: str | KeyChannelPolicy = "think", **params):
    """Within the block, every prefill (a forward pass that fills an empty cache, as the first
    step of ``generate``) leaves only ``budget`` tokens per head in each layer's cache, chosen
    by ``policy`` (a registered ``kv`` name built with ``params``, or a :class:`KVPolicy`).
    ``keep_last``: the prompt's last tokens (a question read with the context) are scored
    with the rest, but never evicted and not counted in the budget, which applies to the
    tokens before them (kvpress compresses the context, never the question).
    ``key_channels``: the share of key channels kept in every head, the others zeroed by a
    ``kv_channels`` policy (``channel_policy``, ThinK by default) after the tokens are chosen
    (``policy=None``: channels only, every token kept).
    A ``decoding`` policy (:mod:`salience.compress.kv.decoding`) also cuts the cache back while
    the block decodes, every ``compression_interval`` steps.
    Yields a record of what was done (tokens kept, scoring seconds). Later forward passes and
    decoding steps are otherwise unchanged; their positions continue from the prompt's length (pass
    ``position_ids`` when calling the model directly, or use :func:`continue_from`), or, for a
    policy that rerotates its kept keys (``rerotate``, ``finch``), from the tokens the first
    layer kept (the record's ``continue_at``; ``generate`` counts positions from the cache's
    length, which is that)."""
    _torch()
    run = _EvictionRun(model, policy, budget, keep_last, key_channels, channel_policy, params)
    handles = [module.register_forward_hook(run.layer_hook, with_kwargs=True) for module in run.modules]
    if run.policy.needs.when == "after_prefill":
        handles.append(model.register_forward_hook(run.after_prefill_hook, with_kwargs=True))
    try:
        with attend_kept(model):
            yield run.state
    finally:
        for handle in handles:
            handle.remove()


class _EvictionRun:
    """One ``evict`` block: the policy checked against the model and the arguments, and the
    hooks that evict each layer's cache as the prefill fills it (or after the whole prefill,
    or while decoding)."""

    def __init__(self, model, policy, budget, keep_last, key_channels, channel_policy, params):
        if policy is None and key_channels is None:
            raise InvalidParameterError("evict needs a token policy, key_channels, or both.")
        self.channels, self.key_channels = None, key_channels
        if key_channels is not None:
            check_key_channels(key_channels)
            self.channels = key_channel_policy(channel_policy)
        if policy is None:  # key channels only: every token kept
            if params:
                raise InvalidParameterError(f"parameters {sorted(params)} given without a token policy.")
            policy, budget, label = kv_policy("streaming_llm"), 1.0, None
        else:
            policy = kv_policy(policy, **params)
            label = policy.name
        self.model, self.policy, self.budget, self.needs = model, policy, budget, policy.needs
        self.modules = attention_modules(model)
        self.decoding = policy.run(budget, len(self.modules)) if self.needs.when == "decoding" else None
        # the policy that evicts the prompt: a decoding policy's prefill policy (None: kept whole)
        self.scorer = policy if self.decoding is None else policy.prefill_policy
        self.rotary = self._checked_model(model, policy)
        self.state = _EvictionState(label, budget)
        if isinstance(keep_last, bool) or not isinstance(keep_last, (int, np.integer)) or keep_last < 0:
            raise InvalidParameterError(f"keep_last must be a whole number of tokens >= 0; got {keep_last!r}.")
        if self.needs.question and not keep_last:
            raise InvalidParameterError(f"policy {policy.name!r} scores with the question's queries: read the question "
                                        "with the prompt and pass keep_last (its tokens), i.e. query-aware eviction.")
        self.keep_last, self.busy = keep_last, []
        if self.needs.when == "after_prefill" and self.channels is not None:  # kvpress's ComposedPress refuses KVzip likewise
            raise InvalidParameterError(f"policy {policy.name!r} evicts after the whole prefill; key_channels cannot be "
                                        "composed with it.")

    def _checked_model(self, model, policy):
        """The model's rotation when the policy needs it; refused, naming why, when it cannot run."""
        policy.check_model(model)
        needs_rotary = "rotary" in self.needs.reads or self.needs.rerotates
        rotary = rotary_of(model) if needs_rotary else None
        if needs_rotary and rotary is None:
            raise InvalidParameterError(f"policy {policy.name!r} reads the model's rotary embedding, which "
                                        f"{type(model).__name__} does not keep as model.rotary_emb.")
        if self.needs.rerotates and any(getattr(module, "is_sliding", False) for module in self.modules):
            raise InvalidParameterError(f"policy {policy.name!r} moves the kept keys to new positions; "
                                        f"{type(model).__name__}'s sliding-window layers keep theirs, so the layers "
                                        "would disagree on where the continuation starts.")
        return rotary

    def budget_of(self, n: int) -> int:
        """Tokens kept per head of the ``n - keep_last`` before the kept question."""
        if self.keep_last >= n:
            raise InvalidParameterError(f"keep_last ({self.keep_last}) must leave tokens to compress in a prompt of "
                                        f"{n}.")
        return check_budget(self.budget, n - self.keep_last, self.scorer or self.policy)

    def layer_hook(self, module, args, kwargs, output):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        if cache is None or hidden is None or getattr(module, "is_sliding", False):
            return output  # no cache, or a sliding-window layer that evicts by itself
        layer = cache.layers[module.layer_idx]
        n = layer.keys.shape[-2]
        start = time.perf_counter()
        if self.decoding is not None and hidden.shape[1] != n:  # a decoding step: cut back when its interval is up
            cut = self.decoding.step(module, layer, hidden, kwargs["position_embeddings"], self.rotary)
            if cut is not None:
                self.state.kept_by_layer[module.layer_idx] = self.state.kept = cut
                self.state.seconds += time.perf_counter() - start
            return output
        if hidden.shape[1] != n or self.needs.when == "after_prefill":  # not a prefill, or evicted after it
            return output
        self._evict_prefilled(module, layer, hidden, kwargs["position_embeddings"], n)
        self.state.seconds += time.perf_counter() - start
        return output

    def _evict_prefilled(self, module, layer, hidden, position_embeddings, n: int) -> None:
        """Evict one layer's cache just filled by the prompt's ``n`` tokens, and record it."""
        scorer, keep_last, state = self.scorer, self.keep_last, self.state
        base = self.budget_of(n)
        keep = n if scorer is None else scorer.layer_keep(base, n - keep_last, module.layer_idx, len(self.modules)) + keep_last
        unbudgeted = scorer is not None and not scorer.needs.budgeted  # dms: evicts by its threshold
        kept = scores = None  # every token kept
        if keep < n or unbudgeted:
            scores = layer_scores(scorer, module, layer.keys, layer.values, hidden, position_embeddings,
                                  scorer.query_count(n, question=keep_last), rotary=self.rotary, keep=keep,
                                  question=keep_last)
            if keep_last:
                scores[..., n - keep_last:] = np.inf
            kept = ~torch.as_tensor(scorer.evicted(scores, n - keep))
            keys, values = scorer.carried(layer.keys, layer.values, kept, rotary=self.rotary)
            layer.keys, layer.values, padding = _compact(keys, values, kept)
            setattr(layer, _PADDING, padding)
        else:
            setattr(layer, _PADDING, None)  # kept whole: its own length may differ from other layers'
        if self.decoding is not None:
            self.decoding.prefilled(module.layer_idx, n, kept, scores)
        if self.channels is not None:
            with torch.no_grad():
                queries = layer_queries(module, hidden, position_embeddings, self.channels.query_count(n))
                layer.keys = prune_key_channels(layer.keys, self.channels.channel_scores(layer.keys, queries),
                                                self.key_channels)
        state.kept, state.prompt_tokens = (n if scorer is None else base + keep_last), n
        if kept is not None and getattr(scorer, "chunk_length", None):  # chunked: each chunk's share, rounded down
            state.kept = int(kept[0, 0].sum())
        if unbudgeted:  # as many as its threshold left: the mean over heads and layers
            state.held.append(n if kept is None else float(kept.float().sum(dim=-1).mean()))
            state.kept = int(round(float(np.mean(state.held))))
        state.kept_by_layer[module.layer_idx] = int(layer.keys.shape[-2])  # the most any head of it kept
        if self.needs.rerotates and module is self.modules[0]:
            state.continue_at = int(layer.keys.shape[-2])
        state.layers += 1

    def after_prefill_hook(self, whole, args, kwargs, output):
        """KVzip's kind: scored by passes of the model after the prefill, then evicted."""
        cache = kwargs.get(cache_argument(self.model))
        ids = kwargs.get("input_ids", args[0] if args else None)
        if self.busy or cache is None or ids is None or cache.get_seq_length() != ids.shape[-1]:
            return output  # its own passes, or not a prefill
        n, state = ids.shape[-1], self.state
        start = time.perf_counter()
        base = self.budget_of(n)
        if base + self.keep_last < n:
            self.busy.append(True)
            try:
                evicted = self.policy.evicted_layers(self.model, self.modules, cache, ids.reshape(1, -1),
                                                     base + self.keep_last, self.keep_last)
            finally:
                self.busy.clear()
            for module, out in zip(self.modules, evicted):
                layer = cache.layers[module.layer_idx]
                layer.keys, layer.values, padding = _compact(layer.keys, layer.values,
                                                             ~torch.as_tensor(np.asarray(out)))
                setattr(layer, _PADDING, padding)
                state.kept_by_layer[module.layer_idx] = int(layer.keys.shape[-2])
        state.kept, state.prompt_tokens, state.layers = base + self.keep_last, n, len(self.modules)
        state.seconds += time.perf_counter() - start
        return output


def policy_token_scores(model, policy: str | KVPolicy, prompt_ids, **params) -> np.ndarray:
    """One score per prompt token under a ``kv`` policy that scores the prefill's cache: each
    layer's per-head scores turned into ranks within the head (0 the least, 1 the most kept),
    averaged over every head and layer; the cache is not evicted. A policy that scores after the
    prefill or while decoding has no such scores and is refused."""
    torch = _torch()
    policy = kv_policy(policy, **params)
    if policy.needs.when != "prefill" or not policy.needs.budgeted:
        raise InvalidParameterError(f"policy {policy.name!r} does not score the prefill's tokens once (it evicts while "
                                    "decoding, after the prefill, or by a threshold): its token scores do not stand "
                                    "alone.")
    policy.check_model(model)
    rotary = rotary_of(model) if "rotary" in policy.needs.reads or policy.needs.rerotates else None
    ranks = []

    def hook(module, args, kwargs, output):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        if cache is None or hidden is None or getattr(module, "is_sliding", False):
            return output
        layer = cache.layers[module.layer_idx]
        n = layer.keys.shape[-2]
        scores = layer_scores(policy, module, layer.keys, layer.values, hidden, kwargs["position_embeddings"],
                              policy.query_count(n), rotary=rotary, keep=n // 2)
        order = np.argsort(np.argsort(scores[0], axis=-1, kind="stable"), axis=-1, kind="stable")
        ranks.append(order / max(n - 1, 1))
        return output

    handles = [module.register_forward_hook(hook, with_kwargs=True) for module in attention_modules(model)]
    try:
        with torch.no_grad():
            _read_prompt(model, _prompt(prompt_ids))
    finally:
        for handle in handles:
            handle.remove()
    return np.mean(np.concatenate(ranks, axis=0), axis=0)


#: the attribute of an evicted cache layer that marks its padding slots (heads that kept fewer
#: tokens than the layer's most), or None
_PADDING = "salience_padding"


def _compact(keys, values, kept):
    """Each head's kept tokens (``kept`` boolean (b, kv_heads, n)) in position order. Heads
    that keep fewer than the most are padded to its count with evicted tokens, marked in the
    returned padding mask (b, kv_heads, m) so attention never reads them; None when every head
    keeps the same number."""
    n = kept.shape[-1]
    counts = kept.sum(dim=-1)
    width = int(counts.max())
    # kept tokens first, each group in position order
    order = torch.argsort(torch.where(kept, 0, n) + torch.arange(n), dim=-1)[..., :width]
    index = order[..., None]
    keys = keys.gather(2, index.expand(-1, -1, -1, keys.shape[-1])).contiguous()
    values = values.gather(2, index.expand(-1, -1, -1, values.shape[-1])).contiguous()
    padding = torch.arange(width) >= counts[..., None]
    return keys, values, padding if bool(padding.any()) else None


@contextlib.contextmanager
def attend_kept(model):
    """Within the block, attention over a cache evicted by :func:`evict` reads only what each
    head kept: padding slots (heads of one layer keeping different numbers of tokens) are
    masked out, and layers of different lengths (per-layer budgets) each get a causal mask of
    their own length. Batches of one sequence (no padding mask of the caller's)."""
    torch = _torch()

    def hook(module, args, kwargs):
        cache = kwargs.get("past_key_values", kwargs.get("cache"))
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        if cache is None or hidden is None or module.layer_idx >= len(cache.layers):
            return None
        layer = cache.layers[module.layer_idx]
        if not hasattr(layer, _PADDING) or getattr(layer, "keys", None) is None:
            return None  # not evicted here: the model's own mask is right
        padding, q = getattr(layer, _PADDING), hidden.shape[1]
        if padding is None and q == 1:
            return None  # one new token over an unpadded cache: nothing to mask
        past = layer.keys.shape[-2]
        mask = torch.zeros(hidden.shape[0], 1, q, past + q, dtype=hidden.dtype)
        future = torch.arange(past + q)[None, :] > (past + torch.arange(q))[:, None]
        mask = mask.masked_fill(future, float("-inf"))
        if padding is not None:
            heads = module.config.num_attention_heads
            slots = padding.repeat_interleave(heads // padding.shape[1], dim=1)  # (b, heads, m)
            slots = torch.nn.functional.pad(slots, (0, past + q - slots.shape[-1]))
            mask = mask.expand(-1, heads, -1, -1).masked_fill(slots[:, :, None, :], float("-inf"))
        return args, {**kwargs, "attention_mask": mask}

    handles = [module.register_forward_pre_hook(hook, with_kwargs=True) for module in attention_modules(model)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@dataclass
class Prefill:
    """A prompt read into a cache: the cache, the logits of the prompt's last token (they
    predict the first continuation token), where the continuation's positions start (the
    prompt's length; the tokens kept when the policy rerotates them), the tokens kept per head
    and the seconds spent scoring them."""

    cache: Any
    logits: Any
    length: int
    kept: int
    scoring_seconds: float = 0.0


def _prompt(prompt_ids):
    ids = torch.as_tensor(np.asarray(prompt_ids), dtype=torch.long).reshape(1, -1)
    if ids.shape[1] == 0:
        raise InvalidParameterError("the prompt holds no tokens.")
    return ids


def _read_prompt(model, ids):
    """A fresh cache with ``ids`` (1, n) read into it, and the logits of the last token."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, **{cache_argument(model): cache}, use_cache=True, logits_to_keep=1)
    return cache, out.logits[:, -1]


def _eviction(model, policy, budget, keep_last, key_channels, channel_policy, params):
    if policy is None and key_channels is None:
        return contextlib.nullcontext()
    return evict(model, policy, budget=budget, keep_last=keep_last, key_channels=key_channels,
                 channel_policy=channel_policy, **params)


def _prefilled(cache, logits, n: int, state) -> Prefill:
    if state is None:
        return Prefill(cache, logits, n, n)
    return Prefill(cache, logits, n if state.continue_at is None else state.continue_at, state.kept, state.seconds)


def prefill(model, prompt_ids, *, policy: str | KVPolicy | None = None, budget=None, keep_last: int = 0,
            key_channels: float | None = None, channel_policy: str | KeyChannelPolicy = "think",
            **params) -> Prefill:
    """Read ``prompt_ids`` (1-D or (1, n)) into a fresh cache, evicted by ``policy`` (built
    with ``params``) to ``budget`` (no policy: the full cache); ``keep_last``, ``key_channels``
    and ``channel_policy`` as in :func:`evict`. A ``decoding`` policy's cuts while decoding
    need the block open: use :func:`prefill_and_continue` for a prompt and its continuation."""
    torch = _torch()
    ids = _prompt(prompt_ids)
    with torch.no_grad(), _eviction(model, policy, budget, keep_last, key_channels, channel_policy, params) as state:
        cache, logits = _read_prompt(model, ids)
    return _prefilled(cache, logits, ids.shape[1], state)


def continue_from(model, cache, ids, start: int, *, stepwise: bool = False):
    """Logits (1, m, vocab) of a continuation ``ids`` read onto ``cache`` at its original
    positions ``start .. start + m - 1`` (whatever the cache kept); ``stepwise``: one token
    per forward pass, as decoding reads them (what a ``decoding`` policy cuts between)."""
    torch = _torch()
    ids = torch.as_tensor(np.asarray(ids), dtype=torch.long).reshape(1, -1)
    positions = torch.arange(start, start + ids.shape[1])[None]
    with torch.no_grad(), attend_kept(model):
        if not stepwise:
            return model(input_ids=ids, **{cache_argument(model): cache}, position_ids=positions, use_cache=True).logits
        return torch.cat([model(input_ids=ids[:, i:i + 1], **{cache_argument(model): cache},
                                position_ids=positions[:, i:i + 1], use_cache=True).logits
                          for i in range(ids.shape[1])], dim=1)


def prefill_and_continue(model, prompt_ids, continuation_ids, *, policy: str | KVPolicy | None = None, budget=None,
         keep_last: int = 0, key_channels: float | None = None, channel_policy: str | KeyChannelPolicy = "think",
         **params):
    """A prompt prefilled (as :func:`prefill`) and a continuation read after it (teacher
    forced, as :func:`continue_from`): ``(Prefill, logits (1, m, vocab))``. Under a
    ``decoding`` policy the continuation is read one token per step inside the eviction block,
    so the cache is cut back while it grows; the Prefill's ``kept`` and seconds then cover
    the whole reading."""
    if policy is None or kv_policy(policy, **params).needs.when != "decoding":
        first = prefill(model, prompt_ids, policy=policy, budget=budget, keep_last=keep_last,
                        key_channels=key_channels, channel_policy=channel_policy, **params)
        return first, continue_from(model, first.cache, continuation_ids, first.length)
    torch = _torch()
    ids = _prompt(prompt_ids)
    with torch.no_grad(), _eviction(model, policy, budget, keep_last, key_channels, channel_policy, params) as state:
        cache, logits = _read_prompt(model, ids)
        rest = continue_from(model, cache, continuation_ids, ids.shape[1], stepwise=True)
    return _prefilled(cache, logits, ids.shape[1], state), rest
