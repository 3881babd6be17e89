#!/usr/bin/env bash
# Set up Cairn on Debian 12 and run it, its tests, its checks or its benchmarks.
#
#   scripts/setup.sh app   [cairn args]    install what the app needs, then launch it
#   scripts/setup.sh test  [pytest args]   install everything the test suite needs, then run it
#   scripts/setup.sh lint                  install ruff and mypy, then run ruff check, ruff format
#                                          --check and mypy; fails when any of them finds something
#   scripts/setup.sh perf  [pytest args]   install, then run the benchmarks in tests/perf
#   scripts/setup.sh podman [pytest args]  the sandbox suite against rootless Podman, as a user
#                                          who is not root (scripts/podman-suite.sh); `test`
#                                          runs it after the whole suite
#   scripts/setup.sh deps                  install only
#
# Works as root or as a user with sudo. Idempotent: a second run installs nothing and is quick.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

VENV="$REPO_ROOT/.venv"
VENV_STAMP="$VENV/.cairn-install-stamp"
ARTIFACTS="$REPO_ROOT/test-artifacts"
AGENTS_DIR="$REPO_ROOT/tests/agents"
DOCKERD_LOG=/var/log/cairn-dockerd.log
DOCKER_WAIT_S=60

# What `lint` needs from Debian: a Python that can make the virtualenv (nothing runs the app).
LINT_APT_PACKAGES=(python3 python3-venv)
# The project's extras each command installs (pyproject.toml's [project.optional-dependencies]).
APP_EXTRAS="test"
ALL_EXTRAS="test,lint"
LINT_EXTRAS="lint"

# Debian packages. Qt's runtime libraries: the libgl1 line is what the offscreen platform needs,
# the libxcb lines what the xcb platform (a real window, also under Xvfb) adds.
APT_PACKAGES=(
    git python3 python3-venv ca-certificates procps
    docker.io
    gnome-keyring dbus-x11 libsecret-tools
    xvfb xauth imagemagick fonts-dejavu-core
    libgl1 libegl1 libx11-6 libdbus-1-3 libfontconfig1 libfreetype6 libglib2.0-0 libxkbcommon0
    libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0 libxcb-shape0
    libxcb-randr0 libxcb-xkb1 libxkbcommon-x11-0 libx11-xcb1
    debootstrap busybox-static
    desktop-file-utils appstream xdotool
    nodejs npm
)
# Only the test suite's: the SSH "remote host" of scripts/remote-host.sh.
TEST_APT_PACKAGES=(openssh-server openssh-client iproute2)

if [ -t 2 ]; then BOLD=$'\033[1m' YELLOW=$'\033[1;33m' RED=$'\033[1;31m' RESET=$'\033[0m'
else BOLD="" YELLOW="" RED="" RESET=""; fi
log() { printf '%s[setup]%s %s\n' "$BOLD" "$RESET" "$*" >&2; }
warn() { printf '%s[setup] WARNING:%s %s\n' "$YELLOW" "$RESET" "$*" >&2; }
die() { printf '%s[setup] ERROR:%s %s\n' "$RED" "$RESET" "$*" >&2; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

as_root() {
    if is_root; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "this step needs root: run as root or install sudo (command: $*)"
    fi
}

file_hash() { sha256sum "$@" | sha256sum | cut -d' ' -f1; }

# --- Debian packages ----------------------------------------------------------------------------

# A package counts as present when dpkg has it installed, or when the command it exists for is
# already there from another source (NodeSource's nodejs bundles npm and conflicts with Debian's;
# docker-ce provides dockerd instead of docker.io).
package_satisfied() {
    case "$1" in
        npm) command -v npm >/dev/null 2>&1 && return 0 ;;
        nodejs) command -v node >/dev/null 2>&1 && return 0 ;;
        docker.io) command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1 && return 0 ;;
    esac
    return 1
}

# Prints the packages among "$@" that are not installed.
missing_packages() {
    local installed pkg
    installed="$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "$@" 2>/dev/null \
        | awk '$2 == "ii" { print $1 }' || true)"
    for pkg in "$@"; do
        if ! grep -qxF "$pkg" <<<"$installed" && ! package_satisfied "$pkg"; then
            printf '%s\n' "$pkg"
        fi
    done
}

