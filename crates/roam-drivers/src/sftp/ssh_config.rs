//! Where, as whom, through what and trusting which keys to connect, as OpenSSH settles it
//! for `ssh HOST`.
//!
//! When an `ssh` program is at hand, roam asks it: `ssh -G [-F FILE] [-l USER] [-p PORT]
//! HOST` prints the options OpenSSH itself would use, after `Include`, `Match` (`exec`
//! included), canonicalisation and every default; nothing can match OpenSSH better. Without
//! one, roam's own reading of the config file below follows the same rules: `Include` (globs,
//! `~`, relative to `~/.ssh`), `Host` patterns with `!` negation, `Match` with `all`,
//! `host`, `originalhost`, `user`, `localuser`, `exec` (and `canonical`/`final`, which
//! match, roam having no canonicalisation pass), the first value of an option wins
//! (`IdentityFile` and `CertificateFile` accumulate), and `%` tokens (`%h %p %r %u %d %n
//! %i %%`) in the options that take them. What the URL says beats the file, as the command
//! line does for `ssh`.
//!
//! One difference is roam's: `~` and `%d` are `$HOME` (so that a service or a test can
//! point it elsewhere), where `ssh` takes the home of the passwd entry. `ssh -G` is given
//! the config file under `$HOME` explicitly when the two differ, and paths it expanded
//! under the passwd home are moved under `$HOME`.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Hops of `ProxyJump` (each of which may jump again) beyond which roam gives up.
const MAX_HOPS: usize = 8;
/// Nested `Include`s beyond which roam gives up, as OpenSSH does.
const MAX_INCLUDE_DEPTH: usize = 16;
/// How long `ssh -G` may take (it runs `Match exec` commands).
const SSH_G_TIMEOUT: Duration = Duration::from_secs(30);
/// The system-wide file, read after the user's unless another file was named (`ssh -F`).
const SYSTEM_CONFIG: &str = "/etc/ssh/ssh_config";

/// Where and as whom to connect, once the URL and the config have spoken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Endpoint {
    /// The host as written (an alias, perhaps): `%n`, and how messages name it.
    pub alias: String,
    /// The real host name or address (after `HostName`).
    pub host: String,
    pub port: u16,
    pub user: String,
    /// Private keys to offer after the agent's, in order.
    pub identities: Vec<PathBuf>,
    /// OpenSSH certificates to offer (`CertificateFile`, then `IDENTITY-cert.pub`).
    pub certificates: Vec<PathBuf>,
    /// `IdentitiesOnly`: only the agent's keys that are also identity files.
    pub identities_only: bool,
    pub agent: Agent,
    pub proxy: Proxy,
    pub trust: Trust,
    /// `ConnectTimeout`: for reaching the host (TCP), within roam's own bound.
    pub connect_timeout: Option<Duration>,
}

/// Which ssh-agent to ask for keys (`IdentityAgent`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Agent {
    /// `SSH_AUTH_SOCK`, if set.
    Env,
    /// `IdentityAgent none`.
    Off,
    Socket(PathBuf),
}

/// How the SSH connection travels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Proxy {
    /// TCP to the host.
    Direct,
    /// `ProxyCommand`, tokens expanded: SSH over its standard input and output.
    Command(String),
    /// `ProxyJump`: a `direct-tcpip` channel through this host, itself an SSH connection
    /// (which may jump again).
    Jump(Box<Endpoint>),
}

/// Which host keys to trust, and what to do with a key not recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Trust {
    /// `UserKnownHostsFile`: new keys are recorded in the first.
    pub user_files: Vec<PathBuf>,
    /// `GlobalKnownHostsFile`.
    pub global_files: Vec<PathBuf>,
    /// `HostKeyAlias`: the name to look the host up by, instead of `[host]:port`.
    pub alias: Option<String>,
    pub strict: Strict,
    /// `HashKnownHosts`: record new names hashed (`|1|salt|hash`).
    pub hash_names: bool,
}

