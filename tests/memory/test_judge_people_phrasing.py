"""The default rules judge on updates phrased the way people type them in chat, and on hard
non-updates next to them (examples written for this file, not taken from any corpus).

Pins the clause-by-clause reading of `RulesJudge` (`engine.memory.rules`): chat as written
(lower-case "i", a dropped subject, several clauses in one turn), ends of things and plans,
corrections, new numbers, counts said without their noun; and that surface format (quotes,
captions, code, logs, questions, short replies) still never invalidates anything.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Engine
from engine.memory.clauses import clauses
from engine.memory.config import MemoryConfig
from engine.memory.embeddings import HashingEmbedder
from engine.memory.rules import RulesJudge
from engine.memory.surface import statements


def _engine() -> Engine:
    return Engine.open("sqlite:///:memory:", memory=MemoryConfig(embedder=HashingEmbedder()))


def _flagged(old: str, new: str) -> bool:
    """Fed as a user feeds them: a fresh session, ``s.memory.add(old)`` then ``add(new)``."""
    engine = _engine()
    try:
        s = engine.session("s")
        s.memory.add(old)
        s.memory.add(new)
        return any(not m.valid for m in s.memory.items(include_invalid=True))
    finally:
        engine.close()


# Left to a model judge (`engine.memory.endpoint`), no longer read by these rules: a plain state
# said as current ("I drink matcha in the mornings now"), a switch to a thing of the same kind
# ("switched to Pocket Casts for podcasts", "… instead of …"), a new number with no attribute
# word ("got a new number btw: …"), something got against an older "I don't have one", the same
# statement with another number ("现在每个月交一千八的房租了").
UPDATES = [
    # a dropped subject, lower case
    ("I drive a silver Mazda 3.", "sold the mazda last weekend, taking the train for now"),
    (
        "i use a Kindle Paperwhite for reading",
        "gave the kindle to my niece, reading paper books again",
    ),
    (
        "My gym is the Anytime Fitness near work.",
        "cancelled the anytime fitness membership, too pricey",
    ),
    ("I'm on the Tuesday book club mailing list.", "unsubscribed from the book club list lol"),
    ("we rent a flat in Hackney", "we moved out of hackney in june, we're in Walthamstow now"),
    # ends of things, relationships, plans
    ("My laptop is an old Dell XPS.", "the xps finally died, typing this on my phone"),
    ("I'm dating Marco, we met at climbing.", "marco and i split up, it was mutual"),
    ("We're going to Lisbon for our anniversary in May.", "lisbon's off, the flights doubled"),
    ("I'm flying to Oslo for the summit next month.", "the summit got cancelled so no oslo for me"),
    ("At home we cook everything on a gas stove.", "the gas stove is gone, we put in induction"),
    ("I'm employed at Contoso as a tester.", "my last day at contoso was thursday"),
    (
        "I teach piano lessons on Saturdays.",
        "I'm not teaching piano anymore, my back can't take it",
    ),
    # corrections, new numbers, counts
    ("The flight is at 6:40 on Friday.", "sorry, I had it wrong, the flight is at 8:15 on Friday"),
    ("I weigh 78 kg at the moment.", "down to 74!! cutting sugar worked"),
    ("We keep 12 hens in the back garden.", "a badger got in, we're down to 9 hens"),
    # Chinese
    ("我开一辆白色的大众。", "大众卖掉了，现在骑电动车上班。"),
    ("我在学钢琴，每周两节课。", "钢琴放弃了，改学吉他了。"),
    ("我的邮箱是lin@example.com。", "跟你说一下，我的邮箱改成了lin.new@example.com。"),
    ("我和阿杰在谈恋爱。", "我和阿杰分手了，不想多说。"),
    ("我现在65公斤。", "瘦到60了，开心。"),
    ("我们家有两只狗。", "又领养了一只，现在三只狗了。"),
    ("我们公司在望京。", "公司搬到顺义了，通勤变远了。"),
    # a break-up said with both names, with no belief around it
    ("I'm seeing Dana.", "dana and I split up over the summer"),
]

NOT_UPDATES = [
    # another person's change, new number, end
    ("I drive a silver Mazda 3.", "my brother sold his mazda last weekend"),
    ("Text me on 07700 900123.", "my dad's new number is 07700 900789, can you save it"),
    ("我的手机号是13811112222。", "帮我存一下我妈的新号码：13933334444"),
    ("I'm dating Marco.", "Priya and Sam split up, so awkward at work"),
    # additions, refinements, habits not ended
    ("I drink black tea in the mornings.", "I also drink matcha in the afternoons now."),
    ("I moved to Porto last year.", "I live in Foz, the seaside part of porto"),
    ("I'm on the early shift at the bakery.", "I'm on the early shift again tomorrow, ugh"),
    ("I walk the dog at 7.", "been going to the park with the dog at 7, he loves it"),
    ("I weigh 78 kg at the moment.", "I ran 5 km this morning"),
    ("We keep 12 hens in the back garden.", "we got 9 eggs today"),
    # plans, questions, hypotheticals, quotes, events
    ("My laptop is an old Dell XPS.", "if the xps dies I'll get a framework"),
    ("We're going to Lisbon in May.", "is lisbon off because of the strike?"),
    ("I drive a silver Mazda 3.", 'the forum post said "sold the mazda, got a bike"'),
    ("I use a Kindle for reading.", "should I give the kindle to my niece?"),
    ("My gym is Anytime Fitness.", "the gym was closed for cleaning yesterday"),
    # short replies to a question, answers in Chinese
    ("我喜欢吃火锅。", "不喜欢！"),
    ("我喜欢看电影。", "不过我也不喜欢"),
    ("我开一辆白色的大众。", "我朋友把他的大众卖掉了。"),
    ("我在学钢琴。", "你钢琴放弃了吗？"),
    ("我们家有两只狗。", "邻居家有三只狗。"),
    # got something else, or someone else did
    ("We don't have a dog.", "we adopted a cat last week"),
    ("I don't own a car.", "my sister bought a car"),
    ("I don't own a car.", "should I buy a car?"),
    # the same shape with another number, not said as now: two events
    ("I spent $40 on groceries.", "I spent $65 on groceries."),
    ("我今天跑了五公里。", "我今天跑了八公里。"),
    # someone else got the new number, said with their own verb
    ("my mobile is 0412 555 001", "my mum got a new number, 0412 555 019, pop it in her contact"),
    ("Ring me on 0161 496 0000.", "she changed her number to 0161 496 0999 last week"),
    # a break-up people believe in, not one that happened
    ("I'm dating Dana.", "people keep assuming dana and I broke up, we skipped one party lol"),
    # how long a past car lasted, not the car now
    ("我开一辆白色的大众。", "我以前那辆是二手的本田，开了六年才换。"),
    # a stand-in for a while, not the contact from now on
    ("email me at kofi.mensah@yahoo.com", "until friday use kofi@work.example from now on, away"),
]


@pytest.mark.parametrize(("old", "new"), UPDATES)
def test_updates_typed_the_way_people_type_them_invalidate(old, new):
    assert _flagged(old, new), (old, new)


@pytest.mark.parametrize(("old", "new"), NOT_UPDATES)
def test_hard_non_updates_next_to_them_do_not(old, new):
    assert not _flagged(old, new), (old, new)


def test_the_judge_gives_a_reason_and_a_confidence_for_ends_corrections_and_counts():
    judge = RulesJudge()
    pairs = [
        ("I drive a silver Mazda 3.", "sold the mazda last weekend"),
        ("The flight is at 6:40 on Friday.", "sorry, I had it wrong, the flight is at 8:15"),
        ("We keep 12 hens in the back garden.", "a badger got in, we're down to 9 hens"),
    ]
    for verdict in judge.judge(pairs):
        assert verdict.contradicts and verdict.confidence >= MemoryConfig().min_confidence
        assert verdict.reason


def test_chat_is_read_clause_by_clause_with_the_dropped_subject_put_back():
    [s] = statements("traded in the civic, got a used leaf")
    assert clauses(s) == ["I traded in the civic", "I got a used leaf"]
    [s] = statements("Priya left, my new manager is Daniel")
    assert clauses(s) == ["Priya left", "my new manager is Daniel"]
    [s] = statements("Emma and i broke up")
    assert clauses(s) == ["Emma and I broke up"]
    [s] = statements("钢琴放弃了，改学吉他了")
    assert clauses(s) == ["钢琴放弃了", "我改学吉他了"]
    [s] = statements("不喜欢，我胆子小")  # a short answer is no statement of the speaker
    assert clauses(s)[0] == "不喜欢"


def test_plans_and_hedges_end_nothing():
    judge = RulesJudge()
    for text in ["I might sell the mazda", "if the xps dies I'll get a framework",
                 "我打算把车卖了"]:
        _, _, ends, _ = judge.read(text)
        assert ends == [], text


# -- format never decides, for the new shapes too -------------------------------------------------

SHAPES = [
    "sold the mazda",
    "the xps finally died",
    "lisbon's off",
    "down to 74",
    "got a new number: 07700 900456",
    "I drink matcha in the mornings now",
    "switched to Pocket Casts",
    "not teaching piano anymore",
    "钢琴放弃了",
    "大众卖掉了",
    "瘦到60了",
]


@st.composite
def wrapped(draw) -> str:
    """A change-shaped phrase inside a format that makes it nobody's statement."""
    shape = draw(st.sampled_from(SHAPES))
    body = draw(
        st.sampled_from(
            [
                f"[shares image: a meme that says {shape}]",
                f'she wrote "{shape}" on the group chat',
                f"> {shape}\nquoted from the old thread",
                f"```\n# {shape}\nstatus = 'done'\n```",
                f"2024-05-01 12:00:03 INFO {shape}",
                f"ERROR: {shape}: permission denied",
                f'{{"note": "{shape}", "user": "me"}}',
                f"| note | {shape} |\n|---|---|",
                f"{shape}?",
                f"did you say {shape}?",
                f"<attachment: {shape}.txt>",
                "不喜欢！",
                "not really",
                "lol",
            ]
        )
    )
    if draw(st.booleans()):
        return f"{draw(st.sampled_from(['mel', 'Caroline', '小明']))}: {body}"
    return body


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(wrapped(), min_size=1, max_size=12))
def test_change_shapes_in_surface_format_never_invalidate(texts):
    facts = [
        "I drive a silver Mazda 3.",
        "My laptop is an old Dell XPS.",
        "We're going to Lisbon in May.",
        "I weigh 78 kg at the moment.",
        "Text me on 07700 900123.",
        "I teach piano lessons on Saturdays.",
        "我在学钢琴。",
        "我开一辆白色的大众。",
        "我现在65公斤。",
    ]
    engine = _engine()
    try:
        s = engine.session("s")
        for fact in facts:
            s.memory.add(fact)
        for text in texts:
            s.memory.add(text)
        invalid = [m for m in s.memory.items(include_invalid=True) if not m.valid]
        assert invalid == [], [(m.text, m.invalid_reason) for m in invalid]
    finally:
        engine.close()
