//! The names-only read of a listing page, what a cold call needs: one pass
//! of serde_json over the page that builds no tree of the entries.
//!
//! Every value is still read by serde_json the way `Value` reads it
//! (numbers, escapes, surrogates, the nesting limit), so a page is refused
//! exactly when the tree read refuses it. A tool's schema is taken as its
//! raw text: when that text is already its own canonical form
//! ([`canonical_depth`]) it is hashed as it stands; any other is written
//! canonically straight from the text ([`canonicalize`]: whitespace
//! dropped, escapes and numbers written again, out-of-order objects
//! reordered), with no tree built.

use std::fmt;

use serde::de::{Error as _, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use std::borrow::Cow;

use crate::admission::listed::{Json, Material, tool_digest};
use crate::admission::trust::TrustPolicy;
use crate::error::{Error, ProtocolError};
use crate::tools::canonical::{canonical_depth, canonicalize};
use crate::tools::tool::is_blank;
use crate::values::scalar::{Key, Skip};

/// The containers around a tool's schema: the page object, its `tools`
/// array and the entry object.
const SCHEMA_BASE_DEPTH: usize = 3;

/// The deepest nesting serde_json reads (a recursion limit of 128 leaves
/// 127 levels).
const MAX_DEPTH: usize = 127;

/// One page read the names way.
#[derive(Debug)]
pub(crate) struct NamesPage {
    /// The page's `nextCursor`, when a string.
    pub(crate) next_cursor: Option<String>,
    /// The page's `ttlMs`, when an unsigned integer.
    pub(crate) ttl_ms: Option<u64>,
    /// Per entry: `None` when malformed, else the name and, when the
    /// policy pins it, the digest.
    pub(crate) tools: Vec<Option<(String, Option<String>)>>,
}

/// Reads one page's `result` for its cursor, its `ttlMs` and, per entry,
/// the name and (when `policy` pins it) the digest.
pub(crate) fn read_page_names(result: &str, policy: &TrustPolicy) -> Result<NamesPage, Error> {
    let malformed = || Error::Protocol(ProtocolError::MalformedToolsList);
    let page: Page<'_> = serde_json::from_str(result).map_err(|_| malformed())?;
    let Tools::Entries(listed) = page.tools else {
        return Err(malformed());
    };
    let next_cursor = match page.next_cursor {
        Some(Json::String(s)) => Some(s.into_owned()),
        _ => None,
    };
    let ttl_ms = match page.ttl_ms {
        Some(Json::Number(n)) => n.as_u64(),
        _ => None,
    };
    let tools = listed
        .iter()
        .map(|entry| {
            let (name, description, schema) = entry.tool()?;
            let digest = policy
                .pin(name)
                .map(|_| tool_digest(name, description, schema));
            Some((name.to_owned(), digest))
        })
        .collect();
    Ok(NamesPage {
        next_cursor,
        ttl_ms,
        tools,
    })
}

/// A page: the last of each member the listing rules read.
struct Page<'a> {
    tools: Tools<'a>,
    next_cursor: Option<Json<'a>>,
    ttl_ms: Option<Json<'a>>,
}

/// The page's `tools` member.
enum Tools<'a> {
    Absent,
    NotAnArray,
    Entries(Vec<Listed<'a>>),
}

/// One entry of `tools`: the last `name`, `description` and
/// `inputSchema` of an object.
enum Listed<'a> {
    NotAnObject,
    Object {
        name: Option<Json<'a>>,
        description: Option<Json<'a>>,
        schema: Schema<'a>,
    },
}

/// An entry's `inputSchema`.
enum Schema<'a> {
    /// Absent or `null`.
    Absent,
    /// An object, in canonical form: its own text when that was already
    /// canonical, else written.
    Canonical(Cow<'a, str>),
    /// Not an object: the entry is malformed.
    NotAnObject,
}

