"""Bad input and bad output paths never lose data (issue 10, 'data safety first')."""

import gzip
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from salience.cli import main
from salience.exceptions import CorruptIndexError, InputFormatError, InvalidParameterError
from salience.search import BM25


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture()
def corpus(tmp_path):
    return _write_jsonl(tmp_path / "corpus.jsonl", [
        {"_id": "a", "text": "boundary layer heat transfer"},
        {"_id": "b", "text": "lift of slender wings"},
        {"_id": "c", "text": "heat flux in a boundary layer"},
    ])


def _snapshot(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- output paths ----------------------------------------------------------------------------
def test_index_out_refuses_a_folder_that_is_not_an_index(tmp_path, corpus, capsys):
    keep = tmp_path / "photos"
    keep.mkdir()
    (keep / "holiday.jpg").write_bytes(b"\xff\xd8 precious")
    assert main(["search", "index", str(corpus), "--out", str(keep), "--quiet"]) == 2
    assert "did not write" in capsys.readouterr().err
    assert _snapshot(keep) == {"holiday.jpg": b"\xff\xd8 precious"}


def test_index_out_refuses_a_regular_file_and_the_source_itself(tmp_path, corpus, capsys):
    note = tmp_path / "notes.txt"
    note.write_text("keep me")
    assert main(["search", "index", str(corpus), "--out", str(note), "--quiet"]) == 2
    assert note.read_text() == "keep me"
    before = corpus.read_bytes()
    assert main(["search", "index", str(corpus), "--out", str(corpus), "--quiet"]) == 2
    assert "is the input" in capsys.readouterr().err
    assert corpus.read_bytes() == before


def test_index_out_refuses_the_source_folder_and_dot_without_junk(tmp_path, capsys, monkeypatch):
    beir = tmp_path / "beir"
    beir.mkdir()
    _write_jsonl(beir / "corpus.jsonl", [{"_id": "a", "text": "heat"}, {"_id": "b", "text": "wings"}])
    before = _snapshot(beir)
    assert main(["search", "index", str(beir), "--out", str(beir), "--quiet"]) == 2
    assert main(["search", "index", str(beir), "--out", str(beir / "ix"), "--quiet"]) == 2
    assert "inside the input folder" in capsys.readouterr().err
    monkeypatch.chdir(beir)
    assert main(["search", "index", "corpus.jsonl", "--out", ".", "--quiet"]) == 2
    assert _snapshot(beir) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["beir"]  # no temporary folders left anywhere


def test_index_out_replaces_its_own_earlier_index(tmp_path, corpus):
    out = tmp_path / "ix"
    assert main(["search", "index", str(corpus), "--out", str(out), "--quiet"]) == 0
    assert main(["search", "index", str(corpus), "--out", str(out), "--quiet", "--variant", "bm25+"]) == 0
    assert BM25.load(out).variant == "bm25+"
    with pytest.raises(InvalidParameterError, match="did not write"):
        BM25().index(["a b"]).save(corpus)


def test_data_select_refuses_to_overwrite_its_raw_input(tmp_path):
    from salience.data import select_documents

    target = _write_jsonl(tmp_path / "t.jsonl", [{"text": "protein binding assay cells " * 20}] * 20)
    raw = _write_jsonl(tmp_path / "raw.jsonl", [{"text": f"document {i} about cells"} for i in range(30)])
    before = raw.read_bytes()
    with pytest.raises(InvalidParameterError, match="is the input"):
        select_documents([target], [raw], raw, k=5, n_jobs=1)
    assert raw.read_bytes() == before
    out = tmp_path / "sel.jsonl"
    select_documents([target], [raw], out, k=5, n_jobs=1)
    select_documents([target], [raw], out, k=6, n_jobs=1)  # its own earlier output (report beside it) is replaced
    assert len(out.read_text().splitlines()) == 6
    assert main(["data", "select", "--target", str(target), "--raw", str(raw), "--k", "5", "--out", str(target),
                 "--n-jobs", "1", "--quiet"]) == 2


def test_work_dir_that_is_not_a_cache_is_left_alone(tmp_path):
    from salience.data import select_documents

    target = _write_jsonl(tmp_path / "t.jsonl", [{"text": "protein binding assay cells " * 20}] * 20)
    raw = _write_jsonl(tmp_path / "raw.jsonl", [{"text": f"document {i} about cells"} for i in range(30)])
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "weights.npz").write_bytes(b"mine")
    with pytest.raises(InvalidParameterError, match="not a salience shard cache"):
        select_documents([target], [raw], tmp_path / "sel.jsonl", k=5, n_jobs=1, work_dir=mine)
    assert (mine / "weights.npz").read_bytes() == b"mine"


