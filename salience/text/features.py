"""Hashed n-gram features, computed with array operations over raw bytes.

Text is lower-cased and split into word runs and punctuation runs (as nltk's
``WordPunctTokenizer`` does: ``\\w+|[^\\w\\s]+``, with every non-ASCII character counted as a
word character). Each token's bytes are read as two 64-bit words (tokens of over 16 bytes are
hashed one by one) and mixed with a 64-bit finaliser, so no Python object is made per token;
n-grams combine their tokens' hashes, and the result is taken modulo ``buckets``. Memory is linear in the batch and
independent of the vocabulary: nothing is remembered between batches.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np

from salience.exceptions import InvalidParameterError
from salience.text.hashing import mix64 as _mix
from salience.text.byte_tokens import join_utf8, padded_byte_words, tokens_per_text, wordpunct_spans

__all__ = ["HashedNgrams", "NgramBatch"]

_PAIR = np.uint64(0x9E3779B97F4A7C15)

# texts hashed at once: the arrays of one pass stay within the caches
_CHUNK_CHARACTERS = 256 * 1024

_ASCII_LOWER = bytes.maketrans(bytes(range(65, 91)), bytes(range(97, 123)))


@dataclass
class NgramBatch:
    """Hashed n-grams of a batch, laid out order by order, each order in document order:
    ``order_counts[o, d]`` is how many n-grams of the ``o``-th order document ``d`` has, and
    ``bucket`` holds their buckets in that layout; ``tokens[d]`` is document ``d``'s token count.
    ``doc[i]``, the document of ``bucket[i]``, is made from the counts when first asked for."""

    bucket: np.ndarray
    tokens: np.ndarray
    order_counts: np.ndarray

    @cached_property
    def doc(self) -> np.ndarray:
        numbers = np.arange(len(self.tokens))
        if not len(self.order_counts):
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.repeat(numbers, counts) for counts in self.order_counts])

    def counts(self, buckets: int) -> np.ndarray:
        """Total count of each bucket over the batch."""
        return np.bincount(self.bucket, minlength=buckets)

    def dot(self, weights: np.ndarray) -> np.ndarray:
        """Per document: sum over its n-grams of ``weights[bucket]`` (counts . weights)."""
        return np.bincount(self.doc, weights=weights[self.bucket], minlength=len(self.tokens))


class HashedNgrams:
    """Bag of hashed word n-grams (unigrams and bigrams by default) in ``buckets`` buckets.

    >>> f = HashedNgrams(buckets=16)
    >>> batch = f.transform(["The cat sat.", "", "the CAT"])
    >>> batch.tokens.tolist()  # 'the', 'cat', 'sat', '.'; none; 'the', 'cat'
    [4, 0, 2]
    >>> int(batch.counts(16).sum())  # 4 + 3 bigrams, 2 + 1 bigram
    10
    """

    def __init__(self, orders: Sequence[int] = (1, 2), buckets: int = 10_000, lowercase: bool = True):
        orders = tuple(sorted(set(int(n) for n in orders)))
        if not orders or orders[0] < 1:
            raise InvalidParameterError(f"orders must be positive n-gram sizes, such as (1, 2); got {orders}.")
        if not isinstance(buckets, (int, np.integer)) or not 2 <= buckets <= 2**32:
            raise InvalidParameterError(f"buckets must be an integer in [2, 2**32]; got {buckets!r}.")
        self.orders = orders
        self.buckets = int(buckets)
        self.lowercase = lowercase

    def __repr__(self) -> str:
        return f"HashedNgrams(orders={self.orders}, buckets={self.buckets}, lowercase={self.lowercase})"

    def token_hashes(self, texts: Sequence[str], punctuation: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(64-bit hash of each token, its document) for all tokens of ``texts``, in order;
        ``punctuation=False`` keeps word tokens only."""
        _check_texts(texts)
        return self._token_hashes(texts, punctuation)

    def _token_hashes(self, texts: Sequence[str], punctuation: bool = True) -> tuple[np.ndarray, np.ndarray]:
        if all(map(str.isascii, texts)):
            # ASCII: lower-case the bytes through a table, several times faster than str.lower
            raw, text_starts = join_utf8([t.encode("ascii") for t in texts])
            if self.lowercase:
                raw = raw.translate(_ASCII_LOWER)
        else:
            parts = [t.lower() for t in texts] if self.lowercase else list(texts)
            raw, text_starts = join_utf8([t.encode("utf-8", errors="surrogatepass") for t in parts])
        data = np.frombuffer(raw, dtype=np.uint8)
        n = len(data)
        if n == 0:
            return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
        starts, ends = wordpunct_spans(data, punctuation=punctuation)
        lengths = ends - starts
        # tokens of up to 16 bytes are keyed by their zero-padded bytes, read as two little-endian
        # words from an unaligned view; longer ones (rare: URLs, chemical names) are hashed one by one
        short = lengths <= 16
        w0, w1 = padded_byte_words(data, starts, lengths)
        with np.errstate(over="ignore"):
            hashes = _mix(_mix(w0 + lengths.view(np.uint64)) * _PAIR + w1)  # lengths >= 0: a view, no copy
            if not short.all():
                for i in np.flatnonzero(~short).tolist():
                    digest = hashlib.blake2b(raw[starts[i] : ends[i]], digest_size=8).digest()
                    hashes[i] = np.uint64(int.from_bytes(digest, "little"))
        doc = np.repeat(np.arange(len(texts)), tokens_per_text(starts, text_starts))
        return hashes, doc

    def transform(self, texts: Sequence[str]) -> NgramBatch:
        """Hash the n-grams of ``texts``; n-grams never cross documents. The result lays the
        n-grams out order by order, each order in document order."""
        texts = list(texts)
        _check_texts(texts)
        # a few hundred kilobytes at a time keep the temporaries in cache: ~1.5x faster on a
        # large batch than one pass over it, with the same result
        chunks = [self._order_buckets(texts[start:stop]) for start, stop in _chunks_by_length(texts, _CHUNK_CHARACTERS)]
        tokens = np.concatenate([chunk_tokens for _, chunk_tokens in chunks])
        parts = [[orders[o] for orders, _ in chunks] for o in range(len(self.orders))]
        # each document's n-grams of an order are consecutive: tokens - n + 1 of them
        order_counts = np.stack([np.maximum(tokens - n + 1, 0) for n in self.orders])
        # buckets < 2**32: the uint64 values read as int64 unchanged, without a copy
        bucket = np.concatenate([part for order in parts for part in order]).view(np.int64)
        return NgramBatch(bucket, tokens, order_counts)

    def _order_buckets(self, texts: list[str]) -> tuple[list[np.ndarray], np.ndarray]:
        """The bucket of every n-gram of ``texts``, one array per order (in document order), and
        each text's token count."""
        hashes, doc = self._token_hashes(texts)  # checked by transform
        tokens = np.bincount(doc, minlength=len(texts))
        parts = []
        B = np.uint64(self.buckets)
        shift = np.uint64(32)
        for n in self.orders:
            if n == 1:
                parts.append(((hashes >> shift) * B) >> shift)  # multiply-shift: an unbiased range without division
                continue
            if len(hashes) < n:
                parts.append(np.zeros(0, dtype=np.uint64))
                continue
            combined = hashes[: len(hashes) - n + 1].copy()
            with np.errstate(over="ignore"):
                for offset in range(1, n):
                    combined = _mix(combined * _PAIR + hashes[offset : len(hashes) - n + 1 + offset])
            same = doc[: len(doc) - n + 1] == doc[n - 1 :]
            parts.append(((combined[same] >> shift) * B) >> shift)
        return parts, tokens


def _check_texts(texts: Sequence[str]) -> None:
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidParameterError(f"text {i} must be a str; got {type(text).__name__}.")


def _chunks_by_length(texts: list[str], characters: int) -> list[tuple[int, int]]:
    """(start, stop) runs of consecutive texts holding about ``characters`` characters each (a
    longer text is a run of its own)."""
    chunks, start, size = [], 0, 0
    for i, text in enumerate(texts):
        if size and size + len(text) > characters:
            chunks.append((start, i))
            start, size = i, 0
        size += len(text)
    chunks.append((start, len(texts)))
    return chunks
