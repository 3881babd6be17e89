"""Artifacts and promotion: the only ways a task's results leave its sandbox — a file or a whole
revision frozen as a content-addressed artifact, a branch in the user's own repository, a patch.

Owns the artifact store under `artifacts/` (layout, atomic writes, a re-hash on every read), the
secret scan that refuses a hit, the one write Cairn ever makes to a user's repository (a new
branch), and the patch export. The facade resolves tasks and revisions; core.credentials owns the
keyring, the vault owns the objects read here.

What the scan reads: every file (and file name) the promotion carries whose content is not already
in the user's HEAD at import — the user's committed files are theirs already, so a documentation
example key in them does not block every promotion; their uncommitted and untracked files, and
everything the task wrote, are scanned. It looks for the values of every secret ever granted in
the task's lineage (revoked ones too: the agent may have seen them) in the forms core.redact knows
(as-is, URL-encoded, base64), and for well-known token shapes. A hit names the file and the kind,
never the value.
"""

from __future__ import annotations

import email.utils
import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from email.header import Header
from pathlib import Path
from typing import Any, BinaryIO

from core import events as ev
from core import lineage
from core.context import Context, Lazy
from core.credentials import Credentials, KeyringUnavailable, SecretMissing
from core.diffs import quote_path
from core.errors import CairnError, Conflict, InputError, NotFound
from core.ids import new_id
from core.locks import held
from core.models import Revision, Run, Task, Workspace
from core.redact import MIN_SECRET_LENGTH, encodings_of
from core.revisions import Revisions
from core.safe_fs import fsync_dir
from core.store import id_or_prefix
from core.vault import Vault
from core.vault.objects import MODE_EXEC, MODE_FILE, MODE_GITLINK, MODE_LINK, git_env, run_git

KIND_FILE = "file"
KIND_REVISION = "revision"
# A whole revision is stored as an uncompressed POSIX (pax) tar whose bytes depend on the tree
# alone: entries in git's tree order, mtime 0, uid/gid 0, no user names. The same tree always
# gives the same sha256 (so the address is reproducible by anyone from the revision, and equal
# results share one file), any tool can read it without git, and it holds exactly the files that
# were scanned. A git bundle would carry the history below the revision (the user's HEAD and
# every earlier revision: more to leak, more to scan) and its pack bytes vary with git's version.
FORMAT_TAR = "tar"
FORMAT_BLOB = "blob"

_CHUNK = 1 << 20
_NAMED_HITS = 5  # how many hits an error names before it only counts


# -- errors ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScanHit:
    """A secret found: where and what kind. Never the value."""

    path: str  # the file's path in the revision, or what was scanned ("the evidence")
    kind: str  # "GitHub token", "the granted secret 'openai'", ...
    line: int | None = None
    in_name: bool = False

    def describe(self) -> str:
        where = quote_path(self.path)
        if self.in_name:
            return f"{where} ({self.kind} in the file name)"
        return f"{where} ({self.kind}{f', line {self.line}' if self.line else ''})"

    def to_dict(self) -> dict:
        return {"path": self.path, "kind": self.kind, "line": self.line, "in_name": self.in_name}


class SecretFound(CairnError):
    """A promotion refused because what would leave holds a secret."""

    def __init__(self, what: str, hits: list[ScanHit]):
        named = ", ".join(h.describe() for h in hits[:_NAMED_HITS])
        more = f" and {len(hits) - _NAMED_HITS} more" if len(hits) > _NAMED_HITS else ""
        super().__init__(
            f"{what} refused: a secret was found in {named}{more}",
            hint="remove it from the workspace, capture a new revision and promote that one",
        )
        self.hits = hits


class ScanUnavailable(CairnError):
    """The secrets to scan for cannot be read (no usable keyring): nothing leaves unscanned."""


class CorruptArtifact(CairnError):
    """An artifact whose stored content is missing or no longer hashes to its recorded sha256."""


# -- the scan -------------------------------------------------------------------------------------

