//! Shared support code for integration tests that run against a real broker, `pulsar-lite`
//! (PyPI `pulsar-lite==0.2.0`), and against the official client (PyPI
//! `pulsar-client[avro]==3.13.0`: the `avro` extra brings fastavro, which `pulsar.schema.AvroSchema`
//! needs).
//!
//! Re-exported at the root of the `support` crate (`use support::{shared_broker, unique_name};`).
//!
//! * [`shared_broker`]: one broker per test binary, killed when the test process exits.
//! * [`PulsarLite`]: a private broker (own port and data dir) that can be stopped, restarted and
//!   configured; killed on drop.
//! * [`unique_name`]: fresh topic / subscription names. Every test must use a fresh topic AND a
//!   fresh subscription: pulsar-lite poisons a subscription forever after a Seek to earliest.
//! * [`official`]: produce / consume with the official client (`tests/interop/official.py`).
//!
//! Both tools live in one venv, `target/test-venv` (created on first use, under a lock, or
//! beforehand by `.ci/run`). Environment overrides:
//! * `PULSAR_LITE_BIN`: the broker binary to use instead of the venv's.
//! * `PULSAR_TEST_VENV`: another venv directory (must hold both pinned packages, or be creatable).
//! * `PULSAR_LITE_LOG_LEVEL`: the broker's log level (default `info`; `debug` is huge).
//! * `PULSAR_TEST_KEEP_BROKER_DIRS=1`: keep broker data dirs (and logs) after the test.
//!
//! The broker's quirks and bugs are in `shared/design/pulsar-lite.md`; the short version: use
//! Shared subscriptions where exact counts or order matter, fresh subscription names, no Seek on a
//! live consumer, no batch-index acks.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The pinned PyPI packages. `.ci/run` installs the same pins into the same venv.
pub const PULSAR_LITE_PIN: &str = "pulsar-lite==0.2.0";
/// With the `avro` extra (fastavro), without which `pulsar.schema.AvroSchema` is unavailable.
pub const PULSAR_CLIENT_PIN: &str = "pulsar-client[avro]==3.13.0";

const START_TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// Paths and names

/// The cargo target directory (`target/` unless `CARGO_TARGET_DIR` says otherwise).
pub fn target_dir() -> PathBuf {
    crate::target_tmp_dir()
        .parent()
        .expect("<target>/tmp has a parent")
        .to_path_buf()
}

/// The venv holding pulsar-lite and pulsar-client (`target/test-venv`).
pub fn venv_dir() -> PathBuf {
    match std::env::var_os("PULSAR_TEST_VENV") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => target_dir().join("test-venv"),
    }
}

/// `prefix-<pid>-<counter>-<nanos>`: unique across tests, test binaries and runs.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{n}-{nanos}", std::process::id())
}

