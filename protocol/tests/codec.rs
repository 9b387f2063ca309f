//! The codec: tagged binary both ways, the `Vec<u8>` trap, argument lists, malformed tags.

use codemode_protocol::{
    Binary, BinaryKind, Bytes, Value, parse_dispatch_arguments, parse_dispatch_arguments_as,
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
    fn parse_dispatch_arguments_never_panics(text in ".*") {
        let _ = parse_dispatch_arguments(&text);
    }

    #[test]
    fn a_tag_with_arbitrary_fields_never_panics(kind in ".{0,12}", data in "[A-Za-z0-9+/=]{0,12}") {
        let json = serde_json::json!({ "__executor_binary_v1__": kind, "data": data }).to_string();
        let _ = parse_for_dispatch(&json);
    }
}
