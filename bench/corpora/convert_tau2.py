"""Convert public tau2-bench simulation files (a customer-service agent talking to a simulated
customer) into the detector's Step vocabulary: the conversational real-runs corpus.

Source: ``sierra-research/tau2-bench`` (MIT licence), read from a bare git snapshot; every file
is named with the commit it was read at (``SOURCES``). These are other people's agent runs:
evaluate on them, never copy them into the project (only the labels are committed).

Mapping (plain dicts in the corpus, ``None`` fields left out):

- an assistant message with tool calls: one step per call, ``tool`` the function name, ``args``
  its arguments, ``ok`` is ``not error`` of the matching tool message, ``result`` / ``error`` its
  content, ``turn`` the message's position (``m12``): the calls one response issued together;
- an assistant message with text and no tool call: an agent turn (``tool`` null, ``text``);
- a user message (the simulated customer speaking, or acting on their own device in telecom):
  ``{"user": <text>}``. It is no step: the replay calls `LoopDetector.user_input()` for it, as
  the engine does when a user message joins the dialogue.

Run::

    python bench/corpora/convert_tau2.py --git $MIRRORS/sierra-research+tau2-bench/repo \\
        --out tau2runs.jsonl.gz

Each output line is one run: ``id`` (``<set>/<task>/<simulation id prefix>``), ``set``,
``source`` (repo, commit, path), ``resolved`` (reward 1.0), ``termination``, ``steps``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
from typing import Any

REPO = "sierra-research/tau2-bench"
SOURCES: dict[str, tuple[str, str]] = {
    "qwen7b-airline": (
        "29510b1d0d47dbe502ada30079c642bd0d172ed9",
        "src/experiments/eval/data/qwen2.5-7b-retries/ollama_chat/"
        "qwen2.5:7b_airline_default_gpt-4.1-2025-04-14_1trials.json",
    ),
    "gptoss-airline": (
        "52a4ed7b7b19189595e49dd10702cdfcbccdcb56",
        "web/leaderboard/public/submissions/gpt-oss-120b_openai_2025-11-26/trajectories/"
        "langchain_agent_airline_2025-11-26_00-37-06.json",
    ),
    "gpt4o-telecom": (
        "4b2fea6ac12db5c20001d91dddd261dbab95b61e",
        "data/simulations/2025-08-10T02:44:06.496849_telecom_llm_agent_gpt-4o_user_simulator_"
        "gpt-4o.json",
    ),
    "gpt41-telecom": (
        "29510b1d0d47dbe502ada30079c642bd0d172ed9",
        "src/experiments/model_training/results/gpt-4.1_telecom_default_gpt-4.1_1trials.json",
    ),
    "gpt41-retail": (
        "29510b1d0d47dbe502ada30079c642bd0d172ed9",
        "src/experiments/model_training/results/gpt-4.1_retail_defautl_gpt-4.1_1trials.json",
    ),
    "gpt41-airline": (
        "29510b1d0d47dbe502ada30079c642bd0d172ed9",
        "src/experiments/model_training/results/gpt-4.1_airline_default_gpt-4.1_1trials.json",
    ),
}

CLIP = 1200


def clip(text: Any) -> Any:
    if isinstance(text, str) and len(text) > CLIP:
        return text[: CLIP - 200] + f"\n…[{len(text) - CLIP} chars]…\n" + text[-200:]
    return text


def convert(simulation: dict[str, Any]) -> list[dict[str, Any]]:
    """The steps (and user turns) of one simulation, in order."""
    results = {
        m.get("id"): m for m in simulation["messages"] if m["role"] == "tool" and m.get("id")
    }
    steps: list[dict[str, Any]] = []
    for position, m in enumerate(simulation["messages"]):
        role = m["role"]
        if role == "user":
            text = m.get("content") or ""
            if m.get("tool_calls"):
                text = (text + " " + json.dumps(m["tool_calls"], sort_keys=True)).strip()
            steps.append({"user": clip(text)})
        elif role == "assistant":
            calls = m.get("tool_calls") or []
            if not calls:
                steps.append({"tool": None, "text": clip(m.get("content") or "")})
            for call in calls:
                out = results.get(call.get("id"), {})
                step: dict[str, Any] = {"tool": call["name"], "args": call.get("arguments"),
                                        "turn": f"m{position}"}
                content = clip(out.get("content"))
                if out.get("error"):
                    step["ok"] = False
                    step["error"] = content or "error"
                elif content is not None:
                    step["result"] = content
                steps.append(step)
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git", required=True, help="bare git directory of the snapshot")
    parser.add_argument("--out", required=True)
    opts = parser.parse_args()
    with gzip.open(opts.out, "wt", encoding="utf-8") as fh:
        for name, (commit, path) in SOURCES.items():
            raw = subprocess.run(
                ["git", "--git-dir", opts.git, "show", f"{commit}:{path}"],
                check=True,
                capture_output=True,
            ).stdout
            data = json.loads(raw)
            for sim in data["simulations"]:
                reward = (sim.get("reward_info") or {}).get("reward")
                run = {
                    "id": f"{name}/{sim['task_id']}/{sim['id'][:8]}",
                    "set": name,
                    "source": {"repo": REPO, "commit": commit, "path": path},
                    "resolved": reward == 1.0 if reward is not None else None,
                    "termination": sim.get("termination_reason"),
                    "steps": convert(sim),
                }
                fh.write(json.dumps(run, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
