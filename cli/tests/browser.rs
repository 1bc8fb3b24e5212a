//! The person's page in a real browser: headless Chromium, driven over
//! WebDriver (chromedriver) with fantoccini, opens the web sheet served by
//! `human-plus surface --web` and `human-plus demo --web`, against the real
//! relay server over real sockets, with the tokio runtime as the agent.
//!
//! Without Chromium and chromedriver the tests are skipped with a message,
//! unless `HUMAN_PLUS_REQUIRE_BROWSER=1` or `CI=true` is set (as `.ci/run`
//! does): then a missing browser is a failure. `CHROMIUM` and `CHROMEDRIVER`
//! override where they are looked for. `HUMAN_PLUS_SCREENSHOT=PATH` saves
//! the mid-story screenshot there (the README's picture:
//! `HUMAN_PLUS_SCREENSHOT=docs/web-sheet.png cargo test -p human-plus-cli --test browser`);
//! otherwise it goes under the target directory.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::future::Future;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use human_plus_core::{
    Activity, ChangeActor, EgressPolicy, Error, ManagerConfig, NO_PINS, Participant, Priority,
    ReceiveLeg, SurfaceInvitation, TransportConfig, TrustPolicy,
};
use human_plus_relay::{CorsPolicy, DemoSurface, Faults, Leg, RelayHandle, RelayServer};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A generous bound for anything to show up on a loaded machine.
const WAIT: Duration = Duration::from_secs(60);

/// One browser at a time: the machine may have two cores.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const TOOLS: [&str; 6] = [
    "sheet_describe",
    "sheet_get_cell",
    "sheet_get_range",
    "sheet_set_cell",
    "sheet_delete_row",
    "changes_since",
];

// ------------------------------------------------------------ the browser

