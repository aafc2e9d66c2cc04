# shellcheck shell=bash
# Sourced by scripts/services.sh: the clusters on loopback that `up --clusters` starts, `status` reports and
# `down --clusters` stops. A Redis Cluster (three masters, one replica each, from the same redis-server as
# the single Redis) and a three-node NATS cluster (the >= 2.12 server, JetStream on every node). Uses the
# helpers services.sh defines (say, fail, have, parse_url, is_local, wait_until, nats_info, ...).

REDIS_CLUSTER_URLS="${DUETIME_REDIS_CLUSTER_URLS:-redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003,redis://127.0.0.1:7004,redis://127.0.0.1:7005,redis://127.0.0.1:7006}"
NATS_CLUSTER_URLS="${DUETIME_NATS_CLUSTER_URLS:-nats://127.0.0.1:4231,nats://127.0.0.1:4232,nats://127.0.0.1:4233}"
REDIS_CLUSTER_DIR="$CACHE_DIR/redis-cluster"
NATS_CLUSTER_DIR="$CACHE_DIR/nats-cluster"
NATS_CLUSTER_STATUS="$CACHE_DIR/nats-cluster.status"
# A NATS cluster node's route (cluster) port and monitoring port are its client port plus these.
NATS_ROUTE_OFFSET=2000
NATS_MONITOR_OFFSET=4000
# How long a Redis Cluster node may be unreachable before its replica takes over (ms).
REDIS_CLUSTER_NODE_TIMEOUT="${DUETIME_REDIS_CLUSTER_NODE_TIMEOUT:-5000}"

# split_nodes LIST DEFAULT_PORT: sets NODE_HOSTS and NODE_PORTS from a comma-separated list of URLs.
split_nodes() {
  local url
  NODE_HOSTS=()
  NODE_PORTS=()
  IFS=',' read -r -a NODE_URLS <<<"$1"
  for url in "${NODE_URLS[@]}"; do
    parse_url "$url" "$2"
    NODE_HOSTS+=("${URL_HOST/localhost/127.0.0.1}")
    NODE_PORTS+=("$URL_PORT")
  done
}

# ---------------------------------------------------------------- Redis Cluster
# rc I ARGS...: redis-cli against node I of the Redis Cluster list (its URL, so a password in it is used).
rc() { redis-cli -u "${NODE_URLS[$1]}" --no-auth-warning "${@:2}" 2>/dev/null | tr -d '\r'; }
rc_answers() { [ "$(rc "$1" ping)" = PONG ]; }
rc_field() { rc "$1" "$2" "$3" | sed -n "s/^$4://p"; }

redis_cluster_all_answer() {
  local i
  for i in "${!NODE_URLS[@]}"; do rc_answers "$i" || return 1; done
}

# Every node sees the whole cluster with every slot served, every master has a replica in sync and every
# replica's link to its master is up.
redis_cluster_ready() {
  local i n="${#NODE_URLS[@]}" role
  for i in "${!NODE_URLS[@]}"; do
    [ "$(rc_field "$i" cluster info cluster_state)" = ok ] || return 1
    [ "$(rc_field "$i" cluster info cluster_slots_ok)" = 16384 ] || return 1
    [ "$(rc_field "$i" cluster info cluster_known_nodes)" = "$n" ] || return 1
    role="$(rc_field "$i" info replication role)"
    if [ "$role" = master ]; then
      [ "$(rc_field "$i" info replication connected_slaves)" -ge 1 ] 2>/dev/null || return 1
    else
      [ "$(rc_field "$i" info replication master_link_status)" = up ] || return 1
    fi
  done
}

# Whether no node has joined a cluster yet (each knows only itself and serves no slot).
redis_cluster_blank() {
  local i
  for i in "${!NODE_URLS[@]}"; do
    [ "$(rc_field "$i" cluster info cluster_known_nodes)" = 1 ] || return 1
    [ "$(rc_field "$i" cluster info cluster_slots_assigned)" = 0 ] || return 1
  done
}

start_redis_cluster_node() {
  local port="$1" dir="$REDIS_CLUSTER_DIR/$1"
  mkdir -p "$dir" "$LOG_DIR"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --cluster-enabled yes \
    --cluster-config-file nodes.conf --cluster-node-timeout "$REDIS_CLUSTER_NODE_TIMEOUT" \
    --save "" --appendonly no --dir "$dir" --pidfile "$dir/redis.pid" \
    --logfile "$LOG_DIR/redis-cluster-$port.log" >>"$LOG_DIR/redis-cluster-$port.start.log" 2>&1
}

