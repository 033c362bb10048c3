import json
import sys
import threading

import pytest

from salience.exceptions import MissingDependencyError
from salience.search import BM25

from .conftest import DOCS, KEY

fastapi = pytest.importorskip("fastapi", reason="the HTTP service needs salience[server] (FastAPI)")
pytest.importorskip("httpx", reason="FastAPI's test client needs httpx")
from fastapi.testclient import TestClient  # noqa: E402

from salience.server.app import Limits, create_app  # noqa: E402

AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def client(index_dir):
    return TestClient(create_app([index_dir], api_key=KEY, limits=Limits(max_k=50, max_body_bytes=20_000)),
                      raise_server_exceptions=False)


def _error(response, status, code, field="any"):
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    assert "Traceback" not in response.text and 'File "' not in response.text
    if field != "any":
        assert body["error"]["field"] == field, body
    return body["error"]


def test_health_methods_page_and_openapi(client):
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["indexes"] == [
        {"name": "pets", "kind": "bm25", "documents": 5, "generation": 0, "pending": False}]
    names = {(m["family"], m["name"]) for m in client.get("/methods").json()["methods"]}
    assert ("search", "lucene") in names and ("fusion", "rrf") in names
    assert {m["family"] for m in client.get("/methods", params={"domain": "fusion"}).json()["methods"]} == {"fusion"}
    _error(client.get("/methods", params={"domain": "nope"}), 404, "unknown_domain", "domain")
    page = client.get("/")
    assert page.status_code == 200 and 'id="search-form"' in page.text and "http" not in page.text.split("<body>")[0]
    assert client.get("/static/app.js").status_code == 200
    assert "/indexes/{name}/search" in client.get("/openapi.json").json()["paths"]


def test_search_with_explain_highlights_the_matched_words(client):
    body = client.post("/indexes/pets/search", json={"query": "cat hunting", "k": 3, "explain": True}).json()
    assert body["generation"] == 0 and body["results"][0]["id"] == "cats"
    expected = BM25.load(client.app.state.indexes["pets"].path).search("cat hunting", k=3)
    assert [r["id"] for r in body["results"]] == expected.ids
    assert [r["score"] for r in body["results"]] == pytest.approx(expected.values.tolist())
    top = body["results"][0]
    text = top["document"]["text"]
    assert [text[a:b] for a, b in top["highlights"]["text"]] == ["Cats", "hunt"]
    assert [top["document"]["title"][a:b] for a, b in top["highlights"]["title"]] == ["Cats"]
    assert sum(t["contribution"] for t in top["explanation"]["terms"]) == pytest.approx(top["score"])
    filtered = client.post("/indexes/pets/search", json={"query": "cats", "where": {"year": {">=": 2003}}}).json()
    assert [r["id"] for r in filtered["results"]] == ["mice"]
    explained = client.post("/indexes/pets/explain", json={"query": "mice", "id": "mice"}).json()
    assert explained["doc_id"] == "mice" and [DOCS[4]["text"][a:b] for a, b in explained["highlights"]["text"]] == ["Mice"]


def test_a_bm25_search_is_answered_by_the_fast_path_exactly_as_by_the_route(client, monkeypatch):
    """The busiest request skips FastAPI's routing; what it answers, and every error, are the
    route's own (the route's replies are made unavailable: only the fast path can answer)."""
    request = {"query": "cat hunting", "k": 3, "explain": True}
    routed = client.post("/indexes/pets/search", json=request)
    assert routed.status_code == 200
    service = client.app.state.service

    def unavailable(result):
        raise AssertionError("the FastAPI route answered")

    monkeypatch.setattr(service, "reply", unavailable)
    fast = client.post("/indexes/pets/search", json=request)
    assert fast.status_code == 200 and fast.headers["content-type"] == "application/json"
    assert fast.content == routed.content
    monkeypatch.undo()
    _error(client.post("/indexes/pets/search", json={"query": "cats", "k": 51}), 422, "over_limit", "k")
    _error(client.post("/indexes/nope/search", json={"query": "cats"}), 404, "unknown_index", "name")
    _error(client.post("/indexes/pets/search", content=b"{not json", headers={"content-type": "application/json"}),
           400, "invalid_json")
    _error(client.post("/indexes/pets/search", content=b"x" * 30_000, headers={"content-type": "application/json"}),
           413, "body_too_large")


