"""Rule-based sentence splitting that survives abbreviations, initials, decimals, quotes and
line breaks.

A boundary is terminal punctuation (``. ! ? …``, possibly repeated; or the full-width
``。！？`` of Chinese and Japanese, which need no space after them), optionally followed by
closing quotes or brackets, then whitespace, then something that can open a sentence (an
upper-case letter, a digit, an opening quote or bracket) or the end of the text. A period
does not end a sentence after a known abbreviation (``Dr.``, ``e.g.``, ``U.S.``), after a
single-letter initial (``J. Smith``) or inside a number (``3.14`` has no space anyway). A
blank line always ends a sentence; a single line break ends one only after terminal
punctuation, so hard-wrapped paragraphs stay whole.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from salience.exceptions import InvalidParameterError

__all__ = ["Sentence", "split_sentences", "mark_positions", "ABBREVIATIONS", "CLAUSE_END_MARKS"]

ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st vs etc e.g i.e cf al fig figs eq eqs no nos vol vols pp p ed eds inc ltd co corp
    plc dept univ jan feb mar apr jun jul aug sep sept oct nov dec gen gov sen rep capt col lt sgt mt ft rev est
    approx u.s u.k u.n e.u a.m p.m ph.d b.sc m.sc op ch sec art resp viz
    mme mlle mmes mgr sra srta srs dra profa av pág pag cia lda ltda sta sto z.b bzw usw ggf vgl dott sig sigg ecc""".split()
)  # English, then common French, Portuguese, Spanish, German and Italian ones

_TERMINAL_MARKS = ".!?…"
_BOUNDARY = re.compile(r"""([.!?…]+)(["'”’)\]]*)(\s+|$)""")
# Chinese and Japanese end sentences with full-width marks and no space after them
_WIDE_MARKS = "。！？"
_WIDE_BOUNDARY = re.compile(r"""[。！？]+[」』”’）)]*""")
_OPENER = re.compile(r"""["'“‘(\[]*[\w¿¡]""")
_PARAGRAPH = re.compile(r"\n[ \t\r\f\v]*\n\s*")
_ACRONYM = re.compile(r"(?:[a-z]\.)+[a-z]")
# the ASCII whitespace other than the space (what str.split and \s see in ASCII text)
_ASCII_BREAKS = "\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"
# \w is str.isalnum() plus "_": the characters of a word, with the dots inside it
_WORD_BEFORE = re.compile(r"[\w.]{0,40}")


#: Keyphrase statistics (YAKE's sentence spread and position) count clauses ended by these single
#: marks rather than the sentences of :func:`split_sentences`: measured, the splitter's sentences
#: lower SemEval2010 F1@10 from 0.161 to 0.117 and halve the speed on long papers.
CLAUSE_END_MARKS = frozenset(".!?;")


class Sentence(NamedTuple):
    """A sentence (whitespace runs collapsed to one space) and its span in the source text."""

    text: str
    start: int
    end: int


def _ends_sentence(text: str, match: re.Match, mark: str, reversed_text: str) -> bool:
    """Whether the terminal ``mark`` run that ``match`` found ends a sentence (its next
    character, where there is one, is not upper case: the caller checked)."""
    end = match.end()
    if end < len(text) and not text[end].isupper():  # the common case needs no regex
        opener = _OPENER.match(text, end)
        if opener is None:
            return False
        first = opener.group(0)[-1]
        if first.isalpha() and first.islower():
            return False  # "e.g. the", "approx. three": a lower-case word continues the sentence
    if mark != ".":
        return True
    # the word the period ends (letters, digits, inner dots; at most 40 characters), read
    # backwards with one regex match on the reversed text rather than a loop over characters
    word = _WORD_BEFORE.match(reversed_text, len(text) - match.start()).group(0)
    if not word:
        return True
    token = word[::-1].lower().rstrip(".")
    if token in ABBREVIATIONS:
        return False
    if len(token) == 1 and token.isalpha():
        return False  # an initial: "J. Smith"
    if "." in token and _ACRONYM.fullmatch(token):
        return False  # dotted acronyms: "U.S.A."
    return True


