#!/bin/bash
# The soft-RoCE interop cases; run inside L1 by l1-stage2.sh after the real-device tests (sourced
# environment: $WORK/l1-env). Linux's rdma_rxe on one end of a veth pair in the initial network
# namespace (rxe's UDP sockets live only there), the model's processes under `ip netns exec` on
# the other end (docs/rxe.md, facts 1-2). Each case prints one line
#     test rxe::<name> ... ok | FAILED (<why>)
# into $WORK/out/rxe.log (run.sh checks them against expected-rxe.txt); every process's own
# output is kept in $WORK/out/rxe/<case>.*.log. Figures go to the same log as `NUMBERS: TCG ...`
# lines, observations as `OBSERVED: ...` lines. Exit status: 0 when every case passed.
. "$(dirname "$0")/l1-env"
export HOME=/tmp PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
OUT=$WORK/out/rxe
LOG=$WORK/out/rxe.log
rm -rf "$OUT" && mkdir -p "$OUT" && : > "$LOG"
B=$WORK/bin
NS=rxepeer                    # the namespace the model's processes run in
DEV=rxe0
VRXE=vrxe VPEER=vpeer         # the veth pair: rxe's end (initial namespace), the model's end
A6=fd00:9::1 B6=fd00:9::2     # ULA addresses (nodad), rxe's end and the model's end
A4=10.9.0.1 B4=10.9.0.2
OURS_G6=1 OURS_G4=2           # hca::open_sim binds --roce addresses at GID 1, 2, ... in order
MTU=1024
T=${RXE_CASE_TIMEOUT:-120}    # bound of every process of a case, seconds
PORT=18600                    # TCP exchange ports: one per case, so no case waits on another's
failures=0

