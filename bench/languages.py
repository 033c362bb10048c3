"""Language detection accuracy and speed: salience's stop-word vote against py3langid.

Data: the five keyphrase sets' records (their ``language`` field, English where absent) and
the Universal Declaration of Human Rights in ~380 languages (``../shared/data/dsir``,
``domain == "multilingual"``). For the UDHR, a text whose language salience supports (has a
stop list for) should be detected as it; any other should come back ``"und"`` (undetermined)
or, at worst, as a language whose lists then misfit. Reported: accuracy on the supported
languages, the share of unsupported ones correctly left undetermined, and texts per second.
The UDHR texts are also cut to their first 300 characters, to see detection on short texts.

    python bench/languages.py
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import document_set, split_heading, write_section  # noqa: E402

from salience.text.languages import LANGUAGES, UNDETERMINED, detect_languages  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
KEYPHRASE_SETS = ("inspec", "semeval2017", "semeval2010", "kdd", "citeulike180", "fao30", "wikinews_fr", "pt_bn_kp110")

# UDHR file codes (ISO 639-3, some with a script or variant) -> ISO 639-1, for the languages with a 639-1 code
UDHR_TO_ISO1 = {
    "afr": "af", "arb": "ar", "bul": "bg", "ben": "bn", "bre": "br", "cat": "ca", "ces": "cs", "dan": "da",
    "deu": "de", "deu_1901": "de", "ell_monotonic": "el", "ell_polytonic": "el", "eng": "en", "epo": "eo",
    "spa": "es", "est": "et", "eus": "eu", "pes_1": "fa", "pes_2": "fa", "fin": "fi", "fra": "fr", "gle": "ga",
    "glg": "gl", "guj": "gu", "hau_NE": "ha", "hau_NG": "ha", "heb": "he", "hin": "hi", "hrv": "hr", "hun": "hu",
    "hye": "hy", "ind": "id", "ita": "it", "jpn": "ja", "kor": "ko", "lat": "la", "lat_1": "la", "lit": "lt",
    "lav": "lv", "mar": "mr", "mly_latn": "ms", "nep": "ne", "nld": "nl", "nob": "no", "nno": "no", "pol": "pl",
    "por_BR": "pt", "por_PT": "pt", "ron": "ro", "ron_1953": "ro", "ron_1993": "ro", "rus": "ru", "slk": "sk",
    "slv": "sl", "som": "so", "srp_cyrl": "sr", "srp_latn": "sr", "sot": "st", "swe": "sv", "swh": "sw",
    "tam": "ta", "tha": "th", "tgl": "tl", "tur": "tr", "ukr": "uk", "urd": "ur", "vie": "vi", "ydd": "yi",
    "yor": "yo", "cmn_hans": "zh", "cmn_hant": "zh", "zul": "zu", "ckb": "ku", "mkd": "mk", "bos_latn": "bs",
    "bos_cyrl": "bs", "isl": "is", "kat": "ka", "amh": "am", "cym": "cy", "mlt": "mt", "kaz": "kk",
}


def read_udhr() -> list[tuple[str, str]]:
    out = []
    with gzip.open(DATA / "dsir" / "raw_docs.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            if '"multilingual"' not in line:
                continue
            record = json.loads(line)
            if record.get("domain") == "multilingual":
                out.append((record["subdomain"].removeprefix("udhr_"), record["text"]))
    return out


def score(predicted: list[str], truth: list[str | None]) -> dict:
    """``truth`` is a supported code, or None for a language salience has no stop list for."""
    supported = [(p, t) for p, t in zip(predicted, truth) if t is not None]
    other = [p for p, t in zip(predicted, truth) if t is None]
    return {
        "supported": len(supported),
        "accuracy": sum(p == t for p, t in supported) / max(len(supported), 1),
        "undetermined_of_supported": sum(p == UNDETERMINED for p, _ in supported),
        "unsupported": len(other),
        "left_undetermined": sum(p == UNDETERMINED for p in other) / max(len(other), 1),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--show-errors", action="store_true")
    parser.add_argument("--write", type=Path, default=None)
    args = parser.parse_args(argv)
    supported = {code for code, lang in LANGUAGES.items() if lang.has_stopwords}
    try:
        import py3langid
    except ImportError:
        py3langid = None
        print("py3langid not installed: salience only", file=sys.stderr)

    udhr = read_udhr()
    cases = {"UDHR (full texts)": ([t for _, t in udhr], [UDHR_TO_ISO1.get(c) for c, _ in udhr]),
             "UDHR (first 300 characters)": ([t[:300] for _, t in udhr], [UDHR_TO_ISO1.get(c) for c, _ in udhr])}
    for name in KEYPHRASE_SETS:
        docs = document_set(DATA / "keyphrase" / name, "test")
        cases[f"keyphrase {name}, {split_heading('test')}"] = ([d["text"] for d in docs], [d.get("language", "en") for d in docs])

    rows = []
    for case, (texts, truth) in cases.items():
        # a language salience cannot detect counts as "unsupported" for both systems alike
        truth = [t if t in supported else None for t in truth]
        systems = {"salience": detect_languages}
        if py3langid is not None:
            systems["py3langid"] = lambda texts: [py3langid.classify(t)[0] for t in texts]
        for system, detect in systems.items():
            best, predicted = float("inf"), None
            for _ in range(args.repeats):
                start = time.perf_counter()
                predicted = detect(texts)
                best = min(best, time.perf_counter() - start)
            row = {"case": case, "system": system, **score(predicted, truth), "texts_per_s": len(texts) / best}
            rows.append(row)
            if args.show_errors and system == "salience":
                for p, t, text in zip(predicted, truth, texts):
                    if t is not None and p != t:
                        print(f"  {case}: {t} -> {p}: {text[:80]!r}", file=sys.stderr)
    command = "python bench/languages.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = ["## Language detection (`bench/languages.py`)", "", f"Command: `{command.strip()}`", "",
             f"salience's stop-word vote (`salience.text.languages.detect_languages`, {len(supported)} languages with a "
             "stop list, plus scripts) against py3langid (97 languages, always answers). Accuracy counts the texts in "
             "languages salience has a stop list for; the other UDHR languages should come back `und` (undetermined: "
             "no stemming, the text's own frequent words as stop words), or else get a wrong list. Close pairs share "
             "most stop words (Indonesian/Malay, Afrikaans/Dutch, Croatian/Slovenian): those are the errors.", "",
             "| data | system | supported texts | accuracy | of them undetermined | unsupported texts | left undetermined | texts/s |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['system']} | {r['supported']} | {r['accuracy']:.3f} | {r['undetermined_of_supported']} | "
                     f"{r['unsupported']} | {r['left_undetermined']:.3f} | {r['texts_per_s']:,.0f} |")
    section = "\n".join(lines) + "\n"
    print(section)
    if args.write:
        write_section(args.write, section, marker="bench/languages.py")


if __name__ == "__main__":
    main()