# Well-known token shapes: (kind, literal needles, pattern). Each pattern is anchored on a fixed
# prefix and asks for enough random characters that ordinary identifiers (sk-learn, ghp_test) do
# not match. A file holding none of a pattern's needles is not searched with it: `in` on bytes is
# far faster than a regex that starts with a look-behind.
TOKEN_PATTERNS: tuple[tuple[str, tuple[bytes, ...], re.Pattern[bytes]], ...] = tuple(
    (kind, needles, re.compile(pattern))
    for kind, needles, pattern in (
        (
            "private key",
            (b"PRIVATE KEY",),
            rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----",
        ),
        (
            "AWS access key id",
            (b"AKIA", b"ASIA", b"ABIA", b"ACCA"),
            rb"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Z0-9])",
        ),
        (
            "GitHub token",
            (b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_"),
            rb"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{36,255}(?![A-Za-z0-9_])",
        ),
        ("GitHub token", (b"github_pat_",), rb"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{60,255}"),
        ("GitLab token", (b"glpat-",), rb"(?<![A-Za-z0-9_])glpat-[A-Za-z0-9_-]{20,}"),
        (
            "Anthropic API key",
            (b"sk-ant-",),
            rb"(?<![A-Za-z0-9_-])sk-ant-[a-z]+[0-9]*-[A-Za-z0-9_-]{20,}",
        ),
        (
            "OpenAI-style API key",
            (b"sk-",),
            rb"(?<![A-Za-z0-9_-])sk-(?!ant-)(?:proj-|svcacct-|admin-)?"
            rb"(?=[A-Za-z0-9_-]{0,200}[0-9])(?=[A-Za-z0-9_-]{0,200}[A-Za-z])[A-Za-z0-9_-]{32,}",
        ),
        ("Slack token", (b"xox",), rb"(?<![A-Za-z0-9])xox[abposr]-[0-9A-Za-z-]{10,}"),
        ("Google API key", (b"AIza",), rb"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}"),
        ("Stripe live key", (b"k_live_",), rb"(?<![A-Za-z0-9])[rs]k_live_[0-9A-Za-z]{20,}"),
        ("npm token", (b"npm_",), rb"(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])"),
        ("Hugging Face token", (b"hf_",), rb"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{34,}(?![A-Za-z0-9])"),
    )
)


class SecretScanner:
    """Finds secret values (given by name) and token shapes in bytes; reports names and kinds."""

    def __init__(self, secrets: dict[str, str] | None = None):
        forms: dict[bytes, str] = {}
        self.too_short: list[str] = []
        for name, value in sorted((secrets or {}).items()):
            if not isinstance(value, str) or len(value) < MIN_SECRET_LENGTH:
                self.too_short.append(name)  # would match ordinary text everywhere
                continue
            for form in encodings_of(value):
                forms.setdefault(form.encode("utf-8"), name)
        self.secret_names = sorted(set(secrets or {}) - set(self.too_short))
        self._names = forms
        ordered = sorted(forms, key=len, reverse=True)
        self._values = re.compile(b"|".join(re.escape(f) for f in ordered)) if ordered else None

    def scan(self, path: str, data: bytes) -> list[ScanHit]:
        """The hits in one file's content: at most one per kind, at its first line."""
        hits: dict[str, ScanHit] = {}

        def line_of(pos: int) -> int:
            return data.count(b"\n", 0, pos) + 1

        if self._values is not None:
            for m in self._values.finditer(data):
                kind = f"the granted secret {self._names[m.group(0)]!r}"
                hits.setdefault(kind, ScanHit(path, kind, line_of(m.start())))
        for kind, needles, pattern in TOKEN_PATTERNS:
            if kind in hits or not any(needle in data for needle in needles):
                continue
            found = pattern.search(data)
            if found is not None:
                hits[kind] = ScanHit(path, kind, line_of(found.start()))
        return list(hits.values())

    def scan_name(self, path: str) -> list[ScanHit]:
        raw = os.fsencode(path)
        return [ScanHit(path, h.kind, None, in_name=True) for h in self.scan(path, raw)]


@dataclass
class ScanReport:
    """What a scan covered, kept in an artifact's provenance (names only)."""

    files_scanned: int = 0
    files_already_committed: int = 0  # identical to a file of the user's HEAD at import
    secrets_checked: list[str] = field(default_factory=list)
    secrets_not_in_keyring: list[str] = field(default_factory=list)
    secrets_too_short: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "files_scanned": self.files_scanned,
            "files_already_committed": self.files_already_committed,
            "secrets_checked": self.secrets_checked,
            "secrets_not_in_keyring": self.secrets_not_in_keyring,
            "secrets_too_short": self.secrets_too_short,
            "token_kinds": sorted({kind for kind, _, _ in TOKEN_PATTERNS}),
        }


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def lineage_secret_names(ctx: Context, task: Task) -> list[str]:
    """Every secret ever granted anywhere in the task's lineage, revoked ones included: a continue
    shares its parent's workspace, and an agent may have written a secret before it was revoked."""
    members = lineage.members(ctx.store, lineage.root_of(ctx.store, task.id))
    rows = ctx.store.grant_rows_for_tasks([t.id for t in members] or [task.id])
    return sorted({r["secret_name"] for r in rows})


def scanner_for(
    ctx: Context, credentials: Lazy[Credentials], task: Task, what: str
) -> tuple[SecretScanner, ScanReport]:
    """A scanner loaded with the current values of the lineage's secrets, read from the keyring
    now. A lineage with no grants never touches the keyring; one with grants and no usable
    keyring is refused (ScanUnavailable) rather than promoted unscanned."""
    names = lineage_secret_names(ctx, task)
    values: dict[str, str] = {}
    missing: list[str] = []
    if names:
        secrets = credentials.get().secrets
        for name in names:
            try:
                values[name] = secrets.get(name)
            except SecretMissing:
                missing.append(name)  # deleted from the keyring: there is no value to look for
            except KeyringUnavailable as exc:
                listed = ", ".join(repr(n) for n in names)
                raise ScanUnavailable(
                    f"{what} refused: the secrets granted to this task's lineage ({listed}) "
                    f"cannot be read to scan for them: {exc.detail}",
                    hint="start or unlock your desktop keyring and try again",
                ) from None
    scanner = SecretScanner(values)
    return scanner, ScanReport(
        secrets_checked=scanner.secret_names,
        secrets_not_in_keyring=missing,
        secrets_too_short=scanner.too_short,
    )


