#!/usr/bin/env bash
# Build Cairn's default sandbox image offline from Debian packages: cairn-sandbox:<RECIPE_VERSION>.
#
#   resources/sandbox/build-image.sh [--force] [--tag NAME:TAG]
#
# debootstrap (minbase, bookworm) into a temporary folder, `docker import` it, install the packages an
# engine needs with apt inside a container from it, compile the exec supervisor's hot path
# (resources/sandbox/exec-fast.c, with Debian's gcc, removed again) into
# /usr/local/lib/cairn/exec-fast.so, and commit the result. Nothing is pulled from a
# registry: packages come from the same Debian mirror the host uses (its /etc/apt/sources.list*).
# Cached by tag: when the image exists and was built from this recipe (its cairn.recipe-hash label
# is the hash of this script and exec-fast.c) this prints "reused" and exits; an image built from
# another recipe is rebuilt under the same tag; --force rebuilds it anyway.
set -euo pipefail

# Bump when the recipe changes; core/sandbox/base.py's DEFAULT_IMAGE carries the same tag.
RECIPE_VERSION=1
SUITE=bookworm
PACKAGES=(git python3 ca-certificates bash procps)
BUILD_ONLY=(gcc libc6-dev)
FAST_SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/exec-fast.c"
FAST_LIBRARY=/usr/local/lib/cairn/exec-fast.so
SANDBOX_UID=1000
SANDBOX_GID=1000

IMAGE="cairn-sandbox:${RECIPE_VERSION}"
FORCE=0
RECIPE_HASH="$(cat "${BASH_SOURCE[0]}" "$FAST_SOURCE" 2>/dev/null | sha256sum | cut -c1-16)"

die() { printf '[build-image] ERROR: %s\n' "$*" >&2; exit 1; }
log() { printf '[build-image] %s\n' "$*" >&2; }

while [ "$#" -gt 0 ]; do
    case "$1" in
        --force) FORCE=1 ;;
        --tag) shift; [ "$#" -gt 0 ] || die "--tag needs NAME:TAG"; IMAGE="$1" ;;
        -h|--help) sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done

command -v docker >/dev/null 2>&1 || die "Docker is not installed (sudo apt-get install docker.io)"
timeout 20 docker info >/dev/null 2>&1 \
    || die "the Docker daemon is not answering (start it: sudo systemctl start docker)"

# One build at a time per tag: two test set-ups may start together.
LOCK_FILE="${TMPDIR:-/tmp}/cairn-build-image-$(printf '%s' "$IMAGE" | tr -c 'A-Za-z0-9_.-' '_').lock"
exec 9>"$LOCK_FILE"
flock 9

if [ "$FORCE" -eq 0 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    built_from="$(docker image inspect -f '{{index .Config.Labels "cairn.recipe-hash"}}' "$IMAGE" 2>/dev/null || true)"
    if [ "$built_from" = "$RECIPE_HASH" ]; then
        echo "reused $IMAGE ($(docker image inspect -f '{{.Id}}' "$IMAGE"))"
        exit 0
    fi
    log "$IMAGE was built from another recipe (${built_from:-no recipe hash}); building it again"
fi

if [ "$(id -u)" -eq 0 ]; then
    AS_ROOT=()
elif command -v sudo >/dev/null 2>&1; then
    AS_ROOT=(sudo)
else
    die "debootstrap needs root: run this as root or install sudo"
fi
command -v debootstrap >/dev/null 2>&1 || die "debootstrap is missing (sudo apt-get install debootstrap)"
command -v python3 >/dev/null 2>&1 || die "python3 is missing (sudo apt-get install python3)"
[ -f "$FAST_SOURCE" ] || die "$FAST_SOURCE is missing"

START=$(date +%s)
WORK="$(mktemp -d "${TMPDIR:-/tmp}/cairn-sandbox-image.XXXXXX")"
BASE_TAG="cairn-sandbox-base:build-$$"
BUILD_CONTAINER="cairn-sandbox-build-$$"
cleanup() {
    docker rm -f "$BUILD_CONTAINER" >/dev/null 2>&1 || true
    docker rmi "$BASE_TAG" >/dev/null 2>&1 || true
    "${AS_ROOT[@]}" rm -rf "$WORK"
}
trap cleanup EXIT

# The host's Debian sources for this suite (other vendors' repositories are left out), and the
# first plain archive URI among them for debootstrap.
mkdir -p "$WORK/sources"
MIRROR="$(python3 - "$SUITE" "$WORK/sources" <<'PY'
import glob, os, re, sys

suite, out_dir = sys.argv[1], sys.argv[2]
word = re.compile(r"^%s(-[a-z]+)?$" % re.escape(suite))
mirror = None

def keep_suite(suites):
    return any(word.match(s) for s in suites)

for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    stanzas = re.split(r"\n\s*\n", open(path).read())
    kept = []
    for stanza in stanzas:
        fields = {}
        for line in stanza.splitlines():
            m = re.match(r"^([A-Za-z-]+):\s*(.*)$", line)
            if m:
                fields[m.group(1).lower()] = m.group(2).split()
        if "deb" in fields.get("types", []) and keep_suite(fields.get("suites", [])):
            kept.append(stanza.strip())
            if mirror is None and suite in fields.get("suites", []):
                mirror = fields.get("uris", [None])[0]
    if kept:
        with open(os.path.join(out_dir, os.path.basename(path)), "w") as fh:
            fh.write("\n\n".join(kept) + "\n")

lists = sorted(glob.glob("/etc/apt/sources.list.d/*.list"))
if os.path.exists("/etc/apt/sources.list"):
    lists.insert(0, "/etc/apt/sources.list")
for path in lists:
    kept = []
    for line in open(path):
        parts = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
        if len(parts) >= 3 and parts[0] == "deb" and word.match(parts[2]):
            kept.append(line.rstrip("\n"))
            if mirror is None and parts[2] == suite:
                mirror = parts[1]
    if kept:
        name = "host.list" if path == "/etc/apt/sources.list" else os.path.basename(path)
        with open(os.path.join(out_dir, name), "w") as fh:
            fh.write("\n".join(kept) + "\n")

print(mirror or "http://deb.debian.org/debian")
PY
)"
if [ -z "$(ls -A "$WORK/sources")" ]; then
    log "no Debian $SUITE sources found on the host; using $MIRROR"
    printf 'deb %s %s main\n' "$MIRROR" "$SUITE" >"$WORK/sources/debian.list"
