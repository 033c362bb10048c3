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
    """A rerank algorithm registered for one test: the judge's scores, reversed every ``every``
    passages (a toy; what matters is where it shows up)."""
    saved = dict(base._REGISTRY["rerank"])

    @register_method("rerank", "toy", "a toy algorithm registered by a test")
    class Toy(RerankAlgorithm):
        accepts = ("scores",)
        _parameter_constraints = {"every": [Interval("int", 1)]}

        def __init__(self, *, every: int = 2):
            self.every = every
            super().__init__()

        def order(self, query, head, judge, texts) -> list:
            values = judge.scores(query, [texts[i] for i in head.ids])
            return [head.ids[i] for i in np.argsort(values, kind="stable")]  # the lowest first

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
