//! The control channel of a serving roam (`roam mount`, `roam run`): a unix socket per
//! process in `CACHE/control/PID.sock` (the directory 0700, the socket 0600), one JSON
//! request per line, one JSON reply per line. Commands that act on a running mount (`roam
//! suspend`, `resume`, `snapshot`) find the process serving a path by asking each socket
//! `where`; a `roam run`'s is named by its PID (`--pid`).
//!
//! Requests: `{"op":"where"}` (the mount's directory; none for a run),
//! `{"op":"suspend","timeout_ms":N}`
//! (suspend and drain), `{"op":"resume"}`, and `{"op":"snapshot","path":P,"dest":D,
//! "timeout_ms":N}` (suspend, copy, resume: made here, so a client that dies leaves
//! nothing suspended). Replies: `{"ok":true,...}` or `{"ok":false,"error":"..."}`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use roam_drivers::secrets::scrub;
use roam_vfs::Vfs;

use crate::snapshot::Dest;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Debug)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    Where,
    Suspend {
        timeout_ms: u64,
    },
    Resume,
    /// Suspend, copy `path` (under the mount) into `dest`, resume: a local directory, or
    /// one on the mount (then made by the server).
    Snapshot {
        path: PathBuf,
        dest: PathBuf,
        timeout_ms: u64,
    },
}

#[derive(Serialize, Deserialize, Debug, Default)]
pub struct Reply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What a snapshot copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// The directory of the control sockets in the cache `cache`.
fn socket_dir(cache: &Path) -> PathBuf {
    cache.join("control")
}

/// A listening control socket; dropping it removes the socket.
pub struct Listening {
    path: PathBuf,
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What a serving roam is: its namespace, the directory it is mounted on, and the virtual
/// name shown there (`/`, or the root of the one remote mounted); a `roam run` mounts
/// nothing (its programs use the virtual names themselves).
struct Served {
    vfs: Arc<Vfs>,
    mount: Option<PathBuf>,
    root: String,
}

/// Serves the control requests for the mount of `vfs`'s `root` on `mount`, or for a
/// `roam run` (no mount), on threads of its own.
pub fn listen(vfs: Arc<Vfs>, mount: Option<&Path>, root: &str) -> Result<Listening> {
    let dir = socket_dir(vfs.cache_root());
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener =
        UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let served = Arc::new(Served {
        vfs,
        mount: mount.map(Path::canonicalize).transpose()?,
        root: root.to_owned(),
    });
    std::thread::Builder::new()
        .name("roam-control".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                let served = served.clone();
                let _ = std::thread::Builder::new()
                    .name("roam-control-conn".into())
                    .spawn(move || converse(&served, conn));
            }
        })?;
    Ok(Listening { path })
}

/// Answers the requests of one connection.
fn converse(served: &Served, conn: UnixStream) {
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { break };
        let reply = match serde_json::from_str::<Request>(&line) {
            Ok(req) => served.answer(req),
            Err(e) => failed(format!("bad request: {e}")),
        };
        let mut text = serde_json::to_string(&reply).expect("a reply serialises");
        text.push('\n');
        if out.write_all(text.as_bytes()).is_err() {
            break;
        }
    }
}

impl Served {
    fn answer(&self, req: Request) -> Reply {
        match req {
            Request::Where => Reply {
                ok: true,
                mount: self.mount.clone(),
                ..Reply::default()
            },
            Request::Suspend { timeout_ms } => {
                match self.vfs.suspend(Duration::from_millis(timeout_ms)) {
                    Ok(()) => done(),
                    Err(e) => failed(e.to_string()),
                }
            }
            Request::Resume => match self.vfs.resume() {
                true => done(),
                false => failed("not suspended".into()),
            },
            Request::Snapshot {
                path,
                dest,
                timeout_ms,
            } => {
                let Some(virt) = self.virt(&path) else {
                    return failed(format!("{}: not on this mount", path.display()));
                };
                let dest = match self.virt(&dest) {
                    Some(on_server) => Dest::OnServer(on_server),
                    None => Dest::Local(dest),
                };
                let limit = Duration::from_millis(timeout_ms);
                match crate::snapshot::take(&self.vfs, &virt, &dest, limit) {
                    Ok(n) => Reply {
                        ok: true,
                        files: Some(n.files),
                        bytes: Some(n.bytes),
                        ..Reply::default()
                    },
                    Err(e) => failed(format!("{e:#}")),
                }
            }
        }
    }

