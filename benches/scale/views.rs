//! What the daemon's debug views cost at the API benchmark's size: each fetched whole from the
//! metrics address while the daemon's resident memory is sampled, against the memory it held
//! at rest just before (the baseline, measured in the same run).

use super::common::net::in_netns;
use super::observe::rss_mb;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where the daemon serves metrics, and so the views, inside its namespace.
pub const METRICS: &str = "127.0.0.1:10249";

/// Fetches `/debug/ruleset` and `/debug/services` from daemon `pid` in namespace `ns`.
pub fn fetch_all(ns: &str, pid: i32) -> Value {
    let at_rest = rss_mb(pid);
    json!({"rss_at_rest_mb": at_rest, "ruleset": fetch(ns, pid, "/debug/ruleset"),
           "services": fetch(ns, pid, "/debug/services")})
}

/// One view: time to the last byte, bytes, and the highest resident memory seen meanwhile.
fn fetch(ns: &str, pid: i32, path: &str) -> Value {
    let done = Arc::new(AtomicBool::new(false));
    let most = Arc::new(Mutex::new(0.0f64));
    let sampler = {
        let (done, most) = (done.clone(), most.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let rss = rss_mb(pid);
                let mut m = most.lock().expect("sampler");
                *m = m.max(rss);
                drop(m);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let path_owned = path.to_string();
    let (status, bytes, took) = in_netns(ns, move || {
        let start = Instant::now();
        let mut s = std::net::TcpStream::connect(METRICS).expect("metrics address");
        s.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
        write!(s, "GET {path_owned} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("request");
        let mut body = Vec::new();
        s.read_to_end(&mut body).expect("answer");
        let status = String::from_utf8_lossy(&body[..body.len().min(12)]).to_string();
        (status, body.len(), start.elapsed())
    });
    done.store(true, Ordering::SeqCst);
    let _ = sampler.join();
    let most_mb = *most.lock().expect("sampler");
    assert!(status.ends_with("200"), "{path}: {status}");
    let ms = (took.as_secs_f64() * 1e5).round() / 1e2;
    eprintln!("api: {path}: {bytes} bytes in {ms} ms, resident at most {most_mb:.0} MB");
    json!({"ms": ms, "mb": (bytes as f64 / 1e5).round() / 10.0, "rss_most_mb": most_mb})
}
