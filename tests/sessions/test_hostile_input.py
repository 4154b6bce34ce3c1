"""Hostile input to the engine: session ids, sizes, deep, cyclic and unencodable values.

Each test states what a careless or hostile caller must not be able to do; every refusal happens
before anything is written.
"""

from __future__ import annotations

import os

import pytest

from engine import Engine, InvalidSessionId
from engine.errors import SizeLimitExceeded
from engine.ids import validate_session_id
from engine.limits import Limits, canonical_within, cut_text
from engine.loops.fingerprint import MAX_DEPTH, canonical_json, canonicalize, fingerprint


@pytest.fixture
def eng():
    engine = Engine.open("sqlite:///:memory:")
    yield engine
    engine.close()


def small(**limits) -> Engine:
    return Engine.open("sqlite:///:memory:", limits=Limits(**limits))


# -- session ids ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "sid",
    [
        " ",
        "   ",
        "\t",
        "\u3000",  # blank after trimming
        "sess\u200b1",
        "\u200csess",
        "se\u200dss",
        "sess\u2060",
        "\ufeffsess",  # zero-width
        "sess\u202e1",
        "\u202asess",
        "\u2066sess\u2069",
        "\u200esess",
        "sess\u200f",
        "\u061csess",
        "sess\x00",
        "sess\n1",
        "sess\x7f",
        "sess\u2028",
        "sess\ud800",
    ],
)
def test_invisible_or_blank_session_ids_are_refused(eng, sid):
    with pytest.raises(InvalidSessionId, match="session id"):
        eng.session(sid)
    assert eng.sessions() == []


def test_refusal_names_the_character_and_where_it_is():
    with pytest.raises(InvalidSessionId, match=r"U\+200B \(ZERO WIDTH SPACE\) at position 4"):
        validate_session_id("sess\u200b1")
    with pytest.raises(InvalidSessionId, match=r"bidirectional control U\+202E"):
        validate_session_id("sess\u202e1")
    with pytest.raises(InvalidSessionId, match="only whitespace"):
        validate_session_id("  ")


def test_session_ids_are_taken_exactly_as_given(eng):
    eng.session("sess-1").append_message("user", "plain")
    eng.session("sess-1 ").append_message("user", "trailing space")
    assert {i.id for i in eng.sessions()} == {"sess-1", "sess-1 "}
    assert eng.get_session("sess-1 ").state().messages[-1]["content"] == "trailing space"
    assert validate_session_id(" a b ") == " a b "
    for sid in ("订单-42", "café", "{tenant}:a/b", "x" * 200):
        assert validate_session_id(sid) == sid


# -- canonical values -----------------------------------------------------------------------------
def test_cyclic_values_raise_a_clear_value_error():
    loop: list = []
    loop.append(loop)
    d: dict = {"a": 1}
    d["self"] = d
    for value in (loop, d, {"x": [d]}):
        with pytest.raises(ValueError, match="contains itself"):
            canonicalize(value)


def test_deep_values_raise_a_clear_value_error_not_recursion_error():
    deep = leaf = []
    for _ in range(10 * MAX_DEPTH):
        leaf.append([])
        leaf = leaf[0]
    with pytest.raises(ValueError, match=f"nested deeper than {MAX_DEPTH}") as info:
        canonicalize(deep)
    assert len(str(info.value)) < 300
    ok = leaf = []
    for _ in range(MAX_DEPTH - 1):
        leaf.append([])
        leaf = leaf[0]
    assert canonical_json(ok).count("[") == MAX_DEPTH


def test_shared_subvalues_are_not_cycles():
    shared = {"k": 1}
    assert canonicalize({"a": shared, "b": [shared, shared]}) == {
        "a": {"k": 1},
        "b": [{"k": 1}, {"k": 1}],
    }


@pytest.mark.parametrize("value", ["x\ud800", {"k": "\udfff"}, {"k\ud800": 1}, ["ok", "\ud83d"]])
def test_lone_surrogates_raise_a_clear_value_error(value):
    with pytest.raises(ValueError, match="lone surrogate") as info:
        fingerprint("tool", value)
    assert not isinstance(info.value, UnicodeError)


