#!/usr/bin/env bash
# Starts, and reports on, the services duetime's tests talk to: PostgreSQL, Redis, NATS with JetStream, and a
# second NATS server new enough for native message schedules (>= 2.12). See `--help` and docs/services.md.
set -uo pipefail

NATS_NEW_MIN=2.12
CACHE_DIR="${DUETIME_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/duetime}"
NATS_NEW_DIR="$CACHE_DIR/nats-new"
NATS_NEW_STATUS="$CACHE_DIR/nats-new.status"
NATS_NEW_SUITE="${DUETIME_NATS_NEW_SUITE:-sid}"
LOG_DIR="$CACHE_DIR/logs"
TIMEOUT="${DUETIME_SERVICES_TIMEOUT:-60}"

PG_URL="${DUETIME_PG_URL:-postgres://127.0.0.1:5432/test}"
REDIS_URL="${DUETIME_REDIS_URL:-redis://127.0.0.1:6379}"
NATS_URL="${DUETIME_NATS_URL:-nats://127.0.0.1:4222}"
NATS_NEW_URL="${DUETIME_NATS_NEW_URL:-nats://127.0.0.1:4223}"

usage() {
  cat <<EOF
Usage: bash scripts/services.sh up|status|down [--clusters] | --help

  up      Start PostgreSQL, Redis and NATS (JetStream) where they do not answer yet; install them with
          apt-get when missing (as root). Waits up to ${TIMEOUT}s for each; exits non-zero naming the service
          that could not be started. Then provides a NATS server >= ${NATS_NEW_MIN} (the NATS store, native message schedules) from
          Debian's ${NATS_NEW_SUITE} suite, fetched through a private apt configuration into the cache directory
          (the system's apt sources are never changed). Where that server cannot be had, says why, records
          the reason in the status file and still exits 0. Installs Debian's Chromium (the dashboard's
          browser tests) with apt-get when it is missing. Running it again changes nothing.
  up --clusters
          All of the above, then the clusters on loopback: a Redis Cluster (three masters, one replica each,
          ports 7001-7006, from the same redis-server) and a three-node NATS cluster of the >= ${NATS_NEW_MIN} server
          (client ports 4231-4233, route ports +${NATS_ROUTE_OFFSET}, monitoring ports +${NATS_MONITOR_OFFSET}, JetStream on every node).
          Exits non-zero when the Redis Cluster cannot be formed; the NATS cluster, like the newer server,
          is recorded as unavailable (with the reason) when its binary cannot be had.
  status  Print what answers where, with versions, clusters included. Exits non-zero when a required service
          does not answer (with --clusters, the Redis Cluster is required too).
  down    Stop the extra NATS server (>= ${NATS_NEW_MIN}) that 'up' started. The other services are left running.
  down --clusters
          Stop the clusters 'up --clusters' started and delete their state (the next 'up --clusters'
          creates them anew). Nothing else is stopped.

Environment (read by this script and by the tests; nothing is exported):
  DUETIME_PG_URL        PostgreSQL          default postgres://127.0.0.1:5432/test (trust auth, database test)
  DUETIME_REDIS_URL     Redis 7             default redis://127.0.0.1:6379
  DUETIME_NATS_URL      NATS with JetStream default nats://127.0.0.1:4222
  DUETIME_NATS_NEW_URL  NATS >= ${NATS_NEW_MIN}        default nats://127.0.0.1:4223
  DUETIME_REDIS_CLUSTER_URLS  every node of the Redis Cluster, comma-separated
                        default redis://127.0.0.1:7001,...,redis://127.0.0.1:7006
  DUETIME_NATS_CLUSTER_URLS   every server of the NATS cluster, comma-separated
                        default nats://127.0.0.1:4231,nats://127.0.0.1:4232,nats://127.0.0.1:4233
  DUETIME_CACHE_DIR     cache directory     default \${XDG_CACHE_HOME:-\$HOME/.cache}/duetime (now: $CACHE_DIR)
  DUETIME_SERVICES_TIMEOUT  seconds to wait for each service (default 60)
  DUETIME_NATS_NEW_SUITE    Debian suite to take the newer nats-server from (default sid)
  DUETIME_REDIS_CLUSTER_NODE_TIMEOUT  cluster-node-timeout of the Redis Cluster nodes, ms (default 5000)
  DUETIME_CHROMIUM      the browser the dashboard's tests drive (default /usr/bin/chromium)

A URL on 127.0.0.1, localhost or ::1 is started here when it does not answer; any other host is only checked.
The newer NATS server's state is written to $NATS_NEW_STATUS, the NATS cluster's to
$NATS_CLUSTER_STATUS: 'available <version> <url>' or 'unavailable <reason>'.
EOF
}

