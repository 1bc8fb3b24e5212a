//! Benchmarks of Human+ against the floor and the Python port.
