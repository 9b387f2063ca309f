//! Runs the generated entry source on Node (V8) and checks the guide's proxy behaviours.
//!
//! The stand-ins for `__dispatch` and the base64 pair live in `node/harness.js`.
//! Where `node` is missing this fails, unless `CODEMODE_SKIP_NODE=1` is set.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};

use codemode_protocol::{BinaryKind, ProviderDescriptor, RESERVED_PROVIDER_NAMES, entry_source};
use serde_json::{Value as Json, json};

struct Case {
    name: &'static str,
    code: &'static str,
    providers: Vec<ProviderDescriptor>,
    answers: BTreeMap<String, String>,
    poison: bool,
}

fn case(name: &'static str, code: &'static str, providers: Vec<ProviderDescriptor>) -> Case {
    Case { name, code, providers, answers: BTreeMap::new(), poison: false }
}

impl Case {
    fn answer(mut self, call: &str, answer: &str) -> Case {
        self.answers.insert(call.to_owned(), answer.to_owned());
        self
    }
}

fn store(tools: &[&str]) -> Vec<ProviderDescriptor> {
    vec![ProviderDescriptor::new("store", tools.iter().copied())]
}

/// Runs every case in one Node process; `None` when Node is absent and skipping is allowed.
fn run_on_node(cases: &[Case]) -> Option<BTreeMap<String, Json>> {
    let harness = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node/harness.js");
    let reserved: Vec<&str> = RESERVED_PROVIDER_NAMES.iter().map(|r| r.name).collect();
    let input = json!({
        "cases": cases.iter().map(|c| json!({
            "name": c.name,
            "source": entry_source(c.code, &c.providers).expect("the case builds an entry source"),
            "answers": c.answers,
            "poison": c.poison,
            "reserved": reserved,
        })).collect::<Vec<_>>(),
    });
    let child = Command::new("node").arg(harness).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(error) if std::env::var_os("CODEMODE_SKIP_NODE").is_some_and(|v| v == "1") => {
            eprintln!("skipping the Node checks: {error}");
            return None;
        }
        Err(error) => panic!(
            "could not start `node` ({error}). These checks run the entry source on V8: install Node.js 20, or set CODEMODE_SKIP_NODE=1 to skip them."
        ),
    };
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(input.to_string().as_bytes())
        .expect("node reads its input");
    let output = child.wait_with_output().expect("node runs to the end");
    assert!(output.status.success(), "the Node harness failed: {}", String::from_utf8_lossy(&output.stderr));
    Some(serde_json::from_slice(&output.stdout).expect("the harness writes JSON"))
}

