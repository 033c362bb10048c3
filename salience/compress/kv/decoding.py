"""KV-cache eviction while the model decodes (kvpress's DecodingPress,
CompressionRatioDecodingPress and PrefillDecodingPress): a long generation outgrows any
prefill budget, so the cache is cut back every ``compression_interval`` decoding steps.

``decoding`` wraps a scoring policy (``press``). Within :func:`~salience.compress.kv.evict`,
each decoding step's hidden states are buffered per layer (at most
``hidden_states_buffer_size``, the queries the policy reads: SnapKV's observation window is
the last tokens decoded); every ``compression_interval`` steps each layer's cache is scored
by ``press`` and cut to the budget: a fraction keeps that share of every token seen so far
(CompressionRatioDecodingPress), a count keeps that many tokens (DecodingPress's
``target_size``). ``prefill`` names a policy that also evicts the prompt to the budget
(PrefillDecodingPress); by default the prompt is kept whole until decoding outgrows it.

The buffered queries keep their own rotary positions (kvpress rotates them all to the current
step's), and a compaction keeps the cache in position order (kvpress keeps its top-k order);
policies that read only keys and values (``key_norm``, ``keydiff``) are therefore equal to
kvpress step for step, the query-reading ones are not.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from salience.compress.kv.model_layers import layer_queries, layer_scores
from salience.compress.kv.policy import KVNeeds, KVPolicy, _group_mean, _torch, _window_attention
from salience.compress.kv.wrappers import _OnAnotherPolicy
from salience.core.base import method_of, register_method
from salience.core.masks import lowest_k_mask
from salience.core.params import Exempt, Interval
from salience.exceptions import InvalidParameterError
from salience.extras import torch

__all__ = ["Decoding", "CaM", "DMS"]


def _refuse_unless_prefill_scorer(role: str, policy: KVPolicy) -> None:
    """A policy that scores a layer's cache as it stands: not one scored by passes after the
    prefill, one that moves keys, one that needs the question, or one that decodes itself."""
    needs = policy.needs
    reasons = {"is scored by passes of the model after the prefill": needs.when == "after_prefill",
               "moves the kept keys to new positions": needs.rerotates,
               "scores with the question's queries": needs.question,
               "compresses while decoding itself": needs.when == "decoding"}
    for why, refused in reasons.items():
        if refused:
            raise InvalidParameterError(f"decoding's {role} policy {policy.name!r} {why}; give one that scores the "
                                        "cache as it stands (key_norm, snapkv, adakv, ...).")


@register_method("kv", "decoding", "KV cache: cut back every compression_interval decoding steps to the budget (a share "
                                   "of the tokens seen, or a count) by another policy's scores, queries from the steps "
                                   "decoded (kvpress's DecodingPress, CompressionRatioDecodingPress, "
                                   "PrefillDecodingPress)")
class Decoding(_OnAnotherPolicy):
    """``press`` scores each layer's cache every ``compression_interval`` decoding steps (and
    whenever one step reads as many tokens as the budget keeps), with the queries of the last
    ``hidden_states_buffer_size`` steps since the previous cut (0: the current step's only);
    the cache keeps the budget's tokens per head (a fraction of every token seen so far, or a
    count). ``prefill``: a policy that evicts the prompt to the budget as well (None: the
    prompt stays whole). Wrapping policies are accepted (kvpress's AdaKVPress is)."""

    _parameter_constraints = {"prefill": [None, Exempt("a kv policy name or KVPolicy, checked when it is built")],
                              "compression_interval": [Interval("int", 1)],
                              "hidden_states_buffer_size": [Interval("int", 0)]}

    def __init__(self, *, press="key_norm", compression_interval: int = 512, hidden_states_buffer_size: int = 256,
                 prefill=None):
        self.press, self.prefill = press, prefill
        self.compression_interval, self.hidden_states_buffer_size = compression_interval, hidden_states_buffer_size
        self._inner = method_of("kv", press, KVPolicy)
        self._prefill = None if prefill is None else method_of("kv", prefill, KVPolicy)
        _refuse_unless_prefill_scorer("press", self._inner)
        if self._inner.needs.queries == "all" or "hidden" in self._inner.needs.reads:
            raise InvalidParameterError(f"decoding's press {self._inner.name!r} reads every token's query or hidden "
                                        "state; decoding buffers only the last steps' (use snapkv, tova, key_norm, "
                                        "...; kvzap with dms).")
        if self._prefill is not None:
            _refuse_unless_prefill_scorer("prefill", self._prefill)
        KVPolicy.__init__(self)

    @property
    def needs(self) -> KVNeeds:
        """The press's needs, and the prefill policy's reads with them; cuts while decoding."""
        needs = replace(super().needs, when="decoding")
        return needs if self._prefill is None else needs.with_reads(self._prefill.needs.reads)

    @property
    def prefill_policy(self) -> KVPolicy | None:
        """The policy that evicts the prompt to the budget, or None (the prompt kept whole)."""
        return self._prefill

    def evicted(self, scores, count: int) -> np.ndarray:
        return self._inner.evicted(scores, count)

    def target(self, budget, seen: int) -> int:
        """Tokens a head keeps after a cut, ``seen`` tokens read so far: a fraction of them
        (at least one), or the count the budget names."""
        if isinstance(budget, (float, np.floating)) and budget <= 1:
            return max(1, int(seen * float(budget)))
        return int(budget)

    def cuts_now(self, steps: int, n: int, read: int, target: int) -> bool:
        """Whether a layer is cut after this step: its interval is up (``steps`` since the last
        cut), or one step read as many tokens as the budget keeps."""
        return steps >= self.compression_interval or read >= target

    def observe(self, run, module, cache_layer, hidden, position_embeddings) -> None:
        """What a policy notes of each decoding step (nothing here; CaM: the attention each
        cached token receives)."""

    def kept_after_cut(self, run, layer: int, keys, values, scores, target: int, padding):
        """(kept boolean (b, kv_heads, n), values) of a cut keeping ``target`` per head by
        ``scores`` (padding slots never kept)."""
        evicted = self.evicted(scores, scores.shape[-1] - target)
        if padding is not None:
            evicted |= padding
        return ~torch.as_tensor(evicted), values

    def run(self, budget, n_layers: int) -> "_DecodingRun":
        """The per-layer state of one :func:`~salience.compress.kv.evict` block."""
        return _DecodingRun(self, budget, n_layers)


@register_method("kv", "cam", "KV cache: cut back while decoding like 'decoding', each evicted token's value first "
                              "merged, with a probability from the attention it received, into the kept tokens after it "
                              "(CaM, Zhang et al., 2024; kvpress's CAMPress)")
class CaM(Decoding):
    """Cache merging while decoding: every cut evicts the same tokens in all heads (the lowest
    by ``press``'s scores averaged over heads). Of the evicted, as many as steps were decoded
    since the last cut (the best scores, later tokens first among equals) are merged: each
    into the ``merge_budget`` kept tokens that follow it, with probability ``A_i / mean(A_w)``
    (clamped to [0, 1]; ``A``: the attention a token received from every query decoded since
    the prompt, ``w`` its window), its value divided equally among them. A layer is cut when
    its interval is up and it holds more than the budget (its count of steps then restarts).
    The Bernoulli draws come from a generator seeded with ``seed`` when the ``evict`` block
    opens (kvpress draws from torch's global one)."""

    _parameter_constraints = {"merge_budget": [Interval("int", 1)], "seed": [Interval("int", 0)]}

    def __init__(self, *, press="key_norm", compression_interval: int = 512, hidden_states_buffer_size: int = 256,
                 merge_budget: int = 32, seed: int = 0, prefill=None):
        self.merge_budget, self.seed = merge_budget, seed
        super().__init__(press=press, compression_interval=compression_interval,
                         hidden_states_buffer_size=hidden_states_buffer_size, prefill=prefill)

    def cuts_now(self, steps: int, n: int, read: int, target: int) -> bool:
        return (steps >= self.compression_interval and n > target) or read >= target

    def observe(self, run, module, cache_layer, hidden, position_embeddings) -> None:

        keys, layer = cache_layer.keys, module.layer_idx
        with torch.no_grad():
            query = layer_queries(module, hidden, position_embeddings, 1)
            scaling = getattr(module, "scaling", keys.shape[-1] ** -0.5)
            attention = _group_mean(_window_attention(query, keys, scaling)[:, :, -1], keys.shape[1])
        prior = run.received.get(layer)
        if prior is not None:  # the tokens decoded since: nothing received before
            attention = attention + torch.nn.functional.pad(prior, (0, attention.shape[-1] - prior.shape[-1]))
        run.received[layer] = attention

    def run(self, budget, n_layers: int) -> "_DecodingRun":
        out = super().run(budget, n_layers)
        out.generator = _torch().Generator().manual_seed(self.seed)
        return out

    def kept_after_cut(self, run, layer: int, keys, values, scores, target: int, padding):
        if padding is not None:
            raise InvalidParameterError("cam evicts the same tokens in every head; the prompt's eviction left heads "
                                        "of different lengths (use a prefill policy that keeps the same count per head).")
        b, n_kv, n = scores.shape
        mean = scores.mean(axis=1)  # (b, n)
        evicted = lowest_k_mask(mean, n - target)
        received = run.received[layer]
        merges = min(run.steps[layer], n - target)
        chosen, shares = [], np.zeros((b, merges, n))
        for row in range(b):
            kept_at, evicted_at = np.flatnonzero(~evicted[row]), np.flatnonzero(evicted[row])
            # the best-scored evicted tokens, the later first among equals, in position order
            best = sorted(evicted_at, key=lambda j: (-mean[row, j], -j))[:merges]
            chosen.append(sorted(best))
            for i, token in enumerate(chosen[-1]):
                start = np.searchsorted(kept_at, token, side="right")
                window = kept_at[start:start + self.merge_budget]
                shares[row, i, window] = 1.0 / len(window) if len(window) else 0.0
        merge_at = torch.as_tensor(np.asarray(chosen, dtype=np.int64).reshape(b, merges))
        shares = torch.as_tensor(shares, dtype=received.dtype)
        window_mean = torch.einsum("bkn,bhn->bhk", shares, received)  # (b, kv, merges): mean attention of each window
        own = received.gather(2, merge_at[:, None].expand(-1, n_kv, -1))
        probability = torch.nan_to_num(own / window_mean, nan=0.0, posinf=1.0).clamp(0, 1)
        merged = torch.bernoulli(probability, generator=run.generator)  # (b, kv, merges)
        merging_values = values.gather(2, merge_at[:, None, :, None].expand(-1, n_kv, -1, values.shape[-1]))
        # each kept token gains, per head, the merged values of the tokens whose window it is in
        values = values + torch.einsum("bhk,bkn,bhkd->bhnd", merged, shares, merging_values.to(shares.dtype)).to(
            values.dtype)
        kept = ~torch.as_tensor(evicted)[:, None, :].expand(-1, n_kv, -1)
        run.received[layer] = received[kept].reshape(b, n_kv, target)
        return kept, values


class _DecodingRun:
    """Buffers, step counts, tokens seen (and, for CaM, attention received) of every layer
    while one block decodes."""

    def __init__(self, policy: Decoding, budget, n_layers: int):
        self.policy, self.budget, self.n_layers = policy, budget, n_layers
        self.buffers: dict[int, list] = {}
        self.steps: dict[int, int] = {}
        self.seen: dict[int, int] = {}
        self.received: dict[int, object] = {}  # CaM: attention each cached token received while decoding

    def prefilled(self, layer: int, n: int, kept=None, scores=None) -> None:
        """A new prompt of ``n`` tokens read into ``layer`` (``kept``: the boolean (b,
        kv_heads, n) of what its eviction kept, None: all; ``scores``: the eviction's scores):
        its decoding starts afresh."""
        self.buffers[layer], self.steps[layer], self.seen[layer] = [], 0, n
        self.received.pop(layer, None)

    def step(self, module, cache_layer, hidden, position_embeddings, rotary) -> int | None:
        """One decoding step read into ``cache_layer`` (already holding its keys): buffered,
        and the layer cut to the budget when its interval is up. Returns the tokens a head
        keeps after a cut (None: no cut)."""
        from salience.compress.kv.eviction import _PADDING, _compact, check_budget

        torch, policy, layer = _torch(), self.policy, module.layer_idx
        _refuse_unprefilled(layer, self.seen)
        cos, sin = position_embeddings
        self.buffers[layer].append((hidden.detach(), cos, sin))
        self.steps[layer] += 1
        self.seen[layer] += hidden.shape[1]
        policy.observe(self, module, cache_layer, hidden, position_embeddings)
        target = policy.layer_keep(policy.target(self.budget, self.seen[layer]), self.seen[layer], layer,
                                   self.n_layers)
        keys, values = cache_layer.keys, cache_layer.values
        n, cut = keys.shape[-2], None
        if policy.cuts_now(self.steps[layer], n, hidden.shape[1], target):
            if n > target:
                check_budget(target, n, policy._inner)
                buffered = [torch.cat(part, dim=1) for part in zip(*self.buffers[layer])]
                scores = layer_scores(policy._inner, module, keys, values, buffered[0],
                                      (buffered[1], buffered[2]), min(policy.query_count(n), buffered[0].shape[1]),
                                      rotary=rotary, keep=target)
                padding = _padding_slots(getattr(cache_layer, _PADDING, None), n)
                if padding is not None:  # slots a head of a prefill cut did not keep: never kept again
                    scores[padding] = -np.inf
                kept, values = policy.kept_after_cut(self, layer, keys, values, scores, target, padding)
                keys, values = policy._inner.carried(keys, values, kept, rotary=rotary)
                cache_layer.keys, cache_layer.values, new_padding = _compact(keys, values, kept)
                setattr(cache_layer, _PADDING, new_padding)
                cut = int(cache_layer.keys.shape[-2])
            self.steps[layer] = 0
            self.buffers[layer] = []
        size = policy.hidden_states_buffer_size
        self.buffers[layer] = self.buffers[layer][-size:] if size > 0 else []
        return cut


@register_method("kv", "dms", "KV cache: tokens whose score (another policy's) falls below a threshold evicted once "
                              "they leave a sliding window of recent tokens, in the prefill and optionally while "
                              "decoding; as many as the text gives (kvpress's DMSPress, after Dynamic Memory "
                              "Sparsification, Lancucki et al., 2025)")
class DMS(_OnAnotherPolicy):
    """No budget: ``press`` scores each token once, when it is read (a prompt's tokens in the
    prefill, a decoded token at its step, from its own key, value and query), and a token
    whose score is below ``threshold`` leaves the head's cache when ``sliding_window_size``
    newer tokens have been read. The prefill's evictions are cut from the cache (heads keep
    different numbers, padded); with ``decoding=True`` each later token leaving the window is
    masked out of attention instead (kvpress masks both). kvpress's dense-prefill version,
    without DMS's trained eviction heads; the threshold belongs to the press's score scale
    (``key_norm``: minus the key's norm). The report's ``kept`` is the mean per head after the
    prefill."""

    _parameter_constraints = {"threshold": [None, Interval("real")], "sliding_window_size": [Interval("int", 0)],
                              "decoding": [bool]}

    def __init__(self, *, press="key_norm", threshold: float | None = None, sliding_window_size: int = 128,
                 decoding: bool = False):
        self.threshold, self.sliding_window_size, self.decoding = threshold, sliding_window_size, decoding
        super().__init__(press)  # threshold: None or a finite number, checked by its constraint
        _refuse_unless_prefill_scorer("press", self._inner)

    @property
    def needs(self) -> KVNeeds:
        """Unbudgeted (its threshold decides), scored in the prefill and, with ``decoding``, as it decodes."""
        return replace(super().needs, budget="threshold", when="decoding" if self.decoding else "prefill")

    @property
    def prefill_policy(self) -> KVPolicy:
        return self

    def protected(self) -> tuple[int, str]:
        return 0, "nothing"

    def _below(self, scores):
        if self.threshold is None:
            raise InvalidParameterError("dms evicts the tokens scored below its threshold: give threshold= (on the "
                                        "press's scale; key_norm's scores are minus the keys' norms).")
        return scores < self.threshold

    def evicted(self, scores, count: int) -> np.ndarray:
        out = self._below(scores)
        out[..., max(0, scores.shape[-1] - self.sliding_window_size):] = False  # the window stays
        return out

    def run(self, budget, n_layers: int) -> "_SlidingWindowRun":
        return _SlidingWindowRun(self)


class _SlidingWindowRun:
    """DMS while decoding: the scores and cache rows of the tokens still in each layer's
    window; a token leaving it below the threshold is masked out of that head's attention."""

    def __init__(self, policy: DMS):
        self.policy = policy
        self.window: dict[int, tuple] = {}  # layer -> (scores, rows), each (b, kv_heads, w)

    def prefilled(self, layer: int, n: int, kept=None, scores=None) -> None:
        w = min(self.policy.sliding_window_size, n)
        counts = np.full(scores.shape[:2], n) if kept is None else kept.sum(dim=-1).numpy()
        # the window's tokens are the last each head kept, in position order
        rows = counts[..., None] - w + np.arange(w)
        self.window[layer] = (scores[..., n - w:], rows)

    def step(self, module, cache_layer, hidden, position_embeddings, rotary) -> None:
        from salience.compress.kv.eviction import _PADDING

        torch, policy, layer = _torch(), self.policy, module.layer_idx
        _refuse_unprefilled(layer, self.window)
        q, length = hidden.shape[1], cache_layer.keys.shape[-2]
        fresh = layer_scores(policy._inner, module, cache_layer.keys[..., -q:, :], cache_layer.values[..., -q:, :],
                             hidden, position_embeddings, min(policy.query_count(q), q), rotary=rotary, keep=q)
        scores, rows = self.window[layer]
        scores = np.concatenate([scores, fresh], axis=-1)
        rows = np.concatenate([rows, np.broadcast_to(np.arange(length - q, length), fresh.shape)], axis=-1)
        leaving = max(0, scores.shape[-1] - policy.sliding_window_size)
        if leaving:
            masked = _padding_slots(getattr(cache_layer, _PADDING, None), length)
            masked = np.zeros(fresh.shape[:2] + (length,), dtype=bool) if masked is None else masked
            below = policy._below(scores[..., :leaving])
            b, h, _ = np.nonzero(below)
            masked[b, h, rows[..., :leaving][below]] = True
            setattr(cache_layer, _PADDING, torch.as_tensor(masked) if masked.any() else None)
        self.window[layer] = (scores[..., leaving:], rows[..., leaving:])
        return None


def _refuse_unprefilled(layer: int, prefilled) -> None:
    if layer not in prefilled:
        raise InvalidParameterError("decoding steps read onto a cache that was not prefilled inside evict(): "
                                    "read the prompt within the same block.")


def _padding_slots(padding, n: int):
    """The padding mask of an evicted layer (b, kv_heads, m) widened to its ``n`` slots now
    (the tokens decoded since are never padding), or None."""
    if padding is None:
        return None
    mask = np.zeros(padding.shape[:-1] + (n,), dtype=bool)
    mask[..., : padding.shape[-1]] = np.asarray(padding)
    return mask
