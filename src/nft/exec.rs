//! Runs the installed `nft`, every run bounded: a script on stdin (one `nft -f -` is one
//! atomic transaction), or a listing read back. Syncs never run it; the version check, the
//! takeover's listings and `--cleanup` do.

use super::NftError;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

/// The `nft` binary to run (`NFT` in the environment overrides it, e.g. for a bundled nft).
pub fn nft_binary() -> String {
    std::env::var("NFT").unwrap_or_else(|_| "nft".to_string())
}

/// Bounds on one `nft` run: how long it may take, and a flag that ends it at once (shutdown).
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

/// Runs `nft ARGS` (a listing, `--version`, or `-j -f -` with `input` on stdin) within
/// `limits`, as [`apply`] does; returns what it printed.
pub fn run(args: &[&str], input: Option<&str>, on_spawn: &dyn Fn(u32), limits: &Limits) -> Result<String, NftError> {
    run_of(&nft_binary(), args, input, on_spawn, limits)
}

/// Runs `nft`, a given binary, with `args` within `limits` (the version check of a binary
/// named by path); returns what it printed.
pub fn run_binary(nft: &str, args: &[&str], limits: &Limits) -> Result<String, NftError> {
    run_of(nft, args, None, &|_| {}, limits)
}

fn run_of(
    nft: &str,
    args: &[&str],
    input: Option<&str>,
    on_spawn: &dyn Fn(u32),
    limits: &Limits,
) -> Result<String, NftError> {
    // Its own process group, so a child that started others (a wrapper script) is ended whole.
    let mut child = Command::new(nft)
        .process_group(0)
        .args(args)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| NftError::Spawn { nft: nft.to_string(), source })?;
    on_spawn(child.id());
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(NftError::Io(std::io::Error::other("nft's stdout or stderr is missing")));
    };
    if let (Some(mut stdin), Some(text)) = (child.stdin.take(), input) {
        // Detached threads: a child that leaves a grandchild holding its pipes must not keep
        // the caller waiting for them either.
        let text = text.to_string();
        std::thread::Builder::new().name("nft-stdin".into()).spawn(move || {
            // A failed write means nft exited early; its status and stderr tell why.
            let _ = stdin.write_all(text.as_bytes());
        })?;
    }
    let printed = read_on_thread("nft-stdout", stdout)?;
    let messages = read_on_thread("nft-stderr", stderr)?;
    let status = wait_bounded(child, limits)?;
    let message = messages.recv_timeout(STDERR_GRACE).unwrap_or_default();
    if status.success() {
        // A listing may trail the exit a little longer than messages do.
        return printed
            .recv_timeout(STDERR_GRACE)
            .map_err(|_| NftError::Io(std::io::Error::other("lost nft's output")));
    }
    let message = message.trim().to_string();
    let line =
        failing_line(&message).and_then(|n| input.and_then(|s| s.lines().nth(n.saturating_sub(1)))).map(str::to_string);
    Err(NftError::Rejected { message, line })
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

/// How long nft's messages may trail its exit.
const STDERR_GRACE: Duration = Duration::from_secs(2);

/// How often a wait for `nft` looks at the stop flag.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// The process groups of the runs under way, so a stopping daemon can end them however busy
/// the threads that started them are.
static RUNNING: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

fn running() -> std::sync::MutexGuard<'static, Vec<i32>> {
    RUNNING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Kills every run under way, whole: the daemon's last act on its way out, so no `nft` it
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
            Err(RecvTimeoutError::Disconnected) => return Err(NftError::Io(std::io::Error::other("lost nft's exit"))),
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

/// The script line nft's first error points at (`/dev/stdin:LINE:COL…: Error: …`).
fn failing_line(message: &str) -> Option<usize> {
    message.lines().find_map(|l| {
        let (location, _) = l.split_once(": Error")?;
        let mut parts = location.rsplitn(3, ':');
        let _cols = parts.next()?;
        let line: usize = parts.next()?.parse().ok()?;
        (line > 0).then_some(line)
    })
}

#[cfg(test)]
mod tests {
    use super::failing_line;

    #[test]
    fn finds_the_line_an_error_points_at() {
        assert_eq!(failing_line("/dev/stdin:12:5-9: Error: syntax error"), Some(12));
        assert_eq!(failing_line("internal:0:0-0: Error: Could not process rule"), None);
        assert_eq!(failing_line("no location here"), None);
    }
}
