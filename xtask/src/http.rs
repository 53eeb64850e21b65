//! A minimal HTTP/1.1 GET client over `std::net`, enough to probe the Pulsar
//! admin API on loopback without pulling an HTTP stack into xtask.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Status and body of an HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

impl Response {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// `GET http://{host_port}{path}` with `timeout` for connecting and for each
/// read or write.
pub fn get(host_port: &str, path: &str, timeout: Duration) -> Result<Response> {
    let addrs: Vec<SocketAddr> = host_port
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host_port}"))?
        .collect();
    let addr = addrs
        .first()
        .with_context(|| format!("{host_port} resolves to no address"))?;
    let mut stream = TcpStream::connect_timeout(addr, timeout)
        .with_context(|| format!("cannot connect to {host_port}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host_port}\r\nAccept: application/json\r\n\
         User-Agent: crewlet-xtask\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .with_context(|| format!("cannot send GET {path} to {host_port}"))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .with_context(|| format!("cannot read the answer to GET {path} from {host_port}"))?;
    parse_response(&raw).with_context(|| format!("bad answer to GET {path} from {host_port}"))
}

/// Parses a complete HTTP/1.x response (identity or chunked body).
pub fn parse_response(raw: &[u8]) -> Result<Response> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of headers")?;
    let head = std::str::from_utf8(&raw[..split]).context("headers are not UTF-8")?;
    let body = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().context("empty response")?;
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("bad status line {status_line:?}"))?;
    let chunked = lines.any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("transfer-encoding")
                && value.to_ascii_lowercase().contains("chunked")
        })
    });
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_vec()
    };
    Ok(Response {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("truncated chunk size")?;
        let size_field = std::str::from_utf8(&data[..eol]).context("chunk size is not UTF-8")?;
        let size_hex = size_field.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16)
            .with_context(|| format!("bad chunk size {size_hex:?}"))?;
        data = &data[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size {
            bail!("truncated chunk");
        }
        out.extend_from_slice(&data[..size]);
        data = data.get(size + 2..).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_identity_body() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\n[\"standalone\"]")
            .expect("valid response");
        assert_eq!(r.status, 200);
        assert_eq!(r.body, "[\"standalone\"]");
        assert!(r.is_success());
    }

    #[test]
    fn parses_chunked_body() {
        let raw = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n\
                    4\r\nWiki\r\n5;x=y\r\npedia\r\n0\r\n\r\n";
        let r = parse_response(raw).expect("valid response");
        assert_eq!(r.status, 404);
        assert_eq!(r.body, "Wikipedia");
        assert!(!r.is_success());
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_response(b"not http").is_err());
        assert!(parse_response(b"HTTP/1.1 abc\r\n\r\n").is_err());
    }
}
