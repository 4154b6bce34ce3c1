"""The default contradiction checker: the newer fact contradicts (invalidates) the older one."""

from __future__ import annotations

import json

import pytest
from support.paths import TESTS

from engine.memory.contradictions import Contradiction, ContradictionChecker, RuleChecker

CHECKER = RuleChecker()


def kinds(new: str, existing: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(c.older_id, c.kind) for c in CHECKER.check(new, existing)]


@pytest.mark.parametrize(
    "older, newer, kind",
    [
        ("FX rate EUR/USD fixed at 1.08 for this task", "FX rate EUR/USD fixed at 1.10", "number"),
        ("The deploy target is staging", "The deploy target is production", "value"),
        ("timeout = 60s", "timeout = 30s", "number"),
        ("The API supports pagination", "The API does not support pagination", "negation"),
        ("The API supports pagination", "The API doesn't support pagination", "negation"),
        ("The user is not an admin", "The user is an admin", "negation"),
        ("The meeting is on 2024-05-07", "The meeting is on 2024-05-09", "date"),
        ("The release happens on 7 May 2024", "The release happens on May 9, 2024", "date"),
        ("We have 5 servers in the cluster", "We have 3 servers in the cluster", "number"),
        ("Budget set to 2,000 EUR", "Budget set to 2,500 EUR", "number"),
        ("汇率固定为1.08", "汇率固定为1.10", "number"),
        ("部署目标是测试环境", "部署目标是生产环境", "value"),
        ("这个接口支持分页", "这个接口不支持分页", "negation"),
        ("会议在2024年5月7日举行", "会议在2024年5月9日举行", "date"),
    ],
)
def test_contradiction_marks_the_older_fact(older, newer, kind):
    found = CHECKER.check(newer, [("old", older), ("other", "Melanie likes painting sunsets")])
    assert [(c.older_id, c.kind) for c in found] == [("old", kind)]
    assert found[0].reason
    assert 0 < found[0].similarity <= 1


@pytest.mark.parametrize(
    "older, newer",
    [
        ("FX rate EUR/USD fixed at 1.08 for this task", "FX rate EUR/USD fixed at 1.080"),
        ("The deploy target is staging", "The deploy target is staging for the demo"),
        ("Caroline is in Paris", "Caroline is happy"),
        ("The capital of Germany is Berlin", "The capital of France is Paris"),
        ("Order A-1 total is 120 EUR", "Order A-1 total is 120 EUR"),
        ("The crop tool failed", "Melanie painted a sunrise"),
        ("汇率固定为1.08", "汇率固定为1.08，本次任务有效"),
    ],
)
def test_consistent_or_unrelated_facts_are_not_flagged(older, newer):
    assert kinds(newer, [("old", older)]) == []


def test_reports_every_contradicted_older_fact_most_similar_first():
    existing = [
        ("a", "FX rate EUR/USD fixed at 1.05"),
        ("b", "The FX rate EUR/USD fixed at 1.08 for this task"),
        ("c", "Unrelated note about the deploy freeze"),
    ]
    found = CHECKER.check("The FX rate EUR/USD fixed at 1.10 for this task", existing)
    assert [c.older_id for c in found] == ["b", "a"]
    assert found[0].attribute == "The FX rate EUR/USD"
    assert (found[0].old_value, found[0].new_value) == ("1.08", "1.10")


def test_only_the_most_similar_are_examined():
    checker = RuleChecker(top_n=1)
    existing = [("a", "FX rate EUR/USD fixed at 1.05"), ("b", "FX rate EUR/USD fixed at 1.08")]
    found = checker.check("FX rate EUR/USD fixed at 1.10", existing)
    assert len(found) == 1


def test_checker_protocol_is_pluggable():
    class AlwaysNewest:
        def check(self, new_text, existing):
            return [
                Contradiction(older_id=i, kind="value", reason="newer wins") for i, _ in existing
            ]

    for checker in (RuleChecker(), AlwaysNewest()):
        assert isinstance(checker, ContradictionChecker)
    assert [c.older_id for c in AlwaysNewest().check("x", [("a", "y")])] == ["a"]


