"""``salience data value``: the value of every labelled training record to a model (data valuation
and label errors), written beside each record's id."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from salience.cli._common import (add_n_jobs, add_on_error, add_output_options, add_seed, emit, given, method_option,
                                  positive_int)
from salience.cli.params import add_param_option, method_params
from salience.data.utility import require_sklearn
from salience.exceptions import InputFormatError

#: models valuation refits, by name (any scikit-learn estimator in Python)
MODELS = ("logistic", "knn", "tree", "sgd", "mlp")
#: the command-line options that are method parameters, passed on when given
METHOD_OPTIONS = ("k", "budget", "truncation", "tolerance", "folds", "neighbors", "epochs", "at_epoch", "repeats",
                  "similarity")


def _model(name: str | None):
    if name is None:
        return None
    purpose = f"--model {name}"
    if name == "logistic":
        return require_sklearn("linear_model", purpose).LogisticRegression(max_iter=1000)
    if name == "knn":
        return require_sklearn("neighbors", purpose).KNeighborsClassifier(n_neighbors=5)
    if name == "sgd":  # trained epoch by epoch: the training-dynamics scores' default
        return require_sklearn("linear_model", purpose).SGDClassifier(loss="log_loss")
    if name == "mlp":
        return require_sklearn("neural_network", purpose).MLPClassifier(hidden_layer_sizes=(64,))
    return require_sklearn("tree", purpose).DecisionTreeClassifier(random_state=0)


def read_labelled(path: str, features: list[str], label_field: str, id_field: str, on_error: str = "raise",
                  records: list | None = None):
    """(X, y, ids) of a jsonl / jsonl.gz file: ``features`` names one field holding a list of
    numbers or several fields holding one number each; each record's label and id (the line
    number when it has no id). ``records``, when given, receives the records read."""
    from salience.io.files import iter_jsonl

    rows, labels, ids = [], [], []
    for lineno, record in iter_jsonl(path, on_error):
        if records is not None:
            records.append(record)
        if label_field not in record:
            raise InputFormatError(f"{path}:{lineno}: record has no {label_field!r} field (the label; --label-field).")
        try:
            values = record[features[0]] if len(features) == 1 and isinstance(record.get(features[0]), list) else \
                [record[name] for name in features]
            row = [float(v) for v in values]
        except KeyError as err:
            raise InputFormatError(f"{path}:{lineno}: record has no {err.args[0]!r} field (a feature; --features).") \
                from None
        except (TypeError, ValueError):
            raise InputFormatError(f"{path}:{lineno}: features {', '.join(features)} must be numbers.") from None
        if rows and len(row) != len(rows[0]):
            raise InputFormatError(f"{path}:{lineno}: {len(row)} features where earlier records have {len(rows[0])}.")
        rows.append(row)
        labels.append(record[label_field])
        ids.append(record.get(id_field, str(lineno)))
    if not rows:
        raise InputFormatError(f"{path}: no records.")
    return np.asarray(rows), labels, ids


def _first_record_has(field: str):
    """Whether a file's first JSON line holds ``field``: an earlier output of this command."""

    def is_own(path: Path) -> bool:
        try:
            with open(path, encoding="utf-8") as fh:
                return field in json.loads(fh.readline())
        except (OSError, ValueError, TypeError):
            return False

    return is_own


def _parquet_has(field: str):
    """Whether a parquet file's columns hold ``field``: an earlier output of this command."""

    def is_own(path: Path) -> bool:
        try:
            from salience.extras import require

            return field in require("pyarrow.parquet", "parquet", "Parquet output").read_schema(path).names
        except Exception:  # noqa: BLE001 - anything unreadable is not ours
            return False

    return is_own


def _write_parquet(out: Path, rows: list[dict]) -> None:
    """``rows`` as one parquet table (a column per field), written atomically."""
    from salience.extras import require
    from salience.io.files import atomic_write_bytes

    pa = require("pyarrow", "parquet", "Parquet output (--out *.parquet)")
    parquet = require("pyarrow.parquet", "parquet", "Parquet output (--out *.parquet)")
    table = pa.Table.from_pylist([{**row, "id": str(row["id"])} for row in rows])
    sink = pa.BufferOutputStream()
    parquet.write_table(table, sink)
    atomic_write_bytes(out, sink.getvalue().to_pybytes())


def _features(args) -> list[str]:
    from salience.exceptions import InvalidParameterError

    names = [f for f in (args.features or "").split(",") if f]
    if not names:
        raise InvalidParameterError(f"--method {args.method} values labelled records by their numbers: give --features "
                                    "(one field holding a list of numbers, or comma-separated fields).")
    return names


def journal_path(out: Path) -> Path:
    """Where a valuation writing ``out`` keeps the coalitions it evaluated until it finishes."""
    return out.with_name(out.name + ".journal")