def test_hostile_arguments_fail_before_the_step_is_written(eng):
    s = eng.session("s")
    loop: list = []
    loop.append(loop)
    for args in (loop, {"q": "\ud800"}):
        with pytest.raises(ValueError):
            s.step("search", args)
    with pytest.raises(ValueError, match="lone surrogate"):
        s.append_message("user", "half an emoji \ud83d")
    with pytest.raises(ValueError, match="lone surrogate"):
        s.set_var("v", "\udc80")
    assert s.steps() == [] and s.state().messages == [] and s.state().variables == {}


def test_a_lone_surrogate_in_an_error_text_is_still_recorded(eng):
    s = eng.session("s")
    with s.step("decode", {"f": "a.bin"}) as call:
        call.fail("cannot decode \udcff")
    assert s.steps()[-1].error == "cannot decode \ufffd"


# -- size limits ----------------------------------------------------------------------------------
def test_default_limits_are_generous_but_bounded():
    limits = Limits()
    assert limits.args_bytes == 1_000_000 and limits.message_bytes == 1_000_000
    assert limits.notice_chars == 10_000 and limits.reason_chars == 2_000
    assert limits.memory_text > 0 and limits.meta_bytes > 0
    with pytest.raises(ValueError, match="positive"):
        Limits(args_bytes=0)
    assert Engine.open("sqlite:///:memory:").limits == Limits()


def test_oversized_arguments_are_refused_before_anything_is_written():
    eng = small(args_bytes=1000)
    s = eng.session("s")
    with pytest.raises(SizeLimitExceeded, match=r"args is more than 1,000 bytes.*args_bytes"):
        s.step("upload", {"blob": "x" * 5000})
    with pytest.raises(SizeLimitExceeded, match="compensation"):
        s.step("charge", {"n": 1}, side_effect=True, compensation=("refund", {"b": "y" * 5000}))
    assert s.steps() == [] and s.tree() == []
    with s.step("upload", {"blob": "x" * 900}) as call:
        call.ok("stored")
    assert len(s.steps()) == 1


def test_fifty_megabyte_arguments_are_refused_by_default(eng):
    s = eng.session("s")
    with pytest.raises(SizeLimitExceeded, match="args_bytes"):
        s.step("upload", {"blob": "x" * 50_000_000})
    assert s.steps() == []


def test_limit_counts_utf8_bytes_and_stops_encoding_early():
    canonical_within("é" * 499, 1000, "args", "args_bytes")
    with pytest.raises(SizeLimitExceeded):
        canonical_within("é" * 500, 1000, "args", "args_bytes")
    with pytest.raises(SizeLimitExceeded):
        canonical_within(list(range(2_000_000)), 1000, "args", "args_bytes")


def test_oversized_results_fail_the_step_with_a_clear_error():
    eng = small(result_bytes=2000)
    s = eng.session("s")
    with pytest.raises(SizeLimitExceeded, match="result_bytes"):
        with s.step("fetch", {"url": "u"}) as call:
            call.ok({"body": "z" * 10_000})
    step = s.steps()[-1]
    assert step.status == "error" and "result_bytes" in step.error
    with s.step("fetch", {"url": "v"}) as call:
        call.ok({"body": "z" * 1000})
    assert s.steps()[-1].status == "ok"


def test_long_error_texts_are_cut_not_refused():
    eng = small(error_chars=500)
    s = eng.session("s")
    with s.step("crop", {"x": 1}) as call:
        call.fail("invalid slice " * 10_000)
    error = s.steps()[-1].error
    assert len(error) == 500 and error.startswith("invalid slice") and "cut" in error
    assert cut_text("short", 500) == "short"


