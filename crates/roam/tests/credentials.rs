//! Credentials end to end: logins from netrc for `/http` and `/dav` names under `roam run`,
//! and passwords written into mount URLs and names never shown: not on stderr (errors, the
//! log at debug level), not by `roam status` or `roam sync`, and not in roam's own
//! `/proc/PID/cmdline`. Against nginx asking for Basic authorization (`roam-testkit`); and
//! S3 remotes with AWS settings of their own, against two moto servers checking signatures.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use common::{stderr, stdout, Roam};
use roam_testkit::dav::nginx_dav_with_login;
use roam_testkit::s3::{create_bucket, enforce_auth, moto, put_object};
use roam_testkit::{mkdir, write_file, Scratch, Server};

const USER: &str = "alice";
/// Distinctive, so that any output holding it is found.
const PASSWORD: &str = "Pw-q7Zk3xR";

fn write_netrc(file: &Path, host: &str) {
    write_file(
        file,
        format!("machine {host} login {USER} password {PASSWORD}\n").as_bytes(),
        0o600,
    );
}

#[test]
fn netrc_logins_serve_http_and_webdav_names() {
    let scratch = Scratch::new("creds-netrc");
    let www = scratch.join("www");
    write_file(&www.join("private/report.txt"), b"http report\n", 0o644);
    let http = Server::nginx_with_login(&www, &scratch.join("run"), USER, PASSWORD);
    let dav_www = scratch.join("dav");
    write_file(&dav_www.join("notes.txt"), b"dav notes\n", 0o644);
    let dav = nginx_dav_with_login(&dav_www, &scratch.join("dav-run"), USER, PASSWORD);
    let script = format!(
        "cat /http/{}/private/report.txt /dav/{}/notes.txt",
        http.authority(),
        dav.authority()
    );

    // `~/.netrc`, then `$NETRC` naming another file (as curl 8.16 and GNU ftp read it).
    let home = scratch.join("home");
    write_netrc(&home.join(".netrc"), "127.0.0.1");
    let other = scratch.join("elsewhere/netrc");
    write_netrc(&other, "127.0.0.1");
    let empty_home = scratch.join("empty-home");
    mkdir(&empty_home);
    for (home, netrc) in [(&home, None), (&empty_home, Some(&other))] {
        let mut roam = Roam::new().env("HOME", home);
        if let Some(file) = netrc {
            roam = roam.env("NETRC", file);
        }
        let out = roam.sh(&[], &script);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(stdout(&out), "http report\ndav notes\n");
    }

    // Without an entry nginx refuses, and the program sees EACCES.
    let out = Roam::new().env("HOME", &empty_home).sh(&[], &script);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("Permission denied"),
        "{}",
        stderr(&out)
    );
    // A netrc others may read gives no password (a warning says why).
    fs::set_permissions(home.join(".netrc"), fs::Permissions::from_mode(0o644)).unwrap();
    let out = Roam::new().env("HOME", &home).sh(&[], &script);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("readable by others"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn passwords_in_urls_and_names_are_never_shown() {
    let scratch = Scratch::new("creds-hidden");
    let www = scratch.join("www");
    write_file(&www.join("notes.txt"), b"dav notes\n", 0o644);
    let server = nginx_dav_with_login(&www, &scratch.join("run"), USER, PASSWORD);
    // A directory nginx's workers may not write in: an upload there fails and stays pending.
    let locked = www.join("locked");
    fs::create_dir(&locked).unwrap();
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o755)).unwrap();
    let out_dir = scratch.join("out");
    mkdir(&out_dir);

    let login = format!("{USER}:{PASSWORD}@{}", server.authority());
    let mount = format!("/x=dav://{login}/");
    let wrong = format!("/y=dav://{USER}:Wrong-{PASSWORD}@{}/", server.authority());
    let name = format!("/dav/{login}");
    // The programs' own complaints (which quote the names they were given) go elsewhere:
    // stderr is then roam's alone.
    let script = format!(
        "exec 2>/dev/null; cat /x/notes.txt {name}/notes.txt; cat {name}/missing.txt; ls /y; \
         tr '\\0' ' ' < /proc/$PPID/cmdline > {out}/cmdline; \
         echo new > {name}/locked/new.txt",
        out = out_dir.display()
    );
    let cache = scratch.join("cache");
    let roam = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_roam"))
            .env("ROAM_CACHE_DIR", &cache)
            .env("ROAM_CONFIG", scratch.join("none.toml"))
            .env("RUST_LOG", "debug")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let run = roam(&["run", "-m", &mount, "-m", &wrong, "--", "sh", "-c", &script]);
    assert_eq!(stdout(&run), "dav notes\ndav notes\n", "{}", stderr(&run));
    assert_eq!(run.status.code(), Some(75), "the upload stays pending");
    let log = stderr(&run);
    assert!(log.contains("DEBUG"), "the log is at debug level: {log}");
    assert!(log.contains("locked/new.txt"), "{log}");
    assert!(
        log.contains("alice:***@"),
        "names with a login were logged, hidden: {log}"
    );
    assert!(
        !log.contains(PASSWORD),
        "stderr of roam run shows the password:\n{log}"
    );

    // roam's own command line: the password's bytes are `*`.
    let cmdline = fs::read_to_string(out_dir.join("cmdline")).unwrap();
    assert!(cmdline.contains(" run -m /x=dav://alice:*"), "{cmdline}");
    assert!(cmdline.contains(&format!("/dav/{USER}:*")), "{cmdline}");
    assert!(
        !cmdline.contains(PASSWORD),
        "ps shows the password: {cmdline}"
    );

    // The change left behind, as `roam status` and `roam sync` tell of it.
    let status = roam(&["status"]);
    let shown = stdout(&status) + &stderr(&status);
    assert!(shown.contains("locked/new.txt"), "{shown}");
    assert!(
        !shown.contains(PASSWORD),
        "roam status shows the password:\n{shown}"
    );
    let sync = roam(&["sync", "-m", &mount]);
    let shown = stdout(&sync) + &stderr(&sync);
    assert_eq!(sync.status.code(), Some(75), "{shown}");
    assert!(
        shown.contains("PUT http://127.0.0.1"),
        "the failed upload is told: {shown}"
    );
    assert!(
        !shown.contains(PASSWORD),
        "roam sync shows the password:\n{shown}"
    );
    drop(server);
}

