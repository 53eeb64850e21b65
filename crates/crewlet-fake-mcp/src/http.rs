//! MCP over streamable HTTP: a minimal HTTP/1.1 server on `/mcp` with
//! sessions (`Mcp-Session-Id`) and optional `text/event-stream` answers.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::Server;
use crate::rpc::response;

pub(crate) async fn run_http(server: Arc<Server>, addr: &str) -> i32 {
    let listener = match TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("fake-mcp: cannot listen on {addr}: {e}");
            return 2;
        }
    };
    let bound = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fake-mcp: no local address: {e}");
            return 2;
        }
    };
    println!("http://{bound}/mcp");
    let _ = std::io::stdout().flush();
    eprintln!("fake-mcp: serving http on {bound}");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let server = server.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_connection(server, stream).await {
                eprintln!("fake-mcp: connection error: {e}");
            }
        });
    }
}

struct HttpRequest {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl HttpRequest {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

async fn read_request(stream: &mut BufReader<TcpStream>) -> std::io::Result<Option<HttpRequest>> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        if line == "\r\n" || line == "\n" {
            break;
        }
        head.push_str(&line);
        if head.len() > 64 * 1024 {
            return Err(std::io::Error::other("request head too large"));
        }
    }
    let mut lines = head.lines();
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await?;
    Ok(Some(HttpRequest {
        method,
        path,
        headers,
        body,
    }))
}

async fn write_response(
    stream: &mut BufReader<TcpStream>,
    status: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let stream = stream.get_mut();
    stream.write_all(out.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.flush().await
}

async fn serve_connection(server: Arc<Server>, stream: TcpStream) -> std::io::Result<()> {
    let mut stream = BufReader::new(stream);
    let Some(req) = read_request(&mut stream).await? else {
        return Ok(());
    };
    if req.path != "/mcp" {
        return write_response(&mut stream, "404 Not Found", &[], b"").await;
    }
    let session = req.header("mcp-session-id").map(str::to_string);
    let known = |s: &Option<String>| {
        s.as_ref()
            .is_some_and(|s| server.sessions.lock().contains(s))
    };
    match req.method.as_str() {
        "DELETE" => {
            if let Some(s) = &session {
                server.sessions.lock().remove(s);
            }
            return write_response(&mut stream, "200 OK", &[], b"").await;
        }
        "POST" => {}
        _ => return write_response(&mut stream, "405 Method Not Allowed", &[], b"").await,
    }
    let Ok(msg) = serde_json::from_slice::<Value>(&req.body) else {
        return write_response(&mut stream, "400 Bad Request", &[], b"not json").await;
    };
    let method = msg
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_string);
    let id = msg.get("id").cloned();
    let is_initialize = method.as_deref() == Some("initialize");
    if !is_initialize {
        if session.is_none() {
            return write_response(
                &mut stream,
                "400 Bad Request",
                &[],
                b"missing mcp-session-id",
            )
            .await;
        }
        if !known(&session) {
            return write_response(&mut stream, "404 Not Found", &[], b"unknown session").await;
        }
    }
    let (Some(method), Some(id)) = (method, id) else {
        // A notification or a response: accepted, nothing to say.
        return write_response(&mut stream, "202 Accepted", &[], b"").await;
    };
    let identity = req
        .header("x-fake-mcp-identity")
        .map(str::to_string)
        .or_else(|| server.config.identity.clone());
    let params = msg.get("params").cloned().unwrap_or(json!({}));
    let answer = server.handle(&method, &params, identity).await;
    let mut headers = Vec::new();
    if is_initialize {
        let n = server.counter.fetch_add(1, Ordering::SeqCst);
        let new_session = format!("session-{}-{n}", std::process::id());
        server.sessions.lock().insert(new_session.clone());
        headers.push(("Mcp-Session-Id", new_session));
    }
    let reply = response(id, answer.outcome);
    if server.config.sse {
        headers.push(("Content-Type", "text/event-stream".to_string()));
        let mut body = String::from(": fake-mcp stream\n\n");
        let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "data": format!("handling {method}")}});
        for note in answer.before.iter().chain(std::iter::once(&log)) {
            body.push_str(&format!("event: message\ndata: {note}\n\n"));
        }
        body.push_str(&format!("event: message\nid: 1\ndata: {reply}\n\n"));
        write_response(&mut stream, "200 OK", &headers, body.as_bytes()).await
    } else {
        headers.push(("Content-Type", "application/json".to_string()));
        write_response(
            &mut stream,
            "200 OK",
            &headers,
            reply.to_string().as_bytes(),
        )
        .await
    }
}
