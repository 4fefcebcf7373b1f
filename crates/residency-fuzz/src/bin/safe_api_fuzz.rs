//! The long-run driver of the safe-API fuzzer ([`residency_fuzz::safe_api`]).
//!
//! ```text
//! safe-api-fuzz [--calls N] [--seconds T] [--seed S] [--batch K] [--watchdog SECS]
//!               [--skip CLASS,...|--skip-known|--skip-none] [--out DIR]
//! safe-api-fuzz --replay FILE... [--skip ...]
//! safe-api-fuzz --minimize FILE [--skip ...] [--out DIR]
//! ```
//!
//! The parent runs batches of `K` seeded random inputs, each batch in a child process (this
//! binary with `--child`), so that a crash (a signal) is seen and the run goes on; the child
//! reports every input, and a child silent for longer than the watchdog is killed and counted as a
//! hang. Before each input the child writes it to `DIR/current-<pid>.bin`: a crash or a hang keeps
//! the input that caused it. Every finding is written to `DIR/finding-<n>-<kind>.bin` with a
//! `.txt` line (its cause and summary), then minimized (the shortest prefix of the input that
//! gives the same kind of finding). The skip set defaults to the classes known open
//! ([`residency_fuzz::safe_api::KNOWN_OPEN`]). It prints the calls made, calls/s and the findings.
//! Exit status 1 when anything was found.

use residency_fuzz::safe_api::{generated, run_input, Class, Finding, KNOWN_OPEN};
use residency_vulkan::testing::test_desc;
use residency_vulkan::DeviceSet;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

struct Args {
    calls: u64,
    seconds: u64,
    seed: u64,
    batch: u64,
    watchdog: u64,
    skip: Vec<Class>,
    out: PathBuf,
    child: bool,
    replay: Vec<PathBuf>,
    minimize: Option<PathBuf>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        calls: 1_000_000,
        seconds: 0,
        seed: 1,
        batch: 200,
        watchdog: 60,
        skip: KNOWN_OPEN.to_vec(),
        out: std::env::temp_dir().join("residency-safe-api-fuzz"),
        child: false,
        replay: Vec::new(),
        minimize: None,
    };
    let mut it = std::env::args().skip(1);
    let num = |v: Option<String>, what: &str| -> Result<u64, String> {
        v.ok_or(format!("{what} needs a value"))?.parse().map_err(|e| format!("{what}: {e}"))
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--calls" => a.calls = num(it.next(), "--calls")?,
            "--seconds" => a.seconds = num(it.next(), "--seconds")?,
            "--seed" => a.seed = num(it.next(), "--seed")?,
            "--batch" => a.batch = num(it.next(), "--batch")?.max(1),
            "--watchdog" => a.watchdog = num(it.next(), "--watchdog")?.max(1),
            "--skip-known" => a.skip = KNOWN_OPEN.to_vec(),
            "--skip-none" => a.skip.clear(),
            "--skip" => {
                let v = it.next().ok_or("--skip needs classes")?;
                a.skip = v
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| Class::parse(s).ok_or(format!("unknown class {s}")))
                    .collect::<Result<_, _>>()?;
            }
            "--out" => a.out = it.next().ok_or("--out needs a folder")?.into(),
            "--child" => a.child = true,
            "--replay" => {
                a.replay.extend(it.by_ref().map(PathBuf::from));
            }
            "--minimize" => a.minimize = Some(it.next().ok_or("--minimize needs a file")?.into()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

fn skip_arg(skip: &[Class]) -> String {
    skip.iter().map(|c| c.name()).collect::<Vec<_>>().join(",")
}

fn open() -> DeviceSet {
    DeviceSet::new(&test_desc()).unwrap_or_else(|e| {
        eprintln!("no device set: {e}");
        std::process::exit(2)
    })
}

fn kind(f: &Finding) -> &'static str {
    match f {
        Finding::Panic(_) => "panic",
        Finding::Validation(_) => "validation",
        Finding::Leak(_) => "leak",
    }
}

/// The child: `batch` inputs of `seed` from `first`, one line each on stdout.
fn child(a: &Args, first: u64) -> ExitCode {
    let set = open();
    let current = a.out.join(format!("current-{}.bin", std::process::id()));
    let mut out = std::io::stdout().lock();
    for index in first..first + a.batch {
        let data = generated(a.seed, index);
        let _ = std::fs::write(&current, &data);
        let _ = writeln!(out, "start {index}");
        let _ = out.flush();
        match run_input(&set, &data, &a.skip) {
            Ok(o) => {
                let _ = writeln!(out, "ok {index} {} {}", o.calls, o.errors);
            }
            Err((f, o)) => {
                let _ = writeln!(
                    out,
                    "finding {index} {} {} {}",
                    o.calls,
                    kind(&f),
                    f.summary().replace('\n', " ")
                );
                let _ = out.flush();
                // The world may be in any state after a finding: a fresh process goes on.
                drop(set);
                return ExitCode::from(3);
            }
        }
        let _ = out.flush();
    }
    drop(set);
    let leaks = residency_vulkan::LEAKS_AT_TEARDOWN.load(Ordering::SeqCst);
    if leaks > 0 {
        let _ = writeln!(
            out,
            "finding {} 0 leak-at-teardown {leaks} objects alive when a device was destroyed",
            first + a.batch - 1
        );
        return ExitCode::from(3);
    }
    let _ = writeln!(out, "done");
    ExitCode::SUCCESS
}

