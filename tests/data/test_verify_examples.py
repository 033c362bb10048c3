"""The examples verifier: OpenDataVal's point removal under the protocol, with the model the
values are for; an easy set whose model does not move is undetermined, not faithful."""

import numpy as np
import pytest

from salience import Scores
from salience.core.base import create
from salience.exceptions import IdMismatchError

sklearn = pytest.importorskip("sklearn")
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier  # noqa: E402


@pytest.fixture(scope="module")
def noisy():
    X, y = load_breast_cancer(return_X_y=True)
    rng = np.random.default_rng(0)
    keep = rng.permutation(len(X))[:300]
    X, y = X[keep], y[keep]
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    train_y = y[:200].copy()
    flipped = rng.choice(200, 30, replace=False)
    train_y[flipped] = 1 - train_y[flipped]
    return (X[:200], train_y), (X[200:], y[200:])


def test_knn_shapley_values_are_faithful_to_a_knn_refit_and_random_values_are_not(noisy):
    train, test = noisy
    values = create("valuation", "knn_shapley", k=10).score(train, test)
    verifier = create("verify", "examples", model=KNeighborsClassifier(10))
    result = verifier.verify(values, train=train, test=test)
    assert result.verdict == "faithful" and result.p_value < 1e-6
    # the low-valued rows (many of them mislabelled) removed first: the test score rises above random's
    assert result.areas["reversed"] > result.areas["random_mean"]
    assert result.costs["fits"] == result.evaluations and result.fractions[-1] == pytest.approx(0.5)
    random = verifier.verify(np.random.default_rng(2).random(200), train=train, test=test)
    assert random.verdict == "no better than random"


def test_a_model_that_does_not_move_is_undetermined():
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(-6, 0.3, size=(40, 2)), rng.normal(6, 0.3, size=(40, 2))])
    y = np.repeat([0, 1], 40)
    order = rng.permutation(80)
    X, y = X[order], y[order]
    result = create("verify", "examples").verify(rng.random(60), train=(X[:60], y[:60]), test=(X[60:], y[60:]))
    assert result.verdict == "undetermined"


def test_failed_refits_leave_their_steps_out_and_ids_are_matched(noisy):
    train, test = noisy
    small = (train[0][:12], train[1][:12])
    verifier = create("verify", "examples", max_fraction=1.0, steps=11, n_random=4)
    result = verifier.verify(np.arange(12.0), train=small, test=test)
    # late steps keep one class only: no model can be fitted there, in any order, so they are left out
    assert result.fractions[-1] < 11 / 12 and any("steps left out" in note for note in result.notes)
    assert result.costs["fits"] < result.evaluations
    ids = [f"r{i}" for i in range(12)]
    with pytest.raises(IdMismatchError, match="no unit"):
        verifier.verify(Scores(np.arange(12.0), ids=[f"x{i}" for i in range(12)]), train=small, test=test, ids=ids)
    by_id = verifier.verify(Scores(np.arange(12.0)[::-1], ids=ids[::-1]), train=small, test=test, ids=ids)
    assert np.allclose(by_id.curves["scores"], verifier.verify(np.arange(12.0), train=small, test=test).curves["scores"])


def test_verify_examples_from_the_command_line_reads_data_values_output(noisy, tmp_path, capsys):
    import json

    from salience.cli import main

    (X, y), (X_test, y_test) = noisy

    def write(path, X, y, prefix):
        path.write_text("".join(json.dumps({"id": f"{prefix}{i}", "x": row.tolist(), "label": int(label)}) + "\n"
                                for i, (row, label) in enumerate(zip(X, y))))
        return path

    train, test = write(tmp_path / "train.jsonl", X, y, "r"), write(tmp_path / "test.jsonl", X_test, y_test, "t")
    values = tmp_path / "values.jsonl"
    assert main(["data", "value", str(train), "--test", str(test), "--features", "x", "--method", "knn_shapley",
                 "--out", str(values), "--quiet"]) == 0
    capsys.readouterr()
    report = tmp_path / "report.json"
    command = ["verify", "examples", str(values), "--train", str(train), "--test", str(test), "--features", "x",
               "--model", "knn", "--out", str(report), "--json"]
    assert main(command) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads(report.read_text())
    assert printed["verdict"] == saved["verdict"] == "faithful" and saved["p_value"] < 1e-6
    assert len(saved["curves"]["random"]) == 20 and saved["unit"] == "examples"
    assert main(command) == 0  # its own earlier report is replaced
    capsys.readouterr()
    html = tmp_path / "report.html"
    assert main(command[:-3] + ["--out", str(html), "--quiet"]) == 0 and "<svg" in html.read_text()
    # bad input, each named
    for extra, expected in ((["--random", "1"], "--random must be at least 2"),
                            (["--out", str(train)], "is the input")):
        assert main(command[:-3] + extra + ["--quiet"]) == 2
        assert expected in capsys.readouterr().err
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"id": "zzz", "salience_value": 1.0}) + "\n")
    assert main(["verify", "examples", str(other), "--train", str(train), "--test", str(test), "--features", "x",
                 "--quiet"]) == 2
    assert "ids do not match the units" in capsys.readouterr().err
