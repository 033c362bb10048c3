"""The kvpress side of ``bench/compress.py --parts kv``, run in its own virtual environment
(kvpress needs transformers < 5.3; salience's runs 5.x newer): ``.venv-kvpress/bin/python
bench/kvpress_anchor.py IN.json OUT.json``. IN holds the GGUF path, the token windows and
passkey prompts made by the benchmark (so both sides read the same tokens), the compression
ratio and the policies (and ``key_channels``: ThinK composed after each press; ``calibration``:
what the calibrated presses learn from); OUT gets, per policy, the continuation NLL per window,
the passkey NLLs and ranks, and the seconds. Imports nothing from salience."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, DynamicCache

import kvpress

PRESSES = {
    "streaming_llm": lambda ratio: kvpress.StreamingLLMPress(compression_ratio=ratio, n_sink=4),
    "h2o": lambda ratio: kvpress.ObservedAttentionPress(compression_ratio=ratio),
    "random": lambda ratio: kvpress.RandomPress(compression_ratio=ratio, seed=0),
    "snapkv": lambda ratio: kvpress.SnapKVPress(compression_ratio=ratio, window_size=64, kernel_size=5),
    "tova": lambda ratio: kvpress.TOVAPress(compression_ratio=ratio),
    "key_norm": lambda ratio: kvpress.KnormPress(compression_ratio=ratio),
    "keydiff": lambda ratio: kvpress.KeyDiffPress(compression_ratio=ratio),
    "lagkv": lambda ratio: kvpress.LagKVPress(compression_ratio=ratio, n_sink=4, lag_size=128),
    "expected_attention": lambda ratio: kvpress.ExpectedAttentionPress(compression_ratio=ratio, n_future_positions=512,
                                                                       n_sink=4),
    "pyramidkv": lambda ratio: kvpress.PyramidKVPress(compression_ratio=ratio, window_size=64, kernel_size=5, beta=20),
    "adakv": lambda ratio: kvpress.AdaKVPress(kvpress.SnapKVPress(compression_ratio=ratio, window_size=64,
                                                                  kernel_size=5), alpha_safeguard=0.2),
    "criticalkv": lambda ratio: kvpress.CriticalKVPress(kvpress.SnapKVPress(compression_ratio=ratio, window_size=64,
                                                                            kernel_size=5), epsilon=1e-4,
                                                        first_stage_ratio=0.5),
    "chunkkv": lambda ratio: kvpress.ChunkKVPress(press=kvpress.SnapKVPress(compression_ratio=ratio, window_size=64,
                                                                            kernel_size=5), chunk_length=20),
    "entropy_chunkkv": lambda ratio: kvpress.EntropyGatedChunkKVPress(
        press=kvpress.SnapKVPress(compression_ratio=ratio, window_size=64, kernel_size=5), chunk_length=10,
        low_entropy_chunk_length=4),
    "block": lambda ratio: kvpress.BlockPress(press=kvpress.KeyDiffPress(compression_ratio=ratio), block_size=128),
    "non_causal_attention": lambda ratio: kvpress.NonCausalAttnPress(compression_ratio=ratio, chunk_size=256),
    "leverage": lambda ratio: kvpress.LeverageScorePress(compression_ratio=ratio, sketch_dimension=48),
    "compactor": lambda ratio: kvpress.CompactorPress(compression_ratio=ratio, sink_size_start=8, sink_size_end=4,
                                                      chunk_size=256, sketch_dimension=48),
    "capkv": lambda ratio: kvpress.CapPress(compression_ratio=ratio, tau=5.0, n_future_positions=512, n_sink=4),
    "kvzip": lambda ratio: kvpress.KVzipPress(compression_ratio=ratio, n_sink=4, chunk_size=2048),
    "kvgrad": lambda ratio: kvpress.KVgradPress(compression_ratio=ratio, n_sink=4, chunk_size=512),
    "curdkv": lambda ratio: kvpress.CURPress(compression_ratio=ratio, num_sinks=4, leverage_type="kv_product",
                                             use_local_approximation=True, local_window_size=16),
    "merging": lambda ratio: kvpress.MergingPress(press=kvpress.SnapKVPress(compression_ratio=ratio, window_size=64,
                                                                            kernel_size=5)),
    "rerotate": lambda ratio: kvpress.KeyRerotationPress(press=kvpress.StreamingLLMPress(compression_ratio=ratio,
                                                                                         n_sink=4)),
}
#: presses whose kept keys are rerotated: the continuation starts at the compressed cache's length
#: (kvpress's pipeline does the same for KeyRerotationPress and FinchPress)
REROTATED = {"rerotate", "finch"}
#: presses whose layers keep different numbers of tokens: the model builds one causal mask sized
#: for the first layer, a shape error in the others, whenever it builds one; so the continuation
#: is read one token at a time under sdpa, which then needs no mask (the same logits)
ONE_AT_A_TIME = {"pyramidkv", "simlayerkv", "kvcompose"}
#: presses kvpress refuses under eager attention (AdaKV and DMS mask keys in its attention patch; ChunkKV,
#: entropy-gated ChunkKV and BlockPress refuse attention weights), and
#: the above: run on sdpa
SDPA_ONLY = {"adakv", "chunkkv", "entropy_chunkkv", "block", "kvzip", "kvgrad", "duo_attention", "dms"} | ONE_AT_A_TIME


def use_given_qfilters(filters) -> None:
    """QFilterPress downloads filters trained per model from the hub (none for SmolLM2, and no
    hub here): it gets the ones salience learned from the calibration windows, negated (its
    score is ``-<key, filter>``; salience's filters point along the queries)."""
    tensor = -torch.tensor(filters, dtype=torch.float32)
    kvpress.QFilterPress.load_q_filters = staticmethod(lambda model_name: tensor)


def kvzap_press(surrogate, ratio: float):
    """KVzapPress (linear) downloads a surrogate trained per model from the hub (none for
    SmolLM2, and no hub here): it gets the one salience learned, (layers, kv heads, hidden + 1)
    with the intercept last, as its KVzapModel's linear layers."""
    from kvpress.presses.kvzap_press import KVzapConfig, KVzapModel

    weights = torch.tensor(surrogate, dtype=torch.float32)
    layers, n_kv, inputs = weights.shape
    surrogate_model = KVzapModel(KVzapConfig(input_dim=inputs - 1, output_dim=n_kv, n_modules=layers))
    with torch.no_grad():
        for linear, w in zip(surrogate_model.layers, weights):
            linear.weight.copy_(w[:, :-1])
            linear.bias.copy_(w[:, -1])

    class Given(kvpress.KVzapPress):
        def post_init_from_model(self, model):
            self.kvzap_model = surrogate_model

    return Given(compression_ratio=ratio, model_type="linear")


def duo_attention_press(model, path: Path, calibration: dict, ratio: float):
    """DuoAttentionPress with kvpress's own on-the-fly head scores, computed on the benchmark's
    calibration texts (it reads BookSum from the hub and the tokenizer from the model's name:
    both handed over here, the tokenizer adding no BOS), the streaming heads' share salience's budget gives, and the sink
    and recent sizes of the job (kvpress fixes 128 and 256 on the fly)."""
    import pandas as pd
    from transformers import AutoTokenizer

    import kvpress.presses.duo_attention_press as duo

    gguf_tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    texts = calibration["texts"]

    def tokenizer(text, **kwargs):  # no BOS, as every token the benchmark reads (this transformers adds one)
        return gguf_tokenizer(text, add_special_tokens=False, **kwargs)

    class Texts:
        @staticmethod
        def to_pandas():
            return pd.DataFrame({"chapter": texts})

    class GivenTokenizer:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            return tokenizer

    duo.load_dataset = lambda *args, **kwargs: Texts()
    duo.AutoTokenizer = GivenTokenizer
    scores = duo.duo_attention_on_the_fly(model, num_samples=len(texts), q_len=calibration["q_len"])
    duo.duo_attention_on_the_fly = lambda model: scores
    sink, recent = calibration["sink_size"], calibration["recent_size"]

    class Sized(kvpress.DuoAttentionPress):
        def post_init_from_model(self, model):
            super().post_init_from_model(model)
            self.sink_size, self.recent_size = sink, recent

    return Sized(head_compression_ratio=ratio, on_the_fly_scoring=True), scores


def use_raw_text_tokenizer(path: Path) -> None:
    """KVzipPress loads the tokenizer from the model's name (a GGUF here has none it can read)
    and, when it has a chat template, takes the template's prefix for a prefix of the context:
    the benchmark's contexts are raw text, so it gets the GGUF's tokenizer without a template
    (its raw-text branch: the instruction, then "\n", then the context)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    tokenizer.chat_template = None

    class RawText:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            return tokenizer

    import kvpress.presses.kvzip_press as kvzip_module

    kvzip_module.AutoTokenizer = RawText


def read(model, ids, press):
    # KVzip and KVgrad leave each module's masked_key_indices for their continuation; a prefill
    # under sdpa clears them, but KVComposePress prefills in eager mode (not patched), so a
    # KVCompose read after them would mask stale positions: every read starts without them
    for layer in model.model.layers:
        layer.self_attn.masked_key_indices = None
    cache = DynamicCache()
    ids = torch.tensor(ids)[None]
    with torch.no_grad():
        if press is None:
            out = model(input_ids=ids, past_key_values=cache, use_cache=True)
        else:
            with press(model):
                out = model(input_ids=ids, past_key_values=cache, use_cache=True)
    return cache, out.logits[:, -1]


def after(model, cache, ids, start, one_at_a_time=False):
    ids = torch.tensor(ids)[None]
    with torch.no_grad():
        if one_at_a_time:  # layers of different lengths: the model's one causal mask fits only the first layer
            return torch.cat([model(input_ids=ids[:, i:i + 1], past_key_values=cache,
                                    position_ids=torch.tensor([[start + i]]), use_cache=True).logits
                              for i in range(ids.shape[1])], dim=1)
        return model(input_ids=ids, past_key_values=cache, position_ids=torch.arange(start, start + ids.shape[1])[None],
                     use_cache=True).logits


def use_given_sketches(normals: list) -> None:
    """LeverageScorePress (alone and inside CompactorPress) draws its Gaussian sketch from
    torch's global generator: it is handed salience's draws for each layer instead (the same
    standard normals, which it scales itself)."""
    from kvpress.presses import leverage_press

    draws = [torch.tensor(layer, dtype=torch.float32) for layer in normals]
    current = {"layer": 0}
    score = leverage_press.LeverageScorePress.score

    def score_noting_the_layer(self, module, *args, **kwargs):
        current["layer"] = module.layer_idx
        return score(self, module, *args, **kwargs)

    class GivenDraws:
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def randn(*shape, device=None, dtype=None):
            draw = draws[current["layer"]]
            if tuple(draw.shape) != tuple(shape):
                raise ValueError(f"sketch shape {tuple(shape)} where salience drew {tuple(draw.shape)}")
            return draw.to(device=device, dtype=dtype)

    leverage_press.LeverageScorePress.score = score_noting_the_layer
    leverage_press.torch = GivenDraws()


def finch_press(model, ids_to_read: list, budget: float, question: int, chunk_length: int | None = None):
    """FinchPress for one prompt whose last ``question`` tokens are the question: its delimiter
    (the vocabulary's last id, found in no prompt here) goes before them, and its compression
    ratio keeps what salience's budget keeps (a share of the tokens before the question, plus
    the question; kvpress counts the question in its ratio). Chunked (``chunk_length``), each
    chunk keeps int(its length x that share), as salience's: the ratio is the share exactly."""
    delimiter = model.config.vocab_size - 1
    if delimiter in ids_to_read:
        raise ValueError(f"the delimiter id {delimiter} occurs in a prompt")
    n = len(ids_to_read)
    keep = max(1, int((n - question) * budget)) + question
    ratio = 1 - keep / n if chunk_length else 1 - (keep + 0.5) / n
    press = kvpress.FinchPress(compression_ratio=ratio, normalize_scores=True, rerotate_keys=True,
                               chunk_length=chunk_length)
    press.delimiter_token_id = delimiter
    return press, ids_to_read[: n - question] + [delimiter] + ids_to_read[n - question:]


def simlayerkv_press(model, prompt_length: int, budget: float):
    """SimLayerKVPress keeping in a lazy layer what salience's budget keeps: its 4 initial
    tokens and its n_recent - n_last latest (its compression ratio cannot be set); the
    threshold salience's default (kvpress's 1.0 marks no layer lazy)."""
    keep = max(1, int(prompt_length * budget))
    return kvpress.SimLayerKVPress(lazy_threshold=0.9, n_last=1, n_recent=keep - 4 + 1, n_initial=4)


def kvcompose_press(model, prompt_length: int, budget: float):
    """KVComposePress sharing out exactly what salience's budget keeps in all layers (its
    ratio counts every layer's tokens together)."""
    layers = model.config.num_hidden_layers
    keep = max(1, int(prompt_length * budget))
    return kvpress.KVComposePress(compression_ratio=1 - (layers * keep + 0.5) / (layers * prompt_length))


#: presses built for each prompt (their budget is not a ratio of the prompt alone)
PER_PROMPT = {"simlayerkv": simlayerkv_press, "kvcompose": kvcompose_press}


def decoding_press(job: dict):
    """CompressionRatioDecodingPress on KnormPress keeping the budget's share of every token
    seen, every ``interval`` decoding steps; inside PrefillDecodingPress when the prompt is
    evicted too."""
    spec = job["decoding"]
    decoding = kvpress.CompressionRatioDecodingPress(base_press=kvpress.KnormPress(),
                                                     target_compression_ratio=job["ratio"],
                                                     compression_interval=spec["interval"],
                                                     hidden_states_buffer_size=spec["buffer"])
    if spec.get("prefill") is None:
        return decoding
    return kvpress.PrefillDecodingPress(prefilling_press=PRESSES[spec["prefill"]](job["ratio"]), decoding_press=decoding)


def cam_press(job: dict):
    """CAMPress on KnormPress whose target size is, at every step, the budget's share of the
    tokens seen so far (CAMPress has a fixed target_size; salience's budget is a share here, as
    CompressionRatioDecodingPress's)."""
    spec, share = job["decoding"], 1 - job["ratio"]

    class ShareOfSeen(kvpress.CAMPress):
        def forward_hook(self, module, input, kwargs, output):
            if kwargs.get("position_ids") is not None:
                self.target_size = max(1, int((int(kwargs["position_ids"].max()) + 1) * share))
            return super().forward_hook(module, input, kwargs, output)

    if spec.get("prefill") is not None:
        raise ValueError("cam is measured with the prompt kept whole")
    return ShareOfSeen(base_press=kvpress.KnormPress(), compression_interval=spec["interval"],
                       hidden_states_buffer_size=spec["buffer"], merge_budget=32)


def dms_press(job: dict):
    """DMSPress on KnormPress: the job's threshold and sliding window, evicting while decoding
    when the job says so."""
    spec = job["dms"]
    return kvpress.DMSPress(press=kvpress.KnormPress(), threshold=spec["threshold"],
                            sliding_window_size=spec["window"], decoding=spec["decoding"])


#: presses that cut the cache while decoding: the press stays on while the continuation is read,
#: one token per step at its logical positions (CompressionRatioDecodingPress counts the tokens seen
#: from them)
DECODING = {"decoding": decoding_press, "cam": cam_press, "dms": dms_press}


def read_decoding(model, prompt, continuation, press):
    """The prompt's last logits and the continuation's logits, read under a decoding press.
    CAMPress draws its merges from torch's global generator: seeded as salience's (0) for
    every prompt."""
    torch.manual_seed(0)
    with press(model):
        cache, first = read(model, prompt, None)
        return cache, first, after(model, cache, continuation, len(prompt), one_at_a_time=True)


def token_nll(predicting, ids):
    log_probs = torch.log_softmax(predicting[0].double(), dim=-1)
    picked = log_probs.gather(1, torch.tensor(ids)[:, None])[:, 0]
    return float(-picked.sum()), ((log_probs > picked[:, None]).sum(dim=1) + 1).tolist()


def break_ties(eps: float) -> None:
    """KnormPress's, KVzapPress's and LagKVPress's scores plus ``eps`` x position, as salience's
    under ``bench/kvcache.py --tie-break`` (see its ``break_ties``)."""
    for cls in (kvpress.KnormPress, kvpress.KVzapPress, kvpress.LagKVPress):
        plain = cls.score

        def score(self, module, hidden_states, keys, values, attentions, kwargs, plain=plain):
            scores = plain(self, module, hidden_states, keys, values, attentions, kwargs)
            return scores + eps * torch.arange(scores.shape[-1], dtype=scores.dtype)

        cls.score = score


def keep_cache_in_position_order() -> None:
    """ScorerPress.compress with its kept indices sorted, as salience compacts a cache (in
    position order): kvpress gathers the kept tokens in top-k order, and a later cut (a decoding
    press) then breaks exact ties by that order. Attention itself does not depend on the order."""
    from kvpress.presses.scorer_press import ScorerPress
    from kvpress.utils import compute_n_kept

    def compress(self, module, hidden_states, keys, values, attentions, kwargs):
        if self.compression_ratio == 0:
            return keys, values
        scores = self.score(module, hidden_states, keys, values, attentions, kwargs)
        n_kept = compute_n_kept(keys.shape[2], self.compression_ratio)
        indices = scores.topk(n_kept, dim=-1).indices.sort(dim=-1).values
        indices = indices.unsqueeze(-1).expand(-1, -1, -1, module.head_dim)
        return keys.gather(2, indices).contiguous(), values.gather(2, indices).contiguous()

    ScorerPress.compress = compress


def main(inp: Path, out: Path) -> None:
    job = json.loads(inp.read_text())
    if job.get("tie_break"):
        break_ties(job["tie_break"])
    if job.get("sorted_cache"):
        keep_cache_in_position_order()
    torch.set_num_threads(job.get("threads", 2))
    path = Path(job["gguf"])
    # eager attention: ObservedAttentionPress (H2O) reads the attention weights
    eager = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, attn_implementation="eager").eval()
    if {"kvzip", "kvgrad"} & set(job["policies"]):
        use_raw_text_tokenizer(path)
    sdpa = None
    from importlib.metadata import version

    results = {"kvpress": version("kvpress"), "policies": {}}
    context = job["context"]
    calibration = job.get("calibration", {})
    if "qfilter" in job["policies"]:
        use_given_qfilters(calibration["qfilter"])
    if "leverage" in calibration:
        use_given_sketches(calibration["leverage"])
    for name in ([None] if job.get("full", True) else []) + job["policies"]:
        if name in SDPA_ONLY and sdpa is None:
            sdpa = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                        attn_implementation="sdpa").eval()
        if name == "duo_attention":
            duo = calibration["duo_attention"]
            press, head_scores = duo_attention_press(sdpa, path, duo, duo["head_ratio"])
            results["duo_attention_head_scores"] = np.asarray(head_scores).tolist()
        elif name == "qfilter":
            press = kvpress.QFilterPress(compression_ratio=job["ratio"])
        elif name == "kvzap":
            press = kvzap_press(calibration["kvzap"], job["ratio"])
        elif name == "finch":
            press = None  # one per prompt: its ratio and delimiter depend on the question's place
        elif name in PER_PROMPT:
            press = PER_PROMPT[name](eager, context, job["budget"])
        elif name in DECODING:
            press = DECODING[name](job)
        else:
            press = None if name is None else PRESSES[name](job["ratio"])
        if job.get("key_channels") is not None and (name == "finch" or name in PER_PROMPT):
            raise ValueError(f"{name} is built per prompt: not composed with ThinK here")
        if job.get("key_channels") is not None:  # ThinK after the token press (alone for the full cache)
            think = kvpress.ThinKPress(key_channel_compression_ratio=1 - job["key_channels"], window_size=32)
            press = think if press is None else kvpress.ComposedPress([press, think])
        model = sdpa if name in SDPA_ONLY else eager
        start = time.perf_counter()
        nll = []
        for window in job["windows"]:
            if name in DECODING:
                cache, first, logits = read_decoding(model, window[:context], window[context:], press)
            else:
                if name == "finch":
                    press, prompt = finch_press(model, window[:context], job["budget"], job["question_tokens"],
                                                job.get("finch_chunk"))
                    cache, first = read(model, prompt, press)
                else:
                    cache, first = read(model, window[:context], press)
                start_at = cache.get_seq_length() if name in REROTATED else context
                logits = after(model, cache, window[context:], start_at, name in ONE_AT_A_TIME)
            value, _ = token_nll(torch.cat([first[:, None], logits[:, :-1]], dim=1), window[context:])
            nll.append(value / (len(window) - context))
        ppl_seconds = time.perf_counter() - start
        start = time.perf_counter()
        key_nll, ranks, exact = [], [], []
        for item in job["passkey"]:
            if name == "finch":  # query-aware: the question read with the haystack, then the key
                press, prompt = finch_press(model, item["prompt"] + item["question"], job["budget"],
                                            len(item["question"]), job.get("finch_chunk"))
                cache, first = read(model, prompt, press)
                logits = after(model, cache, item["key"], cache.get_seq_length())
                value, token_ranks = token_nll(torch.cat([first[:, None], logits[:, :-1]], dim=1), item["key"])
            else:
                if name in PER_PROMPT:
                    press = PER_PROMPT[name](eager, len(item["prompt"]), job["budget"])
                if name in DECODING:
                    cache, _, logits = read_decoding(model, item["prompt"], item["question"] + item["key"], press)
                else:
                    cache, _ = read(model, item["prompt"], press)
                    start_at = cache.get_seq_length() if name in REROTATED else len(item["prompt"])
                    logits = after(model, cache, item["question"] + item["key"], start_at, name in ONE_AT_A_TIME)
                value, token_ranks = token_nll(logits[:, len(item["question"]) - 1 : -1], item["key"])
            key_nll.append(value)
            ranks.extend(token_ranks)
            exact.append(all(r == 1 for r in token_ranks))
        results["policies"][name or "full"] = {
            "nll": nll, "perplexity": float(np.exp(np.mean(nll))), "ppl_seconds": ppl_seconds,
            "passkey_nll": float(np.mean(key_nll)), "passkey_rank": float(np.mean(ranks)),
            "passkey_accuracy": float(np.mean(exact)), "per_needle_nll": key_nll,
            "passkey_seconds": time.perf_counter() - start}
        print(f"kvpress {name or 'full'} done", file=sys.stderr, flush=True)
    out.write_text(json.dumps(results))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
