//! MCP over stdio: one JSON-RPC message per line each way.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::Server;
use crate::rpc::response;

pub(crate) async fn run_stdio(server: Arc<Server>) -> i32 {
    eprintln!(
        "fake-mcp: serving stdio as {}",
        server.config.identity.as_deref().unwrap_or("(anonymous)")
    );
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = rx.recv().await {
            if stdout.write_all(line.as_bytes()).await.is_err()
                || stdout.write_all(b"\n").await.is_err()
                || stdout.flush().await.is_err()
            {
                break;
            }
        }
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            eprintln!("fake-mcp: ignoring a line that is not JSON");
            continue;
        };
        let (Some(method), Some(id)) = (
            msg.get("method")
                .and_then(Value::as_str)
                .map(str::to_string),
            msg.get("id").cloned(),
        ) else {
            continue; // notifications and responses need no answer
        };
        let params = msg.get("params").cloned().unwrap_or(json!({}));
        let server = server.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let identity = server.config.identity.clone();
            let answer = server.handle(&method, &params, identity).await;
            for note in answer.before {
                let _ = tx.send(note.to_string());
            }
            let _ = tx.send(response(id, answer.outcome).to_string());
        });
    }
    eprintln!("fake-mcp: stdin closed, exiting");
    drop(tx);
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
    0
}
