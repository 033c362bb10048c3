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
