"""Keyphrase scorers over the candidates of :mod:`salience.keywords.candidates`.

Every scorer returns :class:`~salience.Scores` over candidate surface forms (higher is better,
ties by first occurrence). Methods:

* ``tfidf``: candidate frequency x inverse document frequency from a fitted
  :class:`DocumentFrequency` (frequency alone without one);
* ``kpminer``: tf-idf of the candidates that occur early and often, multi-word ones boosted
  (El-Beltagy and Rafea, 2009; :mod:`salience.keywords.kpminer`);
* ``yake``: YAKE's statistical word features (casing, position, frequency, relatedness to
  context, spread over sentences) combined per candidate (Campos et al., 2020); in long texts
  with a first-occurrence prior (Witten et al., 1999 (KEA); Florescu and Caragea, 2017);
* ``rake``: sum of word degree / frequency over stop-word-delimited phrases (Rose et al., 2010);
* ``textrank`` / ``singlerank`` / ``positionrank``: PageRank over a word co-occurrence graph
  (window 2 / 10 / 10, the last personalised by word positions), candidate = sum of its words
  (Mihalcea and Tarau, 2004; Wan and Xiao, 2008; Florescu and Caragea, 2017);
* ``topicrank`` / ``multipartite``: candidates clustered into topics by shared stems; PageRank
  over topics (the first candidate of each ranked topic) or over a multipartite candidate
  graph with a boost for each topic's first candidate (Bougouin et al., 2013; Boudin, 2018);
* ``embed``: cosine similarity of candidate and document embeddings, top-k by maximal marginal
  relevance (KeyBERT-like), with any :mod:`salience.models.encoders` encoder (``salience[embed]``;
  :mod:`salience.keywords.embedrank`).

Any method's scores can be revised by SemRe-Rank (``rerank="semrerank"``; Zhang et al., 2018).

Each method is a :class:`KeyphraseExtractor` subclass registered in the ``keywords`` family;
:func:`extract_keyphrases`, :func:`extract_keyphrases_batch` and :func:`score_candidates` build
it from the registry (``create("keywords", "yake", k=5)``). The statistics live beside:
:mod:`salience.keywords.yake`, :mod:`salience.keywords.rake`, :mod:`salience.keywords.graphs`,
:mod:`salience.keywords.frequency`.
"""

from __future__ import annotations

import abc
from typing import Iterable, Sequence

import numpy as np

from salience.core.base import Scorer, create, register_method
from salience.core.params import Check, Exempt, Interval, Options
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError
from salience.keywords.candidates import Candidate, Document, Occurrences, documents, text_candidates
from salience.keywords.frequency import (BATCH_SIZE, LONG_TEXT_WORDS, CorpusFrequency, DocumentFrequency,
                                         batch_candidates, check_languages, chunk_languages,
                                         one_batch, ranked_per_text, text_batches)
from salience.keywords.graphs import topic_scores, word_graph_scores
from salience.keywords.words import Batch, bounded_texts
from salience.keywords.yake import yake_batch
from salience.parallel import progress_bar
from salience.text.languages import check_language, get_stopwords

__all__ = ["KeyphraseExtractor", "CorpusFrequency", "DocumentFrequency", "score_candidates", "extract_keyphrases",
           "extract_keyphrases_batch", "extract_keyphrases_many", "learns_document_frequency", "RERANKERS", "Yake", "TfIdf", "TextRank",
           "SingleRank", "PositionRank", "TopicRank", "MultipartiteRank"]

RERANKERS = ("semrerank",)
CANDIDATE_SOURCES = ("auto", "runs", "ngrams", "noun_phrases")


def _is_stop_spec(value) -> bool:
    """"auto", a stop-list name or language, or a collection of words."""
    return isinstance(value, str) or (isinstance(value, (list, tuple, set, frozenset))
                                      and all(isinstance(v, str) for v in value))


def _is_language(value) -> bool:
    """"auto", an ISO 639-1 code, or one code per text (a list)."""
    return isinstance(value, str) or (isinstance(value, Sequence) and all(isinstance(v, str) for v in value))


