//! The response body type of the relay: a whole buffer or an SSE stream.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

/// A response body: fixed bytes, or chunks fed by a stream writer task.
#[derive(Debug)]
pub(crate) enum RelayBody {
    Full(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
}

impl RelayBody {
    pub(crate) fn full(bytes: impl Into<Bytes>) -> RelayBody {
        let bytes = bytes.into();
        if bytes.is_empty() {
            RelayBody::Full(None)
        } else {
            RelayBody::Full(Some(bytes))
        }
    }

    pub(crate) fn empty() -> RelayBody {
        RelayBody::Full(None)
    }
}

impl Body for RelayBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            RelayBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            RelayBody::Stream(rx) => rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, RelayBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RelayBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            RelayBody::Full(None) => SizeHint::with_exact(0),
            RelayBody::Stream(_) => SizeHint::default(),
        }
    }
}
