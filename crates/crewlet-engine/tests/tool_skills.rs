//! Tool skills and tool discovery in real turns on the fake model:
//! - the skills shipped in `examples/tool-skills` are valid and name tools
//!   that exist;
//! - a turn's Plan and Execute prompts list the skills that match their
//!   tools (variables substituted); a required skill holds its tool back
//!   until `load_tool_skill` (`phase.tool_skill_blocked`);
//! - Execute picks up a tool the plan missed with `activate_tool`
//!   (`phase.tool_activated`), and a made-up tool is `execute.missing_tool`;
//! - skills published by `crewlet confluence import` / `crewlet plane
//!   import` into the fake Confluence and the fake Plane are read back by
//!   the engine at boot, home pages and broken pages passed over.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use crewlet_config::Company;
use crewlet_core::EventType;
use crewlet_engine::{Backends, Engine, EngineBuilder, EngineOptions};
use crewlet_integrations::knowledge::import::{self, Publisher};
use crewlet_integrations::knowledge::{
    ConfluencePublisher, DirSkills, PlanePublisher, SkillSource,
};
use crewlet_queue::{EventQueue, MemoryBroker};
use crewlet_store::Stores;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tool-skills")
}

fn llm_yaml(llm: &FakeLlmServer) -> String {
    format!(
        "providers:\n  llm:\n    fake: {{type: openai-compatible, model: fake-model, base_url: \"{}\"}}\n",
        llm.openai_base_url()
    )
}

async fn start(company: Company, stores: &Stores, skills: Option<Arc<dyn SkillSource>>) -> Engine {
    let queue: Arc<dyn EventQueue> = Arc::new(MemoryBroker::new().client());
    let backends = Backends::new(queue, stores.clone());
    let builder = EngineBuilder::new(company, &backends).options(EngineOptions {
        stream_progress: false,
        ..EngineOptions::default()
    });
    let builder = match skills {
        Some(s) => builder.tool_skills(s),
        None => builder,
    };
    builder.start().await.unwrap_or_else(|e| panic!("{e}"))
}

async fn done(stores: &Stores, n: usize) {
    wait_for("the turns to complete", WAIT, || async {
        (events_of(stores, EventType::TaskCompleted).await.len() >= n).then_some(())
    })
    .await;
}

/// System prompts of `phase` calls whose request holds `marker`.
fn prompts(llm: &FakeLlmServer, marker: &str, phase: &str) -> Vec<String> {
    llm.requests()
        .into_iter()
        .map(|r| r.body.to_string())
        .filter(|b| b.contains(marker) && b.contains(&format!("# Phase: {phase}")))
        .collect()
}

#[tokio::test]
async fn the_shipped_skills_are_valid_and_name_tools_that_exist() {
    let walk = DirSkills::new(examples())
        .walk()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(walk.rejected.is_empty(), "{:?}", walk.rejected);
    let pages = walk.pages.len();
    let skills = crewlet_engine::skills_of(walk);
    assert_eq!(skills.len(), pages, "a shipped skill is invalid");
    let keys: Vec<&str> = skills.iter().map(|s| s.key.as_str()).collect();
    for key in [
        "skill:memory",
        "tool:a2a_ask",
        "tool:search_knowledge",
        "skill:chat_posts",
        "skill:learned_skills",
    ] {
        assert!(keys.contains(&key), "{key} missing from {keys:?}");
    }
    // Every tool a shipped trigger names is one of our builtins.
    let builtins = [
        "reflect_and_persist",
        "refresh_memory",
        "query_episodes",
        "use_skill",
        "refine_skill",
        "a2a_ask",
        "search_knowledge",
        "mattermost_post",
        "mattermost_reply",
    ];
    fn leaves(t: &crewlet_turn::SkillTrigger, out: &mut Vec<String>) {
        match t {
            crewlet_turn::SkillTrigger::Tool(n) => out.push(n.clone()),
            crewlet_turn::SkillTrigger::McpServer(_) => {}
            crewlet_turn::SkillTrigger::AnyOf(v) | crewlet_turn::SkillTrigger::AllOf(v) => {
                v.iter().for_each(|t| leaves(t, out))
            }
        }
    }
    for s in &skills {
        let mut names = Vec::new();
        leaves(&s.trigger, &mut names);
        for n in names {
            assert!(
                builtins.contains(&n.as_str()),
                "{}: unknown tool {n}",
                s.key
            );
        }
    }
}

