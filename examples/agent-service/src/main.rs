#![doc = include_str!("../README.md")]

mod errors;
mod settings;

use std::future::Future;
use std::time::{Duration, Instant};

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use human_plus_tokio::{
    AsyncRedisAttachmentStore, AttachmentSummary, CallResult, Discovery, Error, HumanPlus,
    LinkOptions, OwnerKey, Participant, RedisConfig, SurfaceChanges, SurfaceInvitation,
    SurfaceRevision, keyed_attachment_id,
};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::errors::ApiError;
use crate::settings::Settings;

/// What every handler shares: cheap to clone.
#[derive(Clone)]
struct App {
    human_plus: HumanPlus<AsyncRedisAttachmentStore>,
    owner: String,
    links: LinkOptions,
    /// True once the shutdown grace is over: requests still running end.
    stopped: watch::Receiver<bool>,
}

impl App {
    /// Runs `op`, or ends it when the shutdown grace runs out (`acts`: it
    /// may have acted on the page by then).
    async fn run<T>(
        &self,
        acts: bool,
        op: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, ApiError> {
        let mut stopped = self.stopped.clone();
        tokio::select! {
            done = op => done.map_err(ApiError::from),
            _ = stopped.wait_for(|stopped| *stopped) => Err(ApiError::Stopped { acts }),
        }
    }

    /// The attachment id of `conversation`: derived from the owner and the
    /// key, as `attach_as` derived it, so nothing is read from the store
    /// here (the operation loads the record once, under its lock, and
    /// answers `attachment_missing`, 404, when it was never attached).
    fn id_of(&self, conversation: &str) -> Result<String, ApiError> {
        Ok(keyed_attachment_id(
            &OwnerKey::of(&self.owner)?,
            conversation,
        )?)
    }
}

/// `POST /conversations`.
#[derive(Deserialize)]
struct AttachBody {
    conversation: String,
    link: String,
}

/// `POST /conversations/{conversation}/calls`.
#[derive(Deserialize)]
struct CallBody {
    tool: String,
    #[serde(default)]
    arguments: Value,
    timeout_ms: Option<u64>,
}

async fn attach(
    State(app): State<App>,
    Json(body): Json<AttachBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let invitation = SurfaceInvitation::from_link(&body.link, &app.links)?;
    let participant = Participant::new("agent-service", "Assistant", "#7c3aed");
    let attaching =
        app.human_plus
            .attach_as(&app.owner, &body.conversation, invitation, participant);
    let attached = app.run(false, attaching).await?;
    let status = if attached.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let answer = json!({
        "conversation": body.conversation,
        "created": attached.created,
        "attachment": attached.attachment.summary(),
        "discovery": attached.discovery,
    });
    Ok((status, Json(answer)))
}

async fn status(
    State(app): State<App>,
    Path(conversation): Path<String>,
) -> Result<Json<AttachmentSummary>, ApiError> {
    let found = app.human_plus.find(&app.owner, &conversation).await?;
    Ok(Json(found.ok_or(Error::AttachmentMissing)?.summary()))
}

async fn tools(
    State(app): State<App>,
    Path(conversation): Path<String>,
) -> Result<Json<Discovery>, ApiError> {
    let id = app.id_of(&conversation)?;
    Ok(Json(
        app.run(false, app.human_plus.tools(&app.owner, &id))
            .await?,
    ))
}

/// The revision a request's `If-Match: "<token>"` names: the revision the
/// caller's decision was made at (an `ETag` this service answered).
fn if_match(headers: &HeaderMap) -> Result<Option<SurfaceRevision>, ApiError> {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    // Anything but one quoted entity tag reads as empty: invalid_revision.
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().strip_prefix('"')?.strip_suffix('"'))
        .unwrap_or_default();
    Ok(Some(
        SurfaceRevision::observed(token, "If-Match").map_err(Error::InvalidRevision)?,
    ))
}

/// `ETag: "<token>"` for an answer that observed `revision` (none when the
/// token cannot be written as an entity tag).
pub(crate) fn etag(revision: Option<&SurfaceRevision>) -> Option<HeaderValue> {
    let token = revision?.token();
    if token.contains('"') {
        return None;
    }
    HeaderValue::from_str(&format!("\"{token}\"")).ok()
}

/// A JSON answer with its `ETag`, when it observed a revision.
fn tagged<T: serde::Serialize>(body: T, revision: Option<&SurfaceRevision>) -> Response {
    let tag = etag(revision);
    let mut response = Json(body).into_response();
    if let Some(tag) = tag {
        response.headers_mut().insert(header::ETAG, tag);
    }
    response
}

