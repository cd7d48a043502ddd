//! Interleaved splits of a generated sequence, shared by `datagen` and `nexmark`.
//!
//! A fresh start makes one split per subtask: split `k` of `P` produces global indexes
//! `k, k + P, k + 2P, …` and counts how many it produced. The counts are the sources'
//! checkpointed state (round-robin list state), so a restore at any parallelism resumes
//! every split exactly.

use serde::{Deserialize, Serialize};
use weir_common::Result;
use weir_runtime::{OperatorState, StateDistribution, TaskInfo};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Split {
    pub split: u64,
    pub splits: u64,
    /// Indexes this split has produced.
    pub next: u64,
}

impl Split {
    /// This subtask's splits: restored ones, or its own on a fresh start.
    pub fn load(task: &TaskInfo, restored: Option<OperatorState>) -> Result<Vec<Split>> {
        Ok(match restored {
            Some(state) => state
                .items
                .into_iter()
                .map(serde_json::from_value)
                .collect::<Result<_, _>>()?,
            None => vec![Split {
                split: task.subtask as u64,
                splits: task.parallelism as u64,
                next: 0,
            }],
        })
    }

    /// The fraction of all splits that `splits` holds (to share a total rate).
    pub fn share(splits: &[Split]) -> f64 {
        splits.len() as f64 / splits.first().map(|s| s.splits).unwrap_or(1) as f64
    }

    /// Global index of the `i`-th next item.
    pub fn global(&self, i: u64) -> u64 {
        self.split + (self.next + i) * self.splits
    }

    /// Items left before `total` (`None`: unbounded).
    pub fn remaining(&self, total: Option<u64>) -> u64 {
        match total {
            None => u64::MAX,
            Some(total) => {
                let next = self.global(0);
                if next >= total {
                    0
                } else {
                    (total - next).div_ceil(self.splits)
                }
            }
        }
    }

    /// The splits as checkpoint state.
    pub fn snapshot(splits: &[Split]) -> Result<OperatorState> {
        let items = splits
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?;
        Ok(OperatorState::new(StateDistribution::RoundRobin, items))
    }
}

/// SplitMix64: a fast, well-mixed hash of a 64-bit value (the generators' randomness).
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
