#!/usr/bin/env bash
# After build.sh: checks that our librdmacm.so.1 defines every symbol@RDMACM_* that Debian's
# rdma-core 44 programs and libraries import, with that version (prints the missing ones), and
# that the dynamic loader can bind each program against it and our libibverbs.so.1 (LD_BIND_NOW:
# every import resolved at load, so a missing symbol or version shows as "symbol lookup error" /
# "version ... not found" before main runs). Exit 1 if anything is missing.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$repo/target}"
case "$target" in /*) ;; *) target="$repo/$target" ;; esac
libdir="$target/release/lib"
so="$libdir/librdmacm.so.1"
[[ -e "$so" ]] || { echo "no $so: run build.sh first" >&2; exit 2; }

lib=/usr/lib/x86_64-linux-gnu
programs=(/usr/bin/rping /usr/bin/ucmatose /usr/bin/udaddy /usr/bin/mckey /usr/bin/rdma_server /usr/bin/rdma_client
    /usr/bin/rdma_xserver /usr/bin/rdma_xclient /usr/bin/rcopy /usr/bin/rstream /usr/bin/riostream /usr/bin/udpong
    /usr/bin/cmtime /usr/bin/ib_* /usr/bin/qperf)
libraries=("$lib"/libfabric/*.so "$lib/libfabric.so.1" "$lib"/ucx/libuct_rdmacm*.so*)
files=()
for f in "${programs[@]}" "${libraries[@]}"; do
    [[ -e "$f" ]] && files+=("$f")
done

# "name version" of every RDMACM import, and of every definition of ours.
imports() { for f in "$@"; do objdump -T "$f"; done | awk 'NF >= 2 && /\*UND\*/ && $(NF-1) ~ /RDMACM/ { v = $(NF-1); gsub(/[()]/, "", v); print $NF, v }' | sort -u; }
needed="$(imports "${files[@]}")"
ours="$(objdump -T "$so" | awk 'NF >= 2 && !/\*UND\*/ && $(NF-1) ~ /RDMACM/ && $NF !~ /^RDMACM/ { v = $(NF-1); gsub(/[()]/, "", v); print $NF, v }' | sort -u)"
missing="$(comm -23 <(echo "$needed") <(echo "$ours"))"
status=0
echo "$(echo "$needed" | wc -l) symbols imported by ${#files[@]} files; ours defines $(echo "$ours" | wc -l)"
if [[ -n "$missing" ]]; then
    echo "missing ($(echo "$missing" | wc -l)):"
    echo "$missing" | sed 's/^/  /'
    status=1
fi

# A loader failure in the output `$2` of running `$1`.
load_check() {
    local err
    err="$(grep -E "symbol lookup error|version .* not found|undefined symbol|error while loading shared libraries" <<<"$2" | head -1)"
    if [[ -n "$err" ]]; then
        echo "load failure: $1: $err"
        status=1
    fi
}

# Load test: each program that links librdmacm with both our libraries bound at load.
for p in "${programs[@]}"; do
    [[ -x "$p" ]] || continue
    grep -q librdmacm <<<"$(ldd "$p" 2>/dev/null)" || continue
    load_check "$p" "$(LD_BIND_NOW=1 LD_LIBRARY_PATH="$libdir" timeout 10 "$p" --help </dev/null 2>&1 >/dev/null)"
done
# Libraries (libfabric, UCX's rdmacm transport): loaded with dlopen(RTLD_NOW) by python3's ctypes.
for l in "${libraries[@]}"; do
    [[ -e "$l" ]] || continue
    load_check "$l" "$(LD_LIBRARY_PATH="$libdir" timeout 30 /usr/bin/python3 -c "import ctypes, os; ctypes.CDLL('$l', mode=os.RTLD_NOW)" 2>&1)"
done
[[ $status == 0 ]] && echo "all imports defined with their versions; every program loads"
exit $status
