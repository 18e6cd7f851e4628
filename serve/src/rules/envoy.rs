//! The YAML rules format of Envoy's reference rate limit service (envoyproxy/ratelimit), so a
//! deployment can switch by changing the binary:
//!
//! ```yaml
//! domain: api
//! descriptors:
//!   - key: user                  # any value: a limit per user
//!     rate_limit: { unit: minute, requests_per_unit: 100 }
//!   - key: user
//!     value: alice               # this value: its own limit
//!     rate_limit: { unit: minute, requests_per_unit: 1000, name: alice }
//!   - key: path
//!     value: /login
//!     descriptors:
//!       - key: remote_address
//!         rate_limit: { unit: hour, requests_per_unit: 10 }
//!         shadow_mode: true
//! ```
//!
//! Every key the reference service accepts is read (`domain`, `descriptors`, `key`, `value`,
//! `rate_limit` with `unit`, `requests_per_unit`, `unlimited`, `name` and `replaces`,
//! `shadow_mode`, `detailed_metric`); an unknown key is an error, as there. Several YAML
//! documents (`---`) in one file are several domains. Each rule counts as a Strict sliding
//! window of its unit, with the library's default granularity (a tenth of the window).

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};
use slidegate::Quota;

use super::{RuleSpec, RulesError, Spec, Target, describe_entries, unit_window};

/// Reads a YAML rules file.
pub(crate) fn parse(text: &str) -> Result<Spec, RulesError> {
    let docs = MarkedYaml::load_from_str(text).map_err(|e| {
        RulesError::new(
            Some(e.marker().line()),
            "",
            format!("not YAML: {}", e.info()),
        )
    })?;
    let mut spec = Spec::default();
    let mut domains = Vec::new();
    for doc in &docs {
        if matches!(doc.data, YamlData::Value(Scalar::Null)) {
            continue;
        }
        let fields = mapping(doc, "", &["domain", "descriptors"])?;
        let domain = match fields.get("domain") {
            Some(d) => string(d, "domain")?,
            None => String::new(),
        };
        if domain.is_empty() {
            return Err(RulesError::new(
                Some(line(doc)),
                "domain",
                "a config needs a non-empty domain",
            ));
        }
        if domains.contains(&domain) {
            return Err(RulesError::new(
                fields.get("domain").map(|d| line(d)),
                "domain",
                format!("domain {domain:?} is configured twice"),
            ));
        }
        domains.push(domain.clone());
        // A domain without descriptors still exists: its requests are answered OK.
        spec.domains.entry(domain.clone()).or_default();
        if let Some(list) = fields.get("descriptors") {
            descriptors(&mut spec, &domain, list, "descriptors", &mut Vec::new())?;
        }
    }
    if domains.is_empty() {
        return Err(RulesError::new(
            None,
            "domain",
            "the file configures no domain",
        ));
    }
    Ok(spec)
}

