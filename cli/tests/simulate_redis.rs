//! `slidegate simulate --redis URL` against a real `redis-server` started here: every
//! algorithm's Redis row admits exactly what its local row admits on the same trace, and an
//! unreachable URL is a clear error.

use slidegate_testkit::redis_server;

use std::process::Command;

fn simulate(args: &[&str]) -> std::process::Output {
    let dir = std::env::temp_dir();
    let chart = dir.join(format!(
        "slidegate-redis-{}-{}.svg",
        std::process::id(),
        args.len()
    ));
    let out = Command::new(env!("CARGO_BIN_EXE_slidegate"))
        .current_dir(&dir)
        .args(["simulate", "--limit", "10", "--window", "1s"])
        .args(["--duration", "20s", "--keys", "20"])
        .arg("--chart")
        .arg(&chart)
        .args(args)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&chart);
    out
}

#[test]
fn redis_rows_admit_what_the_local_limiters_admit() {
    let server = redis_server::Server::start();
    let out = simulate(&["--redis", &server.url()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    // (algorithm and granularity, admitted) of every row.
    let rows: Vec<(String, String)> = table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| algorithm"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (format!("{} {}", cells[1], cells[2]), cells[4].to_owned())
        })
        .collect();
    let redis: Vec<_> = rows.iter().filter(|r| r.0.starts_with("Redis ")).collect();
    // Strict, StrictMarked and Weighted at N = 1 and 10, the fixed window, GCRA, the exact log.
    assert_eq!(redis.len(), 9, "{table}");
    for (name, admitted) in redis {
        let local = rows
            .iter()
            .find(|r| r.0 == name["Redis ".len()..])
            .unwrap_or_else(|| panic!("no local row for {name}"));
        assert_eq!(&local.1, admitted, "{name}");
    }
}

#[test]
fn an_unreachable_redis_is_a_clear_error() {
    let port = redis_server::free_port();
    let out = simulate(&["--redis", &format!("redis://127.0.0.1:{port}")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--redis") && err.contains(&port.to_string()),
        "{err}"
    );
}
