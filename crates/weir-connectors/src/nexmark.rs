//! `'connector' = 'nexmark'`: the Nexmark auction event stream (people, auctions, bids) of
//! the standard streaming benchmark, with Flink's option names.
//!
//! Event `n` is a person, an auction or a bid by the proportions (1 : 3 : 46 by default);
//! its event time is `base-time + n / first-event.rate`. Every value is a pure function of
//! (`seed`, `n`), generated column by column from a pool of random text, so the stream is
//! deterministic, splits across subtasks (split `k` of `P` produces `k, k + P, …`) and
//! restores from a checkpointed count exactly. The declared schema is matched by column
//! and field name, so the suite's DDL (`event_type`, `person ROW<…>`, `auction ROW<…>`,
//! `bid ROW<…>`) works as written.

use crate::split::{Split, mix};
use arrow::array::{
    Array, ArrayRef, Int32Array, Int64Array, NullBufferBuilder, RecordBatch, StringArray,
    StructArray, TimestampMillisecondArray,
};
use arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Fields, SchemaRef};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use weir_common::{CheckpointId, ConnectorOptions, Error, Result};
use weir_runtime::{OperatorState, Source, SourceFactory, SourcePoll, TaskInfo};

pub const OPTIONS: &[&str] = &[
    "connector",
    "first-event.rate",
    "next-event.rate",
    "events.num",
    "person.proportion",
    "auction.proportion",
    "bid.proportion",
    "max-emit-speed",
    "seed",
    "base-time",
];

const FIRST_ID: i64 = 1000;
const BATCH: u64 = 8192;
/// 2024-01-01T00:00:00Z.
const DEFAULT_BASE_TIME_MS: i64 = 1_704_067_200_000;
const HOT_AUCTION_RATIO: i64 = 100;
const HOT_PEOPLE_RATIO: i64 = 100;
/// Auctions stay open about this long in event time (two "horizons").
const AUCTION_HORIZON_MS: i64 = 10_000;

const FIRST_NAMES: &[&str] = &[
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
const LAST_NAMES: &[&str] = &[
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];
const CITIES: &[&str] = &[
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
const STATES: &[&str] = &["AZ", "CA", "ID", "OR", "WA", "WY"];
const CHANNELS: &[&str] = &["Google", "Facebook", "Baidu", "Apple"];

/// Random lowercase text, sliced for every generated string.
fn pool() -> &'static str {
    static POOL: OnceLock<String> = OnceLock::new();
    POOL.get_or_init(|| {
        let mut s = String::with_capacity(1 << 16);
        let mut h = 0x5EED_u64;
        while s.len() < 1 << 16 {
            h = mix(h);
            s.push((b'a' + (h % 26) as u8) as char);
        }
        s
    })
}

fn text(h: u64, len: usize) -> &'static str {
    let p = pool();
    let start = (h as usize) % (p.len() - len);
    &p[start..start + len]
}

#[derive(Debug, Clone, Copy)]
struct Model {
    person: u64,
    auction: u64,
    bid: u64,
    seed: u64,
    base_ms: i64,
    /// Microseconds of event time between two events.
    delay_us: f64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Person,
    Auction,
    Bid,
}

impl Kind {
    /// The event's `event_type` (0 person, 1 auction, 2 bid).
    fn index(self) -> usize {
        self as usize
    }
}

