#!/usr/bin/env bash
# A single-node Slurm cluster (Debian's slurm-wlm + munge) on this host, for the tests and CI.
#
#   scripts/slurm-local.sh start    install (root + apt, when missing), configure, start; idempotent
#   scripts/slurm-local.sh stop     stop the daemons this script started
#   scripts/slurm-local.sh status   "up" (exit 0) or "down" (exit 1), plus sinfo
#
# State, spool, logs and slurm.conf live in REPRO_SLURM_DIR (default /tmp/repro-slurm). When
# /etc/slurm/slurm.conf does not exist it becomes a link to ours, so plain sbatch/squeue (and
# submitit) find the cluster without SLURM_CONF; an existing slurm.conf is never touched (then
# export SLURM_CONF=$REPRO_SLURM_DIR/slurm.conf). Two partitions: `debug` (default, up) and
# `held` (down: jobs there stay queued, which the tests use to see a queued job).
# No cgroups in a container: proctrack/linuxproc, task/none, no accounting database.
set -euo pipefail

DIR="${REPRO_SLURM_DIR:-/tmp/repro-slurm}"
CONF="$DIR/slurm.conf"
ETC_CONF=/etc/slurm/slurm.conf

say() { echo "slurm-local: $*" >&2; }

install_if_missing() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v munged >/dev/null && command -v sbatch >/dev/null; then
        return
    fi
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        say "slurm-wlm/munge missing; install them: apt-get install -y slurm-wlm munge"
        exit 2
    fi
    say "installing slurm-wlm and munge (apt)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
}

write_conf() {
    local host node
    host="$(hostname -s)"
    # this host's real CPUs/memory, as slurmd sees them (NodeName=... CPUs=... RealMemory=...)
    node="$(slurmd -C | head -n 1)"
    mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
    cat >"$CONF" <<EOF
ClusterName=repro-local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# A requeued job waits cred_expire + 1 s before it may start again (default 120 s); the
# node-failure test requeues one, and on one loopback node 30 s is ample for the old attempt.
AuthInfo=cred_expire=30
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=${REPRO_SLURMCTLD_PORT:-6817}
SlurmdPort=${REPRO_SLURMD_PORT:-6818}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
# finished jobs stay visible to scontrol for an hour (there is no accounting database)
MinJobAge=3600
KillWait=10
InactiveLimit=0
$node State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
PartitionName=held Nodes=$host MaxTime=INFINITE State=DOWN
EOF
    if [ ! -e "$ETC_CONF" ] && [ "$(id -u)" = 0 ]; then
        mkdir -p /etc/slurm
        ln -s "$CONF" "$ETC_CONF"
    fi
}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_munge() {
    if [ -S /run/munge/munge.socket.2 ] && munge -n </dev/null >/dev/null 2>&1; then
        return
    fi
    mkdir -p /run/munge
    chown munge:munge /run/munge 2>/dev/null || true
    if [ ! -s /etc/munge/munge.key ]; then
        mungekey --create --keyfile /etc/munge/munge.key
        chown munge:munge /etc/munge/munge.key
        chmod 400 /etc/munge/munge.key
    fi
    if id munge >/dev/null 2>&1; then
        su -s /bin/sh munge -c "/usr/sbin/munged"
    else
        /usr/sbin/munged --force
    fi
}

wait_up() {
    local deadline=$((SECONDS + 60)) state
    while [ $SECONDS -lt $deadline ]; do
        state=$(SLURM_CONF="$CONF" sinfo -h -p debug -o %t 2>/dev/null | head -n 1)
        case "$state" in
            idle* | mix* | alloc*) return 0 ;;
            # a test left the node drained or down (e.g. a relaunch Slurm refused): this
            # cluster exists for the tests, so put it back in service
            drain* | drng* | down*)
                SLURM_CONF="$CONF" scontrol update NodeName="$(hostname -s)" State=RESUME 2>/dev/null || true ;;
        esac
        sleep 0.5
    done
    say "cluster not up after 60 s; logs in $DIR/log"
    tail -n 20 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
    return 1
}

start() {
    install_if_missing
    if pid_alive "$DIR/slurmctld.pid" && pid_alive "$DIR/slurmd.pid"; then
        wait_up && say "already up ($CONF)"
        return
    fi
    write_conf
    start_munge
    pid_alive "$DIR/slurmctld.pid" || slurmctld -f "$CONF"
    pid_alive "$DIR/slurmd.pid" || slurmd -f "$CONF"
    wait_up
    say "up: partitions debug (default) and held (down); conf $CONF"
}

stop() {
    local name pidfile
    for name in slurmd slurmctld; do
        pidfile="$DIR/$name.pid"
        if pid_alive "$pidfile"; then
            kill "$(cat "$pidfile")"
            for _ in $(seq 1 50); do pid_alive "$pidfile" || break; sleep 0.2; done
        fi
    done
    if [ -L "$ETC_CONF" ] && [ "$(readlink "$ETC_CONF")" = "$CONF" ]; then
        rm -f "$ETC_CONF"
    fi
    say "stopped (munged left running: other services may use it)"
}

status() {
    if pid_alive "$DIR/slurmctld.pid" && pid_alive "$DIR/slurmd.pid"; then
        echo up
        SLURM_CONF="$CONF" sinfo || true
        return 0
    fi
    echo down
    return 1
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
*)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
