"""A sharded BM25 index scores as one index over all its documents (global statistics), built
by local processes or Ray tasks, held in this process or by Ray actors, and says so when a
shard does not answer."""

import json
from pathlib import Path

import numpy as np
import pytest

from salience.exceptions import DuplicateIdError, IdMismatchError, InvalidParameterError, ShardUnavailableError
from salience.search import BM25
from salience.search.shards import PartialResults, ShardedIndex, is_sharded_folder, shard_of
from tests.conftest import data_path

WORDS = ("heat flow wing boundary layer shock pressure laminar turbulent nozzle jet plate cylinder "
         "supersonic vortex drag lift buckling shell panel").split()


def _corpus(n, seed=0):
    rng = np.random.default_rng(seed)
    return [{"_id": f"d{i}", "title": " ".join(rng.choice(WORDS, 2)),
             "text": " ".join(rng.choice(WORDS, int(rng.integers(3, 40))))} for i in range(n)]


QUERIES = ["heat flow", "shock wave on a wing", "laminar boundary layer", "vortex drag of a jet", "unknownword"]


def _assert_same(single, sharded, queries, k=10):
    """Same scores for the same documents (float32 rounding apart); the same ranking where
    no two scores tie."""
    for a, b in zip(single.search_batch(queries, k=k), sharded.search_batch(queries, k=k)):
        assert len(a) == len(b)
        assert np.allclose(a.values, b.values, rtol=1e-6)
        da, db = dict(a), dict(b)
        for doc_id in set(da) & set(db):
            assert db[doc_id] == pytest.approx(da[doc_id], rel=1e-6)
        if len(a):  # above the last score, the same documents; at it, any of those tied there
            above = lambda d: {i for i, v in d.items() if v > a.values[-1] * (1 + 1e-6) + 1e-9}  # noqa: E731
            assert above(da) == above(db)


@pytest.mark.parametrize("variant", ["lucene", "bm25+", "bm25l", "atire"])
def test_shards_score_as_one_index(variant):
    docs = _corpus(300)
    single = BM25(variant=variant).fit(docs)
    sharded = ShardedIndex.build(docs, n_shards=3, variant=variant)
    assert sharded.n_docs == 300 and sharded.n_shards == 3
    # each shard alone would score differently: its own statistics are not the collection's
    alone = BM25(variant=variant).fit([d for d in docs if shard_of(d["_id"], 3) == 0])
    assert alone.search("heat flow", k=1).values[0] != pytest.approx(dict(single.search("heat flow", k=300))[
        alone.search("heat flow", k=1).ids[0]], rel=1e-6)
    _assert_same(single, sharded, QUERIES)


def test_routing_is_a_stable_hash():
    assert shard_of("d1", 4) == shard_of("d1", 4)
    assert [shard_of(f"d{i}", 4) for i in range(8)] == [__import__("zlib").crc32(f"d{i}".encode()) % 4 for i in range(8)]


def test_saved_shards_load_search_and_change(tmp_path):
    docs = _corpus(200, seed=3)
    out = tmp_path / "idx"
    built = ShardedIndex.build(docs, n_shards=4, out=out, n_jobs=2)
    assert is_sharded_folder(out) and sorted(p.name for p in out.iterdir()) == [
        "shard-000", "shard-001", "shard-002", "shard-003", "shards.json"]
    manifest = json.loads((out / "shards.json").read_text())
    assert sum(manifest["documents"]) == 200 and manifest["routing"] == "crc32"
    loaded = ShardedIndex.load(out)
    _assert_same(BM25().fit(docs), loaded, QUERIES)
    _assert_same(built, loaded, QUERIES)
    # the shards score with the collection's statistics from their packed postings, memory-mapped
    assert all(shard.index._packed is not None for shard in loaded._shards)
    assert loaded.document("d7")["text"] == docs[7]["text"]
    # add and delete go to the shards their ids route to; the statistics follow
    extra = _corpus(230, seed=4)[200:]
    for d in extra:
        d["_id"] = "x" + d["_id"]
    loaded.add(extra).delete(["d3", "d50"]).commit()
    expected = BM25().fit([d for d in docs if d["_id"] not in ("d3", "d50")] + extra)
    _assert_same(expected, loaded, QUERIES)
    _assert_same(expected, ShardedIndex.load(out), QUERIES)
    with pytest.raises(DuplicateIdError, match="'d7' is already in the index"):
        loaded.add([{"_id": "d7", "text": "again"}])
    with pytest.raises(IdMismatchError, match="unknown document id 'nope'"):
        loaded.delete(["d8", "nope"])
    assert "d8" in dict(loaded.search("".join(docs[8]["text"]), k=300))  # nothing was deleted
    loaded.merge()
    _assert_same(expected, loaded, QUERIES)


