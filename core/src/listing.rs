//! A `tools/list` answer read from its bytes: parsed once into borrowed
//! values, admitted and digested without building `serde_json::Value`s,
//! and its verdict kept with the attachment, keyed by the bytes and the
//! trust policy it was judged under.
//!
//! Admission is a pure function of two inputs: the listing's bytes (every
//! page's `result`, exactly as it arrived) and the policy. A
//! [`ListingVerdict`] is a cache of that function: its key is a SHA-256
//! over the policy's canonical form and every page's SHA-256, so the
//! verdict is served again only for the very same bytes under the very same
//! policy, and any difference in either goes the full way (parse, admit,
//! digest, pins).

use std::borrow::Cow;
use std::fmt;

use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

use crate::canonical::{utf16_cmp, write_number, write_string};
use crate::entropy::hex;
use crate::error::{Error, ProtocolError};
use crate::tool::{DIGEST_PREFIX, ToolDefinition, is_blank};
use crate::trust::{Admission, Judged, TrustPolicy};

/// A JSON value that borrows its strings from the text it was read from
/// (a string holding an escape is the only one copied). Read with
/// serde_json's parser, so it accepts exactly what `serde_json::Value`
/// accepts, nesting limit included; members are kept in the text's order,
/// duplicates too (every lookup and the canonical writer take the last, as
/// `Value` does).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json<'a> {
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    Object(Vec<(Cow<'a, str>, Json<'a>)>),
}

impl<'de> Deserialize<'de> for Json<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Json<'de>, E> {
        Ok(Json::Bool(b))
    }

    fn visit_i64<E>(self, i: i64) -> Result<Json<'de>, E> {
        Ok(Json::Number(i.into()))
    }

    fn visit_u64<E>(self, u: u64) -> Result<Json<'de>, E> {
        Ok(Json::Number(u.into()))
    }

    fn visit_f64<E>(self, f: f64) -> Result<Json<'de>, E> {
        // As `Value` reads it (JSON text never holds a non-finite number).
        Ok(Number::from_f64(f).map_or(Json::Null, Json::Number))
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Json<'de>, E> {
        Ok(Json::String(Cow::Borrowed(s)))
    }

    fn visit_str<E>(self, s: &str) -> Result<Json<'de>, E> {
        Ok(Json::String(Cow::Owned(s.to_owned())))
    }

    fn visit_string<E>(self, s: String) -> Result<Json<'de>, E> {
        Ok(Json::String(Cow::Owned(s)))
    }

    fn visit_unit<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }

    fn visit_none<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Json<'de>, D::Error> {
        Json::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json<'de>, A::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(0).min(1024));
        while let Some(Key(key)) = map.next_key()? {
            let value = map.next_value()?;
            members.push((key, value));
        }
        Ok(Json::Object(members))
    }
}

/// An object key, borrowed when it holds no escape.
pub(crate) struct Key<'a>(pub(crate) Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'a> Json<'a> {
    /// The last member named `key` of an object (`Value` keeps the last of
    /// duplicated keys).
    pub(crate) fn get(&self, key: &str) -> Option<&Json<'a>> {
        match self {
            Json::Object(members) => members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The `serde_json::Value` this text would have parsed to.
    pub(crate) fn to_value(&self) -> Value {
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(n) => Value::Number(n.clone()),
            Json::String(s) => Value::String(s.clone().into_owned()),
            Json::Array(items) => Value::Array(items.iter().map(Json::to_value).collect()),
            Json::Object(members) => {
                let mut map = Map::new();
                for (k, v) in members {
                    map.insert(k.clone().into_owned(), v.to_value());
                }
                Value::Object(map)
            }
        }
    }
}

/// Canonical JSON (RFC 8785, as [`crate::canonical_json`] writes it)
/// streamed into a SHA-256: written into a small buffer that is hashed and
/// emptied whenever it fills, so no copy of the whole material exists.
pub(crate) struct CanonicalHasher {
    buf: String,
    hasher: Sha256,
}

/// How full the buffer gets before it is hashed.
const HASH_BUFFER: usize = 4096;

impl CanonicalHasher {
    pub(crate) fn new() -> Self {
        CanonicalHasher {
            buf: String::with_capacity(HASH_BUFFER + 256),
            hasher: Sha256::new(),
        }
    }

    fn spill(&mut self) {
        if self.buf.len() >= HASH_BUFFER {
            self.hasher.update(self.buf.as_bytes());
            self.buf.clear();
        }
    }

