//! One `tools/list` entry read from borrowed JSON: the value type that
//! borrows its strings from the text ([`Json`]), the canonical form streamed
//! into SHA-256 ([`CanonicalHasher`]), an entry read by the listing rules
//! ([`ListedTool`]) and a tool's digest from its parts ([`tool_digest`]).
//! Shared by the two readers of a listing page (`listing.rs`, the tree way,
//! and `listing_names.rs`, the names way).

use std::borrow::Cow;
use std::fmt;

use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

use crate::admission::trust::Judged;
use crate::entropy::hex;
use crate::error::{Error, ProtocolError};
use crate::tools::canonical::{utf16_cmp, write_number, write_string};
use crate::tools::tool::{DIGEST_PREFIX, ToolClaims, ToolDefinition, is_blank};
use crate::values::scalar::Key;

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

    pub(crate) fn push_str(&mut self, s: &str) {
        self.buf.push_str(s);
        self.spill();
    }

    /// Appends text that is already canonical, as it stands (a long one
    /// hashed at once, not copied).
    pub(crate) fn raw(&mut self, text: &str) {
        if text.len() > HASH_BUFFER {
            self.hasher.update(self.buf.as_bytes());
            self.buf.clear();
            self.hasher.update(text.as_bytes());
        } else {
            self.push_str(text);
        }
    }

    pub(crate) fn string(&mut self, s: &str) {
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
    pub(crate) name: &'j str,
    pub(crate) description: &'j str,
    /// `None`: the entry has no schema (or `null`), digested as `{}`.
    schema: Option<&'j Json<'a>>,
    /// What the entry's `annotations` claim (never pin material).
    pub(crate) claims: ToolClaims,
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
        let hint = |key: &str| match entry.get("annotations").and_then(|a| a.get(key)) {
            Some(Json::Bool(b)) => Some(*b),
            _ => None,
        };
        let claims = ToolClaims {
            read_only: hint("readOnlyHint"),
            destructive: hint("destructiveHint"),
        };
        Ok(ListedTool {
            name,
            description,
            schema,
            claims,
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
        let schema = self.schema.map_or(Material::Empty, Material::Tree);
        tool_digest(self.name, self.description, schema)
    }
}

/// A tool's schema as its digest reads it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Material<'j, 'a> {
    /// No schema (or `null`): digested as `{}`.
    Empty,
    /// Text that is already its own canonical form
    /// ([`canonical_depth`] said so): hashed as it stands.
    Canonical(&'j str),
    /// A parsed object, written canonically.
    Tree(&'j Json<'a>),
}

/// [`ToolDefinition::digest`] of a tool's parts, the canonical material
/// streamed into the hash.
pub(crate) fn tool_digest(name: &str, description: &str, schema: Material<'_, '_>) -> String {
    let mut h = CanonicalHasher::new();
    h.push_str("{\"description\":");
    h.string(description);
    h.push_str(",\"inputSchema\":");
    match schema {
        Material::Empty => h.push_str("{}"),
        Material::Canonical(text) => h.raw(text),
        Material::Tree(schema) => h.value(schema),
    }
    h.push_str(",\"name\":");
    h.string(name);
    h.push_str("}");
    let hash = h.finish();
    let mut out = String::with_capacity(DIGEST_PREFIX.len() + 32);
    out.push_str(DIGEST_PREFIX);
    out.push_str(&hex(hash.get(..16).unwrap_or_default()));
    out
}
