//! The coding agent inside a box: its command line, the brief it gets, the
//! `crewlet-ask` shim, and what is read back when it stops.

use crewlet_config::later::CodingAgent;
use serde_json::{Value, json};

/// Where the brief, findings and question live in the box.
pub(crate) const BRIEF: &str = "/home/user/.crewlet/brief.md";
pub(crate) const FINDINGS: &str = "/home/user/.crewlet/findings.md";
pub(crate) const ASK_DIR: &str = "/home/user/.crewlet/ask";
pub(crate) const ASK_SHIM: &str = "/home/user/.local/bin/crewlet-ask";
/// The box's PATH: the shim's directory first.
pub(crate) const PATH: &str =
    "/home/user/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `crewlet-ask "question" [--to audience]`: records the question for the
/// engine and posts nothing itself; the engine asks, on the seat's own
/// surface, once the agent has stopped.
pub(crate) const ASK_SCRIPT: &str = r#"#!/bin/sh
# crewlet-ask "question" [--to requester|team|manager|<handle>]
q=""; to=requester
while [ "$#" -gt 0 ]; do
  case "$1" in
    --to) to="$2"; shift 2 ;;
    --to=*) to="${1#--to=}"; shift ;;
    *) q="${q:+$q }$1"; shift ;;
  esac
done
if [ -z "$q" ]; then
  echo 'usage: crewlet-ask "question" [--to requester|team|manager|<handle>]' >&2
  exit 2
fi
mkdir -p "$HOME/.crewlet/ask"
printf '%s' "$to" > "$HOME/.crewlet/ask/to"
printf '%s' "$q" > "$HOME/.crewlet/ask/question"
echo "Question recorded. Push your work in progress and stop now: the answer comes with your next brief."
"#;

/// The command line that runs `agent` on `brief`.
pub(crate) fn command_line(
    agent: CodingAgent,
    custom: &[String],
    brief: &str,
) -> Result<Vec<String>, String> {
    let mut argv: Vec<String> = match agent {
        CodingAgent::ClaudeCode => ["claude", "-p"].map(String::from).to_vec(),
        CodingAgent::Opencode => ["opencode", "run"].map(String::from).to_vec(),
        CodingAgent::Command if custom.is_empty() => {
            return Err("the `command` coding agent needs `providers.sandbox.command`".into());
        }
        CodingAgent::Command => custom.to_vec(),
    };
    argv.push(brief.to_owned());
    match agent {
        CodingAgent::ClaudeCode => argv.extend(
            [
                "--output-format",
                "json",
                "--permission-mode",
                "bypassPermissions",
            ]
            .map(String::from),
        ),
        CodingAgent::Opencode => argv.extend(["--format", "json"].map(String::from)),
        CodingAgent::Command => {}
    }
    Ok(argv)
}

pub(crate) fn agent_name(agent: CodingAgent) -> &'static str {
    match agent {
        CodingAgent::ClaudeCode => "claude-code",
        CodingAgent::Opencode => "opencode",
        CodingAgent::Command => "command",
    }
}

/// What the coding agent is told, around the executor's own brief.
pub(crate) fn brief(task: &str, environment: &[String], handle: &str) -> String {
    let mut out = String::new();
    out.push_str("# Your task\n\n");
    out.push_str(task.trim());
    out.push_str("\n\n# How to work\n\n");
    out.push_str(&format!(
        "You work for the agent `{handle}` in an isolated box; your working directory is \
         /home/user/workspace. You are not the last step: when you are done, write a short \
         report of what you did (what changed, branch names, what is left) to {FINDINGS}, \
         then stop. If only a person can answer something, do not guess: commit and push \
         your work in progress, run `crewlet-ask \"<question>\" --to <requester|team|manager|handle>`, \
         and stop; the answer comes with your next brief.\n"
    ));
    if !environment.is_empty() {
        out.push_str("\n# Your environment\n\n");
        for line in environment {
            out.push_str("- ");
            out.push_str(line.trim());
            out.push('\n');
        }
    }
    out
}

