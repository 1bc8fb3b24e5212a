#![doc = include_str!("../README.md")]

mod settings;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use human_plus_blocking::{
    CallResult, Error, HumanPlus, OwnerKey, Participant, RedisAttachmentStore, RedisConfig,
    SurfaceInvitation, SurfaceRevision, keyed_attachment_id,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::settings::Settings;

/// One job from the list. It names its conversation, attached once from
/// the person's share link (`queue-worker attach`); it never carries the
/// link, which holds the person's token and would sit in plain text in the
/// job list (the attachment records are sealed).
#[derive(Debug, Serialize, Deserialize)]
struct Job {
    id: String,
    conversation: String,
    /// Only to refuse a job that carries a share link: it is never read.
    #[serde(default, skip_serializing)]
    link: Option<serde::de::IgnoredAny>,
    tool: String,
    #[serde(default)]
    arguments: Value,
    /// The revision the job's decision was made at (the `revision` of the
    /// read it was decided on): the call is pinned to exactly it, so a
    /// person's edit since is refused, whatever other jobs of the
    /// conversation were told meanwhile. Absent: the conversation's
    /// stored pin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    revision: Option<String>,
    /// How often it was put back already.
    #[serde(default)]
    attempts: u32,
}

/// How often a retryable job is put back before it is reported failed.
const MAX_ATTEMPTS: u32 = 5;

/// Moves the jobs due from the sorted set back onto the list, atomically.
const MOVE_DUE: &str = r"
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 16)
for _, job in ipairs(due) do
  redis.call('ZREM', KEYS[1], job)
  redis.call('RPUSH', KEYS[2], job)
end
return #due";

/// What every thread shares.
struct Worker {
    human_plus: HumanPlus<RedisAttachmentStore>,
    settings: Settings,
    stop: Arc<AtomicBool>,
}

fn main() -> std::process::ExitCode {
    settings::init_tracing();
    let settings = match Settings::read() {
        Ok(settings) => settings,
        Err(exit) => return exit,
    };
    let outcome = match settings.attach.clone() {
        Some(conversation) => attach(&settings, &conversation),
        None => run(settings),
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The manager every thread shares, over the Redis store.
fn manager(settings: &Settings) -> Result<HumanPlus<RedisAttachmentStore>, Error> {
    let store_config = RedisConfig::new(settings.redis_url.clone(), settings.keyring.clone());
    let store = RedisAttachmentStore::open(store_config)?;
    HumanPlus::builder(settings.manager.clone())
        .store(store)
        .lock_wait(settings.lock_wait)
        // Each conversation's leg to its page is kept between jobs (a job's
        // call is then one exchange, and the page sees the agent join
        // once), bounded.
        .kept_legs(settings.kept_legs)
        .kept_leg_idle(settings.kept_leg_idle)
        .build()
}

/// `queue-worker attach CONVERSATION < link`: where the person hands the
/// link over, attach the conversation once (verified: a wrong link is told
/// here), keyed by the conversation, so every job names only the
/// conversation. The link is read from standard input, never from argv,
/// and is kept only in the sealed record.
fn attach(settings: &Settings, conversation: &str) -> Result<(), Box<dyn std::error::Error>> {
    let mut link = String::new();
    std::io::stdin().read_line(&mut link)?;
    let invitation = SurfaceInvitation::from_link(link.trim(), &settings.links)?;
    let participant = Participant::new("queue-worker", "Assistant", "#0f766e");
    let human_plus = manager(settings)?;
    let attached = human_plus.attach_as(&settings.owner, conversation, invitation, participant);
    let attached = attached?;
    let answer = json!({"conversation": conversation, "created": attached.created,
        "attachment": attached.attachment.summary()});
    println!("{answer}");
    Ok(())
}

fn run(settings: Settings) -> Result<(), Box<dyn std::error::Error>> {
    let human_plus = manager(&settings)?;
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&stop))?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&stop))?;
    let queue = redis::Client::open(settings.redis_url.as_str())?;
    let threads = settings.threads;
    let worker = Arc::new(Worker {
        human_plus,
        settings,
        stop,
    });
    tracing::info!(threads, worker = worker.settings.name, "working");
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (worker, queue) = (Arc::clone(&worker), queue.clone());
            std::thread::spawn(move || take_jobs(&worker, &queue))
        })
        .collect();
    for handle in handles {
        let _ = handle.join();
    }
    let asked = Instant::now();
    worker.human_plus.shutdown();
    tracing::info!(
        ms = asked.elapsed().as_millis(),
        "stopped: conversations given back"
    );
    Ok(())
}

