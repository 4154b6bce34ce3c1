"""Rights are checked when an action runs, not when its page was drawn: an `Actor`
that carries an authority is asked its current role by every operator action, so an open
dialog of a demoted or deleted account acts no more."""

from __future__ import annotations

import pytest
from support.fleet import LOOPING, seed_looping

from engine import Actor, PermissionDenied, Role


class Accounts:
    """A secrets file an administrator edits while the console is open."""

    def __init__(self) -> None:
        self.roles: dict[str, str] = {"alice": "operator"}
        self.asked = 0

    def __call__(self, name: str) -> str | None:
        self.asked += 1
        return self.roles.get(name)


@pytest.fixture
def fleet(open_engine, tmp_path):
    engine = open_engine(f"sqlite:///{tmp_path}/rewind.db")
    seed_looping(engine)
    return engine


ACTIONS = {
    "rollback": lambda e, a: e.rollback(LOOPING, actor=a, reason="loop"),
    "bulk rollback": lambda e, a: e.rollback_many({"status": "looping"}, actor=a, reason="loop"),
    "notice": lambda e, a: e.get_session(LOOPING).inject_notice("custom text", actor=a),
    "quarantine": lambda e, a: e.quarantine("refund_api", actor=a, reason="broken"),
    "delete": lambda e, a: e.fleet.delete_session(LOOPING, actor=a, reason="gdpr"),
    "purge": lambda e, a: e.fleet.purge_abandoned(0, actor=a),
    "purge idle": lambda e, a: e.fleet.purge_idle_sessions(0, actor=a),
}


@pytest.mark.parametrize("change", ["demoted", "deleted"])
@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_an_actor_whose_account_changed_after_the_page_loaded_cannot_act(fleet, action, change):
    accounts = Accounts()
    alice = Actor("alice", Role.OPERATOR, authority=accounts)  # drawn as an operator
    if change == "demoted":
        accounts.roles["alice"] = "viewer"
    else:
        del accounts.roles["alice"]
    before = fleet.get_session(LOOPING).info()
    with pytest.raises(PermissionDenied) as refused:
        ACTIONS[action](fleet, alice)
    assert "alice" in str(refused.value)
    assert accounts.asked >= 1
    after = fleet.get_session(LOOPING).info()
    assert (after.epoch, after.status) == (before.epoch, before.status)
    assert fleet.quarantines() == []


def test_an_actor_still_operator_acts_and_is_asked_at_that_moment(fleet):
    accounts = Accounts()
    alice = Actor("alice", Role.VIEWER, authority=accounts)  # drawn as a viewer, promoted since
    result = fleet.rollback(LOOPING, actor=alice, reason="loop")
    assert result.session == LOOPING and accounts.asked >= 1


def test_compensation_verbs_ask_the_authority_too(fleet):
    accounts = Accounts()
    alice = Actor("alice", Role.OPERATOR, authority=accounts)
    start = next(n.id for n in fleet.get_session(LOOPING).tree() if n.label == "start")
    fleet.rollback(LOOPING, to=start, actor="ops", reason="loop")  # crosses points_debit
    comp = fleet.compensations()[0]
    accounts.roles["alice"] = "viewer"
    with pytest.raises(PermissionDenied):
        fleet.compensations.resolve(comp.id, actor=alice, reason="undone by hand")
    with pytest.raises(PermissionDenied):
        fleet.compensations.retry(comp.id, actor=alice, reason="try again")


def test_a_role_the_engine_does_not_know_is_refused(fleet):
    alice = Actor("alice", authority=lambda name: "admin")
    with pytest.raises(PermissionDenied, match="no valid role"):
        fleet.rollback(LOOPING, actor=alice, reason="loop")
