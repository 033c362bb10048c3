import gzip

import pytest

from salience import IdMismatchError, InputFormatError, InvalidParameterError
from salience.search import BM25


def test_empty_corpus():
    with pytest.raises(InvalidParameterError, match="empty corpus"):
        BM25().index([])


def test_empty_and_whitespace_documents_are_indexed_but_never_returned():
    from salience.io.documents import EmptyDocumentsWarning

    with pytest.warns(EmptyDocumentsWarning, match="2 of 4 documents have no text"):
        index = BM25().index(["", "   \n\t", "graphene sheets", "graphene"])
    assert index.n_docs == 4
    assert index.search("graphene", k=10).ids == ["3", "2"]
    assert index.search("", k=10).ids == []


def test_duplicate_ids_named():
    with pytest.raises(IdMismatchError, match="document id 'x' is given twice"):
        BM25().index([{"_id": "x", "text": "a"}, {"_id": "x", "text": "b"}])
    index = BM25().index([{"_id": "x", "text": "a"}])
    with pytest.raises(IdMismatchError, match="position 0: document id 'x' is already in the index"):
        index.add([{"_id": "x", "text": "c"}])


@pytest.mark.parametrize("value", [42, 3.5, ["a"], {"a": 1}])
def test_non_string_text(value):
    with pytest.raises(InputFormatError, match="field 'text' of document 'd' must be text"):
        BM25().index([{"_id": "d", "text": value}])
    with pytest.raises(InvalidParameterError, match="query at position 0 must be a str"):
        BM25().index(["ok"]).search_batch([value])


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b'{"_id": "1", "text": "fine"}\n{"_id": "2", "text": "bad \xff byte"}\n')
    with pytest.raises(InputFormatError, match=r"corpus.jsonl:2: invalid UTF-8"):
        BM25().index(path)
    index = BM25().fit(path, on_error="replace")
    assert index.search("bad").ids == ["2"]
    assert index.document("2")["text"] == "bad \ufffd byte"
    assert BM25().fit(path, on_error="skip").ids == ["1"]  # the undecodable record is dropped


def test_corrupt_gzip_and_bad_json_named(tmp_path):
    path = tmp_path / "corpus.jsonl.gz"
    data = gzip.compress(b"".join(b'{"_id": "%d", "text": "word %d"}\n' % (i, i) for i in range(2000)))
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputFormatError, match="corpus.jsonl.gz: corrupt or truncated"):
        BM25().index(path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"_id": "1", "text": "a"}\n{"_id": "2", "text": \n')
    with pytest.raises(InputFormatError, match=r"bad.jsonl:2: invalid JSON"):
        BM25().index(bad)


def test_stopword_only_and_unknown_queries_are_empty():
    index = BM25().index(["the cat", "a dog"])
    assert len(index.search("the and of")) == 0
    assert len(index.search("zyzzyva qwerty")) == 0


def test_k_validation_and_clamping():
    index = BM25().index(["red fox", "red dog", "blue"])
    for k in (0, -3, 2.5):
        with pytest.raises(InvalidParameterError, match="k must be a positive integer"):
            index.search("red", k=k)
    assert index.search("red", k=1000).ids == ["0", "1"]


def test_unknown_variant_lists_valid():
    with pytest.raises(InvalidParameterError, match="unknown variant of BM25 'bm26'.*lucene"):
        BM25(variant="bm26")


def test_delete_unknown_id():
    index = BM25().index(["a b", "c d"])
    with pytest.raises(IdMismatchError, match="unknown document id 'zz'"):
        index.delete(["0", "zz"])
    assert index.n_docs == 2  # nothing deleted


def test_missing_source(tmp_path):
    with pytest.raises(InputFormatError, match="no such file"):
        BM25().index(tmp_path / "nope.jsonl")
    with pytest.raises(InputFormatError, match="no corpus.jsonl"):
        BM25().index(tmp_path)