/// A client of [`shared_broker`] with a 10 s operation timeout.
pub fn shared_client() -> pulsar_sdk::Client {
    pulsar_sdk::Client::builder()
        .service_url(shared_broker().url())
        .operation_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// The consumer's next message within `step` (a real broker's patience), failing the test with
/// `what` if none arrives or the consumer fails.
pub async fn recv_within(
    consumer: &mut pulsar_sdk::Consumer,
    step: Duration,
    what: &str,
) -> pulsar_sdk::Message {
    tokio::time::timeout(step, consumer.recv())
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing arrived within {step:?}"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// The venv

struct Tools {
    python: PathBuf,
    broker_bin: PathBuf,
}

/// Creates (once per process, under a file lock shared with other test processes) the venv with
/// both pinned packages, and returns its python and the pulsar-lite binary. Panics with advice if
/// that is impossible: these tests never skip silently.
fn tools() -> &'static Tools {
    static TOOLS: OnceLock<Tools> = OnceLock::new();
    TOOLS.get_or_init(|| match ensure_venv() {
        Ok(tools) => tools,
        Err(e) => panic!(
            "\n\nCannot set up the integration-test venv at {venv}:\n{e}\n\n\
             How to fix: install Python 3 with venv and pip support (Debian: \
             `apt-get install -y python3 python3-venv python3-pip`), make sure PyPI is reachable, \
             then run `bash .ci/run` or simply re-run the tests. To create the venv by hand:\n  \
             python3 -m venv {venv} && {venv}/bin/pip install {PULSAR_LITE_PIN} '{PULSAR_CLIENT_PIN}'\n\
             (or point PULSAR_TEST_VENV at such a venv; PULSAR_LITE_BIN overrides the broker \
             binary only).\n",
            venv = venv_dir().display()
        ),
    })
}

/// The venv's python (with `pulsar-client` installed).
pub fn venv_python() -> PathBuf {
    tools().python.clone()
}

/// The pulsar-lite binary: `PULSAR_LITE_BIN` if set, else the venv's.
pub fn pulsar_lite_bin() -> PathBuf {
    match std::env::var_os("PULSAR_LITE_BIN") {
        Some(bin) if !bin.is_empty() => {
            let bin = PathBuf::from(bin);
            assert!(
                bin.is_file(),
                "PULSAR_LITE_BIN={} is not a file; unset it to use the venv's pulsar-lite",
                bin.display()
            );
            bin
        }
        _ => tools().broker_bin.clone(),
    }
}

fn ensure_venv() -> Result<Tools, String> {
    let venv = venv_dir();
    if let Some(tools) = check_venv(&venv) {
        return Ok(tools);
    }
    let parent = venv.parent().ok_or("venv path has no parent")?;
    fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    // Several test binaries may get here at once: one creates, the others wait and re-check.
    let lock_path = venv.with_extension("lock");
    let lock = File::create(&lock_path)
        .map_err(|e| format!("cannot create lock file {}: {e}", lock_path.display()))?;
    // SAFETY: flock on a file descriptor we own; released when `lock` is closed.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(format!(
            "flock({}): {}",
            lock_path.display(),
            io::Error::last_os_error()
        ));
    }
    if let Some(tools) = check_venv(&venv) {
        return Ok(tools);
    }
    let started = Instant::now();
    let pip_install = |python: &Path| {
        run_setup(
            Command::new(python)
                .args(["-m", "pip", "install", "--disable-pip-version-check", "-q"])
                .args([PULSAR_LITE_PIN, PULSAR_CLIENT_PIN]),
            "pip install (is PyPI reachable?)",
        )
    };
    // A venv from older pins (e.g. without the avro extra) is topped up in place first: pip
    // adds or replaces only what differs. Rebuilt from scratch if that does not do it.
    if venv.join("bin/python").is_file() {
        eprintln!(
            "[support] topping up test venv {} with {PULSAR_LITE_PIN} {PULSAR_CLIENT_PIN} ...",
            venv.display()
        );
        if pip_install(&venv.join("bin/python")).is_ok() {
            if let Some(tools) = check_venv(&venv) {
                eprintln!("[support] test venv ready in {:.1?}", started.elapsed());
                return Ok(tools);
            }
        }
    }
    eprintln!(
        "[support] creating test venv {} with {PULSAR_LITE_PIN} {PULSAR_CLIENT_PIN} ...",
        venv.display()
    );
    if venv.exists() {
        fs::remove_dir_all(&venv)
            .map_err(|e| format!("cannot remove broken venv {}: {e}", venv.display()))?;
    }
    run_setup(
        Command::new("python3").arg("-m").arg("venv").arg(&venv),
        "python3 -m venv (is python3 installed, with the venv module and ensurepip? \
         Debian: apt-get install -y python3-venv)",
    )?;
    pip_install(&venv.join("bin/python"))?;
    let tools = check_venv(&venv).ok_or_else(|| {
        format!(
            "after pip install, {} still lacks a working pulsar-lite binary or pulsar-client",
            venv.display()
        )
    })?;
    eprintln!("[support] test venv ready in {:.1?}", started.elapsed());
    drop(lock);
    Ok(tools)
}

