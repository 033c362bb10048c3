"""SAMRank-style keyphrase salience: the attention a causal language model's tokens pay to
each candidate (Kang and Shin, 2023).

The text is read by the model once (``windows`` windows of ``max_tokens`` tokens, after the
tokenizer's start token where it has one). From the attention map of one layer (``layer``,
averaged over its heads), each token's *global* attention is what every later token pays it
(a column sum); with ``proportional`` each token also passes its own global attention on to
the tokens it attends to, in proportion to its attention (the *proportional* attention), and
the two, each scaled to sum to one, are added. The first position of a window drains much of
every row's attention whatever it holds (the attention sink) and is left out. A word scores
the attention of the tokens it spans; a candidate the sum of its words over every occurrence.
"""

from __future__ import annotations

import numpy as np

from salience.core.base import register_method
from salience.core.params import Interval
from salience.exceptions import InvalidParameterError
from salience.extras import require_torch
from salience.keywords.frequency import BATCH_SIZE, LONG_TEXT_WORDS
from salience.keywords.judged import LanguageModelJudge, phrase_sums, token_words

__all__ = ["SAMRank"]


@register_method("keywords", "samrank", "SAMRank-style: the attention a causal LM's tokens pay to each candidate, "
                                        "global and proportional (Kang and Shin, 2023); needs salience[lm]")
class SAMRank(LanguageModelJudge):
    """The attention a causal LM (``model``: ``"smollm2"``, ``"gemma3"``, a folder or a
    ``.gguf`` file, or a model object with its ``tokenizer``) pays to each of the text's
    ``pool`` best candidates by ``pool_method``; see the module docstring. ``layer``: the
    layer read (negative counts from the last); ``windows``: how many windows of
    ``max_tokens`` tokens (fewer where the model's context is shorter) of a long text are read
    (the rest of it is not)."""

    _parameter_constraints = {"layer": [Interval("int", None, None)], "proportional": [bool],
                              "windows": [Interval("int", 1)]}

    def __init__(self, *, k: int = 10, candidates_from: str = "auto", tagger=None, rerank: str | None = None,
                 encoder=None, batch_size: int = BATCH_SIZE, language="auto", long_text_words: int = LONG_TEXT_WORDS,
                 stopwords="auto", pool: int = 20, pool_method: str = "yake", max_tokens: int = 512, model="smollm2",
                 tokenizer=None, layer: int = -1, proportional: bool = False, windows: int = 1):
        self.model, self.tokenizer = model, tokenizer
        self.layer, self.proportional, self.windows = layer, proportional, windows
        super().__init__(k=k, candidates_from=candidates_from, tagger=tagger, rerank=rerank, encoder=encoder,
                         batch_size=batch_size, language=language, long_text_words=long_text_words,
                         stopwords=stopwords, pool=pool,
                         pool_method=pool_method, max_tokens=max_tokens)

    def _judge(self, text, words, phrases):
        torch = require_torch("SAMRank")
        from salience.models.kv import eager_attention

        model, _ = self._lm()
        start = self._start()
        width = self._window(len(start))
        ids, spans, head = self._text_tokens(text, width * self.windows)
        word_of = token_words(words, head, spans)
        word_scores = np.zeros(len(words.stem))
        for lo in range(0, len(ids), width):
            window = start + ids[lo : lo + width]
            with torch.no_grad(), eager_attention(model):
                attentions = model(input_ids=torch.tensor([window]), output_attentions=True, logits_to_keep=1).attentions
            if not attentions or attentions[0] is None:
                raise InvalidParameterError("this model returns no attention weights; SAMRank reads them (choose "
                                            "promptrank or mderank).")
            if not -len(attentions) <= self.layer < len(attentions):
                raise InvalidParameterError(f"layer {self.layer} out of range: the model has {len(attentions)} layers.")
            attention = attentions[self.layer][0].double().mean(dim=0).numpy()
            attention[:, 0] = 0.0  # the attention sink
            received = attention.sum(axis=0)
            token_scores = received / max(received.sum(), 1e-300)
            if self.proportional:
                passed = (attention * received[:, None]).sum(axis=0)
                token_scores = token_scores + passed / max(passed.sum(), 1e-300)
            own = word_of[lo : lo + width]
            token_scores = token_scores[len(start) : len(start) + len(own)]
            np.add.at(word_scores, own[own >= 0], token_scores[own >= 0])
        return phrase_sums(words, phrases, word_scores)
