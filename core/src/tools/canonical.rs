//! Canonical JSON (RFC 8785, JCS) for tool digests.
//!
//! A pin is only useful if two implementations that read the same tool
//! definition write the same bytes for it. [`canonical_json`] writes the
//! JSON Canonicalization Scheme of RFC 8785:
//!
//! - object members sorted by their keys compared as UTF-16 code units
//!   (not bytes, not `char`s: they differ above U+FFFF);
//! - no insignificant whitespace; `{}` for an empty object, `[]` for an
//!   empty array; arrays keep their order;
//! - numbers are IEEE 754 doubles written as ECMAScript's
//!   `Number.prototype.toString` writes them (`1.0` is `1`, `1e21` is
//!   `1e+21`, `-0` is `0`, integers beyond 2^53 are rounded to the nearest
//!   double first);
//! - strings escaped as `JSON.stringify` escapes them: `"` and `\`, the
//!   short forms `\b \f \n \r \t`, every other C0 control as `\u00xx`
//!   (lowercase hex), and everything else (`/`, DEL, non-ASCII, U+2028,
//!   U+2029) raw UTF-8.
//!
//! Known differences from the other Human+ implementations, documented
//! rather than imitated: the PHP reference writes an empty object as `[]`,
//! turns integer-like keys into integers and escapes U+2028/U+2029; Python
//! writes `1.0`; a JavaScript object puts integer-like keys (`"2"`, `"10"`)
//! first. None of those occur in ordinary tool schemas except PHP's `[]`.
//!
//! The writer is iterative, so a deeply nested value cannot exhaust the
//! stack.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt::Write as _;

use serde_json::{Map, Number, Value};

/// The RFC 8785 (JCS) canonical JSON text of `value`.
///
/// ```
/// use human_plus_core::canonical_json;
/// use serde_json::json;
///
/// let schema: serde_json::Value =
///     serde_json::from_str(r#"{"type":"object","multipleOf":1.0,"title":"a/b é","max":1e21}"#)?;
/// assert_eq!(
///     canonical_json(&schema),
///     r#"{"max":1e+21,"multipleOf":1,"title":"a/b é","type":"object"}"#
/// );
/// assert_eq!(canonical_json(&json!({})), "{}");
/// assert_eq!(canonical_json(&json!([])), "[]");
/// assert_eq!(canonical_json(&json!("tab\there\u{1}")), r#""tab\there\u0001""#);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[must_use]
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

/// The UTF-8 bytes of [`canonical_json`]: the exact material a digest is
/// computed over.
///
/// ```
/// use human_plus_core::canonical_json_bytes;
///
/// assert_eq!(canonical_json_bytes(&serde_json::json!({"b": 1, "a": [true, null]})), br#"{"a":[true,null],"b":1}"#);
/// ```
#[must_use]
pub fn canonical_json_bytes(value: &Value) -> Vec<u8> {
    canonical_json(value).into_bytes()
}

