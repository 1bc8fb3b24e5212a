//! Small, pure helpers that reproduce how the Node relay reads its input:
//! `URLSearchParams`, WHATWG path normalisation (the parts that matter),
//! `Number.parseInt`, `String(value)` for JSON-RPC ids, and JSON string
//! quoting.

use serde_json::Value;

/// A parsed query string, read the way `URLSearchParams.get` reads it:
/// `+` is a space, percent escapes are decoded, invalid UTF-8 becomes
/// U+FFFD, and the first occurrence of a name wins.
#[derive(Debug, Default, Clone)]
pub(crate) struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Parses `raw` (the part after `?`, without a fragment).
    pub(crate) fn parse(raw: Option<&str>) -> Query {
        let mut pairs = Vec::new();
        if let Some(raw) = raw {
            for part in raw.split('&') {
                if part.is_empty() {
                    continue;
                }
                let (name, value) = match part.find('=') {
                    Some(i) => (&part[..i], &part[i + 1..]),
                    None => (part, ""),
                };
                pairs.push((form_decode(name), form_decode(value)));
            }
        }
        Query { pairs }
    }

    /// The first value of `name`, if present (an empty value is present).
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `application/x-www-form-urlencoded` decoding of one name or value.
fn form_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' => {
                let hi = bytes.get(i + 1).and_then(|b| hex_val(*b));
                let lo = bytes.get(i + 2).and_then(|b| hex_val(*b));
                match (hi, lo) {
                    (Some(h), Some(l)) => {
                        out.push(h * 16 + l);
                        i += 3;
                    }
                    _ => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-encodes a query component (everything but unreserved characters).
pub(crate) fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => {
                out.push('%');
                out.push(char::from(b"0123456789ABCDEF"[usize::from(b >> 4)]));
                out.push(char::from(b"0123456789ABCDEF"[usize::from(b & 15)]));
            }
        }
    }
    out
}

/// The pathname as the WHATWG URL parser would give it for an HTTP URL:
/// backslashes are slashes, and `.` / `..` segments (also spelled `%2e`)
/// are resolved. Percent escapes are otherwise left alone.
pub(crate) fn normalize_path(path: &str) -> String {
    let path = path.replace('\\', "/");
    if !path.starts_with('/') {
        return path;
    }
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path[1..].split('/').collect();
    let last = segments.len().saturating_sub(1);
    for (i, seg) in segments.iter().enumerate() {
        let lower = seg.to_ascii_lowercase();
        let single = lower == "." || lower == "%2e";
        let double = matches!(lower.as_str(), ".." | ".%2e" | "%2e." | "%2e%2e");
        if double {
            out.pop();
            if i == last {
                out.push("");
            }
        } else if single {
            if i == last {
                out.push("");
            }
        } else {
            out.push(seg);
        }
    }
    let mut s = String::with_capacity(path.len());
    for seg in out {
        s.push('/');
        s.push_str(seg);
    }
    if s.is_empty() {
        s.push('/');
    }
    s
}

/// `Number.parseInt(raw, 10)`: leading whitespace, an optional sign, then
/// as many decimal digits as there are. `None` is `NaN`.
pub(crate) fn js_parse_int(raw: &str) -> Option<i128> {
    let s = raw.trim_start_matches(|c: char| c.is_whitespace() || c == '\u{feff}');
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let end = digits
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    if end == 0 {
        return None;
    }
    let mut n: i128 = 0;
    for b in digits[..end].bytes() {
        n = n.saturating_mul(10).saturating_add(i128::from(b - b'0'));
    }
    Some(if neg { -n } else { n })
}

/// `String(value)` in JavaScript, for a JSON value (the relay keys its
/// caller map by `String(id)`, so `1`, `1.0` and `"1"` are one key).
pub(crate) fn js_string(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => js_number(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::Null => String::new(),
                other => js_string(other),
            })
            .collect::<Vec<_>>()
            .join(","),
        Value::Object(_) => "[object Object]".to_owned(),
    }
}

