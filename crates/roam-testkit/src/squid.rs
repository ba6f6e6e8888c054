//! squid, the caching HTTP proxy that sites put in front of an origin, for the proxy tests
//! and benchmark: run in the foreground (`-N`) with its own configuration, pid file, logs
//! and 127.0.0.1 port under a run directory, caching in memory only (no cache directory
//! to prepare with `squid -z`).
//!
//! Started as root, squid drops to `cache_effective_user` before it opens its logs: the
//! run directory is handed to `nobody` (the user nginx's workers run as) and squid told
//! to be it, since Debian's default user `proxy` may not reach a scratch directory.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::{free_port, mkdir, required, wait_for_port, Server};

/// squid on 127.0.0.1 forwarding to any host and tunnelling (`CONNECT`) to any port,
/// for local clients only; its access log (`access.log`, one line per request with
/// squid's verdict, e.g. `TCP_MEM_HIT/200`) and its own log (`error.log`) in `run`.
pub fn squid(run: &Path) -> Server {
    let squid = required("/usr/sbin/squid", "Debian's squid");
    mkdir(run);
    let port = free_port();
    let conf = run.join("squid.conf");
    fs::write(&conf, squid_conf(run, port)).unwrap();
    crate::dav::hand_over(run);
    let mut child = Command::new(squid)
        .arg("-N")
        .arg("-f")
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(run.join("stderr.log")).unwrap())
        .spawn()
        .expect("starting squid");
    wait_for_port(&mut child, port, run);
    Server::running(child, port, run)
}

fn squid_conf(run: &Path, port: u16) -> String {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let user = if unsafe { libc::geteuid() } == 0 {
        "cache_effective_user nobody\n"
    } else {
        ""
    };
    let run = run.display();
    format!(
        "http_port 127.0.0.1:{port}
{user}pid_filename {run}/squid.pid
access_log stdio:{run}/access.log
cache_log {run}/error.log
cache_store_log none
coredump_dir {run}
cache_mem 256 MB
maximum_object_size_in_memory 64 MB
acl tunnel_ports port 1-65535
http_access allow CONNECT localhost tunnel_ports
http_access allow localhost
http_access deny all
# Without Cache-Control or Expires, squid's usual heuristic (a fifth of the age since
# Last-Modified); index pages have neither and are not kept.
refresh_pattern . 0 20% 4320
shutdown_lifetime 0 seconds
pinger_enable off
icp_port 0
htcp_port 0
netdb_filename none
"
    )
}
