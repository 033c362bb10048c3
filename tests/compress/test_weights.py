import numpy as np
import pytest

from salience.core.masks import lowest_k_mask, prune_mask
from salience.exceptions import InvalidParameterError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.compress.models import tiny_llama  # noqa: E402
from salience.compress import (SparseGPT, Wanda, calibration_windows, perplexity, prunable_linears, prune,  # noqa: E402
                               sparsity_of, weight_scores)


def calib(seed=0, n=6, seqlen=16):
    return np.random.default_rng(seed).integers(0, 64, size=(n, seqlen))


def test_lowest_k_is_exact_and_ties_go_to_the_earlier_weight():
    values = np.array([[1.0, 0.5, 0.5, 0.5, 2.0]])
    assert lowest_k_mask(values, 2).tolist() == [[False, True, True, False, False]]
    rng = np.random.default_rng(0)
    ties = rng.integers(0, 3, (20, 16)).astype(float)  # heavy ties, as dequantized weights have
    for k in (0, 3, 8, 16):
        reference = np.zeros_like(ties, dtype=bool)
        np.put_along_axis(reference, np.argsort(ties, axis=1, kind="stable")[:, :k], True, axis=1)
        assert np.array_equal(lowest_k_mask(ties, k), reference)
    whole = prune_mask(ties, sparsity=0.5, group="matrix")  # one long row: its ties cut position by position
    reference = np.zeros(ties.size, dtype=bool)
    reference[np.argsort(ties.ravel(), kind="stable")[:160]] = True
    assert np.array_equal(whole.ravel(), reference)
    with pytest.raises(InvalidParameterError, match="divisible by 4"):
        prune_mask(np.ones((2, 6)), pattern="2:4")
    with pytest.raises(InvalidParameterError, match="sparsity must be a fraction in \\[0, 1\\)"):
        prune_mask(np.ones((2, 4)), sparsity=1.0)


def test_scores_by_hand():
    w = np.array([[1.0, -2.0], [3.0, 0.5]])
    assert weight_scores("magnitude", w).tolist() == [[1.0, 2.0], [3.0, 0.5]]
    assert weight_scores("wanda", w, input_norms=np.array([2.0, 10.0])).tolist() == [[2.0, 20.0], [6.0, 5.0]]
    # LAMP: squares 1, 4, 9, 0.25 in ascending order 0.25, 1, 4, 9; the mass at or above each: 14.25, 14, 13, 9
    assert np.allclose(weight_scores("lamp", w), [[1 / 14, 4 / 13], [1.0, 0.25 / 14.25]])
    assert weight_scores("taylor", w, gradient=np.array([[0.5, 1.0], [0.0, -2.0]])).tolist() == [[0.5, 2.0], [0.0, 1.0]]
    scores = Wanda().score(w, input_norms=np.array([2.0, 10.0]))
    assert scores.ranked_ids() == [1, 2, 3, 0]
    # SparseGPT's saliency W^2 / d^2: d = [1, 2] gives 1, 1, 9, 0.0625
    assert SparseGPT().score(w, hessian_inverse_diagonal=np.array([1.0, 2.0])).values.tolist() == [1.0, 1.0, 9.0, 0.0625]
    with pytest.raises(InvalidParameterError, match="SparseGPT: damp must be a number > 0"):
        SparseGPT(damp=0.0)
    with pytest.raises(InvalidParameterError, match="wanda needs the norm of each of the 2 input features"):
        weight_scores("wanda", w)


