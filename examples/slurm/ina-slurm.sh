#!/usr/bin/env bash
# ina-slurm.sh: the pieces of an ina deployment inside a Slurm allocation, for ina.sbatch
# (docs/CLUSTER.md walks through it). Every node runs the same commands; what reaches the
# workers (the aggregators' addresses, the job's secret) goes through a run directory that
# every node sees (on a cluster: a shared file system, e.g. under $SLURM_SUBMIT_DIR).
#
#   ina-slurm.sh secret                     write a fresh job secret (mode 600) into the run dir
#   ina-slurm.sh aggregators                one task per node (srun --ntasks-per-node=1): start
#                                           this node's aggregator(s), write their addresses,
#                                           stay in the foreground until the step is cancelled
#   ina-slurm.sh wait N [SECONDS]           wait until N nodes' aggregators listen (default 60 s)
#   ina-slurm.sh run CMD [ARGS...]          one task per worker (srun): set INA_SWITCH and
#                                           INA_SECRET_FILE for this node, then exec CMD
#
# Environment:
#   INA_RUN_DIR   the run directory (required; created by `secret`)
#   INA_BIN       the directory with ina-switch (default: beside this script's build, or PATH)
#   INA_LAYOUT    shards (default): an ina-switch on every node, every worker lists them all
#                 (colocated shards); tree: the same parent shards, plus a child switch per
#                 node (ina-switch --parent) that the node's workers join
#   INA_NODE_ADDR the address this node's aggregators listen on and are reached at (default:
#                 the first address its host name resolves to)
#   INA_AGG_ARGS  more ina-switch options (e.g. "--slots 4096 --threads 2")
#   INA_AGG_PORT  the parent shards' port (default 0: a free one, published in the run dir)
set -euo pipefail
exec </dev/null

prog=ina-slurm.sh
die() { echo "$prog: $*" >&2; exit 1; }
case ${1:-} in -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
[ -n "${INA_RUN_DIR:-}" ] || die "INA_RUN_DIR is not set (a directory every node sees)"
RUN=$INA_RUN_DIR
LAYOUT=${INA_LAYOUT:-shards}
case $LAYOUT in shards | tree) ;; *) die "INA_LAYOUT=$LAYOUT: not 'shards' or 'tree'" ;; esac

switch_bin() {
    local here
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    for c in "${INA_BIN:+$INA_BIN/ina-switch}" "$here/../../build/bin/ina-switch"; do
        [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return; }
    done
    command -v ina-switch || die "no ina-switch (set INA_BIN)"
}

node_addr() {
    if [ -n "${INA_NODE_ADDR:-}" ]; then echo "$INA_NODE_ADDR"; return; fi
    local a
    a=$(getent ahostsv4 "$(hostname)" | awk 'NR == 1 { print $1 }')
    [ -n "$a" ] || die "$(hostname) does not resolve: set INA_NODE_ADDR"
    echo "$a"
}

# start NAME ARGS...: an ina-switch in the background on a free port or INA_AGG_PORT, its
# log in the run dir; once it listens (at most 30 s), publishes ADDR:PORT as $RUN/NAME.NODEID
# (written whole, then renamed: a reader never sees half of it). Not in a subshell: the
# switch must be this shell's child (and must not hold a command substitution's pipe).
start() {
    local name=$1 addr port_arg
    shift
    addr=$(node_addr)
    port_arg=${INA_AGG_PORT:-0}
    [ "$name" = parent ] || port_arg=0
    rm -f "$RUN/$name.$SLURM_NODEID.port"
    # shellcheck disable=SC2086
    "$SW" --listen "$addr:$port_arg" --port-file "$RUN/$name.$SLURM_NODEID.port" \
        --secret-file "$RUN/secret" ${INA_AGG_ARGS:-} "$@" \
        2>"$RUN/$name.$(hostname -s).log" &
    pids+=($!)
    for _ in $(seq 300); do
        if [ -s "$RUN/$name.$SLURM_NODEID.port" ]; then
            echo "$addr:$(cat "$RUN/$name.$SLURM_NODEID.port")" >"$RUN/$name.$SLURM_NODEID.tmp"
            mv "$RUN/$name.$SLURM_NODEID.tmp" "$RUN/$name.$SLURM_NODEID"
            return
        fi
        kill -0 "${pids[-1]}" 2>/dev/null || die "ina-switch ($name) on $(hostname) exited: $(tail -3 "$RUN/$name.$(hostname -s).log")"
        sleep 0.1
    done
    die "ina-switch ($name) on $(hostname) did not listen in 30 s"
}