class KeyphraseExtractor(Scorer, abc.ABC):
    """Base of the keyphrase methods (the ``keywords`` family): ``score(text)`` gives the ``k``
    best keyphrases of a text as :class:`~salience.Scores` (phrases and their salience),
    ``score_batch(texts)`` those of many, ``score_candidates(text)`` every candidate's score.

    Shared parameters: ``candidates_from`` (see :func:`score_candidates`), ``tagger`` (with
    ``candidates_from="noun_phrases"``), ``rerank="semrerank"`` (SemRe-Rank revises the
    method's scores with ``encoder``), ``batch_size`` (texts tokenised together), ``language``
    (``"auto"``, a code, or one code per text), ``long_text_words`` (texts longer than this
    take n-gram candidates) and ``stopwords`` (the words no candidate contains: ``"auto"``, each
    text's language's list, which in English adds the SMART list's vague words to the function
    words; a list name or language such as ``"en_full"``; your own words; None). ``fit(texts)``
    learns what a method learns from a corpus (``tfidf`` its document frequencies, ``yake`` its
    corpus frequencies); the others need none.

    A method subclass scores one analysed text's candidates in :meth:`candidate_values` (the
    per-document methods), or gives :meth:`score_candidates` (and :meth:`_top_chunk` for its
    own batch path) itself.

    >>> from salience.core.base import create
    >>> create("keywords", "rake", k=1).score("Graph kernels compare graphs quickly.").ids
    ['graph kernels compare graphs quickly']
    """

    _parameter_constraints = {"encoder": [None, Exempt("a sentence-transformers name, folder or encoder, loaded when used")],
                              "tagger": [None, Exempt("a spaCy pipeline name or object, loaded when used")],
                              "k": [Interval("int", 1)], "candidates_from": [Options(CANDIDATE_SOURCES)],
                              "rerank": [None, Options(RERANKERS)], "batch_size": [Interval("int", 1)],
                              "language": [Check(_is_language, "'auto', an ISO 639-1 code or one code per text")],
                              "long_text_words": [Interval("int", 1)],
                              "stopwords": [None, Check(_is_stop_spec, "'auto', a stop-list name or language, or a "
                                                                       "list of words")]}
    #: whether the method itself reads ``encoder`` (any method does with rerank="semrerank")
    uses_encoder = False

    def __init__(self, *, k: int = 10, candidates_from: str = "auto", tagger=None, rerank: str | None = None,
                 encoder=None, batch_size: int = BATCH_SIZE, language="auto", long_text_words: int = LONG_TEXT_WORDS,
                 stopwords="auto"):
        self.k, self.candidates_from, self.tagger, self.rerank = k, candidates_from, tagger, rerank
        self.encoder, self.batch_size, self.language, self.long_text_words = encoder, batch_size, language, long_text_words
        self.stopwords = stopwords
        self._validate_params()

    def _validate_params(self) -> None:
        super()._validate_params()
        if isinstance(self.language, str):
            check_language(self.language)
        if isinstance(self.stopwords, str) and self.stopwords != "auto":
            get_stopwords(self.stopwords)  # an unknown list name is refused now, naming the lists
        if self.tagger is not None and self.candidates_from != "noun_phrases":
            raise InvalidParameterError(f"tagger is used only with candidates_from='noun_phrases'; got "
                                        f"{self.candidates_from!r}.")
        if self.encoder is not None and not self.uses_encoder and self.rerank != "semrerank":
            raise InvalidParameterError(f"option 'encoder' does not apply to method {self.name!r}; it is used by embed "
                                        "and rerank='semrerank'. Remove it, or choose a method that uses it.")

    @property
    def name(self) -> str:
        from salience.core.base import registered_name

        return registered_name(self, "keywords")

    # ---- learning and scoring
    def fit(self, texts: Iterable[str]) -> "KeyphraseExtractor":
        return self

    def score(self, text: str) -> Scores:
        """The ``k`` best keyphrases of one text."""
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a str; got {type(text).__name__}. For many texts use score_batch.")
        return self.score_batch([text])[0]

    def score_batch(self, texts: Iterable[str], *, show_progress: bool = False) -> list[Scores]:
        """The ``k`` best keyphrases of each text, ``batch_size`` texts (and at most
        :data:`~salience.keywords.frequency.BATCH_CHARS` characters) at a time (which changes
        nothing but rounding: exact ties may swap). ``show_progress``: a bar over the texts'
        characters. A text is read up to
        :data:`~salience.keywords.words.MAX_TEXT_CHARS` characters (a warning names a cut)."""
        if isinstance(texts, str):
            raise InvalidParameterError("texts must be a sequence of str, not one str; use extract_keyphrases for one "
                                        "text.")
        texts = texts if isinstance(texts, Sequence) else list(texts)
        language = check_languages(self.language, len(texts))
        for d, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidParameterError(f"text must be a str; got {type(text).__name__} (document {d}).")
        texts = bounded_texts(texts)  # cut here, so that a warning names a text by its place in the call
        context = self._prepare(texts, language)
        out: list[Scores] = []
        with progress_bar(sum(map(len, texts)), "keyphrases", show_progress, unit="char") as bar:
            for chunk in text_batches(texts, self.batch_size):
                out.extend(self._extract_chunk(chunk, chunk_languages(language, len(out), len(chunk)), context))
                bar.update(sum(map(len, chunk)))
        return out

    def _prepare(self, texts: Sequence[str], language) -> dict:
        """What a call over ``texts`` needs before its batches (YAKE's corpus frequencies)."""
        return {}

    def _extract_chunk(self, chunk: Sequence[str], language, context: dict) -> list[Scores]:
        if self.rerank is None:
            direct = self._top_chunk(chunk, language, context)
            if direct is not None:
                return direct
        scored = self._all_chunk(chunk, language, context)
        if self.rerank == "semrerank":
            from salience.keywords.semantic import semrerank_batch

            scored = semrerank_batch(scored, encoder=self.encoder)
        return [scores.top_k(self.k) if len(scores) else scores for scores in scored]

    def _top_chunk(self, chunk, language, context) -> list[Scores] | None:
        """The top ``k`` of each text by the method's own batch path, or None (then every
        candidate is scored and cut)."""
        return None

    def _all_chunk(self, chunk, language, context) -> list[Scores]:
        each = language if not isinstance(language, str) else [language] * len(chunk)
        return [self.score_candidates(text, language=code) for text, code in zip(chunk, each)]

    @abc.abstractmethod
    def score_candidates(self, text: str, *, language=None) -> Scores:
        """Every candidate of ``text`` and its score (higher is better), in order of first
        occurrence."""


