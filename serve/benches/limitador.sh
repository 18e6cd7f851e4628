#!/usr/bin/env bash
# `slidegate serve` against Limitador (Kuadrant/limitador, a Rust service of Envoy's rate limit
# API), built from its repository: the same rules, the same load generator, the same cores.
# Not run in CI (CI only compiles the load generator, `cargo bench --no-run`).
#
# Both servers hold their counts in memory and answer 1,000 users under a per-user limit that
# admits everything (2,000,000,000 an hour), so every call is a full decision. Each runs on
# core 0 with one worker: slidegate with `--threads 1`; Limitador's gRPC server runs on its
# main runtime, actix's current-thread tokio runtime (it has no worker option; its HTTP
# workers, one per core it may run on, idle). The load generator, serve/benches/rls_load.rs
# (raw HTTP/2, requests encoded before the run), runs on core 1 with CONNECTIONS connections
# of STREAMS calls in flight (64 × 1). The two servers alternate over ROUNDS rounds (7) of
# DURATION seconds (10), the first of each round rotating; the table gives each server's
# medians, and slidegate ÷ Limitador as the median of the rounds' ratios (range in brackets).
#
# CPU per call is the server's user and system time (/proc/<pid>/stat) over the measured span
# divided by the calls answered in it; the client's own CPU per call is shown beside it.
#
# Limitador: LIMITADOR=path/to/limitador-server uses a built one; otherwise LIMITADOR_SRC
# (default target/limitador-src, cloned from LIMITADOR_REPO at its default branch when absent)
# is built with `cargo build --release -p limitador-server` into its own target directory
# (it needs protoc and libclang, for RocksDB's bindings: protobuf-compiler, clang and
# libclang-dev are installed when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
duration=${DURATION:-10}
rounds=${ROUNDS:-7}
connections=${CONNECTIONS:-64}
streams=${STREAMS:-1}
lock=${BENCH_LOCK:-/tmp/slidegate-bench.lock}

if [ -z "${LIMITADOR:-}" ]; then
    src=${LIMITADOR_SRC:-target/limitador-src}
    if [ ! -d "$src/limitador-server" ]; then
        git clone --depth 1 "${LIMITADOR_REPO:-https://github.com/Kuadrant/limitador}" "$src"
    fi
    if ! command -v protoc >/dev/null || ! command -v clang >/dev/null; then
        apt-get update && apt-get install -y protobuf-compiler clang libclang-dev
    fi
    (cd "$src" && cargo build --release -p limitador-server --target-dir target)
    LIMITADOR=$src/target/release/limitador-server
fi
# SLIDEGATE names a `slidegate-serve` binary to load instead of this tree's (another build).
if [ -z "${SLIDEGATE:-}" ]; then
    cargo build --release -p slidegate-serve --bin slidegate-serve
fi
slidegate=${SLIDEGATE:-target/release/slidegate-serve}
cargo bench -p slidegate-serve --bench rls_load --no-run
load=$(ls -t target/release/deps/rls_load-* | grep -v '\.d$' | head -1)

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# The same limit twice: slidegate's rules file and Limitador's limits file.
cat > "$work/rules.toml" <<'TOML'
[rules.per-user]
limit = 2000000000
window = "1h"
granularity = "1m"

[[descriptors]]
domain = "bench"
match = ["user"]
rule = "per-user"
TOML
cat > "$work/limits.yaml" <<'YAML'
- namespace: bench
  name: per-user
  max_value: 2000000000
  seconds: 3600
  conditions: []
  variables:
    - descriptors[0].user
YAML

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 200); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    echo "nothing listens on port $1" >&2; exit 1
}

taskset -c 0 "$slidegate" --rules "$work/rules.toml" --http 127.0.0.1:0 --grpc 127.0.0.1:0 \
    --threads 1 > "$work/slidegate.out" 2> "$work/slidegate.err" &
pids+=($!); slidegate_pid=$!
for _ in $(seq 200); do
    if grep -q grpc= "$work/slidegate.out" 2>/dev/null; then break; fi
    sleep 0.05
done
slidegate_addr=$(grep -o 'grpc=[^ ]*' "$work/slidegate.out" | cut -d= -f2)

rls_port=$(free_port); http_port=$(free_port)
taskset -c 0 "$LIMITADOR" --rls-ip 127.0.0.1 --rls-port "$rls_port" --http-ip 127.0.0.1 \
    --http-port "$http_port" "$work/limits.yaml" memory \
    > "$work/limitador.out" 2> "$work/limitador.err" &
pids+=($!); limitador_pid=$!
wait_port "$rls_port"
limitador_addr=127.0.0.1:$rls_port

# One measurement: "<server> calls/s p50 p99 user_us system_us client_us" appended to results.
measure() {
    local name=$1 addr pid
    if [ "$name" = slidegate ]; then addr=$slidegate_addr pid=$slidegate_pid
    else addr=$limitador_addr pid=$limitador_pid; fi
    taskset -c 1 "$load" --grpc "$addr" --pid "$pid" --connections "$connections" \
        --streams "$streams" --warmup 1 --duration "$2" > "$work/$name.out"
    read -r rps p50 p99 errors user system client < "$work/$name.out"
    if [ "$errors" != 0 ]; then echo "$errors errors from $name" >&2; exit 1; fi
    echo "$name $rps $p50 $p99 $user $system $client" >> "$work/results"
}

# One benchmark at a time on this machine: hold the lock while measuring.
exec 9>"$lock"
flock 9
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
# Warm-up: connections, allocators, the 1,000 keys of each server.
measure slidegate 2; measure limitador 2
: > "$work/results"
for r in $(seq 0 $((rounds - 1))); do
    if [ $((r % 2)) = 0 ]; then measure slidegate "$duration"; measure limitador "$duration"
    else measure limitador "$duration"; measure slidegate "$duration"; fi
done
flock -u 9
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

echo "$(lscpu | grep 'Model name' | sed 's/  */ /g'); $connections connections x $streams in flight, $rounds rounds of ${duration} s (medians):"
awk '
    function median(list,   a, n, i, j, t) {
        n = split(list, a, " ");
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2;
    }
    function range(list,   a, n, i, lo, hi) {
        n = split(list, a, " "); lo = hi = a[1];
        for (i = 2; i <= n; i++) { if (a[i] + 0 < lo + 0) lo = a[i]; if (a[i] + 0 > hi + 0) hi = a[i] }
        return sprintf("%.2f-%.2f", lo, hi);
    }
    # Column k of server s in round r; the ratio lists pair each round.
    { n[$1]++; for (k = 2; k <= 7; k++) v[$1, k, n[$1]] = $k; if ($1 == "limitador") cpu_l[n[$1]] = $5 + $6; else cpu_s[n[$1]] = $5 + $6 }
    END {
        split("calls/s p50_us p99_us user_us/call system_us/call client_us/call", label, " ");
        printf "| | slidegate | Limitador | slidegate / Limitador |\n|---|---|---|---|\n";
        for (k = 2; k <= 8; k++) {
            s = l = q = "";
            for (r = 1; r <= n["slidegate"]; r++) {
                if (k == 8) { a = cpu_s[r]; b = cpu_l[r] } else { a = v["slidegate", k, r]; b = v["limitador", k, r] }
                s = s " " a; l = l " " b; q = q " " (b > 0 ? a / b : 0);
            }
            name = (k == 8) ? "CPU_us/call" : label[k - 1];
            printf "| %s | %.2f | %.2f | %.2f (%s) |\n", name, median(s), median(l), median(q), range(q);
        }
    }' "$work/results"
