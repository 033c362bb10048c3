"""Gradient attribution for differentiable models (``pip install 'salience[torch]'``):
saliency, gradient x input, integrated gradients and SmoothGrad.

The model is a torch module, or any function of a torch tensor of rows returning one output per
row or ``(rows, outputs)`` with ``target`` naming the column. A module is explained in its own
floating dtype (that of its first floating parameter: float32 for torch's default modules,
float64 after ``.double()``), as captum does; a function gets float64 rows. Attributions come
back as float64 arrays either way, with the precision of the dtype they were computed in
(float32: about 1e-7 relative). The signature is
every explainer's: ``Method(model, **options).attribute(inputs, *, baselines=None, target=None,
n_samples=None, batch_size=None, seed=0)``.

* ``saliency``: ``|df/dx|`` (Simonyan et al., 2014), as captum's ``Saliency`` (``abs=True``).
* ``input_x_gradient``: ``x * df/dx`` (Shrikumar et al., 2016).
* ``integrated_gradients``: ``(x - b) * integral over a in [0, 1] of df/dx(b + a (x - b))``
  (Sundararajan et al., 2017), the integral by Gauss-Legendre (default, as captum) or the
  trapezoid, left, right or middle Riemann rules, over ``n_steps`` points; attributions add up to
  ``f(x) - f(b)`` as the steps grow (completeness). One baseline row. Gauss-Legendre and the
  left, right and middle rules equal captum's; captum's trapezoid weights add up to
  ``(n - 1) / n`` rather than 1, so its trapezoid attributions fall short of completeness by
  that factor and salience's (the textbook rule) do not.
* ``smoothgrad``: the gradient averaged over ``n_samples`` copies of the input with Gaussian
  noise of standard deviation ``stdev`` (Smilkov et al., 2017).
"""

from __future__ import annotations

import abc
from typing import Callable

import numpy as np

from salience.core.params import Interval, Options
from salience.core.checks import check_k
from salience.extras import require_torch

from salience.core.base import register
from salience.exceptions import InvalidParameterError
from salience.explain.attribution import Attribution
from salience.explain.base import Explainer
from salience.extras import torch

__all__ = ["Saliency", "InputXGradient", "IntegratedGradients", "SmoothGrad", "DeepLift", "RULES"]

RULES = ("gausslegendre", "riemann_trapezoid", "riemann_left", "riemann_right", "riemann_middle")


def _torch():
    return require_torch("Gradient attribution")


def _model_dtype(model):
    """The floating dtype a model computes in: its first floating parameter's (or buffer's) for
    a module, float64 for a function."""
    if isinstance(model, torch.nn.Module):
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.is_floating_point():
                return tensor.dtype
    return torch.float64