def _valuation(args, method_name: str, X, y, ids, test, out: Path, option_names=METHOD_OPTIONS):
    """(the method created from the command's options among ``option_names``, its Scores,
    seconds). Coalitions are journaled beside ``out``: a killed run continues with --resume."""
    import sys

    from salience.core.base import create
    from salience.exceptions import InvalidParameterError

    options = given(args, *option_names)
    if getattr(args, "model", None) is not None:
        options["model"] = _model(args.model)
    accepted = _params(method_name)
    # the defaults of --seed and --n-jobs go to the methods that have them; a method without them
    # (KNN-Shapley fits nothing) is not refused for the options' defaults
    options |= {name: getattr(args, name) for name in ("seed", "n_jobs") if name in accepted}
    options |= method_params(args, "valuation", method_name)
    method = create("valuation", method_name, **options)
    journal = journal_path(out)
    if journal.exists() and not args.resume:
        raise InvalidParameterError(f"{journal} holds the coalitions of an earlier run that did not finish: pass --resume "
                                    "to continue it, or remove the file to start afresh.")
    started = time.perf_counter()
    try:
        scores = method.score((X, y), test, ids=ids, journal=journal)
    except KeyboardInterrupt:
        if journal.exists():
            print(f"salience: the coalitions evaluated so far are kept in {journal}: the same command with --resume "
                  "continues from them.", file=sys.stderr)
        raise
    return method, scores, time.perf_counter() - started


def _cmd_value(args) -> int:
    from salience.io.files import atomic_write_text, check_output_path

    inputs = [args.train] + ([args.test] if args.test else [])
    parquet = Path(args.out).suffix == ".parquet"
    out = check_output_path(args.out, inputs,
                            is_own=_parquet_has("salience_value") if parquet else _first_record_has("salience_value"))
    X, y, ids = read_labelled(args.train, _features(args), args.label_field, args.id_field, args.on_error)
    test = None
    if args.test:
        X_test, y_test, _ = read_labelled(args.test, _features(args), args.label_field, args.id_field, args.on_error)
        test = (X_test, y_test)
    method, scores, seconds = _valuation(args, args.method, X, y, ids, test, out)
    issues = getattr(method, "label_issues_", None)
    rows = []
    for i, (record_id, value) in enumerate(zip(scores.ids, scores.values.tolist())):
        row = {"id": record_id, "label": y[i], "salience_value": value}
        if issues is not None:
            row["label_issue"] = bool(issues[i])
        rows.append(row)
    if parquet:
        _write_parquet(out, rows)
    else:
        atomic_write_text(out, "\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\n")
    report = {"method": args.method, "records": len(ids), "fits": getattr(method, "fits_", 0),
              "seconds": round(seconds, 3), "out": str(out)}
    if getattr(method, "replayed_fits_", 0):
        report["replayed_coalitions"] = method.replayed_fits_
    if getattr(method, "failed_fits_", 0):
        report["failed_fits"] = method.failed_fits_
        report["first_failure"] = method.first_failure_
    if hasattr(method, "converged_"):
        report["converged"] = bool(method.converged_)
    if issues is not None:
        report["label_issues"] = int(np.sum(issues))
    lowest = np.argsort(scores.values, kind="stable")[:5]
    report["lowest"] = [scores.ids[i] for i in lowest]
    emit(args, report)
    return 0


def prune(args) -> dict:
    """``salience data select --method <valuation method>``: value the labelled records of
    ``--raw`` (against ``--target`` where the method needs a test set) and keep the highest
    valued ``-k`` or ``--fraction``, within each class in its share of the records when
    ``--by-class``; the kept records are written whole with a ``salience_score`` field."""
    from salience.core.select import select_sample
    from salience.exceptions import InvalidParameterError
    from salience.io.files import atomic_write_text, check_output_path

    if len(args.raw) != 1 or (args.target and len(args.target) != 1):
        raise InvalidParameterError(f"--method {args.method} values one file of labelled records: give one --raw (and "
                                    "at most one --target, the test records).")
    if args.label_field is None:
        raise InvalidParameterError(f"--method {args.method} values labelled records: give --label-field.")
    if (args.k is None) == (args.fraction is None):
        raise InvalidParameterError("give one of -k (records to keep) and --fraction (their share).")
    if args.fraction is not None and not 0 < args.fraction <= 1:
        raise InvalidParameterError(f"--fraction {args.fraction} must lie in (0, 1]: the share of records kept.")
    inputs = args.raw + (args.target or [])
    out = check_output_path(args.out, inputs, is_own=_first_record_has("salience_score"))
    records: list = []
    X, y, ids = read_labelled(args.raw[0], _features(args), args.label_field, args.id_field, args.on_error, records)
    test = None
    if args.target:
        X_test, y_test, _ = read_labelled(args.target[0], _features(args), args.label_field, args.id_field,
                                          args.on_error)
        test = (X_test, y_test)
    if len(set(map(str, ids))) < len(ids):
        ids = list(range(len(ids)))  # ids only name the records here: positions keep them apart
    # -k is the records to keep here, not KNN-Shapley's neighbours
    method, scores, seconds = _valuation(args, args.method, X, y, ids, test, out, METHOD_OPTIONS[1:])
    keep = args.k if args.k is not None else int(np.ceil(args.fraction * len(ids) - 1e-12))
    if keep > len(ids):
        raise InvalidParameterError(f"-k {keep} exceeds the {len(ids)} records of {args.raw[0]}.")
    groups = quotas = None
    if args.by_class:
        groups = [str(label) for label in y]
        quotas = _class_quotas(groups, keep)
    kept = select_sample(scores, k=keep, sampling="topk", groups=groups, quotas=quotas)
    position = {record_id: i for i, record_id in enumerate(scores.ids)}
    lines = []
    for record_id, value in zip(kept.ids, scores.values[[position[i] for i in kept.ids]].tolist()):
        record = dict(records[position[record_id]])
        record["salience_score"] = value
        lines.append(json.dumps(record, ensure_ascii=False))
    atomic_write_text(out, "\n".join(lines) + "\n")
    counts: dict = {}
    for label in y:
        counts[str(label)] = counts.get(str(label), [0, 0])
        counts[str(label)][0] += 1
    for record_id in kept.ids:
        counts[str(y[position[record_id]])][1] += 1
    return {"method": args.method, "records": len(ids), "kept": len(kept), "fits": getattr(method, "fits_", 0),
            "seconds": round(seconds, 3), "by_class": {label: {"records": n, "kept": k}
                                                      for label, (n, k) in sorted(counts.items())},
            "out": str(out)}