/// One pending piece of output.
enum Item<'a> {
    Value(&'a Value),
    Key(&'a str),
    Lit(&'static str),
}

/// Appends the canonical text of `value` to `out`.
pub(crate) fn write_canonical(value: &Value, out: &mut String) {
    let mut stack: Vec<Item<'_>> = vec![Item::Value(value)];
    while let Some(item) = stack.pop() {
        match item {
            Item::Lit(s) => out.push_str(s),
            Item::Key(k) => {
                write_string(k, out);
                out.push(':');
            }
            Item::Value(v) => match v {
                Value::Null => out.push_str("null"),
                Value::Bool(true) => out.push_str("true"),
                Value::Bool(false) => out.push_str("false"),
                Value::Number(n) => write_number(n, out),
                Value::String(s) => write_string(s, out),
                Value::Array(items) => {
                    out.push('[');
                    stack.push(Item::Lit("]"));
                    for (i, element) in items.iter().enumerate().rev() {
                        stack.push(Item::Value(element));
                        if i > 0 {
                            stack.push(Item::Lit(","));
                        }
                    }
                }
                Value::Object(map) => {
                    out.push('{');
                    stack.push(Item::Lit("}"));
                    // A map that keeps its keys sorted (serde_json's
                    // default) is usually in order already: then its own
                    // iterator is pushed, with no list to sort.
                    if map.keys().is_sorted_by(|a, b| utf16_cmp(a, b).is_le()) {
                        push_members(&mut stack, map.iter().map(|(k, v)| (k.as_str(), v)));
                    } else {
                        push_members(&mut stack, sorted_members(map).into_iter());
                    }
                }
            },
        }
    }
}

/// Pushes an object's members, given in output order, so that they pop in
/// that order with a `,` between them.
fn push_members<'a, I>(stack: &mut Vec<Item<'a>>, members: I)
where
    I: DoubleEndedIterator<Item = (&'a str, &'a Value)> + ExactSizeIterator,
{
    for (i, (key, member)) in members.enumerate().rev() {
        stack.push(Item::Value(member));
        stack.push(Item::Key(key));
        if i > 0 {
            stack.push(Item::Lit(","));
        }
    }
}

/// The members of `map` sorted by their keys' UTF-16 code units, whatever
/// order the map itself keeps.
fn sorted_members(map: &Map<String, Value>) -> Vec<(&str, &Value)> {
    let mut members: Vec<(&str, &Value)> = map.iter().map(|(k, v)| (k.as_str(), v)).collect();
    members.sort_by(|a, b| utf16_cmp(a.0, b.0));
    members
}

/// Compares two strings by their UTF-16 code units, on their UTF-8 bytes.
///
/// Byte order is code-point order, and UTF-16 order is code-point order
/// except that a character of U+10000 and above (a surrogate pair, whose
/// first unit is U+D800..=U+DBFF) sorts before U+E000..=U+FFFF. In UTF-8
/// those are exactly the lead bytes `F0..=F4` against `EE` and `EF`, so only
/// that pair of lead bytes at the first difference is inverted.
pub(crate) fn utf16_cmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let same = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    match (a.get(same), b.get(same)) {
        (Some(&x), Some(&y)) => {
            let high_bmp = |c: u8| c == 0xEE || c == 0xEF;
            let supplementary = |c: u8| c >= 0xF0;
            if (high_bmp(x) && supplementary(y)) || (supplementary(x) && high_bmp(y)) {
                y.cmp(&x)
            } else {
                x.cmp(&y)
            }
        }
        _ => a.len().cmp(&b.len()),
    }
}

/// Appends `s` as a JSON string literal, escaped as `JSON.stringify` does.
pub(crate) fn write_string(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    // Only ASCII needs escaping, and no byte of a multi-byte UTF-8
    // character is ASCII: a byte scan finds every place to escape.
    while let Some(i) = next_escape(bytes, start) {
        out.push_str(s.get(start..i).unwrap_or_default());
        start = i + 1;
        let b = bytes.get(i).copied().unwrap_or_default();
        let short = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            0x0c => "\\f",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            _ => "",
        };
        if short.is_empty() {
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        } else {
            out.push_str(short);
        }
    }
    out.push_str(s.get(start..).unwrap_or_default());
    out.push('"');
}

/// Whether `b` must be escaped in a JSON string: `"`, `\` or a C0 control.
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// The index of the first byte at or after `from` that [`needs_escape`].
///
/// Eight bytes at a time: in a word `x`, `(x - 0x20..) & !x & 0x80..` has
/// the high bit set in (at least) the first byte below 0x20, and the same
/// test on `x ^ 0x22..` and `x ^ 0x5c..` finds `"` and `\`. A word with no
/// flag holds no byte to escape; the first flagged word is searched byte by
/// byte, so a borrow between lanes can never cause a wrong answer.
fn next_escape(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let rest = bytes.get(from..)?;
    let mut words = rest.chunks_exact(8);
    let mut offset = from;
    for word in words.by_ref() {
        let mut lanes = [0u8; 8];
        lanes.copy_from_slice(word);
        let x = u64::from_ne_bytes(lanes);
        let flags = (x.wrapping_sub(ONES * 0x20) & !x & HIGH)
            | zero_byte(x ^ (ONES * u64::from(b'"')))
            | zero_byte(x ^ (ONES * u64::from(b'\\')));
        if flags != 0
            && let Some(i) = word.iter().position(|&b| needs_escape(b))
        {
            return Some(offset + i);
        }
        offset += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| needs_escape(b))
        .map(|i| offset + i)
}

