//! A replica process for the lease tests (`tests/replicas.rs`): one
//! runtime's manager over its own Redis store, told what to do by a JSON
//! argument, reporting on standard output, one line each:
//!
//! * `hold`: prints `READY`, waits for a line on standard input, prints
//!   `CALLING` and calls `sheet_set_cell` with the given value (a value the
//!   test surface loses the answer to holds the call, and the attachment's
//!   lock, mid-flight), then prints `RESULT <code>`. On SIGTERM it shuts its
//!   manager down, prints `SHUTDOWN` and exits 0: what a service's handler
//!   does.
//! * `takeover`: prints `READY`, waits for a line, then writes its value
//!   as an agent would: a `sheet_set_cell`; refused because the surface
//!   changed, a `sheet_get_cell` to read it again and the write once more.
//!   Each answer is a line `ANSWER <microseconds since the go> <code>`
//!   (`ok` for a success), then `DONE`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::BufRead as _;
use std::sync::Arc;
use std::time::Instant;

use human_plus_conformance::replica::{Replica, ReplicaSetup};
use serde_json::{Value, json};

/// Set once a `hold` replica printed its call's `RESULT`.
static RESULT_PRINTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn main() {
    let spec: Value = serde_json::from_str(&std::env::args().nth(1).expect("a JSON spec")).unwrap();
    let setup = ReplicaSetup::from_json(&spec["setup"]);
    let id = spec["id"].as_str().unwrap().to_owned();
    let value = spec["value"].as_str().unwrap().to_owned();
    let replica = Arc::new(Replica::new(&setup));
    match spec["mode"].as_str().unwrap() {
        "hold" => {
            on_sigterm(Arc::clone(&replica));
            println!("READY");
            wait_for_go();
            println!("CALLING");
            let r = replica.call(
                &id,
                "sheet_set_cell",
                json!({"address": "D1", "value": value}),
            );
            println!("RESULT {}", outcome(&r));
            RESULT_PRINTED.store(true, std::sync::atomic::Ordering::SeqCst);
            // Exits on SIGTERM (after its handler's SHUTDOWN line) or when
            // the test ends it: a call ended by the shutdown's grace must
            // not end the process before the handler does.
            loop {
                std::thread::park();
            }
        }
        "takeover" => {
            println!("READY");
            wait_for_go();
            let go = Instant::now();
            let answer = |r: &Result<_, human_plus_core::Error>| {
                println!("ANSWER {} {}", go.elapsed().as_micros(), outcome(r));
            };
            let write = || {
                replica.call(
                    &id,
                    "sheet_set_cell",
                    json!({"address": "D1", "value": value}),
                )
            };
            let first = write();
            answer(&first);
            if matches!(
                first,
                Err(human_plus_core::Error::SurfaceChangedUnderYou(_))
            ) {
                // An agent told the surface changed reads it again, then
                // decides: here, to write its value once more.
                answer(&replica.call(&id, "sheet_get_cell", json!({"address": "D1"})));
                answer(&write());
            }
            println!("DONE");
        }
        other => panic!("unknown mode {other}"),
    }
}

fn outcome<T>(r: &Result<T, human_plus_core::Error>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) => e.code(),
    }
}

fn wait_for_go() {
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
}

/// SIGTERM: shut the manager down (its locks given back), then exit.
fn on_sigterm(replica: Arc<Replica>) {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
            term.recv().await;
        });
        replica.shutdown();
        // The call the shutdown ended has given its lock back; its thread
        // prints its RESULT a moment later: let it, before exiting.
        let asked = std::time::Instant::now();
        while !RESULT_PRINTED.load(std::sync::atomic::Ordering::SeqCst)
            && asked.elapsed() < std::time::Duration::from_secs(2)
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        println!("SHUTDOWN");
        std::process::exit(0);
    });
}
