"""Text salience benchmark: extractive summaries on ../shared/data/summarize/bbc_news_summary_100
against summa (TextRank) and sumy (LexRank, TextRank), with one ROUGE protocol for every system.

Protocol: ROUGE-1/2/L F1 x 100 (rouge-score, Porter stemming) of the system summary against the
gold summary; every system returns as many sentences as the gold summary has. summa takes a
ratio, so it gets gold / article sentences. sumy's default tokenizer needs NLTK data that cannot
be downloaded here, so sumy gets salience's sentence splitter and a regex word splitter, with its
own Snowball stemmer and English stop list. Throughput is documents per second over the whole
set, best of --repeats.

Run it in an environment with the peers: pip install summa sumy rouge-score

    python bench/text.py --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from salience.summarize import split_sentences, summarize  # noqa: E402
from salience.summarize.evaluate import rouge_scorer  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "summarize" / "bbc_news_summary_100" / "docs.jsonl"


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def gold_length(doc: dict) -> int:
    return sum(1 for line in doc["summary"].splitlines() if line.strip())


class SumyTokenizer:
    """sumy's tokenizer interface without NLTK data."""

    language = "english"
    _word = re.compile(r"\w+", re.UNICODE)

    def to_sentences(self, paragraph: str):
        return tuple(s.text for s in split_sentences(paragraph))

    def to_words(self, sentence: str):
        return tuple(self._word.findall(sentence))


def systems():
    out = {}
    for method, label in (("lexrank", "salience LexRank (default)"), ("textrank", "salience TextRank (BM25)"),
                          ("centroid", "salience centroid"), ("lead", "salience lead")):
        out[label] = lambda doc, m=method: summarize(doc["text"], method=m, sentences=gold_length(doc)).text
    out["salience TextRank (cosine)"] = lambda doc: summarize(doc["text"], method="textrank", similarity="cosine",
                                                              sentences=gold_length(doc)).text
    try:
        from summa import summarizer as summa_summarizer

        def summa_textrank(doc):
            n = sum(1 for line in doc["text"].splitlines() if line.strip())
            return summa_summarizer.summarize(doc["text"], ratio=gold_length(doc) / n)

        out["summa TextRank"] = summa_textrank
    except ImportError:
        print("skipping summa: not installed", file=sys.stderr)
    try:
        from sumy.nlp.stemmers import Stemmer
        from sumy.parsers.plaintext import PlaintextParser
        from sumy.summarizers.lex_rank import LexRankSummarizer
        from sumy.summarizers.text_rank import TextRankSummarizer
        from sumy.utils import get_stop_words

        tokenizer = SumyTokenizer()
        for label, cls in (("sumy LexRank", LexRankSummarizer), ("sumy TextRank", TextRankSummarizer)):
            engine = cls(Stemmer("english"))
            engine.stop_words = get_stop_words("english")

            def run(doc, engine=engine):
                parser = PlaintextParser.from_string(doc["text"], tokenizer)
                return "\n".join(str(s) for s in engine(parser.document, gold_length(doc)))

            out[label] = run
    except ImportError:
        print("skipping sumy: not installed", file=sys.stderr)
    return out


def run_summaries(docs, repeats: int) -> list[dict]:
    scorer = rouge_scorer()
    rows = []
    for name, fn in systems().items():
        for doc in docs[:10]:  # warm caches and imports before timing
            fn(doc)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            outputs = [fn(doc) for doc in docs]
            best = min(best, time.perf_counter() - start)
        totals = {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
        for doc, output in zip(docs, outputs):
            scores = scorer.score(doc["summary"], output)
            for key in totals:
                totals[key] += 100 * scores[key].fmeasure / len(docs)
        rows.append({"system": name, **totals, "docs_per_second": len(docs) / best})
        print(f"  {name:<30} R1 {totals['rouge1']:.1f}  R2 {totals['rouge2']:.1f}  RL {totals['rougeL']:.1f}  "
              f"{len(docs) / best:,.0f} docs/s", file=sys.stderr, flush=True)
    return rows


def render(rows, command) -> str:
    lines = ["## Extractive summaries (`bench/text.py`)", "", f"Command: `{command}`", "",
             "BBC News Summary, 100 articles (`../shared/data/summarize/bbc_news_summary_100`); summary length = gold "
             "sentence count; ROUGE F1 x 100 with Porter stemming (rouge-score); docs/s single-threaded, best of the repeats.", "",
             "| system | ROUGE-1 | ROUGE-2 | ROUGE-L | docs/s |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['system']} | {r['rouge1']:.1f} | {r['rouge2']:.1f} | {r['rougeL']:.1f} | {r['docs_per_second']:,.0f} |")
    by = {r["system"]: r for r in rows}
    ours = by["salience LexRank (default)"]
    lines += ["", "Targets (issue 4, summaries):", "", "| target | measured | met |", "|---|---|---|"]
    summa = by.get("summa TextRank")
    if summa:
        lines.append(f"| ROUGE-2 >= 76.2 (summa TextRank here: {summa['rouge2']:.1f}) | {ours['rouge2']:.1f} | "
                     f"{'yes' if ours['rouge2'] >= max(76.2, summa['rouge2']) else 'no'} |")
    sumy = by.get("sumy LexRank")
    if sumy:
        ratio = ours["docs_per_second"] / sumy["docs_per_second"]
        lines.append(f"| >= 10x sumy LexRank's docs/s | {ratio:.1f}x ({ours['docs_per_second']:,.0f} vs {sumy['docs_per_second']:,.0f}) | "
                     f"{'yes' if ratio >= 10 else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = run_summaries(read_jsonl(DATA), args.repeats)
    command = "python bench/text.py " + " ".join(argv if argv is not None else sys.argv[1:])
    section = render(rows, command.strip())
    print(section)
    if args.write:
        sys.path.insert(0, str(ROOT / "bench"))
        from search import write_section

        write_section(args.write, section, marker="bench/text.py (summaries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
