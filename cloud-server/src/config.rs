//! Operator-facing configuration: flags, each with an environment variable.

use std::path::PathBuf;

/// Which burn device runs the cloud half.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceChoice {
    /// Pure-Rust CPU backend; works everywhere.
    Flex,
    /// GPU through wgpu; needs the `wgpu` cargo feature and a working Vulkan/Metal/DX12 driver.
    Wgpu,
}

/// Server configuration.
#[derive(Clone, Debug, clap::Parser)]
#[command(version, about = "Cloud half of split EfficientNet-Lite0 inference, and the demo page")]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "SPLIT_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, env = "SPLIT_PORT", default_value_t = 8080)]
    pub port: u16,
    /// Converted weights file (made by `cargo xtask setup`).
    #[arg(long, env = "SPLIT_WEIGHTS")]
    pub weights: Option<PathBuf>,
    /// Codec calibration file (made by `cargo xtask setup` or `calibrate`); without it only
    /// uncompressed f32 features are accepted.
    #[arg(long, env = "SPLIT_CALIBRATION")]
    pub calibration: Option<PathBuf>,
    /// The light model published for clients' outages (`/weights/light/`): `int8`, `int4-g<N>`,
    /// or `none`. int8 keeps 99.2% top-1 agreement after block5 at a quarter of the bytes
    /// (docs/resilience.md).
    #[arg(long, env = "SPLIT_LIGHT_MODEL", default_value = "int8", value_parser = parse_light)]
    pub light_model: LightModel,
    /// Cost table served to clients for split planning (made by `./run.sh profile`).
    #[arg(long, env = "SPLIT_COST_TABLE")]
    pub cost_table: Option<PathBuf>,
    /// Serve the cost table's cloud figures as written. By default the server times the
    /// network's tail from a few boundaries at start (about a tenth of a second) and scales the
    /// table's cloud column by the ratio: the table may come from another machine.
    #[arg(long, env = "SPLIT_KEEP_COST_TABLE")]
    pub keep_cost_table: bool,
    /// Results kept in the content-keyed cache (0 disables it).
    #[arg(long, env = "SPLIT_CACHE_ENTRIES", default_value_t = 4096)]
    pub cache_entries: usize,
    /// Folder with the demo page and the wasm package.
    #[arg(long, env = "SPLIT_WEB_DIR")]
    pub web_dir: Option<PathBuf>,
    /// Device for the model.
    #[arg(long, env = "SPLIT_DEVICE", value_enum, default_value_t = DeviceChoice::Flex)]
    pub device: DeviceChoice,
    /// Model worker threads, each with its own copy of the network.
    #[arg(long, env = "SPLIT_WORKERS", default_value_t = 1)]
    pub workers: usize,
    /// Requests that may wait for a worker before new ones are refused with `busy`.
    #[arg(long, env = "SPLIT_QUEUE", default_value_t = 64)]
    pub queue: usize,
    /// Most waiting requests (from the same boundary) one forward pass takes; 1 runs each
    /// request alone. At most the model's batch limit, 4.
    #[arg(long, env = "SPLIT_BATCH", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=4))]
    pub batch: u16,
    /// Microseconds a model worker waits, after taking a request, for more from the same
    /// boundary to run in the same pass (Triton's `max_queue_delay`). 0: only what is already
    /// waiting is batched.
    #[arg(long, env = "SPLIT_BATCH_DELAY_US", default_value_t = 0)]
    pub batch_delay_us: u64,
    /// `/readyz` answers 503 (a load balancer sends new clients elsewhere) while this many
    /// requests or more wait for a worker. Default: half of `--queue`.
    #[arg(long, env = "SPLIT_READY_QUEUE")]
    pub ready_queue: Option<usize>,
    /// Seconds a shutdown (SIGTERM, Ctrl-C) waits for requests in flight; each session is
    /// closed with 1012 "service restart" (clients reconnect, to another replica behind a
    /// balancer) once its current request is answered.
    #[arg(long, env = "SPLIT_SHUTDOWN_TIMEOUT", default_value_t = 10)]
    pub shutdown_timeout: u64,
    /// Share cached results between sessions. Off by default: a shared cache answers a repeat
    /// of another session's content at once, which tells the second client what the first one
    /// classified. Turn it on only when every client is the same party.
    #[arg(long, env = "SPLIT_SHARED_CACHE")]
    pub shared_cache: bool,
    /// Web origins (`https://app.example.com`) whose pages may open `/ws` and read this
    /// server's files (CORS: the client's package, `/api/info`, the weights); `*` allows any.
    /// By default only pages served by this server (same host) and clients that send no
    /// Origin (native tools) may: any other page a visitor opens could otherwise drive a server
    /// on their machine or intranet.
    #[arg(long = "allow-origin", env = "SPLIT_ALLOW_ORIGINS", value_delimiter = ',')]
    pub allow_origins: Vec<String>,
    /// Host names (the `Host` header) this server answers to, comma-separated; `.example.com`
    /// allows its subdomains too, `*` any name. Default: the loopback names and the `--host`
    /// address; needed when `--host` is every interface (`0.0.0.0`, `::`). Against DNS
    /// rebinding: a page of another site cannot reach a server on its visitor's machine or
    /// network under a name of its own. Probes and metrics (`/livez`, `/readyz`, `/metrics`)
    /// answer any name.
    #[arg(long = "allowed-hosts", env = "SPLIT_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// Addresses (or CIDR networks, `10.244.0.0/16`) of the reverse proxies or load balancers in
    /// front of this server. For a connection from one of them the client's address is the last one in `X-Forwarded-For`
    /// (the address the proxy saw), so the per-address limits count clients, not the proxy.
    /// From any other address the header is ignored: never list an address clients can
    /// connect from directly, or they could pick their own.
    #[arg(long = "trusted-proxy", env = "SPLIT_TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Vec<crate::ipnet::IpNet>,
    /// Open WebSockets in all; each may buffer one message of up to 8 MiB, so this bounds the
    /// memory a crowd of connections can pin. Further ones get 503.
    #[arg(long, env = "SPLIT_MAX_CONNECTIONS", default_value_t = 256)]
    pub max_connections: usize,
    /// Open WebSockets from one client address (behind a proxy every client has the proxy's).
    #[arg(long, env = "SPLIT_MAX_CONNECTIONS_PER_IP", default_value_t = 32)]
    pub max_connections_per_ip: usize,
    /// Requests per second one client address may send over its WebSockets (a second's worth
    /// may come at once); beyond it requests get `rate_limited` and the session stays open.
    /// Behind a proxy every client has the proxy's address. 0: no limit.
    #[arg(long, env = "SPLIT_RATE_LIMIT", default_value_t = 100)]
    pub rate_limit: u32,
    /// The congestion price's schedule, UTC hours: `"0-7:0.5,23-24:0.5"` makes the server's
    /// compute cost half at night (hours not named cost 1). Clients price the server's time by
    /// it (docs/adaptive.md, "The server's price").
    #[arg(long, env = "SPLIT_PRICE_SCHEDULE", default_value = "", value_parser = parse_price_schedule)]
    pub price_schedule: PriceSchedule,
    /// Seconds the congestion price averages the server's load over (0: the load of the
    /// moment).
    #[arg(long, env = "SPLIT_PRICE_SMOOTHING_S", default_value_t = 10.0)]
    pub price_smoothing_s: f64,
    /// Seconds a reply may wait for a client that stopped reading (its socket buffers full)
    /// before the session is closed.
    #[arg(long, env = "SPLIT_WRITE_TIMEOUT", default_value_t = 10)]
    pub write_timeout: u64,
    /// Bytes of camera-stream references one session keeps (a stem keyframe is 392 KiB, a
    /// block5 one 31 KiB); older streams are forgotten to fit, and their next deltas get
    /// `keyframe_required`.
    #[arg(long, env = "SPLIT_STREAM_BYTES_PER_SESSION", default_value_t = 1 << 20)]
    pub stream_bytes_per_session: usize,
    /// Bytes of memory the stream references of all sessions may hold together (each byte of
    /// symbols counted as the 1.3 bytes it measured to cost with the allocator's slack). A
    /// session whose keyframe goes over it loses its references (its deltas then get
    /// `keyframe_required`, so it streams keyframes only until others leave).
    #[arg(long, env = "SPLIT_STREAM_BYTES_TOTAL", default_value_t = 64 << 20)]
    pub stream_bytes_total: usize,
    /// SmolLM2's GGUF file, for the language model's split (`/llm`). Default: the one
    /// `./run.sh setup` fetched, when it is there (without it `/llm` refuses every
    /// conversation); a file named here must load.
    #[arg(long, env = "SPLIT_LLM")]
    pub llm: Option<PathBuf>,
    /// Most positions (prompt and answer) one `/llm` conversation may reserve KV cache for.
    #[arg(long, env = "SPLIT_LLM_POSITIONS", default_value_t = 2048)]
    pub llm_positions: u32,
    /// MiB of KV cache all `/llm` conversations may reserve together; a conversation that
    /// would go over it is refused (`kv_budget`) until others end.
    #[arg(long, env = "SPLIT_LLM_KV_MIB", default_value_t = 256)]
    pub llm_kv_mib: usize,
    /// Seconds a `/llm` conversation must have sat idle before a new conversation that does
    /// not fit the KV budget may take its cache (the idle one gets `evicted` and its socket
    /// closes; the least recently active go first, and only if that makes room). 0: never.
    #[arg(long, env = "SPLIT_LLM_EVICT_AFTER", default_value_t = 10)]
    pub llm_evict_after: u64,
    /// MiB all `/encrypted` sessions' evaluation keys may hold together (a key of the
    /// layout's two rotations: 335 kB, held as sent); a key that does not fit, even after
    /// taking idle sessions' keys, is refused (`key_budget`).
    #[arg(long, env = "SPLIT_ENCRYPTED_KEY_MIB", default_value_t = 64)]
    pub encrypted_key_mib: usize,
    /// Seconds an `/encrypted` session must have sat idle before a new session's key that
    /// does not fit the budget may take its key (the idle session is told `evicted` and may
    /// send its key again). 0: never.
    #[arg(long, env = "SPLIT_ENCRYPTED_EVICT_AFTER", default_value_t = 30)]
    pub encrypted_evict_after: u64,
    /// Batch `/llm` conversations' steps together (continuous batching, one batching thread
    /// per core; each answer bit for bit the same) instead of running each conversation's
    /// steps on its own. Off by default: on the 2-core reference machine it answered more
    /// tokens a second only with the server's core kept from the load tool (docs/llm.md).
    #[arg(long, env = "SPLIT_LLM_BATCH")]
    pub llm_batch: bool,
    /// Multiply `/llm` decode steps (fewer than four rows) with activations quantized to 8 bits
    /// per value and integer dot products, as llama.cpp does: faster on a CPU, and an answer
    /// may part from the exact kernels' after a few tokens (docs/llm.md, "Speed"). Off by
    /// default: the exact kernels give the reference's answers.
    #[arg(long, env = "SPLIT_LLM_Q8")]
    pub llm_q8: bool,
    /// With `--llm-batch`: rows of a prompt one batch runs (at least 4); the rest go in the
    /// next batches, between the other conversations' decode steps.
    #[arg(long, env = "SPLIT_LLM_PREFILL_CHUNK", default_value_t = 16)]
    pub llm_prefill_chunk: usize,
    /// PEM certificate chain: serve HTTPS and `wss://` (with `--tls-key`).
    #[arg(long, env = "SPLIT_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `--tls-cert`.
    #[arg(long, env = "SPLIT_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Listen without TLS on an address other than loopback. Images and features would cross
    /// the network in clear text, so this is refused unless asked for: use it behind a
    /// TLS-terminating proxy, or on a network you trust.
    #[arg(long, env = "SPLIT_ALLOW_PLAINTEXT")]
    pub allow_plaintext: bool,
    /// Require this bearer token on `/ws`: native clients send `Authorization: Bearer TOKEN`,
    /// browsers (which cannot set headers on a WebSocket) offer the subprotocol
    /// `bearer.TOKEN` beside `split.v1`. 16 to 256 characters of `A-Z a-z 0-9 . _ ~ -`.
    /// Prefer the environment variable: flags show in `ps`.
    #[arg(long, env = "SPLIT_TOKEN", hide_env_values = true, value_parser = Token::parse)]
    pub token: Option<Token>,
    /// Device groups (`/group`) held at once; a further `create` gets `too_many_groups`.
    #[arg(long, env = "SPLIT_MAX_GROUPS", default_value_t = 256)]
    pub max_groups: usize,
    /// Seconds a group's join code admits new devices after the group started.
    #[arg(long, env = "SPLIT_GROUP_CODE_TTL", default_value_t = split_shared::group::CODE_TTL_S)]
    pub group_code_ttl: u64,
}

