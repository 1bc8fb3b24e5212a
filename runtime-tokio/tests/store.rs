//! The manager's use of the attachment store: the lock around every
//! networked operation (its wait bounded on tokio's clock), compare-and-set
//! writes, a failed write surfacing, and the operations that touch neither
//! lock nor network.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use human_plus_tokio::core::AttachmentState;
use human_plus_tokio::{
    AsyncAttachmentStore, ConflictDetection, EgressPolicy, Error, HumanPlus,
    InMemoryAttachmentStore, LockGuard, ManagerConfig, SurfaceAttachment, SurfaceInvitation,
};
use serde_json::json;

fn config() -> ManagerConfig {
    ManagerConfig::new(
        EgressPolicy::new(["relay.example"]).egress_proxy("http://127.0.0.1:9"),
        trust(),
    )
}

fn invitation() -> SurfaceInvitation {
    SurfaceInvitation::new(
        "https://relay.example",
        "stored",
        TOKEN,
        "sheet:one",
        "Demo",
    )
    .unwrap()
}

/// An in-memory store that counts what the manager does, and can refuse
/// every update.
#[derive(Clone, Default)]
struct Recording {
    inner: InMemoryAttachmentStore,
    locks: Arc<AtomicUsize>,
    updates: Arc<AtomicUsize>,
    refuse_updates: bool,
}

impl AsyncAttachmentStore for Recording {
    async fn get(&self, id: &str) -> Result<Option<SurfaceAttachment>, Error> {
        self.inner.get(id).await
    }

    async fn put(&self, record: &SurfaceAttachment, expected: Option<u64>) -> Result<(), Error> {
        if let Some(expected) = expected {
            self.updates.fetch_add(1, Ordering::SeqCst);
            if self.refuse_updates {
                return Err(Error::StoreConflict {
                    expected: Some(expected),
                    found: Some(expected + 1),
                });
            }
        }
        AsyncAttachmentStore::put(&self.inner, record, expected).await
    }

    async fn lock(&self, id: &str, lease: Duration) -> Result<LockGuard, Error> {
        self.locks.fetch_add(1, Ordering::SeqCst);
        AsyncAttachmentStore::lock(&self.inner, id, lease).await
    }

    async fn renew(&self, guard: &LockGuard, lease: Duration) -> Result<bool, Error> {
        AsyncAttachmentStore::renew(&self.inner, guard, lease).await
    }
}

/// The lock wait is bounded on tokio's clock: with the clock paused, a
/// lock held elsewhere gives up after the configured wait without real
/// time passing, as `attachment_busy`.
#[tokio::test(start_paused = true)]
async fn a_held_lock_gives_up_after_the_lock_wait() {
    let store = InMemoryAttachmentStore::new();
    let hp = HumanPlus::builder(config())
        .store(store.clone())
        .lock_wait(Duration::from_secs(30))
        .build()
        .unwrap();
    let id = hp
        .attach(OWNER, invitation(), participant())
        .await
        .unwrap()
        .id()
        .to_owned();
    let held = AsyncAttachmentStore::lock(&store, &id, Duration::from_secs(600))
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let err = hp.detach(OWNER, &id).await.unwrap_err();
    assert_eq!(err.code(), "attachment_busy", "{err:?}");
    assert!(err.is_retryable());
    // The holder renews on time as far as the store can tell: a retry
    // within one renewal interval of its lease.
    assert_eq!(err.retry_after(), Some(Duration::from_secs(200)));
    assert!(tokio::time::Instant::now() - started >= Duration::from_secs(30));
    assert!(!err.to_string().contains(TOKEN));
    // Still attached: nothing ran.
    assert!(hp.status(OWNER, &id).await.unwrap().is_attached());
    drop(held);
    let detached = hp.detach(OWNER, &id).await.unwrap();
    assert_eq!(detached.state(), AttachmentState::Detached);
}

#[tokio::test(flavor = "multi_thread")]
async fn operations_lock_and_write_with_compare_and_set() {
    let store = Recording::default();
    let hp = HumanPlus::builder(config())
        .store(store.clone())
        .build()
        .unwrap();
    let record = hp.attach(OWNER, invitation(), participant()).await.unwrap();
    let id = record.id().to_owned();
    assert_eq!(
        store.locks.load(Ordering::SeqCst),
        0,
        "attach takes no lock"
    );
    assert_eq!(store.updates.load(Ordering::SeqCst), 0, "attach inserts");

    // status and conflict_detection: no lock.
    hp.status(OWNER, &id).await.unwrap();
    assert_eq!(
        hp.conflict_detection(OWNER, &id).await.unwrap(),
        ConflictDetection::NotObserved
    );
    assert_eq!(store.locks.load(Ordering::SeqCst), 0);

    // detach: under the lock, written back on the loaded generation.
    let detached = hp.detach(OWNER, &id).await.unwrap();
    assert_eq!(store.locks.load(Ordering::SeqCst), 1);
    assert_eq!(store.updates.load(Ordering::SeqCst), 1);
    assert!(detached.generation() > record.generation());
    assert_eq!(hp.status(OWNER, &id).await.unwrap(), detached);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_write_is_the_operation_error() {
    let store = Recording {
        refuse_updates: true,
        ..Recording::default()
    };
    let hp = HumanPlus::builder(config()).store(store).build().unwrap();
    let id = hp
        .attach(OWNER, invitation(), participant())
        .await
        .unwrap()
        .id()
        .to_owned();
    let err = hp.detach(OWNER, &id).await.unwrap_err();
    assert!(matches!(err, Error::StoreConflict { .. }), "{err:?}");
    assert!(hp.status(OWNER, &id).await.unwrap().is_attached());
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_and_foreign_attachments() {
    let hp = HumanPlus::new(config());
    for result in [
        hp.tools(OWNER, "surface_missing").await.map(|_| ()),
        hp.call(OWNER, "surface_missing", "sheet_get_cell", json!({}))
            .await
            .map(|_| ()),
        hp.changes_since(OWNER, "surface_missing").await.map(|_| ()),
        hp.announce(
            OWNER,
            "surface_missing",
            &human_plus_tokio::Activity::new("x"),
        )
        .await,
        hp.detach(OWNER, "surface_missing").await.map(|_| ()),
        hp.status(OWNER, "surface_missing").await.map(|_| ()),
        hp.conflict_detection(OWNER, "surface_missing")
            .await
            .map(|_| ()),
    ] {
        assert_eq!(result.unwrap_err(), Error::AttachmentMissing);
    }
    let id = hp
        .attach(OWNER, invitation(), participant())
        .await
        .unwrap()
        .id()
        .to_owned();
    for result in [
        hp.detach("conversation:other", &id).await.map(|_| ()),
        hp.status("conversation:other", &id).await.map(|_| ()),
        hp.call("conversation:other", &id, "sheet_get_cell", json!({}))
            .await
            .map(|_| ()),
    ] {
        assert_eq!(result.unwrap_err().code(), "attachment_unauthorized");
    }
    assert_eq!(hp.status("  ", &id).await.unwrap_err(), Error::InvalidOwner);
    // Arguments that are not an object are refused before any request.
    assert_eq!(
        hp.call(OWNER, &id, "sheet_get_cell", json!([1]))
            .await
            .unwrap_err(),
        Error::InvalidArguments
    );
}

#[test]
fn the_manager_is_send_sync_and_cheap_to_clone() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<HumanPlus>();
    assert_send_sync::<HumanPlus<InMemoryAttachmentStore>>();
}
