"""The test-split runs of bench/keyphrase_tiers.py: the tiers, every single method and the peers
(``test``), and the label-free check (``labelfree``)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import numpy as np

from common import document_set, split_heading
from keyphrase_peers import peers
from text import KEYPHRASE_DATA, KEYPHRASE_SETS

from salience.core.base import create
from salience.exceptions import InvalidParameterError
from salience.keywords import evaluate_keyphrases
from salience.keywords.extract import learns_document_frequency
from salience.keywords.tiers import TIERS, tier_method

K = 15
LONG_SETS = ("semeval2010", "citeulike180", "fao30")
SINGLE = ("yake", "rake", "tfidf", "kpminer", "textrank", "positionrank", "multipartite")
NOUN_PHRASE_SINGLE = ("yake", "rake", "tfidf", "kpminer", "positionrank", "multipartite")
COSTLY_SALIENCE = ("embed", "mderank", "samrank", "promptrank")
FAST_LABEL = f"salience fast tier ({TIERS['fast'][0]})"


def salience_systems(english: bool) -> dict:
    """label -> (method, params) of every salience row; English sets add the noun-phrase rows."""
    out = {FAST_LABEL: tier_method(None, "fast", {}), "salience best tier": tier_method(None, "best", {})}
    out.update({f"salience {m}": (m, {}) for m in SINGLE + COSTLY_SALIENCE})
    if english:
        out.update({f"salience {m}, noun phrases": (m, {"candidates_from": "noun_phrases"}) for m in NOUN_PHRASE_SINGLE})
    return out


def _salience_run(method: str, params: dict):
    def run(docs, scratch):
        texts = [d["text"] for d in docs]
        start = time.perf_counter()
        scorer = create("keywords", method, k=K, **params)
        if learns_document_frequency(method):
            scorer.fit(texts)  # the evaluated texts' document frequencies, as keywords evaluate learns them
        predictions = [s.ids for s in scorer.score_batch(texts)]
        return predictions, time.perf_counter() - start
    return run


def _is_costly(label: str, name: str) -> bool:
    return (any(f"salience {m}" == label for m in COSTLY_SALIENCE) or label.startswith("KeyBERT")
            or (label.startswith("pke") and name in LONG_SETS))


def chosen_system(label: str, systems: str | None) -> bool:
    """Whether ``--systems`` (comma-separated labels or their beginnings; None: all) names ``label``."""
    return systems is None or any(label.startswith(part.strip()) for part in systems.split(",") if part.strip())


def run_test(args, scratch: Path) -> dict:
    everyone = peers(args.yake048_python, args.pke_python)
    # where numba is installed, its grouping kernel loads on the first large batch (about 0.5 s a
    # process): loaded here, outside the timed runs, as the peers' models are before theirs
    _salience_run(*tier_method(None, "fast", {}))(document_set(KEYPHRASE_DATA / "inspec", "test")[:300], scratch)
    rows = []
    for name in KEYPHRASE_SETS:
        docs = document_set(KEYPHRASE_DATA / name, "test")[: args.limit_docs]
        english = all(d.get("language", "en") == "en" for d in docs)
        subset = docs[: args.long_subset_docs if name in LONG_SETS else args.subset_docs]
        systems = {label: _salience_run(*spec) for label, spec in salience_systems(english).items()}
        systems.update({label: fn for label, fn in everyone.items()
                        if english or not (label.startswith(("rake-nltk", "KeyBERT", "pke")))})
        for label, fn in systems.items():
            if not chosen_system(label, args.systems):
                continue
            if not english and label in ("salience embed", "salience mderank"):
                continue  # all-MiniLM-L6-v2 is English
            scopes = [("subset", subset)] if _is_costly(label, name) else [("whole", docs)]
            if label in (FAST_LABEL, "salience best tier") or label.startswith("salience yake"):
                scopes.append(("subset", subset))  # beside the costly rows, on their documents
            for scope, chosen in scopes:
                predictions, seconds = fn(chosen, scratch)
                report = evaluate_keyphrases(predictions, [d["text"] for d in chosen], [d["keyphrases"] for d in chosen],
                                             ks=(5, 10, 15))
                rows.append({"set": name, "system": label, "scope": scope, "documents": len(chosen),
                             **report.means, "docs_per_second": len(chosen) / max(seconds, 1e-9)})
                print(f"  test {name} {label} ({scope}): F1@10 {report['F1@10']:.3f} "
                      f"({len(chosen) / max(seconds, 1e-9):,.1f} docs/s)", file=sys.stderr, flush=True)
    return {"rows": rows, "sizes": {n: len(document_set(KEYPHRASE_DATA / n, "test")) for n in KEYPHRASE_SETS}}


ROW = re.compile(r"^  test (\S+) (.+) \((whole|subset)\): F1@10 ([0-9.]+) \(([0-9,.]+) docs/s\)$")


def rows_from_log(path: Path, args) -> dict:
    """The test rows a run printed on stderr (F1@10 and docs/s; F1@5 and F1@15 are not printed):
    a run that stopped after its test rows still gives its section."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        found = ROW.match(line)
        if found:
            name, system, scope, f1, speed = found.groups()
            docs = document_set(KEYPHRASE_DATA / name, "test")
            size = len(docs) if scope == "whole" else min(len(docs), args.long_subset_docs if name in LONG_SETS
                                                           else args.subset_docs)
            rows.append({"set": name, "system": system, "scope": scope, "documents": size, "F1@10": float(f1),
                         "docs_per_second": float(speed.replace(",", ""))})
    return {"rows": rows, "sizes": {n: len(document_set(KEYPHRASE_DATA / n, "test")) for n in KEYPHRASE_SETS},
            "from_log": str(path)}