    fn push_str(&mut self, s: &str) {
        self.buf.push_str(s);
        self.spill();
    }

    fn string(&mut self, s: &str) {
        if s.len() > HASH_BUFFER {
            // A long string is written on its own and hashed at once.
            self.hasher.update(self.buf.as_bytes());
            self.buf.clear();
        }
        write_string(s, &mut self.buf);
        self.spill();
    }

    /// Appends the canonical text of `value`.
    pub(crate) fn value(&mut self, value: &Json<'_>) {
        match value {
            Json::Null => self.push_str("null"),
            Json::Bool(true) => self.push_str("true"),
            Json::Bool(false) => self.push_str("false"),
            Json::Number(n) => {
                write_number(n, &mut self.buf);
                self.spill();
            }
            Json::String(s) => self.string(s),
            Json::Array(items) => {
                self.buf.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.buf.push(',');
                    }
                    self.value(item);
                }
                self.push_str("]");
            }
            Json::Object(members) => self.object(members),
        }
    }

    fn member(&mut self, first: bool, key: &str, value: &Json<'_>) {
        if !first {
            self.buf.push(',');
        }
        self.string(key);
        self.buf.push(':');
        self.value(value);
    }

    fn object(&mut self, members: &[(Cow<'_, str>, Json<'_>)]) {
        self.buf.push('{');
        let strictly_sorted = members
            .windows(2)
            .all(|w| matches!(w, [a, b] if utf16_cmp(&a.0, &b.0).is_lt()));
        if strictly_sorted {
            for (i, (k, v)) in members.iter().enumerate() {
                self.member(i == 0, k, v);
            }
        } else if members.len() <= SMALL_OBJECT {
            // Sorted through a small array of indices: no allocation.
            let mut order = [0u8; SMALL_OBJECT];
            let n = members.len();
            for (i, slot) in order.iter_mut().enumerate().take(n) {
                *slot = u8::try_from(i).unwrap_or(u8::MAX);
            }
            let order = order.get_mut(..n).unwrap_or_default();
            let key = |i: u8| members.get(usize::from(i)).map_or("", |(k, _)| k.as_ref());
            // Stable insertion sort: duplicates keep their order, so the
            // last of a run is the last in the text.
            for i in 1..order.len() {
                let mut j = i;
                while j > 0 && utf16_cmp(key(order[j - 1]), key(order[j])).is_gt() {
                    order.swap(j - 1, j);
                    j -= 1;
                }
            }
            self.sorted_members(order.iter().map(|&i| usize::from(i)), members);
        } else {
            let mut order: Vec<usize> = (0..members.len()).collect();
            order.sort_by(|&a, &b| {
                let key = |i: usize| members.get(i).map_or("", |(k, _)| k.as_ref());
                utf16_cmp(key(a), key(b))
            });
            self.sorted_members(order.into_iter(), members);
        }
        self.push_str("}");
    }

    /// Writes `members` in `order` (sorted, stable), keeping only the last
    /// of equal keys.
    fn sorted_members(
        &mut self,
        order: impl Iterator<Item = usize>,
        members: &[(Cow<'_, str>, Json<'_>)],
    ) {
        let mut order = order.peekable();
        let mut first = true;
        while let Some(i) = order.next() {
            let Some((k, v)) = members.get(i) else {
                continue;
            };
            if order
                .peek()
                .and_then(|&n| members.get(n))
                .is_some_and(|(next, _)| next == k)
            {
                continue;
            }
            self.member(first, k, v);
            first = false;
        }
    }

    /// The SHA-256 of everything written.
    pub(crate) fn finish(mut self) -> [u8; 32] {
        self.hasher.update(self.buf.as_bytes());
        self.hasher.finalize().into()
    }
}

/// Objects with at most this many members are sorted without allocating.
const SMALL_OBJECT: usize = 32;

/// One entry of a `tools/list` answer, read by
/// [`ToolDefinition::from_listing`]'s rules without copying it.
#[derive(Debug)]
pub(crate) struct ListedTool<'j, 'a> {
    name: &'j str,
    description: &'j str,
    /// `None`: the entry has no schema (or `null`), digested as `{}`.
    schema: Option<&'j Json<'a>>,
}