/// `StrictHostKeyChecking`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Strict {
    /// `yes`, and `ask` (the default), since roam cannot ask: unknown keys are refused.
    Yes,
    /// `accept-new`: unknown keys are recorded and accepted, changed ones refused.
    AcceptNew,
    /// `no`/`off`: unknown keys are recorded, and a changed key is accepted with a warning
    /// (as `ssh` does; a revoked one never is).
    No,
}

/// What the process knows about its own user, for defaults and `%` tokens.
#[derive(Clone, Debug)]
pub(super) struct Local {
    /// `$HOME`.
    pub home: Option<PathBuf>,
    pub user: Option<String>,
    /// The home of the passwd entry, which `ssh` uses for `~`.
    pub passwd_home: Option<PathBuf>,
    /// The machine's host name (`%l`; `%L` is its first label).
    pub host_name: Option<String>,
    pub uid: u32,
}

/// How to resolve hosts: with `ssh -G`, or roam's reading of the config file.
#[derive(Clone, Debug)]
pub(super) struct Resolver {
    /// The `ssh` program to ask; `None`: roam's own parser.
    pub ssh: Option<PathBuf>,
    /// The user's config file (`None`: none at all).
    pub config: Option<PathBuf>,
    pub local: Local,
    /// Keys given to roam, offered before the config's (the target only, as `ssh -i`).
    pub identity_files: Vec<PathBuf>,
    /// Known hosts file given to roam, replacing `UserKnownHostsFile` (the target only).
    pub known_hosts: Option<PathBuf>,
}

/// The options that apply to one host, by lower-case keyword: the raw argument text of
/// each line that counted (one line per option, several for those that accumulate).
#[derive(Clone, Debug, Default)]
pub(super) struct Options {
    values: HashMap<String, Vec<String>>,
    /// Whether paths are already expanded (`ssh -G` expands some of them itself).
    expanded: bool,
}

impl Options {
    fn first(&self, key: &str) -> Option<&str> {
        self.values.get(key)?.first().map(String::as_str)
    }

    fn all(&self, key: &str) -> &[String] {
        self.values.get(key).map_or(&[], Vec::as_slice)
    }

    /// Records a value: the first one wins, except for options that accumulate.
    fn set(&mut self, key: &str, value: &str) {
        let key = key.to_ascii_lowercase();
        let values = self.values.entry(key.clone()).or_default();
        if values.is_empty() || accumulates(&key) {
            values.push(value.to_owned());
        }
    }
}

fn accumulates(key: &str) -> bool {
    matches!(
        key,
        "identityfile" | "certificatefile" | "localforward" | "remoteforward" | "sendenv"
    )
}

impl Resolver {
    /// Settles the endpoint of `host` (as written in the URL), given the URL's port and
    /// user; the error says why not.
    pub fn resolve(
        &self,
        host: &str,
        port: Option<u16>,
        user: Option<&str>,
    ) -> Result<Endpoint, String> {
        let mut endpoint = self.endpoint(host, port, user, 0)?;
        let mut identities = self.identity_files.clone();
        identities.append(&mut endpoint.identities);
        endpoint.identities = identities;
        if let Some(file) = &self.known_hosts {
            endpoint.trust.user_files = vec![file.clone()];
        }
        Ok(endpoint)
    }

    fn endpoint(
        &self,
        host: &str,
        port: Option<u16>,
        user: Option<&str>,
        depth: usize,
    ) -> Result<Endpoint, String> {
        if depth > MAX_HOPS {
            return Err(format!(
                "more than {MAX_HOPS} ProxyJump hops to reach {host}"
            ));
        }
        if host.is_empty() || host.starts_with('-') {
            return Err(format!("{host:?} is not a host name"));
        }
        let options = match &self.ssh {
            Some(ssh) => self.ask_ssh(ssh, host, port, user)?,
            None => self.parse(host, port, user),
        };
        build(&options, host, port, user, &self.local, |spec| {
            self.jump(spec, depth)
        })
    }

