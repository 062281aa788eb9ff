# shellcheck shell=bash
# slurm_cluster.sh: sourced by tests/scripts/test_slurm.sh (not a test itself). A private
# one-node Slurm cluster on this host, from Debian's slurm-wlm and munge, as root: its own
# munged (own key and socket), slurmctld and slurmd on free loopback ports, a generated
# slurm.conf with no cgroup plugin (proctrack/linuxproc, task/none), state and logs in one
# directory. Nothing of the host's /etc/slurm or /run/munge is used or touched.
#
#   slurm_start DIR NCPUS   start it (at most 30 s); exports SLURM_CONF; @return 0, or 1 with
#                           the reason in $slurm_why (the caller SKIPs with it)
#   slurm_stop              stop the daemons it started (by pid), newest first
#   slurm_logs              the tails of its daemons' logs, for a failure

slurm_dir= slurm_why= slurm_pids=()

# A free TCP port on 127.0.0.1 (bind to port 0, read it back).
slurm_free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# slurm_wait_pidfile FILE: the pid in FILE once a daemon wrote it (at most 10 s).
slurm_wait_pidfile() {
    local _
    for _ in $(seq 100); do
        [ -s "$1" ] && { cat "$1"; return 0; }
        sleep 0.1
    done
    return 1
}

slurm_start() {
    slurm_dir=$1
    local ncpus=$2 d=$1 host p
    for p in munged slurmctld slurmd srun sbatch sinfo; do
        command -v "$p" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin
        command -v "$p" >/dev/null 2>&1 || { slurm_why="no $p (scripts/deps.sh --test installs slurm-wlm and munge)"; return 1; }
    done
    [ "$(id -u)" -eq 0 ] || { slurm_why="not root: slurmd must run as root to start tasks"; return 1; }
    mkdir -p "$d/state" "$d/spool" "$d/log"
    chmod 700 "$d"
    # munge: a fresh key, a private socket.
    dd if=/dev/urandom of="$d/munge.key" bs=1024 count=1 status=none
    chmod 600 "$d/munge.key"
    munged --force --key-file="$d/munge.key" --socket="$d/munge.sock" \
        --pid-file="$d/munged.pid" --log-file="$d/log/munged.log" --seed-file="$d/munge.seed" \
        >"$d/log/munged.out" 2>&1 || { slurm_why="munged did not start: $(tail -2 "$d/log/munged.out" "$d/log/munged.log" 2>/dev/null | tr '\n' ' ')"; return 1; }
    slurm_pids+=("$(slurm_wait_pidfile "$d/munged.pid")")
    host=$(hostname -s)
    cat >"$d/slurm.conf" <<CONF
ClusterName=inatest
SlurmctldHost=$host(127.0.0.1)
AuthType=auth/munge
AuthInfo=socket=$d/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$(slurm_free_port)
SlurmdPort=$(slurm_free_port)
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
PlugStackConfig=$d/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SchedulerParameters=sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName=$host NodeAddr=127.0.0.1 CPUs=$ncpus RealMemory=1000 State=UNKNOWN
PartitionName=ina Nodes=$host Default=YES MaxTime=30 State=UP
CONF
    : >"$d/plugstack.conf"
    export SLURM_CONF=$d/slurm.conf
    slurmctld -i -f "$SLURM_CONF" >"$d/log/slurmctld.out" 2>&1 || { slurm_why="slurmctld did not start: $(tail -3 "$d/log/slurmctld.log" 2>/dev/null | tr '\n' ' ')"; return 1; }
    slurm_pids+=("$(slurm_wait_pidfile "$d/slurmctld.pid")")
    slurmd -f "$SLURM_CONF" >"$d/log/slurmd.out" 2>&1 || { slurm_why="slurmd did not start: $(tail -3 "$d/log/slurmd.log" 2>/dev/null | tr '\n' ' ')"; return 1; }
    slurm_pids+=("$(slurm_wait_pidfile "$d/slurmd.pid")")
    local _
    for _ in $(seq 60); do
        if sinfo -h -N -o '%T' 2>/dev/null | grep -qx 'idle'; then
            return 0
        fi
        sleep 0.5
    done
    slurm_why="the node did not become idle in 30 s: $(sinfo -h -N -o '%T %E' 2>&1 | head -2 | tr '\n' ' ') $(tail -3 "$d/log/slurmctld.log" 2>/dev/null | tr '\n' ' ')"
    return 1
}

slurm_logs() {
    local f
    for f in "$slurm_dir"/log/*; do
        [ -s "$f" ] || continue
        echo "--- $f (tail)"
        tail -15 "$f"
    done
}

# slurm_stop: SIGTERM to each daemon this cluster started (newest first), then SIGKILL after
# 10 s to any left.
slurm_stop() {
    local i pid _
    for ((i = ${#slurm_pids[@]} - 1; i >= 0; i--)); do
        pid=${slurm_pids[i]}
        [ -n "$pid" ] || continue
        kill -TERM "$pid" 2>/dev/null || continue
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null
    done
    slurm_pids=()
}
