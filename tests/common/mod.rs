//! Helpers: run the binary, fill script templates, read committed output.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

pub fn weir() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    c.env_remove("WEIR_FAILPOINTS");
    // `table.local-time-zone` defaults to the machine's zone, as in Flink; expected
    // results are written for UTC.
    c.env("TZ", "UTC");
    c
}

/// Replaces `${name}` in `template`.
pub fn render(template: &str, vars: &[(&str, &str)]) -> String {
    let mut s = template.to_string();
    for (k, v) in vars {
        s = s.replace(&format!("${{{k}}}"), v);
    }
    s
}

pub fn write_script(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Runs `weir run` with `args` and returns its output, whatever the exit status.
pub fn run(args: &[&str]) -> Output {
    weir()
        .arg("run")
        .arg("--quiet")
        .args(args)
        .output()
        .expect("run weir")
}

/// Runs `weir run` and asserts success.
pub fn run_ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "weir {args:?} failed: {}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub fn spawn(args: &[&str], envs: &[(&str, &str)]) -> Child {
    weir()
        .arg("run")
        .arg("--quiet")
        .args(args)
        .envs(envs.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weir")
}

/// Lines of every committed (visible) file under `dir`, sorted. Hidden files and
/// folders (`.x`, `_x`) are pending or in progress and must be ignored by readers. Lines of
/// files in subfolders (partitions) are prefixed with the folder, e.g. `k=1/ {...}`.
pub fn committed_lines(dir: &Path) -> Vec<String> {
    fn walk(dir: &Path, rel: &str, lines: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with('.') || name.starts_with('_') {
                continue;
            }
            if e.path().is_dir() {
                walk(&e.path(), &format!("{rel}{name}/"), lines);
                continue;
            }
            let text = std::fs::read_to_string(e.path()).unwrap();
            let prefix = if rel.is_empty() {
                String::new()
            } else {
                format!("{rel} ")
            };
            lines.extend(
                text.lines()
                    .filter(|l| !l.is_empty())
                    .map(|l| format!("{prefix}{l}")),
            );
        }
    }
    let mut lines = Vec::new();
    walk(dir, "", &mut lines);
    lines.sort();
    lines
}

/// The first field of every committed line under `dir` that is a number (a CSV header is
/// not), sorted; repeated values stay.
pub fn committed_numbers(dir: &Path) -> Vec<i64> {
    let mut v: Vec<i64> = committed_lines(dir)
        .iter()
        .filter_map(|l| l.split(',').next()?.parse().ok())
        .collect();
    v.sort();
    v
}

/// True once a completed checkpoint exists under `dir`.
pub fn has_checkpoint(dir: &Path) -> bool {
    fn walk(p: &Path) -> bool {
        let Ok(rd) = std::fs::read_dir(p) else {
            return false;
        };
        rd.flatten().any(|e| {
            let path = e.path();
            if path.is_dir() {
                walk(&path)
            } else {
                e.file_name() == "_metadata"
            }
        })
    }
    walk(dir)
}

/// A small deterministic random generator for kill times.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

/// Applies the debezium-json changelog lines among `lines` (order-free: +1 per `after`,
/// -1 per `before`) and returns the remaining rows, sorted, with the other lines.
pub fn materialize(lines: Vec<String>) -> Vec<String> {
    let mut counts: std::collections::BTreeMap<String, i64> = Default::default();
    let mut plain = Vec::new();
    for line in lines {
        let Some(at) = line.find("{\"before\":") else {
            plain.push(line);
            continue;
        };
        let (prefix, body) = line.split_at(at);
        let body = &body["{\"before\":".len()..];
        let (rows, op) = body
            .rsplit_once(",\"op\":")
            .unwrap_or_else(|| panic!("not a debezium line: {line}"));
        let (before, after) = rows
            .split_once(",\"after\":")
            .unwrap_or_else(|| panic!("not a debezium line: {line}"));
        let (row, delta) = match op {
            "\"c\"}" => (after, 1),
            "\"d\"}" => (before, -1),
            other => panic!("unknown op {other} in {line}"),
        };
        *counts.entry(format!("{prefix}{row}")).or_default() += delta;
    }
    for (row, n) in counts {
        assert!(n >= 0, "{row} was retracted more often than inserted ({n})");
        plain.extend(std::iter::repeat_n(row, n as usize));
    }
    plain.sort();
    plain
}

/// Free loopback port for a server a test starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts the shell command `command` in the background, stopped when the test process
/// ends (a shell watches our pid), and waits until 127.0.0.1:`port` accepts connections.
pub fn start_service(command: &str, port: u16, what: &str) {
    let watcher = format!(
        "{command} >/dev/null 2>&1 & S=$!; \
         while kill -0 {} 2>/dev/null; do sleep 1; done; kill $S",
        std::process::id()
    );
    #[allow(clippy::zombie_processes)] // the watcher ends on its own, after the test process
    let _ = Command::new("sh")
        .args(["-c", &watcher])
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "{what} did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// What an ended child (spawned with a piped stderr) wrote to stderr.
pub fn stderr_of(child: &mut Child) -> String {
    use std::io::Read;
    let mut err = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        stderr.read_to_string(&mut err).unwrap();
    }
    err
}

/// SIGKILLs an unbounded job again and again while its input arrives: each run is
/// started by `spawn_at` at the next of `parallelisms` (a restore at another
/// parallelism), lives `min_ms` plus up to `spread_ms` more, must still be running, and
/// is killed — at least `kills` times and until `producing` has finished. Returns the
/// number of kills.
pub fn kill_while_producing(
    spawn_at: impl Fn(&str) -> Child,
    parallelisms: &[&str],
    kills: usize,
    (min_ms, spread_ms): (u64, u64),
    producing: std::thread::JoinHandle<()>,
    seed: u64,
) -> usize {
    let mut rng = Lcg(seed);
    let mut done = 0;
    let started = std::time::Instant::now();
    while done < kills || !producing.is_finished() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(240),
            "too slow: {done} kills"
        );
        let mut child = spawn_at(parallelisms[done % parallelisms.len()]);
        std::thread::sleep(std::time::Duration::from_millis(
            min_ms + rng.next(spread_ms),
        ));
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the job ended by itself ({status}): {}",
                stderr_of(&mut child)
            );
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        done += 1;
    }
    producing.join().unwrap();
    done
}

/// Golden script `name`: its template (`tests/sql/NAME.sql`) and its expected rows
/// (`tests/sql/NAME.expected`).
pub fn golden(name: &str) -> (String, Vec<String>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sql");
    let template = std::fs::read_to_string(root.join(format!("{name}.sql"))).unwrap();
    let expected = std::fs::read_to_string(root.join(format!("{name}.expected")))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    (template, expected)
}

/// The golden scripts' names (`tests/sql/NAME.sql`), sorted.
pub fn golden_names() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sql");
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".sql").map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

/// One HTTP/1.1 request; returns the status code and the body.
pub fn http(addr: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).to_string();
    let status = text[9..12].parse().unwrap();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    (status, body)
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&tail[..n]);
        rest = &tail[n + 2..];
    }
    out
}

pub fn get_json(addr: &str, path: &str) -> serde_json::Value {
    let (status, body) = http(addr, "GET", path, None);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap()
}
