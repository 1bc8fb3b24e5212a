//! Human+ runtime for blocking code: ureq drivers of the sans-IO core, for queue workers and scripts.
