//! Provider descriptors on the wire, and the four name rules with the guide's texts.

use codemode_protocol::provider::{REFUSED_WORDS, RefusalReason, is_refused_word, is_reserved};
use codemode_protocol::{ProviderDescriptor, RESERVED_PROVIDER_NAMES, validate_providers};

fn refusal(names: &[&str]) -> String {
    let providers: Vec<_> = names.iter().map(|&name| ProviderDescriptor::new(name, ["x"])).collect();
    validate_providers(&providers).unwrap_err().to_string()
}

#[test]
fn the_guides_four_refusals() {
    assert_eq!(
        refusal(&["console"]),
        "Provider name \"console\" is reserved. Give the provider a name the entry scope does not bind."
    );
    assert_eq!(
        refusal(&["my-store"]),
        "Provider name \"my-store\" must be ASCII letters, digits, underscore and dollar, and must not start with a digit."
    );
    assert_eq!(
        refusal(&["class"]),
        "Provider name \"class\" is on the list this executor refuses: every ECMAScript reserved word, the names strict mode reserves, and async. Pick a name outside it."
    );
    assert_eq!(
        refusal(&["store", "store"]),
        "Provider name \"store\" is declared twice. Give each provider its own name."
    );
}

#[test]
fn rules_apply_in_the_guides_order_provider_by_provider() {
    // `console` twice is reserved before it is a duplicate.
    assert!(refusal(&["console", "console"]).contains("is reserved"));
    // The first provider to break a rule is reported.
    assert!(refusal(&["ok", "9lives", "class"]).starts_with("Provider name \"9lives\" must be ASCII"));
    assert!(refusal(&[""]).starts_with("Provider name \"\" must be ASCII"));
    assert!(refusal(&["café"]).starts_with("Provider name \"café\" must be ASCII"));
    for word in ["arguments", "eval", "async", "let", "yield", "await", "enum", "static"] {
        assert!(refusal(&[word]).contains("on the list this executor refuses"), "{word}");
    }
    // The rest of the standard library is not reserved.
    assert!(
        validate_providers(&[
            ProviderDescriptor::new("fetch", ["x"]),
            ProviderDescriptor::new("$db_2", ["y"])
        ])
        .is_ok()
    );
}

#[test]
fn the_reserved_set_covers_the_entry_scope_and_the_codec() {
    for name in [
        "console",
        "__dispatch",
        "__stringifyForDispatch",
        "__parseForDispatch",
        "__encodeBinary",
        "__decodeBinary",
        "__providerProxy",
        "__bytesToBase64",
        "__base64ToBytes",
    ] {
        assert!(is_reserved(name), "{name}");
    }
    for binding in
        codemode_protocol::entry::ENTRY_BINDINGS.iter().chain(codemode_protocol::entry::HOST_FUNCTIONS)
    {
        assert!(is_reserved(binding), "{binding} is bound or read by the entry source");
    }
    for reserved in RESERVED_PROVIDER_NAMES {
        assert!(!reserved.reason.is_empty(), "{} has a reason", reserved.name);
    }
    assert!(!is_reserved("fetch"));
}

#[test]
fn the_refused_words_cover_ecmascript_and_strict_mode() {
    let count = |reason| REFUSED_WORDS.iter().filter(|w| w.reason == reason).count();
    assert_eq!(count(RefusalReason::ReservedWord), 37);
    assert_eq!(count(RefusalReason::StrictModeReserved), 9);
    assert_eq!(count(RefusalReason::StrictModeUnbindable), 2);
    assert_eq!(count(RefusalReason::Ambiguous), 1);
    assert!(is_refused_word("class") && is_refused_word("async") && !is_refused_word("store"));
}

#[test]
fn descriptors_are_camel_case_on_the_wire() {
    let descriptor = ProviderDescriptor::new("store", ["find"]).positional_args(false).prelude("store.x = 1");
    let json = r#"{"name":"store","tools":["find"],"positionalArgs":false,"prelude":"store.x = 1"}"#;
    assert_eq!(serde_json::to_string(&descriptor).unwrap(), json);
    assert_eq!(serde_json::from_str::<ProviderDescriptor>(json).unwrap(), descriptor);
    let minimal: ProviderDescriptor =
        serde_json::from_str(r#"{"name":"api","proxySource":"const api = {}"}"#).unwrap();
    assert!(minimal.positional_args, "positionalArgs defaults to true");
    assert_eq!(minimal.proxy_source.as_deref(), Some("const api = {}"));
    let unknown =
        serde_json::from_str::<ProviderDescriptor>(r#"{"name":"s","positional":false}"#).unwrap_err();
    assert!(unknown.to_string().starts_with("unknown field `positional`"), "{unknown}");
}