def test_oversized_messages_notices_reasons_actors_and_meta_are_refused():
    eng = small(
        message_bytes=1000,
        notice_chars=100,
        reason_chars=50,
        actor_chars=20,
        meta_bytes=200,
        name_chars=30,
        variables_bytes=300,
    )
    s = eng.session("s", meta={"tenant": "acme"})
    s.append_message("user", "hello")
    s.snapshot("start")
    s.append_message("user", "more")
    with pytest.raises(SizeLimitExceeded, match="message_bytes"):
        s.append_message("user", "m" * 2000)
    with pytest.raises(SizeLimitExceeded, match="message_bytes"):
        s.append_messages(
            [{"role": "user", "content": "ok"}, {"role": "user", "content": "m" * 2000}]
        )
    with pytest.raises(SizeLimitExceeded, match="message_bytes"):
        s.agent_turn("t" * 2000)
    with pytest.raises(SizeLimitExceeded, match="notice_chars"):
        s.inject_notice("n" * 101, actor="alice")
    with pytest.raises(SizeLimitExceeded, match="reason_chars"):
        s.rollback(actor="alice", reason="r" * 51)
    with pytest.raises(SizeLimitExceeded, match="notice_chars"):
        s.rollback(actor="alice", reason="loop", notice="n" * 101)
    with pytest.raises(SizeLimitExceeded, match="actor_chars"):
        s.rollback(actor="a" * 21, reason="loop")
    with pytest.raises(SizeLimitExceeded, match="reason_chars"):
        eng.fleet.delete_session("s", actor="alice", reason="r" * 51)
    with pytest.raises(SizeLimitExceeded, match="meta_bytes"):
        eng.session("s2", meta={"blob": "b" * 500})
    with pytest.raises(SizeLimitExceeded, match="name_chars"):
        s.step("t" * 31)
    with pytest.raises(SizeLimitExceeded, match="name_chars"):
        s.snapshot("l" * 31)
    with pytest.raises(SizeLimitExceeded, match="variables_bytes"):
        s.set_vars({"a": "v" * 200, "b": "v" * 200})
    # nothing of the above reached the store
    assert [m["content"] for m in s.state().messages] == ["hello", "more"]
    assert s.state().variables == {} and s.branches() == [] and eng.audit() == []
    assert {i.id for i in eng.sessions()} == {"s"}
    # and within the limits everything works
    s.rollback(actor="alice", reason="r" * 50, notice="n" * 100)
    assert s.state().messages[-1]["content"] == "n" * 100


def test_an_automatic_rollback_cuts_a_long_reason_instead_of_refusing():
    from engine.fleet.actions import rollback

    eng = small(reason_chars=40)
    s = eng.session("s")
    s.append_message("user", "a")
    s.snapshot("start")
    s.append_message("user", "b")
    result = rollback(
        eng._runtime,
        "s",
        actor="rewind",
        reason="loop detected: " + "x" * 500,
        automatic=True,
        notice=False,
    )
    assert result.target
    assert len(eng.audit(session="s")[0].reason) == 40


def test_default_limits_refuse_a_fifty_megabyte_notice_and_a_ten_megabyte_reason(eng):
    s = eng.session("s")
    s.append_message("user", "a")
    s.snapshot("start")
    s.append_message("user", "b")
    with pytest.raises(SizeLimitExceeded):
        s.inject_notice("n" * 50_000_000, actor="alice")
    with pytest.raises(SizeLimitExceeded):
        s.rollback(actor="alice", reason="r" * 10_000_000)
    assert len(s.state().messages) == 2 and s.branches() == []


def test_memory_text_and_meta_have_limits_checked_before_writing(tmp_path):
    from engine import Engine, SizeLimitExceeded
    from engine.limits import Limits

    with Engine.open(f"sqlite:///{tmp_path}/m.db", limits=Limits(memory_text=100)) as engine:
        s = engine.session("mem")
        with pytest.raises(SizeLimitExceeded, match="memory_text"):
            s.memory.add("x" * 101)
        with pytest.raises(SizeLimitExceeded, match="meta_bytes"):
            s.memory.add("fine", meta={"blob": "y" * 100_000})
        assert s.memory.items() == []
        s.memory.add("the budget is 500 EUR")
        assert [m.text for m in s.memory.items()] == ["the budget is 500 EUR"]


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6399/notanumber", "redis://127.0.0.1:6399/1x",
                                 "redis+cluster://127.0.0.1:6399/2"])
def test_a_redis_database_that_is_not_a_number_is_refused(url):
    from engine import Engine

    with pytest.raises(ValueError, match="database"):
        Engine.open(url)


def test_a_sqlite_url_with_credentials_is_refused_and_never_shows_the_password(tmp_path):
    from engine import Engine

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises(ValueError) as refused:
            Engine.open("sqlite://user:hunter2@h/x.db")
    finally:
        os.chdir(cwd)
    assert "hunter2" not in str(refused.value) and "no user or password" in str(refused.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("meta", [{"tenant": ["a"]}, {"scenario": 3}, {"prompt_version": {}},
                                  {"locale": True}])
def test_a_facet_that_is_not_a_string_is_one_clear_error_on_every_store(open_engine, meta,
                                                                          tmp_path):
    engine = open_engine(f"sqlite:///{tmp_path}/r.db")
    with pytest.raises(TypeError, match="must be a string"):
        engine.session("s", meta=meta)
    assert engine.sessions() == []