impl Model {
    fn total(&self) -> u64 {
        self.person + self.auction + self.bid
    }
    /// The events of the kinds `kinds` keeps, out of every `total()`.
    fn kept(&self, kinds: [bool; 3]) -> u64 {
        [self.person, self.auction, self.bid]
            .into_iter()
            .zip(kinds)
            .filter_map(|(share, keep)| keep.then_some(share))
            .sum()
    }
    fn kind(&self, n: u64) -> Kind {
        let r = n % self.total();
        if r < self.person {
            Kind::Person
        } else if r < self.person + self.auction {
            Kind::Auction
        } else {
            Kind::Bid
        }
    }
    fn time(&self, n: u64) -> i64 {
        self.base_ms + (n as f64 * self.delay_us / 1000.0) as i64
    }
    fn person_id(&self, n: u64) -> i64 {
        FIRST_ID + ((n / self.total()) * self.person + n % self.total()) as i64
    }
    fn auction_id(&self, n: u64) -> i64 {
        FIRST_ID + ((n / self.total()) * self.auction + (n % self.total() - self.person)) as i64
    }
    /// Id of the newest person at event `n` (the first one if none yet).
    fn last_person(&self, n: u64) -> i64 {
        let (epoch, r) = (n / self.total(), n % self.total());
        let count = epoch * self.person + (r + 1).min(self.person);
        FIRST_ID + count.max(1) as i64 - 1
    }
    fn last_auction(&self, n: u64) -> i64 {
        let (epoch, r) = (n / self.total(), n % self.total());
        let count = epoch * self.auction + (r + 1).saturating_sub(self.person).min(self.auction);
        FIRST_ID + count.max(1) as i64 - 1
    }
    fn h(&self, n: u64, salt: u64) -> u64 {
        mix(self.seed ^ mix(n.wrapping_mul(31).wrapping_add(salt)))
    }
    /// Log-uniform between 100 and 10^8 cents.
    fn price(&self, n: u64, salt: u64) -> i64 {
        let u = (self.h(n, salt) >> 11) as f64 / (1u64 << 53) as f64;
        (10f64.powf(u * 6.0) * 100.0).round() as i64
    }
    /// Mostly the hot person of the current block, else a recent one.
    fn someone(&self, n: u64, salt: u64) -> i64 {
        let last = self.last_person(n);
        let h = self.h(n, salt);
        if !h.is_multiple_of(4) {
            ((last / HOT_PEOPLE_RATIO) * HOT_PEOPLE_RATIO).max(FIRST_ID)
        } else {
            (last - (h >> 8) as i64 % 1000).max(FIRST_ID)
        }
    }
}

/// Generated columns of one batch, by name.
struct Columns {
    top: HashMap<&'static str, ArrayRef>,
    person: HashMap<&'static str, ArrayRef>,
    auction: HashMap<&'static str, ArrayRef>,
    bid: HashMap<&'static str, ArrayRef>,
    valid: [Option<NullBuffer>; 3],
}