say() { printf '%-9s %s\n' "$1" "$2"; }
fail() {
  printf 'services.sh: could not start %s: %s\n' "$1" "$2" >&2
  exit 1
}
is_root() { [ "$(id -u)" = 0 ]; }
have() { command -v "$1" >/dev/null 2>&1; }
# version_ge A B: true when version A >= version B.
version_ge() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$2" ]; }

# parse_url URL DEFAULT_PORT: sets URL_USER, URL_HOST, URL_PORT, URL_PATH.
parse_url() {
  local rest="${1#*://}"
  URL_USER=""
  URL_PATH=""
  if [[ "$rest" == */* ]]; then
    URL_PATH="${rest#*/}"
    URL_PATH="${URL_PATH%%\?*}"
    rest="${rest%%/*}"
  fi
  if [[ "$rest" == *@* ]]; then
    URL_USER="${rest%@*}"
    URL_USER="${URL_USER%%:*}"
    rest="${rest##*@}"
  fi
  if [[ "$rest" =~ ^\[([^]]*)\](:([0-9]+))?$ ]]; then
    URL_HOST="${BASH_REMATCH[1]}"
    URL_PORT="${BASH_REMATCH[3]:-$2}"
  else
    URL_HOST="${rest%%:*}"
    URL_PORT="$2"
    [[ "$rest" == *:* ]] && URL_PORT="${rest##*:}"
  fi
}
is_local() { [[ "$1" == 127.0.0.1 || "$1" == localhost || "$1" == ::1 ]]; }

# wait_until SECONDS COMMAND...: polls COMMAND every half second until it succeeds or the deadline passes.
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.5
  done
}

APT_UPDATED=0
apt_install() {
  is_root || return 1
  have apt-get || return 1
  mkdir -p "$LOG_DIR"
  if [ "$APT_UPDATED" = 0 ]; then
    apt-get update >>"$LOG_DIR/apt.log" 2>&1 || return 1
    APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >>"$LOG_DIR/apt.log" 2>&1
}

# ---------------------------------------------------------------- PostgreSQL
pg_answers() { pg_isready -q -h "$PG_HOST" -p "$PG_PORT" -t 2; }
pg_usable() { psql "$PG_URL" -w -Atqc 'select 1' >/dev/null 2>&1; }
pg_as_admin() { runuser -u postgres -- psql -X -p "$PG_PORT" -d postgres -Atqc "$1"; }

# Prints "VERSION NAME" of the local cluster configured for PG_PORT, if there is one.
pg_cluster_for_port() {
  have pg_lsclusters || return 0
  pg_lsclusters -h 2>/dev/null | awk -v p="$PG_PORT" '$3 == p { print $1, $2; exit }'
}

pg_start_local() {
  local cluster version name
  if ! have pg_ctlcluster || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    is_root || fail postgres "PostgreSQL is not installed and this is not root (install postgresql, then rerun)"
    local pkg=postgresql
    apt-cache show postgresql-15 >/dev/null 2>&1 && pkg=postgresql-15
    apt_install "$pkg" postgresql-client || fail postgres "apt-get install $pkg failed (see $LOG_DIR/apt.log)"
  fi
  pg_answers && return 0 # the package's own start may have brought it up
  cluster="$(pg_cluster_for_port)"
  if [ -z "$cluster" ]; then
    is_root || fail postgres "no cluster on port $PG_PORT and this is not root"
    version="$(find /usr/lib/postgresql -maxdepth 1 -mindepth 1 -printf '%f\n' | sort -V | tail -n1)"
    name=main
    [ -d "/etc/postgresql/$version/main" ] && name="duetime$PG_PORT"
    pg_createcluster "$version" "$name" -p "$PG_PORT" >>"$LOG_DIR/postgres.log" 2>&1 ||
      fail postgres "pg_createcluster $version $name failed (see $LOG_DIR/postgres.log)"
    cluster="$version $name"
  fi
  read -r version name <<<"$cluster"
  pg_ctlcluster --skip-systemctl-redirect "$version" "$name" start >>"$LOG_DIR/postgres.log" 2>&1 ||
    fail postgres "pg_ctlcluster $version $name start failed (see $LOG_DIR/postgres.log)"
}

