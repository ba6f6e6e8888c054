//! `[remote.NAME]` sections of roam.toml: where a server is and who logs in there, kept
//! apart from names, as rclone keeps its remotes. A mount target `NAME:PATH` (in `[mounts]`
//! or `-m /x=NAME:PATH`) stands for the remote's URL with `PATH` below it, logged in as the
//! section says, so no `user:password@` need appear in a path, a command line or a mount.
//!
//! An `s3://` remote may name its own AWS `profile`, `region` and `endpoint`; they travel in
//! the mount URL's query (`s3://bucket/prefix?profile=...`), where the S3 driver reads them.
//!
//! ```toml
//! [remote.files]
//! url = "davs://files.example.org/team"   # any mount URL of a protocol with logins
//! user = "alice"
//! password_command = "pass show files"    # its first line of output; or: password = "..."
//! [mounts]
//! "/team" = "files:"                       # or on the command line: -m /t=files:reports
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde::Deserialize;

/// Prefixes of mount targets that are roam's own (`mem:`, layers, sources), which no remote may take.
const RESERVED: [&str; 8] = ["mem", "null", "rot13", "zlib", "seal", "ext", "src", "file"];

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteSection {
    /// The mount URL, without `user:password@`.
    pub url: String,
    pub user: Option<String>,
    /// The password itself (then keep roam.toml private: `chmod 600`).
    pub password: Option<String>,
    /// A command (run by `/bin/sh -c`) printing the password on its first line.
    pub password_command: Option<String>,
    /// `s3://` only: the AWS profile, region and endpoint of this remote, in place of
    /// `AWS_PROFILE`, `AWS_REGION` and `AWS_ENDPOINT_URL_S3`.
    pub profile: Option<String>,
    pub region: Option<String>,
    pub endpoint: Option<String>,
}

// By hand, so that `{:?}` of the configuration never prints a password.
impl fmt::Debug for RemoteSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteSection")
            .field("url", &self.url)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("password_command", &self.password_command)
            .field("profile", &self.profile)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

/// The mount URL for `target`: a `NAME:PATH` of a remote in `remotes` becomes its URL with
/// the login in it; any other target is returned as it is.
pub fn resolve(remotes: &BTreeMap<String, RemoteSection>, target: &str) -> Result<String> {
    let Some((name, path)) = target.split_once(':') else {
        return Ok(target.to_owned());
    };
    let Some(remote) = remotes.get(name) else {
        return Ok(target.to_owned());
    };
    if RESERVED.contains(&name) || path.starts_with("//") {
        return Ok(target.to_owned());
    }
    let what = || format!("[remote.{name}]");
    let Some((scheme, rest)) = remote.url.split_once("://") else {
        bail!("{}: url {:?} is not SCHEME://HOST/...", what(), remote.url);
    };
    let authority = rest.split('/').next().unwrap_or("");
    if authority.contains('@') {
        bail!("{}: put the login in user and password, not in url", what());
    }
    let login = match (&remote.user, password(remote).with_context(what)?) {
        (Some(user), Some(pass)) => format!("{}:{}@", encode(user), encode(&pass)),
        (Some(user), None) => format!("{}@", encode(user)),
        (None, Some(_)) => bail!("{}: a password needs a user", what()),
        (None, None) => String::new(),
    };
    let base = rest.trim_end_matches('/');
    let path = path.trim_matches('/');
    let below = if path.is_empty() {
        String::new()
    } else {
        format!("/{path}")
    };
    let settings = s3_settings(remote, scheme).with_context(what)?;
    Ok(format!("{scheme}://{login}{base}{below}{settings}"))
}

/// The query of an `s3://` mount URL carrying the remote's AWS settings (empty: none).
fn s3_settings(remote: &RemoteSection, scheme: &str) -> Result<String> {
    let settings: Vec<String> = [
        ("profile", &remote.profile),
        ("region", &remote.region),
        ("endpoint", &remote.endpoint),
    ]
    .into_iter()
    .filter_map(|(name, value)| Some(format!("{name}={}", encode(value.as_ref()?))))
    .collect();
    if settings.is_empty() {
        return Ok(String::new());
    }
    if scheme != "s3" {
        bail!("profile, region and endpoint are settings of s3:// remotes");
    }
    Ok(format!("?{}", settings.join("&")))
}

