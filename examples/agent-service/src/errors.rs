//! From Human+'s [`Error`] to an HTTP answer: a status, `Retry-After` when
//! a retry may succeed later, and a JSON body whose `message` is the
//! library's text (it never holds the token; a refusal's text is written
//! for the model to read).

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use human_plus_tokio::Error;
use serde_json::json;

/// Why a request failed.
#[derive(Debug)]
pub enum ApiError {
    /// What Human+ answered.
    HumanPlus(Error),
    /// The replica stopped (SIGTERM, then the grace ran out) before the
    /// operation ended; `acts`: a call, which may have been applied.
    Stopped {
        /// Whether the operation was a call.
        acts: bool,
    },
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError::HumanPlus(e)
    }
}

/// The HTTP status of an error, from its predicates first (busy, outcome
/// unknown, terminal), then from its stable code ([`status_of_code`]).
#[must_use]
pub fn status_of(e: &Error) -> StatusCode {
    if e.is_busy() {
        StatusCode::SERVICE_UNAVAILABLE
    } else if e.outcome_unknown() && e.is_timeout() {
        StatusCode::GATEWAY_TIMEOUT
    } else if e.outcome_unknown() {
        StatusCode::BAD_GATEWAY
    } else if e.is_terminal() && e.code() == "attachment_unauthorized" {
        StatusCode::UNAUTHORIZED
    } else {
        status_of_code(e.code())
    }
}

/// The HTTP status of each stable code (README, "What an error answers").
#[must_use]
pub fn status_of_code(code: &str) -> StatusCode {
    match code {
        "invalid_invitation" | "invalid_owner" | "invalid_attachment" | "invalid_arguments"
        | "invalid_revision" => StatusCode::BAD_REQUEST,
        "attachment_unauthorized" | "tool_refused" | "egress_refused" => StatusCode::FORBIDDEN,
        "attachment_missing" => StatusCode::NOT_FOUND,
        "surface_changed_under_you"
        | "store_conflict"
        | "attachment_not_attached"
        | "conflict_detection_unavailable" => StatusCode::CONFLICT,
        "surface_unavailable" => StatusCode::GONE,
        "tool_error" => StatusCode::UNPROCESSABLE_ENTITY,
        "relay_failed"
        | "protocol_error"
        | "surface_error"
        | "transport_failed"
        | "proxy_auth_required"
        | "delivery_unknown"
        | "call_unrecorded" => StatusCode::BAD_GATEWAY,
        "attachment_busy" | "manager_shut_down" => StatusCode::SERVICE_UNAVAILABLE,
        "timeout" | "call_timeout" => StatusCode::GATEWAY_TIMEOUT,
        // store_failed (the record may not have been kept after the page
        // acted), and any code a later version adds.
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body, retry_after) = match &self {
            ApiError::HumanPlus(e) => {
                let retry_after = match e.code() {
                    "manager_shut_down" => Some(1),
                    _ => e.retry_after().map(|d| d.as_millis().div_ceil(1000).max(1)),
                };
                let body = json!({
                    "code": e.code(),
                    "message": e.to_string(),
                    "retryable": e.is_retryable(),
                    "outcome_unknown": e.outcome_unknown(),
                    "retry_after_ms": e.retry_after().map(|d| d.as_millis()),
                });
                (status_of(e), body, retry_after)
            }
            ApiError::Stopped { acts: true } => {
                let message = "This replica stopped before the page answered: the call was sent and may have been applied. Read the page again before deciding.";
                let body = json!({"code": "replica_stopped", "message": message,
                    "retryable": false, "outcome_unknown": true});
                (StatusCode::GATEWAY_TIMEOUT, body, None)
            }
            ApiError::Stopped { acts: false } => {
                let message = "This replica stopped before the page answered; nothing was changed. Ask again.";
                let body = json!({"code": "replica_stopped", "message": message,
                    "retryable": true, "outcome_unknown": false});
                (StatusCode::SERVICE_UNAVAILABLE, body, Some(1))
            }
        };
        let code = body["code"].as_str().unwrap_or_default();
        tracing::info!(status = status.as_u16(), code, "answered with an error");
        let mut response = (status, Json(body)).into_response();
        // A refusal that told what changed carries the revision to decide
        // at (`If-Match` on the next call).
        if let ApiError::HumanPlus(Error::SurfaceChangedUnderYou(refusal)) = &self
            && let Some(tag) = crate::etag(refusal.revision_to_carry())
        {
            response.headers_mut().insert(header::ETAG, tag);
        }
        if let Some(secs) = retry_after.and_then(|s| HeaderValue::from_str(&s.to_string()).ok()) {
            response.headers_mut().insert(header::RETRY_AFTER, secs);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use human_plus_tokio::{Busy, DeliveryUnknown, Error};

    use super::{status_of, status_of_code};

    /// Every row of the README's table whose code alone decides the status
    /// is what [`status_of_code`] answers.
    #[test]
    fn the_readme_table_is_the_mapping() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
        let mut rows = 0;
        for line in readme.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let (code, status) = (cells[1], cells[2]);
            let Some(code) = code.strip_prefix('`').and_then(|c| c.strip_suffix('`')) else {
                continue; // decided by a predicate: below
            };
            let Some(Ok(status)) = status.get(..3).map(str::parse::<u16>) else {
                continue; // another table
            };
            if code == "replica_stopped" {
                continue; // the service's own, not the library's
            }
            assert_eq!(status_of_code(code).as_u16(), status, "{code}");
            rows += 1;
        }
        assert!(rows >= 20, "only {rows} rows read");
    }

    /// The rows decided by the error's predicates.
    #[test]
    fn busy_outcome_unknown_and_terminal() {
        let busy = Error::Busy(Busy::new(Duration::from_millis(1_500)));
        assert_eq!(status_of(&busy).as_u16(), 503);
        let late = Error::CallTimeout(DeliveryUnknown::call("sheet_set_cell"));
        assert_eq!(status_of(&late).as_u16(), 504);
        let lost = Error::DeliveryUnknown(DeliveryUnknown::call("sheet_set_cell"));
        assert_eq!(status_of(&lost).as_u16(), 502);
        assert_eq!(status_of(&Error::Timeout).as_u16(), 504);
        assert_eq!(status_of(&Error::SurfaceUnavailable).as_u16(), 410);
        assert_eq!(status_of(&Error::AttachmentMissing).as_u16(), 404);
        assert_eq!(status_of(&Error::ShutDown).as_u16(), 503);
    }
}
