"""KV-cache policies that change how another policy's scores are used (kvpress's wrapping
presses): ``press`` names the scoring policy (a registered ``kv`` name or a
:class:`~salience.compress.kv.policy.KVPolicy`).

* ``adakv``: a layer's budget spread over its heads by its scores, each head keeping a
  safeguard share (Feng et al., 2024);
* ``criticalkv``: half the budget by its scores, the rest by score x the L1 norm of the value
  through the output projection (Feng et al., 2025);
* ``chunkkv``: whole chunks of ``chunk_length`` neighbouring tokens kept by its scores summed
  over heads (Liu et al., 2025);
* ``entropy_chunkkv``: ChunkKV whose high-scoring chunks with spiky scores keep only their best
  few tokens, the budget freed going to further chunks (kvpress's EntropyGatedChunkKVPress);
* ``block``: a key/value-only policy applied block by block, each block scored together with
  the tokens kept so far (KeyDiff's block prompt processing; kvpress's BlockPress);
* ``layer_budget``: each layer's share of the budget from its importance (after
  SqueezeAttention, Wang et al., 2024);
* ``rerotate``: its kept keys turned to consecutive positions, the continuation read right
  after them (kvpress's KeyRerotationPress; StreamingLLM's positions within the cache);
* ``merging``: its evicted tokens' values folded into the kept token whose key is most like
  theirs (kvpress's MergingPress, after token merging and D2O).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from salience.compress.kv.policy import KVNeeds, KVPolicy, _group_mean, _torch
from salience.core.base import method_of, register_method
from salience.core.masks import lowest_k_mask
from salience.core.params import Exempt, Interval
from salience.exceptions import InvalidParameterError
from salience.extras import torch

__all__ = ["AdaKV", "CriticalKV", "ChunkKV", "EntropyGatedChunkKV", "BlockWise", "LayerBudget", "KeyRerotation", "Merging"]


class _OnAnotherPolicy(KVPolicy):
    """A policy that changes how another one's scores are used (kvpress's wrapping presses):
    ``press`` (kvpress's name for it) a registered ``kv`` name (at its defaults) or a
    :class:`KVPolicy`. It reads what that policy reads and always keeps what it keeps."""

    extra_reads: tuple = ()

    _parameter_constraints = {"press": [Exempt("a kv policy name or KVPolicy, checked when it is built")]}

    def __init__(self, press):
        self.press = press
        self._inner = method_of("kv", press, KVPolicy)
        if isinstance(self._inner, _OnAnotherPolicy):
            raise InvalidParameterError(f"{self.name} wraps a scoring policy, not another wrapper "
                                        f"({self._inner.name}).")
        if type(self._inner).evicted is not KVPolicy.evicted:
            raise InvalidParameterError(f"{self.name} reads another policy's scores; {self._inner.name!r} decides "
                                        "its evictions its own way (whole heads or layers), not by its scores alone.")
        super().__init__()

    @property
    def needs(self) -> KVNeeds:
        """The wrapped policy's queries, reads (with this wrapper's own) and rotation; scored in
        the prefill against a budget of tokens, as the wrapped policy's scores are used."""
        return replace(self._inner.needs, when="prefill", budget="count").with_reads(self.extra_reads)

    def query_count(self, n_tokens: int, question: int = 0) -> int:
        return self._inner.query_count(n_tokens, question=question)

    def check_model(self, model) -> None:
        self._inner.check_model(model)

    def protected(self) -> tuple[int, str]:
        return self._inner.protected()

    def layer_keep(self, keep: int, n: int, layer: int, n_layers: int) -> int:
        return self._inner.layer_keep(keep, n, layer, n_layers)

    def _base_scores(self, keys, values, queries, scaling, n, context):
        return self._inner._scores(keys, values, queries, scaling, n,
                                   **{name: context[name] for name in self._inner.needs.reads})

    def _scores(self, keys, values, queries, scaling, n, **context):
        return self._base_scores(keys, values, queries, scaling, n, context)