class _PerDocument(KeyphraseExtractor):
    """The methods that score one analysed text at a time: the text's candidates found (runs
    of content words, or n-grams in long texts; a batch of texts tokenised together), then
    :meth:`candidate_values` scores them."""

    def score_candidates(self, text: str, *, language=None) -> Scores:
        language = check_language(self.language if language is None else language)
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a str; got {type(text).__name__}.")
        return self._all_chunk([text], language, {})[0]

    def _all_chunk(self, chunk, language, context) -> list[Scores]:
        batch, occ, _ = batch_candidates(chunk, self.candidates_from, self.tagger, language, self.long_text_words,
                                         self.stopwords, recurring=0)
        out = []
        for doc, found in zip(documents(batch), text_candidates(batch, occ)):
            cands = list(found.values())
            out.append(Scores(self.candidate_values(doc, cands), ids=[c.surface for c in cands]) if cands
                       else Scores([], ids=[]))
        return out

    @abc.abstractmethod
    def candidate_values(self, doc: Document, cands: list[Candidate]) -> list[float]:
        """One score per candidate of the analysed text ``doc``."""


class BatchedExtractor(KeyphraseExtractor):
    """The methods scored with array operations over a batch of texts: :meth:`_batch` gives the
    ``k`` best of each text (every candidate, in order of first occurrence, when ``k`` is None)."""

    @abc.abstractmethod
    def _batch(self, chunk: Sequence[str], k: int | None, language, context: dict) -> list[Scores]:
        """The scores of each text of ``chunk``."""

    def _one_text_context(self) -> dict:
        """The context :meth:`score_candidates` scores one text with."""
        return {}

    def _top_chunk(self, chunk, language, context):
        return self._batch(chunk, self.k, language, context)

    def _all_chunk(self, chunk, language, context):
        return self._batch(chunk, None, language, context)

    def score_candidates(self, text: str, *, language=None) -> Scores:
        if not isinstance(text, str):
            raise InvalidParameterError(f"text must be a str; got {type(text).__name__}.")
        language = check_language(self.language if language is None else language)
        return self._batch([text], None, language, self._one_text_context())[0]


@register_method("keywords", "yake", "YAKE statistics: casing, position, frequency, context spread and sentence "
                                     "spread of words (Campos et al., 2020)")
