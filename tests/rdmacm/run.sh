#!/usr/bin/env bash
# The RDMA CM stage: Debian's unmodified rdmacm-utils 44 programs (rping, ucmatose, udaddy,
# rdma_server/rdma_client, rdma_xserver/rdma_xclient, cmtime, mckey, rstream, riostream, udpong),
# perftest 4.5 with -R, qperf -cm1 and libfabric's fi_pingpong over this project's librdmacm.so.1
# and libibverbs.so.1 (hca/rdmacm/build.sh, hca/ibverbs/build.sh: <target>/release/lib) and the
# device model's RoCE v2 port. Two processes per case, each with a model device of its own on a
# 127/8 address (HCA_DEVICES=model,roce=ADDR); the client is told only the server's address.
#
# Each case prints `PASS <name>` (with its figures) or `FAIL <name>: <why>` (with the tail of each
# program's output; everything is kept in <target>/rdmacm-stage/cases/<name>/). At the end the
# cases that ran must be exactly those named in expected.txt (next to this script), all passed:
# "rdmacm: N/M cases passed". expected.txt also says, for the programs whose feature the library
# may answer with ENOSYS / EOPNOTSUPP (multicast: mckey; rsockets: rstream, riostream, udpong),
# which outcome is the documented one: `<prog>` (it works) or `<prog>_refused` (the documented
# refusal, checked as such). The stage's time and the cmtime figures end the output.
#
# Exit status: 0 when every expected case ran and passed; 1 on any failure (a library that does
# not build or is not ours, a program that exits nonzero, times out or prints something else
# than its success output, a missing or unexpected case); 3 for a partial debug run
# (RDMACM_STAGE_FILTER set). A needed Debian package that cannot be fetched prints "SKIPPED:
# <reason>" and exits 0. The fi_pingpong case needs root (network namespaces and a veth pair)
# and fails, saying so, without it.
#
# Environment: RDMACM_STAGE_FILTER (a bash regex; only cases whose name matches run),
# CASE_TIMEOUT (seconds per program, default 60), CMTIME_RUNS (cmtime -c 1 runs for the setup
# median, default 11), UNREACHABLE_TIMEOUT (seconds the silent-peer case may take, default 150).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
cd "$REPO"
# shellcheck source=tests/stage-lib.sh
. "$HERE/../stage-lib.sh"
FILTER=${RDMACM_STAGE_FILTER:-}
T=${CASE_TIMEOUT:-60}
CMTIME_RUNS=${CMTIME_RUNS:-11}
T0=$(date +%s)
DEV=vmw_pvrdma0
EXPECTED=$HERE/expected.txt

# --- 1. Debian packages ---------------------------------------------------------------------------
need_packages rdmacm-utils librdmacm-dev perftest qperf libfabric-bin iproute2 python3

# --- 2. Our libraries ----------------------------------------------------------------------------
echo "+ bash hca/ibverbs/build.sh"
so=$(bash hca/ibverbs/build.sh) || fail "hca/ibverbs/build.sh failed"
LIB=$(dirname "$so")
[ -f hca/rdmacm/build.sh ] || fail "no hca/rdmacm/build.sh: our librdmacm.so.1 is not in this tree"
echo "+ bash hca/rdmacm/build.sh"
bash hca/rdmacm/build.sh || fail "hca/rdmacm/build.sh failed"
[ -f "$LIB/libibverbs.so.1" ] || fail "no $LIB/libibverbs.so.1"
[ -f "$LIB/librdmacm.so.1" ] || fail "hca/rdmacm/build.sh left no $LIB/librdmacm.so.1"
TARGET=$(dirname "$(dirname "$LIB")")
OUT=$TARGET/rdmacm-stage
rm -rf "$OUT"; mkdir -p "$OUT/cases"
FIGURES=$OUT/figures.txt
: >"$FIGURES"
# Every program runs with our libraries first and no device list from the caller's shell.
LIBENV=(env -u HCA_CONFIG -u HCA_DEVICES "LD_LIBRARY_PATH=$LIB")

