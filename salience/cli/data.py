"""``salience data select|dedup|report|value``: training-data selection and valuation."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from salience.cli._common import (add_n_jobs, add_on_error, add_output_options, add_seed, emit, given, method_option,
                                  positive_float, positive_int, refuse_unused, show_progress)
from salience.exceptions import InvalidParameterError


def _orders(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise InvalidParameterError(f"--orders must be comma-separated integers such as 1,2; got {text!r}.") from None


def _warn_losses(args, report) -> None:
    if getattr(args, "quiet", False):
        return
    for loss in report.truncated_files:
        if loss["estimated_records"] is not None:
            lost = f"about {loss['estimated_records']} records lost"
        else:
            lost = "an unknown number of records lost" + (": the file ends early" if "EOFError" in loss["reason"] else "")
        print(f"salience: warning: {loss['path']} is damaged after line {loss['after_line']}: "
              f"{loss['unread_bytes']} compressed bytes were not kept ({lost}; {loss['reason']}).", file=sys.stderr)


@contextlib.contextmanager
def _work_folder_of_failed_runs_removed(work: Path):
    """A run that fails on its input (an error it cannot resume from) removes the shard cache
    it created; an interruption or a dead worker keeps it, for the rerun to resume from."""
    from salience.exceptions import SalienceError, WorkerError
    from salience.io.shards import remove_work_dir

    existed = work.exists()
    try:
        yield
    except SalienceError as err:
        if not existed and not isinstance(err, WorkerError) and work.is_dir():
            remove_work_dir(work)
        raise


def _cmd_select(args) -> int:
    from salience.core.base import method_names

    if args.method in method_names("valuation"):
        from salience.cli.valuation import prune

        refuse_unused(args, False, ("sampling", "buckets", "orders", "length_normalize", "min_tokens", "filters",
                                    "quota_field"),
                      f"to selection toward a target (--method dsir and the other text methods), not to --method "
                      f"{args.method}, which prunes labelled records by value")
        emit(args, prune(args))
        return 0
    if args.params:
        raise InvalidParameterError(f"--param sets a valuation method's parameters; the streaming selection by "
                                    f"{args.method} takes its own options (--buckets, --orders, --length-normalize, "
                                    "--sampling).")
    if args.k is None or args.fraction is not None or args.by_class:
        raise InvalidParameterError(f"--method {args.method} selects -k documents; --fraction and --by-class prune "
                                    "labelled records by a valuation method.")
    if not args.target:
        raise InvalidParameterError(f"--method {args.method} selects toward a target sample: give --target.")
    with _work_folder_of_failed_runs_removed(Path(args.work_dir or args.out + ".work")):
        report = _select(args)
    _warn_losses(args, report)
    emit(args, report.to_dict())
    return 0


def _select(args):
    from salience.data import HashedNgrams, select_documents
    from salience.parallel.memory import reuse_freed_memory

    reuse_freed_memory()  # one job that ends: shard after shard reuses the same memory
    return select_documents(args.target, args.raw, args.out, k=args.k, method=args.method,
                              sampling=args.sampling or "gumbel",
                              seed=args.seed, text_field=args.text_field, label_field=args.label_field,
                              quota_field=args.quota_field, min_tokens=args.min_tokens or 0, filters=args.filters or [],
                              features=HashedNgrams(_orders(args.orders or "1,2"), buckets=args.buckets or 10_000),
                              length_normalize=args.length_normalize, n_jobs=args.n_jobs, executor=args.executor,
                              shard_bytes=max(1, round(args.shard_mb * (1 << 20))), work_dir=args.work_dir,
                              keep_work=args.keep_work, strict=args.strict, on_error=args.on_error,
                              show_progress=show_progress(args))


def _cmd_dedup(args) -> int:
    from salience.data.dedup import dedup_files
    from salience.parallel.memory import reuse_freed_memory

    reuse_freed_memory()  # one job that ends: shard after shard reuses the same memory
    refuse_unused(args, args.near, ("threshold", "num_perm"), "to --near (MinHash near duplicates)")
    refuse_unused(args, args.semantic, ("encoder", "similarity", "clusters", "keep_order", "no_center"),
                  "to --semantic (SemDeDup)")
    with _work_folder_of_failed_runs_removed(Path(args.out + ".work")):
        report = dedup_files(args.inputs, args.out, near=args.near, semantic=args.semantic, center=not args.no_center,
                             **given(args, "threshold", "num_perm", "encoder", "similarity", "clusters", "keep_order"),
                             text_field=args.text_field, n_jobs=args.n_jobs, executor=args.executor,
                             strict=args.strict, on_error=args.on_error, show_progress=show_progress(args))
    _warn_losses(args, report)
    emit(args, report.to_dict())
    return 0


def _cmd_report(args) -> int:
    from salience.data import HashedNgrams
    from salience.data.report import selection_report

    if (args.label_field is None) != (args.target_label is None):
        raise InvalidParameterError("--label-field and --target-label go together.")
    result = selection_report(args.selected, args.target, args.raw, features=HashedNgrams(buckets=args.buckets),
                              text_field=args.text_field, label_field=args.label_field, target_label=args.target_label,
                              min_tokens=args.min_tokens)
    emit(args, result)
    return 0


def add_commands(domains) -> None:
    from salience.data.dsir import SAMPLING
    from salience.cli.valuation import add_method_options
    from salience.data.methods import DocumentScorer
    from salience.data.semantic_dedup import KEEP_ORDERS
    from salience.data.valuation import Valuation
    from salience.parallel import EXECUTORS

    data = domains.add_parser("data", help="select training data for a target distribution (DSIR); value labelled "
                                           "examples")
    commands = data.add_subparsers(dest="command", required=True)
    p = commands.add_parser("select", help="importance-resample raw documents toward a target sample; or prune "
                                           "labelled records by their value (--method el2n, knn_shapley, ...)")
    p.add_argument("--target", nargs="+", default=None,
                   help="target sample: jsonl or jsonl.gz files (for a valuation method: the labelled test records "
                        "it values against)")
    p.add_argument("--raw", nargs="+", required=True,
                   help="raw pool: jsonl, jsonl.gz or parquet files (for a valuation method: one file of labelled "
                        "records to prune)")
    p.add_argument("-k", "--k", type=positive_int, default=None, help="number of documents (records) to select")
    p.add_argument("--fraction", type=positive_float, default=None,
                   help="a valuation method keeps this share of the records, the highest valued")
    p.add_argument("--by-class", action="store_true",
                   help="a valuation method keeps each class in its share of the records (class quotas)")
    p.add_argument("--out", required=True,
                   help="selected documents (.jsonl or .jsonl.gz), each with a salience_score field; OUT.report.json "
                        "beside it (DSIR). Refused when it exists and is not an earlier selection, or is an input")
    method_option(p, "--method", ("data", "valuation"), "dsir", "data method (a valuation method prunes labelled "
                  "records by value)", subclass_of=(DocumentScorer, Valuation))
    add_method_options(p)
    p.add_argument("--sampling", default=None, choices=SAMPLING,
                   help="gumbel: sample without replacement by importance weight (default, as DSIR); topk: the k "
                        "highest weights; replacement: k draws with replacement")
    p.add_argument("--text-field", default="text", help="the records' text field (default text)")
    p.add_argument("--label-field", default=None,
                   help="count the selection by this field in the report (for a valuation method: the label)")
    p.add_argument("--min-tokens", type=int, default=None, help="ignore raw documents with fewer tokens")
    p.add_argument("--filter", action="append", default=None, dest="filters", metavar="STAT>=X",
                   help="eligibility rule on words, mean_word_length, alpha_ratio, symbol_ratio, uppercase_ratio or "
                        "line_count, e.g. 'alpha_ratio>=0.7' (repeatable)")
    p.add_argument("--buckets", type=positive_int, default=None,
                   help="hashed n-gram features (default 10,000, as DSIR)")
    p.add_argument("--orders", default=None, help="n-gram orders to hash (default 1,2: unigrams and bigrams)")
    p.add_argument("--length-normalize", action="store_true", help="divide DSIR's log weight by the n-gram count")
    add_n_jobs(p, default=2)
    p.add_argument("--shard-mb", type=positive_float, default=8.0, help="shard size in MB of text (default 8)")
    p.add_argument("--executor", default="local", choices=EXECUTORS,
                   help="where the shard jobs run: local processes (default) or Ray (pip install 'salience[ray]'; "
                        "RAY_ADDRESS names a cluster)")
    p.add_argument("--quota-field", default=None, help="select per value of this field, in the target's proportions")
    p.add_argument("--keep-work", action="store_true", help="keep the shard cache after a successful run")
    p.add_argument("--work-dir", default=None, help="shard cache (default OUT.work); a rerun skips finished shards")
    add_seed(p)
    p.add_argument("--strict", action="store_true", help="a record without the text field is an error, not skipped")
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_select)

    p = commands.add_parser("dedup", help="drop exact (and near, and semantic) duplicate documents")
    p.add_argument("inputs", nargs="+", help="jsonl, jsonl.gz or parquet files")
    p.add_argument("--out", required=True, help="kept documents (.jsonl or .jsonl.gz); OUT.report.json beside it")
    p.add_argument("--near", action="store_true", help="also drop near duplicates (MinHash LSH)")
    p.add_argument("--threshold", type=float, default=None,
                   help="--near: Jaccard similarity of word 5-grams (default 0.8)")
    p.add_argument("--num-perm", type=int, default=None, help="--near: MinHash functions (default 128)")
    p.add_argument("--semantic", action="store_true",
                   help="also drop semantic duplicates (SemDeDup: embeddings clustered, cosine similarity within "
                        "clusters)")
    p.add_argument("--encoder", default=None,
                   help="the embedding model of --semantic: a static encoder folder (salience search distill) or a "
                        "sentence-transformers folder (default: the bundled all-MiniLM-L6-v2)")
    p.add_argument("--similarity", type=float, default=None,
                   help="cosine similarity at which --semantic counts two documents as duplicates (default 0.95)")
    p.add_argument("--clusters", type=positive_int, default=None,
                   help="k-means clusters --semantic compares within (default: about the square root of the documents)")
    p.add_argument("--no-center", action="store_true",
                   help="compare --semantic's vectors as the encoder gives them (default: their mean subtracted, "
                        "which a static encoder needs)")
    p.add_argument("--keep-order", default=None, choices=KEEP_ORDERS,
                   help="which of a semantic group is kept: hard (farthest from its cluster's centroid, SemDeDup's "
                        "default), easy (nearest) or first")
    p.add_argument("--text-field", default="text", help="the records' text field (default text)")
    add_n_jobs(p, default=2)
    p.add_argument("--executor", default="local", choices=EXECUTORS,
                   help="where the shard jobs run: local processes (default) or Ray (pip install 'salience[ray]')")
    p.add_argument("--strict", action="store_true", help="a record without the text field is an error, not skipped")
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_dedup)

    p = commands.add_parser("report", help="precision, recall and KL reduction of a selection")
    p.add_argument("selected", help="the selected documents (jsonl or jsonl.gz)")
    p.add_argument("--target", nargs="+", required=True, help="the target sample the selection was made for")
    p.add_argument("--raw", nargs="+", required=True, help="the raw pool the selection was made from")
    p.add_argument("--label-field", default=None, help="field holding each document's domain")
    p.add_argument("--target-label", default=None, help="the target's value of --label-field")
    p.add_argument("--text-field", default="text", help="the records' text field (default text)")
    p.add_argument("--buckets", type=positive_int, default=10_000, help="hashed n-gram features (default 10,000)")
    p.add_argument("--min-tokens", type=int, default=0, help="raw documents shorter than this are not in the pool")
    add_output_options(p)
    p.set_defaults(func=_cmd_report)

    from salience.cli.valuation import add_value_command

    add_value_command(commands)
