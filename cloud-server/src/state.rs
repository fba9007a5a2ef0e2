//! What every handler shares, and how it is loaded at start-up: the model workers, the codec
//! calibration, the cost table, the result cache.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use burn::tensor::Device;
use split_shared::cache::LruCache;
use split_shared::codec::{Calibration, Setting};
use split_shared::labels::Prediction;
use split_shared::model::{EfficientNetLite0, Lite0Split};
use split_shared::runtime::{RuntimeError, SplitModel};

use crate::config::{Config, DeviceChoice, Token};
use crate::engine::Engine;
use crate::metrics::Metrics;

/// Everything the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// Every hosted model's workers, by model id; EfficientNet-Lite0's first ([`Self::engine`]).
    pub models: crate::hosted::HostedModels,
    /// How a newly hosted model's workers are set up (`--workers`, `--queue`, `--batch`,
    /// `--batch-delay-us`).
    pub engine_settings: EngineSettings,
    /// Path of the weights file served to browsers.
    pub weights_path: Arc<PathBuf>,
    /// Its size and checksum, for `/api/info`.
    pub weights_file: Arc<crate::info::FileIdentity>,
    /// The same weights cut per stage, for browsers that run only some of them.
    pub weight_shards: crate::shards::Parts,
    /// The calibration cut per boundary (empty without a calibration).
    pub calibration_parts: crate::shards::Parts,
    /// The light model's shards (empty with `--light-model none`).
    pub light_shards: crate::shards::Parts,
    /// The light model's precision.
    pub light_model: Option<split_shared::model::LightPrecision>,
    /// Folder of the demo page.
    pub web_dir: Arc<PathBuf>,
    /// Name of the device the cloud half runs on.
    pub device_name: &'static str,
    /// The codec calibration and the path it was read from, when there is one.
    pub calibration: Option<(Arc<Calibration>, Arc<PathBuf>)>,
    /// The planner's cost table (JSON text), when there is one.
    pub cost_table: Option<Arc<String>>,
    /// The cost tables (JSON text) of the other hosted models, by model name
    /// ([`Self::host_with_cost_table`]).
    pub model_cost_tables: Arc<std::collections::BTreeMap<String, Arc<String>>>,
    /// Results by content; keyed per session unless [`Config::shared_cache`].
    pub cache: ResultCache,
    /// Whether sessions share cached results.
    pub shared_cache: bool,
    /// Extra origins allowed to open `/ws` (see [`Config::allow_origins`]).
    pub allow_origins: Arc<Vec<String>>,
    /// The `Host` names requests may carry ([`Config::allowed_hosts`]).
    pub allowed_hosts: Arc<crate::hosts::AllowedHosts>,
    /// Proxies whose `X-Forwarded-For` names the client ([`Config::trusted_proxies`]).
    pub trusted_proxies: Arc<Vec<crate::ipnet::IpNet>>,
    /// The bearer token `/ws` requires, when the operator set one ([`Config::token`]).
    pub token: Option<Token>,
    /// Stream reference bytes: per session, and held by all sessions now against their cap.
    pub streams: StreamBudget,
    /// How long a reply may wait for a client that stopped reading ([`Config::write_timeout`]).
    pub write_timeout: std::time::Duration,
    /// Requests per second per client address ([`Config::rate_limit`]).
    pub rate: Arc<crate::limits::RateLimiter>,
    /// Source of session ids (the cache scope of each connection).
    pub sessions: Arc<std::sync::atomic::AtomicU64>,
    /// Open WebSockets, in all and per client address.
    pub connections: Arc<crate::limits::ConnectionLimits>,
    /// What `/metrics` reports.
    pub metrics: Arc<Metrics>,
    /// Queue depth from which `/readyz` says not ready ([`Config::ready_queue`]).
    pub ready_queue: usize,
    /// Set once when the server starts shutting down: sessions close, `/readyz` fails.
    pub drain: Arc<tokio::sync::watch::Sender<bool>>,
    /// Device groups (`/group`).
    pub groups: Arc<crate::groups::Groups>,
    /// SmolLM2's GGUF file as loaded (its shares and tokenizer for browsers), when it is.
    pub llm: Option<Arc<crate::llm_ws::LlmHost>>,
    /// The encrypted classifier's half (`/encrypted`).
    pub encrypted: Arc<crate::encrypted_ws::EncryptedHost>,
    /// The stateful models `/llm` serves (SmolLM2 first, when loaded) and their KV budget.
    pub(crate) sequences: Arc<crate::llm_models::SequenceModels>,
    /// The site's version ([`crate::site`]): the served files, this build, its data files.
    pub site: Arc<str>,
    /// The congestion price replies carry ([`crate::price`]).
    pub pricing: Arc<crate::price::Pricing>,
}

