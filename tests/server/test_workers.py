"""A service that scales out: several worker processes over one folder (every commit seen by
every worker, none lost), a worker killed and replaced, and a sharded index served with a
dead shard answered as an error or a flagged partial result, never a silently smaller one."""

import threading
import time

import pytest

from salience.search import BM25
from salience.search.shards import ShardedIndex, shard_of

pytest.importorskip("fastapi", reason="the HTTP service needs salience[server] (FastAPI)")
pytest.importorskip("httpx", reason="FastAPI's test client needs httpx")
from fastapi.testclient import TestClient  # noqa: E402

from salience.server.app import create_app  # noqa: E402
from salience.server.indexes import FolderSync, ServedIndex  # noqa: E402
from salience.server.live import LiveServer  # noqa: E402

KEY = "worker-key-0123456789"
WORDS = ["cats", "dogs", "owls", "mice", "hawks", "foxes"]
DOCS = [{"id": f"d{i}", "text": f"{WORDS[i % 6]} and {WORDS[(i * 5) % 6]} number {i}"} for i in range(120)]


@pytest.fixture
def pets(tmp_path):
    BM25().fit(DOCS[:60]).save(tmp_path / "pets")
    (tmp_path / "key").write_text(KEY)
    return tmp_path / "pets"


def _search(server, query="owls", k=200):
    status, body = server.request("POST", "/indexes/pets/search", {"query": query, "k": k})
    assert status == 200, body
    return body


