#!/usr/bin/env bash
# The sandbox suite (the resume ladder, drift, ownership, credentials) against rootless Podman,
# as a user who is not root: Cairn's Podman backend through that user's `podman system service`.
#
#   scripts/podman-suite.sh [pytest args]
#
# As root (CI): installs podman, uidmap and catatonit, makes the user $CAIRN_PODMAN_USER
# (cairn-podman) with subordinate uid and gid ranges, sends it the test images from the local
# Docker engine (docker save | podman load: nothing is pulled), starts its Podman service and runs
# the suite as that user. As another user: the same with that user's own Podman, which must
# already have subordinate ranges. Called by `scripts/setup.sh test` after the whole suite.
set -euo pipefail

# shellcheck source=scripts/setup.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/setup.sh"

PODMAN_APT_PACKAGES=(podman uidmap catatonit)
PODMAN_USER="${CAIRN_PODMAN_USER:-cairn-podman}"
PODMAN_ARTIFACTS="$ARTIFACTS/podman"
PODMAN_SERVICE_WAIT_S=30
# The sandbox suite: the resume ladder and the engine's states (test_runs_resume,
# test_docker_states), drift and ownership at the backend (test_sandbox_docker: mismatches,
# the sandbox user, who owns what lands on the host), credentials (the canary, rotation and
# revocation in test_runs_resume), and sessions, reconcile and events.
PODMAN_SUITE=(
    tests/integration/test_runs_resume.py
    tests/integration/test_docker_states.py
    tests/integration/test_sandbox_docker.py
    tests/integration/test_sandbox_sessions.py
    tests/integration/test_sandbox_events.py
)
# What the suite runs on: the default sandbox image and the busybox one (tests/images/build.sh).
podman_images() {
    local version
    version="$(sed -n 's/^RECIPE_VERSION=//p' resources/sandbox/build-image.sh)"
    printf '%s\n' "cairn-sandbox:$version" cairn-test-busybox:1 cairn-test-nogit:1
}

PODMAN_SERVICE_PID=""

# A process and everything below it, the deepest first: rootless podman runs the service in a
# second process of its own (inside its user namespace), which outlives a TERM to the first.
kill_tree() {
    local child
    for child in $(pgrep -P "$1" || true); do
        kill_tree "$child"
    done
    kill "$1" 2>/dev/null || true
}

stop_podman_service() {
    if [ -n "$PODMAN_SERVICE_PID" ] && kill -0 "$PODMAN_SERVICE_PID" 2>/dev/null; then
        kill_tree "$PODMAN_SERVICE_PID"
        wait "$PODMAN_SERVICE_PID" 2>/dev/null || true
    fi
    PODMAN_SERVICE_PID=""
}

# Runs a command as the suite's user, with that user's environment for Podman.
as_podman_user() {
    local uid home
    uid="$(id -u "$PODMAN_USER")"
    home="$(getent passwd "$PODMAN_USER" | cut -d: -f6)"
    local env_vars=(
        "HOME=$home" "USER=$PODMAN_USER" "LOGNAME=$PODMAN_USER"
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        "XDG_RUNTIME_DIR=/run/user/$uid" "LANG=C.UTF-8"
    )
    if is_root; then
        runuser -u "$PODMAN_USER" -- env -i "${env_vars[@]}" "$@"
    else
        env "XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/run/user/$uid}" "$@"
    fi
}

# The user, its subordinate id ranges (rootless Podman's user namespace), its runtime folder
# and storage on overlay (the vfs fallback copies whole images per container: slow).
prepare_podman_user() {
    if ! is_root; then
        PODMAN_USER="$(id -un)"
        mkdir -p "$PODMAN_ARTIFACTS"
        grep -q "^$PODMAN_USER:" /etc/subuid \
            || die "user $PODMAN_USER has no range in /etc/subuid: rootless Podman needs one" \
                "(sudo usermod --add-subuids 100000-165535 --add-subgids 100000-165535 $PODMAN_USER)"
        return
    fi
    if ! id "$PODMAN_USER" >/dev/null 2>&1; then
        log "podman: making the user $PODMAN_USER"
        useradd --create-home --shell /bin/sh "$PODMAN_USER"
    fi
    local file start
    for file in /etc/subuid /etc/subgid; do
        touch "$file"
        if ! grep -q "^$PODMAN_USER:" "$file"; then
            # After every range already given out, so no two users share ids.
            start="$(awk -F: 'BEGIN { end = 100000 } { if ($2 + $3 > end) end = $2 + $3 } END { print end }' "$file")"
            printf '%s:%s:65536\n' "$PODMAN_USER" "$start" >>"$file"
        fi
    done
    local uid home
    uid="$(id -u "$PODMAN_USER")"
    home="$(getent passwd "$PODMAN_USER" | cut -d: -f6)"
    install -d -m 0700 -o "$PODMAN_USER" -g "$PODMAN_USER" "/run/user/$uid"
    if [ ! -f "$home/.config/containers/storage.conf" ]; then
        as_podman_user mkdir -p "$home/.config/containers"
        printf '[storage]\ndriver = "overlay"\n' | as_podman_user tee "$home/.config/containers/storage.conf" >/dev/null
        if ! as_podman_user podman info >/dev/null 2>&1; then
            warn "podman: overlay storage does not work for $PODMAN_USER here; using Podman's default"
            rm -f "$home/.config/containers/storage.conf"
        fi
    fi
    install -d -m 0755 -o "$PODMAN_USER" -g "$PODMAN_USER" "$PODMAN_ARTIFACTS"
    # The checkout is root's: the user reads it (and the virtualenv) and writes only its own
    # folders. A parent folder closed to others (such as /root) gets only the right to pass.
    local dir="$REPO_ROOT"
    while [ "$dir" != / ]; do
        if ! as_podman_user test -x "$dir"; then
            warn "podman: letting other users pass through $dir (chmod o+x) to reach the checkout"
            chmod o+x "$dir"
        fi
        dir="$(dirname "$dir")"
    done
    as_podman_user test -r "$REPO_ROOT/pyproject.toml" -a -x "$VENV/bin/python" \
        || die "user $PODMAN_USER cannot read the checkout $REPO_ROOT or run $VENV/bin/python"
}

