#!/usr/bin/env bash
# A "remote" Docker host on this machine, for the tests of sandboxes reached over SSH: a second
# Docker engine beside the first (its own data, bridge and containerd namespace), and an SSH
# server on 127.0.0.1 whose one user's sessions talk to that engine. Needs root.
#
#   scripts/remote-host.sh start     start both (idempotent); prints the connection settings
#   scripts/remote-host.sh stop      stop both (the engine's data stays)
#   scripts/remote-host.sh env       the connection settings, as shell assignments
#   scripts/remote-host.sh sshd PORT       one more SSH server for the same engine on PORT (for a
#                                          test that makes the host go away and come back);
#                                          prints its settings (its own known_hosts file)
#   scripts/remote-host.sh stop-sshd PORT  stop that server and every connection it carries
#   scripts/remote-host.sh stop-engine     stop only the engine (its SSH server stays): the host
#                                          answers SSH but its Docker engine does not
#   scripts/remote-host.sh start-engine    start only the engine again (--live-restore, unless
#                                          CAIRN_REMOTE_LIVE_RESTORE=0)
#
# CAIRN_REMOTE_INSTANCE=N (1-9) makes every command act on another, independent remote host:
# its own data, run folder, bridge (cairnrN), containerd namespace and SSH port (2222+N), for a
# test that stops and starts an engine without disturbing the tests that use the first one.
#
# The settings: CAIRN_TEST_SSH_HOST (ssh://USER@127.0.0.1:PORT), CAIRN_TEST_SSH_KEY (a private
# key the server accepts), CAIRN_TEST_SSH_KNOWN_HOSTS (a known_hosts file holding the server's
# key), CAIRN_TEST_REMOTE_SOCKET (the second engine's socket, to look at it directly).
#
# The engine keeps its containers running while it is stopped (--live-restore), as a server's
# engine restarted by its admin would, so a test can stop it mid-run and find the run again.
#
# Never start the second engine with `--bridge none`: dockerd then deletes the first engine's
# docker0 and the first engine's containers fail to start until it is restarted.
set -euo pipefail

INSTANCE="${CAIRN_REMOTE_INSTANCE:-}"
case "$INSTANCE" in
    "" | 0) SUFFIX="" BRIDGE=cairnr0 BRIDGE_ADDR=10.213.7.1/24 DEFAULT_PORT=2222 ;;
    [1-9]) SUFFIX="-$INSTANCE" BRIDGE="cairnr$INSTANCE" BRIDGE_ADDR="10.213.$((7 + INSTANCE)).1/24"
        DEFAULT_PORT=$((2222 + INSTANCE)) ;;
    *) printf 'remote-host: CAIRN_REMOTE_INSTANCE is a digit from 1 to 9, not %s\n' "$INSTANCE" >&2
        exit 2 ;;
esac
STATE="${CAIRN_REMOTE_STATE:-/var/lib/cairn-test-remote$SUFFIX}"
RUN="${CAIRN_REMOTE_RUN:-/run/cairn-test-remote$SUFFIX}"
PORT="${CAIRN_REMOTE_PORT:-$DEFAULT_PORT}"
NAMESPACE="cairn-remote$SUFFIX"
LIVE_RESTORE="${CAIRN_REMOTE_LIVE_RESTORE:-1}"
USER_NAME=cairn-remote
SOCKET="$RUN/docker.sock"

