# Helpers for a stage that runs Debian's unmodified programs over this project's libraries and
# checks each case against an expected list (sourced by tests/ibverbs/run.sh and
# tests/rdmacm/run.sh). The sourcing script sets, before calling them:
#   T         seconds each program may take (every wait is bounded by `timeout`)
#   OUT       the stage's folder; each case gets $OUT/cases/<name>/ ($D while it runs)
#   FILTER    a bash regex: only cases whose name matches run (a partial run, never a pass)
# and calls, in order: need_packages PKG..., run_case NAME FUNCTION ARGS... (any number),
# stage_verdict EXPECTED_FILE LABEL.

fail() { echo "FAILED: $*" >&2; exit 1; }
skip() { echo; echo "SKIPPED: $*"; exit 0; }

# Installs the Debian packages of $@ that are missing. A package that cannot be fetched — judged
# from the output of the apt command that failed, and only that one — skips the stage; any other
# apt failure fails it.
need_packages() {
  local p missing=() log
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  command -v apt-get >/dev/null || fail "missing ${missing[*]} and no apt-get"
  log=$(mktemp)
  apt_fetch_failed() { grep -qE 'Failed to fetch|Unable to fetch|Temporary failure resolving|Could not resolve|Unable to connect' "$log"; }
  echo "== apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=300 update >"$log" 2>&1 || {
    apt_fetch_failed && skip "apt-get update cannot reach Debian's archive ($(grep -m1 -E 'Failed|Unable|resolv' "$log"))"
    tail -20 "$log" >&2; fail "apt-get update failed"
  }
  DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${missing[@]}" >"$log" 2>&1 || {
    apt_fetch_failed && skip "a package cannot be fetched ($(grep -m1 -E 'Failed to fetch|Unable to fetch' "$log"))"
    tail -20 "$log" >&2; fail "apt-get install ${missing[*]} failed"
  }
}

status_text() {
  case $1 in
    0) echo "exit status 0" ;;
    124 | 137) echo "timed out after ${T} s" ;;
    *) echo "exit status $1" ;;
  esac
}

# A TCP port nothing listens on now (the kernel's pick), for a program's control connection.
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("",0)); print(s.getsockname()[1])'; }

# Whether something listens on TCP port $1 (IPv4 or IPv6), read from /proc without connecting
# (a probe connection would be taken for the client).
listening() {
  local hex; hex=$(printf '%04X' "$1")
  awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' /proc/net/tcp /proc/net/tcp6
}

