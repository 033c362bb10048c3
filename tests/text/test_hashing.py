import numpy as np
import pytest

import salience.text.hashing as hashing
from salience.text.hashing import dense_ids, distinct_sorted, first_appearance, group_rows, group_spans, string_hashes


def _reference_groups(rows: list[tuple]) -> tuple[list[int], list[int]]:
    seen: dict[tuple, int] = {}
    first = []
    ids = []
    for i, row in enumerate(rows):
        if row not in seen:
            seen[row] = len(seen)
            first.append(i)
        ids.append(seen[row])
    return ids, first


@pytest.fixture(params=["numpy", "numba"])
def grouping_path(request, monkeypatch):
    """Group spans on the numpy path, or on numba's hash-table kernel (forced even for a few)."""
    if request.param == "numba":
        pytest.importorskip("numba", reason="the compiled grouping needs numba")
        monkeypatch.setattr(hashing, "COMPILED_MIN_SPANS", 0)
        assert hashing.compiled_grouping(1) is not None
    else:
        monkeypatch.setattr(hashing, "COMPILED_MIN_SPANS", 2**62)
        assert hashing.compiled_grouping(10**9) is None
    return request.param


def test_dense_ids_by_hand_and_both_sort_paths():
    codes = np.array([5, 3, 5, 0, 3, 9])
    ids, first = dense_ids(codes)
    assert ids.tolist() == [2, 1, 2, 0, 1, 3] and first.tolist() == [3, 1, 0, 5]
    huge = np.array([2**62, 3, 2**62, 0], dtype=np.int64)  # too wide to pack with positions: argsort path
    ids, first = dense_ids(huge)
    assert ids.tolist() == [2, 1, 2, 0] and first.tolist() == [3, 1, 0]
    assert dense_ids(np.zeros(0, dtype=np.int64))[0].size == 0
    assert distinct_sorted(np.array([4, 1, 4, 2, 1])).tolist() == [1, 2, 4]


def test_first_appearance_renumbers_linearly():
    ids, first = dense_ids(np.array([7, 2, 7, 1, 2]))  # sorted order: 1 -> 0, 2 -> 1, 7 -> 2
    new_ids, new_first = first_appearance(ids, first)
    assert new_ids.tolist() == [0, 1, 0, 2, 1] and new_first.tolist() == [0, 1, 3]


@pytest.mark.parametrize("weak_hash", [False, True])
def test_group_rows_is_exact_even_when_the_hash_collides(monkeypatch, weak_hash):
    rng = np.random.default_rng(3)
    columns = [rng.integers(0, 4, 500), rng.integers(0, 3, 500), rng.integers(0, 2**63, 500, dtype=np.int64).astype(np.uint64) % np.uint64(5)]
    if weak_hash:  # every row hashes alike: the check against each group's first row must catch it
        monkeypatch.setattr(hashing, "mix64", lambda h: np.zeros_like(h))
    ids, first = group_rows(columns)
    expected_ids, expected_first = _reference_groups(list(zip(*(c.tolist() for c in columns))))
    assert ids.tolist() == expected_ids and first.tolist() == expected_first
    empty_ids, empty_first = group_rows([np.zeros(0, dtype=np.int64)])
    assert empty_ids.size == 0 and empty_first.size == 0


@pytest.mark.parametrize("weak_hash", [False, True])
def test_group_spans_equals_grouping_the_spans(monkeypatch, weak_hash, grouping_path):
    rng = np.random.default_rng(4)
    values = rng.integers(0, 3, 400)
    start = rng.integers(0, 390, 600)
    length = rng.integers(1, 6, 600)
    doc = rng.integers(0, 2, 600)
    if weak_hash:
        monkeypatch.setattr(hashing, "mix64", lambda h: np.zeros_like(h))
    ids, first = group_spans(values, start, length, (doc,))
    rows = [(d, *values[a : a + n].tolist()) for d, a, n in zip(doc.tolist(), start.tolist(), length.tolist())]
    expected_ids, expected_first = _reference_groups(rows)
    assert ids.tolist() == expected_ids and first.tolist() == expected_first
    assert group_spans(values, start[:0], length[:0])[0].size == 0


def test_string_hashes_are_stable_and_distinct():
    hashes = string_hashes(["graph", "kernel", "", "graph", "é"])
    assert hashes[0] == hashes[3] and len(set(hashes.tolist())) == 4 and hashes[2] == 0
    # the same in every process: a fixed value
    assert string_hashes(["x"]).tolist() == [10295574029086948158]
    assert string_hashes([]).size == 0


def test_byte_token_ids_number_short_and_long_tokens_exactly(grouping_path):
    from salience.text.byte_tokens import byte_token_ids

    tokens = [b"graph", b"x" * 20, b"graph", b"x" * 19 + b"y", b"", b"x" * 20, b"x" * 16, b"x" * 17, b"graphs"]
    data = np.frombuffer(b" ".join(tokens), dtype=np.uint8)
    lengths = np.array([len(t) for t in tokens])
    starts = np.concatenate(([0], np.cumsum(lengths + 1)[:-1]))
    ids, first = byte_token_ids(data, starts, lengths)
    expected_ids, expected_first = _reference_groups([(t,) for t in tokens])
    assert ids.tolist() == expected_ids and first.tolist() == expected_first


def test_both_grouping_paths_agree_on_many_spans_and_bytes(monkeypatch):
    """The compiled kernel against the numpy path where both run at their usual sizes: 60,000
    spans of 1-8 words over a small vocabulary (many repeats, many probes) with two key
    columns, and 50,000 byte tokens of 0-40 bytes (past the padded words' 16)."""
    pytest.importorskip("numba", reason="the compiled grouping needs numba")
    from salience.text.byte_tokens import byte_token_ids

    rng = np.random.default_rng(7)
    values = rng.integers(0, 6, 200_000)
    start = rng.integers(0, 199_990, 60_000)
    length = rng.integers(1, 9, 60_000)
    keys = (rng.integers(0, 3, 60_000), rng.integers(0, 2, 60_000))
    data = rng.integers(97, 100, 1_000_000).astype(np.uint8)
    starts = np.sort(rng.choice(999_950, 50_000, replace=False))
    lengths = np.minimum(rng.integers(0, 41, 50_000), np.diff(np.append(starts, 1_000_000)))
    results = {}
    for threshold in (0, 2**62):
        monkeypatch.setattr(hashing, "COMPILED_MIN_SPANS", threshold)
        results[threshold] = (group_spans(values, start, length, keys), byte_token_ids(data, starts, lengths))
    (spans_a, bytes_a), (spans_b, bytes_b) = results.values()
    for a, b in ((spans_a, spans_b), (bytes_a, bytes_b)):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert len(spans_a[1]) > 10_000 and len(bytes_a[1]) > 10_000  # many groups, many repeats


def test_sort_codes_sorts_in_32_bits_only_where_every_value_fits():
    from salience.text.hashing import sort_codes

    rng = np.random.default_rng(8)
    for codes in (rng.integers(-(2**31), 2**31, 5000), rng.integers(0, 2**40, 5000), np.append(rng.integers(0, 9, 5000), 2**31),
                  rng.integers(0, 9, 10)):
        ordered = sort_codes(codes)
        assert ordered.dtype == codes.dtype and np.array_equal(ordered, np.sort(codes))
    assert distinct_sorted(np.array([2**31 + 1, 3, 2**31 + 1] * 1000)).tolist() == [3, 2**31 + 1]