start_podman_service() {
    local uid sock waited=0
    uid="$(id -u "$PODMAN_USER")"
    sock="/run/user/$uid/podman/podman.sock"
    if as_podman_user test -S "$sock" && as_podman_user podman --remote --url "unix://$sock" version >/dev/null 2>&1; then
        log "podman: the service of $PODMAN_USER already answers at $sock"
        PODMAN_SOCKET="$sock"
        return
    fi
    as_podman_user mkdir -p "/run/user/$uid/podman"
    log "podman: starting the service of $PODMAN_USER at $sock"
    # Not through a shell function: $! must be the service's own process (or runuser's, which
    # passes a TERM on to it), so that it can be stopped at the end.
    if is_root; then
        runuser -u "$PODMAN_USER" -- env -i "HOME=$(getent passwd "$PODMAN_USER" | cut -d: -f6)" \
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
            "XDG_RUNTIME_DIR=/run/user/$uid" podman system service --time=0 "unix://$sock" \
            >"$PODMAN_ARTIFACTS/service.log" 2>&1 </dev/null &
    else
        podman system service --time=0 "unix://$sock" \
            >"$PODMAN_ARTIFACTS/service.log" 2>&1 </dev/null &
    fi
    PODMAN_SERVICE_PID=$!
    while ! as_podman_user podman --remote --url "unix://$sock" version >/dev/null 2>&1; do
        [ "$waited" -lt "$PODMAN_SERVICE_WAIT_S" ] || die "the Podman service did not answer within ${PODMAN_SERVICE_WAIT_S}s (see $PODMAN_ARTIFACTS/service.log)"
        kill -0 "$PODMAN_SERVICE_PID" 2>/dev/null || die "the Podman service exited (see $PODMAN_ARTIFACTS/service.log)"
        sleep 0.5
        waited=$((waited + 1))
    done
    PODMAN_SOCKET="$sock"
}

# Each test image, sent from the local Docker engine unless Podman has the same one (same id).
# The sandbox image less git (a changed tool contract) is made on Docker first: Podman 4.3's
# Docker-compatible commit fails for a rootless user.
send_podman_images() {
    local image docker_id podman_id sandbox maker
    sandbox="$(podman_images | head -n 1)"
    if ! docker image inspect cairn-test-nogit:1 >/dev/null 2>&1; then
        maker="$(docker run -d --network none --user 0 "$sandbox" rm -f /usr/bin/git)"
        docker wait "$maker" >/dev/null
        docker commit "$maker" cairn-test-nogit:1 >/dev/null
        docker rm "$maker" >/dev/null
    fi
    while read -r image; do
        docker_id="$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null)" \
            || die "the local Docker engine has no $image (tests/images/build.sh builds it)"
        podman_id="$(as_podman_user podman image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)"
        if [ "sha256:$podman_id" = "$docker_id" ] || [ "$podman_id" = "$docker_id" ]; then
            log "podman: $image is there"
            continue
        fi
        log "podman: sending $image (docker save | podman load)"
        docker save "$image" | as_podman_user podman load -q >/dev/null
    done < <(podman_images)
}

run_podman_suite() {
    install_system_packages "${PODMAN_APT_PACKAGES[@]}"
    ensure_docker || die "the test images come from the local Docker engine, which is not running"
    prepare_podman_user
    trap stop_podman_service EXIT
    start_podman_service
    send_podman_images
    local started=$SECONDS junit="$PODMAN_ARTIFACTS/junit.xml" args=("$@")
    [ "${#args[@]}" -gt 0 ] || args=("${PODMAN_SUITE[@]}")
    log "podman: the sandbox suite as $PODMAN_USER against unix://$PODMAN_SOCKET"
    as_podman_user env \
        "DOCKER_HOST=unix://$PODMAN_SOCKET" CAIRN_HOST=podman \
        "CAIRN_TEST_ARTIFACTS=$PODMAN_ARTIFACTS" PYTHONDONTWRITEBYTECODE=1 \
        bash -c '. scripts/setup.sh && run_tests "$@"' podman-suite \
        -p no:cacheprovider --junitxml="$junit" "${args[@]}"
    log "podman: the sandbox suite took $((SECONDS - started))s"
}

run_podman_suite "$@"