/// The run's result as the row keeps it and the executor reads it.
pub(crate) fn result(
    exit_code: Option<i32>,
    findings: Option<String>,
    stdout: &str,
    stderr: &str,
    question: Option<(String, String)>,
) -> Value {
    let redact = crewlet_turn::sanitize::redact_secrets;
    // A Claude Code envelope on stdout carries the final text and usage.
    let envelope: Option<Value> = serde_json::from_str(stdout.trim()).ok();
    let final_text = envelope
        .as_ref()
        .and_then(|e| e.get("result"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let usage = envelope.as_ref().and_then(|e| e.get("usage")).cloned();
    let report = findings
        .filter(|f| !f.trim().is_empty())
        .or(final_text)
        .unwrap_or_default();
    json!({
        "exit_code": exit_code,
        "findings": redact(&tail(&report, 16 * 1024)),
        "transcript": redact(&tail(&format!("{stdout}{}{stderr}", if stderr.is_empty() { "" } else { "\n--- stderr\n" }), 8 * 1024)),
        "usage": usage,
        "question": question.map(|(q, to)| json!({"text": redact(&q), "audience": to})),
    })
}

fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &text[start..])
}

/// The `run_sandbox` call's answer, from the run's result.
pub(crate) fn reply(result: &Value, audience_hint: &str) -> String {
    let findings = result["findings"].as_str().unwrap_or("");
    let code = result["exit_code"].as_i64();
    if let Some(q) = result.get("question").filter(|q| !q.is_null()) {
        let text = q["text"].as_str().unwrap_or("");
        let to = q["audience"].as_str().unwrap_or("requester");
        return format!(
            "The coding agent stopped to ask a question before it goes on (its work in progress is \
             pushed and its box is kept).\nQuestion for {to}: {text}\n{audience_hint}\nAsk it now \
             (a colleague seat with `a2a_ask`; a person in the conversation this task came from), \
             then call `run_sandbox` again with a brief that gives the answer: the same box and \
             checkout are used.\nWhat it reported so far:\n{findings}"
        );
    }
    let status = match code {
        Some(0) => "finished".to_owned(),
        Some(c) => format!("ended with exit code {c}"),
        None => "was lost (its box or process is gone)".to_owned(),
    };
    format!(
        "The coding agent {status}. The code work happened in the sandbox: do not redo it; \
         report and act on it now with your own tools.\nIts report:\n{findings}\nThe end of its \
         transcript:\n{}",
        result["transcript"].as_str().unwrap_or("")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_put_the_brief_where_each_agent_reads_it() {
        let claude = command_line(CodingAgent::ClaudeCode, &[], "do it").unwrap_or_default();
        assert_eq!(claude[..3], ["claude", "-p", "do it"]);
        assert!(claude.contains(&"bypassPermissions".to_owned()));
        let oc = command_line(CodingAgent::Opencode, &[], "b").unwrap_or_default();
        assert_eq!(oc, ["opencode", "run", "b", "--format", "json"]);
        let custom = command_line(
            CodingAgent::Command,
            &["/opt/agent".into(), "-v".into()],
            "b",
        );
        assert_eq!(
            custom.ok(),
            Some(vec!["/opt/agent".into(), "-v".into(), "b".into()])
        );
        assert!(command_line(CodingAgent::Command, &[], "b").is_err());
    }

    #[test]
    fn findings_win_over_the_envelope_and_a_question_is_passed_on() {
        let r = result(
            Some(0),
            Some("did X".into()),
            r#"{"result":"final","usage":{"input_tokens":5}}"#,
            "",
            None,
        );
        assert_eq!(r["findings"], "did X");
        assert_eq!(r["usage"]["input_tokens"], 5);
        let r = result(Some(0), None, r#"{"result":"final"}"#, "", None);
        assert_eq!(r["findings"], "final");
        let r = result(
            Some(0),
            None,
            "",
            "",
            Some(("Which db?".into(), "manager".into())),
        );
        let text = reply(&r, "");
        assert!(text.contains("Question for manager: Which db?"), "{text}");
        let lost = reply(&result(None, None, "", "boom", None), "");
        assert!(lost.contains("was lost"), "{lost}");
    }
}
