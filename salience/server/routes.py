"""The service's endpoints as three routers over one :class:`~salience.server.service.Service`:
reads (health, methods, limits, indexes, search, explain), text (rerank, keyphrases, summary,
fusion) and writes (documents, delete, commit, merge), the last behind the API key (a route
dependency, checked before the body is validated)."""

import os
from dataclasses import asdict

from salience.core.params import surface_params
from salience.exceptions import SalienceError
from salience.server.errors import APIError
from salience.server.indexes import explained

__all__ = ["read_router", "text_router", "write_router", "prepared_search"]


def read_router(service):
    from fastapi import APIRouter

    from salience.extras import installed_version
    from salience.server.models import ExplainRequest, SearchRequest

    router = APIRouter()

    @router.get("/health")
    def health():
        # 503 while an index is not served as its folder holds it (a failed reopen, a dead shard):
        # a load balancer then stops sending this process work
        from fastapi.responses import JSONResponse

        rows = [h.describe() for h in service.served.values()]
        healthy = all("error" not in row for row in rows)
        body = {"status": "ok" if healthy else "stale", "version": installed_version(), "process": os.getpid(), "indexes": rows,
                "language_model": service.language_model_name}
        return body if healthy else JSONResponse(body, status_code=503)

    @router.get("/methods")
    async def methods(domain: str | None = None):
        from salience.core.base import method_rows

        try:
            return {"methods": method_rows(domain)}
        except SalienceError as err:
            raise APIError(404, "unknown_domain", str(err), "domain") from None

    @router.get("/limits")
    async def show_limits():
        return asdict(service.limits)

    @router.get("/indexes")
    async def list_indexes():
        return {"indexes": [h.describe() for h in service.served.values()]}

    @router.post("/indexes/{name}/search")
    async def search(name: str, body: SearchRequest):
        answer, on_loop = prepared_search(service, name, body)
        if on_loop:
            # BM25 over a bounded query and k takes well under a millisecond: answered on the event
            # loop, where a thread pool hop would cost more, and its threads would take turns
            # with the loop for the GIL (tail latency under load)
            return service.reply(answer())
        return await service.run(answer)  # a dense or hybrid search encodes the query: off the loop

    @router.post("/indexes/{name}/explain")
    async def explain(name: str, body: ExplainRequest):
        handle = service.index_named(name)
        service.within("query", body.query, service.limits.max_query_chars)
        if not handle.index_class.explains_terms:
            raise APIError(422, "invalid_field", "explain shows BM25 term contributions: use a BM25 index.", "name")
        engine = handle.reader
        document = engine.document(body.id) if engine.store_documents else {}
        [(explanation, highlights)] = explained(engine, body.query, [body.id], [document])
        return {**explanation, "highlights": highlights}

    return router