async fn call(
    State(app): State<App>,
    Path(conversation): Path<String>,
    headers: HeaderMap,
    Json(body): Json<CallBody>,
) -> Result<Response, ApiError> {
    let decided_at = if_match(&headers)?;
    let id = app.id_of(&conversation)?;
    let (owner, tool, arguments) = (&app.owner, &body.tool, body.arguments);
    let bound = body.timeout_ms.map(Duration::from_millis);
    let result: CallResult = match (decided_at, bound) {
        (Some(at), Some(bound)) => {
            let calling = app
                .human_plus
                .call_at_with_timeout(owner, &id, tool, arguments, at, bound);
            app.run(true, calling).await?
        }
        (Some(at), None) => {
            let calling = app.human_plus.call_at(owner, &id, tool, arguments, at);
            app.run(true, calling).await?
        }
        (None, Some(bound)) => {
            let calling = app
                .human_plus
                .call_with_timeout(owner, &id, tool, arguments, bound);
            app.run(true, calling).await?
        }
        (None, None) => {
            let calling = app.human_plus.call(owner, &id, tool, arguments);
            app.run(true, calling).await?
        }
    };
    let tag = result.revision_to_carry().cloned();
    Ok(tagged(result, tag.as_ref()))
}

async fn changes(
    State(app): State<App>,
    Path(conversation): Path<String>,
) -> Result<Response, ApiError> {
    let id = app.id_of(&conversation)?;
    let reading = app.human_plus.changes_since(&app.owner, &id);
    let answer: SurfaceChanges = app.run(false, reading).await?;
    let tag = answer.revision().cloned();
    Ok(tagged(answer, tag.as_ref()))
}

async fn detach(
    State(app): State<App>,
    Path(conversation): Path<String>,
) -> Result<Json<AttachmentSummary>, ApiError> {
    let id = app.id_of(&conversation)?;
    let detached = app
        .run(false, app.human_plus.detach(&app.owner, &id))
        .await?;
    Ok(Json(detached.summary()))
}

/// One log line per request: method, path, status, time. Never a body.
async fn log_request(request: Request, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let started = Instant::now();
    let response = next.run(request).await;
    let ms = started.elapsed().as_millis();
    let status = response.status().as_u16();
    tracing::info!(%method, path, status, ms, "request");
    response
}

/// SIGTERM or Ctrl-C.
async fn terminated() -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => Ok(()),
        stopped = tokio::signal::ctrl_c() => stopped,
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    settings::init_tracing();
    let settings = match Settings::read() {
        Ok(settings) => settings,
        Err(exit) => return exit,
    };
    match serve(settings).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(settings: Settings) -> Result<(), Box<dyn std::error::Error>> {
    let store_config = RedisConfig::new(settings.redis_url, settings.keyring);
    let store = AsyncRedisAttachmentStore::connect(store_config).await?;
    // Each conversation's leg to its page is kept between calls (a call is
    // then one exchange, and the page sees the agent join once), bounded. A
    // SIGTERM lets the calls in flight finish within the grace, each keeping
    // its conversation's lock (one writer), then ends them.
    let human_plus = HumanPlus::builder(settings.manager)
        .store(store)
        .kept_legs(settings.kept_legs)
        .kept_leg_idle(settings.kept_leg_idle)
        .shutdown_grace(settings.grace)
        .build()?;
    // A quiet replica's idle legs leave the person's page on time: the
    // manager spawns nothing of its own, so the service closes them on a
    // timer, as hyper's pool does its idle connections.
    let sweeper = human_plus.clone();
    tokio::spawn(async move {
        loop {
            let wait = sweeper
                .next_idle_close()
                .unwrap_or(Duration::from_secs(5))
                .max(Duration::from_millis(10));
            tokio::time::sleep(wait).await;
            sweeper.close_idle_legs();
        }
    });
    let (stop, stopped) = watch::channel(false);
    let app = App {
        human_plus: human_plus.clone(),
        owner: settings.owner,
        links: settings.links,
        stopped,
    };
    let routes = Router::new()
        .route("/conversations", post(attach))
        .route("/conversations/{conversation}", get(status).delete(detach))
        .route("/conversations/{conversation}/tools", get(tools))
        .route("/conversations/{conversation}/calls", post(call))
        .route("/conversations/{conversation}/changes", get(changes))
        .layer(middleware::from_fn(log_request))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(settings.listen).await?;
    tracing::info!(address = %listener.local_addr()?, "listening");
    let grace = settings.grace;
    let stopping = async move {
        if let Err(e) = terminated().await {
            tracing::error!("cannot wait for SIGTERM: {e}");
        }
        let asked = Instant::now();
        // Nothing new starts; the calls in flight finish (or end at the
        // grace), then their conversations go back to the other replicas.
        human_plus.shutdown().await;
        tracing::info!(
            ms = asked.elapsed().as_millis(),
            "stopping: conversations given back"
        );
        // A request still running now is past the library's grace (stuck
        // outside it): it ends shortly.
        tokio::spawn(async move {
            tokio::time::sleep(grace.min(Duration::from_secs(2))).await;
            let _ = stop.send(true);
        });
    };
    axum::serve(listener, routes)
        .with_graceful_shutdown(stopping)
        .await?;
    tracing::info!("stopped");
    Ok(())
}
