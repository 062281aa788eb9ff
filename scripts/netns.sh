# netns.sh: a sourceable bash library that builds and tears down an emulated cluster out of
# Linux network namespaces, veth pairs and one bridge, with optional link shaping (tbf) and
# random packet loss (nftables on the bridge). Needs root, iproute2 (ip, tc) and nft.
#
#   source scripts/netns.sh
#   ina_ns_setup PREFIX NWORKERS [RATE [MTU]]   build the cluster (RATE e.g. 1gbit, "" = none)
#   ina_ns_loss PREFIX PERCENT                  drop PERCENT% of IPv4 packets on the bridge
#                                               (0.01% steps, e.g. 1, 0.1, 2.5); 0 removes it
#   ina_ns_loss_stats PREFIX                    print "SEEN DROPPED" (IPv4 packets on the bridge)
#   ina_ns_host_link PREFIX                     optional: join the root namespace to the bridge
#                                               (interface ${PREFIX}h, address .254)
#   ina_ns_teardown PREFIX                      remove everything; idempotent, safe after a
#                                               partial setup, meant for an EXIT trap
#   ina_ns_reap_stale [PREFIX_START]            tear down clusters whose owner shell is dead
#   ina_ns_name PREFIX ROLE / ina_ns_ip PREFIX ROLE / ina_ns_exec PREFIX ROLE CMD...
#                                               ROLE is sw, w0..w(N-1), s0..s(M-1), br (no
#                                               address)
#   ina_ns_shape_aggregators PREFIX RATE        (re)shape the links of sw and every sI to
#                                               RATE both ways; "" removes the shaping
#   ina_ns_subnet PREFIX                        print the /24's first three octets (10.77.X)
#
# Layout (PREFIX: 1-8 characters [a-z0-9], starting with a letter):
#   namespace ${PREFIX}br  holds the bridge ${PREFIX}br and the bridge-side veth ends
#                          ${PREFIX}sw, ${PREFIX}w0, ... (and ${PREFIX}hb for the host link)
#                          and, when loss is on, the nft table "bridge ina_${PREFIX}"
#   namespace ${PREFIX}sw  the switch: eth0 = 10.77.X.1/24
#   namespace ${PREFIX}wI  worker I:   eth0 = 10.77.X.(10+I)/24   (I < 240)
#   namespace ${PREFIX}sI  aggregator (shard) host I: eth0 = 10.77.X.(2+I)/24 (I < 8), only
#                          with INA_NS_SHARDS=M (M <= 8): M such hosts, like the switch's
# The bridge lives in its own namespace, so nothing of a cluster exists in the root
# namespace (unless ina_ns_host_link is called), its nft table cannot collide with the
# machine's, and its traffic cannot leave the machine: no namespace has a route anywhere
# but its own /24. Deleting the namespaces deletes every veth pair.
# X = 20 + (cksum of PREFIX mod 200), or INA_NS_SUBNET=10.A.B to choose the /24. The /24 only
# matters for the optional host link: clusters are isolated from each other anyway.
#
# Shaping (RATE given): a tbf qdisc as root qdisc on both ends of each WORKER's veth pair:
# eth0 inside the worker namespace shapes worker->bridge, the bridge-side end shapes
# bridge->worker (egress only, so no ifb is needed). The switch's link is not shaped: the
# workers' links are the bottleneck, as on a real aggregating switch. INA_NS_SHAPE_SWITCH=1
# shapes it (and every shard host's) to RATE too, INA_NS_SWITCH_RATE to a rate of its own (an
# aggregator host with a NIC of k times a worker's: docs/SCALE.md). tbf burst: INA_NS_BURST (default 128kb = 128 KiB, enough for a 64 KB GSO
# batch), queue: INA_NS_LATENCY (default 20ms of the rate). Measured with a UDP blast at 100mbit:
# ~98 Mbit/s each way; a sender in a worker namespace is slowed down by its own qdisc, while
# traffic to a worker beyond the rate is tail-dropped at the bridge-side tbf (as a switch port
# would; these drops show in `tc -n PREFIXbr -s qdisc`, not in ina_ns_loss_stats).
# Multicast: the bridge floods it (no IGMP snooping) to the worker ports only; the ports of the
# aggregator hosts (sw, sI) have mcast_flood off, as if a snooping switch knew their hosts join
# no group. Results multicast by ina-switch --multicast so reach every worker.
# MTU: 1500 by default; MTU (4th argument) or INA_NS_MTU, e.g. 9000, sets every interface.
# Loss: one nft table in the bridge namespace, family bridge, forward chain; it counts every
# IPv4 frame the bridge forwards, then drops N of 10000 at random (`numgen random mod 10000
# < N`). ARP and IPv6 are not dropped (IPv6 is disabled in the namespaces anyway). Both
# directions of every link are affected, since the bridge forwards both ways.
# Teardown kills the processes still running inside the cluster's namespaces (they can only
# have been started there by the user of this library), then deletes the namespaces.
#
# The functions return non-zero with a message on stderr instead of exiting, and do not
# change the caller's shell options.

