#!/usr/bin/env bash
# The real-QEMU stage: runs the driver's real-device tests (tests/tests/qemu_real.rs) against QEMU
# 7.2's pvrdma device. QEMU needs a host RDMA device, which this machine's kernel lacks, so QEMU runs
# inside a small TCG VM ("L1") whose Debian kernel has soft-RoCE (rdma_rxe): the VM boots a busybox
# initramfs that mounts this machine's / read-only over 9p and a work folder read-write, chroots
# into it, creates rxe0 and runs the test binary built here. Each test starts its own QEMU 7.2 (no
# guest OS: -S and -qtest) and drives its pvrdma function with the driver over qtest.
#
# The stage expects exactly the tests named in expected-tests.txt (next to this script): the
# binary's own list (`--list --ignored`) must equal it, and a run passes only when every one of
# them printed `ok`. A run in which a test did not run, or none ran, fails.
#
# In the same boot, after those tests, the soft-RoCE interop cases run (l1-rxe.sh): the model's
# RoCE v2 port (`hca pingpong --roce`, tests/src/bin/roce_rdma/main.rs, and Debian's ibv_ud_pingpong /
# ibv_srq_pingpong and tests/rxe/ud_peer.c over our libibverbs.so.1) against Linux's rdma_rxe over
# a veth pair, with Debian's unmodified ibv_rc_pingpong / ibv_ud_pingpong / ibv_srq_pingpong and
# small C programs built here against the system's libibverbs (tests/rxe/rdma_peer.c, ud_peer.c)
# on rxe's side. They are checked the same way
# against expected-rxe.txt: every case named there must print `ok`, and no other case may run.
# The run prints the cases' figures (`NUMBERS: TCG ...`, TCG-emulated, so only relative) and what
# was seen of rxe's behaviour (`OBSERVED: ...`).
#
# Exit status: 0 when every expected real-device test ran and passed; 1 on any failure (a package
# that installs wrong, QEMU that is not 7.2 or lacks pvrdma, a VM that does not boot, a timeout, a
# failing or missing test, a test list that does not match); 3 for a partial debug run
# (TEST_FILTER set: the tests that ran passed, but the stage did not run them all). The one
# exception: a package that cannot be fetched — judged from the output of the apt command that
# failed, and only of that one — prints "SKIPPED: <reason>" on a line of its own and exits 0.
#
# Environment: RUNS (how many times to boot L1 and run the tests, default 1), L1_TIMEOUT (seconds
# per boot, default 720), TEST_THREADS (parallel tests in L1, default 2), WORK (work folder,
# default /tmp/pvrdma-qemu), TEST_FILTER (a test-name filter passed to the test binary, for
# debugging: such a run never passes the stage), RXE_ONLY=1 (skip the real-device tests and run
# only the soft-RoCE cases, for debugging: never a stage pass), RDMACM_ONLY=1 (of the soft-RoCE
# cases only the RDMA CM ones, l1-rdmacm.sh: never a stage pass), RXE_TIMEOUT (seconds for all the
# soft-RoCE cases in L1, default 420), RXE_ITERS_SMALL / RXE_ITERS_LARGE (iterations of the
# figures' 64 B / 64 KiB ping-pongs, default 500 / 50).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
WORK=${WORK:-/tmp/pvrdma-qemu}
RUNS=${RUNS:-1}
L1_TIMEOUT=${L1_TIMEOUT:-720}
TEST_THREADS=${TEST_THREADS:-2}
export DEBIAN_FRONTEND=noninteractive

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
T0=$(now_ms)
lap() { echo "== [$(( $(now_ms) - T0 )) ms] $*"; }
fail() { echo "FAILED: $*" >&2; exit 1; }
skip() { echo; echo "SKIPPED: $*"; exit 0; }

mkdir -p "$WORK" "$WORK/debs" "$WORK/out"

