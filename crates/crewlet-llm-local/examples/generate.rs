//! Generates one answer with a local GGUF model and prints figures.
//! `cargo run --release -p crewlet-llm-local --example generate -- MODEL.gguf "question" [tool]`

use std::ops::ControlFlow;
use std::time::Instant;

use crewlet_llm::{CompletionRequest, Message, SystemBlock, ToolChoice, ToolSpec};
use crewlet_llm_local::grammar::AnswerShape;
use crewlet_llm_local::{GenerateOptions, LocalModel, prompt};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or_else(|| anyhow::anyhow!("MODEL.gguf"))?;
    let question = args
        .next()
        .unwrap_or_else(|| "What is the capital of France?".into());
    let with_tool = args.next().is_some();
    let t = Instant::now();
    let model = LocalModel::load(std::path::Path::new(&path), None, 2)?;
    eprintln!("loaded in {:?}", t.elapsed());
    let tools = if with_tool {
        vec![ToolSpec {
            name: "web_search".into(),
            description: "Search the web".into(),
            parameters: serde_json::json!({"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}),
        }]
    } else {
        vec![]
    };
    let request = CompletionRequest {
        system: vec![SystemBlock::stable("You are a helpful assistant.")],
        messages: vec![Message::user(question)],
        tools: tools.clone(),
        tool_choice: ToolChoice::Auto,
        ..Default::default()
    };
    for round in 0..2 {
        let shape = AnswerShape::of(&tools, &request.tool_choice);
        let chat = prompt::chat(&request, &shape);
        let tokens = model.prompt_tokens(&chat)?;
        let matcher = shape.grammar().map(|g| model.matcher(g)).transpose()?;
        let g = model.generate(
            &tokens,
            matcher,
            &GenerateOptions {
                max_tokens: 200,
                temperature: 0.0,
            },
            |piece| {
                eprint!("{piece}");
                ControlFlow::Continue(())
            },
        )?;
        eprintln!();
        eprintln!(
            "round {round}: prompt {} tokens ({} cached) in {:?} = {:.0} tok/s; {} generated in {:?} = {:.1} tok/s; constrain {:?}; stop {:?}",
            g.prompt_tokens,
            g.cached_tokens,
            g.prompt_time,
            (g.prompt_tokens - g.cached_tokens) as f64 / g.prompt_time.as_secs_f64(),
            g.output_tokens,
            g.generate_time,
            g.output_tokens as f64 / g.generate_time.as_secs_f64(),
            g.constrain_time,
            g.stop
        );
    }
    Ok(())
}