def mark_positions(text: str | bytes | bytearray, marks: str | bytes) -> list[int]:
    """The positions in ``text`` of each of ``marks`` (its characters, or bytes), ascending.
    ``find`` skips ahead in C: where marks are few, several times faster than a regex tried at
    every character."""
    positions = []
    for mark in marks:
        at = text.find(mark)
        while at >= 0:
            positions.append(at)
            at = text.find(mark, at + 1)
    positions.sort()
    return positions


def _cuts(text: str) -> list[int]:
    """Where the sentences of ``text`` begin and end, ascending (0 and ``len(text)`` included).

    The matches of ``_BOUNDARY`` are found several times faster than by ``finditer``: the regex
    is tried only where a terminal mark stands (located with ``str.find``, which skips ahead in
    C) rather than at every character. A match can only start on a mark, and a run of marks
    that fails at its first mark fails at every later one (marks are neither closers nor
    spaces), so trying each mark not inside an earlier match, in order, gives exactly the same
    matches."""
    cuts = {0, len(text)}
    for paragraph in _PARAGRAPH.finditer(text):
        cuts.add(paragraph.start())
    reversed_text = text[::-1]
    consumed = 0
    boundary = _BOUNDARY.match
    for at in mark_positions(text, _TERMINAL_MARKS):
        if at >= consumed:
            match = boundary(text, at)
            if match is not None:
                consumed = match.end()
                if _ends_sentence(text, match, match.group(1), reversed_text):
                    cuts.add(match.end(2))
    if not text.isascii() and any(mark in text for mark in _WIDE_MARKS):  # the regex scan only where one stands
        cuts.update(match.end() for match in _WIDE_BOUNDARY.finditer(text))
    return sorted(cuts)


def split_sentences(text: str) -> list[Sentence]:
    """Sentences of ``text`` with their character spans (whitespace-trimmed, empty ones dropped).

    >>> [s.text for s in split_sentences("Dr. Smith paid $3.50 for it. Was it worth it? \\"Yes.\\" He left.")]
    ['Dr. Smith paid $3.50 for it.', 'Was it worth it?', '"Yes."', 'He left.']
    """
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}.")
    bounds = _cuts(text)
    ascii_text = text.isascii()
    # the whitespace that a sentence may need collapsed, looked for once in the whole text
    breaks = [space for space in _ASCII_BREAKS if space in text]
    if "  " in text:
        breaks.append("  ")
    sentences = []
    make = tuple.__new__  # a Sentence without its constructor's Python-level call
    for start, end in zip(bounds, bounds[1:]):
        piece = text[start:end]
        stripped = piece.strip()
        if stripped:
            offset = start + piece.index(stripped[0])
            collapse = not ascii_text and not stripped.isascii()
            if not collapse:
                for space in breaks:
                    if space in stripped:
                        collapse = True
                        break
            sentences.append(make(Sentence, (" ".join(stripped.split()) if collapse else stripped, offset,
                                             offset + len(stripped))))
    return sentences


def split_passages(text: str, *, max_words: int = 0) -> list[str]:
    """Passages of ``text``: its sentences (``max_words=0``), or runs of whole sentences packed up
    to ``max_words`` whitespace-separated words (a longer sentence is a passage of its own).

    >>> split_passages("One two. Three four five. Six.")
    ['One two.', 'Three four five.', 'Six.']
    >>> split_passages("One two. Three four five. Six.", max_words=4)
    ['One two.', 'Three four five. Six.']
    """
    if isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < 0:
        raise InvalidParameterError(f"max_words={max_words!r} must be a whole number >= 0 (0: one passage a sentence).")
    passages: list[list[str]] = []
    room = 0
    for sentence in split_sentences(text):
        words = len(sentence.text.split())
        if passages and max_words and words <= room:
            passages[-1].append(sentence.text)
            room -= words
        else:
            passages.append([sentence.text])
            room = max_words - words
    return [" ".join(parts) for parts in passages]
