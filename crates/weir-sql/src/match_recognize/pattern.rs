//! A `MATCH_RECOGNIZE` pattern as the automaton Flink's CEP library builds for it.
//!
//! Flink translates `PATTERN (A B+ C?)` into a CEP pattern of strictly consecutive
//! variables (`begin(A).next(B).oneOrMore().consecutive().greedy()…`) and compiles that into
//! an NFA whose states have TAKE edges (consume the row when the variable's condition
//! holds) and PROCEED edges (move on without consuming). Weir builds the same states so
//! that matches, their order and which ones a skip strategy keeps are Flink's:
//!
//! * `A` — one state: TAKE to the next.
//! * `A?` — one state: TAKE to the next, PROCEED to the next (both branches: Flink's
//!   optional variables are not greedy).
//! * `A{n}` — n states in a row.
//! * `A+`, `A*`, `A{n,}` — n states, the last one looping (TAKE to itself, PROCEED to the
//!   next); greedy, the PROCEED only holds when the row does not satisfy `A` itself.
//!   `A*` (and `{0,…}`) may skip the variable altogether.
//! * `A{n,m}` — n required states, then m − n optional ones.
//!
//! A `?` after a quantifier makes it reluctant: its PROCEED holds always, both branches.

use sqlparser::ast::{MatchRecognizePattern, MatchRecognizeSymbol, RepetitionQuantifier};
use weir_common::{Error, Result};

/// The target of an edge that completes a match.
pub const FINAL: usize = usize::MAX;

/// One variable of the pattern with its quantifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    /// Index into the program's variables.
    pub var: usize,
    pub min: u32,
    /// `None`: unbounded.
    pub max: Option<u32>,
    pub greedy: bool,
}

/// An edge of a state: TAKE consumes the row (when the state's variable holds for it),
/// PROCEED moves on to `target` and tries its edges with the same row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    Take {
        target: usize,
    },
    /// `unless_taken`: a greedy loop proceeds only when its own variable does not hold.
    Proceed {
        target: usize,
        unless_taken: bool,
    },
}

#[derive(Debug, Clone)]
pub struct State {
    /// The variable rows taken here are mapped to.
    pub var: usize,
    pub edges: Vec<Edge>,
}

#[derive(Debug, Clone)]
pub struct Nfa {
    pub states: Vec<State>,
    pub start: usize,
}

impl Nfa {
    /// Builds the states from the last element to the first, as Flink's `NFACompiler`
    /// does.
    pub fn compile(elements: &[Element]) -> Nfa {
        let mut states: Vec<State> = Vec::new();
        fn add(states: &mut Vec<State>, state: State) -> usize {
            states.push(state);
            states.len() - 1
        }
        let mut sink = FINAL;
        for e in elements.iter().rev() {
            let optional = e.min == 0;
            let from = e.min.max(1);
            let proceed = |target| Edge::Proceed {
                target,
                unless_taken: e.greedy,
            };
            let single = |take: usize, proceed_to: Option<usize>| State {
                var: e.var,
                edges: std::iter::once(Edge::Take { target: take })
                    .chain(proceed_to.map(proceed))
                    .collect(),
            };
            let mut last = match e.max {
                // The loop: PROCEED first, then TAKE to itself (Flink's edge order).
                None => {
                    let looping = add(
                        &mut states,
                        State {
                            var: e.var,
                            edges: vec![proceed(sink)],
                        },
                    );
                    states[looping].edges.push(Edge::Take { target: looping });
                    looping
                }
                Some(_) => sink,
            };
            if let Some(max) = e.max {
                for _ in from..max {
                    last = add(&mut states, single(last, Some(sink)));
                }
            }
            for _ in 0..from.saturating_sub(1) {
                last = add(&mut states, single(last, None));
            }
            sink = add(&mut states, single(last, optional.then_some(sink)));
        }
        Nfa {
            states,
            start: sink,
        }
    }
}

/// The pattern's elements in order, with Flink's checks: variables in sequence only (no
/// alternation, groups, `PERMUTE` or anchors), no reluctant `??`, no greedy quantifier at
/// the end.
pub fn elements(
    pattern: &MatchRecognizePattern,
    var_of: &mut dyn FnMut(&str) -> usize,
) -> Result<Vec<Element>> {
    let parts: Vec<&MatchRecognizePattern> = match pattern {
        MatchRecognizePattern::Concat(parts) => parts.iter().collect(),
        other => vec![other],
    };
    let mut out = Vec::new();
    for part in parts {
        out.push(element(part, var_of)?);
    }
    if let Some(last) = out.last()
        && last.greedy
        && last.max != Some(last.min)
        && !(last.min == 0 && last.max == Some(1))
    {
        return Err(Error::plan(
            "MATCH_RECOGNIZE: greedy quantifiers are not allowed as the last element of a pattern \
             (as in Flink); finish the pattern with a simple variable or a reluctant quantifier (B+?)",
        ));
    }
    if out.iter().all(|e| e.min == 0) {
        return Err(Error::plan(
            "MATCH_RECOGNIZE: patterns that can produce empty matches are not supported; \
             there must be at least one non-optional variable",
        ));
    }
    Ok(out)
}