/// The nesting depth of `text` (an object or an array counts one level;
/// a scalar is 0) when `text` is already its own canonical form, exactly
/// what [`canonical_json`] writes for the value it denotes; else `None`.
///
/// `text` must be one JSON value whose syntax serde_json has checked (a
/// `RawValue`); on any other text the answer is still never `Some` for a
/// text whose canonical form differs, and nothing panics. The test is
/// strict and local: no byte outside a string is whitespace, every object's
/// keys hold no escape and come in strictly increasing UTF-16 order (so no
/// key repeats), every string escape is the one `JSON.stringify` writes,
/// and every number is an integer of at most 15 digits without a leading
/// zero and not `-0` (ECMAScript writes those digits back unchanged). A
/// text that fails any of these may still be canonical; it is then read
/// the slow way, which decides the same.
pub(crate) fn canonical_depth(text: &str) -> Option<usize> {
    /// One open container: an object keeps its last key's byte range.
    struct Open {
        object: bool,
        last_key: Option<(usize, usize)>,
    }
    let b = text.as_bytes();
    let mut open: Vec<Open> = Vec::with_capacity(8);
    let mut depth = 0;
    let mut key_next = false;
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        match c {
            b'{' | b'[' => {
                open.push(Open {
                    object: c == b'{',
                    last_key: None,
                });
                depth = depth.max(open.len());
                key_next = c == b'{';
                i += 1;
            }
            b'}' | b']' => {
                let top = open.pop()?;
                if top.object != (c == b'}') {
                    return None;
                }
                key_next = false;
                i += 1;
            }
            b',' => {
                key_next = open.last()?.object;
                i += 1;
            }
            b':' => {
                key_next = false;
                i += 1;
            }
            b'"' => {
                let start = i + 1;
                let end = canonical_string_end(b, start, key_next)?;
                if key_next {
                    let key = text.get(start..end)?;
                    let top = open.last_mut()?;
                    if let Some((s, e)) = top.last_key
                        && !utf16_cmp(text.get(s..e)?, key).is_lt()
                    {
                        return None;
                    }
                    top.last_key = Some((start, end));
                }
                key_next = false;
                i = end + 1;
            }
            b'-' | b'0'..=b'9' => {
                let len = b
                    .get(i..)?
                    .iter()
                    .position(|d| !matches!(d, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                    .unwrap_or(b.len() - i);
                let token = b.get(i..i + len)?;
                let digits = token.strip_prefix(b"-").unwrap_or(token);
                let canonical = matches!(digits.len(), 1..=15)
                    && digits.iter().all(u8::is_ascii_digit)
                    && (digits.first() != Some(&b'0')
                        || (digits == b"0" && digits.len() == token.len()));
                if !canonical {
                    return None;
                }
                i += len;
            }
            b't' | b'f' | b'n' => {
                let word: &[u8] = match c {
                    b't' => b"true",
                    b'f' => b"false",
                    _ => b"null",
                };
                if b.get(i..i + word.len())? != word {
                    return None;
                }
                i += word.len();
            }
            _ => return None,
        }
    }
    open.is_empty().then_some(depth)
}

/// The index of the quote that closes the string whose contents start at
/// `from`, when every escape in it is the one [`write_string`] writes (and,
/// for a key, when it holds no escape at all); else `None`.
fn canonical_string_end(b: &[u8], from: usize, key: bool) -> Option<usize> {
    let mut at = from;
    loop {
        at += memchr::memchr2(b'"', b'\\', b.get(at..)?)?;
        if b.get(at) == Some(&b'"') {
            return Some(at);
        }
        if key {
            return None;
        }
        match b.get(at + 1)? {
            b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => at += 2,
            b'u' => {
                // Only a C0 control without a short form, in lower case.
                let hex = b.get(at + 2..at + 6)?;
                let low = |d: u8| match d {
                    b'0'..=b'9' => Some(d - b'0'),
                    b'a'..=b'f' => Some(d - b'a' + 10),
                    _ => None,
                };
                let (Some(0), Some(0), Some(h), Some(l)) = (
                    low(hex.first().copied()?),
                    low(hex.get(1).copied()?),
                    low(hex.get(2).copied()?),
                    low(hex.get(3).copied()?),
                ) else {
                    return None;
                };
                let code = h * 16 + l;
                if code >= 0x20 || matches!(code, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                    return None;
                }
                at += 6;
            }
            _ => return None,
        }
    }
}

/// Why [`canonicalize`] could not write a text: `Value` would refuse it (a
/// number beyond a double, a lone surrogate), it nests deeper than allowed,
/// or it is not one JSON value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unreadable;

/// Appends the canonical form of `text` (what [`canonical_json`] writes for
/// the value `text` denotes) to `out`, straight from the text: no tree is
/// built. Text already in canonical form is copied as it stands; an object
/// whose keys come out of order has its members written again in order.
/// `text` is one JSON value whose syntax serde_json has checked (a
/// `RawValue`); its containers may nest at most `max_depth` levels.
///
/// What the text means is decided by serde_json itself wherever it could
/// differ: a string holding an escape is decoded by serde_json, a number
/// other than a short integer is read as serde_json's `Number` and written
/// by [`write_number`], so the answer is the writer's bit for bit and the
/// refusals are `Value`'s.
pub(crate) fn canonicalize(
    text: &str,
    max_depth: usize,
    out: &mut String,
) -> Result<(), Unreadable> {
    let mut c = Canonicalizer {
        text,
        at: 0,
        depth_left: max_depth,
        members: Vec::new(),
        scratch: String::new(),
    };
    out.reserve(text.len());
    c.value(out)?;
    c.space();
    if c.at == text.len() {
        Ok(())
    } else {
        Err(Unreadable)
    }
}

/// One member of an object being written: its key and where the member
/// (`"key":value`) sits in the output.
struct Member<'t> {
    key: Cow<'t, str>,
    start: usize,
    end: usize,
}

