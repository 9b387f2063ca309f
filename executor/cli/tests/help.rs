//! Every `codemode` command's own surface: `--help` with its usage, example and exit codes; `--version`.

use std::process::Command;

/// Runs `codemode` with `args`: exit code, stdout, stderr.
fn codemode(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_codemode")).args(args).output().expect("codemode runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// `codemode COMMAND --help`: exit 0, nothing on stderr, and every one of `lines` in it.
fn help(command: &[&str], lines: &[&str]) -> String {
    let args: Vec<&str> = command.iter().copied().chain(["--help"]).collect();
    let (code, stdout, stderr) = codemode(&args);
    assert_eq!((code, stderr.as_str()), (0, ""), "{command:?}");
    for line in lines {
        assert!(stdout.contains(line), "{command:?} --help lacks {line:?}:\n{stdout}");
    }
    stdout
}

#[test]
fn the_top_level_help_lists_the_commands_with_examples_and_every_command_has_a_version() {
    let stdout = help(&[], &["Usage: codemode <COMMAND>\n", "  -V, --version  Print version\n"]);
    assert!(stdout.ends_with(
        "Examples:
  codemode run program.js --db shop.sql
  codemode declarations --db
  codemode serve --listen unix:/run/codemode/codemode.sock

`codemode help COMMAND` (or `codemode COMMAND --help`) describes each command and its exit codes.
"
    ));
    // clap names a subcommand's version after it: `codemode-run 0.1.0`.
    for command in ["", "run", "declarations", "stdio", "serve"] {
        let args: Vec<&str> = [command, "--version"].into_iter().filter(|a| !a.is_empty()).collect();
        let name = if command.is_empty() { "codemode".to_owned() } else { format!("codemode-{command}") };
        let version = format!("{name} {}\n", env!("CARGO_PKG_VERSION"));
        assert_eq!(codemode(&args), (0, version, String::new()), "{command:?}");
    }
    let (code, stdout, stderr) = codemode(&["bogus"]);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(stderr.starts_with("error: unrecognized subcommand 'bogus'\n"), "{stderr}");
}

#[test]
fn run_help_names_the_db_tools_the_default_timeout_the_exit_codes_and_examples() {
    let stdout = help(
        &["run"],
        &[
            "Usage: codemode run [OPTIONS] <PROGRAM.js>\n",
            "or - to read it from stdin\n",
            "Wall-clock limit in milliseconds [default: 30000]\n",
            "  -v, --trace\n",
            "How the outcome is printed on stdout [default: json when stdout is not a terminal, human when it is]\n",
        ],
    );
    assert!(stdout.ends_with(
        r#"Providers:
  --db FILE        db.tables()               the names of the tables
                   db.schema(table)          the columns of one table
                   db.query(sql, ...params)  one read-only statement (SELECT), one object per row
  --fixture FILE   a fixed result per "provider.tool" key; --db, --spec and --fixture combine
                   (a provider --db or --spec serves is theirs, not the fixture's)
  --spec FILE      the providers a tool spec file declares (docs/tools.md)

Limits: 30 s of wall-clock time unless --timeout-ms says otherwise.

Watching (docs/watching.md): --trace prints each call and log line on stderr as it happens,
  → store.get({"id":7})        a call leaves (its arguments cut to 80 characters)
  ← store.get 1.2 ms ok         its answer came back (or: error: TEXT)
  log: LINE                     a console line
On a terminal, a run 3 s without progress says on stderr what it waits on (calls, timers).
Ctrl-C ends the run: the outcome printed keeps the logs so far and says it was interrupted.

Output: the outcome as one JSON object when stdout is not a terminal (--output json); for a
person on a terminal (--output human): the logs, then the result pretty-printed or the error.

Exit status:
  0    the program returned: stdout holds {"result": ..., "logs": [...]}
  1    the program failed (threw, timed out, ran out of memory): stdout holds {"error": ..., "kind": ...}
  2    bad usage or unreadable input: nothing on stdout, stderr says what to fix
  130  interrupted (Ctrl-C): stdout holds {"error": "Execution was interrupted ...", "kind": "cancelled", "logs": [...]}

Examples:
  codemode run executor/cli/examples/top-customers.js --db executor/cli/examples/shop.sql
  echo 'async () => (await db.tables()).length' | codemode run - --db shop.sql
  codemode run program.js --db shop.sql --fixture weather.json --timeout-ms 5000
  codemode run program.js --db shop.sql --trace --output human
"#
    ));
    // Its first example, run from the repository root, does what the help says.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let example = Command::new(env!("CARGO_BIN_EXE_codemode"))
        .current_dir(root)
        .args(["run", "executor/cli/examples/top-customers.js", "--db", "executor/cli/examples/shop.sql"])
        .output()
        .unwrap();
    assert_eq!(example.status.code(), Some(0));
    assert!(
        String::from_utf8(example.stdout).unwrap().starts_with(r#"{"result":[{"id":2,"name":"Grace Hopper""#)
    );
    let (code, stdout, stderr) = codemode(&["run"]);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(
        stderr.starts_with("error: the following required arguments were not provided:\n  <PROGRAM.js>\n"),
        "{stderr}"
    );
}

#[test]
fn declarations_help_has_the_exit_codes_and_examples() {
    let stdout = help(&["declarations"], &["Usage: codemode declarations [OPTIONS] [SPEC]\n"]);
    assert!(stdout.ends_with(
        "Exit status:
  0  the declarations are on stdout
  2  bad usage, no providers, or a spec file that does not read: stderr says what to fix

Examples:
  codemode declarations --db
  codemode declarations executor/cli/examples/shop.spec.json --format code-tool
"
    ));
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let example = Command::new(env!("CARGO_BIN_EXE_codemode"))
        .current_dir(root)
        .args(["declarations", "executor/cli/examples/shop.spec.json", "--format", "code-tool"])
        .output()
        .unwrap();
    assert_eq!(example.status.code(), Some(0));
    let tool: serde_json::Value = serde_json::from_slice(&example.stdout).unwrap();
    assert_eq!(tool["name"], "execute");
    let (code, stdout, stderr) = codemode(&["declarations", "--format", "yaml"]);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(stderr.starts_with("error: invalid value 'yaml' for '--format <FORMAT>'\n"), "{stderr}");
}

#[test]
fn stdio_help_has_the_exit_codes_and_an_example_and_they_hold() {
    let stdout = help(&["stdio"], &["Usage: codemode stdio [OPTIONS]\n"]);
    assert!(stdout.ends_with(
        "Exit status:
  0  stdin closed and every execution ended
  1  the protocol failed (a message that does not read, stdout closed): stderr says why
  2  bad usage (such as an engine this build lacks)

Example:
  codemode-conformance --executor-cmd \"codemode stdio --engine quickjs\"
"
    ));
    let stdio = |input: &str| {
        use std::io::Write;
        let mut child = Command::new(env!("CARGO_BIN_EXE_codemode"))
            .arg("stdio")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let output = child.wait_with_output().unwrap();
        (output.status.code(), String::from_utf8(output.stderr).unwrap())
    };
    assert_eq!(stdio(""), (Some(0), String::new()));
    assert_eq!(
        stdio("garbage\n"),
        (
            Some(1),
            "codemode stdio: a frame is not a message of this protocol: expected value at line 1 column 1\n"
                .to_owned()
        )
    );
}

#[test]
fn serve_help_has_the_exit_codes_and_examples() {
    let stdout = help(&["serve"], &["Usage: codemode serve [OPTIONS]\n", "Example config file:\n"]);
    assert!(stdout.contains(
        "Exit status:
  0    the daemon stopped cleanly: SIGTERM or SIGINT, then the drain
  2    a bad flag or config file, or an address it cannot listen on: stderr says what to fix
  130  a second SIGINT during the drain: stopped at once, live executions lost
  143  a second SIGTERM during the drain: stopped at once, live executions lost
"
    ));
    assert!(stdout.contains("  codemode serve --listen unix:/run/codemode/codemode.sock\n"));
    let (code, _, stderr) = codemode(&["serve", "--listen", "unix:/nonexistent/dir/codemode.sock"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.starts_with("codemode: "), "{stderr}");
}

#[cfg(feature = "mcp")]
#[test]
fn mcp_help_has_the_exit_codes_and_examples() {
    let stdout = help(&["mcp"], &["Usage: codemode mcp [OPTIONS]\n", "  codemode mcp --db shop.sql\n"]);
    assert!(stdout.ends_with(
        "Exit status:
  0  the client closed stdin
  1  serving failed: stderr says why
  2  bad usage, or a provider that cannot start: stderr says what to fix
"
    ));
    // The bounds on runs that yielded, with their defaults.
    for flag in ["--cell-ttl-secs <SECS>", "[default: 600]", "--max-cells <N>", "[default: 64]"] {
        assert!(stdout.contains(flag), "{flag} in {stdout}");
    }
    // Approvals over MCP: the flags, the timeout's default, and an example.
    for line in [
        "      --ask <PATTERN>\n",
        "      --deny <PATTERN>\n",
        "      --approval-timeout-ms <N>\n",
        "0: as long as it takes\n",
        "[default: 900000]\n",
        "  codemode mcp --db shop.sql --ask 'db.*' --deny db.tables\n",
    ] {
        assert!(stdout.contains(line), "{line:?} in {stdout}");
    }
    assert_eq!(
        codemode(&["mcp", "--version"]),
        (0, format!("codemode-mcp {}\n", env!("CARGO_PKG_VERSION")), String::new())
    );
    let (code, stdout, stderr) = codemode(&["mcp", "--server", "nameless"]);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(stderr.starts_with("codemode: --server \"nameless\" has no `=`"), "{stderr}");
}

/// Every command that runs programs takes the CPU and call budgets.
#[test]
fn every_command_that_runs_programs_takes_the_budgets() {
    let mut commands = vec![vec!["run"], vec!["stdio"], vec!["serve"]];
    if cfg!(feature = "mcp") {
        commands.push(vec!["mcp"]);
    }
    for command in commands {
        help(
            &command,
            &[
                "  --cpu-time-limit-ms <N>",
                "  --max-calls <N>",
                "waiting on calls, fetches and timers is not counted",
            ],
        );
    }
}

#[test]
fn search_and_describe_have_help_with_examples_and_answer_over_a_catalog_file() {
    help(
        &["search"],
        &[
            "Usage: codemode search [OPTIONS] <QUERY>\n",
            "--catalog <FILE.json>",
            "Examples:\n  codemode search",
        ],
    );
    help(&["describe"], &["Usage: codemode describe [OPTIONS] <PATH>\n", "Examples:\n  codemode describe"]);
    let catalog = concat!(env!("CARGO_MANIFEST_DIR"), "/../../conformance/discovery/catalog.json");
    let (code, stdout, stderr) = codemode(&[
        "search",
        "delete a Kubernetes namespace",
        "--catalog",
        catalog,
        "--limit",
        "1",
        "--output",
        "json",
    ]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(
        stdout,
        "{\"query\":\"delete a Kubernetes namespace\",\"tools\":1000,\"matches\":128,\"offset\":0,\"limit\":1,\"hits\":[{\"path\":\"kubernetes.namespaces_delete\",\"description\":\"Delete a namespace and everything in it.\",\"needsApproval\":true,\"destructive\":true,\"score\":15.9013}]}\n"
    );
    let (code, stdout, _) =
        codemode(&["describe", "kubernetes.namespaces_delete", "--catalog", catalog, "--output", "human"]);
    assert_eq!(code, 0);
    assert!(
        stdout.starts_with("kubernetes.namespaces_delete (needs approval, destructive)\n\n```ts\n"),
        "{stdout}"
    );
    let (code, stdout, stderr) = codemode(&["describe", "kubernetes.namespace_delete", "--catalog", catalog]);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(stderr.starts_with("codemode: No tool \"kubernetes.namespace_delete\" in the catalog. The nearest paths: kubernetes.namespaces_delete,"), "{stderr}");
    let (code, _, stderr) = codemode(&["search", "anything"]);
    assert_eq!(
        (code, stderr.as_str()),
        (2, "codemode: give --catalog, --spec, --db or --server: there are no tools to search\n")
    );
    let (code, _, stderr) = codemode(&["search", "x", "--catalog", catalog, "--provider", "nope"]);
    assert_eq!(code, 2);
    assert!(stderr.starts_with("codemode: No provider \"nope\" in the catalog."), "{stderr}");
}