# -- reading revisions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TreeItem:
    mode: str
    kind: str  # "blob" | "tree" | "commit"
    sha: str
    path: str  # decoded with surrogateescape: round-trips any bytes


def list_tree(vault: Vault, treeish: str, *, with_trees: bool = False) -> list[TreeItem]:
    """Every entry below `treeish`, recursively, in git's tree order (parents before children)."""
    args = ["--git-dir", str(vault.git_dir), "ls-tree", "-r", "-z", "--full-tree"]
    out = run_git(args + (["-t"] if with_trees else []) + [treeish]).stdout
    items = []
    for entry in out.split(b"\0"):
        if not entry:
            continue
        meta, _, raw_path = entry.partition(b"\t")
        mode, kind, sha = meta.decode().split(" ")
        items.append(TreeItem(mode, kind, sha, os.fsdecode(raw_path)))
    return items


def committed_blobs(vault: Vault, head: str | None) -> set[str]:
    """The blob ids of the user's HEAD at import (empty for a plain folder or an unborn HEAD)."""
    if not head or not vault.objects.has_object(head):
        return set()
    return {i.sha for i in list_tree(vault, head) if i.kind == "blob"}


def import_base(vault: Vault, ws: Workspace) -> str:
    """The base commit of the lineage's import: the folder as it was dropped in. A fork or a
    restored workspace starts from a later revision; its chain leads back to this commit."""
    sha: str | None = ws.base_revision
    seen = 0
    while sha:
        commit = vault.objects.read_commit(sha)
        if commit.trailer("Cairn-Import"):
            return sha
        sha = commit.parents[0] if commit.parents else None
        seen += 1
        if seen > 1_000_000:  # pragma: no cover - damaged data only
            break
    return ws.base_revision


def head_at_import(vault: Vault, ws: Workspace) -> str | None:
    if ws.head_commit:
        return ws.head_commit
    head = vault.objects.read_commit(import_base(vault, ws)).trailer("Cairn-Head")
    return None if head in (None, "", "-") else head


def scan_items(
    vault: Vault,
    items: Iterable[TreeItem],
    scanner: SecretScanner,
    report: ScanReport,
    skip: set[str],
) -> list[ScanHit]:
    """Scan the files among `items` (blobs whose content is not in `skip`)."""
    hits: list[ScanHit] = []
    for item in items:
        if item.kind != "blob":
            continue
        if item.sha in skip:
            report.files_already_committed += 1
            continue
        report.files_scanned += 1
        hits += scanner.scan_name(item.path)
        hits += scanner.scan(item.path, vault.objects.read_blob(item.sha))
    return hits


def _normalise_path(path: str) -> str:
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    if path.startswith("/") or ".." in parts or not parts:
        raise InputError(
            f"{path!r} is not a path inside the workspace (give it relative to the "
            "workspace's top, e.g. src/app.py)"
        )
    return "/".join(parts)


def find_file(vault: Vault, rev: Revision, path: str) -> TreeItem:
    rel = _normalise_path(path)
    proc = run_git(
        [
            "--literal-pathspecs",
            "--git-dir",
            str(vault.git_dir),
            "ls-tree",
            "-z",
            "--full-tree",
            rev.id,
            "--",
            rel,
        ]
    )
    for entry in proc.stdout.split(b"\0"):
        meta, _, raw = entry.partition(b"\t")
        if os.fsdecode(raw) != rel:
            continue
        mode, kind, sha = meta.decode().split(" ")
        if kind == "tree":
            raise InputError(
                f"{rel} is a folder in revision {rev.id[:12]}; give a file, or "
                "promote the whole revision without --path"
            )
        if mode == MODE_LINK:
            raise InputError(
                f"{rel} is a symbolic link in revision {rev.id[:12]}; promote the file it points to"
            )
        if mode == MODE_GITLINK:
            raise InputError(f"{rel} is a submodule in revision {rev.id[:12]}, not a file")
        return TreeItem(mode, kind, sha, rel)
    raise NotFound(f"revision {rev.id[:12]} has no file {rel}")


# -- the artifact store ---------------------------------------------------------------------------


class _HashingWriter:
    def __init__(self, out: BinaryIO):
        self.out = out
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.out.write(data)
        self.digest.update(data)
        self.size += len(data)
        return len(data)


