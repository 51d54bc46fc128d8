//! What `--dry-run --diff` found, grouped by service port, and how it is printed: aligned
//! `+`/`-` lines for people, or one JSON document (schema in the README, "Seeing what the
//! proxy does") for scripts.

use crate::text::push_line;
use serde::Serialize;
use std::collections::BTreeMap;

/// What kind of object differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Object {
    /// The table itself.
    Table,
    /// A chain: its hook or rules.
    Chain,
    /// A named set or map's declaration.
    Set,
    /// One element of a set or map.
    Element,
}

/// How it differs: what a sync would do to the kernel's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A sync would add it.
    Added,
    /// A sync would remove it.
    Removed,
    /// A sync would rewrite it (a chain's rules, a set's declaration).
    Changed,
}

/// One difference.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Change {
    /// `ip` or `ip6`.
    pub family: &'static str,
    /// What differs.
    pub object: Object,
    /// The chain's or set's name; an element's map; the table's name.
    pub name: String,
    /// How.
    pub change: Kind,
    /// What the kernel holds that a sync would take away (rules, declaration, element).
    pub removed: Vec<String>,
    /// What a sync would put there.
    pub added: Vec<String>,
}

/// The differences of one service port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServiceChanges {
    /// `namespace/name:port` (`namespace/name` for an unnamed port).
    pub service: String,
    /// Its differences, in both families.
    pub changes: Vec<Change>,
}

/// How many differences of each kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Objects a sync would add.
    pub added: usize,
    /// Objects a sync would remove.
    pub removed: usize,
    /// Objects a sync would rewrite.
    pub changed: usize,
}

/// Everything a sync would change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Whether a sync would change anything.
    pub differences: bool,
    /// Counts.
    pub summary: Summary,
    /// Differences owned by a service port, by service port.
    pub services: Vec<ServiceChanges>,
    /// The rest: the table itself, fixed and shared chains, sets, elements of no service.
    pub table: Vec<Change>,
}

impl Report {
    /// Groups changes, each with the service port it belongs to, if any.
    pub fn from_changes(changes: impl IntoIterator<Item = (Option<String>, Change)>) -> Report {
        let mut by_service: BTreeMap<String, Vec<Change>> = BTreeMap::new();
        let (mut table, mut summary) = (Vec::new(), Summary::default());
        for (owner, change) in changes {
            match change.change {
                Kind::Added => summary.added += 1,
                Kind::Removed => summary.removed += 1,
                Kind::Changed => summary.changed += 1,
            }
            match owner {
                Some(o) => by_service.entry(o).or_default().push(change),
                None => table.push(change),
            }
        }
        let mut services: Vec<ServiceChanges> =
            by_service.into_iter().map(|(service, changes)| ServiceChanges { service, changes }).collect();
        for s in &mut services {
            s.changes.sort();
        }
        table.sort();
        let differences = !services.is_empty() || !table.is_empty();
        Report { differences, summary, services, table }
    }

    /// The report as one JSON document.
    pub fn to_json(&self) -> String {
        // Serializing plain strings, numbers and enums into a string cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// The report for people: a header per service port, then aligned lines; empty when there
    /// is no difference. Names and text read from the kernel are shown with their control
    /// characters escaped (a foreign chain's name must not drive the operator's terminal).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let groups =
            self.services.iter().map(|s| (s.service.as_str(), &s.changes)).chain(Some(("(table)", &self.table)));
        for (title, changes) in groups.filter(|(_, c)| !c.is_empty()) {
            push_line(&mut out, title);
            text_group(&mut out, changes);
        }
        if self.differences {
            let s = self.summary;
            push_line(&mut out, &format!("{} added, {} removed, {} changed", s.added, s.removed, s.changed));
        }
        out
    }
}

/// One group's lines: `sign family object text`, object names padded to the group's longest.
fn text_group(out: &mut String, changes: &[Change]) {
    let label = |c: &Change| match c.object {
        Object::Element => c.name.clone(),
        Object::Table => "table".to_string(),
        Object::Chain => format!("chain {}", c.name),
        Object::Set => format!("set {}", c.name),
    };
    let width = changes.iter().map(|c| label(c).len()).max().unwrap_or(0);
    for c in changes {
        let head = format!("{:<4} {:<width$}", c.family, label(c));
        let inline = c.object == Object::Element || c.removed.len() + c.added.len() == 0;
        if inline {
            let sign = if c.change == Kind::Removed { '-' } else { '+' };
            let text = c.removed.iter().chain(&c.added).next().map_or("", String::as_str);
            push_line(out, format!("  {sign} {head}  {text}").trim_end());
            continue;
        }
        let sign = match c.change {
            Kind::Added => '+',
            Kind::Removed => '-',
            Kind::Changed => '~',
        };
        push_line(out, &format!("  {sign} {}", head.trim_end()));
        for line in &c.removed {
            push_line(out, &format!("      - {line}"));
        }
        for line in &c.added {
            push_line(out, &format!("      + {line}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn element(name: &str, change: Kind, text: &str) -> Change {
        let (removed, added) =
            if change == Kind::Removed { (vec![text.to_string()], vec![]) } else { (vec![], vec![text.to_string()]) };
        Change { family: "ip", object: Object::Element, name: name.into(), change, removed, added }
    }

    #[test]
    fn groups_by_service_and_aligns_names() {
        let report = Report::from_changes([
            (Some("ns/b:http".into()), element("service-ips", Kind::Added, "10.96.0.2 . tcp . 80")),
            (Some("ns/a:http".into()), element("cluster-endpoints-tcp", Kind::Removed, "10.96.0.1 . 80 . 0")),
            (Some("ns/a:http".into()), element("cluster-ips", Kind::Removed, "10.96.0.1")),
            (None, Change { object: Object::Table, name: "kube-nftproxy".into(), ..element("", Kind::Added, "") }),
        ]);
        assert!(report.differences);
        assert_eq!(report.summary, Summary { added: 2, removed: 2, changed: 0 });
        assert_eq!(report.services.iter().map(|s| s.service.as_str()).collect::<Vec<_>>(), ["ns/a:http", "ns/b:http"]);
        let text = report.to_text();
        let want = "ns/a:http\n  - ip   cluster-endpoints-tcp  10.96.0.1 . 80 . 0\n  - ip   cluster-ips            10.96.0.1\n";
        assert!(text.starts_with(want), "{text}");
        assert!(text.ends_with("2 added, 2 removed, 0 changed\n"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).expect("JSON");
        assert_eq!(json["services"][0]["changes"][0]["change"], "removed");
        assert_eq!(json["table"][0]["object"], "table");
    }

    #[test]
    fn names_read_from_the_kernel_cannot_drive_a_terminal() {
        let foreign = Change {
            object: Object::Chain,
            name: "evil\x1b[2J\x1b[H".into(),
            removed: vec!["counter\ncomment \"\u{9b}31m\"".into()],
            ..element("", Kind::Removed, "")
        };
        let text = Report::from_changes([(None, foreign)]).to_text();
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
        assert!(text.contains("chain evil\\x1b[2J\\x1b[H"), "{text}");
        assert!(
            text.contains("      - counter\\ncomment \"\\u{9b}31m\"\n"),
            "a break inside a rule is shown, not made: {text}"
        );
    }

    #[test]
    fn no_difference_prints_nothing() {
        let report = Report::from_changes([]);
        assert!(!report.differences);
        assert_eq!(report.to_text(), "");
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).expect("JSON");
        assert_eq!(json["differences"], false);
    }
}
