"""A torch module exported to ONNX and opened in ONNX Runtime: the one export path of the
encoders and the cross-encoder (``pip install onnxruntime onnx``)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from salience.exceptions import MissingDependencyError
from salience.extras import install_hint
from salience.extras import torch

__all__ = ["onnx_available", "onnx_session"]


def onnx_available(required: bool) -> bool:
    """Whether ONNX Runtime and onnx import; ``required``: a missing one is an error naming the
    extra to install instead of False."""
    try:
        import onnx  # noqa: F401  (torch's exporter writes through it)
        import onnxruntime  # noqa: F401
    except ImportError:
        if required:
            raise MissingDependencyError(f"the ONNX backend needs ONNX Runtime: {install_hint('onnx')}") from None
        return False
    return True


def onnx_session(module, inputs: Sequence[str], output: str, *, output_by_length: bool,
                 threads: int | None = None):
    """``module`` (its forward takes the ``inputs``, each a (batch, length) integer tensor, and
    returns ``output``, per token when ``output_by_length``) exported with dynamic batch and
    length, opened in ONNX Runtime on the CPU with ``threads`` (default torch's)."""
    import shutil
    import tempfile
    import warnings

    import onnxruntime

    folder = tempfile.mkdtemp(prefix="salience-onnx-")
    try:
        path = str(Path(folder) / "model.onnx")
        example = tuple(torch.ones((2, 8), dtype=torch.long) for _ in inputs)
        axes = {name: {0: "batch", 1: "length"} for name in inputs} | {output: {0: "batch", 1: "length"} if output_by_length else {0: "batch"}}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, example, path, input_names=list(inputs), output_names=[output],
                              dynamic_axes=axes, opset_version=17, dynamo=False)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
