//! A TCP proxy in front of a real service that can take it away: the
//! processes under test connect through [`OutageProxy`], and the test cuts
//! every open connection and refuses new ones for as long as an outage
//! should last, as a restarting or unreachable server would look to them.
//! The service itself keeps running, so other tests sharing it go on.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// See the module docs. Dropping it stops the proxy.
pub struct OutageProxy {
    addr: SocketAddr,
    up: Arc<AtomicBool>,
    /// Bumped by every cut; connection tasks end when it changes.
    cuts: watch::Sender<u64>,
    refused: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl OutageProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `target`.
    pub async fn start(target: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let up = Arc::new(AtomicBool::new(true));
        let refused = Arc::new(AtomicU64::new(0));
        let (cuts, _) = watch::channel(0u64);
        let task = tokio::spawn(accept_loop(
            listener,
            target,
            up.clone(),
            cuts.clone(),
            refused.clone(),
        ));
        Ok(Self {
            addr,
            up,
            cuts,
            refused,
            task,
        })
    }

    /// The address to connect to instead of the service.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The outage begins: every open connection is closed, new ones are
    /// accepted and closed at once.
    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    /// The service is back.
    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }

    /// Connections refused while the service was away.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }
}

impl Drop for OutageProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cuts.send_modify(|n| *n += 1);
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    up: Arc<AtomicBool>,
    cuts: watch::Sender<u64>,
    refused: Arc<AtomicU64>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of descriptors or the like: do not spin.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            continue;
        };
        if !up.load(Ordering::SeqCst) {
            refused.fetch_add(1, Ordering::SeqCst);
            drop(client);
            continue;
        }
        let mut cut = cuts.subscribe();
        tokio::spawn(async move {
            let Ok(mut server) = TcpStream::connect(target).await else {
                return;
            };
            let mut client = client;
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                _ = cut.changed() => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn forwards_until_cut_and_again_after_restore() {
        let echo = TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let target = echo.local_addr().unwrap_or_else(|e| panic!("{e}"));
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let proxy = OutageProxy::start(target)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let roundtrip = |mut s: TcpStream| async move {
            s.write_all(b"ping").await.ok()?;
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf).await.ok()?;
            Some((buf, s))
        };
        let s = TcpStream::connect(proxy.addr())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let (buf, mut open) = roundtrip(s).await.unwrap_or_else(|| panic!("no echo"));
        assert_eq!(&buf, b"ping");

        proxy.cut();
        let mut buf = [0u8; 4];
        // The open connection is closed by the cut (bounded, so a proxy that
        // failed to cut fails the test instead of hanging it).
        let read = tokio::time::timeout(std::time::Duration::from_secs(60), open.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("the cut did not close the open connection"));
        assert!(matches!(read, Ok(0) | Err(_)));
        // New ones are closed at once.
        let s = TcpStream::connect(proxy.addr())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(roundtrip(s).await.is_none());
        assert!(proxy.refused() >= 1);

        proxy.restore();
        let s = TcpStream::connect(proxy.addr())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(roundtrip(s).await.is_some());
    }
}