up_redis_cluster() {
  split_nodes "$REDIS_CLUSTER_URLS" 6379
  local n="${#NODE_URLS[@]}" i started=0 addresses=()
  if [ "$n" -lt 6 ] || [ $((n % 2)) != 0 ]; then
    fail redis-cluster "DUETIME_REDIS_CLUSTER_URLS lists $n nodes; a cluster of masters with one replica each needs an even number, at least 6"
  fi
  if ! have redis-server; then
    apt_install redis-server || fail redis-cluster "redis-server missing and apt-get install redis-server failed"
  fi
  for i in "${!NODE_URLS[@]}"; do
    addresses+=("${NODE_HOSTS[$i]}:${NODE_PORTS[$i]}")
    rc_answers "$i" && continue
    is_local "${NODE_HOSTS[$i]}" ||
      fail redis-cluster "${NODE_URLS[$i]} does not answer (not a local address: not started here)"
    start_redis_cluster_node "${NODE_PORTS[$i]}" ||
      fail redis-cluster "redis-server on port ${NODE_PORTS[$i]} did not start (see $LOG_DIR/redis-cluster-${NODE_PORTS[$i]}.start.log)"
    started=$((started + 1))
  done
  wait_until "$TIMEOUT" redis_cluster_all_answer ||
    fail redis-cluster "not every node of $REDIS_CLUSTER_URLS answers after ${TIMEOUT}s (logs in $LOG_DIR)"
  for i in "${!NODE_URLS[@]}"; do
    [ -n "$(rc_field "$i" cluster info cluster_state)" ] ||
      fail redis-cluster "${NODE_URLS[$i]} answers without cluster support (cluster-enabled no)"
  done
  if redis_cluster_ready; then
    say redis-cluster "answering at ${addresses[*]}"
    return
  fi
  if redis_cluster_blank; then
    redis-cli --cluster create "${addresses[@]}" --cluster-replicas 1 --cluster-yes \
      >"$LOG_DIR/redis-cluster-create.log" 2>&1 ||
      fail redis-cluster "redis-cli --cluster create failed (see $LOG_DIR/redis-cluster-create.log)"
  fi
  # Nodes restarted with their nodes.conf find each other again by themselves; a new cluster needs its
  # replicas to finish their first synchronisation.
  wait_until "$TIMEOUT" redis_cluster_ready ||
    fail redis-cluster "the nodes answer but do not form a healthy cluster after ${TIMEOUT}s (cluster info, info replication); 'bash scripts/services.sh down --clusters' removes its state, then run 'up --clusters' again"
  say redis-cluster "$([ "$started" -gt 0 ] && echo 'started, ')answering at ${addresses[*]} ($((n / 2)) masters, one replica each)"
}

status_redis_cluster() {
  split_nodes "$REDIS_CLUSTER_URLS" 6379
  if ! have redis-cli || ! redis_cluster_all_answer; then
    say redis-cluster "NOT answering at $REDIS_CLUSTER_URLS (start it with 'bash scripts/services.sh up --clusters')"
    return 1
  fi
  local masters=0 replicas=0 i state
  for i in "${!NODE_URLS[@]}"; do
    if [ "$(rc_field "$i" info replication role)" = master ]; then masters=$((masters + 1)); else replicas=$((replicas + 1)); fi
  done
  state="$(rc_field 0 cluster info cluster_state)"
  say redis-cluster "answering at $REDIS_CLUSTER_URLS: Redis $(rc_field 0 info server redis_version), cluster_state ${state:-unknown}, $masters masters, $replicas replicas"
  redis_cluster_ready
}

down_redis_cluster() {
  split_nodes "$REDIS_CLUSTER_URLS" 6379
  local i port pidfile pid
  for i in "${!NODE_URLS[@]}"; do
    port="${NODE_PORTS[$i]}"
    pidfile="$REDIS_CLUSTER_DIR/$port/redis.pid"
    if [ ! -f "$pidfile" ]; then
      say redis-cluster "port $port: not started by this script (no $pidfile)"
      continue
    fi
    pid="$(cat "$pidfile")"
    rc "$i" shutdown nosave >/dev/null
    wait_until 10 bash -c "! kill -0 $pid 2>/dev/null" || kill -KILL "$pid" 2>/dev/null
    rm -rf "${REDIS_CLUSTER_DIR:?}/$port"
    say redis-cluster "port $port: stopped (pid $pid), its cluster state removed"
  done
}