# --- 3. Addresses ---------------------------------------------------------------------------------
# A fresh pair of 127/8 addresses (A, B = A + 1) per case, drawn at random in 127.16/12-127.254/16
# (not 127.0/16, where the host's own services listen) and skipped while UDP 4791 is bound on
# either or on the wildcard; a case that finds one taken all the same runs again (run_case).
new_addresses() {
  local i x y z
  for ((i = 0; i < 64; i++)); do
    x=$((16 + RANDOM % 239)) y=$((RANDOM % 256)) z=$((1 + RANDOM % 252))
    A=127.$x.$y.$z B=127.$x.$y.$((z + 1)) C=127.$x.$y.$((z + 2))
    udp_bound "$A" 4791 || udp_bound "$B" 4791 || udp_bound "$C" 4791 || return 0
  done
  fail "64 random 127/8 address triples all had UDP 4791 bound (a wildcard bind, e.g. rdma_rxe?)"
}
NEW_ADDRESSES=new_addresses
# A port for a case's rdma_cm listener: per process here (our library's port spaces), so any
# fixed one is safe; a fresh one per case keeps the logs apart.
CM_PORT=$((20000 + RANDOM % 10000))
next_port() { CM_PORT=$((CM_PORT + 1)); P=$CM_PORT; }

# --- 4. Helpers -----------------------------------------------------------------------------------
# The environment of a process whose device is on $1 (extra model keys in $2).
on() { E=("${LIBENV[@]}" "HCA_DEVICES=model,roce=$1${2:-}"); }

