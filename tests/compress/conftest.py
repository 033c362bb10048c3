import numpy as np
import pytest


@pytest.fixture
def model_folder(tmp_path):
    """A tiny LLaMA saved with a word-level tokenizer over w0..w62, and a text file of 400 such
    words: (model folder, text file)."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    words = ["[UNK]"] + [f"w{i}" for i in range(63)]
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    core.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")
    from tests.compress.models import tiny_llama

    tiny_llama(max_position_embeddings=256).save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    rng = np.random.default_rng(0)
    (tmp_path / "text.txt").write_text(" ".join(f"w{i}" for i in rng.integers(0, 63, 400)))
    return tmp_path / "model", tmp_path / "text.txt"
