"""``--param NAME=VALUE``: typed by the method's constraints, refused by name when unknown,
ambiguous, set by the command itself or out of range; and the value reaches the method (each
command's output equals the library's with the same parameter)."""

import argparse
import json

import numpy as np
import pytest

from salience.cli import main
from salience.cli.params import method_params, role_params
from salience.exceptions import InvalidParameterError


def _args(*pairs):
    return argparse.Namespace(params=list(pairs))


def test_values_are_typed_by_the_constraints():
    # fusion rrf: rrf_k a number, weights a list, missing_subjects one of two options
    params = method_params(_args("rrf_k=10", "weights=[0.7, 0.3]", "missing_subjects=empty"), "fusion", "rrf")
    assert params == {"rrf_k": 10, "weights": [0.7, 0.3], "missing_subjects": "empty"}
    assert type(params["rrf_k"]) is int
    # a boolean, None and a text that reads as a number where a string is wanted
    assert method_params(_args("position_prior=false"), "keywords", "yake") == {"position_prior": False}
    assert method_params(_args("threshold=none"), "summarize", "lexrank") == {"threshold": None}
    assert method_params(_args("threshold=0.1"), "summarize", "lexrank") == {"threshold": 0.1}
    assert method_params(_args("tagger=123"), "keywords", "yake") == {"tagger": 123}  # unconstrained: its reading
    assert method_params(_args(), "fusion", "rrf") == {}


def test_bad_names_and_values_are_named():
    with pytest.raises(InvalidParameterError, match="rrf_kk.*Did you mean 'rrf_k'"):
        method_params(_args("rrf_kk=3"), "fusion", "rrf")
    with pytest.raises(InvalidParameterError, match="damping must be a number in \\(0, 1\\); got 2"):
        method_params(_args("damping=2"), "summarize", "lexrank")
    with pytest.raises(InvalidParameterError, match="Did you mean 'overlap'"):
        method_params(_args("similarity=overlapp"), "summarize", "textrank")
    with pytest.raises(InvalidParameterError, match="NAME=VALUE; got 'rrf_k'"):
        method_params(_args("rrf_k"), "fusion", "rrf")
    with pytest.raises(InvalidParameterError, match="given twice"):
        method_params(_args("rrf_k=1", "rrf_k=2"), "fusion", "rrf")
    with pytest.raises(InvalidParameterError, match="set missing_subjects with --missing-subjects"):
        method_params(_args("missing_subjects=empty"), "fusion", "rrf", {"missing_subjects": "--missing-subjects"})
    with pytest.raises(InvalidParameterError, match="model is set by the command itself"):
        method_params(_args("model=x"), "valuation", "knn_shapley")


def test_a_name_two_roles_share_must_be_qualified():
    roles = {"judge": ("judge", "encoder"), "algorithm": ("rerank", "sliding"), "unused": ("rerank", None)}
    assert role_params(_args("stride=3"), roles)["algorithm"] == {"stride": 3}
    both = {"policy": ("kv", "snapkv"), "press": ("kv", "pyramidkv")}
    with pytest.raises(InvalidParameterError, match="policy and press both have window.*--param press.window"):
        role_params(_args("window=8"), both)
    assert role_params(_args("press.window=8"), both) == {"policy": {}, "press": {"window": 8}}
    with pytest.raises(InvalidParameterError, match="Did you mean 'press'"):
        role_params(_args("pres.window=8"), both)
    with pytest.raises(InvalidParameterError, match="uses none of the methods"):
        role_params(_args("window=8"), {"policy": ("kv", None)})


