//! roam's own command line, with the passwords in it hidden from `ps`: a mount URL such as
//! `-m /x=ftp://u:pw@h/` or a name such as `/dav/u:pw@h/f` would otherwise be readable in
//! `/proc/PID/cmdline` by every user of the machine for as long as roam runs.
//!
//! The arguments are read first (and kept, for `roam mount` starting itself again); then
//! the password bytes of the argv strings themselves, the memory the kernel shows as
//! `/proc/self/cmdline`, are overwritten with `*`.

use std::ffi::OsString;
use std::sync::OnceLock;

static ORIGINAL: OnceLock<Vec<OsString>> = OnceLock::new();

/// The arguments roam was started with, passwords included: read once, before
/// [`hide_passwords`] masks them.
pub fn original() -> &'static [OsString] {
    ORIGINAL.get_or_init(|| std::env::args_os().collect())
}

/// Overwrites each password in roam's argv with `*`. Best effort: where the kernel does not
/// say where argv is, a warning says that `ps` may show them.
pub fn hide_passwords() {
    original();
    match argv_range() {
        // SAFETY: [start, end) is this process's argument area, as the kernel reports it
        // (the initial stack, mapped read-write for the whole life of the process). Nothing
        // else holds a Rust reference into it: std copies argv when asked for it, and
        // `original` has copied it already.
        Some((start, end)) => roam_drivers::secrets::mask(unsafe {
            std::slice::from_raw_parts_mut(start as *mut u8, end - start)
        }),
        None => tracing::warn!("cannot find roam's argv: `ps` may show passwords written in it"),
    }
}

/// `arg_start` and `arg_end` of `/proc/self/stat` (fields 48 and 49, Linux 3.5 and later).
fn argv_range() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which may hold spaces and parentheses: field 3 on.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(48 - 3);
    let start = fields.next()?.parse().ok()?;
    let end = fields.next()?.parse().ok()?;
    (start != 0 && start < end).then_some((start, end))
}
