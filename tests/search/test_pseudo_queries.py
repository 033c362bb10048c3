"""Training pairs from a corpus itself: titles for their bodies, the inverse cloze task's
central sentence for the rest of the body, each kept only if its passage survives BM25's round
trip, with BM25's best other documents as hard negatives."""

import json

import pytest

from salience.exceptions import InvalidParameterError
from salience.search import BM25
from salience.search.pseudo_queries import _central_sentence, pseudo_queries

DOCS = [
    {"_id": "heat", "title": "Heat transfer in boundary layers",
     "text": "Boundary layers carry heat from the wall. Heat transfer in boundary layers grows with speed. "
             "The wall temperature rises."},
    {"_id": "wing", "title": "Lift of slender wings", "text": "Slender wings produce lift at high angles. "
                                                             "Vortices form over slender wings."},
    {"_id": "fish", "title": "Reef fish and coral bleaching", "text": "Unrelated words about oceans only."},
    {"_id": "flow", "title": "", "text": "Heat flow near the wall of a pipe. The pipe wall is hot."},
]


def test_the_central_sentence_is_the_one_most_like_the_rest():
    sentences = ["Cats chase mice in barns.", "Cats and dogs chase mice and rabbits in barns and fields.",
                 "Dogs chase rabbits in fields."]
    assert _central_sentence(sentences, min_words=3) == 1  # it shares words with both others
    assert _central_sentence(sentences[:1], min_words=3) is None  # nothing left to be its passage
    assert _central_sentence(["Yes.", "No way."], min_words=3) is None  # too short to be a query


def test_pairs_survive_the_round_trip_with_hard_negatives():
    pairs, report = pseudo_queries(DOCS, k=1, negatives=2)
    by_key = {(p.doc_id, p.source): p for p in pairs}
    # the fish title shares no word with its body: it cannot find it, so it is dropped
    assert ("fish", "title") not in by_key and report["candidates"]["title"] == 3
    heat = by_key[("heat", "title")]
    assert heat.passage == DOCS[0]["text"] and heat.rank == 1 and "heat" not in heat.negatives
    index = BM25(fields=("text",)).index([{"id": d["_id"], "text": d["text"]} for d in DOCS])
    expected = [d for d in index.search(heat.query, k=4).ids if d != "heat"][:2]
    assert list(heat.negatives) == expected
    sentence = by_key[("heat", "sentence")]
    # by hand (sentence frequencies within the body as idf): cosine to the rest 0.416 for the first
    # sentence, 0.208 for the second, the third too short to be a query
    assert sentence.query == "Boundary layers carry heat from the wall."
    assert sentence.passage == "Heat transfer in boundary layers grows with speed. The wall temperature rises."
    # the passage is scored without its sentence against the other bodies: its rank is that score's
    own = index.score_texts(sentence.query, [sentence.passage])[0]
    found = index.search(sentence.query, k=4)
    others = [s for d, s in zip(found.ids, found.values) if d != "heat"]
    assert sentence.rank == 1 + sum(s > own for s in others)
    assert all(p.rank <= 1 for p in pairs)
    assert json.loads(json.dumps(heat.to_dict()))["negatives"] == list(heat.negatives)


def test_a_corpus_without_titles_falls_back_to_sentences_and_bad_input_is_refused():
    untitled = [{**d, "title": ""} for d in DOCS]
    pairs, report = pseudo_queries(untitled, k=10)
    assert report["sources"] == ["sentence"] and {p.source for p in pairs} == {"sentence"}
    assert len(pseudo_queries(DOCS, k=10, max_pairs=2)[0]) <= 2
    with pytest.raises(InvalidParameterError, match="sources must be some of title, sentence, window"):
        pseudo_queries(DOCS, sources=["questions"])
    with pytest.raises(InvalidParameterError, match="k must be a whole number >= 1"):
        pseudo_queries(DOCS, k=0)
    with pytest.raises(InvalidParameterError, match="fewer than 2 documents with a body"):
        pseudo_queries(DOCS[:1])


def test_unpunctuated_bodies_are_cut_into_windows_and_a_title_prefix_is_removed():
    docs = [{"_id": "a", "title": "jet noise of nozzles",
             "text": "jet noise of nozzles measured noise of a jet from round nozzles at high speed the noise of "
                     "the jet grows with speed tables of results given"},
            {"_id": "b", "title": "", "text": "boundary layer heat transfer on a heated plate in supersonic flow "
                                              "measured by thin film gauges"},
            {"_id": "c", "title": "", "text": "transonic wing flutter"}]
    pairs, report = pseudo_queries(docs, k=3, window_words=4, negatives=1)
    by_key = {(p.doc_id, p.source): p for p in pairs}
    # the body without its title: the title's passage does not begin with the query
    assert by_key[("a", "title")].passage == ("measured noise of a jet from round nozzles at high speed the noise of "
                                             "the jet grows with speed tables of results given")
    # no sentence boundary: windows of 4 words; "c" has one window only, nothing left to be its passage
    assert report["candidates"] == {"title": 1, "window": 2} and "sentence" not in report["candidates"]
    window = by_key[("a", "window")]
    assert len(window.query.split()) == 4 and window.query in docs[0]["text"]
    body = docs[0]["text"][len("jet noise of nozzles "):].split()
    windows = [" ".join(body[i : i + 4]) for i in range(0, len(body), 4)]
    assert window.query in windows[:-1]  # the last window (3 words) is too short to be a query
    assert window.passage == " ".join(w for w in windows if w != window.query)
    with pytest.raises(InvalidParameterError, match="window_words must be a whole number >= 2"):
        pseudo_queries(docs, window_words=1)


def test_command_line_writes_pairs_and_protects_its_input(tmp_path, capsys):
    from salience.cli import main

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    out = tmp_path / "pairs.jsonl"
    assert main(["search", "queries", str(corpus), "--out", str(out), "-k", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert report["pairs"] == len(rows) > 0 and {"query", "doc_id", "passage", "source", "rank", "negatives"} <= set(rows[0])
    assert main(["search", "queries", str(corpus), "--out", str(out), "--sources", "title"]) == 0  # its own: replaced
    assert {json.loads(line)["source"] for line in out.read_text().splitlines()} == {"title"}
    assert main(["search", "queries", str(corpus), "--out", str(corpus)]) == 2
    assert "is the input" in capsys.readouterr().err and corpus.read_text().startswith('{"_id": "heat"')