fi
log "building $IMAGE from $SUITE via $MIRROR"

"${AS_ROOT[@]}" debootstrap --variant=minbase "$SUITE" "$WORK/rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -n 20 "$WORK/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
STEP1=$(date +%s)

"${AS_ROOT[@]}" rm -f "$WORK/rootfs/etc/apt/sources.list"
"${AS_ROOT[@]}" find "$WORK/rootfs/etc/apt/sources.list.d" -mindepth 1 -delete
"${AS_ROOT[@]}" cp "$WORK/sources/"* "$WORK/rootfs/etc/apt/sources.list.d/"
"${AS_ROOT[@]}" find "$WORK/rootfs/var/cache/apt/archives" -name '*.deb' -delete
"${AS_ROOT[@]}" tar -C "$WORK/rootfs" -c . | docker import - "$BASE_TAG" >/dev/null
STEP2=$(date +%s)

# The host network, so a mirror or cache on the host's loopback works as it does for the host.
# The compiled hot path is optional: without it (no compiler, another architecture) the supervisor
# judges every exec in python, the same way, only slower; the log says so.
docker run -i --name "$BUILD_CONTAINER" --network host "$BASE_TAG" sh -euc "
    export DEBIAN_FRONTEND=noninteractive
    cat >/tmp/exec-fast.c
    apt-get update -q
    apt-get install -y -q --no-install-recommends ${PACKAGES[*]}
    dpkg-query -W -f '\${Package}\\n' | sort >/tmp/packages.before
    if [ \"\$(uname -m)\" = x86_64 ] && apt-get install -y -q --no-install-recommends ${BUILD_ONLY[*]}; then
        mkdir -p $(dirname "$FAST_LIBRARY")
        gcc -O2 -Wall -shared -fPIC -o $FAST_LIBRARY /tmp/exec-fast.c -lpthread \\
            || echo 'WARNING: the exec hot path did not compile; supervision runs in python'
        # Every package the compiler brought, and only those, goes again.
        dpkg-query -W -f '\${Package}\\n' | sort >/tmp/packages.after
        apt-get purge -y -q \$(comm -13 /tmp/packages.before /tmp/packages.after)
        rm -f /tmp/packages.before /tmp/packages.after
    else
        echo 'WARNING: no compiler for the exec hot path; supervision runs in python'
    fi
    rm -f /tmp/exec-fast.c
    apt-get clean
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
    groupadd -g $SANDBOX_GID agent
    useradd -u $SANDBOX_UID -g $SANDBOX_GID -d /home/agent -M -s /bin/bash agent
    mkdir -p /workspace /home/agent /cairn/runs /cairn/egress
" <"$FAST_SOURCE" >"$WORK/apt.log" 2>&1 || { tail -n 20 "$WORK/apt.log" >&2; die "installing ${PACKAGES[*]} failed (log above)"; }
grep WARNING "$WORK/apt.log" >&2 || true

docker commit \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV HOME=/home/agent' \
    --change 'WORKDIR /workspace' \
    --change 'CMD ["sleep", "infinity"]' \
    --change "LABEL org.opencontainers.image.title=cairn-sandbox cairn.recipe=$RECIPE_VERSION cairn.recipe-hash=$RECIPE_HASH" \
    "$BUILD_CONTAINER" "$IMAGE" >/dev/null
END=$(date +%s)

SIZE=$(docker image inspect -f '{{.Size}}' "$IMAGE")
echo "built $IMAGE ($(docker image inspect -f '{{.Id}}' "$IMAGE"), $((SIZE / 1024 / 1024)) MB) in $((END - START)) s:" \
     "debootstrap $((STEP1 - START)) s, import $((STEP2 - STEP1)) s, packages and commit $((END - STEP2)) s"
