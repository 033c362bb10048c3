"""Fuzzing with hypothesis: the tokenizer, the jsonl / BEIR / TREC run / qrels readers, the
command line's argument parsing and the HTTP request bodies. Generated input may be refused,
but only with the library's own errors (or argparse's usage exit); anything else is a bug.

The number of examples per target comes from the hypothesis profile: ``ci`` (the default, a
few hundred) or ``campaign`` (``SALIENCE_FUZZ_PROFILE=campaign``, 100,000 in all; see
``bench/fuzz.py``). With ``SALIENCE_FUZZ_COUNTS=FILE`` each target adds its count of inputs
to that JSON file.
"""

import json
import os
import string
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="fuzzing needs hypothesis (the test extra)")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from salience.exceptions import SalienceError  # noqa: E402

CAMPAIGN = {"tokenizer": 20_000, "jsonl": 15_000, "beir": 10_000, "trec": 15_000, "qrels": 10_000, "cli": 15_000,
            "http": 15_000}
PROFILE = os.environ.get("SALIENCE_FUZZ_PROFILE", "ci")
COMMON = dict(deadline=None, derandomize=PROFILE == "ci", database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])


def examples(target: str) -> settings:
    return settings(max_examples=CAMPAIGN[target] if PROFILE == "campaign" else 150, **COMMON)


_counts: dict[str, int] = {}


def _count(target: str) -> None:
    _counts[target] = _counts.get(target, 0) + 1


@pytest.fixture(scope="module", autouse=True)
def _record_counts():
    yield
    path = os.environ.get("SALIENCE_FUZZ_COUNTS")
    if path:
        Path(path).write_text(json.dumps(_counts))


def _scratch() -> Path:
    """A file of this process's scratch folder (hypothesis runs many examples per test call)."""
    folder = Path(tempfile.gettempdir()) / f"salience-fuzz-{os.getpid()}"
    folder.mkdir(exist_ok=True)
    return folder


TEXT = st.text(st.characters(codec="utf-8"), max_size=200) | st.text(string.printable, max_size=200)
LINES = st.lists(st.one_of(
    TEXT,
    st.dictionaries(st.sampled_from(["_id", "id", "title", "text", "query", "year"]),
                    st.one_of(TEXT, st.integers(), st.floats(), st.none(), st.booleans(), st.lists(st.integers())),
                    max_size=5).map(json.dumps),
), max_size=8)


def _raw(lines: list[str], junk: bytes) -> bytes:
    return "\n".join(lines).encode("utf-8", "surrogatepass") + junk


@examples("tokenizer")
@given(text=TEXT, stem=st.booleans())
def test_tokenizer(text, stem):
    from salience.text import Tokenizer

    _count("tokenizer")
    tokenizer = Tokenizer(stemmer="english" if stem else None)
    terms = tokenizer.tokenize(text)
    assert [term for _, _, term in tokenizer.spans(text)] == terms or not text.isascii()
    assert tokenizer.tokenize_batch([text, text]) == [terms, terms]


@examples("jsonl")
@given(lines=LINES, junk=st.binary(max_size=20), gz=st.booleans(), on_error=st.sampled_from(["raise", "skip"]))
def test_jsonl_reader(lines, junk, gz, on_error):
    import gzip

    from salience.io.files import iter_jsonl

    _count("jsonl")
    data = _raw(lines, junk)
    path = _scratch() / ("records.jsonl.gz" if gz else "records.jsonl")
    path.write_bytes(gzip.compress(data) if gz else data)
    try:
        for _, record in iter_jsonl(path, on_error):
            assert isinstance(record, dict)
    except SalienceError:
        pass


@examples("beir")
@given(corpus=LINES, queries=LINES, qrels=st.lists(TEXT, max_size=6), junk=st.binary(max_size=10))
def test_beir_reader(corpus, queries, qrels, junk):
    from salience.io.documents import iter_documents, read_queries

    _count("beir")
    folder = _scratch() / "beir"
    folder.mkdir(exist_ok=True)
    (folder / "corpus.jsonl").write_bytes(_raw(corpus, junk))
    (folder / "queries.jsonl").write_bytes(_raw(queries, b""))
    (folder / "qrels").mkdir(exist_ok=True)
    (folder / "qrels" / "test.tsv").write_bytes(_raw(["query-id\tcorpus-id\tscore", *qrels], b""))
    for reader in (lambda: list(iter_documents(folder)), lambda: read_queries(folder)):
        try:
            reader()
        except SalienceError:
            pass


TREC_LINE = st.one_of(
    TEXT,
    st.tuples(st.text(string.ascii_letters + string.digits, min_size=1, max_size=4), st.sampled_from(["Q0", "0", "x"]),
              st.text(string.ascii_letters + string.digits, min_size=1, max_size=4), st.integers(-2, 1000),
              st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers()), TEXT)
    .map(lambda t: " ".join(map(str, t))),
)


