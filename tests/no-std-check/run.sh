#!/usr/bin/env bash
# Builds the no_std check staticlib (a std-linking dependency fails the build on its duplicate
# lang items), links it into a C program without Rust's std, and runs it.
set -euo pipefail
cd "$(dirname "$0")"
target=../../target/no-std-check
cargo build --release --target-dir "$target"
cc -o "$target/no-std-check" c/main.c "$target/release/libno_std_check.a"
"$target/no-std-check"
