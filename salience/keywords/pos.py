"""Part-of-speech taggers for noun-phrase candidates.

A tagger is any callable that takes the tokens of each text (words and punctuation marks, as
:func:`salience.keywords.words.tokenize_batch` finds them) and returns one tag per token:
Universal POS tags (``ADJ``, ``NOUN``, ``PROPN``, ...) or Penn Treebank tags (``JJ``, ``NN``,
``NNP``, ...). A string names an installed spaCy pipeline package (``pip install
'salience[pos]'`` and a model such as ``en_core_web_sm``); it is loaded once, without its
parser, entity recogniser and lemmatiser.
"""

from __future__ import annotations

import threading
from typing import Callable, Sequence

import numpy as np

from salience.extras import install_hint
from salience.exceptions import InvalidParameterError, MissingDependencyError

__all__ = ["Tagger", "get_tagger", "tag_codes", "DEFAULT_TAGGER", "ADJECTIVE", "NOUN", "OTHER"]

Tagger = Callable[[list[list[str]]], Sequence[Sequence[str]]]

DEFAULT_TAGGER = "en_core_web_sm"
OTHER, ADJECTIVE, NOUN = 0, 1, 2  # proper nouns count as nouns

_LOADED: dict[str, Tagger] = {}  # bounded by the pipeline names a process uses
_LOADING = threading.Lock()


def _code(tag: str) -> int:
    if tag in ("ADJ", "JJ", "JJR", "JJS"):
        return ADJECTIVE
    if tag in ("NOUN", "PROPN", "NN", "NNS", "NNP", "NNPS"):
        return NOUN
    return OTHER


def tag_codes(tagger: Tagger, tokens: list[list[str]]) -> np.ndarray:
    """Run ``tagger`` on the tokens of each text; one code (:data:`ADJECTIVE`, :data:`NOUN`,
    :data:`OTHER`) per token, concatenated."""
    tags = tagger(tokens)
    if len(tags) != len(tokens):
        raise InvalidParameterError(f"the tagger returned tags for {len(tags)} texts; expected {len(tokens)}.")
    for d, (text_tags, text_tokens) in enumerate(zip(tags, tokens)):
        if len(text_tags) != len(text_tokens):
            raise InvalidParameterError(
                f"the tagger returned {len(text_tags)} tags for the {len(text_tokens)} tokens of text {d}; "
                "it must return one tag per token.")
    codes = {tag: _code(tag) for text_tags in tags for tag in set(text_tags)}
    return np.fromiter((codes[tag] for text_tags in tags for tag in text_tags), dtype=np.int8,
                       count=sum(map(len, tokens)))


def _spacy_tagger(name: str) -> Tagger:
    try:
        import spacy
        from spacy.tokens import Doc
    except ImportError:
        raise MissingDependencyError(
            f"noun-phrase candidates tag words with spaCy: {install_hint('pos')} and a pipeline package "
            f"(python -m spacy download {DEFAULT_TAGGER}), or pass tagger=<callable>.") from None
    try:
        nlp = spacy.load(name, exclude=["parser", "ner", "lemmatizer", "senter"])
    except OSError as err:
        raise MissingDependencyError(
            f"spaCy pipeline {name!r} is not installed ({err}); install it (python -m spacy download {name}) "
            "or name an installed one with tagger=...") from None
    if "tagger" not in nlp.pipe_names and "morphologizer" not in nlp.pipe_names:
        raise InvalidParameterError(f"spaCy pipeline {name!r} has no tagger; its pipes are {nlp.pipe_names}.")

    def tag(tokens: list[list[str]]) -> list[list[str]]:
        docs = (Doc(nlp.vocab, words=words) for words in tokens)
        # about 20,000 tokens a batch: long documents in small batches keep memory flat
        batch_size = max(1, min(64, 20_000 * len(tokens) // max(1, sum(map(len, tokens)))))
        return [[token.pos_ for token in doc] for doc in nlp.pipe(docs, batch_size=batch_size)]

    return tag


def _default_pipeline() -> str:
    """:data:`DEFAULT_TAGGER`, or where only a repackaged build of it is installed (a package
    named ``en_core_web_sm_...``), that one."""
    try:
        import spacy.util

        installed = spacy.util.get_installed_models()
    except ImportError:
        return DEFAULT_TAGGER
    if DEFAULT_TAGGER in installed:
        return DEFAULT_TAGGER
    return next((name for name in sorted(installed) if name.startswith(DEFAULT_TAGGER + "_")), DEFAULT_TAGGER)


def get_tagger(tagger: str | Tagger | None = None) -> Tagger:
    """A callable tagger: ``tagger`` itself when callable, else the spaCy pipeline it names
    (default :data:`DEFAULT_TAGGER`, or an installed repackaging of it), loaded once per process."""
    if callable(tagger):
        return tagger
    if tagger is None:
        tagger = _default_pipeline()
    if not isinstance(tagger, str):
        raise InvalidParameterError(f"tagger must be a spaCy pipeline name or a callable; got {type(tagger).__name__}.")
    with _LOADING:  # one load per pipeline name, whichever thread asks first
        if tagger not in _LOADED:
            _LOADED[tagger] = _spacy_tagger(tagger)
        return _LOADED[tagger]