    /// `ProxyJump [user@]host[:port][,...]`: the last hop is reached through the others.
    fn jump(&self, spec: &str, depth: usize) -> Result<Proxy, String> {
        let (before, last) = match spec.rsplit_once(',') {
            Some((before, last)) => (Some(before), last),
            None => (None, spec),
        };
        let (user, host, port) = jump_host(last)?;
        let mut hop = self.endpoint(&host, port, user.as_deref(), depth + 1)?;
        if let Some(before) = before {
            hop.proxy = self.jump(before, depth + 1)?;
        }
        Ok(Proxy::Jump(Box::new(hop)))
    }

    /// The config file to name with `-F`, if `ssh` would not read it by itself.
    fn config_argument(&self) -> Option<PathBuf> {
        let Some(config) = &self.config else {
            return Some(PathBuf::from("none"));
        };
        let own = self
            .local
            .passwd_home
            .as_ref()
            .map(|h| h.join(".ssh/config"));
        match (own.as_ref() == Some(config), config.exists()) {
            // ssh reads it (and /etc/ssh/ssh_config) by itself.
            (true, _) => None,
            (false, true) => Some(config.clone()),
            (false, false) => Some(PathBuf::from("none")),
        }
    }

    fn ask_ssh(
        &self,
        ssh: &Path,
        host: &str,
        port: Option<u16>,
        user: Option<&str>,
    ) -> Result<Options, String> {
        let mut args: Vec<OsString> = vec!["-G".into()];
        if let Some(config) = self.config_argument() {
            args.extend(["-F".into(), config.into_os_string()]);
        }
        if let Some(user) = user {
            args.extend(["-l".into(), user.into()]);
        }
        if let Some(port) = port {
            args.extend(["-p".into(), port.to_string().into()]);
        }
        args.extend(["--".into(), host.into()]);
        let output = run_bounded(ssh.as_os_str(), &args, SSH_G_TIMEOUT)
            .map_err(|e| format!("cannot run {} -G: {e}", ssh.display()))?;
        if output.status != Some(0) {
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(format!(
                "`{} -G {host}` failed (exit status {:?}): {}",
                ssh.display(),
                output.status,
                stderr.trim()
            ));
        }
        let mut options = Options {
            expanded: true,
            ..Options::default()
        };
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            if let Some((key, value)) = line.split_once(' ') {
                let value = self.rehome(value);
                options.set(key, &value);
            }
        }
        Ok(options)
    }

    /// Paths `ssh` expanded under the passwd home, moved under `$HOME` (see the module's
    /// documentation).
    fn rehome(&self, value: &str) -> String {
        match (&self.local.passwd_home, &self.local.home) {
            (Some(passwd), Some(home)) if passwd != home => {
                let passwd = format!("{}/", passwd.display());
                let home = format!("{}/", home.display());
                value
                    .split(' ')
                    .map(|word| match word.strip_prefix(&passwd) {
                        Some(rest) => format!("{home}{rest}"),
                        None => word.to_owned(),
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            }
            _ => value.to_owned(),
        }
    }

    /// roam's own reading of the config file.
    pub fn parse(&self, host: &str, port: Option<u16>, user: Option<&str>) -> Options {
        let mut reader = Reader {
            local: &self.local,
            original: host,
            options: Options::default(),
            system: false,
        };
        if let Some(user) = user {
            reader.options.set("user", user);
        }
        if let Some(port) = port {
            reader.options.set("port", &port.to_string());
        }
        if let Some(config) = &self.config {
            reader.file(config, 0);
            // As `ssh` without `-F`: the system's file after the user's own.
            let own = self.local.home.as_ref().map(|h| h.join(".ssh/config"));
            if own.as_ref() == Some(config) {
                reader.system = true;
                reader.file(Path::new(SYSTEM_CONFIG), 0);
            }
        }
        reader.options
    }
}

/// What a program run by [`run_bounded`] printed, and its exit status (`None`: killed by
/// a signal).
pub(super) struct Ran {
    pub status: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// The last line `run_bounded`'s shell adds to the program's stderr.
const STATUS_MARK: &str = "\nroam-exit-status:";

/// Runs `program` with `args` to its end (stdin `/dev/null`), killed if it takes longer
/// than `limit` (a `Match exec` that hangs must not hang the mount).
///
/// The exit status travels in-band, written by `/bin/sh` after the program ends: under
/// `roam run` the tracer waits for any child of roam's process (`waitpid(-1)`), so it may
/// reap this one before we do, and `wait` would only say ECHILD.
pub(super) fn run_bounded(
    program: &OsStr,
    args: &[OsString],
    limit: Duration,
) -> std::io::Result<Ran> {
    use std::io::Read;
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(r#""$@"; printf '\nroam-exit-status:%s' "$?" >&2"#)
        .arg("sh")
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let (sender, receiver) = std::sync::mpsc::channel();
    // Drained on threads of their own, so that a chatty child cannot fill a pipe and stall.
    let pipes: [(bool, Option<Box<dyn Read + Send>>); 2] = [
        (true, child.stdout.take().map(|p| Box::new(p) as _)),
        (false, child.stderr.take().map(|p| Box::new(p) as _)),
    ];
    for (is_stdout, pipe) in pipes {
        let sender = sender.clone();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            let _ = sender.send((is_stdout, bytes));
        });
    }
    let deadline = std::time::Instant::now() + limit;
    let (mut stdout, mut stderr) = (None, None);
    while stdout.is_none() || stderr.is_none() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match receiver.recv_timeout(left) {
            Ok((true, bytes)) => stdout = Some(bytes),
            Ok((false, bytes)) => stderr = Some(bytes),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {limit:?}"),
                ));
            }
        }
    }
    // Reaped here, or already by a tracer (ECHILD): the status is in stderr either way.
    let _ = child.wait();
    let mut stderr = stderr.unwrap_or_default();
    let text = String::from_utf8_lossy(&stderr);
    let status = match text.rfind(STATUS_MARK) {
        Some(at) => {
            let status = text[at + STATUS_MARK.len()..].trim().parse().ok();
            stderr.truncate(at);
            status
        }
        None => None,
    };
    Ok(Ran {
        status,
        stdout: stdout.unwrap_or_default(),
        stderr,
    })
}