def test_bad_requests_get_json_errors_naming_the_field(client):
    search = "/indexes/pets/search"
    _error(client.post(search, json={"query": "cats", "k": 0}), 422, "invalid_field", "k")
    _error(client.post(search, json={"query": "cats", "k": 51}), 422, "over_limit", "k")
    _error(client.post(search, json={"query": "cats", "k": "5"}), 422, "invalid_field", "k")
    _error(client.post(search, json={"query": ""}), 422, "invalid_field", "query")
    _error(client.post(search, json={"query": "x" * 1001}), 422, "over_limit", "query")
    _error(client.post(search, json={"query": "cats", "colour": "red"}), 422, "invalid_field", "colour")
    _error(client.post(search, json={"query": "cats", "where": {"year": {"~": 1}}}), 400, "invalid_input")
    _error(client.post(search, content=b'{"query": ', headers={"Content-Type": "application/json"}), 400, "invalid_json")
    _error(client.post(search, content=b"\xff\xfe", headers={"Content-Type": "application/json"}), 400, "invalid_json")
    _error(client.post("/indexes/nope/search", json={"query": "cats"}), 404, "unknown_index", "name")
    _error(client.post("/indexes/pets/explain", json={"query": "cats", "id": "lion"}), 404, "unknown_id", "id")
    _error(client.post(search, json={"query": "cats " * 5000}), 413, "body_too_large")
    _error(client.get("/no/such/route"), 404, "not_found")
    _error(client.get(search), 405, "method_not_allowed")


def test_batch_and_time_limits(index_dir):
    strict = TestClient(create_app([index_dir], api_key=KEY, limits=Limits(max_batch=2, timeout_s=1e-6)),
                        raise_server_exceptions=False)
    docs = [{"id": f"n{i}", "text": "new"} for i in range(3)]
    _error(strict.post("/indexes/pets/documents", headers=AUTH, json={"documents": docs}), 422, "over_limit",
           "documents")
    _error(strict.post("/indexes/pets/delete", headers=AUTH, json={"ids": ["cats", "dogs", "fish"]}), 422,
           "over_limit", "ids")
    _error(strict.post("/rerank", json={"query": "mice", "ids": ["cats", "dogs", "fish"]}), 422, "over_limit", "ids")
    _error(strict.post("/keyphrases", json={"text": "Graph kernels compare graphs. " * 50}), 504, "timeout")
    assert BM25.load(index_dir).n_docs == 5


def test_path_traversal_reaches_nothing(client, index_dir):
    for path in ("/static/../../../../etc/passwd", "/static/%2e%2e/%2e%2e/etc/passwd", "/static/..%2F..%2Fapp.py"):
        response = client.get(path)
        assert response.status_code == 404 and "root:" not in response.text
    _error(client.post("/indexes/..%2F..%2Fetc/search", json={"query": "x"}), 404, "not_found")
    _error(client.post(f"/indexes/{index_dir}/search", json={"query": "x"}), 404, "not_found")


