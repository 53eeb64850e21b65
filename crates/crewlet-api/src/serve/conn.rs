//! One connection's plumbing: the socket that notes when a request head
//! starts, and the router as a hyper service counting requests in flight.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::server::{Conn, Server};

/// The socket, noting when the first byte of a request head arrives.
pub(super) struct WatchedIo {
    pub(super) inner: TcpStream,
    pub(super) conn: Arc<Conn>,
    pub(super) server: Arc<Server>,
}

impl AsyncRead for WatchedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(())))
            && buf.filled().len() > before
            && this.conn.is_idle()
            && this.conn.head_started.load(Ordering::Acquire) == 0
        {
            this.conn
                .head_started
                .store(this.server.now(), Ordering::Release);
            this.conn.wake.notify_one();
        }
        polled
    }
}

impl AsyncWrite for WatchedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The router as one connection's hyper service, counting requests in flight.
pub(super) struct ConnService {
    pub(super) router: Router,
    pub(super) conn: Arc<Conn>,
    pub(super) server: Arc<Server>,
}

/// Ends a request's flight when its handler answered (or was dropped).
struct InFlight {
    conn: Arc<Conn>,
    server: Arc<Server>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.conn
            .idle_since
            .store(self.server.now(), Ordering::Release);
        self.conn.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        self.conn.in_flight.fetch_add(1, Ordering::AcqRel);
        self.conn.head_started.store(0, Ordering::Release);
        let flight = InFlight {
            conn: self.conn.clone(),
            server: self.server.clone(),
        };
        let mut router = self.router.clone();
        Box::pin(async move {
            let response = tower_service::Service::call(&mut router, request.map(Body::new)).await;
            drop(flight);
            response
        })
    }
}
