import pytest

from salience import InvalidParameterError
from salience.text.sentences import split_sentences


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Dr. Smith paid $3.50 for it. Was it worth it? \"Yes.\" He left.",
         ["Dr. Smith paid $3.50 for it.", "Was it worth it?", '"Yes."', "He left."]),
        ("The U.S. economy grew 3.2% in Q4. Analysts, e.g. J. P. Morgan, expected less.",
         ["The U.S. economy grew 3.2% in Q4.", "Analysts, e.g. J. P. Morgan, expected less."]),
        ("He said \"Stop!\" and ran. (See Fig. 3.) Then it ended...",
         ['He said "Stop!" and ran.', "(See Fig. 3.)", "Then it ended..."]),
        ("Title line\n\nFirst sentence. Second!\nThird sentence.\nhard wrapped\ncontinues here.",
         ["Title line", "First sentence.", "Second!", "Third sentence. hard wrapped continues here."]),
        ("Version 2.0 shipped. It works.", ["Version 2.0 shipped.", "It works."]),
        ("", []),
        ("   \n ", []),
        ("Ünïcode sentences work. Ça va? Oui.", ["Ünïcode sentences work.", "Ça va?", "Oui."]),
    ],
)
def test_split(text, expected):
    assert [s.text for s in split_sentences(text)] == expected


def test_spans_point_into_the_text():
    text = "First one.  Second one?\n\nThird."
    for s in split_sentences(text):
        assert text[s.start : s.end] == s.text


def test_bad_input():
    with pytest.raises(InvalidParameterError, match="must be a str"):
        split_sentences(None)


def test_long_text_is_linear_in_memory():
    # allocations, not seconds: twice the text takes about twice the memory
    import tracemalloc

    peaks = []
    for n in (10_000, 20_000):
        text = "This is a sentence with Dr. Who and 3.5 units. " * n
        tracemalloc.start()
        try:
            assert len(split_sentences(text)) == n
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert peaks[1] < 2.5 * peaks[0]


def _reference_split(text):
    """The splitting rules written plainly: the word before a period walked back a character at a
    time, and every sentence's whitespace collapsed by one regex (the fast paths must agree)."""
    import re

    from salience.text import sentences as rules

    def boundary(match):
        end = match.end()
        if end < len(text) and not text[end].isupper():
            opener = rules._OPENER.match(text, end)
            if opener is None:
                return False
            first = opener.group(0)[-1]
            if first.isalpha() and first.islower():
                return False
        if match.group(1) != ".":
            return True
        begin = end_of_word = match.start()
        while begin > 0 and begin > end_of_word - 40 and (text[begin - 1].isalnum() or text[begin - 1] in "._"):
            begin -= 1
        if begin == end_of_word:
            return True
        token = text[begin:end_of_word].lower().rstrip(".")
        if token in rules.ABBREVIATIONS or (len(token) == 1 and token.isalpha()):
            return False
        return not ("." in token and rules._ACRONYM.fullmatch(token))

    cuts = {0, len(text)} | {m.start() for m in rules._PARAGRAPH.finditer(text)}
    cuts |= {m.end(2) for m in rules._BOUNDARY.finditer(text) if boundary(m)}
    cuts |= {m.end() for m in rules._WIDE_BOUNDARY.finditer(text)}
    bounds = sorted(cuts)
    pieces = [text[a:b].strip() for a, b in zip(bounds, bounds[1:])]
    return [" ".join(p.split()) if re.search(r"\s\s|[^\S ]", p) else p for p in pieces if p]


def test_fast_paths_split_as_the_plain_rules():
    import random

    rng = random.Random(7)
    parts = ["Dr", "e.g", "U.S", "J", "word", "Ünï", "x" * 45, "under_score", "3.5", "a_b.c", "etc", "Fig", "ça",
             "Then", "the", "(See", '"Yes', "…", "Wait", "42", "é" * 41, "ab" + ".c" * 19]
    # runs of marks, closers and marks with no space after them: the boundary scan starts only at marks
    gaps = [". ", ".  ", ".\t", ".\x1c", ".\u2003", "! ", "? ", " ", "\n", "\n\n", ". \n", "。", ".) ", ". (", ".\" ",
            "?! ", "...", ".”", "!’ ", ".]", ".", "?.!", "…\n", "。」", "！"]
    for _ in range(6000):
        text = "".join(rng.choice(parts) + rng.choice(gaps) for _ in range(rng.randint(0, 12)))
        assert [s.text for s in split_sentences(text)] == _reference_split(text), text


@pytest.mark.parametrize("text, expected", [
    ("One\ttwo  three.\x1cNext one.", ["One two three.", "Next one."]),
    ("Wide\u2003space here. Done.", ["Wide space here.", "Done."]),
    ("Call x_y.z. Then stop.", ["Call x_y.z.", "Then stop."]),
])
def test_inner_whitespace_collapses_to_single_spaces(text, expected):
    assert [s.text for s in split_sentences(text)] == expected
