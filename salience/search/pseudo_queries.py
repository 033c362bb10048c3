"""Training pairs without a relevance label: (query, passage) pairs made from a corpus itself,
for training rerankers on the collection they will rerank (InPars, Promptagator and GPL generate
queries; the Inverse Cloze Task, Lee et al. 2019, takes them from the passage).

Sources of a document's query:

* ``title``: its title, the passage its body (where the corpus has titles).
* ``sentence``: the Inverse Cloze Task: the sentence of its body most like the rest of the
  body (TF-IDF cosine: the sentence that best summarises it) is the query, the body without
  that sentence the passage.

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

__all__ = ["PseudoQuery", "pseudo_queries", "SOURCES"]

SOURCES = ("title", "sentence")
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


def _candidates(documents, sources: Sequence[str], min_words: int) -> list[tuple[str, str, str, str]]:
    """(query, doc id, passage, source) before the round trip."""
    from salience.text.sentences import split_sentences

    out = []
    for doc in documents:
        title, body = doc.fields.get("title", "").strip(), doc.fields.get("text", "").strip()
        if not body:
            continue
        if "title" in sources and len(_WORD.findall(title)) >= 2:
            out.append((title, doc.id, body, "title"))
        if "sentence" in sources:
            sentences = [s.text for s in split_sentences(body)]
            chosen = _central_sentence(sentences, min_words)
            if chosen is not None:
                passage = " ".join(s for i, s in enumerate(sentences) if i != chosen)
                out.append((sentences[chosen], doc.id, passage, "sentence"))
    return out


def pseudo_queries(corpus: Any, *, sources: Sequence[str] = SOURCES, k: int = 10, negatives: int = 4,
                   min_words: int = 5, max_pairs: int | None = None, seed: int = 0,
                   show_progress: bool = False) -> tuple[list[PseudoQuery], dict]:
    """Training pairs from ``corpus`` (a jsonl / BEIR folder / documents with ``title`` and
    ``text``): the pairs that survived the round trip, and a report (candidates and kept per
    source, the sources the corpus could give). ``max_pairs`` keeps a random sample (``seed``)."""
    from salience.parallel import progress_bar
    from salience.search import BM25
    from salience.search.sources import iter_documents

    unknown = set(sources) - set(SOURCES)
    if not sources or unknown:
        raise InvalidParameterError(f"sources must be some of {', '.join(SOURCES)}; got {list(sources)!r}.")
    for name, value, low in (("k", k, 1), ("negatives", negatives, 0), ("min_words", min_words, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidParameterError(f"{name} must be a whole number >= {low}; got {value!r}.")
    documents = list(iter_documents(corpus))
    bodies = [{"id": d.id, "text": d.fields.get("text", "")} for d in documents]
    if sum(1 for b in bodies if b["text"].strip()) < 2:
        raise InvalidParameterError("the corpus has fewer than 2 documents with a body (a 'text' field): nothing to "
                                    "make training pairs from.")
    candidates = _candidates(documents, sources, min_words)
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
    return kept, report
