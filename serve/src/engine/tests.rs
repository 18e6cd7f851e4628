use std::time::Duration;

use slidegate::clock::ManualClock;

use super::request::{MAX_DESCRIPTORS, MAX_ENTRIES, MAX_KEY_BYTES};
use super::rule_set::MAX_OVERRIDES;
use super::*;
use crate::rules::{self, toml};

const RULES: &str = r#"
[rules.user]
limit = 3
window = "10s"
granularity = "1s"

[rules.tenant]
limit = 5
window = "10s"
granularity = "1s"

[rules.trial]
limit = 1
window = "10s"
granularity = "1s"
shadow = true

[keys]
default = ["user"]
overrides = { "vip" = ["tenant"] }

[[descriptors]]
domain = "api"
match = ["user"]
rule = "user"

[[descriptors]]
domain = "api"
match = ["tenant"]
rule = "tenant"

[[descriptors]]
domain = "api"
match = ["plan=trial"]
rule = "trial"
"#;

fn engine(text: &str) -> (Engine, ManualClock) {
    let clock = ManualClock::new();
    let backend = Backend::Memory {
        clock: ServeClock::Manual(clock.clone()),
        max_keys: 1000,
    };
    (
        Engine::new(toml::parse(text).unwrap(), backend).unwrap(),
        clock,
    )
}

fn descriptors<'a>(list: &[&[(&'a str, &'a str)]]) -> Request<'a, Pairs<'a>> {
    Request::Descriptors {
        domain: "api",
        descriptors: list
            .iter()
            .map(|e| Pairs {
                entries: e.to_vec(),
                limit: None,
            })
            .collect::<Vec<_>>()
            .into(),
    }
}

/// (allowed, [(rule display or "-", over, shadow_over, remaining)]).
type Summary = (bool, Vec<(String, bool, bool, u64)>);

fn check(e: &Engine, r: &Request<'_, Pairs<'_>>, cost: u64) -> Result<Summary, Invalid> {
    e.decide_local(r, cost, Judge::Charge, |set, o| {
        o.map(|o| {
            let s = o
                .statuses
                .iter()
                .map(|s| {
                    let name = s
                        .rule
                        .as_ref()
                        .map_or("-".into(), |w| w.get(set).spec.display.clone());
                    (name, s.over, s.shadow_over, s.remaining)
                })
                .collect();
            (o.allowed, s)
        })
    })
}

fn st(name: &str, over: bool, shadow_over: bool, remaining: u64) -> (String, bool, bool, u64) {
    (name.into(), over, shadow_over, remaining)
}

#[test]
fn one_descriptor_admits_its_limit_then_denies_until_the_window_moves() {
    let (e, clock) = engine(RULES);
    let r = descriptors(&[&[("user", "alice")]]);
    for left in [2, 1, 0] {
        assert_eq!(
            check(&e, &r, 1).unwrap(),
            (true, vec![st("user", false, false, left)])
        );
    }
    assert_eq!(
        check(&e, &r, 1).unwrap(),
        (false, vec![st("user", true, false, 0)])
    );
    let wait = e.decide_local(&r, 1, Judge::Charge, |_, o| o.unwrap().retry_after.unwrap());
    assert!(
        wait > Duration::from_secs(9) && wait <= Duration::from_secs(11),
        "{wait:?}"
    );
    // Another value of the same key is another counter.
    assert!(check(&e, &descriptors(&[&[("user", "bob")]]), 1).unwrap().0);
    clock.advance(wait);
    assert!(check(&e, &r, 1).unwrap().0);
}

/// Denied by one rule, charged to none: the tenant keeps its room.
#[test]
fn several_descriptors_are_all_or_nothing() {
    let (e, _clock) = engine(RULES);
    let both = descriptors(&[&[("tenant", "t1")], &[("user", "alice")]]);
    assert_eq!(
        check(&e, &both, 3).unwrap(),
        (
            true,
            vec![st("tenant", false, false, 2), st("user", false, false, 0)]
        )
    );
    assert_eq!(
        check(&e, &both, 1).unwrap(),
        (
            false,
            vec![st("tenant", false, false, 2), st("user", true, false, 0)]
        )
    );
    assert_eq!(
        check(&e, &descriptors(&[&[("tenant", "t1")]]), 2)
            .unwrap()
            .1[0]
            .3,
        0
    );
}