def test_two_workers_see_every_commit_and_lose_none(pets):
    with LiveServer([pets], api_key_file=pets.parent / "key", options=["--workers", "2"]) as server:
        deadline = time.monotonic() + 30
        while len(server.workers()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        answered_by: set[int] = set()
        deadline = time.monotonic() + 20
        while answered_by != set(server.workers()) and time.monotonic() < deadline:
            # concurrent connections: which worker accepts one is the kernel's choice
            threads = [threading.Thread(target=lambda: answered_by.add(server.request("GET", "/health")[1]["process"]))
                       for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        assert answered_by == set(server.workers())  # requests reach both workers
        for n, doc in enumerate(DOCS[60:70], start=1):  # each write lands on either worker
            status, body = server.request("POST", "/indexes/pets/documents", {"documents": [doc]},
                                          headers={"X-API-Key": KEY})
            assert status == 200 and body["generation"] == n and body["documents"] == 60 + n
        time.sleep(1.0)
        expected = set(BM25().fit(DOCS[:70]).search("owls", k=200).ids)
        for _ in range(20):  # a second on, every worker answers from the last commit
            body = _search(server)
            assert body["generation"] == 10 and {r["id"] for r in body["results"]} == expected
        refused = server.request("POST", "/indexes/pets/delete", {"ids": ["d1"], "commit": False},
                                 headers={"X-API-Key": KEY})
        assert refused[0] == 409 and refused[1]["error"]["code"] == "pending_needs_one_worker"
        # a worker killed -9 is replaced; the service goes on answering from the last commit
        victim = server.kill_worker()
        deadline = time.monotonic() + 30
        while (victim in server.workers() or len(server.workers()) < 2) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert victim not in server.workers() and len(server.workers()) == 2
        for _ in range(10):
            assert _search(server)["generation"] == 10
    assert set(BM25.load(pets).ids) == {d["id"] for d in DOCS[:70]}


def test_two_services_on_one_folder_agree_on_every_generation(pets):
    first, second = ServedIndex(pets, shared=True, watch_s=0.05), ServedIndex(pets, shared=True, watch_s=0.05)
    try:
        for n, doc in enumerate(DOCS[60:66], start=1):
            handle = (first, second)[n % 2]  # alternate: each writer first catches up with the other
            assert handle.write(lambda index, doc=doc: {"added": index.add([doc]).n_docs})["generation"] == n
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and {first.generation, second.generation} != {6}:
            time.sleep(0.02)
        assert first.generation == second.generation == 6  # seen by the other within a second
        assert set(first.reader.ids) == set(second.reader.ids) == {d["id"] for d in DOCS[:66]}
        first.merge()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and second.generation != 7:
            time.sleep(0.02)
        assert second.generation == 7 and second.reader.n_segments == 1
    finally:
        first.close()
        second.close()


def test_a_process_opening_a_folder_waits_for_a_commit_in_progress(pets):
    sync = FolderSync(pets, "manifest.json")
    opened = []
    with sync.writing():
        opener = threading.Thread(target=lambda: opened.append(ServedIndex(pets, watch_s=0)))
        opener.start()
        time.sleep(0.3)
        assert not opened  # it waits for the commit to finish
        BM25.load(pets).add(DOCS[60:61]).commit()
    opener.join(10)
    assert opened and opened[0].reader.n_docs == 61  # and then reads it whole


@pytest.fixture
def sharded(tmp_path):
    ShardedIndex.build(DOCS, n_shards=3, out=tmp_path / "pets")
    return tmp_path / "pets"


def test_a_sharded_index_is_served_read_only_with_the_scores_of_one_index(sharded):
    client = TestClient(create_app([sharded], api_key=KEY), raise_server_exceptions=False)
    body = client.post("/indexes/pets/search", json={"query": "owls mice", "k": 20}).json()
    reference = BM25().fit(DOCS).search("owls mice", k=20)
    assert [r["score"] for r in body["results"]] == pytest.approx(reference.values.tolist(), rel=1e-6)
    assert body["results"][0]["document"]["text"] == BM25().fit(DOCS).document(reference.ids[0])["text"]
    assert client.get("/health").json()["indexes"][0]["kind"] == "sharded"
    added = client.post("/indexes/pets/documents", json={"documents": [{"id": "x", "text": "y"}]},
                        headers={"X-API-Key": KEY})
    assert added.status_code == 409 and added.json()["error"]["code"] == "read_only"


def test_a_dead_shard_is_an_error_or_a_flagged_partial_answer(sharded):
    app = create_app([sharded], api_key=KEY)
    client = TestClient(app, raise_server_exceptions=False)
    engine = app.state.indexes["pets"].reader

    class ActorDiedError(Exception):  # what Ray raises for an actor that died
        pass

    def dead(*args, **kwargs):
        raise ActorDiedError("the actor died")

    engine._shards[1].submit = dead
    health = client.get("/health")  # not "ok" while a shard is dead
    assert health.status_code == 503 and health.json()["status"] == "stale"
    assert "shard 1 of 3 did not answer" in health.json()["indexes"][0]["error"]
    failed = client.post("/indexes/pets/search", json={"query": "owls mice", "k": 20})
    assert failed.status_code == 503
    error = failed.json()["error"]
    assert error["code"] == "shard_unavailable" and "shard 1 of 3" in error["message"] and "Traceback" not in failed.text
    partial = client.post("/indexes/pets/search", json={"query": "owls mice", "k": 20, "allow_partial": True}).json()
    assert partial["partial"] is True and partial["missing_shards"] == [1]
    ids = [r["id"] for r in partial["results"]]
    assert ids and all(shard_of(i, 3) != 1 for i in ids)
    # the best of the documents the other shards hold, with the whole collection's scores
    reference = BM25().fit(DOCS).search("owls mice", k=200)
    kept = [(i, v) for i, v in zip(reference.ids, reference.values) if shard_of(i, 3) != 1][:20]
    assert [r["score"] for r in partial["results"]] == pytest.approx([v for _, v in kept], rel=1e-6)
    cut = kept[-1][1]
    assert {i for i, v in kept if v > cut * (1 + 1e-6)} <= set(ids)
    del engine._shards[1].submit  # the shard back: a whole answer, flagged as such
    whole = client.post("/indexes/pets/search", json={"query": "owls", "allow_partial": True}).json()
    assert whole["partial"] is False and whole["missing_shards"] == []
    assert client.get("/health").json()["status"] == "ok"


def test_allow_partial_is_for_sharded_indexes(pets):
    client = TestClient(create_app([pets]), raise_server_exceptions=False)
    response = client.post("/indexes/pets/search", json={"query": "owls", "allow_partial": True})
    assert response.status_code == 422 and response.json()["error"]["field"] == "allow_partial"
