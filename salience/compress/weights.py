"""Which weights of a language model matter: importance scores per weight, and pruning masks
chosen by the core's selectors (``pip install 'salience[torch]' transformers``).

Criteria (each a registered scorer of the ``compress`` family, returning
:class:`~salience.Scores` over a layer's weights, row-major):

* ``magnitude``: ``|W|``;
* ``wanda``: ``|W_ij| x ||X_j||``, the weight times the norm of its input feature over the
  calibration tokens (Sun et al., 2024, "A Simple and Effective Pruning Approach for LLMs");
* ``lamp``: layer-adaptive magnitude, ``W_u^2 / sum of W_v^2 over the layer's weights not
  smaller than W_u`` (Lee et al., 2021), comparable across layers;
* ``taylor``: first-order Taylor, ``|W x dL/dW|`` with the gradient of the calibration loss.

:func:`prune` applies one to every linear layer of the decoder (the embeddings and the output
head are kept). Comparison groups: each output row (``group="row"``, Wanda's), each layer
(``"layer"``) or all layers at once (``"global"``); ``pattern="2:4"`` keeps N of every M
consecutive weights of a row. Exactly ``floor(sparsity x group size)`` weights are pruned per
group, ties broken by position (the earlier weight is pruned first), so masks are the same on
every run (dequantized weights tie often). ``method="sparsegpt"`` prunes by optimal brain
surgeon saliency ``W^2 / [H^-1]_jj`` and updates the remaining weights of each row to
compensate, column block by column block (Frantar and Alistarh, 2023), with ``H = X X^T`` from
the calibration inputs; its unstructured masks are chosen per block of ``blocksize`` columns
over all rows (so rows differ in sparsity, the layer does not). Calibration is one-shot (every layer's inputs from the dense model) or
``sequential=True`` (each decoder layer's inputs from the layers already pruned).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from salience.extras import require_torch
from salience.compress.criteria import WeightCriterion, weight_criterion
from salience.core.base import registered_name
from salience.core.masks import check_sparsity, lowest_k_across, parse_pattern, prune_mask
from salience.exceptions import InvalidParameterError, unknown_choice

__all__ = ["prune", "PruneReport", "prunable_linears", "calibration_windows", "sparsity_of", "weight_scores"]

GROUPS = ("row", "layer", "global")


def _torch():
    return require_torch("Compression")


# ------------------------------------------------------------------------------------------
# the model's linear layers and calibration statistics
def prunable_linears(model) -> list[tuple[str, Any]]:
    """(name, module) of every linear layer inside the decoder's blocks: the embeddings and the
    output head are never pruned."""
    torch = _torch()
    if not hasattr(model, "named_modules"):
        raise InvalidParameterError(f"{type(model).__name__} is not a torch model: no decoder blocks with linear "
                                    "layers to compress.")
    layers = [(name, module) for name, module in model.named_modules()
              if isinstance(module, torch.nn.Linear) and ".layers." in f".{name}" and "lm_head" not in name]
    if not layers:
        raise InvalidParameterError(f"{type(model).__name__} has no prunable linear layers (linear layers inside "
                                    "decoder blocks, named '...layers.N...'): nothing to prune.")
    return layers


def calibration_windows(ids: Sequence[int], *, seqlen: int = 256, n_samples: int = 32, seed: int = 0) -> np.ndarray:
    """``n_samples`` windows of ``seqlen`` token ids drawn (seeded) from a token sequence."""
    ids = np.asarray(ids, dtype=np.int64)
    if ids.ndim != 1 or len(ids) <= seqlen:
        raise InvalidParameterError(f"calibration text has {len(ids)} tokens, not more than one window of {seqlen}: "
                                    "give more text or a shorter seqlen.")
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(ids) - seqlen, size=n_samples)
    return np.stack([ids[s : s + seqlen] for s in starts])


def check_calibration(calibration) -> np.ndarray:
    """Calibration token ids as a (samples, seqlen) array, or an error naming the shape."""
    calibration = np.asarray(calibration)
    if calibration.ndim != 2 or calibration.size == 0:
        raise InvalidParameterError(f"calibration must be token-id windows shaped (samples, seqlen); got "
                                    f"{calibration.shape}.")
    return calibration


@dataclass
class _Stats:
    tokens: int = 0
    sq_norms: Any = None  # per input feature: sum of x^2
    hessian: Any = None  # X X^T (sparsegpt)


class _Stop(Exception):
    """Raised after the last block of interest: the rest of the forward pass is not needed."""


def _gram(x, parts: int = 4):
    """X^T X from its blocks on and above the diagonal (the rest mirrored): 10/16 of the
    products of one matrix product for 4 parts."""
    torch = _torch()
    n = x.shape[1]
    if n < 256:
        return x.T @ x
    edges = [round(n * k / parts) for k in range(parts + 1)]
    out = torch.empty((n, n), dtype=x.dtype)
    for a in range(parts):
        rows = x[:, edges[a] : edges[a + 1]].T
        block = rows @ x[:, edges[a] :]
        out[edges[a] : edges[a + 1], edges[a] :] = block
        out[edges[a] :, edges[a] : edges[a + 1]] = block.T
    return out


@contextlib.contextmanager
def _recording(layers, *, hessian: bool, gram_dtype: str = "float64"):
    """Within the block, every forward pass of the ``layers`` adds its inputs' statistics to
    the yielded ``{name: _Stats}``. ``gram_dtype="float32"``: each batch's X^T X multiplied in
    float32 (half the time), the batches still summed in float64."""
    _torch()  # the extra is needed before any hook is set
    stats = {name: _Stats() for name, _ in layers}
    # layers fed the same tensor (q/k/v, gate/up) share its statistics: computed once
    last: dict = {}

    def of_input(x):
        # the same tensor object, held here so that its memory cannot pass to another one
        if last.get("input") is not x or last["version"] != x._version:
            flat = x.detach().reshape(-1, x.shape[-1])
            wide = flat.double()
            # X^T X in float64 by default: float32 sums move SparseGPT's 2:4 perplexity by several percent
            gram = None
            if hessian:
                # in float32 one whole product beats the upper blocks' (a BLAS call on whole rows)
                single = flat.float()
                gram = _gram(wide) if gram_dtype == "float64" else (single.T @ single).double()
            last.update(input=x, version=x._version, tokens=flat.shape[0], sq=(wide * wide).sum(0), hessian=gram)
        return last

    def hook(name):
        def record(module, inputs, output):
            got, s = of_input(inputs[0]), stats[name]
            s.tokens += got["tokens"]
            s.sq_norms = got["sq"] if s.sq_norms is None else s.sq_norms + got["sq"]
            if hessian:
                s.hessian = got["hessian"].clone() if s.hessian is None else s.hessian + got["hessian"]
        return record

    handles = [module.register_forward_hook(hook(name)) for name, module in layers]
    try:
        yield stats
    finally:
        for handle in handles:
            handle.remove()
        last.clear()


def collect_statistics(model, layers, windows, *, batch_size: int, hessian: bool, gradients: bool,
                       gram_dtype: str = "float64") -> dict[str, _Stats]:
    """Input statistics of each layer (and gradients) over the calibration windows."""
    torch = _torch()
    batch = torch.as_tensor(windows)
    with _recording(layers, hessian=hessian, gram_dtype=gram_dtype) as stats:
        for lo in range(0, len(batch), batch_size):
            chunk = batch[lo : lo + batch_size]
            if gradients:
                out = model(input_ids=chunk, labels=chunk, use_cache=False)
                out.loss.backward()
            else:
                with torch.no_grad():
                    model(input_ids=chunk, use_cache=False)
    return stats


def _block_inputs(model, first_block, windows, batch_size: int) -> list:
    """The (args, kwargs) each batch of calibration windows gives the first decoder block: the
    forward pass stops there."""
    torch = _torch()
    captured = []

    def capture(module, args, kwargs):
        captured.append((list(args), dict(kwargs)))
        raise _Stop

    handle = first_block.register_forward_pre_hook(capture, with_kwargs=True)
    try:
        batch = torch.as_tensor(windows)
        with torch.no_grad():
            for lo in range(0, len(batch), batch_size):
                try:
                    model(input_ids=batch[lo : lo + batch_size], use_cache=False)
                except _Stop:
                    pass
    finally:
        handle.remove()
    return captured


# ------------------------------------------------------------------------------------------
# pruning
@dataclass
class PruneReport:
    """What :func:`prune` did: per layer (name, shape, pruned weights, sparsity), the overall
    sparsity of the pruned layers, and seconds spent (calibration, scoring and masking)."""

    method: str
    pattern: str | None
    group: str
    layers: list[dict] = field(default_factory=list)
    seconds: dict = field(default_factory=dict)

    @property
    def sparsity(self) -> float:
        total = sum(r["weights"] for r in self.layers)
        return sum(r["pruned"] for r in self.layers) / total if total else 0.0

    def table(self) -> str:
        lines = [f"{'layer':<48} {'shape':>12} {'sparsity':>9}"]
        for r in self.layers:
            lines.append(f"{r['name']:<48} {str(tuple(r['shape'])):>12} {r['sparsity']:>9.4f}")
        lines.append(f"{'all pruned layers':<48} {'':>12} {self.sparsity:>9.4f}")
        return "\n".join(lines)


def check_prune_options(method: str | WeightCriterion, sparsity, pattern, group: str | None, has_calibration: bool,
                        **params):
    """``prune``'s options checked without a model (the CLI checks them before loading one):
    (criterion, sparsity, N:M pattern or None, group)."""
    criterion = weight_criterion(method, **params)
    nm = parse_pattern(pattern)
    if nm is None:
        sparsity = check_sparsity(sparsity)
    group = group or criterion.default_group
    if group not in GROUPS:
        raise unknown_choice("comparison group", group, GROUPS)
    if nm is not None and group == "global":
        raise InvalidParameterError("an N:M pattern is per row: it does not combine with group='global'.")
    if criterion.needs is not None and not has_calibration:
        raise InvalidParameterError(f"{registered_name(criterion, 'weights')} needs calibration windows of token ids "
                                    "(calibration_windows; CLI: --calib FILE).")
    return criterion, sparsity, nm, group


def prune(model, *, method: str | WeightCriterion = "wanda", sparsity: float | None = 0.5, pattern=None,
          group: str | None = None, calibration: np.ndarray | None = None, batch_size: int = 4, sequential: bool = False,
          **params) -> PruneReport:
    """Prune ``model``'s decoder linear layers in place (see the module docstring).

    ``method``: a registered ``weights`` criterion (built with ``params``, e.g. sparsegpt's
    ``blocksize`` and ``damp``) or a :class:`WeightCriterion`. ``calibration``: token-id
    windows, shape (samples, seqlen) (:func:`calibration_windows`), needed by the criteria
    that read inputs, gradients or Hessians (wanda, taylor, sparsegpt). ``group`` default: the
    criterion's (``"row"`` for wanda and sparsegpt, ``"layer"`` for magnitude and taylor,
    ``"global"`` for lamp)."""
    _torch()  # the error naming the extra comes first
    criterion, sparsity, nm, group = check_prune_options(method, sparsity, pattern, group, calibration is not None,
                                                         **params)
    layers = prunable_linears(model)
    if nm is not None:
        for name, module in layers:
            if module.weight.shape[1] % nm[1]:
                raise InvalidParameterError(f"a {nm[0]}:{nm[1]} pattern needs layer widths divisible by {nm[1]}; "
                                            f"{name} has {module.weight.shape[1]} inputs.")
    if criterion.needs is not None:
        calibration = check_calibration(calibration)
    report = PruneReport(registered_name(criterion, "weights"), None if nm is None else f"{nm[0]}:{nm[1]}", group)
    start = time.perf_counter()
    if sequential and criterion.needs in ("input_norms", "hessian"):
        _prune_sequential(model, layers, criterion, sparsity, nm, group, calibration, batch_size, report)
    else:
        stats = (collect_statistics(model, layers, calibration, batch_size=batch_size,
                                    hessian=criterion.needs == "hessian", gradients=criterion.needs == "gradient")
                 if criterion.needs is not None else {})
        report.seconds["calibration"] = time.perf_counter() - start
        _prune_layers(layers, criterion, sparsity, nm, group, stats, report)
        if criterion.needs == "gradient":
            model.zero_grad(set_to_none=True)
    report.seconds["total"] = time.perf_counter() - start
    return report


def _prune_layers(layers, criterion: WeightCriterion, sparsity, nm, group, stats, report) -> None:
    torch = _torch()
    start = time.perf_counter()
    if criterion.reconstructs:
        for name, module in layers:
            _sparsegpt(module, stats[name], sparsity, nm, criterion.blocksize, criterion.damp)
            _record(report, name, module)
        report.seconds["pruning"] = time.perf_counter() - start
        return
    scores = _importances(layers, criterion, stats)
    if group == "global":
        total = sum(scores[name].size for name, _ in layers)
        chosen = lowest_k_across([scores[name] for name, _ in layers], int(np.floor(sparsity * total + 1e-9)))
        masks = {name: mask for (name, _), mask in zip(layers, chosen)}
    else:
        masks = {name: prune_mask(scores[name], sparsity=sparsity, group="row" if group == "row" else "matrix",
                                  pattern=None if nm is None else f"{nm[0]}:{nm[1]}") for name, _ in layers}
    report.seconds["scoring_and_masks"] = time.perf_counter() - start
    with torch.no_grad():
        for name, module in layers:
            np.putmask(module.weight.detach().numpy(), masks[name], 0.0)  # in place, through a view of the storage
            _record(report, name, module)


def _importances(layers, criterion: WeightCriterion, stats) -> dict:
    """Each layer's weights' importance under ``criterion`` from the gathered statistics."""
    scores = {}
    for name, module in layers:
        w = module.weight.detach().numpy()  # a view: no copy
        s = stats.get(name)
        scores[name] = criterion.importance(
            w, input_norms=None if s is None else np.sqrt(s.sq_norms.numpy()),
            gradient=None if module.weight.grad is None else module.weight.grad.numpy())
    return scores


def weight_scores(model, modules, *, method: str | WeightCriterion = "wanda", calibration=None, batch_size: int = 4,
                  **params) -> dict:
    """module name -> the importance of each of its weights (shaped like it) under a ``weights``
    criterion, for the decoder linear layers named in ``modules``, with the statistics it needs
    gathered over ``calibration`` windows (what :func:`prune` ranks, without pruning). A
    criterion that reconstructs the weights it keeps (sparsegpt) has no standalone scores."""
    from salience.core.base import method_of

    _torch()
    criterion = method_of("weights", method, WeightCriterion, **params)
    if criterion.reconstructs:
        raise InvalidParameterError(f"{registered_name(criterion, 'weights')} updates the weights it keeps as it "
                                    "prunes: its scores do not stand alone; score with another criterion.")
    linears = dict(prunable_linears(model))
    unknown = [name for name in modules if name not in linears]
    if unknown or not modules:
        raise InvalidParameterError(f"{unknown[0] if unknown else 'no module'!r} is not a linear layer of the "
                                    f"model's decoder blocks (e.g. {next(iter(linears))!r}).")
    layers = [(name, linears[name]) for name in modules]
    stats = {}
    if criterion.needs is not None:
        stats = collect_statistics(model, layers, check_calibration(calibration), batch_size=batch_size, hessian=False,
                                   gradients=criterion.needs == "gradient")
    try:
        return {name: np.array(value) for name, value in _importances(layers, criterion, stats).items()}
    finally:
        if criterion.needs == "gradient":
            model.zero_grad(set_to_none=True)


def _record(report: PruneReport, name: str, module) -> None:
    w = module.weight
    pruned = w.numel() - int(np.count_nonzero(w.detach().numpy()))
    report.layers.append({"name": name, "shape": list(w.shape), "weights": w.numel(), "pruned": pruned,
                          "sparsity": pruned / w.numel()})


def upper_cholesky_of_inverse(H):
    """U upper triangular with U^T U = H^-1, from one Cholesky factor: with J the reversal,
    J H J = L L^T gives H^-1 = (J L^-1 J)^T (J L^-1 J). Half the work of factoring H, inverting
    it and factoring the inverse (the GPTQ and SparseGPT references), and equal to it to float64 rounding."""
    torch = _torch()
    lower = torch.linalg.cholesky(H.flip(0, 1))
    return torch.linalg.solve_triangular(lower, torch.eye(len(H), dtype=H.dtype), upper=False).flip(0, 1)


def _sparsegpt(module, stats: _Stats, sparsity, nm, blocksize: int, damp: float) -> None:
    """SparseGPT on one layer: prune by OBS saliency block by block, updating the rest of each
    row with the inverse Hessian's Cholesky factor (Frantar and Alistarh, 2023)."""
    torch = _torch()
    H = stats.hessian.double() / max(stats.tokens, 1)
    W = module.weight.detach().double().clone()
    rows, cols = W.shape
    dead = torch.diag(H) == 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    H += damp * torch.mean(torch.diag(H)) * torch.eye(cols, dtype=H.dtype)
    Hinv = upper_cholesky_of_inverse(H)
    for lo in range(0, cols, blocksize):
        hi = min(lo + blocksize, cols)
        W1 = W[:, lo:hi].clone()
        Hinv1 = Hinv[lo:hi, lo:hi]
        Err1 = torch.zeros_like(W1)
        d = torch.diag(Hinv1)
        if nm is None:
            # the block's mask is chosen over all its rows at once (SparseGPT's adaptive mask selection)
            saliency = (W1 * W1 / (d * d)[None, :]).numpy()
            pruned = torch.from_numpy(prune_mask(saliency, sparsity=sparsity, group="matrix")).to(W1.dtype)
        else:
            pruned = torch.zeros_like(W1)
        for i in range(hi - lo):
            if nm is not None and i % nm[1] == 0 and i + nm[1] <= hi - lo:
                # the group's N:M mask on the weights as updated so far: its M - N lowest saliencies
                # per row, ties to the earlier column (a stable sort; as lowest_k_mask, in torch:
                # this runs once per M columns of every layer)
                block = W1[:, i : i + nm[1]]
                saliency = block * block / (d[i : i + nm[1]] ** 2)[None, :]
                lowest = torch.sort(saliency, dim=1, stable=True).indices[:, : nm[1] - nm[0]]
                pruned[:, i : i + nm[1]] = 0.0
                pruned[:, i : i + nm[1]].scatter_(1, lowest, 1.0)
            # the pruned weights' error, spread over the columns still to come; the update
            # leaves column i equal to its kept weights (Hinv1[i, i] = d[i])
            err = W1[:, i] * pruned[:, i] / d[i]
            W1[:, i:].addr_(err, Hinv1[i, i:], alpha=-1.0)
            Err1[:, i] = err
        W[:, lo:hi] = W1 * (1 - pruned)  # exact zeros where pruned
        W[:, hi:] -= Err1 @ Hinv[lo:hi, hi:]
    with torch.no_grad():
        module.weight.copy_(W.to(module.weight.dtype))


