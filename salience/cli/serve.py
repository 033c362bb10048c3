"""``salience serve INDEX_DIR...``: the HTTP service and its web page (``salience[server]``)."""

from __future__ import annotations

from salience.cli._common import choices_of, positive_int


def _cmd_serve(args) -> int:
    from salience.server.app import Limits, serve

    limits = Limits(max_body_bytes=args.max_body_bytes, max_k=args.max_k, max_query_chars=args.max_query_chars,
                    max_text_chars=args.max_text_chars, max_batch=args.max_batch, timeout_s=args.timeout)
    serve(args.indexes, host=args.host, port=args.port, api_key_file=args.api_key_file, limits=limits,
          cors_origins=args.cors_origin, judge=args.judge, judge_model=args.judge_model, log_level="warning" if args.quiet else "info",
          workers=args.workers, shard_executor=args.shard_executor, address=args.address, lm=args.lm,
          lm_dtype=args.lm_dtype)
    return 0


def add_commands(domains) -> None:
    from salience.models.lm import LM_DTYPES
    from salience.parallel import EXECUTORS

    p = domains.add_parser("serve", help="serve saved indexes over HTTP, with a web page (salience[server])")
    p.add_argument("indexes", nargs="*", metavar="INDEX_DIR", help="saved BM25, dense or sharded index folders")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8080, help="TCP port (default 8080)")
    p.add_argument("--api-key-file", default=None, help="file whose first line is the key writes need; "
                   "without it the write endpoints are off")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="allow browser requests from this origin (repeatable; CORS is off by default)")
    p.add_argument("--judge", choices=("index",) + choices_of("judge"), default="index",
                   help="what /rerank scores posted passages with: the index's own scorer (default), encoder "
                        "(all-MiniLM-L6-v2 or --judge-model) or cross (a cross-encoder: --judge-model)")
    p.add_argument("--judge-model", default=None,
                   help="the judge's model folder (a cross-encoder made by salience search train-reranker)")
    p.add_argument("--lm", default=None,
                   help="a causal language model (a folder, a .gguf file, smollm2) that answers from served passages: "
                        "/answer and /verify's passages")
    p.add_argument("--lm-dtype", default=None, choices=LM_DTYPES,
                   help="--lm's weights (default: as stored; bfloat16 is several times faster on a CPU with AMX)")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="largest request body (default 1 MiB)")
    p.add_argument("--max-k", type=int, default=1000, help="largest k a search may ask (default 1000)")
    p.add_argument("--max-query-chars", type=int, default=1000, help="longest query (default 1000 characters)")
    p.add_argument("--max-text-chars", type=int, default=100_000,
                   help="longest text to score or document to add (default 100,000 characters)")
    p.add_argument("--max-batch", type=int, default=1000, help="documents per write, ids per delete or rerank")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds a request may take")
    p.add_argument("--workers", type=positive_int, default=1,
                   help="worker processes sharing the port (default 1); each opens the indexes memory-mapped and "
                        "sees every commit within a fraction of a second; writes always commit")
    p.add_argument("--shard-executor", choices=EXECUTORS, default="local",
                   help="a sharded index's shards: memory-mapped in each worker (local), or in Ray actors (ray)")
    p.add_argument("--address", default=None,
                   help="with --shard-executor ray: a running Ray cluster ('auto', 'ray://head:10001'); "
                        "default a local Ray instance")
    p.add_argument("--quiet", action="store_true", help="log warnings only")
    p.set_defaults(func=_cmd_serve)