def prepared_search(service, name: str, body):
    """A search request checked against the service's limits and the index's kind: (a function
    that answers it, whether it may run on the event loop). ``APIError`` for a request refused."""
    handle = service.index_named(name)
    service.within("query", body.query, service.limits.max_query_chars)
    service.within("k", body.k, service.limits.max_k)
    engine, generation = handle.snapshot  # one committed state for the whole request
    searcher = engine
    if body.hybrid is not None:
        dense = service.index_named(body.hybrid.dense)
        if handle.index_class.hybrid_role != "lexical" or dense.index_class.hybrid_role != "dense":
            raise APIError(422, "invalid_field", "hybrid search fuses a BM25 index (the path) with a dense index "
                           "(hybrid.dense).", "hybrid.dense")
        from salience.search import Hybrid
        from salience.search.hybrid import hybrid_options

        weight = body.hybrid.weight if body.hybrid.weight == "auto" else float(body.hybrid.weight)
        searcher = Hybrid(engine, dense.reader, weight=weight, **hybrid_options(body.hybrid.fusion))
    if body.allow_partial and not handle.index_class.answers_partially:
        raise APIError(422, "invalid_field", "allow_partial is for a sharded index.", "allow_partial")
    if body.explain and not handle.index_class.explains_terms:
        raise APIError(422, "invalid_field", "explain shows BM25 term contributions: search a BM25 index.",
                       "explain")

    def answer():
        extra = {}
        if handle.index_class.answers_partially:
            # a shard that does not answer: an error (503), or with allow_partial the others'
            # results flagged, never a silently smaller answer
            found = engine.search_batch([body.query], k=body.k, where=body.where,
                                        allow_partial=body.allow_partial)
            results = found[0]
            if body.allow_partial:
                extra = {"partial": found.partial, "missing_shards": found.missing_shards}
        else:
            results = searcher.search(body.query, k=body.k, where=body.where)
        rows = []
        for rank, (doc_id, score) in enumerate(results, start=1):
            row = {"rank": rank, "id": doc_id, "score": score}
            if getattr(engine, "store_documents", False):
                try:
                    row["document"] = engine.document(doc_id)
                except SalienceError:  # a sharded index whose shard died since it answered
                    if not body.allow_partial:
                        raise
                    row["document"] = None
            rows.append(row)
        if body.explain:  # all the results at once: each query term's postings read once
            found = explained(engine, body.query, [row["id"] for row in rows],
                              [row.get("document", {}) for row in rows])
            for row, (explanation, highlights) in zip(rows, found):
                row["explanation"], row["highlights"] = explanation, highlights
        return {"index": name, "generation": generation, "query": body.query, **extra, "results": rows}

    on_loop = body.hybrid is None and not handle.index_class.encodes_queries and not handle.remote
    return answer, on_loop