/// The descriptors under one node (or the domain), whose path from the domain is `parents`.
fn descriptors(
    spec: &mut Spec,
    domain: &str,
    list: &MarkedYaml<'_>,
    field: &str,
    parents: &mut Vec<(String, Option<String>)>,
) -> Result<(), RulesError> {
    let YamlData::Sequence(items) = &list.data else {
        if is_null(list) {
            return Ok(());
        }
        return Err(RulesError::new(
            Some(line(list)),
            field,
            "must be a list of descriptors",
        ));
    };
    // The composite keys (`key_value`, or `key`) of this level's descriptors so far: the
    // reference service refuses a second, however its children or limit differ.
    let mut seen: Vec<String> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let fields = mapping(
            item,
            &at,
            &[
                "key",
                "value",
                "rate_limit",
                "descriptors",
                "shadow_mode",
                "detailed_metric",
            ],
        )?;
        let key = match fields.get("key") {
            Some(k) => string(k, &format!("{at}.key"))?,
            None => String::new(),
        };
        if key.is_empty() {
            return Err(RulesError::new(
                Some(line(item)),
                format!("{at}.key"),
                "a descriptor needs a non-empty key",
            ));
        }
        let value = match fields.get("value") {
            Some(v) => Some(string(v, &format!("{at}.value"))?).filter(|v| !v.is_empty()),
            None => None,
        };
        let shadow = match fields.get("shadow_mode") {
            Some(s) => boolean(s, &format!("{at}.shadow_mode"))?,
            None => false,
        };
        if let Some(d) = fields.get("detailed_metric") {
            boolean(d, &format!("{at}.detailed_metric"))?;
        }
        // Its condition exactly: the same `key_value` string at one level, even where two
        // different (key, value) pairs make it (`a`/`b_c` and `a_b`/`c`).
        let composite = match &value {
            Some(v) => format!("{key}_{v}"),
            None => key.clone(),
        };
        parents.push((key, value));
        if seen.contains(&composite) {
            return Err(RulesError::new(
                Some(line(item)),
                at,
                format!(
                    "duplicate descriptor composite key '{}'",
                    composite_key(domain, parents)
                ),
            ));
        }
        seen.push(composite);
        let target = match fields.get("rate_limit") {
            Some(rl) if !is_null(rl) => rate_limit(
                spec,
                domain,
                parents,
                rl,
                &format!("{at}.rate_limit"),
                shadow,
            )?,
            _ => Target::None,
        };
        if target != Target::None {
            spec.place(domain, parents, target)
                .map_err(|m| RulesError::new(Some(line(item)), at.clone(), m))?;
        } else {
            // An inner node: make it, so a duplicate is still caught below it.
            spec.place(domain, parents, Target::None).ok();
        }
        if let Some(children) = fields.get("descriptors") {
            descriptors(
                spec,
                domain,
                children,
                &format!("{at}.descriptors"),
                parents,
            )?;
        }
        parents.pop();
    }
    Ok(())
}

