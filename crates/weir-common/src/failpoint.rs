//! Crash points for the crash-test harness.
//!
//! `WEIR_FAILPOINTS="name=N,other=M"` makes the process abort (like a SIGKILL: no
//! destructor, no flush) the `N`-th time execution passes `failpoint("name")`;
//! `name=fail:N` instead makes that pass return an error (a task failure the job's
//! restart strategy handles; later passes succeed).
//! `name=sleep:MS` instead slows every pass of `failpoint_delay("name")` down by `MS`
//! milliseconds, so that a small test job is still running when a later crash point is
//! reached. The variable is meant for tests only; without it a failpoint costs one atomic
//! load.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

enum Action {
    /// Abort when the countdown reaches zero.
    Abort(u64),
    /// Fail (once) when the countdown reaches zero.
    Fail(u64),
    /// Delay every pass.
    Sleep(Duration),
}

fn armed() -> &'static Option<Mutex<HashMap<String, Action>>> {
    static ARMED: OnceLock<Option<Mutex<HashMap<String, Action>>>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let spec = std::env::var("WEIR_FAILPOINTS").ok()?;
        let map = spec
            .split(',')
            .filter_map(|p| {
                let (name, action) = p.split_once('=')?;
                let action = action.trim();
                let action = if let Some(ms) = action.strip_prefix("sleep:") {
                    Action::Sleep(Duration::from_millis(ms.parse().ok()?))
                } else if let Some(n) = action.strip_prefix("fail:") {
                    Action::Fail(n.parse().ok()?)
                } else {
                    Action::Abort(action.parse().ok()?)
                };
                Some((name.trim().to_string(), action))
            })
            .collect();
        Some(Mutex::new(map))
    })
}

/// Aborts the process, or fails, if the failpoint `name` is armed and its countdown
/// reaches zero.
pub fn failpoint(name: &str) -> crate::Result<()> {
    let Some(points) = armed() else {
        return Ok(());
    };
    let mut points = points.lock().unwrap_or_else(|e| e.into_inner());
    match points.get_mut(name) {
        Some(Action::Abort(n)) => {
            *n = n.saturating_sub(1);
            if *n == 0 {
                eprintln!("weir: failpoint '{name}' reached: aborting the process");
                std::process::abort();
            }
        }
        Some(Action::Fail(n)) if *n > 0 => {
            *n -= 1;
            if *n == 0 {
                return Err(crate::Error::External(format!(
                    "failpoint '{name}' injected a failure"
                )));
            }
        }
        _ => {}
    }
    Ok(())
}

/// How long the caller should wait at the delay point `name` (`name=sleep:MS`); the
/// caller sleeps on its own runtime so that no worker thread is blocked.
pub fn failpoint_delay(name: &str) -> Option<Duration> {
    let points = armed().as_ref()?;
    let points = points.lock().unwrap_or_else(|e| e.into_inner());
    match points.get(name) {
        Some(Action::Sleep(d)) => Some(*d),
        _ => None,
    }
}
