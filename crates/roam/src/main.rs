//! `roam`: the command line. A thin layer that reads configuration and wires the namespace
//! (`roam-vfs`) to a frontend (`roam-trap` for `roam run`, `roam-fuse` for `roam mount`).

mod argv;
mod attach;
mod config;
mod control;
mod doctor;
mod find;
mod fuse_run;
mod live;
mod manual;
mod mount;
mod progress;
mod snapshot;
mod status;

use std::ffi::OsString;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, Parser, Subcommand};
use roam_drivers::http::{HttpConfig, TlsOptions};
use roam_drivers::secrets::scrub;
use roam_vfs::{Vfs, VfsConfig};

use config::Config;

// Lets the fuzz properties bound what one parse allocates (roam_testkit::fuzz::bounded).
#[cfg(test)]
#[global_allocator]
static ALLOC: roam_testkit::fuzz::CountingAlloc = roam_testkit::fuzz::CountingAlloc;

/// The exit statuses, for `roam --help` (README's "Exit status" says the same).
const EXIT_CODES: &str = "\
Exit status:
  0    success (run: the program's own status passes through)
  1    mount refused (DIR not empty or a mount point, a remote named on the command
       line cannot be used), umount failed; find: nothing matched
       suspend, resume, snapshot: the mount could not be suspended in time (changes
       under way did not end, uploads could not be delivered) or was not suspended
  2    usage error; find: an error while searching
  75   changes stayed pending: not uploaded yet (run, sync, mount; see `roam status`)
  126  roam could not start or serve (the reason is on stderr)
  127  run: the program was not found";

/// Where names lead and what roam reads, for `roam run --help`.
const RUN_HELP: &str = "\
Names a program can use:
  /http/HOST[:PORT]/PATH, /https/...     a web server (directory listings as directories)
  /dav/HOST[:PORT]/PATH, /davs/...       WebDAV
  /ftp/[USER@]HOST[:PORT]/PATH           FTP (netrc for logins)
  /ftps/[USER@]HOST[:PORT]/PATH          FTP over explicit TLS
  /sftp/[USER@]HOST[:PORT]/PATH          SFTP (~/.ssh/config, agent, keys, known_hosts)
  /s3/BUCKET/KEY                         S3 (AWS_* variables, ~/.aws)
  /chirp/HOST[:PORT]/PATH                Chirp
  http://HOST/PATH, sftp://..., s3://... URLs, as paths
  ARCHIVE.zip#/MEMBER, ARCHIVE.tar#/...  archive members (with the `archive` extension)
  LOCAL/...                              a mount of -m or roam.toml [mounts]

Configuration: $ROAM_CONFIG, else $XDG_CONFIG_HOME/roam/roam.toml, else
~/.config/roam/roam.toml (`roam config` shows what is in effect).

Environment: ROAM_CONFIG, ROAM_CACHE_DIR, ROAM_EXT_DIR, ROAM_SEAL_KEY_FILE (seal:
layers), ROAM_NOTIFY (0/1: seccomp notifications), ROAM_FASTPATH (0: no preloaded
library), ROAM_AFAR (0: stats of roam names taking the thread over), ROAM_FUSE_URING (1:
FUSE over io_uring where the kernel allows), RUST_LOG, XDG_CONFIG_HOME, XDG_CACHE_HOME,
HOME; TLS: SSL_CERT_FILE, SSL_CERT_DIR; HTTP, WebDAV, FTP: NETRC; S3: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE, AWS_REGION, AWS_DEFAULT_REGION,
AWS_ENDPOINT_URL, AWS_CA_BUNDLE, AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE,
AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN, AWS_EC2_METADATA_SERVICE_ENDPOINT,
AWS_EC2_METADATA_DISABLED; SFTP: SSH_AUTH_SOCK (docs/CONNECTING.md lists every file
read).";

#[derive(Parser)]
#[command(
    name = "roam",
    version,
    about = "A user-level global file system for unmodified programs",
    after_help = EXIT_CODES
)]
struct Cli {
    /// More output on stderr (-v: what failed and why, -vv: roam's decisions: opens,
    /// cache hits, revalidations, uploads, retries); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true, display_order = 100)]
    verbose: u8,
    /// No progress line on a terminal.
    #[arg(short, long, global = true, display_order = 100)]
    quiet: bool,
    #[command(flatten)]
    settings: config::Flags,
    #[command(subcommand)]
    command: Command,
}

