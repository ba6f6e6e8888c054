//! Property tests of the SFTP driver's parsers of the user's files, which may come from
//! anywhere (a shared home, a copied config): `~/.ssh/config` and `known_hosts`, with
//! hostile keywords, quotes, patterns, `%` tokens and keys whose encoded lengths lie
//! (issue 14).

use base64::Engine;
use proptest::prelude::*;
use roam_testkit::fuzz::{bounded, config, mutated, mutated_text, name, number};
use russh::keys::{parse_public_key_base64, PublicKey};

use super::known_hosts;
use super::ssh_config::{jump_host, wildcard, Local, Resolver};

/// Real keys to mutate: the key parser is reached only through valid base64.
const KEYS: [&str; 2] = [
    "AAAAC3NzaC1lZDI1NTE5AAAAIK0gmsPmw1gfkUTRV+4YURst6ey8m0bZPw0ePguWB1CM",
    "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBDGRLhcedrL3uhgzhWiSMvudxrMIel3a6wxBIv3kLb698nMFZYEHh6fKHYgx6wd7Nx40KEDmmgeI4tQCj7AaZSI=",
];

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// roam's parser on `text`, in a file of its own (removed when the case ends).
fn resolve_text(text: &str, host: &str, port: Option<u16>) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!(
        "roam-fuzz-sshcfg-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("config");
    std::fs::write(&file, text).unwrap();
    let resolver = Resolver::parser_for_tests(file, Local::for_tests(&dir, "u"));
    let found = resolver.resolve(host, port, None).map(|e| {
        // Never port 0.
        assert!(e.port != 0);
    });
    std::fs::remove_dir_all(&dir).unwrap();
    found
}

fn config_line() -> impl Strategy<Value = String> {
    let keyword = prop_oneof![
        Just("Host"),
        Just("Match"),
        Just("HostName"),
        Just("User"),
        Just("Port"),
        Just("IdentityFile"),
        Just("ProxyJump"),
        Just("ProxyCommand"),
        Just("Include"),
        Just("UserKnownHostsFile"),
        Just("StrictHostKeyChecking"),
        Just("CertificateFile"),
        Just("IdentityAgent"),
        Just("#"),
    ];
    let value = prop_oneof![
        name(),
        number(),
        "[a-z*?!.%~/\" ]{0,16}",
        "%[a-zA-Z%]{0,4}",
        "\\$\\{[A-Z_]{0,6}\\}?[a-z/]{0,4}",
        Just("all".to_string()),
        Just("!all".to_string()),
        Just("host".to_string()),
        Just("user".to_string()),
        Just("final".to_string()),
        Just("none".to_string()),
        Just("config".to_string()),
        Just("*".to_string()),
        "[a-z]{1,6}@[a-z]{1,6}:[0-9]{1,5},[a-z]{1,4}",
    ];
    let sep = prop_oneof![Just(" "), Just("="), Just(" = "), Just("\t")];
    (keyword, sep, proptest::collection::vec(value, 0..4))
        .prop_map(|(k, s, v)| format!("  {k}{s}{}", v.join(" ")))
}

fn config_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(config_line(), 0..24).prop_map(|l| l.join("\n"))
}

/// A key: a real one re-encoded after its bytes (lengths included) were mutated.
fn key_text() -> impl Strategy<Value = String> {
    let raw = proptest::sample::select(KEYS.to_vec()).prop_map(|k| b64().decode(k).unwrap());
    prop_oneof![
        mutated(raw).prop_map(|bytes| b64().encode(bytes)),
        "[A-Za-z0-9+/=]{0,80}",
    ]
}

fn known_hosts_text() -> impl Strategy<Value = String> {
    let hosts = prop_oneof![
        "[a-z.*?!,\\[\\]:0-9]{1,24}",
        "\\|1\\|[A-Za-z0-9+/=]{0,30}\\|[A-Za-z0-9+/=]{0,30}",
    ];
    let marker = prop_oneof![
        Just(""),
        Just("@revoked "),
        Just("@cert-authority "),
        Just("@x ")
    ];
    let line = (
        marker,
        hosts,
        "(ssh-ed25519|ecdsa-sha2-nistp256|x)",
        key_text(),
    )
        .prop_map(|(m, h, t, k)| format!("{m}{h} {t} {k}"));
    proptest::collection::vec(line, 0..12).prop_map(|l| l.join("\n"))
}

fn any_key() -> PublicKey {
    parse_public_key_base64(KEYS[0]).unwrap()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn ssh_configs_resolve_safely(text in mutated_text(config_text()), host in "[a-z.*]{1,12}", port in proptest::option::of(any::<u16>())) {
        // An endpoint or a reason, never a panic or a loop (a file that includes itself,
        // a host that jumps through itself).
        let port = port.filter(|p| *p != 0);
        let _ = bounded(text.len(), || resolve_text(&text, &host, port));
    }

    #[test]
    fn jump_hosts_parse_safely(spec in "(ssh://)?([a-z@\\[\\]:]{0,6}@)?\\[?[a-z0-9.:]{0,12}\\]?(:[0-9]{0,7})?") {
        if let Ok((_, _, port)) = jump_host(&spec) {
            prop_assert!(port != Some(0));
        }
    }

    #[test]
    fn wildcards_never_panic(pattern in "[a-c*?]{0,24}", text in "[a-c]{0,48}") {
        let matched = wildcard(&pattern, &text);
        // A pattern without wildcards matches only itself.
        if !pattern.contains(['*', '?']) {
            prop_assert_eq!(matched, pattern == text);
        }
    }

    #[test]
    fn known_hosts_files_parse_safely(text in mutated_text(known_hosts_text()), name in "[a-z.\\[\\]:0-9]{1,16}") {
        bounded(text.len(), || {
            known_hosts::check(&text, &name, &any_key());
            known_hosts::known_algorithms(&text, &name);
        });
    }

    #[test]
    fn mutated_keys_parse_safely(key in key_text()) {
        bounded(key.len(), || parse_public_key_base64(&key).ok());
    }
}