/// Answers by content key (which names the model): the boundary served from and the top-5.
pub type ResultCache = Arc<Mutex<LruCache<(u8, Vec<Prediction>)>>>;

/// The flags every model's workers are started with.
#[derive(Clone, Copy, Debug)]
pub struct EngineSettings {
    /// Worker threads.
    pub workers: usize,
    /// Requests that may wait.
    pub queue: usize,
    /// Most requests in one forward pass.
    pub batch: usize,
    /// How long a worker waits for a batch to fill.
    pub batch_delay: std::time::Duration,
}

impl EngineSettings {
    /// Start workers for `model` with these settings.
    pub fn start(&self, model: Arc<dyn SplitModel>, metrics: Arc<Metrics>) -> Engine {
        let Self { workers, queue, batch, batch_delay } = *self;
        Engine::start_with_delay(model, workers, queue, batch, batch_delay, metrics)
    }
}

/// Rough bytes one cached result holds (key, boundary, five predictions, bookkeeping).
pub const CACHE_ENTRY_COST: usize = 160;

/// The cost table as served (its cloud figures scaled to this server unless `keep`,
/// [`crate::retime`]; its codec rows only those `calibration` can decode, so that no client
/// plans a frame this server refuses) and the file's checksum (the site's version follows the
/// file, not a start-up timing).
fn load_cost_table(
    path: PathBuf,
    model: &EfficientNetLite0,
    device: &Device,
    keep: bool,
    calibration: Option<&Calibration>,
) -> Result<Option<(Arc<String>, u64)>> {
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            log::warn!("no cost table at {}: clients cannot plan splits", path.display());
            return Ok(None);
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let checksum = split_shared::container::fnv1a64(text.as_bytes());
    let mut table = split_shared::plan::CostTable::from_json(&text)
        .and_then(|t| t.check_spec(&split_shared::model::lite0_spec()).map(|()| t))
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("loading the cost table {}", path.display()))?;
    let dropped = table.retain_codecs(|boundary, setting| {
        calibration.is_some_and(|c| c.codes(boundary, setting))
            || matches!(setting, Setting::F32 | Setting::Ranged(_))
    });
    if dropped > 0 {
        log::warn!(
            "cost table: {dropped} codec rows need tables the calibration does not have; \
             they are not offered"
        );
    }
    let as_is = |table: &split_shared::plan::CostTable| -> Result<Arc<String>> {
        Ok(Arc::new(if dropped == 0 {
            text.clone()
        } else {
            serde_json::to_string_pretty(table).context("writing the cost table")?
        }))
    };
    if keep {
        return Ok(Some((as_is(&table)?, checksum)));
    }
    let Some(factor) = crate::retime::cloud_factor(model, device, &table) else {
        log::warn!("could not time this server against the cost table: serving it as it is");
        return Ok(Some((as_is(&table)?, checksum)));
    };
    log::info!(
        "cost table: this server runs the network's tails in {factor:.2}× the table's time \
         ({}); its cloud figures are served scaled (--keep-cost-table: as written)",
        table.cloud_device
    );
    table.scale_cloud(factor, "timed by this server at start");
    let served = serde_json::to_string_pretty(&table).context("writing the cost table")?;
    Ok(Some((Arc::new(served), checksum)))
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

