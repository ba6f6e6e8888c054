//! Where a symbolic link that a mount serves leads. One rule for every mount, so that
//! nothing a server sends can lead a program to a local file (docs/SEMANTICS.md, "Symbolic
//! links"):
//!
//! - a link is followed *inside its mount*, as `openat2(RESOLVE_IN_ROOT)` would with the
//!   mount's root as `/`: a relative target is taken from the link's directory and `..`
//!   stops at the mount's root; an absolute target names a path of the server, which is
//!   found in the mount when it lies under the mount's remote root (a link written with
//!   the server's full path), else taken from the mount's root;
//! - only a mount of a local directory (`file+cache:`) leads to local files outside it, as
//!   the kernel itself would on that directory.
//!
//! The kernel follows the links of roam's skeleton by itself (a `stat` of a roam name is a
//! `stat` of its skeleton entry), so a link's skeleton entry points at the skeleton entry
//! of where the link leads, never at the server's text; programs that read the link itself
//! (`readlink`, `lstat`) get the server's text from roam.

use roam_drivers::{Driver, Kind};

use crate::path::{join, normalize, split_name, strip_dir_prefix};
use crate::{Error, Node, Remote, Result, Vfs, MAX_SYMLINKS};

/// Where a link leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkTarget {
    /// A name in roam's namespace.
    Roam(String),
    /// A local path (only from a mount of a local directory).
    Local(String),
}

/// Where the link `link` (served by a mount) with the server's text `target` leads. An
/// archive's members are their own mount: its root is the archive's.
pub fn resolve(link: &Remote, target: &str) -> LinkTarget {
    let root = mount_root(link);
    let in_archive = link.virt.starts_with(crate::archive::VIEW_ROOT);
    let base = remote_root(link.driver.as_ref()).filter(|_| !in_archive);
    let local = !in_archive && link.driver.describe("/").starts_with("file://");
    let dir = split_name(&link.path).0;
    // The target as a path of the mount (`/` its root), or of the local file system.
    let inside = match (target.starts_with('/'), &base) {
        (true, Some(b)) => match strip_dir_prefix(&normalize(target), b) {
            Some(rest) => normalize(rest),
            None if local => return LinkTarget::Local(normalize(target)),
            None => normalize(target),
        },
        (true, None) => normalize(target),
        (false, Some(b)) if local => {
            // Followed as the kernel would in the local directory, `..` and all.
            let real = join(&format!("{}{dir}", b.trim_end_matches('/')), target);
            match strip_dir_prefix(&real, b) {
                Some(rest) => normalize(rest),
                None => return LinkTarget::Local(real),
            }
        }
        (false, _) => join(dir, target),
    };
    LinkTarget::Roam(under_root(&root, &inside))
}

impl Vfs {
    /// `node`, or what it names once the links among its directories are followed by the
    /// rule above: a server that follows links itself in the middle of a path (SFTP, FTP,
    /// Chirp) would follow them out of the mount. Each directory of the name below the
    /// mount's root is looked at (what roam knows of it, else asked: one `lstat` or a
    /// listing each, kept for T_read). `None`: a link led to a name no mount serves.
    pub(crate) fn beyond_links_above(&self, node: Node, hops: usize) -> Result<Option<Node>> {
        let Node::Remote(r) = &node else {
            return Ok(Some(node));
        };
        if !r.driver.capabilities().serves_links {
            return Ok(Some(node));
        }
        let comps = below_root(r);
        for i in 0..comps.len().saturating_sub(1) {
            let above = under_root(&mount_root(r), &format!("/{}", comps[..=i].join("/")));
            let Some(Node::Remote(dir)) = self.mounts.lookup(&above)? else {
                continue;
            };
            let Ok(meta) = self.stat(&Node::Remote(dir.clone())) else {
                return Ok(Some(node)); // missing: the call's own lookup says so
            };
            match meta.kind {
                Kind::Symlink => {}
                Kind::Dir => continue,
                // The walk stops at anything else, as the kernel's does.
                Kind::File | Kind::Fifo | Kind::Socket => {
                    return Err(Error::posix(
                        libc::ENOTDIR,
                        format!("{}: not a directory", dir.virt),
                    ))
                }
            }
            if hops >= MAX_SYMLINKS {
                return Err(Error::posix(
                    libc::ELOOP,
                    format!("{}: too many levels of symbolic links", r.virt),
                ));
            }
            let LinkTarget::Roam(to) = resolve(&dir, meta.symlink_target.as_deref().unwrap_or(""))
            else {
                return Ok(Some(node));
            };
            let next = join(&to, &comps[i + 1..].join("/"));
            return match self.mounts.lookup(&next)? {
                Some(n) => self.beyond_links_above(n, hops + 1),
                None => Ok(None),
            };
        }
        Ok(Some(node))
    }

    /// Whether finding what `virt` names may ask a server about the directories on its way
    /// ([`Vfs::beyond_links_above`]), so a frontend that must not wait should ask elsewhere.
    pub(crate) fn links_above_unknown(&self, virt: &str) -> bool {
        let Ok(Some(Node::Remote(r))) = self.mounts.lookup(virt) else {
            return false;
        };
        if !r.driver.capabilities().serves_links {
            return false;
        }
        let comps = below_root(&r);
        let root = mount_root(&r);
        (0..comps.len().saturating_sub(1)).any(|i| {
            let above = under_root(&root, &format!("/{}", comps[..=i].join("/")));
            !self.knows_kind_of(&above)
        })
    }
}

