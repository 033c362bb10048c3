"""Which sources of a language model's context made its answer: the base of the ``context``
family (``create("context", "contextcite", model=model, tokenizer=tokenizer)``).

Every method's ``score(sources, question, response=None)`` returns :class:`~salience.Scores`
over the sources (passages or sentences: a dict of id -> text, or a list whose ids are the
positions): how much each one raises the response's log-probability. The prompt is ContextCite's
(:class:`~salience.models.answering.SourcedQuestion`); the response is given (scored as given,
even one the model would not write) or generated greedily (``max_new_tokens``). After a call,
``info_`` holds the response, its log-probability with every source and the forward passes
run. A single source's score is the whole drop (the response's log-probability with it, less
without it), as ``info_["note"]`` states.
"""

from __future__ import annotations

import abc

import numpy as np

from salience.core.base import Scorer
from salience.core.params import Check, Interval, Options
from salience.core.scores import Scores
from salience.exceptions import InvalidParameterError
from salience.models.answering import CONTEXT_TEMPLATE, SourcedQuestion, source_texts

__all__ = ["ContextAttribution"]


def _is_tokenizer(value) -> bool:
    return callable(getattr(value, "encode", None)) and callable(getattr(value, "decode", None))


class ContextAttribution(Scorer, abc.ABC):
    """``model``, ``tokenizer``: a causal LM (:func:`~salience.models.load_causal_lm`);
    ``template``, ``separator``, ``chat``: the prompt (ContextCite's); ``max_new_tokens``: of a
    generated response."""

    _parameter_constraints = {"model": [callable], "tokenizer": [Check(_is_tokenizer, "a tokenizer (with encode and "
                                                                                      "decode)")],
                              "template": [str], "separator": [str], "chat": [bool, Options(("auto",))],
                              "max_new_tokens": [Interval("int", 1)]}

    def __init__(self, model, *, tokenizer, template: str = CONTEXT_TEMPLATE, separator: str = "\n\n",
                 chat: "bool | str" = "auto", max_new_tokens: int = 64):
        self.model, self.tokenizer, self.template, self.separator = model, tokenizer, template, separator
        self.chat, self.max_new_tokens = chat, max_new_tokens
        self._validate_params()

    def question(self, sources, question: str, response=None) -> tuple[list[str], SourcedQuestion]:
        """(the sources' ids, the question asked of them with the response fixed)."""
        ids, texts = source_texts(sources, "sources")
        return ids, SourcedQuestion(self.model, self.tokenizer, texts, question, response=response,
                                    template=self.template, separator=self.separator, chat=self.chat,
                                    max_new_tokens=self.max_new_tokens)

    def score(self, sources, question: str, response=None) -> Scores:
        ids, asked = self.question(sources, question, response)
        return self.attribute(asked, ids)

    def attribute(self, asked: SourcedQuestion, ids=None) -> Scores:
        """Scores over the sources of a question already asked (``ids``: the sources' ids, their
        positions by default): what :meth:`score` runs once the prompt is built, for a caller
        that holds the :class:`~salience.models.answering.SourcedQuestion` (and may have set its
        prompt's cache)."""
        ids = [str(i) for i in range(len(asked.sources))] if ids is None else list(ids)
        if len(ids) != len(asked.sources):
            raise InvalidParameterError(f"ids name {len(ids)} sources; the question holds {len(asked.sources)}.")
        whole = float(asked.log_probs(np.ones(len(ids), dtype=bool), reuse_prefix=self._reuses_prefix)[0])
        self.info_ = {"response": asked.response, "response_ids": list(asked.response_ids), "log_prob": whole}
        notes = [] if asked.generated else ["the response was given, not generated: it is scored as given (the "
                                            "model's own answer may differ)"]
        if len(ids) == 1:
            values = np.array([whole - float(asked.log_probs(np.zeros(1, dtype=bool))[0])])
            notes.append("one source: its score is the whole drop of the response's log-probability")
        else:
            values = np.asarray(self._attribute(asked), dtype=np.float64)
        self.info_["forward_passes"] = asked.forward_passes
        if notes:
            self.info_["note"] = "; ".join(notes)
        return Scores(values, ids=ids)

    #: whether the method reads its ablated contexts onto the cached prefix they share with the
    #: whole one (then the whole context is read into that cache first)
    _reuses_prefix = False

    def score_batch(self, items) -> list[Scores]:
        """``score`` of each ``(sources, question)`` or ``(sources, question, response)``."""
        return [self.score(*item) for item in items]

    @abc.abstractmethod
    def _attribute(self, asked: SourcedQuestion) -> np.ndarray:
        """One value per source (two or more) for the question asked."""
