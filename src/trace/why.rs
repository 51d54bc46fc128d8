//! Why a traced connection went as it did, in the proxy's words, and `explain`'s word on it:
//! `explain` is asked the very question (the same client, destination, protocol and
//! interface, of the objects the rules were made from) and must allow what the kernel did.
//! Where it agrees, its reasons are the connection's; where it cannot be asked, the chain
//! that decided says why.

use super::context::Context;
use super::report::{Connection, fits, query};
use crate::explain::{Explanation, Fate};
use crate::render::{TABLE_NAME, chain};

/// Fills in `c`'s reasons and `explain`'s word; `dropped` is the table and chain that
/// dropped it, if one did. When `explain` disagrees, the objects are read again (the
/// cluster may have changed since they were) and it is asked once more.
pub fn fill(c: &mut Connection, dropped: Option<(&str, &str)>, ctx: &mut Context) {
    let mut answer = ask(c, ctx);
    if matches!(&answer, Ok(x) if !agrees(x, c)) && ctx.reread_objects() {
        answer = ask(c, ctx);
    }
    match answer {
        Ok(x) if agrees(&x, c) => {
            c.explain = "agrees".into();
            // Explain's reasons cover all its outcomes; masquerading is this one's only if it was.
            let said = x.reasons.iter().filter(|r| r.kind != "masquerade" || c.masquerade);
            c.why = said.map(|r| r.text.clone()).collect();
            // A ClusterIP's port without endpoints has no element of its own to be named by.
            if let Some((owner, _)) = x.service.as_ref().filter(|_| c.service.is_none()) {
                c.name_service(owner);
            }
        }
        Ok(x) => {
            c.explain = difference(&x, c);
            c.why = own_words(c, dropped);
        }
        Err(e) => {
            c.explain = e;
            c.why = own_words(c, dropped);
        }
    }
}

/// `explain`'s answer to the question `c` asks, or why it was not compared.
fn ask(c: &Connection, ctx: &Context) -> Result<Explanation, String> {
    if !c.whole {
        return Err("not compared: the trace of this packet is not whole (events lost, or it went quiet \
                    before it was delivered or left)"
            .into());
    }
    let (model, cfg, prepared) = ctx.explainer().map_err(|why| format!("not asked: {why}"))?;
    let q = query(c).ok_or("not asked: not a TCP, UDP or SCTP connection")?;
    prepared.explain(model, cfg, &q).map_err(|e| format!("explain failed: {e}"))
}

/// Whether one of explain's outcomes is what the kernel did.
fn agrees(x: &Explanation, c: &Connection) -> bool {
    x.outcomes.iter().any(|o| fits(&o.fate, c))
}

/// One line: what explain allowed, and what the kernel did.
fn difference(x: &Explanation, c: &Connection) -> String {
    let allowed: Vec<String> = x.outcomes.iter().map(|o| fate_text(&o.fate)).collect();
    format!("explain allows {}, the kernel did {}", allowed.join(" or "), kernel_text(c))
}

/// One of explain's outcomes, as `kernel_text` says what the kernel did.
fn fate_text(f: &Fate) -> String {
    let masq = |m: &bool| if *m { " masqueraded" } else { "" };
    match f {
        Fate::Endpoint { to, masquerade, .. } => format!("dnat to {to}{}", masq(masquerade)),
        Fate::Unchanged { masquerade } => format!("accept{}", masq(masquerade)),
        Fate::Dropped => "drop".into(),
        Fate::Rejected => "reject".into(),
    }
}

/// What the kernel did, as `fate_text` words explain's outcomes.
pub fn kernel_text(c: &Connection) -> String {
    let masq = if c.masquerade { " masqueraded" } else { "" };
    match (c.verdict, c.endpoint) {
        ("dnat", Some(e)) => format!("dnat to {e}{masq}"),
        (v, _) => format!("{v}{masq}"),
    }
}

/// Why, from the chain that decided, when explain's reasons are not to be had.
fn own_words(c: &Connection, dropped: Option<(&str, &str)>) -> Vec<String> {
    let passed = |name: &str| c.hops.iter().any(|h| h.table == TABLE_NAME && h.chain == name);
    let text = match dropped {
        None if !c.whole && c.verdict == "drop" => {
            "the trace ended before the packet was delivered or sent on: dropped past the rules (no route, a full queue)"
                .into()
        }
        Some((table, chain)) if table != TABLE_NAME => {
            format!("dropped by table {table}, chain {chain}: not the proxy's rules")
        }
        Some((_, chain::FIREWALL_CHECK)) => {
            "the source is not in the Service's loadBalancerSourceRanges: dropped".into()
        }
        Some(_) if c.verdict == "reject" && passed(chain::CLUSTER_IPS_CHECK) => {
            "a ClusterIP, but no service port with an endpoint on it for this port: rejected".into()
        }
        Some(_) if c.verdict == "reject" => "the service port has no ready or serving endpoint: rejected".into(),
        Some((_, chain::CLUSTER_IPS_CHECK)) => "in a ServiceCIDR, but no Service holds this address: dropped".into(),
        Some((_, chain::SERVICE_ENDPOINTS_CHECK | chain::NODEPORT_ENDPOINTS_CHECK)) => {
            "no endpoint on this node that the Local traffic policy allows: dropped".into()
        }
        Some((_, chain)) => format!("dropped in chain {chain}"),
        None if c.service.is_none() => "no Service's traffic: the proxy's rules left it alone".into(),
        None if c.endpoint.is_some() => format!("sent to endpoint {}", kernel_text(c).trim_start_matches("dnat to ")),
        None => "the service port's rules let it through unchanged".into(),
    };
    vec![text]
}
