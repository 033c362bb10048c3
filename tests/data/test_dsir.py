import gzip
import json

import numpy as np
import pytest

from salience import InvalidParameterError, SalienceError
from salience.data import HashedNgrams, ImportanceResampler, kl_reduction, resample, select_documents
from salience.exceptions import InputFormatError


def test_hashed_ngrams_by_hand():
    f = HashedNgrams(buckets=1 << 20)
    batch = f.transform(["The cat sat.", "", "the CAT", "cat"])
    assert batch.tokens.tolist() == [4, 0, 2, 1]
    unigram = {int(b) for b, d in zip(batch.bucket, batch.doc) if d == 3}
    assert len(unigram) == 1 and unigram <= set(batch.bucket[batch.doc == 0].tolist())  # 'cat' hashes alike everywhere
    assert np.bincount(batch.doc, minlength=4).tolist() == [7, 0, 3, 1]  # n tokens + (n - 1) bigrams, never across documents
    long_word = "x" * 40
    assert f.transform([long_word]).bucket.tolist() == f.transform([f"{long_word}!"]).bucket[:1].tolist()
    with pytest.raises(InvalidParameterError, match="buckets"):
        HashedNgrams(buckets=1)
    with pytest.raises(InvalidParameterError, match="text 1"):
        f.transform(["ok", None])


def test_resample_modes():
    w = np.log(np.array([1.0, 100.0, 50.0, 1e-9, 10.0]))
    assert resample(w, k=2, sampling="topk").tolist() == [1, 2]
    draws = np.concatenate([resample(w, k=1, sampling="gumbel", seed=s) for s in range(400)])
    assert np.bincount(draws, minlength=5).argmax() == 1 and (draws == 3).sum() == 0
    assert len(resample(w, k=10, sampling="replacement")) == 10
    groups = np.array(["a", "a", "b", "b", "b"])
    assert resample(w, k=0, sampling="topk", groups=groups, quotas={"a": 1, "b": 2}).tolist() == [1, 2, 4]
    with pytest.raises(InvalidParameterError, match="larger than the pool"):
        resample(w, k=6)
    with pytest.raises(InvalidParameterError, match="valid values"):
        resample(w, k=2, sampling="bogus")


def test_importance_weights_and_kl():
    r = ImportanceResampler(HashedNgrams(buckets=256), min_target_tokens=5)
    r.fit_target(["protein binding assay in cells", "protein folding in cells"])
    r.fit_raw(["stock prices fell sharply", "protein assay in cells", "the match ended in a draw"])
    w = r.log_weights(["protein binding in cells", "stock prices fell"])
    assert w[0] > 0 > w[1]
    t, raw = r.target_counts_, r.raw_counts_
    assert kl_reduction(t, raw, t) > 0 and kl_reduction(t, raw, raw) == pytest.approx(0.0)
    with pytest.raises(SalienceError, match="at least 5"):
        ImportanceResampler(min_target_tokens=5).fit_target(["two words"]).fit_raw(["x y"]).log_ratio
    with pytest.raises(SalienceError, match="target is empty"):
        ImportanceResampler().fit_target([]).fit_raw(["x y"]).log_ratio


def _pool(tmp_path):
    target = tmp_path / "target.jsonl"
    target.write_text("".join(json.dumps({"text": f"protein {i} binds the receptor in cells"}) + "\n" for i in range(200)))
    raw = tmp_path / "raw.jsonl.gz"
    with gzip.open(raw, "wt") as fh:
        for i in range(300):
            domain = "bio" if i % 3 == 0 else "news"
            text = f"protein {i} binds receptor cells assay" if domain == "bio" else f"stock {i} market prices fell today"
            fh.write(json.dumps({"id": i, "text": text, "domain": domain}) + "\n")
        fh.write(json.dumps({"id": "no-text"}) + "\n")
    return target, raw


def test_select_documents_end_to_end_and_resume(tmp_path):
    target, raw = _pool(tmp_path)
    out = tmp_path / "selected.jsonl.gz"
    report = select_documents([target], [raw], out, k=50, label_field="domain", n_jobs=2, shard_bytes=4096, keep_work=True)
    records = [json.loads(line) for line in gzip.open(out, "rt")]
    assert len(records) == 50 and all(r["domain"] == "bio" for r in records) and "salience_score" in records[0]
    assert report.by_label == {"bio": 50} and report.skipped_no_text == 1 and report.kl_reduction > 0
    shards = sorted((tmp_path / "selected.jsonl.gz.work").glob("shard-*.npz"))
    assert len(shards) == report.shards > 2
    stamp = [s.stat().st_mtime_ns for s in shards]
    again = select_documents([target], [raw], out, k=50, label_field="domain", n_jobs=1, shard_bytes=4096, keep_work=True)
    assert [s.stat().st_mtime_ns for s in shards] == stamp and again.by_label == report.by_label  # finished shards reused
    assert again.shards_reused == len(shards)


