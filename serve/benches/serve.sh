#!/usr/bin/env bash
# Load benchmark of `slidegate serve`: decisions against the no-op endpoints of the same
# server, in the same run, over HTTP/JSON (wrk) and Envoy's gRPC API (serve_load, a tonic
# client), 64 connections each, in memory. Every request names one of 1,000 users under a
# per-user rule that admits everything, so each is a full decision.
#
# The server gets core 0 (one tokio worker), the load generator core 1. Within each round the
# four measurements alternate and their order rotates; the table gives each one's median over
# the rounds, and each decision endpoint's requests/s against its no-op's. Environment:
# DURATION (s per measurement, 10), ROUNDS (3), CONNECTIONS (64).
set -euo pipefail
cd "$(dirname "$0")/../.."
duration=${DURATION:-10}
rounds=${ROUNDS:-3}
connections=${CONNECTIONS:-64}

if ! command -v wrk >/dev/null; then
    apt-get update && apt-get install -y wrk
fi
# SLIDEGATE names a `slidegate` binary to load instead of this tree's (another build, to
# compare).
if [ -z "${SLIDEGATE:-}" ]; then
    cargo build --release -p slidegate-cli --bin slidegate
fi
server=${SLIDEGATE:-target/release/slidegate}
cargo bench -p slidegate-serve --bench serve_load --no-run
load=$(ls -t target/release/deps/serve_load-* | grep -v '\.d$' | head -1)

work=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

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

cat > "$work/users.lua" <<'LUA'
-- One of 1,000 users per request, in turn.
local i = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
    i = (i + 1) % 1000
    local body = '{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"user-' .. i .. '"}]}]}'
    return wrk.format(nil, nil, nil, body)
end
LUA

taskset -c 0 "$server" serve --rules "$work/rules.toml" --http 127.0.0.1:0 \
    --grpc 127.0.0.1:0 --threads 1 --noop-endpoints > "$work/serve.out" 2> "$work/serve.err" &
pid=$!
for _ in $(seq 100); do
    if grep -q grpc= "$work/serve.out" 2>/dev/null; then break; fi
    sleep 0.05
done
http=$(grep -o 'http=[^ ]*' "$work/serve.out" | cut -d= -f2)
grpc=$(grep -o 'grpc=[^ ]*' "$work/serve.out" | cut -d= -f2)

# The server's CPU time so far (user + system), in clock ticks.
ticks=$(getconf CLK_TCK)
cpu() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }

# One measurement: "<name> rps p50_us p99_us cpu_us_per_request" appended to $work/results.
# The server's CPU per request is the steadier figure on a busy machine: requests/s falls
# when other processes take the cores, CPU per request much less.
measure() {
    local name=$1
    local before
    before=$(cpu)
    case $name in
        http-decide|http-noop)
            local path=/v1/check
            [ "$name" = http-noop ] && path=/v1/noop
            taskset -c 1 wrk -t1 -c"$connections" -d"${duration}s" --latency -s "$work/users.lua" \
                "http://$http$path" > "$work/$name.out"
            awk -v name="$name" '
                function us(v) {
                    if (v ~ /us$/) return v + 0;
                    if (v ~ /ms$/) return v * 1000;
                    if (v ~ /s$/) return v * 1000000;
                    return v;
                }
                $1 == "50%" { p50 = us($2) }
                $1 == "99%" { p99 = us($2) }
                $1 == "Requests/sec:" { rps = $2 }
                /Non-2xx|Socket errors/ { bad = 1 }
                END {
                    if (bad) { print "errors in " name > "/dev/stderr"; exit 1 }
                    printf "%s %s %s %s\n", name, rps, p50, p99
                }' "$work/$name.out" > "$work/$name.row"
            ;;
        grpc-decide|grpc-noop)
            local method=decide
            [ "$name" = grpc-noop ] && method=noop
            taskset -c 1 "$load" --grpc "$grpc" --method "$method" --connections "$connections" \
                --duration "$duration" > "$work/$name.out"
            read -r rps p50 p99 errors < "$work/$name.out"
            if [ "$errors" != 0 ]; then echo "errors in $name" >&2; exit 1; fi
            echo "$name $rps $p50 $p99" > "$work/$name.row"
            ;;
    esac
    local after
    after=$(cpu)
    awk -v ticks="$ticks" -v used=$((after - before)) -v d="$duration" \
        '{ printf "%s %s %s %s %.2f\n", $1, $2, $3, $4, used / ticks * 1e6 / ($2 * d) }' \
        "$work/$name.row" >> "$work/results"
}

# One benchmark at a time on this machine: hold the lock to the end.
exec 9>/tmp/slidegate-bench.lock
flock 9
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
names=(http-decide http-noop grpc-decide grpc-noop)
# Warm-up: connections, allocator, the limiter's 1,000 keys.
DURATION_SAVED=$duration; duration=2
for n in "${names[@]}"; do measure "$n"; done
duration=$DURATION_SAVED
: > "$work/results"
for r in $(seq 0 $((rounds - 1))); do
    for k in 0 1 2 3; do
        measure "${names[$(( (k + r) % 4 ))]}"
    done
done

echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "slidegate serve, $connections connections, $rounds rounds of ${duration} s (medians):"
awk '
    { rps[$1] = rps[$1] " " $2; p50[$1] = p50[$1] " " $3; p99[$1] = p99[$1] " " $4; cpu[$1] = cpu[$1] " " $5 }
    function median(list,   a, n, i, j, t) {
        n = split(list, a, " ");
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2;
    }
    END {
        printf "| endpoint | requests/s | p50 | p99 | server CPU per request | decision vs no-op: requests/s, CPU |\n|---|---|---|---|---|---|\n";
        split("http-noop http-decide grpc-noop grpc-decide", order, " ");
        for (i = 1; i <= 4; i++) {
            n = order[i]; m = median(rps[n]); c = median(cpu[n]);
            noop = (n ~ /^http/) ? "http-noop" : "grpc-noop";
            rel = (n ~ /noop/) ? "" : sprintf("%.1f%% fewer, %+.1f%% CPU", (1 - m / median(rps[noop])) * 100, (c / median(cpu[noop]) - 1) * 100);
            printf "| %s | %.0f | %.0f us | %.0f us | %.1f us | %s |\n", n, m, median(p50[n]), median(p99[n]), c, rel;
        }
    }' "$work/results"