def _hash_file(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


class ArtifactStore:
    """Content-addressed files: `sha256/ab/cdef…` under the data folder's `artifacts/`. Files are
    written whole (temp file, fsync, rename), read-only, and re-hashed whenever they are read."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def path_for(self, sha256: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{64}", sha256 or ""):
            raise CorruptArtifact(f"{sha256!r} is not a sha256")
        return self.root / "sha256" / sha256[:2] / sha256[2:]

    def put(self, produce: Callable[[Any], None]) -> tuple[str, int]:
        """Store what `produce(writer)` writes; returns (sha256, size). Equal content is stored
        once; a stored copy that no longer hashes right is replaced by the new one."""
        tmp_dir = self.root / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix="incoming-", dir=tmp_dir)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as f:
                writer = _HashingWriter(f)
                produce(writer)
                f.flush()
                os.fsync(f.fileno())
            sha, size = writer.digest.hexdigest(), writer.size
            final = self.path_for(sha)
            final.parent.mkdir(parents=True, exist_ok=True)
            if final.exists() and _hash_file(final)[0] == sha:
                tmp.unlink()
            else:
                os.chmod(tmp, 0o444)
                os.replace(tmp, final)
                fsync_dir(final.parent)
            return sha, size
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def put_bytes(self, data: bytes) -> tuple[str, int]:
        return self.put(lambda w: w.write(data))

    def read(self, sha256: str, *, label: str) -> bytes:
        """The content, verified against its address; CorruptArtifact when it differs."""
        path = self.path_for(sha256)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise CorruptArtifact(f"{label} is missing from the artifact store ({path})") from None
        except OSError as exc:
            raise CorruptArtifact(f"{label} cannot be read from {path}: {exc.strerror}") from None
        found = hashlib.sha256(data).hexdigest()
        if found != sha256:
            raise _mismatch(label, path, found, sha256)
        return data

    def verify(self, sha256: str, *, label: str) -> int:
        """Re-hash the stored file without holding it in memory; its size."""
        path = self.path_for(sha256)
        try:
            found, size = _hash_file(path)
        except FileNotFoundError:
            raise CorruptArtifact(f"{label} is missing from the artifact store ({path})") from None
        if found != sha256:
            raise _mismatch(label, path, found, sha256)
        return size


def _mismatch(label: str, path: Path, found: str, recorded: str) -> CorruptArtifact:
    return CorruptArtifact(
        f"{label} is corrupt: {path} hashes to {found[:16]}…, not the recorded "
        f"{recorded[:16]}…; it was changed after it was promoted"
    )


# -- artifacts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Artifact:
    id: str
    task_id: str
    run_id: str | None
    revision_id: str | None
    path: str | None  # the file's path in the revision; None for a whole revision
    sha256: str
    provenance: dict
    created_at: float

    @property
    def kind(self) -> str:
        return self.provenance.get("kind", KIND_FILE)

    @property
    def size(self) -> int | None:
        return self.provenance.get("size")

    def to_json(self) -> dict:
        return {
            "artifact_id": self.id,
            "task_id": self.task_id,
            "run_id": self.run_id,
            "revision": self.revision_id,
            "path": self.path,
            "sha256": self.sha256,
            "kind": self.kind,
            "size": self.size,
            "created_at": self.created_at,
            "provenance": self.provenance,
        }


def _artifact(row: Any) -> Artifact:
    return Artifact(
        row["id"],
        row["task_id"],
        row["run_id"],
        row["revision_id"],
        row["path"],
        row["sha256"],
        json.loads(row["provenance"] or "{}"),
        row["created_at"],
    )


def get_artifact(ctx: Context, artifact_id: str) -> Artifact:
    condition, params = id_or_prefix("id", artifact_id)
    rows = (
        ctx.store.query(f"SELECT * FROM artifacts WHERE {condition} ORDER BY id LIMIT 2", params)
        if artifact_id
        else []
    )
    exact = [r for r in rows if r["id"] == artifact_id]
    if exact:
        return _artifact(exact[0])
    if len(rows) == 1 and artifact_id:
        return _artifact(rows[0])
    if rows:
        raise InputError(f"{artifact_id!r} names more than one artifact; give more of its id")
    raise NotFound(f"no artifact with id {artifact_id!r}")


def list_artifacts(ctx: Context, task_ids: list[str] | None = None) -> list[Artifact]:
    if task_ids is None:
        rows = ctx.store.query("SELECT * FROM artifacts ORDER BY created_at, id")
    else:
        marks = ",".join("?" * len(task_ids)) or "NULL"
        rows = ctx.store.query(
            f"SELECT * FROM artifacts WHERE task_id IN ({marks}) ORDER BY created_at, id",
            tuple(task_ids),
        )
    return [_artifact(r) for r in rows]


def run_of(ctx: Context, task: Task, rev: Revision) -> Run | None:
    """The run that produced the revision: the one it names, else the task's last run started
    before it was recorded."""
    if rev.run_id:
        try:
            return ctx.store.get_run(rev.run_id)
        except NotFound:
            pass
    earlier = [r for r in ctx.store.runs_of([task.id]) if r.created_at <= rev.created_at]
    return earlier[-1] if earlier else None


def provenance_of(ctx: Context, task: Task, rev: Revision, ws: Workspace) -> dict:
    run = run_of(ctx, task, rev)
    contract: dict = {}
    if run is not None:
        ck = ctx.store.latest_checkpoint([run.id])
        contract = dict(ck.tool_contract) if ck else {}
    engine = run.engine if run else task.engine
    tools = contract.get("tools") or {}
    return {
        "task_id": task.id,
        "task_title": task.title,
        "run_id": run.id if run else None,
        "revision": rev.id,
        "tree": rev.tree,
        "workspace_id": ws.id,
        "source_path": ctx.store.get_source(task.source_id).path,
        "engine": engine,
        "engine_version": tools.get(engine),
        "tool_contract": contract or None,
        "revision_created_at": rev.created_at,
    }


def write_tar(vault: Vault, items: list[TreeItem], out: Any) -> int:
    """The deterministic tar of a revision (see FORMAT_TAR); the number of submodules left out."""
    left_out = 0
    with tarfile.open(
        fileobj=out,
        mode="w|",
        format=tarfile.PAX_FORMAT,
        encoding="utf-8",
        errors="surrogateescape",
    ) as tar:
        for item in items:
            info = tarfile.TarInfo(item.path)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if item.kind == "tree":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif item.mode == MODE_LINK:
                info.type, info.mode = tarfile.SYMTYPE, 0o777
                info.linkname = os.fsdecode(vault.objects.read_blob(item.sha))
                tar.addfile(info)
            elif item.mode in (MODE_FILE, MODE_EXEC):
                data = vault.objects.read_blob(item.sha)
                info.mode, info.size = (0o755 if item.mode == MODE_EXEC else 0o644), len(data)
                tar.addfile(info, io.BytesIO(data))
            else:  # a submodule: a commit id, no content of this repository
                left_out += 1
    return left_out


def promote_artifact(
    ctx: Context,
    credentials: Lazy[Credentials],
    task: Task,
    rev: Revision,
    *,
    path: str | None = None,
    evidence: bytes | None = None,
    evidence_name: str | None = None,
) -> Artifact:
    """Freeze a file of the revision (or the whole revision) as an artifact: scanned first,
    stored content-addressed, recorded with its provenance and the caller's evidence."""
    ws = ctx.store.get_workspace(rev.workspace_id)
    vault = ctx.vault_for(ws.source_id)
    what = f"promoting {path or 'revision ' + rev.id[:12]} of task {task.id}"
    scanner, report = scanner_for(ctx, credentials, task, what)
    skip = committed_blobs(vault, head_at_import(vault, ws))
    items = [find_file(vault, rev, path)] if path else list_tree(vault, rev.id, with_trees=True)
    hits = scan_items(vault, items, scanner, report, skip)
    if evidence is not None:
        hits += scanner.scan(
            "the evidence" + (f" {evidence_name}" if evidence_name else ""), evidence
        )
    if hits:
        raise SecretFound(_sentence(what), hits)

    store = ArtifactStore(ctx.data.artifacts_root)
    provenance = provenance_of(ctx, task, rev, ws)
    if path:
        item = items[0]
        sha, size = store.put_bytes(vault.objects.read_blob(item.sha))
        provenance.update(
            kind=KIND_FILE,
            format=FORMAT_BLOB,
            path=item.path,
            blob=item.sha,
            executable=item.mode == MODE_EXEC,
        )
    else:
        left_out: list[int] = []
        sha, size = store.put(lambda out: left_out.append(write_tar(vault, items, out)))
        provenance.update(
            kind=KIND_REVISION,
            format=FORMAT_TAR,
            path=None,
            submodules_left_out=left_out[0] if left_out else 0,
        )
    provenance["size"] = size
    provenance["scan"] = report.to_dict()
    if evidence is not None:
        ev_sha, ev_size = store.put_bytes(evidence)
        provenance["evidence"] = {"sha256": ev_sha, "size": ev_size, "name": evidence_name}
    now = time.time()
    provenance["promoted_at"] = now
    art = Artifact(
        new_id("artifact"),
        task.id,
        provenance["run_id"],
        rev.id,
        provenance["path"],
        sha,
        provenance,
        now,
    )
    with ctx.store.transaction() as conn:
        conn.execute(
            "INSERT INTO artifacts (id, task_id, run_id, revision_id, path, sha256, "
            "provenance, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                art.id,
                art.task_id,
                art.run_id,
                art.revision_id,
                art.path,
                art.sha256,
                json.dumps(provenance, sort_keys=True),
                art.created_at,
            ),
        )
    return art


