#!/usr/bin/env bash
# Install the built Cairn bundle for the current user, where desktops look for apps.
#
#   packaging/install.sh [--bundle DIR] [--home DIR]
#
#   --bundle DIR  the bundle to install (default: dist/cairn, made by packaging/build.sh)
#   --home DIR    install as if DIR were $HOME (XDG_DATA_HOME is then ignored); for tests
#
# Puts, with DATA = ${XDG_DATA_HOME:-~/.local/share}:
#   DATA/io.cairn.Cairn/app/                      the bundle (Cairn's own data stays in DATA/cairn)
#   DATA/io.cairn.Cairn/installed-files           what this script added, for uninstall.sh
#   DATA/io.cairn.Cairn/uninstall.sh              a copy of packaging/uninstall.sh
#   ~/.local/bin/cairn, ~/.local/bin/cairnctl     symlinks into the bundle
#   DATA/applications/io.cairn.Cairn.desktop      Exec is the bundle's absolute path
#   DATA/metainfo/io.cairn.Cairn.metainfo.xml
#   DATA/icons/hicolor/<n>x<n>/apps/io.cairn.Cairn.png, .../scalable/apps/io.cairn.Cairn.svg
# An earlier install is removed first. Nothing that was there before is overwritten: a file in
# the way stops the install, and a failed install takes back what it had added.
set -euo pipefail

PACKAGING="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
APP_ID="io.cairn.Cairn"
EXECUTABLES=(cairn cairnctl)

if [ -t 2 ]; then BOLD=$'\033[1m' YELLOW=$'\033[1;33m' RED=$'\033[1;31m' RESET=$'\033[0m'
else BOLD="" YELLOW="" RED="" RESET=""; fi
log() { printf '%s[install]%s %s\n' "$BOLD" "$RESET" "$*" >&2; }
warn() { printf '%s[install] WARNING:%s %s\n' "$YELLOW" "$RESET" "$*" >&2; }
die() { printf '%s[install] ERROR:%s %s\n' "$RED" "$RESET" "$*" >&2; exit 1; }

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

BUNDLE="$PACKAGING/../dist/cairn"
while [ "$#" -gt 0 ]; do
    case "$1" in
        --bundle) [ "$#" -ge 2 ] || die "--bundle needs a folder"; BUNDLE="$2"; shift ;;
        --bundle=*) BUNDLE="${1#*=}" ;;
        --home|--prefix-home) [ "$#" -ge 2 ] || die "$1 needs a folder"; HOME="$2"; unset XDG_DATA_HOME; shift ;;
        --home=*|--prefix-home=*) HOME="${1#*=}"; unset XDG_DATA_HOME ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
    shift
done

[ -n "${HOME:-}" ] && [ -d "$HOME" ] || die "the home folder '${HOME:-}' does not exist"
HOME="$(cd "$HOME" && pwd -P)"
[ -d "$BUNDLE" ] || die "no bundle at $BUNDLE: build it with packaging/build.sh"
BUNDLE="$(cd "$BUNDLE" && pwd -P)"
DATA_HOME="${XDG_DATA_HOME:-$HOME/.local/share}"
case "$DATA_HOME" in /*) ;; *) die "XDG_DATA_HOME must be an absolute path, not '$DATA_HOME'" ;; esac
BIN_DIR="$HOME/.local/bin"
APP_ROOT="$DATA_HOME/$APP_ID"
APP_DIR="$APP_ROOT/app"
MANIFEST="$APP_ROOT/installed-files"
SHARE="$BUNDLE/share"

# --- What goes where ----------------------------------------------------------------------------

for name in "${EXECUTABLES[@]}"; do
    [ -x "$BUNDLE/$name" ] || die "$BUNDLE/$name is missing or not executable"
done
for path in "applications/$APP_ID.desktop" "metainfo/$APP_ID.metainfo.xml" \
        "icons/hicolor/scalable/apps/$APP_ID.svg"; do
    [ -f "$SHARE/$path" ] || die "$SHARE/$path is missing: packaging/build.sh writes it"
done
mapfile -t ICONS < <(cd "$SHARE/icons" && find hicolor -path "hicolor/*/apps/$APP_ID.*" -type f | sort)

