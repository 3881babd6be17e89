#!/usr/bin/env bash
# Build Cairn as a one-folder app: dist/cairn/ with the executables `cairn` and `cairnctl`, and the
# desktop integration files under dist/cairn/share/ that packaging/install.sh puts in place.
#
#   packaging/build.sh                         build (skipped when nothing it depends on changed)
#   packaging/build.sh --force                 build even if the last build is up to date
#   packaging/build.sh --share-only --bundle DIR
#                                              only write DIR/share/ (desktop file, metainfo, icons)
#
# Uses the project's .venv (scripts/setup.sh deps makes it) and installs the pinned PyInstaller
# from pyproject's `package` extra into it when missing. Idempotent; fails loudly.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PACKAGING="$REPO_ROOT/packaging"
VENV_PYTHON="${CAIRN_VENV_PYTHON:-$REPO_ROOT/.venv/bin/python}"
WORK="$PACKAGING/build-tmp"
DIST="$REPO_ROOT/dist"
BUNDLE="$DIST/cairn"
STAMP="$WORK/bundle.stamp"
APP_ID="io.cairn.Cairn"

if [ -t 2 ]; then BOLD=$'\033[1m' RED=$'\033[1;31m' RESET=$'\033[0m'; else BOLD="" RED="" RESET=""; fi
log() { printf '%s[build]%s %s\n' "$BOLD" "$RESET" "$*" >&2; }
die() { printf '%s[build] ERROR:%s %s\n' "$RED" "$RESET" "$*" >&2; exit 1; }

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

# --- PyInstaller --------------------------------------------------------------------------------

# The requirement strings of pyproject's `package` extra, one a line.
package_requirements() {
    "$VENV_PYTHON" - "$REPO_ROOT/pyproject.toml" <<'PY'
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    extras = tomllib.load(f)["project"].get("optional-dependencies", {})
if "package" not in extras:
    sys.exit("pyproject.toml has no [project.optional-dependencies] package = [...]")
print("\n".join(extras["package"]))
PY
}

ensure_pyinstaller() {
    local requirements wanted have
    mapfile -t requirements < <(package_requirements)
    [ "${#requirements[@]}" -gt 0 ] || die "could not read the package extra from pyproject.toml"
    wanted="$(printf '%s\n' "${requirements[@]}" | sed -n 's/^pyinstaller==//Ip' | head -n1)"
    have="$("$VENV_PYTHON" -m PyInstaller --version 2>/dev/null || true)"
    if [ -n "$have" ] && { [ -z "$wanted" ] || [ "$have" = "$wanted" ]; }; then
        log "PyInstaller $have"
        return
    fi
    log "installing ${requirements[*]} into $(dirname "$(dirname "$VENV_PYTHON")")"
    "$VENV_PYTHON" -m pip install --disable-pip-version-check --progress-bar off "${requirements[@]}" \
        || die "pip could not install ${requirements[*]}"
    log "PyInstaller $("$VENV_PYTHON" -m PyInstaller --version)"
}

# --- What a build depends on --------------------------------------------------------------------

# One hash over the app's sources, the packaging files, pyproject and the venv's package versions:
# when it matches the last build's, that build is what this one would make.
sources_hash() {
    {
        (cd "$REPO_ROOT" && find core gui resources packaging pyproject.toml -type f \
            ! -path 'packaging/build-tmp/*' ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 \
            | sort -z | xargs -0 sha256sum)
        "$VENV_PYTHON" -m pip freeze --disable-pip-version-check --exclude-editable 2>/dev/null
        "$VENV_PYTHON" -c 'import sys; print(sys.version)'
    } | sha256sum | cut -d' ' -f1
}

bundle_version() { tr -d '[:space:]' <"$1/_internal/VERSION"; }

package_version() {
    "$VENV_PYTHON" -c 'import sys; sys.path.insert(0, sys.argv[1]); from core import __version__; print(__version__)' \
        "$REPO_ROOT"
}

