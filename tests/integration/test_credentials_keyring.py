"""Secrets in the real Secret Service, grants on task lineages, resolution at every exec, and the
canary: a secret value never reaches the database.

The tests marked `keyring` need an unlocked Secret Service (the `secret_service` fixture skips with
the reason otherwise); the locked-keyring tests start their own private D-Bus session.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from core.credentials import (
    INDEX_KEY,
    Credentials,
    KeyringUnavailable,
    ResolvedEnv,
    SecretMissing,
    SecretStore,
    backend_kind,
)
from core.datadir import DataDir
from core.errors import Conflict, InputError, NotFound
from core.models import Source, Task
from core.redact import Redactor
from core.store import Store

REPO_ROOT = Path(__file__).resolve().parents[2]
SUBPROCESS_TIMEOUT_S = 60

keyring_test = pytest.mark.keyring


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def redactor() -> Redactor:
    return Redactor()


@pytest.fixture
def secrets(secret_service, redactor):
    """A SecretStore on the real Secret Service under a service name of its own, emptied after."""
    store = SecretStore(
        f"cairn-test-{uuid.uuid4().hex[:12]}", backend=secret_service, redactor=redactor
    )
    yield store
    for name in store.names():
        try:
            store.delete(name)
        except SecretMissing:
            pass
    try:
        secret_service.delete_password(store.service, INDEX_KEY)
    except Exception:  # already gone
        pass


@pytest.fixture
def store(data_dir: Path):
    data = DataDir.resolve(data_dir)
    data.root.mkdir(parents=True, exist_ok=True)
    s = Store(data.db_path)
    s.add_source(Source("src_1", "/home/me/repo", "git", str(data.vault_root / "src_1.git"), 1.0))
    yield s
    s.close()


def add_task(store: Store, task_id: str, parent: str | None = None, source: str = "new") -> str:
    store.add_task(
        Task(
            task_id,
            f"task {task_id}",
            "src_1",
            None,
            "shell",
            "",
            parent,
            source if parent else "new",
            None,
            1.0,
        )
    )
    return task_id


@pytest.fixture
def lineage(store: Store) -> dict[str, str]:
    """root ─┬─ child ── grandchild
    └─ sibling"""
    root = add_task(store, "t_root")
    child = add_task(store, "t_child", root, "continue")
    return {
        "root": root,
        "child": child,
        "grandchild": add_task(store, "t_grandchild", child, "fork"),
        "sibling": add_task(store, "t_sibling", root, "fork"),
    }


@pytest.fixture
def creds(store, secrets, redactor) -> Credentials:
    return Credentials(store, secrets, redactor=redactor)


def canary() -> str:
    return f"canary-{uuid.uuid4().hex}"


# -- secrets in the keyring ----------------------------------------------------------------------


@keyring_test
def test_check_reports_the_secret_service_as_a_usable_os_keyring(secrets):
    status = secrets.check()
    assert status.backend == "keyring.backends.SecretService.Keyring"
    assert (status.kind, status.usable, status.real, status.locked) == ("os", True, True, False)
    assert status.ok and status.warning is None
    assert "OS keyring" in status.message


@keyring_test
def test_set_get_rotate_delete_round_trip(secrets):
    first, second = canary(), canary()
    secrets.set("api.token", first)
    assert secrets.get("api.token") == first
    assert secrets.names() == ["api.token"]
    secrets.set("api.token", second)  # rotate
    assert secrets.get("api.token") == second
    secrets.set("other_key-2", canary())
    assert secrets.names() == ["api.token", "other_key-2"]
    secrets.delete("api.token")
    assert secrets.names() == ["other_key-2"]
    with pytest.raises(SecretMissing, match="'api.token' is not in the keyring"):
        secrets.get("api.token")
    with pytest.raises(SecretMissing):
        secrets.delete("api.token")


@keyring_test
def test_values_set_here_are_registered_for_redaction(secrets, redactor):
    value = canary()
    secrets.set("REDACT_ME", value)
    assert redactor.redact(f"echo {value}") == "echo [secret:REDACT_ME]"


@keyring_test
def test_a_secret_removed_outside_cairn_is_missing_and_delete_cleans_the_list(
    secrets, secret_service
):
    secrets.set("gone", canary())
    secret_service.delete_password(secrets.service, "gone")
    assert secrets.names() == ["gone"]
    with pytest.raises(SecretMissing):
        secrets.get("gone")
    secrets.delete("gone")  # not in the keyring, but still listed: only the list is cleaned
    assert secrets.names() == []


@pytest.mark.parametrize("name", ["", "has space", "colon:name", "x" * 65, "slash/name", "é"])
def test_invalid_secret_names_are_refused_before_the_keyring_is_touched(name):
    store = SecretStore(backend=_ExplodingBackend())
    for call in (
        lambda: store.set(name, "value-1234"),
        lambda: store.get(name),
        lambda: store.delete(name),
    ):
        with pytest.raises(InputError, match="not a valid secret name"):
            call()


class _ExplodingBackend:
    backends = None

    def __getattr__(self, item):
        raise AssertionError(f"the keyring was touched: {item}")


# -- grants and resolution -----------------------------------------------------------------------


@keyring_test
def test_a_grant_resolves_to_the_current_value(creds, secrets, lineage):
    value = canary()
    secrets.set("openai", value)
    grant = creds.grant(lineage["root"], "openai", "OPENAI_API_KEY")
    assert grant.active and grant.scope == "lineage" and grant.id.startswith("g_")
    resolved = creds.resolve_env(lineage["root"])
    assert resolved.env == {"OPENAI_API_KEY": value}
    assert (resolved.missing, resolved.revoked, resolved.granted) == ([], [], ["openai"])
    assert value not in repr(resolved)
    assert resolved.record() == {
        "env_vars": ["OPENAI_API_KEY"],
        "secrets": ["openai"],
        "missing": [],
        "revoked": [],
        "problem": None,
    }


@keyring_test
def test_a_rotated_secret_is_what_the_next_resolve_env_sees(creds, secrets, lineage, redactor):
    old, new = canary(), canary()
    secrets.set("anthropic", old)
    creds.grant(lineage["root"], "anthropic", "ANTHROPIC_API_KEY")
    assert creds.resolve_env(lineage["child"]).env["ANTHROPIC_API_KEY"] == old
    secrets.set("anthropic", new)
    assert creds.resolve_env(lineage["child"]).env["ANTHROPIC_API_KEY"] == new
    # Output of an exec started before the rotation is still redacted.
    assert redactor.redact(f"{old} {new}") == "[secret:anthropic] [secret:anthropic]"


@keyring_test
def test_a_revoked_grant_is_absent_listed_as_revoked_and_stays_revoked(
    creds, secrets, lineage, store
):
    secrets.set("gh", canary())
    original = creds.grant(lineage["root"], "gh", "GH_TOKEN")
    revoked = creds.revoke(lineage["root"], "gh")
    assert [g.id for g in revoked] == [original.id] and revoked[0].revoked_at is not None

    for task in lineage.values():  # a later resume of any task in the lineage
        resolved = creds.resolve_env(task)
        assert "GH_TOKEN" not in resolved.env
        assert resolved.revoked == ["gh"]
        assert creds.grants_for(task) == []

    with pytest.raises(NotFound, match="no grant of the secret 'gh'"):
        creds.revoke(lineage["root"], "gh")

    regrant = creds.grant(lineage["root"], "gh", "GH_TOKEN")  # a new row; the old one stays revoked
    assert regrant.id != original.id
    rows = {r["id"]: r for r in store.grant_rows_for_tasks([lineage["root"]])}
    assert rows[original.id]["revoked_at"] is not None and rows[regrant.id]["revoked_at"] is None
    resolved = creds.resolve_env(lineage["grandchild"])
    assert "GH_TOKEN" in resolved.env and resolved.revoked == []


@keyring_test
def test_a_descendant_inherits_a_grant_and_the_nearest_task_wins_per_variable(
    creds, secrets, lineage
):
    shared, child_own = canary(), canary()
    secrets.set("team-key", shared)
    secrets.set("child-key", child_own)
    creds.grant(lineage["root"], "team-key", "API_KEY")
    creds.grant(lineage["root"], "team-key", "TEAM_KEY")
    creds.grant(lineage["child"], "child-key", "API_KEY")

    assert creds.resolve_env(lineage["root"]).env == {"API_KEY": shared, "TEAM_KEY": shared}
    assert creds.resolve_env(lineage["sibling"]).env == {"API_KEY": shared, "TEAM_KEY": shared}
    assert creds.resolve_env(lineage["child"]).env == {"API_KEY": child_own, "TEAM_KEY": shared}
    grandchild = creds.grants_for(lineage["grandchild"])
    assert [(g.env_var, g.secret_name, g.task_id) for g in grandchild] == [
        ("API_KEY", "child-key", lineage["child"]),
        ("TEAM_KEY", "team-key", lineage["root"]),
    ]


@keyring_test
def test_revoking_an_inherited_secret_on_a_child_blocks_only_that_subtree(creds, secrets, lineage):
    secrets.set("team-key", canary())
    creds.grant(lineage["root"], "team-key", "API_KEY")
    [block] = creds.revoke(lineage["child"], "team-key")
    assert block.task_id == lineage["child"] and block.revoked_at is not None

    for task in ("child", "grandchild"):
        resolved = creds.resolve_env(lineage[task])
        assert resolved.env == {} and resolved.revoked == ["team-key"]
    for task in ("root", "sibling"):
        assert set(creds.resolve_env(lineage[task]).env) == {"API_KEY"}

    creds.grant(lineage["grandchild"], "team-key", "API_KEY")  # a new grant made after the revoke
    assert set(creds.resolve_env(lineage["grandchild"]).env) == {"API_KEY"}
    assert creds.resolve_env(lineage["child"]).env == {}


@keyring_test
def test_a_task_scoped_grant_does_not_reach_descendants(creds, secrets, lineage):
    secrets.set("only-me", canary())
    creds.grant(lineage["child"], "only-me", "ONLY_ME", scope="task")
    assert set(creds.resolve_env(lineage["child"]).env) == {"ONLY_ME"}
    assert creds.resolve_env(lineage["grandchild"]).env == {}


def test_grants_are_validated_and_conflicting_variables_refused(store, lineage, redactor):
    creds = Credentials(store, SecretStore(backend=_ExplodingBackend()), redactor=redactor)
    for bad in ("lower", "1ABC", "A-B", "", "A B"):
        with pytest.raises(InputError, match="environment variable"):
            creds.grant(lineage["root"], "key", bad)
    with pytest.raises(InputError, match="grant scope"):
        creds.grant(lineage["root"], "key", "KEY", scope="global")
    with pytest.raises(NotFound, match="no task"):
        creds.grant("t_nope", "key", "KEY")
    first = creds.grant(lineage["root"], "key", "KEY")
    assert creds.grant(lineage["root"], "key", "KEY") == first  # granting again changes nothing
    with pytest.raises(Conflict, match="KEY is already granted .* from the secret 'key'"):
        creds.grant(lineage["root"], "other", "KEY")
    creds.grant(lineage["child"], "other", "KEY")  # a descendant may override it


def test_a_task_without_grants_resolves_without_the_keyring(store, lineage, redactor):
    creds = Credentials(store, SecretStore(backend=_ExplodingBackend()), redactor=redactor)
    resolved = creds.resolve_env(lineage["grandchild"], require=True)
    assert (resolved.env, resolved.missing, resolved.revoked) == ({}, [], [])


@keyring_test
def test_a_missing_secret_refuses_a_run_that_needs_it(creds, secrets, lineage):
    secrets.set("present", canary())
    creds.grant(lineage["root"], "present", "PRESENT")
    creds.grant(lineage["root"], "absent-1", "ABSENT_ONE")
    creds.grant(lineage["root"], "absent-2", "ABSENT_TWO")
    with pytest.raises(SecretMissing) as caught:
        creds.resolve_env(lineage["child"], require=True)
    assert caught.value.names == ["absent-1", "absent-2"]
    assert str(caught.value).startswith("the secrets 'absent-1', 'absent-2' are not in the keyring")
    resolved = creds.resolve_env(lineage["child"], require=False)
    assert set(resolved.env) == {"PRESENT"} and resolved.missing == ["absent-1", "absent-2"]


@keyring_test
def test_the_canary_never_reaches_the_database(creds, secrets, lineage, store):
    value = canary()
    secrets.set("canary", value)
    creds.grant(lineage["root"], "canary", "CANARY_TOKEN")
    resolved = creds.resolve_env(lineage["grandchild"])
    assert resolved.env == {"CANARY_TOKEN": value}
    store.append_event("run.env_resolved", lineage["grandchild"], resolved.record())
    secrets.set("canary", canary())  # rotation writes nothing to the store either
    creds.resolve_env(lineage["grandchild"])
    creds.revoke(lineage["root"], "canary")

    db = store.path
    files = [p for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()]
    assert db in files and Path(f"{db}-wal") in files  # WAL mode: the fresh rows are in the -wal
    forms = [value.encode(), base64.b64encode(value.encode()), value.encode("utf-16-le")]
    for path in files:
        data = path.read_bytes()
        for form in forms:
            assert data.count(form) == 0, f"the canary value is in {path.name}"


# -- an unusable or locked keyring ---------------------------------------------------------------

PROBE_SCRIPT = textwrap.dedent("""
    import json, sys
    from core.credentials import Credentials, KeyringUnavailable, SecretStore
    from core.store import Store

    service, db, task = sys.argv[1:4]
    secrets = SecretStore(service)
    out = {}
    status = secrets.check()
    out["status"] = {"backend": status.backend, "kind": status.kind, "usable": status.usable,
                     "locked": status.locked, "message": status.message}

    def attempt(call):
        try:
            call()
        except KeyringUnavailable as exc:
            return {"error": type(exc).__name__, "message": str(exc)}
        return {"error": None}

    out["get"] = attempt(lambda: secrets.get("anything"))
    out["set"] = attempt(lambda: secrets.set("anything", "value-1234"))
    creds = Credentials(Store(db), secrets)
    out["resolve_required"] = attempt(lambda: creds.resolve_env(task, require=True))
    resolved = creds.resolve_env(task, require=False)
    out["resolve_optional"] = {"env_vars": resolved.env_vars, "missing": resolved.missing,
                               "problem": resolved.problem}
    print(json.dumps(out))
