//! `cloud-server`: serve the demo page and the cloud half of the split network.

use actix_web::{App, HttpServer, middleware};
use clap::Parser;
use cloud_server::{AppState, Config, config_app};

/// The network's activations are multi-megabyte buffers allocated and freed on every forward;
/// glibc's allocator hands them back to the OS and page-faults them in again each time
/// (about 44 faults a forward), mimalloc keeps them for reuse: 3–6% of a forward (docs/kernels.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Errors end the process with one readable line (no backtrace, whatever `RUST_BACKTRACE` says):
/// an operator's mistake is not a crash.
fn main() -> std::process::ExitCode {
    env_logger::init_from_env(env_logger::Env::default().default_filter_or("info"));
    let config = Config::parse();
    match actix_web::rt::System::new().block_on(serve(config)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cloud-server: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    config.check_transport().map_err(anyhow::Error::msg)?;
    let tls = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => Some(cloud_server::tls::server_config(cert, key)?),
        _ => None,
    };
    let state = AppState::load(&config)?;
    let addr = (config.host.clone(), config.port);
    let app_state = state.clone();
    let server = HttpServer::new(move || {
        App::new()
            .wrap(
                middleware::Logger::new("%r %s %b %Dms")
                    // A balancer probes every replica twice a second: keep that out of the log.
                    .exclude("/livez")
                    .exclude("/healthz")
                    .exclude("/readyz")
                    .exclude("/metrics"),
            )
            // The wasm module is 30 MB raw and 4.6 MB gzipped; browsers ask for gzip.
            .wrap(middleware::Compress::default())
            .configure(config_app(app_state.clone()))
    })
    // Signals are handled below, so sessions learn of the shutdown before the listener stops.
    .disable_signals()
    .shutdown_timeout(config.shutdown_timeout);
    let (server, scheme) = match tls {
        Some(tls) => (server.bind_rustls_0_23(addr, tls)?, "https"),
        None => (server.bind(addr)?, "http"),
    };
    for a in server.addrs() {
        // The one line operators and scripts look for.
        println!("split-inference demo: {scheme}://{a}/");
    }
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(async move {
        shutdown_signal().await;
        log::info!(
            "shutting down: closing sessions after their current request (at most {} s)",
            config.shutdown_timeout
        );
        state.begin_drain();
        // Stop accepting, then wait for open connections (each closes once its request is
        // answered) up to `--shutdown-timeout`.
        handle.stop(true).await;
    });
    server.await?;
    log::info!("stopped");
    Ok(())
}

/// SIGTERM (what orchestrators and `kill` send) or Ctrl-C.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}