impl<'j, 'a> ListedTool<'j, 'a> {
    /// The entry's name, description and schema, or why it is malformed.
    pub(crate) fn read(entry: &'j Json<'a>) -> Result<Self, Error> {
        if !matches!(entry, Json::Object(_)) {
            return Err(Error::Protocol(ProtocolError::ToolWithoutName));
        }
        let name = match entry.get("name") {
            Some(Json::String(name)) if !is_blank(name) => name.as_ref(),
            _ => return Err(Error::Protocol(ProtocolError::ToolWithoutName)),
        };
        let description = match entry.get("description") {
            Some(Json::String(d)) => d.as_ref(),
            _ => "",
        };
        let schema = match entry.get("inputSchema") {
            None | Some(Json::Null) => None,
            Some(schema @ Json::Object(_)) => Some(schema),
            Some(_) => return Err(Error::Protocol(ProtocolError::MalformedToolSchema)),
        };
        Ok(ListedTool {
            name,
            description,
            schema,
        })
    }

    /// The owned definition (the schema built as a `Value`).
    pub(crate) fn to_definition(&self) -> ToolDefinition {
        let schema = self
            .schema
            .map_or_else(|| Value::Object(Map::new()), Json::to_value);
        ToolDefinition::from_checked_parts(
            self.name.to_owned(),
            self.description.to_owned(),
            schema,
        )
    }
}

impl Judged for ListedTool<'_, '_> {
    fn name(&self) -> &str {
        self.name
    }

    /// [`ToolDefinition::digest`], with the material streamed into the
    /// hash from the borrowed entry.
    fn digest(&self) -> String {
        let mut h = CanonicalHasher::new();
        h.push_str("{\"description\":");
        h.string(self.description);
        h.push_str(",\"inputSchema\":");
        match self.schema {
            Some(schema) => h.value(schema),
            None => h.push_str("{}"),
        }
        h.push_str(",\"name\":");
        h.string(self.name);
        h.push_str("}");
        let hash = h.finish();
        let mut out = String::with_capacity(DIGEST_PREFIX.len() + 32);
        out.push_str(DIGEST_PREFIX);
        out.push_str(&hex(hash.get(..16).unwrap_or_default()));
        out
    }
}

/// One page of a listing, read once: its cursor, its `ttlMs`, and what
/// admission needs of each entry.
#[derive(Debug)]
struct ReadPage {
    next_cursor: Option<String>,
    ttl_ms: Option<u64>,
    entries: Vec<Entry>,
}

/// One listed entry, as admission needs it: malformed, or a tool with its
/// name, its digest when the policy pins the name, and its definition when
/// asked for.
#[derive(Debug)]
enum Entry {
    Malformed,
    Tool {
        name: String,
        digest: Option<String>,
        definition: Option<ToolDefinition>,
    },
}

impl Judged for Entry {
    fn name(&self) -> &str {
        match self {
            Entry::Malformed => "",
            Entry::Tool { name, .. } => name,
        }
    }

    /// Computed when the page was read, for every pinned name (the only
    /// names whose digest admission asks for).
    fn digest(&self) -> String {
        match self {
            Entry::Tool {
                digest: Some(d), ..
            } => d.clone(),
            _ => String::new(),
        }
    }
}

/// Reads one page's `result` text: one parse into borrowed values, each
/// entry read by the listing rules and, when `policy` pins its name,
/// digested (the canonical form streamed into the hash).
fn read_page(result: &str, policy: &TrustPolicy, definitions: bool) -> Result<ReadPage, Error> {
    if !result.trim_start().starts_with('{') {
        return Err(Error::Protocol(ProtocolError::MalformedResult));
    }
    let page: Json<'_> = serde_json::from_str(result)
        .map_err(|_| Error::Protocol(ProtocolError::MalformedToolsList))?;
    let Some(Json::Array(tools)) = page.get("tools") else {
        return Err(Error::Protocol(ProtocolError::MalformedToolsList));
    };
    let next_cursor = match page.get("nextCursor") {
        Some(Json::String(s)) => Some(s.clone().into_owned()),
        _ => None,
    };
    let ttl_ms = match page.get("ttlMs") {
        Some(Json::Number(n)) => n.as_u64(),
        _ => None,
    };
    let entries = tools
        .iter()
        .map(|entry| match ListedTool::read(entry) {
            Err(_) => Entry::Malformed,
            Ok(t) => Entry::Tool {
                name: t.name.to_owned(),
                digest: policy.pin(t.name).map(|_| Judged::digest(&t)),
                definition: definitions.then(|| t.to_definition()),
            },
        })
        .collect();
    Ok(ReadPage {
        next_cursor,
        ttl_ms,
        entries,
    })
}

