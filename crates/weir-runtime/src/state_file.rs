//! The task state file, and the shared keyed-state objects of incremental checkpoints.
//!
//! A state file is a magic line, the length of a JSON header (u64, little endian), the
//! header — the snapshot without payloads, the size of every payload and, for payloads
//! kept in the job's shared folder, the name of their object — then the raw bytes of the
//! payloads stored inline, in order (no base64, no escaping; written from the payloads'
//! own buffers and read back as slices of the file).
//!
//! **Incremental checkpoints**: a keyed-state payload (one key group of one operator) of at
//! least [`SHARED_MIN_BYTES`] is named by the XXH3-128 of its bytes and stored once in the
//! job's shared folder, then referenced by every later checkpoint whose snapshot has the
//! same bytes for it: a key group that did not change is not written again. The payloads a
//! task writes for one checkpoint go into one object, `<job>/shared/<checkpoint>-<uuid>`,
//! one after another, and a reference names the payload, its object and its offset there
//! ([`SharedAt`]): a checkpoint makes one object per task, not one per key group, which
//! on S3 is one request instead of hundreds and on a local disk one file to create (q20 at
//! 10M events with 1 s checkpoints created about a thousand files a checkpoint). An object
//! stays while a retained checkpoint refers to any payload in it. A task skips the write
//! only for payloads its own previous snapshot referenced; their objects still exist,
//! because the coordinator deletes a shared object only once no retained checkpoint
//! references it and keeps objects written for aborted checkpoints until the job ends.
//! Reading checks each payload's bytes against its name. Savepoints are always written
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

/// Where a shared payload is: its name (the XXH3-128 of its bytes) and the object of the
/// shared folder holding it from `offset` on. Written `name@object:offset`, or `name` alone
/// for a payload that is an object of its own (as Weir wrote them before it packed them).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SharedAt {
    pub name: String,
    pub object: String,
    pub offset: u64,
}

impl SharedAt {
    /// Reads a reference written by [`SharedAt`]'s `Display`.
    pub fn parse(text: &str) -> Result<Self> {
        let Some((name, at)) = text.split_once('@') else {
            return Ok(Self {
                name: text.to_string(),
                object: text.to_string(),
                offset: 0,
            });
        };
        let (object, offset) = at
            .rsplit_once(':')
            .and_then(|(o, off)| Some((o, off.parse().ok()?)))
            .ok_or_else(|| {
                Error::CorruptCheckpoint(format!("'{text}' is not a shared state reference"))
            })?;
        Ok(Self {
            name: name.to_string(),
            object: object.to_string(),
            offset,
        })
    }

    /// The object a written reference points into (`text` as in [`SharedAt::parse`]).
    pub fn object_of(text: &str) -> &str {
        match text.split_once('@') {
            Some((_, at)) => at.rsplit_once(':').map_or(at, |(object, _)| object),
            None => text,
        }
    }
}

impl std::fmt::Display for SharedAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.object == self.name && self.offset == 0 {
            return f.write_str(&self.name);
        }
        write!(f, "{}@{}:{}", self.name, self.object, self.offset)
    }
}

/// A payload of a decoded state file that lives in the shared folder: the decoded
/// snapshot holds an empty placeholder at `(state, payload)` until it is fetched.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedRef {
    /// Index among the snapshot's states (source first, if any, then the operators).
    pub state: usize,
    pub payload: usize,
    pub at: SharedAt,
    pub size: u64,
}

impl SharedRef {
    /// The byte range of the payload in its object.
    pub fn range(&self) -> std::ops::Range<u64> {
        self.at.offset..self.at.offset + self.size
    }
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
    /// In the job's shared folder.
    Shared(SharedAt),
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
                Some(reference) => PayloadAt::Shared(SharedAt::parse(&reference)?),
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
            PayloadAt::Shared(at) => refs.push(SharedRef {
                state: place.state,
                payload: place.payload,
                at,
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
    if size != r.size || name != r.at.name {
        return Err(Error::CorruptCheckpoint(format!(
            "shared state '{}' (in object '{}' at {}) holds {size} bytes that do not match its name (expected {} bytes)",
            r.at.name, r.at.object, r.at.offset, r.size
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
    fn shared_references_round_trip_and_name_their_object() {
        let packed = SharedAt {
            name: "ab12".into(),
            object: "7-0f3e".into(),
            offset: 4096,
        };
        assert_eq!(packed.to_string(), "ab12@7-0f3e:4096");
        assert_eq!(SharedAt::parse("ab12@7-0f3e:4096").unwrap(), packed);
        assert_eq!(SharedAt::object_of("ab12@7-0f3e:4096"), "7-0f3e");
        // A payload stored as an object of its own, as older checkpoints did.
        let alone = SharedAt::parse("ab12").unwrap();
        assert_eq!((alone.object.as_str(), alone.offset), ("ab12", 0));
        assert_eq!(alone.to_string(), "ab12");
        assert_eq!(SharedAt::object_of("ab12"), "ab12");
        let err = SharedAt::parse("ab12@7-0f3e:x").unwrap_err();
        assert!(
            err.to_string().contains("not a shared state reference"),
            "{err}"
        );
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
