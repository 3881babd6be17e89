"""A run's output becomes readable blocks: agent messages, tool calls with their commands, file
edits, results and errors; plain lines for the shell engine; chunks cut mid-line are joined."""

from __future__ import annotations

import json

from gui.task_view.output import (
    EDIT,
    ERROR,
    MESSAGE,
    PLAIN,
    RESULT,
    SESSION,
    STDERR,
    TOOL,
    TOOL_RESULT,
    OutputBlock,
    OutputReader,
    parse_line,
    read_all,
)


def line(obj) -> str:
    return json.dumps(obj)


def test_shell_output_is_plain_lines_and_stderr_is_marked():
    assert read_all("one\ntwo\n") == [OutputBlock(PLAIN, "one"), OutputBlock(PLAIN, "two")]
    assert parse_line("oops", "stderr") == [OutputBlock(STDERR, "oops")]


def test_chunks_cut_mid_line_are_joined_and_the_rest_flushed():
    reader = OutputReader()
    assert reader.feed("stdout", "hel") == []
    assert reader.feed("stdout", "lo\nwor") == [OutputBlock(PLAIN, "hello")]
    assert reader.feed("stderr", "err\n") == [OutputBlock(STDERR, "err")]
    assert reader.flush() == [OutputBlock(PLAIN, "wor")]


def test_claude_code_stream_json():
    text = (
        "\n".join(
            [
                line({"type": "system", "subtype": "init", "session_id": "s-1", "model": "m"}),
                line(
                    {
                        "type": "assistant",
                        "message": {
                            "content": [
                                {"type": "text", "text": "I'll run the tests."},
                                {
                                    "type": "tool_use",
                                    "name": "Bash",
                                    "input": {"command": "pytest -q"},
                                },
                                {
                                    "type": "tool_use",
                                    "name": "Edit",
                                    "input": {"file_path": "/workspace/app.py"},
                                },
                                {
                                    "type": "tool_use",
                                    "name": "Write",
                                    "input": {"file_path": "/workspace/new.py"},
                                },
                                {
                                    "type": "tool_use",
                                    "name": "Read",
                                    "input": {"file_path": "/workspace/a.py"},
                                },
                            ]
                        },
                    }
                ),
                line(
                    {
                        "type": "user",
                        "message": {
                            "content": [
                                {"type": "tool_result", "content": "3 passed", "is_error": False},
                                {
                                    "type": "tool_result",
                                    "content": [{"type": "text", "text": "boom"}],
                                    "is_error": True,
                                },
                            ]
                        },
                    }
                ),
                line({"type": "result", "subtype": "success", "result": "All green."}),
            ]
        )
        + "\n"
    )
    assert read_all(text) == [
        OutputBlock(SESSION, "session s-1 (m)"),
        OutputBlock(MESSAGE, "I'll run the tests."),
        OutputBlock(TOOL, "$ pytest -q"),
        OutputBlock(EDIT, "edited /workspace/app.py"),
        OutputBlock(EDIT, "wrote /workspace/new.py"),
        OutputBlock(TOOL, "Read /workspace/a.py"),
        OutputBlock(TOOL_RESULT, "3 passed"),
        OutputBlock(ERROR, "boom"),
        OutputBlock(RESULT, "All green."),
    ]


def test_codex_exec_json():
    text = (
        "\n".join(
            [
                line({"type": "thread.started", "thread_id": "th-9"}),
                line(
                    {
                        "type": "item.started",
                        "item": {"type": "command_execution", "command": "make test"},
                    }
                ),
                line(
                    {
                        "type": "item.completed",
                        "item": {
                            "type": "command_execution",
                            "command": "make test",
                            "aggregated_output": "ok\n",
                            "exit_code": 2,
                        },
                    }
                ),
                line(
                    {
                        "type": "item.completed",
                        "item": {
                            "type": "file_change",
                            "changes": [{"path": "src/a.rs", "kind": "update"}],
                        },
                    }
                ),
                line({"type": "item.completed", "item": {"type": "reasoning", "text": "hmm"}}),
                line(
                    {"type": "item.completed", "item": {"type": "agent_message", "text": "Done."}}
                ),
                line({"type": "turn.failed", "error": {"message": "rate limited"}}),
            ]
        )
        + "\n"
    )
    assert read_all(text) == [
        OutputBlock(SESSION, "thread th-9"),
        OutputBlock(TOOL, "$ make test"),
        OutputBlock(TOOL_RESULT, "ok"),  # its exit code (2) is the block's status
        OutputBlock(EDIT, "update src/a.rs"),
        OutputBlock(MESSAGE, "Done."),
        OutputBlock(ERROR, "rate limited"),
    ]


def test_cairn_engine_events():
    text = (
        "\n".join(
            [
                line({"kind": "message", "data": {"text": "hello"}}),
                line({"kind": "tool_call", "data": {"name": "shell", "input": {"command": "ls"}}}),
                line({"kind": "file_edit", "data": {"path": "a.txt"}}),
                line({"kind": "error", "data": {"message": "no"}}),
                line({"kind": "usage", "data": {"tokens": 3}}),
            ]
        )
        + "\n"
    )
    assert read_all(text) == [
        OutputBlock(MESSAGE, "hello"),
        OutputBlock(TOOL, "$ ls"),
        OutputBlock(EDIT, "edited a.txt"),
        OutputBlock(ERROR, "no"),
    ]


def test_json_that_is_no_known_protocol_and_broken_json_stay_plain():
    assert parse_line('{"hello": 1}') == [OutputBlock(PLAIN, '{"hello": 1}')]
    assert parse_line("{not json}") == [OutputBlock(PLAIN, "{not json}")]


def test_long_tool_output_is_cut_with_a_note():
    long = "x" * 1000
    [block] = parse_line(
        line({"type": "user", "message": {"content": [{"type": "tool_result", "content": long}]}})
    )
    assert block.text.startswith("x" * 400) and block.text.endswith("(600 more characters)")
