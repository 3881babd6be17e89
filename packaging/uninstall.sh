#!/usr/bin/env bash
# Remove what packaging/install.sh added for the current user, and nothing else.
#
#   packaging/uninstall.sh [--home DIR]
#
#   --home DIR  uninstall as if DIR were $HOME (XDG_DATA_HOME is then ignored); for tests
#
# Reads ${XDG_DATA_HOME:-~/.local/share}/io.cairn.Cairn/installed-files (the copy of this script
# installed beside it reads the one next to itself) and undoes it from the last line up: files and
# links go, the bundle folder goes, folders the install created go when they are empty. Folders that
# were there before, and Cairn's data (tasks, workspaces, vault in ~/.local/share/cairn), stay.
set -euo pipefail

SELF_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
APP_ID="io.cairn.Cairn"
MANIFEST_NAME="installed-files"

if [ -t 2 ]; then BOLD=$'\033[1m' YELLOW=$'\033[1;33m' RED=$'\033[1;31m' RESET=$'\033[0m'
else BOLD="" YELLOW="" RED="" RESET=""; fi
QUIET=0
log() { [ "$QUIET" -eq 1 ] || printf '%s[uninstall]%s %s\n' "$BOLD" "$RESET" "$*" >&2; }
warn() { printf '%s[uninstall] WARNING:%s %s\n' "$YELLOW" "$RESET" "$*" >&2; }
die() { printf '%s[uninstall] ERROR:%s %s\n' "$RED" "$RESET" "$*" >&2; exit 1; }

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

APP_ROOT=""
while [ "$#" -gt 0 ]; do
    case "$1" in
        --home|--prefix-home) [ "$#" -ge 2 ] || die "$1 needs a folder"; HOME="$2"; unset XDG_DATA_HOME; shift ;;
        --home=*|--prefix-home=*) HOME="${1#*=}"; unset XDG_DATA_HOME ;;
        --app-root) [ "$#" -ge 2 ] || die "--app-root needs a folder"; APP_ROOT="$2"; shift ;;  # install.sh's
        --quiet) QUIET=1 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
    shift
done

if [ -z "$APP_ROOT" ]; then
    if [ -f "$SELF_DIR/$MANIFEST_NAME" ]; then
        APP_ROOT="$SELF_DIR"
    else
        [ -n "${HOME:-}" ] && [ -d "$HOME" ] || die "the home folder '${HOME:-}' does not exist"
        HOME="$(cd "$HOME" && pwd -P)"
        APP_ROOT="${XDG_DATA_HOME:-$HOME/.local/share}/$APP_ID"
    fi
fi
MANIFEST="$APP_ROOT/$MANIFEST_NAME"
[ -f "$MANIFEST" ] || die "Cairn is not installed at $APP_ROOT (there is no $MANIFEST)"

mapfile -t ENTRIES <"$MANIFEST"
[ "${#ENTRIES[@]}" -gt 0 ] || die "$MANIFEST is empty"

# Folders whose desktop caches to refresh once the files in them are gone.
APPLICATION_DIRS=()
HICOLOR_DIRS=()

remove_entry() {
    local kind="$1" path="$2"
    case "$path" in /*) ;; *) warn "skipping '$path' in $MANIFEST: not an absolute path"; return ;; esac
    case "$kind" in
        tree)
            # Only ever the bundle folder inside the install's own folder.
            if [ "$(dirname "$path")" != "$APP_ROOT" ]; then
                warn "skipping $path in $MANIFEST: a tree outside $APP_ROOT"
            elif [ -d "$path" ] && [ ! -L "$path" ]; then
                rm -rf -- "$path"
            fi
            ;;
        file)
            if [ -f "$path" ] && [ ! -L "$path" ]; then
                rm -f -- "$path"
            elif [ -e "$path" ] || [ -L "$path" ]; then
                warn "left $path: it is no longer a plain file"
            fi
            case "$path" in
                */applications/*.desktop) APPLICATION_DIRS+=("$(dirname "$path")") ;;
                */icons/hicolor/*) HICOLOR_DIRS+=("${path%%/icons/hicolor/*}/icons/hicolor") ;;
            esac
            ;;
        link)
            if [ -L "$path" ]; then
                rm -f -- "$path"
            elif [ -e "$path" ]; then
                warn "left $path: it is no longer the symlink the install made"
            fi
            ;;
        dir)
            if [ -d "$path" ] && [ ! -L "$path" ]; then
                rmdir -- "$path" 2>/dev/null || log "kept $path: it is not empty"
            fi
            ;;
        *) warn "skipping an entry of unknown kind '$kind' in $MANIFEST" ;;
    esac
}

# Caches that were there before the install still list Cairn: rebuild them. (One the install
# created was in the manifest and is gone already, and a folder that is gone needs nothing.)
refresh_caches() {
    local dir
    if command -v update-desktop-database >/dev/null 2>&1; then
        for dir in ${APPLICATION_DIRS[@]+"${APPLICATION_DIRS[@]}"}; do
            if [ -f "$dir/mimeinfo.cache" ]; then
                update-desktop-database -q "$dir" || warn "update-desktop-database $dir failed"
            fi
        done
    fi
    if command -v gtk-update-icon-cache >/dev/null 2>&1 && [ "${#HICOLOR_DIRS[@]}" -gt 0 ]; then
        mapfile -t HICOLOR_DIRS < <(printf '%s\n' "${HICOLOR_DIRS[@]}" | sort -u)
        for dir in "${HICOLOR_DIRS[@]}"; do
            if [ -f "$dir/icon-theme.cache" ] && [ -f "$dir/index.theme" ]; then
                gtk-update-icon-cache -q -t -f "$dir" || warn "gtk-update-icon-cache $dir failed"
            fi
        done
    fi
}

main() {
    local i kind path
    log "removing Cairn installed at $APP_ROOT"
    for ((i = ${#ENTRIES[@]} - 1; i >= 0; i--)); do
        IFS=$'\t' read -r kind path <<<"${ENTRIES[$i]}"
        remove_entry "$kind" "$path"
    done
    refresh_caches
    if [ -e "$APP_ROOT" ]; then
        warn "$APP_ROOT is still there (it holds files the install did not put there)"
    fi
    log "done"
}

main
