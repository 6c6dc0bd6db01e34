#!/usr/bin/env bash
# The rdma-core stage: Debian's unmodified rdma-core 44 programs (ibverbs-utils, perftest 4.5,
# python3-pyverbs) over this project's libibverbs.so.1 (hca/ibverbs, built by build.sh into
# <target>/release/lib) and the built-in device model, whose RoCE v2 port lets two processes on
# this host talk (server on SERVER_IP, client on CLIENT_IP, each binding UDP 4791 there).
#
# Each case prints `PASS <name>` (with its figures) or `FAIL <name>: <why>` (with the tail of each
# program's output; everything is kept in <target>/ibverbs-stage/cases/<name>/). At the end the
# cases that ran must be exactly those named in expected.txt (next to this script), all passed.
# perftest's result rows go to <target>/ibverbs-stage/perftest.txt.
#
# Exit status: 0 when every expected case ran and passed; 1 on any failure (a build that fails, a
# program that exits nonzero, times out or prints something else than the check wants, a missing
# or unexpected case); 3 for a partial debug run (IBV_STAGE_FILTER set: what ran passed, but not
# everything ran). The one exception: a needed Debian package that is missing and cannot be
# fetched — judged from the output of the apt command that failed — prints "SKIPPED: <reason>"
# and exits 0.
#
# Environment: IBV_STAGE_FILTER (a bash regex; only cases whose name matches run), CASE_TIMEOUT
# (seconds per program, default 60), SERVER_IP / CLIENT_IP (default 127.0.0.1 / 127.0.0.2),
# PP_ITERS (ibv_rc_pingpong -n, default 200), PT_ITERS (perftest -n, default 200).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
cd "$REPO"
export DEBIAN_FRONTEND=noninteractive
FILTER=${IBV_STAGE_FILTER:-}
T=${CASE_TIMEOUT:-60}
SERVER_IP=${SERVER_IP:-127.0.0.1}
CLIENT_IP=${CLIENT_IP:-127.0.0.2}
PP_ITERS=${PP_ITERS:-200}
PT_ITERS=${PT_ITERS:-200}
PY=/usr/bin/python3  # Debian's python3, which pyverbs is built for (not a python3 earlier on PATH)
DEV=vmw_pvrdma0
T0=$(date +%s)

# shellcheck source=tests/stage-lib.sh
. "$HERE/../stage-lib.sh"

# --- 1. Debian packages ---------------------------------------------------------------------------
need_packages ibverbs-utils perftest python3-pyverbs libibverbs-dev
[ -x "$PY" ] || fail "$PY is missing (python3-pyverbs needs it)"

