//! `roam status`: what roam does on this machine — each running roam process (`run`,
//! `mount`) with its transfers in flight, their rates, and its counters per remote (from
//! the state files of [`crate::live`]), the FUSE mounts of roam, every change not yet
//! uploaded and why it waits, and what the cache holds with its lifetime counters.
//! `--json` prints the same as one JSON object (its keys: README, "roam status --json").

use roam_vfs::secrets::scrub;
use roam_vfs::{CacheReport, ChangeState, PendingChange, Stats};
use serde::Serialize;

use crate::live::{self, Process};

/// Everything `roam status` tells, as `--json` prints it.
#[derive(Serialize)]
struct Status {
    cache: Cache,
    counters: Stats,
    processes: Vec<Process>,
    mounts: Vec<Mount>,
    pending: Vec<Pending>,
}

#[derive(Serialize)]
struct Cache {
    dir: String,
    files: u64,
    bytes: u64,
    limit: u64,
}

/// A FUSE mount of roam on this machine.
#[derive(Serialize)]
struct Mount {
    dir: String,
    /// `roam:SCHEME` (`roam:` for the whole namespace).
    source: String,
    /// The roam process serving it, if it runs on this cache.
    pid: Option<u32>,
}

/// A change not uploaded yet.
#[derive(Serialize)]
struct Pending {
    name: String,
    /// `open` (being written), `due` (waiting for its upload), `kept` (waits for `roam
    /// sync --force` or `--discard`).
    state: &'static str,
    /// Why it waits, in words.
    reason: String,
    /// The roam process writing or delivering it (none: it ended; `roam sync` delivers).
    owner: Option<u32>,
    /// The local copy holding the change.
    copy: String,
    /// What a cut-off upload of it may have left on the server.
    leftovers: Vec<String>,
}

/// Prints the status of the cache `report` came from, as text or JSON.
pub fn print(report: &CacheReport, json: bool) -> anyhow::Result<()> {
    let processes = live::read_all(&report.root);
    let status = Status {
        cache: Cache {
            dir: report.root.display().to_string(),
            files: report.files,
            bytes: report.bytes,
            limit: report.limit,
        },
        counters: report.stats.clone(),
        mounts: roam_mounts(&processes),
        pending: report.pending.iter().map(pending).collect(),
        processes,
    };
    if json {
        println!("{}", scrub(&serde_json::to_string_pretty(&status)?));
    } else {
        print_text(&status);
    }
    Ok(())
}

fn print_text(s: &Status) {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!("cache:    {}", s.cache.dir);
    println!(
        "copies:   {} files, {:.1} MiB of {:.0} MiB",
        s.cache.files,
        mib(s.cache.bytes),
        mib(s.cache.limit)
    );
    let c = &s.counters;
    println!("opens:    {} hits, {} misses", c.hits, c.misses);
    println!(
        "fetched:  {:.1} MiB; uploaded: {} files, {:.1} MiB; evicted: {}",
        mib(c.bytes_fetched),
        c.uploads,
        mib(c.bytes_uploaded),
        c.evictions
    );
    for p in &s.processes {
        print_process(p);
    }
    for m in &s.mounts {
        let by = m
            .pid
            .map_or(String::new(), |pid| format!(" (roam pid {pid})"));
        println!("mount:    {} on {}{by}", m.source, m.dir);
    }
    let kept = s.pending.iter().filter(|p| p.state == "kept").count();
    println!(
        "pending:  {} change(s) not yet uploaded{}",
        s.pending.len(),
        match (s.pending.is_empty(), kept) {
            (true, _) => String::new(),
            (false, 0) => " (run `roam sync`)".into(),
            (false, n) => format!(" ({n} kept: see below)"),
        }
    );
    for p in &s.pending {
        println!("  {}", scrub(&format!("{}  {}", p.name, p.reason)));
        if !p.leftovers.is_empty() {
            println!(
                "    an upload of it was cut off and may have left on the server: {} (its next upload or `roam sync` removes them)",
                scrub(&p.leftovers.join(", "))
            );
        }
    }
}

fn print_process(p: &Process) {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!("roam pid {}: {} {}", p.pid, p.command, p.what);
    for f in &p.transfers {
        let t = &f.transfer;
        let total = t
            .total
            .map_or(String::new(), |n| format!(" of {:.1}", mib(n)));
        println!(
            "  {} {}: {:.1}{total} MiB, {:.1} MiB/s, {:.0} s",
            crate::progress::verb(t.direction),
            t.name,
            mib(t.bytes),
            mib(f.rate),
            t.seconds
        );
    }
    for r in &p.remotes {
        println!(
            "  {}: {} requests, {:.1} MiB in, {:.1} MiB out, {} errors, {} retries",
            r.remote,
            r.requests,
            mib(r.bytes_fetched),
            mib(r.bytes_uploaded),
            r.errors,
            r.retries
        );
    }
}

/// A change as `roam status` tells it: where it stands and why it waits.
fn pending(p: &PendingChange) -> Pending {
    let whose = match p.owner {
        Some(pid) => format!("roam pid {pid} is writing it"),
        None => "left by a roam that ended; `roam sync` delivers it".into(),
    };
    let failed = p
        .failure
        .as_ref()
        .map_or(String::new(), |f| format!("; its last upload failed: {f}"));
    let (state, reason) = match &p.state {
        ChangeState::Open => ("open", format!("(being written; {whose}{failed})")),
        ChangeState::Sealed => ("due", format!("(due for upload; {whose}{failed})")),
        ChangeState::Kept { why, .. } => (
            "kept",
            format!(
                "KEPT, not uploaded: {why}. The copy is {}; `roam sync --force {}` uploads it as it is, `roam sync --discard {}` drops it",
                p.copy.display(),
                p.virt,
                p.virt
            ),
        ),
    };
    Pending {
        name: p.virt.clone(),
        state,
        reason,
        owner: p.owner,
        copy: p.copy.display().to_string(),
        leftovers: p.leftovers.clone(),
    }
}

/// roam's FUSE mounts (source `roam:SCHEME`) in this mount namespace, with the process of
/// this cache that serves each.
fn roam_mounts(processes: &[Process]) -> Vec<Mount> {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    table
        .lines()
        .filter_map(|line| {
            let (ours, theirs) = line.split_once(" - ")?;
            let mut t = theirs.split(' ');
            let (fstype, source) = (t.next()?, t.next()?);
            // `fuse.roam` where the subtype is kept, else `fuse` with the source `roam:...`.
            if !fstype.starts_with("fuse") || source.split(':').next() != Some("roam") {
                return None;
            }
            let dir = crate::mount::unescape_octal(ours.split(' ').nth(4)?);
            let dir = dir.display().to_string();
            let pid = processes
                .iter()
                .find(|p| p.command == "mount" && p.what == dir)
                .map(|p| p.pid);
            Some(Mount {
                dir,
                source: source.to_owned(),
                pid,
            })
        })
        .collect()
}
