import numpy as np
import pytest

from salience import IdMismatchError, InvalidParameterError, Run, Scores, fuse
from salience.core.base import method_names
from salience.core.fusion import FUSION_NORMS

RANX_METHOD = {"rrf": "rrf", "borda": "bordafuse", "combsum": "sum", "combmnz": "mnz", "combmax": "max", "combmin": "min", "wsum": "wsum"}
RANX_NORM = {None: None, "minmax": "min-max", "zscore": "zmuv", "sum": "sum", "max": "max", "rank": "rank", "borda": "borda"}


def test_rrf_by_hand():
    a = {"q": {"d1": 3.0, "d2": 2.0, "d3": 1.0}}
    b = {"q": {"d3": 5.0, "d1": 4.0}}
    fused = fuse([a, b], method="rrf", rrf_k=60)["q"]
    assert fused.to_dict() == pytest.approx({"d1": 1 / 61 + 1 / 62, "d3": 1 / 63 + 1 / 61, "d2": 1 / 62})
    assert fused.ranked_ids() == ["d1", "d3", "d2"]


def test_combmnz_and_borda_by_hand():
    a = {"q": {"x": 0.5, "y": 0.25}}
    b = {"q": {"y": 1.0, "z": 0.5}}
    assert fuse([a, b], method="combmnz")["q"].to_dict() == {"y": 2.5, "x": 0.5, "z": 0.5}
    # 3 candidates: a ranks x, y (3, 2 points), z unranked gets (3 - 2 + 1) / 2 = 1
    assert fuse([a, b], method="borda")["q"].to_dict() == {"y": 5.0, "x": 4.0, "z": 3.0}
    assert fuse([a, b], method="wsum", weights=[2, 1])["q"].to_dict() == {"y": 1.5, "x": 1.0, "z": 0.5}


def _random_runs(seed, n_runs=3):
    rng = np.random.default_rng(seed)
    return [
        {f"q{q}": {f"d{i}": float(rng.random()) for i in rng.choice(80, size=40, replace=False)} for q in range(15)}
        for _ in range(n_runs)
    ]


def _assert_same(ours: Run, theirs: dict):
    assert set(ours.keys()) == set(theirs)
    for subject, docs in theirs.items():
        mine = ours[subject].to_dict()
        assert set(mine) == set(docs)
        for doc, value in docs.items():
            assert mine[doc] == pytest.approx(value, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("method", method_names("fusion"))
def test_parity_with_ranx_every_method(method):
    ranx = pytest.importorskip("ranx")
    runs = _random_runs(1)
    params = {"weights": [0.5, 0.3, 0.2]} if method == "wsum" else {}
    # a normalisation does nothing to the rank-based methods: salience refuses it there
    for norm in (None,) if method in ("rrf", "borda") else (None, "minmax"):
        theirs = ranx.fuse([ranx.Run(r) for r in runs], method=RANX_METHOD[method], norm=RANX_NORM[norm], params=params)
        _assert_same(fuse(runs, method=method, **({"normalize": norm} if norm else {}), **params), theirs.to_dict())


@pytest.mark.parametrize("norm", [n for n in FUSION_NORMS if n != "minmax"])
def test_parity_with_ranx_every_norm(norm):
    ranx = pytest.importorskip("ranx")
    runs = _random_runs(2)
    theirs = ranx.fuse([ranx.Run(r) for r in runs], method="sum", norm=RANX_NORM[norm])
    _assert_same(fuse(runs, method="combsum", normalize=norm), theirs.to_dict())


def test_parity_with_ranx_on_real_bm25_runs(scifact):
    ranx = pytest.importorskip("ranx")
    from salience.search import BM25

    queries = dict(list(scifact["queries"].items())[:60])
    runs = [BM25(variant=v).index(scifact["corpus"]).retrieve(queries, k=50) for v in ("lucene", "bm25+", "tfidf")]
    # rank-based methods are only defined up to tie order, which ranx leaves to an unstable sort:
    # compare on the subjects without tied scores (most of them)
    untied = [q for q in queries if all(len(set(r[q].values.tolist())) == len(r[q]) for r in runs)]
    assert len(untied) >= 40
    runs = [Run({q: r[q] for q in untied}) for r in runs]
    for method, norm in (("rrf", None), ("combmnz", "minmax"), ("combsum", "zscore"), ("borda", None)):
        theirs = ranx.fuse([ranx.Run(r.to_dict()) for r in runs], method=RANX_METHOD[method], norm=RANX_NORM[norm])
        _assert_same(fuse(runs, method=method, normalize=norm), theirs.to_dict())


def test_bad_input():
    a = {"q1": {"d1": 1.0}}
    with pytest.raises(IdMismatchError, match="no ranking for 1 subject.*'q2'.*missing_subjects='empty'"):
        fuse([a, {"q2": {"d1": 1.0}}])
    fused = fuse([a, {"q2": {"d1": 1.0}}], missing_subjects="empty")
    assert fused["q1"].ids == ["d1"] and fused["q2"].ids == ["d1"]
    with pytest.raises(InvalidParameterError, match="NaN"):
        fuse([a, {"q1": {"d1": float("nan")}}])
    assert len(fuse([{"q1": {}}, {"q1": {}}])["q1"]) == 0  # empty rankings fuse to an empty one
    with pytest.raises(IdMismatchError, match="'d1' appears more than once"):
        fuse([a, Run({"q1": Scores([1.0, 2.0], ids=["d1", "d1"])})])
    with pytest.raises(InvalidParameterError, match="two or more runs"):
        fuse([a])
    with pytest.raises(InvalidParameterError, match="valid values"):
        fuse([a, a], method="condorcet")
    with pytest.raises(InvalidParameterError, match="weights"):
        fuse([a, a], method="wsum")
    with pytest.raises(InvalidParameterError, match="one number per run"):
        fuse([a, a], weights=[1.0])
    with pytest.raises(InvalidParameterError, match="'rrf' has no parameter 'normalize' \\(it is a parameter of combsum"):
        fuse([a, a], method="rrf", normalize="minmax")
    with pytest.raises(InvalidParameterError, match="'combsum' has no parameter 'rrf_k' \\(it is a parameter of rrf\\)"):
        fuse([a, a], method="combsum", rrf_k=10)