# --- 2. Our library and the hca tool --------------------------------------------------------------
echo "+ bash hca/ibverbs/build.sh"
bash hca/ibverbs/build.sh
echo "+ cargo build --release -p hca"
cargo build --release -p hca
TARGET=$(cargo metadata --format-version 1 --no-deps | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
LIB=$TARGET/release/lib
HCA=$TARGET/release/hca
[ -f "$LIB/libibverbs.so.1" ] || fail "build.sh left no $LIB/libibverbs.so.1"
[ -x "$HCA" ] || fail "no $HCA"
OUT=$TARGET/ibverbs-stage
rm -rf "$OUT"; mkdir -p "$OUT/cases"
PERF=$OUT/perftest.txt
: >"$PERF"
# Every program below runs with our library first and no device file from the caller's shell.
LIBENV=(env -u HCA_CONFIG -u HCA_DEVICES "LD_LIBRARY_PATH=$LIB")

# --- 3. Helpers -----------------------------------------------------------------------------------
# Runs "${SRV[@]}" in the background and, once it listens on TCP $PORT, "${CLI[@]}"; their
# output goes to $D/server.log and $D/client.log. Succeeds when both exit 0; otherwise prints why.
# A server left waiting by a failed client gets 5 s to notice, then is stopped.
pair() {
  timeout -k 5 "$T" "${SRV[@]}" >"$D/server.log" 2>&1 &
  local spid=$! crc=0 src=0 i
  if ! wait_listen "$PORT" "$spid"; then
    kill "$spid" 2>/dev/null || true
    wait "$spid" || src=$?
    echo "the server did not listen on TCP $PORT (server $(status_text "$src"))"
    return 1
  fi
  timeout -k 5 "$T" "${CLI[@]}" >"$D/client.log" 2>&1 || crc=$?
  if [ "$crc" != 0 ]; then
    for ((i = 0; i < 100; i++)); do kill -0 "$spid" 2>/dev/null || break; sleep 0.05; done
    kill "$spid" 2>/dev/null || true
  fi
  wait "$spid" || src=$?
  [ "$crc" = 0 ] && [ "$src" = 0 ] && return 0
  echo "client $(status_text "$crc"), server $(status_text "$src")"
  return 1
}

# --- 4. Cases -------------------------------------------------------------------------------------
RDMA_PROGRAMS=(ibv_devices ibv_devinfo ibv_rc_pingpong ibv_ud_pingpong ibv_uc_pingpong ibv_srq_pingpong ib_send_lat ib_send_bw ib_write_lat ib_write_bw ib_read_lat ib_read_bw ib_atomic_lat ib_atomic_bw)

# Every program (and pyverbs's device module) resolves libibverbs.so.1 to ours, with symbol
# versions, and the dynamic loader runs our copy.
case_loads_our_library() {
  local p path line mod
  mod=$("$PY" -c 'import importlib.util as u; print(u.find_spec("pyverbs.device").origin)') || { echo "pyverbs.device not found"; return 1; }
  for p in "${RDMA_PROGRAMS[@]}" "$mod"; do
    if [[ $p == /* ]]; then path=$p; else path=$(command -v "$p") || { echo "$p is not installed"; return 1; }; fi
    "${LIBENV[@]}" ldd "$path" >"$D/ldd.log" 2>&1 || { echo "ldd $path failed"; return 1; }
    line=$(grep 'libibverbs\.so\.1 =>' "$D/ldd.log") || { echo "$p does not link libibverbs.so.1"; return 1; }
    [[ $line == *"=> $LIB/libibverbs.so.1 ("* ]] || { echo "$p resolves $line"; return 1; }
    if grep -q 'no version information' "$D/ldd.log"; then echo "$p: $(grep -m1 'no version information' "$D/ldd.log")"; return 1; fi
  done
  "${LIBENV[@]}" LD_DEBUG=libs ibv_devices >"$D/ld_debug.log" 2>&1 || { echo "LD_DEBUG=libs ibv_devices failed"; return 1; }
  grep -q "calling init: $LIB/libibverbs.so.1\$" "$D/ld_debug.log" || { echo "the loader did not initialise $LIB/libibverbs.so.1"; return 1; }
  echo "${#RDMA_PROGRAMS[@]} programs and pyverbs load $LIB/libibverbs.so.1"
}

# ibv_devices lists exactly vmw_pvrdma0 with the node GUID hca devinfo reports.
case_ibv_devices() {
  local guid rc=0 rows
  guid=$("$HCA" devinfo -v | awk '$1 == "node_guid:" { gsub(":", "", $2); print $2 }')
  [[ $guid =~ ^[0-9a-f]{16}$ ]] || { echo "hca devinfo -v shows no node_guid"; return 1; }
  "${LIBENV[@]}" timeout -k 5 "$T" ibv_devices >"$D/out" 2>"$D/ibv_devices.log" || rc=$?
  [ "$rc" = 0 ] || { echo "ibv_devices $(status_text "$rc")"; return 1; }
  rows=$(awk '/^ *------/ { h = 1; next } h' "$D/out")
  [ "$(awk '{ print $1, $2 }' <<<"$rows")" = "$DEV $guid" ] || { echo "expected one row '$DEV $guid', got:"; echo "$rows"; return 1; }
  echo "$DEV $guid"
}

# ibv_devinfo ARGS over HCA_DEVICES=$1 prints what `hca $2 devinfo ARGS` prints, line for line,
# and nothing on stderr.
devinfo_equal() {
  local devs=$1 hca_opts=$2 rc=0
  shift 2
  # shellcheck disable=SC2086 # hca_opts is a word list
  "$HCA" $hca_opts devinfo "$@" >"$D/hca.out" 2>"$D/hca_devinfo.log" || { echo "hca $hca_opts devinfo $* failed"; return 1; }
  [ -s "$D/hca.out" ] || { echo "hca devinfo $* printed nothing"; return 1; }
  "${LIBENV[@]}" "HCA_DEVICES=$devs" timeout -k 5 "$T" ibv_devinfo "$@" >"$D/ibv.out" 2>"$D/ibv_devinfo.log" || rc=$?
  [ "$rc" = 0 ] || { echo "ibv_devinfo $* $(status_text "$rc")"; return 1; }
  [ ! -s "$D/ibv_devinfo.log" ] || { echo "ibv_devinfo $* wrote to stderr"; return 1; }
  if ! diff -u --label "hca devinfo $*" --label "ibv_devinfo $*" "$D/hca.out" "$D/ibv.out" >"$D/diff"; then
    echo "ibv_devinfo $* differs from hca devinfo $* (-hca +ibv_devinfo):"
    cat "$D/diff"
    return 1
  fi
  echo "$(wc -l <"$D/ibv.out") lines equal"
}

# `hca run --roce ADDR -- ibv_devinfo -v`: the wrapper's library path and HCA_DEVICES.
case_hca_run_devinfo() {
  local rc=0
  "$HCA" --roce "$SERVER_IP" devinfo -v >"$D/hca.out" 2>"$D/hca_devinfo.log" || { echo "hca devinfo -v failed"; return 1; }
  env -u HCA_DEVICES -u HCA_CONFIG -u LD_LIBRARY_PATH timeout -k 5 "$T" "$HCA" run --roce "$SERVER_IP" -- ibv_devinfo -v >"$D/ibv.out" 2>"$D/hca_run.log" || rc=$?
  [ "$rc" = 0 ] || { echo "hca run -- ibv_devinfo -v $(status_text "$rc")"; return 1; }
  grep -q "::ffff:$SERVER_IP, RoCE v2" "$D/ibv.out" || { echo "no RoCE v2 GID ::ffff:$SERVER_IP in ibv_devinfo -v"; return 1; }
  diff -u --label "hca devinfo -v" --label "hca run -- ibv_devinfo -v" "$D/hca.out" "$D/ibv.out" >"$D/diff" || { echo "outputs differ:"; cat "$D/diff"; return 1; }
  echo "$(wc -l <"$D/ibv.out") lines equal"
}

# One ibv_rc_pingpong end's output ($1, its log) for $2 iterations of $3 bytes, whose local GID
# is ::ffff:$4 and remote ::ffff:$5: both result lines, and no page that -c found invalid.
pingpong_output_ok() {
  local log=$1 iters=$2 size=$3 me=$4 peer=$5
  grep -qE "^$((size * iters * 2)) bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec\$" "$log" || { echo "$(basename "$log"): no '$((size * iters * 2)) bytes in ... Mbit/sec' line"; return 1; }
  grep -qE "^$iters iters in [0-9.]+ seconds = [0-9.]+ usec/iter\$" "$log" || { echo "$(basename "$log"): no '$iters iters in ... usec/iter' line"; return 1; }
  ! grep -q 'invalid data' "$log" || { echo "$(basename "$log"): $(grep -m1 'invalid data' "$log")"; return 1; }
  grep -qE "local address: .*GID ::ffff:$me\$" "$log" || { echo "$(basename "$log"): local GID is not ::ffff:$me"; return 1; }
  grep -qE "remote address: .*GID ::ffff:$peer\$" "$log" || { echo "$(basename "$log"): remote GID is not ::ffff:$peer"; return 1; }
}

# The GID options of the pingpong and perftest cases: `-g 1` / `-x 1` (the port's first address
# at index 1) unless GIDX is set: GIDX=0 passes index 0 (the first address too: docs/roce.md
# "The GID table"), GIDX= (empty) passes none, leaving the GID to the program.
gid_opt() { [ -z "${GIDX-1}" ] || echo "$1 ${GIDX-1}"; }

# ibv_rc_pingpong server and client over RoCE v2 (GID 1), -c: SIZE, then its extra options.
# SERVER_KEYS (extra keys of the server's model spec, e.g. link faults) is empty unless set.
case_rc_pingpong() {
  local size=$1
  shift
  PORT=$(free_port) || { echo "no free TCP port"; return 1; }
  local opts=(-p "$PORT" -d "$DEV" -i 1 $(gid_opt -g) -m 1024 -s "$size" -n "$PP_ITERS" -c "$@")
  SRV=("${LIBENV[@]}" "HCA_DEVICES=model,roce=$SERVER_IP${SERVER_KEYS:-}" ibv_rc_pingpong "${opts[@]}")
  CLI=("${LIBENV[@]}" "HCA_DEVICES=model,roce=$CLIENT_IP" ibv_rc_pingpong "${opts[@]}" "$SERVER_IP")
  pair || return 1
  pingpong_output_ok "$D/server.log" "$PP_ITERS" "$size" "$SERVER_IP" "$CLIENT_IP" || return 1
  pingpong_output_ok "$D/client.log" "$PP_ITERS" "$size" "$CLIENT_IP" "$SERVER_IP" || return 1
  grep -h 'usec/iter' "$D/client.log"
}

# ibv_srq_pingpong server and client over RoCE v2 (GID 1): $1 QPs on each end receiving from
# that end's one SRQ, messages of $2 bytes, then its extra options; -c checks every buffer. Each
# end lists one local and one remote address per QP.
case_srq_pingpong() {
  local qps=$1 size=$2 f
  shift 2
  PORT=$(free_port) || { echo "no free TCP port"; return 1; }
  local opts=(-p "$PORT" -d "$DEV" -i 1 -g 1 -m 1024 -q "$qps" -s "$size" -n "$PP_ITERS" -c "$@")
  SRV=("${LIBENV[@]}" "HCA_DEVICES=model,roce=$SERVER_IP" ibv_srq_pingpong "${opts[@]}")
  CLI=("${LIBENV[@]}" "HCA_DEVICES=model,roce=$CLIENT_IP" ibv_srq_pingpong "${opts[@]}" "$SERVER_IP")
  pair || return 1
  pingpong_output_ok "$D/server.log" "$PP_ITERS" "$size" "$SERVER_IP" "$CLIENT_IP" || return 1
  pingpong_output_ok "$D/client.log" "$PP_ITERS" "$size" "$CLIENT_IP" "$SERVER_IP" || return 1
  for f in server client; do
    [ "$(grep -c 'local address:' "$D/$f.log")" = "$qps" ] || { echo "$f.log: not $qps local addresses"; return 1; }
    [ "$(grep -c 'remote address:' "$D/$f.log")" = "$qps" ] || { echo "$f.log: not $qps remote addresses"; return 1; }
  done
  grep -h 'usec/iter' "$D/client.log"
}

# ibv_ud_pingpong server and client over RoCE v2 (GID 1), -c: SIZE (at most the port's MTU,
# 1024: UD carries one packet per message), then its extra options.
case_ud_pingpong() {
  local size=$1
  shift
  PORT=$(free_port) || { echo "no free TCP port"; return 1; }
  local opts=(-p "$PORT" -d "$DEV" -i 1 $(gid_opt -g) -s "$size" -n "$PP_ITERS" -c "$@")
  SRV=("${LIBENV[@]}" "HCA_DEVICES=model,roce=$SERVER_IP" ibv_ud_pingpong "${opts[@]}")
  CLI=("${LIBENV[@]}" "HCA_DEVICES=model,roce=$CLIENT_IP" ibv_ud_pingpong "${opts[@]}" "$SERVER_IP")
  pair || return 1
  pingpong_output_ok "$D/server.log" "$PP_ITERS" "$size" "$SERVER_IP" "$CLIENT_IP" || return 1
  pingpong_output_ok "$D/client.log" "$PP_ITERS" "$size" "$CLIENT_IP" "$SERVER_IP" || return 1
  grep -h 'usec/iter' "$D/client.log"
}

# ibv_rc_pingpong over a lossy link: the server's model drops 5 % of the packets both ways
# (a fixed seed), so both ends recover through retransmission and still end with every payload
# checked (-c), the last acknowledgement included (ibv_destroy_qp lingers for it).
case_rc_pingpong_lossy() {
  SERVER_KEYS=",link-loss=0.05,link-seed=1" PP_ITERS=100 case_rc_pingpong 4096 "$@"
}

# A device list that cannot be made: ibv_devinfo and ibv_rc_pingpong exit with their "No IB
# devices found" failure (255, 1), after one `libibverbs: ...` line saying why, never hanging.
case_bad_devices() {
  local spec want rc out
  while IFS='|' read -r spec want; do
    for p in ibv_devinfo ibv_rc_pingpong; do
      rc=0
      out=$("${LIBENV[@]}" "HCA_DEVICES=$spec" timeout -k 5 10 "$p" 2>&1) || rc=$?
      printf '%s\n' "== HCA_DEVICES='$spec' $p: $rc" "$out" >>"$D/bad_devices.log"
      case $p:$rc in ibv_devinfo:255 | ibv_rc_pingpong:1) ;; *) echo "HCA_DEVICES='$spec' $p: $(status_text "$rc")"; return 1 ;; esac
      grep -qF "libibverbs: $want" <<<"$out" || { echo "HCA_DEVICES='$spec' $p: no 'libibverbs: $want' line"; return 1; }
      grep -qx 'No IB devices found' <<<"$out" || { echo "HCA_DEVICES='$spec' $p: no 'No IB devices found'"; return 1; }
    done
  done <<EOF2
garbage|device spec "garbage": expected
;;|HCA_DEVICES=";;" names no device
model,foo=1|device spec "model,foo=1": "foo=1": unknown key
model,roce=192.0.2.1|cannot open device spec 1 (model): cannot bind UDP 192.0.2.1:4791
vfio:0000:00:1f.7|cannot open device spec 1 (vfio:0000:00:1f.7)
EOF2
  echo "5 bad device lists refused"
}

# ibv_rc_pingpong told no GID (no -g) sends no GRH, which RoCE needs: the server's RTR is refused
# with EINVAL (as Linux's rdma_check_ah_attr refuses it) and it exits 1 "Failed to modify QP to
# RTR". With HCA_DEBUG=1 our library says why on stderr; without it, nothing but the program's
# own lines.
case_rc_pingpong_no_gid_reason() {
  local dbg want='^libibverbs: invalid argument: RoCE needs a global route'
  for dbg in 1 0; do
    PORT=$(free_port) || { echo "no free TCP port"; return 1; }
    local opts=(-p "$PORT" -d "$DEV" -i 1 -s 64 -n 2)
    SRV=("${LIBENV[@]}" "HCA_DEBUG=$dbg" "HCA_DEVICES=model,roce=$SERVER_IP" ibv_rc_pingpong "${opts[@]}")
    CLI=("${LIBENV[@]}" "HCA_DEBUG=$dbg" "HCA_DEVICES=model,roce=$CLIENT_IP" ibv_rc_pingpong "${opts[@]}" "$SERVER_IP")
    if pair; then echo "HCA_DEBUG=$dbg: ibv_rc_pingpong without -g connected over RoCE"; return 1; fi
    cp "$D/server.log" "$D/server.debug$dbg.log"
    grep -qx 'Failed to modify QP to RTR' "$D/server.log" || { echo "HCA_DEBUG=$dbg: no 'Failed to modify QP to RTR' from the server"; return 1; }
    if [ "$dbg" = 1 ]; then
      grep -qE "$want" "$D/server.log" || { echo "HCA_DEBUG=1: the server's stderr has no reason line"; return 1; }
      grep -m1 -E "$want" "$D/server.log"
    elif grep -q '^libibverbs:' "$D/server.log"; then
      echo "HCA_DEBUG=0: a libibverbs line on stderr"; return 1
    fi
  done
}

# ibv_uc_pingpong: pvrdma has no UC QPs (Linux's pvrdma_create_qp takes RC, UD and GSI only and
# answers EOPNOTSUPP; QEMU 7.2's device takes RC and UD), so ibv_create_qp(IBV_QPT_UC) fails and
# the program says "Couldn't create QP" and exits 1 before any connection: a clean refusal, no
# crash or hang. Run once as a server (it fails before listening) and once as a client.
case_uc_pingpong_refused() {
  local rc out role
  for role in server client; do
    local args=(-p "$(free_port)" -d "$DEV" -i 1 -g 1)
    [ "$role" = client ] && args+=("$SERVER_IP")
    rc=0
    out=$("${LIBENV[@]}" "HCA_DEVICES=model" timeout -k 5 "$T" ibv_uc_pingpong "${args[@]}" 2>&1) || rc=$?
    printf '%s\n' "== $role: $rc" "$out" >>"$D/uc_pingpong.log"
    [ "$rc" = 1 ] || { echo "$role: $(status_text "$rc"), expected exit status 1"; return 1; }
    grep -qx "Couldn't create QP" <<<"$out" || { echo "$role: no \"Couldn't create QP\" line"; return 1; }
  done
  echo "ibv_create_qp(IBV_QPT_UC) refused (server and client): Couldn't create QP, exit status 1"
}

# This project's `hca pingpong --roce` (its own model, no libibverbs) as the server, Debian's
# ibv_rc_pingpong over our library as the client; the server checks every message it receives.
case_hca_pingpong_interop() {
  local size=4096
  PORT=$(free_port) || { echo "no free TCP port"; return 1; }
  SRV=("$HCA" --roce "$SERVER_IP" pingpong -p "$PORT" -g 1 -s "$size" -n "$PP_ITERS")
  CLI=("${LIBENV[@]}" "HCA_DEVICES=model,roce=$CLIENT_IP" ibv_rc_pingpong -p "$PORT" -d "$DEV" -g 1 -s "$size" -n "$PP_ITERS" -c "$SERVER_IP")
  pair || return 1
  grep -q "^payload verified: $PP_ITERS messages of $size bytes\$" "$D/server.log" || { echo "hca pingpong did not verify $PP_ITERS messages"; return 1; }
  pingpong_output_ok "$D/server.log" "$PP_ITERS" "$size" "$SERVER_IP" "$CLIENT_IP" || return 1
  pingpong_output_ok "$D/client.log" "$PP_ITERS" "$size" "$CLIENT_IP" "$SERVER_IP" || return 1
  grep -h 'usec/iter' "$D/client.log"
}

# perftest's result row (the first line after the `#bytes ...` header) of log $1, if any.
perftest_row() { awk '/^ *#bytes/ { h = 1; next } h && NF { print; exit }' "$1"; }

# perftest TEST (ib_TEST) server and client over RoCE v2 (-x 1): SIZE, then extra options. The
# client's result row must be there, for SIZE and PT_ITERS, all numbers.
case_perftest() {
  local test=$1 size=$2 row srow
  shift 2
  PORT=$(free_port) || { echo "no free TCP port"; return 1; }
  local opts=(-d "$DEV" -i 1 $(gid_opt -x) -p "$PORT" -F -s "$size" -n "$PT_ITERS" "$@")
  SRV=("${LIBENV[@]}" "HCA_DEVICES=model,roce=$SERVER_IP" "ib_$test" "${opts[@]}")
  CLI=("${LIBENV[@]}" "HCA_DEVICES=model,roce=$CLIENT_IP" "ib_$test" "${opts[@]}" "$SERVER_IP")
  pair || return 1
  if grep -qi 'completion with error' "$D/server.log" "$D/client.log"; then echo "$(grep -hi -m1 'completion with error' "$D/server.log" "$D/client.log")"; return 1; fi
  row=$(perftest_row "$D/client.log")
  [ -n "$row" ] || { echo "the client printed no result table"; return 1; }
  read -r -a f <<<"$row"
  [ "${f[0]}" = "$size" ] && [ "${f[1]}" = "$PT_ITERS" ] || { echo "result row is not for $size bytes x $PT_ITERS: $row"; return 1; }
  [[ $row =~ ^[[:space:]]*[0-9]+([[:space:]]+[0-9]+(\.[0-9]+)?)+[[:space:]]*$ ]] || { echo "result row is not all numbers: $row"; return 1; }
  srow=$(perftest_row "$D/server.log")
  printf '%-36s client:%s\n' "${D##*/}" "$(tr -s ' \t' ' ' <<<"$row")" | tee -a "$PERF"
  [ -z "$srow" ] || printf '%-36s server:%s\n' "${D##*/}" "$(tr -s ' \t' ' ' <<<"$srow")" | tee -a "$PERF"
}

# pyverbs_loopback.py over HCA_DEVICES=$1 (empty: through `hca run`'s default model) with GID $2.
case_pyverbs() {
  local devs=$1 gid=$2 rc=0
  if [ -n "$devs" ]; then
    "${LIBENV[@]}" "HCA_DEVICES=$devs" timeout -k 5 "$T" "$PY" "$HERE/pyverbs_loopback.py" --gid-index "$gid" >"$D/pyverbs.log" 2>&1 || rc=$?
  else
    env -u HCA_DEVICES -u HCA_CONFIG timeout -k 5 "$T" "$HCA" run -- "$PY" "$HERE/pyverbs_loopback.py" --gid-index "$gid" >"$D/pyverbs.log" 2>&1 || rc=$?
  fi
  [ "$rc" = 0 ] || { echo "pyverbs_loopback.py $(status_text "$rc")"; return 1; }
  grep -q 'sent, received and checked$' "$D/pyverbs.log" || { echo "no success line"; return 1; }
  tail -1 "$D/pyverbs.log"
}

ROCE="model,roce=$SERVER_IP"
run_case loads_our_library case_loads_our_library
run_case ibv_devices case_ibv_devices
run_case ibv_devinfo devinfo_equal model ""
run_case ibv_devinfo_v devinfo_equal model "" -v
run_case ibv_devinfo_d_i devinfo_equal model "" -d "$DEV" -i 1
run_case ibv_devinfo_roce devinfo_equal "$ROCE" "--roce $SERVER_IP"
run_case ibv_devinfo_v_roce devinfo_equal "$ROCE" "--roce $SERVER_IP" -v
run_case ibv_devinfo_d_i_roce devinfo_equal "$ROCE" "--roce $SERVER_IP" -d "$DEV" -i 1
run_case hca_run_devinfo case_hca_run_devinfo
for size in 1 4096 65536; do
  run_case "rc_pingpong_${size}" case_rc_pingpong "$size"
  run_case "rc_pingpong_${size}_events" case_rc_pingpong "$size" -e
done
run_case rc_pingpong_4096_new_send case_rc_pingpong 4096 -N
# GID index 0: ibv_rc_pingpong -g 0, ibv_ud_pingpong -g 0 (without -g at all they send no GRH,
# which RoCE needs: refused at RTR / ibv_create_ah, as Linux's rdma_check_ah_attr refuses it)
GIDX=0 run_case rc_pingpong_gid_0 case_rc_pingpong 4096
GIDX=0 run_case ud_pingpong_gid_0 case_ud_pingpong 1024
run_case rc_pingpong_no_gid_reason case_rc_pingpong_no_gid_reason
for size in 1 1024; do
  run_case "ud_pingpong_${size}" case_ud_pingpong "$size"
  run_case "ud_pingpong_${size}_events" case_ud_pingpong "$size" -e
done
run_case rc_pingpong_4096_lossy case_rc_pingpong_lossy
run_case srq_pingpong_4096 case_srq_pingpong 16 4096
run_case srq_pingpong_4096_events case_srq_pingpong 16 4096 -e
run_case srq_pingpong_1_q4 case_srq_pingpong 4 1
run_case srq_pingpong_65536_q8_events case_srq_pingpong 8 65536 -e
run_case bad_devices case_bad_devices
run_case uc_pingpong_refused case_uc_pingpong_refused
run_case hca_pingpong_to_rc_pingpong case_hca_pingpong_interop
for test in send_lat send_bw write_lat write_bw read_lat read_bw; do
  run_case "${test}_2" case_perftest "$test" 2
  run_case "${test}_65536" case_perftest "$test" 65536
  # perftest refuses -e for RDMA WRITE ("Events feature not available on WRITE verb"):
  # ib_write_lat polls memory for the peer's writes, ib_write_bw's responder sees no completion.
  [[ $test == write_* ]] || run_case "${test}_events" case_perftest "$test" 4096 -e
  # perftest 4.5 posts through ibv_wr_* only on the mlx5 and EFA devices it knows by vendor part
  # ID and falls back to ibv_post_send elsewhere, so on vmw_pvrdma0 this runs the same path as
  # the default; it stays so that a perftest which changes that cannot slip past.
  run_case "${test}_old_post_send" case_perftest "$test" 4096 --use_old_post_send
done
# perftest's --use-srq: each end's QP receives from an SRQ of --rx-depth WQEs.
run_case send_bw_srq case_perftest send_bw 4096 --use-srq
# perftest without -x: it picks the port's GID itself (index 0 here)
GIDX= run_case send_bw_default_gid case_perftest send_bw 4096
run_case send_bw_srq_events case_perftest send_bw 4096 --use-srq -e
# UD (-c UD): messages up to the MTU (perftest refuses more).
for test in send_lat send_bw; do
  run_case "${test}_ud_2" case_perftest "$test" 2 -c UD
  run_case "${test}_ud_1024" case_perftest "$test" 1024 -c UD
  run_case "${test}_ud_events" case_perftest "$test" 1024 -c UD -e
done
# UD QPs receiving from an SRQ.
run_case send_bw_ud_srq case_perftest send_bw 1024 -c UD --use-srq
# Atomics, both operations (-A): 8 bytes, the only size perftest takes for them. As for the
# tests above, perftest 4.5 posts them through ibv_post_send here (ibv_wr_atomic_* only on the
# mlx5 and EFA devices it knows).
for test in atomic_lat atomic_bw; do
  run_case "${test}_fetch_add" case_perftest "$test" 8 -A FETCH_AND_ADD
  run_case "${test}_cmp_swap" case_perftest "$test" 8 -A CMP_AND_SWAP
done
run_case pyverbs_loopback case_pyverbs "" 0
run_case pyverbs_roce case_pyverbs "$ROCE" 1

# --- 5. The verdict -------------------------------------------------------------------------------
echo "perftest rows in $PERF"
stage_verdict "$HERE/expected.txt" "rdma-core"
