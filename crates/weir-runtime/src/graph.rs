//! The job graph: vertices (a source and/or a chain of operators, with a parallelism)
//! joined by edges that say how records are partitioned.

use crate::operator::OperatorFactory;
use crate::source::SourceFactory;
use std::fmt::Write;
use std::sync::Arc;

/// How the records of an edge are distributed over the downstream subtasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partitioning {
    /// Subtask `i` sends to subtask `i` (both sides have the same parallelism).
    Forward,
    /// By the hash of these columns, through key groups.
    Hash(Vec<usize>),
    /// Round-robin, one batch at a time.
    Rebalance,
    /// Every record to every subtask.
    Broadcast,
}

impl Partitioning {
    pub fn label(&self) -> String {
        match self {
            Partitioning::Forward => "FORWARD".into(),
            Partitioning::Hash(cols) => format!("HASH{cols:?}"),
            Partitioning::Rebalance => "REBALANCE".into(),
            Partitioning::Broadcast => "BROADCAST".into(),
        }
    }
}

/// One vertex: optionally a source, then operators chained in order.
#[derive(Clone)]
pub struct Vertex {
    /// Stable identity across runs of the same query; checkpoints are matched by it.
    pub uid: String,
    pub name: String,
    pub parallelism: usize,
    pub source: Option<Arc<dyn SourceFactory>>,
    pub operators: Vec<Arc<dyn OperatorFactory>>,
}

/// An edge from the output of `from` into input number `input` of `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub from: usize,
    pub to: usize,
    pub partitioning: Partitioning,
    pub input: usize,
}

/// A job: vertices in topological order and the edges between them.
#[derive(Clone, Default)]
pub struct JobGraph {
    pub vertices: Vec<Vertex>,
    pub edges: Vec<Edge>,
    /// What identifies the job beyond its vertices' uids and names, hashed (the engine
    /// hashes its statements and the definitions of the tables they use); 0 when the
    /// builder of the graph gives none. See [`crate::TaskInfo::job_fingerprint`].
    pub fingerprint: u64,
    /// The budget of the job's keyed state and where it spills, if it has one: a restore
    /// reads large state onto local disk there (see [`crate::state_io`]).
    pub state_memory: Option<Arc<weir_state::spill::StateMemory>>,
}

impl JobGraph {
    pub fn add_vertex(&mut self, vertex: Vertex) -> usize {
        self.vertices.push(vertex);
        self.vertices.len() - 1
    }

    pub fn connect(&mut self, from: usize, to: usize, partitioning: Partitioning, input: usize) {
        self.edges.push(Edge {
            from,
            to,
            partitioning,
            input,
        });
    }

    pub fn inputs_of(&self, v: usize) -> impl Iterator<Item = &Edge> {
        self.edges.iter().filter(move |e| e.to == v)
    }

    pub fn outputs_of(&self, v: usize) -> impl Iterator<Item = &Edge> {
        self.edges.iter().filter(move |e| e.from == v)
    }

    /// Fuses `a → b` into one vertex when the edge is forward, `a` has no other output,
    /// `b` no other input, and both have the same parallelism (operator chaining).
    pub fn chained(mut self) -> JobGraph {
        loop {
            let candidate = self.edges.iter().position(|e| {
                e.partitioning == Partitioning::Forward
                    && self.outputs_of(e.from).count() == 1
                    && self.inputs_of(e.to).count() == 1
                    && self.vertices[e.from].parallelism == self.vertices[e.to].parallelism
                    && self.vertices[e.to].source.is_none()
            });
            let Some(i) = candidate else { return self };
            let edge = self.edges.remove(i);
            let tail = self.vertices[edge.to].clone();
            let head = &mut self.vertices[edge.from];
            head.uid = format!("{}+{}", head.uid, tail.uid);
            head.name = format!("{} -> {}", head.name, tail.name);
            head.operators.extend(tail.operators);
            // Edges of the tail now start at the head; then drop the tail vertex.
            for e in &mut self.edges {
                if e.from == edge.to {
                    e.from = edge.from;
                }
            }
            self.vertices.remove(edge.to);
            for e in &mut self.edges {
                if e.from > edge.to {
                    e.from -= 1;
                }
                if e.to > edge.to {
                    e.to -= 1;
                }
            }
        }
    }

    /// The graph as EXPLAIN prints it.
    pub fn explain(&self) -> String {
        let mut s = String::new();
        for (i, v) in self.vertices.iter().enumerate() {
            let _ = writeln!(s, "[{i}] {} (parallelism {})", v.name, v.parallelism);
            for e in self.inputs_of(i) {
                let _ = writeln!(s, "    <- [{}] {}", e.from, e.partitioning.label());
            }
        }
        s
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn graph_of(
        parallelism: &[usize],
        edges: &[(usize, usize, Partitioning)],
    ) -> JobGraph {
        let mut g = JobGraph::default();
        for (i, p) in parallelism.iter().enumerate() {
            g.add_vertex(Vertex {
                uid: format!("v{i}"),
                name: format!("v{i}"),
                parallelism: *p,
                source: None,
                operators: vec![],
            });
        }
        for (f, t, p) in edges {
            g.connect(*f, *t, p.clone(), 0);
        }
        g
    }

    #[test]
    fn chaining_fuses_forward_edges_of_equal_parallelism() {
        let g = graph_of(
            &[2, 2, 3, 3],
            &[
                (0, 1, Partitioning::Forward),
                (1, 2, Partitioning::Rebalance),
                (2, 3, Partitioning::Forward),
            ],
        )
        .chained();
        assert_eq!(g.vertices.len(), 2);
        assert_eq!(g.vertices[0].uid, "v0+v1");
        assert_eq!(g.vertices[1].uid, "v2+v3");
        assert_eq!(
            g.edges,
            vec![Edge {
                from: 0,
                to: 1,
                partitioning: Partitioning::Rebalance,
                input: 0
            }]
        );
    }
}
