"""Which cached tokens matter: the KV-cache policies, each a registered scorer of the ``kv``
family (higher = kept).

After the prompt is read (the prefill), every attention layer's cache holds one key and one
value per token and key-value head. A policy scores them; :func:`salience.compress.kv.evict`
keeps the ``budget`` best per head.

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
  the window; the window is kept (Goel et al., 2025);
* ``random``: uniform random scores, a baseline (kvpress's ``RandomPress``: with a ``seed``,
  every layer draws the same scores from a generator seeded afresh).

A key-value head serves several query heads: attention-based scores are averaged over the
group (``tova``: over all heads).

A new policy is one subclass of :class:`KVPolicy` in this file: its parameters as keyword
arguments with their constraints, ``queries`` (which of the prompt's queries it reads),
``token_scores`` (the maths, on torch tensors) and, when it always keeps some tokens,
``protected``; ``@register_method("kv", name, description)`` makes it reachable from
``evict``, ``kv_eval``, ``passkey``, ``salience compress kv-eval --policy`` and ``salience
methods``.
"""

from __future__ import annotations

import abc
import math

import numpy as np

from salience.core.base import Scorer, register_method
from salience.core.masks import lowest_k_mask
from salience.core.params import Interval
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError
from salience.extras import require_torch
from salience.extras import torch

__all__ = ["KVPolicy", "StreamingLLM", "RandomKV", "H2O", "SnapKV", "TOVA", "KeyNorm", "VATP", "CAOTE", "kv_token_scores"]


def _torch():
    return require_torch("KV-cache eviction")


# ------------------------------------------------------------------------------------------
# attention over the cache
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


# ------------------------------------------------------------------------------------------
# the family's base
class KVPolicy(Scorer, abc.ABC):
    """Base of the KV-cache policies. ``score(keys, values, queries=...)`` gives
    :class:`~salience.Scores` over one layer's cached tokens (ids ``"head:position"``);
    :meth:`token_scores` is the same on batched torch tensors, as eviction calls it.

    ``queries`` says which of the prompt's queries the policy reads: 0 (none), 1 (the last),
    ``"window"`` (the observation window of ``window`` queries) or ``"all"``;
    ``rotated_queries`` whether they carry their rotary positions (False: as projected, before
    the rotation). ``reads`` names what else of the layer the scores need, passed by eviction
    as keywords of :meth:`token_scores`: ``"rotary"`` (the model's rotation of any position),
    ``"output_weight"`` (the attention's output projection), ``"keep"`` (the tokens the budget
    keeps per head), ``"layer"`` (the decoder layer's index: policies that learned something
    per layer, :mod:`salience.compress.kv_calibrated`), ``"hidden"`` (the attention's input
    hidden states of the cached tokens: KVzap's surrogate reads them). :meth:`layer_keep` may give a layer another budget than the others
    (PyramidKV); :meth:`evicted` may spread a layer's budget unevenly over its heads (AdaKV).
    A policy with ``reconstructs = True`` (KVzip) is scored by passes of the model after the
    whole prefill: eviction calls its ``evicted_layers`` instead. One with ``rerotates = True``
    has its kept keys turned to the consecutive positions they take in the compacted cache
    (kvpress's key rerotation), the continuation read after them. One with
    ``needs_question = True`` (FINCH) scores with the queries of the question read with the
    prompt (``keep_last`` of eviction; ``reads`` names ``"question"``, its length). One with
    ``decodes = True`` (:mod:`salience.compress.kv_decoding`) also cuts the cache while decoding;
    one with ``budgeted = False`` (DMS) evicts by a threshold of its own, every prefill scored and
    its ``evicted`` given no count to keep (the budget must be None)."""

    queries: int | str = 0
    rotated_queries: bool = True
    reads: tuple = ()
    rerotates: bool = False
    needs_question: bool = False
    decodes: bool = False
    budgeted: bool = True

    def __init__(self):
        self._validate_params()

    @property
    def name(self) -> str:
        from salience.core.base import registered_name

        return registered_name(self, "kv")

    def query_count(self, n_tokens: int, question: int = 0) -> int:
        """How many of the prompt's last queries :meth:`token_scores` needs (``question``: the
        prompt's last tokens that are the question, never evicted)."""
        return {0: 0, 1: 1, "all": n_tokens}.get(self.queries, min(getattr(self, "window", 0), n_tokens))

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
        if self.rerotates:
            keys = _rerotated(keys, kept, rotary)
        return keys, values

    def token_scores(self, keys, values, queries=None, *, scaling: float | None = None, rotary=None,
                     output_weight=None, keep: int | None = None, layer: int | None = None,
                     question: int | None = None, hidden=None):
        """Scores (b, kv_heads, n) of a layer's cached tokens: ``keys`` and ``values`` (b,
        kv_heads, n, d) as cached (rotary positions applied), ``queries`` (b, heads, q, d) the
        prompt's last :meth:`query_count` queries (with positions applied unless
        ``rotated_queries`` is False). What ``reads`` names: ``rotary`` the model's rotation,
        ``rotary(positions)`` -> (cos, sin) shaped (len(positions), d); ``output_weight`` the
        output projection (hidden, heads x d); ``keep`` the tokens kept per head; ``layer`` the
        decoder layer's index; ``question`` the prompt's last tokens that are the question;
        ``hidden`` the attention's input hidden states of the same tokens (b, n, hidden size)."""
        _torch()  # torch installed, or the error naming the extra
        n, d = keys.shape[-2], keys.shape[-1]
        if self.queries and (queries is None or queries.shape[-2] < 1):
            raise InvalidParameterError(f"policy {self.name!r} needs the prompt's queries.")
        given = {"rotary": rotary, "output_weight": output_weight, "keep": keep, "layer": layer, "question": question,
                 "hidden": hidden}
        missing = [name for name in self.reads if given[name] is None]
        if missing:
            raise InvalidParameterError(f"policy {self.name!r} needs {', '.join(missing)}= (the layer's "
                                        f"{' and '.join(missing)}).")
        return self._scores(keys, values, queries, 1.0 / math.sqrt(d) if scaling is None else scaling, n,
                            **{name: given[name] for name in self.reads})

    @abc.abstractmethod
    def _scores(self, keys, values, queries, scaling: float, n: int):
        """The subclass's part (see the class docstring)."""

    def _check_every_query(self, queries, n: int) -> None:
        """Refuse queries that are not all the prompt's (the policies with ``queries = "all"``)."""
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


