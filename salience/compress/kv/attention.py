"""KV-cache policies by the attention the prompt's queries pay each cached token, observed or
expected (higher = kept; the base in :mod:`salience.compress.kv.policy`; kvpress's presses of
the same names):

* ``h2o``: heavy hitters, the attention a token received from every later query of the
  prompt, divided by how many queries could attend to it (Zhang et al., 2023; kvpress's
  ``ObservedAttentionPress``);
* ``snapkv``: the attention of the last ``window`` queries (the observation window), pooled
  over ``kernel_size`` neighbouring tokens; the window itself is always kept (Li et al., 2024);
* ``tova``: the attention of the last query, averaged over all heads; the last token is kept
  (Oren et al., 2024);
* ``vatp``: ``h2o``'s attention times the L1 norm of the token's value vector (value-aware
  token pruning, Guo et al., 2024);
* ``caote``: the attention output error of evicting the token alone, ``a_j / (1 - a_j) x
  ||v_j - o||`` for each observation-window query (``o`` its attention output), averaged over
  the window; the window is kept (Goel et al., 2025);
* ``pyramidkv``: SnapKV's scores with a budget per layer falling linearly from the first
  layer to the last (the pyramid's steepness ``beta``), the total as the uniform budget's
  (Cai et al., 2024);
* ``expected_attention``: the attention future queries are expected to pay each token: the
  prompt's queries (before their rotation, the ``n_sink`` first left out) summarised by mean
  and covariance, rotated by the average rotation of the next ``n_future_positions``
  positions; ``E[exp(q.k / sqrt d)]`` of a Gaussian query is ``exp(mu.k / sqrt d + k' S k /
  2d)``, normalised over the tokens, averaged over the heads of a group and scaled by the
  value's norm; the sinks are kept (Devoto et al., 2025);
* ``non_causal_attention``: the prompt cut into chunks of ``chunk_size`` in which every query
  attends to every key (no causal mask; unscaled dot products, as kvpress); a token's
  attention summed over its chunk's queries, averaged over the group, times its value's norm,
  pooled over 3 neighbours and z-scored (Compactor's attention half, Chari and Van Durme,
  2025; kvpress's NonCausalAttnPress);
* ``finch``: query-aware only: the attention the question's queries pay each token of the
  context, each weight times its query's position (``normalize_scores``: later queries spread
  their attention over more keys), averaged; the kept keys rerotated to consecutive
  positions (``rerotate_keys``) (FINCH, Corallo and Papotti, 2024; kvpress's FinchPress).
"""

from __future__ import annotations

import abc

import numpy as np

from salience.core.base import register_method
from salience.core.params import Interval
from salience.exceptions import InvalidParameterError
from salience.extras import torch
from salience.compress.kv.policy import (KVNeeds, KVPolicy, _SinksKept, _average_rotation, _group_mean,
                                         _received_attention, _window_attention)

__all__ = ["H2O", "SnapKV", "TOVA", "VATP", "CAOTE", "PyramidKV", "ExpectedAttention", "NonCausalAttention", "Finch"]


class _WindowPolicy(KVPolicy):
    """A policy that reads the observation window (the prompt's last ``window`` queries) and
    always keeps the window's own tokens."""

    needs = KVNeeds(queries="window")
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


@register_method("kv", "h2o", "KV cache: heavy hitters, attention received from the prompt's queries (H2O, Zhang et "
                              "al., 2023)")
class H2O(KVPolicy):
    needs = KVNeeds(queries="all")

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
    needs = KVNeeds(queries=1)

    def protected(self) -> tuple[int, str]:
        return 1, "the last token"

    def _scores(self, keys, values, queries, scaling, n):
        b, n_kv = keys.shape[:2]
        attention = _window_attention(queries[:, :, -1:], keys, scaling)[:, :, 0]
        scores = attention.mean(dim=1, keepdim=True).expand(b, n_kv, n).clone()
        scores[..., -1] = scores.max() + 1  # the last token is kept
        return scores


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


@register_method("kv", "pyramidkv", "KV cache: SnapKV with budgets falling from the first layer to the last "
                                    "(PyramidKV, Cai et al., 2024)")