/// The components of the name of `r` below its mount's root.
fn below_root(r: &Remote) -> Vec<String> {
    let root = mount_root(r);
    let rest = match root.as_str() {
        "/" => r.virt.as_str(),
        _ => r.virt.strip_prefix(root.as_str()).unwrap_or(""),
    };
    rest.split('/')
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The virtual name of the mount's root: the link's name less its driver path.
fn mount_root(r: &Remote) -> String {
    if r.path == "/" {
        return r.virt.clone();
    }
    let cut = r.virt.len().saturating_sub(r.path.len());
    match r.virt[cut..] == r.path {
        true if cut == 0 => "/".to_owned(),
        true => r.virt[..cut].to_owned(),
        // A layer renamed the path (rot13): the virtual name is all there is.
        false => split_name(&r.virt).0.to_owned(),
    }
}

/// The server's path of the mount's root, when the driver's description says it plainly
/// (`sftp://me@host/home/me/proj` → `/home/me/proj`): a link whose target starts with it
/// points into the mount.
fn remote_root(d: &dyn Driver) -> Option<String> {
    let url = d.describe("/");
    let (_, rest) = url.split_once("://")?;
    let path = &rest[rest.find('/')?..];
    let decoded = percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .ok()?;
    Some(normalize(&decoded))
}

/// `inside` (a path from the mount's root) as a name under `root`.
fn under_root(root: &str, inside: &str) -> String {
    match (root, inside) {
        (_, "/") => root.to_owned(),
        ("/", _) => inside.to_owned(),
        _ => format!("{root}{inside}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[derive(Debug)]
    struct Described(&'static str);

    impl Driver for Described {
        fn capabilities(&self) -> roam_drivers::Capabilities {
            roam_drivers::Capabilities::READ_ONLY
        }
        fn describe(&self, path: &str) -> String {
            format!("{}{}", self.0, path.trim_start_matches('/'))
        }
        fn stat(&self, p: &str) -> roam_drivers::Result<roam_drivers::Meta> {
            Err(not_asked(p))
        }
        fn list(&self, p: &str) -> roam_drivers::Result<roam_drivers::Listing> {
            Err(not_asked(p))
        }
        fn fetch(
            &self,
            p: &str,
            _: &mut dyn std::io::Write,
            _: Option<&roam_drivers::Validator>,
        ) -> roam_drivers::Result<roam_drivers::Fetched> {
            Err(not_asked(p))
        }
    }

    /// Resolving a link asks the server nothing.
    fn not_asked(p: &str) -> roam_drivers::Error {
        roam_drivers::Error::new(roam_drivers::ErrorKind::Io, format!("{p}: asked"))
    }

    fn link(url: &'static str, virt: &str, path: &str) -> Remote {
        Remote {
            virt: virt.into(),
            path: path.into(),
            driver: Arc::new(Described(url)),
        }
    }

    fn roam(s: &str) -> LinkTarget {
        LinkTarget::Roam(s.into())
    }

    #[test]
    fn a_server_link_never_leaves_its_mount() {
        let whole = link("sftp://me@h/", "/sftp/me@h/a/sl", "/a/sl");
        assert_eq!(
            resolve(&whole, "/etc/passwd"),
            roam("/sftp/me@h/etc/passwd")
        );
        assert_eq!(
            resolve(&whole, "../../../etc/passwd"),
            roam("/sftp/me@h/etc/passwd")
        );
        assert_eq!(resolve(&whole, "b/c"), roam("/sftp/me@h/a/b/c"));
        let sub = link("sftp://me@h/home/me/proj/", "/proj/a/sl", "/a/sl");
        assert_eq!(resolve(&sub, "/home/me/proj/lib"), roam("/proj/lib"));
        assert_eq!(resolve(&sub, "/etc/passwd"), roam("/proj/etc/passwd"));
        assert_eq!(resolve(&sub, "../../../../x"), roam("/proj/x"));
        assert_eq!(resolve(&sub, ".."), roam("/proj"));
        // An archive on a local directory is no local directory.
        let archive = link("file:///srv/a.zip#", "/.archive/srv/a.zip/d/sl", "/d/sl");
        let root = "/.archive/srv/a.zip";
        assert_eq!(
            resolve(&archive, "/etc/passwd"),
            roam(&format!("{root}/etc/passwd"))
        );
        assert_eq!(resolve(&archive, "../../../x"), roam(&format!("{root}/x")));
    }

    #[test]
    fn a_local_directory_links_as_the_kernel_would() {
        let local = link("file:///srv/p/", "/p/d/sl", "/d/sl");
        assert_eq!(
            resolve(&local, "/usr/lib/x"),
            LinkTarget::Local("/usr/lib/x".into())
        );
        assert_eq!(resolve(&local, "/srv/p/e"), roam("/p/e"));
        assert_eq!(resolve(&local, "../e"), roam("/p/e"));
        assert_eq!(
            resolve(&local, "../../../etc"),
            LinkTarget::Local("/etc".into())
        );
    }
}