/// What admission decided about a listing, kept with the attachment
/// ([`crate::SurfaceAttachment::listing_verdict`]) and keyed by the
/// listing's bytes and the trust policy.
///
/// It is a cache of a pure function: the key is a SHA-256 over the
/// policy's canonical form ([`TrustPolicy::digest`]) and the SHA-256 of
/// every page's `result` exactly as its bytes arrived, so it is served only
/// for the same bytes under the same policy. It keeps the admitted names
/// (all a call or a change-feed read needs) and, per page, the page's hash
/// and its `nextCursor` (so an unchanged page is not read again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListingVerdict {
    key: String,
    pages: Vec<KeptPage>,
    admitted: Vec<String>,
}

/// One page of a kept listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeptPage {
    sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

impl ListingVerdict {
    /// The names of the tools the verdict admitted, in the surface's order.
    #[must_use]
    pub fn admitted(&self) -> &[String] {
        &self.admitted
    }

    /// The cache key: hex SHA-256 over the policy digest and every page's
    /// hash.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }
}

/// What [`ListingReader::finish`] decided.
#[derive(Debug)]
pub struct ListingOutcome<'k> {
    /// The verdict: the kept one, borrowed, when it was served; else the
    /// new one, to keep with the attachment.
    pub verdict: Cow<'k, ListingVerdict>,
    /// The admission with its definitions, when they were asked for (and
    /// the listing went the full way).
    pub admission: Option<Admission>,
    /// Listed entries too malformed to be tools (full way only; 0 when
    /// reused).
    pub malformed: usize,
    /// The smallest `ttlMs` of the pages (full way only).
    pub ttl_ms: Option<u64>,
    /// The verdict was served from the kept one: no entry was parsed,
    /// admitted or digested.
    pub reused: bool,
}

impl ListingOutcome<'_> {
    /// The admitted tools' names, in the surface's order.
    #[must_use]
    pub fn admitted(&self) -> &[String] {
        self.verdict.admitted()
    }
}

/// Reads a `tools/list` answer page by page from its bytes and admits it,
/// or serves the kept verdict when the bytes and the policy are the same.
///
/// ```
/// use human_plus_core::{ListingReader, NO_PINS, TrustPolicy};
///
/// let policy = TrustPolicy::allowing(["sheet_read"], NO_PINS);
/// let page = r#"{"tools":[{"name":"sheet_read","inputSchema":{"type":"object"}},{"name":"sheet_erase"}]}"#;
///
/// let mut reader = ListingReader::new();
/// assert_eq!(reader.page(page.to_owned(), None, &policy, false)?, None); // no next page
/// let first = reader.finish(&policy, None, false)?;
/// assert_eq!(first.admitted(), ["sheet_read"]);
/// assert!(!first.reused);
///
/// // The same bytes under the same policy: the verdict is served again.
/// let kept = Some(first.verdict.as_ref());
/// let mut reader = ListingReader::new();
/// reader.page(page.to_owned(), kept, &policy, false)?;
/// let again = reader.finish(&policy, kept, false)?;
/// assert!(again.reused);
/// assert_eq!(again.verdict, first.verdict);
///
/// // One byte differs: the full way.
/// let mut reader = ListingReader::new();
/// reader.page(page.replace("erase", "eraze"), kept, &policy, false)?;
/// assert!(!reader.finish(&policy, kept, false)?.reused);
/// # Ok::<(), human_plus_core::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct ListingReader {
    pages: Vec<String>,
    hashes: Vec<[u8; 32]>,
    cursors: Vec<Option<String>>,
    /// Each page as read (`None`: equal to the kept verdict's page, not
    /// read yet).
    read: Vec<Option<ReadPage>>,
    /// Every page so far equals the kept verdict's page at its place.
    matching: bool,
}

impl ListingReader {
    /// A reader for one listing.
    #[must_use]
    pub fn new() -> Self {
        ListingReader {
            matching: true,
            ..ListingReader::default()
        }
    }

    /// How many pages were read.
    #[must_use]
    pub fn pages(&self) -> usize {
        self.pages.len()
    }