class Yake(BatchedExtractor):
    """YAKE, scored with array operations over ``batch_size`` texts at once. ``position_prior``:
    in long texts keyphrases show up early (title, abstract), so S(kw) is scaled by a
    first-occurrence prior there. ``corpus_df``: ``False`` scores each text on its own; ``True``
    takes the texts given together as a corpus, and candidates common to many of them weigh
    less (S(kw) / sqrt(idf)); it helps where the gold keyphrases are the authors' own and costs
    where they are topics shared across a collection, and does not raise the mean F1@10 of the
    keyphrase sets' dev splits, so it is off by default. It has no effect on one text, and past
    one batch (``batch_size`` texts or ``BATCH_CHARS`` characters) the frequencies take a first
    pass over all of them (tokenising twice). A :class:`CorpusFrequency` applies frequencies fitted before, as
    ``fit(texts)`` does. ``batch_size`` is 500 here (2,000 for the other methods): the arrays of
    500 abstracts stay in the caches, about 10% faster on Inspec, with the same keyphrases on
    every dev split."""

    _parameter_constraints = {"position_prior": [bool],
                              "corpus_df": [bool, Check(lambda v: isinstance(v, CorpusFrequency), "a CorpusFrequency")]}

    def __init__(self, *, k: int = 10, candidates_from: str = "auto", tagger=None, rerank: str | None = None,
                 encoder=None, batch_size: int = 500, language="auto", long_text_words: int = LONG_TEXT_WORDS,
                 stopwords="auto", position_prior: bool = True, corpus_df: "bool | CorpusFrequency" = False):
        self.position_prior, self.corpus_df = position_prior, corpus_df
        super().__init__(k=k, candidates_from=candidates_from, tagger=tagger, rerank=rerank, encoder=encoder,
                         batch_size=batch_size, language=language, long_text_words=long_text_words,
                         stopwords=stopwords)

    def fit(self, texts: Iterable[str]) -> "Yake":
        self.corpus_frequency_ = CorpusFrequency().fit(texts, candidates_from=self.candidates_from, tagger=self.tagger,
                                                       language=self.language, batch_size=self.batch_size,
                                                       long_text_words=self.long_text_words, stopwords=self.stopwords)
        return self

    def _prepare(self, texts, language) -> dict:
        corpus = self.corpus_df if isinstance(self.corpus_df, CorpusFrequency) else getattr(self, "corpus_frequency_", None)
        own_corpus = self.corpus_df is True
        if own_corpus and not one_batch(texts, self.batch_size):
            corpus = CorpusFrequency().fit(texts, candidates_from=self.candidates_from, tagger=self.tagger,
                                           language=language, batch_size=self.batch_size,
                                           long_text_words=self.long_text_words, stopwords=self.stopwords)
        return {"corpus": corpus, "own_corpus": own_corpus}

    def _batch(self, chunk, k, language, context) -> list[Scores]:
        return yake_batch(chunk, k, self.candidates_from, self.tagger, language, **context,
                          long_text_words=self.long_text_words, position_prior=self.position_prior,
                          stopwords=self.stopwords)

    def _one_text_context(self) -> dict:
        return {"corpus": None, "own_corpus": False}


@register_method("keywords", "tfidf", "candidate frequency times inverse document frequency (fit on a corpus, or the "
                                      "evaluated texts)")
class TfIdf(BatchedExtractor):
    """Candidate frequency x inverse document frequency from ``document_frequency`` (or the
    one ``fit(texts)`` learns); frequency alone without either. Scored with array operations
    over ``batch_size`` texts at once (the usual candidates: whole runs of content words, or
    n-grams in long texts)."""

    _parameter_constraints = {"document_frequency": [None, Check(lambda v: isinstance(v, DocumentFrequency),
                                                                 "a DocumentFrequency")]}

    def __init__(self, *, k: int = 10, candidates_from: str = "auto", tagger=None, rerank: str | None = None,
                 encoder=None, batch_size: int = BATCH_SIZE, language="auto", long_text_words: int = LONG_TEXT_WORDS,
                 stopwords="auto", document_frequency: DocumentFrequency | None = None):
        self.document_frequency = document_frequency
        super().__init__(k=k, candidates_from=candidates_from, tagger=tagger, rerank=rerank, encoder=encoder,
                         batch_size=batch_size, language=language, long_text_words=long_text_words,
                         stopwords=stopwords)

    def fit(self, texts: Iterable[str]) -> "TfIdf":
        if self.document_frequency is None:
            self.document_frequency_ = DocumentFrequency(stopwords=self.stopwords, language=self.language).fit(texts)
        return self

    def _model(self) -> DocumentFrequency | None:
        return self.document_frequency or getattr(self, "document_frequency_", None)

    def _batch(self, chunk, k, language, context) -> list[Scores]:
        batch, occ, _ = batch_candidates(chunk, self.candidates_from, self.tagger, language, self.long_text_words,
                                         self.stopwords, recurring=0)
        return ranked_per_text(batch, occ, self.candidate_weights(batch, occ), k, len(chunk))

    def candidate_weights(self, batch: Batch, occ: Occurrences) -> np.ndarray:
        """The weight of every candidate of ``batch``: its frequency in its text x idf."""
        frequency = occ.cand_frequency.astype(np.float64)
        model = self._model()
        if model is None:
            return frequency
        # the idf of each distinct document frequency, in Python floats as DocumentFrequency.idf
        return frequency * per_distinct_value(model.candidate_counts(batch, occ), model.idf_of_count)


