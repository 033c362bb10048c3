"""A tiny causal LM and word-level tokenizer built in the test (no download): the LM judges'
tests and the contract test share it."""

import functools

WORDS = ["[UNK]", "Query", "Passage", "Is", "the", "passage", "relevant", "to", "query", "Answer", "Yes", "or", "No",
         ":", "?", ".", "Please", "write", "a", "question", "that", "this", "answers", "Question", "cats", "dogs",
         "sleep", "bark", "fish", "swim", "A", "B", "C", "D", "Which", "more", "most", "N", "/", "[", "]", "1", "2",
         "3", "4"]


@functools.lru_cache(maxsize=1)
def tiny_lm():
    """(model, tokenizer): a 2-layer Llama over the words above, seeded."""
    import tokenizers
    import torch
    import transformers

    core = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    core.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(config).eval(), tok


def save_tiny_lm(folder):
    """The tiny LM and its tokenizer saved as a transformers folder (what --model and --lm load)."""
    model, tokenizer = tiny_lm()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


ENCODER_WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[unused0]", "heat", "flow", "wing", "shock", "wave", "cell",
                 "protein", "membrane", "stock", "price", "market", "the", "of", "a", "in"]


def tiny_encoder_folder(path):
    """A 2-layer BERT sentence encoder over the words above (mean pooling, normalised), saved
    as a sentence-transformers folder with a fast tokenizer that adds [CLS] and [SEP]; seeded."""
    import json
    from pathlib import Path

    import tokenizers
    import torch
    import transformers

    path = Path(path)
    vocab = {w: i for i, w in enumerate(ENCODER_WORDS)}
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    core.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]",
                                               cls_token="[CLS]", sep_token="[SEP]")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(ENCODER_WORDS), hidden_size=16, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    transformers.BertModel(config).eval().save_pretrained(path)
    tok.save_pretrained(path)
    (path / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "", "type": "Transformer"},
                                                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "Pooling"},
                                                   {"idx": 2, "name": "2", "path": "2_Normalize", "type": "Normalize"}]))
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    (path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 64}))
    return path


def tiny_cross_folder(path):
    """The tiny encoder above with an untrained one-output scoring head: a cross-encoder folder."""
    from pathlib import Path

    import transformers

    path = Path(path)
    encoder = tiny_encoder_folder(path.parent / f"{path.name}-encoder")
    transformers.BertForSequenceClassification.from_pretrained(encoder, num_labels=1).save_pretrained(path)
    transformers.AutoTokenizer.from_pretrained(encoder).save_pretrained(path)
    return path