log() { printf 'remote-host: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

settings() {
    cat <<EOF
CAIRN_TEST_SSH_HOST=ssh://$USER_NAME@127.0.0.1:$PORT
CAIRN_TEST_SSH_KEY=$STATE/ssh/client_ed25519
CAIRN_TEST_SSH_KNOWN_HOSTS=$STATE/ssh/known_hosts
CAIRN_TEST_REMOTE_SOCKET=$SOCKET
EOF
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null; }

make_user() {
    if ! getent group "$USER_NAME" >/dev/null; then groupadd --system "$USER_NAME"; fi
    if ! id "$USER_NAME" >/dev/null 2>&1; then
        useradd --system --gid "$USER_NAME" --home-dir "$STATE/home" --create-home \
            --shell /bin/sh "$USER_NAME"
    fi
    # No password, but not a locked account either: sshd refuses a locked one even for a key.
    usermod -p '*' "$USER_NAME"
}

make_bridge() {
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
        ip addr add "$BRIDGE_ADDR" dev "$BRIDGE"
    fi
    ip link set "$BRIDGE" up
}

start_engine() {
    if alive "$RUN/docker.pid" && [ -S "$SOCKET" ]; then return 0; fi
    mkdir -p "$STATE/docker" "$RUN/exec"
    local restore=(--live-restore)
    [ "$LIVE_RESTORE" = 0 ] && restore=()
    log "starting the second Docker engine on $SOCKET"
    setsid dockerd \
        --data-root "$STATE/docker" --exec-root "$RUN/exec" --pidfile "$RUN/docker.pid" \
        -H "unix://$SOCKET" --group "$USER_NAME" --bridge "$BRIDGE" \
        --iptables=false --ip6tables=false "${restore[@]}" \
        --containerd-namespace "$NAMESPACE" --containerd-plugins-namespace "$NAMESPACE-plugins" \
        >>"$RUN/dockerd.log" 2>&1 </dev/null &
    local i
    for i in $(seq 1 150); do
        if DOCKER_HOST="unix://$SOCKET" docker version >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    tail -n 20 "$RUN/dockerd.log" >&2 || true
    die "the second Docker engine did not answer within 30 s"
}

make_keys() {
    mkdir -p "$STATE/ssh"
    chmod 755 "$STATE" "$STATE/ssh"
    [ -f "$STATE/ssh/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$STATE/ssh/host_ed25519"
    [ -f "$STATE/ssh/client_ed25519" ] ||
        ssh-keygen -q -t ed25519 -N '' -C cairn-test -f "$STATE/ssh/client_ed25519"
    install -m 644 "$STATE/ssh/client_ed25519.pub" "$STATE/ssh/authorized_keys"
    printf '[127.0.0.1]:%s %s\n' "$PORT" "$(cut -d' ' -f1,2 "$STATE/ssh/host_ed25519.pub")" \
        >"$STATE/ssh/known_hosts"
}

start_sshd() {
    if alive "$RUN/sshd.pid"; then return 0; fi
    mkdir -p /run/sshd
    chmod 755 /run/sshd
    cat >"$STATE/sshd_config" <<EOF
Port $PORT
ListenAddress 127.0.0.1
HostKey $STATE/ssh/host_ed25519
PidFile $RUN/sshd.pid
AuthorizedKeysFile $STATE/ssh/authorized_keys
AllowUsers $USER_NAME
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowTcpForwarding yes
AllowStreamLocalForwarding yes
StreamLocalBindUnlink yes
SetEnv DOCKER_HOST=unix://$SOCKET
EOF
    log "starting the SSH server on 127.0.0.1:$PORT"
    /usr/sbin/sshd -f "$STATE/sshd_config" -E "$RUN/sshd.log"
    local i
    for i in $(seq 1 50); do
        alive "$RUN/sshd.pid" && return 0
        sleep 0.1
    done
    cat "$RUN/sshd.log" >&2 || true
    die "the SSH server did not start"
}

start() {
    [ "$(id -u)" -eq 0 ] || die "needs root (it starts a Docker engine and an SSH server)"
    command -v dockerd >/dev/null || die "dockerd is not installed"
    [ -x /usr/sbin/sshd ] || die "sshd is not installed (Debian: openssh-server)"
    mkdir -p "$RUN"
    make_user
    make_bridge
    start_engine
    make_keys
    start_sshd
    settings
}

stop_engine() {
    if alive "$RUN/docker.pid"; then kill "$(cat "$RUN/docker.pid")"; fi
    # Without --live-restore the engine stops its containers first (up to their stop timeout).
    for _ in $(seq 1 300); do
        alive "$RUN/docker.pid" || return 0
        sleep 0.1
    done
    die "the engine on $SOCKET did not stop within 30 s"
}

stop() {
    if alive "$RUN/sshd.pid"; then kill "$(cat "$RUN/sshd.pid")"; fi
    stop_engine
}

root_engine() {
    [ "$(id -u)" -eq 0 ] || die "needs root"
    [ -f "$STATE/sshd_config" ] || die "start the remote host first: $0 start"
    mkdir -p "$RUN"
    make_bridge
    start_engine
}

# Every process below PID (the servers of each connection), deepest first.
descendants() {
    local child
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
        descendants "$child"
        echo "$child"
    done
}

extra_sshd() {
    local port="$1"
    [ "$(id -u)" -eq 0 ] || die "needs root"
    [[ "$port" =~ ^[0-9]{1,5}$ ]] && [ "$port" != "$PORT" ] || die "give a free port other than $PORT"
    alive "$RUN/sshd.pid" || die "start the remote host first: $0 start"
    if ! alive "$RUN/sshd.$port.pid"; then
        sed -e "s/^Port .*/Port $port/" -e "s#^PidFile .*#PidFile $RUN/sshd.$port.pid#" \
            "$STATE/sshd_config" >"$STATE/sshd_config.$port"
        /usr/sbin/sshd -f "$STATE/sshd_config.$port" -E "$RUN/sshd.$port.log"
        local i
        for i in $(seq 1 50); do
            alive "$RUN/sshd.$port.pid" && break
            sleep 0.1
        done
        alive "$RUN/sshd.$port.pid" || die "the SSH server on port $port did not start"
    fi
    printf '[127.0.0.1]:%s %s\n' "$port" "$(cut -d' ' -f1,2 "$STATE/ssh/host_ed25519.pub")" \
        >"$STATE/ssh/known_hosts.$port"
    settings | sed -e "s#@127.0.0.1:$PORT#@127.0.0.1:$port#" \
        -e "s#known_hosts\$#known_hosts.$port#"
}

stop_extra_sshd() {
    local port="$1" pid
    [ -f "$RUN/sshd.$port.pid" ] || return 0
    pid="$(cat "$RUN/sshd.$port.pid")"
    if kill -0 "$pid" 2>/dev/null; then
        # The connections' own servers too: a shared ssh connection would outlive the listener.
        kill $(descendants "$pid") "$pid" 2>/dev/null || true
    fi
    rm -f "$RUN/sshd.$port.pid" "$RUN/sshd.$port.log" "$STATE/sshd_config.$port" \
        "$STATE/ssh/known_hosts.$port"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    env) settings ;;
    sshd) extra_sshd "${2:-}" ;;
    stop-sshd) stop_extra_sshd "${2:-}" ;;
    stop-engine) stop_engine ;;
    start-engine) root_engine ;;
    *) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0" >&2; exit 2 ;;
esac
