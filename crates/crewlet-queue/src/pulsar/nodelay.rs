//! `TCP_NODELAY` on the client's broker connections.
//!
//! The `pulsar` crate opens its sockets itself and leaves Nagle's algorithm
//! on, and it writes each command (an ack, a flow permit grant) as its own
//! small segment. With Nagle on, a small write waits for the broker's TCP
//! acknowledgement of the one before, and the broker delays that
//! acknowledgement (delayed ACK, about 40 ms on Linux) when it has nothing
//! to send back: exactly the case of a consumer that used up its permits.
//! Measured on loopback (`cargo xtask bench queue`, one group, prefetch 64):
//! 1,615 events/s with the stall, 14,822/s with delayed ACKs turned off.
//!
//! The crate offers no hook for socket options, and we do not patch it, so
//! the engine sets the option on its own process's sockets: it lists
//! `/proc/self/fd`, and sets `TCP_NODELAY` on each TCP socket whose peer
//! port is the broker's, at connect and then every [`EVERY`] (a
//! reconnected socket gets it within that time). Linux only; elsewhere
//! this does nothing.
//!
//! A descriptor can be closed (and its number reused) by another thread
//! between the listing and the call. The peer is checked on the same
//! descriptor right before the option is set, so the worst case is
//! `TCP_NODELAY` on some other TCP socket of this process whose peer has
//! the broker's port, which is harmless.

use std::sync::Weak;
use std::time::Duration;

/// How often the sockets are looked at again.
pub(crate) const EVERY: Duration = Duration::from_secs(2);

/// The broker port of a `pulsar://` / `pulsar+ssl://` URL.
pub(crate) fn broker_port(url: &str) -> u16 {
    let (rest, default) = match url.strip_prefix("pulsar+ssl://") {
        Some(rest) => (rest, 6651),
        None => (url.strip_prefix("pulsar://").unwrap_or(url), 6650),
    };
    let authority = rest.split(['/', ',']).next().unwrap_or(rest);
    authority
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or(default)
}

/// Sets `TCP_NODELAY` on this process's TCP sockets whose peer port is
/// `port` and that do not have it yet; how many it changed.
#[cfg(target_os = "linux")]
pub(crate) fn set_on_broker_sockets(port: u16) -> usize {
    use std::os::fd::{BorrowedFd, RawFd};

    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    let mut changed = 0;
    for entry in dir.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<RawFd>().ok())
        else {
            continue;
        };
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        if !is_socket {
            continue;
        }
        // SAFETY: `fd` was listed as open by this process a moment ago; it is
        // only borrowed for the duration of three socket calls and never
        // closed here. If another thread closed it meanwhile, the calls fail
        // (EBADF / ENOTSOCK) or act on whatever socket now has the number,
        // after the peer check below (see the module docs).
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = socket2::SockRef::from(&borrowed);
        let peer = socket.peer_addr().ok().and_then(|a| a.as_socket());
        if peer.is_none_or(|p| p.port() != port) {
            continue;
        }
        if socket.tcp_nodelay().is_ok_and(|on| !on) && socket.set_tcp_nodelay(true).is_ok() {
            changed += 1;
        }
    }
    changed
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn set_on_broker_sockets(_port: u16) -> usize {
    0
}

/// Keeps setting the option while `alive` can be upgraded (the queue
/// exists).
pub(crate) fn spawn<T: Send + Sync + 'static>(alive: Weak<T>, port: u16) {
    tokio::spawn(async move {
        loop {
            let changed = tokio::task::spawn_blocking(move || set_on_broker_sockets(port))
                .await
                .unwrap_or(0);
            if changed > 0 {
                tracing::debug!(changed, port, "TCP_NODELAY set on pulsar connections");
            }
            tokio::time::sleep(EVERY).await;
            if alive.strong_count() == 0 {
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_ports() {
        assert_eq!(broker_port("pulsar://127.0.0.1:6650"), 6650);
        assert_eq!(broker_port("pulsar://broker"), 6650);
        assert_eq!(broker_port("pulsar+ssl://b.example.com:6655/"), 6655);
        assert_eq!(broker_port("pulsar+ssl://b.example.com"), 6651);
        assert_eq!(broker_port("pulsar://a:7000,b:7000"), 7000);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn only_sockets_to_the_broker_port_get_nodelay() {
        use std::net::{TcpListener, TcpStream};
        let broker = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let other = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let port = broker.local_addr().map(|a| a.port()).unwrap_or_default();
        let to_broker = TcpStream::connect(broker.local_addr().unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
        let to_other = TcpStream::connect(other.local_addr().unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(to_broker.nodelay().ok(), Some(false));
        assert!(set_on_broker_sockets(port) >= 1);
        assert_eq!(to_broker.nodelay().ok(), Some(true));
        assert_eq!(
            to_other.nodelay().ok(),
            Some(false),
            "another peer was touched"
        );
        // Done once: nothing left to change.
        assert_eq!(set_on_broker_sockets(port), 0);
    }
}