fn generate(m: &Model, events: &[u64], want: [bool; 3]) -> Columns {
    let len = events.len();
    let kinds: Vec<Kind> = events.iter().map(|n| m.kind(*n)).collect();
    let strings = |cap: usize| TextColumn::with_capacity(len, len * cap);
    let (mut p_id, mut p_time) = (IntColumn::with_capacity(len), IntColumn::with_capacity(len));
    let (mut p_name, mut p_email, mut p_card, mut p_city, mut p_state, mut p_extra) = (
        strings(12),
        strings(20),
        strings(19),
        strings(10),
        strings(2),
        strings(140),
    );
    let (mut a_id, mut a_initial, mut a_reserve, mut a_seller, mut a_category) = (
        IntColumn::with_capacity(len),
        IntColumn::with_capacity(len),
        IntColumn::with_capacity(len),
        IntColumn::with_capacity(len),
        IntColumn::with_capacity(len),
    );
    let (mut a_time, mut a_expires) =
        (IntColumn::with_capacity(len), IntColumn::with_capacity(len));
    let (mut a_item, mut a_desc, mut a_extra) = (strings(20), strings(100), strings(330));
    let (mut b_auction, mut b_bidder, mut b_price) = (
        IntColumn::with_capacity(len),
        IntColumn::with_capacity(len),
        IntColumn::with_capacity(len),
    );
    let mut b_time = IntColumn::with_capacity(len);
    let (mut b_channel, mut b_url, mut b_extra) = (strings(10), strings(60), strings(40));
    let mut valid = [
        NullBufferBuilder::new(len),
        NullBufferBuilder::new(len),
        NullBufferBuilder::new(len),
    ];
    let mut event_type = Vec::with_capacity(len);
    let (mut scratch, mut path, mut channel) = (String::new(), String::new(), String::new());
    for (&n, &kind) in events.iter().zip(&kinds) {
        let time = m.time(n);
        event_type.push(kind.index() as i32);
        valid[0].append(kind == Kind::Person);
        valid[1].append(kind == Kind::Auction);
        valid[2].append(kind == Kind::Bid);
        if kind == Kind::Person && want[0] {
            let h = m.h(n, 1);
            let first = FIRST_NAMES[(h % FIRST_NAMES.len() as u64) as usize];
            let last = LAST_NAMES[((h >> 8) % LAST_NAMES.len() as u64) as usize];
            p_id.push(m.person_id(n));
            scratch.clear();
            scratch.push_str(first);
            scratch.push(' ');
            scratch.push_str(last);
            p_name.push(&scratch);
            scratch.clear();
            scratch.push_str(text(h >> 3, 7));
            scratch.push('@');
            scratch.push_str(text(h >> 5, 5));
            scratch.push_str(".com");
            p_email.push(&scratch);
            scratch.clear();
            let digits = m.h(n, 2);
            for g in 0..4 {
                if g > 0 {
                    scratch.push(' ');
                }
                push_padded(&mut scratch, (digits >> (g * 14)) % 10_000, 4);
            }
            p_card.push(&scratch);
            p_city.push(CITIES[((h >> 16) % CITIES.len() as u64) as usize]);
            p_state.push(STATES[((h >> 24) % STATES.len() as u64) as usize]);
            p_time.push(time);
            p_extra.push(text(m.h(n, 3), 140));
        } else {
            p_id.pad();
            p_name.pad();
            p_email.pad();
            p_card.pad();
            p_city.pad();
            p_state.pad();
            p_time.pad();
            p_extra.pad();
        }
        if kind == Kind::Auction && want[1] {
            let h = m.h(n, 4);
            let initial = m.price(n, 5);
            a_id.push(m.auction_id(n));
            a_item.push(text(h, 20));
            a_desc.push(text(h >> 7, 100));
            a_initial.push(initial);
            a_reserve.push(initial + m.price(n, 6));
            a_time.push(time);
            a_expires.push(time + 1 + (h >> 20) as i64 % (2 * AUCTION_HORIZON_MS));
            a_seller.push(m.someone(n, 7));
            a_category.push(10 + (h >> 40) as i64 % 5);
            a_extra.push(text(m.h(n, 8), 330));
        } else {
            a_id.pad();
            a_item.pad();
            a_desc.pad();
            a_initial.pad();
            a_reserve.pad();
            a_time.pad();
            a_expires.pad();
            a_seller.pad();
            a_category.pad();
            a_extra.pad();
        }
        if kind == Kind::Bid && want[2] {
            let h = m.h(n, 9);
            let last = m.last_auction(n);
            let auction = if h.is_multiple_of(2) {
                ((last / HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO).max(FIRST_ID)
            } else {
                (last - (h >> 8) as i64 % 100).max(FIRST_ID)
            };
            b_auction.push(auction);
            b_bidder.push(m.someone(n, 10));
            b_price.push(m.price(n, 11));
            // The URL path, then the channel and URL, without allocating.
            path.clear();
            for (i, shift) in [12, 17, 22].into_iter().enumerate() {
                if i > 0 {
                    path.push('/');
                }
                path.push_str(text(h >> shift, 5));
            }
            scratch.clear();
            scratch.push_str("https://www.nexmark.com/");
            scratch.push_str(&path);
            scratch.push_str("/item.htm?query=1");
            if (h >> 30).is_multiple_of(2) {
                b_channel.push(CHANNELS[((h >> 31) % 4) as usize]);
            } else {
                let id = (h >> 33) % 10_000;
                channel.clear();
                channel.push_str("channel-");
                push_padded(&mut channel, id, 1);
                b_channel.push(&channel);
                if !(h >> 50).is_multiple_of(10) {
                    scratch.push_str("&channel_id=");
                    let digits = channel.len() - "channel-".len();
                    for i in 0..digits {
                        let c = channel.as_bytes()[channel.len() - 1 - i] as char;
                        scratch.push(c);
                    }
                }
            }
            b_url.push(&scratch);
            b_time.push(time);
            b_extra.push(text(m.h(n, 12), 40));
        } else {
            b_auction.pad();
            b_bidder.pad();
            b_price.pad();
            b_channel.pad();
            b_url.pad();
            b_time.pad();
            b_extra.pad();
        }
    }
    let nulls = valid.each_mut().map(|v| v.finish());
    let mut person: HashMap<&'static str, ArrayRef> = HashMap::new();
    let n = &nulls[0];
    person.insert("id", p_id.ints(n));
    person.insert("name", p_name.finish(n));
    person.insert("emailAddress", p_email.finish(n));
    person.insert("creditCard", p_card.finish(n));
    person.insert("city", p_city.finish(n));
    person.insert("state", p_state.finish(n));
    person.insert("dateTime", p_time.times(n));
    person.insert("extra", p_extra.finish(n));
    let mut auction: HashMap<&'static str, ArrayRef> = HashMap::new();
    let n = &nulls[1];
    auction.insert("id", a_id.ints(n));
    auction.insert("itemName", a_item.finish(n));
    auction.insert("description", a_desc.finish(n));
    auction.insert("initialBid", a_initial.ints(n));
    auction.insert("reserve", a_reserve.ints(n));
    auction.insert("dateTime", a_time.times(n));
    auction.insert("expires", a_expires.times(n));
    auction.insert("seller", a_seller.ints(n));
    auction.insert("category", a_category.ints(n));
    auction.insert("extra", a_extra.finish(n));
    let mut bid: HashMap<&'static str, ArrayRef> = HashMap::new();
    let n = &nulls[2];
    bid.insert("auction", b_auction.ints(n));
    bid.insert("bidder", b_bidder.ints(n));
    bid.insert("price", b_price.ints(n));
    bid.insert("channel", b_channel.finish(n));
    bid.insert("url", b_url.finish(n));
    bid.insert("dateTime", b_time.times(n));
    bid.insert("extra", b_extra.finish(n));
    let mut top: HashMap<&'static str, ArrayRef> = HashMap::new();
    top.insert("event_type", Arc::new(Int32Array::from(event_type)));
    Columns {
        top,
        person,
        auction,
        bid,
        valid: nulls,
    }
}

/// Appends `v` in decimal, zero-padded to `width` digits.
fn push_padded(out: &mut String, v: u64, width: usize) {
    let mut digits = [0u8; 20];
    let (mut v, mut n) = (v, 0);
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        v /= 10;
        n += 1;
        if v == 0 {
            break;
        }
    }
    for _ in n..width {
        out.push('0');
    }
    for d in digits[..n].iter().rev() {
        out.push(*d as char);
    }
}

