//! Human+ runtime for tokio: hyper 1 + rustls drivers of the sans-IO core, for async services.
