//! Pure checkpoint-protocol decisions, kept free of I/O and tokio so they can be tested
//! directly: which tasks a checkpoint triggers and waits for when some tasks have
//! finished (FLIP-147), how restored state is split among subtasks, and whether a graph
//! may be restored from a checkpoint.

use crate::checkpoint::{CheckpointMetadata, OperatorState, StateDistribution, SubtaskStatus};
use crate::graph::{JobGraph, Partitioning};
use weir_common::{Error, Result};

/// A task, identified by vertex index and subtask index.
pub type TaskRef = (usize, usize);

/// Upstream tasks of every task: `upstream[v][s]` lists the tasks feeding `(v, s)`.
/// A forward edge connects subtask `s` to subtask `s` only; every other edge is
/// all-to-all.
pub fn upstream_tasks(graph: &JobGraph) -> Vec<Vec<Vec<TaskRef>>> {
    let mut up: Vec<Vec<Vec<TaskRef>>> = graph
        .vertices
        .iter()
        .map(|v| vec![Vec::new(); v.parallelism])
        .collect();
    for e in &graph.edges {
        let from_p = graph.vertices[e.from].parallelism;
        for (s, list) in up[e.to].iter_mut().enumerate() {
            match e.partitioning {
                Partitioning::Forward => list.push((e.from, s)),
                _ => list.extend((0..from_p).map(|u| (e.from, u))),
            }
        }
    }
    up
}

/// Which tasks a checkpoint must trigger, and which it waits for.
#[derive(Debug, PartialEq, Eq)]
pub struct TriggerPlan {
    /// Running tasks none of whose upstream tasks is still running ("new sources").
    pub trigger: Vec<TaskRef>,
    /// Every running task: each must acknowledge.
    pub wait_for: Vec<TaskRef>,
}

/// The connected part of the job graph each vertex belongs to (vertices joined by an
/// edge in either direction share one), as the smallest vertex index in it.
pub fn pipeline_of(upstream: &[Vec<Vec<TaskRef>>]) -> Vec<usize> {
    let mut part: Vec<usize> = (0..upstream.len()).collect();
    fn root(part: &mut [usize], v: usize) -> usize {
        let mut r = v;
        while part[r] != r {
            r = part[r];
        }
        part[v] = r;
        r
    }
    for (v, subtasks) in upstream.iter().enumerate() {
        for &(u, _) in subtasks.iter().flatten() {
            let (a, b) = (root(&mut part, v), root(&mut part, u));
            part[a.max(b)] = a.min(b);
        }
    }
    (0..upstream.len()).map(|v| root(&mut part, v)).collect()
}

/// Plans a checkpoint given which tasks have closed. `closed[v][s]` is true once task
/// `(v, s)` closed. A task that reached end of data but has not closed is still running
/// here: it takes part in checkpoints until its final one completes.
pub fn plan_trigger(upstream: &[Vec<Vec<TaskRef>>], closed: &[Vec<bool>]) -> TriggerPlan {
    let mut trigger = Vec::new();
    let mut wait_for = Vec::new();
    for (v, subtasks) in upstream.iter().enumerate() {
        for (s, ups) in subtasks.iter().enumerate() {
            if closed[v][s] {
                continue;
            }
            wait_for.push((v, s));
            if ups.iter().all(|&(uv, us)| closed[uv][us]) {
                trigger.push((v, s));
            }
        }
    }
    TriggerPlan { trigger, wait_for }
}

/// Splits the union of old subtasks' states of one operator among `parallelism` new
/// subtasks, following the distribution the operator recorded.
pub fn redistribute(
    states: &[OperatorState],
    parallelism: usize,
    max_parallelism: usize,
) -> Result<Vec<OperatorState>> {
    let distribution = states.first().map(|s| s.distribution).unwrap_or_default();
    let items = states
        .iter()
        .flat_map(|s| s.items.iter().map(move |item| (s, item)));
    let mut out: Vec<OperatorState> = (0..parallelism)
        .map(|_| OperatorState::new(distribution, Vec::new()))
        .collect();
    for (k, (from, item)) in items.enumerate() {
        match distribution {
            StateDistribution::RoundRobin => out[k % parallelism].push_from(from, item),
            StateDistribution::ToFirst => out[0].push_from(from, item),
            StateDistribution::Union => out.iter_mut().for_each(|o| o.push_from(from, item)),
            StateDistribution::KeyGroups => {
                // Every subtask owning one of the item's key groups (one, but for the
                // ranges some operators write whole).
                let groups = weir_state::keyed::item_key_groups(item, max_parallelism)?;
                let owner =
                    |kg| crate::exchange::subtask_for_key_group(kg, parallelism, max_parallelism);
                let owners = owner(*groups.start())..=owner(*groups.end());
                for to in &mut out[owners] {
                    to.push_from(from, item);
                }
            }
        }
    }
    Ok(out)
}