def per_distinct_value(values: np.ndarray, function) -> np.ndarray:
    """``function`` (a Python float function) of each of ``values``, called once per distinct value."""
    distinct, index = np.unique(values, return_inverse=True)
    return np.array([function(v) for v in distinct.tolist()], dtype=np.float64)[index.ravel()]


def learns_document_frequency(method: str) -> bool:
    """Whether keyword ``method`` weighs candidates by document frequencies (``tfidf`` and its
    kin, such as ``kpminer``): unsupervised, they come from the texts given together unless a
    fitted :class:`DocumentFrequency` is passed."""
    from salience.core.base import method_factory

    factory = method_factory("keywords", method)
    return isinstance(factory, type) and issubclass(factory, TfIdf)


#: how a word-graph method scores a phrase from its words' scores
PHRASE_SCORES = ("mean", "sum")


class _WordGraph(_PerDocument):
    """PageRank over content-word stems linked within ``window`` words; a candidate scores the
    ``phrase_score`` of its words': their mean (the default), or their sum, the original
    methods' (every longer phrase then outranks its own words, and in a long text, whose
    candidates are all n-grams of up to 3 words, the 3-grams outrank everything: F1@10 near 0
    on the long-text sets). The mean was chosen on the dev splits of the shared keyphrase sets,
    pooled."""

    position_bias = False
    _parameter_constraints = {"window": [Interval("int", 2)], "phrase_score": [Options(PHRASE_SCORES)]}

    def candidate_values(self, doc, cands) -> list[float]:
        word = word_graph_scores(doc, self.window, self.position_bias)
        sums = [sum(word.get(s, 0.0) for s in c.key) for c in cands]
        return sums if self.phrase_score == "sum" else [total / len(c.key) for total, c in zip(sums, cands)]


@register_method("keywords", "textrank", "TextRank: PageRank over the word co-occurrence graph (Mihalcea and Tarau, 2004)")
class TextRank(_WordGraph):
    def __init__(self, *, k: int = 10, candidates_from: str = "auto", tagger=None, rerank: str | None = None,
                 encoder=None, batch_size: int = BATCH_SIZE, language="auto", long_text_words: int = LONG_TEXT_WORDS,
                 stopwords="auto", window: int = 2, phrase_score: str = "mean"):
        self.window, self.phrase_score = window, phrase_score
        super().__init__(k=k, candidates_from=candidates_from, tagger=tagger, rerank=rerank, encoder=encoder,
                         batch_size=batch_size, language=language, long_text_words=long_text_words,
                         stopwords=stopwords)


@register_method("keywords", "singlerank", "SingleRank: TextRank with co-occurrence-weighted edges (Wan and Xiao, 2008)")
class SingleRank(_WordGraph):
    def __init__(self, *, k: int = 10, candidates_from: str = "auto", tagger=None, rerank: str | None = None,
                 encoder=None, batch_size: int = BATCH_SIZE, language="auto", long_text_words: int = LONG_TEXT_WORDS,
                 stopwords="auto", window: int = 10, phrase_score: str = "mean"):
        self.window, self.phrase_score = window, phrase_score
        super().__init__(k=k, candidates_from=candidates_from, tagger=tagger, rerank=rerank, encoder=encoder,
                         batch_size=batch_size, language=language, long_text_words=long_text_words,
                         stopwords=stopwords)


@register_method("keywords", "positionrank", "PositionRank: PageRank biased toward early words (Florescu and Caragea, "
                                             "2017)")
class PositionRank(SingleRank):
    position_bias = True