/// `[user@]host[:port]` or `ssh://[user@]host[:port]` of a `ProxyJump` hop.
pub(super) fn jump_host(spec: &str) -> Result<(Option<String>, String, Option<u16>), String> {
    let spec = spec.trim();
    let spec = spec.strip_prefix("ssh://").unwrap_or(spec);
    let (user, rest) = match spec.rsplit_once('@') {
        Some((user, rest)) => (Some(user.to_owned()), rest),
        None => (None, spec),
    };
    let bad = || format!("bad ProxyJump host {spec:?}");
    let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']').ok_or_else(bad)?;
        (host, after.strip_prefix(':'))
    } else {
        match rest.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (host, Some(port)),
            _ => (rest, None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse().ok().filter(|p| *p != 0).ok_or_else(bad)?),
        None => None,
    };
    Ok((user, host.to_owned(), port))
}

/// The endpoint the options describe; `jump` resolves a `ProxyJump` value.
fn build(
    options: &Options,
    alias: &str,
    port: Option<u16>,
    user: Option<&str>,
    local: &Local,
    jump: impl FnOnce(&str) -> Result<Proxy, String>,
) -> Result<Endpoint, String> {
    let host = options
        .first("hostname")
        .map_or(alias.to_owned(), |h| expand(h, &[('h', alias)]));
    let port = match port {
        Some(port) => port,
        None => match options.first("port") {
            Some(p) => p
                .parse()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("bad Port {p:?} for {alias}"))?,
            None => 22,
        },
    };
    let user = user
        .map(str::to_owned)
        .or_else(|| options.first("user").map(str::to_owned))
        .or_else(|| local.user.clone())
        .ok_or_else(|| format!("no user to log in to {alias} as: name one in the URL"))?;
    let home = local
        .home
        .as_deref()
        .map_or(String::new(), |h| h.display().to_string());
    let (port_text, uid) = (port.to_string(), local.uid.to_string());
    let full_name = local.host_name.clone().unwrap_or_default();
    let short_name = full_name.split('.').next().unwrap_or("").to_owned();
    let key_alias = options.first("hostkeyalias").unwrap_or(alias).to_owned();
    // %C: SHA-1 of %l%h%p%r, in hex.
    let connection = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{full_name}{host}{port}{user}").as_bytes(),
    );
    let connection: String = connection
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let command_tokens = [
        ('h', host.as_str()),
        ('n', alias),
        ('r', user.as_str()),
        ('p', port_text.as_str()),
    ];
    let tokens = [
        ('d', home.as_str()),
        ('u', local.user.as_deref().unwrap_or("")),
        ('h', host.as_str()),
        ('n', alias),
        ('r', user.as_str()),
        ('p', port_text.as_str()),
        ('i', uid.as_str()),
        ('k', key_alias.as_str()),
        ('l', full_name.as_str()),
        ('L', short_name.as_str()),
        ('C', connection.as_str()),
    ];
    // A path option: `~`, `${VAR}` and tokens (unless `ssh -G` expanded them already).
    let path = |value: &str, expanded: bool| match expanded {
        true => PathBuf::from(value),
        false => tilde(&expand(&environment(value), &tokens), local),
    };
    // A path given twice counts once, as in `ssh`.
    let paths = |key: &str| -> Vec<PathBuf> {
        let mut seen = Vec::new();
        options
            .all(key)
            .iter()
            // `ssh -G` prints each path whole, spaces and all, one per line.
            .flat_map(|line| match options.expanded {
                true => vec![line.clone()],
                false => arguments(line),
            })
            .filter(|p| !p.eq_ignore_ascii_case("none"))
            .map(|p| path(&p, false))
            .filter(|p| {
                let new = !seen.contains(p);
                seen.push(p.clone());
                new
            })
            .collect()
    };
    let mut identities = paths("identityfile");
    if identities.is_empty() && !options.expanded {
        identities = default_identities(local);
    }
    let mut certificates = paths("certificatefile");
    certificates.extend(identities.iter().map(|i| {
        let mut name = i.clone().into_os_string();
        name.push("-cert.pub");
        PathBuf::from(name)
    }));
    let known_files = |key: &str, default: &[&str]| -> Vec<PathBuf> {
        match options.first(key) {
            Some(line) => arguments(line)
                .iter()
                .filter(|p| !p.eq_ignore_ascii_case("none"))
                .map(|p| path(p, options.expanded))
                .collect(),
            None => default.iter().map(|p| tilde(p, local)).collect(),
        }
    };
    let trust = Trust {
        user_files: known_files(
            "userknownhostsfile",
            &["~/.ssh/known_hosts", "~/.ssh/known_hosts2"],
        ),
        global_files: known_files(
            "globalknownhostsfile",
            &["/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"],
        ),
        alias: options.first("hostkeyalias").map(str::to_owned),
        strict: match options
            .first("stricthostkeychecking")
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("accept-new") => Strict::AcceptNew,
            Some("no" | "off" | "false") => Strict::No,
            _ => Strict::Yes,
        },
        hash_names: yes(options.first("hashknownhosts")),
    };
    let agent = match options.first("identityagent") {
        None => Agent::Env,
        Some(a) if a.eq_ignore_ascii_case("none") => Agent::Off,
        Some("SSH_AUTH_SOCK") => Agent::Env,
        Some(a) => match a.strip_prefix('$') {
            Some(var) => std::env::var_os(var).map_or(Agent::Off, |v| Agent::Socket(v.into())),
            None => Agent::Socket(path(a, options.expanded)),
        },
    };
    // ProxyJump and ProxyCommand exclude each other: whichever came first counts.
    let proxy = match (options.first("proxyjump"), options.first("proxycommand")) {
        (Some(j), _) if !j.eq_ignore_ascii_case("none") => jump(j)?,
        (_, Some(c)) if !c.eq_ignore_ascii_case("none") => {
            Proxy::Command(expand(c, &command_tokens))
        }
        _ => Proxy::Direct,
    };
    let connect_timeout = options
        .first("connecttimeout")
        .and_then(|t| t.parse().ok())
        .filter(|t| *t > 0)
        .map(Duration::from_secs);
    Ok(Endpoint {
        alias: alias.to_owned(),
        host,
        port,
        user,
        identities,
        certificates,
        identities_only: yes(options.first("identitiesonly")),
        agent,
        proxy,
        trust,
        connect_timeout,
    })
}

