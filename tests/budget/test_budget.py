"""ContextBuilder: never over budget (tiktoken on the final text), keeps what it must keep."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.budget.builder import BudgetError, ContextBuilder, split_sentences
from engine.budget.tokens import get_encoding

# Characters that stress BPE boundaries: whitespace runs, punctuation, slashes, CJK, digits.
ALPHABET = st.sampled_from(
    list("abcXYZ019 .,!?;:/'\"{}[]()-_\n\t\r")
    + ["  ", "\n\n", "。", "！", "？", "汇率", "固定", "é", "🙂"]
)
TEXT = st.lists(ALPHABET, max_size=40).map("".join)
ROLES = st.sampled_from(["user", "assistant", "tool", "system"])
MESSAGE = st.fixed_dictionaries({"role": ROLES, "content": TEXT})


def count(text: str, encoding: str = "cl100k_base") -> int:
    return len(get_encoding(encoding).encode(text, disallowed_special=()))


def latest_user(dialogue):
    for i in range(len(dialogue) - 1, -1, -1):
        if dialogue[i]["role"] == "user":
            return i
    return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    system=TEXT,
    memories=st.lists(TEXT, max_size=6),
    dialogue=st.lists(MESSAGE, max_size=25),
    max_tokens=st.integers(min_value=1, max_value=400),
    reserve=st.floats(min_value=0.0, max_value=0.9),
    encoding=st.sampled_from(["cl100k_base", "o200k_base"]),
    share=st.floats(min_value=0.0, max_value=1.0),
)
def test_never_over_budget_and_keeps_what_it_must(
    system, memories, dialogue, max_tokens, reserve, encoding, share
):
    builder = ContextBuilder(
        max_tokens=max_tokens, reserve=reserve, encoding=encoding, memory_share=share
    )
    try:
        ctx = builder.build(system=system, memories=memories, dialogue=dialogue)
    except BudgetError:
        # Only allowed when the system prompt (+ the latest user message) cannot fit.
        u = latest_user(dialogue)
        must = count(f"system: {system}\n", encoding)
        if u is not None:
            must += count(f"{dialogue[u]['role']}: {dialogue[u]['content']}\n", encoding)
        assert must > builder.budget
        return
    real = count(ctx.text, encoding)
    assert real == ctx.tokens <= builder.budget <= max_tokens
    assert ctx.budget == builder.budget
    assert ctx.text.startswith(f"system: {system}\n")
    u = latest_user(dialogue)
    if u is not None:
        assert dialogue[u] in ctx.messages
        assert f"user: {dialogue[u]['content']}\n" in ctx.text
        assert u not in ctx.dropped_messages
    # Kept messages keep their order; dropped ones are the oldest (besides the pinned one).
    kept_idx = [i for i in range(len(dialogue)) if i not in ctx.dropped_messages]
    assert [dialogue[i] for i in kept_idx] == ctx.messages
    others_dropped = [i for i in ctx.dropped_messages if i != u]
    others_kept = [i for i in kept_idx if i != u]
    if others_dropped and others_kept:
        assert max(others_dropped) < min(others_kept)
    # Memories: a prefix in relevance order, the last one possibly a sentence prefix.
    for j, kept in enumerate(ctx.memories):
        if j == ctx.trimmed_memory:
            assert memories[j].startswith(kept) and kept != memories[j]
        else:
            assert kept == memories[j]
    assert ctx.dropped_memories == list(range(len(ctx.memories), len(memories)))
    # Segment counts add up exactly (the layout guarantees it).
    b = ctx.breakdown
    assert b["system"] + b["memories"] + b["dialogue"] == ctx.tokens
    assert b["reserve"] == max_tokens - builder.budget
    assert b["dropped"] >= 0


def test_defaults_and_breakdown_keys():
    ctx = ContextBuilder().build(
        system="You are a careful agent.",
        memories=["FX rate EUR/USD fixed at 1.08 for this task."],
        dialogue=[{"role": "user", "content": "Convert 100 EUR"}],
    )
    assert set(ctx.breakdown) == {"system", "dialogue", "memories", "reserve", "dropped"}
    assert ctx.max_tokens == 8192 and ctx.budget == 6553 and ctx.breakdown["reserve"] == 1639
    assert ctx.breakdown["dropped"] == 0
    assert "memory: FX rate EUR/USD fixed at 1.08 for this task.\n" in ctx.text
    assert ctx.text.endswith("user: Convert 100 EUR\n")


def long_session(n: int = 1000) -> list[dict]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "word " * 40}
        for i in range(n)
    ]


def test_oldest_dialogue_dropped_first():
    dialogue = long_session(1000)
    ctx = ContextBuilder(max_tokens=8192).build(system="sys", dialogue=dialogue)
    assert ctx.tokens <= ctx.budget
    assert ctx.dropped_messages == list(range(len(ctx.dropped_messages)))
    assert ctx.messages[-1] is dialogue[-1]
    assert ctx.breakdown["dropped"] > 0
    assert ctx.breakdown["dialogue"] == ctx.tokens - ctx.breakdown["system"]


def test_latest_user_message_kept_even_when_newer_messages_are_dropped():
    dialogue = [
        {"role": "user", "content": "old question"},
        {"role": "assistant", "content": "old answer"},
        {"role": "user", "content": "the current question"},
        {"role": "tool", "content": "x" * 20000},  # newer, huge tool output
    ]
    ctx = ContextBuilder(max_tokens=300, reserve=0.0).build(system="s", dialogue=dialogue)
    assert dialogue[2] in ctx.messages
    assert 3 in ctx.dropped_messages
    assert "user: the current question\n" in ctx.text


def test_memories_get_their_share_in_a_long_session():
    memories = [f"Fact {i}: the rate is 1.0{i}." for i in range(5)]
    ctx = ContextBuilder(max_tokens=2000).build(
        system="sys", memories=memories, dialogue=long_session(500)
    )
    assert ctx.memories == memories  # small memories fit their share
    assert ctx.breakdown["memories"] > 0
    assert ctx.tokens <= ctx.budget


def test_last_memory_trimmed_at_sentence_boundary_english_and_chinese():
    builder = ContextBuilder(max_tokens=60, reserve=0.0, memory_share=1.0)
    first = "The freeze starts on May 1."
    english = "First sentence here. Second sentence is longer than the first one! Third one?"
    chinese = "汇率固定为1.08。这是第二句话，比较长一些！第三句话？"
    for second in (english, chinese):
        ctx = builder.build(system="s", memories=[first, second * 3, "never reached"])
        assert ctx.memories[0] == first
        assert ctx.trimmed_memory == 1
        kept = ctx.memories[1]
        assert kept and (second * 3).startswith(kept)
        assert kept[-1] in ".!?。！？"
        assert ctx.dropped_memories == [2]
        assert count(ctx.text) <= 60


def test_never_cuts_inside_json_or_code_fence():
    payload = json.dumps({"note": "a. b! c? d.", "items": [{"k": "v. w."}] * 30})
    memory = (
        "Intro sentence. "
        + payload
        + " After the JSON. ```python\nx = 1. y = 2.\nprint(x)\n``` After the fence. Tail."
    )
    for max_tokens in range(20, 400, 7):
        ctx = ContextBuilder(max_tokens=max_tokens, reserve=0.0, memory_share=1.0).build(
            system="s", memories=[memory]
        )
        if not ctx.memories:
            continue
        kept = ctx.memories[0]
        assert kept.count("```") % 2 == 0, kept
        assert kept.count("{") == kept.count("}"), kept
        assert kept.count("[") == kept.count("]"), kept
        assert ctx.tokens <= ctx.budget


def test_split_sentences_roundtrip_and_protection():
    text = 'A. B! {"x": "1. 2."} C? ```\nD. E.\n``` F。G！H'
    pieces = split_sentences(text)
    assert "".join(pieces) == text
    assert any('{"x": "1. 2."}' in p for p in pieces)
    assert any("```\nD. E.\n```" in p for p in pieces)
    assert "G！" in pieces
    assert split_sentences("") == []
    assert split_sentences("Rate is 1.08 today") == ["Rate is 1.08 today"]


@given(TEXT)
@settings(max_examples=200, deadline=None)
def test_split_sentences_is_lossless(text):
    assert "".join(split_sentences(text)) == text


def test_system_prompt_over_budget_is_a_clear_error():
    with pytest.raises(BudgetError, match="system prompt alone takes .* over the budget"):
        ContextBuilder(max_tokens=10).build(system="word " * 50)


def test_latest_user_message_over_budget_is_a_clear_error():
    with pytest.raises(BudgetError, match="latest user message"):
        ContextBuilder(max_tokens=50).build(
            system="s", dialogue=[{"role": "user", "content": "word " * 100}]
        )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"reserve": 1.0}, "reserve"),
        ({"reserve": -0.1}, "reserve"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 10.5}, "max_tokens"),
        ({"encoding": "p50k_base"}, "unknown encoding"),
        ({"memory_share": 2}, "memory_share"),
    ],
)
def test_bad_configuration(kwargs, message):
    with pytest.raises(BudgetError, match=message):
        ContextBuilder(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"system": None}, "system"),
        ({"memories": "one string"}, "memories"),
        ({"memories": [1]}, "memory 0"),
        ({"dialogue": {"role": "user"}}, "dialogue"),
        ({"dialogue": ["hi"]}, "dialogue message 0"),
        ({"dialogue": [{"content": "no role"}]}, "no role"),
    ],
)
def test_bad_input(kwargs, message):
    with pytest.raises(BudgetError, match=message):
        ContextBuilder().build(**kwargs)


def test_multipart_content_and_tool_calls_are_counted():
    dialogue = [
        {"role": "assistant", "content": None, "tool_calls": [{"name": "crop", "args": {"x": 1}}]},
        {"role": "user", "content": [{"type": "text", "text": "look"}]},
    ]
    ctx = ContextBuilder().build(system="s", dialogue=dialogue)
    assert '"crop"' in ctx.text and '"look"' in ctx.text
    assert count(ctx.text) == ctx.tokens


def test_public_contract_import():
    from engine import ContextBuilder as Exported

    assert Exported is ContextBuilder


def test_a_message_edited_in_place_is_counted_again():
    dialogue = [{"role": "assistant", "content": "short"}, {"role": "user", "content": "go"}]
    builder = ContextBuilder(max_tokens=200, reserve=0.0)
    before = builder.build(system="s", dialogue=dialogue)
    dialogue[0]["content"] = "a much longer answer than before, " * 3
    after = builder.build(system="s", dialogue=dialogue)
    assert after.tokens == count(after.text) > before.tokens
    assert after.breakdown["dialogue"] == after.tokens - after.breakdown["system"]
