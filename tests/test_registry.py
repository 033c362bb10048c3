"""A method added from outside the package is reached everywhere the registry is read: the
library's dispatch, ``salience methods``, the CLI's choices and the service's ``/methods``."""

import json

import numpy as np
import pytest

from salience import Scores
from salience.core import base
from salience.core.base import create, register_method
from salience.core.params import Interval
from salience.exceptions import InvalidParameterError
from salience.search.rerank import RerankAlgorithm, rerank


@pytest.fixture
def toy_rerank():
    """A rerank algorithm registered for one test: the lowest judge score first, the order
    rotated left by ``every - 2`` places (a toy; what matters is where it shows up)."""
    saved = dict(base._REGISTRY["rerank"])

    @register_method("rerank", "toy", "a toy algorithm registered by a test")
    class Toy(RerankAlgorithm):
        accepts = ("scores",)
        _parameter_constraints = {"every": [Interval("int", 1)]}

        def __init__(self, *, every: int = 2):
            self.every = every
            super().__init__()

        def order(self, query, head, judge, texts) -> list:
            lookup = texts if callable(texts) else texts.__getitem__
            values = judge.scores(query, [lookup(i) for i in head.ids])
            order = [head.ids[i] for i in np.argsort(values, kind="stable")]  # the lowest first
            turn = (self.every - 2) % len(order)
            return order[turn:] + order[:turn]

    yield Toy
    base._REGISTRY["rerank"].clear()
    base._REGISTRY["rerank"].update(saved)


class _Length:
    method = "length"

    def scores(self, query, passages):
        return np.array([float(len(p)) for p in passages])


def test_a_method_registered_outside_the_package_is_reached_everywhere(toy_rerank, capsys):
    from salience.cli import build_parser, main

    first = Scores([3.0, 2.0, 1.0], ids=["a", "bbb", "cc"])
    texts = {"a": "a", "bbb": "bbb", "cc": "cc"}
    assert rerank("q", first, _Length(), texts, algorithm="toy").ranked_ids() == ["a", "cc", "bbb"]
    assert create("rerank", "toy", every=3).get_params() == {"every": 3}
    with pytest.raises(InvalidParameterError, match="every must be a positive integer"):
        create("rerank", "toy", every=0)
    assert main(["methods", "--domain", "rerank", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["methods"]}
    assert rows["toy"]["params"] == {"every": 2} and rows["toy"]["class"] == "Toy"
    args = build_parser().parse_args(["search", "rerank", "run.trec", "--index", "i", "--queries", "q",
                                      "--algorithm", "toy", "--out", "o.trec"])
    assert args.algorithm == "toy"


def test_the_service_lists_a_registered_method(toy_rerank):
    pytest.importorskip("fastapi", reason="the HTTP service needs salience[server] (FastAPI)")
    from fastapi.testclient import TestClient

    from salience.server.app import create_app

    with TestClient(create_app([])) as client:
        names = [m["name"] for m in client.get("/methods", params={"domain": "rerank"}).json()["methods"]]
    assert "toy" in names


# ---- a newcomer's two methods, each one class with a new parameter, set from the shell and over HTTP

def test_a_new_rerank_parameter_is_set_from_the_cli_and_over_http(toy_rerank, tmp_path, capsys):
    """``--param every=3`` and ``{"algorithm": "toy", "params": {"every": 3}}`` reach the toy
    algorithm with no edit to the command or the service: each order equals the library's."""
    pytest.importorskip("torch")
    pytest.importorskip("fastapi", reason="the HTTP service needs salience[server] (FastAPI)")
    from fastapi.testclient import TestClient

    from salience.cli import main
    from salience.core.run import Run
    from salience.search import BM25
    from salience.server.app import create_app
    from tests.models.tiny import save_tiny_lm, tiny_lm

    docs = {"d1": "cats sleep", "d2": "dogs bark", "d3": "fish swim", "d4": "cats"}
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in docs.items()))
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "cats"}) + "\n")
    assert main(["search", "index", str(corpus), "--out", str(tmp_path / "index"), "--quiet"]) == 0
    Run({"q1": {"d1": 4.0, "d2": 3.0, "d3": 2.0, "d4": 1.0}}).write_trec(tmp_path / "first.trec")
    folder = save_tiny_lm(tmp_path / "lm")
    command = ["search", "rerank", str(tmp_path / "first.trec"), "--index", str(tmp_path / "index"), "--queries",
               str(tmp_path / "queries.jsonl"), "--model", str(folder), "--judge", "pointwise", "--algorithm", "toy",
               "--out", str(tmp_path / "reranked.trec"), "--quiet"]
    model, tokenizer = tiny_lm()
    judge = create("judge", "pointwise", model=model, tokenizer=tokenizer)
    first = Scores([4.0, 3.0, 2.0, 1.0], ids=list(docs))
    orders = {}
    for every in (2, 3):
        assert main(command + ["--param", f"every={every}"]) == 0
        orders[every] = Run.read_trec(tmp_path / "reranked.trec")["q1"].ranked_ids()
        assert orders[every] == rerank("cats", first, judge, docs, algorithm=create("rerank", "toy", every=every),
                                       depth=20).ranked_ids()
    assert orders[3] == orders[2][1:] + orders[2][:1]
    capsys.readouterr()
    assert main(command + ["--param", "every=0"]) == 2
    assert "every must be a positive integer" in capsys.readouterr().err

    BM25().index([{"id": k, "text": v} for k, v in docs.items()]).save(tmp_path / "pets")
    client = TestClient(create_app([tmp_path / "pets"]), raise_server_exceptions=False)
    passages = [{"id": k, "text": v} for k, v in docs.items()]
    index = BM25.load(tmp_path / "pets")

    class Bm25Judge:
        method = "bm25"

        def scores(self, query, texts):
            return index.score_texts(query, texts)

    for every in (2, 3):
        reply = client.post("/rerank", json={"query": "cats", "passages": passages, "algorithm": "toy",
                                             "params": {"every": every}})
        assert reply.status_code == 200, reply.text
        want = rerank("cats", first, Bm25Judge(), docs, algorithm=create("rerank", "toy", every=every), depth=20)
        assert [r["id"] for r in reply.json()["results"]] == want.ranked_ids()
    bad = client.post("/rerank", json={"query": "cats", "passages": passages, "algorithm": "toy", "params": {"every": 0}})
    assert bad.status_code == 400 and "every must be a positive integer" in bad.json()["error"]["message"]
    unknown = client.post("/rerank", json={"query": "cats", "passages": passages, "algorithm": "toy",
                                           "params": {"evry": 3}})
    assert unknown.status_code == 400 and "'evry'" in unknown.json()["error"]["message"]