#[test]
fn shadow_rules_decide_but_never_deny() {
    let (e, _clock) = engine(RULES);
    let r = descriptors(&[&[("plan", "trial")], &[("user", "u")]]);
    assert_eq!(
        check(&e, &r, 1).unwrap(),
        (
            true,
            vec![st("trial", false, false, 0), st("user", false, false, 2)]
        )
    );
    assert_eq!(
        check(&e, &r, 1).unwrap(),
        (
            true,
            vec![st("trial", false, true, 0), st("user", false, false, 1)]
        )
    );
    // A cost above the shadow rule's limit: would never pass, and still passes.
    assert_eq!(
        check(&e, &r, 2).unwrap(),
        (
            false,
            vec![st("trial", false, true, 0), st("user", true, false, 1)]
        )
    );
}

#[test]
fn unknown_domains_unmatched_descriptors_and_huge_costs() {
    let (e, _clock) = engine(RULES);
    let unknown = Request::Descriptors {
        domain: "nowhere",
        descriptors: vec![Pairs {
            entries: vec![("user", "a")],
            limit: None,
        }]
        .into(),
    };
    assert_eq!(
        check(&e, &unknown, 1000).unwrap(),
        (true, vec![st("-", false, false, 0)])
    );
    assert_eq!(
        check(&e, &descriptors(&[&[("colour", "red")]]), 1).unwrap(),
        (true, vec![st("-", false, false, 0)])
    );
    // Above the limit: never admitted, no retry time, nothing charged elsewhere.
    let r = descriptors(&[&[("user", "big")], &[("tenant", "t")]]);
    e.decide_local(&r, 4, Judge::Charge, |_, o| {
        let o = o.unwrap();
        assert!(!o.allowed && o.retry_after.is_none());
        assert!(o.statuses[0].over && o.statuses[0].retry_after.is_none());
        assert!(!o.statuses[1].over);
        assert_eq!(o.statuses[1].remaining, 5);
    });
}

/// A rule and key listed twice is charged the sum (the library's `check_all`); a sum
/// above the limit is never admitted. It panicked the decision ("in-memory limiters
/// never fail") when the sum went to `check_all`, which refuses it as a cost error.
#[test]
fn a_rule_and_key_listed_twice_is_charged_the_sum() {
    let (e, _clock) = engine(RULES);
    let twice = descriptors(&[&[("user", "a")], &[("user", "a")]]);
    assert_eq!(
        check(&e, &twice, 1).unwrap(),
        (
            true,
            vec![st("user", false, false, 1), st("user", false, false, 1)]
        )
    );
    e.decide_local(&twice, 2, Judge::Charge, |_, o| {
        let o = o.unwrap();
        assert!(!o.allowed && o.retry_after.is_none());
        assert!(o.statuses.iter().all(|s| s.over && s.retry_after.is_none()));
        assert_eq!(o.statuses[0].remaining, 1, "nothing charged");
    });
    let named_twice = Request::Key {
        key: "b",
        rules: Some(vec!["user", "user"]),
    };
    assert!(!check(&e, &named_twice, 2).unwrap().0);
    assert_eq!(
        check(&e, &named_twice, 1).unwrap(),
        (
            true,
            vec![st("user", false, false, 1), st("user", false, false, 1)]
        )
    );
    // The same value under another rule, or another value, is another limit.
    let apart = descriptors(&[&[("user", "c")], &[("tenant", "c")], &[("user", "d")]]);
    assert!(check(&e, &apart, 3).unwrap().0);
}