# A freshly installed cluster asks host connections for a password and has neither the role nor the database
# the tests use: allow trust on loopback, and create both.
pg_prepare_local() {
  local cluster version name hba user db
  is_root || fail postgres "$PG_URL answers but refuses the connection, and this is not root to fix pg_hba.conf"
  cluster="$(pg_cluster_for_port)"
  [ -n "$cluster" ] || fail postgres "$PG_URL refuses the connection and no local cluster serves port $PG_PORT"
  read -r version name <<<"$cluster"
  hba="/etc/postgresql/$version/$name/pg_hba.conf"
  if ! grep -Eq '^host[[:space:]]+all[[:space:]]+all[[:space:]]+127\.0\.0\.1/32[[:space:]]+trust' "$hba"; then
    local tmp="$hba.duetime.tmp"
    {
      echo '# duetime tests (scripts/services.sh): trust loopback connections'
      echo 'host    all    all    127.0.0.1/32    trust'
      echo 'host    all    all    ::1/128         trust'
      cat "$hba"
    } >"$tmp" && chown --reference="$hba" "$tmp" && chmod --reference="$hba" "$tmp" && mv "$tmp" "$hba"
    pg_ctlcluster --skip-systemctl-redirect "$version" "$name" reload >>"$LOG_DIR/postgres.log" 2>&1
  fi
  user="${URL_USER:-${PGUSER:-$(id -un)}}"
  db="${URL_PATH:-$user}"
  if [ -z "$(pg_as_admin "select 1 from pg_roles where rolname = '$user'")" ]; then
    pg_as_admin "create role \"$user\" login superuser" >/dev/null || fail postgres "could not create role $user"
  fi
  if [ -z "$(pg_as_admin "select 1 from pg_database where datname = '$db'")" ]; then
    pg_as_admin "create database \"$db\" owner \"$user\"" >/dev/null || fail postgres "could not create database $db"
  fi
}

up_postgres() {
  parse_url "$PG_URL" 5432
  PG_HOST="$URL_HOST" PG_PORT="$URL_PORT"
  if ! have pg_isready || ! have psql; then
    apt_install postgresql-client || fail postgres "pg_isready/psql missing and apt-get install postgresql-client failed"
  fi
  if pg_answers && pg_usable; then
    say postgres "answering at $PG_URL"
    return
  fi
  is_local "$PG_HOST" || fail postgres "$PG_URL does not accept connections (not a local address: not started here)"
  if ! pg_answers; then
    pg_start_local
    wait_until "$TIMEOUT" pg_answers || fail postgres "no answer on $PG_HOST:$PG_PORT after ${TIMEOUT}s"
  fi
  pg_usable || pg_prepare_local
  wait_until 10 pg_usable || fail postgres "$PG_URL answers but refuses the connection (check pg_hba.conf, role, database)"
  say postgres "started, answering at $PG_URL"
}

pg_version() { psql "$PG_URL" -w -Atqc 'show server_version' 2>/dev/null | awk '{print $1}'; }

# ---------------------------------------------------------------- Redis
redis_answers() { [ "$(redis-cli -u "$REDIS_URL" ping 2>/dev/null)" = PONG ]; }
redis_version() { redis-cli -u "$REDIS_URL" info server 2>/dev/null | tr -d '\r' | sed -n 's/^redis_version://p'; }

up_redis() {
  parse_url "$REDIS_URL" 6379
  if ! have redis-cli; then
    apt_install redis-tools || fail redis "redis-cli missing and apt-get install redis-tools failed"
  fi
  if redis_answers; then
    say redis "answering at $REDIS_URL"
  else
    is_local "$URL_HOST" || fail redis "$REDIS_URL does not answer (not a local address: not started here)"
    if ! have redis-server; then
      apt_install redis-server || fail redis "redis-server missing and apt-get install redis-server failed"
    fi
    if ! redis_answers; then
      local dir="$CACHE_DIR/redis-$URL_PORT"
      mkdir -p "$dir" "$LOG_DIR"
      redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$URL_PORT" --save "" --appendonly no \
        --dir "$dir" --logfile "$LOG_DIR/redis-$URL_PORT.log" >>"$LOG_DIR/redis-$URL_PORT.start.log" 2>&1 ||
        fail redis "redis-server did not start (see $LOG_DIR/redis-$URL_PORT.start.log)"
      wait_until "$TIMEOUT" redis_answers || fail redis "no answer at $REDIS_URL after ${TIMEOUT}s"
    fi
    say redis "started, answering at $REDIS_URL"
  fi
  local version
  version="$(redis_version)"
  if [ -n "$version" ] && ! version_ge "$version" 7; then
    say redis "warning: Redis $version answers; duetime is tested on Redis 7"
  fi
}

