//! A real fault for the daemon's syncs (and its takeover): another process owns a table it
//! changes. nftables lets a netlink socket own a table (`flags owner`): every other process's
//! change to it fails with EPERM, and the kernel drops the table when the owner exits. An
//! interactive `nft -i` kept running with its stdin open is such an owner.

use super::Netns;
use super::daemon::wait_for;
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

/// The daemon's table name.
const TABLE: &str = "kube-nftproxy";

/// `table FAMILY kube-nftproxy` owned by an `nft -i` in a namespace, until released or
/// dropped (also when the test fails, so no owner outlives it).
pub struct TableOwner {
    child: Child,
    /// Kept open: at the end of its input, `nft -i` exits and the table goes with it.
    stdin: Option<ChildStdin>,
    /// What the table was, for messages.
    what: String,
}

impl TableOwner {
    /// Replaces `table FAMILY kube-nftproxy` in `ns` (creates it if there is none) with an
    /// empty one this owner holds; returns once `nft list table` shows it owned.
    pub fn take(ns: &Netns, family: &str) -> TableOwner {
        assert!(matches!(family, "ip" | "ip6"), "the daemon has no {family} table");
        TableOwner::take_table(ns, family, TABLE)
    }

    /// As [`TableOwner::take`], for `table FAMILY TABLE` of any name.
    pub fn take_table(ns: &Netns, family: &str, table: &str) -> TableOwner {
        let what = format!("{family} {table}");
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns.name, "nft", "-i"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nft -i");
        let mut stdin = child.stdin.take().expect("nft -i's stdin");
        // One line is one transaction: `add` first makes the `delete` valid whether or not the
        // daemon's table exists yet, so taking it over is atomic either way.
        writeln!(stdin, "add table {what}; delete table {what}; add table {what} {{ flags owner; }}")
            .expect("write to nft -i");
        let mut owner = TableOwner { child, stdin: Some(stdin), what };
        let owned = wait_for(Duration::from_secs(5), || owner.held(ns));
        if owned.is_none() {
            let said = owner.end();
            panic!("nft -i did not take table {}: {said}", owner.what);
        }
        owner
    }

    /// Whether the table in `ns` is the owned one (listing it works for anyone).
    fn held(&self, ns: &Netns) -> bool {
        let (family, table) = self.what.split_once(' ').unwrap_or_default();
        let out = ns.run(&["nft", "list", "table", family, table], "");
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("flags owner")
    }

    /// Ends the owner, so the kernel drops its table and the daemon's next retry goes through.
    pub fn release(self) {
        // Drop does it.
    }

    /// Kills `nft -i`, waits for it, and returns what it said on stderr.
    fn end(&mut self) -> String {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut said = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            let _ = err.read_to_string(&mut said);
        }
        said
    }
}

impl Drop for TableOwner {
    fn drop(&mut self) {
        self.end();
    }
}
