//! Fatal signals for threads that wait on roam. A thread whose call a worker serves sits in
//! a ptrace stop, where no signal reaches it: a `kill` (or roam's forwarded SIGTERM) would
//! wait for the server, however long it takes. As for a call on NFS (which sleeps
//! `TASK_KILLABLE`), a signal that will end the process ends the wait: such a thread's
//! call is failed with `EINTR` at once, the signal then ends the process, and the worker's
//! late answer is dropped. A signal the program catches waits for the answer, so no
//! program sees an `EINTR` that a local file would never give.

use nix::unistd::Pid;

/// Signals whose default action is to be ignored (SIGCHLD, SIGCONT, SIGURG, SIGWINCH) or
/// to stop (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU): they end nothing. A ptraced thread queues
/// even ignored signals, so they must be told apart here.
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

/// Whether `tid` has a signal pending that will end its process: not blocked, ignored or
/// caught, and ending the process by default.
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
    let spared = mask("SigBlk:") | mask("SigIgn:") | mask("SigCgt:") | HARMLESS;
    (mask("SigPnd:") | mask("ShdPnd:")) & !spared != 0
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
    fn only_signals_that_end_the_process_interrupt() {
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
            !interrupting(&status(chld, 0, 0, 0, chld)),
            "SIGCHLD, caught"
        );
        assert!(
            !interrupting(&status(0, term, 0, 0, term)),
            "SIGTERM, caught"
        );
        assert!(
            !interrupting(&status(0, bit(libc::SIGTSTP), 0, 0, 0)),
            "a stop"
        );
        assert!(!interrupting(&status(0, 0, 0, 0, 0)));
    }
}
