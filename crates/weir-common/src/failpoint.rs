//! Crash points for the crash-test harness.
//!
//! `WEIR_FAILPOINTS="name=N,other=M"` makes the process abort (like a SIGKILL: no
//! destructor, no flush) the `N`-th time execution passes `failpoint("name")`. The
//! variable is meant for tests only; without it a failpoint costs one atomic load.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

fn armed() -> &'static Option<Mutex<HashMap<String, u64>>> {
    static ARMED: OnceLock<Option<Mutex<HashMap<String, u64>>>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let spec = std::env::var("WEIR_FAILPOINTS").ok()?;
        let map = spec
            .split(',')
            .filter_map(|p| {
                let (name, n) = p.split_once('=')?;
                Some((name.trim().to_string(), n.trim().parse().ok()?))
            })
            .collect();
        Some(Mutex::new(map))
    })
}

/// Aborts the process if the failpoint `name` is armed and its countdown reaches zero.
pub fn failpoint(name: &str) {
    let Some(points) = armed() else { return };
    let mut points = points.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = points.get_mut(name) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            eprintln!("weir: failpoint '{name}' reached: aborting the process");
            std::process::abort();
        }
    }
}