# Installs the Debian packages given (all of APT_PACKAGES by default) that are missing.
install_system_packages() {
    command -v dpkg-query >/dev/null 2>&1 || die "this script expects Debian 12 (no dpkg-query found)"
    local missing wanted=("$@")
    [ "${#wanted[@]}" -gt 0 ] || wanted=("${APT_PACKAGES[@]}")
    mapfile -t missing < <(missing_packages "${wanted[@]}")
    if [ "${#missing[@]}" -eq 0 ]; then
        log "Debian packages: all present"
        return
    fi
    log "Debian packages to install: ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# --- Python virtualenv --------------------------------------------------------------------------

system_python() {
    if [ -x /usr/bin/python3 ]; then echo /usr/bin/python3; else command -v python3 || die "no python3 found"; fi
}

# Extras as a sorted comma list without repeats: "lint,test".
normalize_extras() { tr ',' '\n' <<<"$*" | sed '/^$/d' | sort -u | paste -sd, -; }

# True when every extra in the comma list $1 is in the comma list $2.
extras_cover() {
    local extra
    for extra in ${1//,/ }; do
        [[ ",$2," == *",$extra,"* ]] || return 1
    done
}

# Installs Cairn in editable mode with the extras in the comma list $1 (and keeps the ones an
# earlier run installed). The stamp's first line covers what the editable install depends on: the
# project file, where the checkout lives, and the interpreter; its second line lists the extras
# installed, so a command that needs one more (lint after app) installs again.
install_python_env() {
    local extras python base recorded_base="" recorded_extras=""
    extras="$(normalize_extras "$1")"
    python="$(system_python)"
    if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
        warn "$VENV is broken (its interpreter does not run); recreating it"
        rm -rf "$VENV"
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        log "creating the virtualenv $VENV with $python"
        "$python" -m venv "$VENV"
    fi
    base="$(file_hash pyproject.toml) $REPO_ROOT $("$VENV/bin/python" -c 'import sys; print(sys.version.split()[0])')"
    if [ -f "$VENV_STAMP" ]; then
        { read -r recorded_base; read -r recorded_extras; } <"$VENV_STAMP" || true
        recorded_extras="${recorded_extras#extras: }"
    fi
    if [ "$recorded_base" = "$base" ] && extras_cover "$extras" "$recorded_extras"; then
        log "Python packages: up to date (extras: $recorded_extras)"
        return
    fi
    extras="$(normalize_extras "$extras,$recorded_extras")"
    log "installing Cairn and its extras ($extras) into $VENV"
    "$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off -e ".[$extras]"
    printf '%s\nextras: %s\n' "$base" "$extras" >"$VENV_STAMP"
}

# --- Agent CLIs from npm, for the tests that drive real agents ----------------------------------

install_agent_clis() {
    local package_json="$AGENTS_DIR/package.json" stamp_file="$AGENTS_DIR/node_modules/.cairn-install-stamp" stamp
    if [ ! -f "$package_json" ]; then
        return
    fi
    command -v npm >/dev/null 2>&1 || die "npm is missing; it is needed for $package_json"
    stamp="$(file_hash "$AGENTS_DIR"/package*.json)"
    if [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp" ]; then
        log "agent CLIs: up to date"
        return
    fi
    log "installing agent CLIs from $package_json"
    if [ -f "$AGENTS_DIR/package-lock.json" ]; then
        npm ci --prefix "$AGENTS_DIR" --no-audit --no-fund
    else
        npm install --prefix "$AGENTS_DIR" --no-audit --no-fund
    fi
    printf '%s\n' "$stamp" >"$stamp_file"
}

install_app_deps() {
    install_system_packages
    install_python_env "$APP_EXTRAS"
}

install_all_deps() {
    install_system_packages
    install_system_packages "${TEST_APT_PACKAGES[@]}"
    install_python_env "$ALL_EXTRAS"
    install_agent_clis
}

install_lint_deps() {
    install_system_packages "${LINT_APT_PACKAGES[@]}"
    install_python_env "$LINT_EXTRAS"
}

# Two set-ups of the same checkout at once (two terminals) must not run pip into one venv together.
with_install_lock() {
    local lock_file
    lock_file="${TMPDIR:-/tmp}/cairn-setup-$(id -u)-$(printf '%s' "$REPO_ROOT" | sha256sum | cut -c1-16).lock"
    (
        flock 9
        "$@"
    ) 9>"$lock_file"
}

# --- Docker engine ------------------------------------------------------------------------------

docker_ready() { timeout 10 docker info >/dev/null 2>&1; }

# Starts the engine when it is not answering. Returns non-zero (after saying why) when Docker
# still cannot be used; callers carry on and the Docker tests skip with their own reason.
ensure_docker() {
    if ! command -v docker >/dev/null 2>&1; then
        warn "Docker: no docker command; Docker tests will be skipped"
        return 1
    fi
    if docker_ready; then
        log "Docker: engine is running"
        return 0
    fi
    if [ -z "${DOCKER_HOST:-}" ] && [ -S /var/run/docker.sock ] && [ ! -w /var/run/docker.sock ] \
            && pgrep -x dockerd >/dev/null 2>&1; then
        warn "Docker: the engine runs but user $(id -un) cannot use /var/run/docker.sock; join the docker group" \
             "(sudo usermod -aG docker $(id -un), then log in again). Docker tests will be skipped"
        return 1
    fi

    local started_by_us=0
    if [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ]; then
        log "Docker: starting docker.service"
        as_root systemctl start docker || warn "Docker: systemctl start docker failed"
    fi
    if ! docker_ready && ! pgrep -x dockerd >/dev/null 2>&1; then
        log "Docker: starting dockerd (log: $DOCKERD_LOG)"
        as_root sh -c "setsid dockerd >'$DOCKERD_LOG' 2>&1 </dev/null &"
        started_by_us=1
    fi

    local waited=0 reason="it did not answer within ${DOCKER_WAIT_S}s"
    while ! docker_ready; do
        if [ "$waited" -ge "$DOCKER_WAIT_S" ]; then
            break
        fi
        if [ "$started_by_us" -eq 1 ] && [ "$waited" -ge 2 ] && ! pgrep -x dockerd >/dev/null 2>&1; then
            reason="dockerd exited"  # waiting longer will not help
            break
        fi
        sleep 1
        waited=$((waited + 1))
    done
    if docker_ready; then
        log "Docker: engine is running (after ${waited}s)"
        return 0
    fi
    warn "Docker: the engine could not be started ($reason); Docker tests will be skipped"
    if [ -r "$DOCKERD_LOG" ]; then
        tail -n 15 "$DOCKERD_LOG" | sed 's/^/    dockerd: /' >&2 || true
    fi
    return 1
}

# --- Test images --------------------------------------------------------------------------------

# Images are built locally (never pulled); tests/images/build.sh knows how.
build_test_images() {
    local docker_ok="$1"
    if [ ! -f tests/images/build.sh ]; then
        return
    fi
    if [ "$docker_ok" != 1 ]; then
        warn "not building test images: Docker is not available"
        return
    fi
    log "building test images (tests/images/build.sh)"
    bash tests/images/build.sh || die "tests/images/build.sh failed"
}

# --- X server for end-to-end GUI tests ----------------------------------------------------------

XVFB_PID=""
KEYRING_HOME=""

cleanup() {
    if [ -n "$XVFB_PID" ] && kill -0 "$XVFB_PID" 2>/dev/null; then
        kill "$XVFB_PID" 2>/dev/null || true
        wait "$XVFB_PID" 2>/dev/null || true
    fi
    if [ -n "$KEYRING_HOME" ]; then
        rm -rf "$KEYRING_HOME"
    fi
}

# Starts Xvfb on the first free display from :99 and exports CAIRN_TEST_DISPLAY.
start_xvfb() {
    if ! command -v Xvfb >/dev/null 2>&1; then
        warn "Xvfb is missing; end-to-end GUI tests will be skipped"
        return
    fi
    local n log_file="$ARTIFACTS/xvfb.log" tries
    for n in $(seq 99 160); do
        if [ -e "/tmp/.X$n-lock" ] || [ -e "/tmp/.X11-unix/X$n" ]; then
            continue
        fi
        Xvfb ":$n" -screen 0 1280x800x24 -nolisten tcp >"$log_file" 2>&1 </dev/null &
        XVFB_PID=$!
        for tries in $(seq 1 50); do
            if [ -S "/tmp/.X11-unix/X$n" ]; then
                export CAIRN_TEST_DISPLAY=":$n"
                log "Xvfb: running on $CAIRN_TEST_DISPLAY (pid $XVFB_PID)"
                return
            fi
            kill -0 "$XVFB_PID" 2>/dev/null || break  # lost a race for this display; try the next
            sleep 0.1
        done
        kill "$XVFB_PID" 2>/dev/null || true
        wait "$XVFB_PID" 2>/dev/null || true
        XVFB_PID=""
    done
    warn "Xvfb could not be started (see $log_file); end-to-end GUI tests will be skipped"
}

# --- Running pytest -----------------------------------------------------------------------------

# Runs pytest inside a private D-Bus session with an unlocked Secret Service. The keyring files
# go to a temporary folder so a developer's own login keyring is neither used nor changed.
run_pytest_in_session() {
    if ! command -v dbus-run-session >/dev/null 2>&1 || ! command -v gnome-keyring-daemon >/dev/null 2>&1; then
        warn "no dbus-run-session or gnome-keyring-daemon; keyring tests will be skipped"
        "$VENV/bin/python" -m pytest "$@"
        return
    fi
    KEYRING_HOME="$(mktemp -d "${TMPDIR:-/tmp}/cairn-test-keyring.XXXXXX")"
    # `echo ""` sends a newline (the empty password): with no bytes at all no login keyring is
    # created and every call fails with "Prompt dismissed".
    CAIRN_KEYRING_HOME="$KEYRING_HOME" dbus-run-session -- sh -c '
        echo "" | XDG_DATA_HOME="$CAIRN_KEYRING_HOME" \
            gnome-keyring-daemon --unlock --components=secrets >/dev/null 2>&1 \
            || echo "[setup] WARNING: gnome-keyring-daemon did not start; keyring tests will be skipped" >&2
        exec "$@"' sh "$VENV/bin/python" -m pytest "$@"
}

# Prints "passed failed errors skipped total" from a JUnit XML report.
junit_counts() {
    "$VENV/bin/python" - "$1" <<'PY'
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.iter("testsuite")
tests = failures = errors = skipped = 0
for suite in suites:
    tests += int(suite.get("tests", 0))
    failures += int(suite.get("failures", 0))
    errors += int(suite.get("errors", 0))
    skipped += int(suite.get("skipped", 0))
print(tests - failures - errors - skipped, failures, errors, skipped, tests)
PY
}

# Runs pytest and fails when it ran no test, even if pytest itself says all is well.
run_tests() {
    local junit="$ARTIFACTS/junit.xml" rc=0 arg previous="" require_pass=1 own_report=1
    for arg in "$@"; do
        case "$arg" in
            --co|--collect-only|-h|--help|--version|--fixtures|--markers) require_pass=0 ;;
            --junitxml=*|--junit-xml=*) junit="${arg#*=}"; own_report=0 ;;
        esac
        case "$previous" in --junitxml|--junit-xml) junit="$arg"; own_report=0 ;; esac
        previous="$arg"
    done
    rm -f "$junit"
    if [ "$own_report" -eq 1 ]; then
        run_pytest_in_session --junitxml="$junit" "$@" || rc=$?
    else
        run_pytest_in_session "$@" || rc=$?
    fi

    if [ "$rc" -eq 5 ]; then
        printf '%s[setup] ERROR:%s %s\n' "$RED" "$RESET" \
            "pytest collected no tests (exit code 5): the test run counts as failed" >&2
        return 5
    fi
    if [ "$rc" -ne 0 ]; then
        log "pytest failed with exit code $rc"
        return "$rc"
    fi
    if [ "$require_pass" -eq 1 ]; then
        if [ ! -f "$junit" ]; then
            die "pytest wrote no report to $junit, so it cannot be shown that any test passed"
        fi
        local counts passed failed errors skipped total
        counts="$(junit_counts "$junit")" || die "could not read the test report $junit"
        read -r passed failed errors skipped total <<<"$counts"
        if [ "$passed" -eq 0 ]; then
            die "0 tests passed ($total collected, $skipped skipped): the test run counts as failed"
        fi
        log "tests: $passed passed, $skipped skipped, $failed failed, $errors errors"
    fi
    return 0
}

