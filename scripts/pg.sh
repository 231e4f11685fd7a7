#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for polc's PostgreSQL store tests and for
# local runs (docs/scale.md "PostgreSQL stores"):
#
#   scripts/pg.sh start DIR     initdb (first time) and start a cluster in DIR,
#                               listening only on a unix socket in DIR; prints
#                               its DSN (export it as POLC_PG)
#   scripts/pg.sh stop DIR      stop it (fast shutdown)
#   scripts/pg.sh restart DIR   restart it (existing connections are cut)
#   scripts/pg.sh dsn DIR       print the DSN
#
# PostgreSQL refuses to run as root: run as root, the cluster belongs to the
# system user "postgres" (Debian's package creates it), else "nobody", and
# DIR is handed to that user. When initdb is not installed, Debian's
# postgresql package is installed (apt-get; root or sudo).
set -euo pipefail

usage() { echo "usage: $0 start|stop|restart|dsn DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1
dir=$2
[ -n "$dir" ] || usage
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# The socket's path (DIR/.s.PGSQL.5432) must fit in a sockaddr_un.
if [ ${#dir} -gt 90 ]; then
  echo "pg.sh: $dir is too long for a unix socket path; use a shorter directory" >&2
  exit 2
fi

# bindir finds the directory of initdb and pg_ctl: on PATH, else the newest
# Debian installation under /usr/lib/postgresql.
bindir() {
  if command -v pg_ctl >/dev/null && command -v initdb >/dev/null; then
    dirname "$(readlink -f "$(command -v pg_ctl)")"
    return
  fi
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$d" ] && [ -x "$d/pg_ctl" ]; then
    echo "$d"
  fi
}

bin=$(bindir)
if [ -z "$bin" ]; then
  if [ "$cmd" != start ]; then
    echo "pg.sh: PostgreSQL is not installed" >&2
    exit 1
  fi
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "pg.sh: installing PostgreSQL (Debian's postgresql package)" >&2
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
  bin=$(bindir)
  [ -n "$bin" ] || { echo "pg.sh: no pg_ctl after installing postgresql" >&2; exit 1; }
fi

# as runs a command as the cluster's owner.
owner=""
if [ "$(id -u)" = 0 ]; then
  if id postgres >/dev/null 2>&1; then owner=postgres; else owner=nobody; fi
fi
as() {
  if [ -n "$owner" ]; then
    runuser -u "$owner" -- "$@"
  else
    "$@"
  fi
}

data=$dir/data
log=$dir/server.log
dsn="postgres:///postgres?host=$dir&user=polc"

case $cmd in
start)
  if [ -n "$owner" ]; then
    chown "$owner" "$dir"
    chmod 0700 "$dir"
  fi
  if [ ! -f "$data/PG_VERSION" ]; then
    # trust: only the socket in DIR (mode 0700) reaches the cluster.
    as "$bin/initdb" -D "$data" -U polc --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
      as "$bin/initdb" -D "$data" -U polc --auth=trust -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 || {
      cat "$dir/initdb.log" >&2
      exit 1
    }
  fi
  as "$bin/pg_ctl" -D "$data" -l "$log" -w -t 60 \
    -o "-k $dir -c listen_addresses= -c max_connections=200" start >/dev/null || {
    cat "$log" >&2
    exit 1
  }
  echo "$dsn"
  ;;
stop)
  if [ -f "$data/postmaster.pid" ]; then
    as "$bin/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null
  fi
  ;;
restart)
  as "$bin/pg_ctl" -D "$data" -l "$log" -m fast -w -t 60 \
    -o "-k $dir -c listen_addresses= -c max_connections=200" restart >/dev/null
  ;;
dsn)
  echo "$dsn"
  ;;
*)
  usage
  ;;
esac
