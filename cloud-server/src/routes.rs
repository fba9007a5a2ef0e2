//! HTTP routes: the WebSocket endpoint, model metadata, the weights, and the static demo.

use std::path::PathBuf;
use std::sync::Arc;

use actix_files::{Files, NamedFile};
use actix_web::{HttpRequest, HttpResponse, web};
use anyhow::{Context, Result};
use burn::tensor::Device;
use split_shared::model::{EfficientNetLite0, WeightsFile, boundary_table};
use split_shared::protocol::{MAX_FRAME_BYTES, PROTOCOL_VERSION};

use crate::config::{Config, DeviceChoice};
use crate::engine::Engine;

/// Everything the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// The model workers.
    pub engine: Engine,
    /// Path of the weights file served to browsers.
    pub weights_path: Arc<PathBuf>,
    /// Folder of the demo page.
    pub web_dir: Arc<PathBuf>,
    /// Name of the device the cloud half runs on.
    pub device_name: &'static str,
}

fn device(choice: DeviceChoice) -> Result<(Device, &'static str)> {
    match choice {
        DeviceChoice::Flex => Ok((Device::flex(), "flex (CPU)")),
        #[cfg(feature = "wgpu")]
        DeviceChoice::Wgpu => Ok((
            Device::wgpu_options().init().map_err(|e| anyhow::anyhow!("wgpu device: {e:?}"))?,
            "wgpu (GPU)",
        )),
        #[cfg(not(feature = "wgpu"))]
        DeviceChoice::Wgpu => {
            anyhow::bail!("--device wgpu needs the server built with `--features wgpu`")
        }
    }
}

impl AppState {
    /// Load the weights and start the model workers.
    ///
    /// # Errors
    /// When the weights file is missing or invalid, with the command that fixes it.
    pub fn load(config: &Config) -> Result<Self> {
        let weights_path = config.weights_path();
        let bytes = std::fs::read(&weights_path).with_context(|| {
            format!(
                "cannot read the weights at {}; run `cargo xtask setup` first",
                weights_path.display()
            )
        })?;
        let weights = WeightsFile::from_bytes(&bytes)?;
        let (device, device_name) = device(config.device)?;
        let model = EfficientNetLite0::from_weights(&weights, &device)?;
        log::info!("model loaded from {} on {device_name}", weights_path.display());
        Ok(Self {
            engine: Engine::start(model, device, config.workers, config.queue),
            weights_path: Arc::new(weights_path),
            web_dir: Arc::new(config.web_path()),
            device_name,
        })
    }
}

async fn info(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({
        "protocol_version": PROTOCOL_VERSION,
        "max_frame_bytes": MAX_FRAME_BYTES,
        "model": "efficientnet-lite0",
        "device": state.device_name,
        "weights_url": "/weights/efficientnet-lite0.splw",
        "boundaries": boundary_table().as_slice(),
    }))
}

async fn weights(req: HttpRequest, state: web::Data<AppState>) -> actix_web::Result<HttpResponse> {
    Ok(NamedFile::open_async(state.weights_path.as_path()).await?.into_response(&req))
}

/// Register every route on `cfg`; shared by `main` and the tests.
pub fn config_app(state: AppState) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        let web_dir = state.web_dir.as_path().to_path_buf();
        cfg.app_data(web::Data::new(state))
            .route("/ws", web::get().to(crate::ws::websocket))
            .route("/api/info", web::get().to(info))
            .route("/healthz", web::get().to(|| async { HttpResponse::Ok().body("ok") }))
            .route("/weights/efficientnet-lite0.splw", web::get().to(weights))
            .service(Files::new("/", web_dir).index_file("index.html").prefer_utf8(true));
    }
}
