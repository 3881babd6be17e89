#!/usr/bin/env python3
"""Cairn's approval gate: runs inside the sandbox, as the agent's user, before each tool call of
an agent (Claude Code's and Codex's PreToolUse hook). The programs a run starts are judged by the
exec supervisor (supervisor.py), not here.

It only relays. It writes the request into the run's mailbox (the attempt's folder, which the
sandbox may write), waits for the decision Cairn writes on the host into a folder this sandbox
can only read, and answers allow or deny. Every judgement happens on the host. Python 3 standard
library only.

    approval-gate.py --claude-hook    Claude Code PreToolUse hook (JSON in, JSON out, exit 0)
    approval-gate.py --codex-hook     Codex PreToolUse hook (the same JSON shape)
    approval-gate.py --check          exit 0 when the gate can run here

Environment: CAIRN_RUN_ID, CAIRN_EXEC_ID (which run and attempt asks), CAIRN_APPROVAL_REQUESTS
and CAIRN_APPROVAL_DECISIONS (the mailbox; by default /cairn/runs/<exec>/requests and
/cairn/decisions/<exec>), CAIRN_APPROVAL_TIMEOUT (seconds to wait; 3600 by default: then the
command is denied).
"""

# ruff: noqa: UP031 - no f-strings: the gate runs on the image's python3, even one older than 3.6

import hashlib
import json
import os
import shlex
import sys
import time

POLL_S = 0.05
DEFAULT_TIMEOUT_S = 3600.0
SUMMARY_KEYS = ("file_path", "notebook_path", "path", "url", "query", "pattern", "description")
MAX_SUMMARY = 4096
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


class GateError(Exception):
    pass


def _base36(n, width):
    out = []
    for _ in range(width):
        n, r = divmod(n, 36)
        out.append(_ALPHABET[r])
    return "".join(reversed(out))


def new_request_id():
    """Cairn's approval id shape: `ap_` + 9 characters of time + 5 random ones."""
    ms = int(time.time() * 1000)
    return "ap_" + _base36(ms, 9) + _base36(int.from_bytes(os.urandom(5), "big"), 5)


def mailbox():
    exec_id = os.environ.get("CAIRN_EXEC_ID")
    if not exec_id:
        raise GateError("this is not a Cairn run (CAIRN_EXEC_ID is not set)")
    requests = os.environ.get("CAIRN_APPROVAL_REQUESTS") or "/cairn/runs/%s/requests" % exec_id
    decisions = os.environ.get("CAIRN_APPROVAL_DECISIONS") or "/cairn/decisions/%s" % exec_id
    return exec_id, requests, decisions


def timeout_s():
    try:
        value = float(os.environ.get("CAIRN_APPROVAL_TIMEOUT") or DEFAULT_TIMEOUT_S)
    except ValueError:
        value = DEFAULT_TIMEOUT_S
    return value if value > 0 else DEFAULT_TIMEOUT_S


def write_request(folder, request):
    """The whole request or nothing: a hidden temporary, then a rename."""
    os.makedirs(folder, exist_ok=True)
    final = os.path.join(folder, request["id"] + ".json")
    tmp = os.path.join(folder, "." + request["id"] + ".json.tmp")
    data = json.dumps(request, sort_keys=True).encode("utf-8")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.rename(tmp, final)
    return hashlib.sha256(data).hexdigest()


def read_decision(path):
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None  # not whole yet, or unreadable: look again
    return doc if isinstance(doc, dict) else None


def ask(engine, tool, command, cwd):
    """Relay one request and wait for its decision: (allowed, reason)."""
    exec_id, requests, decisions = mailbox()
    request_id = new_request_id()
    digest = write_request(
        requests,
        {
            "id": request_id,
            "run_id": os.environ.get("CAIRN_RUN_ID", ""),
            "exec_id": exec_id,
            "engine": engine,
            "tool": tool,
            "command": command,
            "cwd": cwd,
            "created_at": time.time(),
        },
    )
    limit = timeout_s()
    path = os.path.join(decisions, request_id + ".json")
    start = time.monotonic()
    while True:
        doc = read_decision(path)
        if doc is not None:
            decision = doc.get("decision")
            reason = str(doc.get("reason") or "")
            if doc.get("request_sha256") != digest:
                # The requests folder is the run's: what the host judged was other bytes.
                return False, "the request was changed in the sandbox before it was judged"
            if decision == "allow":
                return True, reason or "allowed"
            return False, reason or "denied"
        if time.monotonic() - start >= limit:
            return False, "no decision within %g s" % limit
        time.sleep(POLL_S)


# -- what a hook's tool call asks to do ------------------------------------------------------------


def shell_text(value):
    """A command as one line of shell: an argv list is joined, and `bash -lc X` is X."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        if (
            len(value) == 3
            and os.path.basename(value[0]) in ("sh", "bash", "zsh", "dash")
            and value[1] in ("-c", "-lc", "-ic")
        ):
            return value[2]
        return " ".join(shlex.quote(v) for v in value)
    return value if isinstance(value, str) else None


def describe(tool, tool_input):
    """The exact command of a shell tool; `<Tool> <what it touches>` for any other tool."""
    if isinstance(tool_input, dict):
        for key in ("command", "cmd"):
            text = shell_text(tool_input.get(key))
            if text:
                return text
        for key in SUMMARY_KEYS:
            value = tool_input.get(key)
            if isinstance(value, str) and value:
                return "%s %s" % (tool, value[:MAX_SUMMARY])
        summary = json.dumps(tool_input, sort_keys=True)
    elif isinstance(tool_input, str):
        summary = tool_input
    else:
        summary = json.dumps(tool_input)
    return ("%s %s" % (tool, summary[:MAX_SUMMARY])).rstrip()


def hook_answer(allowed, reason):
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow" if allowed else "deny",
            "permissionDecisionReason": "Cairn: " + reason,
        }
    }


def run_hook(engine, stdin, stdout):
    try:
        event = json.loads(stdin.read() or "{}")
        if not isinstance(event, dict):
            raise ValueError("the hook input is not a JSON object")
        tool = str(event.get("tool_name") or "unknown")
        command = describe(tool, event.get("tool_input"))
        allowed, reason = ask(engine, tool, command, str(event.get("cwd") or ""))
    except Exception as exc:  # noqa: BLE001 - any failure refuses: a crashed hook lets calls run
        allowed, reason = False, "the approval gate failed: %s" % exc
    if allowed and engine == "codex":
        # Codex refuses `permissionDecision: allow` as unsupported; saying nothing lets it run.
        return 0
    stdout.write(json.dumps(hook_answer(allowed, reason)) + "\n")
    stdout.flush()
    return 0


def main(argv):
    if argv == ["--claude-hook"]:
        return run_hook("claude_code", sys.stdin, sys.stdout)
    if argv == ["--codex-hook"]:
        return run_hook("codex", sys.stdin, sys.stdout)
    if argv == ["--check"]:
        sys.stdout.write("ok\n")
        return 0
    sys.stderr.write("usage: approval-gate.py --claude-hook | --codex-hook | --check\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