# ---------------------------------------------------------------- NATS
# nats_info HOST PORT: prints the INFO line a NATS server sends on connect.
nats_info() {
  # shellcheck disable=SC2016 # expanded by the inner bash
  timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2" && head -n1 <&3' _ "$1" "$2" 2>/dev/null | grep '^INFO '
}
info_version() { sed -n 's/.*"version":"\([^"]*\)".*/\1/p' <<<"$1"; }
info_jetstream() { grep -q '"jetstream":true' <<<"$1"; }
binary_version() { "$1" --version 2>/dev/null | sed -n 's/.*v\([0-9][0-9.]*\).*/\1/p'; }

# start_nats BINARY HOST PORT DIR: starts a JetStream-enabled server in the background, pid file in DIR.
start_nats() {
  local bin="$1" host="$2" port="$3" dir="$4"
  mkdir -p "$dir/store"
  if have start-stop-daemon; then
    start-stop-daemon --start --oknodo --background --make-pidfile --pidfile "$dir/nats-server.pid" \
      --exec "$bin" -- -a "$host" -p "$port" -js -sd "$dir/store" -l "$dir/nats-server.log" >/dev/null
  else
    nohup "$bin" -a "$host" -p "$port" -js -sd "$dir/store" -l "$dir/nats-server.log" >/dev/null 2>&1 &
    echo $! >"$dir/nats-server.pid"
  fi
}

up_nats() {
  parse_url "$NATS_URL" 4222
  local host="$URL_HOST" port="$URL_PORT" info
  info="$(nats_info "$host" "$port")"
  if [ -z "$info" ]; then
    is_local "$host" || fail nats "$NATS_URL does not answer (not a local address: not started here)"
    if ! have nats-server; then
      apt_install nats-server || fail nats "nats-server missing and apt-get install nats-server failed"
    fi
    start_nats "$(command -v nats-server)" "${host/localhost/127.0.0.1}" "$port" "$CACHE_DIR/nats-$port" ||
      fail nats "nats-server did not start (see $CACHE_DIR/nats-$port/nats-server.log)"
    wait_until "$TIMEOUT" nats_info "$host" "$port" >/dev/null ||
      fail nats "no answer at $NATS_URL after ${TIMEOUT}s (see $CACHE_DIR/nats-$port/nats-server.log)"
    info="$(nats_info "$host" "$port")"
    say nats "started, answering at $NATS_URL"
  else
    say nats "answering at $NATS_URL"
  fi
  info_jetstream "$info" || fail nats "$NATS_URL answers without JetStream (start nats-server with -js)"
}

# ---------------------------------------------------------------- NATS >= 2.12
nats_new_unavailable() {
  mkdir -p "$CACHE_DIR"
  echo "unavailable $1" >"$NATS_NEW_STATUS"
  say nats-new "not available: $1"
  say nats-new "the NATS store's tests need NATS >= $NATS_NEW_MIN: they will fail with this reason"
}

# The Debian mirror the system's apt already uses (its main suite), so no host is named here.
debian_mirror() {
  # shellcheck disable=SC2016 # apt's own placeholders
  apt-get indextargets --no-release-info --format '$(REPO_URI) $(RELEASE) $(TARGET_OF)' 2>/dev/null |
    awk '$3 == "deb" && $2 !~ /-/ { print $1; exit }'
}

