"""The answer path: a question answered by a causal LM from an index's passages, with the passages
the answer came from and the check that they did.

It composes the domains (so it sits beside ``cli`` and ``server``, above them): the index
retrieves ``k`` passages (:mod:`salience.search`), a judge may rerank them, they are packed into a
token budget (counted by the LM's own tokenizer) and may be attention-sorted so the most read
passage sits next to the question; the KV cache may be evicted by a ``kv`` policy with the
question in view (:mod:`salience.compress`); the model answers greedily; a ``context`` method
(:mod:`salience.explain`) attributes the answer to the passages, the best cited passages'
sentences are ranked by the attention the answer pays them, and the citations are verified by
ContextCite's top-k drop: the answer's log-probability without the top 1 and top 3 cited
passages, beside the same number of random passages removed.

>>> from salience.answer import answer                                   # doctest: +SKIP
>>> result = answer(index, "What do cats do?", model=model, tokenizer=tokenizer, budget=1024)  # doctest: +SKIP
>>> result.answer, result.citations[0].id                                  # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Mapping

import numpy as np

from salience.core.checks import check_k
from salience.exceptions import InvalidParameterError
from salience.models.answering import CONTEXT_TEMPLATE, SourcedQuestion

__all__ = ["Answer", "Citation", "answer", "ANSWER_OPTIONS", "packers_without_similarity"]

# the answer path's options a surface may set, with their defaults (the CLI's flags and /answer's
# fields are built from this one table)
ANSWER_OPTIONS = {"k": 20, "rerank": None, "budget": None, "pack_method": "knapsack", "sort": None, "sort_rounds": 1,
                  "kv_policy": None, "kv_budget": None, "cite": "loo", "citations": 3, "sentences": 2,
                  "max_new_tokens": 64, "lookup_tokens": 4, "random_draws": 2, "seed": 0}
SORTS = ("attention",)


def packers_without_similarity() -> tuple:
    """The ``pack`` methods the answer path can run: it has no passage similarities."""
    from salience.core.base import method_factory, method_names

    return tuple(m for m in method_names("pack") if not method_factory("pack", m).needs_similarity)


@dataclass
class Citation:
    """A cited passage: its ``score`` (the ``context`` method's attribution), its text and its
    ``sentences`` the answer read most (``{text, start, end, attention}``, in passage order;
    ``attention``: the sentence's share of the attention the answer pays the passage)."""

    id: str
    score: float
    text: str
    sentences: list = field(default_factory=list)


@dataclass
class Answer:
    """What :func:`answer` returns: the ``answer``, its ``citations`` (best first), the
    ``passages`` as the model read them (in context order, with their retrieval rank), the
    ``verification`` (the answer's log-probability with every passage, and its drop without the
    top-k cited passages and without k random ones), the ``seconds`` of each stage and the
    model's ``forward_passes``; ``notes`` say what was decided for the caller."""

    question: str
    answer: str
    citations: list
    passages: list
    verification: dict
    seconds: dict
    forward_passes: int
    settings: dict
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        lines = [self.answer.strip() or "(empty answer)", ""]
        for rank, c in enumerate(self.citations, start=1):
            lines.append(f"[{rank}] {c.id}  score {c.score:+.4f}")
            lines += [f"    > {s['text']}" for s in c.sentences]
        drops = self.verification.get("top_k_drop", {})
        randoms = self.verification.get("random_k_drop", {})
        if drops:
            lines.append("verified: log-probability drop without the top cited passages " + ", ".join(
                f"top-{k} {v:+.3f}" + (f" (random {randoms[k]:+.3f})" if k in randoms else "")
                for k, v in drops.items()))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def answer(index, question: str, *, model, tokenizer, k: int = 20, rerank=None, budget: int | None = None,
           pack_method: str = "knapsack", sort: str | None = None, sort_rounds: int = 1, kv_policy=None,
           kv_budget=None, cite: str | None = "loo", citations: int = 3, sentences: int = 2,
           max_new_tokens: int = 64, lookup_tokens: int = 4, random_draws: int = 2, seed: int = 0,
           template: str = CONTEXT_TEMPLATE, chat: "bool | str" = "auto", text_of=None,
           params: Mapping[str, Mapping] | None = None) -> Answer:
    """Answer ``question`` from ``index`` (a BM25, dense or sharded index storing its documents)
    with ``model`` and ``tokenizer`` (:func:`~salience.models.load_causal_lm`).

    ``k`` passages are retrieved; ``rerank``: a ``judge`` name or object reorders them (an LM
    judge asks ``model``); ``budget``: the passages' tokens (the LM's) are packed into this
    many by ``pack_method`` (a ``pack`` method), else all ``k`` are read and a prompt past the
    model's window is refused; ``sort="attention"``: ``sort_rounds`` of attention sorting;
    ``kv_policy``, ``kv_budget``: the prompt's KV cache evicted before answering (a ``kv``
    policy, a fraction or a token count kept); ``cite``: the ``context`` method that attributes
    the answer (None: no citations; ``loo`` by default, chosen on SciFact dev's planted facts:
    ContextCite's gold-first rate at a fifth of its forward passes; ``attention`` reads once),
    ``citations`` passages cited at most (those with a positive score), ``sentences``
    highlighted in each; ``max_new_tokens``: of the answer; ``lookup_tokens``: prompt lookup
    decoding, tokens copied from the prompt checked in the same pass as the next
    (:mod:`salience.models.decoding`: the same greedy answer in fewer passes; 0: one token a
    pass; an evicted cache decodes one token a pass; 4 chosen on SciFact dev: 8 of 8 answers the
    same, generation 4.0 -> 3.1 s in float32); ``random_draws``: random k-sets whose drop is set
    beside the top-k's (``seed``). ``text_of``: a passage's text from its id
    (default: the index's stored fields, joined). ``params``: the named methods' own parameters,
    by option: ``{"rerank": {...}, "kv_policy": {...}, "cite": {...}}``."""
    from salience.core.base import create, method_names
    from salience.core.params import surface_params

    if not isinstance(question, str) or not question.strip():
        raise InvalidParameterError("question must be a non-empty text.")
    k, citations, sentences = check_k(k, "k"), check_k(citations, "citations"), check_k(sentences, "sentences")
    if sort is not None and sort not in SORTS:
        raise InvalidParameterError(f"sort must be one of {', '.join(SORTS)} or None; got {sort!r}.")
    if cite is not None and cite not in method_names("context"):
        raise InvalidParameterError(f"cite must be a context method ({', '.join(method_names('context'))}) or None; "
                                    f"got {cite!r}.")
    if budget is not None:
        budget = check_k(budget, "budget")
        if pack_method not in packers_without_similarity():
            raise InvalidParameterError(f"pack_method must be one of {', '.join(packers_without_similarity())} (the "
                                        f"answer path has no passage similarities); got {pack_method!r}.")
    from salience.models.decoding import check_lookup_tokens

    lookup_tokens = check_lookup_tokens(lookup_tokens)
    if isinstance(random_draws, bool) or not isinstance(random_draws, int) or random_draws < 0:
        raise InvalidParameterError(f"random_draws must be an int >= 0; got {random_draws!r}.")
    if kv_policy is None and kv_budget is not None:
        raise InvalidParameterError("kv_budget needs kv_policy (the policy that evicts down to it).")
    params, named = dict(params or {}), {"rerank": rerank, "kv_policy": kv_policy, "cite": cite}
    for option, given in params.items():
        if option not in named:
            raise InvalidParameterError(f"params are keyed by the options naming a method ({', '.join(named)}); got "
                                        f"{option!r}.")
        if given and named[option] is None:
            raise InvalidParameterError(f"params.{option} set, but {option} is not: name the method first.")
    rerank_params = surface_params(params.get("rerank"), where="params.rerank")
    cite_params = surface_params(params.get("cite"), {"max_new_tokens": "max_new_tokens", "template": "template",
                                                       "chat": "chat"}, where="params.cite")
    if params.get("kv_policy"):
        from salience.compress.kv.eviction import kv_policy as make_policy

        kv_policy = make_policy(kv_policy, **surface_params(params["kv_policy"], where="params.kv_policy"))
    text_of = text_of or _stored_text(index)
    seconds, notes = {}, []
    settings = {"k": k, "rerank": getattr(rerank, "method", rerank), "budget": budget, "pack_method": pack_method,
                "sort": sort, "kv_policy": None if kv_policy is None else str(getattr(kv_policy, "name", kv_policy)),
                "kv_budget": kv_budget, "cite": cite, "max_new_tokens": max_new_tokens, "lookup_tokens": lookup_tokens}

    started = time.perf_counter()
    ranked = index.search(question, k=k)
    if not len(ranked):
        raise InvalidParameterError("the question matches no passage of the index: nothing to answer from.")
    texts = {doc_id: text_of(doc_id) for doc_id in ranked.ids}
    seconds["retrieve"] = time.perf_counter() - started
    if rerank is not None:
        started = time.perf_counter()
        ranked = _reranked(question, ranked, rerank, texts, model, tokenizer, rerank_params)
        seconds["rerank"] = time.perf_counter() - started
    order = list(ranked.ids)
    rank_of = {doc_id: rank for rank, doc_id in enumerate(order, start=1)}
    lengths = {doc_id: len(tokenizer.encode(texts[doc_id], add_special_tokens=False)) for doc_id in order}
    if budget is not None:
        if min(lengths.values()) > budget:
            raise InvalidParameterError(f"budget {budget} holds no passage: the shortest of the {len(lengths)} "
                                        f"retrieved has {min(lengths.values())} tokens.")
        order = _packed(ranked, lengths, budget, pack_method)
    if sort == "attention":
        from salience.search.attention_sort import attention_sort

        started = time.perf_counter()
        order = attention_sort({i: texts[i] for i in order}, question, model=model, tokenizer=tokenizer,
                               rounds=sort_rounds, template=template, chat=chat)
        seconds["sort"] = time.perf_counter() - started
    sources = [texts[i] for i in order]
    options = {"template": template, "chat": chat}
    try:
        reading = SourcedQuestion(model, tokenizer, sources, question, answered=False, **options)
        reading.check_window(len(reading.prompt_ids(np.ones(len(sources), dtype=bool))), max_new_tokens,
                              "max_new_tokens")
    except InvalidParameterError as err:
        if budget is None and "window" in str(err):
            raise InvalidParameterError(f"{err} Or pack them into a token budget (budget=, --budget).") from None
        raise

    started = time.perf_counter()
    response_ids, passes, prompt_cache = _generate(model, tokenizer, reading, max_new_tokens, kv_policy, kv_budget,
                                                   lookup_tokens)
    seconds["generate"] = time.perf_counter() - started
    asked = SourcedQuestion(model, tokenizer, sources, question, response=response_ids, **options)
    asked.generated = True  # by the loop above
    if prompt_cache is not None:  # the answer's log-probability and attention read on the prompt's cache
        asked.prompt_cache = prompt_cache[:2]
        asked.read_response_on_prompt_cache(prompt_cache[2])
    if kv_policy is not None:
        notes.append(f"the answer was generated from a KV cache evicted by {settings['kv_policy']} to {kv_budget}; "
                     "citations and their check read the whole context")
    passages = [{"id": i, "rank": rank_of[i], "retrieval_score": float(ranked.values[rank_of[i] - 1]),
                 "tokens": lengths[i], "text": texts[i]} for i in order]
    result = Answer(question, asked.response, [], passages, {}, seconds, passes, settings, notes)
    if cite is None:
        result.forward_passes += asked.forward_passes
        return result

    started = time.perf_counter()
    method = create("context", cite, model=model, tokenizer=tokenizer, max_new_tokens=max_new_tokens, **options,
                    **cite_params)
    scores = method.attribute(asked, order)
    if "note" in method.info_:
        notes.append(method.info_["note"])
    cited = [(i, float(v)) for i, v in zip(scores.sorted().ids, scores.sorted().values) if v > 0][:citations]
    if not cited:
        notes.append(f"no passage raises the answer's log-probability by {cite}: the answer is not grounded in the "
                     "context (or the model answered from its own knowledge)")
    result.citations = [Citation(i, v, texts[i]) for i, v in cited]
    seconds["cite"] = time.perf_counter() - started
    started = time.perf_counter()
    try:
        _highlight(asked, order, result.citations, sentences)
    except InvalidParameterError as err:  # a model without attention weights: citations without sentences
        notes.append(f"sentences not highlighted: {err}")
    seconds["sentences"] = time.perf_counter() - started
    started = time.perf_counter()
    result.verification = _verification(asked, order, scores, random_draws, seed)
    seconds["verify"] = time.perf_counter() - started
    result.forward_passes += asked.forward_passes
    return result


def _stored_text(index):
    from salience.io.documents import document_text

    if not getattr(index, "store_documents", True):
        raise InvalidParameterError("the index stores no documents: the model reads their texts (index with stored "
                                    "documents, or give text_of).")
    return lambda doc_id: document_text(index, doc_id)


def _reranked(question, ranked, rerank, texts, model, tokenizer, params: dict):
    from salience.core.base import create, method_factory
    from salience.search.lm_judges import LMJudge
    from salience.search.rerank import rerank as rerank_scores

    if isinstance(rerank, str):
        kind = method_factory("judge", rerank)
        rerank = create("judge", rerank, **({"model": model, "tokenizer": tokenizer} if issubclass(kind, LMJudge)
                                            else {}), **params)
    elif params:
        raise InvalidParameterError("params.rerank go to a judge named by rerank=, not to a judge object.")
    return rerank_scores(question, ranked, rerank, texts, depth=len(ranked))


def _packed(ranked, lengths: dict, budget: int, method: str) -> list:
    """The ids packed into ``budget`` tokens, in rank order (scores relative to the best)."""
    from salience.core.scores import Scores
    from salience.search.pack import pack

    best = ranked.values[0] if ranked.values[0] > 0 else 1.0
    relative = Scores(np.maximum(ranked.values / best, 1e-9), ids=ranked.ids)
    kept = set(pack(relative, lengths, tokens=budget, method=method).ids)
    return [i for i in ranked.ids if i in kept]


def _generate(model, tokenizer, reading: SourcedQuestion, max_new_tokens: int, kv_policy, kv_budget,
              lookup_tokens: int = 0):
    """(greedy answer ids, forward passes, (the prompt's cache, its length, its last logits) or
    None): the prompt prefilled into a cache (evicted by ``kv_policy``, if any) and decoded on it
    (:func:`~salience.models.decoding.greedy_decode`; ``lookup_tokens`` drafted from the prompt
    a pass where the cache is whole). The full cache (no policy) is handed on: the answer's
    log-probability and attention over the prompt reuse it."""
    from salience.compress.kv.eviction import check_budget, continue_from, prefill
    from salience.models.answering import end_tokens
    from salience.models.decoding import greedy_decode

    prompt = reading.prompt_ids(np.ones(len(reading.sources), dtype=bool))
    if kv_policy is not None:
        check_budget(kv_budget, len(prompt), kv_policy)
    state = prefill(model, prompt, policy=kv_policy, budget=kv_budget)
    position = [state.length]

    def read(tokens):
        start, position[0] = position[0], position[0] + len(tokens)
        if kv_policy is None:  # the full cache: a plain decoding pass
            return _read_on_cache(model, state.cache, tokens, start)
        return continue_from(model, state.cache, tokens, start)[0]  # an evicted cache: its kept tokens' mask applies

    def crop(n):
        state.cache.crop(-n)  # a negative count removes that many, in old and new transformers
        position[0] -= n

    ids, passes = greedy_decode(read, state.logits[0], history=prompt, stops=end_tokens(model, tokenizer),
                                max_new_tokens=max_new_tokens, lookup_tokens=lookup_tokens if kv_policy is None else 0,
                                crop=crop)
    if not ids:
        raise InvalidParameterError("the model answered nothing to this question from these passages (its first "
                                    "token ends the sequence)" + (": raise kv_budget." if kv_policy else "."))
    return ids, passes + 1, (state.cache, len(prompt), state.logits) if kv_policy is None else None


def _read_on_cache(model, cache, tokens: list, position: int):
    """The logits (len(tokens), vocab) of ``tokens`` read onto ``cache`` from ``position``."""
    import torch

    from salience.models.kv import cache_argument

    with torch.no_grad():
        positions = torch.arange(position, position + len(tokens))[None]
        return model(input_ids=torch.tensor([tokens]), position_ids=positions, use_cache=True,
                     logits_to_keep=len(tokens), **{cache_argument(model): cache}).logits[0]


def _highlight(asked: SourcedQuestion, order: list, cited: list, sentences: int) -> None:
    """Each cited passage's ``sentences`` most read by the answer (attention from its tokens)."""
    from salience.text.sentences import split_sentences

    if not cited:
        return
    received = asked.token_attention(reader="response")
    offsets = dict(zip(order, asked.source_offsets()))
    for citation in cited:
        start = offsets[citation.id][0]
        parts = split_sentences(citation.text)
        mass = np.array([received[slice(*asked.token_span(start + s.start, start + s.end))].sum() for s in parts])
        total = mass.sum() or 1.0
        best = sorted(np.argsort(-mass, kind="stable")[:sentences])
        citation.sentences = [{"text": parts[i].text, "start": parts[i].start, "end": parts[i].end,
                               "attention": float(mass[i] / total)} for i in best]


def _verification(asked: SourcedQuestion, order: list, scores, random_draws: int, seed: int) -> dict:
    """ContextCite's top-k drop of the citations, k = 1 and 3 (below the number of passages),
    and the mean drop of ``random_draws`` random k-sets beside it."""
    n = len(order)
    position = {doc_id: p for p, doc_id in enumerate(order)}
    ranked = [position[i] for i in scores.sorted().ids]
    ks = [k for k in (1, 3) if k < n] or [n]
    rng = np.random.default_rng(seed)
    masks, labels = [np.ones(n, dtype=bool)], []
    for k in ks:
        kept = np.ones(n, dtype=bool)
        kept[ranked[:k]] = False
        masks.append(kept)
        labels.append(("top", k))
        for _ in range(random_draws if k < n else 0):
            kept = np.ones(n, dtype=bool)
            kept[rng.choice(n, size=k, replace=False)] = False
            masks.append(kept)
            labels.append(("random", k))
    log_probs = asked.log_probs(np.array(masks), reuse_prefix=True)  # the prompt read while generating
    whole = float(log_probs[0])
    top, randoms = {}, {}
    for (kind, k), value in zip(labels, log_probs[1:]):
        if kind == "top":
            top[str(k)] = whole - float(value)
        else:
            randoms.setdefault(str(k), []).append(whole - float(value))
    return {"log_prob": whole, "top_k_drop": top, "random_k_drop": {k: float(np.mean(v)) for k, v in randoms.items()},
            "random_draws": random_draws}