# Waits (at most 15 s) until the server process $2 has its model device on $1 open (UDP 4791
# bound there); its rdma_listen follows in the same thread, and a client that comes too early is
# rejected and run again (client).
wait_device() {
  local i
  for ((i = 0; i < 300; i++)); do
    udp_bound "$1" 4791 && { sleep 0.3; return 0; }
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# client LOG CMD...: runs the client; one rejected before anything connected (the listener was
# not there yet: rdmacm-utils print the event's name, perftest "Unexpected CM event ... 8", 8
# being RDMA_CM_EVENT_REJECTED) runs again, at most 3 times.
client() {
  local log=$1 rc i
  shift
  for i in 1 2 3; do
    rc=0; timeout -k 5 "$T" "$@" >"$log" 2>&1 || rc=$?
    [ "$rc" != 0 ] && grep -qE 'RDMA_CM_EVENT_REJECTED|Unexpected CM event .* 8$' "$log" && ! grep -qE 'ping data|data transfers|ESTABLISHED' "$log" || break
    cp "$log" "$log.try$i"; sleep 0.5
  done
  return "$rc"
}

# Runs "${SRV[@]}" (device on $SA) in the background and, once its device is open, "${CLI[@]}";
# output in $D/server.log and $D/client.log. Succeeds when both exit 0; otherwise says why. A
# server left waiting by a failed client gets 5 s, then is stopped. With KEEP_SERVER=1 the
# server is stopped once the client is done (one that serves until killed).
pair() {
  timeout -k 5 "$T" "${SRV[@]}" >"$D/server.log" 2>&1 &
  local spid=$! crc=0 src=0 i
  if ! wait_device "$SA" "$spid"; then
    kill "$spid" 2>/dev/null || true
    wait "$spid" || src=$?
    echo "the server never opened its device on $SA (server $(status_text "$src"))"
    return 1
  fi
  client "$D/client.log" "${CLI[@]}" || crc=$?
  if [ "${KEEP_SERVER:-0}" = 1 ]; then
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
  else
    if [ "$crc" != 0 ]; then
      for ((i = 0; i < 100; i++)); do kill -0 "$spid" 2>/dev/null || break; sleep 0.05; done
      kill "$spid" 2>/dev/null || true
    fi
    wait "$spid" || src=$?
  fi
  [ "$crc" = 0 ] && [ "$src" = 0 ] && return 0
  echo "client $(status_text "$crc"), server $(status_text "$src")"
  return 1
}

# Whether log $1 holds the line(s) $2 (a grep -E regex); else says so.
has() { grep -qE "$2" "$1" || { echo "$(basename "$1"): no line matching '$2'"; return 1; }; }

# --- 5. Cases -------------------------------------------------------------------------------------
CM_PROGRAMS=(rping ucmatose udaddy rdma_server rdma_client rdma_xserver rdma_xclient cmtime mckey rstream riostream udpong rcopy ib_send_bw ib_write_lat ib_read_bw qperf)

# Every program (and libfabric's verbs provider) resolves librdmacm.so.1 and libibverbs.so.1 to
# ours, with symbol versions.
case_loads_our_library() {
  local p path l lib fab
  fab=$(ls /usr/lib/*/libfabric.so.1 2>/dev/null | head -1)
  for p in "${CM_PROGRAMS[@]}" "$fab"; do
    [ -n "$p" ] || { echo "libfabric is not installed"; return 1; }
    if [[ $p == /* ]]; then path=$p; else path=$(command -v "$p") || { echo "$p is not installed"; return 1; }; fi
    "${LIBENV[@]}" ldd "$path" >"$D/ldd.log" 2>&1 || { echo "ldd $path failed"; return 1; }
    for lib in librdmacm.so.1 libibverbs.so.1; do
      l=$(grep "$lib =>" "$D/ldd.log") || { echo "$p does not link $lib"; return 1; }
      [[ $l == *"=> $LIB/$lib ("* ]] || { echo "$p resolves $l"; return 1; }
    done
    if grep -q 'no version information' "$D/ldd.log"; then echo "$p: $(grep -m1 'no version information' "$D/ldd.log")"; return 1; fi
  done
  echo "${#CM_PROGRAMS[@]} programs and libfabric.so.1 load $LIB/librdmacm.so.1 and $LIB/libibverbs.so.1"
}

# rping: server on the address named $1 (A or B), client on $2's, told only the server's address; 100 pings, -v prints each
# ("ping data: rdma-ping-N: ..." on the client, "server ping data: ..." on the server), -V
# validates each.
case_rping() {
  local srv=${!1} cli=${!2} n=100 got
  next_port; SA=$srv
  on "$srv"; SRV=("${E[@]}" rping -s -a "$srv" -p "$P" -v -V)
  on "$cli"; CLI=("${E[@]}" rping -c -a "$srv" -p "$P" -C "$n" -v -V)
  pair || return 1
  got=$(grep -c '^ping data: rdma-ping-' "$D/client.log" || true)
  [ "$got" = "$n" ] || { echo "client printed $got of $n 'ping data: rdma-ping-N' lines"; return 1; }
  got=$(grep -c '^server ping data: rdma-ping-' "$D/server.log" || true)
  [ "$got" -ge 1 ] || { echo "server printed no 'server ping data' line"; return 1; }
  ! grep -q 'data mismatch' "$D/client.log" || { echo "client: data mismatch"; return 1; }
  echo "$n pings from $cli to $srv, $got on the server"
}

# ucmatose, 4 connections, 10 messages each way on each; the server listens on the wildcard.
case_ucmatose() {
  local f
  next_port; SA=$A
  on "$A"; SRV=("${E[@]}" ucmatose -p "$P" -c 4)
  on "$B"; CLI=("${E[@]}" ucmatose -s "$A" -p "$P" -c 4)
  pair || return 1
  for f in server client; do
    has "$D/$f.log" '^data transfers complete$' && has "$D/$f.log" '^return status 0$' || return 1
  done
  echo "4 connections, 10 messages each way"
}

# udaddy: UD over RDMA_PS_UDP (SIDR_REQ / SIDR_REP), its fixed port 7174, server on the wildcard.
case_udaddy() {
  local f
  SA=$A
  on "$A"; SRV=("${E[@]}" udaddy)
  on "$B"; CLI=("${E[@]}" udaddy -s "$A")
  pair || return 1
  for f in server client; do
    has "$D/$f.log" '^data transfers complete$' && has "$D/$f.log" '^return status 0$' || return 1
  done
  echo "10 datagrams each way"
}

# rdma_server / rdma_client: rdma_create_ep, rdma_reg_msgs, rdma_post_recv / rdma_post_send and
# rdma_get_*_comp of <rdma/rdma_verbs.h>.
case_rdma_server() {
  next_port; SA=$A
  on "$A"; SRV=("${E[@]}" rdma_server -s "$A" -p "$P")
  on "$B"; CLI=("${E[@]}" rdma_client -s "$A" -p "$P")
  pair || return 1
  has "$D/server.log" '^rdma_server: end 0$' && has "$D/client.log" '^rdma_client: end 0$' || return 1
  echo "rdma_server: end 0, rdma_client: end 0"
}

# rdma_xserver / rdma_xclient over RC (-c r): the server on the wildcard.
case_rdma_xserver_rc() {
  next_port; SA=$A
  on "$A"; SRV=("${E[@]}" rdma_xserver -p "$P" -c r)
  on "$B"; CLI=("${E[@]}" rdma_xclient -s "$A" -p "$P" -c r)
  pair || return 1
  has "$D/server.log" 'rdma_xserver: end 0$' && has "$D/client.log" 'rdma_xclient: end 0$' || return 1
  echo "rdma_xserver: end 0, rdma_xclient: end 0"
}

# refused LOG REGEX CMD...: CMD must exit nonzero by itself (not killed, not timed out) and say
# why in a line matching REGEX.
refused() {
  local log=$1 re=$2 rc=0
  shift 2
  timeout -k 5 "$T" "$@" >"$log" 2>&1 || rc=$?
  case $rc in
    0) echo "$(basename "$log"): exited 0, expected a refusal"; return 1 ;;
    124 | 137) echo "$(basename "$log"): timed out after $T s, expected a refusal"; return 1 ;;
  esac
  ((rc < 128 || rc == 255)) || { echo "$(basename "$log"): killed by signal $((rc - 128))"; return 1; }
  grep -qE "$re" "$log" || { echo "$(basename "$log"): exit $rc without a line matching '$re'"; return 1; }
  echo "$(basename "$log" .log): exit $rc, $(grep -m1 -E "$re" "$log")"
}
NOTSUP='(Operation not supported|Function not implemented)'

# rdma_xserver / rdma_xclient over XRC (-c x): pvrdma has no XRC (Linux's vmw_pvrdma creates RC,
# UD and GSI QPs only). The client's rdma_create_ep creates its XRC_SEND QP at once, fails with
# EOPNOTSUPP or ENOSYS, says so and ends "end -1", before any connection. The server's listening
# endpoint has no QP yet (librdmacm creates it for each request), so it waits for a request that
# never comes: it must still be running, unharmed, when stopped.
case_rdma_xserver_xrc_refused() {
  local spid
  next_port
  on "$A"; timeout -k 5 "$T" "${E[@]}" rdma_xserver -p "$P" -c x >"$D/server.log" 2>&1 &
  spid=$!
  wait_device "$A" "$spid" || { echo "rdma_xserver -c x never opened its device: $(tail -2 "$D/server.log" | tr '\n' ' ')"; return 1; }
  on "$B"; refused "$D/client.log" "rdma_create_ep: $NOTSUP" "${E[@]}" rdma_xclient -s "$A" -p "$P" -c x || { kill "$spid"; return 1; }
  has "$D/client.log" 'rdma_xclient: end -1$' || { kill "$spid"; return 1; }
  kill -0 "$spid" 2>/dev/null || { echo "rdma_xserver -c x did not wait for a request: $(tail -2 "$D/server.log" | tr '\n' ' ')"; return 1; }
  kill "$spid"; wait "$spid" 2>/dev/null || true
}

# A REQ to a port nobody listens on: the listener's CM answers REJ (invalid service ID), rping -c
# prints "cma event RDMA_CM_EVENT_REJECTED, error N" and exits nonzero. Another rping listens on
# $A, on another port, so a CM is there to answer.
case_rping_rejected() {
  local hpid rc=0 t0
  next_port
  on "$A"; timeout -k 5 "$T" "${E[@]}" rping -s -a "$A" -p "$P" >"$D/holder.log" 2>&1 &
  hpid=$!
  wait_device "$A" "$hpid" || { echo "the listener on $A never opened its device"; return 1; }
  t0=$(date +%s%N)
  on "$B"; timeout -k 5 "$T" "${E[@]}" rping -c -a "$A" -p "$((P + 1))" -C 1 >"$D/client.log" 2>&1 || rc=$?
  kill "$hpid" 2>/dev/null || true; wait "$hpid" 2>/dev/null || true
  [ "$rc" != 0 ] || { echo "rping -c to an unused port exited 0"; return 1; }
  [ "$rc" != 124 ] && [ "$rc" != 137 ] || { echo "rping -c to an unused port timed out after $T s"; return 1; }
  has "$D/client.log" 'cma event RDMA_CM_EVENT_REJECTED' || return 1
  echo "$(grep -m1 REJECTED "$D/client.log") after $((($(date +%s%N) - t0) / 1000000)) ms"
}

# A peer that never answers (a UDP socket on $C:4791 that reads and drops): the REQ is sent
# again until the CM gives up, and rping -c reports RDMA_CM_EVENT_UNREACHABLE within the bound.
case_rping_unreachable() {
  local spid rc=0 t0 bound=${UNREACHABLE_TIMEOUT:-150}
  /usr/bin/python3 -c 'import socket,sys; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], 4791)); print("bound", flush=True)
while True: s.recv(4096)' "$C" >"$D/sink.log" 2>&1 &
  spid=$!
  for ((i = 0; i < 100; i++)); do grep -q bound "$D/sink.log" && break; sleep 0.05; done
  grep -q bound "$D/sink.log" || { kill $spid; echo "the silent peer could not bind $C:4791"; return 1; }
  next_port; t0=$(date +%s%N)
  on "$B"; timeout -k 5 "$bound" "${E[@]}" rping -c -a "$C" -p "$P" -C 1 >"$D/client.log" 2>&1 || rc=$?
  kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true
  [ "$rc" != 0 ] || { echo "rping -c to a silent peer exited 0"; return 1; }
  [ "$rc" != 124 ] && [ "$rc" != 137 ] || { echo "rping -c to a silent peer still waiting after $bound s"; return 1; }
  has "$D/client.log" 'RDMA_CM_EVENT_UNREACHABLE' || return 1
  echo "$(grep -m1 UNREACHABLE "$D/client.log") after $((($(date +%s%N) - t0) / 1000000)) ms"
}

# perftest with -R (rdma_cm: connection, and the exchange of the test's parameters, over the CM;
# no TCP). The client's result row must be there, for the size and iterations given.
case_perftest() {
  local test=$1 size=$2 iters=200 row
  next_port; SA=$A
  local opts=(-d "$DEV" -R -p "$P" -F -s "$size" -n "$iters")
  on "$A"; SRV=("${E[@]}" "ib_$test" "${opts[@]}")
  on "$B"; CLI=("${E[@]}" "ib_$test" "${opts[@]}" "$A")
  pair || return 1
  row=$(awk '/^ *#bytes/ { h = 1; next } h && NF { print; exit }' "$D/client.log")
  [ -n "$row" ] || { echo "the client printed no result table"; return 1; }
  read -r -a f <<<"$row"
  [ "${f[0]}" = "$size" ] && [ "${f[1]}" = "$iters" ] || { echo "result row is not for $size bytes x $iters: $row"; return 1; }
  printf 'ib_%s -R %s\n' "$test" "$(tr -s ' \t' ' ' <<<"$row")" | tee -a "$FIGURES"
}

# qperf -cm1 rc_lat rc_bw: qperf's own TCP control connection (-lp), the RC QPs through the CM.
case_qperf() {
  local port
  port=$(free_port) || { echo "no free TCP port"; return 1; }
  on "$A"; timeout -k 5 "$T" "${E[@]}" qperf -lp "$port" >"$D/server.log" 2>&1 &
  local spid=$! rc=0
  wait_listen "$port" "$spid" || { kill $spid 2>/dev/null; echo "qperf's server never listened on TCP $port"; return 1; }
  on "$B"; timeout -k 5 "$T" "${E[@]}" qperf -lp "$port" -cm1 -t 2 "$A" rc_lat rc_bw >"$D/client.log" 2>&1 || rc=$?
  kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true
  [ "$rc" = 0 ] || { echo "qperf -cm1 $(status_text "$rc")"; return 1; }
  has "$D/client.log" '^rc_lat:' && has "$D/client.log" 'latency *= *[0-9.]+ [mun]?s' || return 1
  has "$D/client.log" '^rc_bw:' && has "$D/client.log" 'bw *= *[0-9.]+ [KMG]?B/sec' || return 1
  ! grep -qiE 'failed|error' "$D/client.log" || { echo "client: $(grep -m1 -iE 'failed|error' "$D/client.log")"; return 1; }
  printf 'qperf -cm1 rc_lat %s, rc_bw %s\n' "$(awk '/latency/ { print $3, $4; exit }' "$D/client.log")" \
    "$(awk '/bw *=/ { print $3, $4; exit }' "$D/client.log")" | tee -a "$FIGURES"
}

# fi_pingpong -p verbs -e msg: libfabric's verbs provider takes its addresses from getifaddrs()
# and skips lo, so the two ends run in network namespaces of their own joined by a veth pair
# (needs root), each with a model device on its veth address. fi_getinfo() without a node makes
# the provider bind an id to localhost first, which succeeds as the wildcard (Linux's
# cma_any_addr) with no device, so the provider takes its addresses from the interfaces.
case_fi_pingpong() {
  [ "$(id -u)" = 0 ] || { echo "needs root (ip netns, a veth pair); run the stage as root"; return 1; }
  local na=rdmacm-fa-$$ nb=rdmacm-fb-$$ va=rcfa$$ vb=rcfb$$ aa=10.231.0.1 ab=10.231.0.2 rc=0 spid
  # shellcheck disable=SC2064 # the names are fixed now
  trap "ip netns del $na 2>/dev/null; ip netns del $nb 2>/dev/null" RETURN
  ip netns add "$na" && ip netns add "$nb" || { echo "ip netns add failed"; return 1; }
  ip link add "$va" netns "$na" type veth peer name "$vb" netns "$nb" || { echo "ip link add veth failed"; return 1; }
  ip -n "$na" addr add "$aa/24" dev "$va" && ip -n "$nb" addr add "$ab/24" dev "$vb" || return 1
  ip -n "$na" link set "$va" up && ip -n "$nb" link set "$vb" up && ip -n "$na" link set lo up && ip -n "$nb" link set lo up || return 1
  ip netns exec "$na" env "${LIBENV[@]:1}" "HCA_DEVICES=model,roce=$aa" timeout -k 5 "$T" fi_pingpong -p verbs -e msg -I 100 -S 4096 >"$D/server.log" 2>&1 &
  spid=$!
  local i
  for ((i = 0; i < 300; i++)); do
    ip netns exec "$na" ss -ltnH 'sport = :47592' | grep -q . && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.05
  done
  ip netns exec "$nb" env "${LIBENV[@]:1}" "HCA_DEVICES=model,roce=$ab" timeout -k 5 "$T" fi_pingpong -p verbs -e msg -I 100 -S 4096 "$aa" >"$D/client.log" 2>&1 || rc=$?
  local src=0
  if [ "$rc" != 0 ]; then sleep 2; kill "$spid" 2>/dev/null || true; fi
  wait "$spid" || src=$?
  [ "$rc" = 0 ] && [ "$src" = 0 ] || { echo "client $(status_text "$rc"), server $(status_text "$src")"; return 1; }
  local row; row=$(awk '$1 == "4k" || $1 == "4096" { print; exit }' "$D/client.log")
  [ -n "$row" ] || { echo "client printed no 4k result row"; return 1; }
  printf 'fi_pingpong verbs msg %s\n' "$(tr -s ' \t' ' ' <<<"$row")" | tee -a "$FIGURES"
}

# The four programs whose feature our library may refuse. mckey: multicast; the others run on
# rsockets. Which outcome is documented is expected.txt's `<prog>` or `<prog>_refused` line.
# A refusal is clean: the call answers ENOSYS / EOPNOTSUPP and the program exits by itself,
# nonzero, within the bound. rstream, riostream and udpong say nothing when rsocket() fails (they
# return its -1: exit 255), so for them rsocket() of our library is first called directly (its
# errno read), then the program must bind rsocket to ours and exit so.
# mckey reports a failed join as an event and still ends with "return status 0" (its
# connect_events() counts the error and carries on), so its refusal is the line, an exit by
# itself, and no data transferred.
case_mckey_refused() {
  local rc=0 re="mckey: failure joining: $NOTSUP|mckey: event: RDMA_CM_EVENT_(MULTICAST_ERROR|ADDR_ERROR)"
  on "$A"; timeout -k 5 "$T" "${E[@]}" mckey -m 239.1.2.3 -b "$A" -C 1 >"$D/receiver.log" 2>&1 || rc=$?
  [ "$rc" != 124 ] && [ "$rc" != 137 ] || { echo "mckey timed out after $T s, expected a refusal"; return 1; }
  ((rc < 128 || rc == 255)) || { echo "mckey killed by signal $((rc - 128))"; return 1; }
  has "$D/receiver.log" "$re" || return 1
  ! grep -q '^data transfers complete$' "$D/receiver.log" || { echo "mckey transferred data: not a refusal"; return 1; }
  echo "mckey: exit $rc, $(grep -m1 -E "$re" "$D/receiver.log")"
}
case_mckey() {
  SA=$A
  on "$A"; SRV=("${E[@]}" mckey -m 239.1.2.3 -b "$A" -C 4)
  on "$B"; CLI=("${E[@]}" mckey -m 239.1.2.3 -b "$B" -s -C 4)
  pair || return 1
  has "$D/server.log" '^data transfers complete$' && has "$D/client.log" '^return status 0$'
}
rsocket_refused() { # PROG EXTRA_ARGS...
  local prog=$1 rc=0 probe
  shift
  probe=$("${LIBENV[@]}" HCA_DEVICES=model /usr/bin/python3 -c 'import ctypes, errno, socket, sys
lib = ctypes.CDLL(sys.argv[1], use_errno=True)
for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
    r = lib.rsocket(socket.AF_INET, kind, 0)
    e = ctypes.get_errno()
    print(f"rsocket({kind}) = {r}, errno {errno.errorcode.get(e, e)}")
    if r != -1 or e not in (errno.ENOSYS, errno.EOPNOTSUPP): sys.exit(1)' "$LIB/librdmacm.so.1" 2>&1) \
    || { echo "rsocket() of $LIB/librdmacm.so.1 does not refuse with ENOSYS/EOPNOTSUPP: $probe"; return 1; }
  on "$A"; LD_DEBUG=bindings LD_DEBUG_OUTPUT="$D/bindings" timeout -k 5 "$T" "${E[@]}" "$prog" -b "$A" -p 7471 "$@" >"$D/server.log" 2>&1 || rc=$?
  [ "$rc" = 255 ] || [ "$rc" = 1 ] || { echo "$prog (server) $(status_text "$rc"), expected 255 or 1 (rsocket() failed)"; return 1; }
  grep -hq "to $LIB/librdmacm.so.1 .*symbol \`rsocket'" "$D"/bindings* || { echo "$prog did not bind rsocket to $LIB/librdmacm.so.1"; return 1; }
  echo "$prog: exit $rc, rsocket() of $LIB/librdmacm.so.1 refused ($(head -1 <<<"$probe"))"
}
case_rstream_refused() { rsocket_refused rstream -C 10 -S 4096; }
case_riostream_refused() { rsocket_refused riostream -C 10 -S 4096; }
case_udpong_refused() { rsocket_refused udpong -C 10 -S 100; }
rsocket_pair() { # PROG EXTRA_ARGS...
  local prog=$1
  shift
  SA=$A
  on "$A"; SRV=("${E[@]}" "$prog" -b "$A" "$@")
  on "$B"; CLI=("${E[@]}" "$prog" -s "$A" "$@")
  pair || return 1
  tail -1 "$D/client.log"
}
case_rstream() { rsocket_pair rstream -C 10 -S 4096; }
case_riostream() { rsocket_pair riostream -C 10 -S 4096; }
case_udpong() { rsocket_pair udpong -C 10 -S 100; }

# cmtime: connection setup, step by step. One run of 100 connections (its table is the figure),
# then CMTIME_RUNS runs of one connection against the same server: the median of resolve addr +
# resolve route + create qp + connect, i.e. rdma_resolve_addr to ESTABLISHED.
case_cmtime() {
  next_port
  on "$A"; timeout -k 5 $((T * 3)) "${E[@]}" cmtime -b "$A" -p "$P" >"$D/server.log" 2>&1 &
  local spid=$! i ms=() rc=0 step
  wait_device "$A" "$spid" || { echo "cmtime's server never opened its device"; return 1; }
  on "$B"
  client "$D/client.log" "${E[@]}" cmtime -s "$A" -p "$P" -c 100 || rc=$?
  for ((i = 1; i <= CMTIME_RUNS && rc == 0; i++)); do
    timeout -k 5 "$T" "${E[@]}" cmtime -s "$A" -p "$P" -c 1 >"$D/one-$i.log" 2>&1 || rc=$?
    ! grep -q '^failure' "$D/one-$i.log" || { echo "cmtime -c 1: $(grep -m1 '^failure' "$D/one-$i.log")"; return 1; }
    ms+=("$(awk -F: '/^(resolve addr|resolve route|create qp|connect) *:/ { split($2, f, " "); s += f[1]; n++ } END { if (n == 4) printf "%.2f", s }' "$D/one-$i.log")")
  done
  kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true
  [ "$rc" = 0 ] || { echo "cmtime -s $(status_text "$rc")"; return 1; }
  ! grep -q '^failure' "$D/client.log" || { echo "cmtime -c 100: $(grep -c '^failure' "$D/client.log") failures, the first: $(grep -m1 '^failure' "$D/client.log")"; return 1; }
  for step in 'resolve addr' 'resolve route' 'create qp' 'connect' 'disconnect' 'destroy'; do
    has "$D/client.log" "^$step *: +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$" || return 1
  done
  local med; med=$(printf '%s\n' "${ms[@]}" | grep . | sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }')
  [ -n "$med" ] || { echo "no cmtime -c 1 run gave its four steps"; return 1; }
  {
    echo "cmtime -c 100 (ms total, max ms, min us, us/conn):"
    awk -F: '/^(resolve addr|resolve route|create qp|connect|disconnect|destroy) *:/ { printf "  %-14s %s\n", $1, $2 }' "$D/client.log"
    echo "connection setup median (cmtime -c 1, rdma_resolve_addr to ESTABLISHED, ${#ms[@]} runs): model $med ms"
  } | tee -a "$FIGURES"
}

# The documented outcome of PROG: whichever of `PROG` / `PROG_refused` expected.txt names.
outcome() { expected_cases "$EXPECTED" | grep -qx "$1_refused" && echo "$1_refused" || echo "$1"; }

run_case loads_our_library case_loads_our_library
run_case rping_a_to_b case_rping A B
run_case rping_b_to_a case_rping B A
run_case ucmatose_c4 case_ucmatose
run_case udaddy case_udaddy
run_case rdma_server_client case_rdma_server
run_case rdma_xserver_rc case_rdma_xserver_rc
run_case rdma_xserver_xrc_refused case_rdma_xserver_xrc_refused
run_case rping_rejected_unused_port case_rping_rejected
for t in send_bw write_lat read_bw; do
  run_case "${t}_rdma_cm" case_perftest "$t" 4096
done
run_case qperf_cm1 case_qperf
run_case fi_pingpong_verbs_msg case_fi_pingpong
for p in mckey rstream riostream udpong; do
  c=$(outcome "$p")
  run_case "$c" "case_$c"
done
run_case cmtime case_cmtime
run_case rping_unreachable_silent_peer case_rping_unreachable

echo "== figures ($FIGURES):"
sed 's/^/   /' "$FIGURES"
stage_verdict "$EXPECTED" rdmacm