/// The remote's password: `password`, else the first line `password_command` prints.
fn password(remote: &RemoteSection) -> Result<Option<String>> {
    match (&remote.password, &remote.password_command) {
        (Some(_), Some(_)) => bail!("password and password_command: give one"),
        (Some(pass), None) => Ok(Some(pass.clone())),
        (None, Some(command)) => {
            let out = Command::new("/bin/sh")
                .args(["-c", command])
                .stdin(Stdio::null())
                .stderr(Stdio::inherit())
                .output()
                .context("running password_command")?;
            if !out.status.success() {
                bail!("password_command failed ({})", out.status);
            }
            let text = String::from_utf8(out.stdout).context("password_command's output")?;
            Ok(Some(text.lines().next().unwrap_or("").to_owned()))
        }
        (None, None) => Ok(None),
    }
}

/// A userinfo part or a query value, percent-encoded (a password may hold `@`, `:` or `/`).
fn encode(text: &str) -> String {
    utf8_percent_encode(text, NON_ALPHANUMERIC).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remotes(section: RemoteSection) -> BTreeMap<String, RemoteSection> {
        BTreeMap::from([("files".to_owned(), section)])
    }

    #[test]
    fn remote_names_become_urls_with_their_login() {
        let r = remotes(RemoteSection {
            url: "dav://h:8080/team/".into(),
            user: Some("al ice".into()),
            password_command: Some("printf 'p@ss:/w\\nignored'".into()),
            ..RemoteSection::default()
        });
        assert_eq!(
            resolve(&r, "files:").unwrap(),
            "dav://al%20ice:p%40ss%3A%2Fw@h:8080/team"
        );
        assert_eq!(
            resolve(&r, "files:/a/b/").unwrap(),
            "dav://al%20ice:p%40ss%3A%2Fw@h:8080/team/a/b"
        );
        for other in ["http://h/x", "mem:", "null:/dir", "other:x", "/local"] {
            assert_eq!(resolve(&r, other).unwrap(), other);
        }
    }

    #[test]
    fn s3_remotes_carry_their_aws_settings_in_the_query() {
        let r = remotes(RemoteSection {
            url: "s3://bucket/base".into(),
            profile: Some("work".into()),
            endpoint: Some("http://127.0.0.1:9000".into()),
            ..RemoteSection::default()
        });
        assert_eq!(
            resolve(&r, "files:sub").unwrap(),
            "s3://bucket/base/sub?profile=work&endpoint=http%3A%2F%2F127%2E0%2E0%2E1%3A9000"
        );
        let r = remotes(RemoteSection {
            url: "dav://h/".into(),
            region: Some("eu-west-1".into()),
            ..RemoteSection::default()
        });
        let err = resolve(&r, "files:").unwrap_err();
        assert!(format!("{err:#}").contains("s3:// remotes"), "{err:#}");
    }

    #[test]
    fn bad_sections_are_refused_without_showing_the_password() {
        let bad = |section: RemoteSection| resolve(&remotes(section), "files:").unwrap_err();
        let err = bad(RemoteSection {
            url: "dav://u:secret@h/".into(),
            ..RemoteSection::default()
        });
        assert!(err.to_string().contains("not in url"), "{err}");
        assert!(!format!("{err:#}").contains("secret"));
        let err = bad(RemoteSection {
            url: "dav://h/".into(),
            user: Some("u".into()),
            password: Some("p".into()),
            password_command: Some("echo p".into()),
            ..RemoteSection::default()
        });
        assert!(format!("{err:#}").contains("give one"), "{err:#}");
        let err = bad(RemoteSection {
            url: "dav://h/".into(),
            user: Some("u".into()),
            password_command: Some("exit 1".into()),
            ..RemoteSection::default()
        });
        assert!(
            format!("{err:#}").contains("password_command failed"),
            "{err:#}"
        );
        let shown = format!(
            "{:?}",
            RemoteSection {
                password: Some("hidden-one".into()),
                ..RemoteSection::default()
            }
        );
        assert!(!shown.contains("hidden-one"), "{shown}");
    }
}
