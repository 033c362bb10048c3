"""This machine's limits, measured once, so that a hot path can say how close it gets to the
bound it is limited by (issue 54's roofline):

* memory bandwidth: a STREAM-like triad ``a = b + s * c`` (24 bytes counted per element, as
  STREAM counts them: two read, one written) and a read-only sum (8 bytes per element: what a
  scan of postings or vectors does), over arrays far larger than the caches;
* matrix-multiply throughput: float32 and float64 GEMM through numpy's BLAS (``2 n^3`` FLOPs),
  what exact dense search, encoders and a language model's forward passes are made of;
* the hot paths measured against them: exact dense search at 10^5 vectors here, and the
  encoder, perplexity, KV eviction and DSIR hashing (``bench/limits_paths.py``);

each on one core and on every core. The best of ``--repeats`` runs is kept (the machine's
limit, not its average). Writes ``--json`` (default ``bench-out/limits.json``) for the other
benches to read, and its section of BENCHMARKS.md with ``--write``.

    python bench/limits.py --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

import numpy as np
from numba import njit, prange, set_num_threads
from threadpoolctl import threadpool_limits

import limits_paths
from limits_paths import best_seconds as _best
from common import run_benchmark


@njit(parallel=True, cache=False)
def _triad(a, b, c, s):
    for i in prange(a.shape[0]):
        a[i] = b[i] + s * c[i]


@njit(parallel=True, fastmath=True, cache=False)  # reassociated: vector adds, not one add's latency chain
def _read(x):
    total = 0.0
    for i in prange(x.shape[0]):
        total += x[i]
    return total


def memory_bandwidth(n: int, threads: int, repeats: int) -> dict:
    """Triad and read-only bandwidth, GB/s (10^9 bytes), with ``threads`` threads."""
    set_num_threads(threads)
    rng = np.random.default_rng(0)
    a, b, c = np.empty(n), rng.random(n), rng.random(n)
    _triad(a, b, c, 3.0)  # compiled and the pages touched before timing
    _read(b)
    triad = _best(lambda: _triad(a, b, c, 3.0), repeats)
    read = _best(lambda: _read(b), repeats)
    if not np.allclose(a[:1000], b[:1000] + 3.0 * c[:1000]):
        raise AssertionError("the triad computed something else")
    return {"triad_gb_s": 24 * n / triad / 1e9, "read_gb_s": 8 * n / read / 1e9}


def gemm_throughput(n: int, dtype: str, threads: int, repeats: int) -> float:
    """GFLOP/s of an n x n x n matrix product of ``dtype`` with ``threads`` BLAS threads."""
    rng = np.random.default_rng(0)
    x, y = rng.random((n, n)).astype(dtype), rng.random((n, n)).astype(dtype)
    with threadpool_limits(limits=threads, user_api="blas"):
        x @ y  # warm: the BLAS threads started
        seconds = _best(lambda: x @ y, repeats)
    return 2 * n**3 / seconds / 1e9


def dense_search(n: int, d: int, queries: int, repeats: int) -> dict:
    """salience's exact dense search (``Dense.search_batch``, top 10) over ``n`` random unit
    vectors of ``d`` dimensions: its FLOP/s (``2 n d`` per query), a GEMM's work, and the plain
    product of the same shapes for comparison."""
    from salience.search import Dense

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n + queries, d)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    row = {f"v{i}": i for i in range(n + queries)}

    def encode(texts):
        return vectors[[row[t] for t in texts]]

    encode.name = f"random{d}"
    index = Dense(encoder=encode, encoder_name=encode.name, store_documents=False).index(
        [{"_id": str(i), "text": f"v{i}"} for i in range(n)])
    texts = [f"v{n + i}" for i in range(queries)]
    index.search_batch(texts[:8], k=10)  # compiled, warm
    search = _best(lambda: index.search_batch(texts, k=10), repeats)
    product = _best(lambda: vectors[n:] @ vectors[:n].T, repeats)
    flops = 2 * n * d * queries
    return {"queries_s": queries / search, "gflop_s": flops / search / 1e9, "product_gflop_s": flops / product / 1e9}


def run(args) -> dict:
    cores = os.cpu_count() or 1
    counts = sorted({1, cores})
    out = {"machine": f"{platform.machine()}, {cores} cores ({platform.processor() or 'processor not named'})",
           "array_mb": 8 * args.elements / 2**20, "gemm_n": args.gemm_n, "by_threads": {}}
    for threads in counts:
        row = memory_bandwidth(args.elements, threads, args.repeats)
        for dtype in ("float32", "float64"):
            row[f"gemm_{dtype}_gflop_s"] = gemm_throughput(args.gemm_n, dtype, threads, args.repeats)
        out["by_threads"][threads] = row
        print(f"{threads} thread(s): {row}", flush=True)
    out["dense"] = dense_search(args.dense_n, 384, 256, args.repeats)  # every core, as a user searches
    out["dense_n"] = args.dense_n
    print(f"dense search: {out['dense']}", flush=True)
    out["paths"] = {}
    jobs = {"encoder": lambda: limits_paths.encoder(256, args.repeats),
            "perplexity": lambda: limits_paths.perplexity(8, min(args.repeats, 3)),
            "kv_eviction": lambda: limits_paths.kv_eviction(2, min(args.repeats, 3)),
            "dsir_hashing": lambda: limits_paths.dsir_hashing(20_000, args.repeats)}
    for name in args.paths.split(",") if args.paths else []:
        try:
            out["paths"][name] = jobs[name]()
        except ImportError as err:  # an extra that is not installed: the row is left out, said here
            print(f"skipping {name}: {err}", flush=True)
            continue
        print(f"{name}: {out['paths'][name]}", flush=True)
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return out


def render(result: dict, command: str, seconds: float) -> str:
    rows = result["by_threads"]
    lines = [
        "## Machine limits: memory bandwidth and matrix-multiply throughput (`bench/limits.py`)", "",
        f"Command: `{command}` ({seconds:.0f} s). {result['machine']}. The best of the runs: the bound a hot path "
        "is measured against (its bytes or FLOPs per second over these), not an average. Triad: `a = b + s * c` "
        f"over {result['array_mb']:.0f} MB arrays, 24 bytes counted per element as STREAM counts them; read: a "
        f"sum over one such array, 8 bytes per element (a posting or vector scan); GEMM: {result['gemm_n']}^3 "
        "products through numpy's BLAS.", "",
        "| threads | triad GB/s | read GB/s | GEMM float32 GFLOP/s | GEMM float64 GFLOP/s |",
        "|---:|---:|---:|---:|---:|",
    ]
    for threads, row in rows.items():
        lines.append(f"| {threads} | {row['triad_gb_s']:.1f} | {row['read_gb_s']:.1f} | "
                     f"{row['gemm_float32_gflop_s']:.1f} | {row['gemm_float64_gflop_s']:.1f} |")
    dense, bound = result["dense"], rows[max(rows)]["gemm_float32_gflop_s"]
    lines += ["", "Hot paths against these bounds (every core):", "",
              "| path | limited by | achieved | bound | fraction |", "|---|---|---:|---:|---:|",
              f"| exact dense search, {result['dense_n']:,} x 384 float32, 256 queries, top 10 "
              f"({dense['queries_s']:,.0f} queries/s) | matrix multiply | {dense['gflop_s']:.1f} GFLOP/s | "
              f"{bound:.1f} | {dense['gflop_s'] / bound:.0%} |",
              f"| the plain product of the same shapes, for comparison | matrix multiply | "
              f"{dense['product_gflop_s']:.1f} GFLOP/s | {bound:.1f} | {dense['product_gflop_s'] / bound:.0%} |"]
    paths = result.get("paths", {})
    labels = {"encoder": ("all-MiniLM-L6-v2 encoding (TransformerEncoder, torch)", "matrix multiply", bound),
              "perplexity": ("SmolLM2-135M perplexity (`perplexity`)", "matrix multiply", bound),
              "kv_eviction": ("SmolLM2-135M KV eviction (`kv_eval`)", "matrix multiply", bound),
              "dsir_hashing": ("DSIR hashing (`HashedNgrams.transform`, one core)", "one core's read bandwidth",
                               rows[min(rows)]["read_gb_s"])}
    for name, row in paths.items():
        label, limit, ceiling = labels[name]
        lines.append(f"| {label}: {row['note']} | {limit} | {row['achieved']:.2f} {row['unit']} | {ceiling:.1f} | "
                     f"{row['achieved'] / ceiling:.1%} |")
    lines += ["", "FLOPs: 2 per weight of every linear layer a token passes through plus the attention's scores and "
              "mixing, over each text's own tokens (padding is not credited); the causal models' tokens attend to those "
              "before them, their head included. DSIR hashing counts the UTF-8 bytes of the text it reads.", ""]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=int, default=2**25, help="float64 elements per array (default 2^25: 256 MB)")
    parser.add_argument("--gemm-n", type=int, default=2048, help="matrix size of the GEMM (default 2048)")
    parser.add_argument("--dense-n", type=int, default=100_000, help="vectors of the dense search row (default 10^5)")
    parser.add_argument("--paths", default="encoder,perplexity,kv_eviction,dsir_hashing",
                        help="the hot paths measured besides dense search (comma-separated; empty: none)")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs of each, the best kept (default 7)")
    parser.add_argument("--json", default=str(Path(os.environ.get("BENCH_WORK", "bench-out")) / "limits.json"),
                        help="write the measured limits here for other benches (default bench-out/limits.json)")
    return run_benchmark("limits.py", parser, run, render, argv)


if __name__ == "__main__":
    raise SystemExit(main())
