import copy
import json

import numpy as np
import pytest

from salience.exceptions import InvalidParameterError, MissingDependencyError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from tests.compress.models import tiny_llama  # noqa: E402
from salience.compress import (GPTQ, RTN, AWQ, QuantScheme, allot_bits, perplexity, quantize,  # noqa: E402
                               scheme_of)
from salience.compress.quant_grid import quantize_rtn  # noqa: E402
from salience.compress.quantizers import output_error  # noqa: E402
from salience.core.scores import Scores  # noqa: E402
from salience.models.quantized import to_integer_modules  # noqa: E402
from salience.models.quantized_files import load_quantized, pack_int32, save_quantized, unpack_int32  # noqa: E402


def calib(seed=0, n=8, seqlen=32):
    return np.random.default_rng(seed).integers(0, 64, size=(n, seqlen))


def test_grid_by_hand_symmetric_and_asymmetric():
    w = torch.tensor([[-1.5, 0.8, 3.0, 0.0]])
    q = quantize_rtn(w, QuantScheme(4, None, True))
    # scale = max|w| / 7.5 = 0.4 (compressed-tensors' symmetric range); 3.0 / 0.4 = 7.5 clamps to 7
    assert q.scale.ravel().tolist() == pytest.approx([0.4])
    assert q.codes.tolist() == [[-4, 2, 7, 0]]
    assert q.dequantize().tolist()[0] == pytest.approx([-1.6, 0.8, 2.8, 0.0])
    a = quantize_rtn(w, QuantScheme(4, None, False))
    # scale = (3 - (-1.5)) / 15 = 0.3, zero = round(-8 + 1.5 / 0.3) = -3; code = round(w / 0.3 - 3)
    assert a.scale.ravel().tolist() == pytest.approx([0.3])
    assert a.zero.tolist() == [[-3]]
    assert a.codes.tolist() == [[-8, 0, 7, -3]]
    assert a.dequantize().tolist()[0] == pytest.approx([-1.5, 0.9, 3.0, 0.0])
    grouped = quantize_rtn(torch.tensor([[1.0, -0.5, 10.0, 5.0]]), QuantScheme(8, 2, True))
    assert grouped.scale.ravel().tolist() == pytest.approx([1.0 / 127.5, 10.0 / 127.5])