def text_router(service):
    from fastapi import APIRouter

    from salience.server.models import AnswerRequest, FuseRequest, RerankRequest, TextRequest, VerifyRequest

    router = APIRouter()

    @router.post("/rerank")
    async def rerank(body: RerankRequest):
        service.within("query", body.query, service.limits.max_query_chars)
        if (body.passages is None) == (body.ids is None):
            raise APIError(422, "invalid_field", "send passages (id and text) or ids of the index, one of them.",
                           "passages")
        items = body.passages if body.passages is not None else body.ids
        field = "passages" if body.passages is not None else "ids"
        service.within(field, items, service.limits.max_batch)
        if body.passages is not None:
            for i, p in enumerate(body.passages):
                service.within(f"passages.{i}.text", p.text, service.limits.max_text_chars)
        if body.index is None and len(service.served) != 1 and (body.ids is not None or service.passage_judge is None):
            raise APIError(422, "invalid_field", f"name the index whose scorer judges ({', '.join(service.served)}).", "index")
        handle = service.index_named(body.index) if body.index is not None else (next(iter(service.served.values())) if service.served else None)
        if handle is not None and not handle.index_class.scores_by_id and (
                body.ids is not None or service.passage_judge is None):
            raise APIError(422, "invalid_field", f"{handle.name} is a sharded index: rerank with a BM25 or dense "
                           "index, or --judge encoder or cross.", "index")

        if body.params and body.algorithm is None:
            raise APIError(422, "invalid_field", "params go to the rerank algorithm: name it (algorithm).", "params")

        def answer():
            if body.ids is not None:
                ids = list(body.ids)

                def score(query, items):  # the index scores its own documents by id
                    scores = handle.reader.score(query, list(items))
                    value_of = dict(zip(scores.ids, scores.values))
                    return [value_of[i] for i in items]
                texts, judged_by = ids, handle.name
            else:
                ids = [p.id for p in body.passages]
                texts = [p.text for p in body.passages]
                if service.passage_judge is not None:
                    score, judged_by = service.passage_judge.scores, service.passage_judge_name
                elif handle is not None and handle.index_class.explains_terms:
                    score, judged_by = handle.reader.score_texts, handle.name
                else:
                    raise APIError(422, "invalid_field", "scoring posted texts needs a BM25 index or --judge encoder or cross.",
                                   "index")
            if body.algorithm is not None:
                return {"judge": judged_by, "algorithm": body.algorithm,
                        "results": _reranked(body.query, ids, texts, score, judged_by, body.algorithm, body.params)}
            values = score(body.query, texts)
            order = sorted(range(len(ids)), key=lambda i: (-float(values[i]), i))
            return {"judge": judged_by, "results": [{"rank": r, "id": ids[i], "score": float(values[i])}
                                                    for r, i in enumerate(order, start=1)]}

        return await service.run(answer)

    @router.post("/keyphrases")
    async def keyphrases(body: TextRequest):
        service.within("text", body.text, service.limits.max_text_chars)
        service.within("k", body.k, service.limits.max_k)
        from salience.keywords import extract_keyphrases

        def answer():
            from salience.keywords.tiers import tier_method

            own = surface_params(body.params, {"k": "the field k", "language": "the field language"})
            method, params = tier_method(body.method, body.tier, {"language": body.language, **own})
            phrases = extract_keyphrases(body.text, k=body.k, method=method, **params)
            return {"method": method, "tier": body.tier, "keyphrases": [{"phrase": p, "score": v} for p, v in phrases]}

        return await service.run(answer)

    @router.post("/summary")
    async def summary(body: TextRequest):
        service.within("text", body.text, service.limits.max_text_chars)
        service.within("sentences", body.sentences, service.limits.max_k)
        from salience.summarize import summarize
        from salience.text.sentences import split_sentences

        def answer():
            sentences = split_sentences(body.text)
            if not sentences:
                raise APIError(422, "invalid_field", "the text has no sentences.", "text")
            result = summarize([s.text for s in sentences], sentences=body.sentences, method=body.method or "lexrank",
                               language=body.language, **surface_params(body.params, {
                                   "sentences": "the field sentences", "language": "the field language"}))
            chosen = set(result.indices)
            weight = dict(zip(result.scores.ids, result.scores.values))
            return {"method": body.method or "lexrank", "summary": result.text,
                    "sentences": [{"index": i, "text": s.text, "start": s.start, "end": s.end,
                                   "score": float(weight.get(i, 0.0)), "selected": i in chosen}
                                  for i, s in enumerate(sentences)]}

        return await service.run(answer)

    @router.post("/answer")
    async def answer(body: AnswerRequest):
        """The answer path: ``question`` answered by the service's language model (``--lm``)
        from a served index's passages, with its citations and their verification
        (:func:`salience.answer.answer`)."""
        if service.language_model is None:
            raise APIError(422, "invalid_field", "this service holds no language model to answer with: start it with "
                           "--lm MODEL (salience search answer runs without it).", "question")
        handle = service.index_named(body.index)
        service.within("question", body.question, service.limits.max_query_chars)
        service.within("k", body.k, service.limits.max_k)
        if not getattr(handle.reader, "store_documents", False):
            raise APIError(422, "invalid_field", f"index {body.index!r} stores no documents: the model reads their "
                           "texts.", "index")

        def run():
            from salience.answer import answer as answer_path

            model, tokenizer = service.language_model
            options = body.model_dump(exclude={"index", "question"})
            result = answer_path(handle.reader, body.question, model=model, tokenizer=tokenizer, **options)
            return {**result.to_dict(), "model": service.language_model_name}

        return await service.run(run)

    @router.post("/verify")
    async def verify(body: VerifyRequest):
        """Was the importance real? The removal protocol over the units this service scores from
        a posted text: ``sentences`` (a summarizer's sentence scores) and ``keyphrases`` (an
        extractor's, the text searched by its title among ``collection``, or embedded); and
        ``features``: the words of a served BM25 index's document, attributed to its score for
        ``query`` (``method``: an explain method, default kernel_shap) and deleted best first."""
        from salience.core.base import create, method_names

        served = ("sentences", "keyphrases", "features", "passages")
        if body.unit not in served:
            raise APIError(422, "invalid_field", f"unit {body.unit!r} is not verified here: this service verifies "
                           f"{', '.join(served)} (the verifiers: {', '.join(method_names('verify'))}; the others run "
                           "from salience verify).", "unit")
        needed = {"features": ("index", "query", "id"), "passages": ("index", "query")}.get(body.unit, ("text",))
        for name in needed:
            if getattr(body, name) is None:
                raise APIError(422, "invalid_field", f"unit {body.unit!r} needs {name}.", name)
        if body.text is not None:
            service.within("text", body.text, service.limits.max_text_chars)
        if body.collection is not None:
            service.within("collection", body.collection, service.limits.max_batch)
            for i, other in enumerate(body.collection):
                service.within(f"collection.{i}", other, service.limits.max_text_chars)
        service.within("k", body.k, service.limits.max_k)
        options = {"steps": body.steps, "n_random": body.random, "seed": body.seed, "alpha": body.alpha}

        def sentences():
            from salience.summarize import score_sentences
            from salience.text.sentences import split_sentences

            units = [s.text for s in split_sentences(body.text)]
            scores = score_sentences(units, method=body.method or "lexrank", language=body.language)
            result = create("verify", "sentences", language=body.language, **options).verify(scores, sentences=units)
            result.method = body.method or "lexrank"
            return result.to_dict()

        def keyphrases():
            from salience.keywords import extract_keyphrases
            from salience.text.languages import detect_language

            language = detect_language(body.text) if body.language == "auto" else body.language
            from salience.keywords.tiers import tier_method

            method, _ = tier_method(body.method, None, {})  # no method: the fast tier's, as extract_keyphrases
            scores = extract_keyphrases(body.text, k=body.k, method=method, language=language)
            if not len(scores):
                raise APIError(422, "invalid_field", "the text has no keyphrase candidate to verify.", "text")
            verifier = create("verify", "keyphrases", outcome=body.outcome, language=language, **options)
            result = verifier.verify(scores, document=body.text, title=body.title, collection=body.collection)
            result.method = method
            return result.to_dict()

        if body.unit in ("features", "passages"):
            handle = service.index_named(body.index)
            service.within("query", body.query, service.limits.max_query_chars)
            if not handle.index_class.explains_terms or not handle.reader.store_documents:
                raise APIError(422, "invalid_field", f"{body.unit} are verified on a BM25 index that stores its "
                               "documents.", "index")
        if body.unit == "passages" and service.language_model is None:
            raise APIError(422, "invalid_field", "this service holds no language model to answer from passages: start "
                           "it with --lm MODEL (salience verify passages runs without it).", "unit")

        def passages():
            model, tokenizer = service.language_model
            engine = handle.reader
            hits = engine.search(body.query, k=min(body.k, 10))
            if not len(hits):
                raise APIError(422, "invalid_field", "the query matches no document: nothing to verify.", "query")
            from salience.io.documents import document_text

            texts = {doc_id: document_text(engine, doc_id) or str(doc_id) for doc_id in hits.ids}
            verifier = create("verify", "passages", **options)
            result = verifier.verify(hits, passages=texts, question=body.query, model=model, tokenizer=tokenizer,
                                     response=body.response)
            result.method = f"{body.index} (bm25), answered by {service.language_model_name}"
            return result.to_dict()

        def features():
            from salience.explain.search import verify_search_explanation

            verifier = create("verify", "features", **options)
            return verify_search_explanation(handle.reader, body.query, body.id, method=body.method or "kernel_shap",
                                             seed=body.seed, verifier=verifier).to_dict()

        return await service.run({"sentences": sentences, "keyphrases": keyphrases, "features": features,
                                  "passages": passages}[body.unit])

    @router.post("/fuse")
    async def fuse(body: FuseRequest):
        service.within("runs", body.runs, service.limits.max_batch)
        for i, run_ in enumerate(body.runs):
            service.within(f"runs.{i}", run_, service.limits.max_batch)
            for subject, ranking in run_.items():
                service.within(f"runs.{i}.{subject[:40]}", ranking, service.limits.max_batch * 10)
        if body.k is not None:
            service.within("k", body.k, service.limits.max_k)
        from salience import fuse as fuse_runs

        def answer():
            fused = fuse_runs(body.runs, method=body.method, normalize=body.normalize, weights=body.weights,
                              missing_subjects="empty", **surface_params(body.params, {
                                  "normalize": "the field normalize", "weights": "the field weights",
                                  "missing_subjects": "nothing: the service fuses a subject a run lacks as empty"}))
            return {"method": body.method, "results": {q: dict(list(s.sorted())[: body.k]) for q, s in fused.items()}}

        return await service.run(answer)

    return router