fn required() -> bool {
    std::env::var("HUMAN_PLUS_REQUIRE_BROWSER").is_ok_and(|v| v == "1")
        || std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn find_program(env: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(env) {
        return Some(PathBuf::from(path)).filter(|p| p.is_file());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

struct Browser {
    client: Client,
    driver: std::sync::Mutex<Child>,
    profile: PathBuf,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium, or says why not.
    async fn start() -> Option<Browser> {
        let chromium = find_program(
            "CHROMIUM",
            &["chromium", "chromium-browser", "google-chrome"],
        );
        let driver = find_program("CHROMEDRIVER", &["chromedriver"]);
        let (Some(chromium), Some(driver)) = (chromium, driver) else {
            let why = "no Chromium and chromedriver found (install Debian's chromium and chromium-driver, or set CHROMIUM and CHROMEDRIVER)";
            assert!(
                !required(),
                "the browser tests are required here, but {why}"
            );
            // Written past the test harness's capture, so the skip is seen.
            let _ = writeln!(
                std::io::stderr(),
                "skipped: the browser tests need a browser: {why}; set HUMAN_PLUS_REQUIRE_BROWSER=1 to make this a failure"
            );
            return None;
        };
        // chromedriver picks a free port itself and says which.
        let mut child = Command::new(&driver)
            .arg("--port=0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let port = loop {
            let line = rx.recv_timeout(WAIT).expect("chromedriver says its port");
            if let Some(rest) = line.split("started successfully on port ").nth(1) {
                break rest.trim_end_matches('.').trim().parse::<u16>().unwrap();
            }
        };
        let profile = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("chromium-profile-{}", common::random_hex(6)));
        let caps = json!({
            // What the page's console shows, read back by `console_lines`.
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                    "--window-size=1280,860", "--hide-scrollbars", "--force-device-scale-factor=1",
                    format!("--user-data-dir={}", profile.display()),
                ],
            }
        });
        let Value::Object(caps) = caps else {
            unreachable!()
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a WebDriver session with headless Chromium");
        Some(Browser {
            client,
            driver: std::sync::Mutex::new(child),
            profile,
        })
    }

    /// Ends the WebDriver session (chromedriver then ends Chromium) and
    /// chromedriver.
    async fn close(&self) {
        let _ = self.client.clone().close().await;
        if let Ok(mut driver) = self.driver.lock() {
            let _ = driver.kill();
            let _ = driver.wait();
        }
        let _ = std::fs::remove_dir_all(&self.profile);
    }

    /// Runs `script` (a function body) and returns its value.
    async fn js(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.unwrap()
    }

    /// Waits until `script` returns true, for up to [`WAIT`].
    async fn until(&self, what: &str, script: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            if self.js(script).await == Value::Bool(true) {
                return;
            }
            if Instant::now() > deadline {
                let body = self.js("return document.body.innerText").await;
                panic!(
                    "timed out waiting for {what}; the page says:\n{}",
                    body.as_str().unwrap_or("")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn text(&self, id: &str) -> String {
        self.js(&format!(
            "return document.getElementById({id:?}).textContent"
        ))
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    async fn cell(&self, address: &str) -> String {
        self.js(&format!(
            "return document.querySelector('input[data-address=\"{address}\"]').value"
        ))
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    async fn wait_cell(&self, address: &str, value: &str) {
        self.until(
            &format!("{address} = {value:?} in the page"),
            &format!(
                "const i = document.querySelector('input[data-address=\"{address}\"]'); return !!i && i.value === {value:?}"
            ),
        )
        .await;
    }

    async fn wait_log(&self, needle: &str) {
        self.until(
            &format!("{needle:?} in the page's log"),
            &format!("return document.getElementById('log').innerText.includes({needle:?})"),
        )
        .await;
    }

    async fn wait_state(&self, state: &str) {
        self.until(
            &format!("the page in state {state}"),
            &format!("return document.getElementById('status').dataset.state === {state:?}"),
        )
        .await;
    }

    /// Types into a cell as a person does: click, select all, type, Enter.
    async fn type_into(&self, address: &str, value: &str) {
        let input = self
            .client
            .find(Locator::Css(&format!("input[data-address=\"{address}\"]")))
            .await
            .unwrap();
        input.click().await.unwrap();
        // Select what is there (WebDriver's clear would blur the cell and
        // commit an empty value first).
        input.send_keys(&(Key::Control + "a")).await.unwrap();
        input.send_keys(value).await.unwrap();
        input.send_keys(&Key::Enter.to_string()).await.unwrap();
    }

    /// Reads the invitation off the page, as a person copying it would.
    async fn invitation(&self) -> (String, String, String, String) {
        let relay = self.text("inv-relay").await;
        let session = self.text("inv-session").await;
        let surface = self.text("inv-surface").await;
        let token = self
            .js("return document.getElementById('inv-token').value")
            .await
            .as_str()
            .unwrap()
            .to_owned();
        (relay, session, surface, token)
    }

    /// The browser's console since the last call (chromedriver's log
    /// endpoint hands each entry over once): every message Chromium wrote
    /// there, its own network errors included, as `LEVEL source: text`.
    async fn console_lines(&self) -> Vec<String> {
        let got = self.client.issue_cmd(BrowserLog).await.unwrap();
        got.as_array()
            .unwrap_or_else(|| panic!("a log list: {got}"))
            .iter()
            .map(|e| {
                format!(
                    "{} {}: {}",
                    e["level"].as_str().unwrap_or("?"),
                    e["source"].as_str().unwrap_or("?"),
                    e["message"].as_str().unwrap_or("?")
                )
            })
            .collect()
    }

    async fn save_screenshot(&self, path: &Path) {
        let png = self.client.screenshot().await.unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap();
        eprintln!("screenshot saved to {}", path.display());
    }
}

/// chromedriver's `POST /session/{id}/se/log` for the `browser` log (not
/// in W3C WebDriver, so not in fantoccini).
#[derive(Debug)]
struct BrowserLog;

impl fantoccini::wd::WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/se/log",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (hyper::Method, Option<String>) {
        (
            hyper::Method::POST,
            Some(r#"{"type":"browser"}"#.to_owned()),
        )
    }
}

// ------------------------------------------------------ the page's server

/// A `human-plus` process whose stdout lines are read as they come.
struct Proc {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Proc {
    fn spawn(args: &[&str]) -> Proc {
        let mut child = Command::new(common::BIN)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env_remove("HUMAN_PLUS_TOKEN")
            .env("NO_COLOR", "1")
            .spawn()
            .unwrap();
        let (tx, rx) = channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Proc {
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    /// Waits (off the async runtime's threads) for a line containing
    /// `needle`.
    async fn expect(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            match self.lines.try_recv() {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(std::sync::mpsc::TryRecvError::Empty) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(_) => panic!("no line with {needle:?}; saw {:#?}", self.seen),
            }
        }
    }

    fn url(line: &str) -> String {
        line.split_whitespace()
            .find(|w| w.starts_with("http://127.0.0.1:") && w.ends_with('/'))
            .unwrap_or_else(|| panic!("a page URL in {line:?}"))
            .to_owned()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// --------------------------------------------------------------- the agent

fn agent(port: u16, leg: ReceiveLeg) -> human_plus_tokio::HumanPlus {
    let config = ManagerConfig::new(
        EgressPolicy::new(["127.0.0.1"])
            .allow_ports([port])
            .allow_unverified_egress(true),
        TrustPolicy::allowing(TOOLS, NO_PINS),
    )
    .transport(
        TransportConfig::default()
            .receive_leg(leg)
            .timeout(Duration::from_secs(30)),
    );
    human_plus_tokio::HumanPlus::new(config)
}

fn participant() -> Participant {
    Participant::new("browser-test-agent", "Test agent", "#d97706")
}

// --------------------------------------------- raw relay traffic, as a peer

/// One HTTP/1.1 request on a fresh connection; the status and body.
async fn http(port: u16, method: &str, target: &str, body: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let request = format!(
        "{method} {target} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// A peer that posts frames to the page and reads what the page answers
/// on its own labelled long-poll subscriber.
struct Peer {
    port: u16,
    prefix: String,
    session: String,
    token: String,
    subscriber: String,
    got: Vec<Value>,
}

impl Peer {
    async fn new(port: u16, session: &str, token: &str) -> Peer {
        Peer::new_at(port, "", session, token).await
    }

    /// A peer of a relay whose routes live under `prefix`.
    async fn new_at(port: u16, prefix: &str, session: &str, token: &str) -> Peer {
        let mut peer = Peer {
            port,
            prefix: prefix.to_owned(),
            session: session.to_owned(),
            token: token.to_owned(),
            subscriber: String::new(),
            got: Vec::new(),
        };
        peer.poll(0).await;
        peer
    }

    async fn poll(&mut self, wait_ms: u32) {
        let (status, body) = http(
            self.port,
            "GET",
            &format!(
                "{}/{}/poll?token={}&direction=outbound&client=peer&wait={wait_ms}&subscriber={}",
                self.prefix, self.session, self.token, self.subscriber
            ),
            "",
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        self.subscriber = v["subscriber"].as_str().unwrap().to_owned();
        for f in v["frames"].as_array().unwrap() {
            self.got
                .push(serde_json::from_str(f.as_str().unwrap()).unwrap());
        }
    }

    async fn post(&self, frame: &str) {
        let (status, body) = http(
            self.port,
            "POST",
            &format!(
                "{}/{}/inbox?token={}&client=peer",
                self.prefix, self.session, self.token
            ),
            frame,
        )
        .await;
        assert_eq!(status, 200, "the relay took {frame}: {body}");
    }

    /// Waits for the page's answer to request `id`.
    async fn answer(&mut self, id: &str) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(v) = self.got.iter().find(|v| v["id"] == id) {
                return v.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no answer to {id}; got {:?}",
                self.got
            );
            self.poll(2000).await;
        }
    }

    fn answered(&self, id: &str) -> bool {
        self.got.iter().any(|v| v["id"] == id)
    }
}

/// Where the mid-story screenshot goes: `HUMAN_PLUS_SCREENSHOT` (relative
/// to the workspace root), else the target directory.
fn screenshot_path() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::env::var_os("HUMAN_PLUS_SCREENSHOT").map_or_else(
        || PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-sheet.png"),
        |p| root.join(p),
    )
}

async fn tool_digests(
    hp: &human_plus_tokio::HumanPlus,
    attachment: &str,
) -> (Vec<(String, String)>, Vec<String>) {
    let d = hp.tools("browser-test", attachment).await.unwrap();
    let admitted = d
        .tools
        .iter()
        .map(|t| (t.name().to_owned(), t.digest()))
        .collect();
    let withheld = d.withheld.iter().map(|w| w.name.clone()).collect();
    (admitted, withheld)
}

/// The `join` line the page shows for a relay on plain http.
const JOIN_LINE: &str = "(read -rs HUMAN_PLUS_INVITATION && export HUMAN_PLUS_INVITATION && human-plus join --name web-sheet --allow-insecure-loopback --allow-unverified-egress)";

/// Reads the share link off the page as a person would: it is hidden
/// (the token masked) until Show, and Copy says whether it copied.
async fn share_link(browser: &Browser) -> String {
    let hidden = browser.text("share-link").await;
    assert!(
        hidden.contains(&format!("#token={}&", "\u{2022}".repeat(8))),
        "{hidden}"
    );
    browser
        .client
        .find(Locator::Id("copy-link"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .until(
            "an answer from Copy the link",
            "const t = document.getElementById('copied').textContent; \
             return t === 'The link is on the clipboard.' || t.startsWith('This browser did not allow copying')",
        )
        .await;
    let show = browser.client.find(Locator::Id("show-link")).await.unwrap();
    show.click().await.unwrap();
    let link = browser.text("share-link").await;
    // Hidden again, as the person left it.
    show.click().await.unwrap();
    assert_eq!(browser.text("share-link").await, hidden);
    link
}

/// The parts of a share link: `{relay}/{session}#token=..&surface=..`,
/// form-encoded, and nothing else. Returns (relay, session, token, surface).
fn parse_share_link(link: &str) -> (String, String, String, String) {
    let (base, fragment) = link.split_once('#').expect("a fragment");
    assert!(!base.contains('?'), "no query: {link}");
    let (relay, session) = base.rsplit_once('/').expect("a session");
    let pairs: Vec<(String, String)> = url::form_urlencoded::parse(fragment.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let keys: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["token", "surface"], "{link}");
    (
        relay.to_owned(),
        session.to_owned(),
        pairs[0].1.clone(),
        pairs[1].1.clone(),
    )
}

// ------------------------------------------------------------------ tests

/// Runs `test` with a browser (or skips), and closes the browser however
/// the test ends, so a failing test leaves no Chromium behind.
async fn with_browser<F, Fut>(test: F)
where
    F: FnOnce(Arc<Browser>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let _one = ONE_BROWSER.lock().await;
    let Some(browser) = Browser::start().await else {
        return;
    };
    let browser = Arc::new(browser);
    let outcome = tokio::spawn(test(Arc::clone(&browser))).await;
    browser.close().await;
    if let Err(e) = outcome {
        match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(e) => panic!("the test task ended: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_in_a_real_browser() {
    with_browser(|browser| async move { page_story(&browser).await }).await;
}

async fn page_story(browser: &Browser) {
    let relay = RelayServer::builder().start().await.unwrap();
    let mut server = Proc::spawn(&[
        "surface",
        "--web",
        "--relay",
        relay.base_url(),
        "--port",
        "0",
    ]);
    let url = Proc::url(&server.expect("The web sheet is served at").await);

    story(browser, &relay, &url).await;
    fallback(browser, &relay, &url).await;
    cors_is_enforced(browser).await;

    // The token never reached the page server's output.
    while let Ok(line) = server.lines.try_recv() {
        server.seen.push(line);
    }
    assert!(
        !server.seen.iter().any(|l| l.contains("hp_")),
        "{:?}",
        server.seen
    );
    drop(server);
    relay.shutdown().await;
}

async fn story(browser: &Browser, relay: &RelayHandle, url: &str) {
    let port = relay.addr().port();
    // Whatever is put in the page's address is gone once it has loaded.
    browser
        .client
        .goto(&format!(
            "{url}?token=hp_from_the_address#token=hp_from_the_fragment"
        ))
        .await
        .unwrap();
    browser.wait_state("sse").await;
    let (relay_url, session, surface, token) = browser.invitation().await;
    assert_eq!(relay_url, relay.base_url());
    assert_eq!(surface, "sheet:web");
    assert!(
        relay.sessions().contains(&session),
        "the page registered {session}"
    );
    assert!(
        token.starts_with("hp_") && token.len() == 35,
        "a minted token"
    );
    assert_eq!(browser.client.current_url().await.unwrap().as_str(), url);
    // The token is copyable (the input holds it) but shown nowhere as text.
    let page_text = browser
        .js("return document.documentElement.outerHTML + document.body.innerText")
        .await;
    assert!(!page_text.as_str().unwrap().contains(&token));
    assert_eq!(
        browser
            .js("return document.getElementById('inv-token').type")
            .await,
        "password"
    );
    // Copy says honestly whether the browser let it copy.
    browser
        .client
        .find(Locator::Id("copy-token"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .until(
            "an answer from Copy",
            "const t = document.getElementById('copied').textContent; \
             return t === 'The token is on the clipboard.' || t.startsWith('This browser did not allow copying')",
        )
        .await;

    // The agent, on the tokio runtime, attached with what the page shows.
    let hp = agent(port, ReceiveLeg::Sse);
    let owner = "browser-test";
    let invitation =
        SurfaceInvitation::new_insecure_loopback(&relay_url, &session, &token, &surface, "web")
            .unwrap();
    let attached = hp.attach(owner, invitation, participant()).await.unwrap();
    let id = attached.id().to_owned();

    // The page offers exactly the demo surface's tools, definitions and all.
    let (page_tools, page_withheld) = tool_digests(&hp, &id).await;
    let demo = DemoSurface::builder(relay.base_url(), "browser-twin", "0123456789abcdef")
        .start()
        .await
        .unwrap();
    let twin = SurfaceInvitation::new_insecure_loopback(
        relay.base_url(),
        "browser-twin",
        "0123456789abcdef",
        "sheet:twin",
        "twin",
    )
    .unwrap();
    let twin = hp.attach(owner, twin, participant()).await.unwrap();
    let (demo_tools, demo_withheld) = tool_digests(&hp, twin.id()).await;
    assert_eq!(page_tools, demo_tools);
    assert_eq!(page_withheld, demo_withheld);
    assert_eq!(page_tools.len(), TOOLS.len());
    assert!(page_withheld.contains(&"sheet_confirm_edit".to_owned()));
    demo.shutdown().await;

    // Activity: the participant appears with its name and colour.
    hp.announce(owner, &id, &Activity::new("reading").target("B4"))
        .await
        .unwrap();
    browser
        .until(
            "the agent among the participants",
            "const p = document.querySelector('.participant[data-actor=\"browser-test-agent\"]'); \
             return !!p && p.querySelector('.name').textContent === 'Test agent' \
               && getComputedStyle(p.querySelector('.swatch')).backgroundColor === 'rgb(217, 119, 6)'",
        )
        .await;
    browser
        .wait_log("Test agent (agent): reading B4 [normal]")
        .await;
    assert_eq!(
        browser
            .js("return getComputedStyle(document.querySelector('input[data-address=\"B4\"]')).boxShadow.includes('rgb(217, 119, 6)')")
            .await,
        true,
        "the cell the agent works on is outlined in its colour"
    );

    // A read carries the revision; the agent's write appears in the DOM.
    let read = hp
        .call(owner, &id, "sheet_get_cell", json!({"address": "B4"}))
        .await
        .unwrap();
    assert_eq!(read.revision.as_ref().unwrap().token(), "r1");
    assert!(read.text.lines().any(|l| l == "7"), "{}", read.text);
    let wrote = hp
        .call(
            owner,
            &id,
            "sheet_set_cell",
            json!({"address": "A5", "value": "Figs"}),
        )
        .await
        .unwrap();
    assert_eq!(wrote.pinned.as_ref().unwrap().token(), "r1");
    assert_eq!(wrote.revision.as_ref().unwrap().token(), "r2");
    browser.wait_cell("A5", "Figs").await;
    browser
        .wait_log("An agent created Sheet1!A5 = Figs (r2).")
        .await;

    // The person types into B4: the sheet moves on under the agent.
    browser.type_into("B4", "12").await;
    browser
        .until(
            "revision r3",
            "return document.getElementById('revision').textContent === 'r3'",
        )
        .await;
    browser.wait_log("You updated B4 = 12 (r3).").await;

    // The agent's write pinned to r2 is refused, and nothing is applied.
    match hp
        .call(
            owner,
            &id,
            "sheet_set_cell",
            json!({"address": "B4", "value": "8"}),
        )
        .await
    {
        Err(Error::SurfaceChangedUnderYou(refusal)) => {
            assert!(refusal.to_string().contains("NOT applied"), "{refusal}");
        }
        other => panic!("a stale pin must be refused: {other:?}"),
    }
    browser
        .wait_log(
            "Refused sheet_set_cell B4 = 8 pinned to r2: the sheet is at r3. Nothing was applied.",
        )
        .await;
    assert_eq!(browser.cell("B4").await, "12");
    assert_eq!(browser.text("revision").await, "r3");

    // The change feed, asked since the refused pin (r2: what changed since
    // the agent's last look, not the whole history), attributes the edit
    // to a human.
    let changes = hp.changes_since(owner, &id).await.unwrap();
    assert!(changes.complete());
    let rows: Vec<(String, ChangeActor)> = changes
        .changes()
        .iter()
        .map(|c| (c.handle().to_owned(), c.actor()))
        .collect();
    assert_eq!(rows, [("B4".to_owned(), ChangeActor::Human)]);
    let defer: Vec<&str> = changes.defer_to().iter().map(|c| c.handle()).collect();
    assert_eq!(defer, vec!["B4"]);

    // Mid-story: the picture for the README.
    hp.announce(
        owner,
        &id,
        &Activity::new("editing")
            .target("D4")
            .priority(Priority::Attention),
    )
    .await
    .unwrap();
    browser
        .wait_log("Test agent (agent): editing D4 [attention]")
        .await;
    let reread = hp
        .call(owner, &id, "sheet_get_cell", json!({"address": "B4"}))
        .await
        .unwrap();
    assert_eq!(reread.revision.as_ref().unwrap().token(), "r3");
    hp.call(
        owner,
        &id,
        "sheet_set_cell",
        json!({"address": "D4", "value": "14.40"}),
    )
    .await
    .unwrap();
    browser.wait_cell("D4", "14.40").await;
    browser.save_screenshot(&screenshot_path()).await;

    // The share link: hidden until shown, copyable, the relay's session
    // URL with the token and the surface in the fragment; and the join
    // line, which carries no link and no token.
    let link = share_link(browser).await;
    assert_eq!(
        parse_share_link(&link),
        (
            relay_url.clone(),
            session.clone(),
            token.clone(),
            surface.clone()
        ),
        "{link}"
    );
    // What the page says of the agents' legs is what is true now.
    let peers = browser.text("peers").await;
    assert!(
        peers.starts_with("Agent receive legs open on the relay now: ")
            && peers.contains("keeps one open while it is attached"),
        "{peers}"
    );
    let join = browser.text("join-command").await;
    assert_eq!(join, JOIN_LINE);
    // The invitation the page copies as JSON is the same invitation (the
    // old nine-flag line is gone; `tools` with these parts still works).
    let secret = token.clone();
    let relay_port = port.to_string();
    let (relay_for_run, session_for_run) = (relay_url.clone(), session.clone());
    let run = tokio::task::spawn_blocking(move || {
        common::run(
            &[
                "tools",
                "--relay",
                &relay_for_run,
                "--session",
                &session_for_run,
                "--surface",
                "sheet:web",
                "--allow-host",
                "127.0.0.1",
                "--allow-port",
                &relay_port,
                "--allow-insecure-loopback",
                "--allow-unverified-egress",
                "--allow",
                "sheet_get_cell,sheet_set_cell",
            ],
            Some(&secret),
        )
    })
    .await
    .unwrap();
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("sheet_set_cell"), "{}", run.stdout);
    run.assert_no_secret(&token);

    bad_input(browser, relay, &session, &token).await;

    // The agent still works after all that.
    let after = hp
        .call(owner, &id, "sheet_get_cell", json!({"address": "D4"}))
        .await
        .unwrap();
    assert!(after.text.lines().any(|l| l == "14.40"), "{}", after.text);

    // The session ends on the relay: the page says so, and stops editing.
    assert!(relay.drop_session(&session));
    browser.wait_state("gone").await;
    assert_eq!(
        browser
            .js("return !document.getElementById('gone').hidden && document.querySelector('input[data-address=\"B4\"]').disabled")
            .await,
        true
    );
    assert!(browser.text("gone").await.contains("410"));
    match hp
        .call(owner, &id, "sheet_get_cell", json!({"address": "B4"}))
        .await
    {
        Err(Error::SurfaceUnavailable) => {}
        other => panic!("a gone session is unavailable: {other:?}"),
    }
}

/// Bad input from the relay: each gets a JSON-RPC error or is dropped; the
/// page keeps working and puts nothing from the network in as markup.
async fn bad_input(browser: &Browser, relay: &RelayHandle, session: &str, token: &str) {
    let port = relay.addr().port();
    let mut peer = Peer::new(port, session, token).await;

    peer.post(r#"{"jsonrpc":"2.0","id":"bad-1","method":"resources/list"}"#)
        .await;
    let a = peer.answer("bad-1").await;
    assert_eq!(a["error"]["code"], -32601, "{a}");
    assert_eq!(a["error"]["message"], "Unsupported method: resources/list");

    peer.post(r#"{"jsonrpc":"2.0","id":"bad-2","method":"tools/call","params":"nonsense"}"#)
        .await;
    assert_eq!(peer.answer("bad-2").await["error"]["code"], -32602);

    peer.post(r#"{"jsonrpc":"2.0","id":"bad-3","method":"tools/call","params":{"name":"<img src=x onerror=alert(1)>"}}"#)
        .await;
    let a = peer.answer("bad-3").await;
    assert_eq!(a["error"]["code"], -32601);
    assert_eq!(
        a["error"]["message"],
        "Unknown tool: <img src=x onerror=alert(1)>"
    );

    // Valid for the relay, nothing for the page to answer: dropped.
    peer.post(r#"[{"jsonrpc":"2.0","id":"bad-4","method":"ping"}]"#)
        .await;
    peer.post(r#"{"jsonrpc":"2.0","id":"bad-5","result":{}}"#)
        .await;
    // Hostile activity: markup in the name, CSS in the colour.
    peer.post(r#"{"jsonrpc":"2.0","method":"notifications/human-plus/activity","params":{"actor":{"id":"evil","name":"<b id=pwned>Evil</b>","color":"red;background:url(//x)","type":"agent"},"action":"<script>x</script>","target":"A1"}}"#)
        .await;

    // Malformed frames on the stream (a line that is no field, invalid
    // UTF-8, an event whose data is not JSON) before the real one.
    relay.set_faults(session, Faults::new().sse_garbage().affect_pages());
    peer.post(r#"{"jsonrpc":"2.0","id":"bad-6","method":"ping"}"#)
        .await;
    assert_eq!(peer.answer("bad-6").await["result"], json!({}));

    // An oversize frame (over the page's 1 MiB) is dropped unread.
    relay.set_faults(
        session,
        Faults::new().sse_oversize(1024 * 1024).affect_pages(),
    );
    peer.post(r#"{"jsonrpc":"2.0","id":"bad-7","method":"ping"}"#)
        .await;
    // The relay pads the event when it writes it to the page's stream,
    // after the POST was answered: clear the fault only once the page has
    // seen (and dropped) it.
    browser
        .wait_log("Dropped a frame from the relay: oversize")
        .await;
    relay.clear_faults(session);
    peer.post(r#"{"jsonrpc":"2.0","id":"bad-8","method":"ping"}"#)
        .await;
    assert_eq!(peer.answer("bad-8").await["result"], json!({}));
    // Frames are handled and answered in order: anything for bad-4, bad-5
    // or bad-7 would have arrived before bad-8's answer.
    for id in ["bad-4", "bad-5", "bad-7"] {
        assert!(!peer.answered(id), "{id} was answered: {:?}", peer.got);
    }

    browser
        .wait_log("Dropped a frame from the relay: oversize")
        .await;
    browser
        .wait_log("Dropped a frame from the relay: not JSON")
        .await;
    browser
        .wait_log("Dropped a frame from the relay: a batch")
        .await;
    browser
        .wait_log("Dropped a frame from the relay: not a request")
        .await;
    let dropped = browser.text("dropped").await;
    assert!(
        dropped.ends_with("unreadable frame(s) dropped"),
        "{dropped}"
    );
    browser
        .wait_log("Evil</b> (agent): <script>x</script> A1")
        .await;
    assert_eq!(
        browser
            .js("return document.querySelectorAll('#pwned, #log img, #log script, .participants b').length")
            .await,
        0,
        "nothing from the network became markup"
    );
    assert_eq!(
        browser
            .js("return getComputedStyle(document.querySelector('.participant[data-actor=\"evil\"] .swatch')).backgroundColor")
            .await,
        "rgb(107, 114, 128)",
        "a colour that is not a colour is shown neutral"
    );
    assert_eq!(
        browser.text("status").await,
        "Live: receiving on the event stream"
    );
}

/// The events route broken: the page falls back to the long-poll leg.
async fn fallback(browser: &Browser, relay: &RelayHandle, url: &str) {
    let port = relay.addr().port();
    relay.set_default_faults(Faults::new().status(Leg::Events, 502).affect_pages());
    browser.client.goto(url).await.unwrap();
    browser.wait_state("poll").await;
    assert!(
        browser
            .text("status")
            .await
            .contains("the event stream failed"),
        "{}",
        browser.text("status").await
    );
    assert_eq!(browser.text("transport").await, "long-poll");
    let (relay_url, session, surface, token) = browser.invitation().await;
    // The fault breaks the agent's event stream too: it polls.
    let hp = agent(port, ReceiveLeg::fancy_poll());
    let owner = "browser-test";
    let invitation =
        SurfaceInvitation::new_insecure_loopback(&relay_url, &session, &token, &surface, "web")
            .unwrap();
    let attached = hp.attach(owner, invitation, participant()).await.unwrap();
    let wrote = hp
        .call(
            owner,
            attached.id(),
            "sheet_set_cell",
            json!({"address": "A6", "value": "Kiwis"}),
        )
        .await
        .unwrap();
    assert_eq!(wrote.revision.as_ref().unwrap().token(), "r2");
    browser.wait_cell("A6", "Kiwis").await;
    relay.set_default_faults(Faults::new());
    // Gone, on the poll leg.
    assert!(relay.drop_session(&session));
    browser.wait_state("gone").await;
}

/// The page is cross-origin to the relay: a relay whose CORS list leaves
/// the page's origin out is one the page cannot use at all.
async fn cors_is_enforced(browser: &Browser) {
    let relay = RelayServer::builder()
        .cors(CorsPolicy::parse("http://127.0.0.1:1").unwrap())
        .start()
        .await
        .unwrap();
    let mut server = Proc::spawn(&[
        "surface",
        "--web",
        "--relay",
        relay.base_url(),
        "--port",
        "0",
    ]);
    let url = Proc::url(&server.expect("The web sheet is served at").await);
    browser.client.goto(&url).await.unwrap();
    browser.wait_state("failed").await;
    assert!(
        browser
            .text("status")
            .await
            .contains("could not be reached")
    );
    assert!(
        relay.sessions().is_empty(),
        "the preflight stopped the register"
    );
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_web_plays_the_story_in_a_browser() {
    with_browser(|browser| async move { demo_story(&browser).await }).await;
}

async fn demo_story(browser: &Browser) {
    let mut demo = Proc::spawn(&["demo", "--web"]);
    let url = Proc::url(&demo.expect("in a browser. Waiting for the page").await);
    browser.client.goto(&url).await.unwrap();
    demo.expect("Type a new value into B4 in the page").await;
    browser
        .wait_log(
            "Human+ demo agent (agent): waiting for you to type a new value into B4 [blocking]",
        )
        .await;
    assert!(
        browser
            .text("asks")
            .await
            .contains("Human+ demo agent is waiting for you")
    );
    // The person reloads the tab: the same session (the demo's agent holds
    // its invitation), the same sheet, and the story goes on.
    let before = browser.invitation().await;
    browser.client.refresh().await.unwrap();
    browser.wait_state("sse").await;
    browser.wait_log("This tab kept session").await;
    assert_eq!(browser.invitation().await, before);
    assert_eq!(browser.text("revision").await, "r1");
    assert_eq!(
        browser
            .js("return document.getElementById('end').hidden")
            .await,
        true,
        "the demo ends its session itself"
    );
    browser.type_into("B4", "12").await;
    demo.expect("You typed \"12\" into B4; the sheet moved to r2.")
        .await;
    demo.expect("surface_changed_under_you: nothing was written")
        .await;
    demo.expect("B4  updated by human: re-read it, do not correct it")
        .await;
    demo.expect("D4 = 14.40 (B4 x C4), pinned to r2: applied, the sheet is at r3.")
        .await;
    demo.expect("The session has ended on the relay; the page says so.")
        .await;
    browser.wait_state("gone").await;
    let status = demo.child.wait().unwrap();
    // What it printed last, to the end.
    while let Ok(line) = demo.lines.recv_timeout(Duration::from_secs(5)) {
        demo.seen.push(line);
    }
    assert!(status.success(), "{status:?}: {:#?}", demo.seen);
    assert!(
        demo.seen.iter().any(|l| l.starts_with("Done in")),
        "{:#?}",
        demo.seen
    );
    browser
        .wait_log(
            "Refused sheet_set_cell B4 = 8 pinned to r1: the sheet is at r2. Nothing was applied.",
        )
        .await;
    assert_eq!(browser.cell("B4").await, "12");
    assert_eq!(browser.cell("D4").await, "14.40");
    let token = browser
        .js("return document.getElementById('inv-token').value")
        .await;
    let token = token.as_str().unwrap();
    assert!(
        !demo.seen.iter().any(|l| l.contains(token)),
        "the token never reaches the terminal"
    );
}

// ------------------------------------- the token and the console (issue 20)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_stays_out_of_the_browsers_console() {
    with_browser(|browser| async move { console_story(&browser).await }).await;
}

/// Serves the page for `relay_url` (`--transport poll` when `poll`), opens
/// it and waits until it is live; its session and token.
async fn open_page(browser: &Browser, relay_url: &str, poll: bool) -> (Proc, String, String) {
    let mut args = vec!["surface", "--web", "--relay", relay_url, "--port", "0"];
    if poll {
        args.extend(["--transport", "poll"]);
    }
    open_with(browser, &args, if poll { "poll" } else { "sse" }).await
}

/// As [`open_page`] with the automatic transport, waiting for `state`.
async fn open_page_on(browser: &Browser, relay_url: &str, state: &str) -> (Proc, String, String) {
    let args = ["surface", "--web", "--relay", relay_url, "--port", "0"];
    open_with(browser, &args, state).await
}

async fn open_with(browser: &Browser, args: &[&str], state: &str) -> (Proc, String, String) {
    let mut server = Proc::spawn(args);
    let url = Proc::url(&server.expect("The web sheet is served at").await);
    browser.client.goto(&url).await.unwrap();
    browser.wait_state(state).await;
    let (_, session, _, token) = browser.invitation().await;
    (server, session, token)
}

/// Failing requests of the page, with the token in the header (Human+'s
/// relay) and in the query (a relay that reads only the query, as the Fancy
/// Node relay): what the console shows, line by line.
async fn console_story(browser: &Browser) {
    // 1. The long-poll leg on a relay that reads the header: a poll that
    //    fails (502), an outbox POST that fails (500), the relay stopped
    //    under a parked poll, and, on a new relay, the session ended (410).
    let relay = RelayServer::builder()
        .prefix("agent-relay")
        .start()
        .await
        .unwrap();
    let port = relay.addr().port();
    let (server, session, token) = open_page(browser, relay.base_url(), true).await;
    let mut peer = Peer::new_at(port, "/agent-relay", &session, &token).await;
    peer.post(r#"{"jsonrpc":"2.0","id":"c-1","method":"ping"}"#)
        .await;
    assert_eq!(peer.answer("c-1").await["result"], json!({}));
    // The page's answer to c-2 fails (500), and so does its next poll
    // (502); the peer polls only once the page has taken the 502.
    relay.set_faults(
        &session,
        Faults::new()
            .status_times(Leg::Outbox, 500, 1)
            .status_times(Leg::Poll, 502, 1)
            .affect_pages(),
    );
    peer.post(r#"{"jsonrpc":"2.0","id":"c-2","method":"ping"}"#)
        .await;
    browser
        .until(
            "the page hearing the poll's 502",
            "return document.getElementById('log').innerText.includes('HTTP 502')",
        )
        .await;
    peer.post(r#"{"jsonrpc":"2.0","id":"c-3","method":"ping"}"#)
        .await;
    assert_eq!(peer.answer("c-3").await["result"], json!({}));
    assert!(!peer.answered("c-2"), "the outbox POST failed");
    relay.clear_faults(&session);
    relay.shutdown().await;
    browser
        .until(
            "the page noticing the relay is gone",
            "return document.getElementById('status').textContent.includes('could not be reached')",
        )
        .await;
    let mut lines = browser.console_lines().await;
    drop(server);

    let relay = RelayServer::builder()
        .prefix("agent-relay")
        .start()
        .await
        .unwrap();
    let (server, session2, token2) = open_page(browser, relay.base_url(), true).await;
    assert!(relay.drop_session(&session2));
    browser.wait_state("gone").await;
    lines.extend(browser.console_lines().await);
    drop(server);
    let fetch_lines = lines.clone();
    for secret in [&token, &token2] {
        assert!(
            !lines.iter().any(|l| l.contains(secret.as_str())),
            "the token in the console: {lines:#?}"
        );
    }
    // Not vacuous: each failure is in the console, with its URL.
    for needle in [
        "/outbox - Failed to load resource: the server responded with a status of 500",
        "/poll?direction=inbound&wait=20000&subscriber=",
        "status of 502",
        "ERR_CONNECTION_REFUSED",
        "status of 410",
    ] {
        assert!(
            fetch_lines.iter().any(|l| l.contains(needle)),
            "no console line with {needle:?}: {fetch_lines:#?}"
        );
    }

    // 2. The event stream (EventSource cannot send a header). The session
    //    ends under a live stream: the page asks the poll leg what happened
    //    (410) and the token is nowhere. Then a stream the relay refuses
    //    (502): the browser shows the events URL, token included, the one
    //    URL that must carry it; the page goes on on the poll leg.
    let (server, session3, token3) = open_page(browser, relay.base_url(), false).await;
    assert!(relay.drop_session(&session3));
    browser.wait_state("gone").await;
    let lines = browser.console_lines().await;
    drop(server);
    assert!(
        !lines.iter().any(|l| l.contains(token3.as_str())),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(
            |l| l.contains(&format!("/{session3}/poll?direction=inbound")) && l.contains("410")
        ),
        "the poll's 410: {lines:#?}"
    );
    relay.set_default_faults(Faults::new().status(Leg::Events, 502).affect_pages());
    let (server, session5, token5) = open_page_on(browser, relay.base_url(), "poll").await;
    assert!(relay.drop_session(&session5));
    browser.wait_state("gone").await;
    let lines = browser.console_lines().await;
    drop(server);
    relay.set_default_faults(Faults::new());
    let events_url = format!("/agent-relay/{session5}/events?token={token5}&direction=inbound");
    for line in lines.iter().filter(|l| l.contains(token5.as_str())) {
        assert!(
            line.contains(&events_url),
            "the token outside the events URL: {line}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&events_url) && l.contains("502")),
        "the refused stream, as documented: {lines:#?}"
    );
    assert!(
        lines.iter().any(
            |l| l.contains(&format!("/{session5}/poll?direction=inbound")) && l.contains("410")
        ),
        "the poll's 410: {lines:#?}"
    );
    relay.shutdown().await;

    // 3. A relay that reads only the query (the Fancy Node relay): the page
    //    finds out (its header is answered 401) and puts the token in the
    //    query, and keeps working.
    let relay = RelayServer::builder()
        .bearer_auth(false)
        .start()
        .await
        .unwrap();
    let (server, session4, token4) = open_page(browser, relay.base_url(), true).await;
    let mut peer = Peer::new_at(relay.addr().port(), "", &session4, &token4).await;
    peer.post(r#"{"jsonrpc":"2.0","id":"q-1","method":"ping"}"#)
        .await;
    assert_eq!(peer.answer("q-1").await["result"], json!({}));
    let lines = browser.console_lines().await;
    assert!(
        lines
            .iter()
            .any(|l| l.contains("/poll?direction=inbound&wait=0") && l.contains("401")),
        "the header refused once: {lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains(token4.as_str())),
        "nothing failed with the token in the query yet: {lines:#?}"
    );
    drop(server);
    // On the event stream the first fetch is the page's first answer: its
    // outbox POST with the header is refused (401, nothing forwarded), sent
    // again with the token in the query, and arrives once.
    let (server, session6, token6) = open_page(browser, relay.base_url(), false).await;
    let mut peer = Peer::new_at(relay.addr().port(), "", &session6, &token6).await;
    peer.post(r#"{"jsonrpc":"2.0","id":"q-2","method":"ping"}"#)
        .await;
    assert_eq!(peer.answer("q-2").await["result"], json!({}));
    peer.post(r#"{"jsonrpc":"2.0","id":"q-3","method":"ping"}"#)
        .await;
    assert_eq!(peer.answer("q-3").await["result"], json!({}));
    assert_eq!(
        peer.got.iter().filter(|v| v["id"] == "q-2").count(),
        1,
        "{:?}",
        peer.got
    );
    let lines = browser.console_lines().await;
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains(&format!("/{session6}/outbox")) && l.contains("401"))
            .count(),
        1,
        "the header refused once, on the first answer: {lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains(token6.as_str())),
        "{lines:#?}"
    );
    drop(server);
    relay.shutdown().await;
}

// ----------------------------------- a new user, from the link (issue 20)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_user_joins_from_the_pages_share_link() {
    with_browser(|browser| async move {
        join_story(&browser, false).await;
        join_story(&browser, true).await;
    })
    .await;
}

/// What a new user does, over real sockets: `human-plus relay --prefix
/// agent-relay`, the page in the browser, its share link read off the page
/// and piped into the `join` line the page shows (with `--yes --pin`: no
/// terminal here), then the bridge from the written profile, driven by
/// rmcp's client, through the two-writer story with the person typing in
/// the page. With `node_shape`, the link is the Fancy Node relay's session
/// URL (`/<relayPath>/<ID>?token=`) made from the same parts.
async fn join_story(browser: &Browser, node_shape: bool) {
    let mut relay = Proc::spawn(&["relay", "--port", "0", "--prefix", "agent-relay"]);
    let line = relay.expect("Human+ relay listening at").await;
    let base = line.rsplit(' ').next().unwrap().to_owned();
    assert!(base.ends_with("/agent-relay"), "{line}");
    let mut server = Proc::spawn(&["surface", "--web", "--relay", &base, "--port", "0"]);
    let url = Proc::url(&server.expect("The web sheet is served at").await);
    browser.client.goto(&url).await.unwrap();
    browser.wait_state("sse").await;

    // The link, as a person copies it off the page.
    let link = share_link(browser).await;
    let (link_relay, session, token, _) = parse_share_link(&link);
    assert_eq!(link_relay, base);
    let link = if node_shape {
        format!("{base}/{session}?token={token}")
    } else {
        link
    };
    let join_line = browser.text("join-command").await;
    assert_eq!(join_line, JOIN_LINE);

    // The join line as shown, in a shell, the link on its input; without a
    // terminal join asks nothing, so `--yes --pin` say what a person would.
    let config = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("join-config-{}", common::random_hex(6)));
    let line = join_line.replacen(
        "human-plus join",
        &format!("'{}' join --yes --pin", common::BIN.replace('\'', "'\\''")),
        1,
    );
    let (out, err) = run_join_line(&line, &config, &link).await;

    for text in [&out, &err] {
        assert!(!text.contains(&token), "the token in join's output: {text}");
    }
    assert!(
        out.contains("Invitation (relay-session link")
            && out.contains(&format!("relay:   {base}"))
            && out.contains(&format!("session: {session}")),
        "{out}"
    );
    assert!(
        out.contains("claude mcp add web-sheet")
            && out.contains("human-plus mcp --profile web-sheet"),
        "{out}"
    );
    // The token is in its own file, readable by the user only, and in no
    // other file of the profile.
    let profile = config.join("profiles").join("web-sheet");
    let mut token_files = Vec::new();
    for entry in std::fs::read_dir(&profile)
        .unwrap_or_else(|e| panic!("the profile at {}: {e}", profile.display()))
    {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        if text.contains(&token) {
            token_files.push(path);
        }
    }
    assert_eq!(token_files.len(), 1, "{token_files:?}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&token_files[0])
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{}", token_files[0].display());
    }

    // The bridge from the profile, as the MCP client line starts it.
    let mut cmd = tokio::process::Command::new(common::BIN);
    cmd.args(["mcp", "--profile", "web-sheet"])
        .env("HUMAN_PLUS_CONFIG_DIR", &config)
        .env_remove("HUMAN_PLUS_TOKEN")
        .env_remove("HUMAN_PLUS_INVITATION");
    let (child, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = stderr.unwrap();
    let client = tokio::time::timeout(WAIT, rmcp::ServiceExt::serve((), child))
        .await
        .expect("the bridge answered initialize in time")
        .expect("an MCP session with the bridge");
    let tools = tokio::time::timeout(WAIT, client.list_all_tools())
        .await
        .unwrap()
        .unwrap();
    let listed: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for name in ["sheet_get_cell", "sheet_set_cell", "changes_since"] {
        assert!(listed.contains(&name), "{listed:?}");
    }
    assert!(!listed.contains(&"sheet_confirm_edit"), "{listed:?}");

    // A read; the person's typed edit; the stale write refused; the
    // re-read and the write.
    let read = mcp_call(&client, "sheet_get_cell", json!({"address": "B4"})).await;
    assert_eq!(read.is_error, Some(false), "{}", mcp_text(&read));
    assert!(mcp_text(&read).contains("\n7\n"), "{}", mcp_text(&read));
    browser.type_into("B4", "12").await;
    browser.wait_log("You updated B4 = 12 (r2).").await;
    let stale = mcp_call(
        &client,
        "sheet_set_cell",
        json!({"address": "B4", "value": "8"}),
    )
    .await;
    assert_eq!(stale.is_error, Some(true), "{}", mcp_text(&stale));
    assert!(
        mcp_text(&stale).contains("was NOT applied"),
        "{}",
        mcp_text(&stale)
    );
    assert_eq!(
        stale.meta.as_ref().and_then(|m| m.0.get("code").cloned()),
        Some(json!("surface_changed_under_you"))
    );
    browser
        .wait_log(
            "Refused sheet_set_cell B4 = 8 pinned to r1: the sheet is at r2. Nothing was applied.",
        )
        .await;
    assert_eq!(browser.cell("B4").await, "12");
    let reread = mcp_call(&client, "sheet_get_cell", json!({"address": "B4"})).await;
    assert!(
        mcp_text(&reread).contains("\n12\n"),
        "{}",
        mcp_text(&reread)
    );
    let write = mcp_call(
        &client,
        "sheet_set_cell",
        json!({"address": "D4", "value": "14.40"}),
    )
    .await;
    assert_eq!(write.is_error, Some(false), "{}", mcp_text(&write));
    browser.wait_cell("D4", "14.40").await;
    assert_eq!(browser.cell("B4").await, "12");
    if !node_shape {
        the_day_after(browser, &client, &line, &config, &session).await;
    }

    client.cancel().await.unwrap();
    let mut logged = String::new();
    let _ = tokio::time::timeout(WAIT, stderr.read_to_string(&mut logged)).await;
    assert!(!logged.contains(&token), "the token in the bridge's stderr");
    drop(server);
    drop(relay);
    let _ = std::fs::remove_dir_all(&config);
}

/// Runs `join`'s line from the page (`line`, with `--yes --pin`) in bash
/// with `link` on its input; its output and error.
async fn run_join_line(line: &str, config: &std::path::Path, link: &str) -> (String, String) {
    let input = format!("{link}\n");
    let config_dir = config.display().to_string();
    let line = line.to_owned();
    let join = tokio::task::spawn_blocking(move || {
        let mut child = Command::new("bash")
            .args(["-c", &line])
            .env("HUMAN_PLUS_CONFIG_DIR", &config_dir)
            .env_remove("HUMAN_PLUS_TOKEN")
            .env_remove("HUMAN_PLUS_INVITATION")
            .env("NO_COLOR", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("bash runs the join line");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&join.stdout).into_owned(),
        String::from_utf8_lossy(&join.stderr).into_owned(),
    );
    assert!(join.status.success(), "join: {out}\n{err}");
    (out, err)
}

/// The same bridge, never restarted, through the person's day (issue 27):
/// the page reloaded (its session kept: the bridge goes on), then the
/// session ended on the page and a new link joined under the same name
/// (the bridge follows it, says so once, and the write lands on the new
/// session).
async fn the_day_after(
    browser: &Browser,
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    join_line: &str,
    config: &std::path::Path,
    session: &str,
) {
    browser.client.refresh().await.unwrap();
    browser.wait_state("sse").await;
    assert_eq!(browser.invitation().await.1, session);
    let after_reload = mcp_call(client, "sheet_get_cell", json!({"address": "B4"})).await;
    assert_eq!(
        after_reload.is_error,
        Some(false),
        "{}",
        mcp_text(&after_reload)
    );
    assert!(
        mcp_text(&after_reload).contains("\n12\n"),
        "{}",
        mcp_text(&after_reload)
    );

    click(browser, "end-session").await;
    click(browser, "end-yes").await;
    browser
        .until(
            "a new session in the page",
            &format!(
                "return document.getElementById('inv-session').textContent !== {session:?} \
                 && document.getElementById('status').dataset.state === 'sse'"
            ),
        )
        .await;
    let gone = mcp_call(client, "sheet_get_cell", json!({"address": "B4"})).await;
    assert_eq!(gone.is_error, Some(true));
    assert!(
        mcp_text(&gone).contains("human-plus join --name web-sheet"),
        "{}",
        mcp_text(&gone)
    );
    let link = share_link(browser).await;
    let (out, _) = run_join_line(join_line, config, &link).await;
    assert!(
        out.contains("picks this link up without a restart"),
        "{out}"
    );
    let started = std::time::Instant::now();
    let back = loop {
        let r = mcp_call(client, "sheet_get_cell", json!({"address": "B4"})).await;
        if r.is_error != Some(true) {
            break r;
        }
        assert!(started.elapsed() < WAIT, "{}", mcp_text(&r));
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    };
    assert!(
        mcp_text(&back).starts_with(human_plus_core::REJOINED_NOTE),
        "{}",
        mcp_text(&back)
    );
    let write = mcp_call(
        client,
        "sheet_set_cell",
        json!({"address": "A6", "value": "Quince"}),
    )
    .await;
    assert_eq!(write.is_error, Some(false), "{}", mcp_text(&write));
    browser.wait_cell("A6", "Quince").await;
}

async fn mcp_call(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &str,
    args: Value,
) -> rmcp::model::CallToolResult {
    let Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    tokio::time::timeout(
        WAIT,
        client.call_tool(
            rmcp::model::CallToolRequestParams::new(tool.to_owned()).with_arguments(args),
        ),
    )
    .await
    .expect("the bridge answered in time")
    .expect("a CallToolResult")
}

fn mcp_text(r: &rmcp::model::CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

// ------------------------------- the page keeps its session (issue 27)

/// Where the page keeps its session in the tab (`sessionStorage`).
const KEPT_KEY: &str = "human-plus-web-sheet";

/// Every console line holding one of `tokens` is the event stream's URL
/// for that token (the one documented exception: `EventSource` cannot send
/// a header). The lines are returned for more checks.
async fn assert_token_only_in_events_urls(browser: &Browser, tokens: &[(String, String)]) {
    let lines = browser.console_lines().await;
    for (session, token) in tokens {
        let events_url = format!("/{session}/events?token={token}&direction=inbound");
        for line in lines.iter().filter(|l| l.contains(token.as_str())) {
            assert!(
                line.contains(&events_url),
                "the token outside the events URL: {line}"
            );
        }
    }
}

/// The number of lines of the page's log holding `needle`.
async fn log_count(browser: &Browser, needle: &str) -> u64 {
    browser
        .js(&format!(
            "return [...document.querySelectorAll('#log li')].filter(l => l.textContent.includes({needle:?})).length"
        ))
        .await
        .as_u64()
        .unwrap()
}

async fn click(browser: &Browser, id: &str) {
    browser
        .client
        .find(Locator::Id(id))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

async fn tool_call_pinned(peer: &mut Peer, id: &str, tool: &str, args: Value, pin: &str) -> Value {
    let frame = json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": {"revision": pin}},
    });
    peer.post(&frame.to_string()).await;
    peer.answer(id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_session_and_the_sheet() {
    with_browser(|browser| async move { reload_story(&browser).await }).await;
}

/// F5 in the person's tab: the same share link (session and token), the
/// same cells and revision counter; an agent's call before the reload and
/// one after it both work, and a pin taken before the reload is checked
/// against the sheet as it was. What the tab kept, when it cannot be read,
/// is never used: a new session. A copy of the tab (`window.open` copies
/// the tab's storage) gets a session of its own.
async fn reload_story(browser: &Browser) {
    let relay = RelayServer::builder().start().await.unwrap();
    let port = relay.addr().port();
    let (server, session, token) = open_page(browser, relay.base_url(), false).await;
    let link = share_link(browser).await;
    let mut seen = vec![(session.clone(), token.clone())];

    // Before the reload: the agent writes (r2), the person types (r3), the
    // agent catches up on the change feed and reads (r3, which it will pin
    // its next write to).
    let hp = agent(port, ReceiveLeg::Sse);
    let owner = "browser-test";
    let invitation = SurfaceInvitation::new_insecure_loopback(
        relay.base_url(),
        &session,
        &token,
        "sheet:web",
        "web",
    )
    .unwrap();
    let id = hp
        .attach(owner, invitation, participant())
        .await
        .unwrap()
        .id()
        .to_owned();
    let wrote = hp
        .call(
            owner,
            &id,
            "sheet_set_cell",
            json!({"address": "A5", "value": "Figs"}),
        )
        .await
        .unwrap();
    assert_eq!(wrote.revision.as_ref().unwrap().token(), "r2");
    browser.type_into("B4", "12").await;
    browser.wait_log("You updated B4 = 12 (r3).").await;
    let changes = hp.changes_since(owner, &id).await.unwrap();
    assert!(changes.complete());
    let read = hp
        .call(owner, &id, "sheet_get_cell", json!({"address": "B4"}))
        .await
        .unwrap();
    assert_eq!(read.revision.as_ref().unwrap().token(), "r3");
    assert!(read.text.lines().any(|l| l == "12"), "{}", read.text);

    // F5.
    browser.client.refresh().await.unwrap();
    browser.wait_state("sse").await;
    browser
        .wait_log(&format!(
            "This tab kept session {session} across the reload: the same share link, the sheet at r3."
        ))
        .await;
    assert_eq!(share_link(browser).await, link, "the same share link");
    let (_, session_after, _, token_after) = browser.invitation().await;
    assert_eq!((&session_after, &token_after), (&session, &token));
    assert_eq!(browser.cell("B4").await, "12");
    assert_eq!(browser.cell("A5").await, "Figs");
    assert_eq!(browser.text("revision").await, "r3");
    assert_eq!(relay.sessions(), vec![session.clone()], "no new session");
    assert_eq!(
        browser.text("kept").await,
        "Reloading this tab keeps this session, its link and the sheet."
    );

    // After the reload: the agent's write, pinned to the r3 it read before
    // the reload, applies, as the revision after the last.
    let wrote = hp
        .call(
            owner,
            &id,
            "sheet_set_cell",
            json!({"address": "D4", "value": "14.40"}),
        )
        .await
        .unwrap();
    assert_eq!(wrote.pinned.as_ref().unwrap().token(), "r3");
    assert_eq!(wrote.revision.as_ref().unwrap().token(), "r4");
    browser.wait_cell("D4", "14.40").await;
    // A write pinned to r2, from before the person's edit and the reload,
    // is refused: the sheet did not start again at r1 (where one more
    // change would have made an r2 that matched it).
    let mut peer = Peer::new(port, &session, &token).await;
    let stale = tool_call_pinned(
        &mut peer,
        "stale-1",
        "sheet_set_cell",
        json!({"address": "B4", "value": "8"}),
        "r2",
    )
    .await;
    assert_eq!(stale["error"]["code"], 409, "{stale}");
    assert_eq!(
        stale["error"]["data"]["code"], "revision_mismatch",
        "{stale}"
    );
    assert_eq!(stale["error"]["data"]["current"], "r4", "{stale}");
    assert_eq!(browser.cell("B4").await, "12");
    // The change feed holds the history from before the reload, attributed.
    let feed = tool_call_pinned(
        &mut peer,
        "feed-1",
        "changes_since",
        json!({"since": "r1"}),
        "r1",
    )
    .await;
    assert_eq!(feed["result"]["_meta"]["complete"], true, "{feed}");
    let rows: Vec<(String, String, String)> = feed["result"]["_meta"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["handle"].as_str().unwrap().to_owned(),
                c["actor_type"].as_str().unwrap().to_owned(),
                c["revision"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let row = |h: &str, a: &str, r: &str| (h.to_owned(), a.to_owned(), r.to_owned());
    assert_eq!(
        rows,
        vec![
            row("A5", "agent", "r2"),
            row("B4", "human", "r3"),
            row("D4", "agent", "r4")
        ]
    );

    // Kept in this tab's sessionStorage only: no localStorage, no cookie.
    assert_eq!(
        browser
            .js(&format!(
                "return localStorage.length === 0 && document.cookie === '' && sessionStorage.getItem({KEPT_KEY:?}) !== null"
            ))
            .await,
        true
    );

    // A copy of this tab starts with a copy of its storage: it finds this
    // tab holding the session and opens one of its own.
    let first = browser.client.window().await.unwrap();
    browser
        .js("window.open(location.href, '_blank'); return true")
        .await;
    let copy = loop {
        let windows = browser.client.windows().await.unwrap();
        if let Some(w) = windows.into_iter().find(|w| *w != first) {
            break w;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    browser.client.switch_to_window(copy).await.unwrap();
    browser.wait_state("sse").await;
    browser
        .wait_log(&format!("Another open tab holds session {session}"))
        .await;
    let (_, copy_session, _, copy_token) = browser.invitation().await;
    assert_ne!(copy_session, session);
    assert_eq!(browser.text("revision").await, "r1");
    seen.push((copy_session, copy_token));
    browser.client.close_window().await.unwrap();
    browser.client.switch_to_window(first).await.unwrap();
    assert_eq!(browser.invitation().await.1, session, "this tab kept it");

    // What the tab kept, altered so that its counter no longer follows its
    // history (a sheet that started again), is not used: a new session,
    // and the old one is ended on the relay, so an agent holding the old
    // link is told so instead of reaching a page that forgot its sheet.
    browser
        .js(&format!(
            "const k = JSON.parse(sessionStorage.getItem({KEPT_KEY:?})); k.sheet.counter = 1; \
             sessionStorage.setItem({KEPT_KEY:?}, JSON.stringify(k)); return true"
        ))
        .await;
    browser.client.refresh().await.unwrap();
    browser.wait_state("sse").await;
    browser
        .wait_log("What this tab kept could not be read, so a new session was started")
        .await;
    let (_, fresh, _, fresh_token) = browser.invitation().await;
    assert_ne!(fresh, session);
    assert_eq!(browser.text("revision").await, "r1");
    assert_eq!(browser.cell("B4").await, "7");
    assert!(!relay.sessions().contains(&session), "the old one ended");
    match hp
        .call(owner, &id, "sheet_get_cell", json!({"address": "B4"}))
        .await
    {
        Err(e @ Error::SurfaceUnavailable) => assert_eq!(e.code(), "surface_unavailable"),
        other => panic!("the old link is gone: {other:?}"),
    }
    seen.push((fresh.clone(), fresh_token));

    // Not JSON at all: a new session too.
    browser
        .js(&format!(
            "sessionStorage.setItem({KEPT_KEY:?}, '{{not json'); return true"
        ))
        .await;
    browser.client.refresh().await.unwrap();
    browser.wait_state("sse").await;
    let (_, fresher, _, fresher_token) = browser.invitation().await;
    assert_ne!(fresher, fresh);
    seen.push((fresher, fresher_token));

    assert_token_only_in_events_urls(browser, &seen).await;
    drop(server);
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_the_session_revokes_its_link() {
    with_browser(|browser| async move { end_story(&browser).await }).await;
}

/// "End this session and start a new one": asked first; then the old
/// session is unregistered on the relay (an agent holding the old link is
/// answered 410, `surface_unavailable`) and a new one, with a new token
/// and a fresh sheet, is registered and shown.
async fn end_story(browser: &Browser) {
    let relay = RelayServer::builder()
        .prefix("agent-relay")
        .start()
        .await
        .unwrap();
    let port = relay.addr().port();
    let (server, session, token) = open_page(browser, relay.base_url(), false).await;
    let old_link = share_link(browser).await;
    let hp = agent(port, ReceiveLeg::Sse);
    let owner = "browser-test";
    let invitation = SurfaceInvitation::new_insecure_loopback(
        relay.base_url(),
        &session,
        &token,
        "sheet:web",
        "web",
    )
    .unwrap();
    let old = hp
        .attach(owner, invitation, participant())
        .await
        .unwrap()
        .id()
        .to_owned();
    hp.call(
        owner,
        &old,
        "sheet_set_cell",
        json!({"address": "A5", "value": "Figs"}),
    )
    .await
    .unwrap();
    browser.wait_cell("A5", "Figs").await;

    // Asked first; "Keep this session" changes nothing.
    let hidden = |id: &str| format!("return document.getElementById({id:?}).hidden");
    assert_eq!(
        browser.text("end-session").await,
        "End this session and start a new one"
    );
    assert_eq!(browser.js(&hidden("end-confirm")).await, true);
    click(browser, "end-session").await;
    assert_eq!(browser.js(&hidden("end-confirm")).await, false);
    assert!(
        browser
            .text("end-question")
            .await
            .contains("Every agent holding its link is refused")
    );
    click(browser, "end-no").await;
    assert_eq!(browser.js(&hidden("end-confirm")).await, true);
    assert_eq!(browser.invitation().await.1, session);
    assert_eq!(relay.sessions(), vec![session.clone()]);

    // Ended: a new session, a new link, a fresh sheet.
    click(browser, "end-session").await;
    click(browser, "end-yes").await;
    browser
        .until(
            "a new session in the page",
            &format!(
                "return document.getElementById('inv-session').textContent !== {session:?} \
                 && document.getElementById('status').dataset.state === 'sse'"
            ),
        )
        .await;
    browser
        .wait_log(&format!("You ended session {session}"))
        .await;
    let new_link = share_link(browser).await;
    let (link_relay, new_session, new_token, surface) = parse_share_link(&new_link);
    assert_ne!(new_link, old_link);
    assert_ne!(new_session, session);
    assert_ne!(new_token, token);
    assert_eq!(link_relay, relay.base_url());
    assert_eq!(surface, "sheet:web");
    assert_eq!(browser.invitation().await.3, new_token);
    assert_eq!(relay.sessions(), vec![new_session.clone()]);
    assert_eq!(browser.text("revision").await, "r1");
    assert_eq!(browser.cell("A5").await, "");
    assert_eq!(browser.cell("B4").await, "7");

    // The old link is revoked: the relay answers 410.
    match hp
        .call(owner, &old, "sheet_get_cell", json!({"address": "B4"}))
        .await
    {
        Err(e @ Error::SurfaceUnavailable) => assert_eq!(e.code(), "surface_unavailable"),
        other => panic!("the old link is revoked: {other:?}"),
    }
    let (status, _) = http(
        port,
        "GET",
        &format!("/agent-relay/{session}/poll?token={token}&direction=outbound&wait=0"),
        "",
    )
    .await;
    assert_eq!(status, 410);

    // The new link works, and a reload keeps the new session.
    let invitation = SurfaceInvitation::new_insecure_loopback(
        relay.base_url(),
        &new_session,
        &new_token,
        "sheet:web",
        "web",
    )
    .unwrap();
    let new = hp
        .attach(owner, invitation, participant())
        .await
        .unwrap()
        .id()
        .to_owned();
    let wrote = hp
        .call(
            owner,
            &new,
            "sheet_set_cell",
            json!({"address": "A6", "value": "Kiwis"}),
        )
        .await
        .unwrap();
    assert_eq!(wrote.revision.as_ref().unwrap().token(), "r2");
    browser.client.refresh().await.unwrap();
    browser.wait_state("sse").await;
    assert_eq!(browser.invitation().await.1, new_session);
    assert_eq!(browser.cell("A6").await, "Kiwis");

    // A session that is over (ended elsewhere) has nothing to confirm.
    assert!(relay.drop_session(&new_session));
    browser.wait_state("gone").await;
    assert_eq!(browser.text("end-session").await, "Start a new session");
    click(browser, "end-session").await;
    browser.wait_state("sse").await;
    let (_, third, _, third_token) = browser.invitation().await;
    assert_ne!(third, new_session);
    assert_eq!(relay.sessions(), vec![third.clone()]);
    assert_eq!(
        browser
            .js("return document.querySelector('input[data-address=\"B4\"]').disabled || !document.getElementById('gone').hidden")
            .await,
        false,
        "the new session can be edited"
    );

    assert_token_only_in_events_urls(
        browser,
        &[
            (session, token),
            (new_session, new_token),
            (third, third_token),
        ],
    )
    .await;
    drop(server);
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_restarted_under_the_page_is_joined_again() {
    with_browser(|browser| async move { restart_story(&browser).await }).await;
}

/// Starts `human-plus relay` on `port` (0: a free one); the process and
/// its base URL.
async fn relay_process(port: u16) -> (Proc, String) {
    let mut relay = Proc::spawn(&["relay", "--port", &port.to_string()]);
    let line = relay.expect("Human+ relay listening at").await;
    let base = line.rsplit(' ').next().unwrap().to_owned();
    (relay, base)
}

/// The relay process is killed under the page and started again on the
/// same port, with no sessions: the page registers its session again
/// (same token, same link, same sheet) and carries on; twice, once with
/// its event stream past its first seconds (the stream reconnects by
/// itself, and the page checks whether the relay is there at all) and
/// once right after it opened (the page falls back to the poll leg). Then
/// a 410 that follows no outage (an agent's unregister) still ends it.
async fn restart_story(browser: &Browser) {
    let (relay, base) = relay_process(0).await;
    let port: u16 = base.rsplit(':').next().unwrap().parse().unwrap();
    let (server, session, token) = open_page(browser, &base, false).await;
    let opened = Instant::now();
    let link = share_link(browser).await;
    let invitation = || {
        SurfaceInvitation::new_insecure_loopback(&base, &session, &token, "sheet:web", "web")
            .unwrap()
    };
    let owner = "browser-test";
    let hp = agent(port, ReceiveLeg::Sse);
    let id = hp
        .attach(owner, invitation(), participant())
        .await
        .unwrap()
        .id()
        .to_owned();
    let wrote = hp
        .call(
            owner,
            &id,
            "sheet_set_cell",
            json!({"address": "A5", "value": "Figs"}),
        )
        .await
        .unwrap();
    assert_eq!(wrote.revision.as_ref().unwrap().token(), "r2");
    drop(hp);

    let mut relay = Some(relay);
    let mut revision = 2;
    for round in 1..=2u64 {
        if round == 1 {
            // Past the event stream's first 8 s: its break is EventSource's
            // own to reconnect.
            let settled = opened + Duration::from_secs(9);
            tokio::time::sleep(settled.saturating_duration_since(Instant::now())).await;
        }
        drop(relay.take());
        browser
            .until(
                "the page noticing the relay is gone",
                "return document.getElementById('status').dataset.state === 'reconnecting'",
            )
            .await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (again, again_base) = relay_process(port).await;
        assert_eq!(again_base, base);
        relay = Some(again);
        browser
            .until(
                "the page registering its session again",
                &format!(
                    "return [...document.querySelectorAll('#log li')].filter(l => l.textContent.includes('The relay had forgotten this session')).length === {round}"
                ),
            )
            .await;
        browser
            .until(
                "the page live again",
                "const s = document.getElementById('status').dataset.state; return s === 'sse' || s === 'poll'",
            )
            .await;
        // Round 1 went through the event stream's own reconnect (and the
        // page's check that the relay was gone); round 2 through the poll
        // leg, whose requests failed.
        let unreachable = log_count(browser, "the relay could not be reached").await;
        if round == 1 {
            assert!(log_count(browser, "Reconnecting: the event stream broke").await >= 1);
            assert_eq!(unreachable, 0);
        } else {
            assert!(unreachable >= 1);
        }
        assert_eq!(share_link(browser).await, link, "the same link");
        assert_eq!(browser.text("revision").await, format!("r{revision}"));

        // A new agent from the same link: the same sheet, the next revision.
        let hp = agent(port, ReceiveLeg::Sse);
        let id = hp
            .attach(owner, invitation(), participant())
            .await
            .unwrap()
            .id()
            .to_owned();
        let read = hp
            .call(owner, &id, "sheet_get_cell", json!({"address": "A5"}))
            .await
            .unwrap();
        assert!(read.text.lines().any(|l| l == "Figs"), "{}", read.text);
        assert_eq!(
            read.revision.as_ref().unwrap().token(),
            format!("r{revision}")
        );
        let wrote = hp
            .call(
                owner,
                &id,
                "sheet_set_cell",
                json!({"address": "B6", "value": format!("round {round}")}),
            )
            .await
            .unwrap();
        revision += 1;
        assert_eq!(
            wrote.revision.as_ref().unwrap().token(),
            format!("r{revision}")
        );
        browser.wait_cell("B6", &format!("round {round}")).await;
        drop(hp);
    }
    assert_eq!(
        log_count(browser, "The relay had forgotten this session").await,
        2
    );

    // Ended by a token holder on a relay that was there all along: gone.
    let (status, body) = http(
        port,
        "POST",
        &format!("/{session}/unregister?token={token}"),
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    browser.wait_state("gone").await;
    assert!(browser.text("gone").await.contains("410"));
    assert_eq!(
        log_count(browser, "The relay had forgotten this session").await,
        2
    );

    assert_token_only_in_events_urls(browser, &[(session, token)]).await;
    drop(server);
    drop(relay);
}
