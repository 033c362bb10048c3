"""Keyphrase tiers, the language-model judges and their peers (issue 55), on the eight shared
keyphrase sets.

Tasks (``--tasks``, comma-separated):

* ``choose`` reads the dev splits only. Each cheap method ranks every dev document's candidates
  (stop-word runs, and noun phrases from en_core_web_sm on the English sets); the three judges
  (samrank, promptrank, mderank on SmolLM2-135M / all-MiniLM-L6-v2) rank the first
  ``--judge-docs`` of each dev split. Every fusion of two to four cheap methods by RRF (k 5, 20
  or 60), over either candidate source, is scored by its F1@10 averaged over the eight sets
  (pooled: one setting for every collection; noun phrases where the fused method takes them,
  short English texts); the best whose speed on Inspec reaches
  ``BEST_SPEED`` documents/s is the ``best`` tier. The judges are then added to it, and tried
  alone, on the judged documents.
* ``test`` reads the test splits: the two tiers, every single method and the cheap peers (YAKE
  0.4.8 and current, rake-nltk, pke 1.8.1) on each whole split; the costly systems (the judges,
  KeyBERT-MiniLM with MMR, with Max Sum and over keyphrase-vectorizers' noun phrases) with the
  tiers beside them on the first ``--subset-docs`` documents of each split
  (``--long-subset-docs`` on the long-text sets). ``--systems`` runs only the systems named;
  with ``--rows-from``, their rows replace those of the logged run.
* ``labelfree`` reads the test splits: the ``keyphrases`` verifier (a document searched by its
  title while its top keyphrases are deleted from it, against random orders) for each method,
  with the rank correlation of its gap with F1@10 across methods and sets.

Protocol as bench/text.py: 15 phrases per document, stemmed exact match against all gold
keyphrases, macro F1@10; docs/s on this machine's two cores (torch's threads as it sets them).

    python bench/keyphrase_tiers.py --yake048-python .venv-yake048/bin/python --pke-python .venv-pke/bin/python \\
        --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import document_set, run_benchmark, split_heading  # noqa: E402
from text import KEYPHRASE_DATA, KEYPHRASE_SETS  # noqa: E402

from salience.core.base import create  # noqa: E402
from salience.keywords.evaluate import evaluate_keyphrases, normalize_phrase  # noqa: E402
from salience.keywords.extract import learns_document_frequency  # noqa: E402
from salience.keywords.frequency import LONG_TEXT_WORDS  # noqa: E402

CHEAP = ("yake", "rake", "tfidf", "kpminer", "positionrank", "multipartite", "embed")
JUDGES = ("promptrank", "samrank", "mderank")
RRF_KS = (5, 20, 60)
BEST_SPEED = 20.0  # documents/s on Inspec: the best tier's floor (issue 55)
DEPTH = 30  # each method's best candidates that enter a fusion (FusedKeyphrases' default)
K = 15


def _english(docs) -> bool:
    return all(d.get("language", "en") == "en" for d in docs)


def _source_params(source: str) -> dict:
    return {"candidates_from": "noun_phrases"} if source == "noun_phrases" else {}


def ranked_keys(method: str, params: dict, docs: list[dict]) -> tuple[list[list[str]], list[dict], float]:
    """Each document's ``DEPTH`` best candidates by ``method`` as stemmed keys, best first, their
    surfaces, and the seconds taken (``tfidf`` and ``kpminer`` learn the documents' frequencies first)."""
    texts = [d["text"] for d in docs]
    start = time.perf_counter()
    scorer = create("keywords", method, k=DEPTH, **params)
    if learns_document_frequency(method):
        scorer.fit(texts)
    found = scorer.score_batch(texts)
    seconds = time.perf_counter() - start
    keys, surfaces = [], []
    for scores in found:
        ordered, seen, surface = [], set(), {}
        for phrase in scores.sorted().ids:
            key = normalize_phrase(str(phrase)) or str(phrase).lower()
            if key not in seen:
                seen.add(key)
                ordered.append(key)
                surface[key] = str(phrase)
        keys.append(ordered)
        surfaces.append(surface)
    return keys, surfaces, seconds


def rrf(lists: list[list[str]], k: float) -> list[str]:
    """Reciprocal rank fusion of key lists, ties in the order first met (as the core's RRF)."""
    total: dict[str, float] = {}
    for keys in lists:
        for rank, key in enumerate(keys, start=1):
            total[key] = total.get(key, 0.0) + 1.0 / (k + rank)
    order = list(total)
    return sorted(order, key=lambda key: -total[key])


def f1_per_document(predicted: list[list[str]], golds: list[set[str]]) -> list[float]:
    """Each document's F1@10 of already-normalised predictions (evaluate_keyphrases' protocol)."""
    out = []
    for keys, gold in zip(predicted, golds):
        top = keys[:10]
        hits = sum(1 for key in top if key in gold)
        p = hits / len(top) if top else 0.0
        r = hits / len(gold) if gold else 0.0
        out.append(2 * p * r / (p + r) if p + r else 0.0)
    return out


def f1_at_10(predicted: list[list[str]], golds: list[set[str]]) -> float:
    """Mean F1@10 of already-normalised predictions."""
    return sum(f1_per_document(predicted, golds)) / max(len(golds), 1)


def pooled_standard_error(per_document: dict[str, list[float]]) -> float:
    """Standard error of the mean over sets of per-set mean F1@10 (each set's documents
    independent): sqrt(sum of each set's variance of the mean) / number of sets."""
    variances = [np.var(v, ddof=1) / len(v) for v in per_document.values() if len(v) > 1]
    return float(np.sqrt(sum(variances)) / max(len(per_document), 1))


def one_standard_error_choice(rows: list[dict]) -> tuple[dict, float]:
    """Breiman's one-standard-error rule: among the rows whose pooled mean is within one
    standard error of the best one's, the one fusing the fewest methods (the cheapest and
    least tuned), then the highest mean. Returns it and the standard error."""
    best = max(rows, key=lambda r: r["mean"])
    error = pooled_standard_error(best["per_document"])
    near = [r for r in rows if r["mean"] >= best["mean"] - error]
    return min(near, key=lambda r: (len(r["members"]), -r["mean"])), error


def switch_checks(rows: list[dict], chosen: dict, standard_error: float, keep_long: dict, english: dict) -> dict:
    """Whether dev asks for a per-length or a per-language switch (issue 55 allows them only then):
    the one-standard-error rule run on the long texts alone, and on the English and the other sets
    apart; a switch is worth its complexity only where it beats the one setting by more than one
    standard error."""
    def on(keep):
        scoped = []
        for r in rows:
            documents = {n: [r["per_document"][n][i] for i in idx] for n, idx in keep.items() if idx}
            scoped.append({**r, "per_document": documents,
                           "mean": float(np.mean([np.mean(v) for v in documents.values()]))})
        pick, error = one_standard_error_choice(scoped)
        mine = next(r for r in scoped if r["members"] == chosen["members"] and r["source"] == chosen["source"]
                    and r["rrf_k"] == chosen["rrf_k"])
        return {"pick": pick, "error": error, "best": max(r["mean"] for r in scoped), "chosen": mine["mean"],
                "sets": [n for n, idx in keep.items() if idx], "documents": sum(map(len, keep.values()))}

    long = on(keep_long)
    every = {n: list(range(len(v))) for n, v in chosen["per_document"].items()}
    by_language = {group: on({n: idx for n, idx in every.items() if english[n] == (group == "en")})
                   for group in ("en", "other")}
    switched = {}
    for group, check in by_language.items():
        for n in check["sets"]:
            switched[n] = float(np.mean(check["pick"]["per_document"][n]))
    switched_mean = float(np.mean(list(switched.values())))
    return {"long": long, "by_language": by_language, "switched_mean": switched_mean,
            "language_switch": switched_mean - chosen["mean"] > standard_error}


LEARNED = ("yake", "rake", "tfidf", "kpminer", "positionrank", "multipartite")  # the cheap methods fast enough together


def learned_combination(lists_of, golds: dict, sets: list[str]) -> dict:
    """A learned alternative to RRF, checked on dev: a logistic regression whose features are
    each method's reciprocal rank of a candidate (1 / (20 + rank), 0 where the method does not
    rank it among its best ``DEPTH``), fitted on every set's dev candidates but one (each set
    weighted alike; label: the candidate is a gold keyphrase) and scored on the held-out set's.
    ``lists_of(name)`` gives each method's ranked keys per document. Per set F1@10 and the pooled mean."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    candidates = {}
    for name in sets:
        lists = lists_of(name)
        rows = []
        for i, gold in enumerate(golds[name]):
            per_method = [{key: r for r, key in enumerate(lst[i], start=1)} for lst in lists]
            pool = list(dict.fromkeys(key for ranked in per_method for key in ranked))
            features = np.array([[1.0 / (20 + ranked[key]) if key in ranked else 0.0 for ranked in per_method]
                                 for key in pool]).reshape(len(pool), len(lists))
            rows.append((pool, features, np.array([key in gold for key in pool], dtype=bool), gold))
        candidates[name] = rows
    per_set = {}
    for held in sets:
        train = [(x, y, 1.0 / sum(len(yy) for _, _, yy, _ in candidates[n])) for n in sets if n != held
                 for _, x, y, _ in candidates[n] if len(y)]
        weight = np.concatenate([np.full(len(y), w) for _, y, w in train])
        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
        model.fit(np.vstack([x for x, _, _ in train]), np.concatenate([y for _, y, _ in train]),
                  logisticregression__sample_weight=weight * len(weight))
        predicted = [[pool[j] for j in np.argsort(-model.decision_function(x), kind="stable")] if len(pool) else []
                     for pool, x, _, _ in candidates[held]]
        per_set[held] = f1_at_10(predicted, [gold for _, _, _, gold in candidates[held]])
    return {"per_set": per_set, "mean": float(np.mean(list(per_set.values())))}


def _gold_sets(docs) -> list[set[str]]:
    return [{g for g in map(normalize_phrase, d["keyphrases"]) if g} for d in docs]


# ---------------------------------------------------------------------------------------------
def choose(args) -> dict:
    dev = {name: document_set(KEYPHRASE_DATA / name, "dev")[: args.limit_docs] for name in KEYPHRASE_SETS}
    golds = {name: _gold_sets(docs) for name, docs in dev.items()}
    if args.dev_ranks and args.dev_ranks.exists():  # the methods' rankings of an earlier run: the grid again
        saved = json.loads(args.dev_ranks.read_text())
        ranks = {tuple(key.split("|")): value for key, value in saved["ranks"].items()}
        seconds = {tuple(key.split("|")): value for key, value in saved["seconds"].items()}
        print(f"  dev rankings read from {args.dev_ranks}", file=sys.stderr, flush=True)
    else:
        ranks: dict = {}  # (method, source, set) -> keys per document
        seconds: dict = {}
        for name, docs in dev.items():
            # noun phrases where the fused method tags: short texts of English sets (see FusedKeyphrases)
            short = [i for i, d in enumerate(docs) if len(d["text"].split()) <= LONG_TEXT_WORDS] if _english(docs) else []
            for method in CHEAP:
                keys, _, took = ranked_keys(method, {}, docs)
                ranks[method, "runs", name], seconds[method, "runs", name] = keys, took
                tagged, _, tagged_took = ranked_keys(method, _source_params("noun_phrases"), [docs[i] for i in short]) \
                    if short else ([], [], 0.0)
                merged = list(keys)
                for j, i in enumerate(short):
                    merged[i] = tagged[j]
                ranks[method, "noun_phrases", name] = merged
                seconds[method, "noun_phrases", name] = tagged_took + took * (len(docs) - len(short)) / len(docs)
                for source in ("runs", "noun_phrases") if short else ("runs",):
                    print(f"  dev {name} {method} {source}: F1@10 {f1_at_10(ranks[method, source, name], golds[name]):.3f} "
                          f"({len(docs) / seconds[method, source, name]:,.1f} docs/s)", file=sys.stderr, flush=True)
            judged = docs[: args.judge_docs]
            for method in JUDGES:
                keys, _, took = ranked_keys(method, {}, judged)
                ranks[method, "runs", name], seconds[method, "runs", name] = keys, took
                print(f"  dev {name} {method} (first {len(judged)}): F1@10 {f1_at_10(keys, golds[name][:len(judged)]):.3f} "
                      f"({len(judged) / took:,.2f} docs/s)", file=sys.stderr, flush=True)
        if args.dev_ranks:
            args.dev_ranks.parent.mkdir(parents=True, exist_ok=True)
            args.dev_ranks.write_text(json.dumps({"ranks": {"|".join(k): v for k, v in ranks.items()},
                                                  "seconds": {"|".join(k): v for k, v in seconds.items()}}))

    def lists_for(members, source, name, limit=None):
        return [ranks[m, "runs" if m in JUDGES else source, name][:limit] for m in members]

    def per_document_seconds(method, source):
        judged = min(args.judge_docs, len(dev["inspec"])) if method in JUDGES else len(dev["inspec"])
        return seconds[method, "runs" if method in JUDGES else source, "inspec"] / judged

    def per_document(members, source, k, limit=None):
        out = {}
        for name in KEYPHRASE_SETS:
            lists = lists_for(members, source, name, limit)
            n = len(lists[0])
            out[name] = f1_per_document([rrf([lst[i] for lst in lists], k) for i in range(n)], golds[name][:n])
        return out

    def score(members, source, k, limit=None):
        return {name: float(np.mean(v)) if v else 0.0 for name, v in per_document(members, source, k, limit).items()}

    grid = []
    for source in ("runs", "noun_phrases"):
        for size in (1, 2, 3, 4):
            for members in itertools.combinations(CHEAP, size):
                speed = 1.0 / sum(per_document_seconds(m, source) for m in members)
                for k in RRF_KS if size > 1 else (60,):
                    documents = per_document(members, source, k)
                    per_set = {name: float(np.mean(v)) if v else 0.0 for name, v in documents.items()}
                    grid.append({"members": members, "source": source, "rrf_k": k, "per_set": per_set,
                                 "per_document": documents, "mean": float(np.mean(list(per_set.values()))),
                                 "speed": speed})
    grid.sort(key=lambda r: -r["mean"])
    fast_enough = [r for r in grid if r["speed"] >= BEST_SPEED and len(r["members"]) > 1]
    chosen, standard_error = one_standard_error_choice(fast_enough)
    keep_long = {name: [i for i, d in enumerate(docs) if len(d["text"].split()) > LONG_TEXT_WORDS]
                 for name, docs in dev.items()}
    switches = switch_checks(fast_enough, chosen, standard_error, keep_long,
                             {name: _english(docs) for name, docs in dev.items()})
    learned = learned_combination(lambda name: lists_for(LEARNED, chosen["source"], name), golds, KEYPHRASE_SETS)
    # the judges beside the chosen fusion, on the judged documents only
    judged_rows = []
    base = (chosen["members"], chosen["source"], chosen["rrf_k"])
    for label, members in [("the best tier", base[0])] + [(f"{j} alone", (j,)) for j in JUDGES] + \
            [(f"the best tier + {j}", base[0] + (j,)) for j in JUDGES] + [("the best tier + all three", base[0] + JUDGES)]:
        per_set = score(members, base[1], base[2], args.judge_docs)
        judged_rows.append({"label": label, "per_set": per_set, "mean": float(np.mean(list(per_set.values()))),
                            "speed": 1.0 / sum(per_document_seconds(m, base[1]) for m in members)})
    # the library's fused method with the chosen setting, on dev: the grid's fusion reproduced
    texts = [d["text"] for d in dev["inspec"]]
    start = time.perf_counter()
    library = create("keywords", "fused", k=K, methods=list(chosen["members"]), fusion_params={"rrf_k": chosen["rrf_k"]},
                     **_source_params(chosen["source"])).score_batch(texts)
    library_speed = len(texts) / (time.perf_counter() - start)
    library_f1 = evaluate_keyphrases([s.ids for s in library], texts, [d["keyphrases"] for d in dev["inspec"]],
                                     ks=(10,))["F1@10"]
    for row in grid:
        row.pop("per_document")  # only the rule reads them
    return {"grid": grid, "chosen": chosen, "judged": judged_rows, "sizes": {n: len(d) for n, d in dev.items()},
            "switches": switches, "learned": learned,
            "standard_error": standard_error, "best_mean": fast_enough[0]["mean"],
            "judge_docs": args.judge_docs, "library": {"f1": library_f1, "speed": library_speed}}


def render_choice(result: dict, command: str) -> str:
    chosen = result["chosen"]
    lines = ["## Keyphrase best tier, chosen on the dev splits (`bench/keyphrase_tiers.py --tasks choose`)", "",
             f"Command: `{command}`", "",
             f"F1@10 on each set's {split_heading('dev')} ({', '.join(f'{n} {k}' for n, k in result['sizes'].items())} "
             "documents) of every fusion (RRF) of one to four cheap methods, over stop-word runs or noun phrases "
             f"(en_core_web_sm, English sets); speed: Inspec dev documents/s of the methods run one after another. The "
             f"best tier comes from the fusions of two or more reaching {BEST_SPEED:.0f} documents/s by the "
             "one-standard-error rule (Breiman et al., 1984): of those whose mean is within one standard error of the "
             f"best mean ({result['best_mean']:.4f}; standard error {result['standard_error']:.4f}, from the "
             "documents' spread in each set), the one fusing the fewest methods, then the highest mean, since "
             "differences inside the dev sets' noise would only buy cost. The test split is not read. The ten best "
             "fusions, and the best single methods:", "",
             "| methods | candidates | RRF k | " + " | ".join(KEYPHRASE_SETS) + " | mean | docs/s |",
             "|---|---|---:|" + "---:|" * (len(KEYPHRASE_SETS) + 2)]
    singles = [r for r in result["grid"] if len(r["members"]) == 1][:4]
    fused = [r for r in result["grid"] if len(r["members"]) > 1][:10]
    for r in fused + ([chosen] if chosen not in fused else []) + singles:
        mark = " **(chosen)**" if r is chosen else ""
        lines.append(f"| {' + '.join(r['members'])} | {r['source']} | {r['rrf_k'] if len(r['members']) > 1 else '-'} | "
                     + " | ".join(f"{r['per_set'][n]:.3f}" for n in KEYPHRASE_SETS)
                     + f" | {r['mean']:.4f}{mark} | {r['speed']:,.0f} |")
    lib = result["library"]
    lines += ["", f"The library's `fused` method with the chosen setting on the Inspec dev split: F1@10 {lib['f1']:.3f} "
              f"(the grid's {chosen['per_set']['inspec']:.3f}), {lib['speed']:,.0f} documents/s.", "",
              render_switches(result["switches"], result["standard_error"], chosen), "",
              render_learned(result["learned"], chosen, result["standard_error"]), "",
              f"The language-model judges on the first {result['judge_docs']} documents of each dev split (SmolLM2-135M "
              "for samrank and promptrank, all-MiniLM-L6-v2 for mderank; each judges the best 20 candidates of yake):", "",
              "| system | " + " | ".join(KEYPHRASE_SETS) + " | mean | docs/s |",
              "|---|" + "---:|" * (len(KEYPHRASE_SETS) + 2)]
    for r in result["judged"]:
        lines.append(f"| {r['label']} | " + " | ".join(f"{r['per_set'][n]:.3f}" for n in KEYPHRASE_SETS)
                     + f" | {r['mean']:.4f} | {r['speed']:,.1f} |")
    return "\n".join(lines) + "\n"


def render_learned(learned: dict, chosen: dict, standard_error: float) -> str:
    gain = learned["mean"] - chosen["mean"]
    return (f"A learned combination instead of RRF, checked on dev: a logistic regression over the reciprocal ranks of "
            f"{', '.join(LEARNED)} ({chosen['source'].replace('_', ' ')}), fitted on seven sets' dev candidates and scored on "
            "the eighth's, each set in turn (so one setting serves a collection nobody labelled): "
            + ", ".join(f"{n} {v:.3f}" for n, v in learned["per_set"].items())
            + f", mean {learned['mean']:.4f} against the chosen fusion's {chosen['mean']:.4f} "
            + ("(higher by more than one standard error: worth building)." if gain > standard_error else
               "(higher, but within one standard error: RRF stays)." if gain > 0 else "(lower: RRF stays)."))


def _setting(row: dict, tagged: bool = True) -> str:
    """A fusion's name; ``tagged=False`` where no text is tagged (long or non-English texts), so
    that the candidate source makes no difference."""
    source = f" over {row['source'].replace('_', ' ')}" if tagged else ""
    return f"{' + '.join(row['members'])}{source}, RRF k {row['rrf_k']}"


def render_switches(checks: dict, standard_error: float, chosen: dict) -> str:
    long, languages = checks["long"], checks["by_language"]
    english, other = languages["en"], languages["other"]
    return (f"Switches, checked on dev (issue 55 allows a per-length or per-language switch only where dev asks for "
            f"it). Long texts alone ({long['documents']} dev documents over {LONG_TEXT_WORDS} words, in "
            f"{', '.join(long['sets'])}, none of them tagged): the same rule picks {_setting(long['pick'], False)} (mean {long['pick']['mean']:.4f}; "
            f"the best {long['best']:.4f}, standard error {long['error']:.4f}), and the chosen setting scores "
            f"{long['chosen']:.4f} there"
            + (", within one standard error of the best: no switch for length. " if long["chosen"] >= long["best"] - long["error"]
               else ", more than one standard error below the best: dev asks for a switch for length. ")
            + f"By language: on the English sets alone the rule picks {_setting(english['pick'])} "
            f"({english['pick']['mean']:.4f}; the chosen setting {english['chosen']:.4f}), on the others "
            f"({', '.join(other['sets'])}, untagged) {_setting(other['pick'], False)} ({other['pick']['mean']:.4f}; the chosen setting "
            f"{other['chosen']:.4f}); switching by language would give a pooled mean of {checks['switched_mean']:.4f} "
            f"against the one setting's {chosen['mean']:.4f}, "
            + ("more than one standard error ({:.4f}) higher: dev asks for the switch.".format(standard_error)
               if checks["language_switch"] else
               "a gain inside one standard error ({:.4f}): one setting for every language.".format(standard_error)))


# ---------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="choose,test,labelfree")
    parser.add_argument("--judge-docs", type=int, default=60, help="dev documents per set the judges rank (choose)")
    parser.add_argument("--dev-ranks", type=Path, default=None,
                        help="choose: a JSON file of the methods' dev rankings and times, read if it exists (the grid "
                             "and the rule again, in seconds), else written")
    parser.add_argument("--subset-docs", type=int, default=60, help="test documents per set of the costly systems")
    parser.add_argument("--long-subset-docs", type=int, default=15,
                        help="test documents of the costly systems on the long-text sets")
    parser.add_argument("--limit-docs", type=int, default=None,
                        help="at most this many documents of each split (a quick check of the script; no numbers to report)")
    parser.add_argument("--rows-from", type=Path, default=None,
                        help="the test task's rows from the stderr log of an earlier run, instead of running them")
    parser.add_argument("--systems", default=None,
                        help="comma-separated labels (or their beginnings): the test task runs only these systems; "
                             "with --rows-from, their rows replace the log's")
    parser.add_argument("--yake048-python", default=None)
    parser.add_argument("--pke-python", default=None)
    tasks = set(parser.parse_known_args(argv)[0].tasks.split(","))
    from keyphrase_tiers_runs import chosen_system, labelfree, render_labelfree, render_test, rows_from_log, run_test

    def run(args):
        out = {}
        if "choose" in tasks:
            out["choose"] = choose(args)
        if "test" in tasks and args.rows_from and args.systems:
            with tempfile.TemporaryDirectory(prefix="salience-bench-") as scratch:
                fresh = run_test(args, Path(scratch))
            logged = rows_from_log(args.rows_from, args)
            logged["rows"] = [r for r in logged["rows"] if not chosen_system(r["system"], args.systems)] + fresh["rows"]
            logged["added"] = ", ".join(sorted({r["system"] for r in fresh["rows"]}))
            out["test"] = logged
        elif "test" in tasks and args.rows_from:
            out["test"] = rows_from_log(args.rows_from, args)
        elif "test" in tasks:
            with tempfile.TemporaryDirectory(prefix="salience-bench-") as scratch:
                out["test"] = run_test(args, Path(scratch))
        if "labelfree" in tasks:
            out["labelfree"] = labelfree(args)
        return out

    def render(result, command, seconds):
        parts = []
        if "choose" in result:
            parts.append(render_choice(result["choose"], command))
        if "test" in result:
            parts.append(render_test(result["test"], command))
        if "labelfree" in result:
            parts.append(render_labelfree(result["labelfree"], command))
        return "\n".join(parts)

    return run_benchmark("keyphrase_tiers.py", parser, run, render, argv, variant="-".join(sorted(tasks)))


if __name__ == "__main__":
    sys.exit(main())
