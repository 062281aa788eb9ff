# shellcheck shell=bash
# ranks.sh: sourced by bench/compare.sh and bench/train_bench.sh: one command per rank in the
# background, each logged, then wait for all of them. The caller declares BG_PIDS=() (its
# cleanup kills what is in it) and a local rc=0.

# start_rank DIR R CMD...: append CMD to DIR/cmd and run it in the background, stdout to
# DIR/out.R and stderr to DIR/err.R; its pid goes into BG_PIDS.
start_rank() {
    local d=$1 r=$2
    shift 2
    printf '%q ' "$@" >>"$d/cmd"
    echo >>"$d/cmd"
    "$@" >"$d/out.$r" 2>"$d/err.$r" &
    BG_PIDS+=($!)
}

# wait_ranks: wait for every pid in BG_PIDS, then empty it; rc becomes the first nonzero exit
# status if it was 0.
wait_ranks() {
    local p st
    for p in "${BG_PIDS[@]}"; do
        wait "$p"
        st=$?
        [ "$st" -ne 0 ] && [ "$rc" -eq 0 ] && rc=$st
    done
    BG_PIDS=()
}
