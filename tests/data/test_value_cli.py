"""``salience data value``: labelled records in, one value per record out, bad input named."""

import json

import numpy as np
import pytest

from salience.cli import main

pytest.importorskip("sklearn")


@pytest.fixture
def wine_files(tmp_path):
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    order = np.random.default_rng(0).permutation(len(y))
    noisy = y.copy()
    flipped = order[:6]
    noisy[flipped] = (y[flipped] + 1) % 3
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text("".join(json.dumps({"id": f"w{i}", "x": X[i].tolist(), "label": int(noisy[i])}) + "\n"
                             for i in order[:100]))
    test.write_text("".join(json.dumps({"x": X[i].tolist(), "label": int(y[i])}) + "\n" for i in order[100:]))
    return train, test, {f"w{i}" for i in flipped}


def test_value_writes_one_line_per_record_and_the_flipped_come_last(wine_files, tmp_path, capsys):
    train, test, flipped = wine_files
    out = tmp_path / "values.jsonl"
    assert main(["data", "value", str(train), "--test", str(test), "--features", "x", "--method", "knn_shapley",
                 "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 100 and report["records"] == 100 and report["fits"] == 0
    lowest = {r["id"] for r in sorted(rows, key=lambda r: r["salience_value"])[:6]}
    assert len(lowest & flipped) >= 5 and set(report["lowest"]) <= lowest
    # its own earlier output is replaced; confident learning needs no test set and flags issues
    assert main(["data", "value", str(train), "--features", "x", "--method", "confident_learning", "--folds", "4",
                 "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert report["fits"] == 4 and {r["id"] for r in rows if r["label_issue"]} & flipped
    assert main(["data", "value", str(train), "--features", "x", "--method", "confident_learning", "--folds", "4",
                 "--neighbors", "5", "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    voted = [json.loads(line) for line in out.read_text().splitlines()]
    assert report["fits"] == 4 and [r["salience_value"] for r in voted] != [r["salience_value"] for r in rows]
    assert len({r["id"] for r in sorted(voted, key=lambda r: r["salience_value"])[:6]} & flipped) >= 5
    assert main(["data", "value", str(train), "--test", str(test), "--features", "x", "--method", "tmc_shapley",
                 "--budget", "150", "--model", "knn", "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # a 5-neighbour vote cannot be fitted on fewer than 5 rows: counted, named, valued as empty
    assert report["fits"] <= 150 and report["failed_fits"] > 0 and "n_neighbors" in report["first_failure"]


def test_value_refuses_bad_input_by_name(wine_files, tmp_path, capsys):
    train, test, _ = wine_files
    base = ["data", "value", str(train), "--features", "x"]

    def refused(argv, message):
        assert main(base + argv) == 2
        assert message in capsys.readouterr().err

    refused(["--test", str(test), "--out", str(train)], "is the input")
    refused(["--test", str(test), "--label-field", "grade", "--out", str(tmp_path / "v.jsonl")], "no 'grade' field")
    refused(["--test", str(test), "--budget", "10", "--out", str(tmp_path / "v.jsonl")],
            "'knn_shapley' has no parameter 'budget'")
    refused(["--method", "loo", "--out", str(tmp_path / "v.jsonl")], "pass test=")
    other = tmp_path / "other.txt"
    other.write_text("not mine")
    refused(["--test", str(test), "--out", str(other)], "already exists")
    assert not (tmp_path / "v.jsonl").exists() and other.read_text() == "not mine"


def test_select_prunes_by_value_with_class_quotas(wine_files, tmp_path, capsys):
    train, test, flipped = wine_files
    out = tmp_path / "kept.jsonl"
    base = ["data", "select", "--raw", str(train), "--features", "x", "--label-field", "label", "--out", str(out)]
    assert main(base + ["--method", "aum", "--fraction", "0.9", "--by-class", "--epochs", "6", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    records = {json.loads(line)["id"]: json.loads(line) for line in train.read_text().splitlines()}
    assert len(kept) == report["kept"] == 90 and report["fits"] == 3
    # every record is written whole with its score, and each class keeps its share (largest remainders)
    assert all({k: v for k, v in row.items() if k != "salience_score"} == records[row["id"]] for row in kept)
    counts = {label: sum(r["label"] == int(label) for r in records.values()) for label in ("0", "1", "2")}
    assert {label: c["records"] for label, c in report["by_class"].items()} == counts
    assert sum(c["kept"] for c in report["by_class"].values()) == 90
    assert all(abs(c["kept"] - 0.9 * c["records"]) < 1 for c in report["by_class"].values())
    # the 10 dropped are the lowest margins: most of the 6 flipped labels among them
    assert len(flipped - {r["id"] for r in kept}) >= 4
    # KNN-Shapley against the test records, -k records kept, the highest valued
    assert main(base + ["--method", "knn_shapley", "--target", str(test), "-k", "94", "--json"]) == 0
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(kept) == 94 and len(flipped - {r["id"] for r in kept}) >= 5
    assert [r["salience_score"] for r in kept] == sorted((r["salience_score"] for r in kept), reverse=True)


def test_select_by_value_refuses_bad_input_by_name(wine_files, tmp_path, capsys):
    train, test, _ = wine_files
    out = tmp_path / "kept.jsonl"
    base = ["data", "select", "--raw", str(train), "--label-field", "label", "--out", str(out)]

    def refused(argv, message):
        assert main(base + argv) == 2
        assert message in capsys.readouterr().err

    refused(["--method", "el2n", "--features", "x", "--fraction", "1.5"], "--fraction 1.5 must lie in (0, 1]")
    refused(["--method", "el2n", "--features", "x", "--fraction", "0.5", "-k", "3"], "give one of -k")
    refused(["--method", "el2n", "--fraction", "0.5"], "give --features")
    refused(["--method", "el2n", "--features", "x", "-k", "500"], "-k 500 exceeds the 100 records")
    refused(["--method", "el2n", "--features", "x", "--model", "logistic", "-k", "5"], "partial_fit")
    refused(["--method", "knn_shapley", "--features", "x", "-k", "5"], "pass test=")
    refused(["--method", "dsir", "--target", str(test), "--fraction", "0.5"], "--fraction and --by-class prune")
    assert not out.exists()


def test_value_writes_parquet(wine_files, tmp_path, capsys):
    parquet = pytest.importorskip("pyarrow.parquet")
    train, test, flipped = wine_files
    out, lines = tmp_path / "values.parquet", tmp_path / "values.jsonl"
    base = ["data", "value", str(train), "--test", str(test), "--features", "x", "--method", "knn_shapley"]
    assert main(base + ["--out", str(lines), "--json"]) == 0
    assert main(base + ["--out", str(out), "--json"]) == 0
    table = parquet.read_table(out).to_pylist()
    expected = [json.loads(line) for line in lines.read_text().splitlines()]
    assert table == expected and len(table) == 100
    assert main(base + ["--out", str(out), "--json"]) == 0  # its own earlier output is replaced
    other = tmp_path / "other.parquet"
    other.write_bytes(b"not parquet")
    capsys.readouterr()
    assert main(base + ["--out", str(other)]) == 2
    assert "already exists" in capsys.readouterr().err and other.read_bytes() == b"not parquet"


def test_value_by_tracin_from_the_shell(wine_files, tmp_path, capsys):
    train, test, flipped = wine_files
    out = tmp_path / "values.jsonl"
    base = ["data", "value", str(train), "--features", "x", "--out", str(out), "--epochs", "6", "--json"]
    assert main(base + ["--test", str(test), "--method", "tracin", "--similarity", "dot"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] == 3
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    lowest = {r["id"] for r in sorted(rows, key=lambda r: r["salience_value"])[:10]}
    assert len(lowest & flipped) >= 4  # the flipped pull the model away from the test labels
    assert main(base + ["--method", "tracin_self"]) == 0  # self-influence needs no test set
    capsys.readouterr()
    highest = {r["id"] for r in sorted((json.loads(line) for line in out.read_text().splitlines()),
                                       key=lambda r: -r["salience_value"])[:10]}
    assert len(highest & flipped) >= 4
    assert main(base + ["--test", str(test), "--method", "tracin", "--similarity", "sine"]) == 2
    assert "invalid choice: 'sine'" in capsys.readouterr().err


def test_a_killed_valuation_resumes_from_its_journal(wine_files, tmp_path, capsys, monkeypatch):
    from salience.data.utility import ModelUtility

    train, test, _ = wine_files
    out = tmp_path / "values.jsonl"
    command = ["data", "value", str(train), "--test", str(test), "--features", "x", "--method", "data_banzhaf",
               "--budget", "96", "--out", str(out), "--json"]
    assert main(command) == 0
    unbroken = out.read_text()
    out.unlink()
    capsys.readouterr()
    evaluate, calls = ModelUtility._evaluate, []

    def dying(self, masks):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return evaluate(self, masks)

    with monkeypatch.context() as patch:
        patch.setattr(ModelUtility, "_evaluate", dying)
        assert main(command) == 130
    journal = tmp_path / "values.jsonl.journal"
    assert "--resume continues" in capsys.readouterr().err and journal.exists() and not out.exists()
    assert main(command) == 2  # an unfinished run is not silently thrown away
    assert "pass --resume" in capsys.readouterr().err
    assert main(command + ["--resume"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["replayed_coalitions"] >= 32 and report["fits"] == 96
    assert out.read_text() == unbroken and not journal.exists()


def test_a_valuation_methods_own_parameter_is_set_with_param(wine_files, tmp_path, capsys):
    """``--param metric=cosine`` reaches KNN-Shapley (the values equal the library's with it, and
    differ from the default metric's); a text method's streaming selection refuses --param."""
    from salience.cli.valuation import read_labelled
    from salience.core.base import create

    train, test, _ = wine_files
    out = tmp_path / "values.jsonl"
    assert main(["data", "value", str(train), "--test", str(test), "--features", "x", "--method", "knn_shapley",
                 "--param", "metric=cosine", "--out", str(out), "--quiet"]) == 0
    values = {r["id"]: r["salience_value"] for r in map(json.loads, out.read_text().splitlines())}
    X, y, ids = read_labelled(str(train), ["x"], "label", "id")
    Xt, yt, _ = read_labelled(str(test), ["x"], "label", "id")
    for metric in ("cosine", "euclidean"):
        expected = create("valuation", "knn_shapley", metric=metric).score((X, y), (Xt, yt), ids=ids)
        same = np.allclose([values[i] for i in expected.ids], expected.values, atol=1e-12)
        assert same == (metric == "cosine")
    capsys.readouterr()
    assert main(["data", "value", str(train), "--test", str(test), "--features", "x", "--method", "knn_shapley",
                 "--param", "metric=manhatan", "--out", str(out)]) == 2
    assert "metric" in capsys.readouterr().err
    assert main(["data", "select", "--target", str(test), "--raw", str(train), "--out", str(tmp_path / "s.jsonl"),
                 "-k", "5", "--param", "buckets=8"]) == 2
    assert "--param sets a valuation method's parameters" in capsys.readouterr().err
