"""Reliability campaign of ``salience serve`` (issue 15), on 127.0.0.1 only, bounded in count
and time; the tests run the same functions with small counts.

* load: ``--clients`` concurrent keep-alive clients for ``--seconds`` of mixed requests against
  SciFact (BM25 top-10 searches, top-100, with ``explain``, with a metadata filter, an explain
  of one document); 0 errors wanted, latency percentiles and requests/s reported. Then the
  same with a writer adding and deleting documents, where every answer to the writer's marker
  query is checked against the committed state of the generation it reports.
* kill -9 of the server while a client writes, and of ``salience search add`` and
  ``salience search merge``, at random moments: afterwards the index loads with its checksums
  verified, holds the documents of the last acknowledged commit (or of the one in flight),
  answers as a fresh index of those documents does, and the next start leaves no temporaries.
* orphans: the parent of a process pool (``map_shards`` with 2 workers) is killed with -9;
  no worker may be left 3 s later (checked in /proc by an environment marker).

    python bench/service.py --write BENCHMARKS.md
    python bench/service.py --clients 10 --seconds 5 --kills 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from salience.search import BM25  # noqa: E402
from salience.server.live import LiveServer  # noqa: E402

SCIFACT = ROOT.parent / "shared" / "data" / "search" / "scifact"
KEY = "campaign-key-0123456789"
MARKER = "zqxmarker"


# ------------------------------------------------------------------------------------------
# load
async def _http(reader, writer, method: str, path: str, body: bytes, headers: str = "") -> tuple[int, bytes]:
    """One HTTP/1.1 request on a kept-alive connection: (status, body)."""
    writer.write((f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n{headers}\r\n").encode() + body)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


def _expected_states(batches: int) -> dict[int, set[str]]:
    """The marker documents live after each commit of :func:`_write_batches` (generation -> ids)."""
    states, live, generation = {0: set()}, set(), 0
    for n in range(batches):
        live |= {f"{MARKER}-{n}-{i}" for i in range(5)}
        generation += 1
        states[generation] = set(live)
        if n >= 2:
            live -= {f"{MARKER}-{n - 2}-{i}" for i in range(5)}
            generation += 1
            states[generation] = set(live)
    return states


async def _write_batches(port: int, index: str, batches: int, stop_at: float, acknowledged: list,
                         commits: list | None = None) -> None:
    """Add a batch of 5 marker documents, then delete the batch before last, one commit each;
    ``commits`` gets (time acknowledged, generation) of each."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    auth = f"Authorization: Bearer {KEY}\r\n"
    try:
        for n in range(batches):
            if time.perf_counter() > stop_at:
                break
            docs = [{"id": f"{MARKER}-{n}-{i}", "text": f"{MARKER} batch {n} document {i}"} for i in range(5)]
            status, payload = await _http(reader, writer, "POST", f"/indexes/{index}/documents",
                                          json.dumps({"documents": docs}).encode(), auth)
            acknowledged.append(status)
            if status == 200 and commits is not None:
                commits.append((time.perf_counter(), json.loads(payload)["generation"]))
            if n >= 2:
                ids = [f"{MARKER}-{n - 2}-{i}" for i in range(5)]
                status, payload = await _http(reader, writer, "POST", f"/indexes/{index}/delete",
                                              json.dumps({"ids": ids}).encode(), auth)
                acknowledged.append(status)
                if status == 200 and commits is not None:
                    commits.append((time.perf_counter(), json.loads(payload)["generation"]))
            await asyncio.sleep(0.05)
    finally:
        writer.close()


def _requests(index: str, queries: list[str], doc_ids: list[str], rng: random.Random):
    """The mixed read requests: (label, path, body)."""
    while True:
        q = rng.choice(queries)
        roll = rng.random()
        if roll < 0.7:
            yield "search top-10", f"/indexes/{index}/search", {"query": q, "k": 10}
        elif roll < 0.8:
            yield "search top-100", f"/indexes/{index}/search", {"query": q, "k": 100}
        elif roll < 0.9:
            yield "search + explain", f"/indexes/{index}/search", {"query": q, "k": 10, "explain": True}
        else:
            yield "explain one document", f"/indexes/{index}/explain", {"query": q, "id": rng.choice(doc_ids)}


