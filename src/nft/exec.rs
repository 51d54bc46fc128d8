//! Runs the few helper commands the proxy starts, every run bounded in time and ended at
//! shutdown: the node's `nft --version`, looked at for the log (the proxy needs no `nft`),
//! and `iptables-legacy-save`/`-restore` (and the `ip6` ones), with which the takeover finds
//! and removes kube-proxy's chains in legacy tables. Syncs and everything else of the
//! takeover and `--cleanup` talk to the kernel over netlink and run nothing.

use super::NftError;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

/// The `nft` whose version is logged (`NFT` in the environment overrides it, e.g. for a
/// bundled nft).
pub fn nft_binary() -> String {
    std::env::var("NFT").unwrap_or_else(|_| "nft".to_string())
}

/// Bounds on one run: how long it may take, and a flag that ends it at once (shutdown).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Longest run before the child is killed.
    pub timeout: Duration,
    /// Set to end the run now.
    pub stop: Arc<AtomicBool>,
}

/// The daemon's bounds for every run, once set.
static CONFIGURED: std::sync::OnceLock<Limits> = std::sync::OnceLock::new();

impl Limits {
    /// Makes `self` the bounds of every run from now on (the daemon's `--nft-timeout` and its
    /// stop flag), wherever the run starts; the first call wins.
    pub fn configure(self) {
        let _ = CONFIGURED.set(self);
    }
}

impl Default for Limits {
    /// The configured bounds, or 60 s and never stopped.
    fn default() -> Limits {
        CONFIGURED
            .get()
            .cloned()
            .unwrap_or(Limits { timeout: Duration::from_secs(60), stop: Arc::new(AtomicBool::new(false)) })
    }
}

/// Runs `program` with `args` within `limits`, nothing on its stdin; returns what it printed.
/// A failure's error holds what it said on stderr.
pub fn run_binary(program: &str, args: &[&str], limits: &Limits) -> Result<String, NftError> {
    run_with_input(program, args, None, limits)
}

/// Runs `program` with `args` within `limits`, `input` (if any) written to its stdin on a
/// thread of its own (a child that stops reading cannot block the caller); returns what it
/// printed. A failure's error holds what it said on stderr.
pub fn run_with_input(
    program: &str,
    args: &[&str],
    input: Option<String>,
    limits: &Limits,
) -> Result<String, NftError> {
    let mut command = Command::new(program);
    // A daemon started as a script's background job ignores SIGINT and SIGQUIT, and exec
    // would hand that on: the child must answer signals as the node's tools expect.
    crate::netlink::sock::default_signals_on_exec(&mut command);
    // Its own process group, so a child that started others (a wrapper script) is ended whole.
    let mut child = command
        .process_group(0)
        .args(args)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| NftError::Spawn { program: program.to_string(), source })?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(NftError::Io(std::io::Error::other("the child's stdout or stderr is missing")));
    };
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        // Dropped at the end of the write: the child sees its input end.
        let writer = std::thread::Builder::new().name("child-stdin".into()).spawn(move || {
            let _ = std::io::Write::write_all(&mut stdin, text.as_bytes());
        });
        if let Err(e) = writer {
            let _ = child.kill();
            let _ = child.wait();
            return Err(NftError::Io(e));
        }
    }
    // Read on detached threads: a child that leaves a grandchild holding its pipes must not
    // keep the caller waiting for them.
    let printed = read_on_thread("child-stdout", stdout)?;
    let messages = read_on_thread("child-stderr", stderr)?;
    let status = wait_bounded(child, limits)?;
    let message = messages.recv_timeout(STDERR_GRACE).unwrap_or_default();
    if status.success() {
        // Output may trail the exit a little longer than messages do.
        return printed
            .recv_timeout(STDERR_GRACE)
            .map_err(|_| NftError::Io(std::io::Error::other("lost the child's output")));
    }
    Err(NftError::Failed { program: program.to_string(), status, message: message.trim().to_string() })
}

/// Reads `from` to its end on a thread of its own; the text arrives on the receiver.
fn read_on_thread(
    name: &str,
    mut from: impl Read + Send + 'static,
) -> std::io::Result<std::sync::mpsc::Receiver<String>> {
    let (told, text) = std::sync::mpsc::channel();
    std::thread::Builder::new().name(name.into()).spawn(move || {
        let mut out = String::new();
        let _ = from.read_to_string(&mut out);
        let _ = told.send(out);
    })?;
    Ok(text)
}

/// How long a child's messages may trail its exit.
const STDERR_GRACE: Duration = Duration::from_secs(2);

/// How often a wait for a child looks at the stop flag.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// The process groups of the runs under way, so a stopping daemon can end them however busy
/// the threads that started them are.
static RUNNING: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

fn running() -> std::sync::MutexGuard<'static, Vec<i32>> {
    RUNNING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Kills every run under way, whole: the daemon's last act on its way out, so no child it
/// started outlives it.
pub fn end_all() {
    for pid in running().drain(..) {
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

/// Waits for `child` on a thread of its own (so its exit is seen at once), killing its
/// process group when it outlives `limits`.
fn wait_bounded(child: Child, limits: &Limits) -> Result<ExitStatus, NftError> {
    let raw = i32::try_from(child.id()).unwrap_or(0);
    running().push(raw);
    let result = wait_for_exit(child, limits);
    running().retain(|p| *p != raw);
    result
}

fn wait_for_exit(child: Child, limits: &Limits) -> Result<ExitStatus, NftError> {
    let pid = i32::try_from(child.id()).ok().and_then(rustix::process::Pid::from_raw);
    let (tell, exited) = std::sync::mpsc::channel();
    let mut child = child;
    std::thread::Builder::new().name("nft-wait".into()).spawn(move || {
        let _ = tell.send(child.wait());
    })?;
    let deadline = Instant::now() + limits.timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match exited.recv_timeout(left.min(STOP_CHECK)) {
            Ok(status) => return Ok(status?),
            Err(RecvTimeoutError::Disconnected) => {
                return Err(NftError::Io(std::io::Error::other("lost the child's exit")));
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        let stopping = limits.stop.load(Ordering::SeqCst);
        if stopping || Instant::now() >= deadline {
            if let Some(pid) = pid {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            let _ = exited.recv_timeout(STDERR_GRACE);
            return Err(if stopping { NftError::Stopped } else { NftError::TimedOut(limits.timeout) });
        }
    }
}
