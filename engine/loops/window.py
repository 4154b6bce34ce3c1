"""What the rules look at: the streaming window of recent steps, the progress count, and one
step as the detector has read it (`Observation`).

`LoopDetector` fills these; every rule in `engine.loops.rules` reads them and never writes them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Final, Literal

from engine.loops.step import Step

__all__ = ["Kind", "CALL", "TURN", "CONDENSATION", "EXEMPT", "Record", "Observation", "Window"]

Kind = Literal["call", "turn", "condensation", "exempt"]
"""How the detector reads a step; each rule says which kinds it looks at."""
CALL: Final = "call"
"""A tool call (neither a thought, a condensation nor an exempt tool)."""
TURN: Final = "turn"
"""An agent message turn (no tool), or a call of a thought tool (``think``…)."""
CONDENSATION: Final = "condensation"
"""A call of a context-condensation tool."""
EXEMPT: Final = "exempt"
"""A call of an exempt tool: it only holds its place in the window."""


@dataclass(slots=True)
class Record:
    """One step as the window remembers it (turns and ignored steps only hold their place, so
    that the window spans the last `Window.size` observed steps)."""

    index: int
    """Position of the step in observation order since the last reset."""
    tool: str | None
    """Tool name, None for an agent turn."""
    call: str | None = None
    """Call fingerprint (tool calls only)."""
    state: tuple[str, str] | None = None
    """(call fingerprint, outcome) of a tool call: the outcome is the result digest, ``done``
    for a side effect, or ``!`` + the error signature."""


class Observation:
    """One step as the rules see it. The detector fills one instance per detector before the
    rules run on a step, so it is valid only during that step: a rule copies what it keeps."""

    __slots__ = (
        "index",
        "step",
        "kind",
        "tool",
        "record",
        "args",
        "call",
        "state",
        "signature",
        "ok",
        "novel_call",
        "novel_state",
        "progress_before",
        "overflow",
        "cause",
        "write",
        "waits",
        "progress_mark",
        "prev_action",
    )

    def __init__(self) -> None:
        self.index: int = -1
        """Index of this step."""
        self.step: Step = Step()
        """The step as it was observed."""
        self.kind: Kind = TURN
        """How the detector reads the step."""
        self.tool: str | None = None
        """Tool name, None for an agent message turn."""
        self.record: Record = Record(-1, None)
        """What the window keeps of this step."""
        self.args: Any = None
        """Normalized arguments (tool calls only)."""
        self.call: str = ""
        """Call fingerprint ("" unless a tool call)."""
        self.state: tuple[str, str] | None = None
        """Call fingerprint and outcome (tool calls only)."""
        self.signature: str = ""
        """Error signature of a failed call, "" otherwise."""
        self.ok: bool = True
        """Whether the step succeeded."""
        self.novel_call: bool = False
        """The call fingerprint was not in the window before this step."""
        self.novel_state: bool = False
        """The state was not in the window before this step."""
        self.progress_before: int = 0
        """`Window.progress` before this step (the step itself may have added one)."""
        self.overflow: bool = False
        """The step is a context-overflow or condensation event."""
        self.cause: int | None = None
        """For a model turn that overflowed: the tool call read just before it, the likely
        cause; None otherwise."""
        self.write: bool = False
        """The call changes something (a side effect, an edit, a shell write): its outcome is
        "done", whatever it printed."""
        self.waits: bool = False
        """The call only waits (a wait tool, or a shell command starting with ``sleep``)."""
        self.progress_mark: Any = 0
        """What "no progress since" compares for this step's repetitions: `Window.progress`,
        except for a successful write to a named target: the progress steps that were not
        writes to named targets, and the last write to this target that was progress
        (`Window.target_progress`)."""
        self.prev_action: int = -1
        """Index of the agent's last action before this step (`Window.last_action`): what
        "back to back" compares for a tool call (chat messages to the user between do not
        count)."""


class Window:
    """The last `size` observed steps, counts of the calls and states among them, and the
    progress count. Bounded by `size`, never by the session length."""

    __slots__ = (
        "size",
        "n",
        "fence",
        "progress",
        "records",
        "calls",
        "state_seen",
        "call_seen",
        "last_ok",
        "last_call",
        "last_wait",
        "last_user",
        "last_action",
        "targeted",
        "target_progress",
    )

    def __init__(self, size: int) -> None:
        self.size: int = size
        """Steps kept; also the horizon, the furthest back a verdict may point."""
        self.clear()

    def clear(self) -> None:
        """Forget every step (a reset)."""
        self.n: int = 0
        """Steps observed since the last reset (the index the next step gets)."""
        self.fence: int = -1
        """Index of the last flagged step: evidence for a new verdict must come after it."""
        self.progress: int = 0
        """Progress steps so far: successful, non-waiting calls whose state was new."""
        self.records: deque[Record] = deque()
        """Every step of the window, oldest first."""
        self.calls: deque[Record] = deque(maxlen=self.size)
        """The tool calls of the window, waiting tools left out, oldest first."""
        self.state_seen: dict[tuple[str, str], int] = {}
        """How many records of the window have each state."""
        self.call_seen: dict[str, int] = {}
        """How many records of the window have each call fingerprint."""
        self.last_ok: dict[str, int] = {}
        """Index of the last success of each tool."""
        self.last_call: int | None = None
        """Index of the last tool call."""
        self.last_wait: int = -1
        """Index of the last call that only waited (a wait tool, ``sleep 30`` in a shell)."""
        self.last_user: int = -1
        """Index of the first step after the last user turn (`LoopDetector.user_input`): the
        user spoke after step ``i`` when ``last_user > i``."""
        self.last_action: int = -1
        """Index of the agent's last action: a tool call, a condensation, a turn a harness
        answered; not a chat message to the user (a message turn once the user has spoken, a
        call of a user tool), which is talk, not a try (timing is counted in actions)."""
        self.targeted: int = 0
        """Progress steps so far that were writes to a named target (`target_progress`)."""
        self.target_progress: dict[str, int] = {}
        """Per named target of a write (its `target_keys` values): index of the last write to
        it that was progress (bounded: the oldest are dropped past the window). A repeated
        write to a target is measured against every progress step except writes to other named
        targets: a first write of b.md does not make the third identical write of a.md new; a
        new read, a test run that changed, a write to a.md do."""

    def note_target_progress(self, target: str, index: int) -> None:
        """A write to a named target was progress."""
        self.targeted += 1
        marks = self.target_progress
        marks[target] = index
        if len(marks) > 2 * self.size:
            oldest = index - self.size
            self.target_progress = {t: i for t, i in marks.items() if i > oldest}

    def waited_since(self, index: int) -> bool:
        """Whether a waiting call came after step `index` (this step included)."""
        return self.last_wait > index

    def push(self, record: Record) -> None:
        """Append `record`, evicting the oldest record when the window is full."""
        records = self.records
        records.append(record)
        if len(records) <= self.size:
            return
        old = records.popleft()
        state = old.state
        if state is None:
            return
        left = self.state_seen[state] - 1
        if left:
            self.state_seen[state] = left
        else:
            del self.state_seen[state]
        call = old.call
        assert call is not None
        calls_left = self.call_seen[call] - 1
        if calls_left:
            self.call_seen[call] = calls_left
        else:
            del self.call_seen[call]
        if len(self.last_ok) > 256:
            oldest = old.index
            self.last_ok = {k: i for k, i in self.last_ok.items() if i > oldest}
