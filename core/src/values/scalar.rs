//! A JSON member as the rules that read a surface's results see it, the
//! same whether it came from a `serde_json::Value` or straight from the
//! result's bytes: the rules (revision, change rows, completeness) are
//! written once, over [`Scalar`] and [`Members`]. An object's key is read
//! as a [`Key`] (borrowed unless escaped) by every reader of JSON members:
//! a listing's entries, the change feed and the JSON-RPC envelope.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A JSON value as the rules read it: its kind, its number in the form
/// `Value` keeps it, its string (borrowed from the text unless escaped).
/// Arrays and objects are only known to be compound.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar<'a> {
    Null,
    Bool(bool),
    /// An integer within the signed 64-bit range.
    Int(i64),
    /// A positive integer beyond `i64::MAX` (`Value` keeps it as a `u64`).
    BigUint,
    /// A number written with a fraction or an exponent.
    Float(f64),
    Str(Cow<'a, str>),
    /// An array or an object.
    Compound,
}

impl<'a> Scalar<'a> {
    /// The scalar view of a parsed value (strings borrowed).
    pub(crate) fn of(value: &'a Value) -> Scalar<'a> {
        match value {
            Value::Null => Scalar::Null,
            Value::Bool(b) => Scalar::Bool(*b),
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Scalar::Int(i)
                } else if n.is_u64() {
                    Scalar::BigUint
                } else {
                    Scalar::Float(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => Scalar::Str(Cow::Borrowed(s)),
            Value::Array(_) | Value::Object(_) => Scalar::Compound,
        }
    }

    /// The string, if it is one.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// An object's members, looked up by key (the last of duplicated keys, as
/// `Value` keeps it).
pub(crate) trait Members {
    /// The member named `key`, if present. Implementations only answer
    /// for the keys the rules ask about.
    fn scalar(&self, key: &str) -> Option<Scalar<'_>>;
}

impl Members for Map<String, Value> {
    fn scalar(&self, key: &str) -> Option<Scalar<'_>> {
        self.get(key).map(Scalar::of)
    }
}

/// Reads any JSON value as a [`Scalar`], accepting exactly what `Value`
/// accepts (serde_json's nesting limit and number range included); arrays
/// and objects are read through and dropped.
impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Bool(b))
    }

    fn visit_i64<E>(self, i: i64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Int(i))
    }

    fn visit_u64<E>(self, u: u64) -> Result<Scalar<'de>, E> {
        Ok(i64::try_from(u).map_or(Scalar::BigUint, Scalar::Int))
    }

    fn visit_f64<E>(self, f: f64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Float(f))
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Borrowed(s)))
    }

    fn visit_str<E>(self, s: &str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Owned(s.to_owned())))
    }

    fn visit_string<E>(self, s: String) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Owned(s)))
    }

    fn visit_unit<E>(self) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Null)
    }

    fn visit_none<E>(self) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Scalar<'de>, A::Error> {
        Skip.visit_seq(seq).map(|()| Scalar::Compound)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Scalar<'de>, A::Error> {
        Skip.visit_map(map).map(|()| Scalar::Compound)
    }
}

/// Reads any JSON value through and drops it, accepting exactly what
/// `Value` accepts: unlike `serde::de::IgnoredAny` (serde_json skips it
/// without its nesting limit or number range), every nested value goes
/// through `deserialize_any` as `Value`'s does. Strings are not copied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Skip).map(|()| Skip)
    }
}

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(Skip)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Skip)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key_seed(Skip)?.is_some() {
            map.next_value_seed(Skip)?;
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `Skip` and `Scalar` accept exactly the texts `Value` accepts.
    #[test]
    fn skip_accepts_what_value_accepts() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        for text in [
            deep(128),
            deep(129),
            "1e400".to_owned(),
            "-1e400".to_owned(),
            "[1, 2,]".to_owned(),
            r#"{"a":"\ud800"}"#.to_owned(),
            r#"{"a":"\u00e9", "b": [true, null, 18446744073709551616]}"#.to_owned(),
            "{\"a\":1} x".to_owned(),
        ] {
            let value = serde_json::from_str::<Value>(&text).is_ok();
            assert_eq!(serde_json::from_str::<Skip>(&text).is_ok(), value, "{text}");
            assert_eq!(
                serde_json::from_str::<Scalar<'_>>(&text).is_ok(),
                value,
                "{text}"
            );
        }
    }

    #[test]
    fn numbers_read_as_value_keeps_them() {
        for text in [
            "1",
            "-1",
            "9223372036854775807",
            "9223372036854775808",
            "1.0",
            "1e2",
            "-0",
        ] {
            let v: Value = serde_json::from_str(text).unwrap();
            let s: Scalar<'_> = serde_json::from_str(text).unwrap();
            assert_eq!(s, Scalar::of(&v), "{text}");
        }
    }
}
