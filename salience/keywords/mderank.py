"""MDERank-style keyphrase salience: how far a text's embedding moves when a candidate is
masked out of it (Zhang et al., 2022).

The text and, for each of its ``pool`` best candidates, a copy with every occurrence of the
candidate replaced by ``mask_token`` (one per word) go to the encoder together; a candidate
scores ``1 - cos(text, masked text)``: the more of the text's meaning it carries, the further
the embedding moves. A text is read as far as the encoder reads (all-MiniLM-L6-v2: its first
256 word pieces): an occurrence past that changes nothing.
"""

from __future__ import annotations

from salience.core.base import register_method
from salience.core.params import Exempt
from salience.keywords.frequency import BATCH_SIZE, LONG_TEXT_WORDS
from salience.keywords.judged import CHARS_PER_TOKEN, JudgedKeyphrases, phrase_starts

__all__ = ["MDERank"]


@register_method("keywords", "mderank", "MDERank-style: the drop in the text's embedding similarity when the candidate "
                                        "is masked (Zhang et al., 2022); needs salience[embed]")
class MDERank(JudgedKeyphrases):
    """The embedding drop of each of the text's ``pool`` best candidates by ``pool_method``
    when masked (``encoder``: None for the bundled all-MiniLM-L6-v2, a sentence-transformers
    name or folder, or any callable from texts to vectors); see the module docstring. The text
    is cut to ``max_tokens`` x :data:`~salience.keywords.judged.CHARS_PER_TOKEN` characters
    before it is masked."""

    uses_encoder = True
    _parameter_constraints = {"mask_token": [Exempt("any text: the encoder's mask token")]}

    def __init__(self, *, k: int = 10, candidates_from: str = "auto", tagger=None, rerank: str | None = None,
                 encoder=None, batch_size: int = BATCH_SIZE, language="auto", long_text_words: int = LONG_TEXT_WORDS,
                 stopwords="auto", pool: int = 20, pool_method: str = "yake", max_tokens: int = 256,
                 mask_token: str = "[MASK]"):
        self.mask_token = mask_token
        super().__init__(k=k, candidates_from=candidates_from, tagger=tagger, rerank=rerank, encoder=encoder,
                         batch_size=batch_size, language=language, long_text_words=long_text_words,
                         stopwords=stopwords, pool=pool,
                         pool_method=pool_method, max_tokens=max_tokens)

    def _judge(self, text, words, phrases):
        from salience.models.encoders import encode_normalized, get_encoder

        data = text.encode("utf-8")
        limit = len(text[: self.max_tokens * CHARS_PER_TOKEN].encode("utf-8"))
        head = data[:limit]
        begin, end = words.byte_start, words.byte_start + words.byte_length
        starts, lengths = phrase_starts(words, phrases)
        masked = []
        for occurrences, n in zip(starts, lengths):
            pieces, at = [], 0
            for s in occurrences.tolist():
                lo, hi = int(begin[s]), int(end[s + n - 1])
                if hi > limit:
                    break
                pieces += [head[at:lo], " ".join([self.mask_token] * n).encode("utf-8")]
                at = hi
            masked.append((b"".join(pieces) + head[at:]).decode("utf-8", errors="ignore"))
        vectors = encode_normalized(get_encoder(self.encoder), [head.decode("utf-8", errors="ignore")] + masked)
        return 1.0 - vectors[1:] @ vectors[0]
