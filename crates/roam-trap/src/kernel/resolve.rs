//! Turning a path argument, as the program passed it, into what it names: a local name the
//! kernel can resolve itself, a local name that must be spelled out (because the program's
//! cwd or dirfd is one of roam's skeleton directories), or a roam node.
//!
//! The tracee's cwd and dirfds are read from `/proc/TID/{cwd,fd/N}`: the kernel keeps them
//! (including `CLONE_FS`/`CLONE_FILES` sharing), and a real path inside roam's skeleton maps
//! straight back to its virtual name. So roam keeps no per-process path state to go stale.
//!
//! A local name that the kernel cannot resolve may still lead into roam through a local
//! symlink (`ln -s /http/host/dir ~/data`, Ufo §5.1): such names are walked here, link by
//! link, only after a cheap check says the kernel would fail on them.

use std::collections::VecDeque;
use std::sync::Arc;

use nix::unistd::Pid;

use crate::platform::fastpath;
use roam_vfs::path::{
    join, looks_like_url, normalize, split_name, strip_dir_prefix, url_to_virtual,
};
use roam_vfs::{Node, Vfs};

/// What one name argument means.
#[derive(Debug, Clone)]
pub enum Place {
    /// A local name; the kernel resolves it as given.
    Native,
    /// A local name that must reach the kernel as this absolute path.
    Local(String),
    /// A roam name.
    Roam(Node),
    /// An empty name meaning the dirfd itself, which is a roam object.
    RoamFd(Node),
    /// A roam name whose mount could not be looked up (a bad host, an unsupported URL):
    /// the call fails with the driver's errno, and roam says why.
    Failed {
        virt: String,
        errno: i32,
        why: String,
    },
    /// A name through an archive file (or, with `root`, an archive file named with a
    /// trailing slash): finding what it names may ask the server, so a worker does it
    /// ([`Resolver::settle`]), not the tracer.
    Deferred {
        virt: String,
        spelled: bool,
        root: bool,
    },
}

impl Place {
    pub fn is_native(&self) -> bool {
        matches!(self, Place::Native)
    }
}

/// The place of a roam name whose lookup failed with `e`.
fn failed(virt: &str, e: &roam_vfs::Error) -> Place {
    Place::Failed {
        virt: virt.to_owned(),
        errno: e.errno(),
        why: e.to_string(),
    }
}

/// Resolves path arguments against the mount table and the tracee's cwd and fds.
pub struct Resolver {
    vfs: Arc<Vfs>,
    /// Absolute prefixes that may lead into roam; any other absolute name is local.
    quick: Vec<Vec<u8>>,
    /// Whether a tracee may hold a skeleton directory as its cwd or as a dirfd. Until one
    /// does, a relative name that resolves locally is local, and the tracee's cwd need not
    /// be read.
    dirs_out: std::sync::atomic::AtomicBool,
    /// Absolute local names lately found to need nothing of roam.
    native: super::native_names::NativeNames,
    /// Whether programs get the fast path's view (`platform::fastpath`).
    fastpath: bool,
}

impl Resolver {
    pub fn new(vfs: Arc<Vfs>, fastpath: bool) -> Resolver {
        let mut quick: Vec<Vec<u8>> = vfs.prefixes().into_iter().map(String::into_bytes).collect();
        quick.push(vfs.cache_root().to_string_lossy().into_owned().into_bytes());
        quick.push(b"/proc/".to_vec());
        quick.push(b"/dev/fd/".to_vec());
        Resolver {
            vfs,
            quick,
            dirs_out: Default::default(),
            native: Default::default(),
            fastpath,
        }
    }

    /// Tracee `tid` was given a skeleton directory (chdir into roam, open of a roam
    /// directory, which `fchdir` makes the cwd unseen by roam).
    pub fn roam_dir_handed_out(&self, tid: Pid) {
        self.dirs_out
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if self.fastpath {
            fastpath::cwd_may_be_roam(tid);
        }
    }

    /// The fast path's view for the program `tid` has just exec'd, if programs get one.
    pub fn fastpath_view(&self, tid: Pid) -> Option<Vec<u8>> {
        if !self.fastpath {
            return None;
        }
        fastpath::view_page(&self.quick, self.cwd_may_be_roam(tid))
    }

