#!/usr/bin/env bash
# Regenerates serve/src/proto/*.rs from the .proto files beside this script, with protox
# (a protobuf compiler in Rust: no system protoc) and tonic-prost-build. The generated code is
# checked in, so building slidegate never needs either: run this only after editing a .proto.
set -euo pipefail
proto=$(cd "$(dirname "$0")" && pwd)
out=$proto/../src/proto
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
mkdir -p "$gen/src"
cat > "$gen/Cargo.toml" <<'TOML'
[package]
name = "slidegate-protogen"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
protox = "0.10"
tonic-prost-build = { version = "0.14", default-features = false }

[workspace]
TOML
cat > "$gen/src/main.rs" <<'RS'
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (proto, out) = (args.next().unwrap(), args.next().unwrap());
    let files = [
        "envoy/service/ratelimit/v3/rls.proto",
        "slidegate/serve/v1/bench.proto",
    ];
    let fds = protox::compile(files, [&proto])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // No Channel::connect helpers: the service does not depend on tonic's client transport.
        .build_transport(false)
        .emit_rerun_if_changed(false)
        .out_dir(&out)
        .compile_fds(fds)?;
    Ok(())
}
RS
mkdir -p "$out"
cargo run --quiet --manifest-path "$gen/Cargo.toml" --target-dir "${CARGO_TARGET_DIR:-$proto/../../target}/protogen" -- "$proto" "$out"
# rustfmt for a stable diff.
rustfmt --edition 2024 "$out"/*.rs
ls "$out"