    /// Takes one page's `result`, exactly as its bytes arrived, and returns
    /// its `nextCursor` (the next page to ask for, if any). A page that must
    /// be read is read once, here: parsed, each entry checked and, when
    /// `policy` (the one [`ListingReader::finish`] is given) pins its name,
    /// digested; with `definitions`, its definitions built. A page whose
    /// bytes equal the `kept` verdict's page at the same place (every page
    /// before it equal too) is not read again: its cursor is the kept one.
    ///
    /// # Errors
    /// [`ProtocolError::MalformedToolsList`] when the page is not a JSON
    /// object with a `tools` array;
    /// [`ProtocolError::MalformedResult`] when it is not a JSON object.
    pub fn page(
        &mut self,
        result: String,
        kept: Option<&ListingVerdict>,
        policy: &TrustPolicy,
        definitions: bool,
    ) -> Result<Option<String>, Error> {
        let hash: [u8; 32] = Sha256::digest(result.as_bytes()).into();
        let index = self.pages.len();
        let kept_page = kept
            .filter(|_| self.matching && !definitions)
            .and_then(|k| k.pages.get(index))
            .filter(|p| p.sha256 == hex(&hash));
        let (next, read) = match kept_page {
            Some(p) => (p.next_cursor.clone(), None),
            None => {
                self.matching = false;
                let read = read_page(&result, policy, definitions)?;
                (read.next_cursor.clone(), Some(read))
            }
        };
        self.pages.push(result);
        self.hashes.push(hash);
        self.cursors.push(next.clone());
        self.read.push(read);
        Ok(next)
    }

    /// Every page is in: serves the `kept` verdict when every page's bytes
    /// and the policy are the same, else admits the listing the full way.
    /// With `definitions`, the full way also builds the admitted
    /// [`ToolDefinition`]s, and a kept verdict is never served (it holds
    /// names only).
    ///
    /// # Errors
    /// What [`TrustPolicy::admit`] returns (a pin mismatch, unless the
    /// policy withholds changed pins);
    /// [`ProtocolError::MalformedToolsList`] when a page cannot be read.
    pub fn finish<'k>(
        self,
        policy: &TrustPolicy,
        kept: Option<&'k ListingVerdict>,
        definitions: bool,
    ) -> Result<ListingOutcome<'k>, Error> {
        let key = listing_key(policy, &self.hashes);
        if !definitions
            && self.matching
            && let Some(kept) = kept.filter(|k| k.key == key && k.pages.len() == self.pages.len())
        {
            return Ok(ListingOutcome {
                verdict: Cow::Borrowed(kept),
                admission: None,
                malformed: 0,
                ttl_ms: None,
                reused: true,
            });
        }
        let mut kept_pages = Vec::with_capacity(self.pages.len());
        let mut entries = Vec::new();
        let mut ttl_ms: Option<u64> = None;
        for (((text, hash), cursor), read) in self
            .pages
            .iter()
            .zip(&self.hashes)
            .zip(self.cursors)
            .zip(self.read)
        {
            let page = match read {
                Some(page) => page,
                // Equal to the kept verdict's page, but a later one was
                // not: read it now.
                None => read_page(text, policy, definitions)?,
            };
            if let Some(t) = page.ttl_ms {
                ttl_ms = Some(ttl_ms.map_or(t, |m| m.min(t)));
            }
            kept_pages.push(KeptPage {
                sha256: hex(hash),
                next_cursor: cursor,
            });
            entries.extend(page.entries);
        }
        let malformed = entries
            .iter()
            .filter(|e| matches!(e, Entry::Malformed))
            .count();
        let listed = entries
            .into_iter()
            .filter(|e| !matches!(e, Entry::Malformed));
        let (admitted, withheld) = policy.judge(listed)?;
        let names: Vec<String> = admitted.iter().map(|e| e.name().to_owned()).collect();
        let admission = definitions.then(|| Admission {
            admitted: admitted
                .into_iter()
                .filter_map(|e| match e {
                    Entry::Tool { definition, .. } => definition,
                    Entry::Malformed => None,
                })
                .collect(),
            withheld,
        });
        Ok(ListingOutcome {
            verdict: Cow::Owned(ListingVerdict {
                key,
                pages: kept_pages,
                admitted: names,
            }),
            admission,
            malformed,
            ttl_ms,
            reused: false,
        })
    }
}

