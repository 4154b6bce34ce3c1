"""Change freezes: the window and its loop policy are read from configuration
the same way everywhere, and while the engine's clock is inside the window, sessions without a
policy of their own follow the freeze's, on every store."""

from __future__ import annotations

import datetime as dt

import pytest

from engine import ConfigError, Engine, FreezeWindow, LoopDetected, LoopWaiting
from engine.cli.parser import main as cli_main
from engine.freeze import configured, freeze_window, from_environment, read_table, resolve

START = dt.datetime(2026, 10, 1, tzinfo=dt.timezone(dt.timedelta(hours=8)))
END = dt.datetime(2026, 10, 8, tzinfo=dt.timezone(dt.timedelta(hours=8)))
NAME = "National Day change freeze"
INSIDE = START.timestamp() + 3600
BEFORE = START.timestamp() - 3600
AFTER = END.timestamp()

CONF = {"start": "2026-10-01T00:00:00+08:00", "end": "2026-10-08T00:00:00+08:00",
        "name": NAME, "on_loop": "flag"}


class Clock:
    """A fake engine clock the test moves."""

    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- configuration --------------------------------------------------------------------------
def test_the_table_gives_window_name_and_policy():
    window = freeze_window(CONF, env={})
    assert window == FreezeWindow(START, END, NAME, "flag")
    assert window.active(START.timestamp()) and not window.active(END.timestamp())
    assert freeze_window({}, env={}) is None and freeze_window(None, env={}) is None


def test_the_environment_overrides_each_key():
    env = {"REWIND_FREEZE_ON_LOOP": "nudge_then_rollback", "REWIND_FREEZE_NAME": "Year end"}
    window = freeze_window(CONF, env=env)
    assert (window.start, window.end) == (START, END)
    assert window.name == "Year end" and window.on_loop == "nudge_then_rollback"
    only_env = from_environment({"REWIND_FREEZE_START": "2026-12-24T00:00:00Z",
                                 "REWIND_FREEZE_END": "2026-12-27T00:00:00Z",
                                 "REWIND_FREEZE_ON_LOOP": " flag "})
    assert only_env.on_loop == "flag" and only_env.name == "Change freeze"
    assert only_env.start == dt.datetime(2026, 12, 24, tzinfo=dt.UTC)


def test_without_a_policy_the_freeze_changes_no_policy():
    window = freeze_window({k: v for k, v in CONF.items() if k != "on_loop"}, env={})
    assert window.on_loop is None
    assert resolve(None, window, "rollback", INSIDE).policy == "rollback"


def test_names_are_one_bounded_line():
    window = freeze_window({**CONF, "name": "Holiday\n\tfreeze " + "x" * 500}, env={})
    assert window.name.startswith("Holiday freeze x") and len(window.name) == 200


@pytest.mark.parametrize("conf,env,message", [
    ({**CONF, "on_loop": "page"}, {},
     r"\[rewind.freeze\] on_loop must be one of rollback, nudge_then_rollback, flag, off, "
     r"not 'page'"),
    (CONF, {"REWIND_FREEZE_ON_LOOP": "rollbak"},
     r"\$REWIND_FREEZE_ON_LOOP must be one of .*not 'rollbak'"),
    ({"on_loop": "flag"}, {}, "policy \\(flag\\) is set but no freeze window"),
    ({}, {"REWIND_FREEZE_ON_LOOP": "flag"}, "no freeze window"),
    ({"start": "2026-10-01"}, {}, "needs both start and end.*only the start is set"),
    ({}, {"REWIND_FREEZE_END": "2026-10-01"}, "only the end is set"),
    ({**CONF, "start": "soon"}, {}, r"\[rewind.freeze\] start must be an ISO 8601 time"),
    (CONF, {"REWIND_FREEZE_END": "next week"}, r"\$REWIND_FREEZE_END must be an ISO 8601"),
    ({**CONF, "end": "2026-09-30T00:00:00+08:00"}, {}, "at or before it starts"),
    ({**CONF, "on_loop": 3}, {}, "on_loop must be one of"),
])
def test_bad_settings_say_which_and_what_is_accepted(conf, env, message):
    with pytest.raises(ConfigError, match=message):
        freeze_window(conf, env=env)