    /// Whether a relative name of `tid` may be roam's: its cwd is one of roam's
    /// directories, or a prefix roam serves lies below it (unknown: yes).
    fn cwd_may_be_roam(&self, tid: Pid) -> bool {
        let Some(cwd) = link_target(&format!("/proc/{tid}/cwd")) else {
            return true;
        };
        let under = |q: &Vec<u8>| {
            std::str::from_utf8(q).map_or(true, |q| strip_dir_prefix(q, &cwd).is_some())
        };
        self.vfs.unmap(&cwd).is_some()
            || self.may_be_roam(cwd.as_bytes())
            || self.quick.iter().any(under)
    }

    /// A tracee is adding or removing names: a local name found native before may now
    /// lead into roam through a new symlink.
    pub fn names_changing(&self) {
        self.native.forget_all();
    }

    pub fn vfs(&self) -> &Vfs {
        &self.vfs
    }

    /// What `raw`, relative to `dirfd` (or the cwd), names for thread `tid`; `follow` says
    /// whether the call follows a symlink in the last component.
    pub fn resolve(&self, tid: Pid, dirfd: Option<i32>, raw: &[u8], follow: bool) -> Place {
        let place = self.resolve_name(tid, dirfd, raw, follow);
        match place {
            // `photos.zip/`: with a trailing slash, an archive file is its members' directory.
            Place::Roam(ref node)
                if raw.len() > 1
                    && raw.ends_with(b"/")
                    && self.vfs.archive_lookup_may_wait(node.virt(), true) =>
            {
                Place::Deferred {
                    virt: node.virt().to_owned(),
                    spelled: false,
                    root: true,
                }
            }
            place => place,
        }
    }

    /// What a [`Place::Deferred`] names, asking servers if need be (on a worker thread);
    /// any other place as it is.
    pub fn settle(&self, place: Place) -> Place {
        let Place::Deferred {
            virt,
            spelled,
            root,
        } = place
        else {
            return place;
        };
        if root {
            if let Ok(Some(node)) = self.vfs.archive_root(&virt) {
                return Place::Roam(node);
            }
        }
        self.looked_up(&virt, spelled)
    }

    fn resolve_name(&self, tid: Pid, dirfd: Option<i32>, raw: &[u8], follow: bool) -> Place {
        if raw.is_empty() {
            return self.resolve_fd_itself(tid, dirfd);
        }
        if looks_like_url(raw) {
            return match std::str::from_utf8(raw).ok().and_then(url_to_virtual) {
                Some(v) => self.place_of(&v, false),
                None => Place::Native,
            };
        }
        if raw[0] == b'/' {
            return match self.resolve_absolute(tid, raw) {
                Place::Native => match std::str::from_utf8(raw) {
                    Ok(s) => self.through_local_links(s, follow),
                    Err(_) => Place::Native,
                },
                place => place,
            };
        }
        let Ok(rel) = std::str::from_utf8(raw) else {
            return Place::Native;
        };
        if !self.dirs_out.load(std::sync::atomic::Ordering::Relaxed)
            && local_stat(&via_proc(tid, dirfd, rel), follow).is_ok()
        {
            // No cwd or dirfd is roam's, and the kernel finds the name: one `fstatat`
            // through /proc instead of reading the cwd and then checking the name.
            return Place::Native;
        }
        let Some(base) = self.base_dir(tid, dirfd) else {
            return match self.deep_dir(&base_link(tid, dirfd)) {
                Some(vbase) => self.place_of(&join(&vbase, rel), true),
                None => Place::Native,
            };
        };
        match self.vfs.unmap(&base) {
            Some(vbase) => self.place_of(&join(&vbase, rel), true),
            None => {
                let v = join(&base, rel);
                if self.may_be_roam(v.as_bytes()) {
                    self.place_of(&v, false)
                } else {
                    self.through_local_links(&format!("{base}/{rel}"), follow)
                }
            }
        }
    }

