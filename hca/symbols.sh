# Sourced by hca/ibverbs/check-symbols.sh and hca/rdmacm/check-symbols.sh (after build.sh): the
# checks they share, that a drop-in library of ours defines every versioned symbol Debian's
# programs and libraries import from the real one, and that the dynamic loader binds each of them
# against it. Sets `libdir` (<target>/release/lib, where build.sh puts the libraries) and keeps
# the result in `status` (0, or 1 once anything failed).
# shellcheck shell=bash

symbols_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$symbols_repo/target}"
case "$target" in /*) ;; *) target="$symbols_repo/$target" ;; esac
libdir="$target/release/lib"
status=0

# check_versions SO PREFIX FILE...: every "name version" with a version starting PREFIX that one of
# FILE imports must be defined by SO with that version. Prints the counts and what is missing.
check_versions() {
    local so=$1 prefix=$2
    shift 2
    [[ -e "$so" ]] || { echo "no $so: run build.sh first" >&2; exit 2; }
    local needed ours missing
    needed="$(for f in "$@"; do objdump -T "$f"; done |
        awk -v p="$prefix" 'NF >= 2 && /\*UND\*/ && $(NF-1) ~ p { v = $(NF-1); gsub(/[()]/, "", v); print $NF, v }' | sort -u)"
    ours="$(objdump -T "$so" |
        awk -v p="$prefix" 'NF >= 2 && !/\*UND\*/ && $(NF-1) ~ p && $NF !~ "^" p { v = $(NF-1); gsub(/[()]/, "", v); print $NF, v }' | sort -u)"
    missing="$(comm -23 <(echo "$needed") <(echo "$ours"))"
    echo "$(echo "$needed" | wc -l) symbols imported by $# files; ours defines $(echo "$ours" | wc -l)"
    if [[ -n "$missing" ]]; then
        echo "missing ($(echo "$missing" | wc -l)):"
        echo "$missing" | sed 's/^/  /'
        status=1
    fi
}

# load_check NAME OUTPUT: a loader failure in OUTPUT, the output of running or loading NAME.
load_check() {
    local err
    err="$(grep -E "symbol lookup error|version .* not found|undefined symbol|error while loading shared libraries|ImportError" <<<"$2" | head -1)"
    if [[ -n "$err" ]]; then
        echo "load failure: $1: $err"
        status=1
    fi
}

# load_programs LIBNAME PROGRAM...: each existing PROGRAM that links LIBNAME, run with `--help` and
# our libraries bound at load (LD_BIND_NOW: a missing symbol or version fails before main runs).
load_programs() {
    local name=$1 p
    shift
    for p in "$@"; do
        [[ -x "$p" ]] || continue
        grep -q "$name" <<<"$(ldd "$p" 2>/dev/null)" || continue
        load_check "$p" "$(LD_BIND_NOW=1 LD_LIBRARY_PATH="$libdir" timeout 10 "$p" --help </dev/null 2>&1 >/dev/null)"
    done
}

# existing FILE...: the FILEs that exist, one per line.
existing() {
    local f
    for f in "$@"; do [[ -e "$f" ]] && echo "$f"; done
    return 0
}