/// A bearer token; its `Debug` output hides it so it never reaches a log.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    /// Characters a token may use: those a WebSocket subprotocol name can carry.
    fn parse(s: &str) -> Result<Token, String> {
        let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '~' | '-');
        if !(16..=256).contains(&s.len()) {
            return Err(format!("a token has 16 to 256 characters; this one has {}", s.len()));
        }
        if !s.chars().all(ok) {
            return Err("a token may use only A-Z a-z 0-9 . _ ~ -".into());
        }
        Ok(Token(s.to_string()))
    }

    /// Whether `offered` is this token, in time independent of where they differ.
    pub fn matches(&self, offered: &str) -> bool {
        use subtle::ConstantTimeEq;
        self.0.as_bytes().ct_eq(offered.as_bytes()).into()
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(hidden)")
    }
}

/// `--light-model`: the light model's precision, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LightModel(pub Option<split_shared::model::LightPrecision>);

/// `--light-model`: a precision, or `none` for no light model.
fn parse_light(s: &str) -> Result<LightModel, String> {
    if s == "none" {
        return Ok(LightModel(None));
    }
    s.parse()
        .map(|p| LightModel(Some(p)))
        .map_err(|e: split_shared::model::ModelError| e.to_string())
}

/// `--price-schedule`: the stretches of the day with a price factor of their own.
#[derive(Clone, Debug, PartialEq)]
pub struct PriceSchedule(pub Vec<crate::price::PriceHours>);

