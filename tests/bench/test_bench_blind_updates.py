"""bench/blind_updates.py skips cleanly without its corpus, reads the corpus's labels, and
never prints a held-out row."""

from __future__ import annotations

import importlib.util
import json
import sys

from support.paths import ROOT


def _bench():
    spec = importlib.util.spec_from_file_location(
        "bench_blind_updates", ROOT / "bench" / "blind_updates.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_blind_updates"] = module
    spec.loader.exec_module(module)
    return module


def test_it_skips_cleanly_without_the_corpus(tmp_path):
    lines: list[str] = []
    assert (
        _bench().main(["--data", str(tmp_path / "absent.jsonl"), "--check"], out=lines.append) == 0
    )
    assert len(lines) == 1 and "skipped" in lines[0]


def test_it_scores_per_split_and_language_and_shows_tuned_rows_only(tmp_path):
    rows = [
        {
            "old": "I live in Leeds.",
            "new": "we finally moved to Bristol",
            "label": "update",
            "lang": "en",
            "split": "tuned",
        },
        {
            "old": "I live in Leeds.",
            "new": "my sister moved to Bristol",
            "label": "not_update",
            "lang": "en",
            "split": "tuned",
        },
        {
            "old": "我住在杭州。",
            "new": "我上个月搬到苏州了。",
            "label": "update",
            "lang": "zh",
            "split": "held-out",
        },
        {
            "old": "I drive a Kia.",
            "new": "SECRET held-out row",
            "label": "update",
            "lang": "en",
            "split": "held-out",
        },
    ]
    data = tmp_path / "blind.jsonl"
    data.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n")
    lines: list[str] = []
    assert _bench().main(["--data", str(data), "--show", "10"], out=lines.append) == 0
    text = "\n".join(lines)
    assert "blind to the rules" in lines[0]
    assert any(line.startswith("tuned     en") and "1/0" in line for line in lines)
    assert any(line.startswith("held-out  zh") and "[held-out half, scored again" in line
               for line in lines)
    assert "SECRET" not in text and "我住在杭州" not in text  # held-out rows are never printed
