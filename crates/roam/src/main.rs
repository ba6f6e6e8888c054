//! `roam`: the command line. A thin layer that reads configuration and wires the namespace
//! (`roam-vfs`) to a frontend (`roam-trap` for `roam run`).

mod config;

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use roam_drivers::http::HttpConfig;
use roam_vfs::{Vfs, VfsConfig};

use config::Config;

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
        /// The program and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        program: Vec<OsString>,
    },
    /// Upload every change still in roam's journal (e.g. after roam was killed).
    Sync {
        /// Mounts, as for `run` (the journal names files by their mount point).
        #[arg(short = 'm', long = "mount", value_name = "LOCAL=URL")]
        mounts: Vec<String>,
    },
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
        Command::Run { mounts, program } => {
            let vfs = open_vfs(&mounts)?;
            Ok(roam_trap::run(Arc::new(vfs), &program)?)
        }
        Command::Sync { mounts } => sync(&open_vfs(&mounts)?),
    }
}

/// Uploads each journaled change; exit status 1 if any is still pending.
fn sync(vfs: &Vfs) -> Result<i32> {
    let mut failed = 0;
    for virt in vfs.dirty() {
        match vfs.flush(&virt, &|| false) {
            Ok(roam_vfs::Flushed::Conflict(beside)) => {
                eprintln!("roam: {virt} changed on the server meanwhile: this version was saved as {beside}")
            }
            Ok(_) => eprintln!("roam: uploaded {virt}"),
            Err(e) => {
                failed += 1;
                eprintln!("roam: {virt}: {e} (still pending)");
            }
        }
    }
    Ok(i32::from(failed > 0))
}

/// Builds the namespace from `roam.toml` plus `-m` flags (flags win on the same mount point).
fn open_vfs(flags: &[String]) -> Result<Vfs> {
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
        t_read: cfg.t_read(),
        mounts: mounts.into_iter().collect(),
        http: HttpConfig {
            connect_timeout: secs(cfg.http.connect_timeout, defaults.connect_timeout),
            read_timeout: secs(cfg.http.read_timeout, defaults.read_timeout),
        },
    };
    Vfs::new(&vcfg).with_context(|| format!("opening the cache at {}", vcfg.cache_dir.display()))
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
