# The RDMA CM interop cases, sourced by l1-rxe.sh after its own cases (its setup, helpers and log:
# rxe0 on the veth end vrxe in the initial namespace, the model's processes in $NS). One end is
# Debian's unmodified rping / ucmatose / udaddy / cmtime on rxe0 through the system's librdmacm and
# the kernel's rdma_cm (rdma_ucm's /dev/infiniband/rdma_cm); the other is the same program in the
# model's namespace over our librdmacm.so.1 and libibverbs.so.1 ($WORK/lib), the model's RoCE port
# on $B4. Each case prints `test rxe::cm_<name> ... ok | FAILED (<why>)` (expected-rxe.txt names
# them); the connection setup figures print as `NUMBERS:` lines. docs/rxe.md, "RDMA CM interop".

CM_PORT=19500                   # rdma_cm ports (TCP port space): one per case, as PORT above
CM_T=${RDMACM_CASE_TIMEOUT:-45} # bound of every process of a case, seconds
CM_RUNS=${RDMACM_SETUP_RUNS:-5} # cmtime -c 1 runs per side for the setup figures
OURS_LIB=$WORK/lib
# Our end: the model's namespace, our libraries first, one model device on $B4 (extra device keys
# from $1, e.g. ",link-loss=0.1,link-seed=3").
ours_env() { OURS=("${IN_NS[@]}" env -u HCA_CONFIG "LD_LIBRARY_PATH=$OURS_LIB" "HCA_DEVICES=model,roce=$B4${1:-}"); }

cm_setup() {
  modprobe -d "$WORK/kroot" rdma_ucm || { echo "modprobe rdma_ucm failed"; return 1; }
  for i in $(seq 1 50); do [ -c /dev/infiniband/rdma_cm ] && break; sleep 0.1; done
  [ -c /dev/infiniband/rdma_cm ] || { echo "no /dev/infiniband/rdma_cm after loading rdma_ucm"; return 1; }
  command -v rping >/dev/null || { echo "rdmacm-utils is not installed (no rping)"; return 1; }
  ldd "$(command -v rping)" | grep -q 'librdmacm.so.1 => /lib\|librdmacm.so.1 => /usr/lib' || { echo "rping does not load the system's librdmacm"; return 1; }
  [ -f "$OURS_LIB/librdmacm.so.1" ] || { echo "no librdmacm.so.1 of ours in $OURS_LIB (hca/rdmacm/build.sh failed?)"; return 1; }
  [ -f "$OURS_LIB/libibverbs.so.1" ] || { echo "no libibverbs.so.1 of ours in $OURS_LIB"; return 1; }
  # Our programs in the namespace must resolve librdmacm.so.1 and libibverbs.so.1 to ours.
  local l; l=$(env LD_LIBRARY_PATH="$OURS_LIB" ldd "$(command -v rping)")
  grep -q "librdmacm.so.1 => $OURS_LIB/librdmacm.so.1" <<<"$l" || { echo "rping over LD_LIBRARY_PATH=$OURS_LIB: $(grep librdmacm <<<"$l")"; return 1; }
  grep -q "libibverbs.so.1 => $OURS_LIB/libibverbs.so.1" <<<"$l" || { echo "rping over LD_LIBRARY_PATH=$OURS_LIB: $(grep libibverbs <<<"$l")"; return 1; }
  echo "rdma_ucm loaded; rping over $OURS_LIB loads our librdmacm.so.1 and libibverbs.so.1"
}