fn run_setup(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A venv is usable when both packages report the pinned versions, the client's avro extra
/// (fastavro) imports and the binary is there.
fn check_venv(venv: &Path) -> Option<Tools> {
    let python = venv.join("bin/python");
    if !python.is_file() {
        return None;
    }
    let out = Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m, pulsar, fastavro; \
             print('pulsar-lite==' + m.version('pulsar-lite'), \
             'pulsar-client[avro]==' + m.version('pulsar-client'))",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let versions = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || versions.trim() != format!("{PULSAR_LITE_PIN} {PULSAR_CLIENT_PIN}")
    {
        return None;
    }
    let broker_bin = find_broker_bin(venv)?;
    Some(Tools { python, broker_bin })
}

/// `<venv>/lib/python3.X/site-packages/pulsar_lite/bin/pulsar-lite`, whatever X is.
fn find_broker_bin(venv: &Path) -> Option<PathBuf> {
    for lib in ["lib", "lib64"] {
        let Ok(entries) = fs::read_dir(venv.join(lib)) else {
            continue;
        };
        for entry in entries.flatten() {
            if !entry.file_name().to_string_lossy().starts_with("python") {
                continue;
            }
            let bin = entry
                .path()
                .join("site-packages/pulsar_lite/bin/pulsar-lite");
            if bin.is_file() {
                return Some(bin);
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// The broker

/// One pulsar-lite broker process with its own port and data directory.
///
/// The process runs under a tiny `sh` watchdog whose stdin is a pipe held by this struct: when
/// the pipe closes (this struct dropped, or the whole test process exiting, even by SIGKILL) the
/// watchdog SIGKILLs the broker. So even the never-dropped [`shared_broker`] cannot outlive its
/// test binary.
pub struct PulsarLite {
    port: u16,
    dir: PathBuf,
    config_path: PathBuf,
    log_path: PathBuf,
    log_level: String,
    running: Option<Running>,
}

struct Running {
    watchdog: Child,
    stdin: ChildStdin,
}

/// Kills the broker ($child) when a line (the signal name) or EOF arrives on stdin, and exits
/// with the broker's status when the broker exits by itself.
const WATCHDOG: &str = r#"
exec 3<&0
"$0" "$@" </dev/null 3<&- &
child=$!
( read -r sig <&3; kill -s "${sig:-KILL}" "$child" 2>/dev/null ) &
watcher=$!
exec 3<&-
wait "$child"
status=$?
kill "$watcher" 2>/dev/null
exit "$status"
"#;

impl PulsarLite {
    /// Starts a broker with the default test config (non-partitioned topics, no metrics).
    pub fn start() -> PulsarLite {
        Self::with_config("")
    }

    /// Starts a broker with extra top-level TOML keys (they override the defaults), e.g.
    /// `"default_partitions = 3\nkeep_alive_interval_secs = 2"`. A `[metrics]` table in
    /// `extra_toml` replaces the default `[metrics] enabled = false` (never use the default
    /// metrics address 0.0.0.0:8080; pick a free loopback port).
    pub fn with_config(extra_toml: &str) -> PulsarLite {
        match Self::try_with_config(extra_toml) {
            Ok(broker) => broker,
            Err(e) => panic!("cannot start pulsar-lite: {e}"),
        }
    }

    pub fn try_with_config(extra_toml: &str) -> Result<PulsarLite, String> {
        let bin = pulsar_lite_bin();
        let root = target_dir().join("test-brokers");
        clean_stale_broker_dirs(&root);
        let dir = root.join(unique_name("broker").trim_start_matches("broker-"));
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let config_path = dir.join("lite.toml");
        fs::write(&config_path, config_toml(extra_toml))
            .map_err(|e| format!("cannot write {}: {e}", config_path.display()))?;
        let log_level = std::env::var("PULSAR_LITE_LOG_LEVEL")
            .ok()
            .filter(|l| !l.is_empty())
            .unwrap_or_else(|| "info".to_string());
        let mut broker = PulsarLite {
            port: 0,
            log_path: dir.join("broker.log"),
            dir,
            config_path,
            log_level,
            running: None,
        };
        // A port picked by binding :0 can be taken by someone else before the broker binds it:
        // then the broker exits and we try another port.
        let mut last_err = String::new();
        for _ in 0..5 {
            broker.port = free_port()?;
            match broker.spawn(&bin) {
                Ok(()) => return Ok(broker),
                Err(e) => last_err = e,
            }
        }
        Err(last_err)
    }

    /// `pulsar://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("pulsar://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The broker's data directory (holds the config, the log and the db).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The `--db-path` prefix: pulsar-lite creates `<db>.metadata.json` and `<db>.rocksdb/`.
    pub fn db_path(&self) -> PathBuf {
        self.dir.join("db")
    }

    /// `<db>.metadata.json`: partition counts and subscriptions. To grow a partitioned topic:
    /// `stop()`, edit `"partitions": N` here, `start_again()`.
    pub fn metadata_path(&self) -> PathBuf {
        self.dir.join("db.metadata.json")
    }

    pub fn log_path(&self) -> PathBuf {
        self.log_path.clone()
    }

    pub fn config_path(&self) -> PathBuf {
        self.config_path.clone()
    }

    /// The broker's log so far (stdout and stderr of every run, appended).
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub fn is_running(&mut self) -> bool {
        match &mut self.running {
            Some(r) => matches!(r.watchdog.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGKILLs the broker and waits for it to be gone. Data and acks survive (RocksDB).
    pub fn stop(&mut self) {
        self.stop_with("KILL");
    }

    /// SIGTERMs the broker and waits for it to exit.
    pub fn stop_graceful(&mut self) {
        self.stop_with("TERM");
    }

    fn stop_with(&mut self, signal: &str) {
        if let Some(mut running) = self.running.take() {
            // The watchdog may already be gone (broker crashed): ignore write errors.
            let _ = writeln!(running.stdin, "{signal}");
            let _ = running.stdin.flush();
            let _ = running.watchdog.wait();
        }
    }

    /// Starts the stopped broker again on the same port with the same data.
    pub fn start_again(&mut self) {
        assert!(
            self.running.is_none(),
            "start_again: the broker is still running; stop() first"
        );
        let bin = pulsar_lite_bin();
        // The port may be briefly busy (e.g. a client reconnecting, or TIME_WAIT): retry.
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.spawn(&bin) {
                Ok(()) => return,
                Err(e) if Instant::now() >= deadline => {
                    panic!("cannot restart pulsar-lite on port {}: {e}", self.port)
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// `stop()` (SIGKILL) then `start_again()`.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    fn spawn(&mut self, bin: &Path) -> Result<(), String> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| format!("cannot open {}: {e}", self.log_path.display()))?;
        let log_offset = log.metadata().map(|m| m.len()).unwrap_or(0);
        let log_err = log.try_clone().map_err(|e| e.to_string())?;
        let addr = format!("127.0.0.1:{}", self.port);
        let started = Instant::now();
        let mut watchdog = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg(bin)
            .arg("--config")
            .arg(&self.config_path)
            .arg("--addr")
            .arg(&addr)
            .arg("--db-path")
            .arg(self.db_path())
            .arg("--log-level")
            .arg(&self.log_level)
            .stdin(Stdio::piped())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| format!("cannot spawn sh for {}: {e}", bin.display()))?;
        let stdin = watchdog.stdin.take().expect("piped stdin");
        self.running = Some(Running { watchdog, stdin });

        // Ready when the port accepts and (at info level or lower) our broker says it listens;
        // the log check makes sure the port is not someone else's.
        let check_log = matches!(self.log_level.as_str(), "info" | "debug" | "trace");
        let listening = format!("Server listening on {addr}");
        let deadline = started + START_TIMEOUT;
        loop {
            let running = self.running.as_mut().expect("running");
            if let Ok(Some(status)) = running.watchdog.try_wait() {
                self.running = None;
                return Err(format!(
                    "pulsar-lite exited during startup ({status}); log tail:\n{}",
                    self.log_tail(40)
                ));
            }
            let accepts =
                TcpStream::connect_timeout(&self.addr(), Duration::from_millis(200)).is_ok();
            if accepts && (!check_log || log_since(&self.log_path, log_offset).contains(&listening))
            {
                if std::env::var_os("PULSAR_TEST_VERBOSE").is_some() {
                    eprintln!(
                        "[support] pulsar-lite on {addr} ready in {:.1?}",
                        started.elapsed()
                    );
                }
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.stop();
                return Err(format!(
                    "pulsar-lite did not accept on {addr} within {START_TIMEOUT:?}; log tail:\n{}",
                    self.log_tail(40)
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The last `lines` lines of the broker log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for PulsarLite {
    fn drop(&mut self) {
        self.stop();
        // Keep the data dir (with the log) of a failing test for a post-mortem; the next run's
        // clean_stale_broker_dirs removes it.
        if !std::thread::panicking() && std::env::var_os("PULSAR_TEST_KEEP_BROKER_DIRS").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        } else if std::thread::panicking() {
            eprintln!(
                "[support] pulsar-lite log kept at {}",
                self.log_path.display()
            );
        }
    }
}

fn config_toml(extra: &str) -> String {
    let sets = |key: &str| {
        extra.lines().any(|l| {
            let l = l.trim_start();
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
    };
    let has_metrics = extra.lines().any(|l| l.trim() == "[metrics]");
    let mut toml = String::from("# written by tests/support/src/broker.rs\n");
    if !sets("default_partitions") {
        toml.push_str("default_partitions = 0\n");
    }
    if !sets("log_level") {
        toml.push_str("log_level = \"info\"\n");
    }
    // Extra keys come before any table of ours so that they stay top-level.
    toml.push_str(extra);
    toml.push('\n');
    if !has_metrics {
        toml.push_str("\n[metrics]\nenabled = false\n");
    }
    toml
}

pub fn free_port() -> Result<u16, String> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind 127.0.0.1:0: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

fn log_since(path: &Path, offset: u64) -> String {
    let mut s = String::new();
    if let Ok(mut f) = File::open(path) {
        use std::io::{Seek, SeekFrom};
        if f.seek(SeekFrom::Start(offset)).is_ok() {
            let _ = f.read_to_string(&mut s);
        }
    }
    s
}

/// Removes `test-brokers/<pid>-...` dirs left by test processes that are gone (once a process).
fn clean_stale_broker_dirs(root: &Path) {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let Ok(entries) = fs::read_dir(root) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = name.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
                continue;
            };
            // SAFETY: kill with signal 0 only checks whether the process exists.
            let alive = unsafe { libc::kill(pid, 0) } == 0
                || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
            if !alive {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    });
}

/// One broker for the whole test binary, started on first use. It is killed when the test
/// process exits (see [`PulsarLite`]). Don't stop or restart it: other tests share it; start a
/// private [`PulsarLite`] for that.
pub fn shared_broker() -> &'static PulsarLite {
    static SHARED: OnceLock<PulsarLite> = OnceLock::new();
    SHARED.get_or_init(PulsarLite::start)
}

// ---------------------------------------------------------------------------------------------
// The official client

/// Interop with the official client (pulsar-client 3.13.0, C++ client 4.2.0) through
/// `tests/interop/official.py`, run with the venv's python. Each call is one short-lived
/// client: one producer, or one consumer that acks what it receives.
///
/// The functions block (std::process); from inside a tokio test use the `_async` variants or
/// `spawn_blocking`, so the runtime keeps driving the SDK meanwhile.
pub mod official {
    use std::collections::BTreeMap;
    use std::io::{Read, Write};
    use std::path::PathBuf;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use base64::engine::general_purpose::STANDARD as B64;
    use base64::Engine as _;
    use serde_json::{json, Value};

    pub type Result<T> = std::result::Result<T, String>;

    /// A message for the official producer.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct OfficialMessage {
        pub payload: Vec<u8>,
        /// The partition key.
        pub key: Option<String>,
        pub properties: BTreeMap<String, String>,
        /// Event time, ms since the epoch.
        pub event_time: Option<u64>,
    }

    impl OfficialMessage {
        pub fn new(payload: impl Into<Vec<u8>>) -> Self {
            OfficialMessage {
                payload: payload.into(),
                ..Default::default()
            }
        }
    }

    #[derive(Clone, Debug)]
    pub struct ProduceOpts {
        pub messages: Vec<OfficialMessage>,
        /// Send asynchronously with batching enabled (batches of up to 1000, 50 ms delay).
        /// Without batching every send is synchronous, in order.
        pub batching: bool,
        /// "none" | "lz4" | "zlib" | "zstd" | "snappy"
        pub compression: String,
        pub producer_name: Option<String>,
        /// PIP-37 chunking (needs batching off).
        pub chunking: bool,
        /// End-to-end encryption for this key pair (the key name is `key_name`).
        pub encryption: Option<OfficialCrypto>,
    }

    /// PEM files for the official client's `CryptoKeyReader(public, private)` (the key name
    /// is ignored by it), and what its consumer does with what it cannot decrypt.
    #[derive(Clone, Debug)]
    pub struct OfficialCrypto {
        pub public_key: PathBuf,
        pub private_key: PathBuf,
        /// The producer's `encryption_key`.
        pub key_name: String,
        /// The consumer's `crypto_failure_action`: "fail" | "discard" | "consume".
        pub failure_action: String,
    }

    impl OfficialCrypto {
        fn to_json(&self) -> Value {
            json!({
                "public_key": self.public_key,
                "private_key": self.private_key,
                "key_name": self.key_name,
                "failure_action": self.failure_action,
            })
        }
    }

    impl Default for ProduceOpts {
        fn default() -> Self {
            ProduceOpts {
                messages: Vec::new(),
                batching: false,
                compression: "none".to_string(),
                producer_name: None,
                chunking: false,
                encryption: None,
            }
        }
    }

    impl ProduceOpts {
        /// Messages with these payloads, no keys or properties, no batching or compression.
        pub fn payloads<P: Into<Vec<u8>>>(payloads: impl IntoIterator<Item = P>) -> Self {
            ProduceOpts {
                messages: payloads.into_iter().map(OfficialMessage::new).collect(),
                ..Default::default()
            }
        }
    }

    /// A message as the official consumer saw it.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct OfficialReceived {
        pub payload: Vec<u8>,
        /// The partition key (the Python API reports an empty key as none).
        pub key: Option<String>,
        pub ordering_key: Option<String>,
        pub properties: BTreeMap<String, String>,
        /// Event time in ms, none when unset (0).
        pub event_time: Option<u64>,
        pub publish_time: u64,
        /// `(ledger,entry,partition,batch_index)`, as the C++ client prints it; see
        /// [`parse_message_id`].
        pub message_id: String,
        pub redelivery_count: u32,
        /// The full topic name (for partitioned topics: the partition).
        pub topic: String,
        pub producer_name: String,
    }

    /// `"(1,2,-1,-1)"` -> `(ledger 1, entry 2, partition -1, batch_index -1)`.
    pub fn parse_message_id(id: &str) -> Option<(u64, u64, i32, i32)> {
        let inner = id.trim().strip_prefix('(')?.strip_suffix(')')?;
        let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
        if parts.len() != 4 {
            return None;
        }
        Some((
            parts[0].parse().ok()?,
            parts[1].parse().ok()?,
            parts[2].parse().ok()?,
            parts[3].parse().ok()?,
        ))
    }

    fn script() -> PathBuf {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../interop/official.py"
        ))
    }

    fn produce_request(url: &str, topic: &str, opts: &ProduceOpts) -> Value {
        let messages: Vec<Value> = opts
            .messages
            .iter()
            .map(|m| {
                json!({
                    "payload": B64.encode(&m.payload),
                    "key": m.key,
                    "properties": m.properties,
                    "event_time": m.event_time,
                })
            })
            .collect();
        json!({
            "url": url,
            "topic": topic,
            "batching": opts.batching,
            "compression": opts.compression,
            "producer_name": opts.producer_name,
            "chunking": opts.chunking,
            "encryption": opts.encryption.as_ref().map(OfficialCrypto::to_json),
            "messages": messages,
        })
    }

    fn consume_request(
        url: &str,
        topic: &str,
        subscription: &str,
        count: usize,
        timeout: Duration,
        initial_position: &str,
        subscription_type: &str,
    ) -> Value {
        json!({
            "url": url,
            "topic": topic,
            "subscription": subscription,
            "count": count,
            "timeout_secs": timeout.as_secs_f64(),
            "initial_position": initial_position,
            "subscription_type": subscription_type,
            "ack": true,
        })
    }

    /// How long the script may take at most before it is killed: its own timeout plus the
    /// client's setup and teardown (operation timeout 10 s).
    fn hard_limit(timeout: Duration) -> Duration {
        timeout + Duration::from_secs(30)
    }

    /// Synchronous sends take about a millisecond each on loopback.
    fn produce_limit(opts: &ProduceOpts) -> Duration {
        hard_limit(Duration::from_millis(10 * opts.messages.len() as u64))
    }

    /// Produces with the official client; returns the message ids in message order.
    pub fn produce(url: &str, topic: &str, opts: &ProduceOpts) -> Result<Vec<String>> {
        let limit = produce_limit(opts);
        let answer = run("produce", &produce_request(url, topic, opts), limit)?;
        parse_ids(&answer)
    }

    /// Subscribes a fresh official consumer and receives exactly `count` messages (acking each)
    /// within `timeout`; fewer is an error. `initial_position`: "earliest" | "latest";
    /// `subscription_type`: "shared" | "exclusive" | "failover" | "key_shared".
    /// Use a fresh subscription per call and Shared where counts matter (pulsar-lite bugs).
    pub fn consume(
        url: &str,
        topic: &str,
        subscription: &str,
        count: usize,
        timeout: Duration,
        initial_position: &str,
        subscription_type: &str,
    ) -> Result<Vec<OfficialReceived>> {
        let got = consume_available(
            url,
            topic,
            subscription,
            count,
            timeout,
            initial_position,
            subscription_type,
        )?;
        check_count(got, count, timeout)
    }

    /// Like [`consume`], but returns whatever arrived (at most `max`) when `timeout` runs out.
    /// Use it to check that nothing (more) arrives.
    pub fn consume_available(
        url: &str,
        topic: &str,
        subscription: &str,
        max: usize,
        timeout: Duration,
        initial_position: &str,
        subscription_type: &str,
    ) -> Result<Vec<OfficialReceived>> {
        let req = consume_request(
            url,
            topic,
            subscription,
            max,
            timeout,
            initial_position,
            subscription_type,
        );
        parse_received(&run("consume", &req, hard_limit(timeout))?)
    }

    /// [`produce`] for async tests (does not block the runtime).
    pub async fn produce_async(url: &str, topic: &str, opts: &ProduceOpts) -> Result<Vec<String>> {
        let req = produce_request(url, topic, opts);
        parse_ids(&run_async("produce", &req, produce_limit(opts)).await?)
    }

    /// [`consume`] for async tests (does not block the runtime).
    pub async fn consume_async(
        url: &str,
        topic: &str,
        subscription: &str,
        count: usize,
        timeout: Duration,
        initial_position: &str,
        subscription_type: &str,
    ) -> Result<Vec<OfficialReceived>> {
        let got = consume_available_async(
            url,
            topic,
            subscription,
            count,
            timeout,
            initial_position,
            subscription_type,
        )
        .await?;
        check_count(got, count, timeout)
    }

    /// [`consume_available_async`] with the official consumer decrypting through `crypto`
    /// (and applying its failure action): whatever arrived, at most `max`, within `timeout`
    /// (Shared, from earliest).
    pub async fn consume_encrypted_async(
        url: &str,
        topic: &str,
        subscription: &str,
        max: usize,
        timeout: Duration,
        crypto: &OfficialCrypto,
    ) -> Result<Vec<OfficialReceived>> {
        let mut req = consume_request(url, topic, subscription, max, timeout, "earliest", "shared");
        req["encryption"] = crypto.to_json();
        parse_received(&run_async("consume", &req, hard_limit(timeout)).await?)
    }

    /// The official consumer (Shared, from earliest, decrypting through `crypto`) with a
    /// dead-letter policy (`dead_letter`: its `max_redeliver_count` and topic): it negatively acks
    /// every message it receives, so each is redelivered until the client dead-letters it.
    /// Returns every delivery (the redeliveries included), at most `max`, within `timeout`.
    pub async fn nack_into_dead_letter_async(
        url: &str,
        topic: &str,
        subscription: &str,
        max: usize,
        timeout: Duration,
        crypto: &OfficialCrypto,
        dead_letter: (u32, &str),
    ) -> Result<Vec<OfficialReceived>> {
        let (max_redeliver_count, dead_letter_topic) = dead_letter;
        let mut req = consume_request(url, topic, subscription, max, timeout, "earliest", "shared");
        req["encryption"] = crypto.to_json();
        req["nack"] = json!(true);
        req["dead_letter"] = json!({
            "max_redeliver_count": max_redeliver_count,
            "topic": dead_letter_topic,
        });
        parse_received(&run_async("consume", &req, hard_limit(timeout)).await?)
    }

    /// [`consume_available`] for async tests (does not block the runtime).
    pub async fn consume_available_async(
        url: &str,
        topic: &str,
        subscription: &str,
        max: usize,
        timeout: Duration,
        initial_position: &str,
        subscription_type: &str,
    ) -> Result<Vec<OfficialReceived>> {
        let req = consume_request(
            url,
            topic,
            subscription,
            max,
            timeout,
            initial_position,
            subscription_type,
        );
        parse_received(&run_async("consume", &req, hard_limit(timeout)).await?)
    }

    fn check_count(
        got: Vec<OfficialReceived>,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<OfficialReceived>> {
        if got.len() == count {
            return Ok(got);
        }
        let payloads: Vec<String> = got
            .iter()
            .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
            .collect();
        Err(format!(
            "official consumer got {} of {count} messages within {timeout:?}: {payloads:?}",
            got.len()
        ))
    }

    /// The CA file `official.py` trusts for `pulsar+ssl://` URLs (it reads it from
    /// `PULSAR_OFFICIAL_TLS_TRUST_CERTS` only for such URLs, so other runs are not affected).
    /// Passed to each child's environment, not set in this process's (which other test
    /// threads read concurrently).
    static TLS_TRUST: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

    /// Makes every later run of the official client trust `ca_file` for TLS.
    pub fn trust_tls_ca(ca_file: impl Into<PathBuf>) {
        *TLS_TRUST.lock().unwrap_or_else(|e| e.into_inner()) = Some(ca_file.into());
    }

    fn command(verb: &str) -> Command {
        let mut cmd = Command::new(super::venv_python());
        cmd.arg(script()).arg(verb);
        if let Some(ca) = TLS_TRUST.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            cmd.env("PULSAR_OFFICIAL_TLS_TRUST_CERTS", ca);
        }
        cmd
    }

    fn run(verb: &str, req: &Value, limit: Duration) -> Result<Value> {
        let mut child = command(verb)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run official.py: {e}"))?;
        let mut stdin = child.stdin.take().expect("piped");
        let body = req.to_string();
        stdin
            .write_all(body.as_bytes())
            .map_err(|e| format!("official.py stdin: {e}"))?;
        drop(stdin);
        let mut stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        let out_reader = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = stdout.read_to_end(&mut s);
            s
        });
        let err_reader = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = stderr.read_to_end(&mut s);
            s
        });
        let deadline = Instant::now() + limit;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(format!("waiting for official.py: {e}")),
            }
        };
        let out = out_reader.join().unwrap_or_default();
        let err = err_reader.join().unwrap_or_default();
        finish(verb, status.map(|s| s.success()), &out, &err, limit)
    }

    async fn run_async(verb: &str, req: &Value, limit: Duration) -> Result<Value> {
        use tokio::io::AsyncWriteExt;
        let mut child = tokio::process::Command::from(command(verb))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot run official.py: {e}"))?;
        let mut stdin = child.stdin.take().expect("piped");
        stdin
            .write_all(req.to_string().as_bytes())
            .await
            .map_err(|e| format!("official.py stdin: {e}"))?;
        drop(stdin);
        match tokio::time::timeout(limit, child.wait_with_output()).await {
            Ok(Ok(output)) => finish(
                verb,
                Some(output.status.success()),
                &output.stdout,
                &output.stderr,
                limit,
            ),
            Ok(Err(e)) => Err(format!("waiting for official.py: {e}")),
            // The child is killed on drop.
            Err(_) => finish(verb, None, b"", b"", limit),
        }
    }

    fn finish(
        verb: &str,
        success: Option<bool>,
        out: &[u8],
        err: &[u8],
        limit: Duration,
    ) -> Result<Value> {
        let err = String::from_utf8_lossy(err);
        match success {
            None => Err(format!(
                "official.py {verb} killed after {limit:?}; stderr:\n{err}"
            )),
            Some(false) => Err(format!("official.py {verb} failed; stderr:\n{err}")),
            Some(true) => serde_json::from_slice(out).map_err(|e| {
                format!(
                    "official.py {verb}: bad JSON answer ({e}): {}\nstderr:\n{err}",
                    String::from_utf8_lossy(out)
                )
            }),
        }
    }

    fn parse_ids(answer: &Value) -> Result<Vec<String>> {
        answer["message_ids"]
            .as_array()
            .ok_or_else(|| format!("no message_ids in {answer}"))?
            .iter()
            .map(|id| {
                id.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("bad id {id}"))
            })
            .collect()
    }

    fn parse_received(answer: &Value) -> Result<Vec<OfficialReceived>> {
        let messages = answer["messages"]
            .as_array()
            .ok_or_else(|| format!("no messages in {answer}"))?;
        messages.iter().map(parse_one).collect()
    }

    fn parse_one(m: &Value) -> Result<OfficialReceived> {
        let bad = || format!("malformed message from official.py: {m}");
        let text = |k: &str| m[k].as_str().map(str::to_string);
        let properties = m["properties"]
            .as_object()
            .ok_or_else(bad)?
            .iter()
            .map(|(k, v)| Ok((k.clone(), v.as_str().ok_or_else(bad)?.to_string())))
            .collect::<Result<BTreeMap<_, _>>>()?;
        Ok(OfficialReceived {
            payload: B64
                .decode(m["payload"].as_str().ok_or_else(bad)?)
                .map_err(|_| bad())?,
            key: text("key"),
            ordering_key: text("ordering_key"),
            properties,
            event_time: m["event_time"].as_u64(),
            publish_time: m["publish_time"].as_u64().ok_or_else(bad)?,
            message_id: text("message_id").ok_or_else(bad)?,
            redelivery_count: m["redelivery_count"].as_u64().ok_or_else(bad)? as u32,
            topic: text("topic").unwrap_or_default(),
            producer_name: text("producer_name").unwrap_or_default(),
        })
    }
}

/// Works around pulsar-lite's stalled live dispatch after a chunked message (it sometimes
/// never dispatches the next entry to a live consumer until another message is published):
/// publishes a small `nudge-N` message on `topic` every 500 ms until the returned task is
/// aborted. Tests skip the nudges.
pub async fn nudge(client: &pulsar_sdk::Client, topic: &str) -> tokio::task::JoinHandle<()> {
    let nudger = client
        .producer(topic)
        .batching(false)
        .create()
        .await
        .expect("nudge producer");
    tokio::spawn(async move {
        for i in 0.. {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if nudger.send(format!("nudge-{i}")).await.is_err() {
                return;
            }
        }
    })
}