def _reranked(query: str, ids: list, texts: list, score, judged_by: str, algorithm: str, params) -> list[dict]:
    """``ids`` reordered by a rerank ``algorithm`` (built with ``params``) that ``score``
    (query, texts -> one number each) drives; each result's score is its place from the bottom."""
    import numpy as np

    from salience.core.judges import ScorerJudge
    from salience.core.scores import Scores
    from salience.search.rerank import rerank

    judge = ScorerJudge(score)  # a scoring judge, as rerank() takes one
    judge.method = judged_by
    first = Scores(np.arange(len(ids), 0, -1, dtype=np.float64), ids)  # the order posted
    ranked = rerank(query, first, judge, dict(zip(ids, texts)), algorithm=algorithm, depth=len(ids),
                    **surface_params(params))
    return [{"rank": r, "id": i, "score": float(v)} for r, (i, v) in enumerate(zip(ranked.ids, ranked.values), start=1)]


def write_router(service):
    from fastapi import APIRouter, Depends

    from salience.server.models import AddRequest, DeleteRequest

    router = APIRouter(dependencies=[Depends(service.check_key)])

    def writable(name: str, commit: bool = True):
        handle = service.index_named(name)
        if not handle.index_class.writable_in_place:
            raise APIError(409, "read_only", f"{name} is a sharded index, served read-only: change it with salience "
                           "search add or salience search delete (each commits) and restart the service.", "name")
        if not commit and handle.shared:
            raise APIError(409, "pending_needs_one_worker", "this service runs several worker processes: a change "
                           "left uncommitted would live in one of them only; send commit: true.", "commit")
        return handle

    @router.post("/indexes/{name}/documents")
    async def add_documents(name: str, body: AddRequest):
        handle = writable(name, body.commit)
        service.within("documents", body.documents, service.limits.max_batch)
        documents = [d.model_dump() for d in body.documents]
        for i, doc in enumerate(documents):
            service.within(f"documents.{i}", "".join(v for v in doc.values() if isinstance(v, str)), service.limits.max_text_chars)

        def change(index):
            index.add(documents)
            return {"added": len(documents)}

        return await service.run(lambda: handle.write(change, commit=body.commit))

    @router.post("/indexes/{name}/delete")
    async def delete_documents(name: str, body: DeleteRequest):
        handle = writable(name, body.commit)
        service.within("ids", body.ids, service.limits.max_batch)

        def change(index):
            index.delete(body.ids)  # an unknown id: 404 naming it, nothing deleted
            return {"deleted": len(set(body.ids))}

        return await service.run(lambda: handle.write(change, commit=body.commit))

    @router.post("/indexes/{name}/commit")
    async def commit(name: str):
        handle = writable(name)
        return await service.run(handle.commit)

    @router.post("/indexes/{name}/merge")
    async def merge(name: str):
        handle = writable(name)
        return await service.run(handle.merge)

    return router