def read_artifact(ctx: Context, artifact_id: str) -> bytes:
    art = get_artifact(ctx, artifact_id)
    return ArtifactStore(ctx.data.artifacts_root).read(art.sha256, label=f"artifact {art.id}")


def read_evidence(ctx: Context, artifact_id: str) -> bytes | None:
    art = get_artifact(ctx, artifact_id)
    evidence = art.provenance.get("evidence")
    if not evidence:
        return None
    return ArtifactStore(ctx.data.artifacts_root).read(
        evidence["sha256"], label=f"the evidence of artifact {art.id}"
    )


def verify_artifact(ctx: Context, artifact_id: str) -> Artifact:
    art = get_artifact(ctx, artifact_id)
    store = ArtifactStore(ctx.data.artifacts_root)
    store.verify(art.sha256, label=f"artifact {art.id}")
    evidence = art.provenance.get("evidence")
    if evidence:
        store.verify(evidence["sha256"], label=f"the evidence of artifact {art.id}")
    return art


# -- the user's repository ------------------------------------------------------------------------


def _user_git(
    folder: Path, args: list[str], *, ok: tuple[int, ...] = (0,)
) -> subprocess.CompletedProcess:
    """A read-only git command in the user's repository (no optional locks, no fsmonitor)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    proc = subprocess.run(
        ["git", "-C", str(folder), "-c", "core.fsmonitor=false", *args],
        capture_output=True,
        env=env,
    )
    if proc.returncode not in ok:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        raise InputError(
            f"{folder} is a git repository that git cannot read: "
            f"{err[-1] if err else 'exit ' + str(proc.returncode)}"
        )
    return proc


def check_branch_name(name: str) -> str:
    if (
        not isinstance(name, str)
        or not name
        or name.startswith("-")
        or name == "HEAD"
        or name.startswith("refs/")
    ):
        raise InputError(f"{name!r} is not a usable branch name")
    proc = subprocess.run(
        ["git", "check-ref-format", f"refs/heads/{name}"], capture_output=True, env=git_env()
    )
    if proc.returncode != 0:
        raise InputError(f"{name!r} is not a valid git branch name")
    return name


def user_repository(ctx: Context, task: Task) -> Path:
    """The task's source folder, when it is (still) the top of a git repository."""
    source = ctx.store.get_source(task.source_id)
    folder = Path(source.path)
    if source.kind != "git" or not os.path.lexists(folder / ".git"):
        raise InputError(
            f"{folder} is a plain folder, not a git repository: there is no branch "
            "to promote to; promote an artifact or export a patch instead"
        )
    top = _user_git(folder, ["rev-parse", "--show-toplevel"]).stdout.decode().strip()
    if not top or Path(top).resolve() != folder.resolve():
        raise InputError(f"{folder} is no longer the top of a git repository")
    return folder