/// One request cannot make the server build huge keys, many descriptors or many
/// override rules: each bound is a 400 naming the field.
#[test]
fn requests_beyond_the_bounds_are_invalid() {
    let (e, _clock) = engine(RULES);
    let field = |r: &Request<'_, Pairs<'_>>| check(&e, r, 1).unwrap_err().field;
    let long = "x".repeat(MAX_KEY_BYTES);
    assert_eq!(
        field(&Request::Key {
            key: &long,
            rules: None
        }),
        "key"
    );
    assert!(
        check(
            &e,
            &Request::Key {
                key: &long[1..],
                rules: None
            },
            1
        )
        .is_ok()
    );
    assert_eq!(
        field(&descriptors(&[&[("user", &long)]])),
        "descriptors[0].entries"
    );
    let one: &[(&str, &str)] = &[("user", "u")];
    assert_eq!(
        field(&descriptors(&vec![one; MAX_DESCRIPTORS + 1])),
        "descriptors"
    );
    assert!(check(&e, &descriptors(&vec![one; MAX_DESCRIPTORS]), 1).is_ok());
    let deep = vec![("k", "v"); MAX_ENTRIES + 1];
    assert_eq!(
        field(&descriptors(&[&[("user", "u")], &deep])),
        "descriptors[1].entries"
    );
    let own = |limit: u64| Request::Descriptors {
        domain: "api",
        descriptors: vec![Pairs {
            entries: vec![("user", "o")],
            limit: Some((limit, Duration::from_secs(1))),
        }]
        .into(),
    };
    for limit in 1..=MAX_OVERRIDES as u64 {
        assert!(check(&e, &own(limit), 1).is_ok());
    }
    let err = check(&e, &own(MAX_OVERRIDES as u64 + 1), 1).unwrap_err();
    assert_eq!(err.field, "descriptors[0].limit");
    assert!(err.message.contains("distinct limit overrides"), "{err:?}");
    // An override already made is still served.
    assert!(check(&e, &own(1), 1).is_ok());
    assert_eq!(field(&own(0)), "descriptors[0].limit");
}

#[test]
fn keys_use_the_default_an_override_or_the_named_rules() {
    let (e, _clock) = engine(RULES);
    let key = |k, rules| Request::Key { key: k, rules };
    assert_eq!(
        check(&e, &key("a", None), 1).unwrap(),
        (true, vec![st("user", false, false, 2)])
    );
    assert_eq!(
        check(&e, &key("vip", None), 1).unwrap(),
        (true, vec![st("tenant", false, false, 4)])
    );
    assert_eq!(
        check(&e, &key("a", Some(vec!["tenant", "user"])), 1).unwrap(),
        (
            true,
            vec![st("tenant", false, false, 4), st("user", false, false, 1)]
        )
    );
    // Key "a" and descriptor user=a are different counters.
    assert_eq!(
        check(&e, &descriptors(&[&[("user", "a")]]), 1).unwrap().1[0].3,
        2
    );
    assert_eq!(
        check(&e, &key("a", Some(vec!["user", "nope"])), 1).unwrap_err(),
        Invalid::new("rules[1]", "no rule named \"nope\"")
    );
    assert_eq!(check(&e, &key("a", None), 0).unwrap_err().field, "cost");
}

#[test]
fn a_reload_keeps_the_counts_of_unchanged_rules_only() {
    let (e, _clock) = engine(RULES);
    let r = descriptors(&[&[("tenant", "t")], &[("user", "u")]]);
    assert!(check(&e, &r, 2).unwrap().0);
    // Same user rule; the tenant's limit changes.
    let changed = RULES.replacen("limit = 5", "limit = 50", 1);
    assert_eq!(e.reload(toml::parse(&changed).unwrap()), Ok(2));
    assert_eq!(
        check(&e, &r, 1).unwrap(),
        (
            true,
            vec![st("tenant", false, false, 49), st("user", false, false, 0)]
        )
    );
}

#[test]
fn replaces_and_limit_overrides() {
    let yaml = "domain: api\ndescriptors:\n  - key: a\n    rate_limit: { unit: second, requests_per_unit: 1, name: a }\n  - key: b\n    rate_limit: { unit: second, requests_per_unit: 5, replaces: [{name: a}] }\n";
    let backend = Backend::Memory {
        clock: ServeClock::Manual(ManualClock::new()),
        max_keys: 10,
    };
    let e = Engine::new(rules::envoy::parse(yaml).unwrap(), backend).unwrap();
    let r = descriptors(&[&[("a", "1")], &[("b", "1")]]);
    for _ in 0..3 {
        assert_eq!(check(&e, &r, 1).unwrap().1[0], st("-", false, false, 0));
    }
    let over = Request::Descriptors {
        domain: "api",
        descriptors: vec![Pairs {
            entries: vec![("zzz", "1")],
            limit: Some((2, Duration::from_secs(60))),
        }]
        .into(),
    };
    assert_eq!(
        check(&e, &over, 1).unwrap(),
        (true, vec![st("override-2-per-minute", false, false, 1)])
    );
    assert!(!check(&e, &over, 2).unwrap().0);
}

