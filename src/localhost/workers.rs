//! The threads that carry localhost NodePort connections, kept for the next one: a connection
//! takes an idle thread rather than starting its own (on a small VM, starting two threads
//! cost a short connection as much as carrying its bytes), and a thread idle for
//! [`IDLE_FOR`] ends, so a burst's threads do not outlive it by much.

use std::io;
use std::sync::Mutex;
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::thread;
use std::time::Duration;

/// Work for one thread: one direction of one connection.
pub type Job = Box<dyn FnOnce() + Send>;

/// How long a thread waits for its next job before it ends.
const IDLE_FOR: Duration = Duration::from_secs(30);
/// Each thread's stack: it holds only its frames (the buffers are on the heap).
const STACK: usize = 256 * 1024;

/// The idle threads, each by a number of its own and where it takes its next job; the most
/// recently idle last, taken first.
struct Idle {
    next: u64,
    waiting: Vec<(u64, SyncSender<Job>)>,
}

static IDLE: Mutex<Idle> = Mutex::new(Idle { next: 0, waiting: Vec::new() });

/// Runs `job` on an idle thread, or on a new one.
pub fn run(mut job: Job) -> io::Result<()> {
    loop {
        let Some((_, tx)) = IDLE.lock().ok().and_then(|mut idle| idle.waiting.pop()) else { break };
        match tx.send(job) {
            Ok(()) => return Ok(()),
            // That thread ended meanwhile: the job comes back for the next.
            Err(mpsc::SendError(back)) => job = back,
        }
    }
    thread::Builder::new().name("localhost-conn".into()).stack_size(STACK).spawn(move || work(job)).map(|_| ())
}

fn work(first: Job) {
    first();
    let (tx, rx) = mpsc::sync_channel::<Job>(1);
    loop {
        let Ok(mut idle) = IDLE.lock() else { return };
        idle.next += 1;
        let me = idle.next;
        idle.waiting.push((me, tx.clone()));
        drop(idle);
        let job = match rx.recv_timeout(IDLE_FOR) {
            Ok(job) => job,
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {
                let Ok(mut idle) = IDLE.lock() else { return };
                match idle.waiting.iter().position(|(id, _)| *id == me) {
                    Some(at) => {
                        idle.waiting.remove(at);
                        return;
                    }
                    // Taken just now: its job is on the way (sent right after the taking).
                    None => {
                        drop(idle);
                        match rx.recv_timeout(Duration::from_secs(1)) {
                            Ok(job) => job,
                            Err(_) => return,
                        }
                    }
                }
            }
        };
        job();
    }
}
