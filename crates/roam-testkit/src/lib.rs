//! Fixtures shared by roam's test suites: real servers (nginx, Python's `http.server`)
//! started on a free loopback port with their state in a scratch directory, and scratch
//! trees that vanish when dropped. Servers are required, never skipped: a machine without
//! them fails the tests with a message naming the package (CI installs them).

pub mod archive;
pub mod backend;
pub mod chirp;
pub mod dav;
pub mod ext;
pub mod fault;
pub mod ftp;
pub mod fuzz;
pub mod jpeg;
pub mod mp3;
pub mod net;
pub mod s3;
pub mod sftp;
pub mod squid;
pub mod tls;

use std::fs;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Once};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

/// A fresh world-readable directory under /tmp, removed on drop. World-readable because
/// nginx workers run as `nobody` when the tests run as root.
pub struct Scratch {
    pub path: PathBuf,
}

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("roam-{name}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        mkdir(&path);
        Scratch { path }
    }

    pub fn join(&self, rel: &str) -> PathBuf {
        self.path.join(rel)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Creates `path` and its parents with mode 0755.
pub fn mkdir(path: &Path) {
    fs::create_dir_all(path).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// Writes `data` at `path` (creating parents) with `mode`.
pub fn write_file(path: &Path, data: &[u8], mode: u32) {
    mkdir(path.parent().unwrap());
    fs::write(path, data).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// `len` bytes of deterministic noise (xorshift), so a shifted or repeated block shows.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The modification time of the local file `path`.
pub fn mtime_of(path: &Path) -> SystemTime {
    fs::metadata(path).unwrap().modified().unwrap()
}

/// Whether two times lie within a minute of each other, either way round: servers round
/// and clocks drift, so tests compare times only this loosely.
pub fn within_a_minute(a: SystemTime, b: SystemTime) -> bool {
    let gap = a
        .duration_since(b)
        .or_else(|_| b.duration_since(a))
        .unwrap();
    gap < Duration::from_secs(60)
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `path` if it exists, else its file name from `$PATH`; fails the test when neither does.
pub fn required(path: &str, package: &str) -> PathBuf {
    let name = Path::new(path).file_name().unwrap();
    let search = std::env::var_os("PATH").unwrap_or_default();
    std::iter::once(PathBuf::from(path))
        .chain(std::env::split_paths(&search).map(|dir| dir.join(name)))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{path} is required by roam's tests and was not found (install {package})")
        })
}

/// A server process on 127.0.0.1, stopped on drop.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    run: PathBuf,
}

impl Server {
    /// nginx serving `www` with `autoindex on`; its pid file and logs live in `run`.
    ///
    /// The port was free when chosen, but another process may bind it before nginx does:
    /// nginx then exits, and we start it again on another port.
    pub fn nginx(www: &Path, run: &Path) -> Server {
        Server::nginx_with(www, run, &NginxExtra::default())
    }

    /// [`Server::nginx`] with `directives` at the end of its server block (`location`s,
    /// `add_header`s, `expires`).
    pub fn nginx_directives(www: &Path, run: &Path, directives: &str) -> Server {
        let extra = NginxExtra {
            server: directives.to_owned(),
            ..NginxExtra::default()
        };
        Server::nginx_with(www, run, &extra)
    }

    /// [`Server::nginx`] with `extra` directives in its configuration.
    pub(crate) fn nginx_with(www: &Path, run: &Path, extra: &NginxExtra) -> Server {
        let nginx = required("/usr/sbin/nginx", "Debian's nginx-light");
        mkdir(run);
        for _ in 0..5 {
            let port = free_port();
            let child = spawn_nginx(&nginx, www, run, port, extra);
            if let Some(child) = pid_file_ready(child, &run.join("nginx.pid"), "nginx") {
                return Server::running(child, port, run);
            }
        }
        let log = fs::read_to_string(run.join("error.log")).unwrap_or_default();
        panic!("nginx failed to start five times; its log:\n{log}");
    }

    /// [`Server::nginx`] where everything under `/private/` asks for `user` and `password`
    /// (Basic authorization, nginx's `auth_basic`): 401 without them.
    pub fn nginx_with_login(www: &Path, run: &Path, user: &str, password: &str) -> Server {
        let login = basic_auth(run, user, password);
        let extra = NginxExtra {
            server: format!("        location /private/ {{\n{login}        }}\n"),
            ..NginxExtra::default()
        };
        Server::nginx_with(www, run, &extra)
    }

    /// Python's `http.server` serving `www`, with its log (stderr) in `run/error.log`.
    ///
    /// It is started on port 0 so that it binds a free port itself, which no other process
    /// can take first, and announces which on stdout (`-u`: unbuffered, so at once).
    pub fn python(www: &Path, run: &Path) -> Server {
        let python = required("python3", "python3");
        mkdir(run);
        let log = fs::File::create(run.join("error.log")).unwrap();
        let mut child = Command::new(python)
            .args(["-u", "-m", "http.server", "--bind", "127.0.0.1", "0"])
            .arg("--directory")
            .arg(www)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("starting python3 -m http.server");
        match announced_port(child.stdout.take().unwrap()) {
            Some(port) => Server::running(child, port, run),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                let log = fs::read_to_string(run.join("error.log")).unwrap_or_default();
                panic!("python3 -m http.server did not start; its log:\n{log}");
            }
        }
    }

    /// Adopts a started server process that listens on `port` (check readiness first, e.g.
    /// with [`wait_for_port`]); its logs are expected in `run`.
    pub fn running(child: Child, port: u16, run: &Path) -> Server {
        Server {
            child: Some(child),
            port,
            run: run.to_path_buf(),
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `host:port`, as it appears in `/http/HOST:PORT/...`.
    pub fn authority(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// nginx's access log so far (one line per request).
    pub fn access_log(&self) -> String {
        fs::read_to_string(self.run.join("access.log")).unwrap_or_default()
    }

    pub fn error_log(&self) -> String {
        fs::read_to_string(self.run.join("error.log")).unwrap_or_default()
    }

    /// Stops the server when the process exits: for servers held in statics, which are
    /// never dropped.
    pub fn stop_at_exit(&self) {
        static PIDS: Mutex<Vec<libc::pid_t>> = Mutex::new(Vec::new());
        static HOOK: Once = Once::new();
        extern "C" fn stop_all() {
            for &pid in PIDS.lock().unwrap().iter() {
                // SAFETY: kill(2) touches no memory.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
        }
        if let Some(child) = &self.child {
            PIDS.lock().unwrap().push(child.id() as libc::pid_t);
        }
        // SAFETY: registering a plain extern "C" function.
        HOOK.call_once(|| unsafe {
            libc::atexit(stop_all);
        });
    }

    /// Stops the server now (SIGTERM, so the nginx master takes its workers down).
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: kill(2) touches no memory; `pid` is our child, not yet reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("server log of the failed test:\n{}", self.error_log());
        }
        self.stop();
    }
}

/// Writes the configuration for `port` and starts nginx in the foreground. `-e` sends the
/// errors of startup itself (before the configuration is read) to the log as well.
fn spawn_nginx(nginx: &Path, www: &Path, run: &Path, port: u16, extra: &NginxExtra) -> Child {
    let conf = run.join("nginx.conf");
    fs::write(&conf, nginx_conf(run, www, port, extra)).unwrap();
    Command::new(nginx)
        .arg("-p")
        .arg(run)
        .arg("-c")
        .arg(&conf)
        .arg("-e")
        .arg(run.join("error.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting nginx")
}

/// `child` once it has written its pid to `pid_file`, which nginx and sshd do only after
/// binding their port; `None` if it exited first (the port was taken). `what` names it in
/// the failure. The pid tells a stale file of an earlier attempt.
pub(crate) fn pid_file_ready(mut child: Child, pid_file: &Path, what: &str) -> Option<Child> {
    let pid = child.id().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if child.try_wait().unwrap().is_some() {
            return None;
        }
        if fs::read_to_string(pid_file).is_ok_and(|written| written.trim() == pid) {
            return Some(child);
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not start within 10 s"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// The port in the line `http.server` prints once bound:
/// "Serving HTTP on 127.0.0.1 port 40123 (http://127.0.0.1:40123/) ...".
/// `None` if it exited without printing it.
fn announced_port(stdout: ChildStdout) -> Option<u16> {
    let mut banner = String::new();
    BufReader::new(stdout).read_line(&mut banner).ok()?;
    banner
        .split_whitespace()
        .skip_while(|word| *word != "port")
        .nth(1)?
        .parse()
        .ok()
}

/// nginx's directives asking for `user` and `password`, checked against an htpasswd file
/// written in `run` (nginx's `{PLAIN}` scheme: a test login needs no hashing).
pub(crate) fn basic_auth(run: &Path, user: &str, password: &str) -> String {
    let file = run.join("htpasswd");
    write_file(
        &file,
        format!("{user}:{{PLAIN}}{password}\n").as_bytes(),
        0o644,
    );
    format!(
        "        auth_basic \"roam tests\";\n        auth_basic_user_file {};\n",
        file.display()
    )
}

/// Directives that [`Server::nginx_with`] adds to the configuration: `main` at its top
/// (where `load_module` must be), `http` in its http block, `server` at the end of its
/// server block.
#[derive(Default)]
pub(crate) struct NginxExtra {
    pub main: String,
    pub http: String,
    pub server: String,
}

fn nginx_conf(run: &Path, www: &Path, port: u16, extra: &NginxExtra) -> String {
    let run = run.display();
    format!(
        "{main}daemon off;
master_process on;
worker_processes 1;
pid {run}/nginx.pid;
error_log {run}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log {run}/access.log;
    client_body_temp_path {run}/client_body;
    proxy_temp_path {run}/proxy;
    fastcgi_temp_path {run}/fastcgi;
    uwsgi_temp_path {run}/uwsgi;
    scgi_temp_path {run}/scgi;
{http}    server {{
        listen 127.0.0.1:{port};
        root {www};
        autoindex on;
{server}    }}
}}
",
        www = www.display(),
        main = extra.main,
        http = extra.http,
        server = extra.server,
    )
}

/// Waits up to 10 s until something accepts connections on 127.0.0.1:`port`; fails the test
/// (with `run/error.log`) if `child` exits first. For servers without a pid file to watch.
pub fn wait_for_port(child: &mut Child, port: u16, run: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            let log = fs::read_to_string(run.join("error.log")).unwrap_or_default();
            panic!("the server exited with {status} before listening on {port}: {log}");
        }
        assert!(
            Instant::now() < deadline,
            "nothing listened on port {port} within 10 s"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// A server on 127.0.0.1 that accepts connections and reads what it is sent, but never
/// answers: a hung server, for timeout tests. It stops listening when dropped.
pub struct Silent {
    pub port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Silent {
    pub fn start() -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = thread::spawn(move || {
            // Held, not read: the client's request sits unanswered until the end.
            let mut held = Vec::new();
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => held.push(conn),
                    Err(_) => thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Silent {
            port,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A tmpfs of a given size (`"1m"`) mounted at a directory, unmounted on drop: the way to
/// fill a server's disk on purpose. Needs root (CI runs as root); fails the test otherwise.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    pub fn mount(dir: &Path, size: &str) -> Tmpfs {
        mkdir(dir);
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("running mount");
        assert!(
            status.success(),
            "mounting a tmpfs at {} failed: the disk-full tests need root",
            dir.display()
        );
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}