@dataclass(frozen=True)
class PromotedBranch:
    repository: str
    branch: str
    commit: str
    tree: str
    parent: str | None
    task_id: str
    revision: str
    scan: dict

    def to_json(self) -> dict:
        return {
            "repository": self.repository,
            "branch": self.branch,
            "commit": self.commit,
            "tree": self.tree,
            "parent": self.parent,
            "task_id": self.task_id,
            "revision": self.revision,
            "scan": self.scan,
        }


# The receiving side runs in the user's repository: no hooks of theirs, no automatic gc there.
_RECEIVE_PACK = "git -c receive.autogc=false -c core.hooksPath=/dev/null receive-pack"


def promote_branch(
    ctx: Context, credentials: Lazy[Credentials], task: Task, rev: Revision, branch: str
) -> PromotedBranch:
    """Create `refs/heads/<branch>` in the user's repository: a commit whose parent is the user's
    HEAD at import and whose tree is the revision's. The only write Cairn makes there: objects
    and that one ref, pushed from the vault; HEAD, the index, the work tree and the config are
    not touched. Refused when the branch exists, the source is no git repository, or the scan
    finds a secret."""
    check_branch_name(branch)
    ws = ctx.store.get_workspace(rev.workspace_id)
    folder = user_repository(ctx, task)
    ref = f"refs/heads/{branch}"
    existing = _user_git(folder, ["rev-parse", "--verify", "--quiet", ref], ok=(0, 1))
    if existing.returncode == 0:
        raise Conflict(f"the branch {branch} already exists in {folder}; choose another name")
    # A ref cannot also be a folder of refs: refuse before any object is sent.
    parts = branch.split("/")
    for n in range(1, len(parts)):
        prefix = "/".join(parts[:n])
        if (
            _user_git(
                folder, ["rev-parse", "--verify", "--quiet", f"refs/heads/{prefix}"], ok=(0, 1)
            ).returncode
            == 0
        ):
            raise Conflict(
                f"the branch {prefix} exists in {folder}, so {branch} cannot be "
                "created beside it; choose another name"
            )
    below = _user_git(folder, ["for-each-ref", "--count=1", "--format=%(refname)", f"{ref}/"])
    if below.stdout.strip():
        raise Conflict(
            f"branches named {branch}/... exist in {folder}, so {branch} cannot be "
            "created; choose another name"
        )
    current = _user_git(folder, ["symbolic-ref", "--quiet", "HEAD"], ok=(0, 1))
    if current.stdout.decode().strip() == ref:
        raise Conflict(
            f"{branch} is the branch checked out in {folder} (not born yet); choose another name"
        )

    vault = ctx.vault_for(ws.source_id)
    what = f"promoting revision {rev.id[:12]} of task {task.id} to the branch {branch}"
    scanner, report = scanner_for(ctx, credentials, task, what)
    parent = head_at_import(vault, ws)
    hits = scan_items(
        vault, list_tree(vault, rev.id), scanner, report, committed_blobs(vault, parent)
    )
    if hits:
        raise SecretFound(_sentence(what), hits)

    run = run_of(ctx, task, rev)
    message = (
        f"{task.title}\n\n"
        f"Promoted by Cairn from task {task.id}, revision {rev.id}.\n\n"
        f"Cairn-Task: {task.id}\n"
        f"Cairn-Revision: {rev.id}\n"
        f"Cairn-Run: {run.id if run else '-'}\n"
    )
    commit = vault.objects.write_commit(rev.tree, [parent] if parent else [], message)
    proc = run_git(
        [
            "--git-dir",
            str(vault.git_dir),
            "-c",
            "maintenance.auto=false",
            "push",
            "--no-verify",
            "--porcelain",
            "--no-recurse-submodules",
            "--no-signed",
            f"--receive-pack={_RECEIVE_PACK}",
            f"--force-with-lease={ref}:",
            str(folder),
            f"{commit}:{ref}",
        ],
        check=False,
    )
    # --porcelain: one "<flag>\t<from>:<to>\t<summary>" line per ref; "*" is a new ref.
    lines = [ln.split("\t") for ln in proc.stdout.decode(errors="replace").splitlines()]
    mine = [ln for ln in lines if len(ln) >= 3 and ln[1] == f"{commit}:{ref}"]
    if proc.returncode != 0 or [ln[0] for ln in mine] != ["*"]:
        summary = mine[0][2] if mine else ""
        if "stale info" in summary or (mine and mine[0][0] == "="):
            raise Conflict(f"the branch {branch} already exists in {folder}; choose another name")
        errors = [
            ln
            for ln in proc.stderr.decode(errors="replace").strip().splitlines()
            if ln.startswith(("error:", "fatal:", "remote: error:"))
        ]
        reason = summary or (errors[-1] if errors else f"git push exited {proc.returncode}")
        raise CairnError(f"could not create the branch {branch} in {folder}: {reason}")
    made = _user_git(folder, ["rev-parse", "--verify", f"{ref}^{{tree}}"]).stdout.decode().strip()
    if made != rev.tree:  # pragma: no cover - git would have to lie
        raise CairnError(
            f"the branch {branch} in {folder} does not hold revision {rev.id[:12]}'s "
            f"files (tree {made[:12]}, expected {rev.tree[:12]})"
        )
    return PromotedBranch(
        str(folder), branch, commit, rev.tree, parent, task.id, rev.id, report.to_dict()
    )