def test_packing_is_compressed_tensors_layout():
    codes = np.arange(-8, 0, dtype=np.int8)[None, :]  # offset by 8: 0..7, nibble i at bits 4i
    assert pack_int32(codes, 4).view(np.uint32).tolist() == [[0x76543210]]
    rng = np.random.default_rng(0)
    for bits in range(2, 9):
        for cols in (5, 32, 70):
            c = rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), size=(3, cols)).astype(np.int8)
            packed = pack_int32(c, bits)
            assert packed.shape == (3, -(-cols * bits // 32))
            assert np.array_equal(unpack_int32(packed, bits, cols), c)


def _correlated_hessian(n, seed=0):
    x = torch.randn(400, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    x[:, 1:] += 0.8 * x[:, :-1]
    return x.T @ x


def test_gptq_equals_rtn_on_a_diagonal_hessian_and_beats_it_on_a_correlated_one():
    w = torch.randn(8, 32, generator=torch.Generator().manual_seed(1))
    diagonal = torch.diag(torch.linspace(1, 3, 32, dtype=torch.float64))
    for actorder in (False, True):
        g = GPTQ(bits=4, group_size=8, actorder=actorder, damp=1e-6).quantize(w, hessian=diagonal)
        assert torch.equal(g.codes, RTN(bits=4, group_size=8).quantize(w).codes)
    h = _correlated_hessian(32)
    rtn_error = output_error(w, RTN(bits=4, group_size=8).quantize(w), h)
    for actorder in (False, True):
        gptq_error = output_error(w, GPTQ(bits=4, group_size=8, actorder=actorder).quantize(w, hessian=h), h)
        assert gptq_error < 0.8 * rtn_error
    # stacked layers (rows independent given the Hessian) equal one by one
    q1 = GPTQ(bits=3, group_size=8).quantize(w[:4], hessian=h)
    q2 = GPTQ(bits=3, group_size=8).quantize(w, hessian=h)
    assert torch.equal(q1.codes, q2.codes[:4])


def test_gptq_equals_the_column_by_column_algorithm_written_out():
    """GPTQ's lazy blocks, its transposed loop and its one-factor inverse give what the plain
    algorithm gives: each column rounded, its error divided by U_ii and spread over the later
    columns by row i of U (U upper, U^T U = H^-1), in float64 with numpy."""
    from salience.compress.weights import upper_cholesky_of_inverse

    rng = np.random.default_rng(3)
    w = rng.normal(size=(6, 12))
    x = rng.normal(size=(40, 12)) @ rng.normal(size=(12, 12))
    h = x.T @ x
    damped = h + 0.01 * np.mean(np.diag(h)) * np.eye(12)
    u = np.linalg.cholesky(np.linalg.inv(damped)).T
    assert np.allclose(upper_cholesky_of_inverse(torch.as_tensor(damped)).numpy(), u, atol=1e-10)
    scale = np.abs(w).max(axis=1, keepdims=True) / 3.5  # 3 bits, symmetric, one group per row
    work, codes = w.copy(), np.zeros_like(w)
    for i in range(12):
        codes[:, i] = np.clip(np.round(work[:, i] / scale[:, 0]), -4, 3)
        err = (work[:, i] - codes[:, i] * scale[:, 0]) / u[i, i]
        work[:, i:] -= np.outer(err, u[i, i:])
    for blocksize in (5, 128):
        got = GPTQ(bits=3, group_size=None, actorder=False, blocksize=blocksize).quantize(
            torch.as_tensor(w, dtype=torch.float32), hessian=torch.as_tensor(h))
        assert np.array_equal(got.codes.numpy(), codes)


def test_awq_never_loses_to_rtn_on_its_objective():
    w = torch.randn(16, 32, generator=torch.Generator().manual_seed(2))
    x = torch.randn(300, 32, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    x[:, :3] *= 20  # salient input channels
    h = x.T @ x
    awq = AWQ(bits=3, group_size=8)
    s, error = awq.search_scale([w.double()], h)
    assert error <= output_error(w, RTN(bits=3, group_size=8).quantize(w), h) + 1e-9
    assert s[:3].mean() > s[3:].mean()  # the salient columns are scaled up


def test_quantized_model_saves_loads_and_runs_integer_kernels(tmp_path):
    model = tiny_llama(hidden_size=64, intermediate_size=128, tie_word_embeddings=True)
    windows = calib()
    for method in ("rtn", "gptq", "awq"):
        m = copy.deepcopy(model)
        report = quantize(m, method=method, scheme="w4a16", group_size=32, calibration=windows)
        assert report.average_bits == 4.0 and len(report.layers) == 14
        fake = m(input_ids=torch.as_tensor(windows[:2])).logits
        folder = tmp_path / method
        folder.mkdir()
        config = save_quantized(m, folder)
        assert config["quant_method"] == "compressed-tensors" and config["format"] == "pack-quantized"
        loaded, _ = load_quantized(folder)
        kernels = {mod._kernel for mod in loaded.modules() if type(mod).__name__ == "QuantizedLinear"}
        assert "int4" in kernels
        assert not any(isinstance(mod, torch.nn.Linear) for name, mod in loaded.named_modules() if ".layers." in name)
        real = loaded(input_ids=torch.as_tensor(windows[:2])).logits
        assert torch.allclose(real, fake, atol=0.05), (real - fake).abs().max()  # bfloat16 activations
        single = loaded(input_ids=torch.as_tensor(windows[:1, :1])).logits  # one row: the kernels themselves
        assert torch.allclose(single, m(input_ids=torch.as_tensor(windows[:1, :1])).logits, atol=0.05)


def test_int8_w8a8_and_embeddings(tmp_path):
    model = tiny_llama(hidden_size=64, intermediate_size=128, tie_word_embeddings=True)
    windows = calib()
    for scheme in ("w8a16_channel", "w8a8"):
        m = copy.deepcopy(model)
        quantize(m, method="rtn", scheme=scheme, embeddings=True)
        fake = m(input_ids=torch.as_tensor(windows[:2])).logits
        folder = tmp_path / scheme
        folder.mkdir()
        assert save_quantized(m, folder)["format"] == "int-quantized"
        loaded, _ = load_quantized(folder)
        assert {mod._kernel for mod in loaded.modules() if type(mod).__name__ == "QuantizedLinear"} == {"int8"}
        assert type(loaded.get_input_embeddings()).__name__ == "QuantizedEmbedding"
        real = loaded(input_ids=torch.as_tensor(windows[:2])).logits
        assert torch.allclose(real, fake, atol=0.05), (real - fake).abs().max()
        integer = to_integer_modules(copy.deepcopy(m))
        assert torch.allclose(integer(input_ids=torch.as_tensor(windows[:2])).logits, real, atol=1e-4)


def test_awq_folding_keeps_the_function():
    for family in ({}, {"model_type": "gemma3_text"}):
        if family:
            config = transformers.Gemma3TextConfig(vocab_size=64, hidden_size=64, intermediate_size=128,
                                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                                   head_dim=16, max_position_embeddings=64)
            torch.manual_seed(0)
            model = transformers.Gemma3ForCausalLM(config).eval()
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if "norm" in name:
                        p.normal_(0, 0.3)
        else:
            model = tiny_llama(hidden_size=64, intermediate_size=128)
        windows = calib()
        m = copy.deepcopy(model)
        quantize(m, method="awq", scheme=QuantScheme(8, 32), calibration=windows)
        dense = model(input_ids=torch.as_tensor(windows[:2])).logits
        assert torch.allclose(m(input_ids=torch.as_tensor(windows[:2])).logits, dense, atol=0.02)


def test_mixed_precision_allots_bits_by_knapsack():
    scores = Scores([3.0, 1.0, 5.0], ids=["a", "b", "c"])
    assert allot_bits(scores, [1, 1, 2], budget=5.0) == {"a": 8, "b": 4, "c": 4}
    assert allot_bits(scores, [1, 1, 2], budget=6.0) == {"a": 4, "b": 4, "c": 8}
    assert allot_bits(scores, [1, 1, 2], budget=4.0) == {"a": 4, "b": 4, "c": 4}
    model = tiny_llama(hidden_size=64, intermediate_size=128)
    for criterion in ("fisher", "output_error", "magnitude"):
        m = copy.deepcopy(model)
        report = quantize(m, method="rtn", scheme="w4a16", group_size=32, calibration=calib(), bit_budget=5.0,
                          criterion=criterion)
        assert 4.0 < report.average_bits <= 5.0
        assert {r["bits"] for r in report.layers} == {4, 6}  # high_bits 6, the default


def test_mixed_precision_beats_uniform_on_a_trained_toy():
    """A tiny model trained on a repetitive text: 3-bit everywhere against 3.5 bits on average,
    upgrades chosen by the Fisher criterion."""
    model = tiny_llama(hidden_size=64, intermediate_size=128, vocab_size=64)
    rng = np.random.default_rng(0)
    ids = np.tile(rng.integers(0, 64, 37), 60)
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    batch = torch.as_tensor(np.stack([ids[i : i + 32] for i in range(0, 1600, 40)]))
    model.train()
    for _ in range(60):
        optimiser.zero_grad()
        model(input_ids=batch, labels=batch).loss.backward()
        optimiser.step()
    model.eval()
    windows = np.stack([ids[i : i + 32] for i in range(0, 320, 32)])
    uniform, mixed = copy.deepcopy(model), copy.deepcopy(model)
    quantize(uniform, method="rtn", scheme=scheme_of("w3a16", group_size=32))
    quantize(mixed, method="rtn", scheme=scheme_of("w3a16", group_size=32), calibration=windows, bit_budget=3.5,
             criterion="fisher")
    evaluation = ids[1600:2200]
    assert perplexity(mixed, evaluation, seqlen=32) < perplexity(uniform, evaluation, seqlen=32)


def quantize_and_return(model):
    m = copy.deepcopy(model)
    quantize(m, method="rtn", scheme="w4a16", group_size=16)
    return m


def test_bad_input(tmp_path, monkeypatch):
    model = tiny_llama(hidden_size=48, intermediate_size=96)
    with pytest.raises(InvalidParameterError, match="below the smallest scheme"):
        quantize(copy.deepcopy(model), method="rtn", scheme="w4a16", group_size=16, bit_budget=3.5,
                 criterion="magnitude")
    with pytest.raises(InvalidParameterError, match="group size 32 does not divide model.layers.0.self_attn.q_proj's 48"):
        quantize(copy.deepcopy(model), method="rtn", scheme="w4a16", group_size=32)
    quantize(copy.deepcopy(model), method="rtn", scheme="w4a16", group_size=32, ragged=True)  # allowed when asked
    with pytest.raises(InvalidParameterError, match="gptq needs calibration"):
        quantize(copy.deepcopy(model), method="gptq", scheme="w4a16", group_size=16)
    from salience.compress import calibration_windows
    with pytest.raises(InvalidParameterError, match="not more than one window of 256"):
        calibration_windows(list(range(100)), seqlen=256)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)).eval()
    with pytest.raises(InvalidParameterError, match="model family 'gpt2'"):
        from salience.compress.quantize import block_layout
        block_layout(gpt2)
    with pytest.raises(InvalidParameterError, match="unknown quantization scheme"):
        scheme_of("w5a5")
    with pytest.raises(InvalidParameterError, match="weight bits must be an integer from 2 to 8"):
        QuantScheme(bits=9)
    with pytest.raises(InvalidParameterError, match="w8a8"):
        quantize(copy.deepcopy(model), method="rtn", scheme="w8a8", bits={"model.layers.0.mlp.up_proj": 4})
    with pytest.raises(InvalidParameterError, match="NaN"):
        RTN().quantize(np.array([[np.nan, 1.0]]))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("keep me")
    with pytest.raises(InvalidParameterError, match="not an earlier compressed model"):
        save_quantized(quantize_and_return(model), tmp_path / "other")
    assert (tmp_path / "other" / "notes.txt").read_text() == "keep me"
    # a folder without its tensors, and a folder read without safetensors
    m = copy.deepcopy(model)
    quantize(m, method="rtn", scheme="w4a16", group_size=16)
    folder = tmp_path / "q"
    folder.mkdir()
    save_quantized(m, folder)
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(InvalidParameterError, match="not a readable safetensors file"):
        load_quantized(folder)
    import builtins
    real_import = builtins.__import__

    def no_safetensors(name, *args, **kwargs):
        if name.startswith("safetensors"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_safetensors)
    with pytest.raises(MissingDependencyError, match=r"pip install 'salience\[lm\]'"):
        load_quantized(folder)


def test_quantize_command(model_folder, tmp_path, capsys):
    from salience.cli import main

    model, text = model_folder
    out = tmp_path / "q"
    code = main(["compress", "quantize", str(model), "--method", "gptq", "--group", "16", "--calib", str(text),
                 "--seqlen", "32", "--calib-windows", "4", "--bits-budget", "5", "--criterion", "output_error",
                 "--embeddings", "int8", "--out", str(out), "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert 4 < result["average_bits"] <= 5 and result["bytes"] > 0
    assert json.loads((out / "config.json").read_text())["quantization_config"]["quant_method"] == "compressed-tensors"
    assert main(["compress", "eval", str(out), "--data", str(text), "--seqlen", "32", "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["sparsity"] is None and evaluated["perplexity"] > 1
    # bad input is refused before any model loads, naming it
    assert main(["compress", "quantize", str(model), "--bits-budget", "3", "--calib", str(text), "--seqlen", "32",
                 "--out", str(tmp_path / "b")]) != 0
    assert "below the smallest scheme" in capsys.readouterr().err
    assert main(["compress", "quantize", str(model), "--method", "gptq", "--out", str(tmp_path / "c")]) != 0
    assert "needs calibration" in capsys.readouterr().err
    assert main(["compress", "quantize", str(model), "--method", "rtn", "--group", "16", "--out", str(model)]) != 0
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


def test_sparse_files_round_trip_at_their_true_size(tmp_path):
    from salience.compress import prune
    from salience.models.sparse_files import compress_sparse, decompress_sparse, save_sparse

    rng = np.random.default_rng(0)
    w = rng.normal(size=(6, 16)).astype(np.float32)
    w[rng.random(w.shape) < 0.5] = 0.0
    stored = compress_sparse(w, "unstructured")
    assert stored["compressed"].size == np.count_nonzero(w) and stored["bitmask"].shape == (6, 2)
    assert np.array_equal(decompress_sparse(stored), w)
    nm = rng.normal(size=(4, 16)).astype(np.float32)
    groups = nm.reshape(4, 4, 4)
    groups[:, :, :2] = 0.0  # two zeros in every group of four
    groups[0, 0, 2] = 0.0  # a group with three zeros: a stored zero makes up the pair
    two_four = compress_sparse(nm, "2:4")
    assert two_four["compressed"].shape == (4, 8)
    assert np.array_equal(decompress_sparse(two_four), nm)
    with pytest.raises(InvalidParameterError, match="not 2:4 sparse"):
        compress_sparse(rng.normal(size=(2, 8)), "2:4")
    broken = dict(stored, compressed=stored["compressed"][:-1])
    with pytest.raises(InvalidParameterError, match="damaged"):
        decompress_sparse(broken)
    model = tiny_llama(hidden_size=64, intermediate_size=128)
    windows = calib()
    for pattern in (None, "2:4"):
        m = copy.deepcopy(model)
        prune(m, method="magnitude", sparsity=None if pattern else 0.5, pattern=pattern)
        folder = tmp_path / f"sparse-{pattern}"
        dense_folder = tmp_path / f"dense-{pattern}"
        config = save_sparse(m, folder, structure="2:4" if pattern else "unstructured")
        assert config["global_sparsity"] == pytest.approx(0.5, abs=1e-3)
        m.save_pretrained(dense_folder)
        layer_bytes = sum(p.weight.numel() * 4 for name, p in m.named_modules()
                          if isinstance(p, torch.nn.Linear) and ".layers." in name)
        saved = (dense_folder / "model.safetensors").stat().st_size - (folder / "model.safetensors").stat().st_size
        assert saved > 0.4 * layer_bytes  # half of every pruned layer's values, less its bitmask and row offsets
        loaded, _ = load_quantized(folder)
        x = torch.as_tensor(windows[:2])
        assert torch.equal(loaded(input_ids=x).logits, m(input_ids=x).logits)


def test_prune_compressed_and_query_aware_commands(model_folder, tmp_path, capsys):
    from salience.cli import main

    model, text = model_folder
    dense_out, sparse_out = tmp_path / "dense", tmp_path / "sparse"
    for out, extra in ((dense_out, []), (sparse_out, ["--compressed"])):
        assert main(["compress", "prune", str(model), "--method", "magnitude", "--sparsity", "0.5", "--out", str(out),
                     "--quiet", *extra]) == 0
    config = json.loads((sparse_out / "config.json").read_text())["quantization_config"]
    assert config["sparsity_config"]["format"] == "sparse-bitmask"
    assert (sparse_out / "model.safetensors").stat().st_size < (dense_out / "model.safetensors").stat().st_size
    capsys.readouterr()
    for out in (dense_out, sparse_out):
        assert main(["compress", "eval", str(out), "--data", str(text), "--seqlen", "32", "--json"]) == 0
    first, second = (json.loads(line) for line in capsys.readouterr().out.strip().splitlines())
    assert first["perplexity"] == pytest.approx(second["perplexity"], rel=1e-6)
    assert main(["compress", "kv-eval", str(model), "--policy", "snapkv", "--data", str(text), "--query-aware"]) != 0
    assert "give --needles" in capsys.readouterr().err


def test_gemma_scaled_embeddings_survive_integer_rows_and_the_round_trip(tmp_path):
    """Gemma multiplies its input embeddings by sqrt(hidden size) (a buffer that is not saved):
    int8 embedding rows keep the factor, the tied head does not take it, and a saved folder
    reloads with it (and the rotary frequencies) rebuilt."""
    config = transformers.Gemma3TextConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                           max_position_embeddings=64, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.Gemma3ForCausalLM(config).eval()
    ids = torch.as_tensor(calib()[:2])
    for embeddings in (False, True):
        m = copy.deepcopy(model)
        quantize(m, method="rtn", scheme="w8a16_channel", embeddings=embeddings)
        fake = m(input_ids=ids).logits
        integer = to_integer_modules(copy.deepcopy(m))
        assert torch.allclose(integer(input_ids=ids).logits, fake, atol=0.02)  # bfloat16 rows in the int8 kernel
        folder = tmp_path / f"gemma-{embeddings}"
        folder.mkdir()
        save_quantized(m, folder)
        loaded, _ = load_quantized(folder)
        assert torch.allclose(loaded(input_ids=ids).logits, fake, atol=0.02), embeddings
        assert float(loaded.get_input_embeddings().embed_scale) == pytest.approx(8.0)


def test_outliers_stay_exact_and_leave_the_grid_by_hand():
    w = torch.tensor([[-1.5, 0.8, 30.0, 0.0]])
    keep = torch.tensor([[False, False, True, False]])
    q = quantize_rtn(w, QuantScheme(4, None, True), keep=keep)
    # the grid from the others: scale = 1.5 / 7.5 = 0.2; the outlier's code holds the grid's zero
    assert q.scale.ravel().tolist() == pytest.approx([0.2])
    assert q.codes.tolist() == [[-8, 4, 0, 0]]  # -1.5 / 0.2 = -7.5 rounds to -8
    assert q.dequantize().tolist()[0] == pytest.approx([-1.6, 0.8, 30.0, 0.0])
    assert q.outlier_count == 1 and q.outliers[0].tolist() == [[0], [2]]
    a = quantize_rtn(w, QuantScheme(4, None, False), keep=keep)
    assert a.dequantize().tolist()[0][2] == 30.0 and a.codes[0, 2] == a.zero[0, 0]
    # GPTQ: the kept weights are not rounded and spread no error; the others still are
    rng = np.random.default_rng(3)
    x = rng.normal(size=(200, 16)) @ rng.normal(size=(16, 16))
    weight = torch.as_tensor(rng.normal(size=(8, 16)), dtype=torch.float32)
    weight[2, 5] = 12.0
    mask = torch.zeros(8, 16, dtype=torch.bool)
    mask[2, 5] = True
    hessian = torch.as_tensor(x.T @ x / 200)
    plain = GPTQ(bits=3, group_size=None).quantize(weight, hessian=hessian)
    kept = GPTQ(bits=3, group_size=None).quantize(weight, hessian=hessian, keep=mask)
    assert kept.outlier_count == 1
    assert output_error(weight, kept, hessian) < output_error(weight, plain, hessian)
    with pytest.raises(InvalidParameterError, match="boolean mask of the weight's shape"):
        RTN().quantize(weight, keep=mask[:4])
    with pytest.raises(InvalidParameterError, match="does not keep outliers"):
        AWQ().quantize(weight, hessian=hessian, keep=mask)


def test_outlier_aware_model_keeps_its_share_saves_and_runs(tmp_path, model_folder, capsys):
    from salience.cli import main
    from salience.compress import outlier_mask

    model = tiny_llama(hidden_size=64, intermediate_size=128)
    windows = calib()
    plain = copy.deepcopy(model)
    plain_report = quantize(plain, method="gptq", scheme="w4a16", group_size=32, calibration=windows)
    m = copy.deepcopy(model)
    report = quantize(m, method="gptq", scheme="w4a16", group_size=32, calibration=windows, outliers=0.02)
    for row in report.layers:
        assert row["outliers"] == round(0.02 * row["weights"])
    weights = sum(r["weights"] for r in report.layers)
    assert report.average_bits == pytest.approx(4 + 48 * sum(r["outliers"] for r in report.layers) / weights)
    assert sum(r["output_error"] for r in report.layers) < sum(r["output_error"] for r in plain_report.layers)
    # the kept weights are wanda's most important: |w| x the input norm
    w = model.model.layers[0].mlp.down_proj.weight.detach()
    norms = torch.ones(w.shape[1], dtype=torch.float64)
    by_magnitude = outlier_mask(w, 0.02, "magnitude")
    assert by_magnitude.sum() == round(0.02 * w.numel())
    assert w.abs()[by_magnitude].min() >= w.abs()[~by_magnitude].max()
    assert torch.equal(outlier_mask(w, 0.02, "wanda", hessian=torch.diag(norms ** 2)), by_magnitude)
    fake = m(input_ids=torch.as_tensor(windows[:2])).logits
    save_quantized(m, tmp_path / "q")
    loaded, _ = load_quantized(tmp_path / "q")
    assert torch.allclose(loaded(input_ids=torch.as_tensor(windows[:2])).logits, fake, atol=0.05)
    single = loaded(input_ids=torch.as_tensor(windows[:1, :1])).logits  # the int4 kernel plus the sparse outliers
    assert torch.allclose(single, m(input_ids=torch.as_tensor(windows[:1, :1])).logits, atol=0.05)
    outliers = sum(mod.outlier_value.numel() for mod in loaded.modules() if hasattr(mod, "outlier_value"))
    assert outliers == sum(r["outliers"] for r in report.layers)
    # bad input, named
    for bad in (-0.1, 0.5, True):
        with pytest.raises(InvalidParameterError, match="outliers is the share"):
            quantize(copy.deepcopy(model), method="rtn", outliers=bad)
    with pytest.raises(InvalidParameterError, match="needs calibration windows"):
        quantize(copy.deepcopy(model), method="rtn", group_size=32, outliers=0.01)
    with pytest.raises(InvalidParameterError, match="does not keep outliers"):
        quantize(copy.deepcopy(model), method="awq", group_size=32, calibration=windows, outliers=0.01)
    with pytest.raises(InvalidParameterError, match="needs gradient"):
        quantize(copy.deepcopy(model), method="rtn", group_size=32, calibration=windows, outliers=0.01,
                 outlier_criterion="taylor")
    report = quantize(copy.deepcopy(model), method="rtn", group_size=32, outliers=0.01, outlier_criterion="magnitude")
    assert all(r["outliers"] == round(0.01 * r["weights"]) for r in report.layers)
    # the command
    folder, text = model_folder
    assert main(["compress", "quantize", str(folder), "--method", "rtn", "--group", "16", "--outliers", "0.01",
                 "--outlier-criterion", "magnitude", "--out", str(tmp_path / "c"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["average_bits"] > 4
    assert main(["compress", "quantize", str(folder), "--method", "rtn", "--group", "16", "--outliers", "0.01",
                 "--out", str(tmp_path / "d")]) != 0
    assert "needs calibration windows" in capsys.readouterr().err and not (tmp_path / "d").exists()


def test_float32_gram_products_stay_within_float32_rounding_of_float64():
    from salience.compress.weights import collect_statistics, prunable_linears

    model = tiny_llama()
    layers = prunable_linears(model)[:2]
    exact = collect_statistics(model, layers, calib(), batch_size=4, hessian=True, gradients=False)
    fast = collect_statistics(model, layers, calib(), batch_size=4, hessian=True, gradients=False, gram_dtype="float32")
    for name, _ in layers:
        assert fast[name].hessian.dtype == torch.float64 and fast[name].tokens == exact[name].tokens
        # entries off by float32 rounding of sums as large as the diagonal's
        scale = float(exact[name].hessian.diagonal().max())
        assert torch.allclose(fast[name].hessian, exact[name].hessian, rtol=0, atol=1e-6 * scale)
        assert not torch.equal(fast[name].hessian, exact[name].hessian)  # the products were float32
