"""The scripted Messages API server the Claude Code tests run against: the streamed event
sequence, the title request, and a script that advances only when a tool's result comes back."""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.agents.fake_anthropic import Bash, FakeAnthropic, Reply, Tool


@pytest.fixture
def server():
    with FakeAnthropic([Bash("echo hi > hi.txt"), Reply("done")]) as s:
        yield s


def post(server: FakeAnthropic, body: dict) -> tuple[str, bytes]:
    req = urllib.request.Request(
        f"{server.url}/v1/messages?beta=true",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.headers["content-type"], resp.read()


def sse(payload: bytes) -> list[tuple[str, dict]]:
    events = []
    for chunk in payload.decode().strip().split("\n\n"):
        name, data = chunk.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        events.append((name[len("event: ") :], json.loads(data[len("data: ") :])))
    return events


TOOLS = [{"name": "Bash", "input_schema": {"type": "object"}}]
SYSTEM_IN_MESSAGES = {"role": "system", "content": "# Environment"}


def test_head_is_answered(server):
    with urllib.request.urlopen(
        urllib.request.Request(server.url + "/", method="HEAD"), timeout=10
    ) as resp:
        assert resp.status == 200
    assert server.requests[0].kind == "probe"


def test_a_tool_step_streams_one_input_json_delta_and_waits_for_its_result(server):
    first = {
        "stream": True,
        "tools": TOOLS,
        "messages": [{"role": "user", "content": "go"}, SYSTEM_IN_MESSAGES],
    }
    kind, payload = post(server, first)
    assert kind == "text/event-stream"
    events = sse(payload)
    assert [n for n, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[1][1]["content_block"]
    assert start["type"] == "tool_use" and start["name"] == "Bash" and start["input"] == {}
    delta = events[2][1]["delta"]
    assert delta["type"] == "input_json_delta"
    assert json.loads(delta["partial_json"])["command"] == "echo hi > hi.txt"
    assert events[4][1]["delta"]["stop_reason"] == "tool_use"
    # The same request again (a retry) gets the same tool call.
    again = sse(post(server, first)[1])
    assert again[1][1]["content_block"]["id"] == start["id"]
    # Its result moves the script on.
    result = {
        **first,
        "messages": first["messages"]
        + [
            {"role": "assistant", "content": [dict(start, input={"command": "echo hi > hi.txt"})]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": start["id"], "content": "ok"}],
            },
        ],
    }
    events = sse(post(server, result)[1])
    assert events[1][1]["content_block"] == {"type": "text", "text": ""}
    assert events[2][1]["delta"] == {"type": "text_delta", "text": "done"}
    assert events[4][1]["delta"]["stop_reason"] == "end_turn"
    assert server.remaining == 0 and len(server.main_requests()) == 3


def test_a_title_request_gets_json_text_and_leaves_the_script_alone(server):
    body = {
        "stream": False,
        "messages": [{"role": "user", "content": "name this"}],
        "output_config": {"format": {"type": "json_schema", "schema": {}}},
    }
    _, payload = post(server, body)
    message = json.loads(payload)
    assert json.loads(message["content"][0]["text"]) == {"title": "Scripted session"}
    assert server.requests[-1].kind == "title" and server.remaining == 2


def test_steps_added_later_answer_the_next_turn():
    with FakeAnthropic([Reply("one")]) as s:
        body = {"stream": True, "tools": TOOLS, "messages": [{"role": "user", "content": "a"}]}
        assert sse(post(s, body)[1])[2][1]["delta"]["text"] == "one"
        s.add(Tool("Write", {"file_path": "/workspace/x", "content": "x"}))
        events = sse(post(s, body)[1])
        assert events[1][1]["content_block"]["name"] == "Write"