    fn resolve_absolute(&self, tid: Pid, raw: &[u8]) -> Place {
        if !self.may_be_roam(raw) && !raw.windows(3).any(|w| w == b"/..") {
            return Place::Native;
        }
        let Ok(s) = std::str::from_utf8(raw) else {
            return Place::Native;
        };
        if let Some((link, rest)) = magic_link(tid, s) {
            return match std::fs::read_link(&link)
                .ok()
                .and_then(|t| self.vfs.unmap(&t.to_string_lossy()))
            {
                Some(vtarget) => self.place_of(&join(&vtarget, rest), true),
                None => Place::Native,
            };
        }
        let v = normalize(s);
        match self.vfs.unmap(&v) {
            Some(virt) => self.place_of(&virt, true),
            // `/mnt/..` where /mnt is a roam mount: the kernel cannot climb out of a name that
            // exists only in roam, so the name must be spelled out.
            None => self.place_of(&v, self.climbs_out_of_roam(s)),
        }
    }

    /// Whether `path` goes through a roam name before a `..` takes it elsewhere.
    fn climbs_out_of_roam(&self, path: &str) -> bool {
        let Some(i) = path.find("/..") else {
            return false;
        };
        let before = normalize(&path[..i]);
        matches!(self.vfs.lookup(&before), Ok(Some(_))) || self.vfs.unmap(&before).is_some()
    }

    /// An empty name (with `AT_EMPTY_PATH`, or a NULL `utimensat` name) is the dirfd itself.
    pub fn resolve_fd_itself(&self, tid: Pid, dirfd: Option<i32>) -> Place {
        let Some(fd) = dirfd.filter(|&fd| fd >= 0) else {
            return Place::Native;
        };
        match self.virtual_base(tid, Some(fd)) {
            Some(v) => match self.vfs.lookup(&v) {
                Ok(Some(node)) => Place::RoamFd(node),
                _ => Place::Native,
            },
            None => Place::Native,
        }
    }

    /// `virt` is a normalised absolute name; `spelled` says the program's own spelling
    /// would not reach it (it went through the skeleton or a magic link).
    fn place_of(&self, virt: &str, spelled: bool) -> Place {
        if self.vfs.lookup_may_wait(virt) {
            return Place::Deferred {
                virt: virt.to_owned(),
                spelled,
                root: false,
            };
        }
        self.looked_up(virt, spelled)
    }

    fn looked_up(&self, virt: &str, spelled: bool) -> Place {
        match self.vfs.lookup(virt) {
            Ok(Some(node)) => Place::Roam(node),
            Err(e) => failed(virt, &e),
            _ if spelled => Place::Local(virt.to_owned()),
            _ => Place::Native,
        }
    }

    /// A local name the kernel resolves itself, unless it fails there and a local symlink
    /// on the way leads into roam. Costs one `lstat` for a name that exists, two for one
    /// missing from an existing directory (what compilers and Python probe for), a walk
    /// for one missing further up, none for a name found native lately.
    fn through_local_links(&self, path: &str, follow: bool) -> Place {
        if self.native.recalls(path, follow) {
            return Place::Native;
        }
        if found_native(path, follow) {
            self.native.remember(path, follow);
            return Place::Native;
        }
        match self.walk_links(path, follow) {
            // What the server holds decides: not a verdict to keep.
            Some(virt) => match self.vfs.lookup(&virt) {
                Ok(Some(node)) => Place::Roam(node),
                Err(e) => failed(&virt, &e),
                Ok(None) => Place::Native,
            },
            // No link on the way leads into roam (gcc's `-I.` probes for `./bits/types.h`
            // end here): local files alone said so.
            None => {
                self.native.remember(path, follow);
                Place::Native
            }
        }
    }

