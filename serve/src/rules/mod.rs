//! The rules a server decides by: named quotas, and where each applies — descriptors
//! (Envoy's hierarchical `key`/`value` entries, per domain) or plain keys. Two file formats
//! ([`toml`] and [`envoy`], Envoy's reference rate limit service's YAML) read into one
//! [`Spec`]; `engine` gives each rule its limiter.
//!
//! Descriptor matching is the reference service's: a request descriptor's entries are looked
//! up level by level, each entry first as `key` with its value (exactly, then a value that
//! ends in `*` as a prefix), then as `key` alone (a default for any value). The rule of the
//! node matched by the *last* entry applies; a node without children ends the walk, and a
//! descriptor that ends early or matches nothing has no rule (it is answered OK).

pub mod envoy;
pub mod toml;

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use slidegate::{Mode, Quota};

/// A rules file that cannot be used, with the line and field at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RulesError {
    /// 1-based; `None` when no line is at fault (an empty file, an unreadable one).
    pub line: Option<usize>,
    /// The field's path in the file (`rules.per-user.window`, `descriptors[2].match`).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl RulesError {
    pub(crate) fn new(
        line: Option<usize>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        RulesError {
            line,
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for RulesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        if self.field.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

/// One rule: a quota, and how it reports.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RuleSpec {
    /// Its identity: the TOML name, or the YAML descriptor's path (`domain.key_value.key`).
    /// A rule keeps its counts across a reload when a rule of the same name and quota is in
    /// the new file.
    pub(crate) name: String,
    /// The name it reports (in `current_limit`, the header fields and the metrics): the
    /// YAML `rate_limit.name` when given, else `name`.
    pub(crate) display: String,
    /// The file named it (TOML's `[rules.NAME]`, YAML's `rate_limit.name`), so gRPC's
    /// `current_limit.name` reports `display`; the reference service leaves that field
    /// empty for a rule its file did not name (a path name is slidegate's own).
    pub(crate) named: bool,
    pub(crate) quota: Quota,
    /// Decides and records, but never denies.
    pub(crate) shadow: bool,
    /// Display names of rules this one replaces within a request (Envoy's `replaces`).
    pub(crate) replaces: Vec<String>,
}

/// What a descriptor node applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// Nothing: an inner node.
    None,
    /// The rule at this index of [`Spec::rules`].
    Rule(usize),
    /// No limit, and reported as such.
    Unlimited,
}

/// One node of a descriptor tree: what it applies and the level below it.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub(crate) target: Target,
    pub(crate) children: Level,
}

impl Node {
    fn new() -> Node {
        Node {
            target: Target::None,
            children: Level::default(),
        }
    }
}

/// The maps a request's strings are looked up in on every decision (domains, descriptor keys
/// and values, keys' rules): ahash, keyed per process like the limiters' own maps, hashes a
/// short string in a fraction of SipHash's instructions.
pub(crate) type Map<K, V> = HashMap<K, V, ahash::RandomState>;

/// `map[key]` for a request's lookups: a map of a few entries (most levels and domains) is
/// scanned, which costs less than hashing the key.
pub(crate) fn get<'a, K, V>(map: &'a Map<K, V>, key: &str) -> Option<&'a V>
where
    K: AsRef<str> + std::borrow::Borrow<str> + Eq + std::hash::Hash,
{
    if map.len() <= 4 {
        map.iter().find(|(k, _)| k.as_ref() == key).map(|(_, v)| v)
    } else {
        map.get(key)
    }
}

/// The nodes of one level of a descriptor tree, by entry key.
#[derive(Clone, Debug, Default)]
pub(crate) struct Level {
    keys: Map<Box<str>, KeyNodes>,
}

#[derive(Clone, Debug, Default)]
struct KeyNodes {
    /// `key` with this exact value.
    values: Map<Box<str>, Node>,
    /// `key` with a value starting with this prefix (a rule value ending in `*`), in file
    /// order: the first that matches wins.
    prefixes: Vec<(Box<str>, Node)>,
    /// `key` with any value.
    any: Option<Node>,
}

impl Level {
    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The node an entry matches: its exact value, a prefix, or the key's default.
    pub(crate) fn find(&self, key: &str, value: &str) -> Option<&Node> {
        let nodes = get(&self.keys, key)?;
        nodes
            .values
            .get(value)
            .or_else(|| {
                nodes
                    .prefixes
                    .iter()
                    .find(|(p, _)| value.starts_with(&**p))
                    .map(|(_, n)| n)
            })
            .or(nodes.any.as_ref())
    }

