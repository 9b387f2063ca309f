//! The codec: tagged binary both ways, the `Vec<u8>` trap, argument lists, malformed tags,
//! values of any depth, and lone surrogates.

use codemode_protocol::{
    Binary, BinaryKind, Bytes, Value, from_json_str, parse_dispatch_arguments, parse_dispatch_arguments_as,
    parse_for_dispatch, stringify_for_dispatch,
};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

/// Serializes `value` to exactly `json`, and reads `json` back as `value`.
fn test_serialization<T>(value: &T, json: &str)
where
    T: Serialize + for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug,
{
    assert_eq!(stringify_for_dispatch(value).unwrap(), json);
    assert_eq!(&serde_json::from_str::<T>(json).unwrap(), value);
}

#[test]
fn bytes_cross_as_a_uint8array_tag() {
    test_serialization(&Bytes::from([1, 2, 3]), r#"{"__executor_binary_v1__":"Uint8Array","data":"AQID"}"#);
    test_serialization(&Bytes::default(), r#"{"__executor_binary_v1__":"Uint8Array","data":""}"#);
}

#[test]
fn every_kind_crosses_as_its_own_tag() {
    for &kind in BinaryKind::ALL {
        let binary = Binary::new(kind, vec![1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        let json = format!(r#"{{"__executor_binary_v1__":"{kind}","data":"AQIDBAUGBwg="}}"#);
        test_serialization(&binary, &json);
        assert_eq!(parse_for_dispatch(&json).unwrap(), Value::Binary(binary));
    }
}

#[test]
fn the_vec_u8_trap_sends_numbers_and_bytes_sends_bytes() {
    #[derive(Serialize)]
    struct Row {
        avatar: Vec<u8>,
    }
    #[derive(Serialize)]
    struct FixedRow {
        avatar: Bytes,
    }
    assert_eq!(stringify_for_dispatch(&Row { avatar: vec![1, 2, 3] }).unwrap(), r#"{"avatar":[1,2,3]}"#);
    assert_eq!(
        stringify_for_dispatch(&FixedRow { avatar: vec![1, 2, 3].into() }).unwrap(),
        r#"{"avatar":{"__executor_binary_v1__":"Uint8Array","data":"AQID"}}"#
    );
}

#[test]
fn a_struct_field_typed_bytes_rebuilds_bytes() {
    #[derive(Deserialize)]
    struct Args {
        name: String,
        avatar: Bytes,
    }
    let (args,): (Args,) = parse_dispatch_arguments_as(
        r#"[{"name":"ada","avatar":{"__executor_binary_v1__":"Uint8Array","data":"AQID"}}]"#,
    )
    .unwrap();
    assert_eq!((args.name.as_str(), args.avatar.as_slice()), ("ada", &[1u8, 2, 3][..]));
    // Bytes takes the visible bytes of any kind.
    let [bytes]: [Bytes; 1] =
        parse_dispatch_arguments_as(r#"[{"__executor_binary_v1__":"Uint16Array","data":"AQI="}]"#).unwrap();
    assert_eq!(bytes.as_slice(), &[1, 2]);
}

#[test]
fn arguments_are_always_a_list() {
    assert_eq!(parse_dispatch_arguments("[]").unwrap(), vec![]);
    assert_eq!(parse_dispatch_arguments(r#"["ada",7]"#).unwrap(), vec![Value::from("ada"), Value::from(7)]);
    let single = parse_dispatch_arguments(r#"{"id":7}"#).unwrap();
    assert_eq!(stringify_for_dispatch(&single).unwrap(), r#"[{"id":7}]"#);
    assert_eq!(
        parse_dispatch_arguments(r#"{"__executor_binary_v1__":"Uint8Array","data":"AQID"}"#).unwrap(),
        vec![Value::Binary(Binary::uint8_array([1, 2, 3]))]
    );
    let (id,): (u32,) = parse_dispatch_arguments_as("7").unwrap();
    assert_eq!(id, 7);
}

#[test]
fn nested_binary_is_rebuilt_anywhere() {
    let json = r#"{"rows":[{"id":1,"avatar":{"__executor_binary_v1__":"Uint8Array","data":"AQID"}}],"raw":{"__executor_binary_v1__":"ArrayBuffer","data":""}}"#;
    let value = parse_for_dispatch(json).unwrap();
    let Value::Object(fields) = &value else { panic!("an object: {value:?}") };
    let Value::Array(rows) = &fields["rows"] else { panic!("rows") };
    let Value::Object(row) = &rows[0] else { panic!("row") };
    assert_eq!(row["avatar"], Value::Binary(Binary::uint8_array([1, 2, 3])));
    assert_eq!(fields["raw"], Value::Binary(Binary::new(BinaryKind::ArrayBuffer, vec![]).unwrap()));
    assert_eq!(stringify_for_dispatch(&value).unwrap(), json, "fields keep their order");
}

#[test]
fn a_malformed_tag_is_an_error_naming_what_is_wrong() {
    let cases = [
        (
            r#"{"__executor_binary_v1__":"Uint7Array","data":""}"#,
            "Binary tag names \"Uint7Array\", which is not a binary kind. Use ArrayBuffer or a typed array name such as Uint8Array.",
        ),
        (
            r#"{"__executor_binary_v1__":"Uint8Array","data":"AQI"}"#,
            "Binary tag \"Uint8Array\" carries data that is not standard padded base64.",
        ),
        (
            r#"{"__executor_binary_v1__":"Uint8Array","data":"A-_D"}"#,
            "Binary tag \"Uint8Array\" carries data that is not standard padded base64.",
        ),
        (
            r#"{"__executor_binary_v1__":"Int32Array","data":"AQID"}"#,
            "Binary tag \"Int32Array\" carries 3 bytes, which is not a whole number of 4-byte elements.",
        ),
        (
            r#"{"__executor_binary_v1__":"Uint8Array"}"#,
            "Binary tag must be an object with exactly two string fields, \"__executor_binary_v1__\" and \"data\".",
        ),
        (
            r#"{"__executor_binary_v1__":"Uint8Array","data":"","extra":1}"#,
            "Binary tag must be an object with exactly two string fields, \"__executor_binary_v1__\" and \"data\".",
        ),
        (
            r#"[{"__executor_binary_v1__":7,"data":""}]"#,
            "Binary tag must be an object with exactly two string fields, \"__executor_binary_v1__\" and \"data\".",
        ),
    ];
    for (json, message) in cases {
        assert_eq!(parse_for_dispatch(json).unwrap_err().to_string(), message, "{json}");
    }
    let typed = serde_json::from_str::<Binary>(r#"{"__executor_binary_v1__":"Int32Array","data":"AQID"}"#);
    assert!(typed.unwrap_err().to_string().starts_with("Binary tag \"Int32Array\" carries 3 bytes"));
}

/// Runs `f` on a thread with a 2 MiB stack, as small as a tokio worker's.
fn on_a_small_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new().stack_size(2 << 20).spawn(f).unwrap().join().unwrap();
}

const DEPTH: usize = 100_000;

fn nested_arrays(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

fn nested_objects(depth: usize) -> String {
    format!("{}null{}", r#"{"a":"#.repeat(depth), "}".repeat(depth))
}

#[test]
fn a_200_deep_array_is_read() {
    // serde_json alone stops at 128 levels: "recursion limit exceeded at line 1 column 128".
    let text = nested_arrays(200);
    assert_eq!(stringify_for_dispatch(&parse_for_dispatch(&text).unwrap()).unwrap(), text);
}

#[test]
fn values_of_any_depth_are_read_written_compared_and_dropped_on_a_small_stack() {
    on_a_small_stack(|| {
        for text in [nested_arrays(DEPTH), nested_objects(DEPTH)] {
            let value = parse_for_dispatch(&text).unwrap();
            assert_eq!(stringify_for_dispatch(&value).unwrap(), text);
            let copy = value.clone();
            assert_eq!(copy, value);
            assert!(format!("{value:?}").len() > DEPTH);
            let json = value.to_json();
            assert_eq!(Value::from_json(json).unwrap(), value);
            assert_eq!(value.deserialize_into::<Value>().unwrap(), value);
            let from_serde: Value = from_json_str(&text).unwrap();
            assert_eq!(from_serde, value);
            drop((value, copy, from_serde));
        }
    });
}

#[test]
fn arguments_of_any_depth_are_read_on_a_small_stack() {
    on_a_small_stack(|| {
        let deep = nested_arrays(DEPTH);
        let arguments = parse_dispatch_arguments(&format!("[{deep},2]")).unwrap();
        assert_eq!(arguments.len(), 2);
        assert_eq!(stringify_for_dispatch(&arguments[0]).unwrap(), deep);
        let single = parse_dispatch_arguments(&nested_objects(DEPTH)).unwrap();
        assert_eq!(single.len(), 1);

        let (first, second): (Value, u32) = parse_dispatch_arguments_as(&format!("[{deep},2]")).unwrap();
        assert_eq!((stringify_for_dispatch(&first).unwrap(), second), (deep, 2));
        let (only,): (Value,) = parse_dispatch_arguments_as(&nested_objects(DEPTH)).unwrap();
        assert_eq!(stringify_for_dispatch(&only).unwrap(), nested_objects(DEPTH));
    });
}

#[test]
fn a_deep_plain_json_value_is_converted_and_taken_apart_on_a_small_stack() {
    on_a_small_stack(|| {
        // serde_json::Value's own drop recurses (a 100,000-deep one overflows 2 MiB);
        // from_json takes it apart as it converts, on success and on failure.
        let mut json = serde_json::Value::Null;
        for _ in 0..DEPTH {
            json = serde_json::Value::Array(vec![json]);
        }
        let value = Value::from_json(json).unwrap();
        assert_eq!(stringify_for_dispatch(&value).unwrap(), nested_arrays(DEPTH).replace('1', "null"));

        let deep = || {
            let mut json = serde_json::Value::Null;
            for _ in 0..DEPTH {
                json = serde_json::Value::Array(vec![json]);
            }
            json
        };
        let malformed = serde_json::json!({ "__executor_binary_v1__": 7 });
        let json = serde_json::Value::Array(vec![serde_json::Value::Array(vec![malformed, deep()]), deep()]);
        assert_eq!(
            Value::from_json(json).unwrap_err().to_string(),
            "Binary tag must be an object with exactly two string fields, \"__executor_binary_v1__\" and \"data\"."
        );
    });
}

#[test]
fn a_failure_deep_inside_a_deep_value_is_reported_on_a_small_stack() {
    on_a_small_stack(|| {
        let deep = nested_arrays(DEPTH);
        let tag = r#"{"__executor_binary_v1__":"Uint8Array","data":"AQI"}"#;
        assert_eq!(
            parse_for_dispatch(&format!("[{deep},{tag}]")).unwrap_err().to_string(),
            "Binary tag \"Uint8Array\" carries data that is not standard padded base64."
        );
        let error = parse_for_dispatch(&format!("[{deep},]")).unwrap_err().to_string();
        assert_eq!(error, format!("trailing comma at line 1 column {}", 2 * DEPTH + 4));
        let error = parse_for_dispatch(&format!("{deep} x")).unwrap_err().to_string();
        assert_eq!(error, format!("trailing characters at line 1 column {}", 2 * DEPTH + 3));
    });
}

#[test]
fn a_lone_surrogate_reads_as_one_replacement_character() {
    let string = |json: &str| parse_for_dispatch(json).unwrap().as_str().unwrap().to_owned();
    assert_eq!(string(r#""a\ud800b""#), "a\u{FFFD}b");
    assert_eq!(string(r#""\udc00""#), "\u{FFFD}");
    assert_eq!(string(r#""\ud800\ud800""#), "\u{FFFD}\u{FFFD}");
    assert_eq!(string(r#""\uDBFF\uD800\uDC00""#), "\u{FFFD}\u{10000}");
    assert_eq!(string(r#""\udc00\ud800""#), "\u{FFFD}\u{FFFD}");
    assert_eq!(string(r#""\ud800""#), "\u{FFFD}");
    assert_eq!(string(r#""x\ud83d\ude00y""#), "x\u{1F600}y");
    // An escaped backslash is not an escape: `\\ud800` is the six characters `\ud800`.
    assert_eq!(string(r#""\\ud800""#), "\\ud800");
    assert_eq!(
        parse_dispatch_arguments(r#"["\\ud800","\\\ud800","\"\ud800"]"#).unwrap(),
        vec![Value::from("\\ud800"), Value::from("\\\u{FFFD}"), Value::from("\"\u{FFFD}")]
    );
    // Inside keys too, and in the arguments' every reader.
    let value = parse_for_dispatch(r#"{"k\udfff":"v\ud800"}"#).unwrap();
    assert_eq!(stringify_for_dispatch(&value).unwrap(), "{\"k\u{FFFD}\":\"v\u{FFFD}\"}");
    assert_eq!(parse_dispatch_arguments(r#"["\ud800"]"#).unwrap(), vec![Value::from("\u{FFFD}")]);
    assert_eq!(parse_dispatch_arguments(r#"{"a":"\ud800"}"#).unwrap().len(), 1);
    let (text,): (String,) = parse_dispatch_arguments_as(r#"["\ud800"]"#).unwrap();
    assert_eq!(text, "\u{FFFD}");
    let (text,): (String,) = parse_dispatch_arguments_as(r#""a\udc00""#).unwrap();
    assert_eq!(text, "a\u{FFFD}");
}

#[test]
fn a_text_that_is_wrong_besides_its_lone_surrogate_still_fails_where_it_is_wrong() {
    assert_eq!(
        parse_for_dispatch(r#"["\ud800",]"#).unwrap_err().to_string(),
        "trailing comma at line 1 column 11"
    );
    assert_eq!(
        parse_for_dispatch(r#""\ud800"#).unwrap_err().to_string(),
        "EOF while parsing a string at line 1 column 7"
    );
    assert_eq!(
        parse_for_dispatch(r#""\ud8"#).unwrap_err().to_string(),
        "EOF while parsing a string at line 1 column 5"
    );
}

#[test]
fn a_single_argument_keeps_the_list_rule_for_every_shape() {
    let (id,): (u32,) = parse_dispatch_arguments_as(" 7 ").unwrap();
    assert_eq!(id, 7);
    let list: Vec<String> = parse_dispatch_arguments_as(r#""one""#).unwrap();
    assert_eq!(list, vec!["one".to_owned()]);
    let some: Option<(u32,)> = parse_dispatch_arguments_as("7").unwrap();
    assert_eq!(some, Some((7,)));
    let none: Vec<u32> = parse_dispatch_arguments_as("[]").unwrap();
    assert!(none.is_empty());
    assert_eq!(
        parse_dispatch_arguments_as::<(u32, u32)>("7").unwrap_err().to_string(),
        "invalid length 1, expected a tuple of size 2"
    );
    assert_eq!(
        parse_dispatch_arguments_as::<(u32,)>("1,2").unwrap_err().to_string(),
        "trailing characters at line 1 column 2"
    );
    assert_eq!(
        parse_dispatch_arguments_as::<(u32,)>("").unwrap_err().to_string(),
        "EOF while parsing a value at line 1 column 0"
    );
}

fn kind() -> impl Strategy<Value = BinaryKind> {
    proptest::sample::select(BinaryKind::ALL)
}

fn binary() -> impl Strategy<Value = Binary> {
    (kind(), proptest::collection::vec(any::<u8>(), 0..6)).prop_map(|(kind, elements)| {
        let bytes: Vec<u8> =
            elements.iter().flat_map(|&b| std::iter::repeat_n(b, kind.element_size())).collect();
        Binary::new(kind, bytes).unwrap()
    })
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| Value::Number(serde_json::Number::from_f64(f).unwrap())),
        ".*".prop_map(Value::String),
        binary().prop_map(Value::Binary),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec(("[a-z_]{0,6}", inner), 0..6)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn stringify_then_parse_gives_back_the_same_value(value in value()) {
        let text = stringify_for_dispatch(&value).unwrap();
        prop_assert_eq!(parse_for_dispatch(&text).unwrap(), value);
    }

    #[test]
    fn any_string_crosses_unchanged(text in any::<String>()) {
        let json = stringify_for_dispatch(&text).unwrap();
        prop_assert_eq!(parse_for_dispatch(&json).unwrap(), Value::String(text.clone()));
        // Escaped as JSON.stringify escapes nothing but ASCII: the same.
        let escaped: String = text.encode_utf16().map(|unit| format!("\\u{unit:04x}")).collect();
        prop_assert_eq!(parse_for_dispatch(&format!("\"{escaped}\"")).unwrap(), Value::String(text));
    }

    #[test]
    fn any_javascript_string_reads_with_each_lone_surrogate_replaced(units in proptest::collection::vec(
        prop_oneof![any::<u16>(), 0xD800u16..0xE000, Just(u16::from(b'\\')), Just(u16::from(b'u')), Just(u16::from(b'"'))],
        0..24,
    )) {
        // As JSON.stringify writes it: a lone surrogate escaped, everything else as it is.
        let mut json = String::from("\"");
        for unit in char::decode_utf16(units.iter().copied()) {
            match unit {
                Ok(c) => {
                    let quoted = stringify_for_dispatch(&c.to_string()).unwrap();
                    json.push_str(&quoted[1..quoted.len() - 1]);
                }
                Err(lone) => json.push_str(&format!("\\u{:04x}", lone.unpaired_surrogate())),
            }
        }
        json.push('"');
        prop_assert_eq!(parse_for_dispatch(&json).unwrap(), Value::String(String::from_utf16_lossy(&units)));
    }

    #[test]
    fn parse_dispatch_arguments_never_panics(text in ".*") {
        let _ = parse_dispatch_arguments(&text);
    }

    #[test]
    fn a_tag_with_arbitrary_fields_never_panics(kind in ".{0,12}", data in "[A-Za-z0-9+/=]{0,12}") {
        let json = serde_json::json!({ "__executor_binary_v1__": kind, "data": data }).to_string();
        let _ = parse_for_dispatch(&json);
    }
}