    /// Resolves `path` component by component as the kernel would, following local
    /// symlinks; the normalised virtual name if it enters roam on the way.
    fn walk_links(&self, path: &str, follow: bool) -> Option<String> {
        let mut todo: VecDeque<String> = components(path).collect();
        let mut cur = String::from("/");
        let mut links = 0;
        while let Some(name) = todo.pop_front() {
            if name == ".." {
                cur = split_name(&cur).0.to_owned();
                continue;
            }
            let next = join(&cur, &name);
            if self.may_be_roam(next.as_bytes()) {
                let rest: Vec<String> = todo.into_iter().collect();
                return Some(normalize(&join(&next, &rest.join("/"))));
            }
            let last = todo.is_empty();
            match std::fs::symlink_metadata(&next) {
                Ok(m) if m.file_type().is_symlink() && (follow || !last) => {
                    links += 1;
                    let target = std::fs::read_link(&next).ok()?;
                    let target = target.to_str()?;
                    if links > MAX_LINKS {
                        return None;
                    }
                    if target.starts_with('/') {
                        cur = String::from("/");
                    }
                    for c in components(target).collect::<Vec<_>>().into_iter().rev() {
                        todo.push_front(c);
                    }
                }
                Ok(_) => cur = next,
                Err(_) => return None,
            }
        }
        None
    }

    fn may_be_roam(&self, path: &[u8]) -> bool {
        self.quick.iter().any(|q| path.starts_with(q))
    }

    /// The real directory a relative name starts from (`None` where the kernel cannot
    /// spell it: see [`Resolver::deep_dir`]).
    fn base_dir(&self, tid: Pid, dirfd: Option<i32>) -> Option<String> {
        link_target(&base_link(tid, dirfd))
    }

    /// The virtual name of the directory `link` (a tracee's cwd or dirfd under /proc) where
    /// the kernel cannot spell it, being deeper than `PATH_MAX`: one of roam's skeleton
    /// directories, known by its identity, or none of roam's.
    fn deep_dir(&self, link: &str) -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        let md = std::fs::metadata(link).ok()?;
        self.vfs.unmap_deep_dir(md.dev(), md.ino())
    }

    /// The virtual name of the tracee's cwd, when it is inside roam.
    pub fn virtual_cwd(&self, tid: Pid) -> Option<String> {
        self.virtual_base(tid, None)
    }

    /// The virtual name of the tracee's cwd or `dirfd`, when it is inside roam.
    fn virtual_base(&self, tid: Pid, dirfd: Option<i32>) -> Option<String> {
        let link = base_link(tid, dirfd);
        match link_target(&link) {
            Some(real) => self.vfs.unmap(&real),
            None => self.deep_dir(&link),
        }
    }

    /// The virtual name a magic `/proc` link (`/proc/self/cwd`, `exe`, `fd/N` ...) points
    /// to, when it points into roam.
    pub fn virtual_magic_target(&self, tid: Pid, raw: &[u8]) -> Option<String> {
        let s = std::str::from_utf8(raw).ok()?;
        match magic_link(tid, s)? {
            (link, "") => link_target(&link).and_then(|t| self.vfs.unmap(&t)),
            _ => None,
        }
    }
}

/// The kernel's own limit on symlinks in one resolution.
const MAX_LINKS: u32 = 40;

/// The non-empty, non-`.` components of a path.
fn components(path: &str) -> impl Iterator<Item = String> + '_ {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_owned)
}

/// The /proc link to the tracee's cwd, or to its dirfd.
fn base_link(tid: Pid, dirfd: Option<i32>) -> String {
    match dirfd {
        Some(fd) if fd != libc::AT_FDCWD => format!("/proc/{tid}/fd/{fd}"),
        _ => format!("/proc/{tid}/cwd"),
    }
}

/// `rel` spelled from the tracee's cwd or dirfd through /proc (the kernel follows those
/// magic links to the tracee's own directory).
fn via_proc(tid: Pid, dirfd: Option<i32>, rel: &str) -> String {
    match dirfd {
        Some(fd) if fd != libc::AT_FDCWD => format!("/proc/{tid}/fd/{fd}/{rel}"),
        _ => format!("/proc/{tid}/cwd/{rel}"),
    }
}

/// Whether the kernel alone resolves `path` as roam would, as local files alone say
/// (what a server holds plays no part, so the verdict can be kept).
fn found_native(path: &str, follow: bool) -> bool {
    let dangling = match local_lstat(path) {
        // Exists; the kernel resolved every directory on the way.
        Ok(is_link) if !(follow && is_link) => return true,
        Ok(_) => match local_errno(path, true) {
            None => return true,
            Some(_) => true,
        },
        Err(libc::ENOENT | libc::ENOTDIR) => false,
        Err(_) => return true,
    };
    // Missing from a directory that exists: nothing on the way leads elsewhere.
    !dangling && local_errno(split_name(path).0, true).is_none()
}

