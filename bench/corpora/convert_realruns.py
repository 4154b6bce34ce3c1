"""Convert public agent trajectories into the detector's Step vocabulary (real-runs corpus).

Sources (public GitHub repositories, read from bare git snapshots; nothing is downloaded here):

- ``mini-swe-agent``: ``gruckion/mini-swe-agent``, folder
  ``swebench_results/20251118_gemini-3-pro-74pct``: the 500 trajectories
  (``trajs/*/*.traj.json``) of a mini-swe-agent v1 run of Gemini 3 Pro on SWE-bench Verified,
  with ``results_summary.csv`` saying which instance was resolved.
- ``claude-code``: ``jiayuanz3/SWEContextBench`` at ``cases/SWEContextBench Lite Past Experience``:
  300 Claude Code session transcripts (``*.jsonl``) of Claude Sonnet 4.5 fixing SWE-bench Lite
  tasks. The repository publishes no resolution status for them (``resolved`` stays null).

Mapping to `engine.loops.detector.Step` fields (plain dicts in the corpus, ``None`` fields left
out):

- mini-swe-agent (one bash command per turn): ``tool`` is the command's program (the first word
  after leading ``cd …&&``, ``env``/``VAR=`` prefixes, ``timeout N``), ``args`` is
  ``{"command": <the command>}``, ``ok`` is ``returncode == 0``, ``result`` (ok) or ``error`` (not
  ok) is the output. A timed-out command is a failure with the runtime's timeout message. A turn
  the runtime rejected for its format (no or several bash blocks) is an agent turn without a tool
  call (``tool`` null, ``text`` = the reply).
- Claude Code (tool_use / tool_result blocks): ``tool`` is the tool name (Bash, Read, Edit, …),
  ``args`` its input, ``ok`` is ``not is_error``, ``result`` / ``error`` the tool_result text,
  ``turn`` the id of the assistant message that issued it (parallel calls share one). An
  assistant message with text and no tool call is an agent turn (``tool`` null). Thinking blocks,
  snapshots and summaries are dropped.

Long texts keep their head and tail with a marker in between that carries the elided length and
a short hash of the whole text, so two long texts that differ only in the middle stay different
and identical ones stay identical.

Run (with git snapshots of both repositories in $MIRRORS):

    python bench/corpora/convert_realruns.py \\
        --mini $MIRRORS/gruckion+mini-swe-agent/repo \\
        --claude $MIRRORS/jiayuanz3+SWEContextBench/repo \\
        --out bench/corpora/realruns.jsonl.gz

Each output line is one run: ``id``, ``framework``, ``model``, ``instance``, ``source`` (repo,
commit, path), ``exit_status``, ``resolved`` (true / false / null when unknown), ``finished_ok``
(resolved when known), ``steps``.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import json
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MINI_REPO = "gruckion/mini-swe-agent"
MINI_DIR = "swebench_results/20251118_gemini-3-pro-74pct"
CLAUDE_REPO = "jiayuanz3/SWEContextBench"
CLAUDE_DIR = "cases/SWEContextBench Lite Past Experience"

RESULT_HEAD, RESULT_TAIL = 360, 240
ARG_HEAD, ARG_TAIL = 900, 500
TEXT_HEAD = 300


def clip(text: str, head: int, tail: int) -> str:
    """Head and tail of a long text, with the elided length and a hash of the whole between."""
    if len(text) <= head + tail + 40:
        return text
    mark = hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:10]
    return f"{text[:head]}\n…[{len(text) - head - tail} chars elided, sha1 {mark}]…\n{text[-tail:]}"


def clip_args(value: Any) -> Any:
    if isinstance(value, str):
        return clip(value, ARG_HEAD, ARG_TAIL)
    if isinstance(value, dict):
        return {k: clip_args(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clip_args(v) for v in value]
    return value


def step(tool=None, args=None, ok=True, error=None, result=None, text=None, turn=None) -> dict:
    out: dict[str, Any] = {"tool": tool}
    if turn is not None:
        out["turn"] = turn
    if args is not None:
        out["args"] = args
    if not ok:
        out["ok"] = False
    if error is not None:
        out["error"] = clip(error, RESULT_HEAD, RESULT_TAIL)
    if result is not None:
        out["result"] = clip(result, RESULT_HEAD, RESULT_TAIL)
    if text is not None:
        out["text"] = clip(text, TEXT_HEAD, 100)
    return out


# --- git snapshots -----------------------------------------------------------------------------
class Snapshot:
    """A bare git directory read at one commit."""

    def __init__(self, git_dir: str, repo: str) -> None:
        self.git_dir = git_dir
        self.repo = repo
        self.commit = self._git("rev-parse", "HEAD").strip()

    def _git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", self.git_dir, *args], check=True, capture_output=True, text=True
        ).stdout

    def files(self, under: str) -> list[str]:
        return sorted(
            self._git("ls-tree", "-r", "--name-only", self.commit, "--", under).split("\n")[:-1]
        )

    def read(self, path: str) -> str:
        return self._git("show", f"{self.commit}:{path}")

    def source(self, path: str) -> dict:
        return {"repo": self.repo, "commit": self.commit, "path": path}


# --- mini-swe-agent ----------------------------------------------------------------------------
BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.S)
RETURNCODE = re.compile(r"<returncode>(-?\d+)</returncode>")
SKIP_WORDS = {"sudo", "env", "time", "nohup", "command", "exec"}


def program(command: str) -> str:
    """The program a shell command runs: first word after cd-prefixes, env settings, wrappers."""
    for part in re.split(r"&&|;|\n", command):
        part = part.strip()
        if not part or part.startswith("#"):
            continue
        try:
            words = shlex.split(part, comments=False)
        except ValueError:
            words = part.split()
        while words and (words[0] in SKIP_WORDS or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0])):
            words = words[1:]
        if words and words[0] == "timeout":
            words = words[1:]
            while words and re.match(r"^-|^\d", words[0]):
                words = words[1:]
        if not words:
            continue
        name = words[0]
        if name == "cd" and len(re.split(r"&&|;|\n", command)) > 1:
            continue
        return name.rsplit("/", 1)[-1][:40] or "sh"
    return "sh"


def observation(content: str) -> tuple[bool, str]:
    """(ok, text) of a mini-swe-agent observation."""
    m = RETURNCODE.search(content[:200])
    if m is None:
        if content.startswith("The last command") and "timed out" in content[:600]:
            return False, content
        return True, content  # the submission's final diff
    code = int(m.group(1))
    body = content[m.end() :]
    body = re.sub(r"</?(output|output_head|output_tail|elided_chars)>", "", body)
    body = re.sub(r"<warning>.*?</warning>", "", body, flags=re.S)
    return code == 0, f"exit {code}\n{body.strip()}" if code else body.strip()


def mini_runs(snap: Snapshot) -> Iterator[dict]:
    resolved: dict[str, bool] = {}
    for row in csv.DictReader(io.StringIO(snap.read(f"{MINI_DIR}/results_summary.csv"))):
        resolved[row["instance_id"]] = row["resolved"] == "True"
    for path in snap.files(f"{MINI_DIR}/trajs"):
        if not path.endswith(".traj.json"):
            continue
        data = json.loads(snap.read(path))
        instance = data.get("instance_id") or Path(path).name.split(".")[0]
        messages = data["messages"]
        steps: list[dict] = []
        for i, msg in enumerate(messages):
            if msg["role"] != "assistant":
                continue
            reply = msg["content"] if isinstance(msg["content"], str) else str(msg["content"])
            nxt = messages[i + 1]["content"] if i + 1 < len(messages) else None
            blocks = BASH_BLOCK.findall(reply)
            if nxt is None:
                steps.append(step(text=reply))
            elif len(blocks) != 1 or nxt.startswith("Please always provide EXACTLY ONE"):
                steps.append(step(text=reply))
            else:
                command = blocks[0].strip()
                ok, out = observation(nxt)
                args = {"command": clip_args(command)}
                if ok:
                    steps.append(step(program(command), args, result=out))
                else:
                    steps.append(step(program(command), args, ok=False, error=out))
        info = data.get("info", {})
        model = (info.get("config", {}).get("model", {}) or {}).get("model_name")
        status = resolved.get(instance)
        yield {
            "id": f"mini-swe-agent/{instance}",
            "framework": "mini-swe-agent",
            "model": model,
            "instance": instance,
            "source": snap.source(path),
            "exit_status": info.get("exit_status"),
            "resolved": status,
            "finished_ok": status,
            "steps": steps,
        }


# --- Claude Code -------------------------------------------------------------------------------
def block_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for item in content:
            if isinstance(item, dict):
                parts.append(item.get("text") or ("[image]" if item.get("type") == "image" else ""))
            else:
                parts.append(str(item))
        return "\n".join(parts)
    return "" if content is None else str(content)


def claude_runs(snap: Snapshot) -> Iterator[dict]:
    for path in snap.files(CLAUDE_DIR):
        if not path.endswith(".jsonl"):
            continue
        events = []
        for line in snap.read(path).split("\n"):  # not splitlines: U+2028 sits inside strings
            try:
                events.append(json.loads(line))
            except ValueError:
                continue  # one transcript has a line cut in two; its halves carry no step
        calls: dict[str, dict] = {}  # tool_use id -> step awaiting its result
        order: list[dict] = []
        texts: dict[str, list[str]] = {}  # assistant message id -> texts, when it calls no tool
        has_tool: dict[str, bool] = {}
        model = None
        for ev in events:
            if ev.get("isSidechain"):
                continue
            msg = ev.get("message") or {}
            content = msg.get("content")
            if ev.get("type") == "assistant":
                model = model or msg.get("model")
                mid = msg.get("id") or ev.get("uuid")
                for block in content if isinstance(content, list) else []:
                    kind = block.get("type")
                    if kind == "tool_use":
                        st = {"tool": block.get("name"), "args": clip_args(block.get("input")),
                              "turn": mid}
                        calls[block.get("id")] = st
                        order.append(st)
                        has_tool[mid] = True
                    elif kind == "text" and block.get("text", "").strip():
                        if mid not in texts:
                            texts[mid] = []
                            turn = {"tool": None, "_mid": mid}
                            order.append(turn)
                        texts[mid].append(block["text"])
            elif ev.get("type") == "user" and isinstance(content, list):
                for block in content:
                    if block.get("type") != "tool_result":
                        continue
                    st = calls.get(block.get("tool_use_id"))
                    if st is None:
                        continue
                    text = block_text(block.get("content"))
                    if block.get("is_error"):
                        st["ok"] = False
                        st["error"] = text
                    else:
                        st["result"] = text
        steps = []
        for st in order:
            if st["tool"] is None:
                mid = st["_mid"]
                if has_tool.get(mid):
                    continue  # text that came with a tool call: the call is the step
                steps.append(step(text="\n".join(texts[mid])))
            else:
                steps.append(
                    step(
                        st["tool"],
                        st.get("args"),
                        ok=st.get("ok", True),
                        error=st.get("error"),
                        result=st.get("result") if st.get("ok", True) else None,
                        turn=st.get("turn"),
                    )
                )
        session = Path(path).stem
        instance = None
        for ev in events[:5]:
            m = re.search(
                r"instance_id:\s*(\S+)", block_text((ev.get("message") or {}).get("content"))
            )
            if m:
                instance = m.group(1)
                break
        yield {
            "id": f"claude-code/{session}",
            "framework": "claude-code",
            "model": model,
            "instance": instance,
            "source": snap.source(path),
            "exit_status": None,
            "resolved": None,
            "finished_ok": None,
            "steps": steps,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mini", required=True, help="bare git dir of gruckion/mini-swe-agent")
    parser.add_argument("--claude", required=True, help="bare git dir of jiayuanz3/SWEContextBench")
    parser.add_argument("--out", default=str(Path(__file__).with_name("realruns.jsonl.gz")))
    opts = parser.parse_args()
    runs = [
        *mini_runs(Snapshot(opts.mini, MINI_REPO)),
        *claude_runs(Snapshot(opts.claude, CLAUDE_REPO)),
    ]
    with gzip.open(opts.out, "wt", encoding="utf-8", compresslevel=9) as fh:
        for run in runs:
            fh.write(json.dumps(run, ensure_ascii=False, separators=(",", ":")) + "\n")
    steps = sum(len(r["steps"]) for r in runs)
    size = Path(opts.out).stat().st_size
    print(f"{len(runs)} runs, {steps} steps -> {opts.out} ({size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
