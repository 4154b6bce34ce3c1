"""The judge over an OpenAI-compatible endpoint, against a local HTTP server that speaks the API:
right answers invalidate, and every kind of failure (slow, refused, rate-limited, malformed, over
budget) keeps the new memory, invalidates nothing and shows in the memory's log."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from engine import ConfigError, Engine, JudgeUnavailable
from engine.memory import EndpointJudge, FunctionJudge, MemoryConfig
from engine.memory.embeddings import HashingEmbedder

OLD = "I live in Paris, in the 11th arrondissement"
NEW = "I moved last week: I live in Lyon now"


def moved(older: str, newer: str) -> bool:
    return "moved" in newer and "live" in older


class Api:
    """A chat-completions server whose answers a test scripts: `plan` is a list of what to do
    with each next request (``ok``, ``slow``, a status code, or a callable making the body)."""

    def __init__(self) -> None:
        self.plan: list[Any] = []
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.delay = 0.0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.requests.append(body)
                api.headers.append(dict(self.headers))
                step = api.plan.pop(0) if api.plan else "ok"
                pairs = json.loads(body["messages"][1]["content"])
                if step == "slow":
                    time.sleep(api.delay)
                    step = "ok"
                if isinstance(step, int):
                    self.send_response(step)
                    if step == 429:
                        self.send_header("Retry-After", "0")
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"{}")
                    return
                content = step(pairs) if callable(step) else json.dumps({"answers": [
                    {"i": p["i"], "replaces": moved(p["older"], p["newer"]),
                     "confidence": 0.9, "reason": "the user says they moved"} for p in pairs]})
                out = json.dumps({"choices": [{"message": {"role": "assistant",
                                                           "content": content}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                try:
                    self.wfile.write(out)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def api() -> Iterator[Api]:
    server = Api()
    yield server
    server.server.shutdown()
    server.server.server_close()


def judge_for(api: Api, **options: Any) -> EndpointJudge:
    return EndpointJudge(api.url, "test-model", backoff_s=0.01, **options)


def remember(url: str, judge: Any) -> tuple[Any, str]:
    engine = Engine.open(url, memory=MemoryConfig(judge=judge, embedder=HashingEmbedder()))
    s = engine.session("judged")
    s.memory.add(OLD)
    s.memory.add("My sister works at a bakery")
    return s, s.memory.add(NEW)


def invalidated(s: Any) -> list[str]:
    return [m.text for m in s.memory.items(include_invalid=True) if m.invalid_at is not None]


def test_an_update_is_judged_in_one_batched_request_and_invalidates_the_older_memory(
        store_url, api, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    judge = judge_for(api)
    s, new_id = remember(store_url, judge)
    assert invalidated(s) == [OLD]
    (fix,) = s.memory.corrections()
    assert fix["judge"] == "llm" and fix["kept"] == new_id and fix["confidence"] == 0.9
    last = api.requests[-1]
    pairs = json.loads(last["messages"][1]["content"])
    assert last["model"] == "test-model" and {p["older"] for p in pairs} >= {OLD}
    assert all(p["newer"] == NEW for p in pairs)  # every candidate of one add in one request
    assert api.headers[-1]["Authorization"] == "Bearer sk-test-secret"
    assert "sk-test-secret" not in repr(judge)


def test_a_pair_already_answered_is_not_asked_again(api, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    judge = judge_for(api)
    first = judge.judge([(OLD, NEW), ("I like tea", NEW)])
    again = judge.judge([(OLD, NEW)])
    assert [j.contradicts for j in first] == [True, False] and again[0].contradicts
    assert len(api.requests) == 1 and "Authorization" not in api.headers[0]


@pytest.mark.parametrize("failure", ["slow", 500, 401, "not json", "short", "out of range",
                                     "unnumbered"])
def test_a_failing_judge_keeps_the_memory_and_invalidates_nothing(api, failure):
    malformed: dict[str, Callable[[list], str]] = {
        "not json": lambda pairs: "Sure! The first one replaces the second.",
        "short": lambda pairs: json.dumps({"answers": []}),
        "out of range": lambda pairs: json.dumps({"answers": [
            {"i": p["i"], "replaces": True, "confidence": 2, "reason": ""} for p in pairs]}),
        "unnumbered": lambda pairs: json.dumps({"answers": [
            {"replaces": True, "confidence": 1.0, "reason": ""} for p in pairs]}),
    }
    api.delay = 1.0
    step = malformed.get(failure, failure) if isinstance(failure, str) else failure
    api.plan = [step] * 10
    judge = judge_for(api, timeout_s=0.2, retries=1)
    s, new_id = remember("sqlite:///:memory:", judge)
    assert invalidated(s) == []
    assert NEW in [m.text for m in s.memory.items()]  # the new memory was kept
    (line,) = [e for e in s.memory.log() if e["event"] == "judge unavailable"]
    assert line["id"] == new_id and "nothing was invalidated" in line["reason"]
    assert judge.failures == 1
    # a lost or failing server is tried again; a refusal (401) or an answer that does not parse
    # (at temperature 0 the model says it again) will not get better by asking again
    assert len(api.requests) == (2 if failure in ("slow", 500) else 1)


def test_a_rate_limited_request_is_tried_again_after_the_servers_wait(api):
    api.plan = [429]
    judge = judge_for(api)
    assert judge.judge([(OLD, NEW)])[0].contradicts
    assert len(api.requests) == 2 and judge.failures == 0


def test_the_budget_of_calls_per_minute_is_never_exceeded(api):
    judge = judge_for(api, calls_per_minute=1)
    judge.judge([(OLD, NEW)])
    with pytest.raises(JudgeUnavailable, match="budget of 1 calls a minute"):
        judge.judge([("I like tea", NEW)])
    assert len(api.requests) == 1 and judge.failures == 1


def test_the_tries_of_one_batch_stay_within_the_deadline(api):
    api.delay = 5.0
    api.plan = ["slow"] * 10
    judge = judge_for(api, timeout_s=0.3, retries=50, deadline_s=1.0)
    start = time.monotonic()
    with pytest.raises(JudgeUnavailable, match="no answer within"):
        judge.judge([(OLD, NEW)])
    assert time.monotonic() - start < 5.0  # bounded by the deadline, not 51 tries


def test_any_judge_that_raises_costs_no_memory():
    def broken(pairs):
        raise TimeoutError("the model server went away")

    s, new_id = remember("sqlite:///:memory:", FunctionJudge(broken))
    assert invalidated(s) == [] and NEW in [m.text for m in s.memory.items()]
    assert any(e["event"] == "judge unavailable" and "went away" in e["reason"]
               for e in s.memory.log())


@pytest.mark.parametrize("options, words", [
    ({"base_url": None}, "base URL"), ({"base_url": "ftp://x/v1"}, "base URL"),
    ({"model": None}, "model name"), ({"timeout_s": 0}, "timeout_s"),
    ({"retries": -1}, "retries"), ({"calls_per_minute": True}, "calls_per_minute"),
])
def test_a_judge_set_up_wrongly_says_what_is_wrong(monkeypatch, options, words):
    for name in ("REWIND_JUDGE_URL", "OPENAI_BASE_URL", "REWIND_JUDGE_MODEL"):
        monkeypatch.delenv(name, raising=False)
    given = {"base_url": "http://127.0.0.1:9/v1", "model": "m", **options}
    with pytest.raises(ConfigError, match=words):
        EndpointJudge(given.pop("base_url"), given.pop("model"), **given)