@register_method("kv", "adakv", "KV cache: one budget per layer spread over its heads by the base policy's scores, "
                                "each head keeping a safeguard share (AdaKV, Feng et al., 2024)")
class AdaKV(_OnAnotherPolicy):
    """The layer's budget (``keep`` per head times its heads) goes to its best tokens across
    heads, so a head whose attention is concentrated gives room to one whose attention is
    spread; every head first keeps its ``alpha_safeguard`` share of ``keep``. Heads then hold
    different numbers of tokens: the cache is padded to the largest and attention masks the
    padding (:func:`~salience.compress.kv.attend_kept`)."""

    _parameter_constraints = {"alpha_safeguard": [Interval("real", 0, 1)]}

    def __init__(self, *, press="snapkv", alpha_safeguard: float = 0.2):
        self.alpha_safeguard = alpha_safeguard
        super().__init__(press)

    def evicted(self, scores, count: int) -> np.ndarray:
        b, n_kv, n = scores.shape
        keep = n - count
        safe = max(1, int(keep * self.alpha_safeguard)) if self.alpha_safeguard > 0 and keep > 0 else 0
        guarded = scores.copy()
        if safe:
            guarded[~self._inner.evicted(scores, n - safe)] = np.inf  # each head's best `safe` tokens
        return lowest_k_mask(guarded.reshape(b, n_kv * n), n_kv * count).reshape(b, n_kv, n)


@register_method("kv", "criticalkv", "KV cache: the base policy's best half kept, the rest by score x the L1 norm of "
                                     "the value through the output projection (CriticalKV, Feng et al., 2025)")
