//! HTTP routes: the WebSocket endpoint, model metadata, the weights, and the static demo.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use actix_files::{Files, NamedFile};
use actix_web::{HttpRequest, HttpResponse, web};
use anyhow::{Context, Result};
use burn::tensor::Device;
use split_shared::cache::LruCache;
use split_shared::codec::{Calibration, DEFAULT_SETTING, SUPPORTED_BITS};
use split_shared::labels::Prediction;
use split_shared::model::{Boundary, EfficientNetLite0, boundary_table};
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
    /// The codec calibration and the path it was read from, when there is one.
    pub calibration: Option<(Arc<Calibration>, Arc<PathBuf>)>,
    /// The planner's cost table (JSON text), when there is one.
    pub cost_table: Option<Arc<String>>,
    /// Results by content, shared by every session.
    pub cache: ResultCache,
}

/// Answers by content key: the boundary served from and the top-5.
pub type ResultCache = Arc<Mutex<LruCache<(Boundary, Vec<Prediction>)>>>;

/// Rough bytes one cached result holds (key, boundary, five predictions, bookkeeping).
pub const CACHE_ENTRY_COST: usize = 160;

fn load_cost_table(path: PathBuf) -> Result<Option<Arc<String>>> {
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            log::warn!("no cost table at {}: clients cannot plan splits", path.display());
            return Ok(None);
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    split_shared::plan::CostTable::from_json(&text)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("loading the cost table {}", path.display()))?;
    Ok(Some(Arc::new(text)))
}

fn load_calibration(path: PathBuf) -> Result<Option<(Arc<Calibration>, Arc<PathBuf>)>> {
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            log::warn!(
                "no codec calibration at {}: only f32 features are accepted; run `cargo xtask setup`",
                path.display()
            );
            return Ok(None);
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let calibration = Calibration::from_bytes(&bytes)
        .with_context(|| format!("loading the calibration {}", path.display()))?;
    log::info!(
        "codec calibration {:016x} from {} ({} images)",
        calibration.id(),
        path.display(),
        calibration.images()
    );
    Ok(Some((Arc::new(calibration), Arc::new(path))))
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
        let (device, device_name) = device(config.device)?;
        let model = EfficientNetLite0::load(&weights_path, &device)?;
        log::info!("model loaded from {} on {device_name}", weights_path.display());
        let calibration = load_calibration(config.calibration_path())?;
        let cost_table = load_cost_table(config.cost_table_path())?;
        Ok(Self {
            engine: Engine::start(model, device, config.workers, config.queue, config.batch.into()),
            weights_path: Arc::new(weights_path),
            web_dir: Arc::new(config.web_path()),
            device_name,
            calibration,
            cost_table,
            cache: Arc::new(Mutex::new(LruCache::new(
                config.cache_entries,
                config.cache_entries * CACHE_ENTRY_COST,
            ))),
        })
    }
}

async fn info(state: web::Data<AppState>) -> HttpResponse {
    let calibration = state.calibration.as_ref().map(|(c, _)| {
        serde_json::json!({
            "url": CALIBRATION_URL,
            "id": format!("{:016x}", c.id()),
            "images": c.images(),
            "boundaries": c.boundaries().map(|b| b.name()).collect::<Vec<_>>(),
            "bits": SUPPORTED_BITS,
            "max_rank": c.boundaries().map(|b| (b.name(), c.at(b).and_then(|t| t.pca.as_ref()).map_or(0, |p| p.projection.max_rank))).collect::<std::collections::BTreeMap<_, _>>(),
        })
    });
    let default_codec =
        if state.calibration.is_some() { DEFAULT_SETTING.to_string() } else { "f32".into() };
    HttpResponse::Ok().json(serde_json::json!({
        "calibration": calibration,
        "default_codec": default_codec,
        "cost_table_url": state.cost_table.as_ref().map(|_| "/api/cost-table"),
        "protocol_version": PROTOCOL_VERSION,
        "max_frame_bytes": MAX_FRAME_BYTES,
        "model": "efficientnet-lite0",
        "device": state.device_name,
        "weights_url": "/weights/efficientnet-lite0.splw",
        "boundaries": boundary_table().as_slice(),
    }))
}

/// Where browsers fetch the calibration.
pub const CALIBRATION_URL: &str = "/calibration/efficientnet-lite0.splc";

async fn calibration(
    req: HttpRequest,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let Some((_, path)) = &state.calibration else {
        return Ok(HttpResponse::NotFound().body("no codec calibration on this server"));
    };
    Ok(NamedFile::open_async(path.as_path()).await?.into_response(&req))
}

async fn cost_table(state: web::Data<AppState>) -> HttpResponse {
    match &state.cost_table {
        Some(t) => HttpResponse::Ok().content_type("application/json").body(t.as_str().to_owned()),
        None => {
            HttpResponse::NotFound().body("no cost table on this server; run `cargo xtask profile`")
        }
    }
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
            .route(CALIBRATION_URL, web::get().to(calibration))
            .route("/api/cost-table", web::get().to(cost_table))
            .service(Files::new("/", web_dir).index_file("index.html").prefer_utf8(true));
    }
}