# -- patches --------------------------------------------------------------------------------------

SINCE_BASE = "base"
SINCE_HEAD = "head"


def export_patch(
    ctx: Context,
    credentials: Lazy[Credentials],
    task: Task,
    rev: Revision,
    *,
    since: str = SINCE_BASE,
) -> bytes:
    """The changes from the lineage's import to the revision as a `git format-patch`-style mail
    (`git apply` and `git am` take it; binary files included).

    `since="base"` (the default) starts from the base: the folder as it was imported, the user's
    uncommitted and untracked files included, so the patch applies to the work tree as it was at
    import. `since="head"` starts from the user's HEAD at import, so the uncommitted changes
    travel in the patch and it applies to a clean checkout of that commit. Empty when nothing
    changed. Scanned like every promotion: a hit refuses the export."""
    ws = ctx.store.get_workspace(rev.workspace_id)
    vault = ctx.vault_for(ws.source_id)
    head = head_at_import(vault, ws)
    if since == SINCE_BASE:
        old = import_base(vault, ws)
    elif since == SINCE_HEAD:
        if head is None:
            raise InputError(
                f"task {task.id} grew from a folder with no git HEAD; export from the base instead"
            )
        old = head
    else:
        raise InputError(f"export from {since!r}? use {SINCE_BASE} or {SINCE_HEAD}")
    what = f"exporting revision {rev.id[:12]} of task {task.id} as a patch"
    scanner, report = scanner_for(ctx, credentials, task, what)
    changed = _changed_items(vault, old, rev.id)
    hits = scan_items(vault, changed, scanner, report, committed_blobs(vault, head))
    if hits:
        raise SecretFound(_sentence(what), hits)
    if vault.tree_of(old) == rev.tree:
        return b""
    body = run_git(
        [
            "--git-dir",
            str(vault.git_dir),
            "diff-tree",
            "-p",
            "--stat=72",
            "--summary",
            "--binary",
            "--full-index",
            "-M",
            "--no-color",
            old,
            rev.id,
        ]
    ).stdout
    subject = f"[PATCH] {task.title}"
    if not subject.isascii():
        subject = Header(subject, "utf-8").encode()
    start = "the folder as imported" if since == SINCE_BASE else f"the user's HEAD {old[:12]}"
    header = (
        f"From {rev.id} Mon Sep 17 00:00:00 2001\n"
        f"From: Cairn <cairn@localhost>\n"
        f"Date: {email.utils.formatdate(rev.created_at, localtime=False)}\n"
        f"Subject: {subject}\n\n"
        f"Task {task.id}, revision {rev.id}, from {start} ({old[:12]}).\n"
        f"---\n"
    )
    return header.encode() + body


