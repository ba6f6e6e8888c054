//! A counting gate: at most N holders at once, the others wait. The wasm technology draws
//! its instances from a fixed pool of slots; a call that found every slot taken would fail,
//! so callers beyond the pool's size wait for a slot instead.

use std::sync::{Condvar, Mutex};

pub(crate) struct Gate {
    free: Mutex<usize>,
    freed: Condvar,
}

/// A place held in the gate, given back on drop.
pub(crate) struct Held<'a>(&'a Gate);

impl Gate {
    pub(crate) fn new(places: usize) -> Gate {
        Gate {
            free: Mutex::new(places),
            freed: Condvar::new(),
        }
    }

    /// Waits for a free place and holds it.
    pub(crate) fn enter(&self) -> Held<'_> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
        Held(self)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::Gate;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn never_more_than_its_places_inside() {
        let gate = Gate::new(2);
        let (inside, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..50 {
                        let _held = gate.enter();
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::yield_now();
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(most.load(Ordering::SeqCst), 2);
    }
}