/// True when a checkpoint must be aborted because an operator with union list state is
/// partly closed: some subtasks run while others closed and no longer store their share.
/// Subtasks that finished but are still open store theirs (`FinishedData`), so a
/// checkpoint with only those beside running ones is whole. `subtasks` holds each
/// subtask's status and whether it has union state.
pub fn union_state_blocked(subtasks: &[(SubtaskStatus, bool)]) -> bool {
    let running = subtasks.iter().any(|(s, _)| *s == SubtaskStatus::Running);
    let closed = subtasks.iter().any(|(s, _)| *s == SubtaskStatus::Closed);
    running && closed && subtasks.iter().any(|(_, union)| *union)
}

/// True when finished subtasks of an operator must stay open after a checkpoint: it keeps
/// union list state and part of it still runs.
pub fn union_state_held(subtasks: &[(SubtaskStatus, bool)]) -> bool {
    subtasks.iter().any(|(s, _)| *s == SubtaskStatus::Running)
        && subtasks.iter().any(|(_, union)| *union)
}

/// Checks that `graph` can restore from `meta`: every vertex of the checkpoint that held
/// state exists in the graph, and no vertex that is not fully finished feeds one that is.
pub fn check_restore(graph: &JobGraph, meta: &CheckpointMetadata) -> Result<()> {
    for v in &meta.vertices {
        if !graph.vertices.iter().any(|g| g.uid == v.uid) {
            return Err(Error::Checkpoint(format!(
                "checkpoint {} has state for operator '{}' ({}), which the job no longer contains; \
                 restore it with the same query",
                meta.checkpoint_id, v.name, v.uid
            )));
        }
    }
    let finished = |idx: usize| {
        meta.vertex(&graph.vertices[idx].uid)
            .is_some_and(|v| v.fully_finished())
    };
    for e in &graph.edges {
        if !finished(e.from) && finished(e.to) {
            return Err(Error::Checkpoint(format!(
                "cannot restore: operator '{}' is not finished but feeds '{}', which finished in \
                 checkpoint {}; a finished operator cannot receive new input",
                graph.vertices[e.from].name, graph.vertices[e.to].name, meta.checkpoint_id
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::tests::graph_of;

    #[test]
    fn pipelines_are_the_connected_parts_of_the_graph() {
        // source(2) -> sink(2), and apart from it source(1) -> calc(2) -> sink(1) with a
        // second source(1) joining the calc.
        let g = graph_of(
            &[2, 2, 1, 2, 1, 1],
            &[
                (0, 1, Partitioning::Forward),
                (2, 3, Partitioning::Rebalance),
                (3, 4, Partitioning::Hash(vec![0])),
                (5, 3, Partitioning::Hash(vec![0])),
            ],
        );
        assert_eq!(pipeline_of(&upstream_tasks(&g)), vec![0, 0, 2, 2, 2, 2]);
    }

    #[test]
    fn all_running_triggers_sources_only() {
        // source(2) --hash--> agg(2) --forward--> sink(2)
        let g = graph_of(
            &[2, 2, 2],
            &[
                (0, 1, Partitioning::Hash(vec![0])),
                (1, 2, Partitioning::Forward),
            ],
        );
        let up = upstream_tasks(&g);
        let closed = vec![vec![false; 2]; 3];
        let p = plan_trigger(&up, &closed);
        assert_eq!(p.trigger, vec![(0, 0), (0, 1)]);
        assert_eq!(p.wait_for.len(), 6);
    }

    #[test]
    fn one_running_upstream_disqualifies_all_to_all_vertex() {
        let g = graph_of(
            &[2, 2, 2],
            &[
                (0, 1, Partitioning::Hash(vec![0])),
                (1, 2, Partitioning::Forward),
            ],
        );
        let up = upstream_tasks(&g);
        let closed = vec![vec![true, false], vec![false, false], vec![false, false]];
        let p = plan_trigger(&up, &closed);
        assert_eq!(p.trigger, vec![(0, 1)]);
        assert!(!p.wait_for.contains(&(0, 0)));
    }

    #[test]
    fn forward_edge_looks_at_actual_producer() {
        let g = graph_of(&[2, 2], &[(0, 1, Partitioning::Forward)]);
        let up = upstream_tasks(&g);
        let closed = vec![vec![true, false], vec![false, false]];
        let p = plan_trigger(&up, &closed);
        assert_eq!(p.trigger, vec![(0, 1), (1, 0)]);
        assert_eq!(p.wait_for, vec![(0, 1), (1, 0), (1, 1)]);
    }

    #[test]
    fn union_state_blocks_checkpoints_only_while_partly_closed() {
        use SubtaskStatus::*;
        assert!(union_state_blocked(&[(Running, true), (Closed, false)]));
        // A finished subtask still open stores its share: the checkpoint is whole, and the
        // subtask stays open while its sibling runs.
        assert!(!union_state_blocked(&[
            (Running, false),
            (FinishedData, true)
        ]));
        assert!(union_state_held(&[(Running, false), (FinishedData, true)]));
        assert!(!union_state_held(&[
            (FinishedData, true),
            (FinishedData, true)
        ]));
        assert!(!union_state_held(&[
            (Running, false),
            (FinishedData, false)
        ]));
        assert!(!union_state_blocked(&[(Running, true), (Running, true)]));
        assert!(!union_state_blocked(&[
            (FinishedData, true),
            (Closed, false)
        ]));
        assert!(!union_state_blocked(&[(Running, false), (Closed, false)]));
    }

    #[test]
    fn redistribution_follows_recorded_distribution() {
        let s = |d, n: i64| OperatorState::new(d, vec![serde_json::json!(n)]);
        let rr = redistribute(
            &[
                s(StateDistribution::RoundRobin, 1),
                s(StateDistribution::RoundRobin, 2),
            ],
            3,
            128,
        )
        .unwrap();
        assert_eq!(
            rr.iter().map(|o| o.items.len()).collect::<Vec<_>>(),
            vec![1, 1, 0]
        );
        let first = redistribute(
            &[
                s(StateDistribution::ToFirst, 1),
                s(StateDistribution::ToFirst, 2),
            ],
            2,
            128,
        )
        .unwrap();
        assert_eq!(first[0].items.len(), 2);
        assert!(first[1].items.is_empty());
        let union = redistribute(
            &[
                s(StateDistribution::Union, 1),
                s(StateDistribution::Union, 2),
            ],
            2,
            128,
        )
        .unwrap();
        assert_eq!(union[1].items.len(), 2);
        let kg = |g: u64| {
            OperatorState::new(
                StateDistribution::KeyGroups,
                vec![serde_json::json!({"kg": g})],
            )
        };
        let keyed = redistribute(&[kg(0), kg(127), kg(64)], 2, 128).unwrap();
        assert_eq!(keyed[0].items, vec![serde_json::json!({"kg": 0})]);
        assert_eq!(keyed[1].items.len(), 2);
    }

    #[test]
    fn payloads_move_with_their_items() {
        let state = |groups: &[(u64, &'static str)]| {
            let mut s = OperatorState::new(StateDistribution::KeyGroups, Vec::new());
            for (kg, bytes) in groups {
                let payload = s.add_payload(bytes::Bytes::from_static(bytes.as_bytes()));
                s.items
                    .push(serde_json::json!({"kg": kg, "payload": payload}));
            }
            s
        };
        let old = [state(&[(0, "a0"), (127, "a127")]), state(&[(1, "b1")])];
        let new = redistribute(&old, 2, 128).unwrap();
        let contents = |s: &OperatorState| -> Vec<String> {
            s.items
                .iter()
                .map(|i| String::from_utf8(s.payload(i).unwrap().to_vec()).unwrap())
                .collect()
        };
        assert_eq!(contents(&new[0]), vec!["a0", "b1"]);
        assert_eq!(contents(&new[1]), vec!["a127"]);
        assert_eq!(new[0].payloads.len(), 2);
    }

    mod properties {
        use super::super::redistribute;
        use proptest::prelude::*;
        use weir_state::checkpoint::{OperatorState, StateDistribution};

        /// Old subtasks' keyed states: item `i` is in key group `kgs[i]`, with payload
        /// `i` as bytes, spread over `old` subtasks.
        fn states(kgs: &[usize], old: usize) -> Vec<OperatorState> {
            let mut states: Vec<OperatorState> = (0..old)
                .map(|_| OperatorState::new(StateDistribution::KeyGroups, Vec::new()))
                .collect();
            for (i, kg) in kgs.iter().enumerate() {
                let s = &mut states[i % old];
                let payload = s.add_payload(bytes::Bytes::from(i.to_string()));
                s.items
                    .push(serde_json::json!({ "kg": kg, "payload": payload, "i": i }));
            }
            states
        }

        /// (item number, its payload, subtask) of every item of `states`.
        fn placed(states: &[OperatorState]) -> Vec<(usize, String, usize)> {
            let mut all = Vec::new();
            for (subtask, s) in states.iter().enumerate() {
                for item in &s.items {
                    let payload = String::from_utf8(s.payload(item).unwrap().to_vec()).unwrap();
                    all.push((item["i"].as_u64().unwrap() as usize, payload, subtask));
                }
            }
            all.sort();
            all
        }

        proptest! {
            /// Restoring keyed state at any parallelism hands every item, with its payload,
            /// to exactly one subtask: the one the exchange routes its key group to; and
            /// rescaling twice ends where rescaling once does.
            #[test]
            fn keyed_state_lands_once_on_the_owner_of_its_key_group(
                max in 1usize..=256,
                old in 1usize..=8,
                new in 1usize..=8,
                again in 1usize..=8,
                groups in proptest::collection::vec(any::<usize>(), 0..200),
            ) {
                let (old, new, again) = (old.min(max), new.min(max), again.min(max));
                let kgs: Vec<usize> = groups.iter().map(|g| g % max).collect();
                let restored = redistribute(&states(&kgs, old), new, max).unwrap();
                prop_assert_eq!(restored.len(), new);
                let items = placed(&restored);
                prop_assert_eq!(items.len(), kgs.len());
                for (n, (i, payload, subtask)) in items.iter().enumerate() {
                    prop_assert_eq!(*i, n);
                    prop_assert_eq!(payload, &i.to_string());
                    prop_assert_eq!(
                        *subtask,
                        crate::exchange::subtask_for_key_group(kgs[*i], new, max)
                    );
                }
                let twice = redistribute(&restored, again, max).unwrap();
                let once = redistribute(&states(&kgs, old), again, max).unwrap();
                prop_assert_eq!(placed(&twice), placed(&once));
            }

            /// An item of a range of key groups (a subtask's whole range, as the join
            /// writes it) goes to every subtask owning one of them, and to no other.
            #[test]
            fn a_range_of_key_groups_goes_to_each_owner_of_one(
                max in 1usize..=256,
                old in 1usize..=8,
                new in 1usize..=8,
            ) {
                let (old, new) = (old.min(max), new.min(max));
                let mut states: Vec<OperatorState> = Vec::new();
                for s in 0..old {
                    let range = weir_state::key::key_group_range(s, old, max);
                    let mut state = OperatorState::new(StateDistribution::KeyGroups, Vec::new());
                    let payload = state.add_payload(bytes::Bytes::from(s.to_string()));
                    let mut item = weir_state::keyed::key_groups_fields(range.start, range.end - 1);
                    item["payload"] = payload;
                    state.items.push(item);
                    states.push(state);
                }
                let restored = redistribute(&states, new, max).unwrap();
                for (n, state) in restored.iter().enumerate() {
                    let mine = weir_state::key::key_group_range(n, new, max);
                    let mut got: Vec<String> = state
                        .items
                        .iter()
                        .map(|i| String::from_utf8(state.payload(i).unwrap().to_vec()).unwrap())
                        .collect();
                    got.sort();
                    let mut expected: Vec<String> = (0..old)
                        .filter(|s| {
                            let theirs = weir_state::key::key_group_range(*s, old, max);
                            theirs.start < mine.end && mine.start < theirs.end
                        })
                        .map(|s| s.to_string())
                        .collect();
                    expected.sort();
                    prop_assert_eq!(got, expected);
                }
            }

            /// A key group beyond the job's key groups is a corrupt checkpoint, not a
            /// silent placement.
            #[test]
            fn key_groups_beyond_max_parallelism_are_refused(max in 1usize..=256, over in 0usize..100) {
                let states = states(&[max + over], 1);
                prop_assert!(redistribute(&states, 2, max).is_err());
            }
        }
    }
}
