//! The task state file, and the shared keyed-state objects of incremental checkpoints.
//!
//! A state file is a magic line, the length of a JSON header (u64, little endian), the
//! header — the snapshot without payloads, the size of every payload and, for payloads
//! kept in the job's shared folder, the name of their object — then the raw bytes of the
//! payloads stored inline, in order (no base64, no escaping; written from the payloads'
//! own buffers and read back as slices of the file).
//!
//! **Incremental checkpoints**: a keyed-state payload (one key group of one operator) of at
//! least [`SHARED_MIN_BYTES`] is stored once as `<job>/shared/<name>`, where the name is
//! the XXH3-128 of its bytes, and referenced by every later checkpoint whose snapshot has
//! the same bytes for it: a key group that did not change is not written again. A task
//! skips the write only for objects its own previous snapshot referenced; those still
//! exist, because the coordinator deletes a shared object only once no retained checkpoint
//! references it and keeps objects written for aborted checkpoints until the job ends.
//! Reading checks each object's bytes against its name. Savepoints are always written
//! whole, payloads inline.
//!
//! A payload an operator keeps on local disk ([`weir_state::checkpoint::DiskPayload`]:
//! state larger than memory) comes with its name; it is read from disk only to be
//! uploaded as a new shared object or written inline.

use crate::checkpoint::{OperatorState, StateDistribution, TaskSnapshot};
use bytes::Bytes;
use object_store::PutPayload;
use std::collections::HashMap;
use weir_common::{Error, Result};
use weir_state::checkpoint::DiskPayload;

/// First bytes of a task state file.
const STATE_MAGIC: &[u8] = b"WEIR-TASK-STATE-2\n";

pub use weir_state::checkpoint::{SHARED_MIN_BYTES, shared_name};

/// The JSON part of a task state file: the snapshot without payloads, the sizes of the
/// payloads of each state (source first, if any, then the operators), and the shared
/// object holding each payload that is not inline.
#[derive(serde::Serialize)]
struct HeaderRef<'a> {
    snapshot: &'a TaskSnapshot,
    payloads: Vec<Vec<u64>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    shared: Vec<Vec<Option<String>>>,
}

#[derive(serde::Deserialize)]
struct Header {
    snapshot: TaskSnapshot,
    payloads: Vec<Vec<u64>>,
    #[serde(default)]
    shared: Vec<Vec<Option<String>>>,
}

/// A payload of a decoded state file that lives in the shared folder: the decoded
/// snapshot holds an empty placeholder at `(state, payload)` until it is fetched.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedRef {
    /// Index among the snapshot's states (source first, if any, then the operators).
    pub state: usize,
    pub payload: usize,
    pub name: String,
    pub size: u64,
}

/// Which payloads of `snapshot` go to the shared folder (see the module docs), as the
/// header's `shared` table: `None` for inline payloads.
pub fn plan_shared(snapshot: &TaskSnapshot) -> Vec<Vec<Option<String>>> {
    plan_shared_with(snapshot, &mut SharedNames::default())
}

/// The shared names of the payloads of a task's previous snapshot, by buffer: a payload an
/// operator keeps between snapshots (a join's sealed epochs) is the same `Bytes` again and
/// is not hashed again. The cache holds the buffers it names, so while a name is cached
/// no other bytes can be at its address.
#[derive(Default)]
pub struct SharedNames {
    names: HashMap<(usize, usize), (Bytes, String)>,
}

/// [`plan_shared`], naming payloads `names` knows without hashing them; afterwards
/// `names` holds this snapshot's payloads only.
pub fn plan_shared_with(
    snapshot: &TaskSnapshot,
    names: &mut SharedNames,
) -> Vec<Vec<Option<String>>> {
    let mut next = HashMap::new();
    let plan = snapshot
        .source
        .iter()
        .chain(&snapshot.operators)
        .map(|state| {
            state
                .payloads
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let size = state.payload_len(i);
                    if state.distribution != StateDistribution::KeyGroups
                        || size < SHARED_MIN_BYTES as u64
                    {
                        return None;
                    }
                    // Kept on disk by its operator: named already, never hashed here.
                    if let Some(on_disk) = state.disk_payload(i) {
                        return Some(on_disk.name.clone());
                    }
                    let at = (p.as_ptr() as usize, p.len());
                    let name = match names.names.remove(&at).or_else(|| next.remove(&at)) {
                        Some((_, name)) => name,
                        None => shared_name(p),
                    };
                    next.insert(at, (p.clone(), name.clone()));
                    Some(name)
                })
                .collect()
        })
        .collect();
    names.names = next;
    plan
}

