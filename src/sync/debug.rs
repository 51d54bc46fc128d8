//! The sync thread's answers about itself: the debug views the `http` thread asks for
//! through the inbox (`crate::debug`), and the summary SIGUSR1 logs. Both read the model and
//! the rendered state, which this thread alone holds, and are made only when asked.

use super::{Kernel, Syncer};
use crate::debug::services_page::{self, LastSync, SyncState};
use crate::debug::{Ask, DebugError, Pieces, View, summary};
use crate::http::{JSON, Reply, TEXT};
use crate::model::ObjectKey;
use std::time::{Duration, SystemTime};

impl<K: Kernel> Syncer<K> {
    /// Makes the view `ask` wants and hands it over.
    pub(super) fn answer(&self, ask: Ask) {
        let made = match &ask.view {
            View::Ruleset => self.ruleset_view(),
            View::Services(only) => self.services_view(only.as_ref()),
        };
        ask.answer(made.unwrap_or_else(|e| {
            log::error!("{e}");
            Reply::new(500, TEXT, format!("{e}\n"))
        }));
    }

    /// When the last successful sync ended, and how long ago.
    fn last_success(&self) -> Option<(SystemTime, Duration)> {
        let (_, _, at) = self.last?;
        let ago = at.elapsed();
        Some((SystemTime::now().checked_sub(ago).unwrap_or(SystemTime::UNIX_EPOCH), ago))
    }

    /// `/debug/ruleset`: the tables as the last successful sync left them, as the full-sync
    /// script `--dry-run` prints, after a comment saying when. Unavailable (503) before the
    /// first sync and after a failed one, or while the kernel refuses a family's rules: what
    /// is rendered then was not applied, and what was is not kept apart.
    fn ruleset_view(&self) -> Result<Reply, DebugError> {
        let unavailable = |why: String| Ok(Reply::new(503, TEXT, why + "\n"));
        let (Some((kind, _, _)), Some((at, ago))) = (self.last, self.last_success()) else {
            return unavailable("no sync has gone through yet".into());
        };
        // A failed sync (in rendering too, which leaves nothing rendered) is checked first.
        let failed = self.unapplied.is_some() || self.rendered.is_none() || !self.refused.is_empty();
        let (false, Some(rendered)) = (failed, &self.rendered) else {
            let refused = self.refused.describe().map(|r| format!(" ({r})")).unwrap_or_default();
            return unavailable(format!(
                "the last sync failed{refused} (see the log); the kernel holds what the {kind:?} sync {ago:.1?} ago \
                 applied, and the proxy holds only the state that failed: ask again after the next successful sync"
            ));
        };
        let at = humantime::format_rfc3339_millis(at);
        let pending = if self.dirty { "; changes since wait to be applied" } else { "" };
        let when = format!("# as applied by the last successful sync ({kind:?}, ended {at}, {ago:.1?} ago){pending}\n");
        let mut script = Pieces::default();
        crate::render::write_full_sync_script(rendered.ruleset(), &self.cfg.node_name, &mut script)?;
        Ok(Reply::pieces(200, TEXT, when, script.into_vec()))
    }

    /// The node the services view is from.
    fn node_view(&self) -> services_page::Node<'_> {
        services_page::Node { name: &self.cfg.node_name, scheduler: self.cfg.scheduler }
    }

    /// What the services view says about the loop.
    fn sync_state(&self) -> SyncState {
        let last = self.last.zip(self.last_success()).map(|((kind, _, _), (at, _))| LastSync {
            kind: format!("{kind:?}").to_lowercase(),
            at: humantime::format_rfc3339_millis(at).to_string(),
        });
        // A family the kernel refuses has every change since waiting for it.
        let refused = !self.refused.is_empty();
        SyncState { last, pending: self.dirty || refused, failing: self.unapplied.is_some() || refused }
    }

    /// `/debug/services`, of Service `only` if given.
    fn services_view(&self, only: Option<&ObjectKey>) -> Result<Reply, DebugError> {
        let mut out = Pieces::default();
        services_page::write(&mut out, &self.model, self.node_view(), &self.sync_state(), only)?;
        Ok(Reply::pieces(200, JSON, String::new(), out.into_vec()))
    }

    /// A line for the log: what the proxy holds and did last.
    pub fn summary(&self) -> String {
        let ports: usize = self.model.services.values().map(Vec::len).sum();
        let last = match self.last {
            Some((kind, took, at)) => format!("last sync {kind:?} in {took:?}, {:?} ago", at.elapsed()),
            None => "no sync yet".into(),
        };
        let waiting = if self.unlisted.is_empty() {
            String::new()
        } else {
            format!("; waiting for the first listing of {:?}", self.unlisted)
        };
        let refused = self.refused.describe().map(|r| format!("; {r}")).unwrap_or_default();
        format!("{} services with {ports} ports; {last}{waiting}{refused}", self.model.services.len())
    }

    /// The summary SIGUSR1 logs, a line each: [`Syncer::summary`], what the tables hold, the
    /// services view's totals, and the ports whose traffic finds no endpoint.
    pub fn summary_lines(&self) -> Vec<String> {
        let mut lines = vec![self.summary()];
        match &self.rendered {
            Some(rendered) => {
                if self.unapplied.is_some() {
                    lines.push("the last sync failed: the tables below are as rendered, not as applied".into());
                }
                lines.extend(summary::tables(rendered.ruleset()));
            }
            // Rendering failed (nothing rendered is kept then), or no sync has run yet.
            None if self.last.is_some() => lines.push("the last sync failed in rendering: see the log".into()),
            None => {}
        }
        lines.extend(summary::ports(services_page::port_views(&self.model, self.node_view(), None)));
        lines
    }
}