/// The state of one [`canonicalize`] pass.
struct Canonicalizer<'t> {
    text: &'t str,
    at: usize,
    depth_left: usize,
    /// The members of every open object, innermost last.
    members: Vec<Member<'t>>,
    /// Where an out-of-order object's members are copied to be reordered.
    scratch: String,
}

impl<'t> Canonicalizer<'t> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn value(&mut self, out: &mut String) -> Result<(), Unreadable> {
        self.space();
        match self.peek().ok_or(Unreadable)? {
            b'{' => self.object(out),
            b'[' => self.array(out),
            b'"' => {
                let (raw, escaped) = self.string()?;
                if escaped {
                    let decoded: String = serde_json::from_str(raw).map_err(|_| Unreadable)?;
                    write_string(&decoded, out);
                } else {
                    // No escape: no quote, backslash or control inside (the
                    // syntax was checked), so the text is its own form.
                    out.push_str(raw);
                }
                Ok(())
            }
            b't' => self.word("true", out),
            b'f' => self.word("false", out),
            b'n' => self.word("null", out),
            _ => self.number(out),
        }
    }

    fn word(&mut self, word: &str, out: &mut String) -> Result<(), Unreadable> {
        if self.text.get(self.at..self.at + word.len()) != Some(word) {
            return Err(Unreadable);
        }
        self.at += word.len();
        out.push_str(word);
        Ok(())
    }

    /// A string token, quotes included, and whether it holds an escape.
    fn string(&mut self) -> Result<(&'t str, bool), Unreadable> {
        let b = self.text.as_bytes();
        let start = self.at;
        let mut at = start + 1;
        let mut escaped = false;
        loop {
            at += memchr::memchr2(b'"', b'\\', b.get(at..).ok_or(Unreadable)?).ok_or(Unreadable)?;
            if b.get(at) == Some(&b'"') {
                break;
            }
            // A backslash: the byte after it is never a closing quote.
            escaped = true;
            at += 2;
        }
        self.at = at + 1;
        Ok((self.text.get(start..=at).ok_or(Unreadable)?, escaped))
    }

    fn number(&mut self, out: &mut String) -> Result<(), Unreadable> {
        let b = self.text.as_bytes();
        let len = b
            .get(self.at..)
            .ok_or(Unreadable)?
            .iter()
            .position(|d| !matches!(d, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
            .unwrap_or(b.len() - self.at);
        let token = self.text.get(self.at..self.at + len).ok_or(Unreadable)?;
        self.at += len;
        let digits = token.strip_prefix('-').unwrap_or(token).as_bytes();
        let short_integer = matches!(digits.len(), 1..=15)
            && digits.iter().all(u8::is_ascii_digit)
            && (digits.first() != Some(&b'0') || (digits == b"0" && digits.len() == token.len()));
        if short_integer {
            // ECMAScript writes these digits back unchanged.
            out.push_str(token);
        } else {
            let n: Number = serde_json::from_str(token).map_err(|_| Unreadable)?;
            write_number(&n, out);
        }
        Ok(())
    }

    fn enter(&mut self) -> Result<(), Unreadable> {
        self.depth_left = self.depth_left.checked_sub(1).ok_or(Unreadable)?;
        self.at += 1;
        self.space();
        Ok(())
    }

    fn array(&mut self, out: &mut String) -> Result<(), Unreadable> {
        self.enter()?;
        out.push('[');
        if self.peek() == Some(b']') {
            self.at += 1;
        } else {
            loop {
                self.value(out)?;
                self.space();
                match self.peek() {
                    Some(b',') => {
                        self.at += 1;
                        out.push(',');
                    }
                    Some(b']') => {
                        self.at += 1;
                        break;
                    }
                    _ => return Err(Unreadable),
                }
            }
        }
        out.push(']');
        self.depth_left += 1;
        Ok(())
    }

    fn object(&mut self, out: &mut String) -> Result<(), Unreadable> {
        self.enter()?;
        let open = out.len();
        out.push('{');
        let base = self.members.len();
        let mut in_order = true;
        if self.peek() == Some(b'}') {
            self.at += 1;
        } else {
            loop {
                self.space();
                if self.peek() != Some(b'"') {
                    return Err(Unreadable);
                }
                let (raw, escaped) = self.string()?;
                let key: Cow<'t, str> = if escaped {
                    Cow::Owned(serde_json::from_str(raw).map_err(|_| Unreadable)?)
                } else {
                    Cow::Borrowed(raw.get(1..raw.len() - 1).ok_or(Unreadable)?)
                };
                if self.members.len() > base
                    && let Some(last) = self.members.last()
                    && !utf16_cmp(&last.key, &key).is_lt()
                {
                    in_order = false;
                }
                if self.members.len() > base {
                    out.push(',');
                }
                let start = out.len();
                write_string(&key, out);
                self.space();
                if self.peek() != Some(b':') {
                    return Err(Unreadable);
                }
                self.at += 1;
                out.push(':');
                self.value(out)?;
                self.members.push(Member {
                    key,
                    start,
                    end: out.len(),
                });
                self.space();
                match self.peek() {
                    Some(b',') => self.at += 1,
                    Some(b'}') => {
                        self.at += 1;
                        break;
                    }
                    _ => return Err(Unreadable),
                }
            }
        }
        if !in_order {
            self.reorder(open, base, out);
        }
        self.members.truncate(base);
        out.push('}');
        self.depth_left += 1;
        Ok(())
    }

    /// Writes the members from `base` on again, sorted by key (stable),
    /// keeping only the last of equal keys, after the `{` at `open`.
    fn reorder(&mut self, open: usize, base: usize, out: &mut String) {
        let Some(members) = self.members.get_mut(base..) else {
            return;
        };
        self.scratch.clear();
        self.scratch
            .push_str(out.get(open + 1..).unwrap_or_default());
        out.truncate(open + 1);
        let shift = open + 1;
        // Stable: equal keys keep the text's order, the last one wins.
        members.sort_by(|a, b| utf16_cmp(&a.key, &b.key));
        let mut first = true;
        for (i, m) in members.iter().enumerate() {
            if members.get(i + 1).is_some_and(|next| next.key == m.key) {
                continue;
            }
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(
                self.scratch
                    .get(m.start - shift..m.end - shift)
                    .unwrap_or_default(),
            );
        }
    }
}

