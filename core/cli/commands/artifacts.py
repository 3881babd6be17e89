"""Taking work out of the sandbox: promoting a revision to a branch or an artifact, exporting a
patch, and listing (and verifying) artifacts.

Owns these commands' arguments and output; scanning, storing and verifying are the facade's.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from core.app import Cairn
from core.cli.command import Command
from core.cli.output import emit, size, when
from core.errors import CairnError


class PromoteCommand(Command):
    name = "promote"
    help = (
        "take a revision out of the sandbox: as a new branch in your repository "
        "(--branch) or as an artifact (--artifact); scanned for secrets first"
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")
        p.add_argument("--revision", help="revision id, base, latest (default) or TASK:REV")
        g = p.add_mutually_exclusive_group(required=True)
        g.add_argument("--branch", help="create this branch in the task's source repository")
        g.add_argument(
            "--artifact",
            action="store_true",
            help="store a file (--path) or the whole revision as a content-addressed artifact",
        )
        p.add_argument("--path", help="with --artifact: one file of the revision")
        p.add_argument(
            "--evidence",
            help="with --artifact: a file (or - for stdin) kept with the "
            "artifact as validation evidence, e.g. test output",
        )

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        if args.branch is not None:
            if args.path or args.evidence:
                raise CairnError("--path and --evidence go with --artifact, not --branch")
            made = app.artifacts.promote_to_branch(args.task, args.branch, revision=args.revision)
            emit(
                args,
                made.to_json(),
                f"branch {made.branch} created in {made.repository} "
                f"at {made.commit} (revision {made.revision[:12]})",
            )
            return
        evidence, name = _read_evidence(args.evidence) if args.evidence else (None, None)
        art = app.artifacts.promote(
            args.task,
            revision=args.revision,
            path=args.path,
            evidence=evidence,
            evidence_name=name,
        )
        emit(
            args,
            art.to_json(),
            f"artifact {art.id}  {art.kind}  sha256 {art.sha256}"
            + (f"  {art.path}" if art.path else ""),
        )


def _read_evidence(path: str) -> tuple[bytes, str]:
    """The evidence's bytes and the name it is kept under (`-`: stdin)."""
    name = "stdin" if path == "-" else os.path.basename(path)
    try:
        if path == "-":
            return sys.stdin.buffer.read(), name
        with open(path, "rb") as f:
            return f.read(), name
    except OSError as exc:
        raise CairnError(f"cannot read the evidence file {path}: {exc.strerror}") from None


class ExportCommand(Command):
    name = "export"
    help = "print the task's changes since the import as a patch (git apply / git am)"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")
        p.add_argument("--revision", help="revision id, base, latest (default) or TASK:REV")
        p.add_argument(
            "--from",
            dest="since",
            choices=["base", "head"],
            default="base",
            help="base (default): the folder as imported, uncommitted files included; "
            "head: the repository's HEAD at import",
        )

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        patch = app.artifacts.export_patch(args.task, revision=args.revision, since=args.since)
        if args.json:
            emit(
                args,
                {
                    "task_id": app.tasks.get(args.task).id,
                    "from": args.since,
                    "patch": patch.decode("utf-8", "replace"),
                },
                "",
            )
            return
        sys.stdout.flush()
        sys.stdout.buffer.write(patch)
        sys.stdout.buffer.flush()


class ArtifactsCommand(Command):
    name = "artifacts"
    help = "list promoted artifacts"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task", nargs="?")
        p.add_argument("--verify", action="store_true", help="re-hash every listed artifact")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        rows: list[dict[str, Any]] = []
        for art in app.artifacts.all(args.task):
            row = art.to_json()
            if args.verify:
                try:
                    app.artifacts.verify(art.id)
                    row["verified"] = True
                except CairnError as exc:
                    row["verified"], row["problem"] = False, str(exc)
            rows.append(row)

        def text() -> str:
            lines = []
            for r in rows:
                check = "" if "verified" not in r else ("  ok" if r["verified"] else "  CORRUPT")
                lines.append(
                    f"{r['artifact_id']}  {when(r['created_at'])}  {r['kind']:8}  "
                    f"{r['sha256'][:16]}  {size(r['size']):>10}  {r['task_id']}  "
                    f"{r['path'] or (r['revision'] or '')[:12]}{check}"
                )
            return "\n".join(lines) or "no artifacts"

        emit(args, {"artifacts": rows}, text)
        if any(r.get("verified") is False for r in rows):
            raise CairnError(next(r["problem"] for r in rows if r.get("verified") is False))


COMMANDS: tuple[Command, ...] = (PromoteCommand(), ExportCommand(), ArtifactsCommand())
