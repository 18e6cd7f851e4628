#!/usr/bin/env bash
# Instructions per request of `slidegate serve`, under valgrind's callgrind: the server (one
# tokio worker, in memory, the rules of serve/benches/serve.sh) answers exactly N requests sent
# one after another on one connection by serve_load, and the difference between two runs of
# different N, divided by their difference, is one request's cost in the server, start-up
# and shutdown excluded. Instruction counts do not move with the machine's load, which moves
# the wall-clock figures of serve.sh by more than a decision costs.
#
# Every endpoint of serve.sh: the HTTP/JSON decision and its no-op, the gRPC decision and its
# no-op. Environment: SMALL (2000) and LARGE (7000) requests; both at least the 1,000 users,
# so each key is created in both runs and the difference holds only admitted checks.
# ENDPOINTS chooses among them. COUNT=handler counts only inside the endpoint's handler (the
# body read and parsed, the decision, the answer built; not the connection's reading and
# writing): a figure that does not move with how often the idle server parks between
# requests, which moves the whole server's count by a thousand or two per request.
# COUNT=connection (HTTP/JSON only) counts inside hyper's connection driver: the request read
# and parsed, the handler, the answer's head and body written, the allocator's work wherever
# it falls, but not the runtime's parking; it does not move either, and it sees what the
# handler's count cannot (hyper writing a longer answer, a change in where memory is freed).
# SLIDEGATE names a `slidegate` binary to measure instead of this tree's (another build, to
# compare).
set -euo pipefail
cd "$(dirname "$0")/../.."
small=${SMALL:-2000}
large=${LARGE:-7000}

if [ -z "${SLIDEGATE:-}" ]; then
    cargo build --release -p slidegate-cli --bin slidegate
fi
server=${SLIDEGATE:-target/release/slidegate}
cargo bench -p slidegate-serve --bench serve_load --no-run
load=$(ls -t target/release/deps/serve_load-* | grep -v '\.d$' | head -1)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The callgrind profiles are kept in OUT if set (callgrind_annotate --inclusive=yes reads
# where a request's instructions go).
out=${OUT:-$work}
mkdir -p "$out"
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

# The server's instructions for `$2` requests to endpoint `$1`.
instructions() {
    local name=$1 n=$2
    local toggle=()
    if [ "${COUNT:-}" = handler ]; then
        case $name in
            # The handlers' bodies are inlined into axum's Handler::call, by their arity.
            http-decide) toggle=(--toggle-collect='*axum::handler::Handler<(M,T1,T2),S>>::call::*') ;;
            http-noop) toggle=(--toggle-collect='*axum::handler::Handler<(M,T1),S>>::call::*') ;;
            grpc-decide) toggle=(--toggle-collect='*grpc::Service as*should_rate_limit::*') ;;
            grpc-noop) toggle=(--toggle-collect='*grpc::NoopService as*should_rate_limit::*') ;;
        esac
    elif [ "${COUNT:-}" = connection ]; then
        case $name in
            # hyper's HTTP/1 connection driver: the request read and parsed, the handler,
            # the answer written; not the runtime's parking in between.
            http-*) toggle=(--toggle-collect='*h1::dispatch::Dispatcher<D,Bs,I,T>::poll_catch') ;;
        esac
    fi
    valgrind --tool=callgrind "${toggle[@]}" --callgrind-out-file="$out/$name.$n.out" \
        "$server" serve --rules "$work/rules.toml" --http 127.0.0.1:0 \
        --grpc 127.0.0.1:0 --threads 1 --noop-endpoints > "$work/serve.out" 2> "$work/serve.err" &
    local pid=$!
    for _ in $(seq 3000); do
        if grep -q grpc= "$work/serve.out" 2>/dev/null; then break; fi
        sleep 0.1
    done
    if ! grep -q grpc= "$work/serve.out"; then
        echo "the server did not start: $(cat "$work/serve.err")" >&2
        exit 1
    fi
    local http grpc
    http=$(grep -o 'http=[^ ]*' "$work/serve.out" | cut -d= -f2)
    grpc=$(grep -o 'grpc=[^ ]*' "$work/serve.out" | cut -d= -f2)
    local args=(--grpc "$grpc" --method decide)
    case $name in
        http-decide) args=(--http "$http" --method decide) ;;
        http-noop) args=(--http "$http" --method noop) ;;
        grpc-noop) args=(--grpc "$grpc" --method noop) ;;
    esac
    "$load" "${args[@]}" --requests "$n" > "$work/client.out"
    if ! grep -q ' 0 errors' "$work/client.out"; then
        echo "errors in $name: $(cat "$work/client.out")" >&2
        exit 1
    fi
    kill -TERM "$pid"
    wait "$pid"
    awk '/^totals:/ { print $2 }' "$out/$name.$n.out"
}

echo "slidegate serve under callgrind: instructions per request ((I($large) - I($small)) / $((large - small)))"
echo "| endpoint | instructions per request |"
echo "|---|---|"
for name in ${ENDPOINTS:-http-noop http-decide grpc-noop grpc-decide}; do
    a=$(instructions "$name" "$small")
    b=$(instructions "$name" "$large")
    echo "| $name | $(( (b - a) / (large - small) )) |"
done
