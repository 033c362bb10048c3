"""The ``keyphrases`` verifier: do a document's top keyphrases carry it? A label-free check.

A document's keyphrases are taken out of it, best-scored first: every occurrence of a removed
phrase (its words in sequence, case-insensitive) is deleted from the text. Two outcomes, as the
removal protocol measures them against random orders of removal
(:func:`salience.core.verify.verify`):

* ``search`` (default): the document searched by its own title (or first sentence) in its
  collection: the BM25 score (Lucene's, ``k1``, ``b``) of what is left of it for the title,
  less the best score of any other document of the collection (positive while it still ranks
  first; the collection's statistics stay those of the whole texts). Keyphrases that name the
  document's subject take it down fastest.
* ``embedding``: the cosine of the embedding of what is left with the whole document's
  (``encoder``, the bundled all-MiniLM-L6-v2 by default).

:meth:`KeyphraseVerifier.verify_collection` verifies every document of a collection against the
others, the collection's statistics computed once. On a collection with gold keyphrases, the
outcome's rank correlation with F1@10 says how far it can stand in for them.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np
from scipy import sparse

from salience.core.base import register_method
from salience.core.bm25_formulas import idf, tf_component
from salience.core.params import Interval, Options
from salience.core.scores import Scores
from salience.core.verify import Verification, Verifier, check_unit_scores, subject_seed
from salience.exceptions import InvalidParameterError
from salience.text.tokenize import Tokenizer

__all__ = ["KeyphraseVerifier", "OUTCOMES"]

OUTCOMES = ("search", "embedding")
_WORD = re.compile(r"\w+")


def _words(text: str) -> list[re.Match]:
    return list(_WORD.finditer(text.lower()))


@register_method("verify", "keyphrases", "keyphrases: a document searched by its title (or embedded) as its "
                                         "top-scored keyphrases are deleted from it, against random orders")
class KeyphraseVerifier(Verifier):
    """``outcome``: ``search`` or ``embedding`` (see the module); ``language``: of the texts, for
    the search's stop words and stemmer; ``k1``, ``b``: BM25's; ``encoder``: the embedding's (a
    model name or folder, a callable of texts, or None: the bundled default); ``max_fraction``:
    the largest share of the keyphrases removed."""

    unit = "keyphrases"
    _parameter_constraints = {"outcome": [Options(OUTCOMES)], "language": [str], "k1": [Interval("real", 0)],
                              "b": [Interval("real", 0, 1)], "encoder": [None, str, callable],
                              "max_fraction": [Interval("real", 0, 1, closed="right")]}

    def __init__(self, *, outcome: str = "search", language: str = "en", k1: float = 1.2, b: float = 0.75,
                 encoder=None, max_fraction: float = 1.0, steps: int = 10, n_random: int = 20, seed: int | None = 0,
                 alpha: float = 0.01):
        self.outcome, self.language, self.k1, self.b, self.encoder = outcome, language, k1, b, encoder
        self.max_fraction = max_fraction
        super().__init__(steps=steps, n_random=n_random, seed=seed, alpha=alpha)

    def verify(self, scores, *, document: str, title: str | None = None,
               collection: Sequence[str] | None = None) -> Verification:
        """Verify ``scores`` over keyphrases (ids the phrases) of ``document``. ``title``: the
        query it is searched by (None: its first sentence); ``collection``: the other documents
        it competes with (the ``search`` outcome needs them)."""
        others = [] if collection is None else list(collection)
        return self.verify_collection([scores], [document, *others], titles=[title], subjects=[0])[0]

    def verify_collection(self, scores: Sequence, documents: Sequence[str], *, titles: Sequence | None = None,
                          subjects: Sequence[int] | None = None) -> list[Verification]:
        """Verify the keyphrase scores of each document in ``subjects`` (positions in
        ``documents``; default every document, ``scores`` one per subject), each searched by its
        title among all the other documents, each with random orders of its own
        (:func:`~salience.core.verify.subject_seed`)."""
        documents = list(documents)
        for i, text in enumerate(documents):
            if not isinstance(text, str) or not text.strip():
                raise InvalidParameterError(f"document {i} is empty or not a text.")
        subjects = list(range(len(documents))) if subjects is None else [int(s) for s in subjects]
        scores = list(scores)
        if len(scores) != len(subjects):
            raise InvalidParameterError(f"{len(scores)} keyphrase scores for {len(subjects)} documents.")
        titles = [None] * len(subjects) if titles is None else list(titles)
        if len(titles) != len(subjects):
            raise InvalidParameterError(f"{len(titles)} titles for {len(subjects)} documents.")
        collection = _Collection(documents, self.language, self.k1, self.b) if self.outcome == "search" else None
        if collection is not None and len(documents) < 2:
            raise InvalidParameterError("the search outcome needs a collection: give the other documents "
                                        "(collection=...), or use outcome='embedding'.")
        encode = None
        if self.outcome == "embedding":
            from salience.models.encoders import encode_normalized, get_encoder

            encoder = get_encoder(self.encoder)
            encode = lambda texts: encode_normalized(encoder, texts)  # noqa: E731
        return [self._verify_one(s, documents[d], d, title, collection, encode, subject_seed(self.seed, i))
                for i, (s, d, title) in enumerate(zip(scores, subjects, titles))]

    def _verify_one(self, scores, text: str, position: int, title, collection, encode, seed) -> Verification:
        if isinstance(scores, Scores):
            phrases = [str(p) for p in scores.ids]
        elif isinstance(scores, dict):
            phrases = [str(p) for p in scores]
        else:
            raise InvalidParameterError("keyphrase scores must be Scores or a dict of phrase -> score (ids the "
                                        "phrases).")
        check_unit_scores(scores, phrases)
        words = _words(text)
        lowered = [m.group() for m in words]
        covered = np.zeros((len(phrases), len(words)), dtype=bool)  # the words each phrase's occurrences cover
        for p, phrase in enumerate(phrases):
            pattern = [m.group() for m in _words(phrase)]
            if not pattern:
                raise InvalidParameterError(f"keyphrase {phrase!r} holds no word.")
            width = len(pattern)
            for start in range(len(lowered) - width + 1):
                if lowered[start : start + width] == pattern:
                    covered[p, start : start + width] = True
        if not covered.any():
            raise InvalidParameterError(f"no keyphrase occurs in document {position}: there is nothing to remove.")

        def removed_words(kept: np.ndarray) -> np.ndarray:
            """Per set of kept phrases (rows), the words the removed phrases' occurrences cover."""
            return ((~np.atleast_2d(kept).astype(bool)).astype(np.int32) @ covered.astype(np.int32)) > 0

        if collection is not None:
            query = title if title is not None else _first_sentence(text)
            judge = collection.judge(position, query)

            def outcome(kept: np.ndarray) -> np.ndarray:
                return np.array([judge(row) for row in removed_words(kept)])
        else:
            whole = encode([text])[0]

            def outcome(kept: np.ndarray) -> np.ndarray:
                rests = [_without(text, words, row) for row in removed_words(kept)]
                rests = [r if r.strip() else " " for r in rests]
                return encode(rests) @ whole

        return self._run(scores, outcome, units=phrases, keep_at_least=0, max_fraction=self.max_fraction, seed=seed)


