#!/usr/bin/env bash
# HTTP load benchmark: an axum hello-world five ways in one run — no limiter, slidegate's
# layer keyed by client IP with and without its header fields on admitted responses,
# tower-governor's layer keyed the same way without and with its headers. Every request
# carries an X-Forwarded-For address from a pool of 1,000 (one load generator as 1,000
# clients behind a trusted proxy); every request is admitted.
#
# Two loads. By default wrk's closed loop: each connection sends its next request when the
# last is answered, as fast as the server goes (throughput; its latency follows the queue of
# requests in flight). With RATE=<requests/s>, an open loop at that fixed rate from
# examples/http_load (benches/http/load.rs), each request timed from when it was due: below
# saturation no queue forms, and p50 is what a request costs the server plus the network.
#
# The server gets core 0 (one tokio thread), the load generator core 1. Modes alternate
# within each round and the round order rotates; the table gives each mode's median over the
# rounds and, against no limiter, the median of the rounds' ratios to the bare server of the
# same round. Environment: DURATION (s per measurement, 10), ROUNDS (3), CONNECTIONS (32
# closed, 8 open), RATE (unset: closed loop).
set -euo pipefail
cd "$(dirname "$0")/../.."
duration=${DURATION:-10}
rounds=${ROUNDS:-3}
rate=${RATE:-}
connections=${CONNECTIONS:-$([ -n "$rate" ] && echo 8 || echo 32)}

if ! command -v wrk >/dev/null; then
    apt-get update && apt-get install -y wrk
fi
cargo build --release --example http_bench --example http_load --features axum
server=target/release/examples/http_bench

work=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

cat > "$work/clients.lua" <<'LUA'
-- 1,000 client addresses, one after another, as a trusted proxy would report them.
local i = 0
request = function()
    i = (i + 1) % 1000
    wrk.headers["X-Forwarded-For"] = "10.1." .. math.floor(i / 256) .. "." .. (i % 256)
    return wrk.format(nil, "/")
end
LUA

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Loads the server on port $1 for $2 seconds, wrk's report or http_load's on stdout.
load() {
    if [ -n "$rate" ]; then
        taskset -c 1 target/release/examples/http_load "$1" "$rate" "$2" "$connections"
    else
        taskset -c 1 wrk -t1 -c"$connections" -d"$2s" --latency -s "$work/clients.lua" \
            "http://127.0.0.1:$1/"
    fi
}

# Runs one measurement of mode $1, appending "mode rps p50_us p99_us cpu_us_per_request
# [send_lag_p99_us]" to $work/results (the send lag with RATE only).
measure() {
    local mode=$1 port
    port=$(free_port)
    taskset -c 0 "$server" "$mode" "$port" &
    pid=$!
    for _ in $(seq 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
        sleep 0.05
    done
    load "$port" 2 >/dev/null
    # The server's CPU time (user + system, in clock ticks) over the measured run.
    local cpu_before cpu_after
    cpu_before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    load "$port" "$duration" > "$work/$mode.out"
    cpu_after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
    awk -v mode="$mode" -v ticks=$((cpu_after - cpu_before)) -v hz="$(getconf CLK_TCK)" '
        function us(v) {
            if (v ~ /us$/) return v + 0;
            if (v ~ /ms$/) return v * 1000;
            if (v ~ /s$/) return v * 1000000;
            return v;
        }
        $1 == "50%" || $1 == "p50_us" { p50 = us($2) }
        $1 == "99%" || $1 == "p99_us" { p99 = us($2) }
        $1 == "Requests/sec:" || $1 == "requests_per_second" { rps = $2 }
        / requests in / { n = $1 }
        $1 == "requests" { n = $2 }
        $1 == "lag_p99_us" { lag = $2 }
        /Non-2xx/ { bad = $NF }
        END {
            if (bad > 0) { print "non-2xx responses in " mode > "/dev/stderr"; exit 1 }
            printf "%s %s %s %s %.2f %s\n", mode, rps, p50, p99, ticks / hz / n * 1e6, lag
        }' "$work/$mode.out" >> "$work/results"
}

# One benchmark at a time on this machine: hold the lock to the end.
exec 9>/tmp/slidegate-bench.lock
flock 9
modes=(none slidegate slidegate_no_headers governor governor_headers)
echo "rustc processes running at the start: $(pgrep -c rustc || true)"
for round in $(seq "$rounds"); do
    for k in "${!modes[@]}"; do
        mode=${modes[$(( (k + round) % ${#modes[@]} ))]}
        measure "$mode"
        echo "round $round: $(tail -n1 "$work/results")"
    done
done
echo "rustc processes running at the end: $(pgrep -c rustc || true)"

python3 - "$work/results" "$duration" "$rounds" "$connections" "$rate" <<'PY'
import statistics, sys
results, duration, rounds, connections, rate = sys.argv[1:]
by = {}
for mode, *values in (line.split() for line in open(results)):
    by.setdefault(mode, []).append([float(v) for v in values])
med = {m: [statistics.median(x[i] for x in v) for i in range(len(v[0]))] for m, v in by.items()}
names = {
    "none": "no limiter",
    "slidegate": "slidegate `RateLimitLayer`",
    "slidegate_no_headers": "slidegate, `headers_on_allowed(false)`",
    "governor": "tower-governor `GovernorLayer`",
    "governor_headers": "tower-governor, `use_headers()`",
}
def vs(m, i):
    """Against the bare server of the same round: the median of the rounds' ratios, and
    their range."""
    if m == "none":
        return "—"
    ratios = sorted((x[i] / b[i] - 1) * 100 for x, b in zip(by[m], by["none"]))
    return f"{statistics.median(ratios):+.1f}% ({ratios[0]:+.1f} to {ratios[-1]:+.1f})"
if rate:
    print(f"\nhttp_load at {int(rate):,} requests/s over {connections} connections, {duration} s, "
          f"{rounds} rounds; server on core 0, load on core 1; 1,000 X-Forwarded-For clients; "
          "latency from each request's due time; medians, and against the bare server of the "
          "same round the median of the rounds' ratios (their range in brackets)")
    print("| server | requests/s | p50 | p99 | send lag p99 | server CPU per request | p50 vs none | CPU vs none |")
    print("|---|---|---|---|---|---|---|---|")
else:
    print(f"\nwrk -t1 -c{connections} -d{duration}s, {rounds} rounds; server on core 0, wrk on "
          "core 1; 1,000 X-Forwarded-For clients; medians, and against the bare server of the "
          "same round the median of the rounds' ratios (their range in brackets)")
    print("| server | requests/s | p50 | p99 | server CPU per request | throughput vs none | p50 vs none | CPU vs none |")
    print("|---|---|---|---|---|---|---|---|")
for m in ["none", "slidegate", "slidegate_no_headers", "governor", "governor_headers"]:
    rps, p50, p99, cpu = med[m][:4]
    if rate:
        print(f"| {names[m]} | {rps:,.0f} | {p50:.1f} µs | {p99:,.0f} µs | {med[m][4]:,.0f} µs | "
              f"{cpu:.2f} µs | {vs(m, 1)} | {vs(m, 3)} |")
    else:
        print(f"| {names[m]} | {rps:,.0f} | {p50:.0f} µs | {p99:,.0f} µs | {cpu:.2f} µs | "
              f"{vs(m, 0)} | {vs(m, 1)} | {vs(m, 3)} |")
PY