def _class_quotas(groups: list[str], keep: int) -> dict:
    """Each class's share of ``keep``, in proportion to its records (largest remainders; a class
    keeps at least one record when ``keep`` allows)."""
    labels, counts = np.unique(groups, return_counts=True)
    exact = keep * counts / counts.sum()
    quotas = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - quotas), kind="stable")[: keep - quotas.sum()]:
        quotas[i] += 1
    return {label: int(q) for label, q in zip(labels.tolist(), quotas) if q > 0}


def _params(method: str) -> list[str]:
    from salience.core.base import registered

    return next(m.params() for m in registered("valuation") if m.name == method)


def add_method_options(p) -> None:
    """The valuation methods' options shared by ``data value`` and ``data select``."""
    add_param_option(p, "the valuation method")
    p.add_argument("--features", default=None,
                   help="one field holding a list of numbers, or comma-separated fields holding one number each")
    p.add_argument("--id-field", default="id", help="the records' id field (default id; else the line number)")
    p.add_argument("--model", default=None, choices=MODELS,
                   help="the model refitted on coalitions (default: logistic regression; KNN-Shapley and influence "
                        "have their own) or trained epoch by epoch (sgd, the default of the training-dynamics "
                        "scores, or mlp)")
    p.add_argument("--budget", type=positive_int, default=None, help="model fits of the sampling methods")
    p.add_argument("--truncation", type=float, default=None, help="TMC's relative truncation tolerance")
    p.add_argument("--tolerance", type=float, default=None,
                   help="stop sampling once every standard error is within this share of the largest value")
    p.add_argument("--folds", type=positive_int, default=None, help="confident learning's out-of-fold fits")
    p.add_argument("--neighbors", type=positive_int, default=None,
                   help="confident learning: average the label quality with the share of this many nearest rows "
                        "carrying the same label (no extra fit)")
    p.add_argument("--epochs", type=positive_int, default=None, help="training epochs of the training-dynamics scores")
    p.add_argument("--at-epoch", type=positive_int, default=None, help="the epoch EL2N and GraNd are read at")
    p.add_argument("--repeats", type=positive_int, default=None,
                   help="training runs (seeds) the training-dynamics scores average")
    p.add_argument("--resume", action="store_true",
                   help="continue a killed run from OUT.journal (the coalitions it evaluated), with the values an "
                        "unbroken run gives")
    from salience.data.dynamics import TracIn

    p.add_argument("--similarity", default=None, choices=TracIn._parameter_constraints["similarity"][0].values,
                   help="tracin's gradient similarity: cosine (default; every gradient at unit length) or dot "
                        "(TracIn as published)")


def add_value_command(commands) -> None:
    p = commands.add_parser("value", help="value every labelled training record to a model (data Shapley, "
                                          "Banzhaf, KNN-Shapley, influence, label errors)")
    p.add_argument("train", help="labelled training records: jsonl or jsonl.gz")
    p.add_argument("--test", default=None, help="labelled test records the model is scored on (not needed by "
                                                 "confident_learning)")
    p.add_argument("--label-field", default="label", help="the records' label field (default label)")
    method_option(p, "--method", "valuation", "knn_shapley", "valuation method")
    p.add_argument("--k", type=positive_int, default=None, help="neighbours of knn_shapley (default 10)")
    add_method_options(p)
    add_n_jobs(p)
    add_seed(p)
    p.add_argument("--out", required=True,
                   help="one JSON line per training record: id, label, salience_value (and label_issue), or a "
                        "parquet table with those columns when it ends in .parquet (pip install 'salience[parquet]'); "
                        "refused when it exists and is not an earlier valuation, or is an input")
    add_output_options(p)
    add_on_error(p)
    p.set_defaults(func=_cmd_value)
