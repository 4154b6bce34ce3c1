"""The fleet's "Detector precision" card shows a label set elsewhere (the CLI, another console) on
the next run, and reads the labels again only when one was added (AppTest)."""

from __future__ import annotations

import time

import pytest
from streamlit.testing.v1 import AppTest
from support.fleet import AUTO_ROLLED_BACK, LOOPING, seed_fleet
from support.paths import ROOT

from dashboard import data
from dashboard.signin.access import SESSION_KEY, User
from dashboard.signin.passwords import hash_password
from engine import Engine
from engine.fleet.api import Fleet

APP = str(ROOT / "dashboard" / "app.py")
CARD = "Detector precision"


@pytest.fixture
def fleet(tmp_path) -> str:
    url = f"sqlite:///{tmp_path}/rewind.db"
    seed_fleet(url, background=2)
    return url


@pytest.fixture
def label_reads(monkeypatch) -> list[int]:
    """One entry per time the console read all the labels (`Engine.fleet.labels`)."""
    reads: list[int] = []
    real = Fleet.labels

    def counted(self):
        reads.append(1)
        return real(self)

    monkeypatch.setattr(Fleet, "labels", counted)
    return reads


def fleet_page(url: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.secrets["rewind"] = {"store": url, "users": {
        "olivia": {"role": "operator", "password_hash": hash_password("olivia-pw")}}}
    at.session_state[SESSION_KEY] = User("olivia", "operator", "local")
    return at.run()


def card(at: AppTest) -> tuple[str, str]:
    assert not at.exception
    (metric,) = [m for m in at.metric if m.label == CARD]
    return metric.value, metric.proto.delta


def label_from_the_cli(url: str, sid: str, label: str) -> None:
    """As `rewind label SID LABEL --actor alice` does: another engine on the same file."""
    with Engine.open(url) as cli:
        cli.label(sid, label, actor="alice", reason="checked by hand")


def test_a_label_set_elsewhere_changes_the_card_on_the_next_run(fleet, label_reads):
    at = fleet_page(fleet)
    assert card(at) == ("n/a", "no labels yet")

    label_from_the_cli(fleet, LOOPING, "loop")
    at.run()
    assert card(at) == ("1.00", "on 1 labelled")

    label_from_the_cli(fleet, AUTO_ROLLED_BACK, "not_loop")  # flagged, but no loop, on-call says
    at.run()
    assert card(at) == ("0.50", "on 2 labelled")

    label_from_the_cli(fleet, AUTO_ROLLED_BACK, "loop")  # relabelled: the newest label counts
    at.run()
    assert card(at) == ("1.00", "on 2 labelled")
    assert len(label_reads) == 4  # once per label version, however many runs between


def test_runs_without_a_new_label_ask_one_row_and_do_not_read_the_labels_again(
        fleet, label_reads, monkeypatch):
    label_from_the_cli(fleet, LOOPING, "loop")
    at = fleet_page(fleet)
    assert card(at) == ("1.00", "on 1 labelled")
    asked: list[dict] = []
    real = Engine.audit

    def audit(self, **filters):
        if filters.get("action") == "label":
            asked.append(filters)
        return real(self, **filters)

    monkeypatch.setattr(Engine, "audit", audit)
    reads = len(label_reads)
    for _ in range(3):
        at.run()
        assert card(at) == ("1.00", "on 1 labelled")
    assert len(label_reads) == reads
    # each run asked for the labels since the newest one seen, one row at most
    assert len(asked) == 3
    assert all(f["limit"] == 1 and f["since"] is not None for f in asked)


def test_the_label_version_follows_labels_from_clocks_behind_and_after_a_purge(fleet):
    assert data.label_version(fleet) == 0
    label_from_the_cli(fleet, LOOPING, "loop")
    first = data.label_version(fleet)
    assert first > 0
    behind = time.time() - data.LABEL_CLOCK_SKEW_S / 2  # a CLI host whose clock lags
    with Engine.open(fleet, clock=lambda: behind) as cli:
        cli.label(AUTO_ROLLED_BACK, "loop", actor="alice")
    second = data.label_version(fleet)
    assert second > first
    # the row seen is gone (retention): the newest one is read again in full
    data._newest_label[fleet] = (second + 100, time.time() + 86400)
    assert data.label_version(fleet) == second
