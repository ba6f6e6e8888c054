//! The part of OpenSSH's `~/.ssh/config` that says where and as whom to log in: `Host`
//! blocks (patterns with `*`, `?` and `!`), `HostName` (with `%h`), `Port`, `User` and
//! `IdentityFile` (with `~` and `%d %u %h %r %p %%`). As in OpenSSH, the first value found
//! for an option wins, except `IdentityFile`, whose values all count, in order; what the
//! URL says beats the file, as the command line does for `ssh`. `Match` blocks are skipped
//! (their conditions need more than a host name), except `Match all`.

use std::path::{Path, PathBuf};

/// Where and as whom to connect, once the URL and the config file have spoken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Endpoint {
    /// The real host name or address (after `HostName`).
    pub host: String,
    pub port: u16,
    pub user: String,
    /// Private keys to offer after the agent's, in order.
    pub identities: Vec<PathBuf>,
}

/// What the config file says for one host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct HostConfig {
    host_name: Option<String>,
    port: Option<u16>,
    user: Option<String>,
    identity_files: Vec<String>,
}

/// What the process knows about its own user, for defaults and `%` tokens.
pub(super) struct Local {
    pub home: Option<PathBuf>,
    pub user: Option<String>,
}

/// Settles the endpoint of `host` (as written in the URL, perhaps an alias), given the URL's
/// port and user, the config file's text (empty if there is none) and the identity files
/// the caller configured (offered first).
pub(super) fn resolve(
    host: &str,
    port: Option<u16>,
    user: Option<&str>,
    config: &str,
    explicit: &[PathBuf],
    local: &Local,
) -> Option<Endpoint> {
    let found = lookup(config, host);
    let real = found
        .host_name
        .map_or(host.to_owned(), |h| expand(&h, &[('h', host)]));
    let port = port.or(found.port).unwrap_or(22);
    let user = user
        .map(str::to_owned)
        .or(found.user)
        .or_else(|| local.user.clone())?;
    let home = local
        .home
        .as_deref()
        .map_or(String::new(), |h| h.display().to_string());
    let port_text = port.to_string();
    let tokens = [
        ('d', home.as_str()),
        ('u', local.user.as_deref().unwrap_or("")),
        ('h', real.as_str()),
        ('r', user.as_str()),
        ('p', port_text.as_str()),
    ];
    let mut identities = explicit.to_vec();
    identities.extend(
        found
            .identity_files
            .iter()
            .map(|f| tilde(&expand(f, &tokens), local)),
    );
    if identities.is_empty() {
        identities = default_identities(local);
    }
    Some(Endpoint {
        host: real,
        port,
        user,
        identities,
    })
}

/// OpenSSH's default keys, tried when no `IdentityFile` is configured.
fn default_identities(local: &Local) -> Vec<PathBuf> {
    let Some(home) = &local.home else {
        return Vec::new();
    };
    ["id_rsa", "id_ecdsa", "id_ed25519"]
        .iter()
        .map(|name| home.join(".ssh").join(name))
        .collect()
}

/// The options of the config text that apply to `alias`.
fn lookup(text: &str, alias: &str) -> HostConfig {
    let mut found = HostConfig::default();
    // Options before the first `Host` line apply to every host.
    let mut active = true;
    for line in text.lines() {
        let Some((keyword, args)) = split_line(line) else {
            continue;
        };
        let first = args.first().cloned();
        match keyword.to_ascii_lowercase().as_str() {
            "host" => active = host_matches(&args, alias),
            "match" => active = args.len() == 1 && args[0].eq_ignore_ascii_case("all"),
            _ if !active => {}
            "hostname" => found.host_name = found.host_name.or(first),
            "user" => found.user = found.user.or(first),
            "port" => {
                found.port = found
                    .port
                    .or_else(|| first?.parse().ok().filter(|p| *p != 0))
            }
            "identityfile" => found.identity_files.extend(first),
            _ => {}
        }
    }
    found
}

/// A config line as its keyword and arguments (`Key value`, `Key=value`, quoted values);
/// `None` for blank lines and comments.
fn split_line(line: &str) -> Option<(String, Vec<String>)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let end = line
        .find(|c: char| c.is_whitespace() || c == '=')
        .unwrap_or(line.len());
    let (keyword, rest) = line.split_at(end);
    let rest = rest.trim_start();
    let rest = rest.strip_prefix('=').unwrap_or(rest);
    Some((keyword.to_owned(), arguments(rest)))
}

/// Whitespace-separated arguments, where `"..."` keeps its spaces.
fn arguments(text: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    args.push(std::mem::take(&mut current));
                }
                any = false;
            }
            c => {
                current.push(c);
                any = true;
            }
        }
    }
    if any {
        args.push(current);
    }
    args
}

/// OpenSSH's pattern-list rule: no `!pattern` may match, and some plain pattern must.
fn host_matches(patterns: &[String], host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    let mut matched = false;
    for pattern in patterns.iter().map(|p| p.to_ascii_lowercase()) {
        match pattern.strip_prefix('!') {
            Some(negated) if wildcard(negated, &host) => return false,
            Some(_) => {}
            None => matched |= wildcard(&pattern, &host),
        }
    }
    matched
}

