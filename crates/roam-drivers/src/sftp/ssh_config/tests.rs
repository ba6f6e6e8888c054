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

Match exec "false"
    User nobody-from-match

Match originalhost db user admin
    Port 5432

Match host 10.9.* !user root
    IdentitiesOnly yes

Host db
    HostName 10.9.0.1
    ProxyJump jump@bastion:2022
    StrictHostKeyChecking accept-new
    UserKnownHostsFile ~/.ssh/kh_%h /etc/kh2
    GlobalKnownHostsFile none
    HostKeyAlias dbkey
    ConnectTimeout 7

Host piped
    ProxyCommand nc %h %p # %r
    IdentityAgent none
    CertificateFile ~/.ssh/cert-%r

Host *
    User fallback
    Port 2222
    HostName %h.internal
"#;

fn local() -> Local {
    Local::for_tests(Path::new("/home/me"), "me")
}

/// A resolver of `text` (written to a file of its own) with roam's parser.
fn parser(text: &str) -> (Resolver, PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "roam-sshcfg-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("config");
    std::fs::write(&file, text).unwrap();
    (Resolver::parser_for_tests(file, local()), dir)
}

static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn resolve_alias(host: &str) -> Endpoint {
    parser(CONFIG).0.resolve(host, None, None).unwrap()
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
    assert_eq!(
        e.certificates,
        [PathBuf::from("/home/me/.ssh/build_builder_2200-cert.pub")]
    );
    assert_eq!(e.proxy, Proxy::Direct);
    assert_eq!(e.trust.strict, Strict::Yes);
    assert_eq!(
        e.trust.user_files,
        [
            PathBuf::from("/home/me/.ssh/known_hosts"),
            PathBuf::from("/home/me/.ssh/known_hosts2")
        ]
    );
    assert_eq!(
        e.trust.global_files[0],
        Path::new("/etc/ssh/ssh_known_hosts")
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
fn match_blocks() {
    // `Match originalhost db user admin`: only for that user.
    let (r, _) = parser(CONFIG);
    assert_eq!(r.resolve("db", None, Some("admin")).unwrap().port, 5432);
    let e = r.resolve("db", None, Some("other")).unwrap();
    assert_eq!(e.port, 2222);
    // `Match host 10.9.* !user root`: the host is matched after HostName... which comes
    // later in the file here, so not yet: `Match host` sees what is known so far.
    assert!(!e.identities_only);
    let text = "Host db\n HostName 10.9.0.1\nMatch host 10.9.* !user root\n IdentitiesOnly yes\n";
    let (r, _) = parser(text);
    assert!(r.resolve("db", None, Some("me")).unwrap().identities_only);
    assert!(!r.resolve("db", None, Some("root")).unwrap().identities_only);
    // `Match exec` runs the command; `false` fails.
    let (r, _) = parser("Match exec \"test %h = yes\"\n User from-exec\n");
    assert_eq!(r.resolve("yes", None, None).unwrap().user, "from-exec");
    assert_eq!(r.resolve("no", None, None).unwrap().user, "me");
    // `Match all`, `final`, `canonical`; `!all`; unknown criteria skip the block.
    let (r, _) = parser("Match !all\n User a\nMatch bogus x\n User b\nMatch final all\n User c\n");
    assert_eq!(r.resolve("h", None, None).unwrap().user, "c");
    // `localuser`.
    let (r, _) = parser("Match localuser me\n User d\n");
    assert_eq!(r.resolve("h", None, None).unwrap().user, "d");
}

#[test]
fn proxies_and_trust() {
    let (r, _) = parser(CONFIG);
    let e = r.resolve("db", None, None).unwrap();
    assert_eq!((e.host.as_str(), e.port), ("10.9.0.1", 2222));
    let Proxy::Jump(hop) = &e.proxy else {
        panic!("{:?}", e.proxy)
    };
    assert_eq!(
        (
            hop.alias.as_str(),
            hop.host.as_str(),
            hop.port,
            hop.user.as_str()
        ),
        ("bastion", "bastion.internal", 2022, "jump")
    );
    assert_eq!(hop.proxy, Proxy::Direct);
    assert_eq!(e.trust.strict, Strict::AcceptNew);
    assert_eq!(
        e.trust.user_files,
        [
            PathBuf::from("/home/me/.ssh/kh_10.9.0.1"),
            PathBuf::from("/etc/kh2")
        ]
    );
    assert!(e.trust.global_files.is_empty());
    assert_eq!(e.trust.alias.as_deref(), Some("dbkey"));
    assert_eq!(e.connect_timeout, Some(Duration::from_secs(7)));
    let p = r.resolve("piped", None, Some("al")).unwrap();
    assert_eq!(
        p.proxy,
        Proxy::Command("nc piped.internal 2222 # al".into())
    );
    assert_eq!(p.agent, Agent::Off);
    assert_eq!(p.certificates[0], PathBuf::from("/home/me/.ssh/cert-al"));
    // Several hops: the last is reached through the ones before it.
    let (r, _) = parser("Host t\n ProxyJump a,ssh://u@b:23\nHost a\n ProxyCommand none\n");
    let e = r.resolve("t", None, None).unwrap();
    let Proxy::Jump(b) = &e.proxy else { panic!() };
    assert_eq!((b.alias.as_str(), b.port, b.user.as_str()), ("b", 23, "u"));
    let Proxy::Jump(a) = &b.proxy else { panic!() };
    assert_eq!((a.alias.as_str(), &a.proxy), ("a", &Proxy::Direct));
    // `ProxyJump none` wins when it comes first; loops end.
    let (r, _) = parser("Host t\n ProxyJump none\nHost *\n ProxyJump x\n");
    assert_eq!(r.resolve("t", None, None).unwrap().proxy, Proxy::Direct);
    let (r, _) = parser("Host *\n ProxyJump %h-x\n");
    assert!(r.resolve("t", None, None).is_err());
    assert!(jump_host("[::1]:22").unwrap().1 == "::1");
    assert!(jump_host("h:0").is_err());
}

#[test]
fn includes_globs_and_tildes() {
    let (mut r, dir) = parser("");
    std::fs::create_dir_all(dir.join("home/.ssh/conf.d")).unwrap();
    std::fs::write(
        dir.join("home/.ssh/conf.d/b.conf"),
        "Host inc\n  User from-b\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("home/.ssh/conf.d/a.conf"),
        "Host inc\n  Port 2345\nHost *\n  User from-a-star\n",
    )
    .unwrap();
    std::fs::write(dir.join("home/.ssh/other"), "User from-other\n").unwrap();
    std::fs::write(
        dir.join("config"),
        "Host inc\n  Include conf.d/*.conf\n  HostName 127.0.0.9\nHost *\n  Include ~/.ssh/other\n",
    )
    .unwrap();
    r.local.home = Some(dir.join("home"));
    let e = r.resolve("inc", None, None).unwrap();
    // a.conf before b.conf; the block's HostName after the Include still counts.
    assert_eq!(
        (e.host.as_str(), e.port, e.user.as_str()),
        ("127.0.0.9", 2345, "from-a-star")
    );
    assert_eq!(r.resolve("x", None, None).unwrap().user, "from-other");
    // An Include of itself ends.
    std::fs::write(
        dir.join("config"),
        format!("Include {}\n", dir.join("config").display()),
    )
    .unwrap();
    assert_eq!(r.resolve("x", None, None).unwrap().user, "me");
}

#[test]
fn the_url_beats_the_file_and_explicit_keys_come_first() {
    let (mut r, _) = parser(CONFIG);
    r.identity_files = vec![PathBuf::from("/k/first")];
    r.known_hosts = Some(PathBuf::from("/k/known"));
    let e = r.resolve("build", Some(22), Some("alice")).unwrap();
    assert_eq!((e.port, e.user.as_str()), (22, "alice"));
    assert_eq!(e.identities[0], PathBuf::from("/k/first"));
    assert_eq!(
        e.identities[1],
        PathBuf::from("/home/me/.ssh/build_alice_22")
    );
    assert_eq!(e.trust.user_files, [PathBuf::from("/k/known")]);
}

#[test]
fn without_a_config_the_local_user_and_default_keys() {
    let (mut r, _) = parser("");
    let e = r.resolve("h", None, None).unwrap();
    assert_eq!((e.host.as_str(), e.port, e.user.as_str()), ("h", 22, "me"));
    assert_eq!(e.identities[2], PathBuf::from("/home/me/.ssh/id_ed25519"));
    r.local.user = None;
    assert!(r.resolve("h", None, None).is_err());
    assert!(r.resolve("-oProxyCommand=x", None, Some("u")).is_err());
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

/// roam's parser and `ssh -G` agree on the same file (where `ssh` exists).
#[test]
fn the_parser_agrees_with_ssh() {
    let Some(ssh) = ["/usr/bin/ssh", "/usr/local/bin/ssh"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
    else {
        return;
    };
    let (mut r, dir) = parser("");
    let home = std::env::var_os("HOME").map(PathBuf::from);
    r.local.home = home.clone();
    r.local.passwd_home = home;
    r.local.user = Some("me".into());
    let included = dir.join("included.conf");
    std::fs::write(
        &included,
        "Host inc*\n  Port 2345\n  IdentityFile /keys/%r@%h:%p\n",
    )
    .unwrap();
    let text = format!(
        "{CONFIG}\nHost inc\n  Include {}\n  HostName 127.0.0.9\n",
        included.display()
    );
    // `Host *` of CONFIG comes first: move the include in front.
    let text = format!(
        "Host inc incx\n  Include {}\n  HostName 127.0.0.9\n  User u\n{}",
        included.display(),
        text
    );
    std::fs::write(dir.join("config"), &text).unwrap();
    let mut g = r.clone();
    g.ssh = Some(ssh);
    for (host, user) in [
        ("build", None),
        ("www.example.com", None),
        ("secret.example.com", Some("x")),
        ("db", Some("admin")),
        ("db", None),
        ("piped", None),
        ("inc", None),
        ("incx", Some("v")),
    ] {
        let mine = r.resolve(host, None, user).unwrap();
        let theirs = g.resolve(host, None, user).unwrap();
        let strip = |mut e: Endpoint| {
            // ssh's default identity list is longer than roam's (keys roam cannot use).
            if e.identities.iter().any(|i| i.ends_with("id_rsa")) {
                e.identities.clear();
                e.certificates.clear();
            }
            if let Proxy::Jump(hop) = &mut e.proxy {
                hop.identities.clear();
                hop.certificates.clear();
            }
            e
        };
        assert_eq!(strip(mine), strip(theirs), "{host} {user:?}");
    }
}

#[test]
fn slow_commands_are_cut_short() {
    let sh = OsStr::new("/bin/sh");
    let started = std::time::Instant::now();
    let args = ["-c".into(), "echo out; sleep 5".into()];
    let err = run_bounded(sh, &args, Duration::from_millis(200))
        .err()
        .unwrap();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    assert!(started.elapsed() < Duration::from_secs(4));
    let args = ["-c".into(), "echo out; echo err >&2; exit 3".into()];
    let ran = run_bounded(sh, &args, Duration::from_secs(10)).unwrap();
    assert_eq!(ran.status, Some(3));
    assert_eq!(
        (&ran.stdout[..], &ran.stderr[..]),
        (&b"out\n"[..], &b"err\n"[..])
    );
}

/// The status survives the child being reaped by someone else, as `roam run`'s tracer
/// does with `waitpid(-1)`. In a process of its own (this test binary again, running
/// only this case), whose reaper takes no other test's children.
#[test]
fn statuses_survive_a_reaper() {
    const ALONE: &str = "ROAM_TEST_REAPER_ALONE";
    if std::env::var_os(ALONE).is_none() {
        let status = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sftp::ssh_config::tests::statuses_survive_a_reaper",
                "--test-threads=1",
            ])
            .env(ALONE, "1")
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "{status}");
        return;
    }
    let reaper = std::thread::spawn(|| {
        let until = std::time::Instant::now() + Duration::from_secs(2);
        while std::time::Instant::now() < until {
            // SAFETY: waitpid(2) on this process's own children, writing no status.
            unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let args = ["-c".into(), "sleep 0.3; exit 4".into()];
    let ran = run_bounded(OsStr::new("/bin/sh"), &args, Duration::from_secs(10)).unwrap();
    reaper.join().unwrap();
    assert_eq!(ran.status, Some(4));
}

#[test]
fn tokens_and_variables_in_paths() {
    // A variable every test process has (setting one would race with other tests).
    let path = std::env::var("PATH").unwrap();
    let (r, _) = parser(
        "Host t\n  HostKeyAlias ka\n  IdentityFile ${PATH}/%L_%l_%k_%i_%%\n  \
         CertificateFile ${ROAM_UNSET_VAR}/%C\n  ProxyCommand nc %h %p %d %i\n",
    );
    let e = r.resolve("t", Some(22), Some("u")).unwrap();
    assert_eq!(
        e.identities,
        [PathBuf::from(format!(
            "{path}/box_box.example.org_ka_1000_%"
        ))]
    );
    // %C is SHA-1 of %l%h%p%r (`printf box.example.orgt22u | sha1sum`).
    assert_eq!(
        e.certificates[0],
        PathBuf::from("${ROAM_UNSET_VAR}/5d930c264ec2191c98b74dff27d64de9b46b0878")
    );
    // ProxyCommand takes %h %n %p %r only.
    assert_eq!(e.proxy, Proxy::Command("nc t 22 %d %i".into()));
}
