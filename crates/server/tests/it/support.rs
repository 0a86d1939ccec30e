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

pub fn cli_output(data_dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .env_remove("CROSSTAB_DATABASE_URL")
        .env_remove("CROSSTAB_DATA_DIR")
        .output()
        .unwrap()
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

pub fn key_id(key: &str) -> &str {
    key.split('_').nth(2).unwrap()
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
        Server::spawn(data_dir, extra, "warn", Stdio::inherit())
    }

    /// Like [`Server::start`], logging at the default level (the access log) to `log`.
    pub fn start_logging_to(data_dir: &Path, extra: &[&str], log: &Path) -> Server {
        let log = std::fs::File::create(log).unwrap();
        Server::spawn(data_dir, extra, "info", Stdio::from(log))
    }

    fn spawn(data_dir: &Path, extra: &[&str], log_level: &str, stderr: Stdio) -> Server {
        let mut child = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
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
    let key = create_key(&data, "acme", &["--grant", "SMALL"]);
    (data, key)
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
