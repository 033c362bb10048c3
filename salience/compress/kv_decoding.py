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
kvpress step for step, the query-reading ones are not (``bench/kvpress_anchor.py``).
"""

from __future__ import annotations

import numpy as np

from salience.compress.kv_policies import KVPolicy, _torch
from salience.compress.kv_wrappers import _OnAnotherPolicy
from salience.core.base import method_of, register_method
from salience.core.params import Interval
from salience.exceptions import InvalidParameterError

__all__ = ["Decoding"]


def _refuse_unless_prefill_scorer(role: str, policy: KVPolicy) -> None:
    """A policy that scores a layer's cache as it stands: not one scored by passes after the
    prefill, one that moves keys, one that needs the question, or one that decodes itself."""
    reasons = {"reconstructs": "is scored by passes of the model after the prefill",
               "rerotates": "moves the kept keys to new positions",
               "needs_question": "scores with the question's queries",
               "decodes": "compresses while decoding itself"}
    for attribute, why in reasons.items():
        if getattr(policy, attribute, False):
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

    decodes = True
    _parameter_constraints = {"compression_interval": [Interval("int", 1)],
                              "hidden_states_buffer_size": [Interval("int", 0)]}

    def __init__(self, *, press="key_norm", compression_interval: int = 512, hidden_states_buffer_size: int = 256,
                 prefill=None):
        self.press, self.prefill = press, prefill
        self.compression_interval, self.hidden_states_buffer_size = compression_interval, hidden_states_buffer_size
        self._inner = method_of("kv", press, KVPolicy)
        self._prefill = None if prefill is None else method_of("kv", prefill, KVPolicy)
        _refuse_unless_prefill_scorer("press", self._inner)
        if self._inner.queries == "all":
            raise InvalidParameterError(f"decoding's press {self._inner.name!r} reads every query of the prompt; "
                                        "decoding buffers only the last steps' (use snapkv, tova, key_norm, ...).")
        if self._prefill is not None:
            _refuse_unless_prefill_scorer("prefill", self._prefill)
        KVPolicy.__init__(self)

    @property
    def reads(self):
        extra = () if self._prefill is None else self._prefill.reads
        return tuple(dict.fromkeys(self._inner.reads + extra))

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

    def run(self, budget, n_layers: int) -> "_DecodingRun":
        """The per-layer state of one :func:`~salience.compress.kv.evict` block."""
        return _DecodingRun(self, budget, n_layers)


class _DecodingRun:
    """Buffers, step counts and tokens seen of every layer while one block decodes."""

    def __init__(self, policy: Decoding, budget, n_layers: int):
        self.policy, self.budget, self.n_layers = policy, budget, n_layers
        self.buffers: dict[int, list] = {}
        self.steps: dict[int, int] = {}
        self.seen: dict[int, int] = {}

    def prefilled(self, layer: int, n: int) -> None:
        """A new prompt of ``n`` tokens read into ``layer``: its decoding starts afresh."""
        self.buffers[layer], self.steps[layer], self.seen[layer] = [], 0, n

    def step(self, module, cache_layer, hidden, position_embeddings, rotary) -> int | None:
        """One decoding step read into ``cache_layer`` (already holding its keys): buffered,
        and the layer cut to the budget when its interval is up. Returns the tokens a head
        keeps after a cut (None: no cut)."""
        from salience.compress.kv import _PADDING, _compact, _output_weight, _queries, check_budget

        torch, policy, layer = _torch(), self.policy, module.layer_idx
        if layer not in self.seen:
            raise InvalidParameterError("decoding steps read onto a cache that was not prefilled inside evict(): "
                                        "read the prompt within the same block.")
        cos, sin = position_embeddings
        self.buffers[layer].append((hidden.detach(), cos, sin))
        self.steps[layer] += 1
        self.seen[layer] += hidden.shape[1]
        target = policy.layer_keep(policy.target(self.budget, self.seen[layer]), self.seen[layer], layer,
                                   self.n_layers)
        cut = None
        if self.steps[layer] >= policy.compression_interval or hidden.shape[1] >= target:
            keys, values = cache_layer.keys, cache_layer.values
            n = keys.shape[-2]
            if n > target:
                check_budget(target, n, policy._inner)
                buffered = [torch.cat(part, dim=1) for part in zip(*self.buffers[layer])]
                count = min(policy.query_count(n), buffered[0].shape[1])
                with torch.no_grad():
                    queries = (_queries(torch, module, buffered[0], (buffered[1], buffered[2]), count,
                                        policy.rotated_queries) if count else None)
                    scores = policy._inner.token_scores(keys, values, queries, scaling=getattr(module, "scaling", None),
                                                        rotary=rotary, output_weight=_output_weight(module, policy),
                                                        keep=target, layer=layer, question=0)
                scores = scores.double().numpy().copy()
                padding = _padding_slots(getattr(cache_layer, _PADDING, None), n)
                if padding is not None:  # slots a head of a prefill cut did not keep: never kept again
                    scores[padding] = -np.inf
                evicted = policy.evicted(scores, n - target)
                if padding is not None:
                    evicted |= padding
                kept = ~torch.as_tensor(evicted)
                keys, values = policy._inner.carried(torch, keys, values, kept, rotary=rotary)
                cache_layer.keys, cache_layer.values, new_padding = _compact(torch, keys, values, kept)
                setattr(cache_layer, _PADDING, new_padding)
                cut = int(cache_layer.keys.shape[-2])
            self.steps[layer] = 0
            self.buffers[layer] = []
        size = policy.hidden_states_buffer_size
        self.buffers[layer] = self.buffers[layer][-size:] if size > 0 else []
        return cut


def _padding_slots(padding, n: int):
    """The padding mask of an evicted layer (b, kv_heads, m) widened to its ``n`` slots now
    (the tokens decoded since are never padding), or None."""
    if padding is None:
        return None
    mask = np.zeros(padding.shape[:-1] + (n,), dtype=bool)
    mask[..., : padding.shape[-1]] = np.asarray(padding)
    return mask
