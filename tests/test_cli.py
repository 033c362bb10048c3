import json
import subprocess
import sys

import pytest

from salience.cli import main
from tests.conftest import data_path
from tests.test_docs import _env


@pytest.fixture()
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    rows = [
        {"_id": "a", "title": "Heat transfer", "text": "boundary layer heat transfer at high speed", "year": 1960},
        {"_id": "b", "title": "Wings", "text": "lift of slender wings", "year": 1970},
        {"_id": "c", "title": "", "text": "heat flux in a boundary layer", "year": 1980},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_index_query_add_delete_merge(tmp_path, corpus, capsys):
    out = tmp_path / "ix"
    assert main(["search", "index", str(corpus), "--out", str(out), "--quiet"]) == 0
    assert "indexed 3 documents" in capsys.readouterr().out
    assert main(["search", "query", str(out), "heat boundary layer", "-k", "5", "--json", "--explain"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert sorted(r["id"] for r in result["results"]) == ["a", "c"]  # "b" shares no term
    assert result["results"][0]["score"] >= result["results"][1]["score"]
    first = result["results"][0]
    assert sum(t["contribution"] for t in first["explanation"]["terms"]) == pytest.approx(first["score"], rel=1e-6)
    assert main(["search", "query", str(out), "heat", "--where", '{"year": {">": 1970}}', "--json"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)["results"]] == ["c"]
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"_id": "d", "text": "heat heat heat"}) + "\n")
    assert main(["search", "add", str(out), str(more), "--n-jobs", "2"]) == 0  # tokenized by worker processes
    assert main(["search", "delete", str(out), "a"]) == 0
    capsys.readouterr()
    assert main(["search", "query", str(out), "heat", "--json"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)["results"]] == ["d", "c"]
    assert main(["search", "merge", str(out)]) == 0
    assert main(["search", "query", str(out), "heat"]) == 0
    text = capsys.readouterr().out
    assert "d" in text and "no matching" not in text


def test_variant_options_and_errors(tmp_path, corpus, capsys):
    out = tmp_path / "ix"
    assert main(["search", "index", str(corpus), "--out", str(out), "--variant", "bm25l", "--k1", "1.2", "--b", "0.5"]) == 0
    assert json.loads((out / "manifest.json").read_text())["params"]["variant"] == "bm25l"
    assert main(["search", "index", str(corpus), "--out", str(out), "--variant", "bm26"]) == 2
    err = capsys.readouterr().err
    assert "unknown BM25 variant 'bm26'" in err and "lucene" in err
    assert main(["search", "query", str(tmp_path / "missing"), "x"]) == 2
    assert "no such index folder" in capsys.readouterr().err
    assert main(["search", "query", str(out), "heat", "-k", "0"]) == 2
    assert "-k: must be a positive integer" in capsys.readouterr().err


def test_invalid_utf8_cli(tmp_path, capsys):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"_id": "1", "text": "ok"}\n{"_id": "2", "text": "\xc3("}\n')
    assert main(["search", "index", str(path), "--out", str(tmp_path / "ix")]) == 2
    assert "c.jsonl:2: invalid UTF-8" in capsys.readouterr().err
    assert main(["search", "index", str(path), "--out", str(tmp_path / "ix"), "--on-error", "replace"]) == 0


