//! `roam config`: the effective configuration, one setting a line, each with where its value
//! came from (default, the file, an environment variable, a flag). The lines are TOML dotted
//! keys, so the output is itself a `roam.toml` that reads back to the same settings
//! (passwords in mount URLs excepted: they are shown as `***`, never printed).

use std::fmt::Write;
use std::time::Duration;

use anyhow::Result;
use roam_vfs::TRead;

use super::units::{format_duration, format_size};
use super::{config_path, Config, Setting, Source};

/// The text `roam config` prints.
pub fn effective(cfg: &Config) -> Result<String> {
    let mut out = String::new();
    let path = config_path();
    let state = if cfg.file.is_some() {
        "read"
    } else {
        "absent: defaults"
    };
    writeln!(out, "# config file: {} ({state})", path.display())?;
    let path_line = |out: &mut String, key: &str, s: Setting<std::path::PathBuf>| {
        line(out, key, &s.value.to_string_lossy(), &s.from)
    };
    path_line(&mut out, "cache.dir", cfg.cache_dir_setting());
    let max = cfg.max_cache();
    line(
        &mut out,
        "cache.max_size",
        &format_size(max.value),
        &max.from,
    );
    let t_read = cfg.t_read_default()?;
    line(
        &mut out,
        "cache.t_read",
        &t_read_text(t_read.value),
        &t_read.from,
    );
    duration_line(&mut out, "cache.t_write", cfg.t_write_setting());
    duration_line(&mut out, "cache.settle", cfg.settle_setting());
    if let Some(policy) = &cfg.cache.policy {
        line(&mut out, "cache.policy", policy, &from_file(cfg));
    }
    if let Some(policy) = &cfg.access.policy {
        line(&mut out, "access.policy", policy, &from_file(cfg));
    }
    let [connect, read] = cfg.http_timeouts();
    duration_line(&mut out, "http.connect_timeout", connect);
    duration_line(&mut out, "http.read_timeout", read);
    path_line(&mut out, "extensions.dir", cfg.extensions_dir_setting());
    for (kind, setting) in [
        ("archive", &cfg.extensions.archive),
        ("digest", &cfg.extensions.digest),
    ] {
        let key = format!("extensions.{kind}");
        match setting {
            Some(name) => line(&mut out, &key, name, &from_file(cfg)),
            None => line(&mut out, &key, kind, &Source::Default),
        }
    }
    for (glob, v) in &cfg.t_read {
        let value: super::Seconds = v.clone().try_into()?;
        let key = format!("t_read.{}", quote(glob));
        line(
            &mut out,
            &key,
            &t_read_text(value.to_t_read()?),
            &from_file(cfg),
        );
    }
    for (host, tls) in &cfg.tls {
        let key = format!("tls.{}", quote(host));
        if let Some(ca) = &tls.ca_file {
            let ca = ca.to_string_lossy();
            line(&mut out, &format!("{key}.ca_file"), &ca, &from_file(cfg));
        }
        if tls.insecure {
            writeln!(out, "{key}.insecure = true  # {}", from_file(cfg))?;
        }
    }
    for (local, url) in &cfg.mounts {
        let key = format!("mounts.{}", quote(local));
        line(&mut out, &key, &hide_password(url), &from_file(cfg));
    }
    for rule in &cfg.resolver {
        writeln!(
            out,
            "# resolver: {} merged by {} ({})  # {}",
            rule.glob,
            rule.ext,
            rule.tech.as_deref().unwrap_or("wasm"),
            from_file(cfg)
        )?;
    }
    Ok(out)
}

fn from_file(cfg: &Config) -> Source {
    Source::File(cfg.file.clone().unwrap_or_default())
}

fn line(out: &mut String, key: &str, value: &str, from: &Source) {
    let text = format!("{key} = {}", quote(value));
    // Writing to a String cannot fail.
    let _ = writeln!(out, "{text:<48}  # {from}");
}

fn duration_line(out: &mut String, key: &str, s: Setting<Duration>) {
    line(out, key, &format_duration(s.value), &s.from)
}

fn t_read_text(t: TRead) -> String {
    match t {
        TRead::Fixed(d) => format_duration(d),
        TRead::AgePercent(p) => format!("{p}%"),
    }
}

/// A TOML basic string (also a valid quoted key).
fn quote(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// `sftp://me:secret@host/x` as `sftp://me:***@host/x`: the user helps to tell mounts
/// apart, the password must never reach a terminal or a log. Nested URLs
/// (`ext:NAME:URL`) are covered too: each `://` authority is looked at.
fn hide_password(url: &str) -> String {
    let mut out = String::new();
    let mut rest = url;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out += head;
        let authority = &tail[..tail.find('/').unwrap_or(tail.len())];
        rest = tail;
        if let Some(at) = authority.rfind('@') {
            if let Some(colon) = authority[..at].find(':') {
                out += &authority[..=colon];
                out += "***";
                rest = &tail[at..];
            }
        }
    }
    out + rest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden_users_kept() {
        let cases = [
            ("sftp://me:s3cr@t@host:22/x", "sftp://me:***@host:22/x"),
            ("ftp://anon@host/", "ftp://anon@host/"),
            ("http://h/a:b@c", "http://h/a:b@c"),
            ("ext:rot13:dav://u:pw@h/x", "ext:rot13:dav://u:***@h/x"),
            ("/srv/data", "/srv/data"),
        ];
        for (url, shown) in cases {
            assert_eq!(hide_password(url), shown);
        }
    }
}