def test_cors_is_off_unless_an_origin_is_allowed(index_dir):
    headers = {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
    plain = TestClient(create_app([index_dir]))
    assert "access-control-allow-origin" not in plain.get("/health", headers=headers).headers
    allowed = TestClient(create_app([index_dir], cors_origins=["http://app.example"]))
    response = allowed.get("/health", headers={"Origin": "http://app.example"})
    assert response.headers["access-control-allow-origin"] == "http://app.example"
    assert "access-control-allow-origin" not in allowed.get("/health", headers=headers).headers


WRITES = [("/indexes/pets/documents", {"documents": [{"id": "owl", "text": "owls hunt mice"}]}),
          ("/indexes/pets/delete", {"ids": ["dogs"]}), ("/indexes/pets/commit", None), ("/indexes/pets/merge", None)]


@pytest.mark.parametrize("path, body", WRITES)
def test_every_write_endpoint_refuses_a_missing_or_wrong_key(client, index_dir, path, body):
    before = sorted(p.name for p in index_dir.iterdir())
    _error(client.post(path, json=body), 401, "missing_api_key", "authorization")
    _error(client.post(path, json=body, headers={"Authorization": "Bearer wrong"}), 401, "wrong_api_key")
    _error(client.post(path, json=body, headers={"X-API-Key": KEY[:-1]}), 401, "wrong_api_key")
    _error(client.post(path, json=body, headers={"Authorization": KEY}), 401, "missing_api_key")
    keyless = TestClient(create_app([index_dir]))
    _error(keyless.post(path, json=body, headers=AUTH), 403, "writes_disabled")
    assert sorted(p.name for p in index_dir.iterdir()) == before and BM25.load(index_dir).n_docs == 5


def test_writes_are_durable_when_they_return_and_readers_see_commits_only(client, index_dir):
    added = client.post("/indexes/pets/documents", headers=AUTH,
                        json={"documents": [{"id": "owl", "title": "Owls", "text": "Owls hunt mice at night.", "year": 2021}]})
    assert added.status_code == 200 and added.json()["generation"] == 1 and added.json()["documents"] == 6
    assert "owl" in BM25.load(index_dir).ids  # on disk when the request returned
    assert client.post("/indexes/pets/search", json={"query": "owls"}).json()["results"][0]["id"] == "owl"
    staged = client.post("/indexes/pets/delete", headers={"X-API-Key": KEY}, json={"ids": ["owl"], "commit": False})
    assert staged.json()["committed"] is False
    assert [r["id"] for r in client.post("/indexes/pets/search", json={"query": "owls"}).json()["results"]] == ["owl"]
    assert client.get("/health").json()["indexes"][0]["pending"] is True
    assert client.post("/indexes/pets/commit", headers=AUTH).json()["generation"] == 2
    assert client.post("/indexes/pets/search", json={"query": "owls"}).json()["results"] == []
    assert "owl" not in BM25.load(index_dir).ids
    _error(client.post("/indexes/pets/delete", headers=AUTH, json={"ids": ["cats", "lion"]}), 404, "unknown_id")
    assert BM25.load(index_dir).n_docs == 5  # nothing deleted
    merged = client.post("/indexes/pets/merge", headers=AUTH).json()
    assert merged["segments"] == 1
    # the segment, the manifest, and the service's lock and generation (what workers share)
    assert sorted(p.name for p in index_dir.iterdir()) == ["generation.json", "manifest.json",
                                                          BM25.load(index_dir)._segments[0]["name"], "write.lock"]
    _error(client.post("/indexes/pets/documents", headers=AUTH, json={"documents": [{"title": "no id"}]}), 422,
           "invalid_field", "documents.0.id")
    _error(client.post("/indexes/pets/documents", headers=AUTH, json={"documents": []}), 422, "invalid_field")


def test_concurrent_readers_see_whole_commits(client):
    """A writer commits batches of documents that all hold the word 'common' and one word of their
    batch; every search answer must hold exactly the documents of the generation it reports."""
    batches = 12
    failures, stop = [], threading.Event()

    def write():
        for n in range(batches):
            docs = [{"id": f"b{n}-{i}", "text": f"common batch{n}"} for i in range(5)]
            response = client.post("/indexes/pets/documents", headers=AUTH, json={"documents": docs})
            if response.status_code != 200:
                failures.append(response.text)
            if n % 3 == 2:  # and deletes a whole earlier batch
                ids = [f"b{n - 2}-{i}" for i in range(5)]
                client.post("/indexes/pets/delete", headers=AUTH, json={"ids": ids})
        stop.set()

    expected = {0: set()}
    live: set[str] = set()
    generation = 0
    for n in range(batches):  # the state after each commit, as the writer makes them
        live |= {f"b{n}-{i}" for i in range(5)}
        generation += 1
        expected[generation] = set(live)
        if n % 3 == 2:
            live -= {f"b{n - 2}-{i}" for i in range(5)}
            generation += 1
            expected[generation] = set(live)

    def read():
        while not stop.is_set():
            body = client.post("/indexes/pets/search", json={"query": "common", "k": 50}).json()
            if {r["id"] for r in body["results"]} != expected[body["generation"]]:
                failures.append(body)

    threads = [threading.Thread(target=read) for _ in range(3)] + [threading.Thread(target=write)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_keyphrases_summary_fusion_and_rerank(client):
    text = ("Graph kernels compare graphs by counting shared substructures. Random walks give one family of "
            "kernels. The weather was mild. Graph kernels power molecule classification.")
    phrases = client.post("/keyphrases", json={"text": text, "k": 3}).json()["keyphrases"]
    assert len(phrases) == 3 and any("graph" in p["phrase"].lower() for p in phrases)
    summary = client.post("/summary", json={"text": text, "sentences": 2}).json()
    assert sum(s["selected"] for s in summary["sentences"]) == 2
    assert all(text[s["start"]:s["end"]] == s["text"] for s in summary["sentences"])
    assert summary["summary"].split("\n") == [s["text"] for s in summary["sentences"] if s["selected"]]
    _error(client.post("/summary", json={"text": "   "}), 422, "invalid_field", "text")
    fused = client.post("/fuse", json={"runs": [{"q": {"a": 3, "b": 2}}, {"q": {"b": 5, "c": 1}}], "method": "rrf"}).json()
    rrf = {"a": 1 / 61, "b": 1 / 62 + 1 / 61, "c": 1 / 62}
    assert list(fused["results"]["q"]) == ["b", "a", "c"]
    assert fused["results"]["q"] == pytest.approx(rrf)
    _error(client.post("/fuse", json={"runs": [{"q": {"a": 1}}]}), 422, "invalid_field", "runs")
    ranked = client.post("/rerank", json={"query": "mice", "ids": ["birds", "mice", "cats"]}).json()
    assert [r["id"] for r in ranked["results"]][:2] == ["mice", "cats"]
    posted = client.post("/rerank", json={"query": "mice", "passages": [{"id": "x", "text": "no match"},
                                                                         {"id": "y", "text": "mice everywhere"}]}).json()
    assert [r["id"] for r in posted["results"]] == ["y", "x"] and posted["judge"] == "pets"
    _error(client.post("/rerank", json={"query": "mice", "ids": ["lion"]}), 404, "unknown_id")
    _error(client.post("/rerank", json={"query": "mice"}), 422, "invalid_field", "passages")


def test_a_missing_fastapi_names_the_extra(monkeypatch, index_dir):
    monkeypatch.setitem(sys.modules, "fastapi", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'salience\[server\]'"):
        create_app([index_dir])


def test_limits_and_keys_are_validated(tmp_path):
    from salience.exceptions import InvalidParameterError
    from salience.server.app import read_api_key

    with pytest.raises(InvalidParameterError, match="max_k"):
        Limits(max_k=0)
    (tmp_path / "short").write_text("abc\n")
    with pytest.raises(InvalidParameterError, match="at least 8"):
        read_api_key(tmp_path / "short")
    with pytest.raises(InvalidParameterError, match="cannot be read"):
        read_api_key(tmp_path / "absent")
    assert json.loads(json.dumps(Limits().__dict__))["max_k"] == 1000


def test_the_campaigns_http_cases_get_their_own_codes(client, index_dir):
    """Issue 25: a duplicate id is a conflict, a body that is not JSON is invalid_json however it
    fails, a streamed body over the limit is 413, and a write without a key is 401 whatever its body."""
    body = {"documents": [{"id": "cats", "text": "again"}]}
    error = _error(client.post("/indexes/pets/documents", headers=AUTH, json=body), 409, "duplicate_id", "id")
    assert "already in the index" in error["message"]
    twice = {"documents": [{"id": "owl", "text": "a"}, {"id": "owl", "text": "b"}]}
    _error(client.post("/indexes/pets/documents", headers=AUTH, json=twice), 409, "duplicate_id")
    assert BM25.load(index_dir).n_docs == 5
    search = "/indexes/pets/search"
    deep = b"[" * 5000 + b"]" * 5000
    for payload in (b'{"query": "caf\xe9"}', deep):
        _error(client.post(search, content=payload, headers={"Content-Type": "application/json"}), 400,
               "invalid_json")

    def chunks():
        for _ in range(30):
            yield b" " * 1000  # no Content-Length: the limit is met as the body streams in

    _error(client.post(search, content=chunks(), headers={"Content-Type": "application/json"}), 413,
           "body_too_large")
    for path, payload in (("/indexes/pets/documents", {"documents": "not a list"}),
                          ("/indexes/pets/delete", {"nope": 1})):
        _error(client.post(path, json=payload), 401, "missing_api_key")


def test_a_dense_index_is_ready_when_health_says_so(tmp_path):
    from salience.search import Dense

    calls = []

    def bag(texts):
        calls.append(len(texts))
        return [[len(t), t.count("a") + 1.0] for t in texts]

    bag.name = "bag2"
    Dense(encoder=bag, encoder_name="bag2").index(DOCS).save(tmp_path / "dense")
    import salience.search.dense as dense_module

    original = dense_module.Dense.load

    def load(path, **kwargs):
        return original(path, encoder=bag, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dense_module.Dense, "load", staticmethod(load))
        calls.clear()
        app = create_app([tmp_path / "dense"])
    assert calls == [1]  # the encoder ran once before the app existed: loaded, not at the first query
    assert TestClient(app).get("/health").json()["status"] == "ok"


def test_a_dense_index_is_written_through_the_service_as_bm25_is(tmp_path):
    """add, delete, commit and merge on a dense index: the same writes, copies and commits as BM25's."""
    from salience.search import Dense

    def bag(texts):
        return [[t.count("cat") + 0.1, t.count("dog") + 0.1, len(t) / 100 + 0.1] for t in texts]

    bag.name = "bag3"
    Dense(encoder=bag, encoder_name="bag3").index([{"_id": "a", "text": "a cat"}, {"_id": "b", "text": "a dog"}]) \
        .save(tmp_path / "pets")
    import salience.search.dense as dense_module

    original = dense_module.Dense.load
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dense_module.Dense, "load", staticmethod(lambda path, **kw: original(path, encoder=bag, **kw)))
        client = TestClient(create_app([tmp_path / "pets"], api_key=KEY), raise_server_exceptions=False)
        auth = {"Authorization": f"Bearer {KEY}"}
        added = client.post("/indexes/pets/documents", json={"documents": [{"id": "c", "text": "cat cat cat"}]},
                            headers=auth)
        assert added.status_code == 200, added.text
        assert added.json()["documents"] == 3 and added.json()["generation"] == 1
        hits = client.post("/indexes/pets/search", json={"query": "cat", "k": 2}).json()["results"]
        assert {h["id"] for h in hits} == {"a", "c"}  # the added document is searched at once
        assert client.post("/indexes/pets/delete", json={"ids": ["a"]}, headers=auth).json()["documents"] == 2
        assert client.post("/indexes/pets/merge", headers=auth).json()["segments"] == 1
        reopened = original(tmp_path / "pets", encoder=bag)  # the writes were committed to the folder
        assert sorted(reopened.ids) == ["b", "c"] and reopened.n_segments == 1


def test_rerank_scores_posted_passages_with_a_cross_encoder(index_dir, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from salience.exceptions import InvalidParameterError
    from salience.models.cross_encoder import CrossEncoder
    from tests.models.tiny import tiny_cross_folder

    folder = tiny_cross_folder(tmp_path / "cross")
    client = TestClient(create_app([index_dir], judge="cross", judge_model=str(folder)), raise_server_exceptions=False)
    passages = [{"id": "x", "text": "cats sleep"}, {"id": "y", "text": "mice run"}, {"id": "z", "text": "birds"}]
    answer = client.post("/rerank", json={"query": "mice", "passages": passages}).json()
    expected = CrossEncoder(folder).scores("mice", [p["text"] for p in passages])
    assert answer["judge"] == "cross (cross)"
    assert [r["id"] for r in answer["results"]] == [passages[i]["id"] for i in (-expected).argsort(kind="stable")]
    assert [r["score"] for r in answer["results"]] == pytest.approx(sorted(expected, reverse=True), abs=1e-6)
    with pytest.raises(InvalidParameterError, match="the cross judge needs its model folder"):
        create_app([index_dir], judge="cross")
    with pytest.raises(InvalidParameterError, match="judge must be 'index' .* or one of .*cross.*got 'pointwise'"):
        create_app([index_dir], judge="pointwise")
    with pytest.raises(InvalidParameterError, match="judge_model needs a judge"):
        create_app([index_dir], judge_model=str(folder))


def test_verify_a_summary_over_http(client):
    text = ("Solar panels convert sunlight into electricity. Panels made of silicon cells convert light into "
            "electric current. The weather was pleasant on Tuesday. Electricity from solar cells powers homes. "
            "A cat slept on the warm roof. Solar electricity charges batteries at night.")
    answer = client.post("/verify", json={"unit": "sentences", "text": text, "method": "centroid", "random": 5,
                                          "language": "en"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["unit"] == "sentences" and body["method"] == "centroid" and body["n_units"] == 6
    assert body["verdict"] in ("faithful", "no better than random", "inverted", "undetermined")
    assert len(body["curves"]["random"]) == 5 and body["curves"]["scores"][0] == pytest.approx(1.0)
    _error(client.post("/verify", json={"unit": "layers", "text": text}), 422, "invalid_field", "unit")
    _error(client.post("/verify", json={"text": text, "random": 1}), 422, "invalid_field", "random")
    _error(client.post("/verify", json={"text": text, "method": "nope"}), 400, "invalid_input")


def test_verify_a_documents_words_over_http_match_the_library(client, index_dir):
    from salience.core.base import create
    from salience.explain.search import verify_search_explanation
    from salience.search import BM25

    request = {"unit": "features", "index": "pets", "query": "cats chase mice", "id": "cats", "method": "occlusion",
               "random": 5}
    answer = client.post("/verify", json=request)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    expected = verify_search_explanation(BM25.load(index_dir), "cats chase mice", "cats", method="occlusion",
                                         verifier=create("verify", "features", n_random=5))
    assert body["unit"] == "features (words)" and body["method"] == "occlusion" and body["verdict"] == expected.verdict
    assert body["curves"]["scores"] == pytest.approx(expected.curves["scores"].tolist())
    assert body["curves"]["scores"][0] > body["curves"]["scores"][-1]  # the document's score falls as words go
    _error(client.post("/verify", json={**request, "id": None}), 422, "invalid_field", "id")
    _error(client.post("/verify", json={**request, "index": "zoo"}), 404, "unknown_index", "name")
    _error(client.post("/verify", json={"unit": "sentences"}), 422, "invalid_field", "text")


def test_verify_passages_over_http_with_a_served_language_model(index_dir, tmp_path):
    pytest.importorskip("torch")
    from salience.core.base import create
    from salience.search import BM25
    from tests.models.tiny import save_tiny_lm, tiny_lm

    model, tokenizer = tiny_lm()
    folder = save_tiny_lm(tmp_path / "tiny-lm")
    served = TestClient(create_app([index_dir], lm=str(folder)))
    request = {"unit": "passages", "index": "pets", "query": "cats", "response": "cats sleep", "random": 4, "steps": 2}
    answer = served.post("/verify", json=request)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    engine = BM25.load(index_dir)
    hits = engine.search("cats", k=10)
    texts = {i: " ".join(str(engine.document(i).get(f) or "") for f in engine.fields_).strip() for i in hits.ids}
    expected = create("verify", "passages", n_random=4, steps=2).verify(
        hits, passages=texts, question="cats", model=model, tokenizer=tokenizer, response="cats sleep")
    assert body["unit"] == "passages" and body["n_units"] == len(hits) == 2
    assert body["curves"]["scores"] == pytest.approx(expected.curves["scores"].tolist(), abs=1e-6)
    _error(served.post("/verify", json={**request, "query": None}), 422, "invalid_field", "query")
    plain = TestClient(create_app([index_dir]))
    _error(plain.post("/verify", json=request), 422, "invalid_field", "unit")  # no --lm: named


def test_answer_over_http_is_the_librarys_answer(index_dir, tmp_path):
    pytest.importorskip("torch")
    from salience.answer import answer
    from salience.search import BM25
    from tests.models.tiny import save_tiny_lm, tiny_lm

    model, tokenizer = tiny_lm()
    folder = save_tiny_lm(tmp_path / "tiny-lm")
    served = TestClient(create_app([index_dir], lm=str(folder)))
    assert served.get("/health").json()["language_model"] == str(folder)
    request = {"index": "pets", "question": "cats mice", "max_new_tokens": 4, "cite": "loo", "budget": 60}
    reply = served.post("/answer", json=request)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    expected = answer(BM25.load(index_dir), "cats mice", model=model, tokenizer=tokenizer, max_new_tokens=4,
                      cite="loo", budget=60)
    assert body["answer"] == expected.answer and body["model"] == str(folder)
    assert [c["id"] for c in body["citations"]] == [c.id for c in expected.citations]
    assert [p["id"] for p in body["passages"]] == [p["id"] for p in expected.passages]
    assert body["verification"]["top_k_drop"] == pytest.approx(expected.verification["top_k_drop"])
    assert "cite must be a context method" in _error(served.post("/answer", json={**request, "cite": "magic"}), 400,
                                                     "invalid_input")["message"]
    _error(served.post("/answer", json={**request, "index": "zoo"}), 404, "unknown_index", "name")
    _error(served.post("/answer", json={**request, "k": "5"}), 422, "invalid_field", "k")
    _error(served.post("/answer", json={**request, "lookup_tokens": -1}), 422, "invalid_field", "lookup_tokens")
    looked = served.post("/answer", json={**request, "lookup_tokens": 4}).json()  # the same greedy answer
    assert looked["answer"] == expected.answer and looked["settings"]["lookup_tokens"] == 4
    halved = TestClient(create_app([index_dir], lm=str(folder), lm_dtype="bfloat16"))
    assert halved.post("/answer", json=request).status_code == 200
    plain = TestClient(create_app([index_dir]))
    assert plain.get("/health").json()["language_model"] is None
    _error(plain.post("/answer", json=request), 422, "invalid_field", "question")  # no --lm: named


def test_verify_keyphrases_over_http_match_the_library(client):
    from salience.core.base import create
    from salience.keywords import extract_keyphrases

    text = ("Sensor placement in wireless sensor networks. Sensor placement decides the network lifetime, and "
            "wireless sensor networks need careful sensor placement.")
    collection = ["Graph kernels compare graphs by their walks.", "Wireless networks carry packets."]
    request = {"unit": "keyphrases", "text": text, "title": "Sensor placement in wireless networks",
               "collection": collection, "k": 5, "random": 5, "language": "en"}
    answer = client.post("/verify", json=request)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    expected = create("verify", "keyphrases", language="en", n_random=5).verify(
        extract_keyphrases(text, k=5, language="en"), document=text, title=request["title"], collection=collection)
    assert body["unit"] == "keyphrases" and body["method"] == "yake_rake" and body["verdict"] == expected.verdict
    assert body["curves"]["scores"] == pytest.approx(expected.curves["scores"].tolist())
    _error(client.post("/verify", json={**request, "collection": None}), 400, "invalid_input")  # search needs one
    _error(client.post("/verify", json={**request, "outcome": "rouge"}), 400, "invalid_input")


def test_a_methods_own_parameters_go_in_params(client):
    """``params`` reach the method named by ``method`` (as ``--param`` does on the command
    line): each answer equals the library's with the same parameters; a field the request has
    is refused in params, and so are unknown names and bad values."""
    from salience import fuse
    from salience.keywords import extract_keyphrases

    text = ("Sensor placement is hard in a wireless sensor network. Wireless sensor networks have many sensors, and "
            "sensor placement is costly. Placement of sensors matters.")
    reply = client.post("/keyphrases", json={"text": text, "k": 3, "params": {"long_text_words": 10}})
    assert reply.status_code == 200, reply.text
    expected = extract_keyphrases(text, k=3, long_text_words=10)
    assert [p["phrase"] for p in reply.json()["keyphrases"]] == expected.ids
    assert expected.ids != extract_keyphrases(text, k=3).ids
    reply = client.post("/keyphrases", json={"text": text, "k": 3, "method": "kpminer", "params": {"cutoff": 5}})
    assert reply.status_code == 200, reply.text
    expected = extract_keyphrases(text, k=3, method="kpminer", cutoff=5)
    assert [(p["phrase"], p["score"]) for p in reply.json()["keyphrases"]] == list(zip(expected.ids, expected.values))
    assert expected.ids != extract_keyphrases(text, k=3, method="kpminer").ids
    _error(client.post("/keyphrases", json={"text": text, "method": "kpminer", "params": {"cutoff": 0}}), 400,
           "invalid_input")
    assert "set k with the field k" in _error(client.post("/keyphrases", json={"text": text, "params": {"k": 2}}), 400,
                                              "invalid_input")["message"]
    assert "'long_text_word'" in _error(client.post("/keyphrases", json={"text": text, "params": {
        "long_text_word": 2}}), 400, "invalid_input")["message"]
    reply = client.post("/summary", json={"text": text, "sentences": 1, "method": "textrank",
                                          "params": {"similarity": "overlap"}})
    assert reply.status_code == 200, reply.text
    _error(client.post("/summary", json={"text": text, "params": {"damping": 2}}), 400, "invalid_input")
    runs = [{"q": {"a": 3.0, "b": 2.0, "c": 1.0}}, {"q": {"c": 3.0, "a": 2.0, "b": 1.0}}]
    reply = client.post("/fuse", json={"runs": runs, "weights": [1, 3], "params": {"rrf_k": 1}})
    assert reply.status_code == 200, reply.text
    assert list(reply.json()["results"]["q"]) == fuse(runs, rrf_k=1, weights=[1, 3])["q"].ranked_ids() == ["c", "a", "b"]
    assert "set weights with the field weights" in _error(
        client.post("/fuse", json={"runs": runs, "weights": [1, 1], "params": {"weights": [1, 3]}}), 400,
        "invalid_input")["message"]
    _error(client.post("/rerank", json={"query": "cats", "ids": ["cats"], "params": {"window": 3}}), 422,
           "invalid_field", "params")


def test_hybrid_search_fuses_by_any_fusion_method_named_in_the_request(tmp_path):
    from salience.search import Dense, Hybrid

    def bag(texts):
        return [[t.count("cat") + 0.1, t.count("dog") + 0.1, len(t) / 100 + 0.1] for t in texts]

    bag.name = "bag3"
    docs = [{"_id": "a", "text": "a cat"}, {"_id": "b", "text": "a dog"}, {"_id": "c", "text": "cat and dog"}]
    Dense(encoder=bag, encoder_name="bag3").index(docs).save(tmp_path / "pets-dense")
    BM25().index(docs).save(tmp_path / "pets")
    import salience.search.dense as dense_module

    original = dense_module.Dense.load
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dense_module.Dense, "load", staticmethod(lambda path, **kw: original(path, encoder=bag, **kw)))
        client = TestClient(create_app([tmp_path / "pets", tmp_path / "pets-dense"]), raise_server_exceptions=False)
        expected = Hybrid(BM25.load(tmp_path / "pets"), Dense.load(tmp_path / "pets-dense"), fusion="borda",
                          weight=0.2).search("cat", k=3)
        reply = client.post("/indexes/pets/search", json={"query": "cat", "k": 3, "hybrid": {
            "dense": "pets-dense", "fusion": "borda", "weight": 0.2}})
        assert reply.status_code == 200, reply.text
        assert [h["id"] for h in reply.json()["results"]] == expected.ids
        bad = client.post("/indexes/pets/search", json={"query": "cat", "hybrid": {"dense": "pets-dense",
                                                                                    "fusion": "bordaa"}})
        assert bad.status_code == 400 and "borda" in bad.text  # an unknown method, with a did-you-mean
        # by default the library's hybrid: min-max weighted sum, the weight for the dense side's encoder
        default = client.post("/indexes/pets/search", json={"query": "cat dog", "k": 3, "hybrid": {"dense": "pets-dense"}})
        assert default.status_code == 200, default.text
        expected = Hybrid(BM25.load(tmp_path / "pets"), Dense.load(tmp_path / "pets-dense")).search("cat dog", k=3)
        assert [h["id"] for h in default.json()["results"]] == expected.ids
        assert [h["score"] for h in default.json()["results"]] == pytest.approx(expected.values.tolist())
        for weight in (1.5, -0.1, "heavy"):
            bad = client.post("/indexes/pets/search", json={"query": "cat", "hybrid": {"dense": "pets-dense",
                                                                                        "weight": weight}})
            assert 400 <= bad.status_code < 500 and "weight" in bad.text, weight
