//! `~/.netrc`, where ftp(1), curl and friends keep logins: `machine HOST login USER
//! password PASS` entries and one `default` entry, as whitespace-separated tokens. Tokens
//! may be double-quoted (with `\` escapes), as curl accepts; `macdef` bodies (ftp(1)
//! macros, up to the next blank line) and `account` values are skipped. Shared by every
//! driver that logs in with a user and password (FTP, HTTP, WebDAV).
//!
//! The file is `$NETRC` when set (curl 8.16 and later, GNU ftp), else `$HOME/.netrc`. A
//! password in a file that others may read is refused, as ftp(1) refuses it: whoever can
//! read the file has the password already, and the user should learn so.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The netrc file roam reads: `$NETRC` when set and not empty, else `$HOME/.netrc`.
pub fn default_path() -> Option<PathBuf> {
    match std::env::var_os("NETRC") {
        Some(file) if !file.is_empty() => Some(PathBuf::from(file)),
        _ => std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".netrc")),
    }
}

/// The entry of the netrc file at `path` for `host` (and `login`, when the URL names one;
/// see [`lookup`]). A missing file has none; an unreadable one has none and says so in
/// the log. A password in a file readable by its group or others is dropped, with a
/// warning, and the login kept.
pub(crate) fn read(path: &Path, host: &str, login: Option<&str>) -> Option<Credentials> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!("cannot read {}: {e}", path.display());
            return None;
        }
    };
    let mut found = lookup(&text, host, login)?;
    if found.password.is_some() && readable_by_others(path) {
        tracing::warn!(
            "{}: the password for {host} is not used: the file is readable by others (chmod 600 {})",
            path.display(),
            path.display()
        );
        found.password = None;
    }
    Some(found)
}

/// Where an entry found in `file` came from, for `roam doctor`: the file, the login, and
/// whether it has a password (never the password).
pub(crate) fn describe(file: &Path, entry: &Credentials) -> String {
    format!(
        "{}: login {}, {}",
        file.display(),
        entry.login.as_deref().unwrap_or("(none)"),
        if entry.password.is_some() {
            "with a password"
        } else {
            "no password"
        }
    )
}

/// Whether anyone but the owner may read `path` (group or other read bits).
fn readable_by_others(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.mode() & 0o044 != 0)
}

/// A login found in the file. Either part may be missing from an entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub login: Option<String>,
    pub password: Option<String>,
}

/// One `machine` entry, or the `default` entry (`host: None`).
struct Entry {
    host: Option<String>,
    credentials: Credentials,
}

/// The credentials for `host` (compared without case): the first `machine` entry of that
/// host whose login is `login` (any login when `None`), else the `default` entry.
pub(crate) fn lookup(text: &str, host: &str, login: Option<&str>) -> Option<Credentials> {
    let entries = parse(text);
    let login_fits = |e: &&Entry| login.is_none() || e.credentials.login.as_deref() == login;
    let machine = entries
        .iter()
        .filter(|e| {
            e.host
                .as_deref()
                .is_some_and(|h| h.eq_ignore_ascii_case(host))
        })
        .find(login_fits);
    let default = || entries.iter().filter(|e| e.host.is_none()).find(login_fits);
    machine.or_else(default).map(|e| e.credentials.clone())
}

/// Every entry of the file, in order. Tokens outside an entry are ignored, as ftp(1) does.
fn parse(text: &str) -> Vec<Entry> {
    let mut lexer = Lexer { rest: text };
    let mut entries: Vec<Entry> = Vec::new();
    while let Some(token) = lexer.token() {
        match token.as_str() {
            "machine" => match lexer.token() {
                Some(host) => entries.push(Entry {
                    host: Some(host),
                    credentials: Credentials::default(),
                }),
                // `machine` as the file's last word names nothing.
                None => break,
            },
            "default" => entries.push(Entry {
                host: None,
                credentials: Credentials::default(),
            }),
            "login" | "password" => {
                let value = lexer.token();
                if let Some(entry) = entries.last_mut() {
                    let slot = match token.as_str() {
                        "login" => &mut entry.credentials.login,
                        _ => &mut entry.credentials.password,
                    };
                    *slot = value;
                }
            }
            "account" => {
                lexer.token();
            }
            "macdef" => lexer.skip_macro(),
            _ => {}
        }
    }
    entries
}

/// Splits the file into tokens.
struct Lexer<'a> {
    rest: &'a str,
}

