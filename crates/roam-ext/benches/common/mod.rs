//! What the extension benches share: timing.

use std::time::{Duration, Instant};

/// Median of `rounds` timings of `n` runs of `f`, per run.
pub fn per_call(n: usize, rounds: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            (0..n).for_each(|_| f());
            t.elapsed() / n as u32
        })
        .collect();
    times.sort();
    times[rounds / 2]
}