/// How a child batch ended.
enum End {
    Done,
    /// (index, kind, summary).
    Finding(u64, String, String),
}

/// Runs one child batch from `first`; adds its calls to `calls`.
fn batch(a: &Args, first: u64, calls: &mut u64, inputs: &mut u64) -> (End, u64) {
    let exe = std::env::current_exe().expect("the driver's path");
    let mut cmd = Command::new(exe);
    cmd.args(["--child", "--seed", &a.seed.to_string(), "--batch", &a.batch.to_string()])
        .args(["--skip", &skip_arg(&a.skip), "--out"])
        .arg(&a.out)
        .env("RESIDENCY_FIRST_INPUT", first.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("spawn the child");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let current = a.out.join(format!("current-{}.bin", child.id()));
    let mut last = first;
    let end = loop {
        match rx.recv_timeout(Duration::from_secs(a.watchdog)) {
            Ok(Ok(line)) => {
                let mut w = line.splitn(5, ' ');
                match w.next() {
                    Some("start") => last = w.next().and_then(|v| v.parse().ok()).unwrap_or(last),
                    Some("ok") => {
                        *inputs += 1;
                        let _ = w.next();
                        *calls += w.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                    }
                    Some("finding") => {
                        let index = w.next().and_then(|v| v.parse().ok()).unwrap_or(last);
                        *calls += w.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                        *inputs += 1;
                        let k = w.next().unwrap_or("?").to_owned();
                        let s = w.next().unwrap_or("").to_owned();
                        let _ = child.wait();
                        break End::Finding(index, k, s);
                    }
                    Some("done") => {
                        let _ = child.wait();
                        break End::Done;
                    }
                    _ => {}
                }
            }
            Ok(Err(_)) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait().expect("the child's status");
                break End::Finding(last, "crash".into(), format!("the child died: {status}"));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                break End::Finding(last, "hang".into(), format!("no input finished in {} s", a.watchdog));
            }
        }
    };
    let _ = std::fs::remove_file(&current);
    (end, last)
}

/// Replays `data` in a child (`--replay`), returning the kind of its finding, if any.
fn replay_kind(a: &Args, data: &[u8]) -> Option<String> {
    let file = a.out.join(format!("minimize-{}.bin", std::process::id()));
    std::fs::write(&file, data).ok()?;
    let exe = std::env::current_exe().ok()?;
    let mut child = Command::new(exe)
        .args(["--skip", &skip_arg(&a.skip), "--replay"])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let stdout = child.stdout.take()?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let text: Vec<String> = BufReader::new(stdout).lines().map_while(Result::ok).collect();
        let _ = tx.send(text);
    });
    match rx.recv_timeout(Duration::from_secs(a.watchdog)) {
        Ok(lines) => {
            let status = child.wait().ok()?;
            if let Some(l) = lines.iter().find(|l| l.starts_with("finding")) {
                return l.split(' ').nth(3).map(str::to_owned);
            }
            if !status.success() && status.code() != Some(1) {
                return Some("crash".into());
            }
            None
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            Some("hang".into())
        }
    }
}

/// The shortest prefix of `data` (by bisection, then byte by byte from the end in steps) that
/// still gives a finding of `kind`.
fn minimize(a: &Args, data: &[u8], kind: &str) -> Vec<u8> {
    let same = |d: &[u8]| replay_kind(a, d).as_deref() == Some(kind);
    let (mut lo, mut hi) = (0usize, data.len());
    // Invariant: the prefix of length `hi` reproduces.
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if same(&data[..mid]) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let mut best = data[..hi].to_vec();
    // Drop chunks from the front while it still reproduces (ops are read in order, so the front
    // often holds creations the finding does not need — or does).
    let mut chunk = best.len() / 2;
    while chunk >= 4 {
        let mut at = 0;
        while at + chunk <= best.len() {
            let mut candidate = best[..at].to_vec();
            candidate.extend_from_slice(&best[at + chunk..]);
            if same(&candidate) {
                best = candidate;
            } else {
                at += chunk;
            }
        }
        chunk /= 2;
    }
    best
}