/// A generated integer column of one event kind: values for that kind's rows and
/// placeholders elsewhere; the kind's validity is attached when it is finished (cheaper
/// than tracking nulls row by row).
struct IntColumn(Vec<i64>);

impl IntColumn {
    fn with_capacity(len: usize) -> Self {
        IntColumn(Vec::with_capacity(len))
    }
    fn push(&mut self, v: i64) {
        self.0.push(v);
    }
    fn pad(&mut self) {
        self.0.push(0);
    }
    fn ints(self, nulls: &Option<NullBuffer>) -> ArrayRef {
        Arc::new(Int64Array::new(self.0.into(), nulls.clone()))
    }
    fn times(self, nulls: &Option<NullBuffer>) -> ArrayRef {
        Arc::new(TimestampMillisecondArray::new(self.0.into(), nulls.clone()))
    }
}

/// A generated string column of one event kind (see [`IntColumn`]).
struct TextColumn {
    offsets: Vec<i32>,
    data: Vec<u8>,
}

impl TextColumn {
    fn with_capacity(len: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(len + 1);
        offsets.push(0);
        TextColumn {
            offsets,
            data: Vec::with_capacity(bytes),
        }
    }
    fn push(&mut self, v: &str) {
        self.data.extend_from_slice(v.as_bytes());
        self.offsets.push(self.data.len() as i32);
    }
    fn pad(&mut self) {
        self.offsets.push(self.data.len() as i32);
    }
    fn finish(self, nulls: &Option<NullBuffer>) -> ArrayRef {
        let offsets = OffsetBuffer::new(ScalarBuffer::from(self.offsets));
        Arc::new(StringArray::new(
            offsets,
            Buffer::from_vec(self.data),
            nulls.clone(),
        ))
    }
}

