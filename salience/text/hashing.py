"""Numbering distinct keys with array operations: integer codes, rows of integers and tokens.

Grouping is sort-based. ``np.sort`` (SIMD-accelerated on x86) is several times faster than
a stable ``np.argsort``, so a code and its position are packed into one 64-bit integer and
sorted together: the positions come out in a stable order at ``np.sort``'s speed. Rows (the
words of an n-gram, the bytes of a token) are mixed into one 64-bit hash, grouped by it, and
checked against the group's first row, so a hash collision never merges two different rows.
Where numba is installed, large batches of spans are grouped in one pass over a hash table
instead (:mod:`salience.text._grouping_numba_kernels`), with the same result.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["mix64", "stable_argsort", "dense_ids", "first_appearance", "group_rows", "group_spans", "compiled_grouping",
           "sort_codes", "distinct_sorted", "string_hashes", "number_strings"]

_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_COLUMN = np.uint64(0x9E3779B97F4A7C15)


def mix64(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wrapping): every input bit affects every output bit."""
    shifted = h >> np.uint64(30)
    h = h ^ shifted  # a new array: the input is left alone; the rest works in place
    h *= _MIX1
    np.right_shift(h, np.uint64(27), out=shifted)
    h ^= shifted
    h *= _MIX2
    np.right_shift(h, np.uint64(31), out=shifted)
    h ^= shifted
    return h


def number_strings(values: list[str]) -> tuple[np.ndarray, list[str]]:
    """Number the distinct strings by first appearance: (number of each value, distinct values)."""
    distinct: dict[str, int] = {}
    # one dictionary pass: each string hashed once (len() is read before setdefault inserts)
    numbers = [distinct.setdefault(v, len(distinct)) for v in values]
    return np.array(numbers, dtype=np.int64), list(distinct)


_BYTE_BASE = np.uint64(0x100000001B3)  # FNV's 64-bit prime, as the base of a polynomial over bytes


def string_hashes(strings: list[str]) -> np.ndarray:
    """A 64-bit hash of each string, the same in every process and run (unlike ``hash``): a
    polynomial over its UTF-8 bytes, finished by :func:`mix64`; one encode for all of them.
    The strings must not contain newlines (tokens and stems do not)."""
    if not strings:
        return np.zeros(0, dtype=np.uint64)
    encoded = "\n".join(strings).encode("utf-8", "surrogatepass")
    data = np.frombuffer(encoded, dtype=np.uint8)
    ends = np.flatnonzero(data == 10)
    starts = np.concatenate(([0], ends + 1))
    lengths = np.append(ends, len(data)) - starts
    position = np.arange(len(data)) - np.repeat(starts, lengths + 1)[: len(data)]
    with np.errstate(over="ignore"):
        powers = np.cumprod(np.full(int(lengths.max()) + 1, _BYTE_BASE, dtype=np.uint64))
        terms = (data.astype(np.uint64) + np.uint64(1)) * powers[position]
        terms[data == 10] = 0  # the separators add nothing
        sums = np.add.reduceat(terms, np.minimum(starts, len(terms) - 1)) if len(terms) else np.zeros(len(starts), np.uint64)
        sums[lengths == 0] = 0
        return mix64(sums + lengths.astype(np.uint64))


def _position_bits(n: int) -> int:
    return max(n - 1, 1).bit_length()


def stable_argsort(codes: np.ndarray, bound: int | None = None) -> np.ndarray:
    """``np.argsort(codes, kind="stable")`` for non-negative integer ``codes`` (< ``bound``), faster."""
    return _stable_order(codes, bound)[0]


