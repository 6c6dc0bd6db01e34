#!/usr/bin/env bash
# After build.sh: checks that our libibverbs.so.1 defines every symbol@IBVERBS_* that Debian's
# rdma-core 44 programs and libraries import, with that version (prints the missing ones), and
# that the dynamic loader can bind each program against it (LD_BIND_NOW: every import resolved
# at load, so a missing symbol or version shows as "symbol lookup error" / "version ... not
# found" before main runs). Exit 1 if anything is missing.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$repo/target}"
case "$target" in /*) ;; *) target="$repo/$target" ;; esac
libdir="$target/release/lib"
so="$libdir/libibverbs.so.1"
[[ -e "$so" ]] || { echo "no $so: run build.sh first" >&2; exit 2; }

lib=/usr/lib/x86_64-linux-gnu
programs=(/usr/bin/ibv_* /usr/bin/ib_* /usr/bin/rping /usr/bin/cmtime /usr/bin/mckey /usr/bin/rdma_client
    /usr/bin/rdma_server /usr/bin/rdma_xclient /usr/bin/rdma_xserver /usr/bin/riostream /usr/bin/rstream
    /usr/bin/ucmatose /usr/bin/udaddy /usr/bin/udpong)
libraries=("$lib/librdmacm.so.1" "$lib/libmlx5.so.1" "$lib/libmlx4.so.1" "$lib/libefa.so.1" "$lib"/libibverbs/*.so)
mapfile -t pyverbs < <(dpkg -L python3-pyverbs 2>/dev/null | grep '\.so$')
files=()
for f in "${programs[@]}" "${libraries[@]}" "${pyverbs[@]}"; do
    [[ -e "$f" ]] && files+=("$f")
done

# "name version" of every IBVERBS import, and of every definition of ours.
imports() { for f in "$@"; do objdump -T "$f"; done | awk 'NF >= 2 && /\*UND\*/ && $(NF-1) ~ /IBVERBS/ { v = $(NF-1); gsub(/[()]/, "", v); print $NF, v }' | sort -u; }
needed="$(imports "${files[@]}")"
ours="$(objdump -T "$so" | awk 'NF >= 2 && !/\*UND\*/ && $(NF-1) ~ /IBVERBS/ && $NF !~ /^IBVERBS/ { v = $(NF-1); gsub(/[()]/, "", v); print $NF, v }' | sort -u)"
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
    err="$(grep -E "symbol lookup error|version .* not found|undefined symbol|error while loading shared libraries|ImportError" <<<"$2" | head -1)"
    if [[ -n "$err" ]]; then
        echo "load failure: $1: $err"
        status=1
    fi
}

# Load test: each program with our library bound at load.
for p in "${programs[@]}"; do
    [[ -x "$p" ]] || continue
    grep -q libibverbs <<<"$(ldd "$p" 2>/dev/null)" || continue
    load_check "$p" "$(LD_BIND_NOW=1 LD_LIBRARY_PATH="$libdir" timeout 10 "$p" --help </dev/null 2>&1 >/dev/null)"
done
# pyverbs: importing its modules loads its .so files (and libmlx5/libefa through them).
modules="pyverbs.device, pyverbs.pd, pyverbs.cq, pyverbs.qp, pyverbs.mr, pyverbs.providers.mlx5.mlx5dv, pyverbs.providers.efa.efadv"
load_check pyverbs "$(LD_BIND_NOW=1 LD_LIBRARY_PATH="$libdir" timeout 30 /usr/bin/python3 -c "import $modules" 2>&1)"
[[ $status == 0 ]] && echo "all imports defined with their versions; every program loads"
exit $status
