"""Hybrid retrieval over memories: BM25 (rank-bm25) + dense vectors, fused by weighted RRF.

Pure code, no I/O: the memory store owns persistence and feeds texts in with `add`.

- `Tokenizer` handles English and Chinese: jieba segments runs of Han characters, Latin words
  are case-folded, stripped of possessives, stemmed (Snowball) and filtered by a short stopword
  list; numbers such as ``1.08`` stay whole.
- `BM25Index` keeps document statistics incrementally and scores with rank-bm25's
  ``BM25Okapi.get_batch_scores`` over the documents that share a term with the query. Adding a
  memory never rebuilds the index: it updates counts; IDFs are computed per query term, and the
  one corpus-wide number they need (the mean IDF, for rank-bm25's floor) is refreshed once,
  lazily, before the next query.
- `DenseIndex` keeps unit vectors in one growing matrix; texts added are embedded in one batch,
  lazily, before the next query.
- `weighted_rrf` fuses rankings: ``score(d) = sum_i w_i / (k + rank_i(d))`` with ``k = 60``.
- `HybridIndex` puts the three together.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from rank_bm25 import BM25Okapi

from engine.memory.embeddings import Embedder, default_embedder, installed_embedder
from engine.memory.tokenize import (  # noqa: F401 - re-exported: retrieval's tokenizer
    CHINESE_STOPWORDS,
    ENGLISH_STOPWORDS,
    Tokenizer,
    han_bigrams,
    tokenize,
)

__all__ = [
    "DEFAULT_WEIGHTS",
    "BM25Index",
    "DenseIndex",
    "HybridHit",
    "HybridIndex",
    "Tokenizer",
    "tokenize",
    "weighted_rrf",
]

DEFAULT_WEIGHTS: tuple[float, float] = (0.8, 0.2)
"""Default fusion weights (BM25, dense), chosen on LoCoMo, see ``bench/retrieval.py``."""

DEFAULT_K1 = 1.2
"""BM25 term-frequency saturation (rank-bm25 uses 1.5; 1.2 is the classic choice)."""
DEFAULT_B = 0.3
"""BM25 length normalization; memories are short and similar in length, so it is kept low."""

DEFAULT_CONTEXT = 0.6
"""BM25 score share passed to a matching memory's neighbours in write order; chosen on LoCoMo
conversations 0-4 (recall@10 0.641 -> 0.724), held out on 5-9 (0.646 -> 0.690)."""

DEFAULT_HAN_WEIGHT = 0.5
"""Fusion weight of the Han-bigram ranking (`han_bigrams`) on a query with Han characters,
against the BM25 weight of `DEFAULT_WEIGHTS`; chosen on MADial-Bench's Chinese tuning dialogues
through ``s.memory`` (recall@10 0.641 -> 0.649 with the default speaker boost; held-out 0.609 ->
0.621; without the boost 0.553 -> 0.542 / 0.494 -> 0.547: a small, uneven gain, see
``bench/retrieval.py --madial-grid``)."""

RRF_K = 60
"""The constant of reciprocal rank fusion (Cormack et al., 2009)."""


# fmt: off
class _LazyIdf:
    """Okapi IDF, as rank-bm25's ``BM25Okapi._calc_idf`` defines it, computed per term on demand.

    ``idf(t) = ln(N - n_t + 0.5) - ln(n_t + 0.5)``; negative values are floored to
    ``epsilon * mean idf over the vocabulary``. Only that mean needs the whole vocabulary, and it
    is one vectorized pass over the document-frequency array, once per batch of changes, instead
    of a Python loop over every term. rank-bm25's ``get_batch_scores`` reads it through ``get``.
    """

    def __init__(self, index: BM25Index, floor: float) -> None:
        self._index = index
        self._floor = floor

    def get(self, term: str, default: float | None = None) -> float | None:
        posting = self._index._postings.get(term)
        if not posting:
            return default
        n = len(posting)
        idf = math.log(self._index._okapi.corpus_size - n + 0.5) - math.log(n + 0.5)
        return self._floor if idf < 0 else idf

    def __getitem__(self, term: str) -> float:
        value = self.get(term)
        if value is None:
            raise KeyError(term)
        return value


class _LiveOkapi(BM25Okapi):
    """rank-bm25's Okapi scorer over statistics that `BM25Index` maintains incrementally.

    rank-bm25 computes its statistics once, in the constructor, from a whole corpus; here they
    are kept up to date as documents come and go (`_LazyIdf` supplies the IDF), and rank-bm25's
    own ``get_batch_scores`` does the scoring.
    """

    def __init__(self, k1: float, b: float, epsilon: float) -> None:  # no corpus on purpose
        self.k1 = k1
        self.b = b
        self.epsilon = epsilon
        self.corpus_size = 0
        self.avgdl = 0.0
        self.doc_freqs: list[dict[str, int]] = []
        self.idf: _LazyIdf | dict[str, float] = {}
        self.doc_len: np.ndarray = np.zeros(0)
        self.average_idf = 0.0
        self.tokenizer = None


class BM25Index:
    """A BM25 index (rank-bm25 Okapi scoring) that accepts adds and removes without rebuilding."""

    def __init__(
        self,
        tokenizer: Callable[[str], list[str]] | None = None,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        epsilon: float = 0.25,
        context: float = 0.0,
    ) -> None:
        """Create an empty index.

        Args:
            tokenizer: text -> terms; default `tokenize`.
            k1: BM25 term-frequency saturation.
            b: BM25 length normalization.
            epsilon: rank-bm25's floor for negative IDFs, as a fraction of the mean IDF.
            context: share of a document's score given to the documents indexed just before
                and just after it (the stronger of the two neighbours counts; 0: plain BM25).
                Memories written one after the other are each other's context: an answer turn
                rarely repeats the words of the question it answers, the turn before it does.
        """
        if context < 0:
            raise ValueError(f"context must be non-negative, got {context}")
        self.context = float(context)
        self.tokenizer = tokenizer or tokenize
        self._okapi = _LiveOkapi(k1, b, epsilon)
        self._ids: list[str | None] = []  # slot -> id
        self._slot: dict[str, int] = {}  # id -> slot
        self._free: list[int] = []
        self._lengths = np.zeros(64)
        self._postings: dict[str, set[int]] = {}
        self._arrays: dict[str, _Posting] = {}  # term -> (slots, term frequencies), for scoring
        self._where: list[dict[str, int]] = []  # slot -> {term: position in its _Posting}
        # insertion order as a doubly linked list of slots (-1: none), for `context`
        self._prev = np.full(64, -1, dtype=np.int64)
        self._next = np.full(64, -1, dtype=np.int64)
        self._tail = -1
        self._term_id: dict[str, int] = {}  # term -> slot in _df
        self._df = np.zeros(256)  # document frequency per term slot (0: free)
        self._free_terms: list[int] = []
        self._total_len = 0
        self._dirty = False
        self._lock = threading.RLock()
        self.idf_refreshes = 0

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._slot

    def add(self, doc_id: str, text: str, chained: bool = True) -> None:
        """Index a text under an id (replacing any text indexed under that id).

        Args:
            doc_id: the memory id.
            text: the memory text.
            chained: whether it is the neighbour of the documents indexed just before and after
                it (``context``); False for a document that is no turn of a conversation.
        """
        terms = self.tokenizer(text)
        with self._lock:
            if doc_id in self._slot:
                self._remove_locked(doc_id)
            freqs: dict[str, int] = {}
            for term in terms:
                freqs[term] = freqs.get(term, 0) + 1
            if self._free:
                slot = self._free.pop()
                self._ids[slot] = doc_id
                self._okapi.doc_freqs[slot] = freqs
            else:
                slot = len(self._ids)
                self._ids.append(doc_id)
                self._okapi.doc_freqs.append(freqs)
                self._where.append({})
                if slot >= len(self._lengths):
                    grown = np.zeros(len(self._lengths) * 2)
                    grown[: len(self._lengths)] = self._lengths
                    self._lengths = grown
                if slot >= len(self._prev):
                    more = np.full(len(self._prev), -1, dtype=np.int64)
                    self._prev = np.concatenate([self._prev, more])
                    self._next = np.concatenate([self._next, more])
            if chained:
                self._prev[slot], self._next[slot] = self._tail, -1
                if self._tail >= 0:
                    self._next[self._tail] = slot
                self._tail = slot
            else:
                self._prev[slot] = self._next[slot] = -1
            self._lengths[slot] = len(terms)
            self._slot[doc_id] = slot
            for term in freqs:
                posting = self._postings.get(term)
                if posting is None:
                    posting = self._postings[term] = set()
                    self._term_id[term] = self._new_term_slot()
                posting.add(slot)
                self._df[self._term_id[term]] += 1
                arrays = self._arrays.get(term)
                if arrays is None:
                    arrays = self._arrays[term] = _Posting()
                self._where[slot][term] = arrays.append(slot, freqs[term])
            self._total_len += len(terms)
            self._dirty = True

    def add_many(self, items: Iterable[tuple[str, str]]) -> None:
        """Index several ``(id, text)`` pairs.

        Args:
            items: pairs of id and text.
        """
        for doc_id, text in items:
            self.add(doc_id, text)

    def remove(self, doc_id: str) -> bool:
        """Forget a document.

        Args:
            doc_id: the memory id.

        Returns:
            True if it was indexed.
        """
        with self._lock:
            if doc_id not in self._slot:
                return False
            self._remove_locked(doc_id)
            return True

    def _remove_locked(self, doc_id: str) -> None:
        slot = self._slot.pop(doc_id)
        before, after = int(self._prev[slot]), int(self._next[slot])
        if before >= 0:
            self._next[before] = after
        if after >= 0:
            self._prev[after] = before
        if self._tail == slot:
            self._tail = before
        self._prev[slot] = self._next[slot] = -1
        freqs = self._okapi.doc_freqs[slot]
        where = self._where[slot]
        for term in freqs:
            posting = self._postings[term]
            posting.discard(slot)
            self._df[self._term_id[term]] -= 1
            moved = self._arrays[term].remove(where.pop(term))
            if moved is not None:  # the last entry filled the hole: note its new position
                self._where[moved[0]][term] = moved[1]
            if not posting:
                del self._postings[term]
                del self._arrays[term]
                self._free_terms.append(self._term_id.pop(term))
        self._total_len -= int(self._lengths[slot])
        self._lengths[slot] = 0
        self._okapi.doc_freqs[slot] = {}
        self._ids[slot] = None
        self._free.append(slot)
        self._dirty = True

    def _new_term_slot(self) -> int:
        if self._free_terms:
            return self._free_terms.pop()
        slot = len(self._term_id) + len(self._free_terms)
        if slot >= len(self._df):
            grown = np.zeros(len(self._df) * 2)
            grown[: len(self._df)] = self._df
            self._df = grown
        return slot

    def _refresh(self) -> None:
        """Bring the corpus-wide numbers (N, avgdl, IDF floor) up to date after changes."""
        okapi = self._okapi
        live = len(self._slot)
        okapi.corpus_size = live
        okapi.avgdl = self._total_len / live if live else 0.0
        okapi.doc_len = self._lengths[: len(self._ids)]
        df = self._df[self._df > 0]
        if live and len(df):
            okapi.average_idf = float(np.mean(np.log(live - df + 0.5) - np.log(df + 0.5)))
        else:
            okapi.average_idf = 0.0
        okapi.idf = _LazyIdf(self, okapi.epsilon * okapi.average_idf)
        self._dirty = False
        self.idf_refreshes += 1

    def search(self, query: str, k: int | None = 10) -> list[tuple[str, float]]:
        """Rank documents sharing at least one term with the query.

        Args:
            query: the query text.
            k: how many to return; None for all matching documents.

        Returns:
            ``(id, bm25 score)`` pairs, best first; ties broken by insertion order.
        """
        terms = self.tokenizer(query)
        with self._lock:
            if self._dirty:
                self._refresh()
            okapi = self._okapi
            if not terms or okapi.avgdl == 0:
                return []
            # rank-bm25's get_batch_scores, term by term over each term's posting only (numpy),
            # instead of a Python loop over every candidate document per term.
            n = len(self._ids)
            total = np.zeros(n)
            matched = np.zeros(n, dtype=bool)
            norm = okapi.k1 * (1 - okapi.b + okapi.b * self._lengths[:n] / okapi.avgdl)
            for term in terms:  # repeated query terms count again, as in rank-bm25
                arrays = self._arrays.get(term)
                if arrays is None or arrays.n == 0:
                    continue
                slots, tf = arrays.slots[: arrays.n], arrays.tfs[: arrays.n]
                idf = okapi.idf.get(term) or 0
                total[slots] += idf * (tf * (okapi.k1 + 1) / (tf + norm[slots]))
                matched[slots] = True
            if self.context:
                # A memory gets a share of its stronger matching neighbour's score, not of both:
                # summing let a turn between two strong matches outrank direct matches, and the
                # top k filled with neighbours (LoCoMo: as good or better on both splits).
                hit = np.flatnonzero(matched)
                bonus = np.zeros(n)
                for neighbour in (self._prev[hit], self._next[hit]):  # each injective
                    ok = neighbour >= 0
                    np.maximum.at(bonus, neighbour[ok], total[hit][ok])
                total = total + self.context * bonus
                matched |= bonus > 0
            slots = np.flatnonzero(matched)
            if not len(slots):
                return []
            scores = total[slots]
            order = _top(scores, k)
            return [(self._ids[slots[i]], float(scores[i])) for i in order]


class _Posting:
    """One term's documents as parallel numpy arrays (slot, term frequency), swap-removed."""

    __slots__ = ("slots", "tfs", "n")

    def __init__(self) -> None:
        self.slots = np.zeros(4, dtype=np.int64)
        self.tfs = np.zeros(4)
        self.n = 0

    def append(self, slot: int, tf: int) -> int:
        if self.n == len(self.slots):
            self.slots = np.concatenate([self.slots, np.zeros(self.n, dtype=np.int64)])
            self.tfs = np.concatenate([self.tfs, np.zeros(self.n)])
        self.slots[self.n] = slot
        self.tfs[self.n] = tf
        self.n += 1
        return self.n - 1

    def remove(self, position: int) -> tuple[int, int] | None:
        """Drop the entry at `position`; returns (slot, new position) of the entry moved there."""
        self.n -= 1
        if position == self.n:
            return None
        self.slots[position] = self.slots[self.n]
        self.tfs[position] = self.tfs[self.n]
        return int(self.slots[position]), position


