//! Small helpers shared by the examples: argument parsing and JSON output.
#![allow(dead_code)]

use std::collections::HashMap;
use std::process::exit;

/// Parsed `--name value` options, repeated options and `--flag`s.
pub struct Args {
    values: HashMap<String, Vec<String>>,
    flags: Vec<String>,
}

impl Args {
    /// Parses the process arguments; `options` take a value, `flags` take none. Anything else
    /// is an error (so a typo is not silently ignored).
    pub fn parse(usage: &str, options: &[&str], flags: &[&str]) -> Args {
        let mut values: HashMap<String, Vec<String>> = HashMap::new();
        let mut set_flags = Vec::new();
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            if arg == "-h" || arg == "--help" {
                println!("{usage}");
                exit(0);
            }
            let Some(name) = arg.strip_prefix("--") else {
                fail(usage, &format!("unexpected argument `{arg}`"));
            };
            if flags.contains(&name) {
                set_flags.push(name.to_string());
                continue;
            }
            if !options.contains(&name) {
                fail(usage, &format!("unknown option `--{name}`"));
            }
            let Some(value) = it.next() else {
                fail(usage, &format!("--{name} needs a value"));
            };
            values.entry(name.to_string()).or_default().push(value);
        }
        Args {
            values,
            flags: set_flags,
        }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.values
            .get(name)
            .and_then(|v| v.last())
            .map(String::as_str)
    }

    pub fn all(&self, name: &str) -> Vec<String> {
        self.values.get(name).cloned().unwrap_or_default()
    }

    pub fn flag(&self, name: &str) -> bool {
        self.flags.iter().any(|f| f == name)
    }

    pub fn required(&self, usage: &str, name: &str) -> String {
        self.get(name)
            .map(str::to_string)
            .unwrap_or_else(|| fail(usage, &format!("--{name} is required")))
    }

    pub fn number<T: std::str::FromStr>(&self, usage: &str, name: &str, default: T) -> T {
        match self.get(name) {
            None => default,
            Some(v) => v
                .parse()
                .unwrap_or_else(|_| fail(usage, &format!("--{name}: `{v}` is not a number"))),
        }
    }

    pub fn url(&self) -> String {
        self.get("url")
            .map(str::to_string)
            .unwrap_or_else(|| "pulsar://127.0.0.1:6650".to_string())
    }
}

pub fn fail(usage: &str, message: &str) -> ! {
    eprintln!("error: {message}\n\n{usage}");
    exit(2)
}

/// Exits non-zero after printing an error as JSON on stdout and text on stderr.
pub fn die(error: impl std::fmt::Display) -> ! {
    eprintln!("error: {error}");
    println!("{}", serde_json::json!({ "error": error.to_string() }));
    exit(1)
}

/// Prints `{"event":"partitions_changed","topic":...,"partitions":n}` whenever the topic grows.
pub fn print_partition_changes(topic: String, mut changes: tokio::sync::watch::Receiver<usize>) {
    tokio::spawn(async move {
        changes.borrow_and_update();
        while changes.changed().await.is_ok() {
            let n = *changes.borrow_and_update();
            println!(
                "{}",
                serde_json::json!({"event": "partitions_changed", "topic": topic, "partitions": n})
            );
        }
    });
}
