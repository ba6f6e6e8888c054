//! Signals for threads that wait on roam. A thread whose call a worker serves sits in a
//! ptrace stop, where no signal reaches it: a `kill` (or roam's forwarded SIGTERM) would
//! wait for the server, however long it takes. The kernel interrupts a slow call when a
//! signal arrives that will be handled or will end the process; roam does the same for the
//! calls it serves: such a thread gets `EINTR` at once (as on an NFS mount with `intr`),
//! and the worker's late answer is dropped.

use nix::unistd::Pid;

/// Signals whose default action is to be ignored (SIGCHLD, SIGCONT, SIGURG, SIGWINCH) or
/// to stop (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU): pending uncaught, they interrupt nothing.
/// A ptraced thread queues even ignored signals, so they must be told apart here.
const HARMLESS: u64 = bit(libc::SIGCHLD)
    | bit(libc::SIGCONT)
    | bit(libc::SIGURG)
    | bit(libc::SIGWINCH)
    | bit(libc::SIGSTOP)
    | bit(libc::SIGTSTP)
    | bit(libc::SIGTTIN)
    | bit(libc::SIGTTOU);

const fn bit(sig: i32) -> u64 {
    1 << (sig - 1)
}

/// Whether `tid` has a signal pending that the kernel would interrupt a slow call for:
/// not blocked, and either caught or (by default) ending the process.
pub(super) fn interrupted(tid: Pid) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{tid}/status")) else {
        return false;
    };
    interrupting(&status)
}

/// [`interrupted`] from the text of `/proc/TID/status`.
fn interrupting(status: &str) -> bool {
    let mask = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    let pending = (mask("SigPnd:") | mask("ShdPnd:")) & !mask("SigBlk:") & !mask("SigIgn:");
    let caught = mask("SigCgt:");
    pending & (caught | !HARMLESS) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(pnd: u64, shd: u64, blk: u64, ign: u64, cgt: u64) -> String {
        format!(
            "Name:\tprobe\nSigPnd:\t{pnd:016x}\nShdPnd:\t{shd:016x}\nSigBlk:\t{blk:016x}\nSigIgn:\t{ign:016x}\nSigCgt:\t{cgt:016x}\n"
        )
    }

    #[test]
    fn fatal_or_caught_signals_interrupt_and_others_do_not() {
        let term = bit(libc::SIGTERM);
        let chld = bit(libc::SIGCHLD);
        assert!(
            interrupting(&status(0, term, 0, 0, 0)),
            "SIGTERM, default action"
        );
        assert!(
            interrupting(&status(term, 0, 0, 0, 0)),
            "sent to the thread"
        );
        assert!(!interrupting(&status(0, term, term, 0, 0)), "blocked");
        assert!(!interrupting(&status(0, term, 0, term, 0)), "ignored");
        assert!(
            !interrupting(&status(chld, 0, 0, 0, 0)),
            "SIGCHLD, uncaught"
        );
        assert!(
            interrupting(&status(chld, 0, 0, 0, chld)),
            "SIGCHLD, caught"
        );
        assert!(
            !interrupting(&status(0, bit(libc::SIGTSTP), 0, 0, 0)),
            "a stop"
        );
        assert!(!interrupting(&status(0, 0, 0, 0, 0)));
    }
}