def test_each_command_passes_the_parameter_on(tmp_path, capsys):
    from salience.core.fusion import fuse
    from salience.core.run import Run
    from salience.keywords import extract_keyphrases

    text = tmp_path / "t.txt"
    text.write_text("Sensor placement is hard in a wireless sensor network. Wireless sensor networks have many "
                    "sensors, and sensor placement is costly. Placement of sensors matters.")
    assert main(["keywords", "extract", str(text), "-k", "3", "--param", "rrf_k=5", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["keyphrases"]
    expected = extract_keyphrases(text.read_text(), k=3, rrf_k=5)  # the default (the fast tier) is an RRF
    assert [g["phrase"] for g in got] == expected.ids
    assert [g["score"] for g in got] == pytest.approx(expected.values.tolist())
    assert expected.values.tolist() != pytest.approx(extract_keyphrases(text.read_text(), k=3).values.tolist())

    runs = [Run({"q": {"a": 3.0, "b": 2.0, "c": 1.0}}), Run({"q": {"c": 3.0, "a": 2.0, "b": 1.0}})]
    for i, run in enumerate(runs):
        run.write_trec(tmp_path / f"r{i}.trec")
    out = tmp_path / "fused.trec"
    assert main(["rank", "fuse", str(tmp_path / "r0.trec"), str(tmp_path / "r1.trec"), "--out", str(out),
                 "--param", "rrf_k=1", "--param", "weights=[1, 3]", "--quiet"]) == 0
    fused = Run.read_trec(out)["q"]
    want = fuse(runs, rrf_k=1, weights=[1, 3])["q"]
    assert fused.ranked_ids() == want.ranked_ids() == ["c", "a", "b"]  # 1/2 + 3/3, 1/3 + 3/4, 1/4 + 3/2
    assert np.allclose(fused.sorted().values, want.sorted().values, atol=1e-6)
    capsys.readouterr()
    assert main(["rank", "fuse", str(tmp_path / "r0.trec"), str(tmp_path / "r1.trec"), "--out", str(out),
                 "--param", "rrf_k=-1"]) == 2
    assert "rrf_k" in capsys.readouterr().err


#: every command that runs a method chosen by name
METHOD_COMMANDS = [("search", "index"), ("search", "evaluate"), ("search", "rerank"), ("search", "answer"),
                   ("compress", "prune"), ("compress", "quantize"), ("compress", "structured"), ("compress", "layers"),
                   ("compress", "kv-eval"), ("keywords", "extract"), ("keywords", "evaluate"),
                   ("summarize", "extract"), ("summarize", "evaluate"), ("data", "select"), ("data", "value"),
                   ("rank", "fuse"), ("explain", "search"), ("explain", "text"), ("explain", "lm")]


@pytest.mark.parametrize("domain,command", METHOD_COMMANDS)
def test_every_command_that_runs_a_method_takes_param(domain, command):
    from salience.cli import build_parser

    parser = build_parser(domain)
    sub = next(a for a in parser._subparsers._group_actions[0].choices[domain]._subparsers._group_actions
               if isinstance(a, argparse._SubParsersAction)).choices[command]
    assert "--param" in sub._option_string_actions, f"{domain} {command}"


def test_search_index_sets_the_variants_parameters(tmp_path, capsys):
    from salience.search import BM25

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": str(i), "text": t}) + "\n" for i, t in enumerate(["red fox", "blue"])))
    assert main(["search", "index", str(corpus), "--out", str(tmp_path / "ix"), "--param", "store_documents=false",
                 "--quiet"]) == 0
    assert BM25.load(tmp_path / "ix").store_documents is False
    assert main(["search", "index", str(corpus), "--out", str(tmp_path / "ix"), "--param", "k1=2"]) == 2
    assert "set k1 with --k1" in capsys.readouterr().err


@pytest.mark.parametrize("command,named", [
    (["compress", "layers", "smollm2", "--remove", "1", "--param", "batch_size=0"], "batch_size must be a positive"),
    (["compress", "prune", "smollm2", "--method", "sparsegpt", "--param", "damp=-1"], "damp"),
    (["compress", "quantize", "smollm2", "--method", "gptq", "--param", "actorder=maybe"], "actorder"),
    (["compress", "structured", "smollm2", "--fraction", "0.1", "--param", "batch_size=0"], "batch_size"),
    (["compress", "kv-eval", "smollm2", "--policy", "adakv", "--press", "snapkv", "--param", "windw=8"], "'window'"),
    (["compress", "kv-eval", "smollm2", "--policy", "full", "--param", "window=8"], "uses none of the methods"),
])
def test_compress_commands_check_their_params_before_a_model_loads(command, named, tmp_path, capsys):
    pytest.importorskip("torch")  # without it the commands stop first, naming the extra
    calib = tmp_path / "calib.txt"
    calib.write_text("some calibration text")
    extra = ["--data", str(calib)] if "kv-eval" in command else ["--calib", str(calib), "--out", str(tmp_path / "out")]
    assert main(command + extra) == 2
    assert named in capsys.readouterr().err
