//! `device-agent`: join a device group as a native member and answer what the others relay.
//!
//! `cargo run --release -p device-agent -- --group ABC234` (or `--create`), against the
//! server at `--server` (default `ws://127.0.0.1:8080/group`).

use std::sync::Arc;

use anyhow::Result;
use clap::Parser;
use device_agent::{Agent, AgentOptions, run};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Join a device group as a native member (a TV box, a desktop without a browser) and answer
/// the requests other members relay to it, with the shared model on the CPU (burn flex).
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
    let agent = Arc::new(Agent::load(&weights, calibration.as_deref())?);
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