/// An answer, every field: (allowed, retry_after, [(over, shadow_over, remaining,
/// reset_after, retry_after)]).
type Full = (
    bool,
    Option<Duration>,
    Vec<(bool, bool, u64, Duration, Option<Duration>)>,
);

fn full(o: &Outcome) -> Full {
    (
        o.allowed,
        o.retry_after,
        o.statuses
            .iter()
            .map(|s| {
                (
                    s.over,
                    s.shadow_over,
                    s.remaining,
                    s.reset_after,
                    s.retry_after,
                )
            })
            .collect(),
    )
}

/// The one-status path (`decide_one`) answers as the general decision (`decide`) does: twin
/// engines, one deciding each way, get the same requests at the same times (every mode,
/// costs up to the limit, admitted and denied) and give the same answer to the last field;
/// requests it must leave to `decide` (a shadow rule, a cost above the limit, no rule) it
/// leaves untouched.
#[test]
fn the_one_status_path_answers_as_the_general_decision() {
    let modes = [
        ("strict", "1s"),
        ("strict-marked", "1s"),
        ("weighted", "1s"),
        ("exact-log", "1s"),
        ("fixed-window", "10s"),
        ("gcra", "1s"),
    ];
    let mut text = String::new();
    for (mode, granularity) in modes {
        text.push_str(&format!(
            "[rules.{mode}]\nlimit = 3\nwindow = \"10s\"\ngranularity = \"{granularity}\"\nmode = \"{mode}\"\n\n[[descriptors]]\ndomain = \"api\"\nmatch = [\"{mode}\"]\nrule = \"{mode}\"\n\n"
        ));
    }
    text.push_str("[rules.trial]\nlimit = 1\nwindow = \"10s\"\nshadow = true\n\n[[descriptors]]\ndomain = \"api\"\nmatch = [\"trial\"]\nrule = \"trial\"\n");
    let (one, one_clock) = engine(&text);
    let (general, general_clock) = engine(&text);
    let decide_general = |set: &RuleSet, items: Vec<Status>, keys: &[String], cost| {
        let decision = pin!(decide(set, items, keys, cost, Judge::Charge));
        let Poll::Ready(o) = decision.poll(&mut Context::from_waker(Waker::noop())) else {
            unreachable!("in-memory limiters never wait")
        };
        o.unwrap()
    };
    let (mut fast, mut denied, mut left) = (0, 0, 0);
    for step in 0..192u64 {
        let key = [
            "strict",
            "strict-marked",
            "weighted",
            "exact-log",
            "fixed-window",
            "gcra",
            "trial",
            "none",
        ][(step / 12) as usize % 8];
        let cost = [1, 1, 2, 1, 3, 4][step as usize % 6];
        let request = descriptors(&[&[(key, "a")]]);
        let (set_a, set_b) = (one.rules(), general.rules());
        let (mut scratch_a, mut scratch_b) = (Scratch::new(), Scratch::new());
        let mut items = set_a
            .resolve(&request, cost, &one.backend, &mut scratch_a)
            .unwrap();
        let items_b = set_b
            .resolve(&request, cost, &general.backend, &mut scratch_b)
            .unwrap();
        let expected = decide_general(&set_b, items_b, &scratch_b.keys, cost);
        match decide_one(&set_a, &mut items, &scratch_a.keys, cost, Judge::Charge) {
            Some(o) => {
                fast += 1;
                denied += usize::from(!o.allowed);
                assert!(key != "trial" && key != "none" && cost <= 3, "{key} {cost}");
                assert_eq!(full(&o), full(&expected), "step {step}: {key} cost {cost}");
            }
            None => {
                left += 1;
                assert!(key == "trial" || key == "none" || cost > 3, "{key} {cost}");
                let o = decide_general(&set_a, items, &scratch_a.keys, cost);
                assert_eq!(full(&o), full(&expected), "step {step}: {key} cost {cost}");
            }
        }
        let pause = Duration::from_millis([100, 300, 700, 2900][step as usize % 4]);
        one_clock.advance(pause);
        general_clock.advance(pause);
    }
    assert!(
        fast > 50 && denied > 20 && left > 40,
        "{fast} on the one-status path ({denied} denied), {left} left"
    );
}
