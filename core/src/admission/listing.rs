//! A `tools/list` answer read from its bytes: parsed once, admitted and
//! digested without building `serde_json::Value`s, and its verdict kept
//! with the attachment, keyed by the bytes and the trust policy it was
//! judged under.
//!
//! A page is read one of two ways. A cold call needs only the admitted
//! names, so it reads the names way (`listing_names.rs`): one serde_json
//! pass that builds no tree, a schema already in canonical form hashed as
//! its bytes stand, any other written canonically straight from its text. A `tools` answer needs the definitions, so it reads the
//! tree way (a borrowed tree, `listed.rs`). Both refuse exactly what
//! `Value` refuses and digest bit for bit the same (tests and the
//! `canonical` fuzz target hold them to each other).
//!
//! Admission is a pure function of two inputs: the listing's bytes (every
//! page's `result`, exactly as it arrived) and the policy. A
//! [`ListingVerdict`] is a cache of that function: its key is a BLAKE3
//! hash over the policy's canonical form and every page's BLAKE3 hash, so
//! the verdict is served again only for the very same bytes under the very
//! same policy, and any difference in either goes the full way (parse,
//! admit, digest, pins). The key is BLAKE3, not SHA-256: it is Human+'s own
//! (no surface or peer computes it), it must resist collisions a hostile
//! surface would search for, and it is read over every byte of every cold
//! listing, where BLAKE3 costs about a quarter of SHA-256 (even with the
//! CPU's SHA instructions). The tools' pins stay SHA-256, as specified.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::admission::listed::{Json, ListedTool};
use crate::admission::listing_names::read_page_names;
use crate::admission::trust::{Admission, Judged, TrustPolicy};
use crate::entropy::hex;
use crate::error::{Error, ProtocolError};
use crate::tools::tool::{ToolClaims, ToolDefinition};

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
        /// What its `annotations` claim, read with the definition.
        claims: ToolClaims,
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
    if !definitions {
        let page = read_page_names(result, policy)?;
        return Ok(ReadPage {
            next_cursor: page.next_cursor,
            ttl_ms: page.ttl_ms,
            entries: page
                .tools
                .into_iter()
                .map(|tool| match tool {
                    None => Entry::Malformed,
                    Some((name, digest)) => Entry::Tool {
                        name,
                        digest,
                        definition: None,
                        claims: ToolClaims::default(),
                    },
                })
                .collect(),
        });
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
                claims: t.claims,
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
/// It is a cache of a pure function: the key is a BLAKE3 hash over the
/// policy's canonical form ([`TrustPolicy::digest`]) and the BLAKE3 hash of
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
    /// Hex BLAKE3 of the page's bytes. A record kept before the key was
    /// BLAKE3 has `sha256` here instead: it reads as an empty hash, which
    /// no page matches (and its key, a version 1 key, matches no new one).
    #[serde(default)]
    blake3: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

impl ListingVerdict {
    /// The names of the tools the verdict admitted, in the surface's order.
    #[must_use]
    pub fn admitted(&self) -> &[String] {
        &self.admitted
    }

    /// The cache key: hex BLAKE3 over a version tag, the policy digest and
    /// every page's hash.
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
    /// What the surface claims about each admitted tool that claims
    /// anything ([`ToolClaims`]), by name; only when definitions were
    /// asked for (empty otherwise). Never used by trust.
    pub claims: BTreeMap<String, ToolClaims>,
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
        let hash: [u8; 32] = blake3::hash(result.as_bytes()).into();
        let index = self.pages.len();
        let kept_page = kept
            .filter(|_| self.matching && !definitions)
            .and_then(|k| k.pages.get(index))
            .filter(|p| p.blake3 == hex(&hash));
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
                claims: BTreeMap::new(),
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
                blake3: hex(hash),
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
        let claims = admitted
            .iter()
            .filter_map(|e| match e {
                Entry::Tool { name, claims, .. } if definitions && !claims.is_empty() => {
                    Some((name.clone(), *claims))
                }
                _ => None,
            })
            .collect();
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
            claims,
        })
    }
}

