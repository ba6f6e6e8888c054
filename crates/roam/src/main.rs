//! `roam`: the command line. A thin layer that reads configuration and wires the namespace
//! (`roam-vfs`) to a frontend (`roam-trap` for `roam run`, `roam-fuse` for `roam mount`).

mod attach;
mod config;
mod doctor;
mod find;
mod fuse_run;
mod mount;

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use roam_drivers::http::{HttpConfig, TlsOptions};
use roam_vfs::{Vfs, VfsConfig};

use config::Config;

// Lets the fuzz properties bound what one parse allocates (roam_testkit::fuzz::bounded).
#[cfg(test)]
#[global_allocator]
static ALLOC: roam_testkit::fuzz::CountingAlloc = roam_testkit::fuzz::CountingAlloc;

#[derive(Parser)]
#[command(
    name = "roam",
    version,
    about = "A user-level global file system for unmodified programs"
)]
struct Cli {
    /// More output on stderr (-v: info, -vv: debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run PROGRAM so that it sees remote files as local ones:
    /// /http/HOST[:PORT]/PATH, /https/..., URLs, and mounts.
    Run {
        /// Mount URL at LOCAL for this run (LOCAL=URL; http://, https://, file:// or a path).
        #[arg(short = 'm', long = "mount", value_name = "LOCAL=URL")]
        mounts: Vec<String>,
        /// No ptrace: serve the namespace through FUSE in a user and mount namespace.
        #[arg(long)]
        fuse: bool,
        /// The program and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        program: Vec<OsString>,
    },
    /// Take over the running process PID and its descendants (all threads, later
    /// children): from now on they see the namespace too.
    Attach {
        /// Mount URL at LOCAL (as for `run`).
        #[arg(short = 'm', long = "mount", value_name = "LOCAL=URL")]
        mounts: Vec<String>,
        /// Stay in the foreground until the process tree ends.
        #[arg(long)]
        foreground: bool,
        pid: i32,
    },
    /// Release a process taken over by `roam attach`: it keeps running and its open files
    /// stay valid; changes are uploaded first.
    Detach { pid: i32 },
    /// List the files under PATH that a query extension says match (`--ext id3 --where
    /// artist=Radiohead`); only the byte ranges the extension asks for are fetched.
    Find(find::FindArgs),
    /// Show pending uploads, what the cache holds and its counters.
    Status,
    /// Manage the cache: `stat` (same as status), `clean` (drop copies not being written).
    Cache {
        #[command(subcommand)]
        action: CacheAction,
    },
    /// Upload every change still in roam's journal (e.g. after roam was killed); exit
    /// status 75 if some stay pending. Changes kept from upload (their writer never
    /// closed them, or a write to roam's copy failed) wait for `--force` or `--discard`.
    Sync {
        /// Mounts, as for `run` (the journal names files by their mount point).
        #[arg(short = 'm', long = "mount", value_name = "LOCAL=URL")]
        mounts: Vec<String>,
        /// Upload this kept change as it is (repeatable).
        #[arg(long, value_name = "NAME")]
        force: Vec<String>,
        /// Drop this kept change; the server's version stays (repeatable).
        #[arg(long, value_name = "NAME")]
        discard: Vec<String>,
    },
    /// Mount the namespace (or one remote URL) on DIR through FUSE.
    Mount(mount::MountArgs),
    /// Unmount what `roam mount` mounted on DIR.
    Umount(mount::UmountArgs),
    /// Say which mechanisms (ptrace, seccomp, FUSE, user namespaces) this machine allows.
    Doctor,
}

#[derive(Subcommand)]
enum CacheAction {
    /// What the cache holds and has done.
    Stat,
    /// Drop every cached copy that holds no pending change.
    Clean,
}

fn main() {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    match dispatch(cli.command) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("roam: {e:#}");
            let code = match e.downcast_ref::<roam_trap::TrapError>() {
                Some(roam_trap::TrapError::NotFound(_)) => 127,
                _ => 126,
            };
            std::process::exit(code);
        }
    }
}

