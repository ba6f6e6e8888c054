//! Property tests of the SFTP driver's parsers of the user's files, which may come from
//! anywhere (a shared home, a copied config): `~/.ssh/config` and `known_hosts`, with
//! hostile keywords, quotes, patterns, `%` tokens and keys whose encoded lengths lie
//! (issue 14).

use std::path::PathBuf;

use base64::Engine;
use proptest::prelude::*;
use roam_testkit::fuzz::{bounded, config, mutated, mutated_text, name, number};
use russh::keys::{parse_public_key_base64, PublicKey};

use super::known_hosts;
use super::ssh_config::{resolve, wildcard, Local};

/// Real keys to mutate: the key parser is reached only through valid base64.
const KEYS: [&str; 2] = [
    "AAAAC3NzaC1lZDI1NTE5AAAAIK0gmsPmw1gfkUTRV+4YURst6ey8m0bZPw0ePguWB1CM",
    "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBDGRLhcedrL3uhgzhWiSMvudxrMIel3a6wxBIv3kLb698nMFZYEHh6fKHYgx6wd7Nx40KEDmmgeI4tQCj7AaZSI=",
];

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

fn local() -> Local {
    Local {
        home: Some(PathBuf::from("/home/u")),
        user: Some("u".into()),
    }
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
        Just("#"),
    ];
    let value = prop_oneof![
        name(),
        number(),
        "[a-z*?!.%~/\" ]{0,16}",
        "%[a-z%]{0,4}",
        Just("all".to_string()),
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
        let found = bounded(text.len(), || resolve(&host, port, None, &text, &[], &local()));
        // With a local user to fall back on there is always an endpoint, never on port 0.
        let endpoint = found.expect("an endpoint");
        prop_assert!(endpoint.port != 0 || port == Some(0));
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
