"""Nothing lost on the newer surface (issue 50), the service's cases: documents with line
separators written over HTTP and read by a restart and by a second worker, /health when a worker
is behind, workers that outlive a killed supervisor, ports, the API key before the body, messages
that name commands that exist. Each test failed before its fix."""

import pytest

from salience.cli import main
from salience.search import BM25
from tests.test_new_surface import PLAIN, TRICKY


def test_separators_through_the_service_a_restart_and_a_second_process(tmp_path):
    pytest.importorskip("fastapi", reason="the HTTP service needs salience[server] (FastAPI)")
    pytest.importorskip("httpx", reason="FastAPI's test client needs httpx")
    from fastapi.testclient import TestClient

    from salience.server.app import create_app
    from salience.server.indexes import ServedIndex

    BM25().index(PLAIN).save(tmp_path / "pets")
    other = ServedIndex(tmp_path / "pets", shared=True, watch_s=0.05)  # a second worker on the folder
    try:
        client = TestClient(create_app([tmp_path / "pets"], api_key="k" * 20, shared=True), raise_server_exceptions=False)
        answer = client.post("/indexes/pets/documents", json={"documents": TRICKY}, headers={"X-API-Key": "k" * 20})
        assert answer.status_code == 200, answer.text
        restarted = TestClient(create_app([tmp_path / "pets"]), raise_server_exceptions=False)
        body = restarted.post("/indexes/pets/search", json={"query": "routing", "k": 5}).json()
        assert {r["id"] for r in body["results"]} == {"sep0", "sep1", "sep2"}
        assert body["results"][0]["document"]["text"] in {d["text"] for d in TRICKY}
        import time

        deadline = time.monotonic() + 5
        while other.generation != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert other.generation == 1 and other.reader.n_docs == 5  # the other worker reopened it
    finally:
        other.close()


def test_health_says_when_a_worker_could_not_reopen_a_commit(tmp_path, monkeypatch):
    """No split brain: a process that keeps answering an older generation says so on /health."""
    pytest.importorskip("fastapi", reason="the HTTP service needs salience[server] (FastAPI)")
    pytest.importorskip("httpx", reason="FastAPI's test client needs httpx")
    import time

    from fastapi.testclient import TestClient

    from salience.server.app import create_app

    BM25().index(PLAIN).save(tmp_path / "pets")
    client = TestClient(create_app([tmp_path / "pets"], shared=True, watch_s=0.05), raise_server_exceptions=False)
    assert client.get("/health").status_code == 200
    handle = client.app.state.indexes["pets"]
    monkeypatch.setattr(type(handle.reader), "reopen", lambda self: (_ for _ in ()).throw(OSError("disk said no")))
    BM25.load(tmp_path / "pets").add([{"id": "c", "text": "c"}]).commit()  # another process commits
    handle._sync.set_generation(1)
    deadline = time.monotonic() + 5
    while "error" not in handle.describe() and time.monotonic() < deadline:
        time.sleep(0.02)
    health = client.get("/health")
    assert health.status_code == 503 and health.json()["status"] == "stale"
    row = health.json()["indexes"][0]
    assert row["generation"] == 0 and "disk said no" in row["error"] and "generation 1" in row["error"]
    monkeypatch.undo()
    deadline = time.monotonic() + 5
    while "error" in handle.describe() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert client.get("/health").json()["status"] == "ok" and handle.generation == 1


def test_separators_written_over_http_reach_both_workers(tmp_path):
    pytest.importorskip("fastapi", reason="the HTTP service needs salience[server] (FastAPI)")
    import time

    from salience.server.live import LiveServer

    BM25().index(PLAIN).save(tmp_path / "pets")
    (tmp_path / "key").write_text("k" * 20)
    with LiveServer([tmp_path / "pets"], api_key_file=tmp_path / "key", options=["--workers", "2"]) as server:
        status, body = server.request("POST", "/indexes/pets/documents", {"documents": TRICKY},
                                      headers={"X-API-Key": "k" * 20})
        assert status == 200 and body["generation"] == 1, body
        deadline = time.monotonic() + 20
        seen: dict[int, int] = {}
        while len(seen) < 2 and time.monotonic() < deadline:  # both workers, each at generation 1
            status, health = server.request("GET", "/health")
            assert status == 200, health  # never a worker stuck on the old generation
            if health["indexes"][0]["generation"] == 1:
                seen[health["process"]] = 1
        assert len(seen) == 2
        status, found = server.request("POST", "/indexes/pets/search", {"query": "routing", "k": 5})
        assert {r["id"] for r in found["results"]} == {"sep0", "sep1", "sep2"}
    assert [BM25.load(tmp_path / "pets").document(d["id"])["text"] for d in TRICKY] == [d["text"] for d in TRICKY]