def test_bad_shard_counts_and_folders(tmp_path):
    with pytest.raises(InvalidParameterError, match="n_shards must be a positive integer"):
        ShardedIndex.build(_corpus(5), n_shards=0)
    with pytest.raises(InvalidParameterError, match="got no documents"):
        ShardedIndex.build(_corpus(2), n_shards=8)
    with pytest.raises(InvalidParameterError, match="got no documents"):
        ShardedIndex.build(_corpus(2), n_shards=8, out=tmp_path / "x")
    assert not (tmp_path / "x").exists()  # a failed build leaves nothing
    with pytest.raises(InvalidParameterError, match="k1"):
        ShardedIndex.build(_corpus(5), n_shards=2, k1=-1.0)
    with pytest.raises(DuplicateIdError):
        ShardedIndex.build(_corpus(5) + [{"_id": "d1", "text": "twice"}], n_shards=2)
    ShardedIndex.build(_corpus(20), n_shards=2, out=tmp_path / "ok")
    (tmp_path / "ok" / "shards.json").write_text("{not json")
    from salience.exceptions import CorruptIndexError

    with pytest.raises(CorruptIndexError, match="shards.json"):
        ShardedIndex.load(tmp_path / "ok")


@pytest.mark.parametrize("name", ["scifact", "npl", "cranfield"])
@pytest.mark.parametrize("n_shards", [2, 4])
def test_shared_sets_sharded_give_the_single_index_scores(name, n_shards):
    root = data_path("search", name)
    from salience.io.documents import read_queries

    queries = list(read_queries(root / "queries.jsonl").values())
    _assert_same(BM25().fit(root), ShardedIndex.build(root, n_shards=n_shards), queries)


