"""Which cached tokens matter: the base of the ``kv`` family of KV-cache policies, each a
registered scorer (higher = kept), and the attention and rotation helpers the policies share.

After the prompt is read (the prefill), every attention layer's cache holds one key and one
value per token and key-value head. A policy scores them; :func:`salience.compress.kv.evict`
keeps the ``budget`` best per head. A key-value head serves several query heads:
attention-based scores are averaged over the group.

The policies, by idea: :mod:`~salience.compress.kv.position` (by position or by chance, the
baselines), :mod:`~salience.compress.kv.attention` (by the attention the prompt's queries pay,
observed or expected), :mod:`~salience.compress.kv.geometry` (by the keys' and values' own
geometry), :mod:`~salience.compress.kv.compose`, :mod:`~salience.compress.kv.simlayer` and
:mod:`~salience.compress.kv.reconstruction` (by reading the context again),
:mod:`~salience.compress.kv.calibrated` (learned from a calibration text first); the ones that
change how another policy's scores are used in :mod:`~salience.compress.kv.wrappers`, those
that also cut the cache while decoding in :mod:`~salience.compress.kv.decoding`.

A new policy is one subclass of :class:`KVPolicy` in one file: its parameters as keyword
arguments with their constraints, ``needs`` (a :class:`KVNeeds`: which of the prompt's queries
it reads, and what else),
``_scores`` (the maths, on torch tensors) and, when it always keeps some tokens,
``protected``; ``@register_method("kv", name, description)`` makes it reachable from
``evict``, ``kv_eval``, ``passkey``, ``salience compress kv-eval --policy`` and ``salience
methods``.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, replace

import numpy as np

from salience.core.base import Scorer
from salience.core.masks import lowest_k_mask
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError
from salience.extras import require_torch, torch

__all__ = ["KVNeeds", "KVPolicy", "kv_token_scores"]


def _torch():
    return require_torch("KV-cache eviction")


def _window_attention(queries, keys, scaling: float):
    """Softmax attention (float32 or wider) of the last ``q`` queries over all ``n`` keys,
    causal (query i of the window sits at position n - q + i), shaped (b, heads, q, n)."""
    n, q = keys.shape[-2], queries.shape[-2]
    groups = queries.shape[1] // keys.shape[1]
    expanded = keys.repeat_interleave(groups, dim=1)
    logits = (queries @ expanded.transpose(-1, -2)).to(torch.promote_types(queries.dtype, torch.float32)) * scaling
    future = torch.arange(n)[None, :] > (n - q + torch.arange(q))[:, None]
    return torch.softmax(logits.masked_fill(future, float("-inf")), dim=-1)


def _rotated(keys, rotary, shift):
    """Keys (..., n, d) turned by the rotary rotation of ``shift`` positions (any integers, one
    per key, shaped like ``keys[..., 0]``): RoPE composes, so a key cached at position p and
    turned by s is the key at p + s. k' = k cos + rotate_half(k) sin, rotate_half(x) = [-x2, x1]."""
    shift = torch.as_tensor(shift)
    cos, sin = rotary(shift.reshape(-1))
    cos = torch.as_tensor(cos, dtype=keys.dtype).reshape(*shift.shape, -1)
    sin = torch.as_tensor(sin, dtype=keys.dtype).reshape(*shift.shape, -1)
    half = keys.shape[-1] // 2
    turned = torch.cat([-keys[..., half:], keys[..., :half]], dim=-1)
    return keys * cos + turned * sin


def _rerotated(keys, kept, rotary):
    """Each head's kept keys turned from their positions to the consecutive ones 0..m-1 they
    take in the compacted cache (``kept`` boolean (b, kv_heads, n)); the evicted keys' turns
    are meaningless, they leave."""
    n = keys.shape[-2]
    return _rotated(keys, rotary, kept.long().cumsum(dim=-1) - 1 - torch.arange(n))


