"""Queries written by a language model for passages (InPars, Promptagator): a few-shot prompt
asks a small causal LM (SmolLM2-135M ships in a pip package) for the query a passage answers.

The few-shot examples are the same for every passage, so their key/value cache is computed once
and copied into every batch (prefix caching); a batch's passages are left-padded between that
prefix and their own tokens, and decoded greedily together until each has written a line. The
examples below are written for this module, on no evaluation set's topics.
"""

from __future__ import annotations

import copy
import re
from typing import Sequence

from salience.exceptions import InvalidParameterError
from salience.extras import torch

__all__ = ["QueryGenerator", "FEW_SHOT"]

FEW_SHOT = (
    ("The kettle switches itself off when the water boils: a bimetallic strip bends as steam heats it and opens "
     "the circuit.", "why does a kettle turn off by itself"),
    ("Bees that find food return to the hive and dance; the angle of the dance tells the others the direction "
     "of the flowers relative to the sun.", "how do bees communicate where food is"),
    ("Rust forms when iron reacts with oxygen and water; salt in the water speeds the reaction, which is why cars "
     "rust faster where roads are salted.", "does road salt make cars rust faster"),
)
INSTRUCTION = "Write the search query that each passage answers.\n\n"
_LINE = re.compile(r"[^\n]*")


class QueryGenerator:
    """``QueryGenerator(model, tokenizer)(passages)``: one query per passage (an empty string
    where the model wrote none). ``max_passage_tokens``: a passage is cut to this;
    ``max_new_tokens``: the longest query; ``batch_size``: passages decoded together."""

    def __init__(self, model, *, tokenizer, max_passage_tokens: int = 128, max_new_tokens: int = 24,
                 batch_size: int = 16, few_shot: Sequence[tuple[str, str]] = FEW_SHOT):
        for name, value in (("max_passage_tokens", max_passage_tokens), ("max_new_tokens", max_new_tokens),
                            ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(f"{name} must be a whole number >= 1; got {value!r}.")
        self.model, self.tokenizer = model, tokenizer
        self.max_passage_tokens, self.max_new_tokens, self.batch_size = max_passage_tokens, max_new_tokens, batch_size
        self.prefix_text = INSTRUCTION + "".join(f"Passage: {p}\nQuery: {q}\n\n" for p, q in few_shot)
        self.calls = 0
        self._prefix_cache, self._stop_tokens = None, None

    def __repr__(self) -> str:
        return f"QueryGenerator(max_passage_tokens={self.max_passage_tokens}, batch_size={self.batch_size})"

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _stops(self) -> set[int]:
        """Tokens that end a query: any holding a newline, and the ends of text the tokenizer and
        the model's generation settings name."""
        stops = {i for t, i in self.tokenizer.get_vocab().items() if "\n" in self.tokenizer.convert_tokens_to_string([t])}
        config = getattr(self.model, "generation_config", None)
        for ends in (self.tokenizer.eos_token_id, getattr(config, "eos_token_id", None)):
            stops.update([] if ends is None else [ends] if isinstance(ends, int) else list(ends))
        return stops

    def __call__(self, passages: Sequence[str], *, progress=None) -> list[str]:
        import torch

        passages = list(passages)
        for i, p in enumerate(passages):
            if not isinstance(p, str):
                raise InvalidParameterError(f"passage {i} must be a str; got {type(p).__name__}.")
        out: list[str] = []
        if self._stop_tokens is None:
            self._stop_tokens = self._stops()
        stops = self._stop_tokens
        with torch.inference_mode():
            for lo in range(0, len(passages), self.batch_size):
                out += self._batch(passages[lo : lo + self.batch_size], stops)
                if progress is not None:
                    progress.update(min(self.batch_size, len(passages) - lo))
        return out

    def _batch(self, passages: list[str], stops: set[int]) -> list[str]:
        from salience.models.kv import cache_argument, padded_rows, returned_cache

        prefix = self._encode(self.prefix_text)
        if self._prefix_cache is None:
            self._prefix_cache = returned_cache(self.model(input_ids=torch.tensor([prefix]), use_cache=True))
        cache = copy.deepcopy(self._prefix_cache)
        cache.batch_repeat_interleave(len(passages))
        rows = [self._encode(f"Passage: {self._cut(p)}\nQuery:") for p in passages]
        pad = getattr(self.tokenizer, "pad_token_id", None) or 0
        ids, mask = padded_rows(rows, pad, left=True)
        mask = torch.cat([torch.ones((len(rows), len(prefix)), dtype=torch.long), mask], dim=1)
        positions = (mask[:, len(prefix):].cumsum(dim=1) - 1).clamp(min=0) + len(prefix)
        written = [[] for _ in rows]
        done = [False] * len(rows)
        argument = cache_argument(self.model)
        for _ in range(self.max_new_tokens):
            output = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                                logits_to_keep=1, **{argument: cache})
            cache = returned_cache(output)
            chosen = output.logits[:, -1].argmax(dim=-1)
            for i, token in enumerate(chosen.tolist()):
                if not done[i]:
                    if token in stops:
                        done[i] = True
                    else:
                        written[i].append(token)
            if all(done):
                break
            ids = chosen[:, None]
            mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=torch.long)], dim=1)
            positions = positions[:, -1:] + 1
        self.calls += len(rows)
        return [_LINE.match(self.tokenizer.decode(w, skip_special_tokens=True).strip()).group(0).strip()
                for w in written]

    def _cut(self, passage: str) -> str:
        ids = self._encode(" ".join(passage.split()))
        return self.tokenizer.decode(ids[: self.max_passage_tokens]) if len(ids) > self.max_passage_tokens else \
            " ".join(passage.split())
