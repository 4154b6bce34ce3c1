"""The Redis key layout (no server needed): one hash tag per session whatever its id, fleet keys
apart, prefixes that cannot change the layout, Lua key functions generated from Python's."""

from __future__ import annotations

import pytest
from redis.crc import key_slot
from support.ids import NASTY_IDS

from engine.store.redis import keys


# -- key layout (pure) ------------------------------------------------------------------------
@pytest.mark.parametrize("sid", NASTY_IDS)
def test_every_key_of_a_session_shares_one_hash_tag_whatever_the_id(sid):
    base = keys.session_base(sid, "rw")
    enc = keys.encode(sid)
    assert keys.decode(enc) == sid
    assert not set(enc) & set("{}:*?[]\\=")
    every = keys.all_session_keys(base, ["manual", "step"], ["var", "mem"], ["lg"])
    assert len(set(every)) == len(every)
    slots = {key_slot(k.encode()) for k in every}
    assert slots == {key_slot(enc.encode())}
    for k in every:  # the hash tag is exactly the encoded id
        assert k[k.index("{") + 1:k.index("}")] == enc
    assert keys.sid_of_session_hash(keys.session_hash(base)) == sid


def test_ids_that_differ_only_in_special_characters_get_different_keys():
    bases = {keys.session_base(sid) for sid in ["a{b}", "a}b{", "a:b", "a*b", "ab", "a?b"]}
    assert len(bases) == 6


def test_fleet_keys_never_share_a_tag_with_a_session():
    fb = keys.fleet_base("rw")
    assert fb == "rw:{~fleet}:"
    assert "~" not in "".join(keys.encode(s) for s in NASTY_IDS)
    fleet_key = keys.events(fb)
    assert fleet_key[fleet_key.index("{") + 1:fleet_key.index("}")] == "~fleet"


def test_prefixes_that_would_change_the_layout_are_refused():
    for bad in ["a{b}", "a:b", "", "x" * 65, "sp ace"]:
        with pytest.raises(ValueError):
            keys.check_prefix(bad)
    assert keys.check_prefix("rewind-prod.eu_1") == "rewind-prod.eu_1"


def test_lua_key_functions_are_generated_from_the_python_ones():
    prelude = keys.lua_prelude()
    assert 'local function K_live_messages(b) return b .. "ml" end' in prelude
    assert 'local function K_kv_values(b, a) return b .. "kv:" .. a end' in prelude


def test_every_lua_file_is_a_script_that_starts_with_the_key_helpers():
    from pathlib import Path

    from engine.store.redis import scripts

    lua = Path(scripts.__file__).parent / "lua"
    assert set(scripts.SOURCES) == {p.stem for p in lua.glob("*.lua")}
    assert {"rollback", "read_steps", "fleet_apply"} <= set(scripts.SOURCES)
    for source in scripts.SOURCES.values():
        assert source.startswith(keys.lua_prelude())
        assert "@OUTBOX_BATCH@" not in source
