"""The newcomer's bad-input and fault campaign of issue 25: each case failed before its fix."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from salience.cli import main
from salience.exceptions import InvalidParameterError, WorkerError
from salience.search import BM25

ROOT = Path(__file__).resolve().parents[1]


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture()
def pool(tmp_path):
    target = _write_jsonl(tmp_path / "t.jsonl", [{"text": "protein binding assay cells " * 20}] * 20)
    raw = _write_jsonl(tmp_path / "raw.jsonl", [{"text": f"document {i} about cells and proteins"} for i in range(40)])
    return target, raw


# --- data lost ---------------------------------------------------------------------------------
def test_index_out_and_merge_keep_the_users_files(tmp_path):
    corpus = _write_jsonl(tmp_path / "corpus.jsonl", [{"_id": f"d{i}", "text": f"heat flux {i} boundary"}
                                                       for i in range(20)])
    out = tmp_path / "ix"
    assert main(["search", "index", str(corpus), "--out", str(out), "--quiet"]) == 0
    (out / "README.txt").write_text("what this index is for")
    assert main(["search", "index", str(corpus), "--out", str(out), "--quiet", "--variant", "bm25+"]) == 0
    assert (out / "README.txt").read_text() == "what this index is for" and BM25.load(out).variant == "bm25+"
    more = _write_jsonl(tmp_path / "more.jsonl", [{"_id": "x", "text": "lift of wings"}])
    assert main(["search", "add", str(out), str(more), "--quiet"]) == 0
    assert main(["search", "merge", str(out), "--quiet"]) == 0
    assert (out / "README.txt").read_text() == "what this index is for"
    assert BM25.load(out).n_docs == 21


@pytest.mark.parametrize("command", ["select", "dedup"])
def test_a_users_report_file_beside_the_output_is_not_overwritten(tmp_path, pool, command, capsys):
    target, raw = pool
    out = tmp_path / "sel.jsonl"
    report = tmp_path / "sel.jsonl.report.json"
    report.write_text("my own notes\n")
    args = (["data", "select", "--target", str(target), "--raw", str(raw), "-k", "5"] if command == "select"
            else ["data", "dedup", str(raw)])
    assert main([*args, "--out", str(out), "--n-jobs", "1", "--quiet"]) == 2
    assert "sel.jsonl.report.json already exists" in capsys.readouterr().err
    assert report.read_text() == "my own notes\n" and not out.exists()
    report.unlink()
    assert main([*args, "--out", str(out), "--n-jobs", "1", "--quiet"]) == 0
    assert main([*args, "--out", str(out), "--n-jobs", "1", "--quiet"]) == 0  # its own report: replaced
    assert json.loads(report.read_text())["skipped_errors"] == 0


# --- tracebacks --------------------------------------------------------------------------------
@pytest.mark.parametrize("option", [["--shard-mb", "-1"], ["--shard-mb", "nan"], ["--shard-mb", "0"],
                                    ["--seed", "-1"]])
def test_bad_numbers_are_usage_errors(tmp_path, pool, option, capsys):
    target, raw = pool
    code = main(["data", "select", "--target", str(target), "--raw", str(raw), "-k", "5", "--out",
                 str(tmp_path / "s.jsonl"), "--n-jobs", "1", "--quiet", *option])
    err = capsys.readouterr().err
    assert code == 2 and option[0] in err and "Traceback" not in err
    assert not (tmp_path / "s.jsonl").exists()


def test_the_library_refuses_a_negative_seed_and_no_shard_bytes(tmp_path, pool):
    from salience.data import select_documents

    target, raw = pool
    with pytest.raises(InvalidParameterError, match="seed"):
        select_documents([target], [raw], tmp_path / "s.jsonl", k=5, n_jobs=1, seed=-1)
    with pytest.raises(InvalidParameterError, match="shard_bytes"):
        select_documents([target], [raw], tmp_path / "s.jsonl", k=5, n_jobs=1, shard_bytes=0)


@pytest.mark.parametrize("argv", [["methods"], ["keywords", "extract", "{many}"]])
def test_a_closed_pipe_ends_quietly(tmp_path, argv):
    many = _write_jsonl(tmp_path / "many.jsonl", [{"id": str(i), "text": f"heat transfer in boundary layers {i} " * 5}
                                                  for i in range(3000)])
    argv = [a.replace("{many}", str(many)) for a in argv]
    command = [sys.executable, "-c", "import sys; from salience.cli import main; sys.exit(main())", *argv]
    producer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    producer.stdout.close()  # what `| head -1` does, here before the first line is written
    _, err = producer.communicate(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
    assert producer.returncode == 141


def _kill_myself(item):
    if item == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return item


def test_a_killed_worker_is_named_not_a_traceback():
    from salience.parallel import make_executor

    runner = make_executor("local", 2)
    with pytest.raises(WorkerError, match=r"worker process \d+ was killed by SIGKILL.*wrote no output"):
        runner.map(_kill_myself, list(range(6)))
    runner = make_executor("local", 2)
    with pytest.raises(WorkerError, match="SIGKILL"):
        for item in range(6):
            runner.submit(_kill_myself, item)
        runner.drain()


# --- silent wrong results ------------------------------------------------------------------------
def test_resample_refuses_nan_weights():
    from salience.data.dsir import resample

    with pytest.raises(InvalidParameterError, match="nan at position 1"):
        resample(np.array([1.0, np.nan, 2.0]), k=1)
    assert resample(np.array([1.0, -np.inf, 2.0]), k=2, sampling="topk").tolist() == [0, 2]  # -inf: never drawn


# --- a crash that takes the machine ------------------------------------------------------------------
def _zipf_text(n_sentences: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    vocabulary = np.array([f"term{i}" for i in range(20_000)])
    p = 1.0 / np.arange(1, 20_001)
    return " ".join(" ".join(rng.choice(vocabulary, 12, p=p / p.sum())).capitalize() + "." for _ in range(n_sentences))


@pytest.mark.parametrize("method", ["lexrank", "textrank"])
def test_summaries_of_long_texts_stay_in_memory_linear_in_the_text(method):
    """A Zipfian text links almost every pair of sentences: the graph has ~n^2 edges (at 20,000
    sentences, 1.8 MB of text, a stored graph alone is several GB). The default methods walk it
    through its factors."""
    import tracemalloc

    from salience.summarize import summarize

    text = _zipf_text(20_000)
    tracemalloc.start()
    summary = summarize(text, sentences=3, method=method, language="en")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(summary.indices) == 3
    assert peak < 25 * len(text), f"peak {peak / 2**20:.0f} MB for {len(text) / 2**20:.1f} MB of text"


def test_graphs_that_must_be_stored_are_refused_past_their_cap(monkeypatch):
    from salience.summarize import similarity, summarize

    monkeypatch.setattr(similarity, "GRAPH_MAX_EDGES", 100_000)
    text = _zipf_text(3000)
    for options in ({"method": "lexrank", "threshold": 0.05}, {"method": "textrank", "similarity": "overlap"}):
        with pytest.raises(InvalidParameterError, match="more than 100,000 edges.*continuous lexrank"):
            summarize(text, language="en", **options)
    # below the cap the blocked graph is the graph: the same summary as one product
    monkeypatch.setattr(similarity, "GRAPH_MAX_EDGES", 10**9)
    monkeypatch.setattr(similarity, "BLOCK_PAIRS", 5_000)
    blocked = summarize(text, language="en", method="textrank", similarity="overlap").indices
    monkeypatch.setattr(similarity, "BLOCK_PAIRS", 10**12)
    assert blocked == summarize(text, language="en", method="textrank", similarity="overlap").indices


# --- silent wrong results (continued) ----------------------------------------------------------------
def test_summarize_extract_reads_jsonl_as_records(tmp_path, capsys):
    articles = _write_jsonl(tmp_path / "articles.jsonl", [
        {"id": "a", "text": "Solar panels convert sunlight. Panels of silicon convert light to power. The cat slept."},
        {"id": "b", "text": "Wings lift planes. Lift grows with the wing's area. Pilots fly planes with wings."},
    ])
    assert main(["summarize", "extract", str(articles), "--sentences", "1", "--language", "en"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["id"] for r in rows] == ["a", "b"] and all("{" not in r["summary"] for r in rows)
    assert rows[0]["sentences"] == [rows[0]["summary"]] and len(rows[0]["indices"]) == 1
    assert main(["summarize", "extract", str(articles), "--field", "body"]) == 2
    assert "articles.jsonl:1: record has no text field 'body'" in capsys.readouterr().err


def test_empty_inputs_and_budgets_below_every_sentence_say_so(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n\n")
    for command in ("summarize", "keywords"):
        assert main([command, "extract", str(empty)]) == 2
        assert "empty.txt is empty" in capsys.readouterr().err
    text = tmp_path / "t.txt"
    text.write_text("Solar panels convert sunlight into power. Silicon cells convert light into current.")
    assert main(["summarize", "extract", str(text), "--words", "1"]) == 0
    assert "no sentence fits in --words 1 (the shortest has 6 words)" in capsys.readouterr().err


def test_documents_without_text_or_id_are_not_indexed_silently(tmp_path, capsys):
    from salience.exceptions import InputFormatError
    from salience.io.documents import EmptyDocumentsWarning

    with pytest.raises(InputFormatError, match="none of the 1 documents has text"):
        BM25().index([{"_id": "a", "text": None}])
    with pytest.warns(EmptyDocumentsWarning, match="1 of 2 documents have no text.*'b'"):
        BM25().index([{"_id": "a", "text": "heat"}, {"_id": "b", "text": ""}])
    with pytest.raises(InputFormatError, match="position 1: the record has no id"):
        BM25().index([{"_id": "a", "text": "heat"}, {"text": "lift"}])
    corpus = _write_jsonl(tmp_path / "c.jsonl", [{"_id": "a", "text": "heat"}, {"_id": "b", "text": "lift"}])
    assert main(["search", "index", str(corpus), "--fields", "body", "--out", str(tmp_path / "ix"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "none of the 2 documents has text in the field body (their other fields: text)" in err
    assert not (tmp_path / "ix").exists()
    idless = _write_jsonl(tmp_path / "n.jsonl", [{"_id": "a", "text": "heat"}, {"text": "lift"}])
    assert main(["search", "index", str(idless), "--out", str(tmp_path / "ix"), "--quiet"]) == 2
    assert "n.jsonl:2: the record has no id" in capsys.readouterr().err


def test_scores_ids_are_distinct_and_disjoint_rankings_do_not_correlate():
    from salience import IdMismatchError, Scores
    from salience.core.correlation import kendall_tau, spearman_rho
    from salience.core.metrics import NothingJudgedWarning, evaluate

    with pytest.raises(IdMismatchError, match="'a' appears more than once"):
        Scores([1, 2], ids=["a", "a"])
    for measure in (kendall_tau, spearman_rho):
        with pytest.raises(IdMismatchError, match="share no ids"):
            measure(Scores([1, 2], ids=["a", "b"]), Scores([1, 2], ids=["c", "d"]))
    with pytest.warns(NothingJudgedWarning):
        assert evaluate({}, {"q1": {"d1": 1.0}}, ["ndcg@10"]).matched == 0


def test_warnings_read_as_salience_s_own(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("Zorblat quim vexo. Zorblat quim tarn. Vexo tarn zorblat.")
    done = subprocess.run([sys.executable, "-c", "import sys; from salience.cli import main; sys.exit(main())", "summarize", "extract", str(text), "--sentences", "1"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and done.stderr.startswith("salience: warning: the language of a text was not detected")
    assert ".py:" not in done.stderr


def test_a_small_damaged_gzip_keeps_no_suspect_line_and_counts_the_loss(tmp_path, capsys):
    import gzip

    from salience.data.dedup import dedup_files

    rows = [{"text": f"record number {i} with some words of its own"} for i in range(200)]
    data = bytearray(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    middle = len(data) // 2
    data[middle : middle + 8] = b"\xff" * 8  # smaller than one read buffer: the reader fails on all of it
    path = tmp_path / "small.jsonl.gz"
    path.write_bytes(bytes(data))
    report = dedup_files([path], tmp_path / "kept.jsonl", n_jobs=1, on_error="skip")
    (loss,) = report.truncated_files
    # the one member failed its check: where the damage starts cannot be known, so none of its
    # lines is kept as real (issue 50), and the lines it decoded are named as the suspects
    assert report.documents == 0 and loss["after_line"] == 0 and loss["suspect_lines"][0] == 1
    assert loss["suspect_lines"][1] >= 50
    assert loss["estimated_records"] is not None and report.lost_records_estimated == loss["estimated_records"] > 0
    truncated = tmp_path / "cut.jsonl.gz"
    truncated.write_bytes(bytes(gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in rows)))[:120])
    report = dedup_files([truncated], tmp_path / "kept2.jsonl", n_jobs=1, on_error="skip")
    assert report.lost_records_estimated is None  # unknown, not zero


# --- misleading errors --------------------------------------------------------------------------------
def test_every_command_that_suggests_on_error_takes_it(tmp_path, capsys):
    run = tmp_path / "a.trec"
    run.write_bytes(b"q1 Q0 d1 1 1.0 x\nq1 Q0 d\xff2 2 0.5 x\n")
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    assert main(["rank", "evaluate", str(qrels), str(run)]) == 2
    assert "--on-error replace" in capsys.readouterr().err
    assert main(["rank", "evaluate", str(qrels), str(run), "--on-error", "replace", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ndcg@10"] == 1.0
    assert main(["rank", "fuse", str(run), str(run), "--out", str(tmp_path / "f.trec"), "--on-error", "skip"]) == 0
    assert (tmp_path / "f.trec").read_text().count("\n") == 1
    for command in (["compress", "eval", "m", "--data", "x"], ["compress", "prune", "m", "--out", "o"]):
        assert main([*command, "--on-error", "replace", "--help"]) == 0  # parsed, not refused
    capsys.readouterr()


@pytest.mark.parametrize("argv, message", [
    (["compress", "prune", "smollm2", "--sparsity", "1.5", "--calib", "{calib}"], "sparsity"),
    (["compress", "prune", "smollm2", "--method", "wanda"], "wanda needs calibration"),
    (["compress", "structured", "smollm2", "--fraction", "0.3", "--criterion", "taylor"], "needs calibration"),
    (["compress", "structured", "smollm2", "--fraction", "1.2"], "fraction must be in"),
    (["compress", "kv-eval", "smollm2", "--policy", "h2o", "--budget", "0", "--data", "{calib}"], "budget"),
    (["compress", "eval", "smollm2", "--data", "{empty}"], "holds no text"),
    (["explain", "lm", "smollm2", "--prompt", " ", "--target", "Paris"], "non-empty"),
])
def test_parameters_are_checked_before_the_model_loads(tmp_path, monkeypatch, capsys, argv, message):
    import salience.models.lm as lm

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded before the parameters were checked")

    monkeypatch.setattr(lm, "load_causal_lm", never)
    calib = tmp_path / "calib.txt"
    calib.write_text("some calibration text " * 50)
    empty = tmp_path / "empty.txt"
    empty.write_text(" \n")
    argv = [a.replace("{calib}", str(calib)).replace("{empty}", str(empty)) for a in argv]
    if argv[1] in ("prune", "structured"):
        argv += ["--out", str(tmp_path / "out")]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_an_empty_raw_pool_says_why(tmp_path, pool, capsys):
    import gzip

    target, _ = pool
    raw = _write_jsonl(tmp_path / "bodies.jsonl", [{"body": f"document {i}"} for i in range(10)])
    out = str(tmp_path / "s.jsonl")
    assert main(["data", "select", "--target", str(target), "--raw", str(raw), "-k", "2", "--out", out,
                 "--n-jobs", "1", "--quiet"]) == 2
    assert "10 records have no text field 'text' (fields seen: body); pass --text-field" in capsys.readouterr().err
    assert not (tmp_path / "s.jsonl.work").exists()  # a failed run leaves no shard cache behind
    damaged = tmp_path / "damaged.jsonl.gz"
    damaged.write_bytes(gzip.compress(b'{"text": "a document"}\n' * 50)[:25])
    assert main(["data", "select", "--target", str(target), "--raw", str(damaged), "-k", "2", "--out", out,
                 "--n-jobs", "1", "--quiet", "--on-error", "skip"]) == 2
    assert "damaged.jsonl.gz is damaged after line 0" in capsys.readouterr().err


def test_filters_that_can_only_match_nothing_are_refused():
    index = BM25().index([{"_id": "a", "text": "heat", "year": 1990}, {"_id": "b", "text": "heat", "venue": "JFM"}])
    assert index.search("heat", where={"year": {"<": 2000}}).ids == ["a"]
    assert index.search("heat", where={"venue": {"!=": "AIAA"}}).ids == ["a", "b"]  # absent: != holds
    for where, message in (({"year": {">": float("nan")}}, "NaN matches nothing"),
                           ({"yeer": 1990}, "no document has this field"),
                           ({"year": "1990"}, "holds no strings"),
                           ({"venue": {">=": 3}}, "holds no numbers"),
                           ({"year": {"in": [1990, float("nan")]}}, "NaN")):
        with pytest.raises(InvalidParameterError, match=message):
            index.search("heat", where=where)


def test_a_selection_output_is_named_for_what_it_holds(tmp_path, pool, capsys):
    target, raw = pool
    assert main(["data", "select", "--target", str(target), "--raw", str(raw), "-k", "2", "--out",
                 str(tmp_path / "x.csv"), "--n-jobs", "1", "--quiet"]) == 2
    assert "ends in .jsonl" in capsys.readouterr().err and not (tmp_path / "x.csv").exists()


def test_written_files_and_folders_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = tmp_path / "ix"
        index = BM25().index([{"_id": "a", "text": "heat"}]).save(path)
        index.add([{"_id": "b", "text": "lift"}]).commit()
        for entry in [path, *path.rglob("*")]:
            expected = 0o755 if entry.is_dir() else 0o644
            assert entry.stat().st_mode & 0o777 == expected, entry
        (path / "manifest.json").chmod(0o640)  # a mode the user chose is kept by the next commit
        index.delete(["a"]).commit()
        assert (path / "manifest.json").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


def test_every_option_and_argument_has_help_text():
    import argparse

    from salience.cli import build_parser

    missing = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif not isinstance(action, argparse._HelpAction) and not action.help and action.help != argparse.SUPPRESS:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "salience")
    assert not missing, "options without help text:\n" + "\n".join(missing)


def test_mmr_selections_rank_in_the_order_they_were_chosen():
    from salience import Scores
    from salience.core.select import select_mmr

    relevance = Scores([0.9, 0.88, 0.5, 0.4], ids=["a", "a-copy", "b", "c"])
    similarity = np.array([[1, 0.99, 0.1, 0.2], [0.99, 1, 0.1, 0.2], [0.1, 0.1, 1, 0.3], [0.2, 0.2, 0.3, 1.0]])
    chosen = select_mmr(relevance, similarity, k=4, diversity=0.5)
    assert chosen.ids == ["a", "b", "c", "a-copy"] == chosen.ranked_ids()  # values never increase
    assert chosen.values[0] == pytest.approx(0.45) and chosen.values[1] == pytest.approx(0.5 * 0.5 - 0.5 * 0.1)
    assert np.all(np.diff(chosen.values) <= 0)


def test_running_out_of_memory_is_said_not_a_traceback(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text(_zipf_text(20_000))
    script = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (400 << 20, 400 << 20)); "
              "from salience.cli import main; sys.exit(main())")
    done = subprocess.run([sys.executable, "-c", script, "summarize", "extract", str(text), "--method", "textrank",
                           "--similarity", "overlap", "--language", "en"], capture_output=True, text=True, cwd=ROOT)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (1, 2) and done.stderr.startswith("salience: error:")


def test_keyphrase_scores_print_without_negative_zero(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("Graph kernels compare graphs by their substructures. Graph kernels classify molecules.")
    assert main(["keywords", "extract", str(text), "-k", "3", "--method", "yake"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].strip().startswith("score  keyphrase (-S(kw), YAKE's score negated: higher is better)")
    assert not any("-0.0000" in line for line in out) and len(out) == 4


def test_quiet_switches_off_the_model_libraries_bars(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    monkeypatch.delenv("TRANSFORMERS_VERBOSITY", raising=False)
    text = tmp_path / "t.txt"
    text.write_text("Wings lift planes. Lift depends on the wing's area.")
    assert main(["summarize", "extract", str(text), "--quiet", "--language", "en"]) == 0
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1" and os.environ["TRANSFORMERS_VERBOSITY"] == "error"


def test_loading_a_language_model_without_transformers_names_it(monkeypatch):
    from salience.exceptions import MissingDependencyError
    from salience.models.lm import load_causal_lm

    monkeypatch.setitem(sys.modules, "transformers", None)  # as if it were not installed
    with pytest.raises(MissingDependencyError, match="Loading a language model needs transformers"):
        load_causal_lm("smollm2", cache=False)
