//! What the proxy's `http` thread serves (`crate::http` serves whatever it is handed):
//! `/healthz` and `/livez` on the health address; the metrics, `/healthz`, `/proxyMode`, the
//! z-pages and the debug views on the metrics address (the views asked of the sync thread
//! through its inbox, and only while metrics are on); and on each Service's health-check
//! node port, whether this node has ready endpoints of it. The sync loop's news (`Wanted`)
//! says which node ports are served and for which Service.

use crate::debug::{Ask, View};
use crate::health::node_ports::{self, ServiceHealth, Wanted};
use crate::health::{self, Health};
use crate::http::{self, Answer, Handler, Reply, Request, Route};
use crate::inbox::Inbox;
use crate::metrics::{self, Metrics};
use crate::model::Family;
use crate::zpages::ZPages;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The proxy's endpoints, handed to [`http::Server::start`].
pub struct Endpoints {
    health: Arc<Health>,
    metrics: Option<Arc<Metrics>>,
    /// Where the debug views are asked of the sync thread.
    inbox: Arc<Inbox>,
    /// The z-pages, on the metrics address.
    pages: Option<Arc<ZPages>>,
    /// Health-check node port → the Service it answers for, as last wanted.
    table: BTreeMap<u16, ServiceHealth>,
}

impl Endpoints {
    /// Endpoints answering from `health` and `metrics` (none: the metrics address serves
    /// nothing), the debug views through `inbox`, and `pages` on the metrics address.
    pub fn new(
        health: Arc<Health>,
        metrics: Option<Arc<Metrics>>,
        inbox: Arc<Inbox>,
        pages: Option<Arc<ZPages>>,
    ) -> Endpoints {
        Endpoints { health, metrics, inbox, pages, table: BTreeMap::new() }
    }

    /// The debug view `req` asks for, if it names one and is made on the metrics address
    /// while metrics are on: asked of the sync thread, or a 400 for a query not understood.
    fn debug_view(&self, route: Route, req: &Request<'_>) -> Option<Answer> {
        if route != Route::Metrics || self.metrics.is_none() {
            return None;
        }
        Some(match View::of(req.path, req.query)? {
            Ok(view) => {
                let inbox = self.inbox.clone();
                Answer::Later(Box::new(move |reply| inbox.ask(Ask::new(view, reply))))
            }
            Err(why) => Answer::Now(Reply::new(400, http::TEXT, format!("{why}\n"))),
        })
    }

    /// The answer made at once to `req` on `route` (port `port`, over `family`).
    fn now(&self, route: Route, port: u16, family: Family, req: &Request<'_>) -> Reply {
        let (now, path) = (SystemTime::now(), req.path);
        match (route, &self.metrics) {
            (Route::HealthCheck { .. }, _) => {
                node_ports::answer(self.table.get(&port), family, self.health.report(now).healthy)
            }
            (Route::Health, m) => {
                let reply = health::reply(&self.health, path, now);
                if let Some(m) = m {
                    m.count_health(path, reply.code);
                }
                reply
            }
            (Route::Metrics, Some(m)) => match self.pages.as_ref().and_then(|p| p.answer(req)) {
                Some(reply) => reply,
                None => metrics::answer(m, path, req.query),
            },
            (Route::Metrics, None) => Reply::not_found(),
        }
    }
}

impl Handler for Endpoints {
    type News = Wanted;

    fn news(&mut self, wanted: Wanted) -> BTreeSet<(SocketAddr, Route)> {
        let sockets = wanted.sockets();
        self.table = wanted.ports;
        sockets
    }

    fn answer(&self, route: Route, port: u16, family: Family, req: &Request<'_>) -> Answer {
        match self.debug_view(route, req) {
            Some(later) => later,
            None => Answer::Now(self.now(route, port, family, req)),
        }
    }

    fn listening(&self, health_check_ports: usize) {
        if let Some(m) = &self.metrics {
            m.health_check_node_ports.set(i64::try_from(health_check_ports).unwrap_or(i64::MAX));
        }
    }

    // The one kind of later answer here is a debug view, made by the sync thread.
    fn busy(&self) -> String {
        "another debug view is being made or sent; try again in a moment\n".into()
    }

    fn late(&self, waited: Duration) -> String {
        format!("the sync thread did not answer within {waited:?} (a long sync may be under way); try again\n")
    }
}

#[cfg(test)]
mod tests;
