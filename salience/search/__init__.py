"""Search: BM25 variants over sparse matrices, and dense retrieval over sentence embeddings; both with
filters, segments and checksummed saves; BM25 also in shards searched by scatter-gather. Each is
an :class:`Index` (the interface the command line and the service use)."""

from salience.search.index import Index
from salience.search.segmented import SegmentedIndex
from salience.search.bm25 import BM25
from salience.search.explanation import Explanation, TermContribution
from salience.search.dense import Dense
from salience.search.hybrid import Hybrid
from salience.search.lm_judges import Judge, LMJudge
from salience.search.encoder_judge import EncoderJudge
from salience.search.cross_judge import CrossJudge
from salience.search.pack import Packing, ScoreCalibrator, pack
from salience.search.passage_pruning import PassagePruning, prune_passages
from salience.search.rerank import RerankAlgorithm, rerank, rerank_run
from salience.core.bm25_formulas import VARIANTS
from salience.search.shards import PartialResults, ShardedIndex
from salience.search.open import index_class, index_kind, open_index
from salience.io.documents import iter_documents, read_queries
from salience.search.verify_passages import PassageVerifier
from salience.search.attention_sort import attention_sort

__all__ = ["Index", "SegmentedIndex", "BM25", "Dense", "Hybrid", "open_index", "index_kind", "index_class", "pack", "Packing", "ScoreCalibrator", "Explanation", "TermContribution", "VARIANTS", "iter_documents", "read_queries", "rerank", "rerank_run",
           "RerankAlgorithm", "Judge", "LMJudge", "EncoderJudge", "CrossJudge", "ShardedIndex", "PartialResults",
           "prune_passages", "PassagePruning", "PassageVerifier", "attention_sort"]
