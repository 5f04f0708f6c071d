//! The HTML report, opened in a real headless Chromium (Debian's `chromium`):
//! the chart must draw, the page must log no error and fetch nothing, and a
//! screenshot is kept under `target/test-artifacts/` for a human to look at.

use crate::common::*;
use futures::StreamExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHROMIUM: &str = "/usr/bin/chromium";

/// The browser; a missing one fails the test with the install command.
fn chromium() -> PathBuf {
    let p =
        std::env::var_os("CHROMIUM").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(CHROMIUM));
    assert!(
        p.is_file(),
        "headless Chromium not found at {}: install it with `apt-get update && apt-get install -y --no-install-recommends chromium` (scripts/test.sh does this), or point CHROMIUM at a Chromium binary",
        p.display()
    );
    p
}

/// `target/test-artifacts/`, next to the binary under test (so CARGO_TARGET_DIR
/// is honoured).
pub fn artifacts() -> PathBuf {
    let d = Path::new(env!("CARGO_BIN_EXE_nats-cutover"))
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("test-artifacts");
    std::fs::create_dir_all(&d).expect("create target/test-artifacts");
    d
}

struct Browser {
    stdout: String,
    stderr: String,
}

/// Runs headless Chromium once on a local file with a fresh profile, no
/// network (every host name resolves to nothing, so a fetch would fail and
/// log), and console messages on stderr.
fn browse(page: &Path, mode: &[&str]) -> Browser {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let profile = std::env::temp_dir().join(format!(
        "nats-cutover-chromium-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&profile);
    let url = format!("file://{}", page.canonicalize().expect("report exists").display());
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg("--host-resolver-rules=MAP * ~NOTFOUND")
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--enable-logging=stderr", "--v=0"])
        .args(mode)
        .arg(&url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    // Read both pipes on threads so a chatty browser never blocks on a full pipe.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out, &mut s).ok();
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err, &mut s).ok();
        s
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for chromium") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 90 s on {url}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let b = Browser { stdout: t_out.join().unwrap(), stderr: t_err.join().unwrap() };
    let _ = std::fs::remove_dir_all(&profile);
    assert!(status.success(), "chromium failed ({status}) on {url}:\n{}", b.stderr);
    b
}

/// Console output of the page (Chromium logs it as `CONSOLE` lines; its own
/// noise, such as a missing D-Bus, is not the page's).
fn page_console(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught")).collect()
}

fn body_attr<'a>(dom: &'a str, name: &str) -> Option<&'a str> {
    let body = &dom[dom.find("<body")?..];
    let body = &body[..body.find('>')?];
    let key = format!("{name}=\"");
    let start = body.find(&key)? + key.len();
    Some(&body[start..start + body[start..].find('"')?])
}

/// Asserts the page is self-contained, draws its chart without error, and
/// keeps a screenshot; returns the DOM after the scripts ran.
fn check_in_browser(report: &Path, screenshot: &Path) -> String {
    let html = std::fs::read_to_string(report).unwrap();
    // Self-contained: nothing to load. The only URL is the SVG namespace name.
    for needle in ["src=", "<link", "@import", "url(", "<iframe", "fetch(", "XMLHttpRequest"] {
        assert!(!html.contains(needle), "report refers to something outside itself ({needle:?})");
    }
    assert_eq!(
        html.matches("http").count(),
        html.matches("http://www.w3.org/2000/svg").count(),
        "report contains a URL"
    );

    let b = browse(report, &["--dump-dom"]);
    let dom = b.stdout;
    assert_eq!(page_console(&b.stderr), Vec::<&str>::new(), "the page logged to the console");
    assert_eq!(body_attr(&dom, "data-errors"), None, "script errors on the page");
    assert_eq!(
        body_attr(&dom, "data-chart"),
        Some("drawn"),
        "chart not drawn; body: {:?}",
        &dom[dom.find("<body").unwrap_or(0)..][..200.min(dom.len())]
    );
    assert!(dom.contains("<svg") && dom.contains("<polyline"), "no SVG lines in the DOM");

    let _ = std::fs::remove_file(screenshot);
    let b = browse(
        report,
        &[&format!("--screenshot={}", screenshot.display()), "--window-size=1280,1600"],
    );
    assert_eq!(
        page_console(&b.stderr),
        Vec::<&str>::new(),
        "the page logged to the console while taking the screenshot"
    );
    let png = std::fs::read(screenshot).expect("screenshot written");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 20_000,
        "screenshot is not a full PNG ({} bytes)",
        png.len()
    );
    eprintln!("screenshot: {}", screenshot.display());
    dom
}