/// How many bytes of camera-stream references sessions may hold ([`Config::stream_bytes_total`]).
#[derive(Clone, Debug)]
pub struct StreamBudget {
    /// Each session's own limit.
    pub per_session: usize,
    /// All sessions' limit.
    pub total: usize,
    /// What all sessions hold now.
    pub held: Arc<std::sync::atomic::AtomicUsize>,
}

impl AppState {
    /// Load the weights and start the model workers.
    ///
    /// # Errors
    /// When the weights file is missing or invalid, with the command that fixes it.
    pub fn load(config: &Config) -> Result<Self> {
        let weights_path = config.weights_path();
        let (device, device_name) = device(config.device)?;
        // Parsed once, for the model and for the shards.
        let weights = split_shared::model::read_weights(&weights_path)?;
        let model = EfficientNetLite0::from_weights(&weights, &device)
            .with_context(|| format!("loading {}", weights_path.display()))?;
        let weight_shards = crate::shards::Parts::of_weights(&weights);
        let light_shards = config
            .light_model
            .0
            .map(|p| crate::shards::Parts::of_light(&weights, p))
            .unwrap_or_default();
        let encrypted = crate::encrypted_ws::EncryptedHost::new(
            split_shared::encrypted::QuantizedClassifier::new(
                weights.tensor("fc.weight", &[split_shared::model::NUM_CLASSES, 1280])?,
                weights.tensor("fc.bias", &[split_shared::model::NUM_CLASSES])?,
            ),
            config.encrypted_key_mib.saturating_mul(1 << 20),
            (config.encrypted_evict_after > 0)
                .then(|| std::time::Duration::from_secs(config.encrypted_evict_after)),
            config.queue,
        );
        drop(weights);
        let weights_file = crate::info::FileIdentity::of(&weights_path)
            .with_context(|| format!("reading {}", weights_path.display()))?;
        log::info!(
            "model loaded from {} on {device_name} (CPU kernels: {:?})",
            weights_path.display(),
            split_kernels::Isa::detect()
        );
        let calibration = load_calibration(config.calibration_path())?;
        let cost_table = load_cost_table(
            config.cost_table_path(),
            &model,
            &device,
            config.keep_cost_table,
            calibration.as_ref().map(|(c, _)| &**c),
        )?;
        let cost_table_checksum = cost_table.as_ref().map_or(0, |(_, sum)| *sum);
        let cost_table = cost_table.map(|(text, _)| text);
        let metrics = Arc::new(Metrics::new());
        let queue = config.queue;
        let engine_settings = EngineSettings {
            workers: config.workers,
            queue,
            batch: config.batch.into(),
            batch_delay: std::time::Duration::from_micros(config.batch_delay_us),
        };
        let lite0 = Lite0Split::new(model, device, calibration.as_ref().map(|(c, _)| c.clone()))
            .with_context(|| {
                format!(
                    "the calibration {} is not EfficientNet-Lite0's",
                    config.calibration_path().display()
                )
            })?;
        let llm = crate::llm_ws::LlmHost::load(config)?.map(Arc::new);
        let mut sequences = crate::llm_models::SequenceModels::new(
            crate::llm_budget::KvBudget::new(
                config.llm_kv_mib.saturating_mul(1 << 20),
                (config.llm_evict_after > 0)
                    .then(|| std::time::Duration::from_secs(config.llm_evict_after)),
            ),
            config.llm_positions,
            crate::llm_models::BatchSettings {
                batch: config.llm_batch,
                prefill_chunk: config.llm_prefill_chunk,
                counters: metrics.llm_batches.clone(),
            },
        );
        if let Some(host) = &llm {
            sequences.host(host.model.clone(), Some(host.end_token))?;
        }
        let site = crate::site::site_id(
            &config.web_path(),
            &[
                &weights_file.id,
                &calibration.as_ref().map_or(0, |(c, _)| c.id()).to_string(),
                &cost_table_checksum.to_string(),
                llm.as_ref().map_or("", |l| l.file_id.as_str()),
            ],
        );
        let engine = engine_settings.start(Arc::new(lite0), metrics.clone());
        Ok(Self {
            models: crate::hosted::HostedModels::new(engine),
            engine_settings,
            weights_path: Arc::new(weights_path),
            weights_file: Arc::new(weights_file),
            weight_shards,
            light_shards,
            light_model: config.light_model.0,
            calibration_parts: calibration
                .as_ref()
                .map(|(c, _)| crate::shards::Parts::of_calibration(c))
                .unwrap_or_default(),
            web_dir: Arc::new(config.web_path()),
            device_name,
            calibration,
            cost_table,
            model_cost_tables: Arc::default(),
            cache: Arc::new(Mutex::new(LruCache::new(
                config.cache_entries,
                config.cache_entries * CACHE_ENTRY_COST,
            ))),
            shared_cache: config.shared_cache,
            allow_origins: Arc::new(config.allow_origins.clone()),
            allowed_hosts: Arc::new(
                crate::hosts::AllowedHosts::from_config(&config.allowed_hosts, &config.host)
                    .map_err(anyhow::Error::msg)?,
            ),
            trusted_proxies: Arc::new(config.trusted_proxies.clone()),
            token: config.token.clone(),
            rate: crate::limits::RateLimiter::new(config.rate_limit),
            write_timeout: std::time::Duration::from_secs(config.write_timeout.max(1)),
            streams: StreamBudget {
                per_session: config.stream_bytes_per_session,
                total: config.stream_bytes_total,
                held: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            },
            sessions: Arc::new(std::sync::atomic::AtomicU64::new(1)),
            connections: crate::limits::ConnectionLimits::new(
                config.max_connections,
                config.max_connections_per_ip,
            ),
            llm,
            encrypted: Arc::new(encrypted),
            sequences: Arc::new(sequences),
            pricing: Arc::new(crate::price::Pricing::new(
                config.price_schedule.0.clone(),
                config.price_smoothing_s,
            )),
            site: site.into(),
            metrics,
            ready_queue: config.ready_queue.unwrap_or(queue / 2).max(1),
            drain: Arc::new(tokio::sync::watch::channel(false).0),
            groups: Arc::new(crate::groups::Groups::new(crate::groups::GroupLimits {
                max_groups: config.max_groups,
                code_ttl: std::time::Duration::from_secs(config.group_code_ttl),
            })),
        })
    }