/// An answer past the splicing threshold: `fields` and a 70,000-character pad.
fn big_answer(fields: &str) -> String {
    format!(r#"{{"result":{{{fields},"pad":"{}"}}}}"#, "p".repeat(70000))
}

fn calls(list: &[[&str; 3]]) -> Json {
    json!(list.iter().map(|[p, t, a]| json!([p, t, a])).collect::<Vec<_>>())
}

#[test]
fn entry_source_behaves_as_the_guide_says_on_v8() {
    let tagged = |kind: &str, data: &str| {
        format!(r#"{{"result":{{"__executor_binary_v1__":"{kind}","data":"{data}"}}}}"#)
    };
    let every_kind = "async () => {
        const kinds = [ArrayBuffer, Uint8Array, Uint8ClampedArray, Int8Array, Uint16Array, Int16Array,
          Uint32Array, Int32Array, Float32Array, Float64Array, BigInt64Array, BigUint64Array];
        const out = [];
        for (const Kind of kinds) {
          const value = Kind === ArrayBuffer ? new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]).buffer
            : new Kind(new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]).buffer);
          const back = await store['echo' + Kind.name](value);
          out.push([Kind.name, back.constructor.name, Array.from(new Uint8Array(back.buffer ?? back))]);
        }
        return out;
      }";
    let cases = vec![
        case("await store yields the proxy", "async () => { const v = await store; return typeof v }", store(&["x"])),
        case(
            "a prelude property wins over the trap",
            "async () => store.helpers.twice(21)",
            vec![ProviderDescriptor::new("store", ["listUsers"]).prelude("store.helpers = { twice: (n) => n * 2 }")],
        ),
        case(
            "positional arguments",
            "async () => {
              await store.noArgs()
              await store.two('ada', 7)
              await store.obj({ id: 1, deep: { a: [1, 2] } })
              await store.bytes(new Uint8Array([1, 2, 3]))
              return 'sent'
            }",
            store(&["noArgs"]),
        )
        .answer("store.noArgs", r#"{"result":null}"#)
        .answer("store.two", r#"{"result":null}"#)
        .answer("store.obj", r#"{"result":null}"#)
        .answer("store.bytes", r#"{"result":null}"#),
        case(
            "options object",
            "async () => { await store.find({ id: 7 }); await store.all(); return 'done' }",
            vec![ProviderDescriptor::new("store", ["find"]).positional_args(false)],
        ),
        case(
            "bytes both ways",
            "async () => { const r = await store.reverse(new Uint8Array([1, 2, 3])); return [r instanceof Uint8Array, Array.from(r)] }",
            store(&["reverse"]),
        )
        .answer("store.reverse", &tagged("Uint8Array", "AwIB")),
        case(
            "a view sends only its visible bytes, nested",
            "async () => { await store.put({ deep: [new Uint8Array([9, 1, 2, 9]).subarray(1, 3)] }); return 1 }",
            store(&["put"]),
        ),
        BinaryKind::ALL.iter().fold(case("every kind both ways", every_kind, store(&["echo"])), |c, kind| {
            c.answer(&format!("store.echo{kind}"), &tagged(kind.name(), "AQIDBAUGBwg="))
        }),
        case("an undeclared tool reaches dispatch", "async () => (await store.nope(1)).tool", store(&["listUsers"])),
        case(
            "an undeclared provider reaches dispatch",
            "async () => await __dispatch('secrets', 'read', '[]')",
            store(&["listOrders"]),
        ),
        case(
            "an error envelope rejects at the call site",
            "async () => { try { return await store.nope() } catch (failure) { return { name: failure.name, message: failure.message } } }",
            store(&["listUsers"]),
        )
        .answer("store.nope", r#"{"error":"Tool \"nope\" not found"}"#),
        case(
            "an answer outside the envelope",
            "async () => { try { return await store.x() } catch (failure) { return failure.message } }",
            store(&["x"]),
        )
        .answer("store.x", r#""just a string""#),
        case(
            "a malformed tag names what is wrong",
            "async () => { try { return await store.x() } catch (failure) { return failure.message } }",
            store(&["x"]),
        )
        .answer("store.x", &tagged("Uint16Array", "AQID")),
        case(
            "proxySource replaces the proxy",
            "async () => await api.v1.users.list()",
            vec![ProviderDescriptor::new("api", ["v1.users.list"]).proxy_source(
                "const api = { v1: { users: { list: async () => {
                  const json = await __dispatch('api', 'v1.users.list', __stringifyForDispatch([]))
                  const data = __parseForDispatch(json)
                  if (data.error) throw new Error(data.error)
                  return data.result
                } } } };",
            )],
        )
        .answer("api.v1.users.list", r#"{"result":"api.v1.users.list served"}"#),
        case(
            "binary among look-alike data crosses exactly",
            r#"async () => { await store.mixed([{ data: 0 }, new Uint8Array([1]), { x: '{"__executor_binary_v1__":"' }, new Uint16Array([2]), '}']); await store.own({ __executor_binary_v1__: 'Uint8Array', data: 'AQID' }, new Uint8Array([9])); return 1 }"#,
            store(&["mixed", "own"]),
        ),
        case(
            "large answers read the same, spliced or not",
            "async () => {
              const out = [];
              for (const tool of ['big', 'bigQuote', 'bigBad', 'bigError', 'bigBroken', 'bigLoose']) {
                try { const r = await store[tool](); out.push([tool, r.pad.length, r.bytes ? [r.bytes.constructor.name, r.bytes.length, r.bytes[0]] : r.note]) }
                catch (e) { out.push([tool, e.message.slice(0, 120)]) }
              }
              return out;
            }",
            store(&["big"]),
        )
        .answer("store.big", &big_answer(r#""bytes":{"__executor_binary_v1__":"Uint8Array","data":"BwcH"}"#))
        .answer("store.bigQuote", &big_answer(r#""bytes":{"__executor_binary_v1__":"Uint8Array","data":"BwcH"},"note":"=x""#))
        .answer("store.bigBad", &big_answer(r#""bytes":{"__executor_binary_v1__":"Uint8Array","data":"B!cH"}"#))
        .answer("store.bigError", &format!(r#"{{"error":{{"tag":{{"__executor_binary_v1__":"Uint8Array","data":"BwcH"}},"pad":"{}"}}}}"#, "p".repeat(70000)))
        .answer("store.bigBroken", &format!(r#"{{"result":{{"bytes":{{"__executor_binary_v1__":"Uint8Array","data":"BwcH"}},"pad":"{}"}}"#, "p".repeat(70000)))
        .answer("store.bigLoose", &big_answer(r#""bytes":{ "__executor_binary_v1__": "Uint16Array", "data": "BwcH" }"#)),
        Case {
            poison: true,
            ..case(
                "the generated source reads no global outside the reserved list",
                "async () => { const v = await store; const r = await store.find('x'); return [typeof v, r.tool] }",
                store(&["find"]),
            )
        },
    ];
    let Some(results) = run_on_node(&cases) else { return };
    let expect = |name: &str, calls: Json, outcome: Json| {
        let actual = &results[name];
        assert_eq!(actual["outcome"], outcome, "outcome of {name:?}");
        assert_eq!(actual["calls"], calls, "calls of {name:?}");
        assert_eq!(actual["globalReads"], json!([]), "global reads of {name:?}");
    };
    expect("await store yields the proxy", calls(&[]), json!({"result": "object"}));
    expect("a prelude property wins over the trap", calls(&[]), json!({"result": 42}));
    expect(
        "positional arguments",
        calls(&[
            ["store", "noArgs", "[]"],
            ["store", "two", r#"["ada",7]"#],
            ["store", "obj", r#"[{"id":1,"deep":{"a":[1,2]}}]"#],
            ["store", "bytes", r#"[{"__executor_binary_v1__":"Uint8Array","data":"AQID"}]"#],
        ]),
        json!({"result": "sent"}),
    );
    expect(
        "options object",
        calls(&[["store", "find", r#"{"id":7}"#], ["store", "all", "{}"]]),
        json!({"result": "done"}),
    );
    expect(
        "bytes both ways",
        calls(&[["store", "reverse", r#"[{"__executor_binary_v1__":"Uint8Array","data":"AQID"}]"#]]),
        json!({"result": [true, [3, 2, 1]]}),
    );
    expect(
        "a view sends only its visible bytes, nested",
        calls(&[["store", "put", r#"[{"deep":[{"__executor_binary_v1__":"Uint8Array","data":"AQI="}]}]"#]]),
        json!({"result": 1}),
    );
    let sent: Vec<Json> = BinaryKind::ALL
        .iter()
        .map(|k| {
            json!([
                "store",
                format!("echo{k}"),
                format!(r#"[{{"__executor_binary_v1__":"{k}","data":"AQIDBAUGBwg="}}]"#)
            ])
        })
        .collect();
    let rebuilt: Vec<Json> =
        BinaryKind::ALL.iter().map(|k| json!([k.name(), k.name(), [1, 2, 3, 4, 5, 6, 7, 8]])).collect();
    expect("every kind both ways", Json::Array(sent), json!({ "result": rebuilt }));
    expect(
        "an undeclared tool reaches dispatch",
        calls(&[["store", "nope", "[1]"]]),
        json!({"result": "nope"}),
    );
    expect(
        "an undeclared provider reaches dispatch",
        calls(&[["secrets", "read", "[]"]]),
        json!({"result": r#"{"result":{"provider":"secrets","tool":"read","argsJson":"[]"}}"#}),
    );
    expect(
        "an error envelope rejects at the call site",
        calls(&[["store", "nope", "[]"]]),
        json!({"result": {"name": "Error", "message": "Tool \"nope\" not found"}}),
    );
    expect(
        "an answer outside the envelope",
        calls(&[["store", "x", "[]"]]),
        json!({"result": "The dispatch answered outside the result envelope."}),
    );
    expect(
        "a malformed tag names what is wrong",
        calls(&[["store", "x", "[]"]]),
        json!({"result": "Binary tag \"Uint16Array\" carries 3 bytes, which is not a whole number of 2-byte elements."}),
    );
    expect(
        "proxySource replaces the proxy",
        calls(&[["api", "v1.users.list", "[]"]]),
        json!({"result": "api.v1.users.list served"}),
    );
    expect(
        "binary among look-alike data crosses exactly",
        calls(&[
            [
                "store",
                "mixed",
                r#"[[{"data":0},{"__executor_binary_v1__":"Uint8Array","data":"AQ=="},{"x":"{\"__executor_binary_v1__\":\""},{"__executor_binary_v1__":"Uint16Array","data":"AgA="},"}"]]"#,
            ],
            [
                "store",
                "own",
                r#"[{"__executor_binary_v1__":"Uint8Array","data":"AQID"},{"__executor_binary_v1__":"Uint8Array","data":"CQ=="}]"#,
            ],
        ]),
        json!({"result": 1}),
    );
    let large = &results["large answers read the same, spliced or not"]["outcome"]["result"];
    assert_eq!(large[0], json!(["big", 70000, ["Uint8Array", 3, 7]]));
    assert_eq!(large[1], json!(["bigQuote", 70000, ["Uint8Array", 3, 7]]));
    assert_eq!(
        large[2],
        json!(["bigBad", "Binary tag \"Uint8Array\" carries data that is not standard padded base64."])
    );
    let error = large[3][1].as_str().unwrap();
    assert!(
        error.starts_with(r#"{"tag":{"__executor_binary_v1__":"Uint8Array","data":"BwcH"},"pad":"ppp"#),
        "{error}"
    );
    assert_eq!(large[4], json!(["bigBroken", "The dispatch answered outside the result envelope."]));
    assert_eq!(
        large[5],
        json!([
            "bigLoose",
            "Binary tag \"Uint16Array\" carries 3 bytes, which is not a whole number of 2-byte elements."
        ])
    );
    expect(
        "the generated source reads no global outside the reserved list",
        calls(&[["store", "find", r#"["x"]"#]]),
        json!({"result": ["object", "find"]}),
    );
}
