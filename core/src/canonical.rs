//! Canonical JSON (RFC 8785, JCS) for tool digests.
