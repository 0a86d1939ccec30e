//! Running the real `crosstab` binary: CLI commands and a server on a free loopback port.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_crosstab");

/// Runs `crosstab ARGS --data-dir DIR`, asserting success; returns stdout.
pub fn cli(data_dir: &Path, args: &[&str]) -> String {
    let output = cli_output(data_dir, args);
    assert!(
        output.status.success(),
        "crosstab {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Runs `crosstab ARGS --data-dir DIR` and returns its output, whatever its status. A
/// command still running after a minute (a `serve` that should have been refused, say)
/// is killed and fails the test, rather than hanging it.
pub fn cli_output(data_dir: &Path, args: &[&str]) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .env_remove("CROSSTAB_DATABASE_URL")
        .env_remove("CROSSTAB_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Both pipes drained while it runs, so a full one never stalls it.
    fn drain(
        pipe: Option<impl std::io::Read + Send + 'static>,
    ) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                pipe.read_to_end(&mut bytes).unwrap();
            }
            bytes
        })
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            // Not reaped yet, so its pid is still its own.
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("crosstab {args:?} was still running after a minute");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// `crosstab db migrate` on the data dir's database (created if missing), with `extra`
/// flags (e.g. `--database URL`): administrative commands use only a migrated database.
pub fn migrate(data_dir: &Path, extra: &[&str]) {
    let mut args = vec!["db", "migrate"];
    args.extend_from_slice(extra);
    cli(data_dir, &args);
}

/// A key created with the CLI (the key alone on stdout).
pub fn create_key(data_dir: &Path, account: &str, extra: &[&str]) -> String {
    let mut args = vec!["key", "create", "--account", account];
    args.extend_from_slice(extra);
    let out = cli(data_dir, &args);
    let key = out.trim().to_owned();
    assert!(key.starts_with("ctx_") && !key.contains('\n'), "{out}");
    key
}

/// Held by the tests that load the machine most (the cluster's, the 64 clients'), so they
/// never run at once: the cluster's has time limits of its own to keep (1 s, 2 s).
pub static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub fn key_id(key: &str) -> &str {
    key.split('_').nth(2).unwrap()
}

/// The secret part of a key: everything after `ctx_<env>_<id>_` (it may itself hold `_`).
pub fn key_secret(key: &str) -> &str {
    let secret = key.splitn(4, '_').nth(3).unwrap();
    assert!(secret.len() >= 40, "{key}");
    secret
}

/// `crosstab serve` on 127.0.0.1, a free port.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// What it printed on stdout before it listened (`--demo`'s key and user).
    pub banner: Vec<String>,
}

impl Server {
    pub fn start(data_dir: &Path, extra: &[&str]) -> Server {
        Server::spawn(data_dir, "127.0.0.1:0", extra, "warn", Stdio::inherit())
    }

    /// Like [`Server::start`], listening on `listen` (to restart it on the same port).
    pub fn start_at(data_dir: &Path, listen: &str, extra: &[&str]) -> Server {
        Server::spawn(data_dir, listen, extra, "warn", Stdio::inherit())
    }

    /// SIGKILL: no shutdown at all.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Like [`Server::start`], logging at the default level (the access log) to `log`.
    pub fn start_logging_to(data_dir: &Path, extra: &[&str], log: &Path) -> Server {
        let log = std::fs::File::create(log).unwrap();
        Server::spawn(data_dir, "127.0.0.1:0", extra, "info", Stdio::from(log))
    }

