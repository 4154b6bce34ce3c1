"""The blind memory-update corpora (bench/corpora/blind_updates.jsonl and blind_v3.jsonl) have
the shape their protocols (BLIND_UPDATES.md, BLIND_V3.md) promise: every row complete, ids
unique, the split the one the hash rule gives, and both splits holding both labels in both
languages. It checks the files only; it runs nothing on the pairs."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest
from support.paths import ROOT

CORPORA = ROOT / "bench" / "corpora"
SPECS = {
    # file: (hash seed, id prefix, least rows, share of updates, share in Chinese)
    "blind_updates.jsonl": ("blind-v2:", "b-", 240, (0.4, 0.6), (0.25, 0.45)),
    "blind_v3.jsonl": ("blind-v3:", "v3-", 240, (0.3, 0.45), (0.3, 0.5)),
}
FIELDS = {"id", "lang", "old", "new", "label", "kind", "split"}
LABELS = {"update", "not_update"}
LANGS = {"en", "zh"}
SPLITS = {"tuned", "held-out"}


def _split_of(seed: str, row_id: str) -> str:
    first = hashlib.sha256((seed + row_id).encode()).digest()[0]
    return "tuned" if first % 2 == 0 else "held-out"


@pytest.fixture(scope="module", params=sorted(SPECS))
def corpus(request) -> tuple[tuple, list[dict]]:
    lines = (CORPORA / request.param).read_text(encoding="utf-8").splitlines()
    assert all(line.strip() for line in lines), "blank line in the corpus"
    return SPECS[request.param], [json.loads(line) for line in lines]


@pytest.fixture
def rows(corpus) -> list[dict]:
    return corpus[1]


def test_every_row_has_exactly_the_fields_with_allowed_values(rows):
    for row in rows:
        assert set(row) == FIELDS, row.get("id")
        assert all(isinstance(row[f], str) for f in FIELDS), row["id"]
        assert row["label"] in LABELS, row["id"]
        assert row["lang"] in LANGS, row["id"]
        assert row["split"] in SPLITS, row["id"]
        assert row["kind"].strip(), row["id"]


def test_ids_are_unique_and_name_their_language(corpus):
    (_, prefix, *_), rows = corpus
    ids = [row["id"] for row in rows]
    assert len(ids) == len(set(ids))
    for row in rows:
        assert row["id"].startswith(f"{prefix}{row['lang']}-"), row["id"]


def test_no_empty_text_and_no_pair_repeats_itself(rows):
    for row in rows:
        assert row["old"].strip() and row["new"].strip(), row["id"]
        assert row["old"].strip() != row["new"].strip(), row["id"]
    pairs = [(row["old"], row["new"]) for row in rows]
    assert len(pairs) == len(set(pairs)), "the same pair appears twice"


def test_split_is_the_one_the_hash_rule_gives(corpus):
    (seed, *_), rows = corpus
    wrong = [row["id"] for row in rows if row["split"] != _split_of(seed, row["id"])]
    assert wrong == []


def test_each_split_holds_both_labels_in_both_languages(rows):
    cells = Counter((row["split"], row["lang"], row["label"]) for row in rows)
    for split in SPLITS:
        for lang in LANGS:
            for label in LABELS:
                assert cells[(split, lang, label)] > 0, (split, lang, label)


def test_size_and_balance_are_what_the_protocol_says(corpus):
    (_, _, least, (low, high), (zh_low, zh_high)), rows = corpus
    assert len(rows) >= least
    labels = Counter(row["label"] for row in rows)
    assert low <= labels["update"] / len(rows) <= high
    zh = sum(row["lang"] == "zh" for row in rows) / len(rows)
    assert zh_low <= zh <= zh_high
