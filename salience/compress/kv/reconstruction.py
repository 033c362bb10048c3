"""KVzip (Kim et al., 2025; kvpress's KVzipPress): which cached tokens the model needs to
*repeat its context*. After the prefill, the model is asked to reconstruct the context ("Repeat
the previous context exactly." then the context itself) on top of the full cache; a token's
score is the largest attention any reconstruction query of a key/value head's group pays it,
the softmax taken over the attention sinks, the chunk being repeated and the reconstruction's
own tokens. Contexts longer than ``chunk_size`` are repeated chunk by chunk, each prompted
with the previous chunk's last 8 tokens. The cache then keeps the best tokens across every
layer and head together (``layerwise=False``, the default: layers and heads keep different
numbers, the total as the uniform budget's) or across the heads of each layer; the first
``n_sink`` tokens are always kept. Query-agnostic: the scores do not depend on a question.

The reconstruction costs two to three prefills. Its prompt is tokenized by ``tokenizer``;
``suffix`` separates the instruction from the repeated text ("\\n" for raw text, as kvpress
does for a model without a chat template; a chat model's assistant turn otherwise).

KVgrad (kvpress's KVgradPress) replays the same reconstruction and weighs each attention
weight by what the token's value writes into the residual stream (``||v W_O||``) and by how
much the last layer's hidden states depend on that stream at the reconstruction token (the
norm of the gradient of ``sum ||h||^2`` with respect to the attention's output: input x
gradient attribution); a token scores the largest product over the group's queries. One
backward pass per chunk: three to four prefills in all.
"""

from __future__ import annotations

import numpy as np

from salience.compress.kv.model_layers import attention_modules, layer_queries
from salience.compress.kv.policy import KVNeeds, KVPolicy
from salience.core.base import register_method
from salience.core.masks import lowest_k_mask
from salience.core.params import Exempt, Interval
from salience.exceptions import InvalidParameterError
from salience.extras import torch

__all__ = ["KVzip", "KVgrad", "reconstruction_scores", "reconstruction_weights", "kvzip_plus_scores"]

#: the reconstruction's prompts (KVzip's): the first chunk, and the later ones (followed by the
#: previous chunk's last tokens)
FIRST_PROMPT = "\n\nRepeat the previous context exactly."
LATER_PROMPT = "\n\nRepeat the part of the previous context exactly, starting with"
OVERLAP = 8


def reconstruction_weights(keys, queries, scaling: float, start: int, end: int, sink: int):
    """Attention weights (b, kv_heads, groups, q, end - start) of the reconstruction's ``q``
    queries (b, heads, q, d), rotary positions applied, on the cached tokens ``start .. end``:
    ``keys`` (b, kv_heads, N, d) hold the context then the reconstruction's own q keys (its
    last). Each query's softmax runs over the first ``sink`` keys, the chunk and the
    reconstruction's own keys (causally)."""
    q, n_total = queries.shape[-2], keys.shape[-2]
    b, n_kv, _, d = keys.shape
    groups = queries.shape[1] // n_kv
    kept = torch.cat([keys[:, :, :sink], keys[:, :, start:end], keys[:, :, n_total - q:]], dim=2)
    dtype = torch.promote_types(queries.dtype, torch.float32)
    grouped = queries.to(dtype).reshape(b, n_kv, groups, q, d)
    logits = grouped @ kept.to(dtype)[:, :, None].transpose(-1, -2) * scaling  # (b, kv, g, q, sink + chunk + q)
    future = torch.triu(torch.ones(q, q, dtype=torch.bool), diagonal=1)
    logits[..., -q:] = logits[..., -q:].masked_fill(future, float("-inf"))
    return torch.softmax(logits, dim=-1)[..., sink : sink + end - start]


def reconstruction_scores(keys, queries, scaling: float, start: int, end: int, sink: int):
    """Scores (b, kv_heads, end - start) of the cached tokens ``start .. end``: the largest
    :func:`reconstruction_weights` any query of a token's group gives it."""
    return reconstruction_weights(keys, queries, scaling, start, end, sink).amax(dim=(2, 3))