fn element(part: &MatchRecognizePattern, var_of: &mut dyn FnMut(&str) -> usize) -> Result<Element> {
    let unsupported = |what: &str| {
        Error::plan(format!(
            "MATCH_RECOGNIZE: {what} in PATTERN is not supported (as in Flink): '{part}'"
        ))
    };
    let (inner, quantifier, reluctant) = match part {
        MatchRecognizePattern::Repetition(inner, RepetitionQuantifier::AtMostOne) => {
            match inner.as_ref() {
                // `B+?`: the `?` makes the quantifier before it reluctant.
                MatchRecognizePattern::Repetition(symbol, q) => (symbol.as_ref(), Some(q), true),
                symbol => (symbol, Some(&RepetitionQuantifier::AtMostOne), false),
            }
        }
        MatchRecognizePattern::Repetition(inner, q) => (inner.as_ref(), Some(q), false),
        symbol => (symbol, None, false),
    };
    let var = match inner {
        MatchRecognizePattern::Symbol(MatchRecognizeSymbol::Named(name)) => var_of(&name.value),
        MatchRecognizePattern::Symbol(_) => return Err(unsupported("an anchor (^ or $)")),
        MatchRecognizePattern::Group(_) => return Err(unsupported("a group")),
        MatchRecognizePattern::Alternation(_) => return Err(unsupported("an alternation")),
        MatchRecognizePattern::Permute(_) => return Err(unsupported("PERMUTE")),
        MatchRecognizePattern::Exclude(_) => return Err(unsupported("an exclusion {- … -}")),
        MatchRecognizePattern::Repetition(..) | MatchRecognizePattern::Concat(_) => {
            return Err(unsupported("a nested quantifier"));
        }
    };
    let (min, max) = match quantifier {
        None => (1, Some(1)),
        Some(RepetitionQuantifier::ZeroOrMore) => (0, None),
        Some(RepetitionQuantifier::OneOrMore) => (1, None),
        Some(RepetitionQuantifier::AtMostOne) => (0, Some(1)),
        Some(RepetitionQuantifier::Exactly(n)) => (*n, Some(*n)),
        Some(RepetitionQuantifier::AtLeast(n)) => (*n, None),
        Some(RepetitionQuantifier::AtMost(m)) => (0, Some(*m)),
        Some(RepetitionQuantifier::Range(n, m)) => (*n, Some(*m)),
    };
    if max == Some(0) || max.is_some_and(|m| m < min) {
        return Err(unsupported("an empty or inverted range"));
    }
    if reluctant && min == 0 && max == Some(1) {
        return Err(Error::plan(
            "MATCH_RECOGNIZE: reluctant optional variables (A??) are not supported yet (as in Flink)",
        ));
    }
    // Flink: `?` and `{n}` are never greedy; other quantifiers are unless reluctant.
    let greedy = !reluctant && max != Some(min) && !(min == 0 && max == Some(1));
    Ok(Element {
        var,
        min,
        max,
        greedy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nfa(elements: &[(usize, u32, Option<u32>, bool)]) -> Nfa {
        let elements: Vec<Element> = elements
            .iter()
            .map(|(var, min, max, greedy)| Element {
                var: *var,
                min: *min,
                max: *max,
                greedy: *greedy,
            })
            .collect();
        Nfa::compile(&elements)
    }

    #[test]
    fn a_loop_takes_itself_and_proceeds() {
        // A B+ C
        let n = nfa(&[
            (0, 1, Some(1), false),
            (1, 1, None, true),
            (2, 1, Some(1), false),
        ]);
        let c = &n.states[0];
        assert_eq!(c.edges, vec![Edge::Take { target: FINAL }]);
        let looping = &n.states[1];
        assert_eq!(
            looping.edges,
            vec![
                Edge::Proceed {
                    target: 0,
                    unless_taken: true
                },
                Edge::Take { target: 1 }
            ]
        );
        assert_eq!(n.states[2].edges, vec![Edge::Take { target: 1 }]);
        assert_eq!(n.states[3].edges, vec![Edge::Take { target: 2 }]);
        assert_eq!(n.start, 3);
    }

    #[test]
    fn ranges_have_required_then_optional_states() {
        // A{2,3}
        let n = nfa(&[(0, 2, Some(3), true)]);
        // optional third, second, head
        assert_eq!(
            n.states[0].edges,
            vec![
                Edge::Take { target: FINAL },
                Edge::Proceed {
                    target: FINAL,
                    unless_taken: true
                }
            ]
        );
        assert_eq!(n.states[1].edges, vec![Edge::Take { target: 0 }]);
        assert_eq!(n.states[2].edges, vec![Edge::Take { target: 1 }]);
        assert_eq!(n.start, 2);
    }
}