class PyramidKV(SnapKV):
    _parameter_constraints = {"beta": [Interval("real", 1)]}

    def __init__(self, *, window: int = 64, kernel_size: int = 5, beta: float = 20):
        self.beta = beta
        super().__init__(window=window, kernel_size=kernel_size)

    def layer_keep(self, keep: int, n: int, layer: int, n_layers: int) -> int:
        """The pyramid: the first layer keeps the most, the last the least, linearly between;
        the layers keep ``keep`` on average (kvpress's formula, after KVCache-Factory). Too
        short a prompt for a pyramid keeps the uniform budget."""
        top = self.window + keep  # what a layer keeps on average
        low = (top - self.window) / self.beta
        high = (top - self.window) * 2 - low
        if high >= n - self.window:
            high = n - self.window
            low = (top - self.window) * 2 - high
        if not (n >= high >= low >= self.window):
            return keep
        step = (high - low) / (n_layers - 1) if n_layers > 1 else 0.0
        return max(1, min(n, round(high - layer * step)))


@register_method("kv", "expected_attention", "KV cache: attention expected from future queries, times the value's "
                                             "norm (Expected Attention, Devoto et al., 2025)")
class ExpectedAttention(_SinksKept):
    needs = KVNeeds(queries="all", rotated_queries=False, reads=("rotary",))
    _parameter_constraints = {"n_future_positions": [Interval("int", 1)], "n_sink": [Interval("int", 0)],
                              "use_covariance": [bool], "use_vnorm": [bool], "epsilon": [Interval("real", 0)]}

    def __init__(self, *, n_future_positions: int = 512, n_sink: int = 4, use_covariance: bool = True,
                 use_vnorm: bool = True, epsilon: float = 0.0):
        self.n_future_positions, self.n_sink = n_future_positions, n_sink
        self.use_covariance, self.use_vnorm, self.epsilon = use_covariance, use_vnorm, epsilon
        super().__init__()

    def _scores(self, keys, values, queries, scaling, n, rotary):
        self._check_longer_than_sinks(n)
        self._check_every_query(queries, n)
        dtype = torch.promote_types(keys.dtype, torch.float32)
        d = keys.shape[-1]
        observed = queries[:, :, self.n_sink:].to(dtype)
        mean = observed.mean(dim=2)  # (b, heads, d)
        rotation = _average_rotation(rotary, n, self.n_future_positions, d, dtype)
        mean = mean @ rotation.T
        k = keys[:, :, self.n_sink:].to(dtype)
        groups = queries.shape[1] // keys.shape[1]
        expanded = k.repeat_interleave(groups, dim=1)  # (b, heads, m, d)
        logits = (expanded @ mean[..., None])[..., 0] / d ** 0.5
        if self.use_covariance:
            centred = observed - observed.mean(dim=2, keepdim=True)
            covariance = centred.transpose(-1, -2) @ centred / observed.shape[2]
            covariance = rotation @ covariance @ rotation.T
            logits = logits + ((expanded @ covariance) * expanded).sum(dim=-1) / d / 2
        scores = _group_mean(torch.softmax(logits, dim=-1), keys.shape[1])
        if self.use_vnorm:
            scores = (scores + self.epsilon) * torch.linalg.vector_norm(values[:, :, self.n_sink:].to(dtype), dim=-1)
        return torch.nn.functional.pad(scores, (self.n_sink, 0), value=float(scores.max()) + 1)


@register_method("kv", "non_causal_attention", "KV cache: attention within chunks of the prompt, every query to every "
                                               "key, times the value's norm (Compactor's attention scores, Chari and "
                                               "Van Durme, 2025)")
