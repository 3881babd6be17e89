"""A run's stored output keeps its structure: streams, times and where each attempt began (with
why it was resumed), read from the store's events and carried as marker lines that plain output
readers never see as output."""

from __future__ import annotations

from core import events as ev
from core.output_blocks import (
    MARKER,
    AttemptStart,
    OutputRecord,
    decode,
    encode,
    read_records,
    records_from_events,
    resume_reason,
)
from core.store import Store

REPORT = {
    "run_id": "r1",
    "path": ["workspace: present", "sandbox: recreated", "engine: shell continues at step 1"],
}


def test_the_resume_report_in_a_few_words():
    assert resume_reason(REPORT) == (
        "sandbox recreated, workspace present, engine shell continues at step 1"
    )
    assert resume_reason(None) == ""


def test_attempts_start_at_a_resume_and_the_first_gets_a_header_only_then():
    rows = [
        (ev.RUN_OUTPUT, {"stream": "stdout", "text": "one\n", "offset": 0}, 10.0),
        (ev.RUN_OUTPUT, {"stream": "stdout", "text": "echo after > afte", "offset": 4}, 11.0),
    ]
    assert records_from_events(rows) == [
        OutputRecord("stdout", "one\n", 10.0),
        OutputRecord("stdout", "echo after > afte", 11.0),
    ]
    rows += [
        (ev.RUN_RESUMED, {"report": REPORT}, 20.0),
        (ev.RUN_OUTPUT, {"stream": "stderr", "text": "cairn: waiting\n", "offset": 0}, 21.0),
    ]
    records = records_from_events(rows)
    assert records[0] == AttemptStart(1, "", None)
    assert records[3] == AttemptStart(2, resume_reason(REPORT), 20.0)  # when it was resumed
    assert records[3].header.startswith("attempt 2 · resumed: sandbox recreated")
    assert records[4] == OutputRecord("stderr", "cairn: waiting\n", 21.0)


def test_an_offset_that_goes_back_is_a_new_attempt_too():
    rows = [
        (ev.RUN_OUTPUT, {"stream": "stdout", "text": "a\n", "offset": 0}, 1.0),
        (ev.RUN_OUTPUT, {"stream": "stdout", "text": "b\n", "offset": 2}, 2.0),
        (ev.RUN_OUTPUT, {"stream": "stdout", "text": "c\n", "offset": 0}, 3.0),
    ]
    starts = [r for r in records_from_events(rows) if isinstance(r, AttemptStart)]
    assert [s.number for s in starts] == [1, 2]


def test_encoded_text_decodes_to_the_same_records_and_an_attempt_starts_its_own_line():
    records = [
        AttemptStart(1),
        OutputRecord("stdout", "one\n", 10.0),
        OutputRecord("stderr", "oops\n", 10.5),
        OutputRecord("stdout", "echo after > afte", 11.0),
        AttemptStart(2, "sandbox recreated", 20.0),
        OutputRecord("stdout", "after\n", 21.0),
    ]
    text = encode(records)
    assert "afte\n" + MARKER in text  # the cut line ends where the attempt did
    back = list(decode(text))
    assert back[0] == AttemptStart(1)
    assert back[1] == OutputRecord("stdout", "one\n", 10.0)
    assert back[2] == OutputRecord("stderr", "oops\n", 10.5)
    assert back[3] == OutputRecord("stdout", "echo after > afte\n", 11.0)
    assert back[4] == AttemptStart(2, "sandbox recreated", 20.0)
    assert back[5] == OutputRecord("stdout", "after\n", 21.0)


def test_plain_text_is_one_stdout_record():
    assert list(decode("a\nb\n")) == [OutputRecord("stdout", "a\nb\n")]
    assert list(decode("")) == []
    assert encode([OutputRecord("stdout", "x\n")]) == "x\n"


def test_a_broken_marker_is_ignored():
    text = MARKER + "{not json\nline\n"
    assert list(decode(text)) == [OutputRecord("stdout", "line\n")]


def test_read_from_the_store(tmp_path):
    store = Store(tmp_path / "cairn.db")
    store.append_event(ev.RUN_OUTPUT, "r1", {"stream": "stdout", "text": "x\n", "offset": 0})
    store.append_event(ev.RUN_OUTPUT, "other", {"stream": "stdout", "text": "no\n", "offset": 0})
    store.append_event(ev.RUN_RESUMED, "r1", {"report": REPORT})
    store.append_event(ev.RUN_OUTPUT, "r1", {"stream": "stdout", "text": "y\n", "offset": 0})
    records = read_records(store, "r1")
    assert [type(r).__name__ for r in records] == [
        "AttemptStart",
        "OutputRecord",
        "AttemptStart",
        "OutputRecord",
    ]
    assert [r.text for r in records if isinstance(r, OutputRecord)] == ["x\n", "y\n"]


def test_a_resume_after_an_attempt_that_printed_nothing_still_has_its_header():
    rows = [
        (ev.RUN_RESUMED, {"report": REPORT}, 5.0),
        (ev.RUN_OUTPUT, {"stream": "stdout", "text": "hi\n", "offset": 0}, 6.0),
    ]
    assert records_from_events(rows) == [
        AttemptStart(2, resume_reason(REPORT), 5.0),
        OutputRecord("stdout", "hi\n", 6.0),
    ]
