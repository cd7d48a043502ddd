//! Restart strategies: whether, and after how long, a failed job restarts from its latest
//! completed checkpoint. Named and shaped as Flink's (`restart-strategy.type` and its
//! `restart-strategy.<type>.*` keys), with Flink's defaults.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

/// What to do when a running job fails.
#[derive(Debug, Clone, PartialEq)]
pub enum RestartStrategy {
    /// The first failure ends the job.
    None,
    /// Up to `attempts` restarts, `delay` apart.
    FixedDelay { attempts: u32, delay: Duration },
    /// Restarts with a growing back-off: `initial_backoff`, times `multiplier` after each
    /// failure, at most `max_backoff`, each spread by ± `jitter` of itself. A job that ran
    /// for `reset_threshold` without failing starts again from `initial_backoff`. More than
    /// `attempts_before_reset` failures without such a reset end the job.
    ExponentialDelay {
        initial_backoff: Duration,
        max_backoff: Duration,
        multiplier: f64,
        reset_threshold: Duration,
        jitter: f64,
        attempts_before_reset: u32,
    },
    /// Restarts `delay` after a failure unless more than `max_failures` happened within
    /// `interval`.
    FailureRate {
        max_failures: u32,
        interval: Duration,
        delay: Duration,
    },
}

impl fmt::Display for RestartStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestartStrategy::None => write!(f, "none"),
            RestartStrategy::FixedDelay { attempts, delay } => {
                write!(f, "fixed-delay ({attempts} attempts, {delay:?} apart)")
            }
            RestartStrategy::ExponentialDelay {
                attempts_before_reset,
                ..
            } if *attempts_before_reset == u32::MAX => write!(f, "exponential-delay"),
            RestartStrategy::ExponentialDelay {
                attempts_before_reset,
                ..
            } => write!(
                f,
                "exponential-delay ({attempts_before_reset} attempts before a reset)"
            ),
            RestartStrategy::FailureRate {
                max_failures,
                interval,
                ..
            } => write!(
                f,
                "failure-rate (at most {max_failures} failures per {interval:?})"
            ),
        }
    }
}

/// The state of a [`RestartStrategy`] over one job's life.
#[derive(Debug)]
pub struct Backoff {
    strategy: RestartStrategy,
    /// Failures counted against the strategy's limit.
    attempts: u32,
    /// The back-off of the last restart (exponential-delay).
    current: Duration,
    /// When the last restart was made (exponential-delay's reset).
    last_restart: Option<Instant>,
    /// Failures within the interval (failure-rate).
    recent: VecDeque<Instant>,
    /// State of the jitter's pseudo-random numbers.
    seed: u64,
}

impl Backoff {
    pub fn new(strategy: RestartStrategy) -> Self {
        let seed = uuid::Uuid::new_v4().as_u64_pair().0 | 1;
        Self {
            strategy,
            attempts: 0,
            current: Duration::ZERO,
            last_restart: None,
            recent: VecDeque::new(),
            seed,
        }
    }

    pub fn strategy(&self) -> &RestartStrategy {
        &self.strategy
    }

    /// Records a failure at `now`: the delay before the restart, or `None` when the
    /// strategy's limits say the job ends.
    pub fn on_failure(&mut self, now: Instant) -> Option<Duration> {
        match self.strategy.clone() {
            RestartStrategy::None => None,
            RestartStrategy::FixedDelay { attempts, delay } => {
                self.attempts += 1;
                (self.attempts <= attempts).then_some(delay)
            }
            RestartStrategy::ExponentialDelay {
                initial_backoff,
                max_backoff,
                multiplier,
                reset_threshold,
                jitter,
                attempts_before_reset,
            } => {
                let reset = self
                    .last_restart
                    .is_none_or(|at| now.saturating_duration_since(at) >= reset_threshold);
                if reset {
                    self.attempts = 0;
                    self.current = initial_backoff.min(max_backoff);
                } else {
                    self.current = self.current.mul_f64(multiplier).min(max_backoff);
                }
                self.attempts += 1;
                if self.attempts > attempts_before_reset {
                    return None;
                }
                self.last_restart = Some(now);
                Some(self.jittered(self.current, jitter))
            }
            RestartStrategy::FailureRate {
                max_failures,
                interval,
                delay,
            } => {
                while self
                    .recent
                    .front()
                    .is_some_and(|t| now.saturating_duration_since(*t) > interval)
                {
                    self.recent.pop_front();
                }
                self.recent.push_back(now);
                (self.recent.len() <= max_failures as usize).then_some(delay)
            }
        }
    }

    /// `d` moved by a random amount of at most `jitter * d` either way.
    fn jittered(&mut self, d: Duration, jitter: f64) -> Duration {
        if jitter <= 0.0 || d.is_zero() {
            return d;
        }
        // xorshift64: the spread needs no cryptographic quality.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let unit = (self.seed >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
        let factor = 1.0 + jitter * (2.0 * unit - 1.0);
        d.mul_f64(factor.max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn fixed_delay_allows_its_attempts() {
        let mut b = Backoff::new(RestartStrategy::FixedDelay {
            attempts: 2,
            delay: s(1),
        });
        let t = Instant::now();
        assert_eq!(b.on_failure(t), Some(s(1)));
        assert_eq!(b.on_failure(t), Some(s(1)));
        assert_eq!(b.on_failure(t), None);
    }

    #[test]
    fn exponential_delay_grows_caps_and_resets() {
        let mut b = Backoff::new(RestartStrategy::ExponentialDelay {
            initial_backoff: s(1),
            max_backoff: s(5),
            multiplier: 2.0,
            reset_threshold: s(60),
            jitter: 0.0,
            attempts_before_reset: 10,
        });
        let t = Instant::now();
        let delays: Vec<_> = (0..5).map(|i| b.on_failure(t + s(i)).unwrap()).collect();
        assert_eq!(delays, [s(1), s(2), s(4), s(5), s(5)]);
        // A long healthy run starts over.
        assert_eq!(b.on_failure(t + s(200)), Some(s(1)));
    }

    #[test]
    fn exponential_delay_ends_after_its_attempts_and_jitters() {
        let mut b = Backoff::new(RestartStrategy::ExponentialDelay {
            initial_backoff: s(10),
            max_backoff: s(10),
            multiplier: 1.5,
            reset_threshold: s(3600),
            jitter: 0.1,
            attempts_before_reset: 3,
        });
        let t = Instant::now();
        for i in 0..3 {
            let d = b.on_failure(t + s(i)).unwrap();
            assert!(d >= s(9) && d <= s(11), "{d:?}");
        }
        assert_eq!(b.on_failure(t + s(4)), None);
    }

    #[test]
    fn failure_rate_counts_failures_within_the_interval() {
        let mut b = Backoff::new(RestartStrategy::FailureRate {
            max_failures: 2,
            interval: s(60),
            delay: s(1),
        });
        let t = Instant::now();
        assert_eq!(b.on_failure(t), Some(s(1)));
        assert_eq!(b.on_failure(t + s(10)), Some(s(1)));
        assert_eq!(b.on_failure(t + s(20)), None);
        let mut b = Backoff::new(b.strategy().clone());
        assert_eq!(b.on_failure(t), Some(s(1)));
        assert_eq!(b.on_failure(t + s(10)), Some(s(1)));
        assert_eq!(b.on_failure(t + s(100)), Some(s(1)));
    }

    #[test]
    fn none_never_restarts() {
        assert_eq!(
            Backoff::new(RestartStrategy::None).on_failure(Instant::now()),
            None
        );
    }
}