/// Encodes `snapshot` with every payload inline.
pub fn encode_task_state(snapshot: &TaskSnapshot) -> Result<PutPayload> {
    encode_with_shared(snapshot, &[])
}

/// Encodes `snapshot`; payloads named in `shared` (see [`plan_shared`]; empty: none) are
/// left out, to be stored as shared objects.
pub fn encode_with_shared(
    snapshot: &TaskSnapshot,
    shared: &[Vec<Option<String>>],
) -> Result<PutPayload> {
    file_pieces(snapshot, shared)?
        .into_iter()
        .map(Piece::read)
        .collect()
}

/// A piece of a state file to write: bytes, or a payload kept on disk that is read only
/// when its turn comes.
pub enum Piece {
    Bytes(Bytes),
    Disk(DiskPayload),
}

impl Piece {
    pub fn len(&self) -> u64 {
        match self {
            Piece::Bytes(b) => b.len() as u64,
            Piece::Disk(d) => d.size,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn read(self) -> Result<Bytes> {
        match self {
            Piece::Bytes(b) => Ok(b),
            Piece::Disk(d) => d.read(),
        }
    }
}

/// The magic line, header length and header of a state file for `snapshot`, whose
/// states' payloads have `sizes`; `shared` as in [`encode_with_shared`].
pub fn encode_head(
    snapshot: &TaskSnapshot,
    sizes: Vec<Vec<u64>>,
    shared: &[Vec<Option<String>>],
) -> Result<Bytes> {
    let header = serde_json::to_vec(&HeaderRef {
        snapshot,
        payloads: sizes,
        shared: shared.to_vec(),
    })?;
    let mut head = Vec::with_capacity(PREFIX_LEN + header.len());
    head.extend_from_slice(STATE_MAGIC);
    head.extend_from_slice(&(header.len() as u64).to_le_bytes());
    head.extend_from_slice(&header);
    Ok(Bytes::from(head))
}

/// The pieces of `snapshot`'s state file in order (see [`encode_with_shared`]).
pub fn file_pieces(snapshot: &TaskSnapshot, shared: &[Vec<Option<String>>]) -> Result<Vec<Piece>> {
    let states = snapshot.source.iter().chain(&snapshot.operators);
    let sizes = states
        .clone()
        .map(|s| (0..s.payloads.len()).map(|p| s.payload_len(p)).collect())
        .collect();
    let is_shared = |s: usize, p: usize| {
        shared
            .get(s)
            .and_then(|s| s.get(p))
            .is_some_and(|n| n.is_some())
    };
    let mut pieces = vec![Piece::Bytes(encode_head(snapshot, sizes, shared)?)];
    for (s, state) in states.enumerate() {
        for (p, bytes) in state.payloads.iter().enumerate() {
            if is_shared(s, p) {
                continue;
            }
            pieces.push(match state.disk_payload(p) {
                Some(on_disk) => Piece::Disk(on_disk.clone()),
                None => Piece::Bytes(bytes.clone()),
            });
        }
    }
    Ok(pieces)
}

/// Where a payload of a state file is kept.
#[derive(Debug, Clone, PartialEq)]
pub enum PayloadAt {
    /// In the file, `offset` bytes from its start.
    Inline { offset: u64 },
    /// In the job's shared folder, under this name.
    Shared(String),
}

/// One payload of a state file: which state (source first, if any, then the operators)
/// and which of its payloads, its size and where it is.
#[derive(Debug, Clone, PartialEq)]
pub struct PayloadPlace {
    pub state: usize,
    pub payload: usize,
    pub size: u64,
    pub at: PayloadAt,
}

/// A state file's header: the snapshot, every payload an empty placeholder, and where
/// each payload is.
pub struct StateLayout {
    pub snapshot: TaskSnapshot,
    pub places: Vec<PayloadPlace>,
}

/// How many first bytes of a state file [`header_len`] needs.
pub const PREFIX_LEN: usize = STATE_MAGIC.len() + 8;

fn not_a_state_file(what: &str) -> Error {
    Error::Checkpoint(format!("not a Weir task state file: {what}"))
}

/// The length of a state file's magic line, header length and header, from its first
/// [`PREFIX_LEN`] bytes (or more).
pub fn header_len(prefix: &[u8]) -> Result<usize> {
    if !prefix.starts_with(STATE_MAGIC) {
        return Err(not_a_state_file(
            "unknown format (written by an older Weir?)",
        ));
    }
    let len = prefix
        .get(STATE_MAGIC.len()..PREFIX_LEN)
        .ok_or_else(|| not_a_state_file("truncated header"))?;
    let len = u64::from_le_bytes(len.try_into().expect("8 bytes")) as usize;
    PREFIX_LEN
        .checked_add(len)
        .ok_or_else(|| not_a_state_file("truncated header"))
}

/// Decodes the header of a state file from its first [`header_len`] bytes.
pub fn decode_layout(head: &[u8]) -> Result<StateLayout> {
    let end = header_len(head)?;
    let header = head
        .get(PREFIX_LEN..end)
        .ok_or_else(|| not_a_state_file("truncated header"))?;
    let Header {
        mut snapshot,
        payloads,
        shared,
    } = serde_json::from_slice(header)?;
    let mut offset = end as u64;
    let mut places = Vec::new();
    let states = snapshot.source.iter_mut().chain(&mut snapshot.operators);
    for (s, (state, sizes)) in states.zip(payloads).enumerate() {
        for (p, size) in sizes.into_iter().enumerate() {
            state.payloads.push(Bytes::new());
            let at = match shared.get(s).and_then(|s| s.get(p)).cloned().flatten() {
                Some(name) => PayloadAt::Shared(name),
                None => {
                    let at = PayloadAt::Inline { offset };
                    offset = offset
                        .checked_add(size)
                        .ok_or_else(|| not_a_state_file("truncated payload"))?;
                    at
                }
            };
            places.push(PayloadPlace {
                state: s,
                payload: p,
                size,
                at,
            });
        }
    }
    Ok(StateLayout { snapshot, places })
}

/// Reads a file written by [`encode_with_shared`]: inline payloads are slices of `bytes`;
/// shared ones are empty placeholders, listed in the returned references.
pub fn decode_task_state(bytes: Bytes) -> Result<(TaskSnapshot, Vec<SharedRef>)> {
    let head = bytes
        .get(..header_len(&bytes)?.min(bytes.len()))
        .unwrap_or(&bytes);
    place_payloads(decode_layout(head)?, bytes.len() as u64, |state, p, at| {
        state.payloads[p] = bytes.slice(at.start as usize..at.end as usize);
        Ok(())
    })
}

/// The snapshot of `layout`, a file of `len` bytes, with `inline` given each inline
/// payload's state, index and place in the file, and the references to shared ones.
pub fn place_payloads(
    layout: StateLayout,
    len: u64,
    mut inline: impl FnMut(&mut OperatorState, usize, std::ops::Range<u64>) -> Result<()>,
) -> Result<(TaskSnapshot, Vec<SharedRef>)> {
    let StateLayout {
        mut snapshot,
        places,
    } = layout;
    let mut refs = Vec::new();
    for place in places {
        match place.at {
            PayloadAt::Shared(name) => refs.push(SharedRef {
                state: place.state,
                payload: place.payload,
                name,
                size: place.size,
            }),
            PayloadAt::Inline { offset } => {
                // (decode_layout checked that offset + size does not overflow.)
                let at = offset..offset + place.size;
                if at.end > len {
                    return Err(not_a_state_file("truncated payload"));
                }
                inline(snapshot.state_mut(place.state), place.payload, at)?;
            }
        }
    }
    Ok((snapshot, refs))
}

/// Checks the fetched bytes of a shared payload against its reference.
pub fn check_shared(r: &SharedRef, size: u64, name: &str) -> Result<()> {
    if size != r.size || name != r.name {
        return Err(Error::CorruptCheckpoint(format!(
            "shared state object '{}' holds {size} bytes that do not match its name (expected {} bytes)",
            r.name, r.size
        )));
    }
    Ok(())
}

/// Puts the fetched bytes of a shared payload into its placeholder, checking them
/// against the reference.
pub fn fill_shared(snapshot: &mut TaskSnapshot, r: &SharedRef, bytes: Bytes) -> Result<()> {
    check_shared(r, bytes.len() as u64, &shared_name(&bytes))?;
    snapshot.state_mut(r.state).payloads[r.payload] = bytes;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::OperatorState;

    fn snapshot(big: &str) -> TaskSnapshot {
        let mut op = OperatorState::new(StateDistribution::KeyGroups, Vec::new());
        for (kg, text) in [
            (3, "first".to_string()),
            (9, String::new()),
            (11, big.repeat(3000)),
        ] {
            let payload = op.add_payload(Bytes::from(text));
            op.items
                .push(serde_json::json!({"kg": kg, "payload": payload}));
        }
        TaskSnapshot {
            source: Some(OperatorState::new(
                StateDistribution::RoundRobin,
                vec![serde_json::json!({"file": "a", "rows": 7})],
            )),
            operators: vec![OperatorState::default(), op],
        }
    }

    #[test]
    fn task_state_round_trips_with_payloads_and_rejects_truncation() {
        let snapshot = snapshot("xy");
        let file: Bytes = encode_task_state(&snapshot).unwrap().into();
        let (back, refs) = decode_task_state(file.clone()).unwrap();
        assert!(refs.is_empty());
        assert_eq!(back.source, snapshot.source);
        assert_eq!(back.operators, snapshot.operators);
        assert_eq!(back.operators[1].payloads, snapshot.operators[1].payloads);
        let err = decode_task_state(file.slice(..file.len() - 1)).unwrap_err();
        assert!(err.to_string().contains("truncated payload"), "{err}");
        let err = decode_task_state(Bytes::from_static(b"{\"operators\":[]}")).unwrap_err();
        assert!(err.to_string().contains("older Weir"), "{err}");
    }

    #[test]
    fn large_keyed_payloads_are_shared_by_content_and_checked_when_read() {
        let snapshot = snapshot("xy");
        let shared = plan_shared(&snapshot);
        // Only the 6,000-byte key group of the keyed operator is shared.
        let named: Vec<&String> = shared.iter().flatten().flatten().collect();
        assert_eq!(named.len(), 1);
        assert_eq!(plan_shared(&snapshot), shared, "names are the content's");
        assert_ne!(plan_shared(&self::snapshot("yz")), shared);
        // Cached names: the same buffers are named alike; other bytes get their own name.
        let mut names = SharedNames::default();
        assert_eq!(plan_shared_with(&snapshot, &mut names), shared);
        assert_eq!(plan_shared_with(&snapshot, &mut names), shared);
        assert_eq!(
            plan_shared_with(&self::snapshot("yz"), &mut names),
            plan_shared(&self::snapshot("yz"))
        );
        let file: Bytes = encode_with_shared(&snapshot, &shared).unwrap().into();
        assert!(file.len() < 1000, "the shared payload is not in the file");
        let (mut back, refs) = decode_task_state(file).unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!((refs[0].state, refs[0].payload), (2, 2));
        let wrong = fill_shared(
            &mut back,
            &refs[0],
            Bytes::from("xy".repeat(2000 - 1) + "yx"),
        );
        assert!(
            wrong
                .unwrap_err()
                .to_string()
                .contains("do not match its name")
        );
        let bytes = snapshot.operators[1].payloads[2].clone();
        fill_shared(&mut back, &refs[0], bytes).unwrap();
        assert_eq!(back.operators, snapshot.operators);
    }
}