def test_a_damaged_or_unlike_shard_is_named_at_load(tmp_path):
    from salience.exceptions import CorruptIndexError

    out = tmp_path / "idx"
    ShardedIndex.build(_corpus(60), n_shards=2, out=out)
    ShardedIndex.build(_corpus(60), n_shards=2, out=tmp_path / "other", k1=0.9)
    import shutil

    shutil.rmtree(out / "shard-001")
    shutil.copytree(tmp_path / "other" / "shard-001", out / "shard-001")  # built with another k1
    with pytest.raises(CorruptIndexError, match=r"shard-001: built with k1=0.9, the sharded index with k1=1.5"):
        ShardedIndex.load(out)
    ShardedIndex.build(_corpus(60), n_shards=2, out=out)
    postings = out / "shard-000" / "seg-000000" / "postings_tf_1.npy"
    postings.write_bytes(postings.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(CorruptIndexError, match="shard-000.*postings_tf_1.npy"):
        ShardedIndex.load(out)
    shutil.rmtree(out / "shard-001")
    with pytest.raises(CorruptIndexError, match="shard folder shard-001 is missing"):
        ShardedIndex.load(out)


def test_cli_index_query_and_evaluate_with_shards(tmp_path, capsys):
    from salience.cli import main

    root = data_path("search", "scifact")
    out = tmp_path / "sharded"
    assert main(["search", "index", str(root), "--shards", "3", "--out", str(out), "--n-jobs", "2", "--json"]) == 0
    built = json.loads(capsys.readouterr().out)
    assert built["shards"] == 3 and built["documents"] == 5183
    assert main(["search", "query", str(out), "cell membrane proteins", "-k", "5", "--json"]) == 0
    sharded = json.loads(capsys.readouterr().out)["results"]
    single = BM25().fit(root).search("cell membrane proteins", k=5)
    assert [r["id"] for r in sharded] == single.ids
    assert np.allclose([r["score"] for r in sharded], single.values, rtol=1e-6)
    metrics = "ndcg@10,recall@100"
    assert main(["search", "evaluate", str(root), "--metrics", metrics, "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert main(["search", "evaluate", str(root), "--metrics", metrics, "--shards", "4", "--json"]) == 0
    split = json.loads(capsys.readouterr().out)
    assert split["ndcg@10"] == pytest.approx(whole["ndcg@10"], abs=1e-6)
    assert split["recall@100"] == pytest.approx(whole["recall@100"], abs=1e-6)
    assert main(["search", "index", str(root), "--shards", "2", "--dense", "--out", str(tmp_path / "d")]) == 2
    assert "--shards splits a BM25 index" in capsys.readouterr().err


@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time under pytest -n
def _wait_until_dead(ray, actor, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(actor.pid.remote(), timeout=5)
        except Exception:  # noqa: BLE001 - RayActorError once it is dead
            return
        time.sleep(0.05)
    raise AssertionError("the killed actor still answers")


def test_shards_in_ray_actors_scatter_gather_and_report_a_dead_shard(tmp_path):
    ray = pytest.importorskip("ray", reason="shards in Ray actors need ray: pip install 'salience[ray]'")
    docs = _corpus(300, seed=5)
    out = tmp_path / "idx"
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    try:
        ShardedIndex.build(docs, n_shards=3, out=out, n_jobs=3, executor="ray")  # built by Ray tasks
        remote = ShardedIndex.load(out, executor="ray", timeout=30)
        pids = {ray.get(shard.actor.pid.remote()) for shard in remote._shards}
        assert len(pids) == 3  # each shard in a worker process of its own
        _assert_same(BM25().fit(docs), remote, QUERIES)
        assert remote.document("d9")["title"] == docs[9]["title"]
        ray.kill(remote._shards[1].actor)
        _wait_until_dead(ray, remote._shards[1].actor)  # ray.kill returns before the actor is gone
        with pytest.raises(ShardUnavailableError, match="shard 1 of 3 did not answer"):
            remote.search("heat flow")
        partial = remote.search_batch(["heat flow"], k=300, allow_partial=True)
        assert isinstance(partial, PartialResults) and partial.partial and partial.missing_shards == [1]
        expected = {doc_id for doc_id in dict(BM25().fit(docs).search("heat flow", k=300)) if shard_of(doc_id, 3) != 1}
        assert set(partial[0].ids) == expected
    finally:
        ray.shutdown()


def test_a_ray_address_that_cannot_be_reached_is_an_error_within_the_timeout(tmp_path, capsys):
    import time

    from salience.cli import main
    from salience.exceptions import ClusterUnreachableError, InvalidParameterError
    from salience.parallel import join_ray

    import socket

    def never_answers(address, timeout):
        time.sleep(timeout)
        raise socket.timeout("timed out")

    started = time.monotonic()
    with pytest.MonkeyPatch.context() as patch:  # a host that drops packets: only the timeout ends the wait
        patch.setattr(socket, "create_connection", never_answers)
        with pytest.raises(ClusterUnreachableError, match=r"'10.255.255.1:6379' cannot be reached within 0.5 s"):
            join_ray(None, "10.255.255.1:6379", timeout=0.5)
    assert time.monotonic() - started < 5

    class NotRay:  # an address that answers, but not as a Ray cluster: Ray's ConnectionError, named
        @staticmethod
        def init(**options):
            raise ConnectionError("Failed to connect to Ray cluster")

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(ClusterUnreachableError, match="answered but is not a Ray cluster"):
            join_ray(NotRay, f"127.0.0.1:{port}")
    with pytest.raises(ClusterUnreachableError, match="127.0.0.1:1"):
        join_ray(None, "ray://127.0.0.1:1")  # nothing listens there
    with pytest.raises(InvalidParameterError, match="HOST:PORT"):
        join_ray(None, "somewhere")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"_id": "a", "text": "heat"}\n{"_id": "b", "text": "lift"}\n')
    pytest.importorskip("ray", reason="pip install 'salience[ray]'")
    code = main(["search", "index", str(corpus), "--shards", "2", "--executor", "ray", "--address", "127.0.0.1:1",
                 "--out", str(tmp_path / "ix")])
    assert code != 0 and "cannot be reached" in capsys.readouterr().err and not (tmp_path / "ix").exists()


def test_open_index_reads_each_kind_from_its_manifest(tmp_path):
    """One way to open an index: the folder says what it holds."""
    from salience.search import BM25, ShardedIndex, index_kind, open_index

    docs = [{"id": f"d{i}", "text": t} for i, t in enumerate(["cats sleep", "dogs bark", "fish swim", "cats hunt",
                                                              "birds sing", "mice hide", "cats purr", "owls hoot"])]
    BM25().index(docs).save(tmp_path / "plain")
    corpus = tmp_path / "docs.jsonl"
    import json

    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    ShardedIndex.write(corpus, tmp_path / "sharded", n_shards=2)
    assert index_kind(tmp_path / "plain") == "bm25" and index_kind(tmp_path / "sharded") == "sharded"
    plain, sharded = open_index(tmp_path / "plain"), open_index(tmp_path / "sharded")
    assert isinstance(plain, BM25) and isinstance(sharded, ShardedIndex)
    assert plain.search("cats", k=2).ids == sharded.search("cats", k=2).ids
    # what the command line and the service may ask of each, read from the class without loading it
    from salience.search import Dense, index_class

    assert index_class(tmp_path / "plain") is BM25 and index_class(tmp_path / "sharded") is ShardedIndex
    assert (BM25.hybrid_role, Dense.hybrid_role, ShardedIndex.hybrid_role) == ("lexical", "dense", None)
    assert BM25.explains_terms and not Dense.explains_terms and not ShardedIndex.explains_terms
    assert Dense.encodes_queries and not BM25.encodes_queries and not ShardedIndex.encodes_queries
    assert ShardedIndex.answers_partially and ShardedIndex.holds_shards and not BM25.answers_partially
    assert not ShardedIndex.writable_in_place and BM25.writable_in_place and Dense.scores_by_id
    assert ShardedIndex.manifest_name == "shards.json" and BM25.manifest_name == Dense.manifest_name == "manifest.json"


def test_the_surfaces_ask_an_index_what_it_can_do_never_its_kind():
    """The command line and the service branch on capabilities (hybrid_role, explains_terms, ...),
    never on the kind's name or the class: a new kind states its capabilities and is served."""
    import re

    root = Path(__file__).resolve().parents[2] / "salience"
    for path in [*(root / "server").glob("*.py"), *(root / "cli").glob("*.py")]:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"(handle\.kind|index_kind\([^)]*\))\s*(==|!=|in\b)", text), path
        assert not re.search(r"isinstance\([^)]*\b(BM25|Dense|ShardedIndex)\b", text), path


def test_a_sharded_index_is_a_registered_search_method_with_keyword_parameters(tmp_path):
    """create("search", "sharded", shard=BM25(...), n_shards=...) fits as one BM25 scores; its
    parameters are set, refused and cloned as every method's; a loaded one says how it was built."""
    from salience.core.base import create

    texts = ["red apples", "green apples", "blue sky", "apple pie", "grey sky", "apples and pears", "sky blue pie"]
    docs = [{"_id": f"d{i}", "text": t} for i, t in enumerate(texts)]
    sharded = create("search", "sharded", shard=BM25(k1=1.2, b=0.5), n_shards=3).fit(docs)
    one = BM25(k1=1.2, b=0.5).fit(docs)
    for query in ("apples", "blue sky pie"):
        found, expected = sharded.search(query, k=10), one.search(query, k=10)  # every match: ties in any order
        assert dict(zip(found.ids, found.values)) == pytest.approx(dict(zip(expected.ids, expected.values)), rel=1e-5)
    assert sharded.get_params()["n_shards"] == 3 and sharded.params["k1"] == 1.2
    with pytest.raises(InvalidParameterError, match="set_params would"):
        sharded.set_params(n_shards=2)
    fresh = sharded.clone()
    assert fresh.get_params()["shard"] is not sharded.shard and fresh.shard.k1 == 1.2
    with pytest.raises(Exception, match="no shards yet"):
        fresh.search("apples")
    with pytest.raises(InvalidParameterError, match="n_shards"):
        create("search", "sharded", n_shards=0)
    with pytest.raises(InvalidParameterError, match="executor"):
        create("search", "sharded", executor="spark")
    folder = tmp_path / "ix"
    ShardedIndex.write(docs, folder, n_shards=2, k1=1.2, b=0.5)
    loaded = ShardedIndex.load(folder)
    assert loaded.shard.k1 == 1.2 and loaded.n_shards == 2
    assert set(loaded.search("apples", k=10).ids) == set(one.search("apples", k=10).ids)


def test_every_kind_is_an_index_and_answers_through_the_interface_alike(tmp_path):
    """Index is one interface (search, document, add, delete, commit, merge, save, load, len);
    BM25 and Dense implement it on segments in this process, ShardedIndex over shards. The same
    calls, through the interface only, give the same ranking, documents and counts on BM25 and
    on its sharded form; a kind missing a part of the interface cannot be created."""
    import abc

    from salience.search import Dense, Index, SegmentedIndex

    assert issubclass(BM25, SegmentedIndex) and issubclass(Dense, SegmentedIndex)
    assert issubclass(ShardedIndex, Index) and not issubclass(ShardedIndex, SegmentedIndex)
    assert {"search_batch", "document", "add", "delete", "commit", "merge", "save", "load", "fit",
            "n_docs"} <= Index.__abstractmethods__
    assert not BM25.__abstractmethods__ and not Dense.__abstractmethods__ and not ShardedIndex.__abstractmethods__

    class Incomplete(Index, abc.ABC):
        def search_batch(self, queries, *, k=10, where=None, n_jobs=1):
            return []

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()

    docs = _corpus(60, seed=3)
    for i, doc in enumerate(docs):
        doc["year"] = 2000 + i % 3

    def drive(index: Index, folder: Path) -> list:
        seen = []
        index.index(docs[:50])
        index.save(folder)
        seen.append((len(index), index.path == folder))
        index.add(docs[50:])
        index.delete(["d3", "d51"])
        index.commit()
        reopened = type(index).load(folder)
        seen.append(reopened.n_docs)
        hits = reopened.search("laminar boundary layer", k=5, where={"year": 2001})
        seen.append(dict(zip(hits.ids, np.round(hits.values, 4))))
        seen.append(reopened.document("d7")["text"])
        with pytest.raises(IdMismatchError, match="d3"):
            reopened.delete(["d3"])
        reopened.merge()
        seen.append(len(reopened))
        return seen

    single = drive(BM25(), tmp_path / "single")
    sharded = drive(ShardedIndex(n_shards=3), tmp_path / "sharded")
    assert single == sharded
    assert single[0] == (50, True) and single[1] == 58 and len(single[2]) == 5
