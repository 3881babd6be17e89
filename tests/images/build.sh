#!/usr/bin/env bash
# Build the images the tests use, offline, each cached by its tag:
#   cairn-test-busybox:1   Debian's static busybox with its applets linked (about 2 MB, under a second)
#   cairn-sandbox:<ver>    the default sandbox image (resources/sandbox/build-image.sh)
# Arguments (e.g. --force) go to both builds. Prints what it built or reused.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUSYBOX_IMAGE="cairn-test-busybox:1"
FORCE=0
for arg in "$@"; do
    case "$arg" in
        --force) FORCE=1 ;;
        *) printf '[test-images] ERROR: unknown argument: %s\n' "$arg" >&2; exit 2 ;;
    esac
done

die() { printf '[test-images] ERROR: %s\n' "$*" >&2; exit 1; }

command -v docker >/dev/null 2>&1 || die "Docker is not installed (sudo apt-get install docker.io)"
timeout 20 docker info >/dev/null 2>&1 \
    || die "the Docker daemon is not answering (start it: sudo systemctl start docker)"

build_busybox() {
    if [ "$FORCE" -eq 0 ] && docker image inspect "$BUSYBOX_IMAGE" >/dev/null 2>&1; then
        echo "reused $BUSYBOX_IMAGE ($(docker image inspect -f '{{.Id}}' "$BUSYBOX_IMAGE"))"
        return
    fi
    local busybox="" candidate
    # Debian's busybox-static installs a statically linked /bin/busybox.
    for candidate in /bin/busybox /usr/bin/busybox; do
        if [ -x "$candidate" ] && ! ldd "$candidate" >/dev/null 2>&1; then
            busybox="$candidate"
            break
        fi
    done
    [ -n "$busybox" ] || die "no statically linked busybox found (sudo apt-get install busybox-static)"

    local root
    root="$(mktemp -d "${TMPDIR:-/tmp}/cairn-busybox.XXXXXX")"
    trap 'rm -rf "$root"' RETURN
    mkdir -p "$root"/{bin,etc,tmp,proc,sys,dev,home/agent,workspace,cairn/runs,cairn/egress}
    chmod 1777 "$root/tmp"
    cp "$busybox" "$root/bin/busybox"
    local applet
    for applet in $("$root/bin/busybox" --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
    done
    ln -s bin "$root/sbin"
    mkdir -p "$root/usr"
    ln -s ../bin "$root/usr/bin"
    printf 'root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n' >"$root/etc/passwd"
    printf 'root:x:0:\nagent:x:1000:\n' >"$root/etc/group"
    tar -C "$root" -c . | docker import \
        --change 'ENV PATH=/bin' --change 'CMD ["sh"]' --change 'LABEL cairn.recipe=test-busybox-1' \
        - "$BUSYBOX_IMAGE" >/dev/null
    echo "built $BUSYBOX_IMAGE ($(docker image inspect -f '{{.Id}}' "$BUSYBOX_IMAGE"))"
}

build_busybox
sandbox_args=()
[ "$FORCE" -eq 1 ] && sandbox_args+=(--force)
bash "$REPO_ROOT/resources/sandbox/build-image.sh" "${sandbox_args[@]}"
