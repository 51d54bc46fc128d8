//! Running `kube-apiserver-emulator` for tests: start it on a fresh TLS directory, talk to its
//! control port, open raw watch streams, and make HTTPS clients with either credential.

use super::Scratch;
use serde_json::Value;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long the emulator may take to print its ready line.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// A running emulator; killed on drop.
pub struct Emulator {
    child: Child,
    /// `https://addr:port` of the API listener.
    pub api: String,
    /// `http://addr:port` of the control listener.
    pub control: String,
    /// The TLS directory (certificates, token, kubeconfigs).
    pub tls_dir: PathBuf,
    /// The ready line as printed.
    pub ready: String,
    _scratch: Scratch,
}

impl Emulator {
    /// Starts the emulator listening on `listen` (inside `netns` if given), loading `manifests`,
    /// with extra flags; waits for its ready line.
    pub fn start(netns: Option<&str>, listen: &str, manifests: Option<&Path>, extra: &[&str]) -> Emulator {
        let scratch = Scratch::new("emulator");
        let tls_dir = scratch.0.join("tls");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kube-apiserver-emulator"));
        cmd.arg("--listen").arg(listen).arg("--control=127.0.0.1:0").arg("--tls-dir").arg(&tls_dir);
        if let Some(ns) = netns {
            cmd.arg("--netns").arg(ns);
        }
        if let Some(m) = manifests {
            cmd.arg("--manifests").arg(m);
        }
        cmd.args(extra).env("RUST_LOG", "warn").stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn kube-apiserver-emulator");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let ready = match rx.recv_timeout(READY_WITHIN) {
            Ok(line) if line.starts_with("ready ") => line.trim().to_string(),
            other => {
                let _ = child.kill();
                panic!("emulator did not get ready: {other:?}");
            }
        };
        let field = |name: &str| {
            ready.split_whitespace().find_map(|w| w.strip_prefix(name)).map(str::to_string).unwrap_or_default()
        };
        let (api, control) = (field("api="), field("control="));
        Emulator { child, api, control, tls_dir, ready, _scratch: scratch }
    }

    /// The emulator's process id.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The client-certificate kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.tls_dir.join("kubeconfig")
    }

    /// The control listener's `host:port`.
    pub fn control_addr(&self) -> String {
        self.control.trim_start_matches("http://").to_string()
    }

    fn post(&self, endpoint: &str, body: &Value) -> Value {
        let (status, v) = request(&plain_agent(), "POST", &format!("{}/emulator/{endpoint}", self.control), Some(body));
        assert_eq!(status, 200, "{endpoint} {body}: {v}");
        v
    }

    /// Creates or replaces objects (one, an array, or `{"items": [...]}`); returns `{"resourceVersion"}`.
    pub fn apply(&self, objects: &Value) -> Value {
        self.post("apply", objects)
    }

    /// Deletes objects (same shapes as `apply`).
    pub fn delete(&self, objects: &Value) -> Value {
        self.post("delete", objects)
    }

    /// Applies a fault switch.
    pub fn fault(&self, fault: &Value) {
        self.post("faults", fault);
    }

    /// The counters.
    pub fn stats(&self) -> Value {
        self.list("/emulator/stats")
    }

    /// GETs `path` on the control listener, asserting 200.
    pub fn list(&self, path: &str) -> Value {
        let (status, v) = self.get(path);
        assert_eq!(status, 200, "GET {path}: {v}");
        v
    }

    /// GETs `path` on the control listener: status and JSON body.
    pub fn get(&self, path: &str) -> (u16, Value) {
        request(&plain_agent(), "GET", &format!("{}{path}", self.control), None)
    }

    /// The requests of `resource` the emulator saw on its API listener, oldest first (its
    /// latest 2,000 over every resource): when (ms since the epoch), the verb (`watchlist`
    /// for a WatchList), and the path and query.
    pub fn requests(&self, resource: &str) -> Vec<(u64, String, String)> {
        let all = self.list("/emulator/requests");
        let field = |r: &Value, k: &str| r[k].as_str().unwrap_or_default().to_string();
        let all = all.as_array().cloned().unwrap_or_default();
        all.iter()
            .filter(|r| r["resource"] == resource)
            .map(|r| (r["atMs"].as_u64().unwrap_or(0), field(r, "verb"), field(r, "target")))
            .collect()
    }

    /// The rv of the last write, from stats.
    pub fn rv(&self) -> u64 {
        self.stats()["resourceVersion"].as_str().and_then(|s| s.parse().ok()).expect("resourceVersion")
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain-HTTP client that returns error statuses instead of failing.
pub fn plain_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

/// An HTTPS client trusting the emulator's CA, optionally presenting its client certificate.
pub fn tls_agent(tls_dir: &Path, client_cert: bool) -> ureq::Agent {
    let read = |name: &str| std::fs::read(tls_dir.join(name)).expect("tls file");
    let ca = ureq::tls::Certificate::from_pem(&read("ca.crt")).expect("ca pem");
    let mut tls = ureq::tls::TlsConfig::builder().root_certs(ureq::tls::RootCerts::new_with_certs(&[ca]));
    if client_cert {
        let cert = ureq::tls::Certificate::from_pem(&read("client.crt")).expect("client pem");
        let key = ureq::tls::PrivateKey::from_pem(&read("client.key")).expect("key pem");
        tls = tls.client_cert(Some(ureq::tls::ClientCert::new_with_certs(&[cert], key)));
    }
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .tls_config(tls.build())
        .build()
        .into()
}

/// One request; status and JSON body (`Null` when the body is not JSON).
pub fn request(agent: &ureq::Agent, method: &str, url: &str, body: Option<&Value>) -> (u16, Value) {
    request_with(agent, method, url, body, &[]).0
}

/// One request with extra headers; `((status, body), Retry-After)`.
pub fn request_with(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> ((u16, Value), Option<String>) {
    let mut req = ureq::http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let text = body.map(Value::to_string).unwrap_or_default();
    let req = req.header("content-type", "application/json").body(text).expect("request");
    let mut resp = agent.run(req).expect("request sent");
    let retry = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    ((status, serde_json::from_str(&text).unwrap_or(Value::Null)), retry)
}

/// What a raw watch stream yielded next.
#[derive(Debug)]
pub enum Item {
    /// A JSON event line.
    Event(Value),
    /// A line that is not JSON.
    Garbage(String),
    /// The terminating zero-length chunk.
    End,
    /// The connection closed without the terminator.
    Eof,
    /// The connection was reset.
    Reset,
    /// Nothing arrived in time.
    Timeout,
}

/// A watch read straight off a plain TCP connection, chunk by chunk.
pub struct RawWatch {
    reader: BufReader<TcpStream>,
    /// Status line and headers.
    pub head: String,
}

impl RawWatch {
    /// Sends `GET path` to `addr` and reads the response head.
    pub fn open(addr: &str, path: &str) -> RawWatch {
        let mut tcp = TcpStream::connect(addr).expect("connect");
        write!(tcp, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").expect("send");
        tcp.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let mut reader = BufReader::new(tcp);
        let mut head = String::new();
        while !head.ends_with("\r\n\r\n") {
            let n = reader.read_line(&mut head).expect("read head");
            assert!(n > 0, "connection closed in the head: {head}");
        }
        RawWatch { reader, head }
    }

    /// The next item, waiting at most `wait`.
    pub fn next(&mut self, wait: Duration) -> Item {
        self.reader.get_ref().set_read_timeout(Some(wait)).expect("timeout");
        let mut size = String::new();
        match self.reader.read_line(&mut size) {
            Ok(0) => return Item::Eof,
            Ok(_) => {}
            Err(e) => return io_item(&e),
        }
        let Ok(len) = usize::from_str_radix(size.trim(), 16) else {
            return Item::Eof;
        };
        let mut data = vec![0u8; len + 2];
        if let Err(e) = self.reader.read_exact(&mut data) {
            return if e.kind() == ErrorKind::UnexpectedEof { Item::Eof } else { io_item(&e) };
        }
        if len == 0 {
            return Item::End;
        }
        let text = String::from_utf8_lossy(&data[..len]).into_owned();
        serde_json::from_str(&text).map(Item::Event).unwrap_or(Item::Garbage(text))
    }

    /// The next event, panicking on anything else.
    pub fn event(&mut self) -> Value {
        match self.next(Duration::from_secs(10)) {
            Item::Event(v) => v,
            other => panic!("expected an event, got {other:?}"),
        }
    }
}

fn io_item(e: &std::io::Error) -> Item {
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => Item::Timeout,
        ErrorKind::ConnectionReset => Item::Reset,
        _ => Item::Eof,
    }
}