/// `fstatat` of a local name: its mode, or the errno the kernel gives.
fn local_stat(path: &str, follow: bool) -> Result<libc::mode_t, i32> {
    let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
    let c = std::ffi::CString::new(path).map_err(|_| libc::EINVAL)?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `c` is a valid C string and `st` a buffer of the size fstatat writes.
    let rc = unsafe { libc::fstatat(libc::AT_FDCWD, c.as_ptr(), st.as_mut_ptr(), flags) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    // SAFETY: fstatat succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() }.st_mode)
}

/// Why the kernel would fail to resolve the local `path` (None: it exists).
fn local_errno(path: &str, follow: bool) -> Option<i32> {
    local_stat(path, follow).err()
}

/// Whether the local `path` (its last component not followed) is a symlink.
fn local_lstat(path: &str) -> Result<bool, i32> {
    local_stat(path, false).map(|mode| mode & libc::S_IFMT == libc::S_IFLNK)
}

fn link_target(link: &str) -> Option<String> {
    std::fs::read_link(link)
        .ok()
        .map(|t| t.to_string_lossy().into_owned())
}

pub(super) fn fd_target(tid: Pid, fd: i32) -> Option<String> {
    link_target(&format!("/proc/{tid}/fd/{fd}"))
}

/// Splits `/proc/{self,thread-self,PID[/task/TID]}/{cwd,exe,root,fd/N}[/REST]` and
/// `/dev/fd/N[/REST]` into the tracee's real magic link and the rest.
fn magic_link(tid: Pid, path: &str) -> Option<(String, &str)> {
    if let Some(rest) = path.strip_prefix("/dev/fd/") {
        return fd_link(&tid.to_string(), rest);
    }
    let (who, rest) = path.strip_prefix("/proc/")?.split_once('/')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (owner, rest) = match who {
        "self" | "thread-self" => (tid.to_string(), rest),
        pid if digits(pid) => match rest.strip_prefix("task/") {
            Some(t) => {
                let (task, r) = t.split_once('/')?;
                (format!("{pid}/task/{task}"), r)
            }
            None => (pid.to_owned(), rest),
        },
        _ => return None,
    };
    if let Some(r) = rest.strip_prefix("fd/") {
        return fd_link(&owner, r);
    }
    let (what, tail) = rest.split_once('/').unwrap_or((rest, ""));
    matches!(what, "cwd" | "exe" | "root").then(|| (format!("/proc/{owner}/{what}"), tail))
}

fn fd_link<'a>(owner: &str, r: &'a str) -> Option<(String, &'a str)> {
    let (n, tail) = r.split_once('/').unwrap_or((r, ""));
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .then(|| (format!("/proc/{owner}/fd/{n}"), tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_links_split() {
        let me = Pid::from_raw(42);
        assert_eq!(
            magic_link(me, "/proc/self/cwd"),
            Some(("/proc/42/cwd".into(), ""))
        );
        assert_eq!(
            magic_link(me, "/proc/self/cwd/a/b"),
            Some(("/proc/42/cwd".into(), "a/b"))
        );
        assert_eq!(
            magic_link(me, "/proc/7/fd/3"),
            Some(("/proc/7/fd/3".into(), ""))
        );
        assert_eq!(
            magic_link(me, "/proc/thread-self/fd/12/x"),
            Some(("/proc/42/fd/12".into(), "x"))
        );
        assert_eq!(
            magic_link(me, "/proc/7/task/8/exe"),
            Some(("/proc/7/task/8/exe".into(), ""))
        );
        assert_eq!(
            magic_link(me, "/dev/fd/5/sub/f"),
            Some(("/proc/42/fd/5".into(), "sub/f"))
        );
        assert_eq!(
            magic_link(me, "/dev/fd/5"),
            Some(("/proc/42/fd/5".into(), ""))
        );
        assert_eq!(magic_link(me, "/proc/self/maps"), None);
        assert_eq!(magic_link(me, "/proc/meminfo"), None);
        assert_eq!(magic_link(me, "/proc/self/fd/x"), None);
    }
}
