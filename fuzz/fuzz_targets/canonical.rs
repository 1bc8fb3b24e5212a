//! Canonical JSON (RFC 8785) and the tool digest.
//!
//! Input: JSON text (or bytes a value is built from).
//!
//! Properties:
//! - `canonical_json` output is JSON; parsing it and canonicalising again
//!   gives the same bytes (idempotent);
//! - member insertion order does not matter;
//! - the digest of a definition is stable under a re-parse of its
//!   canonical schema, and has the `sha256:` + 32 lowercase hex shape;
//! - `ToolDefinition::from_listing` never panics; an accepted definition
//!   has a non-blank name and an object schema, and its canonical material
//!   is canonical JSON of `{description, inputSchema, name}`;
//! - a listing holding the value, read from its bytes the names way (a
//!   schema already canonical hashed as it stands) and the tree way,
//!   decides the same (admitted names, or the same refusal).

#![no_main]

use human_plus_core::{
    DIGEST_PREFIX, ListingReader, ToolDefinition, TrustPolicy, admit_listing_bytes, canonical_json,
    canonical_json_bytes, digest_of, listing_digests,
};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fn assert_digest_shape(d: &str) {
    let hex = d.strip_prefix(DIGEST_PREFIX).expect("sha256: prefix");
    assert_eq!(hex.len(), 32);
    assert!(
        hex.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
}

fuzz_target!(|data: &[u8]| {
    let value = human_plus_fuzz::json_from_bytes(data);

    let c1 = canonical_json(&value);
    assert_eq!(canonical_json_bytes(&value), c1.as_bytes());
    let reparsed: Value = serde_json::from_str(&c1)
        .unwrap_or_else(|e| panic!("canonical output is not JSON ({e}): {c1}"));
    let c2 = canonical_json(&reparsed);
    assert_eq!(c1, c2, "canonical_json is not idempotent");

    // A value with its members inserted in reverse order writes the same.
    fn reversed(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut out = serde_json::Map::new();
                for (k, x) in m.iter().rev() {
                    out.insert(k.clone(), reversed(x));
                }
                Value::Object(out)
            }
            Value::Array(a) => Value::Array(a.iter().map(reversed).collect()),
            other => other.clone(),
        }
    }
    assert_eq!(canonical_json(&reversed(&value)), c1);

    // Digest stability.
    let schema = match &value {
        Value::Object(_) => value.clone(),
        other => json!({ "x": other }),
    };
    let schema2: Value = serde_json::from_str(&canonical_json(&schema)).unwrap();
    let d1 = digest_of("surface_write", "Write.", &schema);
    assert_digest_shape(&d1);
    assert_eq!(
        d1,
        digest_of("surface_write", "Write.", &schema2),
        "digest changed on re-parse"
    );

    // Listings.
    for entry in [
        value.clone(),
        json!({"name": "surface_write", "description": "Write.", "inputSchema": value}),
        json!({"name": value, "inputSchema": {}}),
        json!({"name": "t", "description": value}),
    ] {
        if let Ok(t) = ToolDefinition::from_listing(&entry) {
            assert!(
                !t.name()
                    .trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r' | '\0' | '\x0B'))
                    .is_empty()
            );
            assert!(t.input_schema().is_object());
            let material = t.canonical_material();
            let m: Value = serde_json::from_str(&material).expect("material is JSON");
            assert_eq!(canonical_json(&m), material, "material is canonical");
            assert_eq!(
                m,
                json!({"name": t.name(), "description": t.description(), "inputSchema": t.input_schema()})
                    .as_object()
                    .map(|o| Value::Object(o.clone()))
                    .unwrap()
                    .pipe_canonical(),
            );
            assert_digest_shape(&t.digest());
            assert_eq!(
                t.digest(),
                digest_of(t.name(), t.description(), t.input_schema())
            );
        }
    }

    // The same listing read from its bytes the names way (a cold call's:
    // a schema already in canonical form is hashed as it stands) and the
    // tree way (with definitions) decides the same, whichever way the text
    // is written; the raw input too, when it is JSON.
    let listing = json!({"tools": [
        {"name": "t0", "description": "Write.", "inputSchema": value, "annotations": value},
        {"name": "t1", "inputSchema": schema},
        value,
    ]});
    let mut texts = vec![
        canonical_json(&listing),
        serde_json::to_string_pretty(&listing).unwrap(),
    ];
    if let Ok(raw) = std::str::from_utf8(data) {
        texts.push(raw.to_owned());
        texts.push(format!(
            "{{\"tools\":[{{\"name\":\"t0\",\"inputSchema\":{raw}}}]}}"
        ));
    }
    for text in texts {
        let pins = listing_digests(text.as_bytes()).unwrap_or_default();
        let policy = TrustPolicy::every_tool(pins);
        let names = admit_listing_bytes(text.as_bytes(), &policy).map(|o| o.admitted().to_vec());
        let mut reader = ListingReader::new();
        let tree = reader
            .page(text.clone(), None, &policy, true)
            .and_then(|_| reader.finish(&policy, None, true))
            .map(|o| o.admitted().to_vec());
        assert_eq!(
            names, tree,
            "the names way and the tree way disagree on {text}"
        );
    }
});

trait PipeCanonical {
    fn pipe_canonical(self) -> Value;
}

impl PipeCanonical for Value {
    /// The value as canonical text reads back (numbers rounded as JCS does).
    fn pipe_canonical(self) -> Value {
        serde_json::from_str(&canonical_json(&self)).unwrap()
    }
}
