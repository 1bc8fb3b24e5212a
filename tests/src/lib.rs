//! One conformance suite for every Human+ runtime and transport.