class CriticalKV(_OnAnotherPolicy):
    """Two stages: the base policy's best ``first_stage_ratio`` of the budget are kept; the
    remaining tokens are scored by ``(base score + epsilon) x ||W_o v||_1``, the size of what
    the token's value adds to the attention output (averaged over the query heads of a
    group)."""

    extra_reads = ("output_weight", "keep")
    _parameter_constraints = {"epsilon": [Interval("real", 0)], "first_stage_ratio": [Interval("real", 0, 1)]}

    def __init__(self, *, press="snapkv", epsilon: float = 1e-4, first_stage_ratio: float = 0.5):
        self.epsilon, self.first_stage_ratio = epsilon, first_stage_ratio
        super().__init__(press)

    def _scores(self, keys, values, queries, scaling, n, **context):
        scores = self._base_scores(keys, values, queries, scaling, n, context)
        weight, keep = context["output_weight"], context["keep"]
        b, n_kv, _, d = values.shape
        first = int(keep * self.first_stage_ratio)
        if self.first_stage_ratio > 0:
            first = max(1, first)
        first_stage = ~self._inner.evicted(scores.double().numpy(), n - first) if first else None
        heads = weight.shape[1] // d
        if weight.shape[1] % d or heads % n_kv:
            raise InvalidParameterError(f"policy {self.name!r}: an output projection of shape {tuple(weight.shape)} "
                                        f"does not match {n_kv} key-value heads of size {d}.")
        dtype = torch.promote_types(scores.dtype, torch.float32)
        per_head = values.to(dtype).repeat_interleave(heads // n_kv, dim=1)  # (b, heads, n, d)
        projected = torch.einsum("bhnd,ehd->bhne", per_head, weight.to(dtype).view(-1, heads, d))
        norm = _group_mean(projected.abs().sum(dim=-1), n_kv)
        scores = (scores.to(dtype) + self.epsilon) * norm
        if first_stage is not None:
            scores[torch.as_tensor(first_stage)] = float("inf")
        return scores


@register_method("kv", "chunkkv", "KV cache: whole chunks of neighbouring tokens kept by the wrapped policy's scores "
                                  "summed over heads (ChunkKV, Liu et al., 2025)")
class ChunkKV(_OnAnotherPolicy):
    """The prompt cut into chunks of ``chunk_length`` (the last may be shorter); a chunk's
    score is the mean over its tokens of the wrapped policy's scores summed over the layer's
    heads; the best ``int(chunks x budget)`` chunks are kept whole, the same in every head,
    so a kept fact keeps its neighbours. The tokens kept follow the chunks, not exactly the
    budget (as kvpress). A prompt shorter than one chunk: the wrapped policy alone."""

    _parameter_constraints = {"chunk_length": [Interval("int", 1)]}

    def __init__(self, *, press="snapkv", chunk_length: int = 20):
        self.chunk_length = chunk_length
        super().__init__(press)

    def evicted(self, scores, count: int) -> np.ndarray:
        b, n_kv, n = scores.shape
        length = self.chunk_length
        complete, rest = divmod(n, length)
        if complete == 0:
            return self._inner.evicted(scores, count)
        summed = scores.sum(axis=1)  # (b, n): over the layer's heads
        chunks = summed[:, : complete * length].reshape(b, complete, length).mean(axis=-1)
        if rest:
            chunks = np.concatenate([chunks, summed[:, complete * length:].mean(axis=-1, keepdims=True)], axis=1)
        n_chunks = chunks.shape[1]
        kept_chunks = max(1, n_chunks * (n - count) // n)
        dropped = lowest_k_mask(chunks, n_chunks - kept_chunks)
        tokens = np.repeat(dropped, length, axis=1)[:, :n]
        return np.broadcast_to(tokens[:, None, :], (b, n_kv, n)).copy()


def _normalised_entropy(scores):
    """The entropy of each row of ``scores`` (chunks x tokens) as a distribution over its tokens,
    divided by its largest (log tokens), in [0, 1]; a row with a negative score is first moved
    up by its minimum; a one-token row: 0 (kvpress's gate, in float32 as kvpress computes it:
    the gate compares entropies with their median, so the last bit can move a chunk across)."""
    tokens = scores.shape[-1]
    if tokens == 1:
        return torch.zeros(scores.shape[0])
    shifted = scores - scores.amin(dim=-1, keepdim=True).clamp(max=0.0)
    share = shifted / (shifted.sum(dim=-1, keepdim=True) + _ENTROPY_EPSILON)
    entropy = -(share * (share + _ENTROPY_EPSILON).log()).sum(dim=-1)
    return (entropy / math.log(tokens)).clamp(0.0, 1.0)


_ENTROPY_EPSILON = 1e-8


@register_method("kv", "entropy_chunkkv", "KV cache: ChunkKV whose important but spiky chunks keep only their best "
                                          "tokens, the budget freed spent on further chunks (kvpress's "
                                          "EntropyGatedChunkKV)")
class EntropyGatedChunkKV(_OnAnotherPolicy):
    """ChunkKV with an entropy gate: chunks of ``chunk_length`` scored by the mean of the
    wrapped policy's scores summed over heads; a chunk at or above the median chunk score whose
    scores are spiky (normalised entropy below the median chunk's) keeps only its
    ``low_entropy_chunk_length`` best tokens, others are kept whole, best chunk first, until
    exactly the budget's tokens are kept (any left over go to the best remaining tokens). The
    same tokens in every head. Medians are the lower middle value (torch's)."""

    _parameter_constraints = {"chunk_length": [Interval("int", 2)], "low_entropy_chunk_length": [Interval("int", 1)]}

    def __init__(self, *, press="snapkv", chunk_length: int = 10, low_entropy_chunk_length: int = 4):
        self.chunk_length, self.low_entropy_chunk_length = chunk_length, low_entropy_chunk_length
        super().__init__(press)

    def _validate_params(self) -> None:
        super()._validate_params()
        if self.low_entropy_chunk_length >= self.chunk_length:
            raise InvalidParameterError(f"low_entropy_chunk_length={self.low_entropy_chunk_length} must be below "
                                        f"chunk_length={self.chunk_length}.")

    def evicted(self, scores, count: int) -> np.ndarray:
        b, n_kv, n = scores.shape
        torch = _torch()
        summed = torch.as_tensor(np.asarray(scores), dtype=torch.float32).sum(dim=1)  # as kvpress: float32
        kept = np.stack([self._kept(row, max(1, n - count)) for row in summed])
        return np.broadcast_to(~kept[:, None, :], (b, n_kv, n)).copy()

    def _kept(self, summed, budget: int) -> np.ndarray:
        torch = _torch()
        n, length = len(summed), self.chunk_length
        complete = n // length
        whole = summed[: complete * length].view(complete, length)
        chunk_scores, entropy = whole.mean(dim=1), _normalised_entropy(whole)
        if n % length:
            tail = summed[complete * length:]
            chunk_scores = torch.cat([chunk_scores, tail.mean()[None]])
            entropy = torch.cat([entropy, _normalised_entropy(tail[None])])
        # torch's median is the lower middle value
        spiky = ((chunk_scores >= chunk_scores.median()) & (entropy < entropy.median())).tolist()
        kept = torch.zeros(n, dtype=torch.bool)
        for chunk in torch.argsort(chunk_scores, descending=True, stable=True).tolist():
            if budget <= 0:
                break
            start, end = chunk * length, min(chunk * length + length, n)
            take = min(end - start, budget, self.low_entropy_chunk_length if spiky[chunk] else end - start)
            if take == end - start:
                kept[start:end] = True
            else:
                kept[start + torch.topk(summed[start:end], take).indices] = True
            budget -= take
        if budget > 0:  # the last chunks were cut short: the best tokens left
            rest = (~kept).nonzero()[:, 0]
            kept[rest[torch.topk(summed[rest], min(budget, len(rest))).indices]] = True
        return kept.numpy()


@register_method("kv", "block", "KV cache: a key/value-only policy applied block by block, each block scored with "
                                "the tokens kept so far (KeyDiff's block prompt processing; kvpress's BlockPress)")
class BlockWise(_OnAnotherPolicy):
    """The prompt read in blocks of ``block_size`` after the budget's first ``keep`` tokens: each
    block is scored by the wrapped policy together with the tokens kept so far, and the best
    ``keep`` of them are kept, per head; what the last block leaves is the cache. The memory a
    long prompt's scores need stays at ``keep + block_size`` tokens, and a scorer that compares
    tokens with each other (KeyDiff's mean key) sees only the kept and the new ones. Only for
    policies that read keys and values alone (a query-reading one is refused by name)."""

    extra_reads = ("keep",)
    _parameter_constraints = {"block_size": [Interval("int", 1)]}

    def __init__(self, *, press="keydiff", block_size: int = 128):
        self.block_size = block_size
        super().__init__(press)
        inner = self._inner.needs
        if inner.queries or set(inner.reads) - {"keep"}:
            raise InvalidParameterError(f"block scores keys and values alone; policy {self._inner.name!r} reads "
                                        f"{'the prompt queries' if inner.queries else ', '.join(inner.reads)}.")

    def protected(self) -> tuple[int, str]:
        return 1, "one token"  # the wrapped policy's kept tokens are its own within each block

    def _scores(self, keys, values, queries, scaling, n, *, keep, **context):
        b, heads, _, d = keys.shape
        kept = torch.arange(keep).expand(b, heads, keep)
        inner = {"keep": keep} if "keep" in self._inner.needs.reads else {}
        for start in range(keep, n, self.block_size):
            current = torch.cat([kept, torch.arange(start, min(start + self.block_size, n)).expand(b, heads, -1)],
                                dim=-1)
            index = current[..., None].expand(-1, -1, -1, d)
            block_scores = self._inner._scores(keys.gather(2, index), values.gather(2, index), None, scaling,
                                               current.shape[-1], **inner)
            kept = current.gather(-1, block_scores.topk(keep, dim=-1).indices)
        scores = torch.zeros(b, heads, n, dtype=torch.promote_types(keys.dtype, torch.float32))
        return scores.scatter_(-1, kept, 1.0)


@register_method("kv", "layer_budget", "KV cache: each layer's share of the budget from its importance (block "
                                       "influence or any layer score), over another policy's scores (after "
                                       "SqueezeAttention, Wang et al., 2024)")
class LayerBudget(_OnAnotherPolicy):
    """Per-layer budgets from layer importance: every layer keeps ``floor`` of the uniform
    budget, and the rest of the total (``keep`` x layers, as the uniform budget's) is shared
    in proportion to ``importance`` (one non-negative number per decoder layer, e.g.
    :func:`salience.compress.layers.block_influence`'s scores: a layer that barely turns the
    residual stream needs fewer of its tokens); a layer never keeps more than the prompt,
    its excess goes to the others. ``importance=None``: the uniform budget (the press
    alone). The tokens within a layer: the wrapped policy's."""

    _parameter_constraints = {"importance": [None, "array-like"], "floor": [Interval("real", 0, 1)]}

    def __init__(self, *, press="snapkv", importance=None, floor: float = 0.5):
        self.importance, self.floor = importance, floor
        super().__init__(press)

    def _validate_params(self) -> None:
        super()._validate_params()
        if self.importance is None:
            return
        values = np.asarray(getattr(self.importance, "values", self.importance), dtype=float)
        if values.ndim != 1 or values.size == 0 or not np.isfinite(values).all() or (values < 0).any() \
                or values.sum() <= 0:
            raise InvalidParameterError("importance must be one finite, non-negative number per decoder layer, not "
                                        f"all zero; got {values.tolist() if values.size <= 8 else values.shape}.")

    def layer_keep(self, keep: int, n: int, layer: int, n_layers: int) -> int:
        if self.importance is None:
            return self._inner.layer_keep(keep, n, layer, n_layers)
        return int(self.layer_budgets(keep, n, n_layers)[layer])

    def layer_budgets(self, keep: int, n: int, n_layers: int) -> np.ndarray:
        """Every layer's tokens per head: whole numbers summing to ``keep`` x ``n_layers``
        (less where the prompt is too short to hold it), each at least ``floor`` x ``keep`` and
        what the wrapped policy always keeps."""
        weights = np.asarray(getattr(self.importance, "values", self.importance), dtype=float)
        if weights.size != n_layers:
            raise InvalidParameterError(f"importance holds {weights.size} layers; the model has {n_layers} decoder "
                                        "layers.")
        total = min(keep * n_layers, n * n_layers)
        least = min(keep, max(self.floor * keep, self.protected()[0]))
        budgets = np.full(n_layers, least, dtype=float)
        free = np.ones(n_layers, dtype=bool)
        spare = total - budgets.sum()
        while spare > 1e-9 and free.any():  # share the rest by weight; a full layer passes its excess on
            share = weights * free
            share = share / share.sum() if share.sum() > 0 else free / free.sum()
            budgets += spare * share
            full = budgets >= n
            spare = float((budgets[full] - n).sum())
            budgets[full], free = n, free & ~full
        whole = np.floor(budgets).astype(int)
        left = int(round(min(total, budgets.sum()))) - whole.sum()
        whole[np.argsort(-(budgets - whole), kind="stable")[:left]] += 1  # largest remainders
        return np.maximum(whole, 1)


@register_method("kv", "rerotate", "KV cache: another policy's kept keys turned to consecutive positions, the "
                                   "continuation read right after them (kvpress's KeyRerotationPress; StreamingLLM's "
                                   "positions within the cache, Xiao et al., 2024)")
class KeyRerotation(_OnAnotherPolicy):
    """The wrapped policy chooses the tokens; each kept key is then turned from its position in
    the prompt to its place among the kept ones (0, 1, ..., keep - 1), so the cache reads as a
    contiguous text of ``keep`` tokens and the continuation starts at position ``keep``: no
    gaps where evicted tokens were, and positions that never run past what the cache holds
    (StreamingLLM assigns positions within the cache for this reason; its default here).
    The policy must evict during the prefill: one scored after it (KVzip) is refused by name."""

    @property
    def needs(self) -> KVNeeds:
        return replace(super().needs, rerotates=True)

    def __init__(self, *, press="streaming_llm"):
        super().__init__(press)
        if self._inner.needs.when == "after_prefill":
            raise InvalidParameterError(f"rerotate turns the keys a policy keeps during the prefill; "
                                        f"{self._inner.name!r} is scored after the prefill.")


@register_method("kv", "merging", "KV cache: another policy's evicted tokens folded into the kept token with the most "
                                  "similar key, by similarity and value norms (kvpress's MergingPress; after token "
                                  "merging, Bolya et al., 2023, and D2O, Wan et al., 2024)")
class Merging(_OnAnotherPolicy):
    """The wrapped policy chooses the tokens; each evicted token then finds the kept token of
    its head whose key has the highest cosine with its own (``s``), and, when ``s`` reaches
    ``similarity_threshold`` (and is among the best ``merge_fraction`` of the head's
    evictions), adds its value with weight ``w = max(s, 0) x |v_e| / (|v_e| + |v_k|)``; a kept
    value becomes ``(v_k + sum w v_e) / (1 + sum w)``. Keys stay as they are (their positions
    too)."""

    _parameter_constraints = {"similarity_threshold": [Interval("real", 0, 1)],
                              "merge_fraction": [Interval("real", 0, 1, closed="right")]}

    def __init__(self, *, press="snapkv", similarity_threshold: float = 0.0, merge_fraction: float = 1.0):
        self.similarity_threshold, self.merge_fraction = similarity_threshold, merge_fraction
        super().__init__(press)

    def carried(self, keys, values, kept, rotary=None):
        values = self._merged(keys, values, kept)
        return super().carried(keys, values, kept, rotary=rotary)

    def _merged(self, keys, values, kept):
        n_kept = kept.sum(dim=-1)
        n = kept.shape[-1]
        if not (0 < n_kept.min() and n_kept.max() < n) or bool((n_kept != n_kept.flatten()[0]).any()):
            return values  # nothing evicted (or heads keeping different counts: no merge, as kvpress needs one)
        m = int(n_kept.flatten()[0])
        b, heads, _, d = keys.shape
        order = torch.argsort((~kept).to(torch.int8), dim=-1, stable=True)  # kept first, each in position order
        keep_index, evict_index = order[..., :m], order[..., m:]
        kept_keys, evicted_keys = (_unit(_tokens_at(keys, keep_index).float()),
                                   _unit(_tokens_at(keys, evict_index).float()))
        kept_values, evicted_values = _tokens_at(values, keep_index), _tokens_at(values, evict_index)
        similarity, target = (evicted_keys @ kept_keys.transpose(-1, -2)).max(dim=-1)  # (b, heads, n - m)
        merge = similarity >= self.similarity_threshold
        if self.merge_fraction < 1.0 and bool(merge.any()):
            cut = similarity.masked_fill(~merge, float("-inf")).quantile(1.0 - self.merge_fraction, dim=-1,
                                                                        keepdim=True)
            merge = merge & (similarity >= cut)
        evicted_norm = evicted_values.float().norm(dim=-1)
        target_norm = kept_values.float().norm(dim=-1).gather(2, target)
        weights = similarity.clamp(min=0) * merge.float() * evicted_norm / (evicted_norm + target_norm + 1e-6)
        added = torch.zeros(b, heads, m, d, dtype=torch.float32).scatter_add_(
            2, target[..., None].expand(-1, -1, -1, d), weights[..., None] * evicted_values.float())
        total = torch.zeros(b, heads, m, dtype=torch.float32).scatter_add_(2, target, weights)
        blended = torch.where((total > 0)[..., None], ((kept_values.float() + added) / (1 + total)[..., None]).to(
            values.dtype), kept_values)
        return values.scatter(2, keep_index[..., None].expand(-1, -1, -1, d), blended)


def _tokens_at(x, index):
    """Rows ``index`` (b, heads, m) of ``x`` (b, heads, n, d)."""
    return x.gather(2, index[..., None].expand(-1, -1, -1, x.shape[-1]))


def _unit(x):
    return x / x.norm(dim=-1, keepdim=True).clamp(min=1e-6)