prepare_test_services() {
    mkdir -p "$ARTIFACTS"
    export CAIRN_TEST_ARTIFACTS="$ARTIFACTS"
    local docker_ok=0
    if ensure_docker; then docker_ok=1; fi
    build_test_images "$docker_ok"
    start_remote_host "$docker_ok"
}

# A second Docker engine behind an SSH server on 127.0.0.1 (scripts/remote-host.sh), for the
# tests of sandboxes on a remote host; its connection settings are exported for them.
start_remote_host() {
    [ "$1" -eq 1 ] && is_root || return 0
    local settings
    if settings="$(bash scripts/remote-host.sh start)"; then
        while IFS= read -r line; do
            [ -n "$line" ] && export "${line?}"
        done <<<"$settings"
    else
        warn "the SSH remote host did not start; its tests will say why"
    fi
}

# --- The packaged app --------------------------------------------------------------------------

# Builds dist/cairn for tests/packaging/test_bundle.py (packaging/build.sh skips the build when
# nothing it depends on changed) and points the test at it.
build_bundle() {
    log "building the app bundle (packaging/build.sh)"
    with_install_lock bash packaging/build.sh || die "packaging/build.sh failed"
    export CAIRN_BUNDLE="$REPO_ROOT/dist/cairn"
}

# The whole suite wants the bundle; a run naming only other tests does not wait for a build.
wants_bundle() {
    local arg named=0
    for arg in "$@"; do
        case "$arg" in
            tests/packaging|tests/packaging/*) return 0 ;;
            tests/*|*.py|*::*) named=1 ;;
        esac
    done
    [ "$named" -eq 0 ]
}

# --- Lint -----------------------------------------------------------------------------------------

# Runs every check, even after one fails, so one run shows all there is to fix.
run_lint() {
    local failed=()
    log "lint: ruff check ."
    "$VENV/bin/ruff" check . || failed+=("ruff check")
    log "lint: ruff format --check ."
    "$VENV/bin/ruff" format --check . || failed+=("ruff format --check")
    log "lint: mypy (the files and settings in pyproject.toml)"
    "$VENV/bin/mypy" || failed+=("mypy")
    if [ "${#failed[@]}" -gt 0 ]; then
        local list hint=""
        list="$(printf '%s, ' "${failed[@]}")"
        case "$list" in
            *"ruff format"*) hint="; .venv/bin/ruff format . fixes the formatting" ;;
        esac
        printf '%s[setup] ERROR:%s lint failed: %s found problems, listed above%s\n' \
            "$RED" "$RESET" "${list%, }" "$hint" >&2
        return 1
    fi
    log "lint: ruff and mypy found nothing"
}

# --- Commands -----------------------------------------------------------------------------------

cmd_deps() {
    with_install_lock install_all_deps
    log "done"
}

cmd_app() {
    with_install_lock install_app_deps
    ensure_docker || warn "Cairn starts anyway; sandboxes need a running Docker engine"
    if [ -z "${DISPLAY:-}" ] && [ -z "${WAYLAND_DISPLAY:-}" ] && [ -z "${QT_QPA_PLATFORM:-}" ]; then
        die "no display: run this from a desktop session (DISPLAY or WAYLAND_DISPLAY is unset)"
    fi
    if [ -z "${DBUS_SESSION_BUS_ADDRESS:-}" ]; then
        warn "no D-Bus session: Cairn cannot store credentials in the system keyring"
    fi
    exec "$VENV/bin/cairn" "$@"
}

cmd_lint() {
    [ "$#" -eq 0 ] || die "lint takes no arguments (it checks what pyproject.toml configures)"
    with_install_lock install_lint_deps
    run_lint
}

# Lint is not part of it: CI runs `scripts/setup.sh lint` first (.ci/run). The whole suite
# (no test named) is followed by the sandbox suite against rootless Podman.
cmd_test() {
    with_install_lock install_all_deps
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    prepare_test_services
    if wants_bundle "$@"; then build_bundle; fi
    start_xvfb
    run_tests "$@"
    if [ "$#" -eq 0 ]; then
        bash "$REPO_ROOT/scripts/podman-suite.sh"
    fi
}

cmd_podman() {
    with_install_lock install_all_deps
    mkdir -p "$ARTIFACTS"
    bash "$REPO_ROOT/scripts/podman-suite.sh" "$@"
}

cmd_perf() {
    with_install_lock install_all_deps
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    prepare_test_services
    [ -d tests/perf ] || die "there is no tests/perf folder"
    local arg target=tests/perf
    for arg in "$@"; do
        case "$arg" in tests/perf/*) target="" ;; esac  # one benchmark named: run only that
    done
    run_tests ${target:+"$target"} -s -p no:cacheprovider "$@"
}

# The comment block at the top of this file.
usage() {
    awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${BASH_SOURCE[0]}"
}

main() {
    local command="${1:-}"
    [ "$#" -gt 0 ] && shift
    case "$command" in
        app) cmd_app "$@" ;;
        test) cmd_test "$@" ;;
        lint) cmd_lint "$@" ;;
        perf) cmd_perf "$@" ;;
        podman) cmd_podman "$@" ;;
        deps) cmd_deps ;;
        -h|--help|help) usage ;;
        *) usage >&2; exit 2 ;;
    esac
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    main "$@"
fi