def test_magnitude_and_wanda_masks_equal_the_reference_formulas():
    model = tiny_llama()
    original = {name: m.weight.detach().clone() for name, m in prunable_linears(model)}
    windows = calib()
    # Wanda's reference: |W| times the input feature norms, the lowest half of each row
    norms = {}
    hooks = [m.register_forward_hook(lambda mod, inp, out, name=name: norms.__setitem__(
        name, norms.get(name, 0) + (inp[0].double().reshape(-1, inp[0].shape[-1]) ** 2).sum(0)))
        for name, m in prunable_linears(model)]
    with torch.no_grad():
        for lo in range(0, 6, 4):
            model(input_ids=torch.as_tensor(windows[lo : lo + 4]))
    for h in hooks:
        h.remove()
    report = prune(model, method="wanda", sparsity=0.5, calibration=windows)
    assert len(report.layers) == 14 and report.sparsity == pytest.approx(0.5)
    for name, module in prunable_linears(model):
        w = original[name].double().numpy()
        metric = np.abs(w) * np.sqrt(norms[name].numpy())[None, :]
        expected = np.zeros_like(w, dtype=bool)
        np.put_along_axis(expected, np.argsort(metric, axis=1, kind="stable")[:, : w.shape[1] // 2], True, axis=1)
        assert np.array_equal(module.weight.detach().numpy() == 0, expected), name
    model = tiny_llama()
    report = prune(model, method="magnitude", sparsity=0.3)  # per layer by default
    for row in report.layers:
        assert row["pruned"] == int(np.floor(0.3 * row["weights"] + 1e-9))
    model = tiny_llama()
    prune(model, method="lamp", sparsity=0.6)  # global over layers
    assert sparsity_of(model) == pytest.approx(0.6, abs=1e-4)


def test_n_m_patterns_sparsegpt_taylor_and_sequential():
    for method in ("magnitude", "wanda", "sparsegpt"):
        model = tiny_llama()
        prune(model, method=method, pattern="2:4", calibration=calib())
        for name, module in prunable_linears(model):
            blocks = (module.weight.detach().numpy() == 0).reshape(-1, 4).sum(axis=1)
            assert (blocks >= 2).all(), (method, name)
    model = tiny_llama()
    report = prune(model, method="taylor", sparsity=0.5, calibration=calib())
    assert report.sparsity == pytest.approx(0.5, abs=1e-3) and all(p.grad is None for p in model.parameters())
    model = tiny_llama()
    prune(model, method="wanda", sparsity=0.5, calibration=calib(), sequential=True)
    assert sparsity_of(model) == pytest.approx(0.5)


def test_sparsegpt_reconstructs_a_layer_better_than_masking():
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 32, bias=False).double()
    mixing = torch.randn(64, 64, dtype=torch.float64)
    x = torch.randn(2048, 64, dtype=torch.float64) @ mixing  # correlated inputs: reconstruction has work to do
    from salience.compress.weights import _sparsegpt, _Stats

    stats = _Stats(tokens=len(x), sq_norms=(x * x).sum(0), hessian=x.T @ x)
    reference = layer(x).detach()
    masked = torch.nn.Linear(64, 32, bias=False).double()
    with torch.no_grad():
        masked.weight.copy_(layer.weight)
    norms = np.sqrt(stats.sq_norms.numpy())
    keep = ~torch.from_numpy(prune_mask(weight_scores("wanda", layer.weight.detach().numpy(), input_norms=norms),
                                        sparsity=0.5))
    with torch.no_grad():
        masked.weight.mul_(keep)
    _sparsegpt(layer, stats, 0.5, None, blocksize=16, damp=0.01)
    assert int((layer.weight == 0).sum()) == 32 * 32  # half of each block of 16 columns, over all rows
    error_sparsegpt = float(((layer(x) - reference) ** 2).sum())
    error_wanda = float(((masked(x) - reference) ** 2).sum())
    assert error_sparsegpt < 0.7 * error_wanda  # measured 0.57


def test_perplexity_is_the_mean_loss_of_the_windows():
    model = tiny_llama()
    ids = np.random.default_rng(3).integers(0, 64, 16 * 5 + 7)
    with torch.no_grad():
        losses = [float(model(input_ids=torch.as_tensor(ids[i * 16 : (i + 1) * 16])[None], labels=torch.as_tensor(
            ids[i * 16 : (i + 1) * 16])[None]).loss) for i in range(5)]
    assert perplexity(model, ids, seqlen=16, batch_size=2) == pytest.approx(np.exp(np.mean(losses)), rel=1e-6)


def test_bad_input():
    model = tiny_llama()
    with pytest.raises(InvalidParameterError, match="no prunable linear layers"):
        prune(torch.nn.Sequential(torch.nn.Linear(4, 4)), method="magnitude", sparsity=0.5)
    for bad in (1.0, -0.1, "half"):
        with pytest.raises(InvalidParameterError, match="sparsity must be a fraction"):
            prune(model, method="magnitude", sparsity=bad)
    with pytest.raises(InvalidParameterError, match="divisible by 5"):
        prune(model, method="magnitude", pattern="2:5")
    with pytest.raises(InvalidParameterError, match="not more than one window of 16"):
        calibration_windows(list(range(10)), seqlen=16)
    with pytest.raises(InvalidParameterError, match="wanda needs calibration windows"):
        prune(model, method="wanda", sparsity=0.5)
    with pytest.raises(InvalidParameterError, match="unknown weights method .random."):
        prune(model, method="random", sparsity=0.5)
    with pytest.raises(InvalidParameterError, match="fewer than one window"):
        perplexity(model, [1, 2, 3], seqlen=16)


def test_prune_and_eval_commands(model_folder, tmp_path, capsys):
    import json

    from salience.cli import main

    (tmp_path / "calib.txt").write_text(model_folder[1].read_text())
    args = ["compress", "prune", str(tmp_path / "model"), "--method", "wanda", "--sparsity", "0.5", "--calib",
            str(tmp_path / "calib.txt"), "--seqlen", "16", "--calib-windows", "4", "--out", str(tmp_path / "pruned"), "--json"]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["sparsity"] == pytest.approx(0.5) and len(result["layers"]) == 14
    assert main(args) == 0  # an earlier output is replaced
    capsys.readouterr()
    assert main(["compress", "eval", str(tmp_path / "pruned"), "--data", str(tmp_path / "calib.txt"), "--seqlen", "16",
                 "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["sparsity"] == pytest.approx(0.5) and evaluated["perplexity"] > 1
    # the output may not be the model folder itself
    assert main(args[:-3] + ["--out", str(tmp_path / "model")]) == 2
    assert main(["compress", "prune", str(tmp_path / "model"), "--method", "magnitude", "--pattern", "2:5", "--out",
                 str(tmp_path / "x")]) == 2
    assert "divisible by 5" in capsys.readouterr().err
    assert main(["compress", "layers", str(tmp_path / "model"), "--remove", "1", "--calib", str(tmp_path / "calib.txt"),
                 "--seqlen", "16", "--calib-windows", "4", "--out", str(tmp_path / "short"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["layers_left"] == 1 and len(result["removed"]) == 1
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "short")
    assert len(reloaded.model.layers) == 1
    assert main(["compress", "layers", str(tmp_path / "model"), "--remove", "2", "--calib", str(tmp_path / "calib.txt"),
                 "--seqlen", "16", "--out", str(tmp_path / "none")]) == 2
    assert "within 0..1" in capsys.readouterr().err


def test_layer_importance_and_physical_removal():
    from salience.compress import PerplexityChange, block_influence, perplexity_change, remove_layers

    model = tiny_llama()
    windows = calib(n=4)
    influence = block_influence(model, windows)
    # by hand: hooks on each block's input and output
    seen = {}
    hooks = [layer.register_forward_hook(lambda m, a, o, i=i: seen.setdefault(i, []).append(
        1 - torch.nn.functional.cosine_similarity(a[0].double(), (o[0] if isinstance(o, tuple) else o).double(), dim=-1)))
        for i, layer in enumerate(model.model.layers)]
    with torch.no_grad():
        model(input_ids=torch.as_tensor(windows))
    for h in hooks:
        h.remove()
    assert np.allclose(influence.values, [float(torch.cat(seen[i]).mean()) for i in range(2)])
    change = perplexity_change(model, windows)
    full = perplexity(model, windows.ravel(), seqlen=16)
    assert len(model.model.layers) == 2 and model.config.num_hidden_layers == 2  # restored
    assert PerplexityChange().score(model, windows) == change
    kept = remove_layers(model, [0])
    assert kept == [1] and len(model.model.layers) == 1 and model.config.num_hidden_layers == 1
    assert model.model.layers[0].self_attn.layer_idx == 0
    assert perplexity(model, windows.ravel(), seqlen=16) == pytest.approx(full + change.values[0], rel=1e-9)
    out = model.generate(torch.as_tensor(windows[:1, :5]), max_new_tokens=3, do_sample=False)  # the cache still works
    assert out.shape == (1, 8)
    with pytest.raises(InvalidParameterError, match="cannot remove all 1 layers"):
        remove_layers(model, [0])
    with pytest.raises(InvalidParameterError, match="distinct, within 0..0"):
        remove_layers(model, [3])


def test_lowest_k_across_groups_equals_one_stable_sort():
    from salience.core.masks import lowest_k_across

    rng = np.random.default_rng(4)
    arrays = [rng.integers(0, 4, (3, 5)).astype(float), rng.integers(0, 4, (2, 7)).astype(float)]
    flat = np.concatenate([a.ravel() for a in arrays])
    for k in (0, 1, 9, 20, 29):
        reference = np.zeros(flat.size, dtype=bool)
        reference[np.argsort(flat, kind="stable")[:k]] = True
        got = np.concatenate([m.ravel() for m in lowest_k_across(arrays, k)])
        assert np.array_equal(got, reference), k
    with pytest.raises(InvalidParameterError, match="within 0..29"):
        lowest_k_across(arrays, 30)