/// ECMAScript `Number::toString(10)`.
pub(crate) fn js_number(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_owned();
    }
    if x == 0.0 {
        return "0".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    let sign = if x < 0.0 { "-" } else { "" };
    // Shortest round-trip digits and exponent, from Rust's `{:e}`.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let k = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    let n = exp + 1; // position of the decimal point relative to the digits
    let body = if k <= n && n <= 21 {
        let zeros = usize::try_from(n - k).unwrap_or(0);
        format!("{digits}{}", "0".repeat(zeros))
    } else if 0 < n && n <= 21 {
        let split = usize::try_from(n).unwrap_or(0);
        format!("{}.{}", &digits[..split], &digits[split..])
    } else if -6 < n && n <= 0 {
        let zeros = usize::try_from(-n).unwrap_or(0);
        format!("0.{}{digits}", "0".repeat(zeros))
    } else {
        let e = n - 1;
        let esign = if e < 0 { "-" } else { "+" };
        if k == 1 {
            format!("{digits}e{esign}{}", e.abs())
        } else {
            format!("{}.{}e{esign}{}", &digits[..1], &digits[1..], e.abs())
        }
    };
    format!("{sign}{body}")
}

/// A JSON string literal for `s` (quotes included).
pub(crate) fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

/// The length of `s` as JavaScript counts it (UTF-16 code units).
pub(crate) fn js_length(s: &str) -> usize {
    s.encode_utf16().count()
}

/// Whether `s` matches `^[A-Za-z0-9_-]{4,64}$`.
pub(crate) fn is_session_id(s: &str) -> bool {
    (4..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `s` matches `^[a-f0-9]{16}$`.
pub(crate) fn is_subscriber_id(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn query_reads_like_url_search_params() {
        let q = Query::parse(Some("token=a%20b+c&client&x=1&x=2&bad=%zz%4"));
        assert_eq!(q.get("token"), Some("a b c"));
        assert_eq!(q.get("client"), Some(""));
        assert_eq!(q.get("x"), Some("1"));
        assert_eq!(q.get("bad"), Some("%zz%4"));
        assert_eq!(q.get("missing"), None);
        let q = Query::parse(Some("a=%ff"));
        assert_eq!(q.get("a"), Some("\u{fffd}"));
    }

    #[test]
    fn paths_normalise_like_whatwg() {
        assert_eq!(normalize_path("/abcd/./inbox"), "/abcd/inbox");
        assert_eq!(normalize_path("/x/../abcd/inbox"), "/abcd/inbox");
        assert_eq!(normalize_path("/abcd/%2E/inbox"), "/abcd/inbox");
        assert_eq!(normalize_path("/.."), "/");
        assert_eq!(normalize_path("/a/.."), "/");
        assert_eq!(normalize_path("/a/b/"), "/a/b/");
        assert_eq!(normalize_path("\\abcd\\inbox"), "/abcd/inbox");
    }

    #[test]
    fn parse_int_is_javascripts() {
        assert_eq!(js_parse_int("1500"), Some(1500));
        assert_eq!(js_parse_int(" 12ms"), Some(12));
        assert_eq!(js_parse_int("-5"), Some(-5));
        assert_eq!(js_parse_int("1e3"), Some(1));
        assert_eq!(js_parse_int("abc"), None);
        assert_eq!(js_parse_int(""), None);
        assert_eq!(js_parse_int("-"), None);
        assert!(js_parse_int("99999999999999999999999999999999999999999").is_some());
    }

    #[test]
    fn string_of_ids_is_javascripts() {
        assert_eq!(js_string(&json!(1)), "1");
        assert_eq!(js_string(&json!(1.0)), "1");
        assert_eq!(js_string(&json!("1")), "1");
        assert_eq!(js_string(&json!(1.5)), "1.5");
        assert_eq!(js_string(&json!(-0.0)), "0");
        assert_eq!(js_string(&json!(1e21)), "1e+21");
        assert_eq!(js_string(&json!(1e20)), "100000000000000000000");
        assert_eq!(js_string(&json!(1e-7)), "1e-7");
        assert_eq!(js_string(&json!(0.000001)), "0.000001");
        assert_eq!(js_string(&json!(1.25e-10)), "1.25e-10");
        assert_eq!(
            js_string(&json!(12345678901234567890u64)),
            "12345678901234567000"
        );
        assert_eq!(js_string(&json!(true)), "true");
        assert_eq!(js_string(&json!({"a": 1})), "[object Object]");
        assert_eq!(js_string(&json!([1, null, [2, 3]])), "1,,2,3");
    }

    #[test]
    fn shapes() {
        assert!(is_session_id("abcd"));
        assert!(is_session_id("A-b_9"));
        assert!(!is_session_id("abc"));
        assert!(!is_session_id(&"a".repeat(65)));
        assert!(!is_session_id("ab.cd"));
        assert!(is_subscriber_id("0123456789abcdef"));
        assert!(!is_subscriber_id("0123456789ABCDEF"));
        assert_eq!(js_length("é😀"), 3);
        assert_eq!(encode_component("a b&c=é"), "a%20b%26c%3D%C3%A9");
    }
}