def test_empty_inputs():
    assert CHECKER.check("anything", []) == []
    assert CHECKER.check("", [("a", "The API supports pagination")]) == []


# --- the labelled set ---------------------------------------------------------------------------
# tests/data/contradictions.jsonl: pairs (older, newer) labelled "the newer contradicts the older"
# or not, English and Chinese; about half real updates, half hard non-contradictions (chat turns,
# greetings, questions, plans, opinions, other speakers, other subjects, refinements). Sources:
# "agent" (written for agent memories), "locomo-style" (paraphrased after LoCoMo dialogue) and
# "locomo-excerpt" (short LoCoMo turns, CC BY-NC 4.0, evaluation only). The split is fixed
# (every third pair is held out); the rules were never tuned on the held-out part.

LABELLED = TESTS / "data" / "contradictions.jsonl"
HELD_OUT_PRECISION = 0.90
HELD_OUT_RECALL = 0.70


def _labelled() -> list[dict]:
    return [json.loads(line) for line in LABELLED.read_text(encoding="utf-8").splitlines()]


def precision_recall(rows: list[dict], checker=CHECKER) -> tuple[float, float, int]:
    tp = fp = fn = 0
    for row in rows:
        flagged = bool(checker.check(row["newer"], [("old", row["older"])]))
        tp += flagged and row["contradiction"]
        fp += flagged and not row["contradiction"]
        fn += (not flagged) and row["contradiction"]
    return tp / max(1, tp + fp), tp / max(1, tp + fn), len(rows)


def test_the_labelled_set_is_balanced_and_bilingual():
    rows = _labelled()
    assert len(rows) >= 200
    updates = sum(r["contradiction"] for r in rows)
    assert 0.4 <= updates / len(rows) <= 0.6
    for lang in ("en", "zh"):
        for label in (True, False):
            assert sum(r["lang"] == lang and r["contradiction"] == label for r in rows) >= 20
    held_out = [r for r in rows if r["split"] == "heldout"]
    assert len(held_out) * 3 >= len(rows) - 2
    assert len({r["id"] for r in rows}) == len(rows)


def test_precision_and_recall_on_the_labelled_set(capsys):
    rows = _labelled()
    report = {}
    for split in ("dev", "heldout"):
        report[split] = precision_recall([r for r in rows if r["split"] == split])
    with capsys.disabled():
        for split, (p, r, n) in report.items():
            print(f"\ncontradictions {split:<8} n={n:<4} precision {p:.3f}  recall {r:.3f}")
    precision, recall, _ = report["heldout"]
    assert precision >= HELD_OUT_PRECISION
    assert recall >= HELD_OUT_RECALL


@pytest.mark.parametrize(
    "older, newer",
    [
        ("Caroline: I live in Boston.", "Caroline: I moved to Denver."),
        ("I live in Berlin", "I moved to Paris"),
        ("my budget is 500", "budget is now 800"),
        ("Melanie: I love camping.", "Melanie: I don't like camping anymore."),
        ("我住在北京", "我搬到了上海"),
    ],
)
def test_updates_of_the_same_attribute_are_caught_without_shared_words(older, newer):
    assert CHECKER.keys(older) & CHECKER.keys(newer)
    assert kinds(newer, [("old", older)]) != []


@pytest.mark.parametrize(
    "older, newer",
    [
        ("Caroline: Hey Mel! Good to see you!", "Caroline: Hey Melanie, great to hear from you."),
        ("Caroline: I live in Boston.", "Melanie: I live in Chicago."),
        ("Did you move to Paris?", "I live in Berlin."),
        ("I'd love to live in Tokyo someday.", "I live in Osaka."),
        ("Melanie: I love painting.", "Melanie: I love pottery too."),
        ("Keep going and don't give up!", "Keep going!"),
    ],
)
def test_ordinary_conversation_is_left_alone(older, newer):
    assert kinds(newer, [("old", older)]) == []