def test_a_secrets_file_gives_only_its_freeze_table(tmp_path):
    secrets = tmp_path / "secrets.toml"
    secrets.write_text('[rewind.users.alice]\npassword_hash = "scrypt$x"\n\n'
                       '[rewind.freeze]\nstart = 2026-10-01T00:00:00+08:00\n'
                       'end = 2026-10-08T00:00:00+08:00\non_loop = "flag"\n')
    assert read_table(secrets) == {"start": START, "end": END, "on_loop": "flag"}
    assert read_table(tmp_path / "missing.toml") == {}
    window = configured([tmp_path / "missing.toml", secrets], env={})
    assert window.on_loop == "flag" and window.start == START
    assert configured([secrets], env={"REWIND_FREEZE_ON_LOOP": "off"}).on_loop == "off"
    assert configured([tmp_path / "missing.toml"], env={}) is None
    broken = tmp_path / "broken.toml"
    broken.write_text("[rewind.freeze\n")
    with pytest.raises(ConfigError, match="broken.toml is not valid TOML"):
        configured([broken], env={})


def test_policy_order_freeze_then_session_then_engine():
    window = FreezeWindow(START, END, NAME, "flag")
    assert str(resolve(None, window, "rollback", INSIDE)) == f"policy flag (freeze: {NAME})"
    assert str(resolve(None, window, "rollback", BEFORE)) == "policy rollback (engine default)"
    assert str(resolve(None, window, "rollback", AFTER)) == "policy rollback (engine default)"
    # a declared freeze is the truth for every session: a policy in the agent's code loses
    mine = resolve("nudge_then_rollback", window, "rollback", INSIDE)
    assert str(mine) == f"policy flag (freeze: {NAME})"
    assert str(resolve("nudge_then_rollback", window, "rollback", BEFORE)) == (
        "policy nudge_then_rollback (set for this session)")
    # unless the session was exempted from the freeze explicitly
    exempt = resolve("nudge_then_rollback", window, "rollback", INSIDE, exempt=True)
    assert str(exempt) == (f"policy nudge_then_rollback (set for this session; exempt from "
                           f"freeze: {NAME})")
    assert exempt.freeze == window  # the freeze is known, it just did not decide
    assert resolve(None, window, "rollback", INSIDE, exempt=True).policy == "rollback"
    # a freeze that sets no policy leaves the session's own
    assert resolve("off", FreezeWindow(START, END, NAME), "rollback", INSIDE).policy == "off"
    assert resolve(None, None, "flag", INSIDE).source == "engine"


# -- the engine, on every store -------------------------------------------------------------
def _loop(s):
    """Three identical failures: the detector flags the third."""
    for _ in range(3):
        with s.step("image_crop", {"x": 10}) as call:
            call.fail("invalid slice")


def _loop_waits(s):
    """`_loop` under the flag policy: the flagged step says the session waits for on-call."""
    with pytest.raises(LoopWaiting) as caught:
        _loop(s)
    assert caught.value.rollback is None and caught.value.verdict.looping
    return caught.value


@pytest.fixture
def clock():
    return Clock(INSIDE)


@pytest.fixture
def frozen(store_url, open_engine, clock):
    return open_engine(store_url, clock=clock, freeze=FreezeWindow(START, END, NAME, "flag"))


def test_inside_the_freeze_a_loop_is_flagged_not_rolled_back(frozen):
    assert frozen.fleet.loop_policy().policy == "flag"
    s = frozen.session("crop-1", meta={"tenant": "acme"})
    s.snapshot("start")
    _loop_waits(s)  # the freeze policy flags: the session waits for on-call, not rolled back
    info = s.info()
    assert info.status == "looping" and info.rollbacks == 0 and info.loops == 1
    assert info.waiting
    assert info.last_verdict["policy"] == "flag"
    assert info.last_verdict["policy_reason"] == f"freeze: {NAME}"
    assert s.steps()[-1].verdict["policy_reason"] == f"freeze: {NAME}"
    assert frozen.audit(action="rollback") == []
    assert [x.tool for x in s.steps(live_only=True)] == ["image_crop"] * 3


