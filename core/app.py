"""The facade: the one object the GUI and `cairnctl` hold to reach everything in core.

Owns building the services of one data folder in dependency order and handing them out as typed
attributes (`cairn.tasks`, `cairn.runs`, `cairn.revisions`, …), in the manner of a collection
with its managers; each service owns its own work. Nothing under core/ imports this module: only
the adapters (the CLI, the GUI, helper processes' entry points) do.
"""

from __future__ import annotations

from pathlib import Path

from core import health, signin
from core.approvals import Judge
from core.artifacts import Artifacts
from core.context import Context, Lazy
from core.credentials import Credentials, SecretStore
from core.datadir import DataDir
from core.errors import CairnError
from core.events import EventBus
from core.health import Check
from core.hosts import Hosts
from core.housekeeping import Housekeeping
from core.restore import Restores
from core.revisions import Revisions
from core.runs.checkpoints import Checkpoints
from core.runs.ladder import Ladder
from core.runs.service import Runs
from core.sandbox.base import SandboxBackend
from core.sandboxes import SandboxManager, sandbox_provider
from core.settings import Settings
from core.signin import EngineStatus
from core.snapshots import Snapshots
from core.tasks import Tasks
from core.views import Views


class Cairn:
    """Cairn's domain for one data folder. Thread-safe; long operations block the caller."""

    def __init__(
        self,
        data_dir: str | Path | None = None,
        *,
        backend: SandboxBackend | None = None,
        image: str | None = None,
        secrets: SecretStore | None = None,
        captures_in_child: bool = False,
    ):
        """`backend`, `image` and `secrets` replace what the settings and the environment would
        choose (tests, benchmarks). `captures_in_child`: one-off captures of a workspace this
        process does not watch, and imports of a folder, run in a child process (the desktop
        app; see core.revisions and core.tasks)."""
        self.ctx = Context(DataDir.resolve(data_dir))
        self.data: DataDir = self.ctx.data
        self.events: EventBus = self.ctx.events
        ctx = self.ctx

        self.settings = Settings(ctx.data.root)
        self._sandboxes = sandbox_provider(ctx, self.settings, backend=backend, image=image)
        self.settings.on_sandbox_change(self._sandboxes.reset)
        self._credentials: Lazy[Credentials] = Lazy(
            lambda: Credentials(ctx.store, secrets or SecretStore())
        )

        self.revisions = Revisions(ctx, captures_in_child=captures_in_child)
        self.snapshots = Snapshots(ctx, self.revisions)
        self.restores = Restores(ctx, revisions=self.revisions)
        checkpoints = Checkpoints(ctx, self.revisions, self.snapshots)
        self.approvals = Judge(
            ctx, checkpoints=checkpoints, credentials=self._credentials, sandboxes=self._sandboxes
        )
        self.runs = Runs(
            ctx,
            revisions=self.revisions,
            checkpoints=checkpoints,
            ladder=Ladder(
                ctx,
                revisions=self.revisions,
                snapshots=self.snapshots,
                checkpoints=checkpoints,
                settings=self.settings,
                sandboxes=self._sandboxes,
                credentials=self._credentials,
            ),
            approvals=self.approvals,
            sandboxes=self._sandboxes,
            credentials=self._credentials,
        )
        self.tasks = Tasks(
            ctx,
            settings=self.settings,
            revisions=self.revisions,
            snapshots=self.snapshots,
            runs=self.runs,
            imports_in_child=captures_in_child,
        )
        self.artifacts = Artifacts(ctx, revisions=self.revisions, credentials=self._credentials)
        self.housekeeping = Housekeeping(
            ctx, revisions=self.revisions, snapshots=self.snapshots, sandboxes=self._sandboxes
        )
        self.views = Views(ctx, revisions=self.revisions, sandboxes=self._sandboxes)
        self.hosts = Hosts(ctx, settings=self.settings, image=image)

    # -- services made on first use (so commands that need no Docker or keyring never touch them)

    @property
    def sandboxes(self) -> SandboxManager:
        """The sandbox manager of the current backend and image (made on first use)."""
        return self._sandboxes.get()

    @property
    def credentials(self) -> Credentials:
        """Keyring secrets and their grants (made on first use)."""
        return self._credentials.get()

    def reset_sandboxes(self) -> None:
        """Forget the sandbox manager, so the next use makes a new one from the current settings
        (backend and image); sessions and containers are not touched."""
        self._sandboxes.reset()

    def engine_status(self, engine: str) -> EngineStatus:
        """An agent engine as its first run would find it: binary, version, sign-in, endpoint,
        and each problem with its fix. Reads the keyring: call it off the GUI thread."""
        return signin.status(self.credentials, engine, self.settings)

    def health_checks(self) -> list[Check]:
        """The first-run checks (Docker, or the default sandbox host when it is another one;
        keyring, git, disk of the data folder, each agent engine); never raises, bounded to a
        few seconds."""
        try:
            host = self.hosts.default()
        except CairnError as exc:  # a host setting that cannot be used: said as the host's check
            problem = health.Check("host", "Sandbox host", health.ERROR, str(exc))
            return [problem, *health.run_checks(self.data.root, engine_status=self.engine_status)]
        return health.run_checks(
            self.data.root, engine_status=self.engine_status, host=host, image=self.hosts.image()
        )

    def close(self) -> None:
        self.revisions.close()
        self.ctx.close()

    def __enter__(self) -> Cairn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
