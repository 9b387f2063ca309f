//! The envelope: composing answers and reading them as the program does.

use codemode_protocol::{Answer, Binary, Bytes, Value, error_envelope, read_answer, result_envelope};
use proptest::prelude::*;

#[test]
fn envelopes_are_composed_exactly() {
    assert_eq!(result_envelope(&42).unwrap(), r#"{"result":42}"#);
    assert_eq!(
        result_envelope(&Bytes::from([3, 2, 1])).unwrap(),
        r#"{"result":{"__executor_binary_v1__":"Uint8Array","data":"AwIB"}}"#
    );
    assert_eq!(error_envelope("Tool \"nope\" not found"), r#"{"error":"Tool \"nope\" not found"}"#);
}

#[test]
fn an_answer_is_read_as_the_program_reads_it() {
    assert_eq!(read_answer(r#"{"result":[1]}"#).unwrap(), Answer::Result(Some(Value::Array(vec![1.into()]))));
    assert_eq!(read_answer(r#"{"result":null}"#).unwrap(), Answer::Result(Some(Value::Null)));
    assert_eq!(read_answer("{}").unwrap(), Answer::Result(None));
    assert_eq!(read_answer(r#"{"error":"boom"}"#).unwrap(), Answer::Error("boom".into()));
    assert_eq!(read_answer(r#"{"error":null,"result":1}"#).unwrap(), Answer::Result(Some(1.into())));
    assert_eq!(read_answer(r#"{"error":{"code":7}}"#).unwrap(), Answer::Error(r#"{"code":7}"#.into()));
    assert_eq!(
        read_answer(r#"{"result":{"__executor_binary_v1__":"Uint8Array","data":"AQID"}}"#).unwrap(),
        Answer::Result(Some(Value::Binary(Binary::uint8_array([1, 2, 3]))))
    );
}

#[test]
fn anything_but_a_json_object_is_outside_the_envelope() {
    for answer in [r#""just a string""#, "[1]", "null", "7", "not json", ""] {
        assert_eq!(
            read_answer(answer).unwrap_err().to_string(),
            "The dispatch answered outside the result envelope.",
            "{answer:?}"
        );
    }
    assert_eq!(
        read_answer(r#"{"result":{"__executor_binary_v1__":"Nope","data":""}}"#).unwrap_err().to_string(),
        "Binary tag names \"Nope\", which is not a binary kind. Use ArrayBuffer or a typed array name such as Uint8Array."
    );
}

#[test]
fn an_answer_of_any_depth_or_with_a_lone_surrogate_is_read() {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(|| {
            let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
            let Answer::Result(Some(value)) = read_answer(&format!(r#"{{"result":{deep}}}"#)).unwrap() else {
                panic!("a result")
            };
            assert_eq!(codemode_protocol::stringify_for_dispatch(&value).unwrap(), deep);
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(read_answer(r#"{"error":"a\ud800"}"#).unwrap(), Answer::Error("a\u{FFFD}".into()));
    assert_eq!(read_answer(r#"{"result":"\udc00"}"#).unwrap(), Answer::Result(Some("\u{FFFD}".into())));
    assert_eq!(read_answer(r#"{"x\ud800":1,"result":2}"#).unwrap(), Answer::Result(Some(2.into())));
}

#[test]
fn a_repeated_field_counts_once_the_last_as_json_parse_reads_it() {
    assert_eq!(read_answer(r#"{"result":1,"result":2}"#).unwrap(), Answer::Result(Some(2.into())));
    assert_eq!(
        read_answer(r#"{"error":"a","error":null,"result":3}"#).unwrap(),
        Answer::Result(Some(3.into()))
    );
    assert_eq!(read_answer(r#"{"error": [1, {"b" : 2}]}"#).unwrap(), Answer::Error(r#"[1,{"b":2}]"#.into()));
    assert_eq!(read_answer(r#"{"error":false}"#).unwrap(), Answer::Error("false".into()));
}

proptest! {
    #[test]
    fn reading_any_answer_never_panics(answer in ".*") {
        let _ = read_answer(&answer);
    }
}