/// What tells two findings apart: the kind and, for a panic, where; for a validation problem, the
/// first message's id.
fn signature(kind: &str, summary: &str) -> String {
    match kind {
        "panic" => format!("panic {}", summary.rsplit(" at ").next().unwrap_or("")),
        "validation" => format!(
            "validation {}",
            summary.trim_start_matches("validation: ").split(':').next().unwrap_or("")
        ),
        _ => kind.to_owned(),
    }
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

fn record(a: &Args, n: usize, kind: &str, summary: &str, data: &[u8]) -> PathBuf {
    let base = a.out.join(format!("finding-{n}-{kind}"));
    let _ = std::fs::write(base.with_extension("bin"), data);
    let _ = std::fs::write(base.with_extension("txt"), format!("{kind}: {summary}\n"));
    base.with_extension("bin")
}

fn replay(a: &Args) -> ExitCode {
    let set = open();
    let mut found = false;
    for file in &a.replay {
        let data = match std::fs::read(file) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("{}: {e}", file.display());
                found = true;
                continue;
            }
        };
        match run_input(&set, &data, &a.skip) {
            Ok(o) => println!(
                "ok {} {} calls, {} typed errors, reached {:?}",
                file.display(),
                o.calls,
                o.errors,
                o.reached
            ),
            Err((f, o)) => {
                println!("finding 0 {} {} {}", o.calls, kind(&f), f.summary().replace('\n', " "));
                found = true;
            }
        }
    }
    drop(set);
    if residency_vulkan::LEAKS_AT_TEARDOWN.load(Ordering::SeqCst) > 0 {
        println!("finding 0 0 leak-at-teardown objects alive when a device was destroyed");
        found = true;
    }
    if found {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn main() -> ExitCode {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if a.child {
        let first = std::env::var("RESIDENCY_FIRST_INPUT").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
        return child(&a, first);
    }
    if !a.replay.is_empty() {
        return replay(&a);
    }
    let _ = std::fs::create_dir_all(&a.out);
    if let Some(file) = &a.minimize {
        let data = std::fs::read(file).expect("the input to minimize");
        let Some(kind) = replay_kind(&a, &data) else {
            println!("no finding to minimize");
            return ExitCode::SUCCESS;
        };
        let small = minimize(&a, &data, &kind);
        let path = record(&a, 0, &format!("{kind}-min"), "minimized", &small);
        println!("{kind}: {} → {} bytes: {} ({})", data.len(), small.len(), path.display(), hex(&small));
        return ExitCode::SUCCESS;
    }
    println!(
        "safe-api fuzz: seed {}, up to {} calls{}, batches of {}, watchdog {} s, skipping [{}], findings in {}",
        a.seed,
        a.calls,
        if a.seconds > 0 { format!(" or {} s", a.seconds) } else { String::new() },
        a.batch,
        a.watchdog,
        skip_arg(&a.skip),
        a.out.display()
    );
    let started = Instant::now();
    let (mut calls, mut inputs, mut next) = (0u64, 0u64, 0u64);
    // (kind, summary, minimized input, its length, times seen).
    let mut findings: Vec<(String, String, PathBuf, usize, u64)> = Vec::new();
    let mut last_report = Instant::now();
    while calls < a.calls && (a.seconds == 0 || started.elapsed().as_secs() < a.seconds) {
        let (end, last) = batch(&a, next, &mut calls, &mut inputs);
        match end {
            End::Done => next += a.batch,
            End::Finding(index, kind, summary) => {
                next = index.max(last) + 1;
                // The same kind at the same place (a panic's location, a validation message's
                // id, a crash or a hang): counted, not minimized again.
                let key = signature(&kind, &summary);
                if let Some(seen) = findings.iter_mut().find(|f| signature(&f.0, &f.1) == key) {
                    seen.4 += 1;
                    continue;
                }
                let data = generated(a.seed, index);
                let n = findings.len();
                record(&a, n, &kind, &summary, &data);
                let small = minimize(&a, &data, &kind);
                let path = record(&a, n, &format!("{kind}-min"), &summary, &small);
                println!(
                    "FINDING {n} (input {index}, {} → {} bytes, {}): {kind}: {summary}",
                    data.len(),
                    small.len(),
                    path.display()
                );
                findings.push((kind, summary, path, small.len(), 1));
            }
        }
        if last_report.elapsed() > Duration::from_secs(60) {
            last_report = Instant::now();
            let s = started.elapsed().as_secs_f64();
            println!(
                "{:.0} s: {inputs} inputs, {calls} calls, {:.1} calls/s, {} findings",
                s,
                calls as f64 / s,
                findings.len()
            );
        }
    }
    let s = started.elapsed().as_secs_f64();
    println!(
        "done: {inputs} inputs, {calls} calls in {s:.0} s ({:.1} calls/s), {} findings",
        calls as f64 / s,
        findings.len()
    );
    for (i, (kind, summary, path, len, seen)) in findings.iter().enumerate() {
        println!("  {i}: {kind}, seen {seen} times ({len} bytes, {}): {summary}", path.display());
    }
    if findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
