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
