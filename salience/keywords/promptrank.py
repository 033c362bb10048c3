"""PromptRank-style keyphrase salience: how likely a causal language model finds "this text
mainly talks about <candidate>" after reading the text (Kong et al., 2023, with a decoder-only
model in place of their encoder-decoder).

The prompt is ``PROMPT_HEAD``, the text's first ``max_tokens`` tokens and ``PROMPT_TAIL``; it
is read once and its key/value cache is shared by every candidate of the text, which are then
read together as one batch. A candidate scores the log-probability of its tokens after the
prompt divided by (its token count) ** ``length_alpha`` (0: the sum, 1: the mean; long
candidates would otherwise always lose), and with ``position_beta`` multiplied by
``first / words + position_beta`` (``first``: the word where it first occurs; the score is a
negative log-probability, so a smaller factor ranks an earlier candidate higher), PromptRank's
position penalty.
"""

from __future__ import annotations

import copy

import numpy as np

from salience.core.base import register_method
from salience.core.params import Interval
from salience.extras import require_torch
from salience.keywords.frequency import BATCH_SIZE, LONG_TEXT_WORDS
from salience.keywords.judged import LanguageModelJudge, phrase_starts

__all__ = ["PromptRank", "PROMPT_HEAD", "PROMPT_TAIL"]

PROMPT_HEAD = "Text: "
PROMPT_TAIL = "\nThis text mainly talks about"


@register_method("keywords", "promptrank", "PromptRank-style: the LM's likelihood of 'this text mainly talks about "
                                           "<candidate>' after the text, length-normalised and position-penalised "
                                           "(Kong et al., 2023); needs salience[lm]")
class PromptRank(LanguageModelJudge):
    """The likelihood a causal LM (``model``, as :class:`~salience.keywords.samrank.SAMRank`)
    gives each of the text's ``pool`` best candidates by ``pool_method`` as what the text is
    about; see the module docstring. A text longer than ``max_tokens`` tokens (or than the
    model's context less the prompt) is read as its first ``max_tokens`` (the position penalty
    still sees where each candidate first occurs)."""

    _parameter_constraints = {"length_alpha": [Interval("real", 0, None)],
                              "position_beta": [None, Interval("real", 0, None, closed="neither")]}

    def __init__(self, *, k: int = 10, candidates_from: str = "auto", tagger=None, rerank: str | None = None,
                 encoder=None, batch_size: int = BATCH_SIZE, language="auto", long_text_words: int = LONG_TEXT_WORDS,
                 stopwords="auto", pool: int = 20, pool_method: str = "yake", max_tokens: int = 512, model="smollm2",
                 tokenizer=None, length_alpha: float = 1.0, position_beta: float | None = 1.0):
        self.model, self.tokenizer = model, tokenizer
        self.length_alpha, self.position_beta = length_alpha, position_beta
        super().__init__(k=k, candidates_from=candidates_from, tagger=tagger, rerank=rerank, encoder=encoder,
                         batch_size=batch_size, language=language, long_text_words=long_text_words,
                         stopwords=stopwords, pool=pool,
                         pool_method=pool_method, max_tokens=max_tokens)

    def _judge(self, text, words, phrases):
        torch = require_torch("PromptRank")
        from salience.models.kv import cache_argument, padded_rows, returned_cache

        model, tokenizer = self._lm()
        encode = lambda s: list(tokenizer.encode(s, add_special_tokens=False))  # noqa: E731
        start = self._start()
        head, tail = start + encode(PROMPT_HEAD), encode(PROMPT_TAIL)
        rows = [encode(" " + phrase) or [tokenizer.eos_token_id or 0] for phrase in phrases]
        ids, _, _ = self._text_tokens(text, self._window(len(head) + len(tail) + max(map(len, rows))))
        prompt = head + ids + tail
        with torch.no_grad():
            read = model(input_ids=torch.tensor([prompt]), use_cache=True, logits_to_keep=1)
            cache = copy.deepcopy(returned_cache(read))
            cache.batch_repeat_interleave(len(rows))
            # padded on the right: a pad token is read after its row's tokens, never before them
            batch, mask = padded_rows(rows, getattr(tokenizer, "pad_token_id", None) or 0)
            logits = model(input_ids=batch, use_cache=True, **{cache_argument(model): cache}).logits
        # the first token of a row is predicted by the prompt's last position, the others by the row's
        predicting = torch.cat([read.logits[:, -1:].expand(len(rows), 1, -1), logits[:, :-1]], dim=1)
        log_probs = torch.log_softmax(predicting.double(), dim=-1).gather(2, batch[:, :, None])[:, :, 0]
        totals = (log_probs * mask).sum(dim=1).numpy()
        counts = mask.sum(dim=1).numpy().astype(np.float64)
        values = totals / counts ** self.length_alpha
        if self.position_beta is not None:
            starts, _ = phrase_starts(words, phrases)
            n = max(len(words.stem), 1)
            first = np.array([s[0] / n if len(s) else 1.0 for s in starts])
            values = values * (first + self.position_beta)
        return values
