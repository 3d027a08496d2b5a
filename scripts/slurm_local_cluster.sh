#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine (no systemd needed), for the
# `slurm` tests and for trying the SLURM launchers by hand.
#
#   scripts/slurm_local_cluster.sh install   # apt packages (slurm, munge, slurmdbd, mariadb)
#   scripts/slurm_local_cluster.sh start     # idempotent; waits until jobs can run
#   scripts/slurm_local_cluster.sh status
#   scripts/slurm_local_cluster.sh ports     # the ports it uses (chosen free at first use)
#   scripts/slurm_local_cluster.sh stop      # cancels its jobs, stops the daemons it started
#   eval "$(scripts/slurm_local_cluster.sh env)"   # export SLURM_CONF for sbatch/squeue/sacct
#
# Environment variables:
#   AGILERL_SLURM_DIR       where everything lives: configs, state, logs, pid files, the
#                           accounting database (default /tmp/agilerl-slurm-<user>). Two
#                           clusters on one machine need two directories.
#   AGILERL_SLURM_DB_PORT   MariaDB port (default: a free port from 3307 up)
#   AGILERL_SLURM_PORT      first of the three SLURM ports: slurmctld, slurmd, slurmdbd
#                           (default: three free ports from 6817 up)
# The ports are chosen at the first start and kept in $AGILERL_SLURM_DIR/ports, so a
# restart reuses them. `stop` stops only the processes whose pid files this script
# wrote (and job steps of its own slurmd); munged is a system daemon and is left running.
#
# Partitions: `debug` (default) and `urgent` (higher priority tier: its jobs preempt
# and requeue `debug` jobs). The node has 8 job slots and 2 fake GPUs (gpus_per_node
# reaches jobs as CUDA_VISIBLE_DEVICES).
set -euo pipefail

DIR="${AGILERL_SLURM_DIR:-/tmp/agilerl-slurm-$(id -un)}"
ETC="$DIR/etc"
LOG="$DIR/log"
RUN="$DIR/run"
DB_SOCK="$RUN/mariadb.sock"
PORTS="$DIR/ports"
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

# free_port FROM [EXCLUDED...]: the first port >= FROM nobody listens on (and not excluded)
free_port() {
  local port=$1; shift
  while port_busy "$port" || [[ " $* " == *" $port "* ]]; do port=$((port + 1)); done
  echo "$port"
}

# choose_ports: read $PORTS, or pick free ones (honouring the variables) and write it
choose_ports() {
  mkdir -p "$DIR"
  if [[ -f "$PORTS" ]]; then
    # shellcheck disable=SC1090
    source "$PORTS"
    local name
    for name in mariadb slurmdbd slurmctld slurmd; do
      pid_alive "$RUN/$name.pid" && return  # running: keep its ports
    done
    if ! port_busy "$DB_PORT" && ! port_busy "$CTLD_PORT" && ! port_busy "$SLURMD_PORT" \
      && ! port_busy "$DBD_PORT"; then
      return
    fi
    say "a port in $PORTS is taken now; choosing free ones"
  fi
  DB_PORT="${AGILERL_SLURM_DB_PORT:-$(free_port 3307)}"
  local base="${AGILERL_SLURM_PORT:-6817}"
  if [[ -n "${AGILERL_SLURM_PORT:-}" ]]; then
    CTLD_PORT=$base; SLURMD_PORT=$((base + 1)); DBD_PORT=$((base + 2))
  else
    CTLD_PORT=$(free_port "$base")
    SLURMD_PORT=$(free_port $((CTLD_PORT + 1)))
    DBD_PORT=$(free_port $((SLURMD_PORT + 1)))
  fi
  printf 'DB_PORT=%s\nCTLD_PORT=%s\nSLURMD_PORT=%s\nDBD_PORT=%s\n' \
    "$DB_PORT" "$CTLD_PORT" "$SLURMD_PORT" "$DBD_PORT" >"$PORTS"
}

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
AccountingStoragePort=$DBD_PORT
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
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
DbdPort=$DBD_PORT
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
  port_busy "$DB_PORT" && die "port $DB_PORT (mariadb) is taken; set AGILERL_SLURM_DB_PORT (or remove $PORTS)"
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
  port_busy "$DBD_PORT" && die "port $DBD_PORT (slurmdbd) is taken; set AGILERL_SLURM_PORT (or remove $PORTS)"
  slurmdbd  # reads slurmdbd.conf next to $SLURM_CONF
  wait_for 30 slurmdbd "$LOG/slurmdbd.log" sacctmgr -n list cluster
  if ! sacctmgr -n -P list cluster format=cluster | grep -qx agilerl; then
    sacctmgr -i add cluster agilerl >/dev/null
  fi
}

start_slurmctld() {
  if pid_alive "$RUN/slurmctld.pid"; then return; fi
  port_busy "$CTLD_PORT" && die "port $CTLD_PORT (slurmctld) is taken; set AGILERL_SLURM_PORT (or remove $PORTS)"
  slurmctld -f "$SLURM_CONF"
  wait_for 30 slurmctld "$LOG/slurmctld.log" scontrol ping
}

node_idle() { [[ "$(sinfo -h -n localhost -o %t 2>/dev/null)" =~ ^(idle|mix|alloc)$ ]]; }

start_slurmd() {
  if pid_alive "$RUN/slurmd.pid"; then return; fi
  port_busy "$SLURMD_PORT" && die "port $SLURMD_PORT (slurmd) is taken; set AGILERL_SLURM_PORT (or remove $PORTS)"
  slurmd -f "$SLURM_CONF" -N localhost
  wait_for 45 "slurmd (node idle)" "$LOG/slurmd.log" node_idle
  scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true
}

cmd_start() {
  command -v slurmctld >/dev/null 2>&1 || [[ -x /usr/sbin/slurmctld ]] \
    || die "SLURM is not installed: run '$0 install' first"
  export PATH="$PATH:/usr/sbin"
  choose_ports
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

# our_job_steps: pids of slurmstepd processes of this cluster (their SLURM_CONF is ours)
our_job_steps() {
  local pid
  for pid in $(pgrep -x slurmstepd 2>/dev/null || true); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "SLURM_CONF=$SLURM_CONF"; then
      echo "$pid"
    fi
  done
}

cmd_stop() {
  export PATH="$PATH:/usr/sbin"
  [[ -d "$RUN" ]] || { say "nothing to stop in $DIR"; return 0; }
  if [[ -f "$SLURM_CONF" ]] && scontrol ping >/dev/null 2>&1; then
    scancel --full -u "$(id -un)" >/dev/null 2>&1 || true
    for _ in $(seq 1 60); do
      [[ -z "$(squeue -h -t running,completing,pending 2>/dev/null)" ]] && break
      sleep 0.5
    done
  fi
  stop_pidfile "$RUN/slurmd.pid"
  local steps; steps=$(our_job_steps)
  if [[ -n "$steps" ]]; then
    # shellcheck disable=SC2086
    kill -9 $steps 2>/dev/null || true
  fi
  stop_pidfile "$RUN/slurmctld.pid"
  stop_pidfile "$RUN/slurmdbd.pid"
  stop_pidfile "$RUN/mariadb.pid"
  say "stopped the daemons of $DIR (munged left running; state kept)"
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
  ports) choose_ports; cat "$PORTS" ;;
  *) echo "usage: $0 install|start|stop|status|env|ports" >&2; exit 2 ;;
esac