def _top(scores: np.ndarray, k: int | None) -> np.ndarray:
    """Indexes of the k highest scores, best first, stable for ties."""
    n = len(scores)
    if k is None or k >= n:
        return np.argsort(-scores, kind="stable")
    if k <= 0:
        return np.zeros(0, dtype=int)
    part = np.argpartition(-scores, k - 1)[:k]
    # argpartition is not stable; order the cut by (score desc, index asc)
    return part[np.lexsort((part, -scores[part]))]


class DenseIndex:
    """Unit vectors in one growing matrix; cosine search by one matrix-vector product."""

    def __init__(self, embedder: Embedder | None = None) -> None:
        """Create an empty index.

        Args:
            embedder: the `Embedder`; default: all-MiniLM-L6-v2 (loaded on first use).
        """
        self._embedder = embedder
        self._ids: list[str] = []
        self._row: dict[str, int] = {}
        self._matrix: np.ndarray | None = None
        self._pending: dict[str, str] = {}
        self._lock = threading.RLock()

    @property
    def embedder(self) -> Embedder:
        """The embedder (the default one is resolved on first use)."""
        if self._embedder is None:
            self._embedder = default_embedder()
        return self._embedder

    def __len__(self) -> int:
        return len(self._row) + len(self._pending)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._row or doc_id in self._pending

    def add(self, doc_id: str, text: str) -> None:
        """Queue a text for embedding under an id (replacing any earlier text for that id).

        Args:
            doc_id: the memory id.
            text: the memory text.
        """
        with self._lock:
            if doc_id in self._row:
                self._remove_row(doc_id)
            self._pending[doc_id] = text

    def add_many(self, items: Iterable[tuple[str, str]]) -> None:
        """Queue several ``(id, text)`` pairs.

        Args:
            items: pairs of id and text.
        """
        for doc_id, text in items:
            self.add(doc_id, text)

    def add_vectors(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        """Insert precomputed unit vectors (e.g. restored from a store).

        Args:
            ids: one id per row.
            vectors: array ``(len(ids), dim)`` from the same embedder.

        Raises:
            ValueError: shapes disagree.
        """
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(ids):
            raise ValueError(f"need one vector per id: {len(ids)} ids, array {vectors.shape}")
        with self._lock:
            for doc_id in ids:
                if doc_id in self._row:
                    self._remove_row(doc_id)
                self._pending.pop(doc_id, None)
            self._append(list(ids), vectors)

    def remove(self, doc_id: str) -> bool:
        """Forget a document.

        Args:
            doc_id: the memory id.

        Returns:
            True if it was indexed.
        """
        with self._lock:
            if self._pending.pop(doc_id, None) is not None:
                return True
            if doc_id in self._row:
                self._remove_row(doc_id)
                return True
            return False

    def _remove_row(self, doc_id: str) -> None:
        row = self._row.pop(doc_id)
        last = len(self._ids) - 1
        assert self._matrix is not None
        if row != last:  # move the last row into the hole
            moved = self._ids[last]
            self._matrix[row] = self._matrix[last]
            self._ids[row] = moved
            self._row[moved] = row
        self._ids.pop()

    def _append(self, ids: list[str], vectors: np.ndarray) -> None:
        if not ids:
            return
        n = len(self._ids)
        need = n + len(ids)
        if (
            self._matrix is None
            or need > len(self._matrix)
            or self._matrix.shape[1] != (vectors.shape[1])
        ):
            if self._matrix is not None and n and self._matrix.shape[1] != vectors.shape[1]:
                raise ValueError(
                    f"vectors of dimension {vectors.shape[1]} cannot join an index of "
                    f"dimension {self._matrix.shape[1]}"
                )
            grown = np.zeros((max(64, need * 2), vectors.shape[1]), dtype=np.float32)
            if self._matrix is not None and n:
                grown[:n] = self._matrix[:n]
            self._matrix = grown
        self._matrix[n:need] = vectors
        for offset, doc_id in enumerate(ids):
            self._row[doc_id] = n + offset
        self._ids.extend(ids)

    def flush(self) -> None:
        """Embed every queued text now, in one batch."""
        with self._lock:
            if not self._pending:
                return
            ids = list(self._pending)
            texts = [self._pending[i] for i in ids]
            vectors = self.embedder.embed(texts)
            self._pending.clear()
            self._append(ids, vectors)

    def search(
        self,
        query: str,
        k: int | None = 10,
        feedback_ids: Sequence[str] = (),
        feedback_weight: float = 1.0,
    ) -> list[tuple[str, float]]:
        """Rank documents by cosine similarity to the query.

        With ``feedback_ids`` the query vector is moved towards those documents first (Rocchio
        relevance feedback): ``q' = q + feedback_weight * mean(vectors of feedback_ids)``.

        Args:
            query: the query text.
            k: how many to return; None for all.
            feedback_ids: indexed ids taken as relevant (unknown ids are ignored).
            feedback_weight: how far the query moves towards them.

        Returns:
            ``(id, cosine)`` pairs, best first.
        """
        self.flush()
        with self._lock:
            n = len(self._ids)
            if n == 0:
                return []
            assert self._matrix is not None
            q = self.embedder.embed([query])[0].astype(np.float32)
            rows = [self._row[d] for d in feedback_ids if d in self._row]
            if rows and feedback_weight:
                q = q + feedback_weight * self._matrix[rows].mean(axis=0)
                norm = float(np.linalg.norm(q))
                if norm:
                    q /= norm
            # einsum, not ``@``: a matrix-vector product this small gains nothing from BLAS
            # threads, and on a busy host their hand-offs made it 5-20x slower (bench/context.py)
            scores = np.einsum("ij,j->i", self._matrix[:n], q)
            ids = list(self._ids)
        order = _top(scores, k)
        return [(ids[i], float(scores[i])) for i in order]


def weighted_rrf(
    rankings: Sequence[Sequence[str]],
    weights: Sequence[float],
    k: int = RRF_K,
) -> list[tuple[str, float]]:
    """Weighted reciprocal rank fusion: ``score(d) = sum_i weights[i] / (k + rank_i(d))``.

    Ranks start at 1; a document absent from a ranking gets nothing from it.

    Args:
        rankings: ranked id lists, best first.
        weights: one non-negative weight per ranking.
        k: the RRF constant (60 in the original paper).

    Returns:
        ``(id, fused score)`` pairs, best first; ties go to the better best rank, then the
        earlier ranking.

    Raises:
        ValueError: as many weights as rankings are needed, non-negative, and k >= 0.
    """
    if len(rankings) != len(weights):
        raise ValueError(f"{len(rankings)} rankings but {len(weights)} weights")
    if any(w < 0 for w in weights):
        raise ValueError(f"weights must be non-negative, got {list(weights)}")
    if k < 0:
        raise ValueError(f"k must be non-negative, got {k}")
    scores: dict[str, float] = {}
    best: dict[str, tuple[int, int]] = {}
    for which, (ranking, weight) in enumerate(zip(rankings, weights, strict=True)):
        for rank, doc_id in enumerate(ranking, start=1):
            share = weight / (k + rank)
            if doc_id in scores:
                scores[doc_id] += share
                if rank < best[doc_id][0]:  # same rank in an earlier ranking stays better
                    best[doc_id] = (rank, which)
            else:
                scores[doc_id] = share
                best[doc_id] = (rank, which)
    # (rank, ranking) is unique per document, so the id never decides; tuples sort in C
    ordered = sorted([(-score, best[doc_id], doc_id) for doc_id, score in scores.items()])
    return [(doc_id, -negative) for negative, _, doc_id in ordered]


@dataclass(frozen=True)
class HybridHit:
    """One fused result with the evidence behind it."""

    id: str
    """The memory id."""
    score: float
    """Fused RRF score."""
    bm25_rank: int | None
    """1-based rank in the BM25 list (None: not retrieved by BM25)."""
    bm25_score: float | None
    """BM25 score."""
    dense_rank: int | None
    """1-based rank in the dense list (None: not retrieved)."""
    dense_score: float | None
    """Cosine similarity."""
    han_rank: int | None = None
    """1-based rank in the Han-bigram list (None: not retrieved, or no Han in the query)."""


_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LETTER = re.compile(r"[^\W\d_]")


def _mostly_han(text: str) -> bool:
    """Whether most letters of a text are Han characters."""
    letters = len(_LETTER.findall(text))
    return letters > 0 and len(_HAN.findall(text)) * 2 > letters


class HybridIndex:
    """BM25 and dense retrieval over the same documents, fused by weighted RRF.

    Example::

        index = HybridIndex()                      # all-MiniLM-L6-v2, weights (0.8, 0.2)
        index.add("m1", "FX rate EUR/USD fixed at 1.08 for this task")
        index.search("which exchange rate?", k=5)  # [("m1", 0.016…)]
    """

    def __init__(
        self,
        embedder: Embedder | None = None,
        weights: tuple[float, float] = DEFAULT_WEIGHTS,
        rrf_k: int = RRF_K,
        depth: int = 1000,
        tokenizer: Callable[[str], list[str]] | None = None,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        feedback: int = 1,
        feedback_weight: float = 1.0,
        context: float = DEFAULT_CONTEXT,
        han_weight: float = DEFAULT_HAN_WEIGHT,
    ) -> None:
        """Create an empty index.

        Args:
            embedder: the dense `Embedder`; default all-MiniLM-L6-v2 when the ``[dense]`` extra
                is installed (loaded on the first search), else none: BM25 alone, weights
                ``(w_bm25, 0)``. Never used when the dense weight is 0.
            weights: ``(w_bm25, w_dense)``, non-negative, not both 0.
            rrf_k: RRF constant.
            depth: how many results of each retriever enter the fusion.
            tokenizer: BM25 tokenizer; default `tokenize`.
            k1: BM25 k1.
            b: BM25 b.
            feedback: lexical feedback for the dense side: the query vector is moved towards
                the vectors of the top ``feedback`` BM25 hits before the dense ranking (0: off).
                The dense list then agrees with BM25 on its best hit and adds that hit's
                semantic neighbours, so fusion keeps BM25's precision at the top.
            feedback_weight: how far the query vector moves (Rocchio beta).
            context: BM25 score share passed to the memories written just before and after a
                matching one (`BM25Index`); chosen on LoCoMo's dev conversations.
            han_weight: fusion weight of a third ranking used only for queries with Han
                characters: BM25 over the character bigrams of the Han text (`han_bigrams`).
                Only memories with Han characters are put in it. 0: off.

        Raises:
            ValueError: bad weights, rrf_k, depth, feedback or han_weight.
        """
        if len(weights) != 2 or any(w < 0 for w in weights) or not any(weights):
            raise ValueError(
                f"weights must be (w_bm25, w_dense), non-negative, not both 0; got {weights!r}"
            )
        if rrf_k < 0:
            raise ValueError(f"rrf_k must be non-negative, got {rrf_k}")
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        if feedback < 0 or feedback_weight < 0:
            raise ValueError(
                f"feedback and feedback_weight must be non-negative, got {feedback}, "
                f"{feedback_weight}"
            )
        if han_weight < 0:
            raise ValueError(f"han_weight must be non-negative, got {han_weight}")
        if embedder is None and weights[1] > 0:
            embedder = installed_embedder()
            if embedder is None:  # no [dense] extra: the lexical side alone
                weights = (float(weights[0]) or 1.0, 0.0)
        self.weights = (float(weights[0]), float(weights[1]))
        self.rrf_k = rrf_k
        self.depth = depth
        self.feedback = feedback
        self.feedback_weight = feedback_weight
        self.bm25 = BM25Index(tokenizer=tokenizer, k1=k1, b=b, context=context)
        self.dense = DenseIndex(embedder) if self.weights[1] > 0 else None
        self.han_weight = float(han_weight)
        self.han = (
            BM25Index(tokenizer=han_bigrams, k1=k1, b=b, context=context)
            if self.han_weight > 0
            else None
        )

    def __len__(self) -> int:
        return len(self.bm25)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.bm25

    def add(self, doc_id: str, text: str, chained: bool = True) -> None:
        """Index a memory (replacing any text under the same id).

        Args:
            doc_id: the memory id.
            text: the memory text.
            chained: whether it shares BM25 context with the memories written just before and
                after it (False for a keyed fact: no turn of a conversation).
        """
        self.bm25.add(doc_id, text, chained=chained)
        if self.dense is not None:
            self.dense.add(doc_id, text)
        if self.han is not None:
            if _HAN.search(text):
                self.han.add(doc_id, text, chained=chained)
            else:
                self.han.remove(doc_id)  # the id's earlier text may have had Han characters

    def add_many(self, items: Iterable[tuple[str, str]]) -> None:
        """Index several ``(id, text)`` pairs.

        Args:
            items: pairs of id and text.
        """
        for doc_id, text in items:
            self.add(doc_id, text)

    def remove(self, doc_id: str) -> bool:
        """Forget a memory.

        Args:
            doc_id: the memory id.

        Returns:
            True if it was indexed.
        """
        found = self.bm25.remove(doc_id)
        if self.dense is not None:
            found = self.dense.remove(doc_id) or found
        if self.han is not None:
            found = self.han.remove(doc_id) or found
        return found

    def search_detailed(
        self, query: str, k: int = 10, boost: Mapping[str, float] | None = None,
        dense: bool = True,
    ) -> list[HybridHit]:
        """Fused search with each retriever's rank and score.

        Args:
            query: the query text.
            k: how many results.
            boost: a factor on the fused score of some memories (by id), applied before the
                top k is cut (session memory raises the memories that name the query's
                speakers).
            dense: False leaves the dense side out (no embedding is computed): the lexical
                rankings alone, fused.

        Returns:
            Up to k `HybridHit`, best first.
        """
        if k <= 0:
            return []
        # An English-only embedder ranks Han-script text by noise (MADial-Bench's Chinese half:
        # recall fell with it); such a query gets the lexical side alone.
        dense_index = self.dense if dense else None
        if dense_index is not None and getattr(dense_index.embedder, "english_only", False):
            if _mostly_han(query):
                dense_index = None
        han_index = self.han if self.han is not None and _HAN.search(query) else None
        if han_index is not None and not len(han_index):
            han_index = None
        # one ranking alone: fusion keeps its order, so the top k of it is all that is needed
        several = dense_index is not None or han_index is not None or bool(boost)
        depth = max(self.depth, k) if several else k
        weights = self.weights if dense else (self.weights[0] or 1.0, 0.0)
        lexical = weights[0] > 0 or self.feedback > 0
        sparse = self.bm25.search(query, depth) if lexical else []
        dense_hits = (
            dense_index.search(
                query,
                depth,
                feedback_ids=[d for d, _ in sparse[: self.feedback]],
                feedback_weight=self.feedback_weight,
            )
            if dense_index is not None
            else []
        )
        if weights[0] == 0:
            sparse = []
        han = [d for d, _ in han_index.search(query, depth)] if han_index is not None else []
        fused = weighted_rrf(
            [[d for d, _ in sparse], [d for d, _ in dense_hits], han],
            (*weights, self.han_weight),
            k=self.rrf_k,
        )
        if boost:
            fused = sorted(
                ((d, score * boost.get(d, 1.0)) for d, score in fused), key=lambda h: -h[1]
            )  # stable: equal scores keep the fusion's order
        sparse_at = {d: (r, s) for r, (d, s) in enumerate(sparse, start=1)}
        dense_at = {d: (r, s) for r, (d, s) in enumerate(dense_hits, start=1)}
        han_at = {d: r for r, d in enumerate(han, start=1)}
        hits = []
        for doc_id, score in fused[:k]:
            br, bs = sparse_at.get(doc_id, (None, None))
            dr, ds = dense_at.get(doc_id, (None, None))
            hits.append(HybridHit(doc_id, score, br, bs, dr, ds, han_at.get(doc_id)))
        return hits

    def search(
        self, query: str, k: int = 10, boost: Mapping[str, float] | None = None,
        dense: bool = True,
    ) -> list[tuple[str, float]]:
        """Fused search.

        Args:
            query: the query text.
            k: how many results.
            boost: as in `search_detailed`.
            dense: as in `search_detailed`.

        Returns:
            ``(id, fused score)`` pairs, best first.
        """
        return [(h.id, h.score) for h in self.search_detailed(query, k, boost, dense)]