/// One thread: jobs until told to stop. A Redis failure of the job list
/// is logged and the thread tries again a second later.
fn take_jobs(worker: &Worker, queue: &redis::Client) {
    while !worker.stop.load(Ordering::SeqCst) {
        if let Err(e) = queue
            .get_connection()
            .and_then(|mut c| jobs(worker, &mut c))
        {
            tracing::warn!("the job list failed: {e}");
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

fn jobs(worker: &Worker, conn: &mut redis::Connection) -> redis::RedisResult<()> {
    let (list, later) = (
        &worker.settings.queue,
        format!("{}:later", worker.settings.queue),
    );
    let move_due = redis::Script::new(MOVE_DUE);
    while !worker.stop.load(Ordering::SeqCst) {
        let _: u32 = move_due.key(&later).key(list).arg(now_ms()).invoke(conn)?;
        let popped: Option<(String, String)> =
            redis::cmd("BLPOP").arg(list).arg(0.5).query(conn)?;
        let Some((_, raw)) = popped else { continue };
        let parsed = serde_json::from_str::<Job>(&raw).map_err(|e| e.to_string());
        let parsed = parsed.and_then(|job| match job.link {
            Some(_) => Err(format!(
                "job {}: a job names its conversation and never carries the share link \
                 (it holds the person's token); attach the conversation once: \
                 queue-worker attach CONVERSATION < link",
                job.id
            )),
            None => Ok(job),
        });
        let mut job = match parsed {
            Ok(job) => job,
            Err(message) => {
                let report = json!({"ok": false, "code": "invalid_job", "message": message});
                let _: () = redis::cmd("RPUSH")
                    .arg(format!("{list}:done"))
                    .arg(report.to_string())
                    .query(conn)?;
                continue;
            }
        };
        let started = Instant::now();
        let outcome = work(worker, &job);
        let ms = started.elapsed().as_millis();
        match outcome {
            Err(e) if e.is_retryable() && job.attempts < MAX_ATTEMPTS => {
                job.attempts += 1;
                let wait = e.retry_after().unwrap_or(Duration::from_secs(1));
                let due =
                    now_ms().saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
                tracing::info!(
                    job = job.id,
                    code = e.code(),
                    wait_ms = wait.as_millis(),
                    "put back for later"
                );
                let raw = serde_json::to_string(&job).unwrap_or(raw);
                let _: () = redis::cmd("ZADD")
                    .arg(&later)
                    .arg(due)
                    .arg(raw)
                    .query(conn)?;
            }
            outcome => {
                let (ok, code, message) = match &outcome {
                    Ok(result) => (true, "ok", result.text.clone()),
                    Err(e) => (false, e.code(), e.to_string()),
                };
                // The revision a job decided on this answer carries.
                let revision = match &outcome {
                    Ok(result) => result.revision_to_carry(),
                    Err(Error::SurfaceChangedUnderYou(refusal)) => refusal.revision_to_carry(),
                    Err(_) => None,
                }
                .map(|r| r.token().to_owned());
                tracing::info!(
                    job = job.id,
                    conversation = job.conversation,
                    code,
                    ms,
                    "job done"
                );
                let report = json!({"id": job.id, "worker": worker.settings.name, "ok": ok,
                    "code": code, "message": message, "ms": ms, "revision": revision});
                let _: () = redis::cmd("RPUSH")
                    .arg(format!("{list}:done"))
                    .arg(report.to_string())
                    .query(conn)?;
            }
        }
    }
    Ok(())
}

/// The job's call, on its conversation's attachment.
fn work(worker: &Worker, job: &Job) -> Result<CallResult, Error> {
    let (human_plus, settings) = (&worker.human_plus, &worker.settings);
    // The conversation's attachment id, derived as `attach` derived it:
    // nothing is read here (the call loads the record once, under its lock,
    // and answers attachment_missing for a conversation never attached).
    let id = keyed_attachment_id(&OwnerKey::of(&settings.owner)?, &job.conversation)?;
    // Where a real worker asks its model what to do (THINK_MS stands in).
    std::thread::sleep(settings.think);
    let arguments = job.arguments.clone();
    match &job.revision {
        Some(token) => {
            let at = SurfaceRevision::observed(token, "the job's read")
                .map_err(Error::InvalidRevision)?;
            human_plus.call_at_with_timeout(
                &settings.owner,
                &id,
                &job.tool,
                arguments,
                at,
                settings.call_timeout,
            )
        }
        None => human_plus.call_with_timeout(
            &settings.owner,
            &id,
            &job.tool,
            arguments,
            settings.call_timeout,
        ),
    }
}

fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}