/// `-m`'s help: every kind of mount URL there is.
pub(crate) const MOUNT_HELP: &str =
    "Mount URL at LOCAL (repeatable). URL: http://, https://, dav://, davs://, \
ftp://, ftps://, sftp://, chirp://, s3://BUCKET[/PREFIX], file:///PATH or /PATH, \
file+cache:///PATH, mem:, null:URL, rot13:URL, zlib:URL, seal:URL, ext:NAME:URL, \
codec:NAME:URL, src:NAME:URL, query:NAME:FIELD=VALUE,...@URL, or NAME:PATH of a [remote.NAME]";

#[derive(Subcommand)]
enum Command {
    /// Run PROGRAM so that it sees remote files as local ones:
    /// /http/HOST[:PORT]/PATH, /sftp/..., /s3/..., URLs, and mounts.
    #[command(after_help = RUN_HELP)]
    Run {
        #[arg(short = 'm', long = "mount", value_name = "LOCAL=URL", help = MOUNT_HELP)]
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
        #[arg(short = 'm', long = "mount", value_name = "LOCAL=URL", help = MOUNT_HELP)]
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
    /// Show what roam does on this machine: transfers in flight, counters per remote,
    /// mounts, changes not yet uploaded and why they wait, what the cache holds.
    Status {
        /// One JSON object (keys: README, "roam status --json").
        #[arg(long)]
        json: bool,
    },
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
        #[arg(short = 'm', long = "mount", value_name = "LOCAL=URL", help = MOUNT_HELP)]
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
    /// Suspend a `roam mount`: changes wait (programs block, never fail) until `roam
    /// resume`; reads go on. Pending uploads are delivered first.
    Suspend(snapshot::SuspendArgs),
    /// Let the changes waiting on a suspended `roam mount` go on.
    Resume(snapshot::ResumeArgs),
    /// Copy a tree of a `roam mount` to a local directory as it stands at one instant:
    /// the mount is suspended (uploads delivered) while it is copied, then resumed.
    Snapshot(snapshot::SnapshotArgs),
    /// Say which mechanisms (ptrace, seccomp, FUSE, user namespaces) this machine allows;
    /// with a URL (or a remote's NAME:PATH), what roam would read to reach it (config,
    /// netrc entry, AWS profile, ssh keys and known hosts; never a secret) and whether the
    /// server answers.
    Doctor {
        /// A mount URL or NAME:PATH.
        url: Option<String>,
    },
    /// Print the effective configuration and where each value came from; `roam config
    /// example` prints an annotated roam.toml.
    Config {
        #[command(subcommand)]
        action: Option<ConfigAction>,
    },
    /// Print a completion script for SHELL (`roam completions bash > /etc/bash_completion.d/roam`).
    #[command(hide = true)]
    Completions { shell: clap_complete::Shell },
    /// Write man pages (roam.1, roam-run.1, ...) into DIR, or print roam.1 on stdout.
    #[command(hide = true)]
    Man { dir: Option<std::path::PathBuf> },
}

#[derive(Subcommand)]
enum ConfigAction {
    /// The effective configuration (the default).
    Show,
    /// An annotated roam.toml with every section, to start from.
    Example,
}

#[derive(Subcommand)]
enum CacheAction {
    /// What the cache holds and has done.
    Stat,
    /// Drop every cached copy that holds no pending change.
    Clean,
}

fn main() {
    let cli = Cli::parse_from(argv::original());
    init_logging(cli.verbose);
    progress::set_quiet(cli.quiet);
    argv::hide_passwords();
    config::set_flags(cli.settings);
    match dispatch(cli.command) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("roam: {}", scrub(&format!("{e:#}")));
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
            let what = program[0].to_string_lossy().into_owned();
            let live = live::start(vfs.clone(), "run", what);
            // `roam suspend|resume|snapshot --pid`: roam names, no mount directory. A run
            // without it still runs.
            let control = control::listen(vfs.clone(), None, "/")
                .map_err(|e| tracing::warn!("no control socket (roam suspend --pid): {e:#}"))
                .ok();
            let code = roam_trap::run(vfs.clone(), &program);
            drop(control);
            live.stop();
            let code = code?;
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
        Command::Status { json } => {
            status::print(&open_vfs(&[], Use::Look)?.report(), json)?;
            Ok(0)
        }
        Command::Cache {
            action: CacheAction::Stat,
        } => {
            status::print(&open_vfs(&[], Use::Look)?.report(), false)?;
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
        Command::Suspend(args) => snapshot::suspend(args),
        Command::Resume(args) => snapshot::resume(args),
        Command::Snapshot(args) => snapshot::snapshot(args),
        Command::Doctor { url: None } => doctor::doctor(),
        Command::Doctor { url: Some(url) } => doctor::doctor_url(&url),
        Command::Find(args) => {
            // A live search ends on a signal, taken by sigtimedwait: blocked before any
            // thread exists.
            let signals = args.watching().then(mount::block_signals);
            let vfs = open_vfs(&[], Use::Look)?;
            find::run(&vfs, &Config::load()?, args, signals.as_ref())
        }
        Command::Config { action } => {
            match action.unwrap_or(ConfigAction::Show) {
                ConfigAction::Show => print!("{}", config::show::effective(&Config::load()?)?),
                ConfigAction::Example => print!("{}", config::EXAMPLE),
            }
            Ok(0)
        }
        Command::Completions { shell } => manual::completions(shell, Cli::command()),
        Command::Man { dir } => manual::man(Cli::command(), dir.as_deref()),
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
        scrub(&pending.join(", "))
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
                bail!(
                    "{}: no change of it is pending here (see `roam status`)",
                    scrub(virt)
                );
            }
            vfs.settle_kept(virt, upload)?;
        }
    }
    let mut left = 0;
    for virt in vfs.dirty() {
        match vfs.flush(&virt, &|| false) {
            Ok(roam_vfs::Flushed::Conflict(beside)) => {
                let line = format!(
                    "{virt} changed on the server meanwhile: this version was saved as {beside}"
                );
                eprintln!("roam: {}", scrub(&line));
            }
            Ok(_) => eprintln!("roam: uploaded {}", scrub(&virt)),
            Err(e) => {
                left += 1;
                let pending = if e.is_kept() { "" } else { " (still pending)" };
                eprintln!("roam: {}{pending}", scrub(&e.to_string()));
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
            bail!("-m {}: expected LOCAL=URL", scrub(m))
        };
        mounts.insert(local.to_owned(), url.to_owned());
    }
    for (local, target) in mounts.iter_mut() {
        *target = cfg
            .mount_url(target)
            .with_context(|| format!("the mount {local}"))?;
    }
    let [connect_timeout, read_timeout] = cfg.http_timeouts();
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
            connect_timeout: connect_timeout.value,
            read_timeout: read_timeout.value,
            ..HttpConfig::default()
        },
    };
    let mut vfs = Vfs::new(&vcfg)
        .with_context(|| format!("opening the cache at {}", vcfg.cache_dir.display()))?;
    if let Some(policy) = cfg.eviction_policy()? {
        vfs.set_eviction_policy(policy);
    }
    if let Some(policy) = cfg.readahead_policy()? {
        vfs.set_readahead_policy(policy);
    }
    if let Some(resolvers) = cfg.resolvers()? {
        vfs.set_resolver(Box::new(resolvers));
    }
    if let Some(load) = cfg.archive_extension()? {
        vfs.set_archive_extension(load);
    }
    if let Some(load) = cfg.digest_extension()? {
        vfs.set_digest_extension(load);
    }
    if let Some((load, args)) = cfg.access_policy()? {
        vfs.set_access_policy(load, args);
    }
    Ok(vfs)
}

fn init_logging(verbose: u8) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(log_filter(verbose)));
    // Colours only for a person at a terminal, never into a log file or a test's pipe.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| ScrubbedStderr)
        // At -vv a line says which part of roam decided (`roam_vfs::open`).
        .with_target(verbose >= 2)
        .with_ansi(ansi)
        .init();
}

/// The log filter of `-v`/`-vv`: roam's own crates at info/debug, everything else (the SSH
/// and TLS libraries, tokio) at warn: their internals are for `RUST_LOG`. The directive
/// `roam` covers every crate and target whose name starts with it (`roam_vfs`,
/// `roam_requests`).
fn log_filter(verbose: u8) -> &'static str {
    match verbose {
        0 => "warn",
        1 => "warn,roam=info",
        _ => "warn,roam=debug",
    }
}

/// Standard error with every password of a URL or name hidden ([`scrub`]): whatever a log
/// line quotes (a name a program opened, a mount URL, a library's debug output), its
/// password never reaches a terminal or a log file. The formatter writes each event with
/// one call, so a URL is never split across two.
struct ScrubbedStderr;

impl std::io::Write for ScrubbedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr().write_all(scrub(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
