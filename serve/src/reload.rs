//! Reloading the rules file when it changes (the `notify` crate, watching its directory so
//! an editor's or a deployment's write-then-rename is seen) or on SIGHUP.
//!
//! A file that fails to read, parse or validate is logged with its line and field, counted,
//! and shown by `GET /v1/rules`; the rules in force keep deciding. A deleted file keeps the
//! rules too, until a file appears again. A file whose bytes did not change is not reloaded.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::Notify;

use super::engine::Engine;
use super::metrics;
use super::rules;

/// Changes closer together than this are read once: a file written in several steps is
/// read after the last.
const SETTLE: Duration = Duration::from_millis(50);

pub(crate) struct Reloader {
    path: PathBuf,
    engine: Arc<Engine>,
    state: Mutex<State>,
    changed: Notify,
}

struct State {
    /// The bytes of the file last put in force, to skip rewrites of the same content.
    loaded: Vec<u8>,
    last_error: Option<String>,
}

impl Reloader {
    pub(crate) fn new(path: PathBuf, engine: Arc<Engine>, loaded: Vec<u8>) -> Reloader {
        Reloader {
            path,
            engine,
            state: Mutex::new(State {
                loaded,
                last_error: None,
            }),
            changed: Notify::new(),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Why the file on disk is not the one in force, if it is not.
    pub(crate) fn last_error(&self) -> Option<String> {
        self.lock().last_error.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks for a reload (a file event, SIGHUP).
    pub(crate) fn poke(&self) {
        self.changed.notify_one();
    }

    /// Watches the file's directory; events for the file poke the reloader. The watcher
    /// stops when the returned value is dropped.
    pub(crate) fn watch(self: &Arc<Self>) -> Result<RecommendedWatcher, String> {
        let dir = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = self.path.file_name().map(|n| n.to_owned());
        let me = Arc::clone(self);
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                match event {
                    Ok(e) if e.paths.iter().any(|p| p.file_name() == name.as_deref()) => me.poke(),
                    Ok(_) => {}
                    // A lost event (an overflowing queue) may have been ours: look.
                    Err(_) => me.poke(),
                }
            })
            .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
        Ok(watcher)
    }

    /// Reloads on every poke, until the task is dropped.
    pub(crate) async fn run(self: Arc<Self>) {
        loop {
            self.changed.notified().await;
            tokio::time::sleep(SETTLE).await;
            self.reload().await;
        }
    }

    /// Reads the file and, if it changed and is good, puts it in force.
    pub(crate) async fn reload(&self) {
        let bytes = match tokio::task::spawn_blocking({
            let path = self.path.clone();
            move || std::fs::read(path)
        })
        .await
        {
            Ok(Ok(b)) => b,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::warn!(path = %self.path.display(), "rules file deleted; the rules in force stay");
                self.lock().last_error =
                    Some("the rules file is deleted; the rules in force stay".into());
                return;
            }
            Ok(Err(e)) => return self.failed(format!("cannot read the rules file: {e}")),
            Err(e) => return self.failed(format!("cannot read the rules file: {e}")),
        };
        if bytes == self.lock().loaded {
            // Unchanged (a touch, a rewrite of the same rules, a file restored after a delete).
            self.lock().last_error = None;
            return;
        }
        let spec = match std::str::from_utf8(&bytes) {
            Ok(text) => rules::load(&self.path, text).map_err(|e| e.to_string()),
            Err(e) => Err(format!("not UTF-8: {e}")),
        };
        match spec.and_then(|spec| self.engine.reload(spec)) {
            Ok(generation) => {
                let n = self.engine.rules().rules.len();
                tracing::info!(path = %self.path.display(), generation, rules = n, "rules reloaded");
                metrics::reload(true, generation);
                let mut state = self.lock();
                state.loaded = bytes;
                state.last_error = None;
            }
            Err(e) => self.failed(e),
        }
    }

    fn failed(&self, message: String) {
        tracing::error!(path = %self.path.display(), error = %message, "rules file rejected; the rules in force stay");
        metrics::reload(false, self.engine.generation());
        self.lock().last_error = Some(message);
    }
}
