"""A loop episode as one session handle sees it: since which step and at what cost.

The detector's verdict says where the loop it sees *now* began (``loop_start_step``: the first
step of its evidence window). A session left looping is flagged again and again, and each
verdict's window slides with it, so the latest verdict alone would say a loop that began 4,000
steps ago began three steps ago. The episode keeps the first flag's start: from the first
verdict until a step ends ok (or the session is rolled back), every stored verdict carries an
``episode`` record (`engine.types.LoopEpisode`): the loop's first step and when it began, how
often it was flagged, and the context tokens and write-ahead snapshots spent since it began.
`SessionInfo.loop_cost` reads it from the session's last verdict, so the running cost costs no
scan of the session's steps.

The handle tracks what it needs in memory (the steps of the detector's window and the episode
open on it); a handle that meets a loop another handle or process began (the session is
looping, its last verdict carries an episode, the epoch has not moved) continues that episode
from the store, at the price of one session read on its first flag.

Snapshots of repeated failures: a step that repeats the call (same fingerprint) the previous
step of this handle made and that failed, with no message or variable written by this handle in
between, takes no write-ahead snapshot (`skip_snapshot`): the state is the one the failed call's
snapshot holds (writes by other processes in between are not seen; a rollback to before the loop
does not need them). A loop's rollback goes to the snapshot before the loop's first step, never
between two identical failing calls; a snapshot per repetition only filled the store (thousands
for one loop left waiting for on-call).
"""

from __future__ import annotations

from typing import Any

from engine.types import LoopEpisode, SessionStatus, StoredVerdict


class EpisodeTracker:
    """The costs of the recent steps one handle saw, and the loop episode open on it."""

    __slots__ = ("_costs", "_ended", "_episode", "_keep", "_last_call")

    def __init__(self, keep: int) -> None:
        self._keep = max(keep, 8)
        self._costs: dict[int, tuple[float, int | None, bool]] = {}
        """step number -> (started at, context tokens or None, took a write-ahead snapshot)."""
        self._episode: LoopEpisode | None = None
        self._last_call: tuple[str, bool] | None = None
        """(fingerprint, failed) of the last step this handle judged."""
        self._ended = 0
        """The last step this handle saw end a loop (ok, not flagged): an episode the store
        holds from before it is over, even while the store has not heard of that step yet
        (a batch is judged before it is written)."""

    def reset(self) -> None:
        """Forget everything: the epoch moved (a rollback ended any episode)."""
        self._costs.clear()
        self._episode = None
        self._last_call = None
        self._ended = 0

    def skip_snapshot(self, fingerprint: str) -> bool:
        """Whether a step with `fingerprint` repeats the failed call just before it, with
        nothing written by this handle in between (the state it would snapshot is the one the
        failed call's snapshot holds)."""
        return self._last_call == (fingerprint, True)

    def wrote(self) -> None:
        """This handle changed the session's state (messages, variables): the next step takes
        its write-ahead snapshot whatever it repeats."""
        self._last_call = None

    def seen(self, n: int, started_at: float, tokens: int | None, snapshot: bool) -> None:
        """Step `n` of the live line (observed live or read back when the window is rebuilt)."""
        self._costs[n] = (started_at, tokens, snapshot)
        if len(self._costs) > 2 * self._keep:
            for old in sorted(self._costs)[: len(self._costs) - self._keep]:
                del self._costs[old]

    def judged(self, n: int, fingerprint: str, ok: bool, flagged: bool) -> None:
        """Step `n`, just judged: an ok step without a verdict ends the episode."""
        self._last_call = (fingerprint, not ok)
        if ok and not flagged:
            self._episode = None
            self._ended = max(self._ended, n)

    def flag(self, stored: StoredVerdict, n: int, now: float,
             session: Any = None) -> LoopEpisode:
        """The episode verdict `stored` of step `n` belongs to (continued or begun), set on it.

        `session`: a callable returning the session's `SessionInfo` (read only when this handle
        has no episode open, to continue one begun elsewhere)."""
        episode = self._episode
        if episode is None and session is not None:
            episode = _open_in_store(session())
            if episode is not None and episode["through_step"] < self._ended:
                episode = None
        if episode is not None and episode["through_step"] < n:
            since = [c for k, c in self._costs.items() if episode["through_step"] < k <= n]
            episode = LoopEpisode(
                start_step=episode["start_step"], started_at=episode["started_at"],
                flags=episode["flags"] + 1,
                tokens=_add(episode["tokens"], [c[1] for c in since]),
                snapshots=episode["snapshots"] + sum(1 for c in since if c[2]),
                through_step=n)
        else:
            start = stored.get("loop_start_step") or min(stored.get("evidence_steps") or [n])
            start = min(int(start), n)
            inside = [c for k, c in self._costs.items() if start <= k <= n]
            first = self._costs.get(start)
            episode = LoopEpisode(
                start_step=start, started_at=first[0] if first else now, flags=1,
                tokens=_add(None, [c[1] for c in inside]),
                snapshots=sum(1 for c in inside if c[2]), through_step=n)
        self._episode = episode
        stored["episode"] = episode
        return episode


def _open_in_store(info: Any) -> LoopEpisode | None:
    """The episode the session's last verdict carries while it still loops, else None."""
    if info is None or info.status != SessionStatus.LOOPING or not info.last_verdict:
        return None
    episode = info.last_verdict.get("episode")
    if not isinstance(episode, dict):
        return None
    return LoopEpisode(
        start_step=int(episode["start_step"]), started_at=float(episode["started_at"]),
        flags=int(episode["flags"]), tokens=episode["tokens"],
        snapshots=int(episode["snapshots"]), through_step=int(episode["through_step"]))


def _add(total: int | None, tokens: list[int | None]) -> int | None:
    """`total` plus the recorded `tokens` (None while no step recorded any)."""
    known = [t for t in tokens if t is not None]
    if not known:
        return total
    return (total or 0) + sum(known)
