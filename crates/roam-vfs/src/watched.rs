//! A value some threads change and others wait on until it says what they wait for, or a
//! deadline passes: the counts the end of a run waits on (deliveries running here, a
//! frontend's open files and releases being served).

use std::sync::{Condvar, Mutex};
use std::time::Instant;

#[derive(Default)]
pub struct Watched<T> {
    value: Mutex<T>,
    changed: Condvar,
}

impl<T> Watched<T> {
    /// Changes the value and wakes whoever waits on it.
    pub fn update(&self, change: impl FnOnce(&mut T)) {
        change(&mut self.value.lock().unwrap());
        self.changed.notify_all();
    }

    /// What `read` makes of the value now.
    pub fn get<R>(&self, read: impl FnOnce(&T) -> R) -> R {
        read(&self.value.lock().unwrap())
    }

    /// Waits until `done` holds of the value, or `deadline`; whether it holds.
    pub fn wait_until(&self, deadline: Instant, done: impl Fn(&T) -> bool) -> bool {
        let mut value = self.value.lock().unwrap();
        loop {
            if done(&value) {
                return true;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return false;
            };
            value = self.changed.wait_timeout(value, left).unwrap().0;
        }
    }
}