fn parse_price_schedule(s: &str) -> Result<PriceSchedule, String> {
    crate::price::parse_schedule(s).map(PriceSchedule)
}

impl Config {
    /// Defaults for tests and embedding: loopback, a free port, the default weights path.
    pub fn for_tests() -> Self {
        Self::for_tests_with(&[])
    }

    /// [`Self::for_tests`] with more flags, as an operator would pass them.
    pub fn for_tests_with(flags: &[&str]) -> Self {
        let args = ["cloud-server", "--port", "0"].iter().chain(flags);
        <Self as clap::Parser>::parse_from(args)
    }

    /// Refuse a configuration that would send clients' data in clear text over a network.
    ///
    /// # Errors
    /// A non-loopback `--host` without TLS and without `--allow-plaintext`.
    pub fn check_transport(&self) -> Result<(), String> {
        if self.tls_cert.is_none() && !self.allow_plaintext && !crate::tls::is_loopback(&self.host)
        {
            return Err(format!(
                "refusing to serve on {} without TLS: images and features would cross the network \
                 in clear text. Pass --tls-cert and --tls-key, or --allow-plaintext behind a \
                 TLS-terminating proxy",
                self.host
            ));
        }
        Ok(())
    }

    /// The weights path: the flag, else [`split_paths::weights_file`].
    pub fn weights_path(&self) -> PathBuf {
        self.weights.clone().unwrap_or_else(split_paths::weights_file)
    }

