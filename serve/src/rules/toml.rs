//! slidegate's own rules format, in TOML.
//!
//! ```toml
//! [rules.per-user]              # a named quota
//! limit = 100
//! window = "1m"
//! granularity = "1s"            # optional: the window / 10 by default
//! mode = "strict"               # strict (default), strict-marked, weighted, exact-log,
//!                               # fixed-window, gcra
//! shadow = false                # decide and record, never deny
//!
//! [keys]                        # POST /v1/check {"key": "..."}
//! default = ["per-user"]
//! overrides = { "batch-job" = ["bulk"] }
//!
//! [[descriptors]]               # Envoy's descriptors
//! domain = "api"
//! match = ["tenant", "user=alice"]   # or { key = "user", value = "alice" }
//! rule = "per-user"             # or: unlimited = true
//! ```
//!
//! docs/serve.md has the complete format and a full example.

use std::collections::BTreeMap;

use serde::Deserialize;
use slidegate::Quota;
use toml::Spanned;

use super::{RuleSpec, RulesError, Spec, Target, line_of, parse_mode};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    rules: BTreeMap<String, Spanned<Rule>>,
    keys: Option<Keys>,
    #[serde(default)]
    descriptors: Vec<Spanned<Descriptor>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    limit: Spanned<u64>,
    window: Spanned<String>,
    granularity: Option<Spanned<String>>,
    mode: Option<Spanned<String>>,
    #[serde(default)]
    shadow: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Keys {
    #[serde(default)]
    default: Vec<Spanned<String>>,
    #[serde(default)]
    overrides: BTreeMap<String, Vec<Spanned<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Descriptor {
    domain: Spanned<String>,
    #[serde(rename = "match")]
    entries: Spanned<Vec<Spanned<Entry>>>,
    rule: Option<Spanned<String>>,
    #[serde(default)]
    unlimited: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Entry {
    /// `"key"` or `"key=value"` (split at the first `=`).
    Text(String),
    Table {
        key: String,
        value: Option<String>,
    },
}

/// Reads a TOML rules file.
pub(crate) fn parse(text: &str) -> Result<Spec, RulesError> {
    let de =
        toml::de::Deserializer::parse(text).map_err(|e| toml_error(text, String::new(), &e))?;
    let file: File = serde_path_to_error::deserialize(de)
        .map_err(|e| toml_error(text, e.path().to_string(), e.inner()))?;
    let at = |offset: usize| Some(line_of(text, offset));
    let mut spec = Spec::default();

    for (name, rule) in &file.rules {
        let field = |f: &str| format!("rules.{name}.{f}");
        let line = at(rule.span().start);
        if !name.chars().all(|c| c.is_ascii_graphic()) {
            return Err(RulesError::new(
                line,
                format!("rules.{name}"),
                "a rule's name must be printable ASCII without spaces (it is written in header fields and metric labels)",
            ));
        }
        let rule = rule.get_ref();
        let window = duration(&rule.window)
            .map_err(|m| RulesError::new(at(rule.window.span().start), field("window"), m))?;
        let mut quota = Quota::new(*rule.limit.get_ref(), window).map_err(|e| {
            RulesError::new(at(rule.limit.span().start), field("limit"), e.to_string())
        })?;
        if let Some(mode) = &rule.mode {
            let m = parse_mode(mode.get_ref())
                .map_err(|m| RulesError::new(at(mode.span().start), field("mode"), m))?;
            quota = quota.with_mode(m);
        }
        if let Some(g) = &rule.granularity {
            let err = |m: String| RulesError::new(at(g.span().start), field("granularity"), m);
            let g = duration(g).map_err(err)?;
            quota = quota.with_granularity(g).map_err(|e| err(e.to_string()))?;
        }
        spec.rules.push(RuleSpec {
            name: name.clone(),
            display: name.clone(),
            named: true,
            quota,
            shadow: rule.shadow,
            replaces: Vec::new(),
        });
    }

    let find = |spec: &Spec, name: &Spanned<String>, field: String| {
        spec.rule(name.get_ref()).ok_or_else(|| {
            RulesError::new(
                at(name.span().start),
                field,
                format!("no rule named {:?} in [rules]", name.get_ref()),
            )
        })
    };
    if let Some(keys) = &file.keys {
        for (i, name) in keys.default.iter().enumerate() {
            let r = find(&spec, name, format!("keys.default[{i}]"))?;
            spec.key_default.push(r);
        }
        for (key, names) in &keys.overrides {
            let mut list = Vec::with_capacity(names.len());
            for (i, name) in names.iter().enumerate() {
                list.push(find(&spec, name, format!("keys.overrides.{key}[{i}]"))?);
            }
            spec.key_overrides.insert(key.clone(), list);
        }
    }

    for (i, d) in file.descriptors.iter().enumerate() {
        let line = at(d.span().start);
        let field = |f: &str| format!("descriptors[{i}].{f}");
        let d = d.get_ref();
        if d.domain.get_ref().is_empty() {
            return Err(RulesError::new(
                at(d.domain.span().start),
                field("domain"),
                "must not be empty",
            ));
        }
        let mut entries = Vec::with_capacity(d.entries.get_ref().len());
        for (j, e) in d.entries.get_ref().iter().enumerate() {
            let (key, value) = match e.get_ref() {
                Entry::Text(t) => match t.split_once('=') {
                    Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
                    None => (t.clone(), None),
                },
                Entry::Table { key, value } => (key.clone(), value.clone()),
            };
            if key.is_empty() {
                return Err(RulesError::new(
                    at(e.span().start),
                    field(&format!("match[{j}]")),
                    "an entry's key must not be empty",
                ));
            }
            entries.push((key, value));
        }
        let target = match (&d.rule, d.unlimited) {
            (Some(_), true) => {
                return Err(RulesError::new(
                    line,
                    field("unlimited"),
                    "give either rule or unlimited = true, not both",
                ));
            }
            (None, false) => {
                return Err(RulesError::new(
                    line,
                    field("rule"),
                    "missing: name a rule, or write unlimited = true",
                ));
            }
            (Some(name), false) => Target::Rule(find(&spec, name, field("rule"))?),
            (None, true) => Target::Unlimited,
        };
        spec.place(d.domain.get_ref(), &entries, target)
            .map_err(|m| RulesError::new(at(d.entries.span().start), field("match"), m))?;
    }

    if spec.rules.is_empty() {
        return Err(RulesError::new(None, "rules", "the file defines no rule"));
    }
    Ok(spec)
}

fn duration(text: &Spanned<String>) -> Result<std::time::Duration, String> {
    let d = crate::duration::parse_duration(text.get_ref())?;
    if d.is_zero() {
        return Err("must be longer than zero".into());
    }
    Ok(d)
}

fn toml_error(text: &str, path: String, e: &toml::de::Error) -> RulesError {
    // The path serde tracked is "." for the root, and passes through `Spanned`'s own
    // private field.
    let field = path
        .split('.')
        .filter(|p| !p.is_empty() && !p.starts_with("$__serde_spanned"))
        .collect::<Vec<_>>()
        .join(".");
    RulesError::new(
        e.span().map(|s| line_of(text, s.start)),
        field,
        e.message().trim().to_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::resolve;
    use std::time::Duration;

    const EXAMPLE: &str = r#"
[rules.per-user]
limit = 100
window = "1m"
granularity = "1s"

[rules.bulk]
limit = 10000
window = "1m"
mode = "gcra"

[rules.login]
limit = 5
window = "15m"
shadow = true

[rules.marked]
limit = 10
window = "1m"
mode = "strict-marked"

[keys]
default = ["per-user"]
overrides = { "batch-job" = ["bulk"] }

[[descriptors]]
domain = "api"
match = ["user"]
rule = "per-user"

[[descriptors]]
domain = "api"
match = [{ key = "user", value = "batch=job" }]
rule = "bulk"

[[descriptors]]
domain = "api"
match = ["path=/login", "remote_address"]
rule = "login"

[[descriptors]]
domain = "api"
match = ["user=health"]
unlimited = true
"#;

    #[test]
    fn reads_every_part() {
        let spec = parse(EXAMPLE).unwrap();
        let per_user = spec.rule("per-user").unwrap();
        let bulk = spec.rule("bulk").unwrap();
        let login = spec.rule("login").unwrap();
        let q = spec.rules[per_user].quota;
        assert_eq!(
            (q.limit(), q.window(), q.granularity()),
            (100, Duration::from_secs(60), Duration::from_secs(1))
        );
        assert_eq!(spec.rules[bulk].quota.mode(), slidegate::Mode::Gcra);
        let marked = spec.rule("marked").unwrap();
        assert_eq!(
            spec.rules[marked].quota.mode(),
            slidegate::Mode::StrictMarked
        );
        assert!(spec.rules[login].shadow);
        assert_eq!(spec.key_default, vec![per_user]);
        assert_eq!(spec.key_overrides["batch-job"], vec![bulk]);
        let api = &spec.domains["api"];
        let r = |e: &[(&str, &str)]| resolve(api, e.iter().copied());
        assert_eq!(r(&[("user", "x")]), Target::Rule(per_user));
        assert_eq!(r(&[("user", "batch=job")]), Target::Rule(bulk));
        assert_eq!(
            r(&[("path", "/login"), ("remote_address", "::1")]),
            Target::Rule(login)
        );
        assert_eq!(r(&[("user", "health")]), Target::Unlimited);
    }

    /// The shipped example parses, its key rule Strict with last-admission marks; a mode
    /// misspelt is an error that lists every mode's name.
    #[test]
    fn the_example_file_and_the_modes() {
        let spec = parse(include_str!("../../examples/rules.toml")).unwrap();
        let per_key = spec.rule("per-key").unwrap();
        assert_eq!(
            spec.rules[per_key].quota.mode(),
            slidegate::Mode::StrictMarked
        );
        let e = error("[rules.a]\nlimit = 10\nwindow = \"1m\"\nmode = \"marked\"\n");
        assert_eq!((e.line, e.field.as_str()), (Some(4), "rules.a.mode"), "{e}");
        assert!(e.message.contains("strict-marked"), "{}", e.message);
    }

    fn error(text: &str) -> RulesError {
        parse(text).unwrap_err()
    }

    #[test]
    fn errors_name_the_line_and_field() {
        let e = error("[rules.a]\nlimit = 10\nwindow = \"1 parsec\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(3), "rules.a.window"),
            "{e}"
        );
        assert!(e.message.contains("unknown unit"), "{e}");

        let e = error("[rules.a]\nlimit = \"ten\"\nwindow = \"1s\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(2), "rules.a.limit"),
            "{e}"
        );
        assert!(e.message.contains("invalid type"), "{e}");

        let e = error("[rules.a]\nlimit = 0\nwindow = \"1s\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(2), "rules.a.limit"),
            "{e}"
        );

        let e = error("[rules.a]\nlimit = 10\nwindow = \"1s\"\ngranularity = \"300ms\"\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(4), "rules.a.granularity"),
            "{e}"
        );
        assert!(e.message.contains("does not divide"), "{e}");

        let e = error("[rules.a]\nlimit = 10\nwindow = \"1s\"\nlimt = 3\n");
        assert_eq!(e.line, Some(4), "{e}");
        assert!(e.message.contains("unknown field `limt`"), "{e}");

        let e = error(
            "[rules.a]\nlimit = 10\nwindow = \"1s\"\n\n[[descriptors]]\ndomain = \"d\"\nmatch = [\"k\"]\nrule = \"b\"\n",
        );
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(8), "descriptors[0].rule"),
            "{e}"
        );
        assert!(e.message.contains("no rule named \"b\""), "{e}");

        let e =
            error("[rules.a]\nlimit = 10\nwindow = \"1s\"\n[keys]\ndefault = [\"a\", \"zz\"]\n");
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(5), "keys.default[1]"),
            "{e}"
        );

        let e = error("[rules.a]\nlimit = 10\nwindow = \"1s\"\nmode = \"fast\"\n");
        assert_eq!((e.line, e.field.as_str()), (Some(4), "rules.a.mode"), "{e}");

        let e = error("[rules.a]\nlimit = 10\nwindow = \"1s\n");
        assert_eq!(e.line, Some(3), "{e}");

        let e = error("");
        assert!(e.message.contains("no rule"), "{e}");

        let dup = "[rules.a]\nlimit = 1\nwindow = \"1s\"\n[[descriptors]]\ndomain = \"d\"\nmatch = [\"k\"]\nrule = \"a\"\n[[descriptors]]\ndomain = \"d\"\nmatch = [\"k\"]\nunlimited = true\n";
        let e = error(dup);
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(10), "descriptors[1].match"),
            "{e}"
        );
    }
}
