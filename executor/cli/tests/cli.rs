//! The `codemode` command line: outcomes on stdout, exit codes, the SQLite and fixture stores.

use std::path::{Path, PathBuf};
use std::process::Command;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// Runs `codemode run` with `code` written to a temporary program file.
fn codemode(code: &str, args: &[&str]) -> (i32, String, String) {
    let dir = std::env::temp_dir().join(format!("codemode-cli-{}-{}", std::process::id(), rand_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let program = dir.join("program.js");
    std::fs::write(&program, code).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_codemode"))
        .arg("run")
        .arg(&program)
        .args(args)
        .output()
        .expect("codemode runs");
    let _ = std::fs::remove_dir_all(&dir);
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn shop() -> String {
    examples().join("shop.sql").display().to_string()
}

/// What `codemode run examples/top-customers.js --db examples/shop.sql` prints, on any engine.
const TOP_CUSTOMERS: &str = concat!(
    r#"{"result":[{"id":2,"name":"Grace Hopper","orders":1,"spent_cents":13200,"spent":"132.00","avatarBytes":4},"#,
    r#"{"id":1,"name":"Ada Lovelace","orders":2,"spent_cents":12350,"spent":"123.50","avatarBytes":8},"#,
    r#"{"id":4,"name":"Katherine Johnson","orders":2,"spent_cents":11300,"spent":"113.00","avatarBytes":4}],"#,
    r#""logs":["4 tables: customers, order_items, orders, products"]}"#,
    "\n"
);

fn top_customers(extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_codemode"))
        .args(["run", &examples().join("top-customers.js").display().to_string(), "--db", &shop()])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn the_main_job_prints_the_top_customers() {
    for engine in [&[][..], &["--engine", "quickjs"]] {
        let output = top_customers(engine);
        assert_eq!(output.status.code(), Some(0));
        assert_eq!(String::from_utf8(output.stdout).unwrap(), TOP_CUSTOMERS);
    }
}

/// A `codemode serve` child on a Unix socket, killed however the test ends.
struct Served(std::process::Child, PathBuf);

impl Served {
    fn start(tag: &str) -> Served {
        let path = std::env::temp_dir().join(format!("codemode-cli-{}-{tag}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let child = Command::new(env!("CARGO_BIN_EXE_codemode"))
            .args(["serve", "--listen", &format!("unix:{}", path.display())])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while std::os::unix::net::UnixStream::connect(&path).is_err() {
            assert!(started.elapsed() < std::time::Duration::from_secs(10), "the daemon did not start");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Served(child, path)
    }

    fn address(&self) -> String {
        format!("unix:{}", self.1.display())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_main_job_runs_the_same_on_a_fleet_of_daemons_its_queries_answered_here() {
    let (a, b) = (Served::start("a"), Served::start("b"));
    let output = top_customers(&["--connect", &a.address(), "--connect", &b.address()]);
    assert_eq!(String::from_utf8(output.stdout).unwrap(), TOP_CUSTOMERS);
    assert_eq!(output.status.code(), Some(0));
    // One daemon gone: the run goes to the other.
    drop(a);
    let output = top_customers(&["--connect", "unix:/nonexistent/codemode.sock", "--connect", &b.address()]);
    assert_eq!(String::from_utf8(output.stdout).unwrap(), TOP_CUSTOMERS);
    let refused = top_customers(&["--connect", &b.address(), "--isolation", "process"]);
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(
        String::from_utf8(refused.stderr).unwrap(),
        "codemode: --isolation is the daemon's to choose: drop it when running with --connect\n"
    );
    let none = top_customers(&["--connect", "unix:/nonexistent/codemode.sock"]);
    assert_eq!(none.status.code(), Some(2));
    assert_eq!(
        String::from_utf8(none.stderr).unwrap(),
        "codemode: no daemon could be reached: cannot connect to /nonexistent/codemode.sock: No such file or directory (os error 2)\n"
    );
}

#[cfg(feature = "v8")]
#[test]
fn the_main_job_prints_the_same_top_customers_on_v8() {
    let output = top_customers(&["--engine", "v8"]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(String::from_utf8(output.stdout).unwrap(), TOP_CUSTOMERS);
    let output = top_customers(&["--engine", "v8", "--isolation", "process"]);
    assert_eq!(String::from_utf8(output.stdout).unwrap(), TOP_CUSTOMERS);
}

#[test]
fn an_engine_this_build_lacks_is_refused_with_exit_code_2() {
    let built_in = if cfg!(feature = "v8") { "quickjs, v8" } else { "quickjs" };
    let program = examples().join("top-customers.js").display().to_string();
    for command in
        [&["run", &program][..], &["stdio"], &["serve", "--listen", "unix:/nonexistent/codemode.sock"]]
    {
        let unknown = Command::new(env!("CARGO_BIN_EXE_codemode"))
            .args(command)
            .args(["--engine", "spidermonkey"])
            .output()
            .unwrap();
        assert_eq!(unknown.status.code(), Some(2), "{command:?}");
        assert_eq!(
            String::from_utf8(unknown.stderr).unwrap(),
            format!("codemode: unknown engine \"spidermonkey\"; built in: {built_in}\n"),
            "{command:?}"
        );
        if cfg!(feature = "v8") {
            continue;
        }
        let v8 = Command::new(env!("CARGO_BIN_EXE_codemode"))
            .args(command)
            .args(["--engine", "v8"])
            .output()
            .unwrap();
        assert_eq!(v8.status.code(), Some(2), "{command:?}");
        assert_eq!(
            String::from_utf8(v8.stderr).unwrap(),
            "codemode: this build has no V8 engine: build with `--features v8`; built in: quickjs\n",
            "{command:?}"
        );
    }
}

#[test]
fn webassembly_on_quickjs_is_refused_with_exit_code_2() {
    let program = examples().join("top-customers.js").display().to_string();
    for (command, prefix) in [
        (&["run", &program][..], "codemode: "),
        (&["stdio"], "codemode: "),
        (&["serve", "--listen", "unix:/nonexistent/codemode.sock"], "codemode: [executor] web_assembly: "),
    ] {
        let refused =
            Command::new(env!("CARGO_BIN_EXE_codemode")).args(command).arg("--webassembly").output().unwrap();
        assert_eq!(refused.status.code(), Some(2), "{command:?}");
        assert_eq!(
            String::from_utf8(refused.stderr).unwrap(),
            format!("{prefix}{}\n", codemode_protocol::texts::WEB_ASSEMBLY_NEEDS_V8),
            "{command:?}"
        );
    }
}

/// `add(2, 3)` of a module instantiated from its bytes.
#[cfg(feature = "v8")]
const ADD: &str = "async () => { const bytes = new Uint8Array([0,97,115,109,1,0,0,0,1,7,1,96,2,127,127,1,127,3,2,1,0,7,7,1,3,97,100,100,0,0,10,9,1,7,0,32,0,32,1,106,11]); \
                   const { instance } = await WebAssembly.instantiate(bytes); return instance.exports.add(2, 3) }";

#[cfg(feature = "v8")]
#[test]
fn webassembly_is_there_on_v8_only_when_asked_for() {
    for isolation in ["in-process", "process"] {
        let (code, stdout, stderr) =
            codemode(ADD, &["--engine", "v8", "--webassembly", "--isolation", isolation]);
        assert_eq!((code, stdout.as_str()), (0, "{\"result\":5,\"logs\":[]}\n"), "{isolation}: {stderr}");
        let (code, stdout, _) = codemode(ADD, &["--engine", "v8", "--isolation", isolation]);
        assert_eq!(
            (code, stdout.as_str()),
            (
                1,
                "{\"error\":\"WebAssembly is not defined\",\"kind\":\"thrown\",\"location\":{\"line\":1,\"column\":159},\"logs\":[]}\n"
            ),
            "{isolation}"
        );
    }
}

#[test]
fn blob_columns_reach_the_program_as_uint8array() {
    let (code, stdout, _) = codemode(
        "async () => { const [row] = await db.query('SELECT avatar FROM customers WHERE id = ?', 1); return row.avatar }",
        &["--db", &shop()],
    );
    assert_eq!(
        (code, stdout.as_str()),
        (
            0,
            "{\"result\":{\"__executor_binary_v1__\":\"Uint8Array\",\"data\":\"iVBORw0KGgo=\"},\"logs\":[]}\n"
        )
    );
}

#[test]
fn the_db_provider_is_read_only_and_says_what_it_takes() {
    let (code, stdout, _) = codemode(
        "async () => {
          const texts = [];
          for (const attempt of [() => db.query('DELETE FROM customers'), () => db.schema('nope'), () => db.query(7), () => db.drop()]) {
            try { await attempt() } catch (e) { texts.push(e.message) }
          }
          return [texts, (await db.schema('products')).map((c) => c.name + ':' + c.type + (c.primaryKey ? ':pk' : ''))];
        }",
        &["--db", &shop()],
    );
    assert_eq!(code, 0);
    assert_eq!(
        stdout,
        concat!(
            r#"{"result":[["db.query runs read-only statements (SELECT); this one would write.","#,
            r#""Table \"nope\" does not exist. Call db.tables() for the names.","#,
            r#""The arguments of db.query do not fit its parameters: at `[0]`, invalid type: integer `7`, expected a string.","#,
            r#""Tool \"drop\" not found"],["id:INTEGER:pk","name:TEXT","price_cents:INTEGER"]],"logs":[]}"#,
            "\n"
        )
    );
}

#[test]
fn a_fixture_answers_provider_tool_keys() {
    let dir = std::env::temp_dir().join(format!("codemode-fixture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fixture = dir.join("fixture.json");
    std::fs::write(&fixture, r#"{"store.listUsers":[{"id":"ada"}],"store.avatar":{"__executor_binary_v1__":"Uint8Array","data":"AQID"}}"#).unwrap();
    let (code, stdout, _) = codemode(
        "async () => { const users = await store.listUsers(); const a = await store.avatar(); let missing; try { await store.nope() } catch (e) { missing = e.message } return [users[0].id, a instanceof Uint8Array, missing] }",
        &["--fixture", &fixture.display().to_string()],
    );
    assert_eq!(
        (code, stdout.as_str()),
        (0, "{\"result\":[\"ada\",true,\"Tool \\\"nope\\\" not found\"],\"logs\":[]}\n")
    );
    std::fs::write(&fixture, r#"{"listUsers": []}"#).unwrap();
    let (code, stdout, stderr) = codemode("async () => 1", &["--fixture", &fixture.display().to_string()]);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert_eq!(
        stderr,
        "codemode: the fixture key \"listUsers\" must be \"provider.tool\", such as \"store.listUsers\"\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn exit_codes_say_result_error_or_usage() {
    // The outcome on stdout; for a person, its text on stderr with the place in the program.
    let (code, stdout, stderr) = codemode("async () => {\n  throw new Error('failed')\n}", &[]);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (
            1,
            "{\"error\":\"failed\",\"kind\":\"thrown\",\"location\":{\"line\":2,\"column\":9},\"logs\":[]}\n",
            "codemode: thrown error: failed (at line 2, column 9)\n"
        )
    );
    let (code, stdout, stderr) = codemode("async () => { while (true) {} }", &["--timeout-ms", "100"]);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (
            1,
            "{\"error\":\"Execution timed out after 100 ms.\",\"kind\":\"timeout\",\"logs\":[]}\n",
            "codemode: timeout error: Execution timed out after 100 ms.\n"
        )
    );
    let (code, _, stderr) = codemode("async () => 1", &["--timeout-ms", "soon"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("invalid value 'soon' for '--timeout-ms <N>'"), "{stderr}");
    let missing = Command::new(env!("CARGO_BIN_EXE_codemode"))
        .args(["run", "/nonexistent/program.js"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(
        String::from_utf8(missing.stderr).unwrap(),
        "codemode: cannot read the program /nonexistent/program.js: No such file or directory (os error 2). Pass the path of a .js file, or - for stdin.\n"
    );
    let (code, _, stderr) = codemode("async () => 1", &["--db", "/nonexistent/shop.db"]);
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with("codemode: cannot open the database /nonexistent/shop.db read-only: "),
        "{stderr}"
    );
}

fn spec() -> String {
    examples().join("shop.spec.json").display().to_string()
}

/// Runs `codemode` with `args` and no program.
fn codemode_with(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_codemode")).args(args).output().expect("codemode runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn a_tool_spec_serves_sql_and_fixed_results_by_sandbox_and_original_names() {
    let (code, stdout, stderr) = codemode(
        "async () => [await shop.customer(2), await shop.orders_since('2026-11-20'), await shop['orders-since']('2026-11-09', 1), await shop.currency()]",
        &["--spec", &spec()],
    );
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(
        stdout,
        concat!(
            r#"{"result":[[{"id":2,"name":"Grace Hopper","email":"grace@example.com"}],"#,
            r#"[{"id":6,"customer_id":4,"placed_at":"2026-11-28"},{"id":2,"customer_id":1,"placed_at":"2026-11-20"}],"#,
            r#"[{"id":6,"customer_id":4,"placed_at":"2026-11-28"}],"EUR"],"logs":[]}"#,
            "\n"
        )
    );
    // The spec's tools are curated: the raw `db` provider comes only with --db.
    let (code, stdout, _) = codemode("async () => typeof db", &["--spec", &spec()]);
    assert_eq!((code, stdout.as_str()), (0, "{\"result\":\"undefined\",\"logs\":[]}\n"));
    let (code, stdout, _) = codemode(
        "async () => [(await db.tables()).length, await shop.currency()]",
        &["--spec", &spec(), "--db", &shop()],
    );
    assert_eq!((code, stdout.as_str()), (0, "{\"result\":[4,\"EUR\"],\"logs\":[]}\n"));
}

#[test]
fn a_tool_spec_that_cannot_be_served_is_refused_before_the_run() {
    let dir = std::env::temp_dir().join(format!("codemode-spec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("spec.json");
    let path = file.display().to_string();
    let refused = |spec: &str| {
        std::fs::write(&file, spec).unwrap();
        let (code, stdout, stderr) = codemode("async () => 1", &["--spec", &path]);
        assert_eq!((code, stdout.as_str()), (2, ""), "{spec}");
        stderr.replace(&path, "SPEC")
    };
    assert_eq!(
        refused(r#"{"providers":[{"name":"s","tools":[{"name":"t"}]}]}"#),
        "codemode: the tool \"t\" of provider \"s\" in SPEC has no answer: give it \"sql\" (a query on the database) or \"result\" (a fixed value)\n"
    );
    assert_eq!(
        refused(r#"{"providers":[{"name":"s","tools":[{"name":"t","sql":"SELECT 1"}]}]}"#),
        "codemode: the tool spec SPEC has SQL tools but no database: add \"database\" to it or pass --db FILE\n"
    );
    assert_eq!(
        refused(r#"{"providers":[{"name":"s","tool":[]}]}"#),
        "codemode: the tool spec SPEC does not read: unknown field `tool`, expected one of `name`, `description`, `positionalArgs`, `tools` at line 1 column 32\n"
    );
    assert_eq!(
        refused(
            r#"{"providers":[{"name":"s","tools":[{"name":"a-b","result":1},{"name":"a_b","result":2}]}]}"#
        ),
        "codemode: Tools \"a-b\" and \"a_b\" of provider \"s\" both become \"a_b\" in the sandbox. Rename one of them, or leave one out.\n"
    );
    assert_eq!(
        refused(r#"{"providers":[{"name":"my-store","tools":[]}]}"#),
        "codemode: Provider name \"my-store\" must be ASCII letters, digits, underscore and dollar, and must not start with a digit.\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failing_sql_tool_names_itself_and_a_file_that_is_not_a_database_is_refused() {
    let dir = std::env::temp_dir().join(format!("codemode-notdb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("spec.json");
    std::fs::write(
        &spec,
        r#"{"providers":[{"name":"s","tools":[{"name":"bad","sql":"SELECT nope FROM customers"}]}]}"#,
    )
    .unwrap();
    let (code, stdout, _) = codemode(
        "async () => { try { await s.bad() } catch (e) { return e.message } }",
        &["--spec", &spec.display().to_string(), "--db", &shop()],
    );
    assert_eq!(
        (code, stdout.as_str()),
        (
            0,
            "{\"result\":\"s.bad: no such column: nope in SELECT nope FROM customers at offset 7\",\"logs\":[]}\n"
        )
    );
    let (code, stdout, stderr) = codemode("async () => 1", &["--db", &spec.display().to_string()]);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert_eq!(
        stderr.replace(&spec.display().to_string(), "FILE"),
        "codemode: FILE is not an SQLite database: file is not a database\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_db_and_a_fixture_serve_one_program_together() {
    let dir = std::env::temp_dir().join(format!("codemode-both-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fixture = dir.join("fixture.json");
    std::fs::write(&fixture, r#"{"weather.today":"sunny","db.tables":"the fixture never answers db"}"#)
        .unwrap();
    let (code, stdout, _) = codemode(
        "async () => [await weather.today(), (await db.tables())[0]]",
        &["--db", &shop(), "--fixture", &fixture.display().to_string()],
    );
    assert_eq!((code, stdout.as_str()), (0, "{\"result\":[\"sunny\",\"customers\"],\"logs\":[]}\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn declarations_need_providers_to_declare() {
    assert_eq!(
        codemode_with(&["declarations"]),
        (
            2,
            String::new(),
            "codemode: give a tool spec file, --db, or both: there are no providers to declare\n".to_owned()
        )
    );
}

#[test]
fn declarations_print_what_the_model_reads() {
    let (code, stdout, stderr) = codemode_with(&["declarations", &spec()]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(
        stdout,
        r#"/** The shop's customers and what they ordered. */
declare const shop: {
  /**
   * The customer with this id: a list of one, or empty when there is none.
   * @param id The customer's id.
   */
  customer(id: number): Promise<Customer[]>;
  /**
   * Orders placed on or after a day, newest first.
   * @param day YYYY-MM-DD
   */
  orders_since(day: string, limit?: number): Promise<unknown>;
  /** The currency prices are in. */
  currency(): Promise<"EUR" | "USD">;
};

interface Customer {
  id: number;
  name: string;
  email: string;
}
"#
    );
    let (code, stdout, _) = codemode_with(&["declarations", "--db"]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("  query(sql: string, ...params: unknown[]): Promise<Record<string, unknown>[]>;\n"),
        "{stdout}"
    );
    let (code, stdout, _) = codemode_with(&["declarations", &spec(), "--format", "code-tool"]);
    assert_eq!(code, 0);
    let tool: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(tool["name"], "execute");
    assert!(tool["description"].as_str().unwrap().ends_with("  email: string;\n}\n```"));
    let (code, stdout, _) = codemode_with(&["declarations", &spec(), "--format", "json-schema"]);
    assert_eq!(code, 0);
    let schemas: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(schemas["providers"][0]["tools"][1]["name"], "orders_since");
    assert_eq!(schemas["providers"][0]["tools"][1]["originalName"], "orders-since");
}

/// Runs `codemode run - ARGS` with `stdin` as its standard input.
fn codemode_stdin(stdin: &str, args: &[&str]) -> (i32, String, String) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_codemode"))
        .args(["run", "-"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn a_dash_reads_the_program_from_stdin() {
    assert_eq!(
        codemode_stdin("async () => (await db.tables()).length", &["--db", &shop()]),
        (0, "{\"result\":4,\"logs\":[]}\n".to_owned(), String::new())
    );
    assert_eq!(
        codemode_stdin("async () => { throw new Error('no') }", &[]),
        (
            1,
            "{\"error\":\"no\",\"kind\":\"thrown\",\"location\":{\"line\":1,\"column\":21},\"logs\":[]}\n"
                .to_owned(),
            "codemode: thrown error: no (at line 1, column 21)\n".to_owned()
        )
    );
}

#[test]
fn an_empty_program_is_refused_with_what_to_write_in_it() {
    let (code, stdout, stderr) = codemode(" \n", &[]);
    assert_eq!((code, stdout.as_str()), (2, ""));
    let file = stderr.strip_prefix("codemode: the program ").and_then(|s| s.split_once(' ')).unwrap().0;
    assert_eq!(
        stderr.replace(file, "FILE"),
        "codemode: the program FILE is empty: write the source of an async arrow function in it, such as `async () => (await db.tables()).length`\n"
    );
    assert_eq!(
        codemode_stdin("", &[]),
        (
            2,
            String::new(),
            "codemode: the program on stdin is empty: write the source of an async arrow function in it, such as `async () => (await db.tables()).length`\n".to_owned()
        )
    );
}

#[test]
fn a_fixture_whose_provider_name_the_sandbox_refuses_is_bad_input() {
    let dir = std::env::temp_dir().join(format!("codemode-fixture-names-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fixture = dir.join("fixture.json");
    let path = fixture.display().to_string();
    for (key, problem) in [
        (
            "my-store.list",
            "Provider name \"my-store\" must be ASCII letters, digits, underscore and dollar, and must not start with a digit.",
        ),
        (
            "class.list",
            "Provider name \"class\" is on the list this executor refuses: every ECMAScript reserved word, the names strict mode reserves, and async. Pick a name outside it.",
        ),
    ] {
        std::fs::write(&fixture, format!(r#"{{"{key}": 1}}"#)).unwrap();
        let (code, stdout, stderr) = codemode("async () => 1", &["--fixture", &path]);
        assert_eq!((code, stdout.as_str()), (2, ""), "{key}");
        assert_eq!(stderr, format!("codemode: the fixture {path} does not serve: {problem}\n"), "{key}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `codemode serve --engine v8` child logging JSON lines, with its admin port; killed
/// (its stuck threads with it) however the test ends.
#[cfg(feature = "v8")]
struct ServedV8 {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<serde_json::Value>,
    socket: PathBuf,
    admin: String,
}

#[cfg(feature = "v8")]
impl ServedV8 {
    fn start(tag: &str, args: &[&str]) -> ServedV8 {
        use std::io::BufRead;
        let socket = std::env::temp_dir().join(format!("codemode-cli-{}-{tag}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let listen = format!("unix:{}", socket.display());
        let mut child = Command::new(env!("CARGO_BIN_EXE_codemode"))
            .args(["serve", "--engine", "v8", "--listen", &listen, "--log-format", "json"])
            .args(["--admin", "127.0.0.1:0"])
            .args(args)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let parsed = serde_json::from_str(&line).unwrap_or(serde_json::Value::String(line));
                if sender.send(parsed).is_err() {
                    break;
                }
            }
        });
        let mut served = ServedV8 { child, lines, socket, admin: String::new() };
        assert_eq!(served.line()["message"], "listening");
        let admin = served.line();
        assert_eq!(admin["message"], "admin listening", "{admin}");
        served.admin = admin["address"].as_str().unwrap().to_owned();
        served
    }

    fn line(&self) -> serde_json::Value {
        self.lines.recv_timeout(std::time::Duration::from_secs(10)).expect("a log line within 10 s")
    }

    fn address(&self) -> String {
        format!("unix:{}", self.socket.display())
    }

    /// `GET path` on the admin port: the status and the body.
    fn get(&self, path: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&self.admin).unwrap();
        stream.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        write!(stream, "GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n").unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        (head.split(' ').nth(1).unwrap().parse().unwrap(), body.to_owned())
    }

    /// `/metrics`' line for `codemode_stuck_engines`.
    fn stuck_gauge(&self) -> String {
        let (_, body) = self.get("/metrics");
        body.lines().find(|l| l.starts_with("codemode_stuck_engines ")).unwrap_or_default().to_owned()
    }
}

#[cfg(feature = "v8")]
impl Drop for ServedV8 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// A program V8 never stops: its `reverse` does not look for TerminateExecution.
#[cfg(feature = "v8")]
const UNSTOPPABLE: &str = "async () => Array.prototype.reverse.call({ length: 2 ** 53 - 1 })";

#[cfg(feature = "v8")]
const TIMED_OUT_200: &str =
    "{\"error\":\"Execution timed out after 200 ms.\",\"kind\":\"timeout\",\"logs\":[]}\n";

/// `serve --engine v8` without `--isolation` runs every execution in a confined worker
/// process (it says so at start, and warns of nothing): a program V8 cannot stop ends at
/// its deadline with its worker, and no engine is left stuck in the daemon.
#[cfg(feature = "v8")]
#[test]
fn serve_on_v8_isolates_each_execution_in_a_worker_process_by_default() {
    let served = ServedV8::start("v8-process", &[]);
    let executor = served.line();
    assert_eq!(executor["message"], "executor", "{executor}");
    let confinement = if cfg!(target_os = "linux") { "required" } else { "off" };
    assert_eq!(
        (&executor["level"], &executor["engine"], &executor["isolation"], &executor["confinement"]),
        (&"INFO".into(), &"v8".into(), &"process".into(), &confinement.into()),
        "{executor}"
    );
    let output = top_customers(&["--connect", &served.address()]);
    assert_eq!(String::from_utf8(output.stdout).unwrap(), TOP_CUSTOMERS);
    let (code, stdout, _) = codemode(UNSTOPPABLE, &["--connect", &served.address(), "--timeout-ms", "200"]);
    assert_eq!((code, stdout.as_str()), (1, TIMED_OUT_200));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(served.get("/readyz"), (200, "ok".to_owned()));
    assert_eq!(served.stuck_gauge(), "codemode_stuck_engines 0");
    // Nothing warned of: the next line is the execution's, not a warning.
    let next = served.line();
    assert_ne!(next["level"], "WARN", "{next}");
}

/// `--isolation in-process` on V8 is warned of at start; a program V8 cannot stop is then
/// counted stuck (a warning in its execution's span, the gauge), and past
/// `--max-stuck-engines` the daemon is not ready.
#[cfg(feature = "v8")]
#[test]
fn serve_on_v8_in_process_warns_and_counts_stuck_engines() {
    let served = ServedV8::start("v8-in-process", &["--isolation", "in-process", "--max-stuck-engines", "0"]);
    let executor = served.line();
    assert_eq!(
        (&executor["message"], &executor["engine"], &executor["isolation"], &executor["confinement"]),
        (&"executor".into(), &"v8".into(), &"in-process".into(), &serde_json::Value::Null),
        "{executor}"
    );
    let warning = served.line();
    assert_eq!(
        (&warning["level"], &warning["message"]),
        (&"WARN".into(), &codemode_executor::IN_PROCESS_V8_WARNING.into()),
        "{warning}"
    );
    assert_eq!(served.get("/readyz"), (200, "ok".to_owned()));
    let (code, stdout, _) = codemode(UNSTOPPABLE, &["--connect", &served.address(), "--timeout-ms", "200"]);
    assert_eq!((code, stdout.as_str()), (1, TIMED_OUT_200));
    let stuck = loop {
        let line = served.line();
        if line["message"]
            == "engine stuck: still running after its stop; its thread is held until it returns"
        {
            break line;
        }
    };
    assert_eq!(
        (&stuck["level"], &stuck["cause"], &stuck["after_ms"], &stuck["stuck"]),
        (&"WARN".into(), &"deadline".into(), &50.into(), &1.into()),
        "{stuck}"
    );
    // It names its execution: the span the daemon runs it in.
    assert_eq!((&stuck["span"]["name"], &stuck["span"]["id"]), (&"execution".into(), &1.into()), "{stuck}");
    assert_eq!(served.get("/readyz"), (503, "stuck".to_owned()));
    assert_eq!(served.stuck_gauge(), "codemode_stuck_engines 1");
    let not_ready = loop {
        let line = served.line();
        if line["message"] == "not ready: too many stuck engines" {
            break line;
        }
    };
    assert_eq!((&not_ready["stuck"], &not_ready["max_stuck_engines"]), (&1.into(), &0.into()), "{not_ready}");
    // Still live, and still serving: the stuck thread holds only its own execution.
    assert_eq!(served.get("/livez"), (200, "ok".to_owned()));
    let output = top_customers(&["--connect", &served.address()]);
    assert_eq!(String::from_utf8(output.stdout).unwrap(), TOP_CUSTOMERS);
}

/// `codemode mcp --engine v8` runs each execution in a worker process unless told
/// `--isolation in-process`, which it warns of on stderr.
#[cfg(all(feature = "v8", feature = "mcp"))]
#[test]
fn mcp_on_v8_isolates_each_execution_unless_told_in_process() {
    let mcp = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_codemode"))
            .args(["mcp", "--engine", "v8"])
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        // No client: stdin closes before the initialization.
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.ends_with("codemode mcp: the MCP client's initialization failed: connection closed: initialize request\n"),
            "{stderr}"
        );
        stderr
    };
    let confinement = if cfg!(target_os = "linux") { "required" } else { "off" };
    assert_eq!(
        mcp(&[]).lines().next(),
        Some(
            format!(
                "codemode mcp: executions run in worker processes ({} stdio), confinement {confinement}",
                env!("CARGO_BIN_EXE_codemode")
            )
            .as_str()
        )
    );
    assert_eq!(
        mcp(&["--isolation", "in-process"]).lines().next(),
        Some(format!("codemode mcp: warning: {}", codemode_executor::IN_PROCESS_V8_WARNING).as_str())
    );
    let quickjs = Command::new(env!("CARGO_BIN_EXE_codemode"))
        .args(["mcp"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8(quickjs.stderr).unwrap();
    assert_eq!(
        stderr.lines().next(),
        Some("codemode mcp: note: no providers (give --db, --spec or --server); programs can only compute")
    );
}