def test_select_documents_bad_input(tmp_path):
    target, raw = _pool(tmp_path)
    out = tmp_path / "out.jsonl"
    with pytest.raises(InputFormatError, match="no text field"):
        select_documents([target], [raw], out, k=5, strict=True, work_dir=tmp_path / "w1")
    with pytest.raises(InvalidParameterError, match="larger than the pool"):
        select_documents([target], [raw], out, k=5000, work_dir=tmp_path / "w2")
    assert not out.exists()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(SalienceError, match="target is empty"):
        select_documents([empty], [raw], out, k=5, work_dir=tmp_path / "w3")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"text": "fine text here"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(InputFormatError, match="bad.jsonl:2"):
        select_documents([target], [bad], out, k=1, work_dir=tmp_path / "w4")
    report = select_documents([target], [bad], out, k=1, on_error="skip", work_dir=tmp_path / "w5")
    assert report.skipped_errors == 1 and report.selected == 1
    corrupt = tmp_path / "corrupt.jsonl.gz"
    corrupt.write_bytes(gzip.compress(b'{"text": "a b c"}\n' * 100)[:25])
    with pytest.raises(InputFormatError, match="corrupt.jsonl.gz: unreadable"):
        select_documents([target], [corrupt], out, k=1, work_dir=tmp_path / "w6")


