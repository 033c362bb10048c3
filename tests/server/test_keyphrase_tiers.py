import pytest

fastapi = pytest.importorskip("fastapi", reason="the HTTP service needs salience[server] (FastAPI)")
pytest.importorskip("httpx", reason="FastAPI's test client needs httpx")
from fastapi.testclient import TestClient  # noqa: E402

from salience.keywords import extract_keyphrases  # noqa: E402
from salience.keywords.tiers import TIERS  # noqa: E402
from salience.server.app import create_app  # noqa: E402

TEXT = ("Graph kernels compare graphs by counting shared substructures. Random walks give one family of "
        "kernels. The weather was mild. Graph kernels power molecule classification.")


def test_keyphrases_over_http_take_a_tier_as_the_library_does():
    client = TestClient(create_app(), raise_server_exceptions=False)
    body = client.post("/keyphrases", json={"text": TEXT, "k": 3, "tier": "best"}).json()
    assert body["method"] == TIERS["best"][0] and body["tier"] == "best"
    assert [p["phrase"] for p in body["keyphrases"]] == extract_keyphrases(TEXT, k=3, tier="best").ids
    both = client.post("/keyphrases", json={"text": TEXT, "tier": "best", "method": "rake"})
    assert both.status_code == 400 and "not both" in both.text
    unknown = client.post("/keyphrases", json={"text": TEXT, "tier": "slow"})
    assert unknown.status_code == 400 and "unknown tier" in unknown.text
