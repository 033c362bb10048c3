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
