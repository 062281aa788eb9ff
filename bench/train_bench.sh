#!/usr/bin/env bash
# train_bench.sh: step time of DDP training (examples/pytorch/train_ddp.py) with the gradient
# all-reduce through ina (the ina.torch hook) against Gloo (DDP's default all-reduce), on
# loopback and on the emulated cluster of bench/compare.sh (network namespaces on a bridge,
# each worker link shaped with tbf; root only, skipped otherwise). Prints a markdown table and
# writes it to bench/results/train.md. Not part of `make test`. See --help.
set -uo pipefail
exec </dev/null

usage() {
    cat <<'EOF'
Usage: bench/train_bench.sh [options]

Runs train_ddp.py (digits CNN, batch 32 per rank, SGD) for each setting, worker count, model
width and backend, one process per rank launched as torchrun would (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), and reports rank 0's step time: forward + backward (with DDP's
gradient all-reduce) + optimizer step, the median of the per-epoch medians of epochs 2..E
(epoch 1 is warm-up). Also a 1-rank Gloo run per width: the step time without any partner,
i.e. mostly compute.

Options:
  --workers LIST    worker counts (default 2,4)
  --hidden LIST     hidden-layer widths (default 64,1024: 38K and 540K parameters,
                    150 KiB and 2.1 MiB of float32 gradients)
  --epochs E        epochs per run (default 4)
  --settings LIST   loopback,cluster (default both; cluster needs root, ip and tc)
  --rate RATE       tbf rate of each worker link in the cluster (default 1gbit)
  --mtu MTU         cluster MTU (default 9000; ina uses 2048 elements per packet)
  --out FILE        markdown output (default bench/results/train.md)
  --help            this text
Environment: INA_BUILD_DIR (default build).
EOF
}

cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD_DIR=${INA_BUILD_DIR:-build}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
WORKERS=2,4 HIDDEN=64,1024 EPOCHS=4 SETTINGS=loopback,cluster RATE=1gbit MTU=9000
OUT=$ROOT/bench/results/train.md
while [ $# -gt 0 ]; do
    case $1 in
        --workers) WORKERS=${2:?}; shift ;;
        --hidden) HIDDEN=${2:?}; shift ;;
        --epochs) EPOCHS=${2:?}; shift ;;
        --settings) SETTINGS=${2:?}; shift ;;
        --rate) RATE=${2:?}; shift ;;
        --mtu) MTU=${2:?}; shift ;;
        --out) OUT=${2:?}; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "train_bench: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[[ $EPOCHS =~ ^[0-9]+$ ]] && [ "$EPOCHS" -ge 2 ] || { echo "train_bench: --epochs >= 2" >&2; exit 2; }

