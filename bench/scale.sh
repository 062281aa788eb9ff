# shellcheck shell=bash
# scale.sh: sourced by bench/compare.sh: ina past one aggregator host in the emulated cluster
# (docs/SCALE.md), with every aggregator link shaped like a host's NIC (k x B):
#   one        one ina-switch, in the switch namespace (its link k x B)
#   dedicated  N shards, one per dedicated aggregator host s0..s(N-1) (links k x B)
#   dedicated-mc  the same, each shard multicasting its results (ina-switch --multicast)
#   colocated  N shards, one in each worker namespace (the worker's own link B)
#   tree       a second cluster of N/2 nodes of 2 ranks each: a child switch per node
#              (ina-switch --parent), and a parent tier sharded over N/2 hosts (links k x B);
#              OpenMPI and Gloo are measured again on this topology (2 ranks per node)
# The hardware-switch model (the switch's link unshaped) is compare.sh's own "ina" row.
# Uses compare.sh's globals (CLUSTER, RATE, MTU, ELEMS, DTYPE, RUN, RAW, INA_SWITCH, INA_BENCH,
# GROUPS_ARR, TIME_BIN, HAVE_MPI, HAVE_GLOO) and functions (log, has, group_timeout,
# start_rank, wait_ranks, tag_json, record_failure, summarize, run_mpi, run_gloo).

SCALE_PIDS=()   # aggregators of the current case
SCALE_PORT=48864
SCALE_LABEL=    # the case being measured, and its workers' CPU seconds and wall seconds
SCALE_CPU=0 SCALE_WALL=0

# k x RATE for tc ("1gbit" x 4 -> "4000mbit").
scale_rate() { # K
    awk -v r="$RATE" -v k="$1" 'BEGIN {
        if (!match(r, /^[0-9.]+/)) exit 1
        n = substr(r, 1, RLENGTH); u = substr(r, RLENGTH + 1)
        m = u ~ /^g/ ? 1000 : u ~ /^m/ ? 1 : u ~ /^k/ ? 0.001 : 0.000001
        printf "%dmbit\n", n * m * k }'
}

# scale_start NAME NS ADDR [ina-switch args]: an aggregator in namespace NS on ADDR:PORT.
scale_start() {
    local name=$1 ns=$2 addr=$3 pf
    shift 3
    pf=$SCALE_DIR/$name.port
    rm -f "$pf"
    ip netns exec "$ns" "$INA_SWITCH" --listen "$addr" --port-file "$pf" --quiet "$@" \
        2>"$SCALE_DIR/$name.err" &
    SCALE_PIDS+=($!)
    for _ in $(seq 100); do [ -s "$pf" ] && return 0; sleep 0.05; done
    log "ina-switch $name did not start in $ns (see $SCALE_DIR/$name.err)"
    return 1
}

# CPU seconds (user + system) a running process has used.
proc_cpu() {
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f\n", ($12 + $13) / hz }' \
        "/proc/$1/stat" 2>/dev/null || echo 0
}

# scale_stop N: SIGTERM every aggregator of the case (their counters stay in SCALE_DIR/*.err),
# and record the CPU the case used: the ranks' (from /usr/bin/time) and the aggregators'.
scale_stop() {
    local p sw=0
    for p in "${SCALE_PIDS[@]}"; do sw=$(awk -v a="$sw" -v b="$(proc_cpu "$p")" 'BEGIN { print a + b }'); done
    if [ -n "$SCALE_LABEL" ]; then
        printf '{"kind":"scale_cpu","setting":"cluster","label":"%s","workers":%d,"ranks_cpu_s":%s,"aggregators_cpu_s":%s,"wall_s":%s}\n' \
            "$SCALE_LABEL" "$1" "$SCALE_CPU" "$sw" "$SCALE_WALL" >>"$RAW"
        log "$SCALE_LABEL: the ranks used $SCALE_CPU s of CPU, the aggregators $sw s, in $SCALE_WALL s"
    fi
    SCALE_LABEL= SCALE_CPU=0 SCALE_WALL=0
    for p in "${SCALE_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${SCALE_PIDS[@]}"; do
        timeout 10 tail --pid="$p" -f /dev/null 2>/dev/null
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    SCALE_PIDS=()
}

