//! A WebDAV server for the tests: nginx with its `dav` module (PUT, DELETE, MKCOL, COPY,
//! MOVE) and Debian's `dav-ext` module (PROPFIND, OPTIONS, and LOCK, UNLOCK: WebDAV class 2,
//! as a server for clients that lock is set up), serving a scratch tree on a free loopback
//! port (see [`Server::nginx`] for how the port is chosen).

use std::fs;
use std::os::unix::fs::lchown;
use std::path::Path;
use std::sync::OnceLock;

use crate::{basic_auth, required, NginxExtra, Server};

/// Where Debian's `libnginx-mod-http-dav-ext` installs the module.
const DAV_EXT: &str = "/usr/lib/nginx/modules/ngx_http_dav_ext_module.so";

/// The WebDAV part of the server block. `create_full_put_path` stays off (nginx's default):
/// turned on, nginx would create missing directories for a PUT, where POSIX (and RFC 4918
/// §9.7.1) want the write refused. `client_max_body_size 0` lifts the 1 MB upload limit.
const DAV: &str = "        dav_methods PUT DELETE MKCOL COPY MOVE;
        create_full_put_path off;
        client_max_body_size 0;
";

/// Locks (dav-ext's README): a shared-memory zone for them, and the methods. A lock lasts
/// a minute unless released (the module ignores the client's `Timeout`).
const LOCKS_ZONE: &str = "    dav_ext_lock_zone zone=locks:1m;\n";
const LOCKS: &str = "        dav_ext_methods PROPFIND OPTIONS LOCK UNLOCK;
        dav_ext_lock zone=locks;
";
const NO_LOCKS: &str = "        dav_ext_methods PROPFIND OPTIONS;\n";

/// nginx serving `www` over WebDAV (and plain GET, with `autoindex on`); its pid file and
/// logs live in `run`. Create the tree before starting: `www` is handed to nginx's workers.
///
/// Run as root, nginx's workers run as `nobody`, which must own the tree to write in it;
/// so the tree is given to `nobody`, modes unchanged (a mode-000 file stays unreadable to
/// it and gives 403). Not run as root, the workers run as the tree's owner already.
pub fn nginx_dav(www: &Path, run: &Path) -> Server {
    serve(www, run, true, String::new())
}

/// [`nginx_dav`] without locks (WebDAV class 1): `LOCK` is refused with 405.
pub fn nginx_dav_unlocked(www: &Path, run: &Path) -> Server {
    serve(www, run, false, String::new())
}

/// [`nginx_dav`] where every request must carry `user` and `password` (Basic
/// authorization): 401 without them.
pub fn nginx_dav_with_login(www: &Path, run: &Path, user: &str, password: &str) -> Server {
    serve(www, run, true, basic_auth(run, user, password))
}

/// nginx's WebDAV server with or without locks; `login` directives (if any) guard it all.
fn serve(www: &Path, run: &Path, locks: bool, login: String) -> Server {
    let module = required(DAV_EXT, "Debian's libnginx-mod-http-dav-ext");
    hand_over(www);
    let (http, methods) = match locks {
        true => (LOCKS_ZONE, LOCKS),
        false => ("", NO_LOCKS),
    };
    let extra = NginxExtra {
        main: format!("load_module {};\n", module.display()),
        http: http.to_owned(),
        server: format!("{DAV}{methods}{login}"),
    };
    Server::nginx_with(www, run, &extra)
}

/// Gives the tree at `root` to nginx's worker user, when we are root.
pub(crate) fn hand_over(root: &Path) {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    if unsafe { libc::geteuid() } == 0 {
        let (uid, gid) = nobody();
        chown_tree(root, uid, gid);
    }
}

/// The uid and gid of `nobody`, the user nginx's workers run as when started by root.
fn nobody() -> (u32, u32) {
    static IDS: OnceLock<(u32, u32)> = OnceLock::new();
    *IDS.get_or_init(|| {
        // SAFETY: getpwnam returns NULL or a record in static storage, read at once. The
        // OnceLock keeps our threads from calling it concurrently.
        let pw = unsafe { libc::getpwnam(c"nobody".as_ptr()) };
        assert!(!pw.is_null(), "no user `nobody`: nginx's workers run as it");
        // SAFETY: `pw` is non-null and points to a valid passwd record.
        unsafe { ((*pw).pw_uid, (*pw).pw_gid) }
    })
}

fn chown_tree(path: &Path, uid: u32, gid: u32) {
    lchown(path, Some(uid), Some(gid)).unwrap();
    if fs::symlink_metadata(path).unwrap().is_dir() {
        for entry in fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), uid, gid);
        }
    }
}