    /// The node for a rule's entry, made if new.
    fn entry(&mut self, key: &str, value: Option<&str>) -> &mut Node {
        let nodes = self.keys.entry(key.into()).or_default();
        match value {
            None => nodes.any.get_or_insert_with(Node::new),
            Some(v) => match v.strip_suffix('*') {
                Some(prefix) => {
                    let i = match nodes.prefixes.iter().position(|(p, _)| &**p == prefix) {
                        Some(i) => i,
                        None => {
                            nodes.prefixes.push((prefix.into(), Node::new()));
                            nodes.prefixes.len() - 1
                        }
                    };
                    &mut nodes.prefixes[i].1
                }
                None => nodes.values.entry(v.into()).or_insert_with(Node::new),
            },
        }
    }
}

/// A rules file, read and checked, before any limiter exists.
#[derive(Clone, Debug, Default)]
pub struct Spec {
    pub(crate) rules: Vec<RuleSpec>,
    /// Descriptor trees by domain.
    pub(crate) domains: Map<String, Level>,
    /// The rules a key-form request without `rules` is checked against.
    pub(crate) key_default: Vec<usize>,
    /// Keys with their own list instead of `key_default`.
    pub(crate) key_overrides: Map<String, Vec<usize>>,
}

impl Spec {
    /// The index of the rule named `name` (its identity), if any.
    pub(crate) fn rule(&self, name: &str) -> Option<usize> {
        self.rules.iter().position(|r| r.name == name)
    }

    /// Places `target` at the node a rule's entries lead to in `domain`; `Err` with a message
    /// if that node has a target already.
    pub(crate) fn place(
        &mut self,
        domain: &str,
        entries: &[(String, Option<String>)],
        target: Target,
    ) -> Result<(), String> {
        let Some(((key, value), inner)) = entries.split_last() else {
            return Err("a descriptor needs at least one entry".into());
        };
        let mut level = self.domains.entry(domain.to_owned()).or_default();
        for (k, v) in inner {
            level = &mut level.entry(k, v.as_deref()).children;
        }
        let node = level.entry(key, value.as_deref());
        if node.target != Target::None {
            return Err(format!(
                "{} is matched twice in domain {domain:?}",
                describe_entries(entries)
            ));
        }
        node.target = target;
        Ok(())
    }
}

/// `[user=alice, path]`, for messages.
pub(crate) fn describe_entries(entries: &[(String, Option<String>)]) -> String {
    let parts: Vec<String> = entries
        .iter()
        .map(|(k, v)| match v {
            Some(v) => format!("{k}={v}"),
            None => k.clone(),
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// What a descriptor resolves to in `level`: the target of the node its last entry matches
/// (the reference service's walk; see the module documentation).
pub(crate) fn resolve<'a, I>(mut level: &Level, entries: I) -> Target
where
    I: ExactSizeIterator<Item = (&'a str, &'a str)>,
{
    let last = entries.len().saturating_sub(1);
    let mut found = Target::None;
    for (i, (key, value)) in entries.enumerate() {
        let Some(node) = level.find(key, value) else {
            break;
        };
        if i == last {
            found = node.target;
        }
        if node.children.is_empty() {
            break;
        }
        level = &node.children;
    }
    found
}

/// A rule's mode by its name in a rules file.
pub(crate) fn parse_mode(text: &str) -> Result<Mode, String> {
    match text {
        "strict" => Ok(Mode::Strict),
        "strict-marked" => Ok(Mode::StrictMarked),
        "weighted" => Ok(Mode::Weighted),
        "exact-log" => Ok(Mode::ExactLog),
        "fixed-window" => Ok(Mode::FixedWindow),
        "gcra" => Ok(Mode::Gcra),
        _ => Err(format!(
            "unknown mode {text:?}: use strict, strict-marked, weighted, exact-log, fixed-window or gcra"
        )),
    }
}

/// Envoy's time units, as windows (a month is 30 days and a year 365, as the reference
/// service counts them).
pub(crate) const UNITS: [(&str, u64); 6] = [
    ("second", 1),
    ("minute", 60),
    ("hour", 3_600),
    ("day", 86_400),
    ("month", 30 * 86_400),
    ("year", 365 * 86_400),
];

/// The window of an Envoy unit name (any case).
pub(crate) fn unit_window(unit: &str) -> Option<Duration> {
    UNITS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(unit))
        .map(|&(_, secs)| Duration::from_secs(secs))
}

/// Which format a file is in: YAML for `.yaml`/`.yml`, TOML otherwise.
pub fn load(path: &Path, text: &str) -> Result<Spec, RulesError> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("yaml" | "yml") => envoy::parse(text),
        _ => toml::parse(text),
    }
}