def _received_attention(queries, keys, scaling: float, block: int = 256):
    """For each key, the attention summed over every (causal) query, in blocks of queries:
    the whole attention matrix is never held. Shaped (b, heads, n)."""
    n = keys.shape[-2]
    total = None
    for lo in range(0, n, block):
        hi = min(lo + block, n)
        weights = _window_attention(queries[:, :, lo:hi], keys[..., :hi, :], scaling).sum(dim=2)
        weights = torch.nn.functional.pad(weights, (0, n - hi))
        total = weights if total is None else total + weights
    return total


def _group_mean(scores, n_kv_heads: int):
    b, heads, n = scores.shape
    return scores.view(b, n_kv_heads, heads // n_kv_heads, n).mean(dim=2)


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


_QUERIES = (0, 1, "window", "all", "question")
_READS = ("rotary", "output_weight", "keep", "layer", "question", "hidden")
_WHEN = ("prefill", "after_prefill", "decoding")
_BUDGETS = ("count", "threshold")


@dataclass(frozen=True)
class KVNeeds:
    """What a KV policy needs from eviction, in one value (:attr:`KVPolicy.needs`).

    ``queries``: which of the prompt's queries it reads: 0 (none), 1 (the last), ``"window"``
    (the observation window of the policy's ``window`` queries), ``"all"``, or ``"question"``
    (the question read with the prompt, eviction's ``keep_last``: query-aware, FINCH).
    ``rotated_queries``: whether they carry their rotary positions (False: as projected).
    ``reads``: what else of the layer the scores need, passed by eviction as keywords of
    :meth:`KVPolicy.token_scores`: ``"rotary"`` (the model's rotation of any position),
    ``"output_weight"`` (the attention's output projection), ``"keep"`` (the tokens the budget
    keeps per head), ``"layer"`` (the decoder layer's index: policies that learned something per
    layer), ``"question"`` (its length), ``"hidden"`` (the attention's input hidden states).
    ``when``: ``"prefill"`` (scored as each layer's cache fills), ``"after_prefill"`` (scored by
    passes of the model after the whole prefill: KVzip, its ``evicted_layers`` called instead)
    or ``"decoding"`` (also cuts the cache while decoding, :mod:`salience.compress.kv.decoding`).
    ``budget``: ``"count"`` (a budget of tokens per head) or ``"threshold"`` (DMS: as many as
    its own threshold leaves; the budget must be None). ``rerotates``: the kept keys are turned
    to the consecutive positions they take in the compacted cache (kvpress's key rerotation)."""

    queries: int | str = 0
    rotated_queries: bool = True
    reads: tuple = ()
    when: str = "prefill"
    budget: str = "count"
    rerotates: bool = False

    def __post_init__(self):
        for field_name, value, allowed in (("queries", self.queries, _QUERIES), ("when", self.when, _WHEN),
                                           ("budget", self.budget, _BUDGETS)):
            if isinstance(value, bool) or value not in allowed:
                raise InvalidParameterError(f"KVNeeds {field_name} must be one of {list(allowed)}; got {value!r}.")
        unknown = [name for name in self.reads if name not in _READS]
        if not isinstance(self.reads, tuple) or unknown:
            raise InvalidParameterError(f"KVNeeds reads must be a tuple of {list(_READS)}; got {self.reads!r}.")

    @property
    def question(self) -> bool:
        """Whether the policy scores with the question read with the prompt."""
        return self.queries == "question"

    @property
    def budgeted(self) -> bool:
        return self.budget == "count"

    def with_reads(self, extra: tuple) -> KVNeeds:
        """The same needs reading also what ``extra`` names (in order, each once)."""
        return replace(self, reads=tuple(dict.fromkeys(self.reads + tuple(extra))))


class KVPolicy(Scorer, abc.ABC):
    """Base of the KV-cache policies. ``score(keys, values, queries=...)`` gives
    :class:`~salience.Scores` over one layer's cached tokens (ids ``"head:position"``);
    :meth:`token_scores` is the same on batched torch tensors, as eviction calls it.

    ``needs`` (a :class:`KVNeeds`) says what the policy needs from eviction: the prompt's
    queries it reads, what else of the layer, when it scores, whether it takes a budget and
    whether it rerotates its kept keys. :meth:`layer_keep` may give a layer another budget than
    the others (PyramidKV); :meth:`evicted` may spread a layer's budget unevenly over its heads
    (AdaKV)."""

    needs: KVNeeds = KVNeeds()

    def __init__(self):
        self._validate_params()

    @property
    def name(self) -> str:
        from salience.core.base import registered_name

        return registered_name(self, "kv")

    def query_count(self, n_tokens: int, question: int = 0) -> int:
        """How many of the prompt's last queries :meth:`token_scores` needs (``question``: the
        prompt's last tokens that are the question, never evicted)."""
        return {0: 0, 1: 1, "all": n_tokens}.get(self.needs.queries, min(getattr(self, "window", 0), n_tokens))

    def protected(self) -> tuple[int, str]:
        """(tokens the policy always keeps, what they are): a budget must hold them."""
        return 1, "one token"

    def layer_keep(self, keep: int, n: int, layer: int, n_layers: int) -> int:
        """The tokens kept per head in decoder layer ``layer`` of ``n_layers`` when the budget
        keeps ``keep`` of ``n``: the same in every layer unless a policy says otherwise."""
        return keep

    def evicted(self, scores, count: int) -> np.ndarray:
        """Which tokens leave the cache: a boolean (b, kv_heads, n) array from the scores (a
        float array of that shape) when the budget evicts ``count`` per head; by default
        exactly ``count`` per head, the lowest, the earlier of tied tokens first (the core's
        selector)."""
        b, n_kv, n = scores.shape
        return lowest_k_mask(scores.reshape(b * n_kv, n), count).reshape(b, n_kv, n)

    def check_model(self, model) -> None:
        """Refuse, naming why, a model the policy cannot run on (nothing by default)."""

    def carried(self, keys, values, kept, rotary=None):
        """The keys and values (b, kv_heads, n, d) the tokens ``kept`` (boolean (b, kv_heads,
        n)) carry into the compacted cache: as the prefill computed them, the keys turned to
        consecutive positions when the policy rerotates (``rotary``: the model's rotation). A
        merging policy also folds the evicted tokens' values into the kept ones."""
        if self.needs.rerotates:
            keys = _rerotated(keys, kept, rotary)
        return keys, values

    def token_scores(self, keys, values, queries=None, *, scaling: float | None = None, rotary=None,
                     output_weight=None, keep: int | None = None, layer: int | None = None,
                     question: int | None = None, hidden=None):
        """Scores (b, kv_heads, n) of a layer's cached tokens: ``keys`` and ``values`` (b,
        kv_heads, n, d) as cached (rotary positions applied), ``queries`` (b, heads, q, d) the
        prompt's last :meth:`query_count` queries (with positions applied unless
        ``needs.rotated_queries`` is False). What ``needs.reads`` names: ``rotary`` the model's rotation,
        ``rotary(positions)`` -> (cos, sin) shaped (len(positions), d); ``output_weight`` the
        output projection (hidden, heads x d); ``keep`` the tokens kept per head; ``layer`` the
        decoder layer's index; ``question`` the prompt's last tokens that are the question;
        ``hidden`` the attention's input hidden states of the same tokens (b, n, hidden size)."""
        _torch()  # torch installed, or the error naming the extra
        n, d = keys.shape[-2], keys.shape[-1]
        if self.needs.queries and (queries is None or queries.shape[-2] < 1):
            raise InvalidParameterError(f"policy {self.name!r} needs the prompt's queries.")
        given = {"rotary": rotary, "output_weight": output_weight, "keep": keep, "layer": layer, "question": question,
                 "hidden": hidden}
        missing = [name for name in self.needs.reads if given[name] is None]
        if missing:
            raise InvalidParameterError(f"policy {self.name!r} needs {', '.join(missing)}= (the layer's "
                                        f"{' and '.join(missing)}).")
        return self._scores(keys, values, queries, 1.0 / math.sqrt(d) if scaling is None else scaling, n,
                            **{name: given[name] for name in self.needs.reads})

    @abc.abstractmethod
    def _scores(self, keys, values, queries, scaling: float, n: int):
        """The subclass's part (see the class docstring)."""

    def _check_every_query(self, queries, n: int) -> None:
        """Refuse queries that are not all the prompt's (the policies whose needs read ``queries="all"``)."""
        if queries.shape[-2] != n:
            raise InvalidParameterError(f"policy {self.name!r} needs every query of the prompt ({n}); got "
                                        f"{queries.shape[-2]}.")

    def score(self, keys, values, *, queries=None, scaling: float | None = None, rotary=None, output_weight=None,
              keep: int | None = None, layer: int | None = None, question: int | None = None,
              hidden=None) -> Scores:
        """The policy's scores of one layer's cache: keys and values (kv_heads, n, d), queries
        (heads, q, d); :class:`~salience.Scores` over ``"head:position"``."""
        torch = _torch()
        k, v, q = _checked_layer(keys, values, queries)
        k, v = torch.as_tensor(k)[None], torch.as_tensor(v)[None]
        q = None if q is None else torch.as_tensor(q)[None]
        if output_weight is not None:
            output_weight = torch.as_tensor(np.asarray(output_weight, dtype=np.float64))
        if hidden is not None:
            hidden = torch.as_tensor(np.asarray(hidden, dtype=np.float64))[None]
        out = self.token_scores(k, v, q, scaling=scaling, rotary=rotary, output_weight=output_weight, keep=keep,
                                layer=layer, question=question, hidden=hidden)[0]
        heads, n = out.shape
        return Scores(out.double().numpy().ravel(), ids=[f"{h}:{i}" for h in range(heads) for i in range(n)])

    def score_batch(self, batch, **per_call) -> list[Scores]:
        """``score`` of each (keys, values) or (keys, values, queries) layer of ``batch``."""
        out = []
        for item in batch:
            keys, values, *rest = item
            out.append(self.score(keys, values, queries=rest[0] if rest else None, **per_call))
        return out


class _SinksKept(KVPolicy):
    """A policy that always keeps the prompt's first ``n_sink`` tokens (attention sinks)."""

    def protected(self) -> tuple[int, str]:
        return max(1, self.n_sink), f"the {self.n_sink} sinks"

    def _check_longer_than_sinks(self, n: int) -> None:
        if n <= self.n_sink:
            raise InvalidParameterError(f"policy {self.name!r}: the prompt ({n} tokens) must be longer than its "
                                        f"{self.n_sink} sinks.")


def _average_rotation(rotary, start: int, count: int, d: int, dtype):
    """The rotary rotation averaged over the ``count`` positions from ``start``, (d, d):
    rotating by it is rotating by each and averaging (the rotation is linear)."""
    cos, sin = rotary(torch.arange(start, start + count))
    cos, sin = torch.as_tensor(cos, dtype=dtype), torch.as_tensor(sin, dtype=dtype)
    half = d // 2
    # q' = q cos + rotate_half(q) sin, rotate_half(q) = [-q2, q1]: q' = R q with R = diag(cos) + P diag(sin)
    swap = torch.zeros(d, d, dtype=dtype)
    swap[half:, :half] = torch.eye(half, dtype=dtype)
    swap[:half, half:] = -torch.eye(half, dtype=dtype)
    rotations = torch.diag_embed(cos) + swap[None] * sin[:, None, :]
    return rotations.mean(dim=0)


def _z_scored(scores):
    return (scores - scores.mean()) / scores.std().clamp_min(1e-6)


def kv_token_scores(policy: str | KVPolicy, keys, values, queries=None, *, scaling: float | None = None,
                    rotary=None, output_weight=None, keep: int | None = None, layer: int | None = None,
                    question: int | None = None, hidden=None, **params):
    """Scores (b, kv_heads, n) of a layer's cached tokens under ``policy`` (a registered name
    built with ``params``, or a :class:`KVPolicy`): see :meth:`KVPolicy.token_scores`."""
    from salience.core.base import method_of

    _torch()
    return method_of("kv", policy, KVPolicy, **params).token_scores(keys, values, queries, scaling=scaling,
                                                                      rotary=rotary, output_weight=output_weight,
                                                                      keep=keep, layer=layer, question=question,
                                                                      hidden=hidden)