async def _load(port: int, index: str, queries: list[str], doc_ids: list[str], clients: int, seconds: float,
                writer_batches: int = 0) -> dict:
    latencies: dict[str, list[float]] = {}
    errors: list[str] = []
    inconsistent: list[dict] = []
    states = _expected_states(writer_batches) if writer_batches else {}
    acknowledged: list[int] = []
    commits: list[tuple[float, int]] = []
    marker_reads: list[tuple[float, int]] = []  # (sent, generation answered)
    stop_at = time.perf_counter() + seconds

    async def client(number: int) -> None:
        rng = random.Random(number)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        requests = _requests(index, queries, doc_ids, rng)
        try:
            while time.perf_counter() < stop_at:
                label, path, body = next(requests)
                if writer_batches and rng.random() < 0.1:
                    label, body = "marker search (consistency)", {"query": MARKER, "k": 1000}
                    path = f"/indexes/{index}/search"
                started = time.perf_counter()
                try:
                    status, payload = await _http(reader, writer, "POST", path, json.dumps(body).encode())
                except (OSError, asyncio.IncompleteReadError) as err:
                    errors.append(f"{label}: {type(err).__name__}")
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    continue
                latencies.setdefault(label, []).append(time.perf_counter() - started)
                if status != 200:
                    errors.append(f"{label}: HTTP {status} {payload[:200]!r}")
                elif label.startswith("marker"):
                    answer = json.loads(payload)
                    marker_reads.append((started, answer["generation"]))
                    ids = {r["id"] for r in answer["results"]}
                    if ids != states.get(answer["generation"]):
                        inconsistent.append({"generation": answer["generation"], "ids": sorted(ids)})
        finally:
            writer.close()

    tasks = [client(i) for i in range(clients)]
    if writer_batches:
        tasks.append(_write_batches(port, index, writer_batches, stop_at, acknowledged, commits))
    started = time.perf_counter()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    everything = np.concatenate([np.array(v) for v in latencies.values()]) * 1000
    top10 = np.array(latencies.get("search top-10", [np.nan])) * 1000
    return {"clients": clients, "seconds": elapsed, "requests": int(everything.size),
            "per_second": everything.size / elapsed, "errors": len(errors), "error_examples": errors[:5],
            "p50": float(np.percentile(everything, 50)), "p95": float(np.percentile(everything, 95)),
            "p99": float(np.percentile(everything, 99)), "top10_p50": float(np.nanpercentile(top10, 50)),
            "top10_p99": float(np.nanpercentile(top10, 99)),
            "writes": len(acknowledged), "write_errors": sum(s != 200 for s in acknowledged),
            "inconsistent": len(inconsistent), "inconsistent_examples": inconsistent[:3],
            **_staleness(commits, marker_reads),
            "by_kind": {k: (len(v), float(np.percentile(np.array(v) * 1000, 99))) for k, v in sorted(latencies.items())}}


def _staleness(commits: list[tuple[float, int]], reads: list[tuple[float, int]]) -> dict:
    """How old the state a read answered from was: for each marker read, how long before it was
    sent a newer commit had been acknowledged (0 if none); reads older than 1 s are stale."""
    if not commits:
        return {"stale_reads": 0, "max_staleness_s": 0.0}
    times = np.array([t for t, _ in commits])
    generations = np.array([g for _, g in commits])
    ages = []
    for sent, generation in reads:
        newer = (generations > generation) & (times < sent)
        ages.append(float(sent - times[newer].min()) if newer.any() else 0.0)
    return {"stale_reads": int(sum(a > 1.0 for a in ages)), "max_staleness_s": max(ages, default=0.0)}


def load_test(index_dir: Path, queries: list[str], *, clients: int, seconds: float, writer_batches: int = 0,
              options: tuple = ()) -> dict:
    """The load run on a copy of ``index_dir`` (the writer changes it)."""
    work = Path(tempfile.mkdtemp(prefix="load-"))
    try:
        path = work / index_dir.name
        shutil.copytree(index_dir, path)
        key_file = work / "campaign.key"
        key_file.write_text(KEY)
        doc_ids = BM25.load(path).ids[:2000]
        with LiveServer([path], api_key_file=key_file, options=options) as server:
            return asyncio.run(_load(server.port, path.name, queries, doc_ids, clients, seconds, writer_batches))
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ------------------------------------------------------------------------------------------
# kill -9
def _state(path: Path) -> tuple[set[str], BM25]:
    index = BM25.load(path, verify=True)  # checksums of every file
    return set(index.ids), index


def _answers_as_fresh(index: BM25, documents: dict[str, dict], queries: list[str]) -> bool:
    """Top-10 of each query equal (ids, scores to 1e-6) to a fresh index of the same documents."""
    fresh = BM25().index([documents[i] for i in index.ids])
    for q in queries:
        a, b = index.search(q, k=10), fresh.search(q, k=10)
        if a.ids != b.ids or not np.allclose(a.values, b.values, rtol=1e-6, atol=1e-9):
            return False
    return True