/// The cache key of a listing: hex SHA-256 over a version tag, the
/// policy's digest and every page's hash, in order.
fn listing_key(policy: &TrustPolicy, hashes: &[[u8; 32]]) -> String {
    let mut h = Sha256::new();
    h.update(b"human-plus listing verdict v1\n");
    h.update(policy.digest());
    h.update((hashes.len() as u64).to_le_bytes());
    for hash in hashes {
        h.update(hash);
    }
    hex(&h.finalize())
}

/// The full path on one `result` (one page): parse, admit, digest. What a
/// cold call did before the verdict was kept, for benchmarks and tests.
///
/// ```
/// use human_plus_core::{NO_PINS, TrustPolicy, admit_listing_bytes};
///
/// let policy = TrustPolicy::allowing(["sheet_read"], NO_PINS);
/// let outcome = admit_listing_bytes(br#"{"tools":[{"name":"sheet_read"}]}"#, &policy)?;
/// assert_eq!(outcome.admitted(), ["sheet_read"]);
/// # Ok::<(), human_plus_core::Error>(())
/// ```
///
/// # Errors
/// [`ProtocolError::MalformedResult`] when the bytes are not UTF-8; what
/// [`ListingReader::page`] and [`ListingReader::finish`] return.
pub fn admit_listing_bytes(
    result: &[u8],
    policy: &TrustPolicy,
) -> Result<ListingOutcome<'static>, Error> {
    let text =
        std::str::from_utf8(result).map_err(|_| Error::Protocol(ProtocolError::MalformedResult))?;
    let mut reader = ListingReader::new();
    reader.page(text.to_owned(), None, policy, false)?;
    reader.finish(policy, None, false)
}