# ---------------------------------------------------------------- NATS cluster
nats_cluster_unavailable() {
  mkdir -p "$CACHE_DIR"
  echo "unavailable $1" >"$NATS_CLUSTER_STATUS"
  say nats-cluster "not available: $1"
}

# http_get HOST PORT PATH: prints the body of a plain HTTP/1.0 GET (the monitoring endpoint).
http_get() {
  # shellcheck disable=SC2016 # expanded by the inner bash
  timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2" && printf "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" "$3" "$1" >&3 &&
    sed "1,/^\r\{0,1\}$/d" <&3' _ "$1" "$2" "$3" 2>/dev/null
}

nats_cluster_all_answer() {
  local i
  for i in "${!NODE_URLS[@]}"; do [ -n "$(nats_info "${NODE_HOSTS[$i]}" "${NODE_PORTS[$i]}")" ] || return 1; done
}

# Every local node reports a JetStream meta leader in a meta group of all the nodes (monitoring /jsz).
nats_cluster_meta_ready() {
  local i jsz n="${#NODE_URLS[@]}"
  for i in "${!NODE_URLS[@]}"; do
    is_local "${NODE_HOSTS[$i]}" || continue
    jsz="$(http_get "${NODE_HOSTS[$i]}" $((NODE_PORTS[i] + NATS_MONITOR_OFFSET)) /jsz)"
    grep -q '"leader": *"[^"]' <<<"$jsz" || return 1
    grep -q "\"cluster_size\": *$n\b" <<<"$jsz" || return 1
  done
}

nats_cluster_leader() {
  http_get "${NODE_HOSTS[0]}" $((NODE_PORTS[0] + NATS_MONITOR_OFFSET)) /jsz |
    sed -n 's/^ *"leader": *"\([^"]*\)".*/\1/p' | head -n1
}

# write_nats_cluster_config I: the configuration file of node I (server name, ports, JetStream, routes).
write_nats_cluster_config() {
  local j host="${NODE_HOSTS[$1]}" port="${NODE_PORTS[$1]}" dir="$NATS_CLUSTER_DIR/${NODE_PORTS[$1]}" routes=""
  for j in "${!NODE_URLS[@]}"; do
    routes+="    nats-route://${NODE_HOSTS[$j]}:$((NODE_PORTS[j] + NATS_ROUTE_OFFSET))"$'\n'
  done
  local route_port=$((port + NATS_ROUTE_OFFSET)) monitor_port=$((port + NATS_MONITOR_OFFSET))
  mkdir -p "$dir/store"
  cat >"$dir/nats-server.conf" <<EOF
# Written by scripts/services.sh up --clusters; rewritten on every start.
server_name: duetime-$port
listen: $host:$port
http: $host:$monitor_port
jetstream {
  store_dir: "$dir/store"
  max_memory_store: 256MB
  max_file_store: 4GB
}
cluster {
  name: duetime
  listen: $host:$route_port
  routes: [
$routes  ]
}
EOF
}

start_nats_cluster_node() {
  local i="$1" bin="$2" dir="$NATS_CLUSTER_DIR/${NODE_PORTS[$1]}"
  write_nats_cluster_config "$i"
  if have start-stop-daemon; then
    start-stop-daemon --start --oknodo --background --make-pidfile --pidfile "$dir/nats-server.pid" \
      --exec "$bin" -- -c "$dir/nats-server.conf" -l "$dir/nats-server.log" >/dev/null
  else
    nohup "$bin" -c "$dir/nats-server.conf" -l "$dir/nats-server.log" >/dev/null 2>&1 &
    echo $! >"$dir/nats-server.pid"
  fi
}

