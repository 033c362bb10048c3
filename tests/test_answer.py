"""The answer path on a tiny LLaMA and a BM25 index built in the test: each stage equals the
part it composes run by hand (retrieval order, packing, attention sorting, the model's greedy
answer, the context method's citations, the top-k drop), an evicted cache that keeps every
token answers as the full one, the CLI and the library agree; bad input named."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from salience.answer import answer  # noqa: E402
from salience.core.base import create  # noqa: E402
from salience.exceptions import InvalidParameterError  # noqa: E402
from salience.models.answering import SourcedQuestion  # noqa: E402
from salience.search import BM25  # noqa: E402

DOCS = [{"_id": "a", "text": "cats sleep ."}, {"_id": "b", "text": "dogs bark . dogs sleep ."},
        {"_id": "c", "text": "fish swim ."}, {"_id": "d", "text": "cats swim . cats sleep ."}]
QUESTION = "Which cats sleep ?"


@pytest.fixture(scope="module")
def tiny():
    from tests.models.tiny import tiny_lm

    return tiny_lm()


@pytest.fixture(scope="module")
def index():
    return BM25().index(DOCS)


def test_each_stage_equals_its_part_run_by_hand(tiny, index):
    model, tokenizer = tiny
    result = answer(index, QUESTION, model=model, tokenizer=tokenizer, max_new_tokens=4, random_draws=2,
                    cite="attention")
    ranked = index.search(QUESTION, k=20)
    assert [p["id"] for p in result.passages] == ranked.ids  # all k read, in rank order (best first)
    texts = [p["text"] for p in result.passages]
    greedy = SourcedQuestion(model, tokenizer, texts, QUESTION, max_new_tokens=4)
    assert result.answer == greedy.response
    scores = create("context", "attention", model=model, tokenizer=tokenizer).score(
        dict(zip(ranked.ids, texts)), QUESTION, response=greedy.response_ids)
    positive = [(i, v) for i, v in zip(scores.sorted().ids, scores.sorted().values) if v > 0][:3]
    assert [(c.id, c.score) for c in result.citations] == [(i, pytest.approx(v)) for i, v in positive]
    # the verification: the answer's log-probability without the best cited passage, by hand
    best = ranked.ids.index(scores.sorted().ids[0])
    kept = np.ones(len(texts), dtype=bool)
    kept[best] = False
    by_hand = greedy.log_probs(np.array([np.ones(len(texts), dtype=bool), kept]))
    assert result.verification["top_k_drop"]["1"] == pytest.approx(by_hand[0] - by_hand[1], abs=1e-6)
    assert set(result.verification["random_k_drop"]) == {"1"} and result.verification["random_draws"] == 2
    for citation in result.citations:  # highlighted sentences are spans of the cited passage
        assert citation.sentences and all(citation.text[s["start"]:s["end"]] == s["text"] for s in citation.sentences)
    assert result.forward_passes > 0 and set(result.seconds) >= {"retrieve", "generate", "cite", "verify"}
    assert json.loads(json.dumps(result.to_dict()))["answer"] == result.answer


def test_budget_packs_in_rank_order_and_sorting_is_attention_sortings(tiny, index):
    from salience.search import attention_sort

    model, tokenizer = tiny
    result = answer(index, QUESTION, model=model, tokenizer=tokenizer, budget=9, max_new_tokens=3, cite=None)
    assert sum(p["tokens"] for p in result.passages) <= 9 and result.citations == []
    assert [p["rank"] for p in result.passages] == sorted(p["rank"] for p in result.passages)
    packed = {p["id"]: p["text"] for p in result.passages}
    assert len(packed) >= 2
    by_hand = attention_sort(packed, QUESTION, model=model, tokenizer=tokenizer)
    ordered = answer(index, QUESTION, model=model, tokenizer=tokenizer, budget=9, sort="attention", max_new_tokens=3,
                     cite=None)
    assert [p["id"] for p in ordered.passages] == by_hand and "sort" in ordered.seconds


def test_an_evicted_cache_that_keeps_every_token_answers_as_the_full_one(tiny, index):
    model, tokenizer = tiny
    full = answer(index, QUESTION, model=model, tokenizer=tokenizer, max_new_tokens=5, cite=None)
    policy = create("kv", "snapkv", window=2)
    kept_all = answer(index, QUESTION, model=model, tokenizer=tokenizer, max_new_tokens=5, cite=None, kv_policy=policy,
                      kv_budget=1.0)
    assert kept_all.answer == full.answer and kept_all.settings["kv_policy"] == "snapkv"
    assert any("evicted by snapkv" in n for n in kept_all.notes)
    halved = answer(index, QUESTION, model=model, tokenizer=tokenizer, max_new_tokens=5, kv_policy=policy, kv_budget=0.5)
    assert halved.answer and halved.verification["top_k_drop"]


def test_a_context_past_the_window_is_refused_unless_packed(tiny):
    model, tokenizer = tiny  # a window of 128 tokens
    long = BM25().index([{"_id": str(i), "text": " ".join(["cats sleep"] * 20)} for i in range(6)])
    with pytest.raises(InvalidParameterError, match=r"prompt \(\d+ tokens with every source\).*window of 128 tokens.*"
                                                    r"budget"):
        answer(long, "cats", model=model, tokenizer=tokenizer, max_new_tokens=4)
    packed = answer(long, "cats", model=model, tokenizer=tokenizer, max_new_tokens=4, budget=80, cite="loo")
    assert len(packed.passages) == 2 and packed.verification["top_k_drop"]


def test_one_passage_and_bad_input_are_named(tiny, index):
    model, tokenizer = tiny
    one = answer(index, "fish", model=model, tokenizer=tokenizer, max_new_tokens=3)
    assert [p["id"] for p in one.passages] == ["c"] and any("one source" in n for n in one.notes)
    assert one.verification["top_k_drop"].keys() == {"1"} and one.verification["random_k_drop"] == {}
    common = {"model": model, "tokenizer": tokenizer, "max_new_tokens": 3}
    for options, message in [({"cite": "magic"}, "cite must be a context method"),
                             ({"sort": "reverse"}, "sort must be one of attention"),
                             ({"kv_budget": 0.5}, "kv_budget needs kv_policy"),
                             ({"budget": 20, "pack_method": "mmr"}, "no passage similarities"),
                             ({"budget": 0}, "budget"), ({"k": 0}, "k"), ({"random_draws": -1}, "random_draws")]:
        with pytest.raises(InvalidParameterError, match=message):
            answer(index, QUESTION, **common, **options)
    with pytest.raises(InvalidParameterError, match="question must be a non-empty text"):
        answer(index, "  ", **common)
    with pytest.raises(InvalidParameterError, match="matches no passage"):
        answer(index, "zebra", **common)
    with pytest.raises(InvalidParameterError, match="budget 2 holds no passage: the shortest of the 2 retrieved has 3"):
        answer(index, "cats", **common, budget=2)
    bare = BM25(store_documents=False).index(DOCS)
    with pytest.raises(InvalidParameterError, match="stores no documents"):
        answer(bare, QUESTION, **common)
    with pytest.raises(InvalidParameterError, match="answered nothing to this question"):
        answer(index, "Which fish swim ?", **common)  # the tiny model's first token ends the sequence
    # a question in a language the model does not read: runs
    assert answer(index, "cats ¿dónde duermen los gatos? 猫", **common).passages


def test_the_command_line_prints_what_the_library_returns(tiny, index, tmp_path, capsys):
    from salience.cli import main
    from tests.models.tiny import save_tiny_lm

    model, tokenizer = tiny
    folder = save_tiny_lm(tmp_path / "tiny-lm")
    saved = tmp_path / "pets"
    index.save(saved)
    assert main(["search", "answer", str(saved), QUESTION, "--model", str(folder), "--max-new-tokens", "4",
                 "--cite", "loo", "--budget", "12", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = answer(index, QUESTION, model=model, tokenizer=tokenizer, max_new_tokens=4, cite="loo", budget=12)
    assert printed["answer"] == expected.answer
    assert [c["id"] for c in printed["citations"]] == [c.id for c in expected.citations]
    assert printed["verification"]["top_k_drop"] == pytest.approx(expected.verification["top_k_drop"])
    assert main(["search", "answer", str(saved), QUESTION, "--model", str(folder), "--max-new-tokens", "4",
                 "--json"]) == 0
    default = json.loads(capsys.readouterr().out)
    assert default["settings"]["cite"] == "loo"  # the default, chosen on dev
    assert main(["search", "answer", str(saved), QUESTION, "--model", str(folder), "--max-new-tokens", "4",
                 "--lookup-tokens", "3", "--dtype", "float32", "--json"]) == 0
    looked = json.loads(capsys.readouterr().out)
    assert looked["settings"]["lookup_tokens"] == 3 and looked["answer"] == default["answer"]
    assert main(["search", "answer", str(saved), QUESTION, "--model", str(folder), "--lookup-tokens", "-2",
                 "--quiet"]) == 2
    assert "lookup_tokens must be an int >= 0" in capsys.readouterr().err
    assert main(["search", "answer", str(saved), QUESTION, "--model", str(folder), "--max-new-tokens", "4"]) == 0
    text = capsys.readouterr().out
    assert "[1]" in text and "verified: log-probability drop" in text
    assert main(["search", "answer", str(saved), QUESTION, "--model", str(folder), "--kv-budget", "0.5",
                 "--quiet"]) == 2
    assert "--kv-budget needs --kv-policy" in capsys.readouterr().err
    # the named methods' own parameters: --param, by the option's name where two share one
    assert main(["search", "answer", str(saved), QUESTION, "--model", str(folder), "--max-new-tokens", "4",
                 "--cite", "contextcite", "--param", "n_ablations=6", "--kv-policy", "snapkv", "--kv-budget", "0.9",
                 "--param", "window=2", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = answer(index, QUESTION, model=model, tokenizer=tokenizer, max_new_tokens=4, cite="contextcite",
                      kv_policy="snapkv", kv_budget=0.9, params={"cite": {"n_ablations": 6}, "kv_policy": {"window": 2}})
    assert printed["forward_passes"] == expected.forward_passes
    assert [c["score"] for c in printed["citations"]] == pytest.approx([c.score for c in expected.citations])
    assert main(["search", "answer", str(saved), QUESTION, "--model", str(folder), "--param", "max_new_tokens=3"]) == 2
    assert "set max_new_tokens with --max-new-tokens" in capsys.readouterr().err
    with pytest.raises(InvalidParameterError, match="params are keyed by the options naming a method"):
        answer(index, QUESTION, model=model, tokenizer=tokenizer, params={"sort": {}})
