"""Training pairs without a relevance label: (query, passage) pairs made from a corpus itself,
for training rerankers on the collection they will rerank (InPars, Promptagator and GPL generate
queries; the Inverse Cloze Task, Lee et al. 2019, takes them from the passage).

Sources of a document's query:

* ``title``: its title, the passage its body (where the corpus has titles).
* ``sentence``: the Inverse Cloze Task: the sentence of its body most like the rest of the
  body (TF-IDF cosine: the sentence that best summarises it) is the query, the body without
  that sentence the passage.
* ``question``: a query a language model wrote for the body (InPars, Promptagator:
  :class:`~salience.search.query_generation.QueryGenerator`, few-shot, batched, prefix-cached),
  for at most ``max_questions`` documents (a seeded sample): ``generator`` must be given.
* ``window``: the same as ``sentence`` for bodies the sentence splitter cannot cut (unpunctuated or lower-case
  text, as in NPL and Cranfield): consecutive windows of ``window_words`` words take the
  sentences' place. Only documents that give no sentence pair are cut into windows.

A body that begins with its title (Cranfield's do) loses that prefix first: a title's query would
otherwise be found verbatim at its passage's start, which teaches nothing.

Every pair is kept only if it survives the round trip (Alberti et al. 2019; InPars): its
passage must rank within BM25's top ``k`` of the collection for its query, the passage scored
as it is given (a sentence's passage without the sentence) against every other document's
body. Each kept pair carries hard negatives: the best-ranked other documents for its query
(a reranker learns most from what BM25 confuses with the answer).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from salience.exceptions import InvalidParameterError

__all__ = ["PseudoQuery", "pseudo_queries", "training_groups", "passage_text", "SOURCES"]

SOURCES = ("title", "sentence", "window", "question")
_WORD = re.compile(r"\w\w+")


@dataclass(frozen=True)
class PseudoQuery:
    query: str
    doc_id: str
    passage: str
    source: str
    rank: int  # the passage's rank for its query in the round trip (1 = first)
    negatives: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {**asdict(self), "negatives": list(self.negatives)}


def _central_sentence(sentences: list[str], min_words: int) -> int | None:
    """The sentence most like the rest of the text (cosine of term counts weighted by the
    text's own inverse sentence frequency); None when no sentence has ``min_words`` words."""
    bags = [Counter(w.lower() for w in _WORD.findall(s)) for s in sentences]
    eligible = [i for i, bag in enumerate(bags) if sum(bag.values()) >= min_words]
    if len(sentences) < 2 or not eligible:
        return None
    spread = Counter(w for bag in bags for w in bag)
    idf = {w: math.log((1 + len(bags)) / (1 + n)) + 1 for w, n in spread.items()}
    total = Counter()
    for bag in bags:
        total.update(bag)
    best, best_score = None, -1.0
    for i in eligible:
        rest = total - bags[i]
        dot = sum(n * rest[w] * idf[w] ** 2 for w, n in bags[i].items())
        norm = math.sqrt(sum((n * idf[w]) ** 2 for w, n in bags[i].items())) * math.sqrt(
            sum((n * idf[w]) ** 2 for w, n in rest.items()))
        score = dot / norm if norm else 0.0
        if score > best_score:
            best, best_score = i, score
    return best


def _cloze(pieces: list[str], min_words: int) -> tuple[str, str] | None:
    """The inverse cloze pair of a text cut into ``pieces``: the central piece, and the others."""
    chosen = _central_sentence(pieces, min_words)
    if chosen is None:
        return None
    return pieces[chosen], " ".join(s for i, s in enumerate(pieces) if i != chosen)


def _windows(body: str, size: int) -> list[str]:
    words = body.split()
    return [" ".join(words[i : i + size]) for i in range(0, len(words), size)]


def passage_text(doc) -> str:
    """A document's body as the pairs' passages read it: without its title where the body
    begins with it, so that positives and negatives look alike (a model must not learn that
    passages without a title prefix are the answers)."""
    title, body = doc.fields.get("title", "").strip(), doc.fields.get("text", "").strip()
    return body[len(title):].strip() if title and body.startswith(title) else body


def read_pairs(path, on_error: str = "raise") -> list[dict]:
    """Training pairs from a jsonl file as ``search queries`` writes it: each record a ``query``
    and a ``passage`` (non-empty strings) and optional ``negatives`` (document ids); a missing,
    unreadable or wrongly shaped file is refused naming the file and line."""
    from salience.exceptions import InputFormatError
    from salience.io.files import iter_jsonl

    def text(value) -> bool:
        return isinstance(value, str) and bool(value.strip())

    rows = []
    for lineno, record in iter_jsonl(path, on_error):
        problem = ("no query (a non-empty string)" if not text(record.get("query")) else
                   "no passage (a non-empty string)" if not text(record.get("passage")) else
                   "negatives that are not a list of document ids"
                   if not (isinstance(record.get("negatives", []), list)
                           and all(isinstance(n, str) for n in record.get("negatives", []))) else None)
        if problem is not None:
            if on_error == "skip":
                continue
            fields = ", ".join(sorted(record)[:6]) or "none"
            raise InputFormatError(f"{path}:{lineno}: record has {problem} (its fields: {fields}); training pairs "
                                   "are what salience search queries writes.")
        rows.append(record)
    if not rows:
        raise InputFormatError(f"{path}: no training pairs.")
    return rows


def training_groups(pairs: Sequence, corpora: Sequence, on_error: str = "raise") -> list[tuple[str, str, list[str]]]:
    """(query, positive passage, negative passages) for :func:`~salience.models.cross_encoder.
    train_cross_encoder` from pairs (:class:`PseudoQuery` or their dicts) and the corpora they
    were made from (a list); a negative no corpus holds is refused naming it."""
    from salience.io.documents import iter_documents

    bodies = {d.id: passage_text(d) for c in corpora for d in iter_documents(c, on_error=on_error)}
    rows = [p.to_dict() if isinstance(p, PseudoQuery) else p for p in pairs]
    unknown = sorted({d for p in rows for d in p.get("negatives", []) if d not in bodies})
    if unknown:
        raise InvalidParameterError(f"{len(unknown)} negatives name documents the corpus lacks, e.g. {unknown[0]!r}.")
    return [(p["query"], p["passage"], [bodies[d] for d in p.get("negatives", [])]) for p in rows]


def _candidates(documents, sources: Sequence[str], min_words: int,
                window_words: int) -> list[tuple[str, str, str, str]]:
    """(query, doc id, passage, source) before the round trip."""
    from salience.text.sentences import split_sentences

    out = []
    for doc in documents:
        title, body = doc.fields.get("title", "").strip(), passage_text(doc)
        if not body:
            continue
        if "title" in sources and len(_WORD.findall(title)) >= 2:
            out.append((title, doc.id, body, "title"))
        pair = None
        if "sentence" in sources:
            pair = _cloze([s.text for s in split_sentences(body)], min_words)
            if pair is not None:
                out.append((*pair[:1], doc.id, pair[1], "sentence"))
        if pair is None and "window" in sources:
            pair = _cloze(_windows(body, window_words), min(min_words, window_words))
            if pair is not None:
                out.append((pair[0], doc.id, pair[1], "window"))
    return out


def _questions(documents, generator, max_questions: int | None, seed: int,
               show_progress: bool) -> list[tuple[str, str, str, str]]:
    """The question source's candidates: a query the generator wrote for each of a seeded
    sample of bodies (queries of fewer than two words dropped)."""
    from salience.parallel import progress_bar

    bodies = [(doc.id, passage_text(doc)) for doc in documents]
    bodies = [(i, b) for i, b in bodies if b]
    if max_questions is not None and len(bodies) > max_questions:
        keep = np.sort(np.random.default_rng(seed).choice(len(bodies), size=max_questions, replace=False))
        bodies = [bodies[i] for i in keep]
    with progress_bar(len(bodies), "questions", show_progress, unit="passage") as bar:
        written = generator([b for _, b in bodies], progress=bar)
    return [(q, doc_id, body, "question") for (doc_id, body), q in zip(bodies, written) if len(_WORD.findall(q)) >= 2]


def pseudo_queries(corpus: Any, *, sources: Sequence[str] = ("title", "sentence", "window"), k: int = 10,
                   negatives: int = 4, min_words: int = 5, window_words: int = 12, max_pairs: int | None = None,
                   generator=None, max_questions: int | None = 1000, negatives_judge=None, seed: int = 0,
                   show_progress: bool = False, on_error: str = "raise") -> tuple[list[PseudoQuery], dict]:
    """Training pairs from ``corpus`` (a jsonl / BEIR folder / documents with ``title`` and
    ``text``): the pairs that survived the round trip, and a report (candidates and kept per
    source, the sources the corpus could give). ``max_pairs`` keeps a random sample (``seed``);
    ``generator`` writes the ``question`` source's queries for a sample of ``max_questions``
    documents (None: every document); ``negatives_judge`` (a relevance judge, e.g. an LM judge)
    drops the hard negatives it scores at least as high as the pair's passage. ``on_error``:
    unreadable records of the corpus (:func:`~salience.io.files.check_on_error`)."""
    from salience.parallel import progress_bar
    from salience.search import BM25
    from salience.io.documents import iter_documents

    unknown = set(sources) - set(SOURCES)
    if not sources or unknown:
        raise InvalidParameterError(f"sources must be some of {', '.join(SOURCES)}; got {list(sources)!r}.")
    if "question" in sources and generator is None:
        raise InvalidParameterError("the question source needs a generator: a QueryGenerator over a causal LM "
                                    "(the command line's --lm smollm2).")
    for name, value, low in (("k", k, 1), ("negatives", negatives, 0), ("min_words", min_words, 1),
                             ("window_words", window_words, 2), ("max_questions", max_questions or 1, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidParameterError(f"{name} must be a whole number >= {low}; got {value!r}.")
    documents = list(iter_documents(corpus, on_error=on_error))
    bodies = [{"id": d.id, "text": d.fields.get("text", "")} for d in documents]
    if sum(1 for b in bodies if b["text"].strip()) < 2:
        raise InvalidParameterError("the corpus has fewer than 2 documents with a body (a 'text' field): nothing to "
                                    "make training pairs from.")
    candidates = _candidates(documents, sources, min_words, window_words)
    if "question" in sources:
        candidates += _questions(documents, generator, max_questions, seed, show_progress)
    if max_pairs is not None and len(candidates) > max_pairs:
        keep = np.sort(np.random.default_rng(seed).choice(len(candidates), size=max_pairs, replace=False))
        candidates = [candidates[i] for i in keep]
    index = BM25(fields=("text",)).index(bodies)
    kept: list[PseudoQuery] = []
    with progress_bar(len(candidates), "round trip", show_progress, unit="query") as bar:
        for lo in range(0, len(candidates), 256):
            chunk = candidates[lo : lo + 256]
            found = index.search_batch([query for query, _, _, _ in chunk], k=k + negatives + 1)
            for (query, doc_id, passage, source), results in zip(chunk, found):
                own = float(index.score_texts(query, [passage])[0])
                others = [(d, s) for d, s in zip(results.ids, results.values.tolist()) if d != doc_id]
                rank = 1 + sum(1 for _, s in others if s > own)
                if own > 0 and rank <= k:
                    kept.append(PseudoQuery(query, doc_id, passage, source, rank,
                                            tuple(d for d, _ in others[:negatives])))
            bar.update(len(chunk))
    report = {"documents": len(documents), "sources": [s for s in sources if any(c[3] == s for c in candidates)],
              "candidates": dict(Counter(c[3] for c in candidates)), "kept": dict(Counter(p.source for p in kept))}
    if negatives_judge is not None:
        kept, report["false_negatives_dropped"] = _drop_false_negatives(kept, documents, negatives_judge,
                                                                        show_progress)
    return kept, report


def _drop_false_negatives(pairs: list[PseudoQuery], documents, judge,
                          show_progress: bool) -> tuple[list[PseudoQuery], int]:
    """Each pair without the hard negatives ``judge`` (a relevance judge: ``scores(query,
    passages)``) scores at least as high as the pair's own passage: a document BM25 ranks high
    for the query may answer it too (a false negative teaches the model the wrong thing)."""
    from dataclasses import replace

    from salience.parallel import progress_bar

    bodies = {d.id: passage_text(d) for d in documents}
    out, dropped = [], 0
    with progress_bar(len(pairs), "false negatives", show_progress, unit="pair") as bar:
        for pair in pairs:
            if pair.negatives:
                scores = judge.scores(pair.query, [pair.passage] + [bodies[d] for d in pair.negatives])
                keep = tuple(d for d, s in zip(pair.negatives, scores[1:]) if s < scores[0])
                dropped += len(pair.negatives) - len(keep)
                pair = replace(pair, negatives=keep)
            out.append(pair)
            bar.update(1)
    return out, dropped