def _rule(name: str, n_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(points in [0, 1], weights) of an integration rule over n_steps points."""
    if name == "gausslegendre":
        nodes, weights = np.polynomial.legendre.leggauss(n_steps)
        return 0.5 * (nodes + 1.0), 0.5 * weights
    if name == "riemann_trapezoid":
        if n_steps < 2:
            raise InvalidParameterError("the trapezoid rule needs n_steps >= 2.")
        weights = np.full(n_steps, 1.0 / (n_steps - 1))
        weights[[0, -1]] /= 2
        return np.linspace(0.0, 1.0, n_steps), weights
    offset = {"riemann_left": 0.0, "riemann_right": 1.0, "riemann_middle": 0.5}.get(name)
    if offset is None:
        raise InvalidParameterError(f"unknown integration rule {name!r}; use one of {', '.join(RULES)}.")
    return (np.arange(n_steps) + offset) / n_steps, np.full(n_steps, 1.0 / n_steps)


class _GradientExplainer(Explainer):
    def attribute(self, inputs, *, baselines=None, target: int | None = None, n_samples: int | None = None,
                  batch_size: int | None = None, seed: int | None = 0) -> Attribution:
        x, background, names = self._checked(inputs, baselines, n_samples)
        if batch_size is not None:
            batch_size = check_k(batch_size, "batch_size")
        torch = _torch()
        self._calls = 0
        self._dtype = _model_dtype(self.model)
        values = self._attribute(x, background, target, n_samples, batch_size, seed)
        with torch.no_grad():
            base = self._outputs(self._tensor(np.broadcast_to(background[:1], x.shape)), target)
        return Attribution(np.asarray(values, dtype=np.float64), base.detach().double().numpy(), self.name,
                           self._calls, names)

    def _tensor(self, rows: np.ndarray, requires_grad: bool = False):
        """Rows as a tensor of the model's dtype."""
        return torch.tensor(np.ascontiguousarray(rows), dtype=self._dtype, requires_grad=requires_grad)

    @abc.abstractmethod
    def _attribute(self, x, background, target, n_samples, batch_size, seed) -> np.ndarray:
        """The attributions of the rows ``x``."""

    def _outputs(self, rows, target):
        """The model's outputs for a tensor of rows, one per row, checked."""
        self._calls += len(rows)
        try:
            out = self.model(rows)
        except Exception as err:
            raise InvalidParameterError(f"the model failed on a batch of {len(rows)} rows ({rows.dtype}): "
                                        f"{type(err).__name__}: {err}; gradient methods call it on torch tensors that "
                                        "require gradients, of the dtype of the module's parameters (a function gets "
                                        "float64). A model of numpy arrays needs a model-agnostic method such as "
                                        "KernelShap.") from err
        if not isinstance(out, torch.Tensor):
            raise InvalidParameterError(f"gradient methods need a differentiable torch model: it returned "
                                        f"{type(out).__name__}, not a torch tensor (use a model-agnostic method such as "
                                        "KernelShap for other models).")
        if out.ndim == 2 and out.shape[0] == len(rows):
            if target is None:
                if out.shape[1] != 1:
                    raise InvalidParameterError(f"the model returned {out.shape[1]} outputs per row: pass target=.")
                out = out[:, 0]
            else:
                out = out[:, target]
        elif out.ndim != 1 or out.shape[0] != len(rows):
            raise InvalidParameterError(f"the model returned shape {tuple(out.shape)} for {len(rows)} rows: it must "
                                        "return one output per row, or (rows, outputs).")
        if not torch.isfinite(out).all():
            raise InvalidParameterError("the model returned a value that is not finite.")
        return out

    def _gradients(self, rows: np.ndarray, target, batch_size) -> np.ndarray:
        """df/dx at each row, in batches."""
        out = np.empty_like(rows)
        step = batch_size or len(rows)
        for lo in range(0, len(rows), step):
            batch = self._tensor(rows[lo : lo + step], requires_grad=True)
            outputs = self._outputs(batch, target)
            if not outputs.requires_grad:
                raise InvalidParameterError("gradient methods need a differentiable model: its output does not depend "
                                            "on the inputs through torch operations (use KernelShap or Occlusion).")
            (gradient,) = torch.autograd.grad(outputs.sum(), batch, allow_unused=True)
            if gradient is None:
                raise InvalidParameterError("the model's output has no gradient with respect to the inputs.")
            out[lo : lo + step] = gradient.detach().double().numpy()
        return out


class Saliency(_GradientExplainer):
    """The absolute gradient of the output at the input."""

    name = "saliency"

    def _attribute(self, x, background, target, n_samples, batch_size, seed):
        return np.abs(self._gradients(x, target, batch_size))


class InputXGradient(_GradientExplainer):
    """The input times the gradient of the output at it."""

    name = "input_x_gradient"

    def _attribute(self, x, background, target, n_samples, batch_size, seed):
        return x * self._gradients(x, target, batch_size)


class IntegratedGradients(_GradientExplainer):
    """Integrated gradients from one baseline row (default zeros), over ``n_steps`` points of
    ``rule`` (``n_samples`` overrides ``n_steps``). For a linear model ``X @ w`` they are
    ``(x - b) * w`` exactly (tests/explain/test_gradients.py)."""

    name = "integrated_gradients"

    _parameter_constraints = {"n_steps": [Interval("int", 1)], "rule": [Options(RULES)]}

    def __init__(self, model: Callable, *, feature_names=None, n_steps: int = 50, rule: str = "gausslegendre"):
        self.n_steps, self.rule = n_steps, rule
        super().__init__(model, feature_names=feature_names)

    def _attribute(self, x, background, target, n_samples, batch_size, seed):
        if len(background) != 1:
            raise InvalidParameterError("integrated gradients takes one baseline row (the path's start); got "
                                        f"{len(background)}.")
        points, weights = _rule(self.rule, n_samples or self.n_steps)
        base = background[0]
        # every row's path points, stacked: (rows x steps) x features
        path = base + points[None, :, None] * (x - base)[:, None, :]
        gradients = self._gradients(path.reshape(-1, x.shape[1]), target, batch_size).reshape(path.shape)
        return (x - base) * np.einsum("s,rsf->rf", weights, gradients)


class SmoothGrad(_GradientExplainer):
    """The gradient averaged over ``n_samples`` (default 50) noisy copies of the input, noise of
    standard deviation ``stdev``; ``seed`` fixes the noise."""

    name = "smoothgrad"

    _parameter_constraints = {"stdev": [Interval("real", 0, closed="neither")]}

    def __init__(self, model: Callable, *, feature_names=None, stdev: float = 0.1):
        self.stdev = stdev
        super().__init__(model, feature_names=feature_names)

    def _attribute(self, x, background, target, n_samples, batch_size, seed):
        n = n_samples or 50
        # each row's noise from its own generator seeded alike, as the other explainers draw
        noise = np.stack([np.random.default_rng(seed).normal(0.0, self.stdev, size=(n, x.shape[1])) for _ in x])
        noisy = x[:, None, :] + noise
        gradients = self._gradients(noisy.reshape(-1, x.shape[1]), target, batch_size)
        return gradients.reshape(noisy.shape).mean(axis=1)


class DeepLift(_GradientExplainer):
    """DeepLIFT with the rescale rule (Shrikumar et al., 2017) for a ``torch.nn.Sequential`` of
    linear layers and elementwise activations (ReLU, Tanh, Sigmoid, ...): each activation's
    multiplier is ``(g(z) - g(z0)) / (z - z0)`` between the input's and the baseline's
    pre-activations (its gradient where they meet), linear layers pass multipliers back by
    their weights, and the attribution is ``(x - x0)`` times the input's multiplier. It adds up
    to ``f(x) - f(x0)`` exactly (summation-to-delta). One baseline row."""

    name = "deeplift"

    def _attribute(self, x, background, target, n_samples, batch_size, seed):
        if len(background) != 1:
            raise InvalidParameterError(f"DeepLift takes one baseline row; got {len(background)}.")
        layers = list(self.model) if isinstance(self.model, torch.nn.Sequential) else None
        if layers is None:
            raise InvalidParameterError("DeepLift needs a torch.nn.Sequential of linear layers and elementwise "
                                        "activations (use IntegratedGradients for other models).")
        activation_types = (torch.nn.ReLU, torch.nn.Tanh, torch.nn.Sigmoid, torch.nn.LeakyReLU, torch.nn.ELU,
                            torch.nn.Softplus, torch.nn.GELU, torch.nn.SiLU)
        for layer in layers:
            if not isinstance(layer, (torch.nn.Linear, torch.nn.Identity, torch.nn.Dropout) + activation_types):
                raise InvalidParameterError(f"DeepLift's rescale rule covers linear layers and elementwise activations; "
                                            f"the model has {type(layer).__name__}.")
        with torch.no_grad():
            current = self._tensor(x)
            reference = self._tensor(background[:1]).expand(len(x), -1)
            steps = []  # (layer, its input, the baseline's input)
            for layer in layers:
                steps.append((layer, current, reference))
                if not isinstance(layer, torch.nn.Dropout):
                    current, reference = layer(current), layer(reference)
            self._calls += 2 * len(x)
            if current.ndim == 2 and current.shape[1] > 1 and target is None:
                raise InvalidParameterError(f"the model returned {current.shape[1]} outputs per row: pass target=.")
            multiplier = torch.zeros_like(current)
            multiplier[:, 0 if target is None else target] = 1.0
            for layer, z, z0 in reversed(steps):
                if isinstance(layer, torch.nn.Linear):
                    multiplier = multiplier @ layer.weight.to(multiplier.dtype)
                elif isinstance(layer, activation_types):
                    delta = z - z0
                    gz, gz0 = layer(z), layer(z0)
                    # where the input and the baseline meet, the rescale rule's limit is the gradient
                    near = delta.abs() < 1e-10
                    point = z.clone().requires_grad_(True)
                    with torch.enable_grad():
                        (gradient,) = torch.autograd.grad(layer(point).sum(), point)
                    slope = torch.where(near, gradient, (gz - gz0) / torch.where(near, torch.ones_like(delta), delta))
                    multiplier = multiplier * slope
        return (x - background[:1]) * multiplier.double().numpy()


for _name, _cls, _description in (
    ("saliency", Saliency, "saliency: the absolute gradient at the input (needs torch)"),
    ("input_x_gradient", InputXGradient, "gradient x input (needs torch)"),
    ("integrated_gradients", IntegratedGradients,
     "integrated gradients, Gauss-Legendre or Riemann rules (Sundararajan et al., 2017; needs torch)"),
    ("smoothgrad", SmoothGrad, "SmoothGrad: gradients averaged over noisy inputs (Smilkov et al., 2017; needs torch)"),
    ("deeplift", DeepLift, "DeepLIFT, rescale rule, for sequential networks (Shrikumar et al., 2017; needs torch)"),
):
    register("explain", _name, _cls, _description)
