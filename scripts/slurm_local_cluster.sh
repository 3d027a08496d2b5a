#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine (no systemd needed), for the
# `slurm` tests and for trying the SLURM launchers by hand.
#
#   scripts/slurm_local_cluster.sh install   # apt packages (slurm, munge, slurmdbd, mariadb)
#   scripts/slurm_local_cluster.sh start     # idempotent; waits until jobs can run
#   scripts/slurm_local_cluster.sh status
#   scripts/slurm_local_cluster.sh stop      # cancels jobs, stops every daemon
#   eval "$(scripts/slurm_local_cluster.sh env)"   # export SLURM_CONF for sbatch/squeue/sacct
#
# Everything lives under $AGILERL_SLURM_DIR (default /tmp/agilerl-slurm): configs,
# state, logs, the accounting database. Partitions: `debug` (default) and `urgent`
# (higher priority tier: its jobs preempt and requeue `debug` jobs). The node has
# 8 job slots and 2 fake GPUs (gpus_per_node reaches jobs as CUDA_VISIBLE_DEVICES).
set -euo pipefail

DIR="${AGILERL_SLURM_DIR:-/tmp/agilerl-slurm}"
ETC="$DIR/etc"
LOG="$DIR/log"
RUN="$DIR/run"
DB_PORT="${AGILERL_SLURM_DB_PORT:-3307}"
DB_SOCK="$RUN/mariadb.sock"
export SLURM_CONF="$ETC/slurm.conf"

die() { echo "slurm_local_cluster: error: $*" >&2; exit 1; }
say() { echo "slurm_local_cluster: $*"; }

# wait_for SECONDS DESCRIPTION LOGFILE COMMAND...
wait_for() {
  local seconds=$1 what=$2 logfile=$3; shift 3
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if (( SECONDS >= deadline )); then
      echo "slurm_local_cluster: error: $what not ready after ${seconds}s" >&2
      [[ -f "$logfile" ]] && { echo "--- last lines of $logfile:" >&2; tail -n 20 "$logfile" >&2; }
      exit 1
    fi
    sleep 0.5
  done
}

pid_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

