"""Request bodies of the HTTP service (pydantic): unknown fields are refused, and types are
strict (a number in quotes is not a number). Limits that depend on the service's settings
(:class:`~salience.server.app.Limits`) are checked by the endpoints."""

from __future__ import annotations

from typing import Any, Literal

from salience.exceptions import MissingDependencyError
from salience.extras import install_hint

try:
    from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, field_validator
except ImportError:  # the service's own extra
    raise MissingDependencyError(f"the HTTP service needs FastAPI and pydantic: {install_hint('server')}") from None

__all__ = ["AnswerRequest", "SearchRequest", "ExplainRequest", "RerankRequest", "TextRequest", "FuseRequest", "AddRequest",
           "DeleteRequest"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HybridOptions(_Strict):
    dense: StrictStr = Field(description="name of a served dense index")
    fusion: StrictStr = Field("minmax", description="a fusion method (rrf, combmnz, borda, ...), or minmax / zscore: "
                                                    "the weighted sum of scores so normalised (the library's default)")
    weight: StrictFloat | StrictInt | Literal["auto"] = Field(
        "auto", description="the dense run's weight from 0 to 1, the BM25 run's 1 - weight; auto: 0.2 with a static "
                            "encoder, 0.5 otherwise (Hybrid's default)")

    @field_validator("weight")
    @classmethod
    def _in_unit_interval(cls, value):
        if value != "auto" and not 0 <= value <= 1:
            raise ValueError("weight must be in [0, 1] or 'auto'")
        return value


class SearchRequest(_Strict):
    query: StrictStr = Field(min_length=1)
    k: StrictInt = Field(10, ge=1)
    where: dict[str, Any] | None = Field(None, description="metadata filter, as `salience search query --where`")
    explain: StrictBool = Field(False, description="BM25 term contributions and highlights")
    hybrid: HybridOptions | None = None
    allow_partial: StrictBool = Field(False, description="a sharded index: answer from the shards that answer, "
                                      "flagged partial, instead of an error when one does not")


class ExplainRequest(_Strict):
    query: StrictStr = Field(min_length=1)
    id: StrictStr = Field(min_length=1)


class Passage(_Strict):
    id: StrictStr = Field(min_length=1)
    text: StrictStr


#: a method's own parameters, as the library takes them (salience methods lists each method's)
_PARAMS = Field(None, description="the method's own parameters by name (GET /methods lists them)")


class RerankRequest(_Strict):
    query: StrictStr = Field(min_length=1)
    passages: list[Passage] | None = Field(None, description="texts to score (or ids of the index)")
    ids: list[StrictStr] | None = Field(None, description="documents of the index to score")
    index: StrictStr | None = Field(None, description="the index whose scorer judges (default: the only one)")
    algorithm: StrictStr | None = Field(None, description="a rerank algorithm the judge's scores drive (default: the "
                                                          "scores sorted)")
    params: dict[StrictStr, Any] | None = Field(None, description="the algorithm's own parameters by name")


class TextRequest(_Strict):
    text: StrictStr = Field(min_length=1)
    k: StrictInt = Field(10, ge=1, description="keyphrases")
    sentences: StrictInt = Field(3, ge=1, description="summary sentences")
    method: StrictStr | None = None
    tier: StrictStr | None = Field(None, description="keyphrases: fast (the default) or best, instead of a method")
    language: StrictStr = "auto"
    params: dict[StrictStr, Any] | None = _PARAMS


class VerifyRequest(_Strict):
    unit: StrictStr = Field("sentences", description="the kind of unit verified: sentences (a summary's), "
                                                     "keyphrases, features (a served BM25 index's document words) or "
                                                     "passages (a served index's results, answered by --lm)")
    text: StrictStr | None = Field(None, min_length=1, description="sentences, keyphrases: the text")
    index: StrictStr | None = Field(None, description="features: the served index")
    query: StrictStr | None = Field(None, min_length=1, description="features: the query; passages: the question")
    id: StrictStr | None = Field(None, min_length=1, description="features: the document whose words are verified")
    response: StrictStr | None = Field(None, min_length=1, description="passages: the answer measured (default: the "
                                                                      "served language model's own)")
    method: StrictStr | None = Field(None, description="the scorer verified (a summarize or a keywords method)")
    language: StrictStr = "auto"
    k: StrictInt = Field(20, ge=1, description="keyphrases: how many are extracted and verified")
    outcome: StrictStr = Field("search", description="keyphrases: search (the text searched by its title among "
                                                     "collection) or embedding")
    title: StrictStr | None = Field(None, description="keyphrases: the title searched (default: the first sentence)")
    collection: list[StrictStr] | None = Field(None, description="keyphrases: the other documents the text is "
                                                                 "searched among")
    steps: StrictInt = Field(10, ge=1, le=100)
    random: StrictInt = Field(20, ge=2, le=200, description="random orders the scores are compared with")
    seed: StrictInt = Field(0, ge=0)
    alpha: float = Field(0.01, gt=0, lt=1)


def _answer_default(name: str):
    from salience.answer import ANSWER_OPTIONS

    return ANSWER_OPTIONS[name]


class AnswerRequest(_Strict):
    """The answer path's options (:func:`salience.answer.answer`; defaults from its table)."""

    index: StrictStr = Field(description="the served index (BM25, with stored documents) the passages come from")
    question: StrictStr = Field(min_length=1)
    k: StrictInt = Field(_answer_default("k"), ge=1, description="passages retrieved")
    rerank: StrictStr | None = Field(None, description="a judge that reorders them (an LM judge asks the served --lm)")
    budget: StrictInt | None = Field(None, ge=1, description="the passages' tokens packed into this many")
    pack_method: StrictStr = _answer_default("pack_method")
    sort: StrictStr | None = Field(None, description="attention: the passage the question reads most next to it")
    sort_rounds: StrictInt = Field(_answer_default("sort_rounds"), ge=1, le=5)
    kv_policy: StrictStr | None = Field(None, description="a kv policy evicting the prompt's cache before answering")
    kv_budget: StrictFloat | StrictInt | None = Field(None, gt=0, description="a fraction in (0, 1] or a token count")
    cite: StrictStr | None = Field(_answer_default("cite"), description="the context method of the citations "
                                                                       "(null: none)")
    citations: StrictInt = Field(_answer_default("citations"), ge=1, le=20)
    sentences: StrictInt = Field(_answer_default("sentences"), ge=1, le=20)
    max_new_tokens: StrictInt = Field(_answer_default("max_new_tokens"), ge=1, le=512)
    lookup_tokens: StrictInt = Field(_answer_default("lookup_tokens"), ge=0, le=64,
                                     description="prompt lookup decoding: tokens copied from the passages checked in "
                                                 "the same pass as the next (0: plain greedy)")
    random_draws: StrictInt = Field(_answer_default("random_draws"), ge=0, le=20)
    seed: StrictInt = Field(_answer_default("seed"), ge=0)
    params: dict[StrictStr, dict[StrictStr, Any]] | None = Field(
        None, description="the named methods' own parameters, by option: rerank, kv_policy, cite")


class FuseRequest(_Strict):
    runs: list[dict[StrictStr, dict[StrictStr, StrictFloat | StrictInt]]] = Field(min_length=2)
    method: StrictStr = "rrf"
    normalize: StrictStr | None = None
    weights: list[StrictFloat | StrictInt] | None = None
    k: StrictInt | None = Field(None, ge=1, description="results kept per query (default: all)")
    params: dict[StrictStr, Any] | None = _PARAMS


class Document(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: StrictStr = Field(min_length=1)


class AddRequest(_Strict):
    documents: list[Document] = Field(min_length=1)
    commit: StrictBool = True


class DeleteRequest(_Strict):
    ids: list[StrictStr] = Field(min_length=1)
    commit: StrictBool = True
