//! `nft monitor` run in a test's namespace: every change the kernel reports, transaction by
//! transaction, for tests that check what each transaction held.

use super::daemon::wait_for;
use super::{Netns, Scratch};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `nft monitor` in a namespace, writing to a file; ended when dropped.
pub struct Monitor {
    child: Child,
    out: Scratch,
}

impl Monitor {
    /// Starts it in `ns` and waits until it reports a change, so nothing after is missed.
    pub fn start(ns: &Netns) -> Monitor {
        let out = Scratch::new("monitor");
        let file = std::fs::File::create(out.0.join("events")).expect("monitor file");
        let child = Command::new("ip")
            .args(["netns", "exec", &ns.name, "nft", "monitor"])
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .expect("nft monitor");
        let monitor = Monitor { child, out };
        let ready = wait_for(Duration::from_secs(5), || {
            ns.nft(&["add", "table", "ip", "monitor-ready"]);
            ns.nft(&["delete", "table", "ip", "monitor-ready"]);
            monitor.events().contains("monitor-ready")
        });
        assert!(ready.is_some(), "nft monitor reported nothing in {}", ns.name);
        monitor
    }

    /// Everything it printed so far.
    pub fn events(&self) -> String {
        std::fs::read_to_string(self.out.0.join("events")).unwrap_or_default()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