# Downloads nats-server from Debian's newer suite into NATS_NEW_DIR/root, with a private apt configuration.
# Prints the reason and returns 1 when it cannot.
fetch_nats_new() {
  local apt="$NATS_NEW_DIR/apt" mirror keyring deb version
  if ! have apt-get || ! have dpkg-deb; then
    echo "apt-get and dpkg-deb are needed (not a Debian system)"
    return 1
  fi
  mirror="$(debian_mirror)"
  [ -n "$mirror" ] || { echo "no Debian mirror found in the system's apt sources"; return 1; }
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -f "$keyring" ] || { echo "$keyring is missing (package debian-archive-keyring)"; return 1; }
  rm -rf "$apt"
  mkdir -p "$apt/etc/sources.list.d" "$apt/etc/preferences.d" "$apt/lists/partial" \
    "$apt/cache/archives/partial" "$apt/state" "$apt/deb"
  : >"$apt/state/status"
  echo "deb [signed-by=$keyring] $mirror $NATS_NEW_SUITE main" >"$apt/etc/sources.list"
  local opts=(-q -o "Dir::Etc::sourcelist=$apt/etc/sources.list" -o "Dir::Etc::sourceparts=$apt/etc/sources.list.d"
    -o "Dir::Etc::preferences=$apt/etc/preferences" -o "Dir::Etc::preferencesparts=$apt/etc/preferences.d"
    -o "Dir::State::Lists=$apt/lists" -o "Dir::State::status=$apt/state/status"
    -o "Dir::State::extended_states=$apt/state/extended_states" -o "Dir::Cache=$apt/cache"
    -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=")
  is_root && opts+=(-o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update >"$apt/update.log" 2>&1 ||
    { echo "apt-get update of Debian $NATS_NEW_SUITE failed: $(grep -E '^(E|W):' "$apt/update.log" | head -n1)"; return 1; }
  (cd "$apt/deb" && apt-get "${opts[@]}" download nats-server) >"$apt/download.log" 2>&1 ||
    { echo "apt-get download nats-server from Debian $NATS_NEW_SUITE failed: $(grep -E '^E:' "$apt/download.log" | head -n1)"; return 1; }
  local debs=("$apt"/deb/nats-server_*.deb)
  deb="${debs[0]}"
  rm -rf "$NATS_NEW_DIR/root.new"
  dpkg-deb -x "$deb" "$NATS_NEW_DIR/root.new" || { echo "dpkg-deb -x $deb failed"; return 1; }
  version="$(binary_version "$NATS_NEW_DIR/root.new/usr/sbin/nats-server")"
  if [ -z "$version" ] || ! version_ge "$version" "$NATS_NEW_MIN"; then
    echo "Debian $NATS_NEW_SUITE has nats-server ${version:-of unknown version}, older than $NATS_NEW_MIN"
    rm -rf "$NATS_NEW_DIR/root.new"
    return 1
  fi
  rm -rf "$NATS_NEW_DIR/root" && mv "$NATS_NEW_DIR/root.new" "$NATS_NEW_DIR/root"
  rm -rf "$apt" # the package lists are large and only needed again for an upgrade
}

up_nats_new() {
  parse_url "$NATS_NEW_URL" 4223
  local host="$URL_HOST" port="$URL_PORT" info version bin="$NATS_NEW_DIR/root/usr/sbin/nats-server" reason
  info="$(nats_info "$host" "$port")"
  if [ -z "$info" ]; then
    is_local "$host" || { nats_new_unavailable "$NATS_NEW_URL does not answer (not a local address)"; return; }
    version="$(binary_version "$bin")"
    if [ -z "$version" ] || ! version_ge "$version" "$NATS_NEW_MIN"; then
      say nats-new "fetching nats-server from Debian $NATS_NEW_SUITE into $NATS_NEW_DIR"
      mkdir -p "$NATS_NEW_DIR"
      reason="$(fetch_nats_new)" || {
        NATS_NEW_FETCH_FAILED="$reason" # the NATS cluster needs the same binary: not fetched twice
        nats_new_unavailable "$reason"
        return
      }
    fi
    start_nats "$bin" "${host/localhost/127.0.0.1}" "$port" "$NATS_NEW_DIR" ||
      { nats_new_unavailable "nats-server did not start (see $NATS_NEW_DIR/nats-server.log)"; return; }
    wait_until "$TIMEOUT" nats_info "$host" "$port" >/dev/null ||
      { nats_new_unavailable "no answer at $NATS_NEW_URL after ${TIMEOUT}s (see $NATS_NEW_DIR/nats-server.log)"; return; }
    info="$(nats_info "$host" "$port")"
    say nats-new "started, answering at $NATS_NEW_URL"
  else
    say nats-new "answering at $NATS_NEW_URL"
  fi
  version="$(info_version "$info")"
  if ! version_ge "$version" "$NATS_NEW_MIN"; then
    nats_new_unavailable "$NATS_NEW_URL answers with nats-server $version, older than $NATS_NEW_MIN"
  elif ! info_jetstream "$info"; then
    nats_new_unavailable "$NATS_NEW_URL answers without JetStream"
  else
    mkdir -p "$CACHE_DIR"
    echo "available $version $NATS_NEW_URL" >"$NATS_NEW_STATUS"
  fi
}

down_nats_new() {
  local pidfile="$NATS_NEW_DIR/nats-server.pid" pid
  if [ ! -f "$pidfile" ]; then
    say nats-new "not started by this script (no $pidfile)"
    return
  fi
  pid="$(cat "$pidfile")"
  if have start-stop-daemon; then
    start-stop-daemon --stop --oknodo --quiet --pidfile "$pidfile" --exec "$NATS_NEW_DIR/root/usr/sbin/nats-server" \
      --retry TERM/10/KILL/5
  else
    kill "$pid" 2>/dev/null
  fi
  rm -f "$pidfile"
  echo "unavailable stopped by 'bash scripts/services.sh down'; start it with 'bash scripts/services.sh up'" \
    >"$NATS_NEW_STATUS"
  say nats-new "stopped (pid $pid)"
}

# ---------------------------------------------------------------- status
status() {
  local missing=0 info version
  parse_url "$PG_URL" 5432
  PG_HOST="$URL_HOST" PG_PORT="$URL_PORT"
  if have pg_isready && pg_answers; then
    version="$(pg_version)"
    if [ -n "$version" ]; then say postgres "answering at $PG_URL: PostgreSQL $version"; else
      say postgres "answering at $PG_HOST:$PG_PORT but $PG_URL refuses the connection"
      missing=1
    fi
  else
    say postgres "NOT answering at $PG_URL"
    missing=1
  fi
  if have redis-cli && redis_answers; then
    say redis "answering at $REDIS_URL: Redis $(redis_version)"
  else
    say redis "NOT answering at $REDIS_URL"
    missing=1
  fi
  local name url
  for name in nats nats-new; do
    if [ "$name" = nats ]; then url="$NATS_URL"; parse_url "$url" 4222; else url="$NATS_NEW_URL"; parse_url "$url" 4223; fi
    info="$(nats_info "$URL_HOST" "$URL_PORT")"
    if [ -n "$info" ]; then
      local js="JetStream off"
      info_jetstream "$info" && js="JetStream on"
      say "$name" "answering at $url: nats-server $(info_version "$info"), $js"
    else
      say "$name" "NOT answering at $url"
      [ "$name" = nats ] && missing=1
    fi
  done
  if [ -f "$NATS_NEW_STATUS" ]; then
    say nats-new "status file $NATS_NEW_STATUS: $(cat "$NATS_NEW_STATUS")"
  else
    say nats-new "no status file yet ($NATS_NEW_STATUS): run 'bash scripts/services.sh up'"
  fi
  return "$missing"
}

# ---------------------------------------------------------------- Chromium (the dashboard's browser tests)
CHROMIUM="${DUETIME_CHROMIUM:-/usr/bin/chromium}"
chromium_version() { "$CHROMIUM" --version 2>/dev/null | head -n1; }
up_chromium() {
  if [ ! -x "$CHROMIUM" ]; then
    [ "$CHROMIUM" = /usr/bin/chromium ] || fail chromium "DUETIME_CHROMIUM=$CHROMIUM is not an executable"
    apt_install chromium || fail chromium "missing, and apt-get install -y chromium failed (as root; see $LOG_DIR/apt.log)"
  fi
  say chromium "$(chromium_version) at $CHROMIUM"
}
status_chromium() {
  if [ -x "$CHROMIUM" ]; then say chromium "$(chromium_version) at $CHROMIUM"; else
    say chromium "NOT installed at $CHROMIUM: run 'bash scripts/services.sh up' as root (apt-get install -y chromium)"
    return 1
  fi
}

# shellcheck source=scripts/services-clusters.sh
. "$(dirname "${BASH_SOURCE[0]}")/services-clusters.sh"

clusters=0
case "${2:-}" in
  "") ;;
  --clusters) clusters=1 ;;
  *)
    usage >&2
    exit 2
    ;;
esac
case "${1:-}" in
  up)
    mkdir -p "$LOG_DIR"
    up_postgres
    up_redis
    up_nats
    up_nats_new
    up_chromium
    if [ "$clusters" = 1 ]; then
      up_redis_cluster
      up_nats_cluster
    fi
    ;;
  status)
    status
    missing=$?
    status_chromium || missing=1
    status_redis_cluster || { [ "$clusters" = 1 ] && missing=1; }
    status_nats_cluster
    exit "$missing"
    ;;
  down)
    if [ "$clusters" = 1 ]; then
      down_redis_cluster
      down_nats_cluster
    else
      down_nats_new
    fi
    ;;
  -h | --help | help) usage ;;
  *)
    usage >&2
    exit 2
    ;;
esac