/// A flag's value: `yes` (or `true`, as `ssh -G` prints some).
fn yes(value: Option<&str>) -> bool {
    value.is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "yes" | "true"))
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

/// One reading of the config files for one host.
struct Reader<'a> {
    local: &'a Local,
    /// The host as written (what `Host` and `Match originalhost` match).
    original: &'a str,
    options: Options,
    /// Reading the system's file, whose relative `Include`s are in `/etc/ssh`.
    system: bool,
}

impl Reader<'_> {
    fn file(&mut self, path: &Path, depth: usize) {
        match std::fs::read_to_string(path) {
            Ok(text) => self.text(&text, depth),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("sftp: cannot read {}: {e}", path.display()),
        }
    }

    /// Reads `text`; options before its first `Host` or `Match` apply to every host.
    fn text(&mut self, text: &str, depth: usize) {
        let mut active = true;
        for line in text.lines() {
            let Some((keyword, rest)) = split_line(line) else {
                continue;
            };
            let args = arguments(rest);
            match keyword.to_ascii_lowercase().as_str() {
                "host" => active = host_matches(&args, self.original),
                "match" => active = self.match_all(&args),
                _ if !active => {}
                "include" if depth < MAX_INCLUDE_DEPTH => {
                    for pattern in &args {
                        for file in self.include_files(pattern) {
                            self.file(&file, depth + 1);
                        }
                    }
                }
                "include" => tracing::warn!("sftp: Include nested too deeply"),
                key => self.options.set(key, rest),
            }
        }
    }

    /// The files an `Include` pattern names: `~` expanded, relative to `~/.ssh` (to
    /// `/etc/ssh` in the system's file), globbed and sorted (as glob(3) does).
    fn include_files(&self, pattern: &str) -> Vec<PathBuf> {
        let path = tilde(pattern, self.local);
        let path = match (path.is_absolute(), &self.local.home) {
            (false, _) if self.system => Path::new("/etc/ssh").join(path),
            (false, Some(home)) => home.join(".ssh").join(path),
            _ => path,
        };
        glob(&path)
    }

    /// `Match` criteria, all of which must hold.
    fn match_all(&self, args: &[String]) -> bool {
        let mut args = args.iter();
        let mut all = true;
        while let Some(criterion) = args.next() {
            let lower = criterion.to_ascii_lowercase();
            let (negated, name) = match lower.strip_prefix('!') {
                Some(name) => (true, name),
                None => (false, lower.as_str()),
            };
            let holds = match name {
                "all" | "canonical" | "final" => true,
                _ => match args.next() {
                    Some(value) => self.criterion(name, value),
                    None => {
                        tracing::warn!("sftp: Match {name} without a value");
                        return false;
                    }
                },
            };
            all &= holds != negated;
        }
        all
    }

    fn criterion(&self, name: &str, value: &str) -> bool {
        let list: Vec<String> = value.split(',').map(str::to_owned).collect();
        let user = self.options.first("user").map(str::to_owned);
        let user = user.or_else(|| self.local.user.clone()).unwrap_or_default();
        let host = self
            .options
            .first("hostname")
            .map_or(self.original.to_owned(), |h| {
                expand(h, &[('h', self.original)])
            });
        match name {
            "host" => host_matches(&list, &host),
            "originalhost" => host_matches(&list, self.original),
            "user" => host_matches(&list, &user),
            "localuser" => host_matches(&list, self.local.user.as_deref().unwrap_or("")),
            "exec" => {
                let port = self.options.first("port").unwrap_or("22").to_owned();
                let home = self.local.home.as_ref().map(|h| h.display().to_string());
                let command = expand(
                    value,
                    &[
                        ('h', host.as_str()),
                        ('n', self.original),
                        ('p', port.as_str()),
                        ('r', user.as_str()),
                        ('u', self.local.user.as_deref().unwrap_or("")),
                        ('d', home.as_deref().unwrap_or("")),
                    ],
                );
                let args = ["-c".into(), command.into()];
                run_bounded(OsStr::new("/bin/sh"), &args, SSH_G_TIMEOUT)
                    .is_ok_and(|ran| ran.status == Some(0))
            }
            other => {
                tracing::warn!("sftp: Match {other} is not understood: the block is skipped");
                false
            }
        }
    }
}