#[test]
fn remotes_in_roam_toml_carry_the_login_for_mounts_and_flags() {
    let scratch = Scratch::new("creds-remote");
    let www = scratch.join("www");
    write_file(&www.join("team/notes.txt"), b"team notes\n", 0o644);
    write_file(&www.join("team/sub/deep.txt"), b"deep\n", 0o644);
    let server = nginx_dav_with_login(&www, &scratch.join("run"), USER, PASSWORD);
    let config = scratch.join("roam.toml");
    let toml = format!(
        "[remote.files]\nurl = \"dav://{}/team\"\nuser = \"{USER}\"\n\
         password_command = \"printf '%s\\\\n' {PASSWORD}\"\n\
         [mounts]\n\"/team\" = \"files:\"\n",
        server.authority()
    );
    write_file(&config, toml.as_bytes(), 0o600);
    let out = Roam::new().env("ROAM_CONFIG", &config).sh(
        &["-m", "/sub=files:sub"],
        "cat /team/notes.txt /sub/deep.txt",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "team notes\ndeep\n");
    assert!(!stderr(&out).contains(PASSWORD), "{}", stderr(&out));

    // A failing password_command fails the mount with its reason, not silently.
    let failing = toml.replace(&format!("printf '%s\\\\n' {PASSWORD}"), "exit 3");
    write_file(&config, failing.as_bytes(), 0o600);
    let out = Roam::new()
        .env("ROAM_CONFIG", &config)
        .sh(&[], "cat /team/notes.txt");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("[remote.files]: password_command failed"),
        "{}",
        stderr(&out)
    );
    drop(server);
}

#[test]
fn s3_remotes_each_use_their_own_aws_profile_and_endpoint() {
    let scratch = Scratch::new("creds-s3-remotes");
    // Two moto servers, two accounts: each knows only its own keys.
    let mut profiles = String::new();
    let (mut mounts, mut remotes) = (String::from("[mounts]\n"), String::new());
    let mut servers = Vec::new();
    for name in ["one", "two"] {
        let server = moto(&scratch.join(&format!("run-{name}")));
        create_bucket(&server, "data");
        put_object(&server, "data", "owner.txt", format!("{name}\n").as_bytes());
        let keys = enforce_auth(&server);
        profiles.push_str(&format!(
            "[{name}]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            keys.access_key, keys.secret_key
        ));
        mounts.push_str(&format!("\"/{name}\" = \"{name}:\"\n"));
        remotes.push_str(&format!(
            "[remote.{name}]\nurl = \"s3://data\"\nprofile = \"{name}\"\n\
             region = \"us-east-1\"\nendpoint = \"{}\"\n",
            server.url()
        ));
        servers.push(server);
    }
    let home = scratch.join("home");
    write_file(&home.join(".aws/credentials"), profiles.as_bytes(), 0o600);
    let config = scratch.join("roam.toml");
    write_file(&config, format!("{remotes}{mounts}").as_bytes(), 0o600);
    // The environment names keys and an endpoint neither mount uses.
    let out = Roam::new()
        .env("ROAM_CONFIG", &config)
        .env("HOME", &home)
        .env("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY0000000")
        .env("AWS_SECRET_ACCESS_KEY", "not-a-secret")
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .env("AWS_REGION", "ap-south-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CA_BUNDLE", "")
        .sh(&[], "cat /one/owner.txt /two/owner.txt");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "one\ntwo\n");
    drop(servers);
}