/// Appends a JSON number as the double it denotes, written by ECMAScript's
/// rules.
pub(crate) fn write_number(n: &Number, out: &mut String) {
    // An integer a double holds exactly (|n| <= 2^53) is written by
    // ECMAScript as its decimal digits: no need for the double formatter.
    const EXACT: u64 = 1 << 53;
    if let Some(i) = n.as_i64().filter(|i| i.unsigned_abs() <= EXACT) {
        let _ = write!(out, "{i}");
        return;
    }
    if let Some(u) = n.as_u64().filter(|u| *u <= EXACT) {
        let _ = write!(out, "{u}");
        return;
    }
    let as_double = n
        .as_f64()
        .or_else(|| n.to_string().parse::<f64>().ok())
        .filter(|f| f.is_finite());
    match as_double {
        Some(f) => write_es_number(f, out),
        // Only reachable with serde_json's `arbitrary_precision` and a
        // literal beyond the double range; keep its text rather than lie.
        None => out.push_str(&n.to_string()),
    }
}

/// Appends a finite `f64` as ECMAScript's `Number::toString(10)` writes it.
pub(crate) fn write_es_number(f: f64, out: &mut String) {
    if f == 0.0 {
        out.push('0');
        return;
    }
    if !f.is_finite() {
        // JSON cannot carry these; JSON.stringify writes null.
        out.push_str("null");
        return;
    }
    if f < 0.0 {
        out.push('-');
    }
    let Some((digits, n)) = shortest_digits(f.abs()) else {
        out.push_str(&format!("{}", f.abs()));
        return;
    };
    let k = i64::try_from(digits.len()).unwrap_or(i64::MAX);
    if k <= n && n <= 21 {
        // Integer: the digits, then n - k zeros.
        out.push_str(&digits);
        for _ in k..n {
            out.push('0');
        }
    } else if 0 < n && n <= 21 {
        // Fixed point with the decimal point inside the digits.
        let (int, frac) = digits.split_at(usize::try_from(n).unwrap_or(0));
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        for _ in n..0 {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        out.push('e');
        let e = n - 1;
        out.push(if e < 0 { '-' } else { '+' });
        out.push_str(&e.unsigned_abs().to_string());
    }
}

/// The shortest round-trip decimal digits of a positive finite `f` (no
/// leading or trailing zeros) and the ECMAScript exponent `n`, such that
/// `f = 0.d1d2...dk × 10^n`.
fn shortest_digits(f: f64) -> Option<(String, i64)> {
    // Rust's `{:e}` writes the shortest digits that round-trip.
    let sci = format!("{f:e}");
    let (mantissa, exponent) = sci.split_once('e')?;
    let exponent: i64 = exponent.parse().ok()?;
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.trim_end_matches('0');
    if digits.is_empty() || digits.starts_with('0') {
        return None;
    }
    Some((digits.to_owned(), exponent + 1))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn es(f: f64) -> String {
        let mut s = String::new();
        write_es_number(f, &mut s);
        s
    }

    fn canon_text(text: &str) -> String {
        canonical_json(&serde_json::from_str::<Value>(text).unwrap())
    }

    #[test]
    fn es_number_vectors() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (1.5, "1.5"),
            (-1.5, "-1.5"),
            (0.1, "0.1"),
            (0.5, "0.5"),
            (100.0, "100"),
            (123.456, "123.456"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (0.000001, "0.000001"),
            (0.0000015, "0.0000015"),
            (123456789012345680000.0, "123456789012345680000"),
            (5e-324, "5e-324"),
            (-5e-324, "-5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (2.2250738585072014e-308, "2.2250738585072014e-308"),
            (9007199254740992.0, "9007199254740992"),
            (4.35, "4.35"),
            (0.3, "0.3"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e22, "1e+22"),
            (1.2345e25, "1.2345e+25"),
            (333333333.3333333, "333333333.3333333"),
            (1e-6, "0.000001"),
            (1.23e-6, "0.00000123"),
            (1e100, "1e+100"),
            (295147905179352830000.0, "295147905179352830000"),
            (1.0e15, "1000000000000000"),
            (999999999999999900000.0, "999999999999999900000"),
        ];
        for &(f, want) in cases {
            assert_eq!(es(f), want, "{f:e}");
        }
    }

    #[test]
    fn json_numbers_are_doubles() {
        assert_eq!(canon_text("9007199254740993"), "9007199254740992");
        assert_eq!(canon_text("-9007199254740993"), "-9007199254740992");
        assert_eq!(canon_text("18446744073709551615"), "18446744073709552000");
        assert_eq!(canon_text("-9223372036854775808"), "-9223372036854776000");
        assert_eq!(canon_text("1.0"), "1");
        assert_eq!(canon_text("-0"), "0");
        assert_eq!(canon_text("-0.0"), "0");
        assert_eq!(canon_text("1E21"), "1e+21");
        assert_eq!(canon_text("100e-2"), "1");
        assert_eq!(canon_text("[1e-7,0.000001,12e0]"), "[1e-7,0.000001,12]");
    }

    #[test]
    fn strings_are_escaped_like_json_stringify() {
        let s = "q\"b\\s/\u{8}\u{c}\n\r\t\u{0}\u{1f}\u{7f}é\u{2028}\u{2029}😀";
        assert_eq!(
            canonical_json(&json!(s)),
            "\"q\\\"b\\\\s/\\b\\f\\n\\r\\t\\u0000\\u001f\u{7f}é\u{2028}\u{2029}😀\""
        );
        assert_eq!(canonical_json(&json!("")), "\"\"");
        assert_eq!(canonical_json(&json!("\u{b}")), "\"\\u000b\"");
    }

    #[test]
    fn keys_sort_by_utf16_code_units() {
        // U+E000 is one unit (0xE000); U+10000 is a surrogate pair
        // starting 0xD800, so it sorts first in UTF-16 but last in UTF-8.
        let v = json!({"\u{e000}": 1, "\u{10000}": 2, "a": 3, "B": 4, "": 5, "aa": 6});
        assert_eq!(
            canonical_json(&v),
            "{\"\":5,\"B\":4,\"a\":3,\"aa\":6,\"\u{10000}\":2,\"\u{e000}\":1}"
        );
        // Integer-like keys are strings like any other.
        assert_eq!(
            canon_text(r#"{"b":0,"10":1,"9":2,"a":3,"_":4,"B":5,"-1":6,"01":7,"":8}"#),
            r#"{"":8,"-1":6,"01":7,"10":1,"9":2,"B":5,"_":4,"a":3,"b":0}"#
        );
    }

    #[test]
    fn structure_and_literals() {
        assert_eq!(
            canon_text(
                r#" { "z" : [ 3 , { } , [ ] , null , true , false ] , "a" : { "y" : { } } } "#
            ),
            r#"{"a":{"y":{}},"z":[3,{},[],null,true,false]}"#
        );
        assert_eq!(canonical_json(&Value::Null), "null");
        assert_eq!(canonical_json_bytes(&json!(true)), b"true");
    }

    #[test]
    fn rfc8785_sample() {
        // The example of RFC 8785 section 3.2.2 (number part).
        let text = r#"{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"literals":[null,true,false]}"#;
        assert_eq!(
            canon_text(text),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27]}"#
        );
    }

    #[test]
    fn deep_nesting_does_not_recurse() {
        let mut v = json!(1);
        for _ in 0..10_000 {
            v = Value::Array(vec![v]);
        }
        let text = canonical_json(&v);
        assert_eq!(text.len(), 20_001);
        // Dismantle without recursion so the test's drop cannot overflow.
        let mut cur = v;
        while let Value::Array(mut items) = cur {
            cur = items.pop().unwrap_or(Value::Null);
        }
    }

    pub(crate) fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((any::<String>(), inner), 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// `JSON.stringify`'s escaping, one character at a time.
    fn escape_by_chars(s: &str) -> String {
        let mut out = String::from('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    proptest! {
        #[test]
        fn the_word_scan_escapes_like_a_char_scan(
            // Dense in the bytes next to the ones to escape (0x1f/0x20,
            // 0x21/0x22/0x23, 0x5b/0x5c/0x5d, 0x7f, 0xa0) and long enough
            // to span several words at every alignment.
            s in "[\u{0}-\u{3}\u{1e}-\u{24}\u{5b}-\u{5d}a\u{7f}\u{a0}é😀\u{2028}]{0,40}",
            prefix in 0usize..9,
        ) {
            let s = format!("{}{s}", "x".repeat(prefix));
            let mut out = String::new();
            write_string(&s, &mut out);
            prop_assert_eq!(out, escape_by_chars(&s));
        }

        #[test]
        fn byte_comparison_matches_utf16_order(
            a in "[a\u{e000}-\u{e010}\u{ffee}\u{10000}-\u{10010}\u{1f600}é]{0,6}",
            b in "[a\u{e000}-\u{e010}\u{ffee}\u{10000}-\u{10010}\u{1f600}é]{0,6}",
        ) {
            prop_assert_eq!(utf16_cmp(&a, &b), a.encode_utf16().cmp(b.encode_utf16()));
        }
    }

    proptest! {
        #[test]
        fn never_panics_and_is_idempotent(v in arb_json()) {
            let once = canonical_json(&v);
            let parsed: Value = serde_json::from_str(&once).unwrap();
            prop_assert_eq!(canonical_json(&parsed), once);
        }

        #[test]
        fn any_finite_double_round_trips(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
            let text = es(f);
            let back: f64 = text.parse().unwrap();
            prop_assert_eq!(back, if f == 0.0 { 0.0 } else { f });
            prop_assert!(!text.contains("e") || text.contains("e+") || text.contains("e-"));
        }
    }
}
