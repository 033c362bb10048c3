"""``salience data value``: the value of every labelled training record to a model (data valuation
and label errors), written beside each record's id."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from salience.cli._common import add_n_jobs, add_output_options, add_seed, emit, given, method_option, positive_int
from salience.data.utility import require_sklearn
from salience.exceptions import InputFormatError

#: models valuation refits, by name (any scikit-learn estimator in Python)
MODELS = ("logistic", "knn", "tree")


def _model(name: str | None):
    if name is None:
        return None
    purpose = f"--model {name}"
    if name == "logistic":
        return require_sklearn("linear_model", purpose).LogisticRegression(max_iter=1000)
    if name == "knn":
        return require_sklearn("neighbors", purpose).KNeighborsClassifier(n_neighbors=5)
    return require_sklearn("tree", purpose).DecisionTreeClassifier(random_state=0)


def read_labelled(path: str, features: list[str], label_field: str, id_field: str, on_error: str = "raise"):
    """(X, y, ids) of a jsonl / jsonl.gz file: ``features`` names one field holding a list of
    numbers or several fields holding one number each; each record's label and id (the line
    number when it has no id)."""
    from salience.io.files import iter_jsonl

    rows, labels, ids = [], [], []
    for lineno, record in iter_jsonl(path, on_error):
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


def _is_own_output(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8") as fh:
            return "salience_value" in json.loads(fh.readline())
    except (OSError, ValueError, TypeError):
        return False


def _cmd_value(args) -> int:
    from salience.core.base import create
    from salience.io.files import atomic_write_text, check_output_path

    inputs = [args.train] + ([args.test] if args.test else [])
    out = check_output_path(args.out, inputs, is_own=_is_own_output)
    features = [f for f in args.features.split(",") if f]
    X, y, ids = read_labelled(args.train, features, args.label_field, args.id_field)
    test = None
    if args.test:
        X_test, y_test, _ = read_labelled(args.test, features, args.label_field, args.id_field)
        test = (X_test, y_test)
    options = given(args, "k", "budget", "truncation", "tolerance", "folds")
    if args.model is not None:
        options["model"] = _model(args.model)
    accepted = _params(args.method)
    # the defaults of --seed and --n-jobs go to the methods that have them; a method without them
    # (KNN-Shapley fits nothing) is not refused for the options' defaults
    options |= {name: getattr(args, name) for name in ("seed", "n_jobs") if name in accepted}
    method = create("data", args.method, **options)
    started = time.perf_counter()
    scores = method.score((X, y), test, ids=ids)
    seconds = time.perf_counter() - started
    issues = getattr(method, "label_issues_", None)
    lines = []
    for i, (record_id, value) in enumerate(zip(scores.ids, scores.values.tolist())):
        row = {"id": record_id, "label": y[i], "salience_value": value}
        if issues is not None:
            row["label_issue"] = bool(issues[i])
        lines.append(json.dumps(row, ensure_ascii=False))
    atomic_write_text(out, "\n".join(lines) + "\n")
    report = {"method": args.method, "records": len(ids), "fits": getattr(method, "fits_", 0),
              "seconds": round(seconds, 3), "out": str(out)}
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


def _params(method: str) -> list[str]:
    from salience.core.base import registered

    return next(m.params() for m in registered("data") if m.name == method)


def add_value_command(commands) -> None:
    from salience.data.valuation import Valuation

    p = commands.add_parser("value", help="value every labelled training record to a model (data Shapley, "
                                          "Banzhaf, KNN-Shapley, influence, label errors)")
    p.add_argument("train", help="labelled training records: jsonl or jsonl.gz")
    p.add_argument("--test", default=None, help="labelled test records the model is scored on (not needed by "
                                                 "confident_learning)")
    p.add_argument("--features", required=True,
                   help="one field holding a list of numbers, or comma-separated fields holding one number each")
    p.add_argument("--label-field", default="label", help="the records' label field (default label)")
    p.add_argument("--id-field", default="id", help="the records' id field (default id; else the line number)")
    method_option(p, "--method", "data", "knn_shapley", "valuation method", subclass_of=Valuation)
    p.add_argument("--model", default=None, choices=MODELS,
                   help="the model refitted on coalitions (default: logistic regression; KNN-Shapley and influence "
                        "have their own)")
    p.add_argument("--k", type=positive_int, default=None, help="neighbours of knn_shapley (default 10)")
    p.add_argument("--budget", type=positive_int, default=None, help="model fits of the sampling methods")
    p.add_argument("--truncation", type=float, default=None, help="TMC's relative truncation tolerance")
    p.add_argument("--tolerance", type=float, default=None,
                   help="stop sampling once every standard error is within this share of the largest value")
    p.add_argument("--folds", type=positive_int, default=None, help="confident learning's out-of-fold fits")
    add_n_jobs(p)
    add_seed(p)
    p.add_argument("--out", required=True,
                   help="one JSON line per training record: id, label, salience_value (and label_issue); refused "
                        "when it exists and is not an earlier valuation, or is an input")
    add_output_options(p)
    p.set_defaults(func=_cmd_value)
