//! The JSON a service sends on (issue 35): what calls, listings and the
//! feed return, with their field names pinned. A renamed or reordered
//! field fails here before it reaches anybody's API.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use human_plus_core::{
    CallResult, ChangeFeed, Discovery, NO_PINS, ResultGuard, SeededEntropy, Seen, SurfaceChanges,
    SurfaceRevision, SurfaceTool, ToolClaims, ToolDefinition, ToolRefusal, TrustPolicy, Withheld,
    toolset,
};
use serde_json::{Value, json};

/// The keys of a JSON object, in the order they were written.
fn keys(text: &str) -> Vec<String> {
    // serde_json's `Value` sorts keys unless `preserve_order` is on, so
    // read the top-level keys from the text with a streaming visitor.
    let map: serde_json::Map<String, Value> = serde_json::from_str(text).unwrap();
    let mut found: Vec<(usize, String)> = map
        .keys()
        .map(|k| {
            let at = text
                .find(&format!("\"{k}\":"))
                .unwrap_or_else(|| panic!("{k} in {text}"));
            (at, k.clone())
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, k)| k).collect()
}

fn def(name: &str, description: &str, schema: Value) -> ToolDefinition {
    ToolDefinition::new(name, description, schema).unwrap()
}

#[test]
fn a_call_result() {
    let framed = ResultGuard::default()
        .frame(
            "sheet:one",
            "sheet_read",
            "A1 = 4",
            &mut SeededEntropy::new(7),
        )
        .unwrap();
    let result = CallResult {
        text: framed.clone(),
        pinned: Some(SurfaceRevision::observed("r1", "sheet_read").unwrap()),
        revision: Some(SurfaceRevision::observed("r2", "sheet_read").unwrap()),
        revision_refused: false,
    };
    let text = serde_json::to_string(&result).unwrap();
    assert_eq!(
        keys(&text),
        ["text", "pinned", "revision", "revision_refused"]
    );
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["text"], framed.as_str());
    assert_eq!(
        value["pinned"],
        json!({"token": "r1", "observed_from": "sheet_read"})
    );
    assert_eq!(
        value["revision"],
        json!({"token": "r2", "observed_from": "sheet_read"})
    );
    assert!(text.contains(r#""pinned":{"token":"r1","observed_from":"sheet_read"}"#));
    assert_eq!(serde_json::from_str::<CallResult>(&text).unwrap(), result);

    // Nothing pinned, a marker refused.
    let bare = CallResult {
        text: framed,
        pinned: None,
        revision: None,
        revision_refused: true,
    };
    let value = serde_json::to_value(&bare).unwrap();
    assert_eq!(value["pinned"], Value::Null);
    assert_eq!(value["revision"], Value::Null);
    assert_eq!(value["revision_refused"], true);
    assert_eq!(serde_json::from_value::<CallResult>(value).unwrap(), bare);
    // A revision read back is held to the marker's rules.
    let mut blank = serde_json::to_value(&result).unwrap();
    blank["revision"]["token"] = "  ".into();
    assert!(serde_json::from_value::<CallResult>(blank).is_err());
}

trait Sorted {
    fn tap_sorted(self) -> Self;
}

impl Sorted for Vec<String> {
    fn tap_sorted(mut self) -> Self {
        self.sort();
        self
    }
}

/// A listing admitted by a real policy: an allowed tool with claims, a
/// reserved one, one not allowed, a repeated name and a malformed name.
fn discovery() -> Discovery {
    let policy = TrustPolicy::allowing(["sheet_read", "sheet_write"], NO_PINS);
    let admission = policy
        .admit(vec![
            def(
                "sheet_read",
                "Read a cell.",
                json!({"type": "object", "properties": {"address": {"type": "string"}}, "required": ["address"]}),
            ),
            def("sheet_confirm_edit", "Confirm.", json!({})),
            def("sheet_erase", "Erase.", json!({})),
            def("sheet_read", "Read again.", json!({})),
            def("sheet read", "Spaced.", json!({})),
        ])
        .unwrap();
    Discovery {
        tools: admission.admitted,
        withheld: admission.withheld,
        malformed: 2,
        claims: BTreeMap::from([(
            "sheet_read".to_owned(),
            ToolClaims {
                read_only: Some(true),
                destructive: Some(false),
            },
        )]),
    }
}

#[test]
fn a_discovery() {
    let d = discovery();
    let text = serde_json::to_string(&d).unwrap();
    assert_eq!(keys(&text), ["tools", "withheld", "malformed", "claims"]);
    let value: Value = serde_json::from_str(&text).unwrap();
    let tool = &value["tools"][0];
    assert_eq!(
        keys(&tool.to_string()).tap_sorted(),
        ["description", "digest", "input_schema", "name"]
    );
    // The tool, exactly as it is written.
    let t = &d.tools[0];
    let written = format!(
        r#"{{"name":"sheet_read","description":"Read a cell.","input_schema":{},"digest":"{}"}}"#,
        serde_json::to_string(t.input_schema()).unwrap(),
        t.digest()
    );
    assert!(
        text.starts_with(&format!(r#"{{"tools":[{written}],"withheld":["#)),
        "{text}"
    );
    assert_eq!(tool["digest"], d.tools[0].digest());
    assert_eq!(tool["input_schema"], *d.tools[0].input_schema());

    let codes: Vec<(&str, &str)> = value["withheld"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["name"].as_str().unwrap(), w["code"].as_str().unwrap()))
        .collect();
    assert_eq!(
        codes,
        [
            ("sheet_confirm_edit", "reserved"),
            ("sheet_erase", "not_allowed"),
            ("sheet_read", "duplicate"),
            ("sheet read", "malformed_name"),
        ]
    );
    for w in value["withheld"].as_array().unwrap() {
        assert_eq!(keys(&w.to_string()).len(), 3, "{w}");
        assert!(
            w["message"].as_str().unwrap().starts_with("Human+ tool"),
            "{w}"
        );
    }
    assert_eq!(value["malformed"], 2);
    assert_eq!(
        value["claims"],
        json!({"sheet_read": {"read_only": true, "destructive": false}})
    );

    // It reads back to the same discovery, and from MCP's `inputSchema`.
    assert_eq!(serde_json::from_str::<Discovery>(&text).unwrap(), d);
    let mut mcp = value.clone();
    let schema = mcp["tools"][0]
        .as_object_mut()
        .unwrap()
        .remove("input_schema")
        .unwrap();
    mcp["tools"][0]["inputSchema"] = schema;
    assert_eq!(serde_json::from_value::<Discovery>(mcp).unwrap(), d);
    // A digest that does not match its definition is refused: a document
    // whose schema was changed cannot keep the digest it was pinned by.
    let mut forged = value.clone();
    forged["tools"][0]["input_schema"] = json!({"type": "object"});
    let e = serde_json::from_value::<Discovery>(forged).unwrap_err();
    assert!(e.to_string().contains("digest"), "{e}");
    // A withheld entry's code must be one a listing can have.
    let mut odd = value;
    odd["withheld"][0]["code"] = "over_budget".into();
    assert!(serde_json::from_value::<Discovery>(odd).is_err());
}

#[test]
fn the_descriptors_a_framework_gets() {
    let d = discovery();
    let tools = toolset(&d, &["sheet_read"]);
    let text = serde_json::to_string(&tools[0]).unwrap();
    assert_eq!(
        keys(&text),
        [
            "name",
            "description",
            "parameters",
            "required",
            "requires_approval",
            "input_schema",
            "digest"
        ]
    );
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["required"], json!(["address"]));
    assert_eq!(value["requires_approval"], true);
    assert_eq!(
        serde_json::from_str::<SurfaceTool>(&text).unwrap(),
        tools[0]
    );
}

#[test]
fn withheld_entries_and_claims() {
    for (reason, code) in [
        (ToolRefusal::MalformedName("a b".into()), "malformed_name"),
        (ToolRefusal::Reserved("x_confirm".into()), "reserved"),
        (ToolRefusal::NotAllowed("x".into()), "not_allowed"),
        (ToolRefusal::NotOffered("x".into()), "duplicate"),
        (ToolRefusal::PinChanged("x".into()), "pin_changed"),
    ] {
        let name = match &reason {
            ToolRefusal::MalformedName(n)
            | ToolRefusal::Reserved(n)
            | ToolRefusal::NotAllowed(n)
            | ToolRefusal::NotOffered(n)
            | ToolRefusal::PinChanged(n) => n.clone(),
            _ => unreachable!(),
        };
        let w = Withheld {
            name: name.clone(),
            reason: reason.clone(),
        };
        let text = serde_json::to_string(&w).unwrap();
        assert_eq!(keys(&text), ["name", "code", "message"]);
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["code"], code);
        assert_eq!(value["message"], reason.to_string());
        assert_eq!(serde_json::from_str::<Withheld>(&text).unwrap(), w);
    }
    let claims = ToolClaims {
        read_only: Some(false),
        destructive: None,
    };
    assert_eq!(
        serde_json::to_string(&claims).unwrap(),
        r#"{"read_only":false}"#
    );
}

#[test]
fn the_feed_and_what_a_leg_saw() {
    let answer = SurfaceChanges::read_from(
        &json!({"_meta": {"revision": "r3", "changes": [
            {"id": "B4", "change": "updated", "actor_type": "human", "label": "Qty"},
        ]}}),
        ChangeFeed::Offered,
    );
    let text = serde_json::to_string(&answer).unwrap();
    assert_eq!(
        keys(&text),
        [
            "feed",
            "complete",
            "answered",
            "nothing_changed",
            "attributes",
            "revision",
            "changes",
            "defer_to",
            "handles"
        ]
    );
    assert_eq!(text, answer.to_json());
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        keys(&value["changes"][0].to_string()).tap_sorted(),
        ["actor", "handle", "kind", "label"]
    );

    let seen = Seen {
        list_changed: true,
        person_active: false,
    };
    let text = serde_json::to_string(&seen).unwrap();
    assert_eq!(text, r#"{"list_changed":true,"person_active":false}"#);
    assert_eq!(serde_json::from_str::<Seen>(&text).unwrap(), seen);
}