/// The name and [digest](ToolDefinition::digest) of every well-formed
/// entry of one `tools/list` `result`, read from its bytes (the canonical
/// material streamed into the hash, no `Value` built), in the surface's
/// order; malformed entries are left out.
///
/// ```
/// use human_plus_core::listing_digests;
///
/// let result = br#"{"tools":[{"name":"surface_write","description":"Write to the surface.","inputSchema":{"type":"object"}},{"inputSchema":[]}]}"#;
/// assert_eq!(
///     listing_digests(result)?,
///     [("surface_write".to_owned(), "sha256:5ab496568589a2e1901b1b49c27b22bc".to_owned())]
/// );
/// # Ok::<(), human_plus_core::Error>(())
/// ```
///
/// # Errors
/// [`ProtocolError::MalformedToolsList`] when the bytes are not a JSON
/// object with a `tools` array.
pub fn listing_digests(result: &[u8]) -> Result<Vec<(String, String)>, Error> {
    let text = std::str::from_utf8(result)
        .map_err(|_| Error::Protocol(ProtocolError::MalformedToolsList))?;
    let page: Json<'_> = serde_json::from_str(text)
        .map_err(|_| Error::Protocol(ProtocolError::MalformedToolsList))?;
    let Some(Json::Array(entries)) = page.get("tools") else {
        return Err(Error::Protocol(ProtocolError::MalformedToolsList));
    };
    Ok(entries
        .iter()
        .filter_map(|e| ListedTool::read(e).ok())
        .map(|t| (t.name.to_owned(), Judged::digest(&t)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::canonical_json;
    use crate::canonical::tests::arb_json;
    use crate::error::ToolRefusal;
    use proptest::prelude::*;
    use serde_json::json;

    /// Writes `v` as JSON text with every object's members in an order
    /// picked by `seed`, some keys written twice (a decoy first, then the
    /// real member, which `Value` keeps), and some strings escaped.
    fn scrambled(v: &Value, seed: &mut u64, out: &mut String) {
        fn step(seed: &mut u64) -> u64 {
            *seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            *seed >> 33
        }
        match v {
            Value::Object(map) => {
                let mut members: Vec<(&String, &Value)> = map.iter().collect();
                for i in (1..members.len()).rev() {
                    let j = usize::try_from(step(seed)).unwrap() % (i + 1);
                    members.swap(i, j);
                }
                out.push('{');
                let mut first = true;
                for (k, val) in members {
                    if !first {
                        out.push(',');
                    }
                    first = false;
                    if step(seed).is_multiple_of(3) {
                        out.push_str(&serde_json::to_string(k).unwrap());
                        out.push_str(":[\"decoy\",{\"x\":1}],");
                    }
                    if step(seed).is_multiple_of(4) && !k.is_empty() {
                        // The key with its first character escaped.
                        let c = k.chars().next().unwrap();
                        let mut units = [0u16; 2];
                        out.push('"');
                        for u in c.encode_utf16(&mut units) {
                            out.push_str(&format!("\\u{u:04x}"));
                        }
                        let rest = serde_json::to_string(&k[c.len_utf8()..]).unwrap();
                        out.push_str(&rest[1..]);
                    } else {
                        out.push_str(&serde_json::to_string(k).unwrap());
                    }
                    out.push(':');
                    scrambled(val, seed, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    scrambled(item, seed, out);
                }
                out.push(']');
            }
            other => out.push_str(&serde_json::to_string(other).unwrap()),
        }
    }

    fn hash_of(json: &Json<'_>) -> [u8; 32] {
        let mut h = CanonicalHasher::new();
        h.value(json);
        h.finish()
    }

    proptest! {
        /// The borrowed writer streamed into the hash writes what the
        /// `Value` writer writes, byte for byte, whatever the member order,
        /// duplicates or escapes of the text.
        #[test]
        fn the_streamed_canonical_form_equals_the_value_writer(v in arb_json(), seed in any::<u64>()) {
            let mut text = String::new();
            let mut s = seed;
            scrambled(&v, &mut s, &mut text);
            let parsed: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(&parsed, &v);
            let json: Json<'_> = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(json.to_value(), v.clone());
            let expected: [u8; 32] = Sha256::digest(canonical_json(&v).as_bytes()).into();
            prop_assert_eq!(hash_of(&json), expected);
        }

        /// Any one byte of a listing changed: the kept verdict is never
        /// served, and the full way decides what the `Value` path decides
        /// (a pin refusal when a pinned definition changed).
        #[test]
        fn one_changed_byte_goes_the_full_way(at in any::<prop::sample::Index>(), byte in 0x20u8..0x7f) {
            let page = listing_text();
            let policy = pinned_policy();
            let first = admit_listing_bytes(page.as_bytes(), &policy).unwrap();
            let kept = Some(first.verdict.as_ref());
            let mut bytes = page.clone().into_bytes();
            let i = at.index(bytes.len());
            prop_assume!(bytes[i] != byte);
            bytes[i] = byte;
            let changed = String::from_utf8(bytes).unwrap();
            let mut reader = ListingReader::new();
            let new_way = reader
                .page(changed.clone(), kept, &policy, false)
                .and_then(|_| reader.finish(&policy, kept, false));
            let old_way = value_path(&changed, &policy);
            if serde_json::from_str::<Value>(&changed).is_err() {
                // Not JSON: such a frame is never a reply; the reader
                // refuses it anyway, and never serves a verdict for it.
                prop_assert!(new_way.is_err());
                return Ok(());
            }
            match (new_way, old_way) {
                (Ok(o), Ok(names)) => {
                    prop_assert!(!o.reused);
                    prop_assert_eq!(o.admitted(), names.as_slice());
                }
                (Err(a), Err(b)) => prop_assert_eq!(a, b),
                (a, b) => prop_assert!(false, "new {:?} old {:?}", a, b),
            }
        }
    }

    /// What discovery decided before the listing was read from its bytes:
    /// parse to a `Value`, `ToolDefinition::try_from` each entry, admit.
    fn value_path(text: &str, policy: &TrustPolicy) -> Result<Vec<String>, Error> {
        let result: Value = serde_json::from_str(text)
            .map_err(|_| Error::Protocol(ProtocolError::MalformedToolsList))?;
        if !result.is_object() {
            return Err(Error::Protocol(ProtocolError::MalformedResult));
        }
        let Some(Value::Array(entries)) = result.get("tools").cloned() else {
            return Err(Error::Protocol(ProtocolError::MalformedToolsList));
        };
        let listed: Vec<ToolDefinition> = entries
            .into_iter()
            .filter_map(|e| ToolDefinition::try_from(e).ok())
            .collect();
        let admission = policy.admit(listed)?;
        Ok(admission.admitted_names().map(str::to_owned).collect())
    }

    fn listing_text() -> String {
        json!({
            "tools": [
                {"name": "sheet_read", "description": "Read cells.", "inputSchema": {"type": "object", "properties": {"range": {"type": "string"}}}},
                {"name": "sheet_write", "description": "Write a cell.", "inputSchema": {"type": "object", "required": ["cell", "value"], "properties": {"cell": {"type": "string"}, "value": {"type": "number", "maximum": 1e21}}}},
                {"name": "sheet_erase", "description": "Erase.", "inputSchema": {}},
                {"name": "terminal_confirm"},
            ],
            "nextCursor": null,
            "ttlMs": 60000,
        })
        .to_string()
    }

    fn pinned_policy() -> TrustPolicy {
        let page = listing_text();
        let v: Value = serde_json::from_str(&page).unwrap();
        let pin = |i: usize| {
            ToolDefinition::try_from(v["tools"][i].clone())
                .unwrap()
                .digest()
        };
        TrustPolicy::allowing(
            ["sheet_read", "sheet_write", "terminal_confirm"],
            [("sheet_read", pin(0)), ("sheet_write", pin(1))],
        )
    }

    #[test]
    fn a_changed_byte_in_a_pinned_schema_is_refused_not_served() {
        let page = listing_text();
        let policy = pinned_policy();
        let first = admit_listing_bytes(page.as_bytes(), &policy).unwrap();
        assert_eq!(first.admitted(), ["sheet_read", "sheet_write"]);
        let kept = Some(first.verdict.as_ref());
        // The same bytes: served.
        let mut reader = ListingReader::new();
        reader.page(page.clone(), kept, &policy, false).unwrap();
        assert!(reader.finish(&policy, kept, false).unwrap().reused);
        // "maximum": 1e+21 -> 2e+21, inside sheet_write's schema.
        let changed = page.replacen("1e+21", "2e+21", 1);
        assert_ne!(changed, page);
        let mut reader = ListingReader::new();
        reader.page(changed, kept, &policy, false).unwrap();
        assert_eq!(
            reader.finish(&policy, kept, false).unwrap_err(),
            Error::ToolRefused(ToolRefusal::PinChanged("sheet_write".into()))
        );
        // Another policy, same bytes: judged again.
        let other = policy.clone().withhold_changed_pins(true);
        let mut reader = ListingReader::new();
        reader.page(page, kept, &other, false).unwrap();
        assert!(!reader.finish(&other, kept, false).unwrap().reused);
    }

    #[test]
    fn pages_are_keyed_in_order_and_count() {
        let policy = TrustPolicy::every_tool(crate::trust::NO_PINS);
        let a = r#"{"tools":[{"name":"a"}],"nextCursor":"2"}"#;
        let b = r#"{"tools":[{"name":"b"}]}"#;
        let mut reader = ListingReader::new();
        assert_eq!(
            reader
                .page(a.to_owned(), None, &policy, false)
                .unwrap()
                .as_deref(),
            Some("2")
        );
        assert_eq!(
            reader.page(b.to_owned(), None, &policy, false).unwrap(),
            None
        );
        let first = reader.finish(&policy, None, false).unwrap();
        assert_eq!(first.admitted(), ["a", "b"]);
        let kept = Some(first.verdict.as_ref());
        // The same two pages: served, the first page's cursor from the
        // verdict.
        let mut reader = ListingReader::new();
        assert_eq!(
            reader
                .page(a.to_owned(), kept, &policy, false)
                .unwrap()
                .as_deref(),
            Some("2")
        );
        reader.page(b.to_owned(), kept, &policy, false).unwrap();
        assert!(reader.finish(&policy, kept, false).unwrap().reused);
        // Only the first page (a shorter listing): the full way.
        let mut reader = ListingReader::new();
        reader.page(b.to_owned(), kept, &policy, false).unwrap();
        let one = reader.finish(&policy, kept, false).unwrap();
        assert!(!one.reused);
        assert_eq!(one.admitted(), ["b"]);
        // Definitions asked for: never served from names.
        let mut reader = ListingReader::new();
        reader.page(a.to_owned(), kept, &policy, true).unwrap();
        reader.page(b.to_owned(), kept, &policy, true).unwrap();
        let full = reader.finish(&policy, kept, true).unwrap();
        assert!(!full.reused);
        assert_eq!(full.admission.unwrap().admitted.len(), 2);
    }

    #[test]
    fn the_verdict_survives_a_record_round_trip() {
        let page = listing_text();
        let first = admit_listing_bytes(page.as_bytes(), &pinned_policy()).unwrap();
        let wire = serde_json::to_string(first.verdict.as_ref()).unwrap();
        let back: ListingVerdict = serde_json::from_str(&wire).unwrap();
        assert_eq!(&back, first.verdict.as_ref());
    }
}