def test_cli_select(tmp_path, capsys):
    from salience.cli import main

    target, raw = _pool(tmp_path)
    out = tmp_path / "sel.jsonl"
    assert main(["data", "select", "--target", str(target), "--raw", str(raw), "--k", "10", "--out", str(out),
                 "--label-field", "domain", "--sampling", "topk", "--n-jobs", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["by_label"] == {"bio": 10}
    assert len(out.read_text().splitlines()) == 10
    assert main(["data", "select", "--target", str(target), "--raw", str(raw), "--k", "100000", "--out", str(out),
                 "--work-dir", str(tmp_path / "w")]) == 2
    assert "larger than the pool" in capsys.readouterr().err


@pytest.mark.parametrize("method", ["classifier", "perplexity"])
def test_other_scorers_select_the_target_domain(tmp_path, method):
    target, raw = _pool(tmp_path)
    report = select_documents([target], [raw], tmp_path / "out.jsonl", k=40, method=method, sampling="topk",
                              label_field="domain", n_jobs=1)
    assert report.by_label.get("bio", 0) >= 36  # of 40; the pool has 100 bio documents among 300


def test_quotas_follow_the_target_mix(tmp_path):
    _, raw = _pool(tmp_path)
    target = tmp_path / "mixed-target.jsonl"
    lines = [{"text": f"protein {i} binds the receptor in cells", "domain": "bio"} for i in range(150)]
    lines += [{"text": f"stock {i} market prices fell today again", "domain": "news"} for i in range(50)]
    target.write_text("".join(json.dumps(r) + "\n" for r in lines))
    report = select_documents([target], [raw], tmp_path / "out.jsonl", k=40, quota_field="domain", n_jobs=1)
    assert report.by_label == {"bio": 30, "news": 10}


def test_report_cli(tmp_path, capsys):
    from salience.cli import main

    target, raw = _pool(tmp_path)
    out = tmp_path / "sel.jsonl"
    select_documents([target], [raw], out, k=50, n_jobs=1)
    assert main(["data", "report", str(out), "--target", str(target), "--raw", str(raw), "--label-field", "domain",
                 "--target-label", "bio", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["precision"] == 1.0 and result["recall"] == pytest.approx(50 / 100) and result["kl_reduction"] > 0
    assert result["pool"] == 300 and result["selected"] == 50


def test_parquet_input(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="parquet needs pyarrow: pip install 'salience[parquet]'")
    import pyarrow.parquet as pq

    target, raw = _pool(tmp_path)
    rows = [json.loads(line) for line in gzip.open(raw, "rt")][:300]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "raw.parquet")
    report = select_documents([target], [tmp_path / "raw.parquet"], tmp_path / "out.jsonl", k=20, label_field="domain",
                              n_jobs=1)
    assert report.by_label == {"bio": 20}
    assert all(json.loads(line)["domain"] == "bio" for line in (tmp_path / "out.jsonl").read_text().splitlines())


@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time under pytest -n
def test_ray_executor_matches_local(tmp_path):
    ray = pytest.importorskip("ray", reason="the Ray executor needs ray: pip install 'salience[ray]'")
    target, raw = _pool(tmp_path)
    local = select_documents([target], [raw], tmp_path / "a.jsonl", k=30, n_jobs=2, shard_bytes=4096, seed=3)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = select_documents([target], [raw], tmp_path / "b.jsonl", k=30, n_jobs=2, shard_bytes=4096, seed=3,
                                  executor="ray")
        with pytest.raises(InputFormatError, match="no text field"):
            select_documents([target], [raw], tmp_path / "c.jsonl", k=5, strict=True, executor="ray")
    finally:
        ray.shutdown()
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    assert remote.shards == local.shards > 2


def test_interrupted_write_leaves_no_output(tmp_path, monkeypatch):
    import salience.io.shards as shards

    target, raw = _pool(tmp_path)
    out = tmp_path / "out.jsonl.gz"
    calls = {"n": 0}
    real_dump = shards._dump_record

    def dump_then_interrupt(record):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real_dump(record)

    monkeypatch.setattr(shards, "_dump_record", dump_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        select_documents([target], [raw], out, k=20, n_jobs=1, work_dir=tmp_path / "work")
    assert not out.exists() and not list(tmp_path.glob("out.jsonl.gz*"))
    monkeypatch.setattr(shards, "_dump_record", real_dump)
    report = select_documents([target], [raw], out, k=20, n_jobs=1, work_dir=tmp_path / "work")
    assert report.shards_reused == report.shards  # the hashed shards of the interrupted run are reused
    assert len(gzip.open(out, "rt").read().splitlines()) == 20


def test_corrupt_gzip_keeps_finished_shards(tmp_path):
    target, raw = _pool(tmp_path)
    corrupt = tmp_path / "later.jsonl.gz"
    corrupt.write_bytes(gzip.compress(b'{"text": "a b c"}\n' * 100)[:25])
    work = tmp_path / "work"
    with pytest.raises(InputFormatError, match="later.jsonl.gz: unreadable after line 0"):
        select_documents([target], [raw, corrupt], tmp_path / "out.jsonl", k=5, work_dir=work, shard_bytes=4096)
    finished = list(work.glob("shard-*.npz"))
    assert len(finished) > 2 and not (tmp_path / "out.jsonl").exists()
    report = select_documents([target], [raw, corrupt], tmp_path / "out.jsonl", k=5, work_dir=work, shard_bytes=4096,
                              on_error="skip")
    assert report.shards_reused == len(finished) and report.selected == 5
    assert json.loads((tmp_path / "out.jsonl.report.json").read_text())["selected"] == 5


def test_heuristic_filters(tmp_path):
    from salience.data.scorers import parse_filter, text_statistics

    stats = text_statistics(["Hello world ...", "", "## A B"])
    assert stats["words"].tolist() == [3, 0, 3] and stats["alpha_ratio"][0] == pytest.approx(10 / 13)
    target, raw = _pool(tmp_path)
    with pytest.raises(InvalidParameterError, match="0 eligible documents"):
        select_documents([target], [raw], tmp_path / "out.jsonl", k=5, filters=["mean_word_length>=100"], n_jobs=1)
    report = select_documents([target], [raw], tmp_path / "out.jsonl", k=5, filters=["words>=6", "alpha_ratio>=0.5"],
                              label_field="domain", n_jobs=1)
    assert report.eligible == 300 and report.by_label == {"bio": 5}
    # shards cached by a run without filters hold no statistics: a filtered run over them hashes again
    work = tmp_path / "work"
    plain = select_documents([target], [raw], tmp_path / "b.jsonl", k=5, work_dir=work, keep_work=True, n_jobs=1)
    assert plain.eligible == 300
    # the bio texts average 5.2-5.5 bytes a word, the news texts 4.5-4.8
    filtered = select_documents([target], [raw], tmp_path / "b.jsonl", k=5, filters=["mean_word_length>=5"],
                                work_dir=work, keep_work=True, n_jobs=1)
    assert filtered.shards_reused == 0 and filtered.eligible == 100
    again = select_documents([target], [raw], tmp_path / "b.jsonl", k=5, filters=["mean_word_length>=5"], work_dir=work,
                             n_jobs=1)
    assert again.shards_reused == again.shards and again.eligible == 100
    with pytest.raises(InvalidParameterError, match="STATISTIC>=VALUE"):
        parse_filter("alpha>0.5")


def test_cached_shards_follow_the_settings(tmp_path):
    target, raw = _pool(tmp_path)
    work = tmp_path / "work"
    select_documents([target], [raw], tmp_path / "a.jsonl", k=5, work_dir=work, keep_work=True, n_jobs=1)
    again = select_documents([target], [raw], tmp_path / "a.jsonl", k=5, work_dir=work, keep_work=True, n_jobs=1,
                             label_field="domain")
    assert again.shards_reused == 0 and again.by_label == {"bio": 5}  # labels were not in the cached shards
    with gzip.open(raw, "at") as fh:
        fh.write(json.dumps({"text": "protein binds receptor cells assay again", "domain": "bio"}) + "\n")
    changed = select_documents([target], [raw], tmp_path / "a.jsonl", k=5, work_dir=work, n_jobs=1, label_field="domain")
    assert changed.shards_reused == 0 and changed.pool == 301


def test_gzip_shards_read_alike_with_or_without_isal(tmp_path, monkeypatch):
    import sys

    from salience.io.shards import gzip_reader, iter_shards

    _, raw = _pool(tmp_path)
    fast = [(s.index, s.first_line, s.blob) for s in iter_shards([raw], shard_bytes=2048)]
    with open(raw, "rb") as fh:
        assert type(gzip_reader(fh)).__module__.startswith("isal")
    monkeypatch.setitem(sys.modules, "isal.igzip", None)  # as if isal were not installed
    with open(raw, "rb") as fh:
        assert isinstance(gzip_reader(fh), gzip.GzipFile)
    assert [(s.index, s.first_line, s.blob) for s in iter_shards([raw], shard_bytes=2048)] == fast and len(fast) > 3


def test_write_pass_uses_the_shards_kept_from_hashing(tmp_path, monkeypatch):
    """A pool within KEEP_RAW_BYTES is read once; past it the write pass reads it again; the
    selection written is the same either way."""
    from salience.data import pipeline
    from salience.io import shards

    target, raw = _pool(tmp_path)
    reads = []
    real = shards.iter_shards
    monkeypatch.setattr(shards, "iter_shards", lambda *a, **kw: reads.append(a) or real(*a, **kw))
    kept = select_documents([target], [raw], tmp_path / "kept.jsonl", k=40, n_jobs=1, shard_bytes=4096)
    assert reads == []  # the write pass read nothing
    monkeypatch.setattr(pipeline, "KEEP_RAW_BYTES", 5000)  # about one shard: the rest is read again
    again = select_documents([target], [raw], tmp_path / "again.jsonl", k=40, n_jobs=1, shard_bytes=4096)
    assert len(reads) == 1
    assert (tmp_path / "kept.jsonl").read_bytes() == (tmp_path / "again.jsonl").read_bytes()
    assert kept.selected == again.selected == 40


def test_a_documents_summed_weight_does_not_depend_on_the_documents_before_it():
    # each document's n-gram values added in their own order: the same sum, to the bit, alone or
    # after 10^5 other documents (a running sum over the batch was off by up to 1e-7 there)
    from salience.data.scorers import per_document_sums

    rng = np.random.default_rng(3)
    counts = np.vstack([rng.integers(0, 60, 100_000), rng.integers(0, 60, 100_000)])
    values = rng.normal(-3.0, 2.0, int(counts.sum()))
    sums = per_document_sums(values, counts)
    order_starts = np.concatenate(([0], np.cumsum(counts.sum(axis=1))))
    for d in (0, 1, 50_000, 99_999):
        parts = []
        for o in range(2):
            start = order_starts[o] + counts[o, :d].sum()
            parts.append(values[start : start + counts[o, d]])
        alone = per_document_sums(np.concatenate(parts), counts[:, d : d + 1])
        expected = 0.0 + sum(parts[0].tolist(), 0.0) + sum(parts[1].tolist(), 0.0)  # each order added one by one
        assert alone[0] == sums[d] == expected
    assert per_document_sums(values[:0], np.zeros((2, 3), dtype=np.int64)).tolist() == [0.0, 0.0, 0.0]