/// Whether `text` matches `pattern`, where `*` is any run of characters and `?` any one.
pub(super) fn wildcard(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Iterative matching with one backtrack point: the position after the last `*`.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi + 1, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => (pi, ti) = (pi + 1, ti + 1),
            _ => match star {
                Some((sp, st)) => {
                    (pi, ti) = (sp, st + 1);
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Replaces `%c` tokens by their values and `%%` by `%`; unknown tokens stay as written.
fn expand(text: &str, tokens: &[(char, &str)]) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some(t) => match tokens.iter().find(|(name, _)| *name == t) {
                Some((_, value)) => out.push_str(value),
                None => out.extend(['%', t]),
            },
            None => out.push('%'),
        }
    }
    out
}

/// `~/x` → `$HOME/x`.
fn tilde(path: &str, local: &Local) -> PathBuf {
    match (path.strip_prefix("~/"), &local.home) {
        (Some(rest), Some(home)) => home.join(rest),
        _ if path == "~" => local.home.clone().unwrap_or_else(|| PathBuf::from(path)),
        _ => PathBuf::from(path),
    }
}

/// The text of the config file at `path`; empty if there is none. Unreadable is a
/// warning, not a failure: `ssh` too goes on without it.
pub(super) fn read(path: Option<&Path>) -> String {
    let Some(path) = path else {
        return String::new();
    };
    match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            tracing::warn!("sftp: cannot read {}: {e}", path.display());
            String::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
# a comment
Host build  "other name"
    HostName 10.1.2.3
    Port 2200
    User   builder
    IdentityFile ~/.ssh/build_%r_%p

Host *.example.com !secret.example.com
    User=web
    IdentityFile "/keys/with space"
    IdentityFile /keys/second

Match exec "true"
    User nobody-from-match

Host *
    User fallback
    Port 2222
    HostName %h.internal
"#;

    fn local() -> Local {
        Local {
            home: Some(PathBuf::from("/home/me")),
            user: Some("me".into()),
        }
    }

    fn resolve_alias(host: &str) -> Endpoint {
        resolve(host, None, None, CONFIG, &[], &local()).unwrap()
    }

    #[test]
    fn aliases_take_the_first_value_of_each_option() {
        let e = resolve_alias("build");
        assert_eq!(
            (e.host.as_str(), e.port, e.user.as_str()),
            ("10.1.2.3", 2200, "builder")
        );
        assert_eq!(
            e.identities,
            [PathBuf::from("/home/me/.ssh/build_builder_2200")]
        );
        // A quoted pattern with a space names the same block.
        assert_eq!(resolve_alias("other name").host, "10.1.2.3");
    }

    #[test]
    fn patterns_negation_and_catch_all() {
        let e = resolve_alias("www.example.com");
        assert_eq!(
            (e.host.as_str(), e.port, e.user.as_str()),
            ("www.example.com.internal", 2222, "web")
        );
        assert_eq!(
            e.identities,
            [
                PathBuf::from("/keys/with space"),
                PathBuf::from("/keys/second")
            ]
        );
        let secret = resolve_alias("secret.example.com");
        assert_eq!(secret.user, "fallback");
        assert_eq!(secret.identities, default_identities(&local()));
    }

    #[test]
    fn the_url_beats_the_file_and_explicit_keys_come_first() {
        let explicit = [PathBuf::from("/k/first")];
        let e = resolve(
            "build",
            Some(22),
            Some("alice"),
            CONFIG,
            &explicit,
            &local(),
        )
        .unwrap();
        assert_eq!((e.port, e.user.as_str()), (22, "alice"));
        assert_eq!(e.identities[0], PathBuf::from("/k/first"));
        assert_eq!(
            e.identities[1],
            PathBuf::from("/home/me/.ssh/build_alice_22")
        );
    }

    #[test]
    fn without_a_config_the_local_user_and_default_keys() {
        let e = resolve("h", None, None, "", &[], &local()).unwrap();
        assert_eq!((e.host.as_str(), e.port, e.user.as_str()), ("h", 22, "me"));
        assert_eq!(e.identities[2], PathBuf::from("/home/me/.ssh/id_ed25519"));
        let nobody = Local {
            home: None,
            user: None,
        };
        assert_eq!(resolve("h", None, None, "", &[], &nobody), None);
    }

    #[test]
    fn wildcards() {
        assert!(wildcard("*", ""));
        assert!(wildcard("a*c", "abbbc"));
        assert!(wildcard("a?c", "abc"));
        assert!(wildcard("*.example.com", "x.y.example.com"));
        assert!(!wildcard("*.example.com", "example.com"));
        assert!(!wildcard("a?c", "ac"));
        assert!(wildcard("[127.0.0.1]:*", "[127.0.0.1]:2222"));
    }
}
