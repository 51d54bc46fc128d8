//! Generates `gates.list` from `tools/gates/upstream-specs.txt` (upstream's versioned specs, in
//! this repository's own format) and fails when the committed list is not what the specs give:
//! the list is never edited by hand. `tools/gen-gates` rewrites it through this test.

use std::collections::BTreeMap;

/// The specs the list is generated from.
const SPECS: &str = include_str!("../../../tools/gates/upstream-specs.txt");

/// The variable that makes the check write the list instead of comparing (`tools/gen-gates`).
const WRITE: &str = "KUBE_NFTPROXY_GEN_GATES";

/// A Kubernetes version, `(major, minor)`.
type Version = (u32, u32);

/// One spec a gate declares from `version` on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Spec {
    version: Version,
    /// `alpha`, `beta`, `ga`, `deprecated` or `removed`.
    stage: String,
    default: bool,
    locked: bool,
    /// Upstream's MinCompatibilityVersion, when the spec has one.
    min_compat: Option<Version>,
}

/// The spec file read: its target, its sections' headings, and each gate's specs with the
/// section that names it first (where the list shows it).
#[derive(Debug, Default)]
struct Specs {
    target: Option<Version>,
    sources: Vec<String>,
    gates: BTreeMap<String, (usize, Vec<Spec>)>,
}

fn version(text: &str) -> Result<Version, String> {
    let (major, minor) = text.split_once('.').ok_or_else(|| format!("bad version {text:?}"))?;
    let number = |n: &str| n.parse::<u32>().map_err(|_| format!("bad version {text:?}"));
    Ok((number(major)?, number(minor)?))
}

/// `Gate Version Stage Default [locked] [mincompat=X.Y]`.
fn spec(line: &str) -> Result<(String, Spec), String> {
    let mut words = line.split_whitespace();
    let (Some(name), Some(at), Some(stage)) = (words.next(), words.next(), words.next()) else {
        return Err(format!("too few words: {line:?}"));
    };
    if !["alpha", "beta", "ga", "deprecated", "removed"].contains(&stage) {
        return Err(format!("unknown stage {stage:?}: {line:?}"));
    }
    let default = match (stage, words.next()) {
        ("removed", None) => false,
        (_, Some("true")) => true,
        (_, Some("false")) => false,
        _ => return Err(format!("a default, true or false, is wanted: {line:?}")),
    };
    let mut spec = Spec { version: version(at)?, stage: stage.to_string(), default, locked: false, min_compat: None };
    for word in words {
        match word.strip_prefix("mincompat=") {
            Some(v) => spec.min_compat = Some(version(v)?),
            None if word == "locked" => spec.locked = true,
            None => return Err(format!("unknown word {word:?}: {line:?}")),
        }
    }
    Ok((name.to_string(), spec))
}

/// Reads the spec file; refuses what would make the list ambiguous: a spec before any source,
/// a gate's specs out of version order, the same spec declared twice.
fn parse(text: &str) -> Result<Specs, String> {
    let mut specs = Specs::default();
    for (number, raw) in text.lines().enumerate() {
        let at = |e: String| format!("line {}: {e}", number + 1);
        let line = raw.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        if let Some(target) = line.strip_prefix("target ") {
            specs.target = Some(version(target.trim()).map_err(at)?);
        } else if let Some(source) = line.strip_prefix("source ") {
            specs.sources.push(source.trim().to_string());
        } else {
            let section = specs.sources.len().checked_sub(1).ok_or_else(|| at("a spec before any source".into()))?;
            let (name, new) = spec(line).map_err(at)?;
            let (_, list) = specs.gates.entry(name.clone()).or_insert((section, Vec::new()));
            if let Some(last) = list.last() {
                if (last.version, last.min_compat) == (new.version, new.min_compat) {
                    return Err(at(format!("{name} {:?} declared twice", new.version)));
                }
                if last.version > new.version {
                    return Err(at(format!("{name}'s specs are not oldest first")));
                }
            }
            list.push(new);
        }
    }
    Ok(specs)
}

