# shellcheck shell=bash
# mlf_harness.sh: sourced by the MLfabric script tests (test_mlfabric.sh, test_mlf_aggregate.sh)
# after harness.sh, with MLF (ina-mlf), PS (ina-ps), W (workers) and D (the bound) set; not a
# test itself.
# Gives: start (a daemon on a free port), start_chain (a primary and its chain replica),
# workers / wait_workers, until_version, sum_field, counter, stop; every daemon and worker started is killed on exit.
pids=()
cleanup_all() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; cleanup; }
trap cleanup_all EXIT

# start NAME CMD...: a daemon on a free port (its --port-file); sets $pid and $port.
start() {
    local name=$1
    shift
    rm -f "$tmp/$name.port"
    "$@" --listen 127.0.0.1:0 --port-file "$tmp/$name.port" 2>"$tmp/$name.log" &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 200); do [ -s "$tmp/$name.port" ] && break; sleep 0.05; done
    port=$(cat "$tmp/$name.port" 2>/dev/null)
}
# start_chain CASE FAULTS...: a replica (--chain-from) and its primary (--chain-to) on loopback;
# the replica must name the primary's port before it starts, so that port is picked here
# (again if taken). Sets ${CASE}p/${CASE}r (pids) and ${CASE}pport/${CASE}rport.
start_chain() {
    local c=$1 try pp
    shift
    for try in 1 2 3 4 5; do
        pp=$((20000 + RANDOM % 30000))
        start "${c}r" "$PS" --quiet --chain-from 127.0.0.1:$pp "$@"
        local rpid=$pid rport=$port
        "$PS" --quiet --listen 127.0.0.1:$pp --chain-to 127.0.0.1:$rport "$@" 2>"$tmp/${c}p.log" &
        local ppid=$!
        pids+=("$ppid")
        sleep 0.2
        if kill -0 "$ppid" 2>/dev/null; then
            eval "${c}p=$ppid ${c}r=$rpid ${c}pport=$pp ${c}rport=$rport"
            return 0
        fi
        stop "$rpid" # the port was taken: another
    done
    return 1
}
# workers CASE ARGS...: start W workers in the background; their pids in $wpids.
workers() {
    local c=$1 r
    shift
    wpids=()
    for r in $(seq 0 $((W - 1))); do
        "$MLF" --rank "$r" --world "$W" --max-delay "$D" --job "$c" "$@" >"$tmp/$c.$r" 2>"$tmp/$c.$r.err" &
        wpids+=($!)
        pids+=($!)
    done
}
wait_workers() { local rc=0 p; for p in "${wpids[@]}"; do wait "$p" || rc=1; done; return $rc; }
# until_version CASE V: wait (at most 60 s) until rank 0 reports a model version >= V.
until_version() {
    for _ in $(seq 1200); do
        awk -v v="$2" '/^mlf: version/ && $3 >= v { f = 1 } END { exit !f }' "$tmp/$1.0" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}
# sum_field CASE NAME: NAME's value summed over the workers' last lines (ranks 0..9).
sum_field() { cat "$tmp/$1".[0-9] | sed -n "s/.* $2 \([0-9]*\).*/\1/p" | awk '{ s += $1 } END { print s + 0 }'; }
# counter NAME COUNTER: a daemon's counter from its exit report.
counter() { sed -n "s/^  $2 *\([0-9]*\)$/\1/p" "$tmp/$1.log"; }
stop() { kill -TERM "$1" 2>/dev/null; wait "$1" 2>/dev/null; }
# same_servers PRIMARY REPLICA (their log names): both applied the same updates, the same
# groups, with the same delays.
same_servers() {
    local n
    for n in updates_applied updates_aggregated aggregated_members updates_stale; do
        [ "$(counter "$1" $n)" = "$(counter "$2" $n)" ] || { echo "$n differs"; return 1; }
    done
    [ "$(grep '^  delay_' "$tmp/$1.log")" = "$(grep '^  delay_' "$tmp/$2.log")" ]
}
