"""A tiny LLaMA for the compression tests: mechanics, not quality."""


def tiny_llama(seed=0, **overrides):
    import torch
    import transformers

    torch.manual_seed(seed)
    config = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, **overrides}
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).eval()
