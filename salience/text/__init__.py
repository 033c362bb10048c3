"""Text processing shared by every domain: tokenizing, stop words, stemming."""

from salience.text.languages import get_stopwords
from salience.text.stopwords import STOPWORDS
from salience.text.tokenize import DEFAULT_PATTERN, TermEncoder, Tokenizer

__all__ = ["Tokenizer", "TermEncoder", "DEFAULT_PATTERN", "STOPWORDS", "get_stopwords"]