def _leftovers(path: Path) -> list[str]:
    """Temporaries in the index folder or beside it."""
    names = [p.name for p in path.iterdir() if p.name.startswith(".")]
    names += [p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.")]
    return names


def kill_server_runs(base: Path, documents: dict[str, dict], queries: list[str], runs: int, seed: int = 0,
                     options: tuple = ()) -> dict:
    """Start the server on a copy of ``base``, let a client add/delete batches, kill -9 the
    server at a random moment; check the index after each kill."""
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="kill-server-"))
    path = work / base.name
    shutil.copytree(base, path)
    key_file = work / "key"
    key_file.write_text(KEY)
    ok, failures = 0, []
    live = set(BM25.load(path).ids)
    extra: dict[str, dict] = {}
    try:
        for run in range(runs):
            server = LiveServer([path], api_key_file=key_file, options=options).start()
            if _leftovers(path):
                failures.append(f"run {run}: temporaries after start: {_leftovers(path)}")
            acked, in_flight = set(live), None
            deadline = time.monotonic() + rng.uniform(0.2, 1.5)
            n = 0

            def killer():
                time.sleep(max(0.0, deadline - time.monotonic()))
                server.kill()

            threading.Thread(target=killer, daemon=True).start()
            while server.process.poll() is None:
                n += 1
                if n % 2:
                    docs = [{"id": f"k{run}-{n}-{i}", "title": "", "text": f"kill run {run} write {n} text {i} cells"}
                            for i in range(20)]
                    for d in docs:
                        extra[d["id"]] = d
                    after = acked | {d["id"] for d in docs}
                    body, endpoint = {"documents": docs}, "documents"
                else:
                    victims = sorted(acked - set(documents))[:10] or sorted(acked)[:1]
                    after = acked - set(victims)
                    body, endpoint = {"ids": victims}, "delete"
                in_flight = after
                try:
                    status, _ = server.request("POST", f"/indexes/{path.name}/{endpoint}", body,
                                               headers={"X-API-Key": KEY}, timeout=10)
                except OSError:
                    break
                if status == 200:
                    acked, in_flight = after, None
            server.stop()
            ids, index = _state(path)
            allowed = [acked] + ([in_flight] if in_flight is not None else [])
            if ids not in allowed:
                failures.append(f"run {run}: {len(ids)} documents, expected {[len(a) for a in allowed]}")
            elif not _answers_as_fresh(index, {**documents, **extra}, queries):
                failures.append(f"run {run}: answers differ from a fresh index of the same documents")
            else:
                ok += 1
            live = ids
        server = LiveServer([path], api_key_file=key_file).start()  # the next start sweeps
        server.stop()
        if _leftovers(path):
            failures.append(f"temporaries after the last start: {_leftovers(path)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"runs": runs, "ok": ok, "failures": failures}


def kill_cli_runs(base: Path, documents: dict[str, dict], queries: list[str], runs: int, command: str,
                  seed: int = 0, size: int = 5_000) -> dict:
    """kill -9 of ``salience search add`` (a file of new documents) or ``salience search merge``
    at a random moment: the index must hold the old or the new state, loadable and checksummed."""
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix=f"kill-{command}-"))
    path = work / base.name
    shutil.copytree(base, path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ok, failures, killed = 0, [], 0
    extra: dict[str, dict] = {}

    def new_documents(run: int) -> Path:
        docs = [{"id": f"cli{run}-{i}", "title": "", "text": f"added by run {run} number {i} protein cells"}
                for i in range(size)]
        extra.update({d["id"]: d for d in docs})
        source = work / "new.jsonl"
        source.write_text("".join(json.dumps(d) + "\n" for d in docs))
        return source

    # how long one uninterrupted run takes (on a scratch copy): kills land across it
    scratch = work / "scratch" / base.name
    shutil.copytree(base, scratch)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "salience", "search", command, str(scratch),
                    *([str(new_documents(-1))] if command == "add" else []), "--quiet"],
                   env=env, check=True, capture_output=True)
    duration = time.perf_counter() - started
    shutil.rmtree(scratch.parent)
    try:
        for run in range(runs):
            before, _ = _state(path)
            if command == "add":
                source = new_documents(run)
                argv = ["search", "add", str(path), str(source), "--quiet"]
                after = before | {i for i in extra if i.startswith(f"cli{run}-")}
            else:
                if run % 2 == 0:  # something to merge: delete a few documents first (not killed)
                    victims = sorted(before)[:3]
                    subprocess.run([sys.executable, "-m", "salience", "search", "delete", str(path), *victims,
                                    "--quiet"], env=env, check=True, capture_output=True)
                    before = before - set(victims)
                argv = ["search", "merge", str(path), "--quiet"]
                after = before
            process = subprocess.Popen([sys.executable, "-m", "salience", *argv], env=env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.3, 1.05) * duration)  # start-up is the first third or so
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                killed += 1
            process.wait()
            ids, index = _state(path)
            if ids not in (before, after):
                failures.append(f"run {run}: {len(ids)} documents, expected {len(before)} or {len(after)}")
            elif not _answers_as_fresh(index, {**documents, **extra}, queries):
                failures.append(f"run {run}: answers differ from a fresh index of the same documents")
            else:
                ok += 1
        # the next writer sweeps what the killed ones left
        subprocess.run([sys.executable, "-m", "salience", "search", "merge", str(path), "--quiet"], env=env,
                       check=True, capture_output=True)
        if _leftovers(path):
            failures.append(f"temporaries after the next write: {_leftovers(path)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"runs": runs, "ok": ok, "killed mid-run": killed, "failures": failures, "seconds per run": duration}


# ------------------------------------------------------------------------------------------
# orphans
ORPHAN_SCRIPT = """
import sys, time
from salience.parallel import map_shards

def slow(x):
    time.sleep(60)
    return x

print("started", flush=True)
list(map_shards(slow, list(range(8)), n_jobs=2))
"""


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def orphan_runs(runs: int) -> dict:
    """kill -9 of a parent whose process pool is busy: its workers must be gone 3 s later."""
    left = []
    for _ in range(runs):
        marker = f"SALIENCE_ORPHAN_CHECK={uuid.uuid4().hex}"
        name, value = marker.split("=")
        env = {**os.environ, "PYTHONPATH": str(ROOT), name: value}
        parent = subprocess.Popen([sys.executable, "-c", ORPHAN_SCRIPT], env=env, stdout=subprocess.PIPE)
        parent.stdout.readline()
        deadline = time.monotonic() + 30
        while len(_processes_with(marker)) < 3 and time.monotonic() < deadline:  # parent + 2 workers
            time.sleep(0.1)
        workers = len(_processes_with(marker)) - 1
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        time.sleep(3)
        survivors = _processes_with(marker)
        left.append({"workers": workers, "left": len(survivors)})
        for pid in survivors:  # do not leave them running here either
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return {"runs": runs, "workers_started": sum(r["workers"] for r in left),
            "orphans": sum(r["left"] for r in left)}


# ------------------------------------------------------------------------------------------
# fuzzing
def fuzz_campaign() -> dict:
    """tests/test_fuzz.py under the ``campaign`` hypothesis profile (100,000 inputs in all), in a
    process of its own: the inputs each target ran and whether any raised a foreign error."""
    counts = Path(tempfile.mkstemp(suffix=".json")[1])
    env = {**os.environ, "SALIENCE_FUZZ_PROFILE": "campaign", "SALIENCE_FUZZ_COUNTS": str(counts)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "test_fuzz.py")],
                          env=env, capture_output=True, text=True, cwd=ROOT)
    ran = json.loads(counts.read_text() or "{}") if counts.stat().st_size else {}
    counts.unlink()
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    return {"inputs": ran, "total": sum(ran.values()), "failed": failed, "passed": done.returncode == 0,
            "seconds": time.perf_counter() - started, "tail": done.stdout[-1500:]}