/// The line (1-based) of byte `offset` in `text`.
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(list: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
            .collect()
    }

    /// Scanned (a few entries) or hashed (more), a lookup finds each key and no other.
    #[test]
    fn a_lookup_finds_every_key_on_either_side_of_the_scan() {
        for n in 0..=9 {
            let map: Map<String, usize> = (0..n).map(|i| (format!("key{i}"), i)).collect();
            for i in 0..n {
                assert_eq!(get(&map, &format!("key{i}")), Some(&i), "{n} entries");
            }
            for absent in ["", "key", "key9x", "KEY0", "key10"] {
                assert_eq!(get(&map, absent), None, "{absent:?} in {n} entries");
            }
        }
    }

    fn find(spec: &Spec, domain: &str, req: &[(&str, &str)]) -> Target {
        resolve(&spec.domains[domain], req.iter().copied())
    }

    /// The reference service's walk: exact value before prefix before default; the last
    /// entry's node decides; a request deeper or shallower than the rules matches nothing.
    #[test]
    fn descriptors_match_as_envoys_reference_service() {
        let mut spec = Spec::default();
        spec.place("d", &entries(&[("user", None)]), Target::Rule(0))
            .unwrap();
        spec.place("d", &entries(&[("user", Some("alice"))]), Target::Rule(1))
            .unwrap();
        spec.place("d", &entries(&[("user", Some("bot-*"))]), Target::Rule(2))
            .unwrap();
        spec.place("d", &entries(&[("user", Some("root"))]), Target::Unlimited)
            .unwrap();
        spec.place(
            "d",
            &entries(&[("tenant", None), ("user", None)]),
            Target::Rule(3),
        )
        .unwrap();
        spec.place(
            "d",
            &entries(&[("path", Some("/a")), ("ip", None)]),
            Target::Rule(4),
        )
        .unwrap();

        assert_eq!(find(&spec, "d", &[("user", "bob")]), Target::Rule(0));
        assert_eq!(find(&spec, "d", &[("user", "alice")]), Target::Rule(1));
        assert_eq!(find(&spec, "d", &[("user", "bot-7")]), Target::Rule(2));
        assert_eq!(find(&spec, "d", &[("user", "root")]), Target::Unlimited);
        assert_eq!(
            find(&spec, "d", &[("tenant", "t"), ("user", "u")]),
            Target::Rule(3)
        );
        // The tenant node has no rule of its own.
        assert_eq!(find(&spec, "d", &[("tenant", "t")]), Target::None);
        // Deeper than the rules: the walk ends at a leaf before the last entry.
        assert_eq!(
            find(&spec, "d", &[("user", "bob"), ("x", "y")]),
            Target::None
        );
        assert_eq!(
            find(&spec, "d", &[("path", "/a"), ("ip", "1.2.3.4")]),
            Target::Rule(4)
        );
        assert_eq!(
            find(&spec, "d", &[("path", "/b"), ("ip", "1.2.3.4")]),
            Target::None
        );
        assert_eq!(find(&spec, "d", &[("nobody", "x")]), Target::None);
        assert_eq!(find(&spec, "d", &[]), Target::None);
    }

    #[test]
    fn the_same_entry_twice_is_an_error() {
        let mut spec = Spec::default();
        spec.place("d", &entries(&[("user", None)]), Target::Rule(0))
            .unwrap();
        let err = spec
            .place("d", &entries(&[("user", None)]), Target::Rule(1))
            .unwrap_err();
        assert!(err.contains("[user] is matched twice"), "{err}");
        // The same entries in another domain are another node.
        spec.place("e", &entries(&[("user", None)]), Target::Rule(1))
            .unwrap();
    }

    #[test]
    fn lines_and_units() {
        assert_eq!(line_of("a\nb\nc", 0), 1);
        assert_eq!(line_of("a\nb\nc", 2), 2);
        assert_eq!(line_of("a\nb\nc", 99), 3);
        assert_eq!(unit_window("MINUTE"), Some(Duration::from_secs(60)));
        assert_eq!(unit_window("fortnight"), None);
        assert_eq!(parse_mode("gcra"), Ok(Mode::Gcra));
        assert_eq!(parse_mode("strict-marked"), Ok(Mode::StrictMarked));
        assert!(parse_mode("Strict").unwrap_err().contains("unknown mode"));
    }
}