/// The cache key of a listing: hex BLAKE3 over a version tag, the
/// policy's digest and every page's hash, in order.
fn listing_key(policy: &TrustPolicy, hashes: &[[u8; 32]]) -> String {
    let mut h = blake3::Hasher::new();
    h.update(b"human-plus listing verdict v2 (blake3)\n");
    h.update(&policy.digest());
    h.update(&(hashes.len() as u64).to_le_bytes());
    for hash in hashes {
        h.update(hash);
    }
    hex(h.finalize().as_bytes())
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
    use crate::admission::listed::CanonicalHasher;
    use crate::admission::listing_names::read_page_names;
    use crate::error::ToolRefusal;
    use crate::tools::canonical::tests::arb_json;
    use crate::tools::canonical::{Unreadable, canonical_depth, canonical_json, canonicalize};
    use proptest::prelude::*;
    use serde_json::Value;
    use serde_json::json;
    use sha2::{Digest, Sha256};

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

    /// A policy pinning `t0`..`t5` (to any digest: only whether a digest
    /// is computed matters here).
    fn pins_every_t() -> TrustPolicy {
        TrustPolicy::every_tool((0..6).map(|i| (format!("t{i}"), "sha256:0".to_owned())))
    }

    /// Each entry's name and digest (or "(malformed)"), or the refusal.
    type Read = Result<Vec<(String, Option<String>)>, Error>;

    /// Each entry's name and digest the names way (a cold call's read,
    /// [`read_page_names`]) and the tree way (`ListedTool` over the
    /// borrowed tree), or each way's refusal.
    fn both_ways(text: &str) -> (Read, Read) {
        let policy = pins_every_t();
        let entries = |page: ReadPage| {
            page.entries
                .into_iter()
                .map(|e| match e {
                    Entry::Malformed => ("(malformed)".to_owned(), None),
                    Entry::Tool { name, digest, .. } => (name, digest),
                })
                .collect::<Vec<_>>()
        };
        let names = read_page_names(text, &policy).map(|page| {
            page.tools
                .into_iter()
                .map(|t| t.unwrap_or_else(|| ("(malformed)".to_owned(), None)))
                .collect::<Vec<_>>()
        });
        let tree = read_page(text, &policy, true).map(entries);
        (names, tree)
    }

    /// A listing of up to six tools whose schemas (and other members) are
    /// `schemas`, written canonically, scrambled or pretty.
    fn listing_of(schemas: &[Value], style: u8, seed: u64) -> String {
        let tools: Vec<Value> = schemas
            .iter()
            .enumerate()
            .map(|(i, schema)| {
                json!({"name": format!("t{i}"), "description": format!("tool {i}"), "inputSchema": schema, "annotations": schema})
            })
            .collect();
        let page = json!({"tools": tools, "nextCursor": "c"});
        match style % 3 {
            0 => canonical_json(&page),
            1 => {
                let mut out = String::new();
                let mut s = seed;
                scrambled(&page, &mut s, &mut out);
                out
            }
            _ => serde_json::to_string_pretty(&page).unwrap(),
        }
    }

    /// JSON with the numbers and strings schemas really hold (small
    /// integers, plain and escaped text) as well as any.
    fn arb_schema_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-1000i64..1000).prop_map(|n| json!(n)),
            "[a-z\\\\\"\\n\\u{1}\\u{7f}é]{0,6}".prop_map(Value::String),
            arb_json(),
        ];
        leaf.prop_recursive(4, 48, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec(("[a-zé_\\\\]{0,4}", inner), 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Written straight from its text, in any style, a value comes out
        /// as the `Value` writer writes it, byte for byte.
        #[test]
        fn canonicalize_writes_what_the_value_writer_writes(v in arb_schema_json(), style in any::<u8>(), seed in any::<u64>()) {
            let text = match style % 3 {
                0 => canonical_json(&v),
                1 => { let mut out = String::new(); let mut s = seed; scrambled(&v, &mut s, &mut out); out }
                _ => serde_json::to_string_pretty(&v).unwrap(),
            };
            let mut out = String::new();
            prop_assert_eq!(canonicalize(&text, 127, &mut out), Ok(()));
            prop_assert_eq!(out, canonical_json(&v));
        }

        /// Text [`canonical_depth`] accepts is its own canonical form, and
        /// the depth it gives is the value's.
        #[test]
        fn accepted_text_is_its_own_canonical_form(v in arb_schema_json(), style in any::<u8>(), seed in any::<u64>()) {
            let text = match style % 3 {
                0 => canonical_json(&v),
                1 => { let mut out = String::new(); let mut s = seed; scrambled(&v, &mut s, &mut out); out }
                _ => serde_json::to_string_pretty(&v).unwrap(),
            };
            if let Some(depth) = canonical_depth(&text) {
                let parsed: Value = serde_json::from_str(&text).unwrap();
                prop_assert_eq!(canonical_json(&parsed), text.clone());
                prop_assert_eq!(value_depth(&parsed), depth);
            }
        }

        /// The names way reads every listing as the tree way does: the same
        /// names, the same digests, the same refusals.
        #[test]
        fn the_names_way_reads_what_the_tree_way_reads(
            schemas in prop::collection::vec(arb_schema_json(), 0..6),
            style in any::<u8>(),
            seed in any::<u64>(),
        ) {
            let text = listing_of(&schemas, style, seed);
            let (names, tree) = both_ways(&text);
            prop_assert_eq!(names, tree);
        }
    }

    /// How deeply containers nest (a scalar is 0).
    fn value_depth(v: &Value) -> usize {
        match v {
            Value::Array(items) => 1 + items.iter().map(value_depth).max().unwrap_or(0),
            Value::Object(m) => 1 + m.values().map(value_depth).max().unwrap_or(0),
            _ => 0,
        }
    }

    #[test]
    fn canonical_depth_takes_only_its_own_canonical_form() {
        for (text, depth) in [
            ("{}", Some(1)),
            (
                "{\"a\":[1,{\"b\":null}],\"b\":\"x\\n\\u001f\\\"\"}",
                Some(3),
            ),
            ("[0,-1,123456789012345]", Some(1)),
            // UTF-16 order: U+1F600 (surrogates D83D DE00) before U+FF61.
            ("{\"é\":1,\"😀\":2,\"\u{ff61}\":3}", Some(1)),
            ("{\"é\":1,\"\u{ff61}\":3,\"😀\":2}", None),
            ("{\"b\":1,\"a\":2}", None),
            ("{\"a\":1,\"a\":2}", None),
            ("{\"a\" :1}", None),
            ("{\"a\":1.0}", None),
            ("{\"a\":1e2}", None),
            ("{\"a\":-0}", None),
            ("{\"a\":01}", None),
            ("{\"a\":1234567890123456}", None),
            ("{\"a\":\"\\/\"}", None),
            ("{\"a\":\"\\u0041\"}", None),
            ("{\"a\":\"\\u000A\"}", None),
            ("{\"a\":\"\\u000a\"}", None),
            ("{\"\\u0061\":1}", None),
            ("{\"a\":tru}", None),
            ("{\"a\":1", None),
            ("{\"a\":1]", None),
        ] {
            assert_eq!(canonical_depth(text), depth, "{text}");
        }
    }

    #[test]
    fn canonicalize_examples() {
        let nested = |levels: usize| "[".repeat(levels) + &"]".repeat(levels);
        for (text, written) in [
            ("{}", Some("{}")),
            (
                " { \"b\" : 1 , \"a\" : [ 2 , { } ] } ",
                Some("{\"a\":[2,{}],\"b\":1}"),
            ),
            ("{\"a\":1,\"a\":2,\"a\":3}", Some("{\"a\":3}")),
            (
                "{\"b\":{\"d\":1,\"c\":2},\"a\":0}",
                Some("{\"a\":0,\"b\":{\"c\":2,\"d\":1}}"),
            ),
            ("{\"\\u0062\":1,\"a\":2}", Some("{\"a\":2,\"b\":1}")),
            // UTF-16 order: U+1F600 (surrogates D83D DE00) before U+FF61.
            (
                "{\"\u{ff61}\":3,\"😀\":2,\"é\":1}",
                Some("{\"é\":1,\"😀\":2,\"\u{ff61}\":3}"),
            ),
            (
                "[\"\\u0041\\/\\u00e9\\n\\u001F\\ud83d\\ude00\"]",
                Some("[\"A/é\\n\\u001f😀\"]"),
            ),
            ("[1.0,1e2,-0,0.5,1E400,123456789012345678]", None),
            (
                "[1.0,1e2,-0,0.5,123456789012345678]",
                Some("[1,100,0,0.5,123456789012345680]"),
            ),
            ("[\"\\ud800\"]", None),
            ("[\"\\udc00\"]", None),
            ("[1] x", None),
            ("[1,]", None),
            (&nested(4), Some(nested(4).as_str())),
        ] {
            let mut out = String::new();
            let result = canonicalize(text, 4, &mut out);
            assert_eq!(result.ok().map(|()| out.as_str()), written, "{text}");
        }
        let mut out = String::new();
        assert_eq!(canonicalize(&nested(5), 4, &mut out), Err(Unreadable));
    }

    /// What serde_json refuses anywhere in a page (a number beyond a
    /// double, a lone surrogate, nesting beyond its limit) is refused by
    /// the names way too, inside a schema or in a member nothing reads.
    #[test]
    fn the_names_way_refuses_what_value_refuses() {
        let nested = |levels: usize| "{\"a\":".repeat(levels - 1) + "{" + &"}".repeat(levels);
        let tool = |members: &str| format!("{{\"tools\":[{{\"name\":\"t0\",{members}}}]}}");
        for (text, refused) in [
            (tool(r#""inputSchema":{"a":1e999}"#), true),
            (tool(r#""annotations":{"a":1e999}"#), true),
            (tool(r#""annotations":"\ud800""#), true),
            (tool(r#""inputSchema":{"a":"\ud800"}"#), true),
            (r#"{"x":[1e999],"tools":[]}"#.to_owned(), true),
            (tool(&format!(r#""inputSchema":{}"#, nested(124))), false),
            (tool(&format!(r#""inputSchema":{}"#, nested(125))), true),
            // Not canonical (a space): the schema is read the slow way.
            (
                tool(&format!(
                    r#""inputSchema":{}"#,
                    nested(124).replacen('{', "{ ", 1)
                )),
                false,
            ),
            (
                tool(&format!(
                    r#""inputSchema":{}"#,
                    nested(125).replacen('{', "{ ", 1)
                )),
                true,
            ),
        ] {
            let value_refuses = serde_json::from_str::<Value>(&text).is_err();
            assert_eq!(value_refuses, refused, "Value on {text}");
            let (names, tree) = both_ways(&text);
            assert_eq!(names.is_err(), refused, "names way on {text}");
            assert_eq!(names, tree, "{text}");
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
        let policy = TrustPolicy::every_tool(crate::admission::trust::NO_PINS);
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

    /// A verdict kept before the key was BLAKE3 (page hashes under
    /// `sha256`, a version 1 key) still reads, and is never served: the
    /// same bytes go the full way once and leave a new verdict.
    #[test]
    fn a_verdict_kept_under_the_sha256_key_reads_and_is_not_served() {
        let page = listing_text();
        let policy = pinned_policy();
        let sha: [u8; 32] = Sha256::digest(page.as_bytes()).into();
        let old = serde_json::json!({
            "key": hex(&sha),
            "pages": [{"sha256": hex(&sha)}],
            "admitted": ["sheet_read"],
        });
        let old: ListingVerdict = serde_json::from_value(old).unwrap();
        let mut reader = ListingReader::new();
        reader
            .page(page.clone(), Some(&old), &policy, false)
            .unwrap();
        let outcome = reader.finish(&policy, Some(&old), false).unwrap();
        assert!(!outcome.reused);
        let fresh = admit_listing_bytes(page.as_bytes(), &policy).unwrap();
        assert_eq!(outcome.verdict, fresh.verdict);
    }

    /// The surface's claims travel with the definitions, for admitted
    /// tools only, booleans only; the names way carries none, and the
    /// claims change neither the digest nor the admission.
    #[test]
    fn claims_travel_with_definitions_only() {
        let page = r#"{"tools":[
            {"name":"sheet_read","annotations":{"readOnlyHint":true,"destructiveHint":false}},
            {"name":"sheet_erase","annotations":{"destructiveHint":true}},
            {"name":"sheet_plain"},
            {"name":"sheet_odd","annotations":{"readOnlyHint":"true","destructiveHint":1}},
            {"name":"sheet_confirm","annotations":{"readOnlyHint":true}},
            {"name":"sheet_read","annotations":{"readOnlyHint":false}}
        ]}"#;
        let policy =
            TrustPolicy::every_tool([("sheet_erase", "sha256:00000000000000000000000000000000")])
                .withhold_changed_pins(true);
        let mut reader = ListingReader::new();
        reader.page(page.to_owned(), None, &policy, true).unwrap();
        let outcome = reader.finish(&policy, None, true).unwrap();
        assert_eq!(
            outcome.admitted(),
            ["sheet_read", "sheet_plain", "sheet_odd"]
        );
        // The first sheet_read's claims (the one admitted); nothing for
        // the withheld, the silent and the non-boolean.
        assert_eq!(
            outcome.claims,
            BTreeMap::from([(
                "sheet_read".to_owned(),
                ToolClaims {
                    read_only: Some(true),
                    destructive: Some(false)
                }
            )])
        );
        let bare = r#"{"tools":[{"name":"sheet_read"},{"name":"sheet_erase"},{"name":"sheet_plain"},{"name":"sheet_odd"},{"name":"sheet_confirm"},{"name":"sheet_read"}]}"#;
        let mut reader = ListingReader::new();
        reader.page(bare.to_owned(), None, &policy, true).unwrap();
        let without = reader.finish(&policy, None, true).unwrap();
        assert_eq!(
            without.admission.unwrap().admitted,
            outcome.admission.unwrap().admitted
        );
        let mut reader = ListingReader::new();
        reader.page(page.to_owned(), None, &policy, false).unwrap();
        assert!(
            reader
                .finish(&policy, None, false)
                .unwrap()
                .claims
                .is_empty()
        );
    }
}
