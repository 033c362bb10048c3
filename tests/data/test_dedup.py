import json

import numpy as np
import pytest

from salience import InvalidParameterError
from salience.cli import main
from salience.data.dedup import dedup_files, dedup_texts, lsh_params, minhash_signatures

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon "
         "phi chi psi omega").split()


def _text(seed: int, n: int = 200) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(rng.choice(WORDS, n))


def _jaccard(a: str, b: str, k: int = 5) -> float:
    grams = lambda t: {tuple(t.split()[i : i + k]) for i in range(len(t.split()) - k + 1)}  # noqa: E731
    A, B = grams(a), grams(b)
    return len(A & B) / len(A | B)


def test_minhash_estimates_jaccard():
    a = _text(1)
    words = a.split()
    words[100] = "CHANGED"
    b = " ".join(words)
    c = _text(2)
    sig = minhash_signatures([a, b, c, "", "two words"], num_perm=256)
    assert abs(np.mean(sig[0] == sig[1]) - _jaccard(a, b)) < 0.08
    assert np.mean(sig[0] == sig[2]) < 0.05
    assert (sig[3] == np.iinfo(np.uint64).max).all() and not (sig[4] == np.iinfo(np.uint64).max).all()


def test_lsh_params_and_dedup_texts():
    b, r = lsh_params(0.8, 128)
    assert b * r <= 128 and 0.6 < (1 / b) ** (1 / r) < 0.9  # the S-curve's threshold sits near 0.8
    a = _text(3)
    words = a.split()
    words[50] = "CHANGED"
    near_copy = " ".join(words)
    texts = [a, a.upper() + "!", near_copy, _text(4), _text(5)]
    assert dedup_texts(texts).ids == [0, 2, 3, 4]  # exact: case and punctuation ignored
    near = dedup_texts(texts, near=True, ids=list("abcde"))
    assert near.ids == ["a", "d", "e"] and near.values.sum() == len(texts)  # every text is accounted for
    with pytest.raises(InvalidParameterError, match="threshold"):
        dedup_texts(texts, near=True, threshold=1.5)


def test_dedup_files_and_cli(tmp_path, capsys):
    a = _text(6)
    words = a.split()
    words[10] = "CHANGED"
    records = [{"id": 0, "text": a}, {"id": 1, "text": a}, {"id": 2, "text": " ".join(words)}, {"id": 3, "text": _text(7)},
               {"id": 4}]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "out.jsonl"
    report = dedup_files([source], out, n_jobs=1)
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [0, 2, 3]
    assert (report.exact_duplicates, report.near_duplicates, report.skipped_no_text) == (1, 0, 1)
    assert main(["data", "dedup", str(source), "--out", str(out), "--near", "--n-jobs", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["near_duplicates"] == 1
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [0, 3]


def test_hashing_in_blocks_changes_no_value(monkeypatch):
    from salience.data import dedup

    texts = [f"document {i} about " + "heat transfer " * (i % 7) for i in range(50)] + ["", "a b"]
    whole = dedup.exact_hashes(texts), dedup.minhash_signatures(texts, 16)
    monkeypatch.setattr(dedup, "TEXTS_PER_BLOCK", 7)
    blocked = dedup.exact_hashes(texts), dedup.minhash_signatures(texts, 16)
    assert all(np.array_equal(a, b) for a, b in zip(whole, blocked))