/// One `rate_limit`, made a rule named by its path (`domain.key_value.key`, as the
/// reference service names its stats).
fn rate_limit(
    spec: &mut Spec,
    domain: &str,
    path: &[(String, Option<String>)],
    node: &MarkedYaml<'_>,
    field: &str,
    shadow: bool,
) -> Result<Target, RulesError> {
    let fields = mapping(
        node,
        field,
        &["unit", "requests_per_unit", "unlimited", "name", "replaces"],
    )?;
    let sub = |f: &str| format!("{field}.{f}");
    let unlimited = match fields.get("unlimited") {
        Some(u) => boolean(u, &sub("unlimited"))?,
        None => false,
    };
    let unit = fields.get("unit");
    if unlimited {
        if let Some(u) = unit {
            return Err(RulesError::new(
                Some(line(u)),
                sub("unit"),
                "an unlimited rate_limit takes no unit",
            ));
        }
        return Ok(Target::Unlimited);
    }
    let Some(unit) = unit else {
        return Err(RulesError::new(
            Some(line(node)),
            sub("unit"),
            "missing: second, minute, hour, day, month or year",
        ));
    };
    let unit_text = string(unit, &sub("unit"))?;
    let window = unit_window(&unit_text).ok_or_else(|| {
        RulesError::new(
            Some(line(unit)),
            sub("unit"),
            format!("unknown unit {unit_text:?}: use second, minute, hour, day, month or year"),
        )
    })?;
    let Some(rpu) = fields.get("requests_per_unit") else {
        return Err(RulesError::new(
            Some(line(node)),
            sub("requests_per_unit"),
            "missing",
        ));
    };
    let YamlData::Value(Scalar::Integer(n)) = rpu.data else {
        return Err(RulesError::new(
            Some(line(rpu)),
            sub("requests_per_unit"),
            "must be a whole number",
        ));
    };
    let limit = u64::try_from(n)
        .ok()
        .filter(|&n| n <= u64::from(u32::MAX))
        .ok_or_else(|| {
            RulesError::new(
                Some(line(rpu)),
                sub("requests_per_unit"),
                format!("{n} is not between 0 and {}", u32::MAX),
            )
        })?;
    let quota = Quota::new(limit, window).map_err(|e| {
        let hint = if limit == 0 {
            " (to let nothing through, use a limit of 1 and a long unit; to limit nothing, unlimited: true)"
        } else {
            ""
        };
        RulesError::new(Some(line(rpu)), sub("requests_per_unit"), format!("{e}{hint}"))
    })?;
    let name = composite_key(domain, path);
    let display = match fields.get("name") {
        Some(n) => Some(string(n, &sub("name"))?).filter(|n| !n.is_empty()),
        None => None,
    };
    let mut replaces = Vec::new();
    if let Some(list) = fields.get("replaces") {
        let YamlData::Sequence(items) = &list.data else {
            return Err(RulesError::new(
                Some(line(list)),
                sub("replaces"),
                "must be a list of {name: ...}",
            ));
        };
        for (i, item) in items.iter().enumerate() {
            let at = format!("{}[{i}]", sub("replaces"));
            let f = mapping(item, &at, &["name"])?;
            let n = match f.get("name") {
                Some(n) => string(n, &format!("{at}.name"))?,
                None => String::new(),
            };
            if n.is_empty() {
                return Err(RulesError::new(
                    Some(line(item)),
                    format!("{at}.name"),
                    "must not be empty",
                ));
            }
            if Some(&n) == display.as_ref() {
                return Err(RulesError::new(
                    Some(line(item)),
                    format!("{at}.name"),
                    "a rule cannot replace itself",
                ));
            }
            replaces.push(n);
        }
    }
    if spec.rule(&name).is_some() {
        return Err(RulesError::new(
            Some(line(node)),
            field,
            format!(
                "{} is matched twice in domain {domain:?}",
                describe_entries(path)
            ),
        ));
    }
    spec.rules.push(RuleSpec {
        named: display.is_some(),
        display: display.unwrap_or_else(|| name.clone()),
        name,
        quota,
        shadow,
        replaces,
    });
    Ok(Target::Rule(spec.rules.len() - 1))
}

/// A node's path as the reference service keys it (and names its stats):
/// `domain.key_value.key`.
fn composite_key(domain: &str, path: &[(String, Option<String>)]) -> String {
    let mut name = domain.to_owned();
    for (k, v) in path {
        name.push('.');
        name.push_str(k);
        if let Some(v) = v {
            name.push('_');
            name.push_str(v);
        }
    }
    name
}

fn line(node: &MarkedYaml<'_>) -> usize {
    node.span.start.line()
}

fn is_null(node: &MarkedYaml<'_>) -> bool {
    matches!(node.data, YamlData::Value(Scalar::Null))
}

/// A mapping's fields by name, each key one of `known` (the reference service's rule).
fn mapping<'n, 'i>(
    node: &'n MarkedYaml<'i>,
    field: &str,
    known: &[&str],
) -> Result<Vec<(&'n str, &'n MarkedYaml<'i>)>, RulesError> {
    let YamlData::Mapping(map) = &node.data else {
        let what = if field.is_empty() {
            "a document"
        } else {
            field
        };
        return Err(RulesError::new(
            Some(line(node)),
            field,
            format!("{what} must be a mapping"),
        ));
    };
    let mut out = Vec::with_capacity(map.len());
    for (k, v) in map {
        let YamlData::Value(Scalar::String(name)) = &k.data else {
            return Err(RulesError::new(
                Some(line(k)),
                field,
                "keys must be strings",
            ));
        };
        if !known.contains(&name.as_ref()) {
            let at = if field.is_empty() {
                name.to_string()
            } else {
                format!("{field}.{name}")
            };
            return Err(RulesError::new(
                Some(line(k)),
                at,
                format!("unknown key; expected one of {}", known.join(", ")),
            ));
        }
        out.push((name.as_ref(), v));
    }
    Ok(out)
}

