//! The progress line: when roam's standard error is a terminal (and not `roam -q`), a
//! transfer that has taken longer than a second shows as one line, redrawn in place —
//! name, bytes, rate, time left — and cleared when no transfer is left. A program under
//! `roam run` may share the terminal: roam draws only on its own stderr, one line that it
//! rewrites from its start and clears, and never when stderr is a pipe or a file.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use roam_vfs::{Direction, Transfer};

/// A transfer shows once it has run this long.
const AFTER: Duration = Duration::from_secs(1);

static QUIET: AtomicBool = AtomicBool::new(false);

/// `roam -q`: no progress line.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// The line on the terminal.
pub struct Progress {
    /// Whether a line is drawn now (to clear).
    drawn: bool,
}

impl Progress {
    /// A progress line on stderr, if stderr is a terminal and `-q` was not given.
    pub fn on_stderr() -> Option<Progress> {
        let wanted = std::io::stderr().is_terminal() && !QUIET.load(Ordering::Relaxed);
        wanted.then_some(Progress { drawn: false })
    }

    /// Shows the oldest transfer running for longer than [`AFTER`] (and how many others
    /// run), or clears the line when there is none.
    pub fn show(&mut self, transfers: &[Transfer]) {
        let long: Vec<&Transfer> = transfers
            .iter()
            .filter(|t| t.seconds >= AFTER.as_secs_f64())
            .collect();
        let Some(first) = long.first() else {
            return self.clear();
        };
        let mut line = describe(first);
        if long.len() > 1 {
            line.push_str(&format!("  (+{} more)", long.len() - 1));
        }
        let line = fit(&line, width());
        // From the line's start, then erase what a longer line left.
        self.draw(&format!("\r{line}\x1b[K"));
        self.drawn = true;
    }

    /// Erases the line, if one is drawn.
    pub fn clear(&mut self) {
        if self.drawn {
            self.draw("\r\x1b[K");
            self.drawn = false;
        }
    }

    fn draw(&self, s: &str) {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(roam_vfs::secrets::scrub(s).as_bytes());
        let _ = err.flush();
    }
}

/// `fetching NAME  12.0 MiB / 40.0 MiB  3.1 MiB/s  ETA 9 s`.
fn describe(t: &Transfer) -> String {
    let verb = verb(t.direction);
    let rate = t.bytes as f64 / t.seconds.max(0.001);
    let mut line = format!("roam: {verb} {}  {}", t.name, size(t.bytes as f64));
    if let Some(total) = t.total {
        line.push_str(&format!(" / {}", size(total as f64)));
    }
    line.push_str(&format!("  {}/s", size(rate)));
    if let Some(total) = t.total.filter(|_| rate >= 1.0) {
        let left = total.saturating_sub(t.bytes) as f64 / rate;
        line.push_str(&format!("  ETA {}", duration(left)));
    }
    line
}

/// What a transfer in `direction` is doing, in a word.
pub fn verb(direction: Direction) -> &'static str {
    match direction {
        Direction::Fetch => "fetching",
        Direction::Upload => "uploading",
    }
}

fn size(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{v:.0} B"),
        _ => format!("{v:.1} {}", UNITS[unit]),
    }
}

fn duration(secs: f64) -> String {
    let s = secs.round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// `line` cut to `width` columns (keeping its end, where the numbers are, when a long
/// name must give way), so that it never wraps: a wrapped line cannot be redrawn in place.
fn fit(line: &str, width: usize) -> String {
    let chars: Vec<char> = line.chars().collect();
    let room = width.saturating_sub(1);
    if chars.len() <= room {
        return line.to_owned();
    }
    let keep_end = room.saturating_sub(1) * 2 / 3;
    let keep_start = room.saturating_sub(1) - keep_end;
    let start: String = chars[..keep_start].iter().collect();
    let end: String = chars[chars.len() - keep_end..].iter().collect();
    format!("{start}…{end}")
}

/// The terminal's width on stderr (80 when it does not say).
fn width() -> usize {
    // SAFETY: TIOCGWINSZ fills a winsize; fd 2 is only read.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(2, libc::TIOCGWINSZ, &mut ws) } == 0;
    match ok && ws.ws_col > 0 {
        true => ws.ws_col as usize,
        false => 80,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_tells_name_bytes_rate_and_time_left() {
        let t = Transfer {
            name: "http://h/big".into(),
            direction: Direction::Fetch,
            bytes: 2 << 20,
            total: Some(6 << 20),
            seconds: 2.0,
        };
        assert_eq!(
            describe(&t),
            "roam: fetching http://h/big  2.0 MiB / 6.0 MiB  1.0 MiB/s  ETA 4 s"
        );
    }

    #[test]
    fn long_lines_are_cut_in_the_middle_to_the_width() {
        let line = format!("roam: fetching http://h/{}  1 B/s", "x".repeat(100));
        let cut = fit(&line, 40);
        assert_eq!(cut.chars().count(), 39);
        assert!(
            cut.starts_with("roam: fe") && cut.ends_with("x  1 B/s"),
            "{cut}"
        );
        assert_eq!(fit("short", 40), "short");
    }
}
