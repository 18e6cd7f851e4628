//! The `slidegate` binary, run as a user runs it: `slidegate simulate` on trace files and
//! built-in scenarios, its table, its chart and its errors; `slidegate serve` as typed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A fresh directory for one test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("slidegate-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn slidegate(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_slidegate"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// `slidegate simulate --trace TRACE EXTRA…` in `dir`.
fn replay(dir: &Path, trace: &Path, extra: &[&str]) -> Output {
    let trace = trace.to_str().unwrap();
    let args: Vec<&str> = ["simulate", "--trace", trace]
        .iter()
        .chain(extra)
        .copied()
        .collect();
    slidegate(dir, &args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The table's rows as cells, keyed by "algorithm granularity".
fn table(stdout: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| algorithm"))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

/// The row whose algorithm column starts with `name` and whose granularity contains `n`.
fn row<'a>(rows: &'a [Vec<String>], name: &str, granularity: &str) -> &'a [String] {
    rows.iter()
        .find(|r| r[0].starts_with(name) && r[1].contains(granularity))
        .unwrap_or_else(|| panic!("no row {name} {granularity} in {rows:?}"))
}

// Columns.
const REQUESTS: usize = 2;
const ADMITTED: usize = 3;
const WRONGLY_ALLOWED: usize = 4;
const WRONGLY_DENIED: usize = 5;
const WORST: usize = 6;

fn succeeded(out: &Output) -> String {
    assert!(
        out.status.success(),
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Key `a` sends 6 requests per second for 10 s against 5 per second; key `b` stays under.
fn busy_trace() -> String {
    busy_trace_from(0)
}

/// [`busy_trace`] starting `start` seconds later.
fn busy_trace_from(start: u64) -> String {
    let mut csv = String::from("timestamp,key,cost\n");
    for i in 0..60u64 {
        let s = start + i / 6;
        csv.push_str(&format!("{s}.{:06},a\n", (i % 6) * 166_666));
        if i % 3 == 0 {
            csv.push_str(&format!("{s}.{:06},b,2\n", (i % 6) * 166_666 + 1));
        }
    }
    csv
}

/// The table without its last column, decisions per second (wall time).
fn decisions(stdout: &str) -> Vec<Vec<String>> {
    table(stdout)
        .into_iter()
        .map(|mut r| {
            r.pop();
            r
        })
        .collect()
}

#[test]
fn a_trace_gives_a_table_with_the_exact_log_as_the_zero_error_reference() {
    let dir = TempDir::new("table");
    let trace = dir.file("trace.csv", &busy_trace());
    let out = replay(&dir.0, &trace, &["--limit", "5", "--window", "1s"]);
    let stdout = succeeded(&out);
    let rows = table(&stdout);
    // Strict, Strict with marks and Weighted at N = 1 and 10 (1 s / 60 is not whole
    // nanoseconds), the fixed window, the reference.
    for name in ["Strict", "StrictMarked", "Weighted"] {
        for n in ["N=1)", "N=10)"] {
            assert_eq!(row(&rows, name, n)[REQUESTS], "80");
        }
    }
    assert!(!stdout.contains("N=60"), "{stdout}");
    let exact = row(&rows, "ExactLog", "");
    assert_eq!(exact[WRONGLY_ALLOWED], "0%");
    assert_eq!(exact[WRONGLY_DENIED], "0%");
    assert_eq!(exact[WORST], "5");
    // `a` alone: 5 per second of its 6 (the first second admits 5 of 6, and so on).
    let admitted: u64 = exact[ADMITTED].parse().unwrap();
    assert!((50..=80).contains(&admitted), "{admitted}");
    for name in ["Strict", "StrictMarked"] {
        for n in ["N=1)", "N=10)"] {
            let worst: u64 = row(&rows, name, n)[WORST].parse().unwrap();
            assert!(worst <= 5, "{name} {n}: worst {worst}");
        }
    }
    assert!(stdout.contains("wrongly allowed / denied"), "{stdout}");
}

/// The boundary attack at L = 10 per 600 ms for 6 s.
const BOUNDARY: &[&str] = &[
    "--scenario",
    "boundary",
    "--limit",
    "10",
    "--window",
    "600ms",
    "--duration",
    "6s",
];

#[test]
fn the_boundary_attack_gets_2l_through_a_fixed_window_and_l_through_strict() {
    let dir = TempDir::new("boundary");
    let args = [
        &["simulate"],
        BOUNDARY,
        &["--keys", "3", "--chart", "attack.svg"],
    ]
    .concat();
    let out = slidegate(&dir.0, &args);
    let stdout = succeeded(&out);
    let rows = table(&stdout);
    assert_eq!(row(&rows, "FixedWindow", "")[WORST], "20");
    assert_eq!(row(&rows, "ExactLog", "")[WORST], "10");
    for name in ["Strict", "StrictMarked"] {
        for n in ["N=1)", "N=10)", "N=60)"] {
            assert_eq!(row(&rows, name, n)[WORST], "10", "{name} {n}");
        }
    }
    // GCRA lets a full burst through, then only what drips back: more than L, less than 2L.
    let gcra: u64 = row(&rows, "GCRA", "")[WORST].parse().unwrap();
    assert!((11..20).contains(&gcra), "GCRA worst {gcra}");
    // The fixed window admits requests the exact log denies.
    assert_ne!(row(&rows, "FixedWindow", "")[WRONGLY_ALLOWED], "0%");

    let svg = std::fs::read_to_string(dir.0.join("attack.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("FixedWindow") && svg.contains("limit L = 10"));
    assert!(stdout.contains("chart: attack.svg"), "{stdout}");
}

#[test]
fn a_malformed_trace_fails_naming_the_line_and_prints_no_table() {
    let dir = TempDir::new("malformed");
    let trace = dir.file(
        "bad.csv",
        "timestamp,key,cost\n0.1,a\n0.2,a,1\n0.3,a,abc\n0.4,a\n",
    );
    let out = replay(&dir.0, &trace, &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("line 4: cost \"abc\" is not a whole number ≥ 1"),
        "{stderr}"
    );
    assert!(!text(&out.stdout).contains("| algorithm"));
    assert!(!dir.0.join("slidegate-simulate.svg").exists());

    // Out of order, and a cost above the limit: errors too, each with its line.
    let trace = dir.file("order.csv", "2,a\n1,a\n");
    let out = replay(&dir.0, &trace, &[]);
    assert!(text(&out.stderr).contains("line 2: timestamp 1 is earlier"));
    let trace = dir.file("zero.csv", "1,a,1\n1,a,0\n");
    let out = replay(&dir.0, &trace, &[]);
    assert!(text(&out.stderr).contains("line 2: cost must be at least 1, got 0"));
    let trace = dir.file("cost.csv", "1,a,7\n");
    let out = replay(&dir.0, &trace, &["--limit", "5"]);
    assert!(text(&out.stderr).contains("line 1: cost 7 is above the limit 5"));
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn skip_bad_lines_counts_and_reports_them() {
    let dir = TempDir::new("skip");
    let trace = dir.file(
        "bad.csv",
        "0.1,a\nnot-a-time,a\n0.2,a,0\n0.3,b\n0.25,b\n0.4,a\n",
    );
    let out = replay(&dir.0, &trace, &["--skip-bad-lines"]);
    let stdout = succeeded(&out);
    assert!(stdout.contains("skipped 3 bad lines"), "{stdout}");
    assert!(
        stdout.contains("line 2: timestamp \"not-a-time\""),
        "{stdout}"
    );
    assert_eq!(row(&table(&stdout), "ExactLog", "")[REQUESTS], "3");
    assert!(dir.0.join("slidegate-simulate.svg").exists());
}

#[test]
fn bad_arguments_are_the_library_config_errors_not_panics() {
    let dir = TempDir::new("args");
    let cases: [(&[&str], &str); 5] = [
        (
            &["simulate", "--limit", "0"],
            "limit must be at least 1, got 0",
        ),
        (
            &["simulate", "--window", "0s"],
            "window must be longer than zero",
        ),
        (
            &["simulate", "--window", "60s", "--granularity", "7s"],
            "does not divide the window",
        ),
        (
            &["simulate", "--window", "1s", "--granularity", "2s"],
            "is longer than the window",
        ),
        (&["simulate", "--limit", "99999999999"], "above the maximum"),
    ];
    for (args, want) in cases {
        let out = slidegate(&dir.0, args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    let out = slidegate(
        &dir.0,
        &["simulate", "--chart-key", "nobody", "--duration", "1s"],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("--chart-key \"nobody\" is not a key of scenario mixed"),
        "{stderr}"
    );
    assert!(stderr.contains("(its keys include \""), "{stderr}");
    assert!(!text(&out.stdout).contains("| algorithm"));
    // A chart in a directory that does not exist fails before the run, in one sentence.
    let out = slidegate(&dir.0, &["simulate", "--chart", "no/such/dir/x.svg"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr.trim(),
        "error: --chart no/such/dir/x.svg: the directory no/such/dir does not exist"
    );
    assert!(text(&out.stdout).is_empty(), "the run started");
    // clap's own checks: a bad duration, a missing file.
    let out = slidegate(&dir.0, &["simulate", "--window", "60"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("has no unit"));
    let out = slidegate(&dir.0, &["simulate", "--trace", "missing.csv"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot open missing.csv"));
}

#[test]
fn every_scenario_runs_and_is_deterministic() {
    let dir = TempDir::new("scenarios");
    for scenario in ["mixed", "steady", "bursts", "churn", "boundary"] {
        let args = [
            "simulate",
            "--scenario",
            scenario,
            "--limit",
            "20",
            "--window",
            "10s",
            "--duration",
            "60s",
            "--keys",
            "40",
            "--seed",
            "9",
        ];
        let a = table(&succeeded(&slidegate(&dir.0, &args)));
        let b = table(&succeeded(&slidegate(&dir.0, &args)));
        // Everything but the decisions per second (wall time) is the same.
        let strip = |rows: Vec<Vec<String>>| -> Vec<Vec<String>> {
            rows.into_iter()
                .map(|mut r| {
                    r.pop();
                    r
                })
                .collect()
        };
        let (a, b) = (strip(a), strip(b));
        assert_eq!(a, b, "{scenario}");
        assert_eq!(row(&a, "ExactLog", "")[WRONGLY_ALLOWED], "0%");
        assert_eq!(row(&a, "ExactLog", "")[WORST], "20");
    }
}

#[test]
fn a_bare_slidegate_is_simulate_with_its_defaults() {
    let dir = TempDir::new("bare");
    let bare = succeeded(&slidegate(&dir.0, &[]));
    assert!(
        bare.contains("scenario mixed (seed 1, 1000 keys, 600s)"),
        "{bare}"
    );
    assert!(bare.contains("quota L = 100 per 60s"), "{bare}");
    assert!(bare.contains("chart: slidegate-simulate.svg"), "{bare}");
    let svg = std::fs::read_to_string(dir.0.join("slidegate-simulate.svg")).unwrap();
    assert!(svg.starts_with("<svg"));
    let strip = |rows: Vec<Vec<String>>| -> Vec<Vec<String>> {
        rows.into_iter()
            .map(|mut r| {
                r.pop();
                r
            })
            .collect()
    };
    let rows = strip(table(&bare));
    let explicit = strip(table(&succeeded(&slidegate(&dir.0, &["simulate"]))));
    assert_eq!(rows, explicit);
    for n in ["N=1)", "N=10)", "N=60)"] {
        assert_eq!(row(&rows, "Strict", n)[WORST], "100", "Strict {n}");
    }
    assert_eq!(row(&rows, "FixedWindow", "")[WORST], "200");
    assert_eq!(row(&rows, "ExactLog", "")[WRONGLY_DENIED], "0%");

    // A bare `slidegate` takes simulate's options too.
    let out = succeeded(&slidegate(&dir.0, BOUNDARY));
    assert_eq!(row(&table(&out), "FixedWindow", "")[WORST], "20");
}

#[test]
fn unix_timestamps_give_the_same_table_as_timestamps_from_zero() {
    // 2.4e9 s is past the ~2.3e9 s the exact log tells apart from its clock's origin: the
    // replay's clock counts from the first request.
    let dir = TempDir::new("late");
    let args = ["--limit", "5", "--window", "1s"];
    let early = dir.file("early.csv", &busy_trace());
    let late = dir.file("late.csv", &busy_trace_from(2_400_000_000));
    let early = decisions(&succeeded(&replay(&dir.0, &early, &args)));
    let late = decisions(&succeeded(&replay(&dir.0, &late, &args)));
    assert_eq!(late, early);
    assert_eq!(row(&late, "ExactLog", "")[WORST], "5");

    // The span, not the timestamp, is bounded: about 73 years.
    let trace = dir.file("long.csv", "0,a\n2305843010,a\n");
    let out = replay(&dir.0, &trace, &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "line 2: timestamp 2305843010 is more than 2305843009.21369395 s (about 73 years) \
             after the first request's 0"
        ),
        "{stderr}"
    );
    let out = replay(&dir.0, &trace, &["--skip-bad-lines"]);
    assert!(succeeded(&out).contains("skipped 1 bad line (--skip-bad-lines)"));
}

#[test]
fn a_closed_pipe_ends_the_run_quietly() {
    let dir = TempDir::new("pipe");
    let mut child = Command::new(env!("CARGO_BIN_EXE_slidegate"))
        .current_dir(&dir.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before reading a byte, as `| head -0` would; the table is printed
    // after the replay, long after this.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr, "");
}

#[test]
fn a_byte_order_mark_before_the_header_is_ignored() {
    let dir = TempDir::new("bom");
    let trace = dir.file("bom.csv", &format!("\u{feff}{}", busy_trace()));
    let out = replay(&dir.0, &trace, &["--limit", "5", "--window", "1s"]);
    assert_eq!(
        row(&table(&succeeded(&out)), "ExactLog", "")[REQUESTS],
        "80"
    );
}

/// One request of one key: the header speaks in the singular, and the chart runs on for a
/// window after the request, to where every line is back at zero.
#[test]
fn one_request_reads_as_one() {
    let dir = TempDir::new("one");
    let trace = dir.file("one.csv", "0,solo\n");
    let out = replay(&dir.0, &trace, &["--limit", "5", "--window", "10s"]);
    let stdout = succeeded(&out);
    assert!(
        stdout.contains(": 1 request, 1 key over 0.0 s;"),
        "{stdout}"
    );
    let svg = std::fs::read_to_string(dir.0.join("slidegate-simulate.svg")).unwrap();
    let texts: Vec<&str> = svg
        .split("<text")
        .skip(1)
        .filter_map(|t| t.split('>').nth(1)?.split('<').next())
        .map(str::trim)
        .collect();
    // Every algorithm admits the one request: each line after the first says which it
    // equals, instead of hiding under it.
    assert!(
        texts.contains(&"Weighted N=1 (same as Strict N=1)"),
        "{texts:?}"
    );
    // The x axis runs to 10 s, the window after the request, where every line is back at 0.
    assert!(texts.contains(&"10"), "{texts:?}");
}

#[test]
fn skipping_every_line_says_which_lines_were_bad() {
    let dir = TempDir::new("allbad");
    let trace = dir.file("bad.csv", "timestamp,key\nx,a\n1,a,0\n");
    let out = replay(&dir.0, &trace, &["--skip-bad-lines"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "no requests to simulate: --skip-bad-lines skipped all 2 data lines, the first at \
             line 2: timestamp \"x\" is not a number"
        ),
        "{stderr}"
    );
}

#[test]
fn runs_too_large_for_memory_or_time_are_usage_errors() {
    let dir = TempDir::new("large");
    let trace = dir.file("one.csv", "1,a\n");
    let trace = trace.to_str().unwrap();
    let cases: [(&[&str], &[&str]); 9] = [
        (
            &["--rate", "1e300"],
            &[
                "about 5.77e305 requests",
                "lower --rate, --limit, --keys or --duration",
            ],
        ),
        (
            &[
                "--scenario",
                "boundary",
                "--limit",
                "50000000",
                "--keys",
                "1",
                "--window",
                "1s",
                "--duration",
                "2s",
            ],
            &[
                "about 1.00e8 requests",
                "lower --limit, --keys or --duration",
            ],
        ),
        (
            &["--scenario", "steady", "--limit", "50000000"],
            &["lower --rate, --keys or --duration (--rate defaults to 1.25 × L / W"],
        ),
        (
            &["--limit", "2147483647"],
            &["--limit 2147483647: ExactLog needs 17179869248 bytes (16.00 GiB) of state per key"],
        ),
        (
            &["--trace", trace, "--limit", "2147483647"],
            &["more than the 1073741824 (1 GiB) a run allows; lower --limit"],
        ),
        (
            &["--duration", "2305843010s"],
            &["--duration 2305843010s is too long: at most 2305843009.21369395 s"],
        ),
        (&["--on", "0s"], &["--on 0s: must be longer than zero"]),
        (
            &["--lifetime", "0s"],
            &["--lifetime 0s: must be longer than zero"],
        ),
        (
            &["--window", "100000000m"],
            &["\"100000000m\" is too long (at most 4611686018.427387903 s)"],
        ),
    ];
    for (args, wants) in cases {
        let args = [&["simulate"], args].concat();
        let out = slidegate(&dir.0, &args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        for want in wants {
            assert!(stderr.contains(want), "{args:?}: {stderr}");
        }
        assert!(!text(&out.stdout).contains("| algorithm"), "{args:?}");
    }
    // The largest duration is accepted (and generates nothing at this rate).
    let out = slidegate(
        &dir.0,
        &[
            "simulate",
            "--scenario",
            "steady",
            "--rate",
            "1e-12",
            "--keys",
            "1",
            "--duration",
            "2305843009.21369395s",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("no requests to simulate"));
}

/// `slidegate serve` is the service as a user types it: the same options as `slidegate-serve`,
/// the address line first on standard output, HTTP answered, and a bad rules file an error
/// naming its line.
#[test]
fn slidegate_serve_runs_the_service() {
    use std::io::{BufRead, BufReader, Read, Write};

    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../serve/examples/rules.toml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_slidegate"))
        .args(["serve", "--rules"])
        .arg(&rules)
        .args(["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let http = line
        .strip_prefix("slidegate serve: http=")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address line: {line:?}"))
        .to_owned();
    assert!(
        line.contains(" grpc=127.0.0.1:") && line.contains(" rules)"),
        "{line}"
    );
    let mut tcp = std::net::TcpStream::connect(&http).unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let dir = TempDir::new("serve-bad-rules");
    let bad = dir.file("rules.toml", "[rules.a]\nlimit = 0\nwindow = \"1m\"\n");
    let out = slidegate(
        &dir.0,
        &[
            "serve",
            "--rules",
            bad.to_str().unwrap(),
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: ") && stderr.contains("line 2"),
        "{stderr}"
    );
}
