#!/usr/bin/env bash
# Builds librdmacm.so.1 (+ the librdmacm.so symlink) from the rdmacm-compat staticlib and prints
# its path: <target>/release/lib/librdmacm.so.1, beside our libibverbs.so.1 (built first by
# hca/ibverbs/build.sh). Use both through LD_LIBRARY_PATH=<that dir>; the system's libraries are
# untouched.
#
# As for libibverbs (see hca/ibverbs/build.sh): cargo builds the staticlib and cc links it whole
# into a shared object with librdmacm.map as the only version script, so each symbol carries the
# version Debian's programs import (rdma_create_id@RDMACM_1.0, ...). It links against our
# libibverbs.so.1 (-L <that dir> -libverbs), so the ibv_* and hca_gsi_* it calls resolve to ours
# at run time through the same LD_LIBRARY_PATH.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$repo/target}"
case "$target" in /*) ;; *) target="$repo/$target" ;; esac

bash "$repo/hca/ibverbs/build.sh" >/dev/null
cargo build --quiet --release -p rdmacm-compat --manifest-path "$repo/Cargo.toml"

archive="$target/release/librdmacm_compat.a"
map="$here/librdmacm.map"
out="$target/release/lib"
so="$out/librdmacm.so.1"
verbs="$out/libibverbs.so.1"

# Every undefined symbol must resolve at link time (-z defs), in particular the GSI entry points
# of our libibverbs (hca_gsi_*@HCA_PRIVATE_1): a libibverbs without them is not ours.
if [[ ! -e "$so" || "$archive" -nt "$so" || "$map" -nt "$so" || "$verbs" -nt "$so" || "${BASH_SOURCE[0]}" -nt "$so" ]]; then
    cc -shared -o "$so.tmp" \
        -Wl,-soname,librdmacm.so.1 \
        -Wl,--version-script="$map" \
        -Wl,--whole-archive "$archive" -Wl,--no-whole-archive \
        -Wl,--gc-sections -Wl,-z,defs \
        -L"$out" -libverbs \
        -lpthread -ldl -lm -lrt -lgcc_s -lc
    mv -f "$so.tmp" "$so"
fi
ln -sfn librdmacm.so.1 "$out/librdmacm.so"
echo "$so"