INA_NS_STATE_DIR=${INA_NS_STATE_DIR:-/run/ina-netns}

_ina_ns_err() { echo "netns.sh: $*" >&2; }

_ina_ns_check_prefix() {
    if [[ ! ${1-} =~ ^[a-z][a-z0-9]{0,7}$ ]]; then
        _ina_ns_err "bad PREFIX '${1-}' (1-8 characters [a-z0-9], starting with a letter)"
        return 1
    fi
}

ina_ns_subnet() {
    _ina_ns_check_prefix "${1-}" || return 1
    if [ -n "${INA_NS_SUBNET-}" ]; then
        echo "$INA_NS_SUBNET"
    else
        local sum
        sum=$(printf '%s' "$1" | cksum | cut -d' ' -f1)
        echo "10.77.$((20 + sum % 200))"
    fi
}

ina_ns_name() {
    _ina_ns_check_prefix "${1-}" || return 1
    case ${2-} in
        sw | br | w[0-9] | w[0-9][0-9] | w[0-9][0-9][0-9] | s[0-7]) echo "$1$2" ;;
        *) _ina_ns_err "bad ROLE '${2-}' (sw, br, wI or sI)"; return 1 ;;
    esac
}

ina_ns_ip() {
    local net
    net=$(ina_ns_subnet "${1-}") || return 1
    case ${2-} in
        sw) echo "$net.1" ;;
        w[0-9] | w[0-9][0-9] | w[0-9][0-9][0-9]) echo "$net.$((10 + 10#${2#w}))" ;;
        s[0-7]) echo "$net.$((2 + ${2#s}))" ;;
        host) echo "$net.254" ;;
        *) _ina_ns_err "no address for ROLE '${2-}'"; return 1 ;;
    esac
}

ina_ns_exec() {
    local ns
    ns=$(ina_ns_name "${1-}" "${2-}") || return 1
    shift 2
    ip netns exec "$ns" "$@"
}

# The namespaces that belong to cluster PREFIX (exact names only: ${P}sw, ${P}br, ${P}wI).
_ina_ns_list() {
    local p=$1 n
    ip netns list 2>/dev/null | while read -r n _; do
        [[ $n =~ ^$p(sw|br|w[0-9]+|s[0-7])$ ]] && echo "$n"
    done
}

# Percent ("1", "0.1", "2.5") -> drops per 10000, or an error.
_ina_ns_per10k() {
    [[ ${1-} =~ ^([0-9]+)(\.[0-9]*)?$ ]] || return 1
    awk -v p="$1" 'BEGIN { n = int(p * 100 + 0.5); if (n > 10000) exit 1; print n }'
}

# Join the veth end IFACE (already inside namespace NS) with address ADDR (or none).
_ina_ns_if_up() {
    local ns=$1 ifc=$2 addr=$3 mtu=$4
    ip -n "$ns" link set "$ifc" mtu "$mtu" || return 1
    [ -z "$addr" ] || ip -n "$ns" addr add "$addr/24" dev "$ifc" || return 1
    ip -n "$ns" link set "$ifc" up
}

_ina_ns_shape() {
    local ns=$1 ifc=$2 rate=$3
    tc -n "$ns" qdisc replace dev "$ifc" root tbf rate "$rate" \
        burst "${INA_NS_BURST:-128kb}" latency "${INA_NS_LATENCY:-20ms}"
}

_ina_ns_new_ns() {
    ip netns add "$1" || return 1
    ip -n "$1" link set lo up || return 1
    # No IPv6 (no DAD, router solicitations or MLD noise on the bridge); best effort.
    ip netns exec "$1" sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 \
        net.ipv6.conf.default.disable_ipv6=1 >/dev/null 2>&1 || true
}

