//! The cancel switch of one request.

use std::io;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

/// The cancel switch of one request, shared by the driver and the thread
/// performing it.
#[derive(Debug, Default)]
pub(crate) struct RequestCtl {
    cancelled: AtomicBool,
    /// A clone of the connection's socket, to shut it down from the driver.
    socket: Mutex<Option<TcpStream>>,
}

impl RequestCtl {
    /// Stops the request: sets the flag and shuts the socket down, which
    /// makes a read or write blocked on it return at once.
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        if let Some(socket) = self
            .socket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// The request read its answer to the end: its connection goes back to
    /// the kept ones, where a later cancel must not reach it (it may serve
    /// another request by then), so the handle on its socket is let go.
    pub(crate) fn finish(&self) {
        self.socket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    /// Keeps a handle on `socket` so [`RequestCtl::cancel`] can shut it
    /// down; fails (and shuts it down) if the request is already cancelled.
    pub(crate) fn attach(&self, socket: &TcpStream) -> io::Result<()> {
        let clone = socket.try_clone()?;
        let mut slot = self.socket.lock().unwrap_or_else(PoisonError::into_inner);
        *slot = Some(clone);
        if self.is_cancelled() {
            let _ = socket.shutdown(Shutdown::Both);
            return Err(cancelled());
        }
        Ok(())
    }
}

pub(crate) fn cancelled() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "request cancelled")
}