# --- Steps --------------------------------------------------------------------------------------

run_pyinstaller() {
    local log_file="$WORK/pyinstaller.log" started=$SECONDS
    mkdir -p "$WORK" "$DIST"
    rm -f "$STAMP"
    log "running PyInstaller (log: $log_file)"
    if ! (cd "$REPO_ROOT" && "$VENV_PYTHON" -m PyInstaller --noconfirm --log-level WARN \
            --workpath "$WORK/pyinstaller" --distpath "$DIST" "$PACKAGING/cairn.spec") >"$log_file" 2>&1; then
        tail -n 40 "$log_file" | sed 's/^/    /' >&2
        die "PyInstaller failed (full log: $log_file)"
    fi
    log "PyInstaller finished in $((SECONDS - started))s"
}

# The desktop file, the AppStream metainfo and the icons, laid out as under a prefix's share/.
stage_share() {
    local bundle="$1" share="$1/share"
    [ -d "$bundle" ] || die "no bundle folder $bundle"
    rm -rf "$share"
    install -D -m 0644 "$PACKAGING/$APP_ID.desktop" "$share/applications/$APP_ID.desktop"
    install -D -m 0644 "$PACKAGING/$APP_ID.metainfo.xml" "$share/metainfo/$APP_ID.metainfo.xml"
    "$VENV_PYTHON" "$PACKAGING/render_icons.py" "$REPO_ROOT/resources/icons/cairn.svg" "$share/icons" \
        --name "$APP_ID" >/dev/null || die "could not render the icons"
    log "desktop files and icons: $share"
}

# The bundle starts, and says the version the sources have.
check_bundle() {
    local want got
    want="$(package_version)"
    [ "$(bundle_version "$BUNDLE")" = "$want" ] || die "$BUNDLE/_internal/VERSION is not $want"
    got="$("$BUNDLE/cairn" --version 2>&1)" || die "$BUNDLE/cairn --version failed: $got"
    [ "$got" = "cairn $want" ] || die "$BUNDLE/cairn --version says '$got', not 'cairn $want'"
    "$BUNDLE/cairnctl" --help >/dev/null 2>&1 || die "$BUNDLE/cairnctl --help failed"
    "$BUNDLE/cairnctl" --cairn-module core.approvals --help >/dev/null 2>&1 \
        || die "$BUNDLE/cairnctl cannot run the approvals judge module"
}

main() {
    local force=0 share_only=0 bundle=""
    while [ "$#" -gt 0 ]; do
        case "$1" in
            --force) force=1 ;;
            --share-only) share_only=1 ;;
            --bundle) [ "$#" -ge 2 ] || die "--bundle needs a folder"; bundle="$2"; shift ;;
            --bundle=*) bundle="${1#*=}" ;;
            -h|--help) usage; return 0 ;;
            *) usage >&2; die "unknown argument: $1" ;;
        esac
        shift
    done
    [ -x "$VENV_PYTHON" ] || die "no $VENV_PYTHON: run scripts/setup.sh deps first"

    if [ "$share_only" -eq 1 ]; then
        [ -n "$bundle" ] || die "--share-only needs --bundle DIR"
        stage_share "$bundle"
        return
    fi
    [ -z "$bundle" ] || die "--bundle goes with --share-only; a build always writes $BUNDLE"

    ensure_pyinstaller
    local hash
    hash="$(sources_hash)"
    if [ "$force" -eq 0 ] && [ -x "$BUNDLE/cairn" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$hash" ]; then
        log "bundle is up to date: $BUNDLE (version $(bundle_version "$BUNDLE"))"
        return
    fi
    run_pyinstaller
    stage_share "$BUNDLE"
    check_bundle
    printf '%s\n' "$hash" >"$STAMP"
    log "bundle: $BUNDLE (version $(bundle_version "$BUNDLE"), $(du -sh "$BUNDLE" | cut -f1))"
}

main "$@"
