#![allow(dead_code)]

use std::io;
use std::sync::{Arc, Mutex};

use crewlet_telemetry::TelemetryOptions;
use tracing_subscriber::fmt::MakeWriter;

/// A log sink the tests read back.
#[derive(Clone, Default)]
pub struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Buffer {
    pub fn text(&self) -> String {
        let bytes = self.0.lock().map(|v| v.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub fn lines(&self) -> Vec<String> {
        self.text().lines().map(str::to_owned).collect()
    }

    /// Every line parsed as JSON (a line that is not JSON fails the test).
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        self.lines()
            .iter()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"))
            })
            .collect()
    }

    /// The JSON line whose `message` is `message`.
    pub fn line_with_message(&self, message: &str) -> serde_json::Value {
        self.json_lines()
            .into_iter()
            .find(|l| l["message"] == message)
            .unwrap_or_else(|| panic!("no line with message {message:?} in:\n{}", self.text()))
    }
}

pub struct BufferWriter(Arc<Mutex<Vec<u8>>>);

impl io::Write for BufferWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if let Ok(mut v) = self.0.lock() {
            v.extend_from_slice(data);
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Buffer {
    type Writer = BufferWriter;

    fn make_writer(&'a self) -> Self::Writer {
        BufferWriter(self.0.clone())
    }
}

/// Options that ignore the test process's environment and log into `buf`.
pub fn options(buf: &Buffer) -> TelemetryOptions {
    TelemetryOptions::new("crewlet-test")
        .ignore_env()
        .with_writer(buf.clone())
}