class NonCausalAttention(KVPolicy):
    """Chunked non-causal attention (see the module docstring). The prompt is padded with zero
    queries and keys to a whole number of chunks: a padded query attends evenly to its chunk,
    a padded key takes its share of the last chunk's softmax (kvpress's masking leaves both
    so)."""

    needs = KVNeeds(queries="all")
    _parameter_constraints = {"chunk_size": [Interval("int", 1)]}

    def __init__(self, *, chunk_size: int = 256):
        self.chunk_size = chunk_size
        super().__init__()

    def _scores(self, keys, values, queries, scaling, n):
        self._check_every_query(queries, n)
        b, heads, _, d = queries.shape
        size = self.chunk_size
        padded = -n % size
        q = torch.nn.functional.pad(queries, (0, 0, 0, padded)).view(b, heads, -1, size, d)
        k = torch.nn.functional.pad(keys.repeat_interleave(heads // keys.shape[1], dim=1), (0, 0, 0, padded))
        logits = q @ k.view(b, heads, -1, size, d).transpose(-1, -2)
        received = torch.softmax(logits.to(torch.float32), dim=-1).sum(dim=-2).reshape(b, heads, -1)[..., :n]
        scores = _group_mean(received, keys.shape[1]) * values.norm(dim=-1)
        scores = torch.nn.functional.avg_pool1d(scores, kernel_size=3, padding=1, stride=1)
        return (scores - scores.mean()) / scores.std().clamp_min(1e-6)


@register_method("kv", "finch", "KV cache: attention the question's queries pay the context, weighted by each query's "
                                "position; kept keys rerotated (FINCH, Corallo and Papotti, 2024; kvpress's FinchPress)")
class Finch(KVPolicy):
    """Query-aware: the question is read with the prompt (eviction's ``keep_last``) and its
    queries are the observation window, whatever its length. Query i of the question, at
    position p_i, gives each context token its attention weight times p_i when
    ``normalize_scores`` (a later query spreads its attention over more keys); the weights
    are averaged over the question and over the heads of a group, unpooled. The question's
    own tokens are kept. ``rerotate_keys``: the kept keys are turned to consecutive positions
    and the continuation follows them (:class:`~salience.compress.kv.wrappers.KeyRerotation`),
    as FINCH does. ``chunk_length``: the prompt (the question included) is cut into chunks of
    that many tokens and each keeps the budget's share of its own tokens, the best of them
    (FINCH's chunked selection, kvpress's ``chunk_length``): the kept tokens are spread over
    the whole prompt; the chunk holding the question must keep at least the question."""

    _parameter_constraints = {"normalize_scores": [bool], "rerotate_keys": [bool],
                              "chunk_length": [None, Interval("int", 1)]}

    def __init__(self, *, normalize_scores: bool = True, rerotate_keys: bool = True, chunk_length: int | None = None):
        self.normalize_scores, self.rerotate_keys, self.chunk_length = normalize_scores, rerotate_keys, chunk_length
        super().__init__()

    def evicted(self, scores, count: int) -> np.ndarray:
        """Without ``chunk_length``, the lowest ``count`` per head of the whole prompt; with it,
        each chunk keeps ``int(its length x kept share)`` (the share ``1 - count / n``; at least
        one), the rest of it evicted lowest first, ties the earlier."""
        if self.chunk_length is None:
            return super().evicted(scores, count)
        values = np.asarray(scores)
        b, n_kv, n = values.shape
        share = (n - count) / n
        out = np.zeros(values.shape, dtype=bool)
        for lo in range(0, n, self.chunk_length):
            chunk = values[..., lo : lo + self.chunk_length]
            width, kept = chunk.shape[-1], max(1, int(chunk.shape[-1] * share))  # at least one, as kvpress
            question = int(np.isposinf(chunk).sum(axis=-1).max())  # the question's tokens are scored +inf
            if question > kept:
                raise InvalidParameterError(
                    f"chunk_length={self.chunk_length}: the chunk of tokens {lo}-{lo + width - 1} keeps {kept} at this "
                    f"budget, fewer than the {question} question tokens in it: raise chunk_length.")
            out[..., lo : lo + width] = super().evicted(chunk, width - kept)
        return out

    @property
    def needs(self) -> KVNeeds:
        return KVNeeds(queries="question", reads=("question",), rerotates=bool(self.rerotate_keys))

    def query_count(self, n_tokens: int, question: int = 0) -> int:
        return min(question, n_tokens)

    def _scores(self, keys, values, queries, scaling, n, question):
        w = min(question, queries.shape[-2])
        if not 0 < w < n:
            raise InvalidParameterError(f"policy {self.name!r} needs a question of 1 to {n - 1} tokens read with the "
                                        f"prompt ({n} tokens); got {question}.")
        attention = _window_attention(queries[:, :, -w:], keys, scaling)[..., : n - w]  # (b, heads, w, n - w)
        if self.normalize_scores:
            attention = attention * torch.arange(n - w, n, dtype=attention.dtype)[:, None]
        scores = _group_mean(attention.mean(dim=2), keys.shape[1])
        return torch.nn.functional.pad(scores, (0, w), value=float(scores.max()) + 1)