def _is_peer(label: str) -> bool:
    return not label.startswith("salience")


def render_test(result: dict, command: str) -> str:
    rows = result["rows"]
    lines = ["## Keyphrase tiers, language-model judges and peers (`bench/keyphrase_tiers.py --tasks test`)", "",
             f"Command: `{command}`", "",
             f"Each set's {split_heading('test')}; the tiers and every default were chosen on dev (the section above). "
             "15 phrases per document, stemmed exact match against all gold keyphrases, macro-averaged. `whole`: every "
             "test document; `subset`: the first documents of the split, where the costly systems (the language-model "
             "judges, embed, KeyBERT, pke on long texts) run, with the tiers beside them on the same documents. docs/s "
             "on two cores. English-only systems run on the English sets only."
             + (" This section was rendered (`--rows-from`) from the log of the rows of a run of `python "
                "bench/keyphrase_tiers.py --tasks test,labelfree --yake048-python .venv-yake048/bin/python --pke-python "
                ".venv-pke/bin/python` whose label-free part then failed: the log gives F1@10 and docs/s only." if
                result.get("from_log") else "")
             + (f" The rows of {result['added']} come from a later run of those systems alone (`--systems`), on the "
                "same documents." if result.get("added") else ""), ""]
    cutoffs = ["F1@10"] if result.get("from_log") else ["F1@5", "F1@10", "F1@15"]
    targets = []
    for name in KEYPHRASE_SETS:
        mine = [r for r in rows if r["set"] == name]
        lines += [f"### {name}, {split_heading('test')} ({result['sizes'][name]} documents): tiers, judges and peers", "",
                  "| system | scope | " + " | ".join(cutoffs) + " | docs/s |",
                  "|---|---|" + "---:|" * (len(cutoffs) + 1)]
        for r in sorted(mine, key=lambda r: (r["scope"] != "whole", -r["F1@10"])):
            label = r["system"] if r["scope"] == "whole" else f"{r['system']} (first {r['documents']})"
            lines.append(f"| {label} | {r['scope']} | " + " | ".join(f"{r[c]:.3f}" for c in cutoffs)
                         + f" | {r['docs_per_second']:,.1f} |")
        lines.append("")
        for scope in ("whole", "subset"):
            scoped = [r for r in mine if r["scope"] == scope]
            best_peer = max((r for r in scoped if _is_peer(r["system"])), key=lambda r: r["F1@10"], default=None)
            singles = [r for r in scoped if r["system"].startswith("salience") and "tier" not in r["system"]]
            best_single = max(singles, key=lambda r: r["F1@10"], default=None)
            for tier in ("best", "fast"):
                ours = next((r for r in scoped if r["system"].startswith(f"salience {tier} tier")), None)
                if ours is not None and best_peer is not None:
                    targets.append((name, scope, tier, ours, best_peer, best_single))
    lines += ["Targets (issue 55): the best tier >= 1.10x the best peer's F1@10 and >= the best single salience method "
              "on every set; the fast tier >= the best peer.", "",
              "| set | scope | tier | F1@10 | best peer | ratio | met | best single salience method | met |",
              "|---|---|---|---:|---|---:|---|---|---|"]
    for name, scope, tier, ours, peer, single in targets:
        ratio = ours["F1@10"] / peer["F1@10"] if peer["F1@10"] else float("inf")
        need = 1.10 if tier == "best" else 1.0
        single_cell, single_met = "-", "-"
        if tier == "best" and single is not None:
            single_cell = f"{single['system']} {single['F1@10']:.3f}"
            single_met = "yes" if ours["F1@10"] >= single["F1@10"] else "no"
        lines.append(f"| {name} | {scope} | {tier} | {ours['F1@10']:.3f} | {peer['system']} {peer['F1@10']:.3f} | "
                     f"{ratio:.2f}x | {'yes' if ratio >= need else 'no'} | {single_cell} | {single_met} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
LABELFREE_METHODS = (FAST_LABEL, "salience best tier", "salience rake", "salience tfidf", "salience kpminer",
                     "salience textrank", "salience positionrank", "salience multipartite")


def labelfree(args) -> dict:
    """Each method's keyphrases on the first documents of each test split, verified: the
    document searched by its title among the split's documents while its top 20 keyphrases are
    deleted, against random orders; the gap beside F1@10 and their rank correlations."""
    from salience.core.correlation import spearman_rho
    from salience.core.verify import verify_subjects

    rows = []
    for name in KEYPHRASE_SETS:
        docs = document_set(KEYPHRASE_DATA / name, "test")[: args.limit_docs]
        texts = [d["text"] for d in docs]
        # a text's first line with a word is its title ("#" lines are not); one line: its first sentence
        titles = [next((line for line in t.strip().split("\n") if re.search(r"\w", line)), None)
                  if "\n" in t.strip() else None for t in texts]
        subjects = list(range(min(len(docs), args.subset_docs)))
        language = docs[0].get("language", "en")
        verifier = create("verify", "keyphrases", language=language)
        english = language == "en"
        systems = salience_systems(english)
        for label in LABELFREE_METHODS:
            method, params = systems[label]
            scorer = create("keywords", method, k=20, **params)
            if learns_document_frequency(method):
                scorer.fit(texts)
            found = scorer.score_batch([texts[i] for i in subjects])
            kept = [i for i, s in zip(subjects, found) if len(s) >= 2]
            by_subject = dict(zip(subjects, found))
            try:
                checks = verifier.verify_collection([by_subject[i] for i in kept], texts,
                                                    titles=[titles[i] for i in kept], subjects=kept)
            except InvalidParameterError:  # a title of stop words alone cannot be searched: that document is left out
                checks, searchable = [], []
                for i in kept:
                    try:
                        checks += verifier.verify_collection([by_subject[i]], texts, titles=[titles[i]], subjects=[i])
                        searchable.append(i)
                    except InvalidParameterError:
                        pass
                kept = searchable
            together = verify_subjects(checks)
            f1 = evaluate_keyphrases([by_subject[i].top_k(10).ids for i in kept], [texts[i] for i in kept],
                                     [docs[i]["keyphrases"] for i in kept], ks=(10,))["F1@10"]
            rows.append({"set": name, "system": label, "documents": len(kept), "gap": together.gap,
                         "verdict": together.verdict, "f1": f1})
            print(f"  labelfree {name} {label}: gap {together.gap:.4f} F1@10 {f1:.3f}", file=sys.stderr, flush=True)
    within = []
    for name in KEYPHRASE_SETS:
        mine = [r for r in rows if r["set"] == name]
        within.append((name, float(spearman_rho(np.array([r["gap"] for r in mine]), np.array([r["f1"] for r in mine])))))
    overall = float(spearman_rho(np.array([r["gap"] for r in rows]), np.array([r["f1"] for r in rows])))
    return {"rows": rows, "within": within, "overall": overall}


def render_labelfree(result: dict, command: str) -> str:
    lines = ["## Keyphrases without gold labels: the removal check beside F1@10 (`bench/keyphrase_tiers.py --tasks "
             "labelfree`)", "", f"Command: `{command}`", "",
             f"The first documents of each set's {split_heading('test')}: each method's top 20 keyphrases are deleted "
             "from a document, best first, while the document is searched by its title (its first line) among the "
             "split's documents (BM25); gap: how much faster than random orders of deletion its margin falls (the "
             "`keyphrases` verifier). A user without gold keyphrases picks the method with the largest gap; the rank "
             "correlation says how often that agrees with F1@10.", "",
             "| set | " + " | ".join(LABELFREE_METHODS) + " | Spearman (gap, F1@10) across methods |",
             "|---|" + "---|" * (len(LABELFREE_METHODS) + 1)]
    for name, rho in result["within"]:
        mine = {r["system"]: r for r in result["rows"] if r["set"] == name}
        cells = [f"{mine[m]['gap']:.3f} / {mine[m]['f1']:.3f}" if m in mine else "-" for m in LABELFREE_METHODS]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {rho:+.2f} |")
    lines += ["", f"Cells: gap / F1@10. Across all (method, set) pairs: Spearman {result['overall']:+.2f}."]
    return "\n".join(lines) + "\n"