# --- losses are counted ----------------------------------------------------------------------
def _damaged_pool(tmp_path, damage) -> Path:
    rng = random.Random(0)
    words = [f"w{i}" for i in range(3000)]
    rows = [{"text": " ".join(rng.choice(words) for _ in range(60))} for _ in range(6000)]
    path = tmp_path / "pool.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=6) as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in rows).encode())
    path.write_bytes(damage(path.read_bytes()))
    return path


def test_skip_on_a_damaged_gzip_counts_what_was_lost(tmp_path, capsys):
    from salience.data.dedup import dedup_files

    # bytes overwritten mid-stream: the decoder yields garbage lines and fails its CRC at the end
    path = _damaged_pool(tmp_path, lambda d: d[: len(d) // 2] + b"\xff" * 64 + d[len(d) // 2 + 64 :])
    with pytest.raises(InputFormatError, match="unreadable after line"):
        dedup_files([path], tmp_path / "strict.jsonl", n_jobs=1)
    report = dedup_files([path], tmp_path / "kept.jsonl", n_jobs=1, on_error="skip")
    (loss,) = report.truncated_files
    assert loss["path"] == str(path) and "incorrect data check" in loss["reason"]
    # one gzip member, its check failed at its end: none of its lines can be trusted, none is kept
    # (issue 50: 178 garbage records used to be kept as real ones)
    assert report.documents == 0 and loss["after_line"] == 0 and loss["suspect_lines"][0] == 1
    assert loss["estimated_records"] == loss["suspect_lines"][1]
    saved = json.loads((tmp_path / "kept.jsonl.report.json").read_text())
    assert saved["truncated_files"] == report.truncated_files

    # a truncated download: what is missing cannot be counted, and the report says so
    path = _damaged_pool(tmp_path, lambda d: d[: int(len(d) * 0.6)])
    out = tmp_path / "kept2.jsonl"
    assert main(["data", "dedup", str(path), "--out", str(out), "--on-error", "skip", "--n-jobs", "1", "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["truncated_files"][0]["estimated_records"] is None
    assert report["documents"] == report["truncated_files"][0]["after_line"] < 6000
    assert "unknown number of records lost" in captured.err


def test_records_without_the_text_field_name_the_field(tmp_path):
    from salience.data import select_documents

    target = _write_jsonl(tmp_path / "t.jsonl", [{"body": "protein binding"}] * 5)
    raw = _write_jsonl(tmp_path / "raw.jsonl", [{"text": "cells"}] * 5)
    with pytest.raises(InputFormatError, match="text field 'text'.*body"):
        select_documents([target], [raw], tmp_path / "sel.jsonl", k=2, n_jobs=1)


def test_dedup_num_perm_must_be_positive(tmp_path, capsys):
    from salience.data.dedup import dedup_texts, minhash_signatures

    with pytest.raises(InvalidParameterError, match="num_perm"):
        dedup_texts(["a b c"], near=True, num_perm=0)
    with pytest.raises(InvalidParameterError, match="num_perm"):
        minhash_signatures(["a b c"], num_perm=-3)
    raw = _write_jsonl(tmp_path / "raw.jsonl", [{"text": "cells"}] * 5)
    assert main(["data", "dedup", str(raw), "--out", str(tmp_path / "o.jsonl"), "--near", "--num-perm", "0",
                 "--quiet"]) == 2
    assert "num_perm" in capsys.readouterr().err


# --- evaluation that measures nothing --------------------------------------------------------
def test_evaluating_a_disjoint_or_empty_run_fails(tmp_path, capsys):
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    disjoint = tmp_path / "run.trec"
    disjoint.write_text("q9 Q0 d1 1 1.0 x\n")
    assert main(["rank", "evaluate", str(qrels), str(disjoint)]) == 1
    assert "nothing was evaluated" in capsys.readouterr().err
    from salience.core.metrics import NothingJudgedWarning, evaluate

    with pytest.warns(NothingJudgedWarning):
        assert evaluate({"q1": {"d1": 1}}, {}, ["ndcg@10"]).matched == 0


def test_zero_or_negative_depths_are_rejected(tmp_path, capsys):
    run = tmp_path / "a.trec"
    run.write_text("q1 Q0 d1 1 1.0 x\n")
    assert main(["rank", "fuse", str(run), str(run), "--depth", "0", "--out", str(tmp_path / "f.trec")]) == 2
    assert "--depth: must be a positive integer" in capsys.readouterr().err
    assert not (tmp_path / "f.trec").exists()
    for k in ("0", "-1"):
        assert main(["search", "evaluate", str(tmp_path), "-k", k]) == 2
        assert "-k: must be a positive integer" in capsys.readouterr().err


# --- damaged index manifests -----------------------------------------------------------------
def test_every_bit_flip_in_a_manifest_is_caught(tmp_path):
    out = tmp_path / "ix"
    index = BM25().index([{"_id": f"d{i}", "text": f"heat {'wing ' * (i % 3)}layer {i}"} for i in range(6)]).save(out)
    expected = index.search("heat wing", k=6)
    manifest = out / "manifest.json"
    good = manifest.read_bytes()
    outcomes = {"error": 0, "same": 0}
    for position in range(0, len(good)):
        for bit in (0, 3, 6):
            damaged = bytearray(good)
            damaged[position] ^= 1 << bit
            manifest.write_bytes(bytes(damaged))
            try:
                loaded = BM25.load(out)
            except CorruptIndexError:
                outcomes["error"] += 1
                continue
            assert loaded.search("heat wing", k=6) == expected, f"byte {position} bit {bit} changed the results silently"
            outcomes["same"] += 1
    manifest.write_bytes(good)
    assert outcomes["error"] > 0.95 * (outcomes["error"] + outcomes["same"])


def test_killed_writers_leave_temporaries_that_the_next_write_sweeps(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    out = tmp_path / "ix"
    index = BM25().index(["heat layer", "wing lift"]).save(out)
    stale_full = tmp_path / f".ix.{pid}.abc123.tmp"
    stale_full.mkdir()
    (stale_full / "junk").write_text("x")
    stale_segment = out / f".seg-000001.{pid}.xyz.tmp"
    stale_segment.mkdir()
    alive = tmp_path / f".ix.{os.getpid()}.mine.tmp"  # a live writer's folder is never touched
    alive.mkdir()
    index.add([{"_id": "x", "text": "more heat"}]).commit()
    assert not stale_segment.exists()
    index.save(out)
    assert not stale_full.exists() and alive.exists()


def test_pool_workers_die_with_their_parent(tmp_path):
    script = textwrap.dedent("""
        import os, sys, time
        from salience.parallel import make_executor
        runner = make_executor("local", 2)
        runner.submit(time.sleep, 60)
        runner.submit(time.sleep, 60)
        time.sleep(1.0)
        print(" ".join(str(p) for p in runner.pool._processes), flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    workers = [int(p) for p in proc.stdout.readline().split()]
    assert len(workers) == 2
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 10
    alive = workers
    while alive and time.time() < deadline:
        time.sleep(0.2)
        alive = [p for p in alive if _running(p)]
    assert not alive, f"workers {alive} outlived their killed parent"


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


# --- memory ----------------------------------------------------------------------------------
def test_summaries_of_long_texts_use_sparse_counts():
    from salience.summarize import summarize
    from salience.summarize.similarity import term_counts

    rng = np.random.default_rng(0)
    vocabulary = np.array([f"term{i}" for i in range(20_000)])
    sentences = [" ".join(rng.choice(vocabulary, 12)).capitalize() + "." for _ in range(6000)]
    counts = term_counts(sentences)
    assert counts.nnz <= 12 * 6000 and counts.shape[0] == 6000
    tracemalloc.start()
    summary = summarize(" ".join(sentences), sentences=3, method="lexrank")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(summary.indices) == 3
    # a dense 6000 x 6000 similarity alone is 288 MB; sparse work stays far below
    assert peak < 120 * (1 << 20), f"peak {peak / 2**20:.0f} MB"
