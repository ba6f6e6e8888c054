//! What a running roam process (`run`, `mount`) is doing, for `roam status` in another
//! terminal: a small JSON file `CACHE/live/PID.json` (its transfers in flight with their
//! rates, its counters per remote, the mount it serves), rewritten at most every half
//! second while the process runs and removed when it ends. A file whose process is gone
//! (roam was killed) is ignored, and removed, by [`read_all`]. The same thread draws the
//! progress line on a terminal ([`crate::progress`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use roam_vfs::{RemoteStats, Transfer, Vfs};
use serde::{Deserialize, Serialize};

use crate::progress::Progress;

/// How often the state file is rewritten at most.
const PUBLISH_EVERY: Duration = Duration::from_millis(500);
/// How often the progress line is redrawn.
const TICK: Duration = Duration::from_millis(100);

/// One roam process, as its state file says.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Process {
    pub pid: u32,
    /// `run` or `mount`.
    pub command: String,
    /// The program it runs, or the directory it mounts on.
    pub what: String,
    /// When it started (seconds since the epoch).
    pub started: u64,
    pub transfers: Vec<Flow>,
    pub remotes: Vec<RemoteStats>,
}

/// A transfer in flight with its average rate.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Flow {
    #[serde(flatten)]
    pub transfer: Transfer,
    /// Bytes per second since it started.
    pub rate: u64,
}

impl Flow {
    fn of(transfer: Transfer) -> Flow {
        let rate = match transfer.seconds > 0.0 {
            true => (transfer.bytes as f64 / transfer.seconds) as u64,
            false => 0,
        };
        Flow { transfer, rate }
    }
}

/// The publisher of this process's state; [`Live::stop`] removes its file.
pub struct Live {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    file: PathBuf,
}

/// Starts publishing what `vfs` does, as `command` of `what` (and drawing progress on a
/// terminal unless `roam -q`). Call from a thread whose signal mask the publisher may
/// inherit (signals roam waits for must be blocked already).
pub fn start(vfs: Arc<Vfs>, command: &str, what: String) -> Live {
    let file = dir(vfs.cache_root()).join(format!("{}.json", std::process::id()));
    let me = Process {
        pid: std::process::id(),
        command: command.to_owned(),
        what: roam_vfs::secrets::scrub(&what).into_owned(),
        started: secs(SystemTime::now()),
        transfers: Vec::new(),
        remotes: Vec::new(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let (stop, file) = (stop.clone(), file.clone());
        std::thread::Builder::new()
            .name("roam-live".into())
            .spawn(move || watch(&vfs, me, &file, &stop))
            .map_err(|e| tracing::warn!("roam status will not see this process: {e}"))
            .ok()
    };
    Live { stop, thread, file }
}

impl Live {
    /// Stops publishing, clears the progress line and removes the state file.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.file);
    }
}

fn watch(vfs: &Vfs, mut me: Process, file: &Path, stop: &AtomicBool) {
    let mut progress = Progress::on_stderr();
    let mut published: Option<Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        let transfers = vfs.transfers();
        if let Some(p) = progress.as_mut() {
            p.show(&transfers);
        }
        if published.is_none_or(|t| t.elapsed() >= PUBLISH_EVERY) {
            me.transfers = transfers.into_iter().map(Flow::of).collect();
            me.remotes = vfs.remote_stats();
            if let Err(e) = publish(file, &me) {
                tracing::debug!("{}: {e}", file.display());
            }
            published = Some(Instant::now());
        }
        std::thread::sleep(TICK);
    }
    if let Some(p) = progress.as_mut() {
        p.clear();
    }
}

/// Writes the state file whole (a reader never sees half of one).
fn publish(file: &Path, me: &Process) -> std::io::Result<()> {
    std::fs::create_dir_all(file.parent().expect("in live/"))?;
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(me).expect("serialises"))?;
    std::fs::rename(&tmp, file)
}

/// The state of every roam process running on the cache at `cache_root`; files of
/// processes that are gone are removed.
pub fn read_all(cache_root: &Path) -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir(dir(cache_root)) else {
        return Vec::new();
    };
    let mut out: Vec<Process> = Vec::new();
    for path in entries.flatten().map(|e| e.path()) {
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let Some(p) = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Process>(&b).ok())
        else {
            continue;
        };
        if alive(p.pid) {
            out.push(p);
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
    out.sort_by_key(|p| p.pid);
    out
}

fn dir(cache_root: &Path) -> PathBuf {
    cache_root.join("live")
}

/// Whether process `pid` is still a running roam (not a zombie, nor another program
/// that got the pid of a roam that was killed).
fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `PID (COMMAND) STATE ...`
    let Some((head, rest)) = stat.rsplit_once(") ") else {
        return false;
    };
    let command = head.split_once(" (").map_or("", |(_, c)| c);
    command.starts_with("roam") && !rest.starts_with('Z') && !rest.starts_with('X')
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