def test_outside_the_freeze_the_engine_default_rolls_back(frozen, clock):
    clock.now = AFTER
    assert str(frozen.fleet.loop_policy()) == "policy rollback (engine default)"
    s = frozen.session("crop-2")
    s.snapshot("start")
    with pytest.raises(LoopDetected) as caught:
        _loop(s)
    assert caught.value.rollback is not None
    info = s.info()
    assert info.status == "rolled_back" and info.rollbacks == 1
    assert info.last_verdict["policy"] == "rollback"
    assert info.last_verdict["policy_reason"] == "engine default"
    (audit,) = frozen.audit(action="rollback")
    assert audit.actor == "rewind" and audit.reason.endswith("policy rollback (engine default)")


def test_the_freeze_wins_over_a_policy_given_for_the_session(frozen):
    s = frozen.session("crop-3", on_loop="rollback")
    s.snapshot("start")
    assert s.on_loop == "flag"
    _loop_waits(s)
    assert s.info().status == "looping" and s.info().rollbacks == 0
    assert s.info().last_verdict["policy_reason"] == f"freeze: {NAME}"


def test_a_session_exempted_from_the_freeze_keeps_its_own_policy(frozen):
    s = frozen.session("crop-3x", on_loop="rollback", freeze_exempt=True)
    s.snapshot("start")
    with pytest.raises(LoopDetected) as caught:
        _loop(s)
    assert not isinstance(caught.value, LoopWaiting)
    assert caught.value.rollback is not None and s.info().status == "rolled_back"
    assert s.info().last_verdict["policy_reason"] == (
        f"set for this session; exempt from freeze: {NAME}")


def test_the_policy_is_the_one_in_force_when_the_loop_is_detected(frozen, clock):
    clock.now = BEFORE
    s = frozen.session("crop-4")  # the handle is made before the freeze begins
    s.snapshot("start")
    assert s.on_loop == "rollback"
    clock.now = INSIDE
    assert s.on_loop == "flag" and s.loop_policy().source == "freeze"
    _loop_waits(s)
    assert s.info().status == "looping" and s.info().rollbacks == 0


def test_a_freeze_policy_may_also_roll_back_where_the_default_flags(store_url, open_engine):
    engine = open_engine(store_url, clock=Clock(INSIDE), on_loop="flag",
                         freeze=FreezeWindow(START, END, NAME, "rollback"))
    s = engine.session("crop-5")
    s.snapshot("start")
    with pytest.raises(LoopDetected):
        _loop(s)
    assert s.info().status == "rolled_back"
    assert f"policy rollback (freeze: {NAME})" in engine.audit(action="rollback")[0].reason


# -- where the engine gets its freeze ---------------------------------------------------------
def test_open_reads_the_environment_unless_told(monkeypatch, open_engine):
    monkeypatch.setenv("REWIND_FREEZE_START", CONF["start"])
    monkeypatch.setenv("REWIND_FREEZE_END", CONF["end"])
    monkeypatch.setenv("REWIND_FREEZE_ON_LOOP", "flag")
    engine = open_engine("sqlite:///:memory:", clock=Clock(INSIDE))
    assert engine.fleet.freeze.on_loop == "flag" and engine.fleet.loop_policy().policy == "flag"
    assert open_engine("sqlite:///:memory:", freeze=None).fleet.freeze is None
    assert Engine(engine.store).fleet.freeze is None  # the constructor reads no environment


def test_a_malformed_freeze_setting_stops_the_cli_with_a_usage_error(monkeypatch, tmp_path,
                                                                      capsys):
    monkeypatch.setenv("REWIND_FREEZE_START", CONF["start"])
    monkeypatch.setenv("REWIND_FREEZE_END", CONF["end"])
    monkeypatch.setenv("REWIND_FREEZE_ON_LOOP", "page-someone")
    assert cli_main(["--store", f"sqlite:///{tmp_path}/r.db", "sessions"]) == 2
    err = capsys.readouterr().err
    assert "$REWIND_FREEZE_ON_LOOP must be one of rollback, nudge_then_rollback, flag, off" in err


def test_rewind_show_says_which_policy_applied(tmp_path, capsys, open_engine):
    url = f"sqlite:///{tmp_path}/r.db"
    engine = open_engine(url, clock=Clock(INSIDE), freeze=FreezeWindow(START, END, NAME, "flag"))
    s = engine.session("crop-6")
    s.snapshot("start")
    _loop_waits(s)
    assert cli_main(["--store", url, "show", "crop-6"]) == 0
    assert f"policy: flag (freeze: {NAME})" in capsys.readouterr().out