# --- 1. Debian packages --------------------------------------------------------------------------
# ibverbs-utils (ibv_rc_pingpong, ibv_ud_pingpong, ibv_srq_pingpong), libibverbs-dev and gcc (the
# C peer) and tcpdump (a capture of the interop traffic) are for the soft-RoCE cases; iproute2 has
# `rdma`; rdmacm-utils (rping, ucmatose, udaddy, cmtime) and librdmacm1 for the RDMA CM cases.
PKGS=(qemu-system-x86 ibverbs-providers iproute2 kmod busybox-static cpio ibverbs-utils libibverbs-dev gcc libc6-dev tcpdump rdmacm-utils librdmacm1)
qemu_ok() { dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null | grep -q '^1:7\.2'; }
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
qemu_ok || [[ " ${missing[*]} " == *" qemu-system-x86 "* ]] || missing+=(qemu-system-x86)
# Each apt command writes its own log, and only the failing command's own log decides whether
# the failure was a fetch (SKIPPED) or anything else (FAILED).
apt_log() { echo "$WORK/out/apt-$1.log"; }
apt_fetch_failed() { grep -qE 'Failed to fetch|Unable to fetch|Temporary failure resolving|Could not resolve|Unable to connect' "$1"; }
APT_OPTS=(-q -o DPkg::Lock::Timeout=300)
updated=0
apt_update() {
  [ "$updated" = 1 ] && return 0
  lap "apt-get update"
  local log; log=$(apt_log update)
  apt-get "${APT_OPTS[@]}" update >"$log" 2>&1 || { apt_fetch_failed "$log" && skip "apt-get update cannot reach Debian's archive ($(grep -m1 -E 'Failed|Unable|resolv' "$log"))"; fail "apt-get update failed (see $log)"; }
  updated=1
}
if ((${#missing[@]})); then
  apt_update
  lap "apt-get install ${missing[*]}"
  want=()
  for p in "${PKGS[@]}"; do [ "$p" = qemu-system-x86 ] && want+=('qemu-system-x86=1:7.2*') || want+=("$p"); done
  log=$(apt_log install)
  if ! apt-get "${APT_OPTS[@]}" install -y --no-install-recommends "${want[@]}" >"$log" 2>&1; then
    apt_fetch_failed "$log" && skip "a package cannot be fetched ($(grep -m1 -E 'Failed to fetch|Unable to fetch' "$log"))"
    grep -qE "Version '1:7\.2\*' for 'qemu-system-x86' was not found" "$log" && fail "Debian offers no qemu-system-x86 1:7.2*: $(apt-cache policy qemu-system-x86 | tr '\n' ' ')"
    tail -20 "$log" >&2; fail "apt-get install failed (see $log)"
  fi
fi
qemu_ok || fail "qemu-system-x86 is $(dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null), not 1:7.2*"
QEMU_VERSION=$(qemu-system-x86_64 --version | head -1)
echo "$QEMU_VERSION" | grep -qE 'version 7\.2(\.|[^0-9])' || fail "qemu-system-x86_64 --version says: $QEMU_VERSION"
qemu-system-x86_64 -device help 2>/dev/null | grep -q '"pvrdma"' || fail "this QEMU has no pvrdma device (-device help does not list it)"
QEMU_PKG=$(dpkg-query -W -f='${Version}' qemu-system-x86)
lap "$QEMU_VERSION, with pvrdma; Debian package qemu-system-x86 $QEMU_PKG"

# --- 2. The L1 kernel: Debian's image package, downloaded and unpacked (not installed) -------------
KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
if [ -z "$KPKG" ]; then apt_update; KPKG=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}'); fi
[ -n "$KPKG" ] || fail "cannot tell which kernel package linux-image-amd64 names"
KDEB=$(ls "$WORK/debs/${KPKG}"_*.deb 2>/dev/null | head -1 || true)
if [ -z "$KDEB" ]; then
  lap "download $KPKG"
  log=$(apt_log download-1)
  (cd "$WORK/debs" && apt-get "${APT_OPTS[@]}" download "$KPKG" >"$log" 2>&1) || {
    apt_update
    log=$(apt_log download-2)
    (cd "$WORK/debs" && apt-get "${APT_OPTS[@]}" download "$KPKG" >"$log" 2>&1) || { apt_fetch_failed "$log" && skip "the kernel package $KPKG cannot be fetched"; fail "apt-get download $KPKG failed (see $log)"; }
  }
  KDEB=$(ls "$WORK/debs/${KPKG}"_*.deb | head -1)
fi
if [ ! -f "$WORK/kroot/.from" ] || [ "$(cat "$WORK/kroot/.from")" != "$KDEB" ]; then
  lap "unpack $(basename "$KDEB")"
  rm -rf "$WORK/kroot" && dpkg-deb -x "$KDEB" "$WORK/kroot"
  KV=$(ls "$WORK/kroot/lib/modules" | head -1)
  depmod -b "$WORK/kroot" "$KV"
  echo "$KDEB" > "$WORK/kroot/.from"
fi
KV=$(ls "$WORK/kroot/lib/modules" | head -1)
VMLINUZ="$WORK/kroot/boot/vmlinuz-$KV"
[ -f "$VMLINUZ" ] || fail "no kernel image in $KDEB"

# --- 3. The initramfs ----------------------------------------------------------------------------
lap "build initramfs ($KV)"
WORK="$WORK" bash "$HERE/build-initramfs.sh" "$KV" >/dev/null || fail "initramfs build failed"

# --- 4. The test binary (built here, run in L1 through the 9p root) -------------------------------
lap "build the real-device tests"
BUILD_LOG="$WORK/out/build.log"
( cd "$REPO" && cargo test --release -p tests --test qemu_real --no-run --message-format=json-render-diagnostics ) \
  >"$BUILD_LOG.json" 2>"$BUILD_LOG" || { tail -30 "$BUILD_LOG" >&2; fail "building the real-device tests failed"; }
TESTBIN=$(grep -o '"executable":"[^"]*qemu_real[^"]*"' "$BUILD_LOG.json" | tail -1 | sed 's/.*"executable":"\(.*\)"/\1/')
[ -x "$TESTBIN" ] || fail "cannot find the qemu_real test binary"
# L1 sees this machine's / read-only, but with a tmpfs over /tmp: a target folder under /tmp (a CI
# clone's, or CARGO_TARGET_DIR) is invisible there, so the binary travels in the work folder.
mkdir -p "$WORK/bin" && cp "$TESTBIN" "$WORK/bin/qemu_real" || fail "cannot copy the test binary"
TESTBIN="$WORK/bin/qemu_real"
echo "   $TESTBIN"
# The tests this stage must run: the binary's list has to be the committed one.
EXPECTED_FILE="$HERE/expected-tests.txt"
mapfile -t EXPECTED < <(grep -vE '^\s*(#|$)' "$EXPECTED_FILE" | sort)
mapfile -t LISTED < <("$TESTBIN" --list --ignored --format terse 2>/dev/null | sed -n 's/: test$//p' | sort)
((${#EXPECTED[@]})) || fail "$EXPECTED_FILE names no test"
if [ "${EXPECTED[*]}" != "${LISTED[*]}" ]; then
  diff <(printf '%s\n' "${EXPECTED[@]}") <(printf '%s\n' "${LISTED[@]}") >&2 || true
  fail "the real-device tests in the binary (> above) differ from $EXPECTED_FILE (< above)"
fi
echo "   ${#EXPECTED[@]} expected tests (tests/qemu/expected-tests.txt)"
mapfile -t EXPECTED_RXE < <(grep -vE '^\s*(#|$)' "$HERE/expected-rxe.txt" | sed 's/^/rxe::/' | sort)
((${#EXPECTED_RXE[@]})) || fail "$HERE/expected-rxe.txt names no case"
echo "   ${#EXPECTED_RXE[@]} expected soft-RoCE cases (tests/qemu/expected-rxe.txt)"

# --- 4b. The soft-RoCE cases' programs: the hca tool, roce_rdma, rxe_capture, the C peer, and our
# libibverbs.so.1 (hca/ibverbs/build.sh; Debian's ibv_ud_pingpong / ibv_srq_pingpong and the UD
# peer tests/rxe/ud_peer.c run over it) --
# A program that does not build leaves its cases without a binary: they fail in L1 (and so the
# stage), but the others still run and tell what they can.
lap "build the soft-RoCE interop programs"
INTEROP_LOG="$WORK/out/build-interop.log"
build_failures=()
: > "$INTEROP_LOG"
bin_of() { grep -o "\"executable\":\"[^\"]*/$1\"" "$INTEROP_LOG.json" | tail -1 | sed 's/.*"executable":"\(.*\)"/\1/'; }
rm -f "$WORK/bin/hca" "$WORK/bin/roce_rdma" "$WORK/bin/rxe_capture" "$WORK/bin/rdma_peer" "$WORK/bin/ud_peer"
rm -rf "$WORK/lib" && mkdir -p "$WORK/lib"
for target in "hca --bin hca" "tests --bin roce_rdma" "tests --bin rxe_capture"; do
  set -- $target
  if ( cd "$REPO" && cargo build --release -p "$1" "${@:2}" --message-format=json-render-diagnostics ) >"$INTEROP_LOG.json" 2>>"$INTEROP_LOG"; then
    exe=$(bin_of "$3" || true); [ -x "$exe" ] && cp "$exe" "$WORK/bin/$3" || build_failures+=("$3 (no executable)")
  else
    build_failures+=("$3"); tail -15 "$INTEROP_LOG" >&2
  fi
done
cc -O2 -Wall -std=gnu11 -o "$WORK/bin/rdma_peer" "$REPO/tests/rxe/rdma_peer.c" -libverbs >>"$INTEROP_LOG" 2>&1 \
  || { build_failures+=(rdma_peer); tail -15 "$INTEROP_LOG" >&2; }
cc -O2 -Wall -std=gnu11 -o "$WORK/bin/ud_peer" "$REPO/tests/rxe/ud_peer.c" -libverbs >>"$INTEROP_LOG" 2>&1 \
  || { build_failures+=(ud_peer); tail -15 "$INTEROP_LOG" >&2; }
if so=$(cd "$REPO" && bash hca/ibverbs/build.sh 2>>"$INTEROP_LOG") && [ -f "$so" ]; then
  cp "$so" "$WORK/lib/libibverbs.so.1" || build_failures+=(libibverbs.so.1)
else
  build_failures+=(libibverbs.so.1); tail -15 "$INTEROP_LOG" >&2
fi
# Our librdmacm.so.1 (hca/rdmacm/build.sh), beside it: the RDMA CM cases' end over the model.
if [ -f "$REPO/hca/rdmacm/build.sh" ] && (cd "$REPO" && bash hca/rdmacm/build.sh >>"$INTEROP_LOG" 2>&1) \
  && [ -n "${so:-}" ] && [ -f "$(dirname "$so")/librdmacm.so.1" ]; then
  cp "$(dirname "$so")/librdmacm.so.1" "$WORK/lib/librdmacm.so.1" || build_failures+=(librdmacm.so.1)
else
  build_failures+=("librdmacm.so.1 (hca/rdmacm/build.sh)"); tail -15 "$INTEROP_LOG" >&2
fi
((${#build_failures[@]})) && echo "   NOT BUILT: ${build_failures[*]} (their cases will fail; see $INTEROP_LOG)"
ls "$WORK/bin" "$WORK/lib" | grep -v : | sed '/^$/d; s/^/   built: /'

# --- 5. Boot L1, run the tests, collect the result -------------------------------------------------
cp "$HERE/l1-stage2.sh" "$WORK/l1-stage2.sh"
cp "$HERE/l1-rxe.sh" "$WORK/l1-rxe.sh"
cp "$HERE/l1-rdmacm.sh" "$WORK/l1-rdmacm.sh"
printf '#!/bin/sh\nexec /usr/bin/kmod modprobe -d %s/kroot "$@"\n' "$WORK" > "$WORK/modprobe-wrap"
chmod +x "$WORK/modprobe-wrap" "$WORK/l1-stage2.sh"
L1PID=
L1PIDFILE="$WORK/out/l1.pid"
cleanup() {
  # The timeout wrapper forwards the signal to QEMU; the pidfile catches a QEMU that outlives it.
  local q; q=$(cat "$L1PIDFILE" 2>/dev/null || true)
  if [ -n "${L1PID:-}" ] && kill -0 "$L1PID" 2>/dev/null; then kill "$L1PID" 2>/dev/null || true; fi
  if [ -n "$q" ] && kill -0 "$q" 2>/dev/null; then sleep 1; kill -9 "$q" 2>/dev/null || true; fi
  rm -f "$L1PIDFILE"
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM
failures=0
partial=0
declare -a summary
# Says which expected tests (the array named $2) printed `ok` in the log $1: "all N expected
# tests passed", "partial debug run: ..." (TEST_FILTER set, no expected test failed; or RXE_ONLY
# set and $1 is the real-device log) or "MISSING ..." (some did not pass).
check_ran() {
  local -n exp=$2
  local ok=() missing=() extra=() t
  if [ "${RXE_ONLY:-0}" = 1 ] && [ "$2" = EXPECTED ]; then echo "partial debug run: RXE_ONLY=1, the real-device tests did not run"; return; fi
  mapfile -t ok < <(sed -n 's/^test \(.*\) \.\.\. ok$/\1/p' "$1" | sort -u)
  # Here-strings, not `printf | grep -q`: under pipefail, grep -q leaving at its first match can
  # kill the printf still writing (SIGPIPE), which made a test that passed count as missing.
  for t in "${exp[@]}"; do grep -qxF -- "$t" <<<"$(printf '%s\n' "${ok[@]}")" || missing+=("$t"); done
  for t in "${ok[@]}"; do grep -qxF -- "$t" <<<"$(printf '%s\n' "${exp[@]}")" || extra+=("$t"); done
  if ((${#extra[@]})); then echo "UNEXPECTED tests ran: ${extra[*]}"; return; fi
  if ((${#missing[@]} == 0)); then echo "all ${#exp[@]} expected tests passed"; return; fi
  if [ -n "${TEST_FILTER:-}" ] && [ "$2" = EXPECTED ] && ((${#ok[@]})) && ! grep -qE '^test .* \.\.\. FAILED$' "$1"; then
    echo "partial debug run: ${#ok[@]} of ${#exp[@]} expected tests ran and passed (TEST_FILTER=$TEST_FILTER)"; return
  fi
  echo "MISSING: ${#missing[@]} of ${#exp[@]} expected tests did not pass: ${missing[*]}"
}
for run in $(seq 1 "$RUNS"); do
  rm -rf "$WORK/out/tests.log" "$WORK/out/tests.rc" "$WORK/out/qemu" "$WORK/out/rxe.log" "$WORK/out/rxe.rc" "$WORK/out/rxe-run.log" "$WORK/out/rxe"
  cat > "$WORK/l1-env" <<EOV
WORK=$WORK
TESTBIN=$TESTBIN
TEST_THREADS=$TEST_THREADS
TEST_FILTER=${TEST_FILTER:-}
QEMU_PKG=$QEMU_PKG
RXE_ONLY=${RXE_ONLY:-0}
RDMACM_ONLY=${RDMACM_ONLY:-0}
RXE_TIMEOUT=${RXE_TIMEOUT:-420}
RXE_ITERS_SMALL=${RXE_ITERS_SMALL:-500}
RXE_ITERS_LARGE=${RXE_ITERS_LARGE:-50}
EOV
  CONSOLE="$WORK/out/l1-console-$run.log"
  lap "run $run/$RUNS: boot L1 (TCG, kernel $KV) and run the tests there (bound: ${L1_TIMEOUT}s)"
  tb=$(now_ms)
  timeout --kill-after=10 "$L1_TIMEOUT" qemu-system-x86_64 -accel tcg -cpu max -m "${L1_MEM:-2G}" -smp 2 \
    -kernel "$VMLINUZ" -initrd "$WORK/initrd.cpio.gz" \
    -append "console=ttyS0 panic=-1 loglevel=4 PVRDMA_WORK=$WORK" \
    -display none -serial "file:$CONSOLE" -monitor none -no-reboot -nodefaults -pidfile "$L1PIDFILE" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$WORK,mount_tag=work,security_model=none" \
    -netdev user,id=n0,restrict=on -device virtio-net-pci,netdev=n0 &
  L1PID=$!
  set +e; wait "$L1PID"; l1rc=$?; set -e
  L1PID=
  cleanup
  te=$(now_ms)
  ready=$(grep -m1 -o 'L1-TS [0-9.]* rxe0 ready' "$CONSOLE" | awk '{print $2}' || true)
  testsdur=$(grep -m1 -o 'L1-TS [0-9.]* tests done after [0-9.]* s' "$CONSOLE" | awk '{print $6}' || true)
  if [ ! -f "$WORK/out/tests.rc" ]; then
    echo "---- L1 console (last 40 lines) ----"; tail -40 "$CONSOLE" || true
    [ "$l1rc" = 124 ] || [ "$l1rc" = 137 ] && why="timed out after ${L1_TIMEOUT}s" || why="exited ($l1rc) before the tests finished"
    [ -z "$ready" ] && why="$why; it never got rxe0 ready (did it boot?)"
    echo "   run $run: L1 $why"
    summary+=("run $run: FAILED (L1 $why)")
    failures=$((failures + 1)); continue
  fi
  rc=$(cat "$WORK/out/tests.rc")
  cp "$WORK/out/tests.log" "$WORK/out/tests-$run.log"
  # The test binary's own lines: per-test results, timings, and "test result: ...".
  grep -E '^(test |running |test result:|failures:|---- |thread |  |QEMU-|TIMING)' "$WORK/out/tests.log" | grep -vE '^test .*\.\.\. ignored$' || true
  [ -f "$WORK/out/qemu/timings.txt" ] && sort "$WORK/out/qemu/timings.txt"
  [ "$rc" = 0 ] || { echo "---- failing output ----"; sed -n '/^failures:/,$p' "$WORK/out/tests.log" | head -80; }
  result=$(grep -m1 '^test result:' "$WORK/out/tests.log" || echo "no result line")
  verdict=$(check_ran "$WORK/out/tests.log" EXPECTED)
  rxedur=$(grep -m1 -o 'L1-TS [0-9.]* rxe interop done after [0-9.]* s' "$CONSOLE" | awk '{print $7}' || true)
  echo "---- soft-RoCE interop (l1-rxe.sh; per-process logs in $WORK/out/rxe) ----"
  if [ -f "$WORK/out/rxe.rc" ]; then
    grep -E '^(test |NUMBERS:|OBSERVED:)' "$WORK/out/rxe.log" || true
    rxe_verdict=$(check_ran "$WORK/out/rxe.log" EXPECTED_RXE)
  else
    tail -20 "$WORK/out/rxe-run.log" 2>/dev/null || true
    rxe_verdict="MISSING: the soft-RoCE cases did not finish (L1 ended first)"
  fi
  ((${#build_failures[@]})) && rxe_verdict="$rxe_verdict; NOT BUILT: ${build_failures[*]}"
  summary+=("run $run: L1 wall $(( te - tb )) ms, rxe0 ready at ${ready:-?} s of L1 uptime, tests ${testsdur:-?} s: $result; $verdict")
  summary+=("run $run: soft-RoCE interop ${rxedur:-?} s: $rxe_verdict")
  if [ "$rc" != 0 ] || [[ "$verdict" != "all "* ]] || [[ "$rxe_verdict" != "all "* ]]; then
    [ "$rc" = 0 ] && [[ "$verdict" == "partial "* ]] && [[ "$rxe_verdict" == "all "* ]] && partial=$((partial + 1)) || failures=$((failures + 1))
  fi
done
trap - EXIT INT TERM
lap "done"
printf '%s\n' "${summary[@]}"
echo "QEMU under test: Debian package qemu-system-x86 $QEMU_PKG"
[ "$failures" = 0 ] || fail "$failures of $RUNS real-QEMU runs failed (logs in $WORK/out)"
if [ "$partial" != 0 ]; then
  echo "PARTIAL DEBUG RUN (TEST_FILTER=${TEST_FILTER:-}, RXE_ONLY=${RXE_ONLY:-0}): not a stage pass" >&2
  exit 3
fi
echo "real-QEMU stage: $RUNS of $RUNS runs passed, each running all ${#EXPECTED[@]} expected tests and all ${#EXPECTED_RXE[@]} soft-RoCE cases"