fn dispatch(command: Command) -> Result<i32> {
    match command {
        Command::Run {
            mounts,
            program,
            fuse: true,
        } => fuse_run::run(&mounts, &program),
        Command::Run {
            mounts, program, ..
        } => {
            roam_trap::block_tracer_signals()?;
            let vfs = Arc::new(open_vfs(&mounts, Use::Work)?);
            let code = roam_trap::run(vfs.clone(), &program)?;
            if let Err(e) = vfs.save_stats() {
                tracing::warn!("could not save cache counters: {e}");
            }
            let code = exit_status(code, &vfs);
            vfs.finish();
            Ok(code)
        }
        Command::Attach {
            mounts,
            foreground,
            pid,
        } => attach::attach(&mounts, pid, foreground),
        Command::Detach { pid } => attach::detach(pid),
        Command::Status
        | Command::Cache {
            action: CacheAction::Stat,
        } => {
            print_report(&open_vfs(&[], Use::Look)?.report());
            Ok(0)
        }
        Command::Cache {
            action: CacheAction::Clean,
        } => {
            let n = open_vfs(&[], Use::Look)?.clean()?;
            println!("dropped {n} cached copies");
            Ok(0)
        }
        Command::Sync {
            mounts,
            force,
            discard,
        } => {
            let vfs = open_vfs(&mounts, Use::Work)?;
            let code = sync(&vfs, &force, &discard);
            vfs.finish();
            code
        }
        Command::Mount(args) => mount::mount(args),
        Command::Umount(args) => mount::umount(args),
        Command::Doctor => doctor::doctor(),
        Command::Find(args) => find::run(&open_vfs(&[], Use::Look)?, &Config::load()?, args),
    }
}

fn print_report(r: &roam_vfs::CacheReport) {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!("cache:    {}", r.root.display());
    println!(
        "copies:   {} files, {:.1} MiB of {:.0} MiB",
        r.files,
        mib(r.bytes),
        mib(r.limit)
    );
    let s = &r.stats;
    println!("opens:    {} hits, {} misses", s.hits, s.misses);
    println!(
        "fetched:  {:.1} MiB; uploaded: {} files, {:.1} MiB; evicted: {}",
        mib(s.bytes_fetched),
        s.uploads,
        mib(s.bytes_uploaded),
        s.evictions
    );
    let kept = r.pending.iter().filter(|p| is_kept(p)).count();
    println!(
        "pending:  {} change(s) not yet uploaded{}",
        r.pending.len(),
        match (r.pending.is_empty(), kept) {
            (true, _) => String::new(),
            (false, 0) => " (run `roam sync`)".into(),
            (false, n) => format!(" ({n} kept: see below)"),
        }
    );
    for p in &r.pending {
        println!("  {}", describe_pending(p));
        if !p.leftovers.is_empty() {
            println!(
                "    an upload of it was cut off and may have left on the server: {} (its next upload or `roam sync` removes them)",
                p.leftovers.join(", ")
            );
        }
    }
}

fn is_kept(p: &roam_vfs::PendingChange) -> bool {
    matches!(p.state, roam_vfs::ChangeState::Kept { .. })
}

/// One line on a change not yet uploaded: its name, where it stands, whose it is.
fn describe_pending(p: &roam_vfs::PendingChange) -> String {
    let whose = match p.owner {
        Some(pid) => format!("roam pid {pid} is writing it"),
        None => "left by a roam that ended; `roam sync` delivers it".into(),
    };
    match &p.state {
        roam_vfs::ChangeState::Open => format!("{}  (being written; {whose})", p.virt),
        roam_vfs::ChangeState::Sealed => format!("{}  (due for upload; {whose})", p.virt),
        roam_vfs::ChangeState::Kept { why, .. } => format!(
            "{}  KEPT, not uploaded: {why}. The copy is {}; `roam sync --force {}` uploads it as it is, `roam sync --discard {}` drops it",
            p.virt,
            p.copy.display(),
            p.virt,
            p.virt
        ),
    }
}

/// `roam run`'s exit status: the program's, unless it succeeded and changes it made stayed
/// pending (an upload that failed after it ended, a change kept from upload): then
/// [`EXIT_PENDING`], so a script can tell.
pub(crate) fn exit_status(program: i32, vfs: &Vfs) -> i32 {
    let pending = vfs.dirty();
    if pending.is_empty() {
        return program;
    }
    eprintln!(
        "roam: {} change(s) not uploaded: {} (roam status; roam sync)",
        pending.len(),
        pending.join(", ")
    );
    if program == 0 {
        EXIT_PENDING
    } else {
        program
    }
}

