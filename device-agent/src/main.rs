//! `device-agent`: join a device group as a native member and answer what the others relay.
//!
//! `cargo run --release -p device-agent -- --group ABC234` (or `--create`), against the
//! server at `--server` (default `ws://127.0.0.1:8080/group`).

use std::sync::Arc;

use anyhow::Result;
use clap::Parser;
use device_agent::{Agent, AgentOptions, LlmMember, run};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Join a device group as a native member (a TV box, a desktop without a browser) and answer
/// the requests other members relay to it, with the shared model on the CPU (burn flex); with
/// the language model, also the middle blocks of the group's split chats.
#[derive(Parser, Debug)]
#[command(version)]
struct Cli {
    /// The group's join code (as the page shows it).
    #[arg(long, required_unless_present = "create", conflicts_with = "create")]
    group: Option<String>,
    /// Start a new group instead, and print its code.
    #[arg(long)]
    create: bool,
    /// The server's group socket.
    #[arg(long, env = "SPLIT_GROUP_URL", default_value = "ws://127.0.0.1:8080/group")]
    server: String,
    /// This device's id in the group (letters, digits, - and _).
    #[arg(long, default_value = "device-agent")]
    id: String,
    /// The name other members see.
    #[arg(long, default_value = "native agent")]
    name: String,
    /// Weights file (default: the one `./run.sh demo` fetched).
    #[arg(long, env = "SPLIT_WEIGHTS")]
    weights: Option<std::path::PathBuf>,
    /// Codec calibration, for coded feature frames (default: beside the weights, if there).
    #[arg(long, env = "SPLIT_CALIBRATION")]
    calibration: Option<std::path::PathBuf>,
    /// SmolLM2's GGUF file: with it, this device runs the middle blocks of the group's split
    /// chats (default: the one `./run.sh setup` fetched, when it is there).
    #[arg(long, env = "SPLIT_LLM", conflicts_with = "no_llm")]
    llm: Option<std::path::PathBuf>,
    /// Run no language model blocks, even with the file there.
    #[arg(long)]
    no_llm: bool,
    /// Most positions (prompt and answer) one split chat may reach here.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=8192))]
    llm_positions: u32,
    /// The server's bearer token, when it requires one (prefer the environment variable).
    #[arg(long, env = "SPLIT_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

#[actix_web::main]
async fn main() -> Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    let weights = cli.weights.unwrap_or_else(split_paths::weights_file);
    let calibration = cli.calibration.or_else(|| {
        let default = split_paths::calibration_file();
        default.exists().then_some(default)
    });
    let mut agent = Agent::load(&weights, calibration.as_deref())?;
    let llm = if cli.no_llm {
        None
    } else {
        // A file named is loaded or the agent stops; the default only where setup put it.
        cli.llm.or_else(|| Some(split_paths::llm_file()).filter(|p| p.exists()))
    };
    if let Some(path) = llm {
        agent = agent.with_llm(LlmMember::load(&path, cli.llm_positions)?);
        log::info!("running split chats' middle blocks with {}", path.display());
    }
    let agent = Arc::new(agent);
    let options = AgentOptions {
        url: cli.server,
        code: cli.group,
        id: cli.id,
        name: cli.name,
        token: cli.token,
        on_joined: Some(Arc::new(|code: &str| println!("device-agent: in group {code}"))),
    };
    let why = run(agent, options).await?;
    println!("device-agent: {why}");
    Ok(())
}
