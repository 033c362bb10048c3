"""A question answered by a causal language model from sources (passages, sentences), any of
which may be left out: the prompt of each set of kept sources, the response's log-probability
under it, and a greedy answer (``pip install 'salience[lm]'``).

The prompt is ContextCite's (Cohen-Wang et al., 2024; ``context-cite`` 0.0.4): the kept
sources joined by ``separator`` fill ``template`` (default ``"Context: {context}\\n\\nQuery:
{query}"``), sent as one user turn of the tokenizer's chat template (``chat="auto"``: when it
has one), the reply about to start. The response's log-probability is the sum of its tokens'
log-probabilities after the prompt (log-softmax in float64), one forward pass per set of kept sources (the verifiers and
context attributions count them). A prompt and response longer than the model's window are
refused, naming both lengths.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from salience.exceptions import InvalidParameterError
from salience.extras import require_torch
from salience.extras import torch

__all__ = ["SourcedQuestion", "CONTEXT_TEMPLATE", "continuation_logits", "target_log_probs", "source_texts"]

#: ContextCite's prompt (context-cite 0.0.4's DEFAULT_PROMPT_TEMPLATE)
CONTEXT_TEMPLATE = "Context: {context}\n\nQuery: {query}"


def continuation_logits(model, *, n_keep: int, **inputs):
    """Logits of the last ``n_keep`` positions; with ``logits_to_keep`` the vocabulary projection
    of the others is skipped (a model that does not take it computes them all)."""
    try:
        return model(**inputs, logits_to_keep=n_keep).logits
    except TypeError:  # an older or custom model
        return model(**inputs).logits[:, -n_keep:]


def target_log_probs(logits, target_ids, *, wide: bool = False):
    """Per row, the summed log-probability of ``target_ids`` read from ``logits`` (position i
    predicting target token i): log-softmax in the model's precision as captum computes it (half
    precision widened to float32), summed in that precision; with ``wide``, in float64 (a
    float32 log-softmax over a large vocabulary is off by about 1e-5 per answer, float64 agrees
    with ContextCite's logit-difference form to about 1e-7)."""
    if wide:
        logits = logits.double()
    elif logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    log_probs = torch.log_softmax(logits, dim=-1)
    picked = log_probs.gather(2, target_ids[None, :, None].expand(len(logits), -1, 1))[:, :, 0]
    return picked.sum(dim=1).double()


def source_texts(sources, what: str = "passages") -> tuple[list[str], list[str]]:
    """(ids, texts) of sources given as a dict of id -> text or a list of texts (ids: their
    positions); an empty source is refused by its id."""
    from collections.abc import Mapping

    if isinstance(sources, Mapping):
        ids, texts = [str(k) for k in sources], list(sources.values())
    elif isinstance(sources, (list, tuple)):
        ids, texts = [str(i) for i in range(len(sources))], list(sources)
    else:
        raise InvalidParameterError(f"{what} must be a dict of id -> text or a list of texts; got "
                                    f"{type(sources).__name__}.")
    for source_id, text in zip(ids, texts):
        if not isinstance(text, str) or not text.strip():
            raise InvalidParameterError(f"{what[:-1] if what.endswith('s') else what} {source_id!r} is empty or not a "
                                        "text.")
    return ids, texts


class SourcedQuestion:
    """``question`` answered by ``model`` from ``sources`` (texts, in the order the context
    shows them). ``response``: the answer whose log-probability is measured (a text, or token
    ids); None: generated greedily from every source (``max_new_tokens``, the end-of-sequence
    token dropped); ``answered=False``: no response at all, only the prompt is read.
    ``forward_passes`` counts the model's forward passes (a generated answer's among them: one
    per token)."""

    def __init__(self, model, tokenizer, sources: Sequence[str], question: str, *, response=None,
                 template: str = CONTEXT_TEMPLATE, separator: str = "\n\n", chat: "bool | str" = "auto",
                 max_new_tokens: int = 64, answered: bool = True):
        if isinstance(sources, str) or not all(isinstance(s, str) for s in sources):
            raise InvalidParameterError("sources must be a list of texts (the passages or sentences of the context).")
        if not sources:
            raise InvalidParameterError("sources: no passages to answer from.")
        if not isinstance(question, str) or not question.strip():
            raise InvalidParameterError("question must be a non-empty text.")
        if "{context}" not in template or "{query}" not in template:
            raise InvalidParameterError(f"template must hold {{context}} and {{query}}; got {template!r}.")
        if chat not in (True, False, "auto"):
            raise InvalidParameterError(f"chat must be True, False or 'auto'; got {chat!r}.")
        self.model, self.tokenizer, self.sources, self.question = model, tokenizer, list(sources), question
        self.template, self.separator = template, separator
        has_template = bool(getattr(tokenizer, "chat_template", None))
        if chat is True and not has_template:
            raise InvalidParameterError("chat=True needs a tokenizer with a chat template; this one has none.")
        self.chat = has_template if chat == "auto" else chat
        self.forward_passes = 0
        # (a key/value cache holding the prompt with every source, its length), set by a caller that
        # read it already (the answer path, from generating): the response's attention reuses it
        self.prompt_cache = None
        self._attention, self._log_probs = {}, {}
        self.window = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        whole = self._whole_prompt = self.prompt_ids(np.ones(len(self.sources), dtype=bool))
        self.generated = response is None  # else the response is scored as given, whoever wrote it
        if not answered:  # the prompt alone is read (the question's attention over the sources)
            self.response_ids = []
            self.check_window(len(whole), 0)
            return
        if response is None:
            self.response_ids = self._generate(whole, max_new_tokens)
        elif isinstance(response, str):
            if not response.strip():
                raise InvalidParameterError("response must be a non-empty text (or None: generated).")
            self.response_ids = list(tokenizer.encode(response, add_special_tokens=False))
        else:
            self.response_ids = [int(t) for t in response]
        if not self.response_ids:
            raise InvalidParameterError("the response holds no token: nothing to measure.")
        self.check_window(len(whole), len(self.response_ids))

    @property
    def response(self) -> str:
        return self.tokenizer.decode(self.response_ids)

    def context(self, kept: np.ndarray) -> str:
        return self.separator.join(s for s, keep in zip(self.sources, kept) if keep)

    def prompt_text(self, kept: np.ndarray) -> str:
        """The prompt with the ``kept`` sources (a boolean per source), as the model reads it."""
        text = self.template.format(context=self.context(kept), query=self.question)
        if self.chat:
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                      add_generation_prompt=True)
        return text

    def prompt_ids(self, kept: np.ndarray) -> list[int]:
        """The prompt's token ids with the ``kept`` sources (a boolean per source)."""
        return list(self.tokenizer.encode(self.prompt_text(kept), add_special_tokens=not self.chat))

    def source_spans(self) -> list[tuple[int, int]]:
        """Each source's token positions ``[start, end)`` in the prompt with every source (the
        tokens whose characters overlap it; a fast tokenizer's offsets are needed)."""
        return [self.token_span(a, b) for a, b in self.source_offsets()]

    def question_span(self) -> tuple[int, int]:
        """The question's token positions ``[start, end)`` in the prompt with every source."""
        text = self.prompt_text(np.ones(len(self.sources), dtype=bool))
        start = text.find(self.question, self.source_offsets()[-1][1])
        return self.token_span(start, start + len(self.question))

    def source_offsets(self) -> list[tuple[int, int]]:
        """Each source's character offsets ``[start, end)`` in the prompt text with every source."""
        kept = np.ones(len(self.sources), dtype=bool)
        text = self.prompt_text(kept)
        offsets, cursor = [], text.find(self.context(kept))
        for source in self.sources:
            start = text.find(source, cursor)
            cursor = start + len(source)
            offsets.append((start, cursor))
        return offsets

    def token_span(self, start: int, end: int) -> tuple[int, int]:
        """The token positions ``[start, end)`` of the prompt (with every source) whose
        characters overlap its characters ``[start, end)``; ``(0, 0)`` when none do."""
        if not hasattr(self, "_offsets"):
            text = self.prompt_text(np.ones(len(self.sources), dtype=bool))
            try:
                encoded = self.tokenizer(text, add_special_tokens=not self.chat, return_offsets_mapping=True)
            except (NotImplementedError, TypeError, ValueError):
                raise InvalidParameterError("locating the sources' tokens needs a fast tokenizer (with offsets): this "
                                            "one has none.") from None
            self._offsets = encoded["offset_mapping"]
        tokens = [t for t, (a, b) in enumerate(self._offsets) if b > a and a < end and b > start]
        return (tokens[0], tokens[-1] + 1) if tokens else (0, 0)

    def source_attention(self, *, reader: str = "response", layers=None) -> np.ndarray:
        """The attention each source's tokens receive from the ``reader``'s tokens (the
        ``response``'s or the ``question``'s), summed over both sets of tokens and averaged over
        ``layers`` (None: all) and heads, in one forward pass with eager attention (the model's
        attention implementation put back after)."""
        received = self.token_attention(reader=reader, layers=layers)
        return np.array([received[a:b].sum() for a, b in self.source_spans()])

    def token_attention(self, *, reader: str = "response", layers=None) -> np.ndarray:
        """The attention each token of the prompt (with every source) receives from the
        ``reader``'s tokens, as :meth:`source_attention` sums it over a source's tokens. The
        tokens before the reader's are read first into a key/value cache (the model's fast
        attention, no weights kept), then the rest with eager attention and its weights: only
        the reader's rows are ever materialised, the same numbers as one eager pass."""
        torch = require_torch("Attention over the sources")
        if reader not in ("response", "question"):
            raise InvalidParameterError(f"reader must be 'response' or 'question'; got {reader!r}.")
        key = (reader, None if layers is None else tuple(layers))
        if key in self._attention:  # read once per instance (citations and their sentences share it)
            return self._attention[key]
        prompt = self.prompt_ids(np.ones(len(self.sources), dtype=bool))
        ids = prompt + list(self.response_ids) if reader == "response" else prompt
        first, last = (len(prompt), len(ids)) if reader == "response" else self.question_span()
        attentions = self._attention_after(ids, first)
        self.forward_passes += 1
        chosen = range(len(attentions)) if layers is None else layers
        if any(not -len(attentions) <= i < len(attentions) for i in chosen):
            raise InvalidParameterError(f"layers {list(chosen)} are not all among the model's {len(attentions)} layers.")
        stacked = torch.stack([attentions[i][0, :, : last - first, : len(prompt)] for i in chosen]).double()
        self._attention[key] = stacked.sum(dim=2).mean(dim=(0, 1)).numpy()
        return self._attention[key]

    def read_response_on_prompt_cache(self, last_logits) -> float:
        """log P(response | every source) read from the prompt's cache (``prompt_cache``, set by
        the caller that generated the response on it) and the prompt's last-token ``last_logits``
        (1, vocab): the response's tokens alone are read, not the prompt again. Remembered for
        :meth:`log_probs` of the mask that keeps every source."""
        torch = require_torch("Scoring an answer")
        from salience.models.kv import cache_argument

        if self.prompt_cache is None:
            raise InvalidParameterError("no prompt cache is set: read the prompt first (or call log_probs).")
        cache, length = self._prompt_cache_alone()
        ids = self.response_ids
        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor([ids]), position_ids=torch.arange(length, length + len(ids))[None],
                                use_cache=True, **{cache_argument(self.model): cache}).logits
        self.forward_passes += 1
        predicting = torch.cat([last_logits[:, None, :].to(logits.dtype), logits[:, :-1]], dim=1)
        value = float(target_log_probs(predicting, torch.tensor(ids), wide=True)[0])
        self._log_probs[np.ones(len(self.sources), dtype=bool).tobytes()] = value
        return value

    def _prompt_cache_alone(self):
        """``prompt_cache`` cut back to the prompt (the answer's tokens read onto it while
        generating, or by an earlier read, removed)."""
        cache, length = self.prompt_cache
        extra = cache.get_seq_length() - length
        if extra > 0:
            cache.crop(-extra)  # a negative count removes that many, in old and new transformers
        return cache, length

    def _attention_after(self, ids: list[int], first: int):
        """Each layer's attention weights (1, heads, len(ids) - first, len(ids)) of the tokens
        from ``first`` on, the ones before read into a cache first (or the prompt's cache a
        caller set, cut back to the prompt)."""
        from salience.models.kv import cache_argument, eager_attention, returned_cache

        with torch.no_grad():
            cache = None
            if self.prompt_cache is not None and self.prompt_cache[1] == first:
                cache = self._prompt_cache_alone()[0]
            elif first > 0:
                out = self.model(input_ids=torch.tensor([ids[:first]]), use_cache=True, logits_to_keep=1)
                cache = returned_cache(out)
            with eager_attention(self.model):
                extra = {} if cache is None else {cache_argument(self.model): cache}
                attentions = self.model(input_ids=torch.tensor([ids[first:]]), output_attentions=True,
                                        position_ids=torch.arange(first, len(ids))[None], use_cache=cache is not None,
                                        logits_to_keep=1, **extra).attentions
        if not attentions or any(a is None for a in attentions):
            raise InvalidParameterError("this model returns no attention weights: use the context methods that need "
                                        "none (contextcite, loo, kernel_shap).")
        return attentions

    def check_window(self, prompt_length: int, response_length: int, what: str = "the response") -> None:
        if self.window is not None and prompt_length + response_length > self.window:
            raise InvalidParameterError(
                f"the prompt ({prompt_length} tokens with every source) and {what} ({response_length} "
                f"tokens) exceed the model's window of {self.window} tokens: give fewer or shorter sources.")

    def _generate(self, prompt: list[int], max_new_tokens: int) -> list[int]:
        torch = require_torch("Generating an answer")
        self.check_window(len(prompt), max_new_tokens, "max_new_tokens")
        with torch.no_grad():
            out = self.model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                      max_new_tokens=max_new_tokens, do_sample=False)
        ids = out[0, len(prompt):].tolist()
        self.forward_passes += len(ids)  # the prompt's pass and one per token after the first
        stops = end_tokens(self.model, self.tokenizer)
        while ids and ids[-1] in stops:
            ids.pop()
        if not ids:
            raise InvalidParameterError("the model answered nothing (its first token ends the sequence): give the "
                                        "response to measure.")
        return ids

    def log_probs(self, masks: np.ndarray, *, reuse_prefix: bool = False) -> np.ndarray:
        """log P(response | prompt of the kept sources), one row of ``masks`` (a boolean per
        source) at a time: one forward pass each. ``reuse_prefix``: the prompt with every source
        is kept in a key/value cache, and a context with sources removed reads only what follows
        the first removed one (the tokens before it are the same): AttriBoT's reuse of the
        unchanged prefix, the same log-probabilities to float rounding (a model whose cache
        cannot be cut, a sliding window's, reads every context whole)."""
        torch = require_torch("Scoring an answer")
        masks = np.atleast_2d(np.asarray(masks, dtype=bool))
        if masks.shape[1] != len(self.sources):
            raise InvalidParameterError(f"masks hold {masks.shape[1]} columns for {len(self.sources)} sources.")
        target = torch.tensor(self.response_ids)
        out = np.empty(len(masks))
        with torch.no_grad():
            if reuse_prefix and self.prompt_cache is None:
                self._read_whole_into_cache(target)
            for row, kept in enumerate(masks):
                if kept.tobytes() in self._log_probs:  # a context read before (every source: cite, then verify)
                    out[row] = self._log_probs[kept.tobytes()]
                    continue
                prompt = self.prompt_ids(kept)
                inputs = {"input_ids": torch.tensor([prompt + self.response_ids])}
                if reuse_prefix:
                    inputs = self._after_shared_prefix(prompt) or inputs
                logits = continuation_logits(self.model, n_keep=len(self.response_ids) + 1, **inputs)[:, :-1]
                out[row] = float(target_log_probs(logits, target, wide=True)[0])
                self._log_probs[kept.tobytes()] = out[row]
                self.forward_passes += 1
        return out

    def shared_prefix(self, prompt: list[int]) -> int:
        """How many of ``prompt``'s first tokens equal the prompt of every source's, less the last
        (``prompt``'s last token is always read: it predicts the response's first)."""
        whole, shared = self._whole_prompt, 0
        while shared < min(len(prompt) - 1, len(whole)) and prompt[shared] == whole[shared]:
            shared += 1
        return shared

    def _read_whole_into_cache(self, target) -> None:
        """One pass over the prompt with every source and the response: the response's
        log-probability remembered, the prompt's key/value cache kept (``prompt_cache``)."""
        from salience.models.kv import returned_cache

        prompt = self._whole_prompt
        out = self.model(input_ids=torch.tensor([prompt + self.response_ids]), use_cache=True)
        self.forward_passes += 1
        whole = float(target_log_probs(out.logits[:, len(prompt) - 1 : -1], target, wide=True)[0])
        self._log_probs[np.ones(len(self.sources), dtype=bool).tobytes()] = whole
        self.prompt_cache = (returned_cache(out), len(prompt))

    def _after_shared_prefix(self, prompt: list[int]) -> "dict | None":
        """The forward inputs that read ``prompt`` and the response onto the cached prefix it
        shares with the prompt of every source (at least its last token is read: it predicts the
        response's first); None where the cache cannot be cut."""
        from salience.models.kv import cache_argument, cache_prefix

        cache, length = self._prompt_cache_alone()
        shared = min(self.shared_prefix(prompt), length)
        prefix = cache_prefix(cache, shared)
        if prefix is None:
            return None
        ids = prompt[shared:] + self.response_ids
        return {"input_ids": torch.tensor([ids]), "position_ids": torch.arange(shared, shared + len(ids))[None],
                "use_cache": True, cache_argument(self.model): prefix}

def end_tokens(model, tokenizer) -> set:
    """The ids that end a generated answer: the tokenizer's and the generation config's."""
    ends = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ends = set(ends) if isinstance(ends, (list, tuple, set)) else {ends}
    return {t for t in ends | {getattr(tokenizer, "eos_token_id", None)} if t is not None}