fn skill_dir(dir: &Path) {
    std::fs::write(
        dir.join("lookup.md"),
        "---\nkey: tool:lookup\ntrigger:\n  tool: lookup_colleague\nphases: [plan, execute]\n\
         title: Looking people up\nsummary: Check ${handbook} before asking.\n---\n\
         SKILL-BODY-MARK: the handbook is at ${handbook}; $HOME and ${unset} stay.\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // Not a skill (no trigger): passed over.
    std::fs::write(dir.join("notes.md"), "# Notes\nnothing here\n")
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_skill_is_listed_and_must_be_loaded_before_its_tool_runs() {
    let execute = "# Phase: Execute";
    let script = Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "direct", "reasoning": "ask around",
                       "steps": [{"intent": "find who owns billing"}],
                       "tools_needed": ["lookup_colleague"]}),
            ),
        )
        .on(
            When::system_contains(execute).and_tool_result_contains("needs a tool skill"),
            Reply::tool_call("load_tool_skill", json!({"key": "tool:lookup"})),
        )
        .on(
            When::system_contains(execute).and_tool_result_contains("SKILL-BODY-MARK"),
            Reply::tool_call("lookup_colleague", json!({"handle": "cto"})),
        )
        .on(
            When::system_contains(execute).and_after_tool_result(true),
            Reply::text("done"),
        )
        .on(
            When::system_contains(execute),
            Reply::tool_call("lookup_colleague", json!({"handle": "cto"})),
        )
        .on(When::any(), Reply::text("done"));
    let llm = FakeLlmServer::start(script)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = crewlet_test_support::e2e::temp_dir("skills-required");
    skill_dir(&dir);
    let yaml = format!(
        "name: Skill Co\n{}skill_variables:\n  handbook: https://handbook.example/people\nroles:\n  - {{name: CTO, handle: cto, manages: [eng]}}\n  - {{name: Engineer, handle: eng}}\n",
        llm_yaml(&llm)
    );
    let company = Company::from_yaml("skills", &yaml).unwrap_or_else(|e| panic!("{e}"));
    let stores = Stores::memory();
    let engine = start(company, &stores, Some(Arc::new(DirSkills::new(&dir)))).await;
    assert_eq!(engine.tool_skills().keys(), ["tool:lookup"]);
    engine
        .assign("eng", "billing", "MARK-SKILL who owns billing?")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    done(&stores, 1).await;

    let plan = prompts(&llm, "MARK-SKILL", "Plan");
    assert!(plan[0].contains("## Tool skills"), "{}", plan[0]);
    assert!(
        plan[0].contains(
            "`tool:lookup` (required): Looking people up. Check https://handbook.example/people before asking."
        ),
        "{}",
        plan[0]
    );
    let exec = prompts(&llm, "MARK-SKILL", "Execute");
    assert!(exec[0].contains("`tool:lookup` (required)"), "{}", exec[0]);
    assert!(
        exec[0].contains("load_tool_skill"),
        "not offered: {}",
        exec[0]
    );
    // The loaded body reached the model with the variable substituted and
    // everything else left as written.
    assert!(
        exec.iter().any(|p| p.contains(
            "SKILL-BODY-MARK: the handbook is at https://handbook.example/people; $HOME and ${unset} stay."
        )),
        "the skill body did not reach the model"
    );
    let blocked = events_of(&stores, EventType::ToolSkillBlocked).await;
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert_eq!(blocked[0].payload["tool"], "lookup_colleague");
    assert_eq!(blocked[0].payload["skills"], json!(["tool:lookup"]));
    assert_eq!(blocked[0].payload["phase"], "execute");
    // The second lookup ran.
    let completed = events_of(&stores, EventType::AgentPhaseCompleted).await;
    let ran = completed
        .iter()
        .filter(|e| e.payload["phase"] == "execute")
        .flat_map(|e| {
            e.payload["tool_executions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|t| t["name"] == "lookup_colleague" && t["ok"] == true)
        .count();
    assert_eq!(ran, 1);
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_activates_a_tool_the_plan_missed_and_reports_a_made_up_one() {
    let execute = "# Phase: Execute";
    let script = Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "direct", "reasoning": "answer",
                       "steps": [{"intent": "answer"}], "tools_needed": []}),
            ),
        )
        .on(
            When::system_contains(execute)
                .and_tool_result_contains("not callable in this phase yet"),
            Reply::tool_call("activate_tool", json!({"name": "lookup_colleague"})),
        )
        .on(
            When::system_contains(execute)
                .and_tool_result_contains("callable from your next round"),
            Reply::tool_calls([
                ("lookup_colleague", json!({"handle": "cto"})),
                ("summon_dragon", json!({})),
            ]),
        )
        .on(
            When::system_contains(execute).and_after_tool_result(true),
            Reply::text("done"),
        )
        .on(
            When::system_contains(execute),
            Reply::tool_call("lookup_colleague", json!({"handle": "cto"})),
        )
        .on(When::any(), Reply::text("done"));
    let llm = FakeLlmServer::start(script)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let yaml = format!(
        "name: Discover Co\n{}roles:\n  - {{name: CTO, handle: cto, manages: [eng]}}\n  - {{name: Engineer, handle: eng}}\n",
        llm_yaml(&llm)
    );
    let company = Company::from_yaml("discover", &yaml).unwrap_or_else(|e| panic!("{e}"));
    let stores = Stores::memory();
    let engine = start(company, &stores, None).await;
    engine
        .assign("eng", "who", "MARK-DISCOVER who is my manager?")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    done(&stores, 1).await;

    let exec = prompts(&llm, "MARK-DISCOVER", "Execute");
    assert!(exec[0].contains("list_mcp_server_tools") && exec[0].contains("activate_tool"));
    let activated = events_of(&stores, EventType::ToolActivated).await;
    assert_eq!(activated.len(), 1, "{activated:?}");
    assert_eq!(activated[0].payload["tool"], "lookup_colleague");
    assert_eq!(activated[0].payload["phase"], "execute");
    let missing = events_of(&stores, EventType::ExecuteMissingTool).await;
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert_eq!(missing[0].payload["tool"], "summon_dragon");
    assert_eq!(missing[0].agent_handle(), Some("eng"));
    engine.shutdown().await;
}

