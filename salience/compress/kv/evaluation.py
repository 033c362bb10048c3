"""How much a KV-cache policy costs: continuation perplexity, passkey retrieval (Mohtashami
and Jaggi, 2023) and decoding speed with an evicted cache."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from salience.compress.kv.eviction import attend_kept, check_budget, evict, kv_policy, prefill, prefill_and_continue
from salience.compress.kv.policy import KVPolicy, _torch
from salience.core.checks import check_k
from salience.exceptions import InvalidParameterError
from salience.models.kv import cache_argument
from salience.extras import torch

__all__ = ["kv_eval", "passkey", "passkey_prompts", "decode_speed", "KVEvalReport", "PasskeyReport"]


def _token_nll(predicting, ids) -> tuple[float, np.ndarray]:
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
    seconds: float  # reading the windows: prefill, eviction and the continuation, summed
    scoring_seconds: float  # of which the policy's scoring
    nll: list = field(default_factory=list)
    key_channels: float | None = None

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


def kv_eval(model, ids: Sequence[int], *, policy: str | KVPolicy | None, budget=None, context: int = 768,
            continuation: int = 256, max_windows: int | None = 8, key_channels: float | None = None,
            channel_policy="think", keep_last: int = 0, **params) -> KVEvalReport:
    """Continuation perplexity under a cache policy: ``ids`` cut into windows of ``context +
    continuation`` tokens; each window's context is prefilled and evicted to ``budget``, and
    the continuation's tokens are scored on what the cache kept (the first by the context's
    last logits). ``policy=None``: the full cache, the reference. ``key_channels``: the share
    of key channels kept (:func:`~salience.compress.evict`). ``keep_last``: the context's last
    tokens read as a question (scored with the rest, never evicted, the budget applying to the
    tokens before them; ``finch`` scores with their queries)."""
    torch = _torch()
    from salience.compress.evaluate import windows as cut

    _check_lengths(model, context, continuation)
    if policy is not None:
        policy = kv_policy(policy, **params)
        if isinstance(keep_last, bool) or not isinstance(keep_last, (int, np.integer)) or not 0 <= keep_last < context:
            raise InvalidParameterError(f"keep_last must be a whole number of tokens in [0, context={context}); got "
                                        f"{keep_last!r}.")
        check_budget(budget, context - keep_last, policy)
    batch = cut(ids, context + continuation, max_windows)
    nll, total_seconds, total_scoring, kept = [], 0.0, 0.0, None
    for window in batch:
        start = time.perf_counter()
        read, logits = prefill_and_continue(model, window[:context], window[context:], policy=policy, budget=budget,
                                            key_channels=key_channels, channel_policy=channel_policy,
                                            keep_last=keep_last if policy is not None else 0)
        total_seconds += time.perf_counter() - start
        total_scoring += read.scoring_seconds
        kept = read.kept
        predicting = torch.cat([read.logits[:, None], logits[:, :-1]], dim=1)
        value, _ = _token_nll(predicting, window[context:])
        nll.append(value / continuation)
    value = float(np.exp(np.mean(nll)))
    return KVEvalReport(_name(policy), budget, value, len(batch), context, continuation, kept, total_seconds, total_scoring,
                        [float(x) for x in nll], key_channels)


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


def passkey(model, tokenizer, *, policy: str | KVPolicy | None, budget=None, needles: int = 50, context: int = 768,
            seed: int = 0, filler: str | None = None, query_aware: bool = False, key_channels: float | None = None,
            channel_policy="think", **params) -> PasskeyReport:
    """Passkey retrieval (Mohtashami and Jaggi, 2023): a 5-digit key hidden in ``context``
    tokens of filler at evenly spread depths, ``needles`` times with keys drawn from ``seed``;
    the haystack is prefilled (and evicted), then the question and the key are read at their
    original positions (query-agnostic: the cache is compressed before the question is
    known). ``query_aware=True``: the question is part of the prefill, so the policies that
    read queries (SnapKV's observation window, TOVA, VATP, ...) choose with it; the question's
    own tokens are never evicted and the budget applies to the haystack (both modes keep the
    same number of tokens), then the key is read. Reports the key's negative log-likelihood, its tokens' ranks and exact retrieval
    (every key token the top choice). ``key_channels``: the share of key channels kept
    (:func:`~salience.compress.evict`)."""
    torch = _torch()
    items = passkey_prompts(tokenizer, needles=needles, context=context, seed=seed, filler=filler)
    if policy is not None:
        policy = kv_policy(policy, **params)
        if getattr(policy, "tokenizer", False) is None:  # kvzip's reconstruction prompt: the model's tokenizer
            policy = policy.clone().set_params(tokenizer=tokenizer)
        check_budget(budget, len(items[0]["prompt"]), policy)
    channels = {"key_channels": key_channels, "channel_policy": channel_policy}
    nlls, ranks, exact = [], [], []
    for item in items:
        if query_aware:
            read, rest = prefill_and_continue(model, item["prompt"] + item["question"], item["key"], policy=policy,
                                              budget=budget, keep_last=len(item["question"]), **channels)
            # the question's last token (the prefill's last logits) predicts the key's first token
            predicting = torch.cat([read.logits[:, None], rest[:, :-1]], dim=1)
        else:
            read, logits = prefill_and_continue(model, item["prompt"], item["question"] + item["key"], policy=policy,
                                                budget=budget, **channels)
            # the logits that predict the key's tokens: from the question's last token on
            predicting = logits[:, len(item["question"]) - 1 : -1]
        value, token_ranks = _token_nll(predicting, item["key"])
        nlls.append(value)
        ranks.extend(token_ranks.tolist())
        exact.append(bool((token_ranks == 1).all()))
    return PasskeyReport(_name(policy), budget, needles, context, float(np.mean(nlls)), float(np.mean(ranks)),
                         float(np.mean(exact)), [round(item["depth"], 4) for item in items], [float(x) for x in nlls])


def decode_speed(model, prompt_ids, *, policy: str | KVPolicy | None, budget=None, new_tokens: int = 32,
                 **params) -> dict:
    """Greedy decoding speed after a prompt: prefill seconds and decoded tokens per second, the
    cache evicted by ``policy`` (or full). Decoding attends to the kept tokens only."""
    torch = _torch()
    if policy is not None and kv_policy(policy, **params).needs.when == "decoding":
        # a decoding policy cuts the cache while it decodes: the whole run inside its block
        with evict(model, policy, budget=budget, **params):
            return decode_speed(model, prompt_ids, policy=None, new_tokens=new_tokens) | {
                "policy": kv_policy(policy, **params).name, "budget": budget}
    start = time.perf_counter()
    read = prefill(model, prompt_ids, policy=policy, budget=budget, **params)
    prefill_seconds = time.perf_counter() - start
    token, cache, n = read.logits.argmax(dim=-1), read.cache, read.length
    start = time.perf_counter()
    with torch.no_grad(), attend_kept(model):
        for step in range(new_tokens):
            out = model(input_ids=token[:, None], **{cache_argument(model): cache},
                        position_ids=torch.tensor([[n + step]]), use_cache=True)
            token = out.logits[:, -1].argmax(dim=-1)
    seconds = time.perf_counter() - start
    return {"policy": _name(kv_policy(policy, **params)) if policy is not None else None, "budget": budget, "prefill_seconds": prefill_seconds,
            "tokens_per_second": new_tokens / seconds, "cache_tokens": int(cache.get_seq_length())}


def _name(policy) -> str | None:
    return None if policy is None else policy.name