# The node's aggregators. The parent tier (one shard per node) is published first; a tree's
# child needs every parent's address, so it waits for all of them.
aggregators() {
    : "${SLURM_NODEID:?not in a Slurm step}" "${SLURM_JOB_NUM_NODES:?not in a Slurm job}"
    SW=$(switch_bin)
    pids=()
    # SIGTERM: scancel --signal=TERM signals every process of the step, the switches too;
    # each prints its counters to its log and exits 0. The trap only notes it (a trap that
    # does more can run in the middle of a command substitution).
    term=0
    trap 'term=1' TERM INT
    start parent
    if [ "$LAYOUT" = tree ]; then
        wait_for parent "$SLURM_JOB_NUM_NODES" 60
        start child --parent "$(list parent "$SLURM_JOB_NUM_NODES")" --shm
    fi
    echo "$prog: $(hostname -s): aggregators up ($LAYOUT): $(cat "$RUN"/*."$SLURM_NODEID" | tr '\n' ' ')" >&2
    # Until the step is cancelled (scancel, or the job ends): a switch that dies ends the step.
    while :; do
        wait -n || true
        if [ "$term" = 1 ]; then
            kill -TERM "${pids[@]}" 2>/dev/null || true
            wait || true
            exit 0
        fi
        kill -0 "${pids[@]}" 2>/dev/null && continue
        die "an ina-switch on $(hostname) exited; see $RUN/*.$(hostname -s).log"
    done
}

# list KIND N: the addresses of nodes 0..N-1, comma-separated, in node order (every worker
# must list the shards in the same order).
list() {
    local out= i
    for ((i = 0; i < $2; i++)); do out+=${out:+,}$(cat "$RUN/$1.$i"); done
    echo "$out"
}

# wait_for KIND N SECONDS
wait_for() {
    local i n
    for ((i = 0; i < $3 * 10; i++)); do
        n=$(find "$RUN" -maxdepth 1 -name "$1.[0-9]*" ! -name '*.port' ! -name '*.tmp' ! -name '*.log' | wc -l)
        [ "$n" -ge "$2" ] && return 0
        sleep 0.1
    done
    die "only $n of $2 nodes' $1 aggregators listen after $3 s (logs: $RUN/*.log)"
}

case ${1:-} in
secret)
    mkdir -p "$RUN"
    (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$RUN/secret")
    ;;
aggregators) aggregators ;;
wait)
    [ $# -ge 2 ] || die "usage: $prog wait N [SECONDS]"
    wait_for parent "$2" "${3:-60}"
    [ "$LAYOUT" = shards ] || wait_for child "$2" "${3:-60}"
    echo "$prog: $2 nodes' aggregators listen ($LAYOUT): $(list parent "$2")" >&2
    ;;
run)
    shift
    [ $# -ge 1 ] || die "usage: $prog run CMD [ARGS...]"
    : "${SLURM_NODEID:?not in a Slurm step}" "${SLURM_JOB_NUM_NODES:?not in a Slurm job}"
    if [ "$LAYOUT" = tree ]; then
        INA_SWITCH=$(cat "$RUN/child.$SLURM_NODEID")
    else
        INA_SWITCH=$(list parent "$SLURM_JOB_NUM_NODES")
    fi
    export INA_SWITCH INA_SECRET_FILE=$RUN/secret
    exec "$@"
    ;;
*) die "unknown command '${1:-}' (--help)" ;;
esac
