"""Measuring a compressed model: perplexity on fixed windows, and an offline English corpus
(the standard library's docstrings) to calibrate and evaluate on."""

from __future__ import annotations

import ast
import sysconfig
from pathlib import Path
from typing import Sequence

import numpy as np

from salience.extras import require_torch
from salience.exceptions import InvalidParameterError

__all__ = ["perplexity", "stdlib_docstrings", "windows", "held_out_log_perplexity", "restored_weights"]


def windows(ids: Sequence[int], seqlen: int, max_windows: int | None = None) -> np.ndarray:
    """Consecutive, non-overlapping windows of ``seqlen`` token ids (the tail that does not fill
    one is left out), at most ``max_windows``."""
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids) // seqlen
    if n == 0:
        raise InvalidParameterError(f"the text has {len(ids)} tokens, fewer than one window of {seqlen}: give more "
                                    "text or a shorter window.")
    if max_windows is not None:
        n = min(n, max_windows)
    return ids[: n * seqlen].reshape(n, seqlen)


def perplexity(model, ids: Sequence[int], *, seqlen: int = 256, batch_size: int = 4,
               max_windows: int | None = None) -> float:
    """exp(mean negative log-likelihood) of every token after the first of each window: the
    windows are scored independently, so the figure depends only on the text, ``seqlen`` and
    the model."""
    torch = require_torch("Perplexity")
    batch = torch.as_tensor(windows(ids, seqlen, max_windows))
    total, count = 0.0, 0
    with torch.no_grad():
        for lo in range(0, len(batch), batch_size):
            chunk = batch[lo : lo + batch_size]
            logits = model(input_ids=chunk, use_cache=False).logits[:, :-1].double()
            nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1),
                                                    reduction="sum")
            total += float(nll)
            count += chunk[:, 1:].numel()
    value = float(np.exp(total / count))
    if not np.isfinite(value):
        raise InvalidParameterError("the model's perplexity is not finite: its outputs hold NaN or inf.")
    return value


def held_out_log_perplexity(model, windows_: np.ndarray, *, batch_size: int) -> tuple[float, int]:
    """(log perplexity of the token ``windows_`` (samples x seqlen), forward passes run): the
    outcome the compression verifiers measure as units are removed."""
    windows_ = np.asarray(windows_)
    value = perplexity(model, windows_.ravel(), seqlen=windows_.shape[1], batch_size=batch_size)
    return float(np.log(value)), -(-len(windows_) // batch_size)


class restored_weights:
    """The weights of ``modules`` (linear layers) put back as they were on exit, whatever was
    written into them meanwhile: ``with restored_weights(modules) as originals:`` gives a copy
    of each weight to build the changed ones from."""

    def __init__(self, modules):
        self.modules = list(modules)

    def __enter__(self) -> list:
        self.originals = [m.weight.detach().clone() for m in self.modules]
        return self.originals

    def __exit__(self, *exc) -> None:
        torch = require_torch("Restoring weights")
        with torch.no_grad():
            for module, original in zip(self.modules, self.originals):
                module.weight.copy_(original)


def stdlib_docstrings(max_chars: int | None = None) -> str:
    """The docstrings of the Python standard library's modules, classes and functions (read from
    the source with ``ast``, nothing imported), in a fixed order: an English corpus that every
    machine has. Test modules and third-party packages are left out."""
    root = Path(sysconfig.get_paths()["stdlib"])
    parts, size = [], 0
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).parts
        if relative[0] in ("site-packages", "test", "idlelib", "lib2to3") or "tests" in relative:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 40:
                    parts.append(doc.strip())
                    size += len(doc) + 2
        if max_chars is not None and size >= max_chars:
            break
    text = "\n\n".join(parts)
    return text if max_chars is None else text[:max_chars]