def test_workers_exit_when_serve_is_killed(tmp_path):
    pytest.importorskip("fastapi", reason="the HTTP service needs salience[server] (FastAPI)")
    import os
    import signal
    import socket
    import time

    from salience.server.live import LiveServer

    BM25().index(PLAIN).save(tmp_path / "pets")
    server = LiveServer([tmp_path / "pets"], options=["--workers", "2"]).start()
    try:
        deadline = time.monotonic() + 30
        while len(server.workers()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = server.workers()
        assert len(workers) == 2
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(10)
        deadline = time.monotonic() + 20
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(pid) for pid in workers)
        with socket.socket() as sock:  # the port is free for a restart
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", server.port))
    finally:
        for pid in server.workers():
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_serve_refuses_ports_out_of_range(tmp_path, capsys):
    pytest.importorskip("fastapi", reason="the HTTP service needs salience[server] (FastAPI)")
    BM25().index(PLAIN).save(tmp_path / "pets")
    for port in ("70000", "-1", "0"):
        assert main(["serve", str(tmp_path / "pets"), "--port", port, "--quiet"]) == 2
        assert f"port must be a TCP port, 1 to 65535; got {int(port)}" in capsys.readouterr().err


def test_a_write_without_the_key_is_told_so_before_its_body_is_read(tmp_path):
    pytest.importorskip("fastapi", reason="the HTTP service needs salience[server] (FastAPI)")
    pytest.importorskip("httpx", reason="FastAPI's test client needs httpx")
    from fastapi.testclient import TestClient

    from salience.server.app import create_app

    BM25().index(PLAIN).save(tmp_path / "pets")
    client = TestClient(create_app([tmp_path / "pets"], api_key="k" * 20), raise_server_exceptions=False)
    for path in ("/indexes/pets/documents", "/indexes/pets/delete", "/indexes/pets/commit", "/indexes/pets/merge"):
        answer = client.post(path, content=b"{not json", headers={"Content-Type": "application/json"})
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "missing_api_key", (path, answer.text)
        wrong = client.post(path, content=b"\xff\xfe", headers={"X-API-Key": "nope"})
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "wrong_api_key"
    with_key = client.post("/indexes/pets/documents", content=b"{not json", headers={"X-API-Key": "k" * 20,
                                                                                    "Content-Type": "application/json"})
    assert with_key.status_code == 400 and with_key.json()["error"]["code"] == "invalid_json"
    off = TestClient(create_app([tmp_path / "pets"]), raise_server_exceptions=False)
    assert off.post("/indexes/pets/documents", content=b"{not json").status_code == 403
    assert client.post("/indexes/pets/search", json={"query": "heat"}).status_code == 200  # reads need no key


def test_a_sharded_index_refuses_writes_naming_commands_that_exist(tmp_path):
    pytest.importorskip("fastapi", reason="the HTTP service needs salience[server] (FastAPI)")
    pytest.importorskip("httpx", reason="FastAPI's test client needs httpx")
    from fastapi.testclient import TestClient

    from salience.cli import build_parser
    from salience.search.shards import ShardedIndex
    from salience.server.app import create_app

    ShardedIndex.build([{"id": f"d{i}", "text": f"heat {i}"} for i in range(20)], n_shards=2, out=tmp_path / "sh")
    client = TestClient(create_app([tmp_path / "sh"], api_key="k" * 20), raise_server_exceptions=False)
    answer = client.post("/indexes/sh/documents", json={"documents": [{"id": "x", "text": "y"}]},
                         headers={"X-API-Key": "k" * 20})
    assert answer.status_code == 409
    message = answer.json()["error"]["message"]
    search_commands = next(a for a in build_parser()._subparsers._group_actions[0].choices["search"]._actions
                           if hasattr(a, "choices") and isinstance(a.choices, dict)).choices
    named = [word for word in message.replace(",", " ").split() if word in ("add", "delete", "commit", "merge")]
    assert named and all(word in search_commands for word in named), message
