//! Tool definitions as the surface lists them, and their digests.