def _prune_sequential(model, layers, criterion: WeightCriterion, sparsity, nm, group, calibration, batch_size,
                      report) -> None:
    """Decoder block by block (:func:`blockwise`): each block's linear layers are calibrated on
    the inputs that the already-pruned blocks produce, then pruned."""
    start = time.perf_counter()

    def prune_block(in_block, stats):
        _prune_layers(in_block, criterion, sparsity, nm, "row" if group == "global" else group, stats, report)

    blockwise(model, layers, calibration, batch_size, hessian=criterion.needs == "hessian", work=prune_block)
    report.seconds["calibration_and_pruning"] = time.perf_counter() - start


def blockwise(model, layers, calibration, batch_size: int, *, hessian: bool, work, gram_dtype: str = "float64") -> None:
    """Decoder block by block: the block's linear layers (of ``layers``) record their input
    statistics while the block runs on the outputs of the blocks before it (as ``work`` left
    them), ``work(in_block, stats)`` changes them, and the block runs again to give the next
    one its inputs. The blocks' inputs are kept between blocks (two passes of each block in
    all, not a pass from the embeddings up for every block)."""
    torch = _torch()
    from salience.models.lm import decoder_layers

    blocks = list(decoder_layers(model))
    inputs = _block_inputs(model, blocks[0], calibration, batch_size)

    def run_block(block):
        with torch.no_grad():
            outputs = [block(*args, **kwargs) for args, kwargs in inputs]
        return [out[0] if isinstance(out, tuple) else out for out in outputs]

    for index, block in enumerate(blocks):
        prefix = f"layers.{index}."
        in_block = [(name, module) for name, module in layers if f".{prefix}" in f".{name}"]
        if in_block:
            with _recording(in_block, hessian=hessian, gram_dtype=gram_dtype) as stats:
                run_block(block)
            work(in_block, stats)
        if index == len(blocks) - 1:
            break  # nothing after the last block needs its outputs
        for (args, kwargs), hidden in zip(inputs, run_block(block)):
            if args:
                args[0] = hidden
            else:
                kwargs["hidden_states"] = hidden


def sparsity_of(model) -> float:
    """The fraction of zero weights over the decoder's linear layers."""
    layers = prunable_linears(model)
    return sum(int((m.weight == 0).sum()) for _, m in layers) / sum(m.weight.numel() for _, m in layers)