/// The files matching `path`, whose components may hold `*` and `?`, sorted.
fn glob(path: &Path) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::from("/")];
    for part in path.components().skip(1) {
        let part = part.as_os_str().to_string_lossy();
        if !part.contains(['*', '?']) {
            found = found.into_iter().map(|dir| dir.join(&*part)).collect();
            continue;
        }
        let mut next = Vec::new();
        for dir in found {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut names: Vec<String> = entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| !n.starts_with('.') && wildcard(&part, n))
                .collect();
            names.sort();
            next.extend(names.into_iter().map(|n| dir.join(n)));
        }
        found = next;
    }
    found.retain(|p| p.is_file());
    found
}

/// A config line as its keyword and the raw text of its arguments (`Key value`,
/// `Key=value`); `None` for blank lines and comments.
fn split_line(line: &str) -> Option<(&str, &str)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let end = line
        .find(|c: char| c.is_whitespace() || c == '=')
        .unwrap_or(line.len());
    let (keyword, rest) = line.split_at(end);
    let rest = rest.trim_start();
    let rest = rest.strip_prefix('=').unwrap_or(rest).trim();
    Some((keyword, rest))
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
pub(super) fn expand(text: &str, tokens: &[(char, &str)]) -> String {
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

/// `${VAR}` → the variable's value; an unset one stays as written.
fn environment(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find('}') {
            Some(end) => {
                let name = &after[..end];
                match std::env::var(name) {
                    Ok(value) if !name.is_empty() => out.push_str(&value),
                    _ => out.push_str(&rest[start..start + 3 + end]),
                }
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
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

#[cfg(test)]
impl Local {
    /// A user `user` at home in `home` (also their passwd home), uid 1000.
    pub fn for_tests(home: &Path, user: &str) -> Local {
        Local {
            home: Some(home.to_path_buf()),
            user: Some(user.into()),
            passwd_home: Some(home.to_path_buf()),
            host_name: Some("box.example.org".into()),
            uid: 1000,
        }
    }
}

#[cfg(test)]
impl Resolver {
    /// roam's parser of the config file `config`, with no keys nor known hosts of roam's.
    pub fn parser_for_tests(config: PathBuf, local: Local) -> Resolver {
        Resolver {
            ssh: None,
            config: Some(config),
            local,
            identity_files: Vec::new(),
            known_hosts: None,
        }
    }
}

#[cfg(test)]
mod tests;
