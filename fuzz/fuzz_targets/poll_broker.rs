//! The long-poll body parser, Broker dialect, whole and through
//! `PollBodyBuffer` in fuzzer-chosen chunks. Properties: see
//! `human_plus_fuzz::poll_check` (same result whatever the split and the
//! budget above the body's length; never over budget; frames are objects
//! or arrays; frames + skipped = items).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    human_plus_fuzz::poll_check(data, human_plus_fuzz::Dialect::Broker);
});
