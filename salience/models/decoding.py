"""Greedy decoding on a key/value cache, with prompt lookup: tokens copied from what was read
are checked in the same forward pass as the next one.

An answer drawn from passages often repeats them. Prompt lookup decoding (Saxena, 2023; as in
transformers' ``prompt_lookup_num_tokens``) takes the last few tokens read, finds them earlier in
the prompt or the answer, and proposes the tokens that followed there as a draft. One forward
pass reads the pending token and the draft; the draft's tokens are kept as long as each is the
model's own greedy choice at its place, and the first that is not is replaced by that choice.
The answer is the plain greedy answer (to float rounding: a pass over several tokens sums in
another order than one token at a time); a pass that keeps nothing of its draft still yields
one token. One token of decoding is bound by reading the weights, so a pass over a few more
tokens costs little more than one.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from salience.exceptions import InvalidParameterError

__all__ = ["lookup_draft", "greedy_decode", "check_lookup_tokens", "LOOKUP_NGRAMS"]

#: the lengths of the last-read n-grams searched for, longest first (a single token matches too
#: often to be worth a pass's extra tokens)
LOOKUP_NGRAMS = (3, 2)


def check_lookup_tokens(lookup_tokens) -> int:
    if isinstance(lookup_tokens, bool) or not isinstance(lookup_tokens, (int, np.integer)) or lookup_tokens < 0:
        raise InvalidParameterError(f"lookup_tokens must be an int >= 0 (0: plain greedy decoding); got "
                                    f"{lookup_tokens!r}.")
    return int(lookup_tokens)


def lookup_draft(history: Sequence[int], count: int, ngrams: Sequence[int] = LOOKUP_NGRAMS) -> list[int]:
    """Up to ``count`` tokens that followed the latest earlier occurrence of ``history``'s last
    n tokens (n from ``ngrams``, longest first); ``[]`` when none occurs earlier."""
    if count <= 0:
        return []
    sequence = np.asarray(history, dtype=np.int64)
    for n in ngrams:
        if len(sequence) <= n:
            continue
        # every window that ends before the last token: one that matches has a continuation
        windows = np.lib.stride_tricks.sliding_window_view(sequence[:-1], n)
        hits = np.flatnonzero((windows == sequence[-n:]).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return sequence[start:start + count].tolist()
    return []


def greedy_decode(read: Callable, first_logits, *, history: Sequence[int], stops, max_new_tokens: int,
                  lookup_tokens: int = 0, crop: Callable | None = None) -> tuple[list[int], int]:
    """(the greedy answer's ids, forward passes): ``first_logits`` (vocab,) predict the first
    token; ``read(tokens)`` reads tokens onto the cache after the ones read before and returns
    their logits (len(tokens), vocab); ``history``: the prompt's ids (where drafts are looked up,
    with the answer so far). ``lookup_tokens`` > 0 drafts that many tokens a pass by prompt
    lookup; ``crop(n)`` then removes the cache's last n tokens (a rejected draft's). The answer
    ends before a token of ``stops`` or at ``max_new_tokens``."""
    check_lookup_tokens(lookup_tokens)
    if lookup_tokens and crop is None:
        raise InvalidParameterError("lookup_tokens needs a cache whose rejected tokens can be removed (crop).")
    history, ids, passes = list(history), [], 0
    pending = int(first_logits.argmax())
    while pending not in stops and len(ids) < max_new_tokens:
        ids.append(pending)
        if len(ids) == max_new_tokens:
            break
        draft = lookup_draft(history + ids, min(lookup_tokens, max_new_tokens - len(ids))) if lookup_tokens else []
        greedy = [int(t) for t in read([pending] + draft).argmax(-1)]
        passes += 1
        kept = 0
        while kept < len(draft) and draft[kept] == greedy[kept] and draft[kept] not in stops:
            kept += 1
        ids += draft[:kept]
        if kept < len(draft):
            crop(len(draft) - kept)
        pending = greedy[kept]
    return ids, passes
