//! Conformance tests: what Apache Pulsar does, pinned against the client on the mock broker.
//!
//! One module per upstream class (the Java client's `pulsar-client/.../client/impl/` and, for the
//! mock's own behaviour, the broker's `ServerCnx` and the proxy's `ProxyConnection`). Each test
//! names in its doc the upstream method whose behaviour it pins; `docs/conformance.md` (the
//! ledger) maps every recorded behaviour to the test that pins it.

use support as common;

mod binary_proto_lookup_service;
mod client_cnx;
mod connection_pool;
mod consumer_impl;
mod consumer_impl_unsubscribe;
mod multi_topics_consumer_impl;
mod partitioned_producer_impl;
mod pattern_multi_topics_consumer_impl;
mod producer_impl;
mod proxy_connection;
mod reader_impl;
mod server_cnx;

mod ledger {
    //! The ledger cannot drift from the tests: every test it names exists, every row has a
    //! status, and every row without a test or with a difference says why.

    use std::collections::HashSet;
    use std::path::Path;

    /// Every `fn name` under `dir` (recursively, `.rs` files).
    fn functions_under(dir: &Path, out: &mut HashSet<String>) {
        for entry in std::fs::read_dir(dir).expect("read a source dir") {
            let path = entry.expect("a dir entry").path();
            if path.is_dir() {
                functions_under(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("read a source file");
                for line in text.lines() {
                    let mut rest = line.trim_start();
                    while let Some(at) = rest.find("fn ") {
                        let after = &rest[at + 3..];
                        let name: String = after
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        if !name.is_empty() {
                            out.insert(name);
                        }
                        rest = after;
                    }
                }
            }
        }
    }

    #[test]
    fn every_row_names_an_existing_test_or_a_reason() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let ledger = std::fs::read_to_string(root.join("docs/conformance.md")).expect("the ledger");
        let mut fns = HashSet::new();
        functions_under(&root.join("tests"), &mut fns);
        functions_under(&root.join("src"), &mut fns);

        let (mut rows, mut differs, mut open) = (0, 0, 0);
        let mut problems = Vec::new();
        for (n, line) in ledger.lines().enumerate() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            // A table row: | Upstream | Behaviour | Test | Status | Reason |
            if cells.len() != 7 || !line.starts_with('|') {
                continue;
            }
            let (test, status, reason) = (cells[3], cells[4], cells[5]);
            if status == "Status" || status.starts_with("---") {
                continue;
            }
            rows += 1;
            let at = format!("docs/conformance.md:{}", n + 1);
            match status {
                "same" => {}
                "differs" => differs += 1,
                "open" => open += 1,
                other => problems.push(format!("{at}: status {other:?} is not same/differs/open")),
            }
            let tests: Vec<&str> = test
                .split(',')
                .map(|t| t.trim().trim_matches('`'))
                .filter(|t| !t.is_empty() && *t != "—" && *t != "-")
                .collect();
            if tests.is_empty() && reason.is_empty() {
                problems.push(format!("{at}: no test and no reason"));
            }
            if status != "same" && reason.is_empty() {
                problems.push(format!("{at}: a {status} row needs its reason"));
            }
            for t in tests {
                let name = t.rsplit("::").next().unwrap_or(t);
                if !fns.contains(name) {
                    problems.push(format!("{at}: no fn {name} (named as {t})"));
                }
            }
        }
        println!("ledger: {rows} rows, {differs} deliberate differences, {open} open");
        assert!(
            problems.is_empty(),
            "ledger problems:\n{}",
            problems.join("\n")
        );
    }
}