/// `roam doctor URL` with `HOME` at `home`: its status and standard output.
fn doctor(home: &Path, url: &str, env: &[(&str, &Path)]) -> (Option<i32>, String) {
    let mut roam = Roam::new().env("HOME", home);
    for (k, v) in env {
        roam = roam.env(k, v);
    }
    let out = roam.cli(&["doctor", url]);
    assert!(!stderr(&out).contains(PASSWORD), "{}", stderr(&out));
    (out.status.code(), stdout(&out))
}

#[test]
fn doctor_says_what_a_url_reads_and_whether_the_server_answers() {
    let scratch = Scratch::new("creds-doctor");
    let www = scratch.join("www");
    write_file(&www.join("private/report.txt"), b"report\n", 0o644);
    let http = Server::nginx_with_login(&www, &scratch.join("run"), USER, PASSWORD);
    let home = scratch.join("home");
    write_netrc(&home.join(".netrc"), "127.0.0.1");

    let url = format!("{}/private", http.url());
    let (code, out) = doctor(&home, &url, &[]);
    assert_eq!(code, Some(0), "{out}");
    let netrc = home.join(".netrc").display().to_string();
    assert!(
        out.contains(&format!(
            "login              {netrc}: login {USER}, with a password"
        )),
        "{out}"
    );
    assert!(out.contains("server             answers"), "{out}");
    assert!(!out.contains(PASSWORD), "{out}");

    // A password in the URL is said to be there, never shown; a wrong one is refused.
    let wrong = url.replace("://", &format!("://{USER}:Wrong-{PASSWORD}@"));
    let (code, out) = doctor(&home, &wrong, &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("user alice and password from the URL"),
        "{out}"
    );
    assert!(
        out.contains("does not answer as hoped") && out.contains("401"),
        "{out}"
    );
    assert!(!out.contains(PASSWORD), "{out}");

    // SFTP: the key and known hosts `ssh` would use.
    let sshd = roam_testkit::sftp::sshd(&scratch.join("sshd"));
    let ssh_config = format!(
        "Host 127.0.0.1\n  IdentityFile {}\n  UserKnownHostsFile {}\n",
        sshd.client_key.display(),
        sshd.known_hosts.display()
    );
    write_file(&home.join(".ssh/config"), ssh_config.as_bytes(), 0o600);
    let (code, out) = doctor(&home, &sshd.url("root", &www), &[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains(&format!("root@127.0.0.1:{}", sshd.port)),
        "{out}"
    );
    assert!(
        out.contains(&sshd.client_key.display().to_string()),
        "{out}"
    );
    assert!(
        out.contains(&sshd.known_hosts.display().to_string()),
        "{out}"
    );

    // S3: an unknown profile is named, with the files read.
    let aws = scratch.join("aws-config");
    write_file(&aws, b"[profile known]\nregion = eu-west-1\n", 0o600);
    let (code, out) = doctor(
        &home,
        "s3://bucket/x",
        &[
            ("AWS_PROFILE", Path::new("nosuch")),
            ("AWS_CONFIG_FILE", &aws),
        ],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("\"nosuch\" (AWS_PROFILE)") && out.contains("aws-config"),
        "{out}"
    );
    drop(http);
}

/// `roam doctor` names the certificate authorities that verify an HTTPS server: the
/// `ca_file` of its `[tls]` section, else the platform's (`SSL_CERT_FILE` here), and the
/// server answers only with the first.
#[test]
fn doctor_names_the_authorities_an_https_server_is_verified_against() {
    let scratch = Scratch::new("creds-doctor-ca");
    let www = scratch.join("www");
    write_file(&www.join("f.txt"), b"f\n", 0o644);
    let ca = roam_testkit::tls::TestCa::new(&scratch.join("ca"));
    let https = roam_testkit::tls::nginx_tls(&www, &scratch.join("run"), &ca);
    let url = format!("https://{}/", https.authority());
    let home = scratch.join("home");
    mkdir(&home);
    let bundle = scratch.join("empty.pem");
    write_file(&bundle, b"", 0o644);
    let (code, out) = doctor(&home, &url, &[("SSL_CERT_FILE", &bundle)]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "CA                 SSL_CERT_FILE={}",
            bundle.display()
        )),
        "{out}"
    );
    let conf = scratch.join("roam.toml");
    let section = format!(
        "[tls.\"{}\"]\nca_file = \"{}\"\n",
        https.authority(),
        ca.ca_cert.display()
    );
    write_file(&conf, section.as_bytes(), 0o644);
    let (code, out) = doctor(&home, &url, &[("ROAM_CONFIG", &conf)]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains(&format!(
            "CA                 {} (ca_file in roam.toml)",
            ca.ca_cert.display()
        )),
        "{out}"
    );
}