    /// The calibration path: the flag, else [`split_paths::calibration_file`].
    pub fn calibration_path(&self) -> PathBuf {
        self.calibration.clone().unwrap_or_else(split_paths::calibration_file)
    }

    /// The cost table path: the flag, else `profiles/cost-table.json` of the checkout.
    pub fn cost_table_path(&self) -> PathBuf {
        self.cost_table.clone().unwrap_or_else(|| checkout().join("profiles/cost-table.json"))
    }

    /// The web folder: the flag, else `web/` next to this crate.
    pub fn web_path(&self) -> PathBuf {
        self.web_dir.clone().unwrap_or_else(|| checkout().join("web"))
    }
}

/// The checkout this server runs from: `cargo run` sets `CARGO_MANIFEST_DIR` at run time, which
/// wins over the compile-time value (checkouts sharing a target directory share compiled units).
fn checkout() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join("..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked_and_never_printed() {
        let c = Config::for_tests_with(&["--token", "abcdefghijklmnop-1234"]);
        let t = c.token.as_ref().expect("token set");
        assert!(t.matches("abcdefghijklmnop-1234"));
        assert!(!t.matches("abcdefghijklmnop-1235"));
        assert!(!t.matches("abcdefghijklmnop-123"));
        assert!(!format!("{c:?}").contains("abcdefghijklmnop"));
        let parse = |flags: &[&str]| <Config as clap::Parser>::try_parse_from(flags);
        assert!(parse(&["cloud-server", "--token", "short"]).is_err());
        assert!(parse(&["cloud-server", "--token", "has space in it....."]).is_err());
    }

    #[test]
    fn the_light_model_is_int8_unless_told() {
        let name = |c: Config| c.light_model.0.map(|p| p.to_string());
        assert_eq!(name(Config::for_tests()).as_deref(), Some("int8"));
        assert_eq!(
            name(Config::for_tests_with(&["--light-model", "int4-g32"])).as_deref(),
            Some("int4-g32")
        );
        assert_eq!(name(Config::for_tests_with(&["--light-model", "none"])), None);
        let err =
            <Config as clap::Parser>::try_parse_from(["cloud-server", "--light-model", "int3"])
                .unwrap_err()
                .to_string();
        assert!(err.contains("int8 or int4-g"), "{err}");
    }
}