    /// The virtual name of `path`, a path under the mount; for a `roam run`, `path` if
    /// it is a roam name.
    fn virt(&self, path: &Path) -> Option<String> {
        let Some(mount) = &self.mount else {
            let virt = roam_vfs::path::normalize(&path.to_string_lossy());
            return matches!(self.vfs.lookup(&virt), Ok(Some(_))).then_some(virt);
        };
        let rel = path.strip_prefix(mount).ok()?;
        let joined = format!("{}/{}", self.root, rel.to_string_lossy());
        Some(roam_vfs::path::normalize(&joined))
    }
}

fn done() -> Reply {
    Reply {
        ok: true,
        ..Reply::default()
    }
}

fn failed(why: String) -> Reply {
    Reply {
        ok: false,
        error: Some(scrub(&why).to_string()),
        ..Reply::default()
    }
}

/// A connection to the roam serving a path.
pub struct Client {
    conn: BufReader<UnixStream>,
    /// The directory that roam's mount is on (empty for a `roam run`).
    pub mount: PathBuf,
}

impl Client {
    /// Finds the roam whose mount holds `path` (the innermost, for mounts inside mounts)
    /// among those serving with the cache `cache`.
    pub fn find(cache: &Path, path: &Path) -> Result<Client> {
        let path = path
            .canonicalize()
            .with_context(|| format!("resolving {}", path.display()))?;
        let dir = socket_dir(cache);
        let mut best: Option<Client> = None;
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            // A socket left by a roam that was killed refuses the connection: skipped.
            let Ok(mut c) = Client::connect(&entry.path()) else {
                continue;
            };
            let Ok(Reply {
                mount: Some(mount), ..
            }) = c.ask(&Request::Where)
            else {
                continue;
            };
            let longer = best
                .as_ref()
                .is_none_or(|b| mount.as_os_str().len() > b.mount.as_os_str().len());
            if path.starts_with(&mount) && longer {
                c.mount = mount;
                best = Some(c);
            }
        }
        best.with_context(|| {
            format!(
                "{}: no roam mount serves it (roam mount, with the same cache directory {})",
                path.display(),
                cache.display()
            )
        })
    }

    /// The `roam run` (or mount) of process `pid` serving with the cache `cache`.
    pub fn of_pid(cache: &Path, pid: u32) -> Result<Client> {
        let socket = socket_dir(cache).join(format!("{pid}.sock"));
        let mut c = Client::connect(&socket).with_context(|| {
            format!(
                "process {pid}: no roam serves with the cache directory {}",
                cache.display()
            )
        })?;
        c.mount = c.ask(&Request::Where)?.mount.unwrap_or_default();
        Ok(c)
    }

    fn connect(socket: &Path) -> Result<Client> {
        Ok(Client {
            conn: BufReader::new(UnixStream::connect(socket)?),
            mount: PathBuf::new(),
        })
    }

    /// Sends `req` and reads the reply (an error for a reply that is not `ok`).
    pub fn ask(&mut self, req: &Request) -> Result<Reply> {
        let mut text = serde_json::to_string(req)?;
        text.push('\n');
        self.conn.get_mut().write_all(text.as_bytes())?;
        let mut line = String::new();
        if self.conn.read_line(&mut line)? == 0 {
            bail!("the roam serving the mount went away");
        }
        let reply: Reply = serde_json::from_str(&line).context("a bad reply")?;
        if !reply.ok {
            bail!("{}", reply.error.unwrap_or_default());
        }
        Ok(reply)
    }
}
