"""Session ids for the store tests."""

from __future__ import annotations

NASTY_IDS = [
    "{tag}",
    "}{",
    "a:b:{c}",
    "*?[]",
    "{}:*?[]\\",
    "会话{42}:*",
    "x" * 200,
    "emoji 🦜 {}",
    "-",
    "_",
    "==",
]
"""Ids that break naive key layouts: Redis hash-tag braces, key separators, glob characters,
backslashes, CJK text, emoji and the longest id allowed (200 characters)."""
