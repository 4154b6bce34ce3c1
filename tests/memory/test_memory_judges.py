"""Contradiction judges and keyed facts: format never decides, keys replace exactly, judges are
batched, cached and explain themselves, and memory sits below the runtime."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.paths import ROOT

from engine import Engine
from engine.memory.config import MemoryConfig
from engine.memory.embeddings import HashingEmbedder
from engine.memory.judges import FunctionJudge, Judgement
from engine.memory.rules import RulesJudge
from engine.memory.surface import mentions, query_speakers, split_speaker, statements

# -- no judgement from surface format ----------------------------------------------------------

NAMES = ["Caroline", "caroline", "CAROLINE", "mel", "Dr. Lee", "小明", "José", "o'neil"]
CITIES = ["Paris", "Denver", "Berlin", "Tokyo", "Lagos", "Lima"]
JOBS = ["Acme", "Globex", "Initech", "Umbrella"]


@st.composite
def noise(draw) -> str:
    """Text whose format looks like a claim but says nothing new about the speaker."""
    city = draw(st.sampled_from(CITIES))
    job = draw(st.sampled_from(JOBS))
    word = draw(
        st.sampled_from(["Yeah", "Scrambled", "Sure", "lol", "Paris", "ok!", "好的", "嗯嗯"])
    )
    body = draw(
        st.sampled_from(
            [
                word,
                f"[shares image: a photo of a sign saying I moved to {city}]",
                f"Look at this! [shares image: a photo of {city}]",
                f"Did you move to {city}?",
                f"Have you ever lived in {city}?",
                f'She said "I moved to {city}" and laughed.',
                f"He told me 'I work at {job} now' last time.",
                f'{{"user": "me", "city": "{city}", "note": "I moved to {city}"}}',
                f"```\nprint('I moved to {city}')\nmy_city = '{city}'\n```",
                f"| name | city |\n|---|---|\n| me | {city} |",
                f"2024-05-01 12:00:03 INFO I moved to {city}",
                f"ERROR: user moved to {city}: permission denied",
                f"> I moved to {city}\nquoted from the old thread",
                f"<attachment: I work at {job}.pdf>",
                f"If I moved to {city} I would be happy.",
                f"I'm thinking about moving to {city} someday.",
                f"你搬到{city}了吗？",
                f"他说他搬到了{city}",
                "haha",
                f"assistant: Great, so you moved to {city}! Anything else?",
                f"# I moved to {city}\nx = compute(city='{city}')",
                f"SELECT * FROM users WHERE city = '{city}';",
                f"tool output: {{'status': 'ok', 'city': '{city}', 'employer': '{job}'}}",
                f"Mom says she moved to {city}.",
                f"Imagine if I worked at {job}!",
                f"city: {city}",
                f"Budget: {draw(st.integers(1, 9999))}",
                f'He said "I replaced my car with a {job} van" and left.',
                f"Did you move your bike to {city}?",
                "> I've started running again\nquoted from the old thread",
                f"```\n# I was promoted to lead at {job}\nrole = 'lead'\n```",
                "[shares image: a sign saying my personal best is 27:45 in the 5K]",
                f"If I moved my bike to the shed in {city} it would rust.",
                "我妈妈把旧电脑换成了新的。",
                f"My sister just hit 600 followers in {city}!",
            ]
        )
    )
    if draw(st.booleans()):
        return f"{draw(st.sampled_from(NAMES))}: {body}"
    return body


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(noise(), min_size=1, max_size=16))
def test_surface_format_never_invalidates(texts):
    facts = ["Caroline: I live in Boston these days.", "I work at Initrode.", "我住在北京。"]
    engine = Engine.open("sqlite:///:memory:", memory=MemoryConfig(embedder=HashingEmbedder()))
    try:
        s = engine.session("s")
        for i, text in enumerate(texts):
            s.memory.add(text)
            if i % 8 == 0:
                s.memory.add(facts[(i // 8) % len(facts)])
        invalid = [m for m in s.memory.items(include_invalid=True) if not m.valid]
        assert invalid == [], [(m.text, m.invalid_reason) for m in invalid]
    finally:
        engine.close()


def test_speaker_prefixes_in_any_case_or_script_are_split_off():
    assert split_speaker("caroline: I moved to Paris") == ("caroline", "I moved to Paris")
    assert split_speaker("小明：我搬到了上海") == ("小明", "我搬到了上海")
    assert split_speaker("at 12:30 we met")[0] is None
    assert statements("caroline: Yeah") == []
    assert statements("Caroline: [shares image: a photo of a dog]") == []


def test_a_real_update_still_invalidates_among_the_noise():
    s_texts = ["caroline: yeah", "Caroline: I live in Boston.", "caroline: [shares image: x]"]
    engine = Engine.open("sqlite:///:memory:", memory=MemoryConfig(embedder=HashingEmbedder()))
    try:
        s = engine.session("s")
        ids = [s.memory.add(t) for t in s_texts]
        new = s.memory.add("CAROLINE: Guess what, I just moved to Denver!")
        valid = {m.id for m in s.memory.items()}
        assert valid == {ids[0], ids[2], new}
    finally:
        engine.close()


# -- judges --------------------------------------------------------------------------------------


class Scripted:
    """A judge that says yes to the pairs it is told, and records each batch."""

    name = "scripted"

    def __init__(self, yes: dict[tuple[str, str], Judgement]):
        self.yes = yes
        self.batches: list[list[tuple[str, str]]] = []

    def judge(self, pairs):
        self.batches.append(list(pairs))
        return [self.yes.get(tuple(p), Judgement(False, 0.0, "")) for p in pairs]


def test_a_scripted_judge_is_asked_once_per_add_and_its_reason_is_kept():
    old, new = "the cat is called Tom", "the cat is called Felix"
    judge = Scripted(
        {
            (old, new): Judgement(True, 0.95, "the cat was renamed"),
            ("the cat sleeps a lot", new): Judgement(True, 0.5, "unsure"),
        }
    )
    engine = Engine.open(
        "sqlite:///:memory:", memory=MemoryConfig(embedder=HashingEmbedder(), judge=judge)
    )
    try:
        s = engine.session("s")
        a = s.memory.add(old)
        b = s.memory.add("the cat sleeps a lot")
        judge.batches.clear()
        c = s.memory.add(new)
        assert len(judge.batches) == 1 and set(judge.batches[0]) >= {(old, new)}
        assert {m.id for m in s.memory.items()} == {b, c}  # 0.5 is under min_confidence
        [m] = [m for m in s.memory.items(include_invalid=True) if m.id == a]
        assert (m.invalid_by, m.invalid_confidence, m.invalid_reason) == (
            "scripted",
            0.95,
            "the cat was renamed",
        )
        [fix] = s.memory.corrections()
        assert (fix["judge"], fix["confidence"], fix["reason"]) == (
            "scripted",
            0.95,
            "the cat was renamed",
        )
    finally:
        engine.close()


def test_the_judge_sees_only_pairs_that_may_share_an_owner():
    judge = Scripted({})
    engine = Engine.open(
        "sqlite:///:memory:", memory=MemoryConfig(embedder=HashingEmbedder(), judge=judge)
    )
    try:
        s = engine.session("s")
        s.memory.add("Melanie: I live in Boston near the river")
        s.memory.add("Caroline: I live in Boston near the park")
        judge.batches.clear()
        s.memory.add("Caroline: I moved from Boston to Denver")
        [batch] = judge.batches
        assert [old for old, _ in batch] == ["Caroline: I live in Boston near the park"]
        s.memory.add("Caroline: Melanie moved out of Boston")  # names Melanie: her turn counts
        assert "Melanie: I live in Boston near the river" in [o for o, _ in judge.batches[-1]]
    finally:
        engine.close()


def test_function_judge_batches_and_caches():
    calls = []

    def llm(pairs):
        calls.append(pairs)
        return [(p[1].endswith("B"), 0.9, "changed") for p in pairs]

    judge = FunctionJudge(llm, name="my-llm")
    first = judge.judge([("x A", "x B"), ("y A", "y C")])
    again = judge.judge([("x A", "x B"), ("z", "z B")])
    assert [j.contradicts for j in first] == [True, False]
    assert [j.contradicts for j in again] == [True, True]
    assert calls == [[("x A", "x B"), ("y A", "y C")], [("z", "z B")]]


def test_rules_judge_reads_first_person_changes_in_english_and_chinese():
    judge = RulesJudge()
    pairs = [
        ("I live in Berlin", "I moved to Paris", True),
        ("My phone number is 555-1234", "My new number is 555-9876", True),
        ("I play tennis every Sunday", "I don't play tennis anymore", True),
        ("我住在北京", "我搬到了上海", True),
        ("我每天早上喝咖啡", "我不喝咖啡了", True),
        ("Caroline: I live in Boston.", "Melanie: I moved to Denver.", False),
        ("I live in Boston", "I live in Boston, MA", False),
        ("I live in Boston", "I'm going to move to Denver", False),
    ]
    got = [j.contradicts for j in judge.judge([(a, b) for a, b, _ in pairs])]
    assert got == [want for *_, want in pairs]


UPDATES = [
    # a promotion, a new job as
    ("I work as a junior analyst at Deloitte.", "I got promoted to senior analyst last month."),
    ("My job title is Software Engineer.", "I was promoted to Staff Engineer."),
    ("我的职位是工程师。", "我升职为高级工程师了。"),
    # any attribute of mine changed
    ("My commute is 20 minutes each way.", "I changed my commute to 45 minutes since the move."),
    # ends: something sold, a habit given up
    ("I drive a Honda Civic to work.", "I sold my Honda Civic last month."),
    ("I run every morning before work.", "I stopped running after my knee injury."),
    ("我每天早上喝咖啡。", "我戒咖啡了。"),
]
# Left to a model judge (`engine.memory.endpoint`), no longer read by these rules: named
# replacements ("I replaced my Honda with a Tesla"), habits taken up again, where a thing was
# moved, personal bests.

NOT_UPDATES = [
    # questions
    ("I drive a Honda Civic.", "Should I replace my Honda Civic with a Tesla?"),
    ("I don't drink coffee.", "Have I started drinking coffee again?"),
    ("My bike is in the garage.", "Did I move my bike to the shed?"),
    ("我不喝咖啡。", "我开始喝咖啡了吗？"),
    # quoted text
    ("I drive a Honda Civic.", 'The ad said "I replaced my Honda Civic with a Tesla".'),
    ("My 5K personal best is 27:45.", 'Her shirt read "new 5K personal best of 26:30".'),
    # third parties
    ("I drive a Honda.", "My brother replaced his Honda with a Ford."),
    ("I don't drink coffee.", "My wife has started drinking coffee again."),
    ("My bike is in the garage.", "My neighbour moved his bike to the shed."),
    ("My 5K personal best is 27:45.", "My sister set a new 5K personal best of 26:30."),
    ("My 5K personal best is 27:45.", "Sarah's 5K personal best is now 26:30."),
    ("I work as a nurse.", "Tom got promoted to head nurse."),
    ("我不喝咖啡。", "他最近开始喝咖啡了。"),
    # hypotheticals and plans
    ("I live in Boston.", "If I moved to Denver I'd be happier."),
    ("I drive a Honda Civic.", "I might replace my Honda Civic with a Tesla next year."),
    ("I don't drink coffee.", "If I started drinking coffee I'd never sleep."),
    ("My bike is in the garage.", "I'm thinking of moving my bike to the shed."),
    # negated
    ("I live in Boston.", "I haven't moved to Denver."),
    ("My bike is in the garage.", "I haven't moved my bike to the shed."),
    ("I work as a nurse.", "I wasn't promoted to head nurse."),
    # not the same thing, or no change
    ("I need a laptop bag for the trip.", "I replaced my laptop with a MacBook Air."),
    ("I don't drink.", "I've started drinking coffee."),
    ("My painting is a gift from my mom.", "I moved my painting to the hallway."),
    ("My road bike is in the garage.", "I moved my mountain bike to the shed."),
    ("My 5K personal best is 27:45.", "I set a new personal best of 52:10 in the 10K."),
    ("My personal best is 27:45.", "I set a new personal best of 26:30."),
    ("My 5K personal best is 27:45.", "I set a new 5K personal best of 27 minutes and 45 seconds."),
    ("I work as a nurse.", "I changed my mind to stay home."),
]


@pytest.mark.parametrize(("old", "new"), UPDATES)
def test_rules_judge_reads_promotions_changed_attributes_and_ends(old, new):
    [verdict] = RulesJudge().judge([(old, new)])
    assert verdict.contradicts and verdict.confidence >= MemoryConfig().min_confidence, verdict
    assert verdict.reason


@pytest.mark.parametrize(("old", "new"), NOT_UPDATES)
def test_rules_judge_ignores_questions_quotes_third_parties_hypotheticals_and_negations(old, new):
    [verdict] = RulesJudge().judge([(old, new)])
    assert not (verdict.contradicts and verdict.confidence >= MemoryConfig().min_confidence), (
        verdict
    )


def test_an_end_invalidates_through_session_memory_with_its_reason():
    engine = Engine.open("sqlite:///:memory:", memory=MemoryConfig(embedder=HashingEmbedder()))
    try:
        s = engine.session("s")
        old = s.memory.add("Priya: I drive a Honda Civic to work.")
        s.memory.add("Priya: I love my bike rides on Sundays.")
        s.memory.add("Priya: I sold my Honda Civic, I take the train now.")
        gone = [m for m in s.memory.items(include_invalid=True) if not m.valid]
        assert [m.id for m in gone] == [old]
        assert gone[0].invalid_by == "rules"
        assert "honda civic" in (gone[0].invalid_reason or "")
    finally:
        engine.close()


# -- keyed facts across processes ----------------------------------------------------------------


def test_keyed_facts_replace_across_engines_on_one_file(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    config = MemoryConfig(embedder=HashingEmbedder())
    one, two = Engine.open(url, memory=config), Engine.open(url, memory=config)
    try:
        a, b = one.session("s"), two.session("s")
        old = a.memory.add("home city: Berlin", key="user.home_city")
        new = b.memory.add("home city: Paris", key="user.home_city")
        assert {m.id for m in a.memory.items()} == {new}
        [m] = [m for m in a.memory.items(include_invalid=True) if m.id == old]
        assert (m.invalid_by, m.superseded_by) == ("key", new)
        assert [h.id for h in a.memory.recall("home city", k=5)] == [new]
    finally:
        one.close()
        two.close()


# -- architecture ----------------------------------------------------------------------------


def test_memory_does_not_import_the_runtime():
    for path in (ROOT / "engine" / "memory").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not name.startswith(("engine.runtime", "engine.store")), (path, name)


def test_importing_decay_loads_no_store_and_no_prometheus():
    code = (
        "import sys, types\n"
        f"pkg = types.ModuleType('engine'); pkg.__path__ = [{str(ROOT / 'engine')!r}]\n"
        "sys.modules['engine'] = pkg\n"
        "import engine.memory.decay\n"
        "bad = [m for m in sys.modules if m.startswith(('engine.store', 'engine.runtime',"
        " 'prometheus_client', 'engine.memory.session'))]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().replace("'", '"')) == []


def test_default_judge_on_the_labelled_pairs_is_precise_and_finds_some():
    """tests/data/contradictions.jsonl was written by an earlier author (for the older
    `RuleChecker`), not with these rules; the default judge must stay precise on it."""
    rows = [
        json.loads(line)
        for line in (ROOT / "tests" / "data" / "contradictions.jsonl").read_text().splitlines()
        if line.strip()
    ]
    judge, floor = RulesJudge(), MemoryConfig().min_confidence
    verdicts = judge.judge([(r["older"], r["newer"]) for r in rows])
    said = [v.contradicts and v.confidence >= floor for v in verdicts]
    tp = sum(s and r["contradiction"] for s, r in zip(said, rows, strict=True))
    fp = sum(s and not r["contradiction"] for s, r in zip(said, rows, strict=True))
    positives = sum(r["contradiction"] for r in rows)
    assert tp / max(1, tp + fp) >= 0.9
    assert tp / positives >= 0.4


@pytest.mark.parametrize(
    ("text", "speakers"),
    [
        ('<Bart>:"嘿，你知道吗？" <Assistant>:"真棒" <Bart>:"嗯"', ["bart"]),
        ("Bart: hi\nAssistant: hello\nlisa: hey", ["bart", "lisa"]),
        ("[Dr. Lee]: take two a day", ["dr. lee"]),
        ("小明：你好\n助手：你好呀", ["小明"]),
        ("user: where do I live?", []),
        ("where do I live? Bart: maybe", []),
        ("what happened at 12:30?", []),
        ("I have a question: what is the rate?", []),
    ],
)
def test_query_speakers_are_the_named_speakers_of_a_text_written_as_turns(text, speakers):
    assert query_speakers(text) == speakers


def test_mentions_finds_a_name_as_a_word_or_in_han_script():
    assert mentions("bart").search("Bart在圣诞节晚会上跳舞")
    assert mentions("bart").search("went out with bart.")
    assert not mentions("bart").search("Barton went out")
    assert mentions("小明").search("昨天小明去了学校")