    fn spawn(
        data_dir: &Path,
        listen: &str,
        extra: &[&str],
        log_level: &str,
        stderr: Stdio,
    ) -> Server {
        let mut child = Command::new(BIN)
            .args(["serve", "--listen", listen, "--data-dir"])
            .arg(data_dir)
            .args(extra)
            .env_remove("CROSSTAB_DATABASE_URL")
            .env("RUST_LOG", log_level)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let mut banner = Vec::new();
        let addr = loop {
            let line = lines
                .next()
                .expect("server exited before listening")
                .unwrap();
            if let Some(rest) = line.strip_prefix("crosstab listening on http://") {
                break rest.trim().parse().unwrap();
            }
            banner.push(line);
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server {
            child,
            addr,
            banner,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The server process's id.
    pub fn child_id(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `within` for the server to exit cleanly (after a signal sent).
    pub fn wait_stopped(mut self, within: Duration) {
        let started = std::time::Instant::now();
        while started.elapsed() < within {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "server exited with {status}");
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("server did not stop within {within:?}");
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn stop(self) {
        self.stop_with("TERM");
    }

    /// `signal` (`TERM`, `INT`), then wait for a clean exit.
    pub fn stop_with(mut self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "server exited with {status}");
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        panic!("server did not stop within 10 s of SIG{signal}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A data dir under `temp` with [`write_small_survey`] installed as `SMALL`, and a key for
/// account `acme` to the whole of it: (the data dir, the key).
pub fn small_data_dir(temp: &Path) -> (std::path::PathBuf, String) {
    let data = temp.join("data");
    let small = write_small_survey(&temp.join("small"), "SMALL");
    cli(&data, &["survey", "import", small.to_str().unwrap()]);
    migrate(&data, &[]);
    let key = create_key(&data, "acme", &["--grant", "SMALL"]);
    (data, key)
}

/// `crosstab user create` of `username` in `account` with `password` (from a pipe), with
/// `extra` arguments (`--database URL`).
pub fn create_user(data: &Path, username: &str, account: &str, password: &str, extra: &[&str]) {
    use std::io::Write;
    let mut create = Command::new(BIN)
        .args([
            "user",
            "create",
            "--username",
            username,
            "--account",
            account,
        ])
        .args(extra)
        .arg("--data-dir")
        .arg(data)
        .env_remove("CROSSTAB_DATABASE_URL")
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    create
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{password}\n").as_bytes())
        .unwrap();
    assert!(create.wait().unwrap().success());
}

/// The answer to signing `username` in to `server`'s app with `password` (from the
/// server's own origin).
pub fn app_login(
    client: &reqwest::blocking::Client,
    server: &Server,
    username: &str,
    password: &str,
) -> reqwest::blocking::Response {
    client
        .post(server.url("/app/login"))
        .header("origin", format!("http://{}", server.addr))
        .json(&serde_json::json!({"username": username, "password": password}))
        .send()
        .unwrap()
}

/// The session cookie (`name=value`) a sign-in's answer sets.
pub fn session_cookie(headers: &reqwest::header::HeaderMap) -> String {
    headers["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

/// A six-respondent survey whose figures are checked by hand in the tests.
///
/// | id | W   | REGION | GENDER | AGE |
/// |----|-----|--------|--------|-----|
/// | r1 | 100 | E      | 1      | 20  |
/// | r2 | 200 | E      | 2      | 30  |
/// | r3 | 300 | E      | 2      | 40  |
/// | r4 | 400 | W      | 1      | 50  |
/// | r5 | 500 | W      | 2      | 60  |
/// | r6 | 600 | W      | 1      | 70  |
///
/// Units of 100; unstable at 1 respondent or fewer.
pub fn write_small_survey(dir: &Path, code: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("respondents.csv"),
        "ID,W,REGION,GENDER,AGE\nr1,100,E,1,20\nr2,200,E,2,30\nr3,300,E,2,40\nr4,400,W,1,50\nr5,500,W,2,60\nr6,600,W,1,70\n",
    )
    .unwrap();
    let toml = format!(
        r#"code = "{code}"
name = "Small hand-checked survey"
respondents = "respondents.csv"
id_column = "ID"
weight_column = "W"
group_column = "REGION"
audience_report_units = 100
unstable_max_resps = 1

[[codes]]
code = "WOMEN"
label = "Women"
expr = "GENDER = 2"

[[population_bases]]
code = "ALL"
label = "Everyone"
expr = "*"

[[population_bases]]
code = "OVER35"
label = "Aged 35 and over"
expr = "AGE >= 35"
"#
    );
    let path = dir.join("survey.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

/// A free loopback port (bound and released: free again for the caller to bind).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A throwaway PostgreSQL cluster of Debian's packages on a free loopback port, that
/// can be stopped and started again (as root, it runs as `nobody`, as initdb wants).
pub struct Postgres {
    bin: std::path::PathBuf,
    dir: std::path::PathBuf,
    port: u16,
}

impl Postgres {
    /// Debian's PostgreSQL binaries, newest version, if installed.
    pub fn binaries() -> Option<std::path::PathBuf> {
        // Debian's versioned directories, else the initdb on PATH (as scripts/test finds it).
        let on_path = std::env::var_os("PATH")
            .and_then(|path| std::env::split_paths(&path).find(|dir| dir.join("initdb").exists()));
        let mut found: Vec<std::path::PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .map(|dirs| {
                dirs.filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
                    .filter(|bin| bin.join("initdb").exists())
                    .collect()
            })
            .unwrap_or_default();
        if found.is_empty() {
            return on_path;
        }
        found.sort_by_key(|path| {
            path.parent()
                .and_then(|p| p.file_name())
                .and_then(|n| n.to_str())
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(0)
        });
        found.pop()
    }

    fn as_postgres(&self, tool: &str) -> Command {
        let root = std::env::var("USER").is_ok_and(|u| u == "root")
            || Command::new("id")
                .arg("-u")
                .output()
                .is_ok_and(|o| o.stdout.starts_with(b"0"));
        let mut command = if root {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(self.bin.join(tool));
            c
        } else {
            Command::new(self.bin.join(tool))
        };
        command.stdout(Stdio::null());
        command
    }

    /// Creates and starts a cluster under `dir`.
    pub fn start(bin: std::path::PathBuf, dir: &Path) -> Postgres {
        std::fs::create_dir_all(dir).unwrap();
        let _ = Command::new("chown").args(["nobody"]).arg(dir).status();
        let mut postgres = Postgres {
            bin,
            dir: dir.to_path_buf(),
            port: 0,
        };
        let status = postgres
            .as_postgres("initdb")
            .args(["-U", "crosstab", "--auth=trust", "-D"])
            .arg(dir.join("data"))
            .status()
            .unwrap();
        assert!(status.success(), "initdb failed");
        // Picked only now: initdb takes seconds, in which another test could bind it.
        postgres.port = free_port();
        postgres.start_again();
        postgres
    }

    /// Starts the stopped cluster again, on the same port.
    pub fn start_again(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.display()
        );
        let status = self
            .as_postgres("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.dir.join("server.log"))
            .args(["-w", "-o", &options, "start"])
            .status()
            .unwrap();
        assert!(status.success(), "pg_ctl start failed");
    }

    /// Stops it (fast: open connections are ended).
    pub fn stop(&self) {
        let _ = self
            .as_postgres("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "fast", "-w", "stop"])
            .status();
    }

    pub fn url(&self) -> String {
        format!("postgres://crosstab@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
    }
}

/// nginx (Debian's) in front of `replicas`, from `deploy/nginx.conf`, on `listen`.
pub struct Nginx {
    child: Child,
}

impl Nginx {
    pub fn binary() -> Option<std::path::PathBuf> {
        ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .iter()
            .map(std::path::PathBuf::from)
            .find(|path| path.exists())
    }

    pub fn start(bin: &Path, dir: &Path, listen: &str, replicas: &[String]) -> Nginx {
        std::fs::create_dir_all(dir).unwrap();
        let template = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/nginx.conf"
        ))
        .unwrap();
        let upstreams: String = replicas
            .iter()
            .map(|r| format!("server {r} max_fails=1 fail_timeout=2s;\n        "))
            .collect();
        let conf = template
            .replace("@LISTEN@", listen)
            .replace("@UPSTREAMS@", upstreams.trim_end())
            .replace("@PREFIX@", dir.to_str().unwrap());
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let child = Command::new(bin)
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&path)
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let nginx = Nginx { child };
        for _ in 0..100 {
            if std::net::TcpStream::connect(listen).is_ok() {
                return nginx;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(nginx);
        panic!(
            "nginx did not listen on {listen}: {}",
            std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        );
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM, not SIGKILL: the master stops its workers, which a kill would orphan.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}
