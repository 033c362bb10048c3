"""``salience rank``: fuse and evaluate TREC runs."""

from __future__ import annotations

import sys
from pathlib import Path

from salience.cli._common import add_on_error, add_output_options, add_seed, emit, given, method_option, positive_int
from salience.cli.params import add_param_option, method_params
from salience.exceptions import InvalidParameterError
from salience.io.files import check_output_path


def evaluate_quietly(qrels, run, metrics, **options):
    """``evaluate`` with its nothing-judged warning left to the caller, which exits non-zero."""
    import warnings

    from salience.core.metrics import NothingJudgedWarning, evaluate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NothingJudgedWarning)
        return evaluate(qrels, run, metrics, **options)


def nothing_judged(report, qrels_path) -> int:
    print(f"salience: error: nothing was evaluated: no subject of the run has judgments in {qrels_path} "
          f"({report.missing_from_run} judged subjects, none ranked). Check that the run and the qrels use the "
          "same subject ids.", file=sys.stderr)
    return 1


def is_own_run(path: Path, tag: str | None, prefix: str = "fused-") -> bool:
    """An existing file is a command's earlier output when it is a TREC run with the tag
    given, or, when none is, a tag starting with the command's ``prefix`` (``fused-METHOD``)."""
    try:
        with open(path, encoding="utf-8") as fh:
            first = fh.readline().split()
    except (OSError, UnicodeDecodeError):
        return False
    return len(first) == 6 and first[1] == "Q0" and (first[5] == tag if tag else first[5].startswith(prefix))


def _cmd_fuse(args) -> int:
    from salience.core.fusion import fuse
    from salience.core.run import Run

    check_output_path(args.out, args.runs, what="run", is_own=lambda p: is_own_run(p, args.tag))
    runs = [Run.read_trec(path, on_error=args.on_error) for path in args.runs]
    weights = None
    if args.weights:
        try:
            weights = [float(w) for w in args.weights.split(",")]
        except ValueError:
            raise InvalidParameterError(f"--weights must be comma-separated numbers; got {args.weights!r}.") from None
    options = (given(args, "normalize", "rrf_k") | ({"weights": weights} if weights is not None else {})
               | method_params(args, "fusion", args.method, {"missing_subjects": "--missing-subjects"}))
    fused = fuse(runs, method=args.method, missing_subjects=args.missing_subjects, **options)
    if args.depth:
        fused = type(fused)({s: fused[s].top_k(args.depth) for s in fused}, name=fused.name)
    fused.write_trec(args.out, tag=args.tag or f"fused-{args.method}")
    emit(args, {"runs": len(runs), "subjects": len(fused), "method": args.method, "out": args.out},
         f"fused {len(runs)} runs ({len(fused)} subjects) with {args.method}"
         f"{' after ' + args.normalize if args.normalize else ''} -> {args.out}")
    return 0


def _cmd_evaluate(args) -> int:
    from salience.core.run import Qrels, Run

    qrels = Qrels.read(args.qrels, on_error=args.on_error)
    report = evaluate_quietly(qrels, Run.read_trec(args.run, on_error=args.on_error), args.metrics, missing=args.unranked)
    if report.matched == 0:
        return nothing_judged(report, args.qrels)
    emit(args, report.to_dict(), str(report))
    return 0


def _cmd_compare(args) -> int:
    from salience.core.run import Qrels, Run
    from salience.core.significance import paired_test

    qrels = Qrels.read(args.qrels, on_error=args.on_error)
    reports = [evaluate_quietly(qrels, Run.read_trec(path, on_error=args.on_error), args.metrics, missing=args.unranked)
               for path in (args.run_a, args.run_b)]
    for report in reports:
        if report.matched == 0:
            return nothing_judged(report, args.qrels)
    results = {metric: paired_test(reports[0], reports[1], metric=metric, test=args.test,
                                   n_resamples=args.resamples, seed=args.seed)
               for metric in reports[0].means}
    emit(args, {"a": args.run_a, "b": args.run_b, "test": args.test,
                "metrics": {m: {"a": r.mean_a, "b": r.mean_b, "difference": r.difference, "p_value": r.p_value,
                                "ci95": list(r.ci95), "subjects": r.n} for m, r in results.items()}},
         f"{args.run_b} against {args.run_a}\n" + "\n".join(f"  {r}" for r in results.values()))
    return 0


def add_commands(domains) -> None:
    from salience.core.fusion import FUSION_NORMS
    from salience.core.significance import TESTS

    rank = domains.add_parser("rank", help="fuse and evaluate rankings (TREC run files)")
    commands = rank.add_subparsers(dest="command", required=True)
    p = commands.add_parser("fuse", help="fuse two or more TREC run files into one")
    p.add_argument("runs", nargs="+", help="TREC run files (qid Q0 docid rank score tag)")
    method_option(p, "--method", "fusion", "rrf", "fusion method")
    p.add_argument("--normalize", default=None, choices=FUSION_NORMS, help="score normalisation before fusing")
    p.add_argument("--weights", default=None, help="one weight per run, e.g. 0.7,0.3 (required by wsum)")
    p.add_argument("--rrf-k", type=float, default=None, help="RRF constant (rrf only; default 60)")
    p.add_argument("--depth", type=positive_int, default=None, help="keep the best N items per subject")
    add_param_option(p, "the fusion method")
    p.add_argument("--missing-subjects", default="error", choices=("error", "empty"),
                   help="a subject absent from one of the runs: stop (default) or treat it as an empty ranking there")
    p.add_argument("--tag", default=None, help="run tag written in the last column")
    p.add_argument("--out", required=True, help="output TREC run file: new, or an earlier fused run (written atomically)")
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_fuse)

    p = commands.add_parser("evaluate", help="score a TREC run against qrels (BEIR qrels.tsv or TREC qrels)")
    p.add_argument("qrels", help="judgments: BEIR qrels.tsv or TREC qrels")
    p.add_argument("run", help="TREC run file (qid Q0 docid rank score tag)")
    p.add_argument("--metrics", default="ndcg@10,recall@100,map@1000,mrr@10",
                   help="comma-separated metrics with cut-offs: ndcg, recall, map, mrr, precision (default "
                        "ndcg@10,recall@100,map@1000,mrr@10)")
    p.add_argument("--unranked", default="zero", choices=("zero", "skip"),
                   help="judged subjects the run does not rank: count them as 0 (default) or skip them (trec_eval)")
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_evaluate)

    p = commands.add_parser("compare", help="is run B better than run A, or is the margin noise? (paired test)")
    p.add_argument("qrels", help="judgments: BEIR qrels.tsv or TREC qrels")
    p.add_argument("run_a", help="the baseline TREC run")
    p.add_argument("run_b", help="the TREC run compared with it")
    p.add_argument("--metrics", default="ndcg@10",
                   help="comma-separated metrics with cut-offs (default ndcg@10)")
    p.add_argument("--test", default="fisher", choices=TESTS,
                   help="fisher: randomization test (default, exact for few subjects); t: paired t-test")
    p.add_argument("--resamples", type=positive_int, default=10_000,
                   help="sign assignments of the randomization test (default 10,000)")
    p.add_argument("--unranked", default="zero", choices=("zero", "skip"),
                   help="judged subjects a run does not rank: count them as 0 (default) or skip them")
    add_seed(p)
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_compare)