@examples("trec")
@given(lines=st.lists(TREC_LINE, max_size=10), junk=st.binary(max_size=10))
def test_trec_run_reader(lines, junk):
    from salience.core.run import Run

    _count("trec")
    path = _scratch() / "run.trec"
    path.write_bytes(_raw(lines, junk))
    try:
        Run.read_trec(path)
    except SalienceError:
        pass


QREL_LINE = st.one_of(
    TEXT,
    st.tuples(st.text(string.ascii_letters, min_size=1, max_size=3), st.sampled_from(["0", "Q0", ""]),
              st.text(string.ascii_letters, min_size=1, max_size=3), st.one_of(st.integers(-3, 5), TEXT))
    .map(lambda t: " ".join(map(str, t))),
    st.tuples(st.text(string.ascii_letters, min_size=1, max_size=3), st.text(string.ascii_letters, min_size=1, max_size=3),
              st.one_of(st.integers(-3, 5), st.floats())).map(lambda t: "\t".join(map(str, t))),
)


@examples("qrels")
@given(lines=st.lists(QREL_LINE, max_size=10), junk=st.binary(max_size=10), tsv=st.booleans())
def test_qrels_reader(lines, junk, tsv):
    from salience.core.run import Qrels

    _count("qrels")
    path = _scratch() / ("qrels.tsv" if tsv else "qrels.txt")
    path.write_bytes(_raw(lines, junk))
    try:
        Qrels.read(path)
    except SalienceError:
        pass


WORDS = ["search", "index", "query", "evaluate", "add", "delete", "merge", "rerank", "pack", "rank", "fuse",
         "keywords", "extract", "summarize", "data", "select", "dedup", "explain", "text", "lm", "compress", "prune",
         "methods", "serve", "-k", "--k1", "--b", "--json", "--out", "--where", "--method", "--fields", "--tokens",
         "--n-jobs", "--seed", "--port", "--max-k", "--domain", "--quiet", "-h", "--help", "0", "-1", "1e9", "nan",
         "x", "", "--", "{", "../..", "\x00"]


@examples("cli")
@given(argv=st.lists(st.one_of(st.sampled_from(WORDS), TEXT), max_size=8))
def test_cli_argument_parsing(argv):
    from salience.cli import build_parser

    _count("cli")
    try:
        build_parser().parse_args(argv)
    except SystemExit:  # argparse's usage error (or --help): a message, not a traceback
        pass


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
                    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
                    max_leaves=12)
FIELDS = ["query", "k", "where", "explain", "hybrid", "id", "ids", "passages", "index", "text", "sentences", "method",
          "language", "runs", "normalize", "weights", "documents", "commit", "dense", "fusion", "weight"]
BODY = st.one_of(JSON, st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=5),
                 st.fixed_dictionaries({"query": TEXT}, optional={"k": st.integers(-5, 2000), "explain": JSON,
                                                                   "where": JSON, "ids": JSON, "passages": JSON}))
PATHS = ["/indexes/pets/search", "/indexes/pets/explain", "/rerank", "/keyphrases", "/summary", "/fuse",
         "/indexes/pets/documents", "/indexes/pets/delete", "/indexes/pets/commit", "/indexes/nope/search"]


@pytest.fixture(scope="module")
def http_client(tmp_path_factory):
    pytest.importorskip("fastapi", reason="the HTTP service needs salience[server]")
    pytest.importorskip("httpx", reason="FastAPI's test client needs httpx")
    from fastapi.testclient import TestClient

    from salience.search import BM25
    from salience.server.app import create_app

    path = tmp_path_factory.mktemp("fuzz") / "pets"
    BM25().index([{"id": "a", "title": "cats", "text": "cats sleep"}, {"id": "b", "text": "dogs bark"}]).save(path)
    return TestClient(create_app([path], api_key="fuzz-key-1234"), raise_server_exceptions=False)


@examples("http")
@given(path=st.sampled_from(PATHS), body=BODY, raw=st.one_of(st.none(), st.binary(max_size=40)),
       keyed=st.booleans())
def test_http_request_bodies(http_client, path, body, raw, keyed):
    _count("http")
    headers = {"Content-Type": "application/json", **({"X-API-Key": "fuzz-key-1234"} if keyed else {})}
    if raw is not None:
        response = http_client.post(path, content=raw, headers=headers)
    else:
        response = http_client.post(path, content=json.dumps(body, allow_nan=True).encode(), headers=headers)
    assert response.status_code != 500, (path, body, raw, response.text)
    assert set(response.json()) == {"error"} if response.status_code >= 400 else True