/// Publishes `examples/tool-skills` with `publisher` (what the import
/// command does).
async fn publish(publisher: &dyn Publisher) {
    let collected = import::collect(&examples(), import::DEFAULT_SKILLS_CONTAINER)
        .unwrap_or_else(|e| panic!("{e}"));
    let plan = import::plan(publisher, collected, &mut |_| {}).await;
    let report = import::apply(publisher, &plan, &mut |_| {}).await;
    assert!(report.failed.is_empty(), "{:?}", report.failed);
}

fn expected_keys() -> Vec<String> {
    let mut keys: Vec<String> = [
        "skill:chat_posts",
        "skill:learned_skills",
        "skill:memory",
        "tool:a2a_ask",
        "tool:search_knowledge",
    ]
    .map(String::from)
    .to_vec();
    keys.sort();
    keys
}

/// The Plan prompt of a turn lists the skills of the tools the seat has.
async fn plan_lists_the_imported_skills(company: Company, llm: &FakeLlmServer) {
    let stores = Stores::memory();
    let engine = start(company, &stores, None).await;
    assert_eq!(engine.tool_skills().keys(), expected_keys());
    engine
        .assign(
            "eng",
            "q",
            "MARK-IMPORTED please summarize the release plan",
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    done(&stores, 1).await;
    let plan = prompts(llm, "MARK-IMPORTED", "Plan");
    assert!(
        plan[0].contains("`tool:a2a_ask` (required): Asking a colleague."),
        "{}",
        plan[0]
    );
    assert!(plan[0].contains("`tool:search_knowledge`: Searching the knowledge base."));
    // No chat and no learning here: their skills are not listed.
    assert!(!plan[0].contains("skill:chat_posts") && !plan[0].contains("skill:memory"));
    engine.shutdown().await;
}

fn plain_script() -> Script {
    Script::new()
        .on(
            When::no_tools().and_system_contains("You write search queries"),
            Reply::text("release plan"),
        )
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "direct", "reasoning": "r", "steps": [{"intent": "answer"}]}),
            ),
        )
        .on(When::any(), Reply::text("done"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_imported_to_confluence_are_read_back_at_boot() {
    use crewlet_test_support::confluence::FakeConfluence;
    let llm = FakeLlmServer::start(plain_script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let wiki = FakeConfluence::start().await;
    let admin = wiki.add_user("admin");
    wiki.add_space("TS");
    // The space's home page is not a skill and carries no skill label.
    wiki.add_page("TS", "Tool Skills", "<p>Welcome</p>", None);
    let yaml = format!(
        "name: Wiki Co\n{}integrations:\n  confluence: {{url: \"{url}\", email: {ae}, token: {at}}}\nknowledge:\n  confluence_spaces: [ENG]\nroles:\n  - {{name: CTO, handle: cto, manages: [eng]}}\n  - {{name: Engineer, handle: eng}}\n",
        llm_yaml(&llm),
        url = wiki.url(),
        ae = admin.email,
        at = admin.token,
    );
    let company = Company::from_yaml("wiki", &yaml).unwrap_or_else(|e| panic!("{e}"));
    let publisher =
        ConfluencePublisher::from_company(&company, |_| None).unwrap_or_else(|e| panic!("{e}"));
    publish(&publisher).await;
    plan_lists_the_imported_skills(company, &llm).await;
    assert!(
        wiki.requests().iter().any(|r| r
            .param("cql")
            .is_some_and(|c| c.contains("label = ") && c.contains("crewlet-skill"))),
        "the walk did not ask for labelled pages"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_imported_to_plane_are_read_back_at_boot() {
    use crewlet_test_support::plane::FakePlane;
    let llm = FakeLlmServer::start(plain_script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let plane = FakePlane::start("acme").await;
    let admin = plane.add_user("admin", true);
    let ts = plane.add_project("TS");
    plane.join(&ts, &admin.id);
    plane.add_page(&ts, "About this project", "<p>Skills live here.</p>", None);
    let yaml = format!(
        "name: Plane Co\n{}integrations:\n  plane: {{enabled: true, url: \"{url}\", workspace: acme, token: {at}, webhook_secret: s3cret-s3cret}}\nknowledge:\n  plane_projects: [ENG]\nroles:\n  - {{name: CTO, handle: cto, manages: [eng]}}\n  - {{name: Engineer, handle: eng}}\n",
        llm_yaml(&llm),
        url = plane.url(),
        at = admin.token,
    );
    let company = Company::from_yaml("plane", &yaml).unwrap_or_else(|e| panic!("{e}"));
    let publisher =
        PlanePublisher::from_company(&company, |_| None).unwrap_or_else(|e| panic!("{e}"));
    publish(&publisher).await;
    // A page edited into a non-skill by hand is passed over, the rest load.
    plane.add_page(
        &ts,
        "Broken skill",
        "<pre><code class=\"language-yaml\">key: x\ntrigger: [</code></pre><p>oops</p>",
        None,
    );
    plan_lists_the_imported_skills(company, &llm).await;
}

#[tokio::test]
async fn a_rewalk_picks_up_edits_and_drops_removed_or_broken_skills() {
    let dir = crewlet_test_support::e2e::temp_dir("skills-rewalk");
    skill_dir(&dir);
    let source = DirSkills::new(&dir);
    let skills = crewlet_turn::ToolSkills::new();
    assert_eq!(crewlet_engine::sync_once(&source, &skills).await, Ok(1));
    let page = dir.join("lookup.md");
    let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&page, text.replace("Looking people up", "Finding people"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(crewlet_engine::sync_once(&source, &skills).await, Ok(1));
    assert_eq!(
        skills
            .get("tool:lookup")
            .map(|s| s.title.clone())
            .as_deref(),
        Some("Finding people")
    );
    // Edited into an invalid skill (summary too long): dropped, not kept.
    std::fs::write(
        &page,
        format!(
            "---\nkey: tool:lookup\ntrigger: {{tool: x}}\nphases: [plan]\ntitle: T\nsummary: {}\n---\nb\n",
            "x".repeat(300)
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(crewlet_engine::sync_once(&source, &skills).await, Ok(0));
    assert!(skills.is_empty());
    // A walk that fails leaves the registry as it was.
    std::fs::write(
        &page,
        "---\nkey: k\ntrigger: {tool: x}\nphases: [plan]\ntitle: T\nsummary: s\n---\nb\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(crewlet_engine::sync_once(&source, &skills).await, Ok(1));
    let gone = DirSkills::new(dir.join("missing"));
    assert!(crewlet_engine::sync_once(&gone, &skills).await.is_err());
    assert_eq!(skills.keys(), ["k"]);
}