# Waits (bounded) until a kernel rdma_cm id listens on port $1 (`rdma res show cm_id`).
cm_wait_rxe_listen() {
  local i
  for i in $(seq 1 100); do
    rdma res show cm_id 2>/dev/null | grep -E "state LISTEN" | grep -qE ":$1( |$)" && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# Waits (bounded) until our server process $1 has its model device open (UDP 4791 bound on $B4 in
# the namespace); its rdma_listen follows within the same thread's next calls, and a client that
# came too early is rejected and tried again (cm_client).
cm_wait_ours_listen() {
  local i
  for i in $(seq 1 100); do
    "${IN_NS[@]}" ss -lunH "src $B4 and sport = :4791" | grep -q . && { sleep 0.3; return 0; }
    kill -0 "$1" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# cm_client LOG CMD...: runs the client; a client rejected while the server was still starting
# (RDMA_CM_EVENT_REJECTED before anything else happened) is run again, at most 3 times.
cm_client() {
  local log=$1 rc i; shift
  for i in 1 2 3; do
    rc=0; timeout -k 5 "$CM_T" "$@" > "$log" 2>&1 || rc=$?
    [ "$rc" != 0 ] && grep -q 'RDMA_CM_EVENT_REJECTED' "$log" && ! grep -qE 'ping data|data transfers|ESTABLISHED' "$log" || break
    cp "$log" "$log.try$i"; sleep 0.5
  done
  return "$rc"
}

# cm_pair NAME ROLE SERVER_ARGS CLIENT_ARGS PROG [OURS_EXTRA]: PROG as server on one end and client
# on the other; ROLE rxe-server (rxe's PROG listens on $A4, ours connects), ours-server, or
# rxe-both (a control: both on rxe0, kernel CM to kernel CM). The
# case's checks run afterwards on $SL / $CL (server / client logs); SRC / CRC are the statuses.
cm_pair() {
  local name=$1 role=$2 sargs=$3 cargs=$4 prog=$5 extra=${6:-} bg
  SL=$OUT/$name.server.log CL=$OUT/$name.client.log SRC=0 CRC=0
  ours_env "$extra"
  : > "$CL"
  if [ "$role" = rxe-server ]; then
    # shellcheck disable=SC2086 # word lists
    timeout -k 5 "$CM_T" $prog $sargs > "$SL" 2>&1 & bg=$!
    if cm_wait_rxe_listen "${CM_LPORT:-$CM_P}" $bg; then
      # shellcheck disable=SC2086
      cm_client "$CL" "${OURS[@]}" $prog $cargs || CRC=$?
    else echo "rxe's $prog never listened: client not run" | tee -a "$SL" > "$CL"; CRC=1; fi
  elif [ "$role" = rxe-both ]; then
    # shellcheck disable=SC2086
    timeout -k 5 "$CM_T" $prog $sargs > "$SL" 2>&1 & bg=$!
    if cm_wait_rxe_listen "${CM_LPORT:-$CM_P}" $bg; then
      # shellcheck disable=SC2086
      cm_client "$CL" $prog $cargs || CRC=$?
    else echo "rxe's $prog never listened: client not run" | tee -a "$SL" > "$CL"; CRC=1; fi
  else
    # shellcheck disable=SC2086
    timeout -k 5 "$CM_T" "${OURS[@]}" $prog $sargs > "$SL" 2>&1 & bg=$!
    if cm_wait_ours_listen $bg; then
      # shellcheck disable=SC2086
      cm_client "$CL" $prog $cargs || CRC=$?
    else echo "our $prog never opened its device: client not run" | tee -a "$SL" > "$CL"; CRC=1; fi
  fi
  finish_bg $bg $CRC || SRC=$?
}
# cm_verdict NAME WHY...: passes when no reason was given.
cm_verdict() {
  local name=$1 why=${2:-}
  [ "$SRC" = 0 ] || why="${why:+$why; }server exit $SRC: $(tail -2 "$SL" | tr '\n' ' ')"
  [ "$CRC" = 0 ] || why="${why:+$why; }client exit $CRC: $(tail -2 "$CL" | tr '\n' ' ')"
  [ -z "$why" ] && pass "$name" || failed "$name" "$why"
}

# rping: the client sends COUNT pings; -v makes each end print every one ("ping data: rdma-ping-N:
# ..." on the client, "server ping data: ..." on the server); -V validates each.
cm_rping() { # NAME ROLE COUNT [OURS_EXTRA]
  local name=$1 role=$2 n=$3 srv why=
  [ "$role" = rxe-both ] || cm_have_ours "$name" || return 0
  CM_P=$((CM_PORT++))
  [ "$role" = ours-server ] && srv=$B4 || srv=$A4
  cm_pair "$name" "$role" "-s -a $srv -p $CM_P -v -V" "-c -a $srv -p $CM_P -C $n -v -V" rping "${4:-}"
  local got; got=$(grep -c '^ping data: rdma-ping-' "$CL")
  [ "$got" = "$n" ] || why="client printed $got of $n 'ping data: rdma-ping-N' lines"
  grep -q '^server ping data: rdma-ping-' "$SL" || why="${why:+$why; }server printed no 'server ping data' line"
  grep -q 'data mismatch' "$SL" "$CL" && why="${why:+$why; }$(grep -h -m1 'data mismatch' "$SL" "$CL")"
  cm_verdict "$name" "$why"
}

# ucmatose with N connections (the server is told N too), 10 messages each way on each.
cm_ucmatose() { # NAME ROLE N
  local name=$1 role=$2 n=$3 srv why=
  [ "$role" = rxe-both ] || cm_have_ours "$name" || return 0
  CM_P=$((CM_PORT++))
  [ "$role" = ours-server ] && srv=$B4 || srv=$A4
  cm_pair "$name" "$role" "-b $srv -p $CM_P -c $n" "-s $srv -p $CM_P -c $n" ucmatose
  for f in "$SL" "$CL"; do
    grep -qx 'data transfers complete' "$f" && grep -qx 'return status 0' "$f" || why="${why:+$why; }$(basename "$f"): no 'data transfers complete' / 'return status 0'"
  done
  cm_verdict "$name" "$why"
}

# udaddy: UD over RDMA_PS_UDP (SIDR_REQ/SIDR_REP), its fixed port 7174 (-p is its port space).
cm_udaddy() { # NAME ROLE
  local name=$1 role=$2 srv why=
  [ "$role" = rxe-both ] || cm_have_ours "$name" || return 0
  CM_LPORT=7174
  [ "$role" = ours-server ] && srv=$B4 || srv=$A4
  cm_pair "$name" "$role" "-b $srv" "-s $srv" udaddy
  CM_LPORT=
  for f in "$SL" "$CL"; do
    grep -qx 'data transfers complete' "$f" && grep -qx 'return status 0' "$f" || why="${why:+$why; }$(basename "$f"): no 'data transfers complete' / 'return status 0'"
  done
  cm_verdict "$name" "$why"
}

# A REQ to a port nobody listens on: the other end's CM answers REJ, the client prints
# "cma event RDMA_CM_EVENT_REJECTED, error N" and exits nonzero, within the bound.
cm_reject() { # NAME ROLE(the client's side: ours | rxe)
  local name=$1 side=$2 port=$((CM_PORT++)) l=$OUT/$1.client.log rc=0 t0 dt dst
  cm_have_ours "$name" || return 0
  ours_env
  t0=$(date +%s%N)
  if [ "$side" = ours ]; then dst=$A4; timeout -k 5 "$CM_T" "${OURS[@]}" rping -c -a $dst -p $port -C 1 > "$l" 2>&1 || rc=$?
  else
    # Our end must exist to answer: a server on another port holds the model device on $B4.
    timeout -k 5 "$CM_T" "${OURS[@]}" rping -s -a $B4 -p $((port + 1000)) > "$OUT/$name.holder.log" 2>&1 & local hb=$!
    cm_wait_ours_listen $hb
    dst=$B4; timeout -k 5 "$CM_T" rping -c -a $dst -p $port -C 1 > "$l" 2>&1 || rc=$?
    kill $hb 2>/dev/null; wait $hb 2>/dev/null
  fi
  dt=$(( ($(date +%s%N) - t0) / 1000000 ))
  if [ "$rc" = 0 ]; then failed "$name" "rping -c to unused port $port on $dst exited 0"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then failed "$name" "rping -c to unused port $port on $dst timed out after $CM_T s"
  elif grep -q 'RDMA_CM_EVENT_REJECTED' "$l"; then log "OBSERVED: $name: $(grep -m1 REJECTED "$l") after $dt ms"; pass "$name"
  else failed "$name" "exit $rc without RDMA_CM_EVENT_REJECTED: $(tail -2 "$l" | tr '\n' ' ')"; fi
}

# The peer vanishes: rxe's rping server is killed (SIGKILL) while our client pings; the kernel
# tears its cm_id down (DREQ), and our client must report the disconnect and exit within 30 s.
cm_vanish() { # NAME
  local name=$1 port=$((CM_PORT++)) sl=$OUT/$1.server.log cl=$OUT/$1.client.log crc=0 t0 dt i
  cm_have_ours "$name" || return 0
  ours_env
  timeout -k 5 "$CM_T" rping -s -a $A4 -p $port > "$sl" 2>&1 & local sb=$!
  cm_wait_rxe_listen $port $sb || { failed "$name" "rxe's rping never listened"; kill $sb; return; }
  timeout -k 5 "$CM_T" "${OURS[@]}" rping -c -a $A4 -p $port -v > "$cl" 2>&1 & local cb=$!
  for i in $(seq 1 200); do grep -q '^ping data' "$cl" && break; kill -0 $cb 2>/dev/null || break; sleep 0.1; done
  grep -q '^ping data' "$cl" || { kill $sb $cb 2>/dev/null; wait $sb $cb; failed "$name" "no ping before the kill: $(tail -2 "$cl" | tr '\n' ' ')"; return; }
  # SIGKILL to rping itself: `timeout` (pid $sb) would die alone and leave its rping serving.
  local rp; rp=$(pgrep -P $sb -x rping)
  [ -n "$rp" ] || { kill $sb $cb 2>/dev/null; wait $sb $cb; failed "$name" "no rping under the server's timeout ($sb)"; return; }
  kill -9 $rp; wait $sb 2>/dev/null
  t0=$(date +%s%N)
  for i in $(seq 1 300); do kill -0 $cb 2>/dev/null || break; sleep 0.1; done
  dt=$(( ($(date +%s%N) - t0) / 1000000 ))
  kill -0 $cb 2>/dev/null && { kill $cb; wait $cb; failed "$name" "our rping still running 30 s after its server was killed"; return; }
  wait $cb || crc=$?
  if grep -qE 'DISCONNECT EVENT|RDMA_CM_EVENT_DISCONNECTED|RDMA_CM_EVENT_UNREACHABLE' "$cl"; then
    log "OBSERVED: $name: our rping exit $crc, $dt ms after the kill: $(grep -m1 -E 'DISCONNECT|UNREACHABLE' "$cl")"; pass "$name"
  else failed "$name" "our rping exit $crc after $dt ms without a DISCONNECTED/UNREACHABLE report: $(tail -2 "$cl" | tr '\n' ' ')"; fi
}

# cmtime -c 1, RUNS times against one cmtime server: the median of resolve addr + resolve route +
# create qp + connect ("total ms" rows), i.e. rdma_resolve_addr to ESTABLISHED. SIDE rxe (both
# ends on rxe0, the kernel's CM) or ours (both ends ours, in the namespace, on 127.0.0.1/.2).
cm_setup_median() { # SIDE -> prints the median in ms, or nothing
  local side=$1 port=$((CM_PORT++)) i ms=() sl=$OUT/cm_setup_$1.server.log srv cli bg
  if [ "$side" = rxe ]; then
    srv=(timeout -k 5 "$CM_T" cmtime -b $A4 -p $port) cli=(timeout -k 5 "$CM_T" cmtime -s $A4 -p $port -c 1)
    "${srv[@]}" > "$sl" 2>&1 & bg=$!
    cm_wait_rxe_listen $port $bg || { kill $bg; return; }
  else
    [ -f "$OURS_LIB/librdmacm.so.1" ] || return 0
    srv=("${IN_NS[@]}" env -u HCA_CONFIG "LD_LIBRARY_PATH=$OURS_LIB" HCA_DEVICES=model,roce=127.0.0.1 timeout -k 5 "$CM_T" cmtime -b 127.0.0.1 -p $port)
    cli=("${IN_NS[@]}" env -u HCA_CONFIG "LD_LIBRARY_PATH=$OURS_LIB" HCA_DEVICES=model,roce=127.0.0.2 timeout -k 5 "$CM_T" cmtime -s 127.0.0.1 -p $port -c 1)
    "${srv[@]}" > "$sl" 2>&1 & bg=$!
    for i in $(seq 1 100); do "${IN_NS[@]}" ss -lunH "src 127.0.0.1 and sport = :4791" | grep -q . && break; sleep 0.1; done
    sleep 0.5
  fi
  for i in $(seq 1 "$CM_RUNS"); do
    "${cli[@]}" > "$OUT/cm_setup_$side.$i.log" 2>&1 || continue
    grep -q '^failure' "$OUT/cm_setup_$side.$i.log" && continue
    ms+=("$(awk -F: '/^(resolve addr|resolve route|create qp|connect) *:/ { split($2, f, " "); s += f[1]; n++ } END { if (n == 4) printf "%.2f", s }' "$OUT/cm_setup_$side.$i.log")")
  done
  kill $bg 2>/dev/null; wait $bg 2>/dev/null
  printf '%s\n' "${ms[@]}" | grep . | sort -n | awk '{ v[NR] = $1 } END { if (NR) printf "%s ms (%d runs)", v[int((NR + 1) / 2)], NR }'
}

# The median of each of the four steps over SIDE's cm_setup_median runs, "a / b / c / d" (ms).
cm_setup_steps() { # SIDE
  local step out=()
  for step in 'resolve addr' 'resolve route' 'create qp' 'connect'; do
    out+=("$(cat "$OUT"/cm_setup_"$1".[0-9]*.log 2>/dev/null | awk -F: -v s="$step" '$1 ~ "^" s " *$" { split($2, f, " "); print f[1] }' \
      | sort -n | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "?" }')")
  done
  printf '%s / %s / %s / %s' "${out[@]}"
}

# --- the cases ---------------------------------------------------------------------------------
ts "rdma_cm interop start"
if cm_setup > "$OUT/cm_setup.log" 2>&1; then
  cat "$OUT/cm_setup.log"; pass cm_setup
else
  cat "$OUT/cm_setup.log"; failed cm_setup "$(tail -1 "$OUT/cm_setup.log")"
fi
# Without our librdmacm.so.1 the namespace's programs would load the system's (which finds no
# device there): each case with an end of ours fails at once, saying so, instead.
cm_have_ours() { [ -f "$OURS_LIB/librdmacm.so.1" ] || { failed "$1" "no librdmacm.so.1 of ours in $OURS_LIB (hca/rdmacm/build.sh failed?)"; return 1; }; }
# Controls: kernel CM to kernel CM over rxe0's loopback (the plumbing, without our library).
cm_rping cm_rping_rxe_loopback rxe-both 20
cm_ucmatose cm_ucmatose_rxe_loopback rxe-both 4
cm_udaddy cm_udaddy_rxe_loopback rxe-both

cm_rping cm_rping_rxe_server rxe-server 50
cm_rping cm_rping_ours_server ours-server 50
cm_ucmatose cm_ucmatose_rxe_server rxe-server 4
cm_ucmatose cm_ucmatose_ours_server ours-server 4
cm_udaddy cm_udaddy_rxe_server rxe-server
cm_udaddy cm_udaddy_ours_server ours-server
# 10% loss on the model's port, both ways: lost CM MADs are sent again (the kernel's REQ and REP
# timeouts are ~4 s each, so a lost MAD costs seconds), lost RC packets retransmitted.
cm_rping cm_rping_lossy_ours_client rxe-server 20 ",link-loss=0.1,link-seed=21"
cm_rping cm_rping_lossy_ours_server ours-server 20 ",link-loss=0.1,link-seed=22"
cm_reject cm_reject_unused_port_ours_client ours
cm_reject cm_reject_unused_port_rxe_client rxe
cm_vanish cm_vanish_rxe_server_disconnects_ours
ts "rdma_cm interop cases done"

# Connection setup, side by side (report only: TCG figures are noisy).
cm_rxe_ms=$(cm_setup_median rxe) cm_ours_ms=$(cm_setup_median ours)
log "NUMBERS: TCG connection setup median (cmtime -c 1: resolve addr to ESTABLISHED): rxe ${cm_rxe_ms:-?}, model ${cm_ours_ms:-?}"
log "NUMBERS: TCG connection setup steps (median ms: resolve addr / resolve route / create qp / connect): rxe $(cm_setup_steps rxe), model $(cm_setup_steps ours)"
# Report only: the case needs rxe's figure (the kernel CM's setup works); the model's may be missing.
[ -n "$cm_rxe_ms" ] && pass cm_setup_figures \
  || failed cm_setup_figures "rxe: ${cm_rxe_ms:-no figure}; model: ${cm_ours_ms:-no figure} (logs in $OUT/cm_setup_*)"
ts "rdma_cm interop done"