PY=${INA_PYTHON:-/usr/bin/python3}
TRAIN=$ROOT/examples/pytorch/train_ddp.py
SW_BIN=$BUILD_DIR/bin/ina-switch
[ -x "$SW_BIN" ] && [ -e "$BUILD_DIR/lib/libina.so" ] || {
    echo "train_bench: build first (make): no $SW_BIN or $BUILD_DIR/lib/libina.so" >&2
    exit 1
}
export INA_LIBRARY=$BUILD_DIR/lib/libina.so
RUN=$(mktemp -d /tmp/train_bench.XXXXXX)
RAW=$RUN/raw.jsonl
: >"$RAW"
log() { printf '[train_bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
has() { [[ ,$1, == *,$2,* ]]; }

# shellcheck source=scripts/netns.sh
source "$ROOT/scripts/netns.sh"
# shellcheck source=bench/ranks.sh
source "$ROOT/bench/ranks.sh"
CLUSTER= SW_PID= BG_PIDS=()
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    [ -n "$SW_PID" ] && kill -TERM "$SW_PID" 2>/dev/null
    [ -n "$CLUSTER" ] && ina_ns_teardown "$CLUSTER"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM
PORT=$((30000 + $$ % 20000))

# start_switch SETTING: sets SW_PID and SW_ADDR.
start_switch() {
    local pf=$RUN/sw.port i
    rm -f "$pf"
    if [ "$1" = cluster ]; then
        ip netns exec "${CLUSTER}sw" "$SW_BIN" --listen "$(ina_ns_ip "$CLUSTER" sw):48864" \
            --port-file "$pf" --quiet 2>>"$RUN/switch.err" &
    else
        "$SW_BIN" --listen 127.0.0.1:0 --port-file "$pf" --quiet 2>>"$RUN/switch.err" &
    fi
    SW_PID=$!
    for ((i = 0; i < 100; i++)); do [ -s "$pf" ] && break; sleep 0.05; done
    [ -s "$pf" ] || { log "ina-switch did not start (see $RUN/switch.err)"; return 1; }
    if [ "$1" = cluster ]; then SW_ADDR=$(ina_ns_ip "$CLUSTER" sw):$(cat "$pf")
    else SW_ADDR=127.0.0.1:$(cat "$pf"); fi
}

stop_switch() {
    [ -n "$SW_PID" ] || return 0
    kill -TERM "$SW_PID" 2>/dev/null
    timeout 10 tail --pid="$SW_PID" -f /dev/null 2>/dev/null
    kill -KILL "$SW_PID" 2>/dev/null
    wait "$SW_PID" 2>/dev/null
    SW_PID=
}

# run_train SETTING N HIDDEN BACKEND: N ranks; rank 0's JSON lines, tagged, go to RAW.
run_train() {
    local setting=$1 n=$2 hidden=$3 backend=$4 r rc=0 master ifname
    local d=$RUN/$setting-n$n-h$hidden-$backend to=$((120 + 60 * EPOCHS))
    mkdir -p "$d"
    PORT=$((PORT + 1))
    if [ "$setting" = cluster ]; then master=$(ina_ns_ip "$CLUSTER" w0) ifname=eth0
    else master=127.0.0.1 ifname=lo; fi
    for ((r = 0; r < n; r++)); do
        local cmd=(timeout -k 5 "$to")
        [ "$setting" = cluster ] && cmd=(ip netns exec "${CLUSTER}w$r" "${cmd[@]}")
        cmd+=(env RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=$master MASTER_PORT=$PORT
            GLOO_SOCKET_IFNAME=$ifname OMP_NUM_THREADS=1 INA_SWITCH=${SW_ADDR:-127.0.0.1}
            INA_JOB=tb-$n-$hidden-$$)
        [ "$setting" = cluster ] && cmd+=(INA_ELEMS=2048)
        cmd+=("$PY" "$TRAIN" --backend "$backend" --epochs "$EPOCHS" --hidden "$hidden"
            --seed 1 --json --timeout "$to")
        start_rank "$d" "$r" "${cmd[@]}"
    done
    wait_ranks
    if [ "$rc" -ne 0 ] || [ "$(grep -c '^{' "$d/out.0")" -ne "$EPOCHS" ]; then
        log "FAILED: $backend ($setting, N=$n, hidden $hidden), exit status $rc; see $d"
        tail -5 "$d"/err.* >&2
        printf '{"setting":"%s","workers":%d,"hidden":%d,"backend":"%s","failed":true}\n' \
            "$setting" "$n" "$hidden" "$backend" >>"$RAW"
        return 1
    fi
    sed "s/^{/{\"setting\":\"$setting\",\"hidden\":$hidden,/" "$d/out.0" >>"$RAW"
    log "$backend ($setting, N=$n, hidden $hidden): step ms per epoch $(sed -n 's/.*"step_ms_median": \([0-9.]*\).*/\1/p' "$d/out.0" | awk '{ printf "%.2f ", $1 }')"
}

# run_setting SETTING: every N, width and backend (the switch runs for all of them).
run_setting() {
    local setting=$1 n h b
    start_switch "$setting" || return 1
    if [ "$setting" = loopback ]; then
        for h in ${HIDDEN//,/ }; do run_train loopback 1 "$h" gloo; done
    fi
    for n in ${WORKERS//,/ }; do
        [ "$setting" = cluster ] && [ "$n" -gt "$CLUSTER_N" ] && continue
        for h in ${HIDDEN//,/ }; do
            for b in gloo ina; do run_train "$setting" "$n" "$h" "$b"; done
        done
    done
    stop_switch
}

T0=$(date +%s)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
if has "$SETTINGS" loopback; then
    log "loopback: N=$WORKERS, hidden $HIDDEN, $EPOCHS epochs"
    run_setting loopback
fi
CLUSTER_NOTE=
if has "$SETTINGS" cluster; then
    if [ "$(id -u)" -ne 0 ]; then
        CLUSTER_NOTE="cluster setting skipped: network namespaces need root"
    elif ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
        CLUSTER_NOTE="cluster setting skipped: ip/tc (iproute2) missing"
    else
        # One cluster with the largest N; smaller N use its first workers.
        CLUSTER_N=$(tr ',' '\n' <<<"$WORKERS" | sort -n | tail -1)
        ina_ns_reap_stale tb
        CLUSTER=tb$CLUSTER_N
        ina_ns_teardown "$CLUSTER" 2>/dev/null
        log "cluster: $CLUSTER_N worker namespaces, tbf $RATE each worker link both ways, MTU $MTU"
        if ina_ns_setup "$CLUSTER" "$CLUSTER_N" "$RATE" "$MTU"; then
            run_setting cluster
        else
            CLUSTER_NOTE="cluster setup failed (scripts/netns.sh): skipped"
        fi
        ina_ns_teardown "$CLUSTER"
        CLUSTER=
    fi
    [ -n "$CLUSTER_NOTE" ] && log "$CLUSTER_NOTE"
fi
ELAPSED=$(($(date +%s) - T0))

mkdir -p "$(dirname "$OUT")"
"$PY" - "$RAW" "$OUT" "$EPOCHS" "$RATE" "$MTU" "$LOAD0" "$(cut -d' ' -f1-3 /proc/loadavg)" \
    "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)" "$(nproc)" \
    "$ELAPSED" "$CLUSTER_NOTE" <<'PYEOF'
import datetime, json, statistics, sys
raw, out, epochs, rate, mtu, load0, load1, rev, ncores, elapsed, cnote = sys.argv[1:12]
recs = [json.loads(l) for l in open(raw) if l.strip()]
runs = {}
for r in recs:
    key = (r["setting"], r["workers"] if "workers" in r else r["world"], r["hidden"], r["backend"])
    runs.setdefault(key, []).append(r)
def step(key):
    rs = runs.get(key)
    if not rs or rs[0].get("failed"):
        return None, None
    return statistics.median(x["step_ms_median"] for x in rs if x["epoch"] >= 2), rs[-1]["accuracy"]
params = {64: 38282, 1024: 540362}
def model(h):
    p = params.get(h)
    return "hidden %d (%s params, %s KiB)" % (h, "{:,}".format(p) if p else "?", "%.0f" % (p * 4 / 1024) if p else "?")
fmt = lambda v: "FAIL" if v is None else ("%.2f" % v)
L = []
L.append("## DDP training step time: ina vs Gloo (examples/pytorch/train_ddp.py)")
L.append("")
L.append("Run %s, build %s, %s cores, %s epochs per run (median of the per-epoch median step times of epochs 2..%s, rank 0), %s s in all. Load average at start %s, at end %s: the machine is shared." % (
    datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"), rev, ncores, epochs, epochs, elapsed, load0, load1))
L.append("")
L.append("Step = forward + backward (DDP's gradient all-reduce, overlapped with backward) + SGD step; batch 32 per rank. Ratio = ina / Gloo (below 1: ina faster). Accuracy: test accuracy after the last epoch, Gloo / ina.")
L.append("")
for setting, title in (("loopback", "Loopback: every rank, the switch and Gloo on 127.0.0.1, %s cores shared" % ncores),
                       ("cluster", "Emulated cluster: namespaces + bridge, tbf %s each worker link both ways, MTU %s" % (rate, mtu))):
    keys = sorted({(k[1], k[2]) for k in runs if k[0] == setting and k[1] > 1})
    if not keys:
        if setting == "cluster" and cnote:
            L += ["### " + title, "", cnote, ""]
        continue
    L += ["### " + title, "", "| N | model | Gloo step ms | ina step ms | ina/Gloo | accuracy Gloo / ina |", "|---|---|---|---|---|---|"]
    for n, h in keys:
        g, ga = step((setting, n, h, "gloo"))
        i, ia = step((setting, n, h, "ina"))
        ratio = "%.2f" % (i / g) if g and i else "-"
        acc = "%s / %s" % ("%.3f" % ga if ga is not None else "-", "%.3f" % ia if ia is not None else "-")
        L.append("| %d | %s | %s | %s | %s | %s |" % (n, model(h), fmt(g), fmt(i), ratio, acc))
    if setting == "loopback":
        ones = sorted(k[2] for k in runs if k[0] == setting and k[1] == 1)
        if ones:
            L.append("")
            L.append("One rank, no partner (mostly compute): " + "; ".join(
                "%s: %s ms" % (model(h), fmt(step((setting, 1, h, "gloo"))[0])) for h in ones) + ".")
    L.append("")
text = "\n".join(L)
open(out, "w").write(text + "\n")
print(text)
PYEOF
log "wrote $OUT (raw runs in $RUN)"
