//! `GET /api/info`: what a client needs to know before its first frame. The struct is the
//! contract with `web/split-client.js` (which reads these field names), so it is typed here
//! rather than assembled as loose JSON.

use std::collections::BTreeMap;

use serde::Serialize;
use split_shared::codec::{Calibration, SUPPORTED_BITS, Setting};
use split_shared::model::{BoundaryInfo, NUM_BOUNDARIES, boundary_table};
use split_shared::protocol::{
    LLM_PROTOCOL_VERSION, MAX_FRAME_BYTES, MAX_HIDDEN_ROWS, MAX_LLM_FRAME_BYTES, MODEL_SMOLLM2,
    PROTOCOL_VERSION,
};
use split_shared::runtime::ModelSpec;

use crate::state::AppState;

/// Where browsers fetch the calibration.
pub const CALIBRATION_URL: &str = "/calibration/efficientnet-lite0.splc";
/// Where browsers fetch the weights.
pub const WEIGHTS_URL: &str = "/weights/efficientnet-lite0.splw";
/// Where clients fetch the planner's cost table.
pub const COST_TABLE_URL: &str = "/api/cost-table";

/// The server's answer to `GET /api/info`.
#[derive(Debug, Serialize)]
pub struct ServerInfo {
    /// The codec calibration, when the server has one (else only f32 features are accepted).
    pub calibration: Option<CalibrationInfo>,
    /// The codec setting clients should use unless told otherwise.
    pub default_codec: Setting,
    /// Where the cost table is, when the server has one.
    pub cost_table_url: Option<&'static str>,
    /// The wire protocol version this server speaks.
    pub protocol_version: u16,
    /// Largest WebSocket message accepted.
    pub max_frame_bytes: usize,
    /// The model served on `/ws` to clients that name none (its byte in every frame is 1).
    pub model: &'static str,
    /// Every model `/ws` serves, by the id a frame's model byte carries: name, boundaries
    /// (each with one item's shape), batch limit, codec, cost table. The first is `model`.
    pub models: Vec<ModelInfo>,
    /// The device the cloud half runs on.
    pub device: &'static str,
    /// The CPU kernels' instruction set on this machine (`Avx512Zmm`, `Avx512`, `Avx2`,
    /// `Portable`): which `split_kernels::Isa::detect` chose at start.
    pub kernels: String,
    /// Where the weights are.
    pub weights_url: &'static str,
    /// The weights file's size: clients show download progress with it (the response may be
    /// compressed, without a length).
    pub weights_bytes: u64,
    /// The weights file's checksum (hex): what a client caches the file under, so a revisit
    /// downloads nothing until the server's weights change.
    pub weights_id: String,
    /// The same weights cut per stage, in forward order: a client that runs the network only
    /// up to its split downloads the shards of those stages.
    pub weights_shards: Vec<crate::shards::PartInfo>,
    /// The light model a client may run during an outage instead of downloading the full
    /// weights of the stages after its split; absent with `--light-model none`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub light_model: Option<LightInfo>,
    /// Every boundary with its shape, MACs and parameter bytes.
    pub boundaries: &'static [BoundaryInfo; NUM_BOUNDARIES],
    /// The language model a client may split with this server on `/llm`; absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm: Option<LlmInfo>,
    /// The congestion price now, what it averages over and its schedule (replies and pongs
    /// carry the price of their moment: `load.price`).
    pub price: PriceInfo,
    /// The encrypted classifier (`/encrypted`): its parameter set and limits.
    pub encrypted: EncryptedInfo,
    /// Every stateful model `/llm` serves, by the id its `open` frame carries (SmolLM2 first
    /// when loaded; `llm` says more of it).
    pub sequence_models: Vec<SequenceModelInfo>,
    /// The site's version (`crate::site`): what the page, client, wasm builds, weights and
    /// cost table served now belong to; the offline start's caches are named by it.
    pub site: String,
}

/// The server's congestion price (`/api/info`'s `price`, [`crate::price`]).
#[derive(Debug, Serialize)]
pub struct PriceInfo {
    /// What a millisecond of the server's compute costs now (1 on an idle server by day).
    pub now: f64,
    /// Seconds the load is averaged over.
    pub smoothing_s: f64,
    /// The stretches of the day (UTC) with a factor of their own; other hours cost 1.
    pub schedule: Vec<crate::price::PriceHours>,
}

/// `/api/info`'s `encrypted`: where and how the classifier runs on ciphertext.
#[derive(Debug, Serialize)]
pub struct EncryptedInfo {
    /// The socket.
    pub url: &'static str,
    /// Its frames' version.
    pub protocol_version: u16,
    /// The parameter set and layout frames must name.
    pub parameters: u8,
    /// Ciphertexts in a classify frame (the layout's baby steps).
    pub parts: usize,
    /// Largest evaluation key accepted.
    pub max_key_bytes: usize,
    /// Largest ciphertext accepted.
    pub max_ciphertext_bytes: usize,
    /// One weight level of the integer classifier: the decrypted logits times it and the
    /// feature step (6/255) are the network's.
    pub weight_step: f32,
}

