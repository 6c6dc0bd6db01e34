#!/usr/bin/env bash
# Builds libibverbs.so.1 (+ the libibverbs.so symlink) from the ibverbs-compat staticlib and prints
# its path: <target>/release/lib/libibverbs.so.1, where <target> is $CARGO_TARGET_DIR or
# <repo>/target. Use it through LD_LIBRARY_PATH=<that dir>; the system's libibverbs is untouched.
#
# Why a staticlib linked by cc and not a cdylib: Debian's programs import every symbol with a
# version (ibv_open_device@IBVERBS_1.1, ...), so the library must define those versions. A Rust
# cdylib cannot carry them here: rust-lld leaves every symbol at Base, and GNU ld rejects rustc's
# own anonymous version script together with ours. So cargo builds the staticlib and cc links it
# whole into a shared object with libibverbs.map as the only version script.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$repo/target}"
case "$target" in /*) ;; *) target="$repo/$target" ;; esac

cargo build --quiet --release -p ibverbs-compat --manifest-path "$repo/Cargo.toml"

archive="$target/release/libibverbs_compat.a"
map="$here/libibverbs.map"
out="$target/release/lib"
so="$out/libibverbs.so.1"
mkdir -p "$out"

# Relink only when the archive, the map or this script is newer than the library.
if [[ ! -e "$so" || "$archive" -nt "$so" || "$map" -nt "$so" || "${BASH_SOURCE[0]}" -nt "$so" ]]; then
    cc -shared -o "$so.tmp" \
        -Wl,-soname,libibverbs.so.1 \
        -Wl,--version-script="$map" \
        -Wl,--whole-archive "$archive" -Wl,--no-whole-archive \
        -Wl,--gc-sections -Wl,-z,defs \
        -lpthread -ldl -lm -lrt -lgcc_s -lc
    mv -f "$so.tmp" "$so"
fi
ln -sfn libibverbs.so.1 "$out/libibverbs.so"
echo "$so"