    /// EfficientNet-Lite0's workers.
    pub fn engine(&self) -> &Engine {
        self.models.first()
    }

    /// Host `model` too, beside EfficientNet-Lite0: frames carrying its id go to workers of its
    /// own, started with this server's `--workers`, `--queue` and `--batch`, and `/api/info`
    /// lists it. Its coded frames decode with its own calibration
    /// ([`SplitModel::calibration`]). Call before the state is handed to [`crate::config_app`].
    ///
    /// # Errors
    /// [`RuntimeError::Duplicate`] when its id or name is taken, [`RuntimeError::BadSpec`]
    /// when its calibration has tables at a boundary it does not have, or for other channels.
    pub fn host(&mut self, model: Arc<dyn SplitModel>) -> Result<(), RuntimeError> {
        // Refused before its workers start.
        self.models.registry().check_free(model.spec())?;
        if let Some(c) = model.calibration() {
            c.check_spec(model.spec()).map_err(|e| RuntimeError::BadSpec(e.to_string()))?;
        }
        let engine = self.engine_settings.start(model, self.metrics.clone());
        self.models.add(engine)
    }

    /// [`Self::host`] `model` with its cost table (measured with
    /// [`split_shared::runtime::ProfileSetup`], or by a tool of its own): `/api/info` lists
    /// where clients fetch it, `/api/models/<name>/cost-table`, and they plan its split with
    /// [`split_shared::plan::plan`] as with EfficientNet-Lite0's.
    ///
    /// # Errors
    /// [`RuntimeError::BadSpec`] for a table of another model (checked first, so nothing is
    /// hosted), else as [`Self::host`].
    pub fn host_with_cost_table(
        &mut self,
        model: Arc<dyn SplitModel>,
        table: &split_shared::plan::CostTable,
    ) -> Result<(), RuntimeError> {
        table.check_spec(model.spec()).map_err(RuntimeError::BadSpec)?;
        let name = model.spec().name.clone();
        let text = serde_json::to_string_pretty(table).expect("a cost table serializes");
        self.host(model)?;
        Arc::make_mut(&mut self.model_cost_tables).insert(name, Arc::new(text));
        Ok(())
    }