impl<'a> Listed<'a> {
    /// The name, description and schema by the listing rules
    /// (`ListedTool::read`), or `None` when the entry is malformed.
    fn tool(&self) -> Option<(&str, &str, Material<'_, 'a>)> {
        let Listed::Object {
            name,
            description,
            schema,
        } = self
        else {
            return None;
        };
        let name = match name {
            Some(Json::String(name)) if !is_blank(name) => name.as_ref(),
            _ => return None,
        };
        let description = match description {
            Some(Json::String(d)) => d.as_ref(),
            _ => "",
        };
        let schema = match schema {
            Schema::Absent => Material::Empty,
            Schema::Canonical(text) => Material::Canonical(text),
            Schema::NotAnObject => return None,
        };
        Some((name, description, schema))
    }
}

impl<'a> Schema<'a> {
    /// Reads a schema's raw text (its syntax already checked) in canonical
    /// form; refused as `Value` would refuse it, and when it nests deeper
    /// than serde_json reads inside a page.
    fn read(text: &'a str) -> Result<Schema<'a>, &'static str> {
        if text.starts_with('{')
            && let Some(depth) = canonical_depth(text)
        {
            return if SCHEMA_BASE_DEPTH + depth > MAX_DEPTH {
                Err("too deep a schema")
            } else {
                Ok(Schema::Canonical(Cow::Borrowed(text)))
            };
        }
        let mut canonical = String::new();
        canonicalize(text, MAX_DEPTH - SCHEMA_BASE_DEPTH, &mut canonical)
            .map_err(|_| "unreadable or too deep a schema")?;
        Ok(match text.as_bytes().first() {
            Some(b'{') => Schema::Canonical(Cow::Owned(canonical)),
            Some(b'n') => Schema::Absent,
            _ => Schema::NotAnObject,
        })
    }
}

/// The `Visitor` methods of every scalar (`true`, a number, a string,
/// `null`), each reading as `$value`: the shape the visitor wanted is not
/// there.
macro_rules! scalars_read_as {
    ($value:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

impl<'de> Deserialize<'de> for Page<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct PageVisitor;
        impl<'de> Visitor<'de> for PageVisitor {
            type Value = Page<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a tools/list result")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Page<'de>, A::Error> {
                let mut page = Page {
                    tools: Tools::Absent,
                    next_cursor: None,
                    ttl_ms: None,
                };
                while let Some(Key(key)) = map.next_key()? {
                    match key.as_ref() {
                        "tools" => page.tools = map.next_value()?,
                        "nextCursor" => page.next_cursor = Some(map.next_value()?),
                        "ttlMs" => page.ttl_ms = Some(map.next_value()?),
                        _ => {
                            map.next_value::<Skip>()?;
                        }
                    }
                }
                Ok(page)
            }
        }
        d.deserialize_any(PageVisitor)
    }
}

impl<'de> Deserialize<'de> for Tools<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ToolsVisitor;
        impl<'de> Visitor<'de> for ToolsVisitor {
            type Value = Tools<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tools<'de>, A::Error> {
                let mut entries = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
                while let Some(entry) = seq.next_element()? {
                    entries.push(entry);
                }
                Ok(Tools::Entries(entries))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Tools<'de>, A::Error> {
                Skip.visit_map(map).map(|_| Tools::NotAnArray)
            }
            scalars_read_as!(Tools::NotAnArray);
        }
        d.deserialize_any(ToolsVisitor)
    }
}

impl<'de> Deserialize<'de> for Listed<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ListedVisitor;
        impl<'de> Visitor<'de> for ListedVisitor {
            type Value = Listed<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Listed<'de>, A::Error> {
                let (mut name, mut description, mut schema) = (None, None, Schema::Absent);
                while let Some(Key(key)) = map.next_key()? {
                    match key.as_ref() {
                        "name" => name = Some(map.next_value()?),
                        "description" => description = Some(map.next_value()?),
                        "inputSchema" => {
                            let raw: &'de RawValue = map.next_value()?;
                            schema = Schema::read(raw.get()).map_err(A::Error::custom)?;
                        }
                        _ => {
                            map.next_value::<Skip>()?;
                        }
                    }
                }
                Ok(Listed::Object {
                    name,
                    description,
                    schema,
                })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Listed<'de>, A::Error> {
                Skip.visit_seq(seq).map(|_| Listed::NotAnObject)
            }
            scalars_read_as!(Listed::NotAnObject);
        }
        d.deserialize_any(ListedVisitor)
    }
}