def _changed_items(vault: Vault, old: str, new: str) -> list[TreeItem]:
    """The files of `new` that are added or changed since `old` (what a patch carries)."""
    out = run_git(
        [
            "--git-dir",
            str(vault.git_dir),
            "diff-tree",
            "-r",
            "-z",
            "--no-renames",
            "--diff-filter=AMT",
            old,
            new,
        ]
    ).stdout
    fields = out.split(b"\0")
    items = []
    for i in range(0, len(fields) - 1, 2):
        meta = fields[i].decode()
        if not meta.startswith(":"):
            continue
        _old_mode, new_mode, _old_sha, new_sha, _status = meta[1:].split(" ")
        if new_mode in (MODE_FILE, MODE_EXEC, MODE_LINK):
            items.append(TreeItem(new_mode, "blob", new_sha, os.fsdecode(fields[i + 1])))
    return items


class Artifacts:
    """Results leaving a sandbox: an artifact, a branch in the user's repository (the one write
    Cairn makes there), or a patch. Each is scanned for the lineage's secrets first."""

    def __init__(self, ctx: Context, *, revisions: Revisions, credentials: Lazy[Credentials]):
        self.ctx = ctx
        self.revisions = revisions
        self._credentials = credentials

    def promote(
        self,
        task_ref: str,
        *,
        revision: str | None = None,
        path: str | None = None,
        evidence: bytes | None = None,
        evidence_name: str | None = None,
    ) -> Artifact:
        """Freeze a file of a revision (default: the latest), or the whole revision as a
        deterministic tar, as a content-addressed artifact with provenance and evidence."""
        task = self.ctx.task(task_ref)
        rev = self.revisions.resolve(task, revision)
        art = promote_artifact(
            self.ctx,
            self._credentials,
            task,
            rev,
            path=path,
            evidence=evidence,
            evidence_name=evidence_name,
        )
        self.ctx.events.publish(
            ev.ARTIFACT_PROMOTED,
            task.id,
            artifact=art.id,
            revision=rev.id,
            path=art.path,
            sha256=art.sha256,
        )
        return art

    def promote_to_branch(
        self, task_ref: str, branch: str, *, revision: str | None = None
    ) -> PromotedBranch:
        """Create the branch `branch` in the user's own repository holding a revision's files."""
        task = self.ctx.task(task_ref)
        rev = self.revisions.resolve(task, revision)
        with held(
            self.ctx.data.locks_root,
            "promote",
            task.source_id,
            "another promotion into this repository is in progress",
        ):
            made = promote_branch(self.ctx, self._credentials, task, rev, branch)
        self.ctx.events.publish(
            ev.BRANCH_PROMOTED,
            task.id,
            branch=branch,
            commit=made.commit,
            revision=rev.id,
            repository=made.repository,
        )
        return made

    def export_patch(
        self, task_ref: str, *, revision: str | None = None, since: str = SINCE_BASE
    ) -> bytes:
        """The changes from the import (`base`, or the user's `head`) to a revision, as a patch."""
        task = self.ctx.task(task_ref)
        rev = self.revisions.resolve(task, revision)
        return export_patch(self.ctx, self._credentials, task, rev, since=since)

    def all(self, task_ref: str | None = None) -> list[Artifact]:
        ids = None if task_ref is None else [self.ctx.task(task_ref).id]
        return list_artifacts(self.ctx, ids)

    def get(self, artifact_id: str) -> Artifact:
        return get_artifact(self.ctx, artifact_id)

    def read(self, artifact_id: str) -> bytes:
        """The artifact's content, re-hashed now; CorruptArtifact when it is not what was stored."""
        return read_artifact(self.ctx, artifact_id)

    def read_evidence(self, artifact_id: str) -> bytes | None:
        """The evidence stored with the artifact, re-hashed now; None when it has none."""
        return read_evidence(self.ctx, artifact_id)

    def verify(self, artifact_id: str) -> Artifact:
        return verify_artifact(self.ctx, artifact_id)
