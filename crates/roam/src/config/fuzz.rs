//! Property tests of `roam.toml` reading: arbitrary text, and files in the shape of a real
//! configuration with hostile values (huge and negative numbers, odd T_read texts, globs,
//! deep nesting), then mutated, parse to a configuration or an error; a parsed one yields
//! its settings without a panic, and a T_read rule's glob answers quickly (issue 14).

use std::time::{Duration, Instant};

use proptest::prelude::*;
use roam_testkit::fuzz::{bounded, config, mutated_text, name, number};

use super::Config;

/// A TOML value as a user might mistype it.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        number(),
        number().prop_map(|n| format!("\"{n}\"")),
        "\"[0-9 ]{0,6}(s|%|%%|h)?\"",
        name().prop_map(|n| format!("{n:?}")),
        Just("true".to_string()),
        Just("[\"a\", 1]".to_string()),
        Just("{ x = 1 }".to_string()),
        Just("1e400".to_string()),
    ]
}

/// A glob, sometimes of many stars (each one a place to backtrack).
fn glob() -> impl Strategy<Value = String> {
    prop_oneof![
        "\"(/|\\*\\*|\\*|[a-z]{1,3}|\\.)*\"",
        "\"(/\\*\\*){2,12}/[a-z]\"",
        "\"/p/(\\*a){2,12}\\*b\"",
    ]
}

/// A `roam.toml` with every section, each setting's value hostile.
fn file() -> impl Strategy<Value = String> {
    let cache = proptest::collection::vec(
        (
            prop_oneof![
                Just("dir"),
                Just("t_read"),
                Just("max_size"),
                Just("t_write"),
                Just("settle"),
                Just("policy"),
                Just("policy_args"),
                Just("readahead"),
                Just("readahead_args")
            ],
            value(),
        ),
        0..6,
    );
    let rules = proptest::collection::vec((glob(), value()), 0..6);
    let resolver = proptest::collection::vec((glob(), value(), value()), 0..3);
    let nesting = prop_oneof![Just("["), Just("{a="), Just("[[")];
    (cache, rules, resolver, nesting, 0usize..400).prop_map(
        |(cache, rules, resolver, nest, depth)| {
            let mut text = String::from("[cache]\n");
            cache
                .iter()
                .for_each(|(k, v)| text += &format!("{k} = {v}\n"));
            text += "[t_read]\n";
            rules
                .iter()
                .for_each(|(g, v)| text += &format!("{g} = {v}\n"));
            for (g, e, t) in &resolver {
                text += &format!("[[resolver]]\nglob = {g}\next = {e}\ntech = {t}\n");
            }
            text += &format!(
                "[http]\nconnect_timeout = {}\n",
                nest.repeat(depth.saturating_sub(300))
            );
            text += "[mounts]\n\"/p\" = \"http://h/\"\n[tls.\"h:1\"]\ninsecure = true\n";
            text
        },
    )
}

/// Parses `text` and asks the parsed configuration for the settings that need no files.
fn check(text: &str) {
    let Ok(c) = bounded(text.len(), || toml::from_str::<Config>(text)) else {
        return;
    };
    let _ = (
        c.max_cache_bytes(),
        c.t_write(),
        c.settle_setting(),
        c.http_timeouts(),
    );
    let Ok(t) = c.consistency() else {
        return;
    };
    // Globs are matched against every name a program uses: never slow, whatever they are.
    let start = Instant::now();
    t.t_read(&format!("/{}", "a/".repeat(40)));
    t.t_read(&format!("/p/{}.c", "a".repeat(200)));
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "a glob took {:?}",
        start.elapsed()
    );
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_text_parses_safely(text in any::<String>()) {
        check(&text);
    }

    #[test]
    fn mutated_files_parse_safely(text in mutated_text(file())) {
        check(&text);
    }
}