/// A stateful model `/llm` serves (`/api/info`'s `sequence_models`).
#[derive(Debug, Serialize)]
pub struct SequenceModelInfo {
    /// Its id (the `open` frame's model byte).
    pub id: u8,
    /// Its name.
    pub name: String,
    /// Its blocks (a conversation opens a range of them).
    pub blocks: usize,
    /// Values per hidden state.
    pub width: usize,
    /// Scores its head gives per row.
    pub vocab: usize,
    /// Positions one conversation may open with here (the server's cap or the model's
    /// context, the smaller).
    pub max_positions: u32,
}

/// A model `/ws` serves (`/api/info`'s `models`).
#[derive(Debug, Serialize)]
pub struct ModelInfo {
    /// Its id, name, boundaries and batch limit.
    #[serde(flatten)]
    pub spec: ModelSpec,
    /// The codec setting its features should travel in.
    pub default_codec: Setting,
    /// Where its cost table is, when the server has one for it: `/api/cost-table` for
    /// EfficientNet-Lite0, `/api/models/<name>/cost-table` (the name percent-encoded) for the
    /// others.
    pub cost_table_url: Option<String>,
}

/// Where the cost table of the model called `name` is served (besides
/// [`COST_TABLE_URL`] for EfficientNet-Lite0's): `/api/models/<name>/cost-table`, every byte
/// of the name outside `A-Z a-z 0-9 - . _ ~` percent-encoded.
pub fn model_cost_table_url(name: &str) -> String {
    let mut url = String::from(MODELS_URL);
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            url.push(char::from(b));
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    url + "/cost-table"
}

/// The folder of per-model resources.
pub const MODELS_URL: &str = "/api/models/";

/// The language model (`/api/info`'s `llm`): what a client needs to open a conversation.
#[derive(Debug, Serialize)]
pub struct LlmInfo {
    /// The socket.
    pub url: &'static str,
    /// The model's name.
    pub model: &'static str,
    /// Its id in the open frame.
    pub model_id: u8,
    /// The `/llm` frames' version.
    pub protocol_version: u16,
    /// Transformer blocks (a conversation opens a range of them).
    pub layers: usize,
    /// Values per hidden state.
    pub width: usize,
    /// Positions one conversation may reserve.
    pub max_positions: u32,
    /// Most rows in one hidden-state frame.
    pub max_rows: u32,
    /// Largest frame accepted.
    pub max_frame_bytes: usize,
    /// Where a browser gets the model's share it runs: this, then the number of blocks
    /// (`/llm/edge/4`: the tokenizer, the embedding, the final norm and blocks 0..4).
    pub edge_url: &'static str,
    /// What clients cache those shares under (a hash of the model file).
    pub file_id: String,
    /// The model's metadata without weights (the tokenizer and the chat format): all a
    /// cloud-only client needs.
    pub tokenizer_url: &'static str,
    /// Where a conversation may put the blocks and the head: `split` (the client keeps the
    /// first blocks and the head), `plain` (the server runs the head), `cloud` (the server runs
    /// everything, from token ids).
    pub placements: [&'static str; 3],
    /// What a block and the head cost on this server, measured when it loaded the model: what
    /// a client's placement planner weighs against its own ([`split_shared::plan::plan_llm`]).
    pub costs: split_shared::plan::LlmSideCosts,
    /// Bytes of each share a browser may download: `share_bytes[k]` holds `k` blocks (the last,
    /// every block: the whole model).
    pub share_bytes: Vec<usize>,
    /// Bytes of the tokenizer alone (cloud-only's download).
    pub tokenizer_bytes: usize,
}

/// The light model (`/api/info`'s `light_model`).
#[derive(Debug, Serialize)]
pub struct LightInfo {
    /// Its precision: `int8`, `int4-g<N>`.
    pub precision: String,
    /// Its shards per stage, in forward order (as `weights_shards`).
    pub shards: Vec<crate::shards::PartInfo>,
}

/// The calibration a client must load to send coded features.
#[derive(Debug, Serialize)]
pub struct CalibrationInfo {
    /// Where to fetch it.
    pub url: &'static str,
    /// Its id (hex), which every coded frame carries; also what clients cache it under.
    pub id: String,
    /// Its size in bytes (for progress).
    pub bytes: u64,
    /// Images it was fitted on.
    pub images: u32,
    /// Boundaries it has tables for.
    pub boundaries: Vec<String>,
    /// Bit depths supported.
    pub bits: [u8; SUPPORTED_BITS.len()],
    /// Per boundary, the largest projection rank calibrated (0: none).
    pub max_rank: BTreeMap<String, usize>,
    /// The same calibration cut per boundary: a client that codes at one boundary downloads
    /// that part (each carries the whole file's id, which frames name).
    pub parts: Vec<crate::shards::PartInfo>,
}

/// A served file's size and the checksum its container ends with (8 bytes, little-endian).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileIdentity {
    /// Size in bytes.
    pub bytes: u64,
    /// The checksum, 16 hex digits.
    pub id: String,
}

