#!/usr/bin/env bash
# Runs every fuzz target of tests/fuzz for SECONDS each (default 60), starting from a copy of its
# committed corpus (tests/fuzz/corpus/<target>; what the run adds goes to a temporary folder, so
# the repository stays clean). Fails on the first crash, leak, timeout or out-of-memory input
# (libFuzzer keeps it in tests/fuzz/artifacts/<target>/); prints each target's executions and
# coverage. Needs cargo-fuzz (`cargo install cargo-fuzz --locked`) and only the stable toolchain:
# without a sanitizer (`-s none`) cargo-fuzz asks for nothing nightly.
set -euo pipefail
secs=${1:-60}
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
fuzz=(--fuzz-dir tests/fuzz --sanitizer none)
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "cargo-fuzz is not installed: cargo install cargo-fuzz --locked" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cargo fuzz build "${fuzz[@]}"
mapfile -t targets < <(cargo fuzz list --fuzz-dir tests/fuzz)
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  if [ -d "tests/fuzz/corpus/$t" ]; then
    cp -R "tests/fuzz/corpus/$t/." "$work/$t/"
  fi
  echo "+ cargo fuzz run ${fuzz[*]} $t -- -max_total_time=$secs"
  # -timeout: one input taking this long is a hang; -rss_limit_mb: the process's memory bound.
  if ! cargo fuzz run "${fuzz[@]}" "$t" "$work/$t" -- \
      -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$work/$t.log" 2>&1; then
    tail -n 60 "$work/$t.log" >&2
    echo "FAILED: fuzz target $t (input kept in tests/fuzz/artifacts/$t/)" >&2
    exit 1
  fi
  runs=$(awk '/^stat::number_of_executed_units:/ {print $2}' "$work/$t.log")
  cov=$(grep -E '^#[0-9]+' "$work/$t.log" | tail -n 1 | grep -oE 'cov: [0-9]+ ft: [0-9]+' || true)
  rate=$(awk '/^stat::average_exec_per_sec:/ {print $2}' "$work/$t.log")
  echo "fuzz $t: ${runs:-?} executions in ${secs}s (${rate:-?}/s), ${cov:-no coverage line}, no crash"
done

# What the fuzzers found that is not a crash (a leak: the device kept alive after teardown) is a
# regression test of the fuzz crate, run on the committed inputs; so is the check that the
# committed cm_mad seeds are what their exchanges send.
echo "+ (cd tests/fuzz && cargo test --release --test leaks --test cm_mad_seeds)"
(cd tests/fuzz && cargo test --release --test leaks --test cm_mad_seeds)