# What goes under DATA, as paths relative to it (and to the bundle's share/).
SHARE_FILES=("applications/$APP_ID.desktop" "metainfo/$APP_ID.metainfo.xml")
for icon in "${ICONS[@]}"; do SHARE_FILES+=("icons/$icon"); done

# --- The manifest ------------------------------------------------------------------------------

# One line per thing added, in order: "<kind><TAB><absolute path>", kind one of dir (a folder that
# did not exist), file, link, tree (a folder and everything in it). uninstall.sh undoes it backwards.
record() { printf '%s\t%s\n' "$1" "$2" >>"$MANIFEST"; }

# Creates a folder and its missing parents, recording each one it creates.
make_dir() {
    local target="$1" missing=() parent
    parent="$target"
    while [ ! -e "$parent" ]; do
        missing=("$parent" "${missing[@]}")
        parent="$(dirname "$parent")"
    done
    [ -d "$parent" ] || die "$parent is in the way (not a folder)"
    local made=()
    for parent in "${missing[@]}"; do
        if ! mkdir "$parent"; then
            # Nothing is recorded yet: take back the folders made so far, newest first.
            for ((i = ${#made[@]} - 1; i >= 0; i--)); do rmdir "${made[i]}" 2>/dev/null || true; done
            die "cannot create $parent"
        fi
        made+=("$parent")
    done
    # Recorded once all exist: the manifest itself may live in the last of them (a brand-new
    # home has no ~/.local/share yet).
    for parent in "${made[@]}"; do
        record dir "$parent"
    done
}

# A value for the desktop file's Exec key: the path alone when it needs no quoting, else quoted
# (Desktop Entry spec: \ " ` $ escaped inside quotes, then \ escaped again as a string; % doubled).
desktop_exec_arg() {
    local path="$1"
    case "$path" in *$'\n'*|*$'\t'*) die "cannot put a path with a newline or tab in a desktop file" ;; esac
    if [[ "$path" =~ ^[A-Za-z0-9/._+-]+$ ]]; then
        printf '%s' "$path"
        return
    fi
    path="$(printf '%s' "$path" | sed -e 's/[\\"`$]/\\&/g' -e 's/\\/\\\\/g' -e 's/%/%%/g')"
    printf '"%s"' "$path"
}

# --- Steps --------------------------------------------------------------------------------------

remove_earlier_install() {
    if [ -f "$MANIFEST" ]; then
        log "removing the earlier install at $APP_ROOT"
        bash "$PACKAGING/uninstall.sh" --app-root "$APP_ROOT" --quiet \
            || die "could not remove the earlier install; run $PACKAGING/uninstall.sh and try again"
    elif [ -e "$APP_ROOT" ]; then
        die "$APP_ROOT exists but has no $(basename "$MANIFEST"): it was not made by this script; move it away first"
    fi
}

check_nothing_in_the_way() {
    local path
    for path in "${EXECUTABLES[@]/#/$BIN_DIR/}" "${SHARE_FILES[@]/#/$DATA_HOME/}"; do
        if [ -e "$path" ] || [ -L "$path" ]; then
            die "$path already exists and is not from this script's install; move it away first"
        fi
    done
}

install_bundle() {
    make_dir "$APP_ROOT"
    record file "$MANIFEST"  # first after its folder, so uninstall removes it just before the folder
    record tree "$APP_DIR"
    cp -a "$BUNDLE" "$APP_DIR"
    install -m 0755 "$PACKAGING/uninstall.sh" "$APP_ROOT/uninstall.sh"
    record file "$APP_ROOT/uninstall.sh"
    log "bundle: $APP_DIR ($(du -sh "$APP_DIR" | cut -f1))"
}

install_links() {
    local name
    make_dir "$BIN_DIR"
    for name in "${EXECUTABLES[@]}"; do
        ln -s "$APP_DIR/$name" "$BIN_DIR/$name"
        record link "$BIN_DIR/$name"
    done
    log "commands: $BIN_DIR/cairn, $BIN_DIR/cairnctl"
    case ":${PATH:-}:" in
        *":$BIN_DIR:"*) ;;
        *) warn "$BIN_DIR is not on your PATH: the menu entry works, but add it to run cairn from a shell" ;;
    esac
}

install_share_files() {
    local relative target exec_arg
    exec_arg="$(desktop_exec_arg "$APP_DIR/cairn")"
    for relative in "${SHARE_FILES[@]}"; do
        target="$DATA_HOME/$relative"
        make_dir "$(dirname "$target")"
        record file "$target"
        if [ "$relative" = "applications/$APP_ID.desktop" ]; then
            # Through the environment: awk -v would undo the backslashes of a quoted path.
            EXEC_ARG="$exec_arg" awk '
                /^Exec=cairn( |$)/ { sub(/^Exec=cairn/, ""); printf "Exec=%s%s\n", ENVIRON["EXEC_ARG"], $0; next }
                { print }' "$SHARE/$relative" >"$target"
            chmod 0644 "$target"
            grep -qF -- "Exec=$exec_arg" "$target" || die "could not point Exec in $target at $APP_DIR/cairn"
        else
            install -m 0644 "$SHARE/$relative" "$target"
        fi
    done
    log "menu entry: $DATA_HOME/applications/$APP_ID.desktop"
    log "icons: $DATA_HOME/icons/hicolor (${#ICONS[@]} files); metainfo: $DATA_HOME/metainfo"
}

# Refreshes the desktop's caches for the folders this script wrote to, when the tools exist.
# A cache file that appears only now is recorded, so uninstall takes it away again.
refresh_caches() {
    local applications="$DATA_HOME/applications" hicolor="$DATA_HOME/icons/hicolor" existed
    if command -v update-desktop-database >/dev/null 2>&1; then
        existed=0; [ -e "$applications/mimeinfo.cache" ] && existed=1
        update-desktop-database -q "$applications" || warn "update-desktop-database $applications failed"
        if [ "$existed" -eq 0 ] && [ -e "$applications/mimeinfo.cache" ]; then
            record file "$applications/mimeinfo.cache"
        fi
    fi
    # Without the theme's index.theme (usual under ~/.local) there is no cache to update.
    if command -v gtk-update-icon-cache >/dev/null 2>&1 && [ -f "$hicolor/index.theme" ]; then
        existed=0; [ -e "$hicolor/icon-theme.cache" ] && existed=1
        gtk-update-icon-cache -q -t -f "$hicolor" || warn "gtk-update-icon-cache $hicolor failed"
        if [ "$existed" -eq 0 ] && [ -e "$hicolor/icon-theme.cache" ]; then
            record file "$hicolor/icon-theme.cache"
        fi
    fi
}

roll_back() {
    local rc=$?
    trap - EXIT
    if [ "$rc" -ne 0 ] && [ -f "$MANIFEST" ]; then
        warn "the install failed; taking back what it added"
        bash "$PACKAGING/uninstall.sh" --app-root "$APP_ROOT" --quiet || warn "see $MANIFEST for what is left"
    fi
    exit "$rc"
}

main() {
    log "installing $BUNDLE (version $(tr -d '[:space:]' <"$BUNDLE/_internal/VERSION" 2>/dev/null || echo unknown))"
    remove_earlier_install
    check_nothing_in_the_way
    trap roll_back EXIT
    install_bundle
    install_links
    install_share_files
    refresh_caches
    trap - EXIT
    log "installed; remove with: $APP_ROOT/uninstall.sh (or packaging/uninstall.sh)"
}

main