def _stable_order(codes: np.ndarray, bound: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(order, codes[order]) for a stable sort of non-negative integer ``codes`` < ``bound``."""
    n = len(codes)
    shift = _position_bits(n)
    if bound is None:
        bound = int(codes.max()) + 1 if n else 1
    if (max(bound - 1, 1)).bit_length() + shift <= 63:
        packed = (codes.astype(np.int64) << shift) | np.arange(n, dtype=np.int64)
        packed.sort()
        return packed & ((1 << shift) - 1), packed >> shift
    order = np.argsort(codes, kind="stable")
    return order, codes[order]


def dense_ids(codes: np.ndarray, bound: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Number the distinct values of a non-negative integer array in sorted order: (id of each
    element, index of each id's first element). ``bound`` (> every code) saves a pass when known."""
    order, ordered = _stable_order(codes, bound)
    new = np.ones(len(ordered), dtype=bool)
    new[1:] = ordered[1:] != ordered[:-1]
    ids = np.empty(len(ordered), dtype=np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids, order[new]


def first_appearance(ids: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Renumber groups by their first element's position: (new id of each element, first
    element of each new id, ascending). Linear: marks the first elements instead of sorting."""
    is_first = np.zeros(len(ids), dtype=bool)
    is_first[first] = True
    rank = np.cumsum(is_first) - 1
    return rank[first][ids], np.flatnonzero(is_first)


def sort_codes(codes: np.ndarray) -> np.ndarray:
    """``np.sort`` of an integer array, sorted in 32 bits where every value fits (about twice as
    fast as 64 bits); the result keeps the input's dtype."""
    if codes.dtype.itemsize > 4 and len(codes) > 1024 and -(2**31) <= int(codes.min()) and int(codes.max()) < 2**31:
        return np.sort(codes.astype(np.int32)).astype(codes.dtype)
    return np.sort(codes)


def distinct_sorted(codes: np.ndarray) -> np.ndarray:
    """The distinct values of an integer array, sorted."""
    ordered = sort_codes(codes)
    keep = np.ones(len(ordered), dtype=bool)
    keep[1:] = ordered[1:] != ordered[:-1]
    return ordered[keep]


def group_rows(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Group identical rows of non-negative integer ``columns`` (equal lengths): (group of each row, numbered by
    first appearance; first row of each group, ascending). Exact: rows are grouped by a 64-bit
    hash and compared with their group's first row; on a collision they are grouped column by
    column instead."""
    n = len(columns[0]) if columns else 0
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    h = np.zeros(n, dtype=np.uint64)
    for column in columns:
        h = mix64(h * _COLUMN + column.astype(np.uint64))
    # keep the hash's top bits so that it packs with a row position into 63 bits
    ids, first = dense_ids((h >> np.uint64(_position_bits(n) + 1)).astype(np.int64))
    rep = first[ids]
    if any((column[rep] != column).any() for column in columns):
        ids = np.zeros(n, dtype=np.int64)
        for column in columns:
            column_ids, _ = dense_ids(column)
            ids, first = dense_ids(ids * (int(column_ids.max()) + 1) + column_ids)
    return first_appearance(ids, first)


#: Spans grouped at once from which numba's kernel is used where installed: a small call (one
#: text, a few) never imports numba (about 0.5 s, once a process), while a large batch saves
#: about 0.05 us a span (500 abstracts' 50,000 candidate spans: 3.7 -> 1.0 ms).
COMPILED_MIN_SPANS = 16_384


@functools.cache
def _compiled_grouping():
    try:
        from salience.text._grouping_numba_kernels import group_spans_table
    except ImportError:
        return None
    return group_spans_table


def compiled_grouping(n_spans: int):
    """numba's hash-table kernel for grouping ``n_spans`` spans, or None (numba not installed,
    or too few spans to pay for loading it)."""
    # the kernel numbers groups in 32 bits
    return _compiled_grouping() if COMPILED_MIN_SPANS <= n_spans < 2**31 else None


def group_spans(values: np.ndarray, start: np.ndarray, length: np.ndarray,
                keys: tuple[np.ndarray, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """:func:`group_rows` for spans: rows are ``values[start[i] : start[i] + length[i]]`` (and
    the ``keys`` columns), grouped exactly. Each word of a span is mixed in only where the span
    reaches it, so short spans among a few long ones cost no padding."""
    n = len(start)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    kernel = compiled_grouping(n)
    if kernel is not None:
        key_rows = np.empty((n, len(keys)), dtype=np.int64)
        for c, column in enumerate(keys):
            key_rows[:, c] = column
        return kernel(values, np.asarray(start, dtype=np.int64), np.asarray(length, dtype=np.int64), key_rows)
    h = np.zeros(n, dtype=np.uint64)
    for column in (*keys, length):
        h = mix64(h * _COLUMN + column.astype(np.uint64))
    active = np.arange(n)
    steps = []
    for offset in range(int(length.max())):
        active = active[length[active] > offset]
        steps.append(active)
        h[active] = mix64(h[active] * _COLUMN + values[start[active] + offset].astype(np.uint64))
    ids, first = dense_ids((h >> np.uint64(_position_bits(n) + 1)).astype(np.int64))
    rep = first[ids]
    exact = all((column[rep] == column).all() for column in (*keys, length)) and all(
        (values[start[a] + offset] == values[start[rep[a]] + offset]).all() for offset, a in enumerate(steps))
    if not exact:  # a hash collision: group by the padded rows, column by column
        width = int(length.max())
        offsets = np.arange(width)
        inside = offsets[None, :] < length[:, None]
        padded = np.where(inside, values[np.where(inside, start[:, None] + offsets[None, :], 0)].astype(np.int64) + 1, 0)
        return group_rows([*keys, *padded.T])
    return first_appearance(ids, first)
