"""Which files of a model folder a command that writes models owns: what transformers,
sentence-transformers and salience's trainers, distillers and compressors save. Writing over an
earlier output replaces these and keeps every other file there, the user's
(:func:`salience.io.files.atomic_directory` with ``owned``)."""

from __future__ import annotations

from salience.io.files import owned_files

__all__ = ["MODEL_FILES", "owns_model_file"]

#: glob patterns of the files a model save writes (see :func:`salience.io.files.owned_files`)
MODEL_FILES = (
    # weights in every format a save or an export writes, stale ones included
    "*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json", "*.onnx", "*.gguf", "*.pt", "*.npy",
    "*.h5", "*.msgpack", "*.ot", "onnx/*", "openvino/*",
    # configuration and tokenizer files (transformers)
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "tokenizer.model",
    "special_tokens_map.json", "added_tokens.json", "vocab.txt", "vocab.json", "merges.txt", "chat_template.jinja",
    "chat_template.json", "spiece.model", "sentencepiece.bpe.model",
    # sentence-transformers' modules and model card
    "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "[0-9]_*/*", "README.md",
    # salience's own records: which trainer, distiller or compressor wrote the folder
    "bi.json", "cross.json", "static.json", "salience-*.json",
)

owns_model_file = owned_files(MODEL_FILES)