def test_evaluate_json_counts_unjudged_queries(tmp_path, capsys):
    root = tmp_path / "ds"
    root.mkdir()
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"topic{i % 3} words" + (" topic1" if i == 1 else "")}) + "\n" for i in range(9))
    )
    (root / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "topic1"}) + "\n" + json.dumps({"_id": "q2", "text": "topic2"}) + "\n"
    )
    (root / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    assert main(["search", "evaluate", str(root), "--metrics", "ndcg@10,recall@100", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["queries"] == 2 and result["skipped_unjudged"] == 1 and result["evaluated"] == 1
    assert result["ndcg@10"] == 1.0 and result["docs"] == 9
    assert {"index_seconds", "queries_per_second"} <= set(result)


def test_evaluate_scifact_subprocess():
    root = data_path("search", "scifact")
    out = subprocess.run(
        [sys.executable, "-m", "salience", "search", "evaluate", str(root), "--json", "--quiet"],
        capture_output=True, text=True, check=True, env=_env(),
    )
    result = json.loads(out.stdout)
    assert result["ndcg@10"] == pytest.approx(0.6863, abs=1e-4)
    assert result["docs"] == 5183 and result["queries"] == 300


def _write_run(path, run):
    lines = [f"{q} Q0 {d} {i + 1} {s} t\n" for q, docs in run.items() for i, (d, s) in enumerate(sorted(docs.items(), key=lambda x: -x[1]))]
    path.write_text("".join(lines))


def test_rank_fuse_and_evaluate(tmp_path, capsys):
    a, b = tmp_path / "a.trec", tmp_path / "b.trec"
    _write_run(a, {"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0}})
    _write_run(b, {"q1": {"d3": 5.0, "d1": 4.0}})
    out = tmp_path / "fused.trec"
    assert main(["rank", "fuse", str(a), str(b), "--method", "rrf", "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert [line.split()[2] for line in lines] == ["d1", "d3", "d2"]
    assert float(lines[0].split()[4]) == pytest.approx(1 / 61 + 1 / 62)
    assert main(["rank", "fuse", str(a), str(b), "--method", "wsum", "--normalize", "minmax", "--weights", "0.5,0.5", "--out", str(out)]) == 0
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td3\t1\nq2\td9\t1\n")
    capsys.readouterr()
    assert main(["rank", "evaluate", str(qrels), str(out), "--metrics", "mrr@10,recall@10", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["evaluated"] == 2 and report["missing_from_run"] == 1


def test_rank_fuse_errors(tmp_path, capsys):
    a, b = tmp_path / "a.trec", tmp_path / "b.trec"
    _write_run(a, {"q1": {"d1": 1.0}})
    _write_run(b, {"q2": {"d1": 1.0}})
    assert main(["rank", "fuse", str(a), str(b), "--out", str(tmp_path / "o")]) == 2
    assert "no ranking for 1 subject" in capsys.readouterr().err
    assert main(["rank", "fuse", str(a), str(b), "--missing-subjects", "empty", "--out", str(tmp_path / "o")]) == 0
    fused = (tmp_path / "o").read_text()
    assert sorted(line.split()[0] for line in fused.splitlines()) == ["q1", "q2"]  # each subject from the run that has it
    b.write_text("q1 Q0 d1 1 nan t\n")
    assert main(["rank", "fuse", str(a), str(b), "--out", str(tmp_path / "o")]) == 2
    assert "score is NaN" in capsys.readouterr().err
    assert main(["rank", "fuse", str(a), str(a), "--method", "median", "--out", str(tmp_path / "o")]) == 2
    assert "unknown fusion method 'median'" in capsys.readouterr().err
    # failed runs leave the earlier output as it was, and no temporary file beside it
    assert (tmp_path / "o").read_text() == fused
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.trec", "b.trec", "o"]


def test_search_run_writes_a_trec_run_that_rank_evaluate_scores(tmp_path, corpus, capsys):
    from salience.core.run import Run
    from salience.search import BM25

    index = tmp_path / "ix"
    assert main(["search", "index", str(corpus), "--out", str(index), "--quiet"]) == 0
    capsys.readouterr()
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"_id": "q1", "text": "heat boundary layer"}) + "\n"
                       + json.dumps({"_id": "q2", "text": "slender wings"}) + "\n")
    out = tmp_path / "bm25.trec"
    assert main(["search", "run", str(index), "--queries", str(queries), "-k", "2", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["queries"] == 2
    run = Run.read_trec(out)
    engine = BM25.load(index)
    for qid, text in (("q1", "heat boundary layer"), ("q2", "slender wings")):
        expected = engine.search(text, k=2)
        assert run[qid].ranked_ids() == expected.ids
        assert run[qid].sorted().values.tolist() == pytest.approx(expected.values.tolist())
    assert out.read_text().split("\n")[0].split()[5] == "run-bm25"
    qrels = tmp_path / "qrels.tsv"
    top = engine.search("heat boundary layer", k=1).ids[0]
    qrels.write_text(f"query-id\tcorpus-id\tscore\nq1\t{top}\t1\nq2\tb\t1\n")
    assert main(["rank", "evaluate", str(qrels), str(out), "--metrics", "ndcg@10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ndcg@10"] == pytest.approx(1.0)
    # an earlier run is replaced; an input, an empty queries file or a missing index is refused
    assert main(["search", "run", str(index), "--queries", str(queries), "--out", str(out), "--quiet"]) == 0
    assert main(["search", "run", str(index), "--queries", str(queries), "--out", str(queries)]) == 2
    assert "queries.jsonl" in capsys.readouterr().err and queries.read_text().startswith('{"_id": "q1"')
    (tmp_path / "none.jsonl").write_text("")
    assert main(["search", "run", str(index), "--queries", str(tmp_path / "none.jsonl"), "--out", str(out)]) == 2
    assert "no queries" in capsys.readouterr().err
    assert main(["search", "run", str(tmp_path / "absent"), "--queries", str(queries), "--out", str(tmp_path / "x")]) == 2
    assert main(["search", "run", str(index), "--queries", str(queries), "--hybrid", str(index), "--out",
                 str(tmp_path / "y")]) == 2
    assert "not a dense index" in capsys.readouterr().err