/// The exit status of `roam run` and `roam sync` when changes stayed pending (sysexits'
/// EX_TEMPFAIL: try again later, with `roam sync`).
const EXIT_PENDING: i32 = 75;

/// Uploads each journaled change, after the user's word on kept ones; exit status
/// [`EXIT_PENDING`] if any is still pending.
fn sync(vfs: &Vfs, force: &[String], discard: &[String]) -> Result<i32> {
    for (names, upload) in [(force, true), (discard, false)] {
        for virt in names {
            if !vfs.dirty().contains(virt) {
                bail!("{virt}: no change of it is pending here (see `roam status`)");
            }
            vfs.settle_kept(virt, upload)?;
        }
    }
    let mut left = 0;
    for virt in vfs.dirty() {
        match vfs.flush(&virt, &|| false) {
            Ok(roam_vfs::Flushed::Conflict(beside)) => {
                eprintln!("roam: {virt} changed on the server meanwhile: this version was saved as {beside}")
            }
            Ok(_) => eprintln!("roam: uploaded {virt}"),
            Err(e) => {
                left += 1;
                eprintln!(
                    "roam: {e}{}",
                    if e.is_kept() { "" } else { " (still pending)" }
                );
            }
        }
    }
    let others = roam_vfs::pending_changes(vfs.cache_root())
        .into_iter()
        .filter(|p| p.owner.is_some_and(|pid| pid != std::process::id()))
        .count();
    if others > 0 {
        eprintln!("roam: {others} change(s) belong to roam processes still running (roam status)");
    }
    Ok(if left > 0 { EXIT_PENDING } else { 0 })
}

/// What a command opens the namespace for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Use {
    /// To run programs or deliver changes: it adopts the changes of roam processes that died.
    Work,
    /// To look or clean up: it leaves them for a command that delivers them.
    Look,
}

/// Builds the namespace from `roam.toml` plus `-m` flags (flags win on the same mount point).
fn open_vfs(flags: &[String], usage: Use) -> Result<Vfs> {
    let cfg = Config::load()?;
    let mut mounts = cfg.mounts.clone();
    for m in flags {
        let Some((local, url)) = m.split_once('=') else {
            bail!("-m {m}: expected LOCAL=URL")
        };
        mounts.insert(local.to_owned(), url.to_owned());
    }
    let defaults = HttpConfig::default();
    let secs = |v: Option<u64>, d: Duration| v.map(Duration::from_secs).unwrap_or(d);
    let vcfg = VfsConfig {
        cache_dir: cfg.cache_dir(),
        consistency: cfg.consistency()?,
        mounts: mounts.into_iter().collect(),
        max_cache_bytes: cfg.max_cache_bytes(),
        tls: cfg
            .tls
            .iter()
            .map(|(host, t)| {
                (
                    host.clone(),
                    TlsOptions {
                        ca_file: t.ca_file.clone(),
                        insecure: t.insecure,
                    },
                )
            })
            .collect(),
        extensions: Some(cfg.extensions_dir()),
        adopt_orphans: usage == Use::Work,
        t_write: cfg.t_write(),
        http: HttpConfig {
            connect_timeout: secs(cfg.http.connect_timeout, defaults.connect_timeout),
            read_timeout: secs(cfg.http.read_timeout, defaults.read_timeout),
            ..defaults
        },
    };
    let mut vfs = Vfs::new(&vcfg)
        .with_context(|| format!("opening the cache at {}", vcfg.cache_dir.display()))?;
    if let Some(policy) = cfg.eviction_policy()? {
        vfs.set_eviction_policy(policy);
    }
    if let Some(resolvers) = cfg.resolvers()? {
        vfs.set_resolver(Box::new(resolvers));
    }
    if let Some(load) = cfg.archive_extension()? {
        vfs.set_archive_extension(load);
    }
    Ok(vfs)
}

fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    // Colours only for a person at a terminal, never into a log file or a test's pipe.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(ansi)
        .init();
}