/// The spec in force at `target`: the newest at or below it whose MinCompatibilityVersion the
/// default compatibility version (the previous minor) meets.
fn in_force(specs: &[Spec], target: Version) -> Option<&Spec> {
    let compat = (target.0, target.1.saturating_sub(1));
    specs.iter().rev().find(|s| s.version <= target && s.min_compat.is_none_or(|m| m <= compat))
}

/// The list for the spec file's target: a heading, then each source's gates by name.
fn generate(text: &str) -> Result<String, String> {
    let specs = parse(text)?;
    let target = specs.target.ok_or("no `target` line")?;
    let shown = format!("{}.{}", target.0, target.1);
    let mut sections = vec![Vec::new(); specs.sources.len()];
    for (name, (section, list)) in &specs.gates {
        match in_force(list, target) {
            Some(s) if s.stage != "removed" => {
                let locked = if s.locked { " locked" } else { "" };
                sections[*section].push(format!("{name} {} {}{locked}", s.stage, s.default));
            }
            _ => {}
        }
    }
    let mut out = format!(
        "# The feature gates kube-proxy knows at Kubernetes {shown}: `Name stage default [locked]`, one\n\
         # a line, read by src/config/features.rs. Generated by tools/gen-gates from\n\
         # tools/gates/upstream-specs.txt (each gate's newest spec at or below {shown}); do not edit.\n"
    );
    for (source, gates) in specs.sources.iter().zip(sections).filter(|(_, g)| !g.is_empty()) {
        out.push_str(&format!("\n# {source}\n{}\n", gates.join("\n")));
    }
    Ok(out)
}

#[test]
fn the_list_is_what_the_specs_generate() {
    let want = generate(SPECS).unwrap_or_else(|e| panic!("tools/gates/upstream-specs.txt: {e}"));
    if std::env::var_os(WRITE).is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/config/gates.list");
        std::fs::write(path, &want).unwrap_or_else(|e| panic!("writing {path}: {e}"));
        return;
    }
    let first = super::LIST.lines().zip(want.lines()).position(|(have, want)| have != want);
    assert!(
        super::LIST == want,
        "src/config/gates.list is not what tools/gates/upstream-specs.txt generates (first difference \
         at line {}): edit the specs, not the list, and run tools/gen-gates",
        first.map_or(super::LIST.lines().count().min(want.lines().count()) + 1, |i| i + 1)
    );
}

#[test]
fn each_gate_takes_its_newest_spec_at_or_below_the_target() {
    let text = "target 1.37\nsource one: here\n\
        Old 1.20 alpha false\nOld 1.25 beta true\nOld 1.30 ga true locked\n\
        Next 1.36 alpha false\nNext 1.38 beta true\nLater 1.38 alpha false\n\
        Gone 1.30 beta true\n\
        Compat 1.37 beta false\nCompat 1.37 beta true mincompat=1.37\n\
        source two: there\nGone 1.37 removed  # a note\nNew 1.37 deprecated true\n";
    let list = generate(text).unwrap();
    let gates: Vec<_> = list.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).collect();
    assert_eq!(gates, ["Compat beta false", "Next alpha false", "Old ga true locked", "New deprecated true"]);
    assert!(list.contains("# one: here\n") && list.contains("# two: there\n") && list.contains("Kubernetes 1.37"));
    let compat = generate(&text.replace("target 1.37", "target 1.38")).unwrap();
    assert!(compat.contains("Compat beta true\n") && compat.contains("Next beta true\n") && compat.contains("Later"));
}

#[test]
fn ambiguous_specs_are_refused() {
    let refused = |text: &str| generate(&format!("target 1.37\n{text}")).unwrap_err();
    assert!(refused("A 1.30 beta true\n").contains("before any source"));
    let with_source = |body: &str| refused(&format!("source s: x\n{body}"));
    assert!(with_source("A 1.30 beta true\nA 1.30 ga true\n").contains("twice"));
    assert!(with_source("A 1.31 beta true\nA 1.30 alpha false\n").contains("oldest first"));
    assert!(with_source("A 1.30 stable true\n").contains("unknown stage"));
    assert!(with_source("A 1.30 beta maybe\n").contains("default"));
    assert!(with_source("A 1.30 beta true lokced\n").contains("unknown word"));
    assert!(generate("source s: x\nA 1.30 beta true\n").unwrap_err().contains("target"));
}