@pytest.fixture
def toy_kv():
    """A KV-cache policy registered for one test: keeps the most recent tokens, and records the
    ``marker`` it was built with each time it scores a layer (so a test sees what reached it)."""
    pytest.importorskip("torch")
    from salience.compress.kv.policy import KVPolicy

    saved = dict(base._REGISTRY["kv"])
    seen = []

    @register_method("kv", "toy_recent", "a toy policy registered by a test")
    class ToyRecent(KVPolicy):
        _parameter_constraints = {"marker": [Interval("int", 0)]}

        def __init__(self, *, marker: int = 0):
            self.marker = marker
            super().__init__()

        def _scores(self, keys, values, queries, scaling, n):
            import torch

            seen.append(self.marker)
            b, n_kv = keys.shape[:2]
            return torch.arange(n, dtype=torch.float32).expand(b, n_kv, n).clone()

    yield seen
    base._REGISTRY["kv"].clear()
    base._REGISTRY["kv"].update(saved)


def test_a_new_kv_policy_parameter_is_set_from_the_cli_and_over_http(toy_kv, tmp_path, capsys):
    pytest.importorskip("fastapi", reason="the HTTP service needs salience[server] (FastAPI)")
    from fastapi.testclient import TestClient

    from salience.cli import main
    from salience.search import BM25
    from salience.server.app import create_app
    from tests.models.tiny import WORDS, save_tiny_lm

    folder = save_tiny_lm(tmp_path / "lm")
    rng = np.random.default_rng(0)
    text = tmp_path / "text.txt"
    text.write_text(" ".join(rng.choice(WORDS[1:], 120)))
    command = ["compress", "kv-eval", str(folder), "--data", str(text), "--context", "40", "--continuation", "10",
               "--policy", "toy_recent", "--budget", "0.5", "--json"]
    assert main(command + ["--param", "marker=7"]) == 0
    assert json.loads(capsys.readouterr().out)["kept"] == 20
    assert toy_kv and set(toy_kv) == {7}
    assert main(command + ["--param", "marker=-1"]) == 2
    assert "marker must be a non-negative integer" in capsys.readouterr().err

    toy_kv.clear()
    BM25().index([{"id": "a", "text": "cats sleep ."}, {"id": "b", "text": "dogs bark ."}]).save(tmp_path / "pets")
    client = TestClient(create_app([tmp_path / "pets"], lm=str(folder)), raise_server_exceptions=False)
    request = {"index": "pets", "question": "cats", "max_new_tokens": 2, "cite": None, "kv_policy": "toy_recent",
               "kv_budget": 0.5, "params": {"kv_policy": {"marker": 9}}}
    reply = client.post("/answer", json=request)
    assert reply.status_code == 200, reply.text
    assert toy_kv and set(toy_kv) == {9}
    bad = client.post("/answer", json={**request, "params": {"kv_policy": {"marker": "nine"}}})
    assert bad.status_code == 400 and "marker" in bad.json()["error"]["message"]
    unnamed = client.post("/answer", json={**request, "kv_policy": None, "kv_budget": None})
    assert unnamed.status_code == 400 and "params.kv_policy set, but kv_policy is not" in unnamed.json()["error"]["message"]
