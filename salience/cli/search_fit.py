"""``search index --dense`` with a static encoder: fitted to the documents being indexed, without
labels, before they are encoded (what ``search distill --corpus`` does). A plain distillation
pulled a BM25 hybrid below BM25 on collections nobody tuned on; the same encoder fitted to each
collection lifted it, so the fit is the default and ``--fit-encoder none`` skips it."""

from __future__ import annotations

import sys
from pathlib import Path

from salience.exceptions import InvalidParameterError
from salience.io.files import check_output_path


def add_fit_option(parser) -> None:
    parser.add_argument("--fit-encoder", choices=("corpus", "none"), default="corpus",
                        help="with --dense and a static encoder from `search distill` that was not fitted: fit it to "
                             "these documents without labels first (default corpus; minutes: its teacher encodes up to "
                             "20,000 of them), written beside the index as OUT.encoder; none: index with it as it is")


def fitted_encoder_path(out: str | Path) -> Path:
    """Where the encoder fitted for the index ``out`` is written: beside it, ``OUT.encoder``."""
    out = Path(out)
    return out.with_name(out.name + ".encoder")


def fit_static_encoder(args, *, quiet: bool, progress: bool) -> str | None:
    """The encoder to index with when ``args`` ask for a dense index over an unfitted static
    encoder (fitted here, its folder's path); ``None`` when there is nothing to fit."""
    from salience.models.static import StaticEncoder, is_static_folder

    if not args.dense or args.fit_encoder == "none" or not is_static_folder(args.encoder):
        return None
    config = StaticEncoder(args.encoder).config
    if config.get("fitted"):
        return None  # fitted already (to these documents or others): used as it is
    # resolved: the index records where its encoder is, and is queried from anywhere
    out = check_output_path(fitted_encoder_path(args.out), [args.source, args.encoder], what="fitted encoder",
                            option="--out's encoder", is_own=lambda p: p.is_dir() and is_static_folder(p))
    from salience.models.distill import distill

    if not quiet:
        print(f"fitting the static encoder {args.encoder} to the documents (its teacher {config['source']} encodes up "
              f"to 20,000 of them: minutes; --fit-encoder none skips it) -> {out}", file=sys.stderr, flush=True)
    try:
        distill(config["source"], out, dims=config.get("pca"), corpus=args.source, show_progress=progress,
                on_error=args.on_error)
    except InvalidParameterError as err:
        raise InvalidParameterError(f"fitting {args.encoder} to the documents needs its teacher: {err} "
                                    "Pass --fit-encoder none to index with the encoder as it is.") from None
    return str(out)