#[test]
fn demo_report_draws_its_timeline_in_headless_chromium() {
    chromium();
    let dir = artifacts();
    let report = dir.join("report-demo.html");
    let _ = std::fs::remove_file(&report);
    let out = cli(&[
        "demo",
        "--json",
        "--rate",
        "300",
        "--duration",
        "3",
        "--report",
        report.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let dom = check_in_browser(&report, &dir.join("report-demo.png"));
    // Rates from 100 ms samples over 3 s, plus consumer samples: many points.
    let points: u64 =
        body_attr(&dom, "data-points").and_then(|p| p.parse().ok()).expect("data-points");
    assert!(points > 60, "only {points} points drawn");
    for step in STEPS {
        assert!(dom.contains(&format!(">{step} ")), "step {step} not marked on the chart");
    }
    assert!(dom.contains(">checkpoint worker F="), "checkpoint not marked on the chart");
    // Searched as SVG text (">..."): the same words are in the embedded data and script.
    assert!(
        dom.contains(">publish rate<")
            && dom.contains(">processed rate<")
            && dom.contains(">worker num_ack_pending<"),
        "series legend missing"
    );
    assert!(dom.contains("VERIFIED: every published message"), "workload verification missing");
    assert!(dom.contains("HOLDS: every message once"), "the streams' verification is missing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_report_draws_the_consumer_timeline_in_headless_chromium() {
    chromium();
    let e = env().await;
    orders(&e).await;
    // Four processed, so the checkpoint is not the trivial 0.
    let c: async_nats::jetstream::consumer::PullConsumer = e.pull_consumer("A", "C").await;
    let mut msgs = c.fetch().max_messages(4).messages().await.expect("fetch");
    let mut acked = 0;
    while let Some(m) = msgs.next().await {
        m.expect("message").double_ack().await.expect("ack");
        acked += 1;
    }
    assert_eq!(acked, 4);
    let dir = artifacts();
    let report = dir.join("report-run.html");
    let _ = std::fs::remove_file(&report);
    let out = e.cli(&move_args(
        &["run"],
        "A",
        "B",
        "C",
        &["--yes", "--report", report.to_str().unwrap()],
    ));
    assert_eq!(out.code, 0, "{out:?}");
    let dom = check_in_browser(&report, &dir.join("report-run.png"));
    let points: u64 =
        body_attr(&dom, "data-points").and_then(|p| p.parse().ok()).expect("data-points");
    assert!(points >= 2, "the consumer was sampled at least once: {points} points");
    assert!(dom.contains(">checkpoint C F=4<"), "checkpoint not marked on the chart");
    assert!(dom.contains("VERIFIED: every consumer moved"), "verdict missing");
    assert!(dom.contains("HOLDS: every message once"), "the streams' verification is missing");
    assert!(dom.contains(">C num_pending<"), "consumer series legend missing");
    assert!(!dom.contains(">publish rate<"), "no workload, no rate panel");
}

#[test]
fn run_refuses_a_report_path_it_cannot_write_before_changing_anything() {
    let out = cli(&move_args(
        &["--server", "nats://127.0.0.1:1", "run"],
        "A",
        "B",
        "C",
        &["--yes", "--report", "/nonexistent-dir/x.html"],
    ));
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--report") && out.stderr.contains("not a directory"), "{out:?}");
}
