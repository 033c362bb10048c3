"""``salience serve`` as a process: the guide's curl examples, the page in headless Chromium,
and kill -9 of the server and of the index commands with small counts; ``bench/service.py``
runs the same campaign at full size (process pools' workers and a killed parent:
tests/test_data_safety.py)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from salience.search import BM25

from .conftest import DOCS, KEY

pytest.importorskip("fastapi", reason="the HTTP service needs salience[server] (FastAPI)")
pytest.importorskip("uvicorn", reason="salience serve needs salience[server] (uvicorn)")

from salience.server.live import LiveServer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "service.md"


def _campaign():
    sys.path.insert(0, str(ROOT / "bench"))
    import service

    return service


@pytest.fixture
def server(index_dir, key_file):
    with LiveServer([index_dir], api_key_file=key_file) as live:
        yield live


def _curl_commands(text: str) -> list[str]:
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for command in block.replace("\\\n", " ").splitlines():
            if command.startswith("curl "):
                commands.append(command)
    return commands


@pytest.mark.skipif(shutil.which("curl") is None, reason="the guide's examples use curl, which is not installed")
def test_the_guides_curl_examples_answer(server, index_dir):
    commands = _curl_commands(GUIDE.read_text(encoding="utf-8"))
    assert len(commands) >= 14
    for command in commands:
        line = command.replace("127.0.0.1:8080", f"127.0.0.1:{server.port}")
        done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, env={**os.environ, "KEY": KEY},
                              timeout=60)
        assert done.returncode == 0, f"{command}\n{done.stderr}"
        expected = re.search(r"# expect (\d+)", command)
        if expected:
            assert done.stdout.strip() == expected.group(1), command
            continue
        answer = json.loads(done.stdout)
        assert "error" not in answer, f"{command}\n{answer}"
    # the guide's writes add an owl, stage its deletion, commit and merge: the pets are as before
    assert sorted(BM25.load(index_dir).ids) == sorted(d["id"] for d in DOCS)


def _chromium() -> str | None:
    return next((path for name in ("chromium", "chromium-browser", "google-chrome") if (path := shutil.which(name))),
                None)


@pytest.mark.skipif(_chromium() is None, reason="no Chromium here (CI installs Debian's chromium: apt-get install -y chromium)")
def test_the_page_in_headless_chromium(server, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="the browser tests drive Chromium with playwright")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_chromium(), headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            outside = []
            page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(server.url) else None)
            page.goto(server.url + "/")
            page.wait_for_selector("#index option", state="attached")
            # keyboard only: Tab to the query box, type, Enter
            for _ in range(10):
                page.keyboard.press("Tab")
                if page.evaluate("document.activeElement.id") == "query":
                    break
            assert page.evaluate("document.activeElement.id") == "query"
            page.keyboard.type("cats hunting")
            page.keyboard.press("Enter")
            page.wait_for_selector("#results li")
            first = page.locator("#results li").first
            assert first.locator(".title").inner_text() == "Cats at home"
            assert first.locator(".snippet mark").all_inner_texts() == ["Cats", "hunt"]
            assert "2 results" in page.inner_text("#search-status")
            page.screenshot(path=str(tmp_path / "search.png"), full_page=True)
            page.fill("#filter", "year=2005")
            page.press("#filter", "Enter")
            page.wait_for_function("document.querySelectorAll('#results li').length === 1")
            assert page.locator("#results li .title").inner_text() == "Mice"
            page.fill("#filter", "year")
            page.press("#filter", "Enter")
            page.wait_for_selector("#search-status.error")
            text = ("Graph kernels compare graphs by counting shared substructures. The weather was mild today. "
                    "Random walk kernels are one family of graph kernels. Graph kernels classify molecules.")
            page.fill("#text", text)
            page.fill("#sentences", "2")
            page.click("#text-form button")
            page.wait_for_selector("#keyphrases li")
            assert any("graph" in chip.lower() for chip in page.locator("#keyphrases li").all_inner_texts())
            assert page.locator("#sentences-view .chosen").count() == 2
            assert page.inner_text("#sentences-view") == text
            page.screenshot(path=str(tmp_path / "text.png"), full_page=True)
            narrow = browser.new_page(viewport={"width": 360, "height": 740})
            narrow.goto(server.url + "/")
            narrow.fill("#query", "mice")
            narrow.press("#query", "Enter")
            narrow.wait_for_selector("#results li")
            assert narrow.evaluate("document.documentElement.scrollWidth") <= 360  # no sideways scrolling
            narrow.screenshot(path=str(tmp_path / "narrow.png"), full_page=True)
            assert outside == []  # nothing loaded from anywhere else
        finally:
            browser.close()
    assert all((tmp_path / name).stat().st_size > 5000 for name in ("search.png", "text.png", "narrow.png"))


@pytest.mark.skipif(_chromium() is None, reason="no Chromium here (CI installs Debian's chromium: apt-get install -y chromium)")
def test_the_answer_with_its_cited_passages_in_headless_chromium(index_dir, tmp_path):
    """A service with --lm shows the answer section; the answer comes with its cited passages, the
    sentences the answer read most marked; a service without a model does not offer it."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="the browser tests drive Chromium with playwright")
    pytest.importorskip("torch")
    from tests.models.tiny import save_tiny_lm

    folder = save_tiny_lm(tmp_path / "tiny-lm")
    with LiveServer([index_dir], options=["--lm", str(folder)]) as live, sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_chromium(), headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(live.url + "/")
            page.wait_for_selector("#answer-section", state="visible")
            page.fill("#question", "cats hunting")
            page.fill("#answer-budget", "200")
            page.press("#question", "Enter")
            page.wait_for_selector("#citations li")
            status = page.inner_text("#answer-status")
            assert "cited of" in status and str(folder) in status
            assert page.inner_text("#answer-verification").startswith("Log-probability drop without the cited passages")
            first = page.locator("#citations li").first
            assert first.locator(".snippet mark").count() >= 1  # the cited sentences are marked
            cited = first.locator(".meta").inner_text().split(" ·")[0]
            assert cited in {"cats", "mice", "dogs", "fish", "birds"}
            page.screenshot(path=str(tmp_path / "answer.png"), full_page=True)
            page.fill("#answer-budget", "1")
            page.press("#question", "Enter")
            page.wait_for_selector("#answer-status.error")
            assert "holds no passage" in page.inner_text("#answer-status")
        finally:
            browser.close()
    with LiveServer([index_dir]) as plain, sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_chromium(), headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(plain.url + "/")
            page.wait_for_selector("#index option", state="attached")
            page.wait_for_timeout(300)
            assert not page.locator("#answer-section").is_visible()
        finally:
            browser.close()
    assert (tmp_path / "answer.png").stat().st_size > 5000


def _pets(index_dir):
    documents = {d["id"]: {k: v for k, v in d.items() if k != "year"} for d in DOCS}
    return index_dir, documents, ["cats", "mice hunt", "clean water", "dogs bark", "kill cells"]


def test_kill_9_of_the_server_leaves_the_last_committed_index(index_dir):
    path, documents, queries = _pets(index_dir)
    result = _campaign().kill_server_runs(path, documents, queries, runs=2, seed=1)
    assert result["failures"] == [] and result["ok"] == 2


@pytest.mark.parametrize("command", ["add", "merge"])
def test_kill_9_of_add_and_merge_leaves_the_old_or_the_new_index(index_dir, command):
    path, documents, queries = _pets(index_dir)
    result = _campaign().kill_cli_runs(path, documents, queries, runs=2, command=command, seed=2, size=300)
    assert result["failures"] == [] and result["ok"] == 2