trait Fields<'n, 'i> {
    fn get(&self, name: &str) -> Option<&'n MarkedYaml<'i>>;
}

impl<'n, 'i> Fields<'n, 'i> for Vec<(&'n str, &'n MarkedYaml<'i>)> {
    fn get(&self, name: &str) -> Option<&'n MarkedYaml<'i>> {
        self.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
    }
}

/// A scalar as text: YAML's `value: 42` is the value "42", as the reference service reads it.
fn string(node: &MarkedYaml<'_>, field: &str) -> Result<String, RulesError> {
    match &node.data {
        YamlData::Value(Scalar::String(s)) => Ok(s.to_string()),
        YamlData::Value(Scalar::Integer(i)) => Ok(i.to_string()),
        YamlData::Value(Scalar::Boolean(b)) => Ok(b.to_string()),
        YamlData::Value(Scalar::FloatingPoint(f)) => Ok(f.to_string()),
        _ => Err(RulesError::new(Some(line(node)), field, "must be a string")),
    }
}

fn boolean(node: &MarkedYaml<'_>, field: &str) -> Result<bool, RulesError> {
    match node.data {
        YamlData::Value(Scalar::Boolean(b)) => Ok(b),
        _ => Err(RulesError::new(
            Some(line(node)),
            field,
            "must be true or false",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::resolve;
    use std::time::Duration;

    const EXAMPLE: &str = "\
domain: api
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: user
    value: alice
    rate_limit: { unit: MINUTE, requests_per_unit: 1000, name: vip, replaces: [{name: api.tenant}] }
  - key: path
    value: /login
    descriptors:
      - key: remote_address
        rate_limit: { unit: hour, requests_per_unit: 10 }
        shadow_mode: true
  - key: user
    value: root
    rate_limit: { unlimited: true }
---
domain: other
";

    #[test]
    fn reads_the_reference_format() {
        let spec = parse(EXAMPLE).unwrap();
        let user = spec.rule("api.user").unwrap();
        let alice = spec.rule("api.user_alice").unwrap();
        let login = spec.rule("api.path_/login.remote_address").unwrap();
        assert_eq!(spec.rules[user].quota.limit(), 100);
        assert_eq!(spec.rules[user].quota.window(), Duration::from_secs(60));
        assert_eq!(spec.rules[alice].display, "vip");
        // Only a `name` the file gives is reported as `current_limit.name`.
        assert!(spec.rules[alice].named && !spec.rules[user].named);
        assert_eq!(spec.rules[alice].replaces, vec!["api.tenant".to_string()]);
        assert!(spec.rules[login].shadow && !spec.rules[user].shadow);
        assert_eq!(spec.rules[login].quota.window(), Duration::from_secs(3600));
        let api = &spec.domains["api"];
        let r = |e: &[(&str, &str)]| resolve(api, e.iter().copied());
        assert_eq!(r(&[("user", "bob")]), Target::Rule(user));
        assert_eq!(r(&[("user", "alice")]), Target::Rule(alice));
        assert_eq!(r(&[("user", "root")]), Target::Unlimited);
        assert_eq!(
            r(&[("path", "/login"), ("remote_address", "1.2.3.4")]),
            Target::Rule(login)
        );
        assert_eq!(r(&[("path", "/login")]), Target::None);
        assert!(spec.domains["other"].is_empty());
    }

    fn error(text: &str) -> RulesError {
        parse(text).unwrap_err()
    }

    /// The reference service's loader (envoyproxy/ratelimit, src/config/config_impl.go,
    /// `loadDescriptors`, at f2fb15770f7fd1c88ca6c3a1b58ee513917ace96) keys each level's
    /// descriptors by `key` or `key_value` and refuses a second with the same, with or
    /// without a `rate_limit` and whatever its children, as "duplicate descriptor composite
    /// key '<domain.parents.key_value>'"; slidegate merged two inner nodes' children.
    #[test]
    fn a_duplicate_descriptor_is_refused_as_the_reference_refuses_it() {
        // Two inner nodes of the same key and value, with different children.
        let e = error(
            "domain: d\ndescriptors:\n  - key: path\n    value: /a\n    descriptors:\n      - key: ip\n        rate_limit: { unit: second, requests_per_unit: 1 }\n  - key: path\n    value: /a\n    descriptors:\n      - key: user\n        rate_limit: { unit: second, requests_per_unit: 2 }\n",
        );
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(8), "descriptors[1]"),
            "{e}"
        );
        assert_eq!(e.message, "duplicate descriptor composite key 'd.path_/a'");
        // One level down, a wildcard value twice: the path names the parents.
        let e = error(
            "domain: d\ndescriptors:\n  - key: path\n    value: /a\n    descriptors:\n      - key: ip\n        value: 10.*\n        rate_limit: { unit: second, requests_per_unit: 1 }\n      - key: ip\n        value: 10.*\n",
        );
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(9), "descriptors[0].descriptors[1]"),
            "{e}"
        );
        assert_eq!(
            e.message,
            "duplicate descriptor composite key 'd.path_/a.ip_10.*'"
        );
        // Its condition is the joined string: a key holding `_` can meet another's value.
        let e = error(
            "domain: d\ndescriptors:\n  - key: a\n    value: b_c\n  - key: a_b\n    value: c\n",
        );
        assert_eq!(e.message, "duplicate descriptor composite key 'd.a_b_c'");
        // The same key with another value, the key alone, and the same entry at another
        // level or in another domain are not duplicates.
        parse(
            "domain: d\ndescriptors:\n  - key: k\n    value: v\n    descriptors:\n      - key: k\n        value: v\n        rate_limit: { unit: second, requests_per_unit: 1 }\n  - key: k\n    value: w\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n---\ndomain: e\ndescriptors:\n  - key: k\n    value: v\n",
        )
        .unwrap();
    }

    #[test]
    fn errors_name_the_line_and_field() {
        let e = error(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n",
        );
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(4), "descriptors[0].rate_limit.unit"),
            "{e}"
        );
        let e = error(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: many\n",
        );
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(6), "descriptors[0].rate_limit.requests_per_unit"),
            "{e}"
        );
        let e = error("domain: d\ndescriptors:\n  - key: k\n    ratelimit: {}\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(4), "descriptors[0].ratelimit"),
            "{e}"
        );
        assert!(e.message.contains("unknown key"), "{e}");
        let e = error("domain: d\ndescriptors:\n  - value: v\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(3), "descriptors[0].key"),
            "{e}"
        );
        let e = error(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 2 }\n",
        );
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(5), "descriptors[1]"),
            "{e}"
        );
        assert_eq!(e.message, "duplicate descriptor composite key 'd.k'", "{e}");
        let e = error(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unlimited: true, unit: second }\n",
        );
        assert_eq!(e.field, "descriptors[0].rate_limit.unit", "{e}");
        let e = error("domain: d\ndescriptors: [\n");
        assert!(e.message.contains("not YAML"), "{e}");
        let e = error("descriptors: []\n");
        assert_eq!(e.field, "domain", "{e}");
        let e = error("domain: d\n---\ndomain: d\n");
        assert_eq!((e.line, e.field.as_str()), (Some(3), "domain"), "{e}");
        let e = error(
            "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        rate_limit: { unit: second, requests_per_unit: 0 }\n",
        );
        assert_eq!(
            (e.line, e.field.as_str()),
            (
                Some(6),
                "descriptors[0].descriptors[0].rate_limit.requests_per_unit"
            ),
            "{e}"
        );
    }
}
