//! stunnel (Debian's `stunnel4`): a real TLS terminator, started on a free port in front of a
//! plain TCP server (pulsar-lite), optionally requiring client certificates. `.ci/run` installs
//! it; without it the tests that need it fail with advice (they never skip).

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running stunnel; killed on drop.
pub struct Stunnel {
    port: u16,
    child: Child,
    log: PathBuf,
}

/// The stunnel binary: `$STUNNEL_BIN`, else `stunnel4` or `stunnel` on the PATH.
pub fn stunnel_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("STUNNEL_BIN").filter(|b| !b.is_empty()) {
        return PathBuf::from(bin);
    }
    for name in ["stunnel4", "stunnel"] {
        for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "stunnel not found (looked for stunnel4 and stunnel on the PATH, and $STUNNEL_BIN): \
         install it with `apt-get install -y stunnel4` (bash .ci/run does)"
    );
}

impl Stunnel {
    /// Terminates TLS on a free loopback port with `cert`/`key` and forwards to `target`
    /// (`127.0.0.1:PORT`). With `client_ca`, clients must present a certificate it signed.
    pub fn start(
        dir: &Path,
        cert: &Path,
        key: &Path,
        target: u16,
        client_ca: Option<&Path>,
    ) -> Stunnel {
        let bin = stunnel_bin();
        let mut last = String::new();
        for attempt in 0..5 {
            let port = super::free_port().expect("a free port");
            let name = format!("stunnel-{port}-{attempt}");
            let log = dir.join(format!("{name}.log"));
            let mut conf = format!(
                "foreground = yes\npid =\ndebug = 5\noutput = {}\n[pulsar]\naccept = 127.0.0.1:{port}\n\
                 connect = 127.0.0.1:{target}\ncert = {}\nkey = {}\n",
                log.display(),
                cert.display(),
                key.display()
            );
            if let Some(ca) = client_ca {
                conf.push_str(&format!(
                    "CAfile = {}\nverifyChain = yes\nrequireCert = yes\n",
                    ca.display()
                ));
            }
            let conf_path = dir.join(format!("{name}.conf"));
            std::fs::write(&conf_path, conf).unwrap();
            let mut child = Command::new(&bin)
                .arg(&conf_path)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Stunnel { port, child, log };
                }
                if let Ok(Some(status)) = child.try_wait() {
                    last = format!(
                        "stunnel exited with {status}: {}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                    break;
                }
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    last = "stunnel did not listen within 10 s".into();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("cannot start stunnel: {last}");
    }

    /// `pulsar+ssl://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("pulsar+ssl://127.0.0.1:{}", self.port)
    }

    /// stunnel's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Stunnel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