ts() { echo "L1-TS $(cut -d' ' -f1 /proc/uptime) $*"; }
log() { echo "$*" | tee -a "$LOG"; }
pass() { log "test rxe::$1 ... ok"; }
failed() { log "test rxe::$1 ... FAILED ($2)"; failures=$((failures + 1)); }
# A command in the model's namespace; an array, not a function, so that `$!` of a background
# one is the command itself (ip execs it), which a kill then reaches.
IN_NS=(ip netns exec "$NS")
# Waits (bounded) until a TCP listener on port $2 exists, in the namespace $1 ("" = initial).
wait_listen() {
  local i
  for i in $(seq 1 200); do
    if [ -n "$1" ]; then ip netns exec "$1" ss -ltnH "sport = :$2" | grep -q .; else ss -ltnH "sport = :$2" | grep -q .; fi && return 0
    sleep 0.1
  done
  return 1
}
# Waits for the background process $1 (its status is ours) after the foreground one exited with
# $2: when that failed, the background one gets 5 s and is then stopped (a server whose client
# is gone would wait for the case's whole bound).
finish_bg() {
  local i
  if [ "$2" != 0 ]; then
    for i in $(seq 1 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill "$1" 2>/dev/null
  fi
  wait "$1"
}
# Fields of ibv_rc_pingpong's (and hca pingpong's) result lines in log $1: "usec/iter Mbit/sec".
figures() { awk '/usec\/iter/{u=$(NF-1)} /Mbit\/sec/{m=$(NF-1)} END{print u" "m}' "$1"; }
# rxe's own counters (sysfs hw_counters), one "name=value" per counter.
rxe_counters() { (cd "/sys/class/infiniband/$DEV/ports/1/hw_counters" 2>/dev/null && grep -H . -- * | sed 's/:/=/'); }
counters_delta() { # $1 before, $2 after: the counters that changed, "name+delta"
  join -t= "$1" "$2" | awk -F= '$3 != $2 {printf "%s+%d ", $1, $3 - $2}'
}
expand6() { /usr/bin/python3 -c 'import ipaddress,sys; print(ipaddress.ip_address(sys.argv[1]).exploded)' "$1"; }

# --- rxe on the veth pair ----------------------------------------------------------------------
setup() {
  modprobe -d "$WORK/kroot" veth || { echo "modprobe veth failed"; return 1; }
  # The real-device tests' rxe0 sits on eth0; this stage's rxe0 is on the veth.
  if [ -e /sys/class/infiniband/$DEV ]; then rdma link delete $DEV || { echo "rdma link delete $DEV failed"; return 1; }; fi
  ip netns add $NS || return 1
  ip link add $VRXE type veth peer name $VPEER && ip link set $VPEER netns $NS || return 1
  ip addr add $A4/24 dev $VRXE && ip -6 addr add $A6/64 dev $VRXE nodad && ip link set $VRXE up || return 1
  "${IN_NS[@]}" ip link set lo up
  "${IN_NS[@]}" ip addr add $B4/24 dev $VPEER && "${IN_NS[@]}" ip -6 addr add $B6/64 dev $VPEER nodad && "${IN_NS[@]}" ip link set $VPEER up || return 1
  rdma link add $DEV type rxe netdev $VRXE || { echo "rdma link add failed"; dmesg | tail -5; return 1; }
  local g6 g4 gids=/sys/class/infiniband/$DEV/ports/1/gids types=/sys/class/infiniband/$DEV/ports/1/gid_attrs/types
  g6=$(expand6 $A6) g4=0000:0000:0000:0000:0000:ffff:$(printf '%02x%02x:%02x%02x' ${A4//./ })
  # rxe's GIDs follow the netdev's addresses asynchronously (roce_gid_mgmt): wait for both. The
  # table has hundreds of entries: one grep reads them all (a process per entry is slow in TCG).
  for i in $(seq 1 100); do
    G6=$(grep -lx "$g6" $gids/* | head -1) G4=$(grep -lx "$g4" $gids/* | head -1)
    [ -n "$G6" ] && [ -n "$G4" ] && break
    sleep 0.1
  done
  [ -n "$G6" ] && [ -n "$G4" ] || { echo "rxe0 has no GID for $A6 / $A4"; return 1; }
  G6=$(basename "$G6") G4=$(basename "$G4")
  local t6 t4
  t6=$(cat $types/$G6) t4=$(cat $types/$G4)
  [ "$t6" = "RoCE v2" ] && [ "$t4" = "RoCE v2" ] || { echo "GID types: $G6 '$t6', $G4 '$t4' (want RoCE v2)"; return 1; }
  grep -vx '0000:0000:0000:0000:0000:0000:0000:0000' $gids/* | sort -t/ -k9n | while IFS=: read -r f g; do
    log "OBSERVED: rxe GID table: index $(basename "$f") $g $(cat $types/$(basename "$f") 2>/dev/null)"
  done
  log "OBSERVED: rxe GID table has $(ls $gids | wc -l) entries; netdev $VRXE mtu $(cat /sys/class/net/$VRXE/mtu); rxe active_mtu $(timeout 10 ibv_devinfo -d $DEV -v 2>/dev/null | awk '/active_mtu/{print $2; exit}')"
  echo "rxe0 on $VRXE: IPv6 GID index $G6, IPv4 GID index $G4"
}

# --- one ibv_rc_pingpong against hca pingpong ----------------------------------------------------
# pp NAME ROLE FAM SIZE ITERS [extra options of ours...]: ROLE "rxe-server" (ibv_rc_pingpong
# listens, ours connects) or "ours-server"; FAM 6 or 4 (which GIDs and TCP addresses); MODE
# from $EV ("-e" or empty). Passes when both exit 0 and both print their result lines; with
# rxe as server, its -c check must not complain.
pp() {
  local name=$1 role=$2 fam=$3 size=$4 iters=$5; shift 5
  local port=$((PORT++)) rg og ra oa
  # The TCP exchange goes over IPv4 whatever the GIDs: ibv_rc_pingpong's server listens on the
  # first address getaddrinfo(AI_PASSIVE) gives, 0.0.0.0, only.
  if [ "$fam" = 6 ]; then rg=$G6 og=$OURS_G6; else rg=$G4 og=$OURS_G4; fi
  ra=$A4 oa=$B4
  [ -x "$B/hca" ] || { failed "$name" "no hca binary (build failed?)"; return; }
  # -c: ibv_rc_pingpong's own payload check (its client zeroes each page's first byte, its
  # server finally checks them); hca pingpong checks every message it receives.
  local rxe=(timeout $T ibv_rc_pingpong -d $DEV -g "$rg" -s "$size" -n "$iters" -m $MTU -p $port -c $EV)
  local ours=(timeout $T "$B/hca" pingpong --roce $B6 --roce $B4 -g "$og" -s "$size" -n "$iters" -m $MTU -p $port $EV "$@")
  local rl=$OUT/$name.rxe.log ol=$OUT/$name.ours.log rrc orc c0=$OUT/$name.c0 c1=$OUT/$name.c1
  rxe_counters | sort > "$c0"
  if [ "$role" = rxe-server ]; then
    "${rxe[@]}" > "$rl" 2>&1 & local bg=$!
    wait_listen "" $port || { kill $bg; failed "$name" "ibv_rc_pingpong never listened"; return; }
    "${IN_NS[@]}" "${ours[@]}" "$ra" > "$ol" 2>&1; orc=$?
    finish_bg $bg $orc; rrc=$?
  else
    "${IN_NS[@]}" "${ours[@]}" > "$ol" 2>&1 & local bg=$!
    wait_listen "$NS" $port || { kill $bg; failed "$name" "hca pingpong never listened"; return; }
    "${rxe[@]}" "$oa" > "$rl" 2>&1; rrc=$?
    finish_bg $bg $rrc; orc=$?
  fi
  rxe_counters | sort > "$c1"
  local why=
  [ "$rrc" = 0 ] || why="ibv_rc_pingpong exit $rrc: $(tail -2 "$rl" | tr '\n' ' ')"
  [ "$orc" = 0 ] || why="${why:+$why; }hca pingpong exit $orc: $(tail -2 "$ol" | tr '\n' ' ')"
  grep -q "^$iters iters in" "$rl" || why="${why:-ibv_rc_pingpong printed no result line}"
  grep -q " iters in" "$ol" || why="${why:-hca pingpong printed no result line}"
  grep -q "invalid data" "$rl" && why="${why:+$why; }ibv_rc_pingpong -c: $(grep -m1 'invalid data' "$rl")"
  LAST_FIGURES=$(figures "$rl") LAST_COUNTERS=$(counters_delta "$c0" "$c1")
  echo "   $name: rxe ${LAST_FIGURES% *} usec/iter; rxe counters: $LAST_COUNTERS"
  [ -z "$why" ] && pass "$name" || failed "$name" "$why"
}

# --- the RDMA WRITE / READ exchange: rdma_peer (rxe) against roce_rdma (ours) -----------------
# rdma_case NAME SIZE [extra options of ours...]: rdma_peer listens on rxe0, roce_rdma connects; six
# named checks, each owned by the side whose bytes it looks at.
rdma_case() {
  local name=$1 size=$2; shift 2
  local port=$((PORT++)) cl=$OUT/$name.rxe.log ol=$OUT/$name.ours.log crc orc
  [ -x "$B/rdma_peer" ] && [ -x "$B/roce_rdma" ] || {
    for c in write_ours_to_rxe write_imm_ours_to_rxe read_ours_from_rxe write_rxe_to_ours write_imm_rxe_to_ours read_rxe_from_ours; do
      failed "${name}_$c" "rdma_peer or roce_rdma not built"
    done; return; }
  timeout $T "$B/rdma_peer" -d $DEV -g $G6 -s "$size" -m $MTU -p $port -t $((T - 10)) > "$cl" 2>&1 & local bg=$!
  wait_listen "" $port || { kill $bg; echo "rdma_peer never listened" >> "$cl"; }
  "${IN_NS[@]}" timeout $T "$B/roce_rdma" --roce $B6 -g $OURS_G6 -s "$size" -m $MTU -p $port -t $((T - 10)) "$@" $A6 > "$ol" 2>&1; orc=$?
  finish_bg $bg $orc; crc=$?
  echo "   $name: rdma_peer exit $crc, roce_rdma exit $orc"
  rdma_check "${name}_write_ours_to_rxe" "$cl" write
  rdma_check "${name}_write_imm_ours_to_rxe" "$cl" write_imm
  rdma_check "${name}_read_ours_from_rxe" "$ol" read
  rdma_check "${name}_write_rxe_to_ours" "$ol" write
  rdma_check "${name}_write_imm_rxe_to_ours" "$ol" write_imm
  rdma_check "${name}_read_rxe_from_ours" "$cl" read
}
rdma_check() { # CASE LOG CHECK
  if grep -qx "CHECK $3 ok" "$2"; then pass "$1"
  else failed "$1" "$(grep -m1 "^CHECK $3 " "$2" || echo "no CHECK $3 line; $(tail -2 "$2" | tr '\n' ' ')")"; fi
}

# --- Debian's ibv_ud_pingpong / ibv_srq_pingpong: rxe's against ours (over our library) --------
# verbs_pp NAME PROG ROLE FAM SIZE ITERS [extra options of both...]: PROG runs on rxe0 through the
# system's libibverbs and, in the model's namespace, through our libibverbs.so.1 ($WORK/lib) with
# the model's RoCE port on $B6 and $B4 (GIDs 1 and 2); ROLE "rxe-server" or "ours-server", FAM 6
# or 4 as in pp. Both run with -c: the server checks every page of what it received (in UD, at
# offset 40, after the GRH area). Passes when both exit 0, both print their result lines, neither
# says "invalid data", and each names the other's GID as the remote address.
verbs_pp() {
  local name=$1 prog=$2 role=$3 fam=$4 size=$5 iters=$6; shift 6
  local port=$((PORT++)) rg og ra oa rgid ogid
  if [ "$fam" = 6 ]; then rg=$G6 og=$OURS_G6 rgid=$A6 ogid=$B6; else rg=$G4 og=$OURS_G4 rgid=::ffff:$A4 ogid=::ffff:$B4; fi
  ra=$A4 oa=$B4
  [ -f "$WORK/lib/libibverbs.so.1" ] || { failed "$name" "no libibverbs.so.1 of ours (build failed?)"; return; }
  local rxe=(timeout $T "$prog" -d $DEV -g "$rg" -s "$size" -n "$iters" -p $port -c "$@")
  local ours=(env -u HCA_CONFIG "LD_LIBRARY_PATH=$WORK/lib" "HCA_DEVICES=model,roce=$B6,roce=$B4"
    timeout $T "$prog" -d vmw_pvrdma0 -g "$og" -s "$size" -n "$iters" -p $port -c "$@")
  local rl=$OUT/$name.rxe.log ol=$OUT/$name.ours.log rrc orc
  if [ "$role" = rxe-server ]; then
    "${rxe[@]}" > "$rl" 2>&1 & local bg=$!
    wait_listen "" $port || { kill $bg; failed "$name" "rxe's $prog never listened"; return; }
    "${IN_NS[@]}" "${ours[@]}" "$ra" > "$ol" 2>&1; orc=$?
    finish_bg $bg $orc; rrc=$?
  else
    "${IN_NS[@]}" "${ours[@]}" > "$ol" 2>&1 & local bg=$!
    wait_listen "$NS" $port || { kill $bg; failed "$name" "our $prog never listened"; return; }
    "${rxe[@]}" "$oa" > "$rl" 2>&1; rrc=$?
    finish_bg $bg $rrc; orc=$?
  fi
  local why=
  [ "$rrc" = 0 ] || why="rxe's $prog exit $rrc: $(tail -2 "$rl" | tr '\n' ' ')"
  [ "$orc" = 0 ] || why="${why:+$why; }our $prog exit $orc: $(tail -2 "$ol" | tr '\n' ' ')"
  why=${why:-$(verbs_pp_output "$rl" "rxe's $prog" "$iters" "$ogid")}
  why=${why:-$(verbs_pp_output "$ol" "our $prog" "$iters" "$rgid")}
  LAST_FIGURES=$(figures "$rl")
  echo "   $name: rxe ${LAST_FIGURES% *} usec/iter"
  [ -z "$why" ] && pass "$name" || failed "$name" "$why"
}

# verbs_pp_output LOG WHO ITERS PEERGID: why LOG is not a passing pingpong's output (nothing if it is).
verbs_pp_output() {
  if ! grep -q "^$3 iters in" "$1"; then echo "$2 printed no result line"
  elif grep -q "invalid data" "$1"; then echo "$2 -c: $(grep -m1 'invalid data' "$1")"
  elif ! grep -qE "remote address: .*GID $4\$" "$1"; then echo "$2: the remote GID is not $4"
  fi
}

# atomic_why REQLOG RESPLOG OP: why OP's direction failed.
atomic_why() {
  grep -h -m1 -E "^CHECK $3(_memory)? FAIL" "$1" "$2" | head -1 | grep . && return
  echo "no CHECK $3 ok lines; $(tail -2 "$1" | tr '\n' ' ')"
}

# --- UD address handles from what was received: ud_peer on rxe0 against ud_peer over our library
# ud_case NAME ROLE FAM: each side answers the other's datagram through ibv_create_ah_from_wc on
# it and checks the GRH area of what it received (tests/rxe/ud_peer.c): passes when both exit 0
# after all their checks passed.
ud_case() {
  local name=$1 role=$2 fam=$3 port=$((PORT++)) rg og rl=$OUT/$1.rxe.log ol=$OUT/$1.ours.log rrc orc
  if [ "$fam" = 6 ]; then rg=$G6 og=$OURS_G6; else rg=$G4 og=$OURS_G4; fi
  [ -x "$B/ud_peer" ] && [ -f "$WORK/lib/libibverbs.so.1" ] || { failed "$name" "ud_peer or our libibverbs.so.1 not built"; return; }
  local rxe=(timeout $T "$B/ud_peer" -d $DEV -g "$rg" -s 1024 -p $port -t $((T - 10)))
  local ours=(env -u HCA_CONFIG "LD_LIBRARY_PATH=$WORK/lib" "HCA_DEVICES=model,roce=$B6,roce=$B4"
    timeout $T "$B/ud_peer" -d vmw_pvrdma0 -g "$og" -s 1024 -p $port -t $((T - 10)))
  if [ "$role" = rxe-server ]; then
    "${rxe[@]}" > "$rl" 2>&1 & local bg=$!
    wait_listen "" $port || { kill $bg; failed "$name" "rxe's ud_peer never listened"; return; }
    "${IN_NS[@]}" "${ours[@]}" $A4 > "$ol" 2>&1; orc=$?
    finish_bg $bg $orc; rrc=$?
  else
    "${IN_NS[@]}" "${ours[@]}" > "$ol" 2>&1 & local bg=$!
    wait_listen "$NS" $port || { kill $bg; failed "$name" "our ud_peer never listened"; return; }
    "${rxe[@]}" $B4 > "$rl" 2>&1; rrc=$?
    finish_bg $bg $rrc; orc=$?
  fi
  local why=
  [ "$rrc" = 0 ] && grep -qx "ud_peer: all checks passed" "$rl" || why="rxe's ud_peer exit $rrc: $(grep -h -m2 -E 'FAIL|ud_peer:' "$rl" | tr '\n' ' ')"
  [ "$orc" = 0 ] && grep -qx "ud_peer: all checks passed" "$ol" || why="${why:+$why; }our ud_peer exit $orc: $(grep -h -m2 -E 'FAIL|ud_peer:' "$ol" | tr '\n' ' ')"
  [ -z "$why" ] && pass "$name" || failed "$name" "$why"
}

# --- atomics both ways: rdma_peer -a against roce_rdma -a ---------------------------------------
# atomic_case NAME [extra options of ours...]: each side FETCH ADDs and COMPARE SWAPs the other's
# words; a direction passes when its requester saw the original values returned and its
# responder's words end as they must (rdma_peer.c's header).
atomic_case() {
  local name=$1; shift
  local port=$((PORT++)) cl=$OUT/$name.rxe.log ol=$OUT/$name.ours.log crc orc d op req resp c0=$OUT/$name.c0 c1=$OUT/$name.c1
  [ -x "$B/rdma_peer" ] && [ -x "$B/roce_rdma" ] || {
    for c in fetch_add_ours_to_rxe cmp_swap_ours_to_rxe fetch_add_rxe_to_ours cmp_swap_rxe_to_ours; do
      failed "${name}_$c" "rdma_peer or roce_rdma not built"
    done; return; }
  rxe_counters | sort > "$c0"
  timeout $T "$B/rdma_peer" -d $DEV -g $G6 -s 64 -m $MTU -p $port -t $((T - 10)) -a > "$cl" 2>&1 & local bg=$!
  wait_listen "" $port || { kill $bg; echo "rdma_peer never listened" >> "$cl"; }
  "${IN_NS[@]}" timeout $T "$B/roce_rdma" --roce $B6 -g $OURS_G6 -s 64 -m $MTU -p $port -t $((T - 10)) -a "$@" $A6 > "$ol" 2>&1; orc=$?
  finish_bg $bg $orc; crc=$?
  rxe_counters | sort > "$c1"
  echo "   $name: rdma_peer exit $crc, roce_rdma exit $orc"
  log "OBSERVED: $name: rxe counters $(counters_delta "$c0" "$c1"); $(grep -m1 '^MODEL:' "$ol" || echo 'MODEL: no counters')"
  for d in ours_to_rxe rxe_to_ours; do
    [ $d = ours_to_rxe ] && req=$ol resp=$cl || req=$cl resp=$ol
    for op in fetch_add cmp_swap; do
      if grep -qx "CHECK $op ok" "$req" && grep -qx "CHECK ${op}_memory ok" "$resp"; then pass "${name}_${op}_$d"
      else failed "${name}_${op}_$d" "$(atomic_why "$req" "$resp" $op)"; fi
    done
  done
}

# --- rxe with itself, over rxe0's loopback (control cases and the reference figures) -----------
rxe_self_pp() { # NAME SIZE ITERS [-e]
  local name=$1 port=$((PORT++)) sl=$OUT/$1.server.log cl=$OUT/$1.client.log src crc
  timeout $T ibv_rc_pingpong -d $DEV -g $G6 -s "$2" -n "$3" -m $MTU -p $port ${4:-} > "$sl" 2>&1 & local bg=$!
  wait_listen "" $port || { kill $bg; failed "$name" "ibv_rc_pingpong never listened"; return; }
  timeout $T ibv_rc_pingpong -d $DEV -g $G6 -s "$2" -n "$3" -m $MTU -p $port ${4:-} $A4 > "$cl" 2>&1; crc=$?
  finish_bg $bg $crc; src=$?
  LAST_FIGURES=$(figures "$cl")
  [ "$src" = 0 ] && [ "$crc" = 0 ] && grep -q "^$3 iters in" "$cl" && pass "$name" \
    || failed "$name" "server exit $src, client exit $crc: $(tail -1 "$cl")"
}
rxe_self_rdma() {
  local name=rdma_peer_rxe_loopback port=$((PORT++)) sl=$OUT/rdma_peer_rxe_loopback.server.log cl=$OUT/rdma_peer_rxe_loopback.client.log src crc
  [ -x "$B/rdma_peer" ] || { failed $name "rdma_peer not built"; return; }
  timeout $T "$B/rdma_peer" -d $DEV -g $G6 -s 10000 -m $MTU -p $port > "$sl" 2>&1 & local bg=$!
  wait_listen "" $port || { kill $bg; failed $name "rdma_peer never listened"; return; }
  timeout $T "$B/rdma_peer" -d $DEV -g $G6 -s 10000 -m $MTU -p $port $A6 > "$cl" 2>&1; crc=$?
  finish_bg $bg $crc; src=$?
  [ "$src" = 0 ] && [ "$crc" = 0 ] && pass $name || failed $name "server exit $src, client exit $crc: $(grep -h -m1 -E 'FAIL|rdma_peer:' "$sl" "$cl" | head -2 | tr '\n' ' ')"
}

numbers() { # LABEL SIZE ITERS: the figures of the last case
  local u=${LAST_FIGURES% *} m=${LAST_FIGURES#* }
  log "NUMBERS: TCG $1 size=$2 iters=$3 usec/iter=${u:-?} Mbit/s=${m:-?}"
}

# --- the cases ---------------------------------------------------------------------------------
ts "rxe interop start"
if setup > "$OUT/setup.log" 2>&1; then
  cat "$OUT/setup.log"; pass rxe_setup
else
  cat "$OUT/setup.log"; failed rxe_setup "$(tail -1 "$OUT/setup.log")"
  ts "rxe interop: setup failed"; exit 1
fi
ts "rxe0 up on $VRXE"

# RDMACM_ONLY=1 (debugging the RDMA CM cases): only those run after the setup; the stage then
# misses every other case and fails.
if [ "${RDMACM_ONLY:-0}" != 1 ]; then
# Control: rxe with itself (the C peer proven against rxe before it faces the model).
rxe_self_rdma
rxe_self_pp rxe_loopback_s64 64 ${RXE_ITERS_SMALL:-500};      numbers "rxe<->rxe(loopback on rxe0)" 64 ${RXE_ITERS_SMALL:-500}
rxe_self_pp rxe_loopback_s65536 65536 ${RXE_ITERS_LARGE:-50}; numbers "rxe<->rxe(loopback on rxe0)" 65536 ${RXE_ITERS_LARGE:-50}
ts "rxe control cases done"

# Capture a) and b) on the model's end of the veth, whole frames, into L1's RAM (/tmp is a
# tmpfs there); rxe_capture checks every ICRC and says what rxe's packets look like.
CAPTURE=/tmp/rxe-capture.pcap
"${IN_NS[@]}" tcpdump -i $VPEER -n -s 0 -U -w $CAPTURE udp port 4791 > "$OUT/tcpdump.log" 2>&1 & CAP=$!
for i in $(seq 1 50); do grep -q listening "$OUT/tcpdump.log" && break; sleep 0.1; done

# a) unmodified ibv_rc_pingpong against hca pingpong, IPv6 GIDs, MTU 1024.
for EV in "" -e; do
  mode=busy; [ -n "$EV" ] && mode=events
  for role in rxe-server ours-server; do
    for size in 1 4096 65536; do
      iters=100; [ "$size" = 65536 ] && iters=20
      pp "pingpong_${role/-/_}_${mode}_s$size" $role 6 $size $iters
    done
  done
done
EV=
pp pingpong_ipv4_rxe_server_busy_s4096 rxe-server 4 4096 50

# b) RDMA WRITE, WRITE with immediate and READ both ways, single- and multi-packet.
rdma_case rdma_s64 64
rdma_case rdma_s10000 10000
# b2) atomics both ways (their AtomicETH / AtomicAckETH packets are in the capture).
atomic_case atomic
# b3) UD: Debian's ibv_ud_pingpong, rxe's against ours over our library, both roles, IPv6 and
#     IPv4 GIDs (one packet per message: sizes up to rxe's active MTU, 1024).
for fam in 6 4; do
  for role in rxe-server ours-server; do
    for size in 1 1024; do
      verbs_pp "ud_pingpong_ipv${fam}_${role/-/_}_s$size" ibv_ud_pingpong $role $fam $size 100
    done
  done
done
# b3') UD answered through ibv_create_ah_from_wc both ways: each side's GRH area (IPv6 header, or
#      the IPv4 header in bytes 20-39) read by the other's libibverbs.
for fam in 6 4; do
  for role in rxe-server ours-server; do
    ud_case "ud_ah_from_wc_ipv${fam}_${role/-/_}" $role $fam
  done
done
# b4) SRQ: Debian's ibv_srq_pingpong, 4 RC QPs on each end receiving from one SRQ, both roles.
for role in rxe-server ours-server; do
  verbs_pp "srq_pingpong_${role/-/_}_q4_s4096" ibv_srq_pingpong $role 6 4096 100 -q 4 -m $MTU
done
sleep 1; kill $CAP 2>/dev/null; wait $CAP 2>/dev/null  # TERM: a background job of a script ignores INT
if [ ! -x "$B/rxe_capture" ]; then failed capture_every_icrc_valid "rxe_capture not built"
elif "$B/rxe_capture" $CAPTURE --rxe $A6 --rxe $A4 > "$OUT/capture.log" 2>&1; then
  tee -a "$LOG" < "$OUT/capture.log"; pass capture_every_icrc_valid
else
  tee -a "$LOG" < "$OUT/capture.log"; cp $CAPTURE "$OUT/capture.pcap"
  failed capture_every_icrc_valid "$(tail -1 "$OUT/capture.log") (capture kept in $OUT/capture.pcap)"
fi
rm -f $CAPTURE

# c) Loss on the model's port: both ends' retransmissions recover, every payload once.
pp loss_pingpong_ours_client_s8192 rxe-server 6 8192 100 --link-loss 0.05 --link-seed 11
log "OBSERVED: rxe counters during loss_pingpong_ours_client_s8192: $LAST_COUNTERS"
pp loss_pingpong_ours_server_s8192 ours-server 6 8192 100 --link-loss 0.05 --link-seed 12
log "OBSERVED: rxe counters during loss_pingpong_ours_server_s8192: $LAST_COUNTERS"
rdma_case rdma_loss_s65536 65536 --link-loss 0.05 --link-seed 13
# Atomics over a lossy link: a lost request or ATOMIC Acknowledge is retried, and the responder
# answers a retried atomic from what it remembered, never running it twice.
atomic_case atomic_loss --link-loss 0.3 --link-seed 14

# d) The model against rxe, figures next to rxe's own.
pp numbers_ours_rxe_s64 ours-server 6 64 ${RXE_ITERS_SMALL:-500}; numbers "hca(model)<->rxe" 64 ${RXE_ITERS_SMALL:-500}
pp numbers_ours_rxe_s65536 ours-server 6 65536 ${RXE_ITERS_LARGE:-50}; numbers "hca(model)<->rxe" 65536 ${RXE_ITERS_LARGE:-50}
EV=-e
pp numbers_ours_rxe_events_s64 ours-server 6 64 ${RXE_ITERS_SMALL:-500}; numbers "hca(model, -e both ends)<->rxe" 64 ${RXE_ITERS_SMALL:-500}
rxe_self_pp rxe_loopback_events_s64 64 ${RXE_ITERS_SMALL:-500} -e; numbers "rxe<->rxe(loopback on rxe0, -e both ends)" 64 ${RXE_ITERS_SMALL:-500}
EV=
fi

# e) The RDMA CM: Debian's rping / ucmatose / udaddy / cmtime, the kernel's rdma_cm on rxe0 against
#    our librdmacm over the model (l1-rdmacm.sh).
. "$(dirname "$0")/l1-rdmacm.sh"

ts "rxe interop done: $failures failed"
[ "$failures" = 0 ]
