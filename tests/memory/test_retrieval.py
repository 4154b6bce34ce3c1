"""Hybrid retrieval: tokenizer, incremental BM25 (rank-bm25 scoring), dense index, weighted RRF."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25Okapi

from engine.memory.embeddings import (
    Embedder,
    HashingEmbedder,
    MiniLMEmbedder,
    NumpyMiniLMEmbedder,
)
from engine.memory.retrieval import (
    DEFAULT_WEIGHTS,
    BM25Index,
    DenseIndex,
    HybridIndex,
    Tokenizer,
    tokenize,
    weighted_rrf,
)
from engine.memory.tokenize import han_bigrams

CORPUS = [
    ("m1", "FX rate EUR/USD fixed at 1.08 for this task"),
    ("m2", "The deploy freeze lasts from May 1 to May 7"),
    ("m3", "Caroline went to the LGBTQ support group yesterday"),
    ("m4", "Melanie painted a sunrise over the lake last year"),
    ("m5", "汇率固定为1.08，本次任务有效"),
    ("m6", "部署冻结期间禁止发布新版本"),
    ("m7", "The image crop tool returns invalid slice errors"),
]


def test_tokenizer_english():
    assert tokenize("Caroline's FX rates were FIXED at 1.08!") == [
        "carolin",
        "fx",
        "rate",
        "fix",
        "1.08",
    ]
    assert tokenize("The and of a") == []


def test_tokenizer_chinese_and_mixed():
    terms = tokenize("汇率固定为1.08，部署冻结 deploy freeze")
    assert "汇率" in terms and "固定" in terms and "部署" in terms and "冻结" in terms
    assert "1.08" in terms and "deploy" in terms and "freez" in terms
    assert "的" not in tokenize("我的汇率")


def test_tokenizer_options():
    raw = Tokenizer(stem=False, stopwords=False)
    assert raw("The rates") == ["the", "rates"]


def build_bm25(corpus):
    index = BM25Index()
    index.add_many(corpus)
    return index


def reference_scores(corpus, query, k1, b):
    """rank-bm25 built from scratch on the same tokens."""
    okapi = BM25Okapi([tokenize(t) for _, t in corpus], k1=k1, b=b)
    return dict(zip([i for i, _ in corpus], okapi.get_scores(tokenize(query)), strict=True))


@pytest.mark.parametrize("query", ["exchange rate EUR", "deploy freeze May", "汇率 固定", "crop"])
def test_incremental_bm25_scores_equal_rank_bm25_from_scratch(query):
    index = build_bm25(CORPUS)
    expected = reference_scores(CORPUS, query, index._okapi.k1, index._okapi.b)
    got = dict(index.search(query, k=None))
    assert got  # every query matches something
    for doc_id, score in got.items():
        assert score == pytest.approx(expected[doc_id])
    # documents without a shared term are not returned (their score would be 0)
    for doc_id, score in expected.items():
        if doc_id not in got:
            assert score == 0


def test_bm25_after_removals_and_replacements_equals_fresh_index():
    random.seed(7)
    words = "alpha beta gamma delta rate fix deploy freeze crop slice error 汇率 固定".split()
    corpus = [
        (f"d{i}", " ".join(random.choices(words, k=random.randint(1, 12)))) for i in range(60)
    ]
    live = build_bm25(corpus)
    for doc_id, _ in corpus[::3]:
        assert live.remove(doc_id)
    replaced = [(f"d{i}", "gamma gamma rate") for i in range(1, 60, 5)]
    live.add_many(replaced)
    final = dict(corpus)
    for doc_id, _ in corpus[::3]:
        final.pop(doc_id)
    final.update(replaced)
    final_corpus = sorted(final.items())
    for query in ["gamma rate", "deploy error", "汇率", "slice beta alpha"]:
        expected = reference_scores(final_corpus, query, live._okapi.k1, live._okapi.b)
        got = dict(live.search(query, k=None))
        assert set(got) == {d for d, s in expected.items() if d in got}
        for doc_id, score in got.items():
            assert score == pytest.approx(expected[doc_id])
    assert len(live) == len(final)
    assert not live.remove("d0")


def test_adding_does_not_rebuild_per_query():
    index = build_bm25(CORPUS)
    index.search("rate")
    refreshes = index.idf_refreshes
    for i in range(100):
        index.add(f"x{i}", f"note number {i} about rates")
    index.search("rate")
    index.search("freeze")
    assert index.idf_refreshes == refreshes + 1  # one lazy refresh for the whole batch


def test_bm25_edge_cases():
    index = BM25Index()
    assert index.search("anything") == []
    index.add("a", "the of and")  # only stopwords: no terms
    assert index.search("the") == []
    index.add("b", "rate")
    assert index.search("rate", k=0) == []
    assert [d for d, _ in index.search("rate")] == ["b"]
    assert "b" in index and "zzz" not in index


def test_dense_index_add_remove_search_with_hashing_embedder():
    dense = DenseIndex(HashingEmbedder())
    dense.add_many(CORPUS)
    assert len(dense) == len(CORPUS)
    top = dense.search("FX rate EUR/USD fixed", k=1)
    assert top[0][0] == "m1"
    assert dense.remove("m1")
    assert "m1" not in dense
    assert all(d != "m1" for d, _ in dense.search("FX rate EUR/USD fixed", k=None))
    dense.add("m3", "FX rate EUR/USD fixed")  # replace under an existing id
    assert dense.search("FX rate EUR/USD fixed", k=1)[0][0] == "m3"
    assert not dense.remove("nope")
    scores = [s for _, s in dense.search("rate", k=None)]
    assert scores == sorted(scores, reverse=True)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "remove"]), st.integers(0, 15)), max_size=60))
def test_dense_index_stays_consistent(ops):
    emb = HashingEmbedder(dim=32)
    dense = DenseIndex(emb)
    model: dict[str, str] = {}
    for op, n in ops:
        doc_id = f"d{n}"
        if op == "add":
            text = f"text {n} {len(model)}"
            dense.add(doc_id, text)
            model[doc_id] = text
        else:
            assert dense.remove(doc_id) == (doc_id in model)
            model.pop(doc_id, None)
        if n % 3 == 0:
            dense.flush()
    results = dense.search("text", k=None)
    assert sorted(d for d, _ in results) == sorted(model)
    for doc_id, score in results:
        expected = float(emb.embed([model[doc_id]])[0] @ emb.embed(["text"])[0])
        assert score == pytest.approx(expected, abs=1e-5)


def test_dense_feedback_moves_query_towards_given_documents():
    dense = DenseIndex(HashingEmbedder())
    dense.add_many(CORPUS)
    plain = dict(dense.search("support group", k=None))
    pushed = dict(dense.search("support group", k=None, feedback_ids=["m7"]))
    assert pushed["m7"] > plain["m7"]


def test_weighted_rrf_math():
    fused = weighted_rrf([["a", "b", "c"], ["c", "a"]], (1.0, 0.5), k=60)
    scores = dict(fused)
    assert scores["a"] == pytest.approx(1 / 61 + 0.5 / 62)
    assert scores["b"] == pytest.approx(1 / 62)
    assert scores["c"] == pytest.approx(1 / 63 + 0.5 / 61)
    assert [d for d, _ in fused] == ["a", "c", "b"]
    assert weighted_rrf([], []) == []
    with pytest.raises(ValueError):
        weighted_rrf([["a"]], (1.0, 1.0))
    with pytest.raises(ValueError):
        weighted_rrf([["a"]], (-1.0,))


def test_weighted_rrf_ties_go_to_better_rank():
    fused = weighted_rrf([["a", "b"], ["b", "a"]], (1.0, 1.0))
    assert [d for d, _ in fused] == ["a", "b"]  # equal scores; a is rank 1 in the first list


def test_hybrid_index_with_hashing_embedder():
    index = HybridIndex(embedder=HashingEmbedder())
    index.add_many(CORPUS)
    assert len(index) == len(CORPUS)
    hits = index.search("EUR/USD rate fixed", k=3)
    assert hits[0][0] == "m1"
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    assert index.search("汇率 固定", k=1)[0][0] == "m5"
    assert index.remove("m5") and "m5" not in index
    assert all(d != "m5" for d, _ in index.search("汇率 固定", k=10))
    detailed = index.search_detailed("deploy freeze", k=2)
    assert detailed[0].id == "m2" and detailed[0].bm25_rank == 1
    assert index.search("anything", k=0) == []


def test_hybrid_bm25_only_never_loads_an_embedder():
    index = HybridIndex(weights=(1.0, 0.0))
    assert index.dense is None
    index.add_many(CORPUS)
    assert index.search("support group", k=1)[0][0] == "m3"


@pytest.mark.parametrize(
    "kwargs", [{"weights": (0, 0)}, {"weights": (-1, 1)}, {"depth": 0}, {"rrf_k": -1}]
)
def test_hybrid_rejects_bad_configuration(kwargs):
    with pytest.raises(ValueError):
        HybridIndex(embedder=HashingEmbedder(), **kwargs)


def test_hashing_embedder_is_deterministic_and_normalized():
    emb = HashingEmbedder()
    a = emb.embed(["hello world", "", "汇率"])
    b = emb.embed(["hello world", "", "汇率"])
    assert np.array_equal(a, b)
    assert np.allclose(np.linalg.norm(a[[0, 2]], axis=1), 1.0)
    assert not a[1].any()
    assert isinstance(emb, Embedder)


# --- the real model (installed package, offline) -------------------------------------------


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("sentence_transformers", reason="the [dense] extra is not installed")
    embedder = MiniLMEmbedder()
    embedder.load()
    return embedder


def test_minilm_loads_offline_from_the_installed_package(minilm):
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert MiniLMEmbedder.installed_model_dir().is_dir()
    vectors = minilm.embed(["FX rate EUR/USD fixed at 1.08", "which exchange rate?", "I like cats"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[2] @ vectors[1] + 0.3
    assert isinstance(minilm, Embedder)


def test_real_model_dense_and_hybrid_find_paraphrases(minilm):
    dense = DenseIndex(minilm)
    dense.add_many(CORPUS)
    assert dense.search("which currency conversion rate applies?", k=1)[0][0] == "m1"
    hybrid = HybridIndex(embedder=minilm)
    assert hybrid.weights == DEFAULT_WEIGHTS
    hybrid.add_many(CORPUS)
    hits = [d for d, _ in hybrid.search("which currency conversion rate applies?", k=2)]
    assert "m1" in hits
    assert hybrid.search("crop tool failing with bad slices", k=1)[0][0] == "m7"


def test_numpy_minilm_gives_the_vectors_of_the_torch_model(minilm):
    texts = [
        "FX rate EUR/USD fixed at 1.08",
        "Caroline: I went to a support group yesterday.",
        "我住在北京",
        "which exchange rate?",
        "",
    ]
    numpy_vectors = NumpyMiniLMEmbedder().embed(texts)
    torch_vectors = minilm.embed(texts)
    assert numpy_vectors.shape == torch_vectors.shape == (5, 384)
    cosines = (numpy_vectors * torch_vectors).sum(axis=1)
    assert cosines.min() > 0.9999


def test_an_english_only_embedder_has_no_vote_on_a_han_script_query():
    """all-MiniLM-L6-v2 ranks Chinese text by noise; a query mostly in Han script is answered by
    the lexical side alone (an English query still gets the fusion)."""

    class Backwards(HashingEmbedder):
        english_only = True

        def embed(self, texts):
            return -super().embed(texts)  # ranks the best lexical match last

    docs = [("a", "我住在北京，每天骑车上班"), ("b", "今天天气很好"), ("c", "I live in Boston")]
    fused = HybridIndex(embedder=Backwards(), weights=(0.5, 0.5))
    lexical = HybridIndex(embedder=HashingEmbedder(), weights=(1.0, 0.0))
    for index in (fused, lexical):
        index.add_many(docs)
    query = "住在北京"
    assert [d for d, _ in fused.search(query, 3)] == [d for d, _ in lexical.search(query, 3)]
    assert fused.search_detailed("where do I live, Boston?", 3)[0].dense_rank is not None


def test_han_bigrams_cover_han_runs_only():
    assert han_bigrams("Bart吃了冰淇淋 and ice cream") == ["吃了", "了冰", "冰淇", "淇淋"]
    assert han_bigrams("你 好") == ["你", "好"]
    assert han_bigrams("no Han script at all: 1.08") == []


def test_a_han_name_the_segmenter_cut_differently_is_found_by_its_bigrams():
    """jieba keeps 黎芷菡 whole in the memory and 芷菡 whole in the query: no word in common. The
    bigram ranking finds it; without it (han_weight=0) nothing is found."""
    docs = [("a", "黎芷菡昨天去了图书馆"), ("b", "今天天气很好"), ("c", "I live in Boston")]
    with_bigrams = HybridIndex(weights=(1.0, 0.0))
    words_only = HybridIndex(weights=(1.0, 0.0), han_weight=0.0)
    for index in (with_bigrams, words_only):
        index.add_many(docs)
    assert words_only.search("芷菡在哪", 3) == []
    [hit] = with_bigrams.search_detailed("芷菡在哪", 3)
    assert hit.id == "a" and hit.han_rank == 1 and hit.bm25_rank is None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.text(alphabet="abc xyz北京天气好 .", max_size=30), min_size=1, max_size=8),
    st.text(alphabet="abc xyz .", min_size=1, max_size=20),
)
def test_a_query_without_han_script_ranks_as_without_the_bigram_side(texts, query):
    """The bigram ranking is consulted only for a query with Han characters, so English (and any
    other script) ranks exactly as before it existed."""
    docs = [(f"d{i}", t) for i, t in enumerate(texts)]
    on = HybridIndex(weights=(1.0, 0.0))
    off = HybridIndex(weights=(1.0, 0.0), han_weight=0.0)
    for index in (on, off):
        index.add_many(docs)
    assert on.search(query, 10) == off.search(query, 10)


def test_bigram_side_forgets_removed_and_replaced_memories():
    index = HybridIndex(weights=(1.0, 0.0))
    index.add("a", "黎芷菡昨天去了图书馆")
    index.add("b", "黎芷菡喜欢画画")
    assert index.remove("a")
    index.add("b", "now in English")  # replaced: no Han text under this id any more
    assert index.search("芷菡", 3) == []
    assert index.han is not None and len(index.han) == 0


def test_boost_reorders_fused_scores_before_the_cut():
    index = HybridIndex(weights=(1.0, 0.0), context=0.0)
    index.add_many([("a", "camping at the lake"), ("b", "a trip to town"), ("c", "a lake")])
    assert [d for d, _ in index.search("camping at the lake", 3)] == ["a", "c"]
    boosted = index.search("camping at the lake", 1, boost={"c": 3.0})
    assert [d for d, _ in boosted] == ["c"]


def test_bad_han_weight_is_rejected():
    with pytest.raises(ValueError):
        HybridIndex(weights=(1.0, 0.0), han_weight=-1.0)