@register_method("keywords", "topicrank", "TopicRank: PageRank over clusters of similar candidates (Bougouin et al., "
                                          "2013)")
class TopicRank(_PerDocument):
    def candidate_values(self, doc, cands) -> list[float]:
        return topic_scores(cands, "topicrank")


@register_method("keywords", "multipartite", "MultipartiteRank: a multipartite candidate graph across topics (Boudin, "
                                             "2018)")
class MultipartiteRank(_PerDocument):
    def candidate_values(self, doc, cands) -> list[float]:
        return topic_scores(cands, "multipartite")


# ------------------------------------------------------------------------------------------
# the functions users call: each builds the method from the registry
def score_candidates(text: str, *, method: str = "yake", candidates_from: str = "auto",
                     document_frequency: DocumentFrequency | None = None, encoder=None, tagger=None,
                     language: str = "auto", **params) -> Scores:
    """Score every candidate of ``text`` by ``method`` (higher is better).

    ``language``: ``"auto"`` (detect it; a text of an undetermined language gets no stemming
    and its own most frequent words as stop words, with a :class:`LanguageWarning`) or an ISO
    639-1 code such as ``"fr"`` (see :data:`salience.text.languages.LANGUAGES`).

    ``candidates_from``: ``"runs"`` (whole stop-word-free runs of up to 8 words; suits
    abstracts and paragraphs), ``"ngrams"`` (every n-gram of up to 3 content words; suits long
    documents, where sub-phrase counts matter), ``"auto"`` (runs for texts of up to
    ``long_text_words`` words, default :data:`~salience.keywords.frequency.LONG_TEXT_WORDS`,
    n-grams beyond) or ``"noun_phrases"`` (as ``"auto"``, within ``ADJ* NOUN+`` phrases found
    by part-of-speech tags: ``tagger`` is a spaCy pipeline name, default ``en_core_web_sm``, or
    a callable; see :mod:`salience.keywords.pos`). Other ``params`` go to the method.
    """
    return create("keywords", method, candidates_from=candidates_from, document_frequency=document_frequency,
                  encoder=encoder, tagger=tagger, language=language, **params).score_candidates(text)


def extract_keyphrases(text: str, *, k: int = 10, method: str | None = None, tier: str | None = None,
                       **params) -> Scores:
    """The ``k`` best keyphrases of ``text`` as :class:`~salience.Scores` (empty when the text
    has no candidate), by ``tier`` (``"fast"``, the default, or ``"best"``; see
    :mod:`salience.keywords.tiers`) or by ``method`` built with ``params`` (see its class: ``candidates_from``,
    ``tagger``, ``language`` for every method; ``document_frequency`` for ``tfidf``; ``encoder``
    and ``diversity`` for ``embed``; ``rerank="semrerank"`` with ``encoder`` revises any
    method's scores with SemRe-Rank, :func:`salience.keywords.semantic.semrerank`).

    >>> text = ("Sensor placement is hard in a wireless sensor network. "
    ...         "Wireless sensor networks have many sensors, and sensor placement is costly.")
    >>> extract_keyphrases(text, k=2).ids
    ['wireless sensor network', 'sensor placement']
    """
    return extract_keyphrases_batch([text], k=k, method=method, tier=tier, **params)[0]


def extract_keyphrases_batch(texts: Iterable[str], *, k: int = 10, method: str | None = None, tier: str | None = None,
                             show_progress: bool = False, **params) -> list[Scores]:
    """:func:`extract_keyphrases` for each of ``texts``. ``yake`` works on ``batch_size`` texts
    at a time with array operations over all of them (several times faster than one by one);
    ``embed`` encodes the texts and their candidates in one encoder call per batch; the other
    methods go text by text. With ``language="auto"`` each text's language is detected on its
    own, so a batch may mix languages; ``language`` may also be a list, one code per text.
    ``corpus_df`` (``yake``): see :class:`Yake`. ``show_progress``: a progress bar over the
    texts' characters.

    >>> [s.ids for s in extract_keyphrases_batch(["Graph kernels compare graphs.", "the of"], k=1)]
    [['graph kernels compare graphs'], []]
    """
    from salience.keywords.tiers import tier_method

    method, params = tier_method(method, tier, params)
    return create("keywords", method, k=k, **params).score_batch(texts, show_progress=show_progress)


#: the name of earlier releases; it goes in the next one
extract_keyphrases_many = extract_keyphrases_batch