def written_norms(module, values, dtype):
    """||W_O,h v_j|| (b, kv_heads, groups, n): what each value (b, kv_heads, n, d) writes into
    the residual stream through each query head h of its group (the output projection's
    columns of that head)."""
    b, n_kv, _, d = values.shape
    w_o = module.o_proj.weight.view(-1, n_kv, module.o_proj.weight.shape[1] // (n_kv * d), d)
    return torch.einsum("jhgi,bhti->bhgtj", w_o.to(dtype), values.to(dtype)).norm(dim=-1)


@register_method("kv", "kvzip", "KV cache: attention each token receives while the model repeats its context "
                                "(KVzip, Kim et al., 2025); budgets shared across layers and heads")
class KVzip(KVPolicy):
    """See the module docstring. ``score(keys, values, queries=...)`` scores one layer for a
    single chunk: ``keys`` the context then the reconstruction's own keys (the last as many as
    ``queries``), which are never cache tokens and score above all."""

    needs = KVNeeds(queries="all", when="after_prefill")
    _parameter_constraints = {"layerwise": [bool], "suffix": [str],
                              "tokenizer": [None, Exempt("the model's tokenizer, given by the caller")],
                              "n_sink": [Interval("int", 0)], "chunk_size": [Interval("int", OVERLAP + 1)]}

    def __init__(self, *, tokenizer=None, n_sink: int = 4, chunk_size: int = 2048, layerwise: bool = False,
                 suffix: str = "\n"):
        self.tokenizer, self.n_sink, self.chunk_size = tokenizer, n_sink, chunk_size
        self.layerwise, self.suffix = layerwise, suffix
        super().__init__()

    def protected(self) -> tuple[int, str]:
        return max(1, self.n_sink), f"the {self.n_sink} sinks"

    def _scores(self, keys, values, queries, scaling, n):
        context = n - queries.shape[-2]
        scores = reconstruction_scores(keys, queries, scaling, 0, context, 0)
        own = torch.full(scores.shape[:2] + (n - context,), float(scores.max()) + 1 if context else 1.0,
                         dtype=scores.dtype)
        return torch.cat([scores, own], dim=-1)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def evicted_layers(self, model, modules, cache, ids, keep: int, keep_last: int = 0) -> list:
        """After the prefill of ``ids`` (1, n) into ``cache``: the reconstruction passes, then
        which tokens each layer evicts, boolean (1, kv_heads, n) per layer, ``keep`` per head
        on average (the last ``keep_last`` never evicted)."""
        from salience.compress.kv.policy import _torch

        _torch()  # torch installed, or the error naming the extra
        if self.tokenizer is None:
            raise InvalidParameterError(f"policy {self.name!r} needs tokenizer= (it prompts the model to repeat its "
                                        "context).")
        refuse_sliding_windows(self, modules)
        n = ids.shape[1]
        n_kv = cache.layers[0].keys.shape[1]
        scores = np.zeros((len(modules), 1, n_kv, n))
        for start, end, repeat in self.reconstructions(ids):
            self._score_chunk(model, modules, cache, repeat, n, start, end, scores)
        scores[..., : self.n_sink] = scores.max() + 1  # the sinks stay
        if keep_last:
            scores[..., n - keep_last :] = np.inf
        count = n - keep  # evicted per head on average
        if self.layerwise:
            return [lowest_k_mask(s.reshape(1, -1), n_kv * count).reshape(1, n_kv, n) for s in scores]
        flat = lowest_k_mask(scores.reshape(1, -1), len(modules) * n_kv * count)
        return list(flat.reshape(len(modules), 1, n_kv, n))

    def reconstructions(self, ids):
        """(start, end, ids (1, r)) of each chunk's reconstruction prompt: the instruction (the
        later chunks': with the previous chunk's last tokens), ``suffix``, the chunk."""
        ids = ids.reshape(-1).tolist()
        suffix = self._encode(self.suffix)
        for start in range(0, len(ids), self.chunk_size):
            end = min(start + self.chunk_size, len(ids))
            prompt = (self._encode(FIRST_PROMPT) if start == 0
                      else self._encode(LATER_PROMPT) + ids[max(0, start - OVERLAP) : start])
            yield start, end, torch.tensor([prompt + suffix + ids[start:end]])

    def _score_chunk(self, model, modules, cache, repeat, n: int, start: int, end: int, scores) -> None:
        """One reconstruction pass of ``repeat`` (1, r) on the cache of the ``n`` context
        tokens, scoring the chunk ``start .. end`` of every layer into ``scores``; each layer's
        cache is cut back to the context as the pass leaves it."""
        def score_layer(module, layer, queries, hidden):
            part = reconstruction_scores(layer.keys, queries, module.scaling, start, end,
                                         min(self.n_sink, start))
            scores[module.layer_idx][..., start:end] = part.double().numpy()

        replay_on_cache(model, modules, cache, repeat, n, score_layer)


def refuse_sliding_windows(policy, modules) -> None:
    """Refuse, naming the policy, a model with sliding-window attention layers: a policy that
    reads the context again on its cache cannot score them (they evict by themselves), as
    kvpress's KVzipPress refuses Gemma-3."""
    if any(getattr(module, "is_sliding", False) for module in modules):
        raise InvalidParameterError(f"policy {policy.name!r} does not apply to sliding-window attention layers "
                                    "(they evict by themselves), as kvpress's KVzipPress refuses Gemma-3.")


def replay_on_cache(model, modules, cache, ids, n: int, read_layer) -> None:
    """Read ``ids`` (1, r) after the ``n`` context tokens of a prefilled ``cache``, at positions
    n .., without gradients: each attention module's cache gets the pass's keys and values,
    ``read_layer(module, cache_layer, queries, hidden)`` sees them with the pass's queries
    (rotary positions applied) and the attention's input hidden states, then the layer is cut
    back to the context (KVzip's reconstruction, KVCompose's second reading)."""
    from salience.models.kv import cache_argument

    def hook(module, args, kwargs, output):
        layer = cache.layers[module.layer_idx]
        hidden = kwargs["hidden_states"]
        with torch.no_grad():
            read_layer(module, layer, layer_queries(module, hidden, kwargs["position_embeddings"], hidden.shape[1]),
                       hidden)
        layer.keys, layer.values = layer.keys[:, :, :n], layer.values[:, :, :n]  # the context only
        return output

    handles = [module.register_forward_hook(hook, with_kwargs=True) for module in modules]
    try:
        with torch.no_grad():
            model(input_ids=ids, **{cache_argument(model): cache}, use_cache=True,
                  position_ids=torch.arange(n, n + ids.shape[1])[None])
    finally:
        for handle in handles:
            handle.remove()


@register_method("kv", "kvgrad", "KV cache: KVzip's reconstruction attention x the value's write into the residual "
                                 "stream x the gradient of the last hidden states there (KVgrad; kvpress's "
                                 "KVgradPress)")
class KVgrad(KVzip):
    """See the module docstring; budgets and sinks as :class:`KVzip`'s, chunks of 512 by
    default (kvpress's: finer gradients for more passes). The model's parameters are frozen
    during the backward passes (only the activations' gradients are needed) and restored."""

    def __init__(self, *, tokenizer=None, n_sink: int = 4, chunk_size: int = 512, layerwise: bool = False,
                 suffix: str = "\n"):
        super().__init__(tokenizer=tokenizer, n_sink=n_sink, chunk_size=chunk_size, layerwise=layerwise,
                         suffix=suffix)

    def _score_chunk(self, model, modules, cache, repeat, n: int, start: int, end: int, scores) -> None:
        from salience.models.lm import decoder_layers
        from salience.models.kv import cache_argument

        weights, outputs, last = {}, {}, {}
        sink = min(self.n_sink, start)

        def attention_hook(module, args, kwargs, output):
            layer = cache.layers[module.layer_idx]
            hidden = kwargs["hidden_states"]
            with torch.no_grad():
                queries = layer_queries(module, hidden, kwargs["position_embeddings"], hidden.shape[1])
                weights[module.layer_idx] = reconstruction_weights(layer.keys, queries, module.scaling,
                                                                   start, end, sink)
            output[0].retain_grad()
            outputs[module.layer_idx] = output[0]
            # the context only, cut from the pass's graph (the next chunk's backward must not reach this one's)
            layer.keys, layer.values = layer.keys[:, :, :n].detach(), layer.values[:, :, :n].detach()
            return output

        def last_hidden(module, args, output):
            last["h"] = output[0] if isinstance(output, tuple) else output

        handles = [module.register_forward_hook(attention_hook, with_kwargs=True) for module in modules]
        handles.append(decoder_layers(model)[-1].register_forward_hook(last_hidden))
        trained = [p for p in model.parameters() if p.requires_grad]
        for parameter in trained:
            parameter.requires_grad_(False)
        try:
            with torch.enable_grad():
                inner = getattr(model, "model", model)
                embeds = inner.embed_tokens(repeat).detach().requires_grad_(True)
                inner(inputs_embeds=embeds, **{cache_argument(inner): cache}, use_cache=True,
                      position_ids=torch.arange(n, n + repeat.shape[1])[None])
                last["h"].float().square().sum().backward()
        finally:
            for handle in handles:
                handle.remove()
            for parameter in trained:
                parameter.requires_grad_(True)
        with torch.no_grad():
            for module in modules:
                index = module.layer_idx
                attention = weights[index]  # (b, kv, g, q, chunk)
                written = written_norms(module, cache.layers[index].values[:, :, start:end], attention.dtype)
                gradient = outputs[index].grad.to(attention.dtype).norm(dim=-1)  # (b, q)
                part = (attention * written[:, :, :, None, :] * gradient[:, None, None, :, None]).amax(dim=(2, 3))
                scores[index][..., start:end] = part.double().numpy()


def kvzip_plus_scores(model, tokenizer, ids, *, chunk_size: int = 2048, n_sink: int = 4, suffix: str = "\n"):
    """KVzip+ scores of a context (KVzap's training targets): the prompt ``ids`` prefilled,
    then KVzip's reconstruction replayed on its cache; a token's score is the log of the
    largest, over the group's query heads h and the reconstruction's queries q, of the
    attention weight times ``||W_O,h v_j|| / ||x_q||`` (``x_q``: the query token's attention
    input). Returns (the prefill's attention inputs, one (n, hidden) array per layer; the
    scores (layers, kv_heads, n))."""
    from salience.compress.kv.policy import _torch
    from salience.models.kv import cache_argument
    from transformers import DynamicCache

    torch = _torch()
    modules = attention_modules(model)
    refuse_sliding_windows(KVzip(), modules)
    ids = torch.as_tensor(np.asarray(ids), dtype=torch.long).reshape(1, -1)
    n = ids.shape[1]
    inputs = [None] * len(modules)

    def keep_input(module, args, kwargs):
        inputs[module.layer_idx] = kwargs.get("hidden_states", args[0] if args else None)[0].double().numpy()

    cache = DynamicCache(config=model.config)
    handles = [module.register_forward_pre_hook(keep_input, with_kwargs=True) for module in modules]
    try:
        with torch.no_grad():
            model(input_ids=ids, **{cache_argument(model): cache}, use_cache=True)
    finally:
        for handle in handles:
            handle.remove()
    scores = np.zeros((len(modules), cache.layers[0].keys.shape[1], n))
    replay = KVzip(tokenizer=tokenizer, chunk_size=chunk_size, n_sink=n_sink, suffix=suffix)
    for start, end, repeat in replay.reconstructions(ids):
        def score_layer(module, layer, queries, hidden):
            weights = reconstruction_weights(layer.keys, queries, module.scaling, start, end, min(n_sink, start))
            weights = weights / hidden.to(weights.dtype).norm(dim=-1)[:, None, None, :, None]
            written = written_norms(module, layer.values[:, :, start:end], weights.dtype)
            best = (weights * written[:, :, :, None, :]).amax(dim=(2, 3))[0]
            scores[module.layer_idx][:, start:end] = torch.log(best.clamp_min(1e-30)).double().numpy()

        replay_on_cache(model, modules, cache, repeat, n, score_layer)
    return inputs, scores
