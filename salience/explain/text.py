"""Which words, tokens or sentences of a text mattered to a text scorer (any callable from a
list of texts to one score each): the units are features, a coalition keeps some of them and
drops the others (or replaces them with ``mask``), and any coalition explainer of
:mod:`salience.explain.shapley` attributes the score to them. The scorer is called on batches
of masked texts.
"""

from __future__ import annotations

import html
import re
from typing import Callable

import numpy as np

from salience.exceptions import InvalidParameterError
from salience.explain.attribution import Attribution
from salience.text.byte_tokens import JOINED_WORD, TOKEN_RULES

__all__ = ["text_units", "masked_texts", "attribute_text", "attribution_html"]

UNITS = ("word", "token", "sentence")
_WORD = re.compile(JOINED_WORD)  # the keyphrase tokenizer's words (an ideograph is one)
_TOKEN = re.compile(TOKEN_RULES["joined_words"])  # and its single punctuation marks


def text_units(text: str, unit: str = "word") -> list[tuple[int, int]]:
    """The character spans of the units of ``text``: words (word characters with inner hyphens
    and apostrophes, each ideograph alone, as the keyphrase tokenizer reads them), tokens (words
    and single punctuation marks) or sentences."""
    if not isinstance(text, str):
        raise InvalidParameterError(f"text must be a str; got {type(text).__name__}.")
    if unit == "word":
        return [m.span() for m in _WORD.finditer(text)]
    if unit == "token":
        return [m.span() for m in _TOKEN.finditer(text)]
    if unit == "sentence":
        from salience.text.sentences import split_sentences

        return [(s.start, s.end) for s in split_sentences(text)]
    raise InvalidParameterError(f"unit must be one of {', '.join(UNITS)}; got {unit!r}.")


def masked_texts(text: str, spans: list[tuple[int, int]], masks: np.ndarray, mask: str) -> list[str]:
    """The text once per row of ``masks`` (booleans, one per unit of ``spans``), with the units
    whose mask is false dropped (or replaced by ``mask``): for faithfulness curves on texts."""
    out = []
    for keep in masks:
        pieces, last = [], 0
        for (start, end), kept in zip(spans, keep):
            pieces.append(text[last:start])
            pieces.append(text[start:end] if kept else mask)
            last = end
        pieces.append(text[last:])
        out.append(re.sub(r"\s{2,}", " ", "".join(pieces)) if not mask else "".join(pieces))
    return out


def attribute_text(scorer: Callable, text: str, *, unit: str = "word", method: str = "kernel_shap", mask: str = "",
                   n_samples: int | None = None, batch_size: int | None = None, seed: int | None = 0,
                   max_units: int = 2000, **options) -> Attribution:
    """Attribute ``scorer(texts)[i]`` to the units of ``text`` with an explainer of the
    ``explain`` family (``method``: ``kernel_shap``, ``permutation_shapley``, ``exact_shapley``
    for up to 16 units, ``banzhaf``, ``occlusion``, ``lime``; ``options`` go to it). A dropped
    unit is removed, or replaced by ``mask`` (such as ``"[MASK]"``). ``feature_names`` of the
    result are the units' strings, ``info["spans"]`` their character spans.

    Texts with more than ``max_units`` units are refused (the masked texts grow with them):
    explain sentences, or a part of the text.

    >>> positive = lambda texts: [t.count("good") - t.count("bad") for t in texts]
    >>> a = attribute_text(positive, "a good film, not bad", method="exact_shapley")
    >>> a.to_scores().ranked_ids()[0], a.to_scores().ranked_ids()[-1]
    ('good', 'bad')
    """
    from salience.core.base import create

    if not callable(scorer):
        raise InvalidParameterError(f"scorer must be a callable from a list of texts to one score each; got "
                                    f"{type(scorer).__name__}.")
    spans = text_units(text, unit)
    if not spans:
        raise InvalidParameterError(f"the text has no {unit}s to attribute to (it is empty or all spaces).")
    if len(spans) > max_units:
        raise InvalidParameterError(f"the text has {len(spans)} {unit}s, over max_units={max_units}: explain it by "
                                    "sentence (unit='sentence') or a part of it, or raise max_units.")

    def model(masks: np.ndarray) -> np.ndarray:
        scores = scorer(masked_texts(text, spans, masks > 0.5, mask))
        return np.asarray(scores, dtype=np.float64).reshape(len(masks), -1)[:, 0] if np.ndim(scores) > 1 else scores

    names = [text[a:b] for a, b in spans]
    explainer = create("explain", method, model=model, feature_names=names, **options)
    result = explainer.attribute(np.ones(len(spans)), baselines=np.zeros(len(spans)), n_samples=n_samples,
                                 batch_size=batch_size, seed=seed)
    result.info.update({"spans": spans, "unit": unit, "text": text})
    return result


def attribution_html(attribution: Attribution, text: str | None = None, *, title: str | None = None) -> str:
    """An HTML fragment of the text with each unit highlighted on a diverging scale (red: the
    unit raised the score, blue: it lowered it; the strongest unit at full colour), the
    attribution in each unit's tooltip. Self-contained: inline styles, nothing loaded."""
    text = text if text is not None else attribution.info.get("text")
    spans = attribution.info.get("spans")
    if text is None or spans is None:
        raise InvalidParameterError("attribution_html needs an attribution from attribute_text (its text and spans).")
    values = np.atleast_2d(attribution.values)[0]
    scale = float(np.abs(values).max()) or 1.0
    out, last = [], 0
    for (start, end), value in zip(spans, values.tolist()):
        out.append(html.escape(text[last:start]))
        strength = abs(value) / scale
        colour = (f"rgba(214, 39, 40, {strength:.3f})" if value > 0 else f"rgba(31, 119, 180, {strength:.3f})")
        out.append(f'<span style="background:{colour};border-radius:3px" title="{value:+.4g}">'
                   f"{html.escape(text[start:end])}</span>")
        last = end
    out.append(html.escape(text[last:]))
    heading = f"<h3>{html.escape(title)}</h3>" if title else ""
    return (f'<div class="salience-attribution" style="line-height:1.8;font-family:sans-serif">{heading}'
            f"<p>{''.join(out)}</p><p style=\"font-size:small\">{html.escape(attribution.method)}, "
            f"{attribution.model_calls} model calls; red raised the score, blue lowered it</p></div>")