# Create one endpoint namespace ROLE (sw or wI) joined to the bridge.
_ina_ns_add_node() {
    local p=$1 role=$2 mtu=$3 rate=$4 brns="${1}br" ns="$1$2" addr
    addr=$(ina_ns_ip "$p" "$role") || return 1
    _ina_ns_new_ns "$ns" || return 1
    # Created inside the bridge namespace, its peer moved straight into $ns: no interface
    # ever appears in the root namespace.
    ip -n "$brns" link add "$ns" type veth peer name eth0 netns "$ns" || return 1
    ip -n "$brns" link set "$ns" master "$p"br || return 1
    _ina_ns_if_up "$brns" "$ns" "" "$mtu" || return 1
    _ina_ns_if_up "$ns" eth0 "$addr" "$mtu" || return 1
    case $role in
        sw | s[0-7])
            # No multicast floods toward an aggregator host: the bridge does no IGMP snooping,
            # so without this a job's result group (ina-switch --multicast) would also reach
            # every other aggregator's shaped link, where a switch with snooping sends it to
            # the group's members (the workers) only.
            ip -n "$brns" link set dev "$ns" type bridge_slave mcast_flood off || return 1
            # An aggregator host: unshaped (a hardware switch's port) unless asked.
            if [ -n "${INA_NS_SWITCH_RATE-}" ]; then rate=$INA_NS_SWITCH_RATE
            elif [ "${INA_NS_SHAPE_SWITCH:-0}" != 1 ]; then rate=; fi ;;
    esac
    if [ -n "$rate" ]; then
        _ina_ns_shape "$ns" eth0 "$rate" || return 1
        _ina_ns_shape "$brns" "$ns" "$rate" || return 1
    fi
}

# (Re)shape the aggregator links (sw and every sI) of cluster PREFIX to RATE, both ways, or
# remove their shaping with RATE "".
ina_ns_shape_aggregators() {
    local p=${1-} rate=${2-} ns role
    _ina_ns_check_prefix "$p" || return 1
    for ns in $(_ina_ns_list "$p"); do
        role=${ns#"$p"}
        case $role in sw | s[0-7]) ;; *) continue ;; esac
        if [ -n "$rate" ]; then
            _ina_ns_shape "$ns" eth0 "$rate" && _ina_ns_shape "${p}br" "$ns" "$rate" || return 1
        else
            tc -n "$ns" qdisc del dev eth0 root 2>/dev/null
            tc -n "${p}br" qdisc del dev "$ns" root 2>/dev/null
        fi
    done
    return 0
}

ina_ns_setup() {
    local p=${1-} n=${2-} rate=${3-} mtu=${4:-${INA_NS_MTU:-1500}} i brns
    _ina_ns_check_prefix "$p" || return 1
    if [[ ! $n =~ ^[0-9]+$ ]] || [ "$n" -lt 1 ] || [ "$n" -gt 240 ]; then
        _ina_ns_err "bad NWORKERS '$n' (1..240)"
        return 1
    fi
    if [[ ! $mtu =~ ^[0-9]+$ ]] || [ "$mtu" -lt 576 ] || [ "$mtu" -gt 65535 ]; then
        _ina_ns_err "bad MTU '$mtu'"
        return 1
    fi
    if [ -n "$(_ina_ns_list "$p")" ]; then
        _ina_ns_err "cluster '$p' already exists (namespaces: $(_ina_ns_list "$p" | tr '\n' ' ')); run ina_ns_teardown $p"
        return 1
    fi
    if ! { mkdir -p "$INA_NS_STATE_DIR/$p" && echo "$$" >"$INA_NS_STATE_DIR/$p/owner"; }; then
        _ina_ns_err "cannot write $INA_NS_STATE_DIR/$p"
        return 1
    fi
    brns="${p}br"
    if ! {
        _ina_ns_new_ns "$brns" &&
            ip -n "$brns" link add "${p}br" type bridge stp_state 0 forward_delay 0 \
                mcast_snooping 0 &&
            ip -n "$brns" link set "${p}br" mtu "$mtu" up &&
            _ina_ns_add_node "$p" sw "$mtu" "$rate"
    }; then
        _ina_ns_err "setup of cluster '$p' failed; tearing it down"
        ina_ns_teardown "$p"
        return 1
    fi
    local m=${INA_NS_SHARDS:-0} role roles=()
    if [[ ! $m =~ ^[0-8]$ ]]; then
        _ina_ns_err "bad INA_NS_SHARDS '$m' (0..8)"
        ina_ns_teardown "$p"
        return 1
    fi
    for ((i = 0; i < n; i++)); do roles+=("w$i"); done
    for ((i = 0; i < m; i++)); do roles+=("s$i"); done # shard hosts
    for role in "${roles[@]}"; do
        if ! _ina_ns_add_node "$p" "$role" "$mtu" "$rate"; then
            _ina_ns_err "setup of $role of cluster '$p' failed; tearing it down"
            ina_ns_teardown "$p"
            return 1
        fi
    done
    echo "$n" >"$INA_NS_STATE_DIR/$p/workers"
}

