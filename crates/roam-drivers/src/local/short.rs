//! Local names longer than `PATH_MAX`. A tree may be deeper than the kernel takes in one
//! name (4096 bytes with the NUL): a program reaches its depths with relative names from a
//! deep cwd. roam spells names of a tree served in place, and of its own skeleton, as
//! absolute paths, so such a name would fail with `ENAMETOOLONG` where the program's own
//! call would not.
//!
//! [`spell`] gives the kernel a name it takes: the leading directories of a long path go
//! through symbolic links in a private directory, each link naming the previous one and a
//! piece of the path short enough for a link's target, so the kernel walks the same
//! directories. Only directories before the last component are replaced: the last one is
//! the caller's, so a call that does not follow it (`lstat`, `unlink`,
//! `AT_SYMLINK_NOFOLLOW`) still acts on it. A link is made once and kept (its name is a
//! hash of its target; it is remade if it names something else).

use std::borrow::Cow;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The longest name the kernel takes, without its NUL.
pub const LONGEST_NAME: usize = 4095;
/// The longest piece one link stands for: its target (the previous link and the piece)
/// stays under `PATH_MAX`, with room for the links directory's own name.
const PIECE: usize = 3072;

static LINKS: OnceLock<PathBuf> = OnceLock::new();

/// Keeps the links of long names in `dir` (roam's private cache), made 0700 when first
/// needed. The first call wins; without one, a directory of this user's in the system's
/// temporary directory is used.
pub fn keep_links_in(dir: PathBuf) {
    let _ = LINKS.set(dir);
}

/// `p` as the kernel takes it: itself when short enough; else through links (see the
/// module's doc). When no link can be made, `p` itself, which then fails as it would.
pub fn spell(p: &Path) -> Cow<'_, Path> {
    spell_within(p, LONGEST_NAME)
}

/// `p` in at most `longest` bytes where links make that possible (a unix socket's name
/// must fit a `sockaddr_un`: 107 bytes); else `p` itself.
pub fn spell_within(p: &Path, longest: usize) -> Cow<'_, Path> {
    if p.as_os_str().len() <= longest || !p.is_absolute() {
        return Cow::Borrowed(p);
    }
    match through_links(p.as_os_str().as_bytes(), longest) {
        Ok(short) => Cow::Owned(short),
        Err(e) => {
            tracing::debug!("{}: no shorter spelling: {e}", p.display());
            Cow::Borrowed(p)
        }
    }
}

fn through_links(mut rest: &[u8], longest: usize) -> std::io::Result<PathBuf> {
    let dir = links_dir()?;
    let mut base: Option<PathBuf> = None;
    while base.as_ref().map_or(0, |b| b.as_os_str().len() + 1) + rest.len() > longest {
        let cut = piece_end(rest).ok_or_else(|| std::io::Error::other("a component too long"))?;
        let target = match &base {
            Some(b) => join(b, &rest[..cut]),
            None => PathBuf::from(OsStr::from_bytes(&rest[..cut])),
        };
        base = Some(link_to(&dir, &target)?);
        rest = &rest[cut + 1..];
    }
    Ok(match base {
        Some(b) => join(&b, rest),
        None => PathBuf::from(OsStr::from_bytes(rest)),
    })
}

/// Where the longest piece of at most [`PIECE`] bytes of `rest` ends: at a `/` before
/// the last component.
fn piece_end(rest: &[u8]) -> Option<usize> {
    let last_slash = rest.iter().rposition(|&c| c == b'/')?;
    rest[..rest.len().min(PIECE + 1)]
        .iter()
        .enumerate()
        .rev()
        .find(|&(i, &c)| c == b'/' && i > 0 && i <= last_slash)
        .map(|(i, _)| i)
}

fn join(base: &Path, rest: &[u8]) -> PathBuf {
    let mut s = base.as_os_str().as_bytes().to_vec();
    s.push(b'/');
    s.extend_from_slice(rest);
    PathBuf::from(OsStr::from_bytes(&s))
}

/// The link in `dir` whose target is `target`, made (or remade) when missing or wrong.
fn link_to(dir: &Path, target: &Path) -> std::io::Result<PathBuf> {
    // std's hasher has fixed keys: every roam of one build names a link alike (a name
    // that differs elsewhere only makes a second link).
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    target.hash(&mut h);
    let name = format!("{:016x}", h.finish());
    let link = dir.join(&name);
    if std::fs::read_link(&link).is_ok_and(|t| t == target) {
        return Ok(link);
    }
    // Made beside and renamed into place: another thread or roam may be making it too.
    let tmp = dir.join(format!(".{}.{name}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, &link)?;
    Ok(link)
}

/// The links' directory: private to this user, or refused.
fn links_dir() -> std::io::Result<PathBuf> {
    // SAFETY: getuid(2) cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = LINKS.get_or_init(|| std::env::temp_dir().join(format!("roam-{uid}-long-names")));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let md = std::fs::symlink_metadata(dir)?;
    if !md.is_dir() || md.uid() != uid || md.permissions().mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a private directory of this user",
            dir.display()
        )));
    }
    Ok(dir.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_stay_as_they_are() {
        assert_eq!(spell(Path::new("/tmp/x")), Path::new("/tmp/x"));
    }

    /// A tree 25 directories of 200 bytes deep: every name in it is reached through
    /// links the kernel takes, and a file made there is the file at the long name; a
    /// symlink last in a name is not followed.
    #[test]
    fn long_names_reach_the_same_files() {
        let root = std::env::temp_dir().join(format!("roam-short-test-{}", std::process::id()));
        keep_links_in(root.join("links"));
        let mut deep = root.join("tree");
        std::fs::create_dir_all(&deep).unwrap();
        let n = "n".repeat(200);
        for _ in 0..25 {
            deep.push(&n);
            let spelled = spell(&deep);
            assert!(spelled.as_os_str().len() <= LONGEST_NAME);
            std::fs::create_dir(&spelled).unwrap();
        }
        let file = deep.join("f");
        assert!(file.as_os_str().len() > 5000);
        std::fs::write(spell(&file), b"deep").unwrap();
        let link = deep.join("l");
        std::os::unix::fs::symlink("f", spell(&link)).unwrap();
        let md = std::fs::symlink_metadata(spell(&link)).unwrap();
        assert!(md.file_type().is_symlink());
        // Walked one directory at a time (in a child: this process's cwd is every
        // test's), the same file.
        let walk = format!(
            "import os\nfor i in range(25): os.chdir('{n}')\nprint(open('f').read(), end='')"
        );
        let o = std::process::Command::new("python3")
            .args(["-c", &walk])
            .current_dir(root.join("tree"))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&o.stdout), "deep", "{o:?}");
        let _ = std::process::Command::new("rm")
            .arg("-rf")
            .arg(&root)
            .status();
    }
}
