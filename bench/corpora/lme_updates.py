"""Update pairs written by others: LongMemEval's knowledge-update evidence (protocol in
``bench/corpora/LME_UPDATES.md``, fixed before the judge first ran on it).

LongMemEval (Wu et al., ICLR 2025; MIT) marks the turns that carry a question's evidence with
``has_answer``. In a ``knowledge-update`` question the user states a value in one session and a
changed value in a later one ("I've completed 4 projects since starting painting classes" ...
"I just finished my 5th project"): both turns are marked, so each such question gives one real
update pair phrased by the benchmark's authors. The evidence turns of the other question types
(facts gathered across sessions, events to order in time) are hard non-updates: same user, same
topic, written by the same authors, and no value of theirs replaces an earlier one.

The 500 oracle questions (only the evidence sessions) are read from a public snapshot that
committed them one file a question (``hussainzs/Memoria`` at `COMMIT`,
``evaluations/data/lme_jsons/<sessions>_<question_id>.json``, next to LongMemEval's MIT
``LICENSE``); nothing is copied into this repository. ``python bench/corpora/lme_updates.py``
prints the counts.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

REPO = "hussainzs/Memoria"
COMMIT = "959167b875ddc992661da1cf1a3263821e6831ed"
FOLDER = "evaluations/data/lme_jsons"
GIT = Path(os.environ.get("REWIND_MIRRORS", "../.mirror")) / "hussainzs+Memoria" / "repo"
"""A git snapshot of github.com/hussainzs/Memoria; `$REWIND_MIRRORS` names the folder of such
snapshots (default: `.mirror` beside the checkout), `--git` overrides it."""
SEED = "rewind-updates-v1"
UPDATE_TYPE = "knowledge-update"


@dataclass
class Question:
    qid: str
    qtype: str
    split: str
    """``tuned`` or ``held-out``: by question (``_abs`` variants with their base), seeded."""
    turns: list[str] = field(default_factory=list)
    """The user turns of the oracle sessions, sessions in date order, turns in order."""
    evidence: list[int] = field(default_factory=list)
    """Indexes into `turns` of the ``has_answer`` user turns, in order."""
    sessions: list[int] = field(default_factory=list)
    """Session rank of each turn (0 = earliest)."""

    @property
    def update(self) -> tuple[int, int] | None:
        """(old, new) turn indexes when this is an update pair: a knowledge-update question whose
        evidence is exactly two user turns in two different sessions."""
        if self.qtype != UPDATE_TYPE or len(self.evidence) != 2:
            return None
        old, new = self.evidence
        if self.sessions[old] == self.sessions[new]:
            return None
        return old, new

    @property
    def non_update_pairs(self) -> list[tuple[int, int]]:
        """Consecutive evidence turns of a question of another type, in different sessions."""
        if self.qtype == UPDATE_TYPE:
            return []
        ev = self.evidence
        return [
            (a, b) for a, b in zip(ev, ev[1:], strict=False) if self.sessions[a] != self.sessions[b]
        ]


def split_of(qid: str) -> str:
    base = qid.removesuffix("_abs")
    digest = hashlib.sha256(f"{SEED}:{base}".encode()).digest()
    return "tuned" if digest[0] % 2 == 0 else "held-out"


def available(git: Path = GIT) -> bool:
    if not git.exists():
        return False
    probe = subprocess.run(
        ["git", f"--git-dir={git}", "cat-file", "-e", f"{COMMIT}^{{tree}}"], capture_output=True
    )
    return probe.returncode == 0


def _git(git: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", f"--git-dir={git}", *args], capture_output=True, check=True
    ).stdout


def _date_key(date: str) -> str:
    # "2023/05/28 (Sun) 16:07" -> "2023/05/28 16:07": sortable as text
    parts = date.split()
    return f"{parts[0]} {parts[-1]}" if len(parts) >= 2 else date


def load(git: Path = GIT) -> list[Question]:
    """The 500 oracle questions (per question id, the committed file with the fewest sessions;
    the snapshot's larger haystack files are absent or only distractors)."""
    names = _git(git, "ls-tree", "--name-only", COMMIT, f"{FOLDER}/").decode().split()
    best: dict[str, tuple[int, str]] = {}
    for name in names:
        stem = name.rsplit("/", 1)[-1].removesuffix(".json")
        count, _, qid = stem.partition("_")
        if count.isdigit() and (qid not in best or int(count) < best[qid][0]):
            best[qid] = (int(count), name)
    out = []
    for _, (_, name) in sorted(best.items()):
        d = json.loads(_git(git, "show", f"{COMMIT}:{name}"))
        q = Question(d["question_id"], d["question_type"], split_of(d["question_id"]))
        order = sorted(
            range(len(d["haystack_sessions"])),
            key=lambda i: (_date_key(d["haystack_dates"][i]), i),
        )
        for rank, i in enumerate(order):
            for turn in d["haystack_sessions"][i]:
                text = (turn.get("content") or "").strip()
                if turn.get("role") != "user" or not text:
                    continue
                if turn.get("has_answer"):
                    q.evidence.append(len(q.turns))
                q.turns.append(text)
                q.sessions.append(rank)
        out.append(q)
    return out


def main() -> None:
    if not available():
        print(f"snapshot of {REPO} not found at {GIT}: skipped")
        return
    qs = load()
    for split in ("tuned", "held-out"):
        part = [q for q in qs if q.split == split]
        ups = sum(1 for q in part if q.update)
        ku = sum(1 for q in part if q.qtype == UPDATE_TYPE)
        negs = sum(len(q.non_update_pairs) for q in part)
        turns = sum(len(q.turns) for q in part)
        print(
            f"{split:<9} questions {len(part):>4}  knowledge-update {ku:>3}  update pairs {ups:>3}"
            f"  non-update pairs {negs:>4}  user turns {turns:>5}"
        )


if __name__ == "__main__":
    main()
