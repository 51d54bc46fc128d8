//! Hostile input files (devices, a link to one, FIFOs fed or silent, an oversize file) for
//! the binary's file readers, and running the binary under a deadline: a reader that blocks
//! must fail its test, not hang it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a run may take before it is killed as hung.
pub const HUNG: Duration = Duration::from_secs(10);

/// A hostile file planted for a reader, and what the reader must say about it.
pub struct Planted {
    /// What it is, for assertion messages.
    pub label: &'static str,
    /// Where it is.
    pub path: PathBuf,
    /// What the error must say.
    pub expect: &'static str,
    _feeder: Option<Feeder>,
}

/// Plants one of each hostile file under `dir`, named after `name`; the oversize file holds
/// one byte more than `max`.
pub fn hostile(dir: &Path, name: &str, max: u64) -> Vec<Planted> {
    let at = |kind: &str| dir.join(format!("{name}-{kind}"));
    let planted = |label, path: PathBuf, expect, feeder| Planted { label, path, expect, _feeder: feeder };
    let link = at("link");
    std::os::unix::fs::symlink("/dev/zero", &link).expect("symlink");
    let fed = fifo(&at("fed"));
    let silent = fifo(&at("silent"));
    let big = at("big");
    std::fs::File::create(&big).and_then(|f| f.set_len(max + 1)).expect("sparse file");
    vec![
        planted("/dev/zero", "/dev/zero".into(), "not a regular file (a character device)", None),
        planted("/dev/urandom", "/dev/urandom".into(), "not a regular file (a character device)", None),
        planted("a link to /dev/zero", link, "not a regular file (a character device)", None),
        planted("a FIFO fed endlessly", fed.clone(), "not a regular file (a FIFO)", Some(Feeder::start(fed))),
        planted("a FIFO nobody writes", silent, "not a regular file (a FIFO)", None),
        planted("an oversize file", big, "larger than", None),
    ]
}

fn fifo(path: &Path) -> PathBuf {
    let made = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(made.success(), "mkfifo {}", path.display());
    path.to_path_buf()
}

/// A thread writing zeros into a FIFO whenever a reader has it open, until dropped.
pub struct Feeder {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Feeder {
    fn start(path: PathBuf) -> Feeder {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || feed(&path, &flag));
        Feeder { stop, thread: Some(thread) }
    }
}

/// Opens without blocking (refused while no reader has it open) and writes without blocking,
/// so the stop flag is always seen.
fn feed(path: &Path, stop: &AtomicBool) {
    let zeros = [0u8; 65536];
    while !stop.load(Ordering::SeqCst) {
        let Ok(mut fifo) = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(path) else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        while !stop.load(Ordering::SeqCst) {
            match fifo.write(&zeros) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(1)),
                Err(_) => break,
            }
        }
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A finished (or killed) run.
pub struct Ran {
    /// Its exit status; `None` when it was killed after [`HUNG`].
    pub status: Option<ExitStatus>,
    /// Its stdout and stderr, one after the other.
    pub output: String,
}

/// Runs `cmd`, killing it after [`HUNG`]; its output goes through files in `dir` (a pipe
/// left full would block it).
pub fn run_within(mut cmd: Command, dir: &Path) -> Ran {
    let (out, err) = (dir.join("run.stdout"), dir.join("run.stderr"));
    let file = |p: &Path| Stdio::from(std::fs::File::create(p).expect("output file"));
    let mut child = cmd.stdin(Stdio::null()).stdout(file(&out)).stderr(file(&err)).spawn().expect("spawn");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if started.elapsed() > HUNG {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let read = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    Ran { status, output: format!("{}{}", read(&out), read(&err)) }
}

/// The binary with `args`, as a dry run for node-a, under the deadline.
pub fn dry_run(dir: &Path, args: &[&str]) -> Ran {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kube-nftproxy"));
    cmd.args(["--dry-run", "--hostname-override", "node-a"]).args(args).env_remove("RUST_LOG");
    run_within(cmd, dir)
}

/// What is wrong with how a run treated `planted` (it should fail at once, naming the file
/// and saying why), if anything.
pub fn complaint(ran: &Ran, planted: &Planted, what: &str) -> Option<String> {
    let label = planted.label;
    let named = ran.output.contains(&planted.path.display().to_string());
    match ran.status {
        None => Some(format!("{what} as {label}: still running after {HUNG:?}")),
        Some(s) if s.success() => Some(format!("{what} as {label}: accepted:\n{}", ran.output)),
        Some(_) if !named || !ran.output.contains(planted.expect) => {
            Some(format!("{what} as {label}: not {:?} naming the file: {}", planted.expect, ran.output))
        }
        Some(_) => None,
    }
}

/// Panics with every complaint, if there are any (every case is tried, and all that fail
/// are told).
pub fn assert_none(complaints: &[String]) {
    assert!(complaints.is_empty(), "{} cases failed:\n{}", complaints.len(), complaints.join("\n"));
}