ina_ns_loss() {
    local p=${1-} pct=${2-} n brns
    _ina_ns_check_prefix "$p" || return 1
    if ! n=$(_ina_ns_per10k "$pct"); then
        _ina_ns_err "bad PERCENT '$pct' (0..100, steps of 0.01)"
        return 1
    fi
    brns="${p}br"
    if ! ip netns list 2>/dev/null | grep -q "^$brns\\b"; then
        _ina_ns_err "no cluster '$p' (namespace $brns missing)"
        return 1
    fi
    # Delete any previous table (ignore "no such table"), then install the new one atomically.
    ip netns exec "$brns" nft delete table bridge "ina_$p" 2>/dev/null
    [ "$n" -eq 0 ] && return 0
    ip netns exec "$brns" nft -f - <<EOF
table bridge ina_$p {
    chain forward {
        type filter hook forward priority 0; policy accept;
        ether type ip counter comment "seen"
        ether type ip numgen random mod 10000 < $n counter drop comment "dropped"
    }
}
EOF
}

# Print "SEEN DROPPED": IPv4 frames the bridge forwarded (or was asked to) and dropped since
# the loss table was installed; "0 0" when there is no loss table.
ina_ns_loss_stats() {
    local p=${1-} out
    _ina_ns_check_prefix "$p" || return 1
    out=$(ip netns exec "${p}br" nft list chain bridge "ina_$p" forward 2>/dev/null) || {
        echo "0 0"
        return 0
    }
    awk '/counter packets/ { for (i = 1; i < NF; i++) if ($i == "packets") v[++k] = $(i + 1) }
         END { printf "%d %d\n", v[1], v[2] }' <<<"$out"
}

# Optional: a veth from the root namespace to the bridge, ${PREFIX}h = 10.77.X.254/24
# (e.g. for a launcher such as mpirun that must reach the ranks). The root-side interface
# carries the alias "ina-netns:PREFIX"; it disappears with the bridge namespace.
ina_ns_host_link() {
    local p=${1-} brns mtu addr
    _ina_ns_check_prefix "$p" || return 1
    brns="${p}br"
    addr=$(ina_ns_ip "$p" host) || return 1
    mtu=$(ip -n "$brns" -o link show "${p}br" 2>/dev/null | sed -n 's/.* mtu \([0-9]*\) .*/\1/p')
    [ -n "$mtu" ] || { _ina_ns_err "no cluster '$p'"; return 1; }
    ip link add "${p}h" type veth peer name "${p}hb" netns "$brns" || return 1
    if ! { ip link set "${p}h" alias "ina-netns:$p" &&
        ip -n "$brns" link set "${p}hb" master "${p}br" &&
        _ina_ns_if_up "$brns" "${p}hb" "" "$mtu" &&
        ip link set "${p}h" mtu "$mtu" &&
        ip addr add "$addr/24" dev "${p}h" &&
        ip link set "${p}h" up; }; then
        _ina_ns_err "host link of cluster '$p' failed"
        ip link delete "${p}h" 2>/dev/null
        return 1
    fi
}

ina_ns_teardown() {
    local p=${1-} ns pids pid alias tries
    _ina_ns_check_prefix "$p" || return 1
    local nss
    nss=$(_ina_ns_list "$p")
    # Processes left inside the cluster (a switch, workers): TERM, then KILL.
    for tries in 1 2 3 4 5 6 7 8 9 10 11; do
        pids=
        for ns in $nss; do
            pids+=" $(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
        done
        [ -z "${pids// /}" ] && break
        for pid in $pids; do
            if [ "$tries" = 1 ]; then kill -TERM "$pid" 2>/dev/null
            elif [ "$tries" -ge 6 ]; then kill -KILL "$pid" 2>/dev/null; fi
        done
        sleep 0.2
    done
    for ns in $nss; do
        ip netns delete "$ns" 2>/dev/null || _ina_ns_err "could not delete namespace $ns"
    done
    # The host link's root-side end goes with its peer; remove it only if it is still there
    # and is ours.
    alias=$(ip -o link show "${p}h" 2>/dev/null | sed -n 's/.*alias \([^ ]*\).*/\1/p')
    [ "$alias" = "ina-netns:$p" ] && ip link delete "${p}h" 2>/dev/null
    rm -rf "${INA_NS_STATE_DIR:?}/$p"
    return 0
}

# Tear down clusters (optionally only those whose PREFIX starts with PREFIX_START) that were
# set up by a shell that no longer exists (e.g. a run killed with SIGKILL).
ina_ns_reap_stale() {
    local start=${1-} d p owner
    [ -d "$INA_NS_STATE_DIR" ] || return 0
    for d in "$INA_NS_STATE_DIR"/"$start"*; do
        [ -d "$d" ] || continue
        p=${d##*/}
        _ina_ns_check_prefix "$p" 2>/dev/null || continue
        owner=$(cat "$d/owner" 2>/dev/null)
        if [ -z "$owner" ] || ! kill -0 "$owner" 2>/dev/null; then
            _ina_ns_err "removing stale cluster '$p' (owner ${owner:-unknown} is gone)"
            ina_ns_teardown "$p"
        fi
    done
}
