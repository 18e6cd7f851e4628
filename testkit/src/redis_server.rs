//! Real `redis-server` processes for the Redis tests: single servers and Clusters, each on
//! free loopback ports in a temporary directory, stopped (and the directory removed) on drop.
//!
//! Written for the library's 1.85 MSRV (no let chains).

use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Whether a test has already said how to install `redis-server`: the first one that finds it
/// missing says so, every later one only that it is missing, so a run without it ends in one
/// instruction rather than one per test.
static MISSING_TOLD: AtomicBool = AtomicBool::new(false);

/// Fails the calling test because `redis-server` is not on `PATH`, with one line and no panic
/// message or backtrace note (the panic hook is not run).
fn redis_server_missing() -> ! {
    if MISSING_TOLD.swap(true, Ordering::Relaxed) {
        eprintln!("redis-server is missing");
    } else {
        eprintln!(
            "redis-server not found: run bash .ci/setup (installs redis-server and faketime)"
        );
    }
    std::panic::resume_unwind(Box::new("redis-server is missing"))
}

/// The runtime the Redis tests run their clients on: two workers, as the machine has.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A port no one listens on now (the kernel's choice, released at once).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "slidegate-redis-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// One `redis-server`.
pub struct Server {
    /// The loopback port it listens on.
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
    args: Vec<String>,
}

impl Server {
    /// A plain server.
    pub fn start() -> Server {
        Server::with_args(&[])
    }

    /// A server with extra `redis-server` arguments (`["--requirepass", "pw"]`).
    pub fn with_args(extra: &[&str]) -> Server {
        let port = free_port();
        let dir = temp_dir();
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            dir.to_str().unwrap(),
            "--logfile",
            "server.log",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut s = Server {
            port,
            dir,
            child: None,
            args,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let child = match Command::new("redis-server")
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(e) if e.kind() == ErrorKind::NotFound => redis_server_missing(),
            Err(e) => panic!("cannot start redis-server: {e}"),
        };
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(out) = self.cli(&["PING"]) {
                if out.contains("PONG") || out.contains("NOAUTH") {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not start", self.port);
    }

    /// Its `redis://` URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli` against this server (with its password, if any).
    pub fn cli(&self, args: &[&str]) -> std::io::Result<String> {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-h", "127.0.0.1", "-p", &self.port.to_string()]);
        if let Some(i) = self.args.iter().position(|a| a == "--requirepass") {
            cmd.args(["--no-auth-warning", "-a", &self.args[i + 1]]);
        }
        let out = cmd.args(args).stdin(Stdio::null()).output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    fn signal(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
        }
    }

    /// SIGSTOP: the server stops answering, its connections stay open.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// SIGKILL, and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            self.signal("-CONT");
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port (empty: no persistence).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Whether its database holds no key.
    pub fn dbsize(&self) -> u64 {
        self.cli(&["DBSIZE"])
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(u64::MAX)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of `masters` masters with `replicas` replicas each.
pub struct Cluster {
    /// Every node, masters and replicas, in the order `redis-cli --cluster create` got them.
    pub nodes: Vec<Server>,
}

impl Cluster {
    /// Starts the nodes, creates the cluster and waits until it is ok and replicas have synced.
    pub fn start(masters: usize, replicas: usize) -> Cluster {
        let nodes: Vec<Server> = (0..masters * (1 + replicas))
            .map(|_| {
                Server::with_args(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "1000",
                    // A replica may fail over however long ago it last heard its master.
                    "--cluster-replica-validity-factor",
                    "0",
                ])
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let status = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli runs");
        assert!(status.success(), "redis-cli --cluster create failed");
        let c = Cluster { nodes };
        c.wait_ok(Duration::from_secs(20));
        // Replicas have synced with their masters, so a failover has data to take over.
        let start = Instant::now();
        while !c.nodes.iter().all(|n| {
            n.cli(&["INFO", "replication"])
                .is_ok_and(|s| s.contains("role:master") || s.contains("master_link_status:up"))
        }) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "replicas did not sync"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        c
    }

    /// Waits until every running node reports `cluster_state:ok`.
    pub fn wait_ok(&self, within: Duration) {
        let start = Instant::now();
        while start.elapsed() < within {
            if self.nodes.iter().filter(|n| n.child.is_some()).all(|n| {
                n.cli(&["CLUSTER", "INFO"])
                    .is_ok_and(|s| s.contains("cluster_state:ok"))
            }) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the cluster did not reach cluster_state:ok");
    }

    /// Every node's URL.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    /// A node that is running.
    pub fn live(&self) -> &Server {
        self.nodes
            .iter()
            .find(|n| n.child.is_some())
            .expect("a running node")
    }

    /// The node that is master for the slot of `key`.
    pub fn master_of(&self, key: &str) -> usize {
        let slot: u16 = self
            .live()
            .cli(&["CLUSTER", "KEYSLOT", key])
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        self.master_of_slot(slot)
    }

    /// The node that is master for `slot`, waiting up to 10 s for one to claim it.
    pub fn master_of_slot(&self, slot: u16) -> usize {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            for (i, n) in self.nodes.iter().enumerate() {
                if n.child.is_none() {
                    continue;
                }
                let Ok(out) = n.cli(&["CLUSTER", "NODES"]) else {
                    continue;
                };
                for line in out.lines() {
                    let f: Vec<&str> = line.split_whitespace().collect();
                    if f.len() < 9 || !f[2].contains("myself") || !f[2].contains("master") {
                        continue;
                    }
                    for range in &f[8..] {
                        let (lo, hi) = match range.split_once('-') {
                            Some((a, b)) => (a.parse().unwrap_or(1), b.parse().unwrap_or(0)),
                            None => (range.parse().unwrap_or(1), range.parse().unwrap_or(0)),
                        };
                        if lo <= slot && slot <= hi {
                            return i;
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no master for slot {slot}");
    }

    /// The node id of node `i`.
    pub fn id(&self, i: usize) -> String {
        self.nodes[i]
            .cli(&["CLUSTER", "MYID"])
            .unwrap()
            .trim()
            .to_owned()
    }

    /// Flushes every running master.
    pub fn flushall(&self) {
        for n in self.nodes.iter().filter(|n| n.child.is_some()) {
            let _ = n.cli(&["FLUSHALL"]);
        }
    }
}