class _WindowPolicy(KVPolicy):
    """A policy that reads the observation window (the prompt's last ``window`` queries) and
    always keeps the window's own tokens."""

    queries = "window"
    _parameter_constraints = {"window": [Interval("int", 1)]}

    def protected(self) -> tuple[int, str]:
        return self.window, f"the observation window of {self.window} tokens"

    def _scores(self, keys, values, queries, scaling, n):
        w = min(self.window, queries.shape[-2])
        if w >= n:
            raise InvalidParameterError(f"policy {self.name!r}: the prompt ({n} tokens) must be longer than the "
                                        f"observation window ({w}).")
        attention = _window_attention(queries[:, :, -w:], keys, scaling)  # (b, heads, w, n)
        scores = self._window_scores(attention, keys, values, n, w)
        return torch.nn.functional.pad(scores, (0, w), value=float(scores.max()) + 1)

    @abc.abstractmethod
    def _window_scores(self, attention, keys, values, n: int, w: int):
        """The subclass's part (see the class docstring)."""


# ------------------------------------------------------------------------------------------
# the policies
@register_method("kv", "streaming_llm", "KV cache: attention sinks + the most recent tokens (StreamingLLM, Xiao et al., "
                                        "2024)")
class StreamingLLM(KVPolicy):
    _parameter_constraints = {"n_sink": [Interval("int", 0)]}

    def __init__(self, *, n_sink: int = 4):
        self.n_sink = n_sink
        super().__init__()

    def protected(self) -> tuple[int, str]:
        return self.n_sink + 1, f"the {self.n_sink} sinks and at least one recent token"

    def _scores(self, keys, values, queries, scaling, n):
        # sinks first, then the most recent tokens: score by position, sinks above all
        b, n_kv = keys.shape[:2]
        scores = torch.arange(n, dtype=torch.promote_types(keys.dtype, torch.float32)).expand(b, n_kv, n).clone()
        scores[..., : min(self.n_sink, n)] = float(n + 1)
        return scores