""")

LOCK_SCRIPT = textwrap.dedent("""
    from contextlib import closing
    import secretstorage

    with closing(secretstorage.dbus_init()) as bus:
        collection = secretstorage.get_default_collection(bus)
        collection.lock()
        assert collection.is_locked()
""")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in ("DISPLAY", "WAYLAND_DISPLAY", "PYTHON_KEYRING_BACKEND", "DBUS_SESSION_BUS_ADDRESS")
    }
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(extra)
    return env


def _probe_outcome(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, f"probe failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def granted_task(store, lineage, redactor) -> tuple[str, str]:
    """A grant in the database (no keyring needed for that); the db path and the task id."""
    Credentials(store, SecretStore(backend=_ExplodingBackend()), redactor=redactor).grant(
        lineage["root"], "needed", "NEEDED_TOKEN"
    )
    return str(store.path), lineage["child"]


def test_no_d_bus_session_means_keyring_unavailable_and_a_refused_run(tmp_path, granted_task):
    db, task = granted_task
    script = tmp_path / "probe.py"
    script.write_text(PROBE_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), "cairn-test-dead", db, task],
        cwd=REPO_ROOT,
        env=_clean_env(DBUS_SESSION_BUS_ADDRESS=f"unix:path={tmp_path}/no-bus-here"),
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
    )
    out = _probe_outcome(proc)

    status = out["status"]
    assert (status["kind"], status["usable"], status["locked"]) == ("fail", False, False)
    assert status["backend"] == "keyring.backends.fail.Keyring"
    for key in ("get", "set", "resolve_required"):
        assert out[key]["error"] == "KeyringUnavailable", key
        message = out[key]["message"]
        assert message.startswith("no usable keyring: ")
        assert "unreachable" in message and "no-bus-here" in message
        assert message.endswith("start/unlock your desktop keyring (gnome-keyring / KWallet)")
        assert "\n" not in message
    optional = out["resolve_optional"]
    assert optional["env_vars"] == [] and optional["missing"] == ["needed"]
    assert optional["problem"].startswith("no usable keyring")


def _private_keyring_session(tmp_path: Path, shell: str, *args: str) -> subprocess.CompletedProcess:
    for tool in ("dbus-run-session", "gnome-keyring-daemon"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install gnome-keyring dbus-x11)")
    data, runtime = tmp_path / "keyring-data", tmp_path / "keyring-run"
    data.mkdir()
    runtime.mkdir(mode=0o700)
    # A private bus, keyring folder and runtime folder: the keyring the other tests use (and a
    # developer's own) is neither seen nor changed. No DISPLAY: a prompt fails at once.
    return subprocess.run(
        ["dbus-run-session", "--", "sh", "-c", shell, "sh", sys.executable, *args],
        cwd=REPO_ROOT,
        env=_clean_env(XDG_DATA_HOME=str(data), XDG_RUNTIME_DIR=str(runtime)),
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
    )


@keyring_test
@pytest.mark.parametrize("how", ["locked-collection", "empty-stdin"])
def test_a_locked_keyring_raises_keyring_locked_and_refuses_the_run(tmp_path, granted_task, how):
    db, task = granted_task
    probe, lock = tmp_path / "probe.py", tmp_path / "lock.py"
    probe.write_text(PROBE_SCRIPT)
    lock.write_text(LOCK_SCRIPT)
    if how == "locked-collection":
        # Unlocked with the empty password, then locked: unlocking again needs a prompt.
        shell = (
            'echo "" | gnome-keyring-daemon --unlock --components=secrets >/dev/null 2>&1; '
            '"$1" "$2" && exec "$1" "$3" "$4" "$5" "$6"'
        )
    else:
        # No password at all on stdin: no login keyring gets unlocked or created.
        shell = (
            "gnome-keyring-daemon --unlock --components=secrets </dev/null >/dev/null 2>&1; "
            'exec "$1" "$3" "$4" "$5" "$6"'
        )
    proc = _private_keyring_session(
        tmp_path, shell, str(lock), str(probe), "cairn-test-locked", db, task
    )
    out = _probe_outcome(proc)

    status = out["status"]
    assert status["backend"] == "keyring.backends.SecretService.Keyring"
    assert (status["usable"], status["locked"]) == (False, True)
    for key in ("get", "set", "resolve_required"):
        assert out[key]["error"] == "KeyringLocked", key
        assert out[key]["message"].startswith("the keyring is locked")
        assert "unlock your desktop keyring (gnome-keyring / KWallet)" in out[key]["message"]
    assert out["resolve_optional"]["missing"] == ["needed"]
    assert out["resolve_optional"]["problem"].startswith("the keyring is locked")


# -- backends that are not the OS keyring --------------------------------------------------------


def _fake_backend(module: str, name: str, **attrs):
    def get_password(self, service, username):
        return None

    cls = type(
        name,
        (),
        {
            "get_password": get_password,
            "set_password": lambda *a: None,
            "delete_password": lambda *a: None,
            "__module__": module,
            **attrs,
        },
    )
    return cls()


def test_a_plaintext_keyrings_alt_backend_is_usable_but_flagged():
    backend = _fake_backend("keyrings.alt.file", "PlaintextKeyring")
    status = SecretStore(backend=backend).check()
    assert (status.kind, status.usable, status.real, status.ok) == ("plaintext", True, False, False)
    assert "unencrypted" in status.warning and "keyrings.alt" in status.message


def test_the_fail_and_null_backends_are_unusable_with_a_clear_message():
    for module in ("keyring.backends.fail", "keyring.backends.null"):
        store = SecretStore(backend=_fake_backend(module, "Keyring"))
        status = store.check()
        assert (status.kind, status.usable) == ("fail", False)
        assert status.message.startswith("no usable keyring")
        with pytest.raises(KeyringUnavailable, match="gnome-keyring / KWallet"):
            store.get("anything")


def test_a_chainer_is_judged_by_its_first_backend_and_warns_about_a_plaintext_one():
    os_first = _fake_backend("keyring.backends.SecretService", "Keyring")
    plain = _fake_backend("keyrings.alt.file", "PlaintextKeyring")
    chainer = _fake_backend(
        "keyring.backends.chainer", "ChainerBackend", backends=[os_first, plain]
    )
    assert backend_kind(chainer) == "os"
    status = SecretStore(backend=chainer).check()
    assert status.usable and "unencrypted" in (status.warning or "")


def test_resolved_env_never_shows_values_in_its_repr():
    resolved = ResolvedEnv(
        env={"K": "value-that-must-not-show"}, missing=[], revoked=[], granted=["k"]
    )
    assert "value-that-must-not-show" not in repr(resolved)
    assert resolved.env_vars == ["K"]