# Waits (at most 15 s) until TCP port $1 listens, while process $2 lives.
wait_listen() {
  local i
  for ((i = 0; i < 300; i++)); do
    listening "$1" && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# Whether UDP port $2 is bound on IPv4 address $1 or on the wildcard (in this namespace).
udp_bound() {
  local a b c d; IFS=. read -r a b c d <<<"$1"
  local want; want=$(printf '%02X%02X%02X%02X:%04X' "$d" "$c" "$b" "$a" "$2")
  awk -v w="$want" -v any="$(printf '00000000:%04X' "$2")" '$2 == w || $2 == any { f = 1 } END { exit !f }' /proc/net/udp
}

RAN=()
FAILED=()
# run_case NAME FUNCTION ARGS...: the function runs in a subshell with $D (its folder); its
# output is the reason when it fails, its figures when it passes. A case whose logs say that an
# address it was given is taken (another run holds it: "cannot bind UDP ...: Address already in
# use") runs again, at most 3 times. $NEW_ADDRESSES (a command of the sourcing script, if set)
# runs before every try: it picks the case's addresses.
run_case() {
  local name=$1 why rc f try
  shift
  if [ -n "$FILTER" ] && ! [[ $name =~ $FILTER ]]; then return 0; fi
  D=$OUT/cases/$name
  for try in 1 2 3; do
    rm -rf "$D"; mkdir -p "$D"
    ${NEW_ADDRESSES:-:}
    rc=0; why=$("$@" 2>&1) || rc=$?
    [ "$rc" != 0 ] && grep -qs 'Address already in use' "$D"/*.log || break
    echo "    ($name: an address was taken, try $((try + 1)) with others)"
  done
  RAN+=("$name")
  if [ "$rc" = 0 ]; then
    echo "PASS $name"
    [ -z "$why" ] || printf '%s\n' "$why" | sed 's/^/    /'
    return 0
  fi
  FAILED+=("$name")
  echo "FAIL $name: $(printf '%s\n' "${why:-exit status $rc}" | head -1)"
  printf '%s\n' "$why" | tail -n +2 | head -60 | sed 's/^/    /'
  for f in "$D"/*.log; do
    [ -s "$f" ] || continue
    echo "    --- last lines of $(basename "$f"):"
    tail -n 15 "$f" | sed 's/^/      /'
  done
}

# The names of an expected-cases file: its first word per line, comments and blank lines left out.
expected_cases() { awk '!/^[[:space:]]*(#|$)/ { print $1 }' "$1"; }

# The cases an expected-cases file marks `broken: <why>` (second word): known not to work yet. They
# still run; their failure is printed as KNOWN-BROKEN and does not fail the stage, and their
# passing does (FIXED: the mark must go), so the file always says what really works.
broken_cases() { awk '!/^[[:space:]]*(#|$)/ && $2 == "broken:" { print $1 }' "$1"; }
# The cases marked `flaky: <why>`: they pass on some runs and not on others (a race not found yet).
# They run and their result is printed (FLAKY-FAILED / PASS) without deciding the stage.
flaky_cases() { awk '!/^[[:space:]]*(#|$)/ && $2 == "flaky:" { print $1 }' "$1"; }

# stage_verdict EXPECTED_FILE LABEL: the cases that ran must be exactly those the file names, all
# passed but the broken ones. Prints "LABEL: N/M cases passed" and exits: 0 pass, 1 failure, 3 a
# partial run (FILTER).
stage_verdict() {
  local file=$1 label=$2 c bad=0 expected=() broken=() flaky=() failed=()
  mapfile -t expected < <(expected_cases "$file")
  mapfile -t broken < <(broken_cases "$file")
  mapfile -t flaky < <(flaky_cases "$file")
  for c in "${FAILED[@]}"; do
    if [[ " ${flaky[*]} " == *" $c "* ]]; then echo "FLAKY-FAILED $c: $(grep -E "^$c[[:space:]]" "$file" | cut -d: -f2-)"
    elif [[ " ${broken[*]} " == *" $c "* ]]; then echo "KNOWN-BROKEN $c: $(grep -E "^$c[[:space:]]" "$file" | cut -d: -f2-)"; else failed+=("$c"); fi
  done
  for c in "${broken[@]}"; do
    [[ " ${RAN[*]} " == *" $c "* && " ${FAILED[*]} " != *" $c "* ]] && { echo "FIXED $c: it passes, remove its broken mark"; bad=1; }
  done
  for c in "${expected[@]}"; do
    [[ " ${RAN[*]} " == *" $c "* ]] || { [ -n "$FILTER" ] || { echo "MISSING $c: expected, did not run"; bad=1; }; }
  done
  for c in "${RAN[@]}"; do
    [[ " ${expected[*]} " == *" $c "* ]] || { echo "UNEXPECTED $c: ran, not in $(basename "$file")"; bad=1; }
  done
  echo "$label: $((${#RAN[@]} - ${#FAILED[@]}))/${#expected[@]} cases passed (${#RAN[@]} ran, ${#FAILED[@]} failed, ${#broken[@]} marked broken, ${#flaky[@]} flaky) in $(($(date +%s) - T0)) s"
  ((${#failed[@]})) && { echo "FAILED: ${failed[*]}"; exit 1; }
  [ "$bad" = 0 ] || fail "the cases that ran are not those in $(basename "$file")"
  ((${#RAN[@]})) || fail "no case ran"
  if [ -n "$FILTER" ]; then echo "PARTIAL: filter $FILTER (never a stage pass)"; exit 3; fi
  echo "PASSED: every case in $(basename "$file")"
}
