"""The ``sentences`` verifier: did the sentences a summarizer ranked first carry the text?

The outcome is how much of the document's content the sentences left still hold: the cosine of
their tf-idf vector (summed over the kept sentences; idf over the document's sentences, as
LexRank weighs them) with the whole document's. Removing the sentences that carry the document
should lower it faster than removing random sentences: :func:`salience.core.verify.verify`.
Label-free; where a reference summary exists (``reference=``), the outcome is instead the ROUGE-1
recall of the reference by the kept sentences (stemmed, ``pip install 'salience[text]'``): how
much of the reference they still hold.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from salience.core.base import register_method
from salience.core.verify import Verification, Verifier
from salience.exceptions import InvalidParameterError
from salience.summarize.similarity import new_encoder, term_counts, text_language, tfidf

__all__ = ["SentenceVerifier"]


@register_method("verify", "sentences", "summary sentences: the tf-idf cosine of the sentences left with the whole "
                                        "text as the top-scored sentences go, against random orders")
class SentenceVerifier(Verifier):
    """``language``: of the text (``auto``: detected), for its stop words and stemmer."""

    unit = "sentences"
    _parameter_constraints = {"language": [str]}

    def __init__(self, *, language: str = "auto", steps: int = 10, n_random: int = 20, seed: int | None = 0,
                 alpha: float = 0.01):
        self.language = language
        super().__init__(steps=steps, n_random=n_random, seed=seed, alpha=alpha)

    def verify(self, scores, *, sentences: Sequence[str], reference: str | None = None) -> Verification:
        """Verify ``scores`` (one per sentence, as :func:`~salience.summarize.score_sentences`
        gives them) over ``sentences``, the document's sentences in order; with ``reference``
        (a reference summary), by its ROUGE-1 recall."""
        if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences):
            raise InvalidParameterError("sentences must be a list of texts (the document split into sentences).")
        sentences = list(sentences)
        if len(sentences) < 2:
            raise InvalidParameterError(f"{len(sentences)} sentence(s): at least 2 are needed to remove one.")
        weights = tfidf(term_counts(sentences, new_encoder(text_language(sentences, self.language))))
        whole = np.asarray(weights.sum(axis=0), dtype=np.float64).ravel()
        norm = np.linalg.norm(whole)
        if norm == 0:
            raise InvalidParameterError("the sentences hold no content word: there is nothing to lose.")
        whole /= norm

        def content_left(kept: np.ndarray) -> np.ndarray:
            kept = np.atleast_2d(kept).astype(np.float64)
            rest = np.asarray(kept @ weights, dtype=np.float64)  # each set's summed tf-idf vector
            lengths = np.linalg.norm(rest, axis=1)
            return np.where(lengths > 0, rest @ whole / np.where(lengths > 0, lengths, 1.0), 0.0)

        outcome = content_left
        if reference is not None:
            if not isinstance(reference, str) or not reference.strip():
                raise InvalidParameterError("reference must be a non-empty text (a reference summary).")
            from salience.extras import require

            rouge = require("rouge_score.rouge_scorer", "text", "ROUGE against a reference").RougeScorer(
                ["rouge1"], use_stemmer=True)

            def reference_left(kept: np.ndarray) -> np.ndarray:
                return np.array([rouge.score(reference, " ".join(s for s, k in zip(sentences, row) if k))["rouge1"].recall
                                 for row in np.atleast_2d(kept)])

            outcome = reference_left
        # a sentence's id is its position, as score_sentences gives it
        return self._run(scores, outcome, units=[str(i) for i in range(len(sentences))])