# Busy share of all cores (percent) between two /proc/stat samples "busy total".
cpu_sample() { awk '/^cpu / { b = $2 + $3 + $4 + $7 + $8; print b, b + $5 + $6 }' /proc/stat; }

# scale_ina N LABEL K WINDOW: N ranks, rank r in namespace RANK_NS[r] with --switch
# RANK_ADDR[r], over every size group; one "scale" record per group (case, k, CPU use).
scale_ina() {
    local n=$1 label=$2 k=$3 window=$4 g it wu mx sizes part to d r rc job b0 t0 b1 t1 w0
    SCALE_LABEL=$label
    for g in "${GROUPS_ARR[@]}"; do
        read -r it wu mx sizes <<<"$g"
        [[ ,$SCALE_SIZES, == *,all,* ]] || sizes=$(scale_filter "$sizes") || continue
        to=$(group_timeout "$it" "$wu" "$mx" "$n")
        d=$RUN/cluster-n$n-$label$DSUF-i$it
        mkdir -p "$d"
        : >"$d/cmd"
        rc=0
        job=s$label-$n-$$$DSUF
        job=${job:0:31}
        read -r b0 t0 < <(cpu_sample)
        w0=$(date +%s.%N)
        for ((r = 0; r < n; r++)); do
            start_rank "$d" "$r" ip netns exec "${RANK_NS[r]}" timeout -k 5 "$to" \
                ${TIME_BIN:+"$TIME_BIN" -f "%U %S" -o "$d/cpu.$r"} "$INA_BENCH" \
                --switch "${RANK_ADDR[r]}" --rank "$r" --world "$n" --job "$job" --json \
                --sizes "$sizes" --dtype "$DTYPE" --iters "$it" --warmup "$wu" --elems "$ELEMS" \
                --window "$window" --deadline-s "$to"
        done
        wait_ranks
        read -r b1 t1 < <(cpu_sample)
        SCALE_WALL=$(awk -v a="$SCALE_WALL" -v w0="$w0" -v w1="$(date +%s.%N)" 'BEGIN { printf "%.2f", a + w1 - w0 }')
        SCALE_CPU=$(cat "$d"/cpu.* 2>/dev/null | awk -v a="$SCALE_CPU" '{ a += $1 + $2 } END { printf "%.2f", a }')
        tag_json cluster "$label" main <"$d/out.0" >>"$RAW"
        printf '{"kind":"scale","setting":"cluster","label":"%s","workers":%d,"k":%s,"sizes":"%s","window":%d,"cpu_busy":%s}\n' \
            "$label" "$n" "$k" "$sizes" "$window" \
            "$(awk -v b="$((b1 - b0))" -v t="$((t1 - t0))" 'BEGIN { printf "%.3f", t ? b / t : 0 }')" >>"$RAW"
        if [ "$rc" -ne 0 ] || ! grep -q '"ok":true' "$d/out.0"; then
            record_failure cluster "$label" "$n" "$rc" "$d/cmd" "$d"/err.* "$SCALE_DIR"/*.err
        else
            log "$label (cluster, N=$n): $(summarize "$d/out.0")"
        fi
    done
}

# The sizes of a group that are in SCALE_SIZES (none: exit status 1).
scale_filter() {
    local s out=
    for s in ${1//,/ }; do [[ ,$SCALE_SIZES, == *,$s,* ]] && out+=${out:+,}$s; done
    [ -n "$out" ] && echo "$out"
}

# scale_dedicated N K MC: N shards, one per dedicated aggregator host (links K x B). MC "mc":
# each shard multicasts every finished sum once (ina-switch --multicast) instead of sending
# it to each worker; the bridge delivers the group to the worker ports only (scripts/netns.sh),
# as a switch with IGMP snooping would. Every shard gets a base of its own (239.255.73+i.0):
# the shards listen on one port, and with one base their jobs' groups would coincide, so every
# worker would receive every shard's results (and drop the others' by their tokens).
scale_dedicated() {
    local n=$1 k=$2 mc=$3 i list= w
    for ((i = 0; i < n; i++)); do
        scale_start "shard$i" "${CLUSTER}s$i" "$(ina_ns_ip "$CLUSTER" "s$i"):$SCALE_PORT" \
            ${mc:+--multicast=239.255.$((73 + i)).0} || break
        list+=${list:+,}$(ina_ns_ip "$CLUSTER" "s$i"):$SCALE_PORT
    done
    for ((i = 0; i < n; i++)); do RANK_NS[i]=${CLUSTER}w$i RANK_ADDR[i]=$list; done
    # 256 packets in flight per worker (2 MiB of jumbo frames), 256/N per shard: the most a
    # shaped link's queue (20 ms at B) holds without drops, measured at N=4 and N=8 (128/N
    # gives batches too small for the VM's 2 cores at N=8; 512/N overflows).
    w=$((256 / n))
    [ "${#SCALE_PIDS[@]}" -eq "$n" ] && scale_ina "$n" "ina-ded${mc}-k$k" "$k" "$w"
    scale_stop "$n"
}

# scale_flat N: the one-switch, dedicated and colocated cases on cluster $CLUSTER (N worker
# hosts, N shard hosts), at every aggregator-link factor of AGG_LINKS.
scale_flat() {
    local n=$1 k i list rate w
    SCALE_DIR=$RUN/scale-n$n
    mkdir -p "$SCALE_DIR"
    for k in ${AGG_LINKS//,/ }; do
        [ "$k" = none ] && continue
        [ "$k" = N ] && k=$n
        rate=$(scale_rate "$k") || return 1
        ina_ns_shape_aggregators "$CLUSTER" "$rate" || { log "cannot shape the aggregators"; return 1; }
        log "aggregator links $k x $RATE = $rate"
        if has "$SCALE_CASES" one; then
            # A window of 32 per worker: N windows in flight must fit the link's queue.
            scale_start one "${CLUSTER}sw" "$(ina_ns_ip "$CLUSTER" sw):$SCALE_PORT" &&
                for ((i = 0; i < n; i++)); do
                    RANK_NS[i]=${CLUSTER}w$i RANK_ADDR[i]=$(ina_ns_ip "$CLUSTER" sw):$SCALE_PORT
                done && scale_ina "$n" "ina-one-k$k" "$k" 32
            scale_stop "$n"
        fi
        has "$SCALE_CASES" dedicated && scale_dedicated "$n" "$k" ""
        has "$SCALE_CASES" dedicated-mc && scale_dedicated "$n" "$k" mc
    done
    ina_ns_shape_aggregators "$CLUSTER" ""
    if has "$SCALE_CASES" colocated; then
        list=
        for ((i = 0; i < n; i++)); do
            scale_start "colo$i" "${CLUSTER}w$i" "$(ina_ns_ip "$CLUSTER" "w$i"):$((SCALE_PORT + 1))" ||
                break
            list+=${list:+,}$(ina_ns_ip "$CLUSTER" "w$i"):$((SCALE_PORT + 1))
        done
        for ((i = 0; i < n; i++)); do RANK_NS[i]=${CLUSTER}w$i RANK_ADDR[i]=$list; done
        # Each host link carries its worker's parts out and its shard's results out: 128/N
        # per part keeps both busy without overflowing the link's queue (256/N at N=8 made
        # ten times the retransmissions and no faster).
        w=$((128 / n))
        [ "${#SCALE_PIDS[@]}" -eq "$n" ] && scale_ina "$n" "ina-colo" 0 "$w"
        scale_stop "$n"
    fi
}

# scale_tree N: a cluster of N/2 nodes (2 ranks each, a child switch each) and N/2 parent
# hosts; ina through the tree at every aggregator-link factor, then OpenMPI and Gloo with the
# same ranks on the same nodes.
scale_tree() {
    local n=$1 nodes=$(($1 / 2)) k c i rate parents list
    [ $((n % 2)) -eq 0 ] && [ "$nodes" -ge 1 ] || return 0
    SCALE_DIR=$RUN/scale-tree-n$n
    mkdir -p "$SCALE_DIR"
    CLUSTER=${NS_PREFIX}t$n
    ina_ns_teardown "$CLUSTER" 2>/dev/null
    log "tree N=$n: $nodes nodes of 2 ranks (namespaces ${CLUSTER}w*), $nodes parent hosts"
    if ! INA_NS_SHARDS=$nodes ina_ns_setup "$CLUSTER" "$nodes" "$RATE" "$MTU" ||
        ! ina_ns_host_link "$CLUSTER"; then
        log "tree cluster setup failed: skipping"
        ina_ns_teardown "$CLUSTER"
        CLUSTER=
        return 1
    fi
    for k in ${AGG_LINKS//,/ }; do
        [ "$k" = none ] && continue
        has "$SCALE_CASES" tree || break
        [ "$k" = N ] && k=$n
        rate=$(scale_rate "$k") || break
        ina_ns_shape_aggregators "$CLUSTER" "$rate"
        parents=
        for ((i = 0; i < nodes; i++)); do
            scale_start "parent$i" "${CLUSTER}s$i" "$(ina_ns_ip "$CLUSTER" "s$i"):$SCALE_PORT" || break
            parents+=${parents:+,}$(ina_ns_ip "$CLUSTER" "s$i"):$SCALE_PORT
        done
        for ((c = 0; c < nodes; c++)); do
            scale_start "child$c" "${CLUSTER}w$c" "$(ina_ns_ip "$CLUSTER" "w$c"):$SCALE_PORT" \
                --parent "$parents" || break
        done
        # Each rank lists its node's child once per parent: nodes parts (one thread), part j
        # a lane the child sends to parent j, so the parent tier is used evenly.
        for ((i = 0; i < n; i++)); do
            RANK_NS[i]=${CLUSTER}w$((i / 2))
            list=
            for ((c = 0; c < nodes; c++)); do
                list+=${list:+,}$(ina_ns_ip "$CLUSTER" "w$((i / 2))"):$SCALE_PORT
            done
            RANK_ADDR[i]=$list
        done
        [ "${#SCALE_PIDS[@]}" -eq $((2 * nodes)) ] && scale_ina "$n" "ina-tree-k$k" "$k" $((128 / nodes))
        scale_stop "$n"
    done
    ina_ns_shape_aggregators "$CLUSTER" ""
    # The rings on the same nodes: run_mpi and run_gloo place rank r in ${CLUSTER}w$r, so
    # RANKS_PER_NS makes them place rank r in ${CLUSTER}w$((r / 2)).
    if has "$SCALE_CASES" tree-peers; then
        local g it wu mx sizes p_sizes='' p_iters='' p_warm='' p_parts='' p_to=0 s
        for g in "${GROUPS_ARR[@]}"; do
            read -r it wu mx sizes <<<"$g"
            [[ ,$SCALE_SIZES, == *,all,* ]] || sizes=$(scale_filter "$sizes") || continue
            for s in ${sizes//,/ }; do
                p_sizes+=${p_sizes:+,}$s p_iters+=${p_iters:+,}$it p_warm+=${p_warm:+,}$wu
                p_parts+=${p_parts:+,}main
            done
            p_to=$((p_to + $(group_timeout "$it" "$wu" "$mx" "$n")))
        done
        RANKS_PER_NS=2 PEER_SUFFIX=-nodes
        [ "$HAVE_MPI" = 1 ] && [ -n "$p_sizes" ] &&
            run_mpi cluster "$n" "$p_parts" "$p_iters" "$p_warm" "$p_sizes" "$p_to" tcp
        [ "$HAVE_GLOO" = 1 ] && [ -n "$p_sizes" ] &&
            run_gloo cluster "$n" "$p_parts" "$p_iters" "$p_warm" "$p_sizes" "$p_to"
        RANKS_PER_NS=1 PEER_SUFFIX=
    fi
    ina_ns_teardown "$CLUSTER"
    CLUSTER=
}
