"""Sandbox reattach and create-to-ready against bare Docker, measured in the same run.

    .venv/bin/python tests/perf/bench_sandbox.py [--runs 10] [--image cairn-sandbox:1]
    pytest tests/perf -s

Targets: reattaching to a live sandbox (a new backend object, as after an app restart) within 2x a
bare `docker exec <c> true` round trip; creating a hardened sandbox until it is ready within 1.5x a
bare `docker run -d` of the same image. The ratios are printed, not asserted: timings vary by machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.sandbox.base import DEFAULT_IMAGE, Attached, SandboxSpec  # noqa: E402
from core.sandbox.docker import DockerBackend  # noqa: E402

REATTACH_TARGET = 2.0
CREATE_TARGET = 1.5
BENCH_LABEL = "test.cairn.suite=sandbox-bench"


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _spec(root: Path, image: str) -> SandboxSpec:
    workspace = root / "workspace"
    workspace.mkdir(exist_ok=True)
    return SandboxSpec(
        workspace_id="ws_bench",
        session_id=f"ses_bench{uuid.uuid4().hex[:10]}",
        snapshot_id="snap_bench",
        workspace_root=workspace,
        home_dir=root / "home",
        runs_dir=root / "runs",
        image=image,
        labels={"test.cairn.suite": "sandbox-bench"},
    )


def _docker(*args: str) -> str:
    return subprocess.run(
        ["docker", *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _cleanup() -> None:
    ids = _docker("ps", "-aq", "--filter", f"label={BENCH_LABEL}").split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)


def bench_reattach(root: Path, image: str, runs: int) -> tuple[float, float, float]:
    """Medians of: a new backend attaching to a live sandbox; that plus one exec; `docker exec true`."""
    data = root / "data"
    backend = DockerBackend(data)
    spec = _spec(root, image)
    state, live = backend.create(spec)
    try:
        attach_times, attach_exec_times, bare_times = [], [], []
        for _ in range(runs + 1):  # the first round warms caches and is dropped
            fresh = DockerBackend(data)

            def reattach(fresh=fresh) -> None:
                result = fresh.attach(state, spec)
                assert isinstance(result, Attached), result

            attach_times.append(_timed(reattach))
            fresh.close()
            fresh = DockerBackend(data)

            def reattach_and_exec(fresh=fresh) -> None:
                result = fresh.attach(state, spec)
                assert isinstance(result, Attached), result
                assert result.live.exec(["true"]).ok

            attach_exec_times.append(_timed(reattach_and_exec))
            fresh.close()
            bare_times.append(_timed(lambda: _docker("exec", state.container_id, "true")))
        return (
            statistics.median(attach_times[1:]),
            statistics.median(attach_exec_times[1:]),
            statistics.median(bare_times[1:]),
        )
    finally:
        live.destroy()
        backend.close()


def bench_create(root: Path, image: str, runs: int) -> tuple[float, float]:
    """Medians of: backend.create until the sandbox is up; `docker run -d IMAGE sleep infinity`."""
    backend = DockerBackend(root / "data")
    backend.check()  # connected once, as in the app
    image_id = backend.resolve_image(image)["Id"]
    ours, bare = [], []
    try:
        for _ in range(runs + 1):
            spec = _spec(root, image)
            made: list = []
            ours.append(_timed(lambda spec=spec, made=made: made.append(backend.create(spec))))
            made[0][1].destroy()
            name = f"cairn-bench-bare-{uuid.uuid4().hex[:8]}"
            bare.append(
                _timed(
                    lambda name=name: _docker(
                        "run",
                        "-d",
                        "--name",
                        name,
                        "--label",
                        BENCH_LABEL,
                        image_id,
                        "sleep",
                        "infinity",
                    )
                )
            )
            _docker("rm", "-f", name)
        return statistics.median(ours[1:]), statistics.median(bare[1:])
    finally:
        backend.close()


def run(runs: int = 10, image: str = DEFAULT_IMAGE) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="cairn-bench-sandbox-") as tmp:
        root = Path(tmp)
        try:
            attach, attach_exec, bare_exec = bench_reattach(root, image, runs)
            create, bare_run = bench_create(root, image, max(3, runs // 2))
        finally:
            _cleanup()
    figures = {
        "reattach_s": attach,
        "reattach_and_exec_s": attach_exec,
        "docker_exec_true_s": bare_exec,
        "reattach_ratio": attach / bare_exec,
        "reattach_and_exec_ratio": attach_exec / bare_exec,
        "create_s": create,
        "docker_run_d_s": bare_run,
        "create_ratio": create / bare_run,
    }

    def verdict(ratio: float, target: float) -> str:
        return f"{'within' if ratio <= target else 'OVER'} the {target}x target"

    print(f"\nsandbox benchmark ({image}, median of {runs} runs):", flush=True)
    print(f"  reattach (new backend + attach)    {attach * 1000:7.1f} ms", flush=True)
    print(f"  reattach + one exec                {attach_exec * 1000:7.1f} ms", flush=True)
    print(f"  docker exec <c> true               {bare_exec * 1000:7.1f} ms", flush=True)
    ratio = figures["reattach_ratio"]
    print(
        f"  reattach ratio        {ratio:.2f}x ({verdict(ratio, REATTACH_TARGET)});"
        f" with an exec {figures['reattach_and_exec_ratio']:.2f}x",
        flush=True,
    )
    print(f"  create to ready                    {create * 1000:7.1f} ms", flush=True)
    print(f"  docker run -d                      {bare_run * 1000:7.1f} ms", flush=True)
    print(
        f"  create ratio          {figures['create_ratio']:.2f}x ({verdict(figures['create_ratio'], CREATE_TARGET)})",
        flush=True,
    )
    return figures


def test_sandbox_reattach_and_create_against_bare_docker(docker_client):
    import docker.errors

    try:
        docker_client.images.get(DEFAULT_IMAGE)
    except docker.errors.ImageNotFound:
        import pytest

        pytest.skip(f"{DEFAULT_IMAGE} is not built (tests/images/build.sh builds it)")
    run(runs=7)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--image", default=DEFAULT_IMAGE)
    args = parser.parse_args()
    run(args.runs, args.image)


if __name__ == "__main__":
    main()