impl<'a> Lexer<'a> {
    /// The next token, unquoted; `None` at the end of the file.
    fn token(&mut self) -> Option<String> {
        self.rest = self.rest.trim_start();
        if self.rest.is_empty() {
            return None;
        }
        if let Some(quoted) = self.rest.strip_prefix('"') {
            return Some(self.quoted(quoted));
        }
        let end = self
            .rest
            .find(char::is_whitespace)
            .unwrap_or(self.rest.len());
        let (token, rest) = self.rest.split_at(end);
        self.rest = rest;
        Some(token.to_owned())
    }

    /// A `"..."` token whose opening quote is already consumed; `\x` stands for `x`. An
    /// unterminated quote runs to the end of the file.
    fn quoted(&mut self, body: &'a str) -> String {
        let mut value = String::new();
        let mut chars = body.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.rest = &body[i + 1..];
                    return value;
                }
                '\\' => value.extend(chars.next().map(|(_, escaped)| escaped)),
                _ => value.push(c),
            }
        }
        self.rest = "";
        value
    }

    /// Skips a `macdef NAME` line and the macro body after it, which ends at a blank line.
    fn skip_macro(&mut self) {
        let after_name = self.rest.find('\n').map_or("", |i| &self.rest[i + 1..]);
        let mut rest = after_name;
        while let Some((line, more)) = rest.split_once('\n') {
            rest = more;
            if line.trim().is_empty() {
                self.rest = rest;
                return;
            }
        }
        self.rest = "";
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(login: &str, password: &str) -> Option<Credentials> {
        Some(Credentials {
            login: Some(login.into()),
            password: Some(password.into()),
        })
    }

    const FILE: &str = "
machine ftp.example.org login alice password s3cret
machine ftp.example.org
    login bob
    password \"two words \\\" quoted\"
machine other.example.org login carol
default login anonymous password guest@
";

    #[test]
    fn machines_match_by_host_and_login() {
        assert_eq!(
            lookup(FILE, "ftp.example.org", None),
            creds("alice", "s3cret")
        );
        assert_eq!(
            lookup(FILE, "FTP.Example.ORG", Some("bob")),
            creds("bob", "two words \" quoted")
        );
        assert_eq!(
            lookup(FILE, "other.example.org", None),
            Some(Credentials {
                login: Some("carol".into()),
                password: None
            })
        );
    }

    #[test]
    fn default_entry_is_the_fallback() {
        assert_eq!(
            lookup(FILE, "unknown.example.org", None),
            creds("anonymous", "guest@")
        );
        // A login the machine entries do not have falls back to default only if it fits.
        assert_eq!(lookup(FILE, "ftp.example.org", Some("dave")), None);
        assert_eq!(
            lookup(FILE, "ftp.example.org", Some("anonymous")),
            creds("anonymous", "guest@")
        );
    }

    #[test]
    fn macros_and_accounts_are_skipped() {
        let text = "macdef init\nmachine evil login mallory password x\nbinary\n\n\
                    machine h account acct login u password p\n";
        assert_eq!(lookup(text, "evil", None), None);
        assert_eq!(lookup(text, "h", None), creds("u", "p"));
        // A macro running to the end of the file swallows the rest.
        assert_eq!(lookup("macdef m\nmachine h login u\n", "h", None), None);
    }

    #[test]
    fn odd_files_do_not_panic() {
        assert_eq!(lookup("", "h", None), None);
        assert_eq!(lookup("login u password p", "h", None), None);
        assert_eq!(
            lookup("machine h login \"unterminated", "h", None),
            Some(Credentials {
                login: Some("unterminated".into()),
                password: None
            })
        );
        assert_eq!(
            lookup("machine", "h", None),
            None,
            "a machine without a name matches nothing"
        );
        assert_eq!(
            lookup("machine h password", "h", None),
            Some(Credentials::default())
        );
    }

    #[test]
    fn passwords_in_files_others_may_read_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("roam-netrc-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("netrc");
        fs::write(&file, "machine h login u password p\n").unwrap();
        let chmod = |mode| fs::set_permissions(&file, fs::Permissions::from_mode(mode)).unwrap();
        chmod(0o600);
        assert_eq!(read(&file, "h", None), creds("u", "p"));
        for mode in [0o640, 0o604, 0o644] {
            chmod(mode);
            let found = read(&file, "h", None).unwrap();
            assert_eq!(found.login.as_deref(), Some("u"), "{mode:o}");
            assert_eq!(found.password, None, "{mode:o}");
        }
        assert_eq!(read(&dir.join("missing"), "h", None), None);
        fs::remove_dir_all(&dir).unwrap();
    }
}