@register_method("kv", "random", "KV cache: uniform random scores, a baseline (kvpress's RandomPress)")
class RandomKV(KVPolicy):
    _parameter_constraints = {"seed": [None, Interval("int", 0)]}

    def __init__(self, *, seed: int | None = 0):
        self.seed = seed
        super().__init__()

    def _scores(self, keys, values, queries, scaling, n):
        # seeded afresh per call, so every layer of a prefill draws the same scores (as kvpress)
        generator = None if self.seed is None else torch.Generator(device=keys.device).manual_seed(self.seed)
        return torch.rand(keys.shape[:-1], generator=generator, dtype=keys.dtype, device=keys.device)


@register_method("kv", "h2o", "KV cache: heavy hitters, attention received from the prompt's queries (H2O, Zhang et "
                              "al., 2023)")
class H2O(KVPolicy):
    queries = "all"

    def _scores(self, keys, values, queries, scaling, n):
        self._check_every_query(queries, n)
        received = _received_attention(queries, keys, scaling)
        return _group_mean(received / torch.arange(n, 0, -1, dtype=received.dtype), keys.shape[1])


@register_method("kv", "snapkv", "KV cache: attention of the observation window, pooled (SnapKV, Li et al., 2024)")
class SnapKV(_WindowPolicy):
    _parameter_constraints = {"kernel_size": [Interval("int", 1)]}

    def __init__(self, *, window: int = 64, kernel_size: int = 5):
        self.window, self.kernel_size = window, kernel_size
        super().__init__()

    def _validate_params(self) -> None:
        super()._validate_params()
        if self.kernel_size % 2 == 0:
            raise InvalidParameterError(f"kernel_size must be odd (the pooled scores keep their length); got "
                                        f"{self.kernel_size}.")

    def _window_scores(self, attention, keys, values, n, w):
        scores = attention[..., : n - w].mean(dim=2)
        scores = torch.nn.functional.avg_pool1d(scores, kernel_size=self.kernel_size, padding=self.kernel_size // 2,
                                                stride=1)
        return _group_mean(scores, keys.shape[1])


@register_method("kv", "tova", "KV cache: attention of the last query over all heads (TOVA, Oren et al., 2024)")
class TOVA(KVPolicy):
    queries = 1

    def protected(self) -> tuple[int, str]:
        return 1, "the last token"

    def _scores(self, keys, values, queries, scaling, n):
        b, n_kv = keys.shape[:2]
        attention = _window_attention(queries[:, :, -1:], keys, scaling)[:, :, 0]
        scores = attention.mean(dim=1, keepdim=True).expand(b, n_kv, n).clone()
        scores[..., -1] = scores.max() + 1  # the last token is kept
        return scores


@register_method("kv", "key_norm", "KV cache: small key norm = kept (Devoto et al., 2024)")
class KeyNorm(KVPolicy):
    def _scores(self, keys, values, queries, scaling, n):
        return -torch.linalg.vector_norm(keys, dim=-1, dtype=torch.promote_types(keys.dtype, torch.float32))


@register_method("kv", "vatp", "KV cache: received attention x value L1 norm (value-aware token pruning, Guo et al., "
                               "2024)")
class VATP(H2O):
    def _scores(self, keys, values, queries, scaling, n):
        scores = super()._scores(keys, values, queries, scaling, n)
        return scores * values.abs().sum(dim=-1).to(scores.dtype)


@register_method("kv", "caote", "KV cache: attention output error of evicting the token (CAOTE, Goel et al., 2025)")
class CAOTE(_WindowPolicy):
    def __init__(self, *, window: int = 64):
        self.window = window
        super().__init__()

    def _window_scores(self, attention, keys, values, n, w):
        # the output error of evicting token j alone, for each window query
        n_kv = keys.shape[1]
        groups = attention.shape[1] // n_kv
        v = values.repeat_interleave(groups, dim=1).to(attention.dtype)  # (b, heads, n, d)
        output = attention @ v  # (b, heads, w, d)
        distance = torch.cdist(output, v)  # (b, heads, w, n): ||v_j - o||
        error = attention / (1 - attention).clamp_min(1e-6) * distance
        return _group_mean(error.mean(dim=2), n_kv)[..., : n - w]


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
