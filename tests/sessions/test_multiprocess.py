"""Several processes on one store: an agent stepping while an operator rolls back, and kill -9 in
the middle of steps and rollbacks."""

from __future__ import annotations

import pytest
from support.agents import check_after_kills, kill_rounds, operator_rolls_back_while_the_agent_steps


def test_operator_rolls_back_while_the_agent_steps(sqlite_url):
    operator_rolls_back_while_the_agent_steps(sqlite_url)


@pytest.mark.slow
def test_kill_9_at_random_points_loses_nothing_acknowledged(sqlite_url, open_engine):
    acked = kill_rounds(sqlite_url, rounds=12, seed=7)
    check_after_kills(open_engine(sqlite_url), acked)