up_nats_cluster() {
  split_nodes "$NATS_CLUSTER_URLS" 4222
  local n="${#NODE_URLS[@]}" i bin="$NATS_NEW_DIR/root/usr/sbin/nats-server" version reason info started=0
  if [ "$n" -lt 3 ]; then
    fail nats-cluster "DUETIME_NATS_CLUSTER_URLS lists $n servers; a JetStream cluster needs at least 3"
  fi
  for i in "${!NODE_URLS[@]}"; do
    [ -n "$(nats_info "${NODE_HOSTS[$i]}" "${NODE_PORTS[$i]}")" ] && continue
    if ! is_local "${NODE_HOSTS[$i]}"; then
      nats_cluster_unavailable "${NODE_URLS[$i]} does not answer (not a local address: not started here)"
      return
    fi
    version="$(binary_version "$bin")"
    if [ -z "$version" ] || ! version_ge "$version" "$NATS_NEW_MIN"; then
      if [ -n "${NATS_NEW_FETCH_FAILED:-}" ]; then
        nats_cluster_unavailable "$NATS_NEW_FETCH_FAILED"
        return
      fi
      say nats-cluster "fetching nats-server from Debian $NATS_NEW_SUITE into $NATS_NEW_DIR"
      mkdir -p "$NATS_NEW_DIR"
      reason="$(fetch_nats_new)" || { nats_cluster_unavailable "$reason"; return; }
    fi
    start_nats_cluster_node "$i" "$bin" ||
      fail nats-cluster "nats-server on port ${NODE_PORTS[$i]} did not start (see $NATS_CLUSTER_DIR/${NODE_PORTS[$i]}/nats-server.log)"
    started=$((started + 1))
  done
  wait_until "$TIMEOUT" nats_cluster_all_answer ||
    fail nats-cluster "not every server of $NATS_CLUSTER_URLS answers after ${TIMEOUT}s (logs under $NATS_CLUSTER_DIR)"
  for i in "${!NODE_URLS[@]}"; do
    info="$(nats_info "${NODE_HOSTS[$i]}" "${NODE_PORTS[$i]}")"
    version="$(info_version "$info")"
    if ! version_ge "$version" "$NATS_NEW_MIN"; then
      nats_cluster_unavailable "${NODE_URLS[$i]} answers with nats-server $version, older than $NATS_NEW_MIN"
      return
    fi
    info_jetstream "$info" || fail nats-cluster "${NODE_URLS[$i]} answers without JetStream"
  done
  wait_until "$TIMEOUT" nats_cluster_meta_ready ||
    fail nats-cluster "the servers answer but elect no JetStream meta leader of $n after ${TIMEOUT}s (logs under $NATS_CLUSTER_DIR)"
  mkdir -p "$CACHE_DIR"
  echo "available $version $NATS_CLUSTER_URLS" >"$NATS_CLUSTER_STATUS"
  say nats-cluster "$([ "$started" -gt 0 ] && echo 'started, ')answering at $NATS_CLUSTER_URLS (nats-server $version, JetStream meta leader $(nats_cluster_leader))"
}

status_nats_cluster() {
  split_nodes "$NATS_CLUSTER_URLS" 4222
  local info
  if ! nats_cluster_all_answer; then
    say nats-cluster "NOT answering at $NATS_CLUSTER_URLS (start it with 'bash scripts/services.sh up --clusters')"
  else
    info="$(nats_info "${NODE_HOSTS[0]}" "${NODE_PORTS[0]}")"
    say nats-cluster "answering at $NATS_CLUSTER_URLS: nats-server $(info_version "$info"), JetStream meta leader $(nats_cluster_leader)"
  fi
  if [ -f "$NATS_CLUSTER_STATUS" ]; then
    say nats-cluster "status file $NATS_CLUSTER_STATUS: $(cat "$NATS_CLUSTER_STATUS")"
  fi
}

down_nats_cluster() {
  split_nodes "$NATS_CLUSTER_URLS" 4222
  local i dir pids=() stopped=()
  for i in "${!NODE_URLS[@]}"; do
    dir="$NATS_CLUSTER_DIR/${NODE_PORTS[$i]}"
    if [ ! -f "$dir/nats-server.pid" ]; then
      say nats-cluster "port ${NODE_PORTS[$i]}: not started by this script (no $dir/nats-server.pid)"
      continue
    fi
    stopped+=("$i")
    # All at once: each takes a few seconds to shut JetStream down.
    if have start-stop-daemon; then
      start-stop-daemon --stop --oknodo --quiet --pidfile "$dir/nats-server.pid" --retry TERM/10/KILL/5 &
    else
      kill "$(cat "$dir/nats-server.pid")" 2>/dev/null &
    fi
    pids+=($!)
  done
  [ "${#pids[@]}" -gt 0 ] && wait "${pids[@]}"
  for i in "${stopped[@]}"; do
    dir="$NATS_CLUSTER_DIR/${NODE_PORTS[$i]}"
    say nats-cluster "port ${NODE_PORTS[$i]}: stopped (pid $(cat "$dir/nats-server.pid")), its JetStream store removed"
    rm -rf "${dir:?}"
  done
  mkdir -p "$CACHE_DIR"
  echo "unavailable stopped by 'bash scripts/services.sh down --clusters'; start it with 'bash scripts/services.sh up --clusters'" \
    >"$NATS_CLUSTER_STATUS"
}
