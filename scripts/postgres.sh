#!/usr/bin/env bash
# A private PostgreSQL server for the tests and benches: a fresh cluster (initdb) in DIR,
# started with pg_ctl on 127.0.0.1 at a free port, with its socket inside DIR. Trust
# authentication, loopback only: a throwaway test server, never a deployment.
#
#   scripts/postgres.sh start DIR   start it; print its URL (postgres://…) on stdout
#   scripts/postgres.sh stop DIR    stop it
#   scripts/postgres.sh restart DIR restart it on the same port (fast shutdown: every
#                                   connection is ended)
#
# Exits non-zero, with the server's log, if it does not come up. As root the server runs
# as the `postgres` user (Debian's package makes it), as PostgreSQL refuses to run as root.
set -euo pipefail
cmd=${1:?usage: postgres.sh start|stop|restart DIR}
dir=${2:?usage: postgres.sh start|stop|restart DIR}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$bin" ] || bin=$(dirname "$(command -v pg_ctl)")
if [ ! -x "$bin/pg_ctl" ]; then
  echo "error: PostgreSQL server binaries not found (apt-get install postgresql)" >&2
  exit 1
fi
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$cmd" in
  start)
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    if [ ! -e "$dir/data/PG_VERSION" ]; then
      as_owner "$bin/initdb" -D "$dir/data" -A trust -U avfs --no-sync >"$dir/initdb.log" 2>&1 || {
        cat "$dir/initdb.log" >&2
        exit 1
      }
    fi
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    # Many test processes connect at once; fsync stays on (the durability the engine claims).
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
      -o "-h 127.0.0.1 -p $port -k $dir -c max_connections=400 -c shared_buffers=128MB" >/dev/null || {
      cat "$dir/server.log" >&2
      exit 1
    }
    url="postgres://avfs@127.0.0.1:$port/postgres"
    # Up means it answers a query, not only that pg_ctl returned.
    for _ in $(seq 1 50); do
      if psql "$url" -qAtc 'SELECT 1' >/dev/null 2>&1; then
        echo "$url"
        exit 0
      fi
      sleep 0.2
    done
    echo "error: PostgreSQL did not answer at $url" >&2
    cat "$dir/server.log" >&2
    exit 1
    ;;
  stop)
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    ;;
  restart)
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -m fast -w -t 60 restart >/dev/null || {
      cat "$dir/server.log" >&2
      exit 1
    }
    ;;
  *)
    echo "usage: postgres.sh start|stop|restart DIR" >&2
    exit 2
    ;;
esac