impl FileIdentity {
    /// Read `path`'s size and trailing checksum.
    ///
    /// # Errors
    /// When the file cannot be read or is shorter than a checksum.
    pub fn of(path: &std::path::Path) -> std::io::Result<Self> {
        use std::io::{Read, Seek, SeekFrom};
        let mut file = std::fs::File::open(path)?;
        let bytes = file.metadata()?.len();
        if bytes < 8 {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "no checksum"));
        }
        file.seek(SeekFrom::End(-8))?;
        let mut tail = [0u8; 8];
        file.read_exact(&mut tail)?;
        Ok(Self { bytes, id: format!("{:016x}", u64::from_le_bytes(tail)) })
    }
}

impl CalibrationInfo {
    fn of(c: &Calibration, path: &std::path::Path, parts: &crate::shards::Parts) -> Self {
        let rank =
            |b: &str| c.at(b).and_then(|t| t.pca.as_ref()).map_or(0, |p| p.projection.max_rank);
        Self {
            url: CALIBRATION_URL,
            id: format!("{:016x}", c.id()),
            bytes: std::fs::metadata(path).map_or(0, |m| m.len()),
            images: c.images(),
            boundaries: c.boundaries().map(str::to_string).collect(),
            bits: SUPPORTED_BITS,
            max_rank: c.boundaries().map(|b| (b.to_string(), rank(b))).collect(),
            parts: parts.manifest(),
        }
    }
}

impl ServerInfo {
    /// What this server tells clients.
    pub fn of(state: &AppState) -> Self {
        let calibration = state
            .calibration
            .as_ref()
            .map(|(c, path)| CalibrationInfo::of(c, path, &state.calibration_parts));
        let default_codec =
            state.calibration.as_ref().map_or(Setting::F32, |(c, _)| c.default_setting());
        Self {
            calibration,
            default_codec,
            cost_table_url: state.cost_table.as_ref().map(|_| COST_TABLE_URL),
            protocol_version: PROTOCOL_VERSION,
            max_frame_bytes: MAX_FRAME_BYTES,
            model: split_shared::model::LITE0_NAME,
            models: state
                .models
                .registry()
                .iter()
                .map(|m| ModelInfo {
                    spec: m.spec().clone(),
                    default_codec: m.default_codec(),
                    cost_table_url: state.cost_table_of(&m.spec().name).map(|_| {
                        if m.spec().name == split_shared::model::LITE0_NAME {
                            COST_TABLE_URL.to_string()
                        } else {
                            model_cost_table_url(&m.spec().name)
                        }
                    }),
                })
                .collect(),
            device: state.device_name,
            kernels: format!("{:?}", split_kernels::Isa::detect()),
            weights_url: WEIGHTS_URL,
            weights_bytes: state.weights_file.bytes,
            weights_id: state.weights_file.id.clone(),
            weights_shards: state.weight_shards.manifest(),
            light_model: state.light_model.map(|p| LightInfo {
                precision: p.to_string(),
                shards: state.light_shards.manifest(),
            }),
            boundaries: boundary_table(),
            llm: state.llm.as_ref().map(|host| LlmInfo {
                url: "/llm",
                model: split_shared::models::smollm2::SMOLLM2_NAME,
                model_id: MODEL_SMOLLM2,
                protocol_version: LLM_PROTOCOL_VERSION,
                layers: host.model.config.layers,
                width: host.model.config.dim,
                max_positions: state.sequences.max_positions(
                    split_shared::runtime::SequenceModel::sequence_spec(&*host.model),
                ),
                max_rows: MAX_HIDDEN_ROWS,
                max_frame_bytes: MAX_LLM_FRAME_BYTES,
                edge_url: crate::llm_edge::LLM_EDGE_URL,
                file_id: host.file_id.clone(),
                tokenizer_url: crate::llm_edge::LLM_TOKENIZER_URL,
                placements: ["split", "plain", "cloud"],
                costs: host.costs,
                share_bytes: host.share_bytes.clone(),
                tokenizer_bytes: host.tokenizer.len(),
            }),
            price: PriceInfo {
                now: state.price_now(),
                smoothing_s: state.pricing.smoothing_s(),
                schedule: state.pricing.schedule().to_vec(),
            },
            encrypted: EncryptedInfo {
                url: "/encrypted",
                protocol_version: split_shared::protocol::ENCRYPTED_PROTOCOL_VERSION,
                parameters: split_shared::protocol::PARAMETERS_ID,
                parts: split_shared::encrypted::layout::BABY,
                max_key_bytes: split_shared::protocol::MAX_KEY_BYTES,
                max_ciphertext_bytes: split_shared::protocol::MAX_CIPHERTEXT_BYTES,
                weight_step: state.encrypted.weight_step(),
            },
            sequence_models: state
                .sequences
                .iter()
                .map(|m| {
                    let spec = m.spec();
                    SequenceModelInfo {
                        id: spec.id,
                        name: spec.name.clone(),
                        blocks: spec.blocks,
                        width: spec.width,
                        vocab: spec.vocab,
                        max_positions: state.sequences.max_positions(spec),
                    }
                })
                .collect(),
            site: state.site.to_string(),
        }
    }
}
