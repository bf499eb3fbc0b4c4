#!/usr/bin/env bash
# A scratch PostgreSQL cluster for S10 (the sync benchmark): `start DIR PORT` makes and starts one listening on a
# Unix socket in DIR only; `stop DIR` stops it. As the postgres user when run as root (the server refuses root).
set -euo pipefail
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$bin" ] || { echo "PostgreSQL is not installed (apt-get install postgresql)" >&2; exit 69; }
as() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case "$1" in
start)
    dir=$2 port=$3
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    as "$bin/initdb" -D "$dir/data" -A trust -U "$( [ "$(id -u)" = 0 ] && echo postgres || id -un)" --no-sync -E UTF8 >"$dir/initdb.out"
    as "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -o "-k $dir -p $port -c listen_addresses=''" start >"$dir/pg_ctl.out"
    ;;
stop)
    as "$bin/pg_ctl" -D "$2/data" -m fast -w stop >/dev/null
    ;;
*) echo "usage: scratch-postgres.sh start DIR PORT | stop DIR" >&2; exit 64 ;;
esac
