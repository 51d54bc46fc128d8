//! The stream-level faults of a watch: an object that does not decode, a Status in a DELETED
//! event, a line that never ends, and the stream dropped cleanly, cut mid-event or reset.

use super::Stream;
use crate::http::chunk;
use crate::watch::{ENDLESS_LIMIT, End};
use crate::watchers::DropMode;
use kube_nftproxy::kube::protobuf;
use std::io::{self, Write};

impl Stream<'_> {
    /// Sends a MODIFIED event whose object does not decode as the watched kind.
    pub(super) fn malformed(&mut self) -> io::Result<()> {
        let res = self.req.res;
        if self.req.proto {
            let ns = if res.namespaced { "default" } else { "" };
            let mut raw = protobuf::metadata_only(ns, "emulator-malformed", &self.last_rv.to_string());
            // Field 2 (every kind's second part) as a number where a message belongs.
            raw.extend_from_slice(&[0x10, 0x07]);
            self.frame("MODIFIED", raw);
            return Ok(());
        }
        let ns = if res.namespaced { r#""namespace":"default","# } else { "" };
        let (field, bad) = res.malformed;
        let obj = format!(
            r#"{{"kind":"{}","apiVersion":"{}","metadata":{{{ns}"name":"emulator-malformed","resourceVersion":"{}"}},"{field}":{bad}}}"#,
            res.kind,
            res.api_version(),
            self.last_rv
        );
        self.line("MODIFIED", obj.as_bytes())
    }

    /// Sends a DELETED event whose object is a Status naming `ns`/`name`.
    pub(super) fn foreign(&mut self, ns: &str, name: &str) -> io::Result<()> {
        let rv = self.last_rv.to_string();
        if self.req.proto {
            let status = protobuf::seal("v1", "Status", protobuf::metadata_only(ns, name, &rv));
            chunk(&mut self.out, &protobuf::watch_frame("DELETED", status));
            return Ok(());
        }
        let meta = serde_json::json!({"namespace": ns, "name": name, "resourceVersion": rv});
        let obj = serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": meta, "status": "Failure"});
        self.line("DELETED", obj.to_string().as_bytes())
    }

    /// Starts an event whose line never ends; cuts the connection after [`ENDLESS_LIMIT`]
    /// bytes, or when the client gives up.
    pub(super) fn endless(&mut self) -> io::Result<End> {
        if self.req.proto {
            // A frame announcing 4 GiB, of which the bytes below are the start.
            chunk(&mut self.out, &[0xff; 4]);
        } else {
            chunk(&mut self.out, br#"{"type":"MODIFIED","object":{"padding":""#);
        }
        self.flush()?;
        let mut block = Vec::new();
        chunk(&mut block, &[b'a'; 64 * 1024]);
        let mut sent = 0;
        while sent < ENDLESS_LIMIT {
            if self.conn.io.write_all(&block).is_err() {
                return Ok(End::Close);
            }
            sent += 64 * 1024;
        }
        self.conn.shutdown();
        Ok(End::Close)
    }

    /// Ends the stream as `mode` says.
    pub(super) fn drop_stream(&mut self, mode: DropMode) -> io::Result<End> {
        match mode {
            DropMode::Clean => self.finish(),
            DropMode::Abrupt => {
                // A chunk header promising more bytes than ever arrive, and the start of an
                // event: a JSON line, or a protobuf frame of 64 bytes of which 6 come.
                self.out.extend_from_slice(b"400\r\n");
                if self.req.proto {
                    self.out.extend_from_slice(&[0, 0, 0, 64, 0x0a, 0x08, b'M', b'O', b'D', b'I']);
                } else {
                    self.out.extend_from_slice(b"{\"type\":\"MODIFIED\",\"obj");
                }
                self.flush()?;
                self.conn.shutdown();
                Ok(End::Close)
            }
            DropMode::Reset => {
                self.flush()?;
                self.conn.arm_reset();
                Ok(End::Close)
            }
        }
    }
}