def _first_sentence(text: str) -> str:
    from salience.text.sentences import split_sentences

    sentences = split_sentences(text)
    return sentences[0].text if sentences else text


def _without(text: str, words: list, gone: np.ndarray) -> str:
    """``text`` with the words marked ``gone`` deleted, and the gaps inside a run of them (the
    rest of it as it was)."""
    pieces, at, previous = [], 0, False
    for match, drop in zip(words, gone):
        if drop:
            if not previous:
                pieces.append(text[at : match.start()])
            at = match.end()
        previous = drop
    pieces.append(text[at:])
    return "".join(pieces)


class _Collection:
    """BM25 statistics of a collection's texts, each text's words mapped to index terms."""

    def __init__(self, documents: Sequence[str], language: str, k1: float, b: float):
        from salience.text.languages import LANGUAGES, stopwords_for

        known = LANGUAGES.get(language)
        self.tokenizer = Tokenizer(stopwords=sorted(stopwords_for(language)) or None,
                                   stemmer=known.snowball if known else None)
        self.k1, self.b = k1, b
        self.vocabulary: dict[str, int] = {}
        self._term_of: dict[str, int] = {}
        self.doc_terms = [self.terms([m.group() for m in _words(text)]) for text in documents]
        rows = np.repeat(np.arange(len(documents)), [int((t >= 0).sum()) for t in self.doc_terms])
        columns = np.concatenate([t[t >= 0] for t in self.doc_terms]) if documents else np.zeros(0, dtype=np.int64)
        self.counts = sparse.csc_matrix((np.ones(len(rows)), (rows, columns)),
                                        shape=(len(documents), len(self.vocabulary)))
        self.counts.sum_duplicates()
        self.lengths = np.asarray(self.counts.sum(axis=1), dtype=np.float64).ravel()
        self.avg_length = float(self.lengths.mean()) or 1.0
        self.idf = idf(np.diff(self.counts.indptr), len(documents), "lucene")

    def terms(self, words: Sequence[str]) -> np.ndarray:
        """The index term of each word (-1: a stop word, or no term)."""
        out = np.empty(len(words), dtype=np.int64)
        for i, word in enumerate(words):
            if word not in self._term_of:
                analysed = self.tokenizer.tokenize(word)
                self._term_of[word] = self.vocabulary.setdefault(analysed[0], len(self.vocabulary)) if analysed else -1
            out[i] = self._term_of[word]
        return out

    def judge(self, position: int, title: str):
        """outcome(gone): the BM25 score for ``title`` of the document at ``position``
        with its ``gone`` words deleted, less the best other document's."""
        query_terms = [self.vocabulary[t] for t in self.tokenizer.tokenize(title) if t in self.vocabulary]
        if not query_terms:
            raise InvalidParameterError(f"the title of document {position} ({title[:60]!r}) shares no term with the "
                                        "collection: it cannot be searched.")
        query = np.array(query_terms)
        tf = self.counts[:, query].toarray()
        every = tf_component(tf, self.lengths[:, None], self.avg_length, "lucene", self.k1, self.b, 0.0) @ self.idf[query]
        every[position] = -np.inf
        best_other = float(every.max()) if len(every) > 1 else 0.0
        own = self.doc_terms[position]

        def outcome(gone: np.ndarray) -> float:
            kept = own[~gone]
            tf = (kept[:, None] == query[None, :]).sum(axis=0).astype(np.float64)
            own_score = tf_component(tf, float((kept >= 0).sum()), self.avg_length, "lucene", self.k1, self.b, 0.0)
            return float(own_score @ self.idf[query]) - best_other

        return outcome