/// Builds the declared struct column `fields` from generated children.
fn build_struct(
    fields: &Fields,
    children: &HashMap<&'static str, ArrayRef>,
    valid: Option<NullBuffer>,
) -> Result<ArrayRef> {
    let arrays = fields
        .iter()
        .map(|f| {
            let a = children
                .get(f.name().as_str())
                .expect("checked at creation");
            if a.data_type() == f.data_type() {
                Ok(a.clone())
            } else {
                Ok(cast(a, f.data_type())?)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let nullable: Fields = fields
        .iter()
        .map(|f| Arc::new(f.as_ref().clone().with_nullable(true)))
        .collect();
    Ok(Arc::new(StructArray::try_new(nullable, arrays, valid)?))
}

fn known_fields(kind: &str) -> &'static [&'static str] {
    match kind {
        "person" => &[
            "id",
            "name",
            "emailAddress",
            "creditCard",
            "city",
            "state",
            "dateTime",
            "extra",
        ],
        "auction" => &[
            "id",
            "itemName",
            "description",
            "initialBid",
            "reserve",
            "dateTime",
            "expires",
            "seller",
            "category",
            "extra",
        ],
        _ => &[
            "auction", "bidder", "price", "channel", "url", "dateTime", "extra",
        ],
    }
}

/// Factory of the nexmark source.
#[derive(Clone)]
pub struct NexmarkSourceFactory {
    schema: SchemaRef,
    model: Model,
    events: Option<u64>,
    rate: Option<f64>,
    /// The kinds of event (person, auction, bid) to generate; the others are left out
    /// (a batch scan's pushed `event_type = k`).
    kinds: [bool; 3],
}

impl NexmarkSourceFactory {
    pub fn new(options: &ConnectorOptions, schema: SchemaRef) -> Result<Self> {
        options.check_known("nexmark", OPTIONS)?;
        let bad = |what: String| Error::config(format!("table '{}': {what}", options.table));
        for f in schema.fields() {
            match (f.name().as_str(), f.data_type()) {
                ("event_type", _) => {}
                (kind @ ("person" | "auction" | "bid"), DataType::Struct(fields)) => {
                    for sub in fields {
                        if !known_fields(kind).contains(&sub.name().as_str()) {
                            return Err(bad(format!(
                                "nexmark {kind} rows have no field '{}' (fields: {})",
                                sub.name(),
                                known_fields(kind).join(", ")
                            )));
                        }
                    }
                }
                (other, _) => {
                    return Err(bad(format!(
                        "nexmark tables have columns event_type INT, person ROW<…>, auction ROW<…>, bid ROW<…>; not '{other}'"
                    )));
                }
            }
        }
        let rate = options.get_f64("first-event.rate")?.unwrap_or(10_000.0);
        if rate <= 0.0 {
            return Err(bad("'first-event.rate' must be positive".into()));
        }
        let next = options.get_f64("next-event.rate")?.unwrap_or(rate);
        if next != rate {
            return Err(bad("'next-event.rate' different from 'first-event.rate' (rate shapes) is not supported".into()));
        }
        let base_ms = match options.get("base-time") {
            None => DEFAULT_BASE_TIME_MS,
            Some(v) => v.trim().parse::<i64>().map_err(|_| {
                bad(format!(
                    "'base-time' = '{v}': expected milliseconds since the epoch"
                ))
            })?,
        };
        let model = Model {
            person: options.get_u64("person.proportion")?.unwrap_or(1),
            auction: options.get_u64("auction.proportion")?.unwrap_or(3),
            bid: options.get_u64("bid.proportion")?.unwrap_or(46),
            seed: options.get_u64("seed")?.unwrap_or(0),
            base_ms,
            delay_us: 1_000_000.0 / rate,
        };
        if model.person == 0 || model.auction == 0 {
            return Err(bad(
                "person.proportion and auction.proportion must be positive".into(),
            ));
        }
        let max_speed = options.get_bool("max-emit-speed")?.unwrap_or(false);
        Ok(Self {
            schema,
            model,
            events: options.get_u64("events.num")?,
            rate: (!max_speed).then_some(rate),
            kinds: [true; 3],
        })
    }
}

impl SourceFactory for NexmarkSourceFactory {
    fn name(&self) -> String {
        match self.events {
            Some(n) => format!("Source: nexmark ({n} events)"),
            None => "Source: nexmark (unbounded)".into(),
        }
    }
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn is_bounded(&self) -> bool {
        self.events.is_some()
    }
    fn estimated_rows(&self) -> Option<u64> {
        let (kept, total) = (self.model.kept(self.kinds), self.model.total());
        Some((self.events? as u128 * kept as u128 / total as u128) as u64)
    }
    fn restricted(&self, column: &str, values: &[i64]) -> Option<Arc<dyn SourceFactory>> {
        if column != "event_type" {
            return None;
        }
        let mut restricted = self.clone();
        for (k, keep) in restricted.kinds.iter_mut().enumerate() {
            *keep &= values.contains(&(k as i64));
        }
        Some(Arc::new(restricted))
    }
    fn create(&self, task: &TaskInfo, restored: Option<OperatorState>) -> Result<Box<dyn Source>> {
        let splits = Split::load(task, restored)?;
        let share = Split::share(&splits);
        Ok(Box::new(NexmarkSource {
            schema: self.schema.clone(),
            model: self.model,
            kinds: self.kinds,
            events: self.events,
            rate: self.rate.map(|r| r * share),
            splits,
            turn: 0,
            started: None,
            emitted: 0,
        }))
    }
}

struct NexmarkSource {
    schema: SchemaRef,
    model: Model,
    kinds: [bool; 3],
    events: Option<u64>,
    rate: Option<f64>,
    splits: Vec<Split>,
    turn: usize,
    started: Option<Instant>,
    emitted: u64,
}

impl NexmarkSource {
    fn batch(&self, s: &Split, rows: u64) -> Result<RecordBatch> {
        let events: Vec<u64> = (0..rows)
            .map(|i| s.global(i))
            .filter(|n| self.kinds[self.model.kind(*n).index()])
            .collect();
        let mut want = ["person", "auction", "bid"].map(|k| self.schema.field_with_name(k).is_ok());
        for (w, keep) in want.iter_mut().zip(self.kinds) {
            *w &= keep;
        }
        let mut c = generate(&self.model, &events, want);
        let valid = std::mem::take(&mut c.valid);
        let columns = self
            .schema
            .fields()
            .iter()
            .map(|f: &Arc<Field>| -> Result<ArrayRef> {
                match (f.name().as_str(), f.data_type()) {
                    ("person", DataType::Struct(fields)) => {
                        build_struct(fields, &c.person, valid[0].clone())
                    }
                    ("auction", DataType::Struct(fields)) => {
                        build_struct(fields, &c.auction, valid[1].clone())
                    }
                    ("bid", DataType::Struct(fields)) => {
                        build_struct(fields, &c.bid, valid[2].clone())
                    }
                    _ => Ok(cast(
                        c.top.remove("event_type").expect("event_type").as_ref(),
                        f.data_type(),
                    )?),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

#[async_trait]
impl Source for NexmarkSource {
    async fn poll_next(&mut self) -> Result<SourcePoll> {
        let live: Vec<usize> = (0..self.splits.len())
            .filter(|i| self.splits[*i].remaining(self.events) > 0)
            .collect();
        if live.is_empty() {
            return Ok(SourcePoll::Finished);
        }
        // With kinds left out, step over more events so a batch still has about BATCH rows.
        let kept = self.model.kept(self.kinds);
        let mut rows = BATCH * self.model.total() / kept.max(1);
        if let Some(rate) = self.rate {
            let started = *self.started.get_or_insert_with(Instant::now);
            let allowed = (started.elapsed().as_secs_f64() * rate) as u64 + 1;
            if self.emitted >= allowed {
                let wait = (self.emitted + 1) as f64 / rate - started.elapsed().as_secs_f64();
                return Ok(SourcePoll::Idle(Duration::from_secs_f64(
                    wait.clamp(0.001, 0.1),
                )));
            }
            rows = rows.min(allowed - self.emitted);
        }
        let i = live[self.turn % live.len()];
        self.turn = self.turn.wrapping_add(1);
        let rows = rows.min(self.splits[i].remaining(self.events)).max(1);
        let batch = self.batch(&self.splits[i], rows)?;
        self.splits[i].next += rows;
        self.emitted += rows;
        Ok(SourcePoll::Batch(batch))
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        Split::snapshot(&self.splits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> Model {
        Model {
            person: 1,
            auction: 3,
            bid: 46,
            seed: 0,
            base_ms: 0,
            delay_us: 100.0,
        }
    }

    #[test]
    fn ids_follow_the_event_numbers() {
        let m = model();
        assert!(m.kind(0) == Kind::Person && m.kind(50) == Kind::Person);
        assert!(m.kind(1) == Kind::Auction && m.kind(3) == Kind::Auction && m.kind(4) == Kind::Bid);
        assert_eq!(m.person_id(0), 1000);
        assert_eq!(m.person_id(100), 1002);
        assert_eq!(m.auction_id(1), 1000);
        assert_eq!(m.auction_id(53), 1005);
        assert_eq!(m.last_person(49), 1000);
        assert_eq!(m.last_auction(60), 1005);
        assert_eq!(m.time(10_000), 1000);
    }

    #[test]
    fn prices_are_log_uniform_between_100_and_10_to_the_8() {
        let m = model();
        let prices: Vec<i64> = (0..10_000).map(|n| m.price(n, 11)).collect();
        assert!(prices.iter().all(|p| (100..=100_000_000).contains(p)));
        let below_10k = prices.iter().filter(|p| **p < 10_000).count();
        assert!((2500..4200).contains(&below_10k), "{below_10k}"); // a third of the decades
    }
}
