"""Running tallies: a count the user keeps, restated with a new value, replaces the older
statement of it through `s.memory`; events, goals, other things counted, other people's counts,
plans and machine text never do."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Engine
from engine.memory.config import MemoryConfig
from engine.memory.counts import restated, tallies
from engine.memory.embeddings import HashingEmbedder
from engine.memory.rules import RulesJudge


@pytest.fixture
def memory():
    engine = Engine.open("sqlite:///:memory:", memory=MemoryConfig(embedder=HashingEmbedder()))
    try:
        yield engine.session("s").memory
    finally:
        engine.close()


def _invalidated(memory, old: str, new: str):
    first = memory.add(old)
    memory.add(new)
    return {m.id: m for m in memory.items(include_invalid=True)}[first]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (
            "I've completed 4 projects since starting painting classes, and I feel confident.",
            "By the way, I just finished my 5th project since starting painting classes!",
        ),
        (
            "I'm reading \"Dune\" and I'm currently on page 200.",
            'Quick update, I\'m now on page 220 of "Dune".',
        ),
        (
            "I've been using my Fitbit Charge 3 for 6 months now, do you have tips on step goals?",
            "I just realized I've been using my Fitbit Charge 3 for 9 months now.",
        ),
        (
            "We have 30 dozen eggs stocked up in the fridge at the moment.",
            "We've got 20 dozen eggs stocked up in the fridge right now.",
        ),
        (
            "I've tried Emma's recipes on her channel, I've already tried out two of them.",
            "I've tried out 3 of Emma's recipes so far, and they're all amazing.",
        ),
        (
            "To correct myself, I actually need 125 stars to reach the gold level, not 400.",
            "Actually, I need 120 stars to reach the gold level, not 300.",
        ),
        ("我已经读了3本书，都是科幻小说。", "我现在已经读了5本书，都是科幻小说。"),
        # the count said after its noun
        (
            "I've got 20 titles waiting on my to-watch list.",
            "I keep adding titles to my to-watch list, currently 25.",
        ),
        # other words that say the count is the current one
        (
            "I've visited 12 countries in Europe with my backpack.",
            "Portugal was great, that makes 13 countries in Europe with my backpack.",
        ),
        (
            "I have 500 followers on my pottery Instagram account.",
            "I just hit 600 followers on my pottery Instagram account!",
        ),
        # a frequency: "twice a week" counts times like "three times a week"
        ("I go to yoga twice a week.", "I now go to yoga three times a week."),
    ],
)
def test_a_restated_count_replaces_the_older_one(memory, old, new):
    m = _invalidated(memory, old, new)
    assert not m.valid
    assert m.invalid_by == "rules"
    assert "count now" in (m.invalid_reason or "")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # events, not a count kept: no word saying the count is the current one
        (
            "I caught 7 bass on my trip to Lake Michigan.",
            "We caught 9 bass at Lake Michigan that day.",
        ),
        (
            "I spent 70 hours playing Assassin's Creed.",
            "It took me 25 hours to finish playing Celeste.",
        ),
        # another thing counted: disjoint names
        ("I've completed three courses on Coursera.", "I've now completed two courses on edX."),
        (
            "I've had my acoustic guitar, a Yamaha FG800, for about 8 years.",
            "I've had my Fender Stratocaster guitar for about 5 years now.",
        ),
        # a goal is no count
        ("I just need a total of 300 points at Sephora.", "My Sephora total is 200 points so far."),
        # plans, wishes and reports are no count
        ("I have 2 cats at home now.", "I'm thinking of having 3 cats at home someday."),
        ("I have 2 cats at home now.", "My sister said she has 3 cats at home now."),
        # the same value said again
        ("I have 3 cats at home now.", "We still have 3 cats at home now, all rescued."),
        # nothing shared but the noun
        (
            "I've been working professionally for 9 years.",
            "I've been in this field since college, 4 years.",
        ),
        # machine text and quotes
        ("I have 2 cats at home.", '{"cats": 5, "note": "I have 5 cats at home now"}'),
        ("I have 2 cats at home.", 'She wrote "I have 5 cats at home now" on her blog.'),
        ("I have 2 cats at home.", "[shares image: a sign saying I have 5 cats at home now]"),
        # the same frequency of another activity: units and "go" are no shared subject
        ("I go to yoga 2 times a week.", "I now go to the gym 3 times a week."),
        ("I go to yoga twice a week.", "I now go swimming three times a week."),
        # a count after its noun: questions, another person's, a plan
        (
            "I've got 20 titles waiting on my to-watch list.",
            "Is my to-watch list currently 25 titles long?",
        ),
        (
            "I've got 20 titles waiting on my to-watch list.",
            "My brother keeps titles on his to-watch list, currently 25.",
        ),
        (
            "I have 500 followers on my pottery Instagram account.",
            "If I just hit 600 followers on my pottery Instagram account I'd celebrate.",
        ),
    ],
)
def test_what_is_not_a_restated_count_never_invalidates(memory, old, new):
    assert _invalidated(memory, old, new).valid


def test_a_count_is_the_owners_own():
    judge = RulesJudge()
    old = tallies("Caroline: I've read 3 books this month so far about sailing boats.")
    new = tallies("Mel: I've read 5 books this month so far about sailing boats.")
    assert old and new
    assert restated(old, new) is None  # another speaker's count
    same = tallies("Caroline: I've now read 5 books this month about sailing boats.")
    assert restated(old, same) is not None
    assert judge.keys("I've now read 5 books about sailing.") >= {"|tally:book"}


def test_a_statement_before_a_question_counts_but_the_question_does_not():
    assert [
        t.values for t in tallies("I've had Luna for 6 months now, do you think she needs a chip?")
    ] == [frozenset({6.0})]
    assert tallies("Do you think I should get 3 cats now?") == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.sampled_from(
            [
                "How many cats do you have now?",
                "Budget: 1200",
                "2024-05-01 12:00:03 INFO processed 5 items so far",
                "| cats | 3 |\n|---|---|",
                "He has 4 dogs now.",
                "If I had 6 dogs now I'd need a bigger house.",
                "I'm planning to adopt 2 more cats this year.",
                "On 7/10 at 3 pm I met 2 friends.",
                "I paid $40 for 2 tickets.",
                "```\ncats = 5  # now\n```",
                "I want to reach 100 followers so far.",
                "Caroline: I have 3 cats now.",
                "mel: I have 4 cats now.",
            ]
        ),
        min_size=1,
        max_size=12,
    )
)
def test_counts_in_noise_never_invalidate_a_users_count(texts):
    engine = Engine.open("sqlite:///:memory:", memory=MemoryConfig(embedder=HashingEmbedder()))
    try:
        s = engine.session("s")
        s.memory.add("I have 1 cat at home now.")
        for text in texts:
            s.memory.add(text)
        invalid = [m for m in s.memory.items(include_invalid=True) if not m.valid]
        assert invalid == [], [(m.text, m.invalid_reason) for m in invalid]
    finally:
        engine.close()
