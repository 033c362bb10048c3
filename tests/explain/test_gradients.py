import numpy as np
import pytest

from salience import InvalidParameterError
from salience.explain import InputXGradient, IntegratedGradients, Saliency, SmoothGrad

torch = pytest.importorskip("torch")


def _mlp(seed=0):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).double()
    return net


def test_hand_computed_gradients_of_a_quadratic():
    f = lambda X: X[:, 0] ** 2 + 3 * X[:, 1]  # noqa: E731
    x = [[2.0, -1.0]]
    assert Saliency(f).attribute(x).values.tolist() == [[4.0, 3.0]]
    assert InputXGradient(f).attribute(x).values.tolist() == [[8.0, -3.0]]
    # integrated gradients from 0: x0^2 -> 4 exactly (the integral of 2 a x0 * x0), 3 x1 -> -3
    ig = IntegratedGradients(f).attribute(x)
    assert ig.values[0] == pytest.approx([4.0, -3.0], abs=1e-12) and ig.base_value.tolist() == [0.0]
    for rule in ("riemann_trapezoid", "riemann_middle"):
        assert IntegratedGradients(f, rule=rule, n_steps=200).attribute(x).values[0] == pytest.approx([4.0, -3.0], abs=1e-3)
    smooth = SmoothGrad(f, stdev=0.01).attribute(x, n_samples=200, seed=0).values[0]
    assert smooth == pytest.approx([4.0, 3.0], abs=0.01)


def test_completeness_and_parity_with_captum():
    net = _mlp()
    x = np.random.default_rng(0).normal(size=(4, 5))
    baseline = np.full(5, 0.1)
    ig = IntegratedGradients(net, n_steps=64).attribute(x, baselines=baseline, target=1)
    with torch.no_grad():
        gap = net(torch.tensor(x))[:, 1] - net(torch.tensor(baseline[None]))[:, 1]
    assert np.abs(ig.values.sum(axis=1) - gap.numpy()).max() < 1e-6  # completeness
    captum = pytest.importorskip("captum.attr")
    for rule in ("gausslegendre", "riemann_left", "riemann_right", "riemann_middle"):
        ours = IntegratedGradients(net, n_steps=50, rule=rule).attribute(x, baselines=baseline, target=1).values
        theirs = captum.IntegratedGradients(net).attribute(torch.tensor(x), baselines=torch.tensor(baseline[None]),
                                                           target=1, n_steps=50, method=rule).detach().numpy()
        assert np.abs(ours - theirs).max() < 1e-6
    ours = Saliency(net).attribute(x, target=0).values
    theirs = captum.Saliency(net).attribute(torch.tensor(x, requires_grad=True), target=0).detach().numpy()
    assert np.abs(ours - theirs).max() < 1e-12
    ours = InputXGradient(net).attribute(x, target=0).values
    theirs = captum.InputXGradient(net).attribute(torch.tensor(x, requires_grad=True), target=0).detach().numpy()
    assert np.abs(ours - theirs).max() < 1e-12


def test_bad_input():
    with pytest.raises(InvalidParameterError, match="gradient methods call it on torch tensors"):
        Saliency(lambda X: np.asarray(X).sum(axis=1)).attribute([[1.0, 2.0]])
    with pytest.raises(InvalidParameterError, match="differentiable torch model"):
        Saliency(lambda X: [1.0] * len(X)).attribute([[1.0, 2.0]])
    with pytest.raises(InvalidParameterError, match="does not depend on the inputs"):
        Saliency(lambda X: torch.ones(len(X), dtype=torch.float64)).attribute([[1.0, 2.0]])
    with pytest.raises(InvalidParameterError, match="pass target="):
        Saliency(_mlp()).attribute(np.ones((1, 5)))
    with pytest.raises(InvalidParameterError, match="one baseline row"):
        IntegratedGradients(_mlp()).attribute(np.ones((1, 5)), baselines=np.zeros((2, 5)), target=0)
    with pytest.raises(InvalidParameterError, match="unknown rule of IntegratedGradients"):
        IntegratedGradients(_mlp(), rule="simpson")
    with pytest.raises(InvalidParameterError, match="holds nan"):
        Saliency(_mlp()).attribute([[np.nan] * 5], target=0)


def test_deeplift_equals_captum_and_sums_to_the_difference():
    from salience.explain import DeepLift

    captum = pytest.importorskip("captum.attr")
    x = np.random.default_rng(1).normal(size=(5, 5))
    baseline = np.full(5, -0.2)
    for activation in (torch.nn.ReLU, torch.nn.Tanh, torch.nn.Sigmoid):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(5, 8), activation(), torch.nn.Linear(8, 6), activation(),
                                  torch.nn.Linear(6, 2)).double()
        ours = DeepLift(net).attribute(x, baselines=baseline, target=1)
        theirs = captum.DeepLift(net).attribute(torch.tensor(x), baselines=torch.tensor(baseline[None]), target=1)
        assert np.abs(ours.values - theirs.detach().numpy()).max() < 1e-10
        with torch.no_grad():
            gap = (net(torch.tensor(x))[:, 1] - net(torch.tensor(baseline[None]))[:, 1]).numpy()
        assert np.abs(ours.values.sum(axis=1) - gap).max() < 1e-10
    with pytest.raises(InvalidParameterError, match="needs a torch.nn.Sequential"):
        DeepLift(lambda X: X.sum(1)).attribute(np.ones((1, 5)))
    with pytest.raises(InvalidParameterError, match="covers linear layers and elementwise activations"):
        DeepLift(torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Softmax(dim=1))).attribute(np.ones((1, 5)), target=0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_model_is_explained_in_its_own_dtype_as_captum_does(dtype):
    """torch's default modules are float32: explained as they are (issue 25), not refused."""
    from salience.explain import DeepLift

    captum = pytest.importorskip("captum.attr")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to(getattr(torch, dtype))
    x = np.random.default_rng(0).normal(size=(4, 5))
    baseline = np.full(5, 0.1)
    rows, base = torch.tensor(x, dtype=net[0].weight.dtype), torch.tensor(baseline[None], dtype=net[0].weight.dtype)
    tolerance = 1e-5 if dtype == "float32" else 1e-8
    cases = [(IntegratedGradients(net, n_steps=50), captum.IntegratedGradients(net), {"n_steps": 50}),
             (DeepLift(net), captum.DeepLift(net), {})]
    for ours, theirs, options in cases:
        mine = ours.attribute(x, baselines=baseline, target=1)
        reference = theirs.attribute(rows, baselines=base, target=1, **options).detach().double().numpy()
        assert mine.values.dtype == np.float64 and np.abs(mine.values - reference).max() < tolerance
    for ours, theirs in ((Saliency(net), captum.Saliency(net)), (InputXGradient(net), captum.InputXGradient(net))):
        reference = theirs.attribute(rows.clone().requires_grad_(True), target=0).detach().double().numpy()
        assert np.abs(ours.attribute(x, target=0).values - reference).max() < tolerance
    smooth = SmoothGrad(net, stdev=0.05).attribute(x, target=0, n_samples=8, seed=0).values
    assert smooth.shape == x.shape and np.isfinite(smooth).all()
