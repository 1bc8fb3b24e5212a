#![doc = include_str!("../README.md")]

mod settings;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use human_plus_blocking::{
    CallResult, Error, HumanPlus, Participant, RedisAttachmentStore, RedisConfig, SurfaceInvitation,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::settings::Settings;

/// One job from the list.
#[derive(Debug, Serialize, Deserialize)]
struct Job {
    id: String,
    conversation: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    link: Option<String>,
    tool: String,
    #[serde(default)]
    arguments: Value,
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
    match run(settings) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(settings: Settings) -> Result<(), Box<dyn std::error::Error>> {
    let store_config = RedisConfig::new(settings.redis_url.clone(), settings.keyring.clone());
    let store = RedisAttachmentStore::open(store_config)?;
    let human_plus = HumanPlus::builder(settings.manager.clone())
        .store(store)
        .lock_wait(settings.lock_wait)
        .build()?;
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
        let mut job: Job = match serde_json::from_str(&raw) {
            Ok(job) => job,
            Err(e) => {
                let report = json!({"ok": false, "code": "invalid_job", "message": e.to_string()});
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
                tracing::info!(
                    job = job.id,
                    conversation = job.conversation,
                    code,
                    ms,
                    "job done"
                );
                let report = json!({"id": job.id, "worker": worker.settings.name, "ok": ok,
                    "code": code, "message": message, "ms": ms});
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
    let attachment = match &job.link {
        Some(link) => {
            let invitation = SurfaceInvitation::from_link(link, &settings.links)?;
            let participant = Participant::new("queue-worker", "Assistant", "#0f766e");
            let attaching =
                human_plus.attach_as(&settings.owner, &job.conversation, invitation, participant);
            attaching?.attachment
        }
        None => human_plus
            .find(&settings.owner, &job.conversation)?
            .ok_or(Error::AttachmentMissing)?,
    };
    // Where a real worker asks its model what to do (THINK_MS stands in).
    std::thread::sleep(settings.think);
    let arguments = job.arguments.clone();
    human_plus.call_with_timeout(
        &settings.owner,
        attachment.id(),
        &job.tool,
        arguments,
        settings.call_timeout,
    )
}

fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}