# ------------------------------------------------------------------------------------------
def scifact(folder: Path) -> tuple[Path, list[str], dict[str, dict]]:
    corpus = [json.loads(line) for line in open(SCIFACT / "corpus.jsonl", encoding="utf-8")]
    documents = {d["_id"]: {"id": d["_id"], "title": d.get("title", ""), "text": d.get("text", "")} for d in corpus}
    queries = [json.loads(line)["text"] for line in open(SCIFACT / "queries.jsonl", encoding="utf-8")]
    path = folder / "scifact"
    BM25().index(list(documents.values())).save(path)
    return path, queries, documents


def run(args) -> dict:
    if not SCIFACT.exists():
        raise SystemExit(f"skipping: {SCIFACT} is absent (the shared evaluation data)")
    work = Path(tempfile.mkdtemp(prefix="service-bench-"))
    try:
        path, queries, documents = scifact(work)
        result = {"documents": len(documents), "queries": len(queries)}
        print("load ...", file=sys.stderr, flush=True)
        result["load"] = load_test(path, queries, clients=args.clients, seconds=args.seconds)
        print(f"  {result['load']}", file=sys.stderr, flush=True)
        result["load_writer"] = load_test(path, queries, clients=args.clients, seconds=args.seconds,
                                          writer_batches=100_000)
        print(f"  {result['load_writer']}", file=sys.stderr, flush=True)
        checks = queries[:20]
        result["kill_server"] = kill_server_runs(path, documents, checks, args.kills)
        print(f"  kill server {result['kill_server']}", file=sys.stderr, flush=True)
        result["kill_add"] = kill_cli_runs(path, documents, checks, args.kills, "add")
        print(f"  kill add {result['kill_add']}", file=sys.stderr, flush=True)
        result["kill_merge"] = kill_cli_runs(path, documents, checks, args.kills, "merge")
        print(f"  kill merge {result['kill_merge']}", file=sys.stderr, flush=True)
        result["orphans"] = orphan_runs(args.orphan_runs)
        print(f"  orphans {result['orphans']}", file=sys.stderr, flush=True)
        result["fuzz"] = fuzz_campaign()
        print(f"  fuzz {result['fuzz']['inputs']} passed {result['fuzz']['passed']}", file=sys.stderr, flush=True)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def render(result: dict, command: str, seconds: float) -> str:
    import fastapi
    import uvicorn

    lines = ["## The service under load and kill -9 (`bench/service.py`)", "", f"Command: `{command}`", "",
             f"`salience serve` (FastAPI {fastapi.__version__}, uvicorn {uvicorn.__version__}, one process) on "
             f"127.0.0.1 with SciFact's {result['documents']:,} documents (BM25, stored documents); clients in a "
             "second process on the same 2 cores: asyncio keep-alive connections, each sending its next request "
             "when the last is answered (no think time). Mixed requests: 70% BM25 top-10 searches over SciFact's "
             f"{result['queries']:,} queries, 10% top-100, 10% top-10 with explain (term contributions and "
             "highlights), 10% explain of one document. Latency: from sending a request to reading the whole "
             "answer. Targets (issue 15): 0 errors, p99 <= 100 ms for BM25 top-10.", "",
             "| run | clients | s | requests | requests/s | errors | p50 ms | p95 ms | p99 ms | top-10 p99 ms | "
             "writes (failed) | inconsistent reads |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, key in (("reads", "load"), ("reads + a writer adding and deleting", "load_writer")):
        r = result[key]
        lines.append(f"| {label} | {r['clients']} | {r['seconds']:.0f} | {r['requests']:,} | {r['per_second']:,.0f} | "
                     f"{r['errors']} | {r['p50']:.1f} | {r['p95']:.1f} | {r['p99']:.1f} | {r['top10_p99']:.1f} | "
                     f"{r['writes']} ({r['write_errors']}) | {r['inconsistent']} |")
    lines += ["", "With the writer, 10% of reads are the writer's marker query; each answer must hold exactly the "
              "marker documents of the generation (commit) it reports.", "",
              "| kill -9 of | runs | index loads, checksums pass, last committed state, answers as fresh | "
              "killed mid-run | failures |", "|---|---:|---:|---:|---|"]
    for label, key in (("the server, during a client's add/delete commits", "kill_server"),
                       ("`salience search add` (5,000 documents)", "kill_add"),
                       ("`salience search merge`", "kill_merge")):
        r = result[key]
        lines.append(f"| {label} | {r['runs']} | {r['ok']} | {r.get('killed mid-run', r['runs'])} | "
                     f"{'; '.join(r['failures'][:3]) or 'none'} |")
    o = result["orphans"]
    lines += ["", f"Orphans: {o['runs']} parents killed with -9 while their process pool ran ({o['workers_started']} "
              f"workers in all): {o['orphans']} workers left 3 s later.", ""]
    f = result["fuzz"]
    lines += [f"Fuzzing (hypothesis, `tests/test_fuzz.py` under its `campaign` profile, {f['seconds']:.0f} s): "
              f"{f['total']:,} generated inputs, "
              + ", ".join(f"{name} {count:,}" for name, count in f["inputs"].items())
              + f"; unhandled exceptions (anything but the library's own errors, argparse's usage exit, or an HTTP "
              f"500): {'none' if f['passed'] else '; '.join(f['failed']) or 'see the run'}.", "",
              f"Whole run: {seconds:.0f} s.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    from common import run_benchmark

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--kills", type=int, default=20, help="kill -9 runs of each kind")
    parser.add_argument("--orphan-runs", type=int, default=5)
    return run_benchmark("service.py", parser, run, render, argv)


if __name__ == "__main__":
    sys.exit(main())