    /// Serve the stateful `model` on `/llm` too, beside SmolLM2: conversations whose `open`
    /// frame carries its id run its blocks, batched with `--llm-batch`, their states held
    /// against the same `--llm-kv-mib`; `/api/info`'s `sequence_models` lists it. `end_token`
    /// ends the answers this server generates for it (cloud-only and plain placements). Call
    /// before the state is handed to [`crate::config_app`].
    ///
    /// # Errors
    /// Its id or name is a hosted model's, or its batching threads did not start.
    pub fn host_sequence<M: split_shared::runtime::SequenceModel + 'static>(
        &mut self,
        model: Arc<M>,
        end_token: Option<u32>,
    ) -> Result<()> {
        Arc::make_mut(&mut self.sequences).host(model, end_token)
    }

    /// The cost table (JSON text) of the hosted model called `name`, when it has one.
    pub fn cost_table_of(&self, name: &str) -> Option<&Arc<String>> {
        if name == split_shared::model::LITE0_NAME {
            return self.cost_table.as_ref();
        }
        self.model_cost_tables.get(name)
    }

    /// `load` with the server's congestion price now: the requests ahead of a new one over
    /// the workers, of every hosted model, averaged over `--price-smoothing-s`, times the
    /// schedule's factor for this hour.
    pub fn priced(
        &self,
        load: split_shared::protocol::ServerLoad,
    ) -> split_shared::protocol::ServerLoad {
        let price = self.price_now();
        split_shared::protocol::ServerLoad {
            price_milli: (price * 1e3).round().clamp(0.0, f64::from(u32::MAX)) as u32,
            ..load
        }
    }

    /// The congestion price now ([`Self::priced`]).
    pub fn price_now(&self) -> f64 {
        let (ahead, workers) = self.models.engines().fold((0, 0), |(a, w), e| {
            let l = e.load();
            (a + usize::from(l.queued), w + e.workers())
        });
        let per_worker = ahead as f64 / workers.max(1) as f64;
        self.pricing.price(std::time::Instant::now(), per_worker, crate::price::utc_hour())
    }

    /// Start shutting down: every session closes (1012) after its current request, and
    /// `/readyz` answers 503 from now on.
    pub fn begin_drain(&self) {
        self.drain.send_replace(true);
    }

    /// Whether [`Self::begin_drain`] was called.
    pub fn draining(&self) -> bool {
        *self.drain.borrow()
    }

    /// Why the server should not get new clients now, if it should not: shutting down, a
    /// model worker gone, or the queue at [`Self::ready_queue`].
    pub fn not_ready(&self) -> Option<String> {
        let engines = self.models.engines();
        let (alive, workers, queued) = engines.fold((0, 0, 0), |(a, w, q), e| {
            (a + e.workers_alive(), w + e.workers(), q + e.queued())
        });
        if self.draining() {
            Some("shutting down".into())
        } else if alive < workers {
            Some(format!("{} of {workers} model workers stopped", workers - alive))
        } else if queued >= self.ready_queue {
            Some(format!("{queued} requests queued (ready below {})", self.ready_queue))
        } else {
            None
        }
    }
}
