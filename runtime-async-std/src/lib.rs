//! Human+ runtime for async-std and smol users, on the async-io / async-net / futures-rustls stack.
