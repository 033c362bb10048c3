"""Reading and writing corpora, runs and indexes; every write is atomic."""

from salience.io.files import atomic_write_bytes, atomic_write_text, iter_jsonl, iter_text_lines

__all__ = ["atomic_write_bytes", "atomic_write_text", "iter_jsonl", "iter_text_lines"]