cmd_install() {
  local missing=()
  for bin in slurmctld slurmd slurmdbd sbatch munged mariadbd; do
    command -v "$bin" >/dev/null 2>&1 || [[ -x "/usr/sbin/$bin" ]] || missing+=("$bin")
  done
  if (( ${#missing[@]} == 0 )); then say "packages already installed"; return; fi
  say "installing slurm, munge, slurmdbd and mariadb (missing: ${missing[*]})"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client slurmdbd munge mariadb-server mariadb-client >/dev/null
}

write_configs() {
  mkdir -p "$ETC" "$LOG" "$RUN" "$DIR/ctld" "$DIR/d" "$DIR/gpu"
  local mem_mb=8000
  for i in 0 1; do
    [[ -e "$DIR/gpu/fakegpu$i" ]] || mknod "$DIR/gpu/fakegpu$i" c 1 3
  done
  cat >"$ETC/slurm.conf" <<CONF
ClusterName=agilerl
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
AuthInfo=cred_expire=5
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/d
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=6819
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
MpiDefault=none
MailProg=/bin/true
MinJobAge=3600
ReturnToService=2
JobRequeue=1
KillWait=15
SlurmdParameters=config_overrides
GresTypes=gpu
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 RealMemory=$mem_mb Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=20
PartitionName=urgent Nodes=localhost MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
CONF
  echo "NodeName=localhost Name=gpu File=$DIR/gpu/fakegpu[0-1]" >"$ETC/gres.conf"
  cat >"$ETC/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
PidFile=$RUN/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
CONF
  chmod 600 "$ETC/slurmdbd.conf"
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  if [[ ! -f /etc/munge/munge.key ]]; then
    (mungekey --create 2>/dev/null || /usr/sbin/create-munge-key -f) >/dev/null
    chown munge:munge /etc/munge/munge.key
  fi
  runuser -u munge -- /usr/sbin/munged
  wait_for 15 munge /var/log/munge/munged.log bash -c 'munge -n | unmunge'
}

start_mariadb() {
  if [[ -S "$DB_SOCK" ]] && pid_alive "$RUN/mariadb.pid"; then return; fi
  port_busy "$DB_PORT" && die "port $DB_PORT is taken (set AGILERL_SLURM_DB_PORT to a free port)"
  if [[ ! -d "$DIR/mysql/mysql" ]]; then
    mariadb-install-db --no-defaults --datadir="$DIR/mysql" --user=root \
      --auth-root-authentication-method=socket >"$LOG/mariadb-install.log" 2>&1 \
      || { tail -n 20 "$LOG/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
  fi
  nohup mariadbd --no-defaults --user=root --datadir="$DIR/mysql" --socket="$DB_SOCK" \
    --port="$DB_PORT" --bind-address=127.0.0.1 --pid-file="$RUN/mariadb.pid" \
    --log-error="$LOG/mariadb.log" --skip-name-resolve >/dev/null 2>&1 &
  wait_for 30 mariadb "$LOG/mariadb.log" mariadb --no-defaults -S "$DB_SOCK" -u root -e "select 1"
  mariadb --no-defaults -S "$DB_SOCK" -u root -e \
    "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
     GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
}

start_slurmdbd() {
  if pid_alive "$RUN/slurmdbd.pid"; then return; fi
  port_busy 6819 && die "port 6819 (slurmdbd) is taken by another process; stop it first"
  slurmdbd  # reads slurmdbd.conf next to $SLURM_CONF
  wait_for 30 slurmdbd "$LOG/slurmdbd.log" sacctmgr -n list cluster
  if ! sacctmgr -n -P list cluster format=cluster | grep -qx agilerl; then
    sacctmgr -i add cluster agilerl >/dev/null
  fi
}

start_slurmctld() {
  if pid_alive "$RUN/slurmctld.pid"; then return; fi
  port_busy 6817 && die "port 6817 (slurmctld) is taken by another process; stop it first"
  slurmctld -f "$SLURM_CONF"
  wait_for 30 slurmctld "$LOG/slurmctld.log" scontrol ping
}

node_idle() { [[ "$(sinfo -h -n localhost -o %t 2>/dev/null)" =~ ^(idle|mix|alloc)$ ]]; }

start_slurmd() {
  if pid_alive "$RUN/slurmd.pid"; then return; fi
  port_busy 6818 && die "port 6818 (slurmd) is taken by another process; stop it first"
  slurmd -f "$SLURM_CONF" -N localhost
  wait_for 45 "slurmd (node idle)" "$LOG/slurmd.log" node_idle
  scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true
}

cmd_start() {
  command -v slurmctld >/dev/null 2>&1 || [[ -x /usr/sbin/slurmctld ]] \
    || die "SLURM is not installed: run '$0 install' first"
  export PATH="$PATH:/usr/sbin"
  write_configs
  start_munge
  start_mariadb
  start_slurmdbd
  start_slurmctld
  start_slurmd
  wait_for 30 "a test job (srun -t 1 true)" "$LOG/slurmctld.log" srun -t 1 true
  say "ready: $(sinfo -h -o '%P %a %D %t' | tr '\n' ';') SLURM_CONF=$SLURM_CONF"
}

stop_pidfile() {
  local file=$1
  pid_alive "$file" || { rm -f "$file"; return 0; }
  local pid; pid=$(cat "$file")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || { rm -f "$file"; return 0; }; sleep 0.25; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$file"
}

cmd_stop() {
  export PATH="$PATH:/usr/sbin"
  if [[ -f "$SLURM_CONF" ]] && scontrol ping >/dev/null 2>&1; then
    scancel -u "$(id -un)" >/dev/null 2>&1 || true
    for _ in $(seq 1 60); do
      [[ -z "$(squeue -h -t running,completing,pending 2>/dev/null)" ]] && break
      sleep 0.5
    done
  fi
  stop_pidfile "$RUN/slurmd.pid"
  pkill -9 -f "slurmstepd: \[" 2>/dev/null || true
  stop_pidfile "$RUN/slurmctld.pid"
  stop_pidfile "$RUN/slurmdbd.pid"
  stop_pidfile "$RUN/mariadb.pid"
  say "stopped (munged left running; state kept in $DIR)"
}

cmd_status() {
  export PATH="$PATH:/usr/sbin"
  for name in mariadb slurmdbd slurmctld slurmd; do
    if pid_alive "$RUN/$name.pid"; then echo "$name: running (pid $(cat "$RUN/$name.pid"))";
    else echo "$name: stopped"; fi
  done
  if scontrol ping >/dev/null 2>&1; then sinfo; squeue; fi
}

case "${1:-}" in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) echo "export SLURM_CONF=$SLURM_CONF" ;;
  *) echo "usage: $0 install|start|stop|status|env" >&2; exit 2 ;;
esac
