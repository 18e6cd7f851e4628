//! Resolving a request to its statuses: each descriptor (or named rule) to its rule and
//! counter key, every bound checked, with the thread's scratch lists and keys reused.

use super::request::{
    Descriptor, Invalid, MAX_DESCRIPTORS, MAX_ENTRIES, MAX_KEY_BYTES, Request, Scratch, Status,
};
use super::rule_set::{Backend, RuleRef, RuleSet};
use crate::rules;

impl RuleSet {
    /// Each descriptor's (or named rule's) rule and key, checked for size.
    pub(super) fn resolve<D: Descriptor>(
        &self,
        request: &Request<'_, D>,
        cost: u64,
        backend: &Backend,
        scratch: &mut Scratch,
    ) -> Result<Vec<Status>, Invalid> {
        if cost == 0 {
            return Err(Invalid::new("cost", "must be at least 1"));
        }
        match request {
            Request::Key { key, rules } => {
                if key.len() + 1 > MAX_KEY_BYTES {
                    return Err(Invalid::new(
                        "key",
                        format!("longer than {} bytes", MAX_KEY_BYTES - 1),
                    ));
                }
                let named: Vec<usize>;
                let indices: &[usize] = match rules {
                    Some(names) => {
                        let mut v = Vec::with_capacity(names.len());
                        for (i, name) in names.iter().enumerate() {
                            let r = self
                                .rules
                                .iter()
                                .position(|r| r.spec.name == *name)
                                .ok_or_else(|| {
                                    Invalid::new(
                                        format!("rules[{i}]"),
                                        format!("no rule named {name:?}"),
                                    )
                                })?;
                            v.push(r);
                        }
                        named = v;
                        &named
                    }
                    None => self.key_overrides.get(*key).unwrap_or(&self.key_default),
                };
                let mut items = scratch.statuses(indices.len());
                // One key for every rule.
                let (at, k) = scratch.key(key.len() + 1);
                k.push('k');
                k.push_str(key);
                for &i in indices {
                    items.push(Status::new(Some(RuleRef::InFile(i)), at));
                }
                Ok(items)
            }
            Request::Descriptors {
                domain,
                descriptors,
            } => {
                if domain.is_empty() {
                    return Err(Invalid::new("domain", "must not be empty"));
                }
                if descriptors.is_empty() {
                    return Err(Invalid::new("descriptors", "must not be empty"));
                }
                if descriptors.len() > MAX_DESCRIPTORS {
                    return Err(Invalid::new(
                        "descriptors",
                        format!("more than {MAX_DESCRIPTORS}"),
                    ));
                }
                let level = rules::get(&self.domains, domain);
                let mut items = scratch.statuses(descriptors.len());
                for (i, d) in descriptors.iter().enumerate() {
                    let at = |f: &str| format!("descriptors[{i}].{f}");
                    // No entries is no error: the reference service's walk finds no rule
                    // for it (OK, no limit), or counts it against its own `limit`.
                    let entries = d.entries();
                    if entries.len() > MAX_ENTRIES {
                        return Err(Invalid::new(
                            at("entries"),
                            format!("more than {MAX_ENTRIES}"),
                        ));
                    }
                    if let Some(j) = entries.clone().position(|(k, _)| k.is_empty()) {
                        return Err(Invalid::new(
                            at(&format!("entries[{j}].key")),
                            "must not be empty",
                        ));
                    }
                    let (key, k) = scratch.key(0);
                    descriptor_key(k, domain, entries.clone());
                    if k.len() > MAX_KEY_BYTES {
                        return Err(Invalid::new(
                            at("entries"),
                            format!("longer than {MAX_KEY_BYTES} bytes in all"),
                        ));
                    }
                    let limit = d.limit().map_err(|m| Invalid::new(at("limit.unit"), m))?;
                    let (rule, unlimited) = match (level, limit) {
                        (None, _) => (None, false),
                        (Some(_), Some((limit, window))) => (
                            Some(
                                self.override_rule(limit, window, backend)
                                    .map_err(|m| Invalid::new(at("limit"), m))?,
                            ),
                            false,
                        ),
                        (Some(level), None) => match rules::resolve(level, entries) {
                            rules::Target::Rule(r) => (Some(RuleRef::InFile(r)), false),
                            rules::Target::None => (None, false),
                            rules::Target::Unlimited => (None, true),
                        },
                    };
                    let mut status = Status::new(rule, key);
                    status.unlimited = unlimited;
                    items.push(status);
                }
                // Envoy's `replaces`: a matched rule switches off the rules it names.
                if self.replacing {
                    let replaced: Vec<String> = items
                        .iter()
                        .filter_map(|s| s.rule.as_ref())
                        .flat_map(|w| w.get(self).spec.replaces.iter().cloned())
                        .collect();
                    for Status { rule: w, .. } in &mut items {
                        if w.as_ref()
                            .is_some_and(|w| replaced.contains(&w.get(self).spec.display))
                        {
                            *w = None;
                        }
                    }
                }
                Ok(items)
            }
        }
    }
}

/// A descriptor's counter key: the domain and entries, each length-prefixed so no two
/// descriptors share a key.
#[inline]
pub(super) fn descriptor_key<'a>(
    key: &mut String,
    domain: &str,
    entries: impl Iterator<Item = (&'a str, &'a str)> + Clone,
) {
    let len = 1
        + domain.len()
        + entries
            .clone()
            .map(|(k, v)| k.len() + v.len() + 8)
            .sum::<usize>()
        + 4;
    key.reserve(len);
    key.push('d');
    let mut push = |s: &str| {
        // One digit, or itoa: through `fmt` the lengths cost a tenth of a decision.
        match u8::try_from(s.len()) {
            Ok(n @ 0..=9) => key.push(char::from(b'0' + n)),
            _ => key.push_str(itoa::Buffer::new().format(s.len())),
        }
        key.push(':');
        key.push_str(s);
    };
    push(domain);
    for (k, v) in entries {
        push(k);
        push(v);
    }
}

impl Scratch {
    pub(super) const fn new() -> Scratch {
        Scratch {
            rules: None,
            statuses: Vec::new(),
            keys: Vec::new(),
            used: 0,
        }
    }

    /// An empty list with room for `n` statuses.
    #[inline]
    pub(super) fn statuses(&mut self, n: usize) -> Vec<Status> {
        self.used = 0;
        let mut list = std::mem::take(&mut self.statuses);
        list.reserve(n);
        list
    }

    /// The next key, empty with room for `n` bytes, and its index.
    #[inline]
    pub(super) fn key(&mut self, n: usize) -> (usize, &mut String) {
        let at = self.used;
        self.used += 1;
        if at == self.keys.len() {
            self.keys.push(String::with_capacity(n));
        }
        let key = &mut self.keys[at];
        key.clear();
        (at, key)
    }

    /// Takes back a decided request's list.
    #[inline]
    pub(super) fn recycle(&mut self, mut statuses: Vec<Status>) {
        statuses.clear();
        if statuses.capacity() <= MAX_DESCRIPTORS {
            self.statuses = statuses;
        }
    }
}
