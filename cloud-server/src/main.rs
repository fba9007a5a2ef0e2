//! `cloud-server`: serve the demo page and the cloud half of the split network.

use actix_web::{App, HttpServer, middleware};
use clap::Parser;
use cloud_server::{AppState, Config, config_app};

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    env_logger::init_from_env(env_logger::Env::default().default_filter_or("info"));
    let config = Config::parse();
    let state = AppState::load(&config)?;
    let addr = (config.host.clone(), config.port);
    let server = HttpServer::new(move || {
        App::new()
            .wrap(middleware::Logger::new("%r %s %b %Dms"))
            // The wasm module is 30 MB raw and 4.6 MB gzipped; browsers ask for gzip.
            .wrap(middleware::Compress::default())
            .configure(config_app(state.clone()))
    })
    .bind(addr)?;
    for a in server.addrs() {
        // The one line operators and scripts look for.
        println!("split-inference demo: http://{a}/");
    }
    server.run().await?;
    Ok(())
}
