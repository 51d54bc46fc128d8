//! What the running daemon shows of its own state, on the metrics address only:
//! `/debug/ruleset`, the tables as the last successful sync left them (an `nft` script, what
//! `--dry-run` prints), and `/debug/services`, every service port with its endpoints and
//! why each is used or not (JSON, `services_page.rs`); SIGUSR1 logs a summary of the same
//! (`summary.rs`). The sync thread alone owns the model and the rendered state, so the
//! `http` thread does not read them: an [`Ask`] goes through the sync thread's inbox
//! (`crate::serve` sends it), the loop serves its other clients meanwhile, and gets the
//! answer back once, made when the sync thread next takes its inbox. A large answer is made in [`Pieces`] and moved, never
//! copied, so a 30k-service ruleset is held once, and only while it is written.

pub mod services_page;
pub mod summary;

use crate::http::{Reply, Responder};
use crate::model::ObjectKey;

/// Failures to make a debug view (a template or the JSON writer refusing).
#[derive(Debug, thiserror::Error)]
pub enum DebugError {
    /// Writing the ruleset out failed.
    #[error("writing the ruleset: {0}")]
    Render(#[from] crate::render::RenderError),
    /// Writing the JSON failed.
    #[error("writing the services view: {0}")]
    Json(#[from] serde_json::Error),
}

/// The path of the ruleset view.
pub const RULESET_PATH: &str = "/debug/ruleset";

/// The path of the services view.
pub const SERVICES_PATH: &str = "/debug/services";

/// A debug view the `http` thread asks the sync thread for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum View {
    /// The last applied ruleset, as an `nft` script.
    Ruleset,
    /// The service ports (of one Service, if given) and their endpoints, as JSON.
    Services(Option<ObjectKey>),
}

impl View {
    /// The view a request for `path` with `query` asks for: `None` when `path` is not a
    /// debug view, `Err` (why) when the query cannot be read. `/debug/services` takes
    /// `service=namespace/name`; any other parameter is refused rather than ignored, so a
    /// misspelt filter is not taken for "everything".
    pub fn of(path: &str, query: Option<&str>) -> Option<Result<View, String>> {
        let params: Vec<&str> = query.unwrap_or_default().split('&').filter(|p| !p.is_empty()).collect();
        match path {
            RULESET_PATH if params.is_empty() => Some(Ok(View::Ruleset)),
            RULESET_PATH => Some(Err(format!("{RULESET_PATH} takes no parameters"))),
            SERVICES_PATH => Some(services_filter(&params).map(View::Services)),
            _ => None,
        }
    }
}

/// The Service `params` name (`service=namespace/name`), if any.
fn services_filter(params: &[&str]) -> Result<Option<ObjectKey>, String> {
    match params {
        [] => Ok(None),
        [param] => {
            let name = param.strip_prefix("service=").ok_or_else(|| format!("unknown parameter {param:?}"))?;
            // Clients may escape the slash; nothing else in a namespace or name needs it.
            let name = name.replace("%2F", "/").replace("%2f", "/");
            match name.split_once('/') {
                Some((ns, svc)) if !ns.is_empty() && !svc.is_empty() && !svc.contains('/') => {
                    Ok(Some((ns.to_string(), svc.to_string())))
                }
                _ => Err(format!("service={name:?} is not namespace/name")),
            }
        }
        _ => Err("only one parameter, service=namespace/name, is taken".into()),
    }
}

/// One request for a debug view, on its way to the sync thread, which answers it once.
#[derive(Debug)]
pub struct Ask {
    /// What is asked for.
    pub view: View,
    reply: Responder,
}

impl Ask {
    /// A request for `view`, answered through `reply` (the `http` thread's).
    pub fn new(view: View, reply: Responder) -> Ask {
        Ask { view, reply }
    }

    /// Hands the answer over. The asker may have given up (timed out, or the `http` thread
    /// ended): the answer is then dropped, which is all that is left to do with it.
    pub fn answer(self, reply: Reply) {
        self.reply.answer(reply);
    }
}

/// The size of one piece: large enough that a 30k-service ruleset is a few dozen pieces,
/// small enough that the last, part-filled one wastes little.
const PIECE: usize = 1 << 20;

/// Text written in pieces of about [`PIECE`] bytes: growing one buffer would copy it at
/// every doubling and hold up to twice its size at the end.
#[derive(Debug, Default)]
pub struct Pieces {
    done: Vec<Vec<u8>>,
    current: Vec<u8>,
}

impl Pieces {
    /// The pieces, in order.
    pub fn into_vec(mut self) -> Vec<Vec<u8>> {
        if !self.current.is_empty() {
            self.done.push(self.current);
        }
        self.done
    }

    fn push(&mut self, bytes: &[u8]) {
        if !self.current.is_empty() && self.current.len() + bytes.len() > PIECE {
            self.done.push(std::mem::take(&mut self.current));
        }
        if self.current.capacity() == 0 {
            self.current.reserve_exact(PIECE.max(bytes.len()));
        }
        self.current.extend_from_slice(bytes);
    }
}

impl std::fmt::Write for Pieces {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.push(s.as_bytes());
        Ok(())
    }
}

impl std::io::Write for Pieces {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.push(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_filters_are_read_strictly() {
        assert_eq!(View::of("/debug/ruleset", None), Some(Ok(View::Ruleset)));
        assert!(View::of("/debug/ruleset", Some("x=1")).is_some_and(|r| r.is_err()));
        assert_eq!(View::of("/debug/services", Some("")), Some(Ok(View::Services(None))));
        let web = Some(Ok(View::Services(Some(("shop".into(), "web".into())))));
        assert_eq!(View::of("/debug/services", Some("service=shop/web")), web);
        assert_eq!(View::of("/debug/services", Some("service=shop%2Fweb")), web);
        for bad in ["service=web", "service=/web", "service=shop/", "svc=shop/web", "service=a/b&service=c/d"] {
            assert!(View::of("/debug/services", Some(bad)).is_some_and(|r| r.is_err()), "{bad}");
        }
        assert_eq!(View::of("/metrics", None), None);
        assert_eq!(View::of("/debug", None), None);
    }

    #[test]
    fn pieces_keep_the_text_in_order_without_outgrowing_a_piece() {
        use std::fmt::Write;
        let mut p = Pieces::default();
        let line = "x".repeat(1000) + "\n";
        for _ in 0..3000 {
            p.write_str(&line).expect("write");
        }
        let pieces = p.into_vec();
        assert_eq!(pieces.len(), 3, "3 MB in 1 MiB pieces");
        assert!(pieces.iter().all(|piece| piece.len() <= PIECE && piece.capacity() <= PIECE));
        assert_eq!(pieces.concat(), line.repeat(3000).into_bytes());
    }
}
