// Type declarations for `split-client.js`, the embeddable browser API of split inference.
// Checked by `tsc` against `tests/types-check.ts` in `./run.sh test`.

/** Every failure of the client: a stable, machine-readable `code` and a message for developers.
 * Codes: "network", "timeout", "closed", "worker", "wasm_trap" (a panic in the wasm module: the message
 * says where), "unsupported_engine" (no WebAssembly SIMD; or, for "encrypted", a build without
 * relaxed SIMD), "unsupported_server" (a server without the encrypted classifier), "bad_option", "no_cost_table", "privacy_floor", "no_placement", "no_light_model", "webgpu_unavailable",
 * "bad_weights", "weights_missing", "bad_calibration", "backend", "internal", or an error code the server sent
 * ("malformed", "shape_mismatch", "bad_image", "busy", "rate_limited", "unknown_model", "calibration_mismatch",
 * "keyframe_required", "unsupported_codec", ...). */
export class SplitError extends Error {
  constructor(code: string, message: string);
  readonly name: "SplitError";
  readonly code: string;
}

/** Where a request runs: everything on the device, everything on the server, a split, or a
 * split whose features go encrypted (only with `Constraints.encrypted`). */
export type Placement =
  | { mode: "edge_only" }
  | { mode: "cloud_only" }
  | { mode: "split"; boundary: string; codec: string }
  | { mode: "encrypted"; boundary: string };

/** One of the top predictions. */
export interface Prediction {
  /** ImageNet class index. */
  class: number;
  /** Short class name. */
  name: string;
  /** Softmax probability. */
  prob: number;
}

/** The server's load, as replies carry it. */
export interface ServerLoad {
  /** Requests ahead of a new one: queued, or in a worker's batch and not yet answered. */
  queued: number;
  workers: number;
  /** Recent compute time per request (moving average), ms. */
  recentMs: number;
  /** Expected wait before a new request starts, ms. */
  waitMs: number;
  /** The server's congestion price: what a millisecond of its compute costs now, smoothed
   * (1 on an idle server by day); auto prices the server's time with it. */
  price: number;
}

/** A split boundary of the model. */
export interface BoundaryInfo {
  name: string;
  shape: number[];
  cumulativeMacs: number;
  bytesF32: number;
}

/** Limits for `split: "auto"`; the privacy floor binds every request. */
export interface Constraints {
  /** Never send features before this boundary (name or index), and never the image: auto
   * never places a request there, an explicit "cloud" or shallower split is refused with
   * `privacy_floor`, and an answer kept for the server during an outage is cut at the floor
   * or deeper. `"default"`: the measured floor, the earliest boundary whose features a
   * white-box attacker could not reconstruct into a recognisable photo (docs/privacy.md). */
  privacyFloor?: string | number;
  /** Never use a codec whose top-1 agreement with the uncompressed model may be below this:
   * held against the lower end of its 95% interval on the cost table's photos (default 0.98). */
  minAgreement?: number;
  /** Never hold more edge parameters than this many bytes. */
  maxEdgeParamBytes?: number | null;
  /** Only placements the server reads nothing of: the encrypted classifier (features
   * encrypted here, the classifier computed on the ciphertext) or edge-only. Without it auto
   * never encrypts. Refused where the server or this engine has no encrypted classifier
   * (`unsupported_server`, `unsupported_engine`). */
  encrypted?: boolean;
  /** What auto minimizes (docs/adaptive.md, "Goals beyond latency"): "latency" (the default), "battery" (the
   * device's energy: compute and radio), "data" (bytes sent) or "balanced" (all of them and
   * the server's cost). */
  mode?: "latency" | "battery" | "data" | "balanced";
  /** Weights of one's own instead of the mode's: the score is
   * `perMs × latency + perMj × energy + perKb × kB sent + perServer × server cost`. */
  weights?: { perMs: number; perMj: number; perKb: number; perServer: number } | null;
  /** The device's power while it computes, W (default 2.3). */
  deviceWatts?: number;
  /** The radio the energy is priced for (default "wifi"). */
  radio?: "wifi" | "lte" | "3g";
  /** Time between requests when they come regularly, ms: the radio's tail is then shared. */
  requestIntervalMs?: number | null;
  /** What a millisecond of the server's compute costs (default 1). */
  serverPrice?: number;
  /** The real-time class: "hard" never places a request where it is predicted past the
   * deadline (default 100 ms), "soft" (300 ms) and "near" (1,000 ms) prefer those within it,
   * "batch" has none and lets latency only break ties. */
  realtime?: { class: "hard" | "soft" | "near" | "batch"; deadlineMs?: number | null } | null;
}

/** The goal part of `Constraints`, as `setObjective` changes it. */
export type Objective = Pick<Constraints, "mode" | "weights" | "deviceWatts" | "radio" | "requestIntervalMs" | "serverPrice" | "realtime">;

/** Progress of `SplitClient.create`. */
export interface Progress {
  stage: "wasm" | "weights" | "light-weights" | "llm-weights" | "calibration" | "warm-up" | "profiling" | "link" | "ready";
  fraction: number | null;
  loaded?: number;
  total?: number;
  /** Weights or calibration: read from Cache Storage, nothing downloaded. */
  cached?: boolean;
}

/** A logged change of placement in auto mode. */
export interface Switch {
  decision: "switch";
  atMs: number;
  from: Placement | null;
  to: Estimate;
  reason: string;
}

/** A placement's predicted latency, broken down. */
export interface Estimate {
  placement: Placement;
  /** Stages on the edge. */
  depth: number;
  edgeMs: number;
  transferMs: number;
  rttMs: number;
  queueMs: number;
  cloudMs: number;
  totalMs: number;
  bytes: number;
  agreement: number;
  /** The device's energy for its compute and its radio, mJ. */
  computeMj: number;
  radioMj: number;
  /** The server's milliseconds × its price. */
  serverCost: number;
  /** What the planner ranks by, lower first: the latency in "latency" mode. */
  score: number;
}

/** The WebSocket to the server. It opens on the first request that needs the server. */
export interface ConnectionState {
  /** "idle": never opened; "reconnecting": the server restarts (close 1012) and unanswered
   * requests go again on a new connection; "unreachable": the last attempt failed, the next
   * one waits `retryInMs` (requests meanwhile fail at once; "auto" runs them locally). */
  state: "idle" | "connecting" | "open" | "reconnecting" | "unreachable" | "closed";
  /** "unreachable": how long until the next attempt, ms (0.5 s doubling to 8 s). */
  retryInMs?: number;
  /** "closed": the WebSocket close code and reason. */
  code?: number;
  reason?: string;
}

export interface CreateOptions {
  /** Where the server is (default: this page's origin). */
  baseUrl?: string;
  /** Where the package's own files are served (its `client/` and `pkg*` folders), when an app
   * bundles `split-client.js` into its code and copies the package elsewhere: a bundler moves
   * `import.meta.url` to the bundle (default: the folder `split-client.js` is in). Another
   * origin than the page's works when the server allows it (`--allow-origin`): the worker
   * then starts from a `blob:` module, without the threaded builds. */
  assetBase?: string;
  /** The offline start: a service worker keeps the page, the client, its wasm build,
   * `/api/info` and the cost table, so that a reload with the server out of reach starts
   * and answers with the weights this browser holds (the light model for the rest, once an
   * `auto` request loaded it). `true` registers `sw.js` from the package's root,
   * whose scope is that folder; an app whose pages are elsewhere serves its own copy of
   * `sw.js` and names it (`serviceWorker`, and `scope` if not the script's folder).
   * Off by default. `client.capabilities.offline` says whether it worked, or why not. */
  offline?: boolean | { serviceWorker?: string; scope?: string };
  /** The WebSocket, when it goes elsewhere (default: baseUrl + "ws"). */
  wsUrl?: string;
  /** "auto" (default): WebGPU if it works, else the CPU. */
  backend?: "auto" | "webgpu" | "cpu";
  /**
   * Which of the model's weights to download before `create` resolves: "all" (default; edge
   * only works at once, and offline), "none" (a cloud-only page: no weights, no codec tables),
   * or a boundary such as "block5" (the stages up to it: 2% of the bytes at block5). Stages a
   * request needs beyond those are downloaded when it first runs (progress through
   * `onProgress`); from the first `split: "auto"` request on, the light model's shards of the
   * rest download in the background (see `fallback`), since auto answers on the device when
   * the link fails. Each is kept in Cache Storage under its checksum: a second visit
   * downloads nothing.
   */
  weights?: "all" | "none" | string;
  /**
   * What answers in auto mode when the server cannot, for the stages this device lacks:
   * "light" (default when the server publishes a light model): the int8 light model (4.3 MB
   * after block5; 99.2% top-1 agreement with the full model on the dev set), answers marked
   * `quality: "reduced"` and finished by the server later (`onUpdate`); "full": the full
   * weights of every stage (17 MB after block5), answers always full.
   */
  fallback?: "light" | "full";
  /**
   * The side, in pixels, of the input the light model's answers run on (outages, and the first
   * answer of a progressive request): 224 (default) runs it on the photo as the network takes
   * it (or finishes the request's own features); smaller runs the stages this device holds on
   * a smaller copy of the photo from the start, at a cost in proportion to its area (128: a
   * third of the compute) and with less agreement (docs/training.md measures it). 32 to 224;
   * anything else is refused with "bad_option".
   */
  lightInput?: number;
  /**
   * The model, by the name `/api/info`'s `models` lists (default: the server's first,
   * "efficientnet-lite0"). A name the server does not host is refused with "unknown_model";
   * one it hosts without a browser half in this client (docs/models.md) with "bad_option".
   */
  model?: string;
  /** Noise on every request's features (see `ClassifyOptions.noise`). */
  noise?: string;
  /** Called with a newer version of a result: the light model's answer first (`progressive`),
   * or the server's answer to a result given reduced (after an outage, even after a reload:
   * `id` is then one an earlier page got). Versions only go up. */
  onUpdate?: (u: ResultUpdate) => void;
  onProgress?: (p: Progress) => void;
  /** How long a request waits for the server, connecting included, ms (default 30000). */
  timeoutMs?: number;
  /** Results remembered by content (default 256; 0: off). */
  cacheEntries?: number;
  /** The server's bearer token, when it was started with `--token` (sent as the WebSocket
   * subprotocol `bearer.TOKEN`; browsers cannot set headers on a WebSocket). */
  token?: string;
  constraints?: Constraints;
  /** Called with each placement change of auto mode. */
  onSwitch?: (s: Switch) => void;
  /** Measure the link before `create` resolves (default true, where the server publishes a cost
   * table): the socket opens and a ping and a 16 kB uplink probe cross it (at most 3 s), so
   * auto mode's first request is planned on this link, not on defaults. */
  linkProbe?: boolean;
  /** Called as the WebSocket to the server changes state. */
  onConnection?: (s: ConnectionState) => void;
  /** Force one build of the module (benchmarks). */
  wasmBuild?: WasmBuild;
  /** Run the client (module, weights, edge compute, connection) in a Web Worker, so the page
   * never waits on an edge run. Default: true on a page that can start one. */
  worker?: boolean;
  /** How long a call into the worker may go without an answer or an event, ms (default
   * 120000); after it the call fails with "timeout", and a worker that then does not answer a
   * ping is stopped: its calls fail with "worker". */
  workerTimeoutMs?: number;
}

export interface ClassifyOptions {
  /** "f32", "q<bits>[-r<rank>][-packed]" or "s<level>" (0–24); default: the server's recommendation. */
  codec?: string;
  /** Code against the previous frame (camera streams). */
  stream?: boolean;
  /** Wait this long for the server, ms (default: `timeoutMs`). */
  deadlineMs?: number;
  /** "cloud" only: the image is already the 224x224 model input. */
  modelInput?: boolean;
  /** The result's id (default: a fresh random one); updates of this result carry it. */
  id?: string;
  /** Answer with the light model at once (through `onUpdate`, version 1) while the server
   * computes the full answer (version 2); when the server fails, the light answer stands
   * and its features wait in the backlog. Needs the light model loaded (its download starts
   * on the first progressive request). */
  progressive?: boolean;
  /** A name kept with a backlog entry (e.g. the file name), returned in its update. */
  label?: string;
  /** Noise added to the features before they leave this device (default: the client's
   * `noise`): "gauss:<scale>" or "laplace:<scale>", scale a fraction of each channel's
   * calibrated range, in (0, 4]; a fresh random draw per request. Trades agreement for how
   * well the features reveal the photo (docs/privacy.md). */
  noise?: string;
}

/** A newer version of a result (`onUpdate`). */
export interface ResultUpdate {
  id: string;
  /** 1: the light model's answer of a progressive request; 2: the final answer. */
  version: number;
  quality: "full" | "reduced";
  top: Prediction[];
  /** The light model's answer (version 1) of a progressive request. */
  partial?: true;
  /** Version 1: the side of the input it ran on (`lightInput`, or 224). */
  inputSize?: number;
  /** No later version will come. */
  final?: true;
  /** The answer this one replaces, and whether its top-1 differs. */
  previousTop?: Prediction[];
  changed?: boolean;
  /** The backlog entry's split, codec, label; how long it waited, ms. */
  split?: string;
  codec?: string;
  label?: string | null;
  waitedMs?: number;
  /** The server refused the kept frame for good: the reduced answer stands. */
  error?: { code: string; message: string };
}

export interface ClassifyResult {
  /** This result's id (`ClassifyOptions.id` or a fresh one); updates carry it. */
  id: string;
  /** 1, or 2 when a progressive request's final answer replaced its light one. */
  version: number;
  /** "reduced": the light model ran some stages (the server's answer may follow through
   * `onUpdate` when `resumable`). */
  quality: "full" | "reduced";
  /** "full", or the light model's precision (e.g. "int8"). */
  model: string;
  /** The features of a reduced answer wait in the backlog for the server. */
  resumable?: boolean;
  /** An answer of the light model's: the side of the input it ran on (`lightInput`, or 224). */
  inputSize?: number;
  /** Version 2 of a progressive request: the light model's answer it replaced, and whether
   * its top-1 differs. */
  previousTop?: Prediction[];
  changed?: boolean;
  /** How it ran ("encrypted": the classifier on the server, on features encrypted here). */
  mode: "edge" | "cloud" | "split" | "cache" | "encrypted";
  /** The boundary the server started from (or "logits" on the edge). */
  split: string;
  codec: string;
  backend: "webgpu" | "cpu" | "server";
  top: Prediction[];
  edgeMs: number;
  /** Of `edgeMs`, how long the network's stages took on this device (the rest decoded the
   * photo and coded the features); absent where no stage ran here (cloud-only, a cached
   * answer). Auto's planner scales the cost table by the stages' time and prices the rest
   * apart. */
  edgeStagesMs?: number;
  /** The edge run paused between its stages for a ping in flight (so that the pong is timed
   * within a stage): `edgeMs` is longer than its compute, and auto's planner does not learn
   * this device's speed from it. */
  edgePaused?: boolean;
  /** Auto's cloud-only: the ms this device took to make the upload (a quality-90 JPEG of the
   * 224×224 model input), which `totalMs` includes. */
  uploadPrepMs?: number;
  bytesSent: number;
  /** NaN where the server does not say (encrypted: its answer carries no timing). */
  serverMs: number;
  /** Of `serverMs`, how long the request waited in the server's queue. */
  queueMs: number;
  serverCached: boolean;
  roundTripMs: number;
  totalMs: number;
  load: ServerLoad | null;
  /** Auto mode only. */
  auto?: true;
  placement?: Placement;
  explain?: Explanation;
  /** Why the request was answered on the edge instead of the server (auto, or progressive). */
  fallback?: string;
  /** Encrypted only: ms to encrypt the features and to decrypt the answer here, the
   * evaluation key's bytes and the ms to make, send and have it accepted when this request
   * sent it (`bytesSent` counts them; 0 after), the ms the session's keys took to generate,
   * the answer's bytes. */
  encryptMs?: number;
  decryptMs?: number;
  keyBytes?: number;
  keyMs?: number;
  keygenMs?: number;
  bytesReceived?: number;
}

/** What auto mode's planner shows to explain its choice. */
export interface Explanation {
  forecast: {
    now: Conditions;
    predicted: Conditions;
    linkUp: boolean;
    /** Which of `now`'s values were observed; the others are defaults, not measurements. */
    measured: { rtt: boolean; uplink: boolean; queue: boolean; edgeFactor: boolean };
  };
  current: Placement | null;
  predicted: Estimate | null;
  ranked: Estimate[];
  /** Why nothing is ranked (no placement meets the constraints or the hard deadline). */
  refused: string | null;
  deadlineMs: number;
  /** The planner's newest placement changes, at most 64, oldest first. */
  switches: Omit<Switch, "decision">[];
}

export interface Conditions {
  rttMs: number;
  uplinkBytesPerMs: number;
  queueMs: number;
  edgeFactor: number;
  cloudFactor: number;
}

/** The adaptive planner in the wasm module (auto mode). */
export interface AdaptivePlanner {
  readonly profile: string;
  readonly probePeriodMs: number;
  /** Whether the server is believed reachable (no failure since the last answer or pong). */
  readonly linkUp: boolean;
  tick(now: number): { decision: "keep" } | Switch;
  current(): Placement;
  explain(timeoutMs: number): Explanation;
  deadlineMs(timeoutMs: number): number;
}

/** A device group member as every member sees it (`shared/src/group/message.rs`). */
export interface GroupMember {
  /** Its number in the group: what frames and signals address. */
  peer: number;
  /** The stable id it chose, and its name for people. */
  id: string;
  name: string;
  backend: "webgpu" | "cpu" | "native";
  /** Measured ms for the whole network on one image. */
  msPerImage: number;
  memoryMb?: number;
  power: { state: "charging" } | { state: "battery"; level: number } | { state: "unknown" };
  /** Requests it is working on, as it last reported. */
  load: number;
  lastSeenMs: number;
  /** It runs a language model's middle blocks for split chats (`ChatOptions.member`): a
   * device agent started with the model, or a browser that joined with `llm: true`. */
  llm?: boolean;
}

export interface GroupState {
  /** The join code (6 characters; typed on another device, or read off a QR code). */
  code: string;
  /** Seconds the code still admits new devices. */
  codeExpiresS: number;
  /** This device's peer number. */
  you: number;
  members: GroupMember[];
  /** Direct (WebRTC) channels to other browsers, by peer: "open" or "connecting"; a member
   * without one is reached through the server. */
  links?: Record<string, "open" | "connecting">;
}

export interface GroupOptions {
  /** The group to join; without one a new group starts. */
  code?: string;
  /** The name other members see. */
  name?: string;
  /** A stable id (default: one kept in localStorage). */
  id?: string;
  /** This device's speed, ms for the whole network (default: measured when joining). */
  msPerImage?: number;
  /** Every change of the member list. */
  onMembers?: (group: GroupState) => void;
  /** A refusal after joining (a frame to a member that left, ...). */
  onError?: (error: SplitError) => void;
  /** Batch progress of `classifyAll` (a client in a worker). */
  onProgress?: (progress: GroupProgress) => void;
  /** The first pipeline stage on this device runs at least to this boundary (default "stem":
   * the photo never leaves). */
  privacyFloor?: string;
  /** The codec features travel in between members (default: the client's). */
  codec?: string;
  /** Direct WebRTC channels to the other browsers (default true). */
  p2p?: boolean;
  /** The server's group socket (default: `/group` beside the client's `/ws`). */
  url?: string;
  /** How long opening the socket and joining may take, ms (default 15000; then "timeout"). */
  timeoutMs?: number;
  /** Run the middle blocks of other members' split chats (`ChatOptions.member`): the language
   * model's share downloads at the first, the member list says `llm: true` (default false). */
  llm?: boolean;
}

export interface GroupProgress {
  done: number;
  total: number;
  /** Images answered so far, by peer. */
  counts: Record<string, number>;
}

export interface GroupTaskResult {
  index: number;
  top: Prediction[];
  /** Who answered, and how the photo got there. */
  peer: number;
  device: string;
  via: "local" | "p2p" | "relay";
  ms: number;
}

export interface ChainStage {
  peer: number;
  from: string;
  to: string;
  computeMs?: number;
  sendBytes?: number;
  sendMs?: number;
  device?: string;
}

export interface GroupPipelineResult {
  top: Prediction[];
  mode: "pipeline";
  /** Which device ran which blocks, in order. */
  stages: ChainStage[];
  /** How the features travelled: "p2p" when every hop went over a direct channel, "relay"
   * when every one went through the server, else "mixed". */
  via: "local" | "p2p" | "relay" | "mixed";
  /** Each hop's way, the answer's last. */
  hops: ("p2p" | "relay")[];
  /** What the planner predicted (null for an explicit chain). */
  predicted: { latencyMs: number | null; periodMs: number | null };
  totalMs: number;
  /** Times a stage's device left and the chain was planned again. */
  replans: number;
}

export interface DeviceGroup extends GroupState {
  describe(): GroupState;
  /** Share a batch over the members by measured speed; results in input order. */
  classifyAll(images: Uint8Array[], options?: { onProgress?: (p: GroupProgress) => void; peers?: number[] }): Promise<GroupTaskResult[]>;
  /** One image through a pipeline across the members. */
  classify(image: Uint8Array, options?: { goal?: "latency" | "throughput"; stages?: { peer: number; to: string }[]; peers?: number[] }):
    Promise<GroupPipelineResult>;
  /** The view this device contributes to a fusion (JPEG or PNG bytes; null takes it back). */
  setView(image: Uint8Array | null): void | Promise<void>;
  /** One fused answer from several members' views of one object. */
  fuse(options?: { rule?: "mean" | "confidence"; peers?: number[] }): Promise<{
    top: Prediction[]; mode: "fusion"; rule: string;
    views: { peer: number; device: string; top: Prediction[] }[];
    missing: { peer: number; device: string; code: string }[];
  }>;
  /** The chain the planner would pick now. */
  plan(goal?: "latency" | "throughput", peers?: number[] | null): Promise<{ stages: ChainStage[]; latencyMs: number; periodMs: number }>;
  /** Requests this device answered for others, and in progress now. */
  stats(): { answered: number; load: number } | Promise<{ answered: number; load: number }>;
  /** Carry a split chat's frames between `port` and member `peer` (what `SplitChat.create`
   * does with `member`; apps need not call it). */
  linkChat(port: MessagePort, peer: number): void | Promise<void>;
  /** Stop carrying member `peer`'s chat frames (what `SplitChat.close` does). */
  unlinkChat(peer: number): void | Promise<void>;
  leave(): void | Promise<void>;
}

/** One capability: whether it is used here, and when not, why (for people, not for parsing). */
export interface Capability {
  available: boolean;
  reason: string | null;
}

/** What the engine offers the client (`client.capabilities`). */
export interface Capabilities {
  webgpu: Capability;
  relaxedSimd: Capability;
  /** Helper threads for the threaded builds (a cross-origin isolated page's worker). */
  threads: Capability & { helpers: number };
  /** Whether the client runs in a Web Worker (reason: why it does not). */
  worker: Capability;
  /** WebRTC for a device group's direct channels (without it, through the server's relay). */
  webrtc: Capability;
  /** IndexedDB for the answers kept for the server during an outage (without it, they live in
   * memory and go with the page). */
  backlog: Capability;
  /** The offline start (`offline: true`): available once the service worker kept this
   * start's files; `site` is the server's site version they belong to. */
  offline: Capability & { site?: string; files?: number };
  /** The build loaded from them. */
  build: WasmBuild;
  /** Set when the build chosen did not load (one `./run.sh demo` is still compiling): why,
   * and that the single-threaded `cpu` build was loaded instead. */
  buildFallback: string | null;
}

/** The wasm builds: WebGPU (with the CPU path), simd128, simd128 + relaxed SIMD, relaxed SIMD
 * + Web Worker threads, simd128 + threads. */
export type WasmBuild = "webgpu" | "cpu" | "cpu-relaxed" | "cpu-threads" | "cpu-threads-simd128";

export class SplitClient {
  /** Load the wasm module and the weights, pick WebGPU or the CPU, and prepare the connection. */
  static create(options?: CreateOptions): Promise<SplitClient>;
  /** The model's boundaries, on the thread that loaded the module (a `worker: false` client
   * was created); the instance method works everywhere. */
  static boundaries(): BoundaryInfo[];
  /** The model's boundaries. */
  boundaries(): BoundaryInfo[];
  /** Whether the client runs in a Web Worker. */
  readonly inWorker: boolean;
  /** A client in a worker: how many times a trap in the wasm module ("wasm_trap") made it
   * replace its worker with a fresh one. */
  readonly restarts?: number;
  /** Where the edge half runs. */
  readonly backend: "webgpu" | "cpu";
  /** Which wasm build was loaded. */
  readonly wasmBuild: WasmBuild;
  /** What this engine offers the edge, each feature with the reason when it is not used: the
   * build loaded follows from them (WebGPU → the webgpu build; else relaxed SIMD with threads →
   * cpu-threads, relaxed SIMD → cpu-relaxed, threads → cpu-threads-simd128, else cpu). */
  readonly capabilities: Capabilities;
  /** With `offline` asked for: resolves to `capabilities.offline` once the service worker
   * kept this start's files (or says why it could not). */
  readonly offlineReady?: Promise<Capability & { site?: string; files?: number }>;
  /** The codec used when `classify` is not given one. */
  defaultCodec: string;
  timeoutMs: number;
  /** Whether `split: "auto"` is available (the server publishes a cost table). */
  readonly hasPlanner: boolean;
  /** The adaptive planner itself, on a client on this thread (`worker: false`) whose server
   * publishes a cost table; absent from a client in a worker: use `explain()`. */
  readonly planner?: AdaptivePlanner | null;
  /** Auto mode's view of the link, the server and its choice; null without a planner. */
  explain(): Promise<Explanation | null>;
  /** Change what auto minimizes (the other constraints stay): refused with `bad_option`
   * for an unknown mode, radio or class, or a value out of range; without a planner,
   * `no_planner`. The next re-plan uses it. */
  setObjective(objective: Objective): Promise<void>;
  /** Auto chooses only placements the server reads nothing of (true) or never encrypts
   * (false): `Constraints.encrypted`, changed live. */
  setEncrypted(on: boolean): Promise<void>;
  /** Results remembered by content (0 turns the cache off). */
  setCacheEntries(entries: number): Promise<void>;
  /** The edge's weights: the deepest boundary its loaded stages reach ("input": none,
   * "logits": all), the bytes it downloaded or read from its cache, and the bytes of all. */
  weightsState(): Promise<{ through: string; bytes: number; total: number; light: string | null; lightBytes: number }>;
  /** Reduced answers waiting for the server: entries, bytes of features, entries dropped to
   * stay within the bounds (64 entries, 8 MB), and whether they survive a reload (IndexedDB). */
  backlogState(): Promise<{ entries: number; bytes: number; dropped: number; persistent: boolean }>;
  /** Time the edge on this device: cumulative median ms from the input to each boundary. */
  profileEdge(repeats?: number): Promise<{ names: string[]; ms: number[] }>;
  /** The newest placement changes of auto mode, at most 64, oldest first (`onSwitch` sees
   * every one). */
  readonly switches: Switch[];
  /** The WebSocket's state now (as last reported, for a client in a worker). */
  readonly connectionState: ConnectionState;
  /** Classify an encoded image (JPEG or PNG bytes): split is "edge", "cloud", "auto",
   * "encrypted" (the network here to its pool, the classifier on the server on features
   * encrypted under a key made here: the server reads neither them nor the answer; in the
   * relaxed-SIMD builds, `wasmBuild` "cpu-relaxed" or "cpu-threads") or a boundary name such
   * as "block5". */
  classify(image: Uint8Array, split?: string, options?: ClassifyOptions): Promise<ClassifyResult>;
  /** Open the WebSocket now (it opens on the first request otherwise). */
  connect(): Promise<unknown>;
  /** A ping with `probeBytes` of padding: null when unanswered within `timeoutMs`; `skewed`
   * when an edge run overlapped it. With `pause` (the default), edge runs pause between
   * stages while it is out so that its pong is timed within a stage; without, they run whole
   * and its pong is read before the next run. `gapMs`: the server's time between reading the
   * frame sent before this ping and reading it (null for a connection's first frame); two
   * pings sent back to back, a bare one and a padded one, arrive the padding's upload time
   * apart. */
  ping(probeBytes?: number, timeoutMs?: number, pause?: boolean):
    Promise<{ ms: number; load: ServerLoad; skewed: boolean; gapMs: number | null } | null>;
  /** Time the codec alone in this browser, per run. */
  benchCodec(image: Uint8Array, split: string, codec: string, repeats?: number):
    Promise<{ bytes: number; encodeMs: number; decodeMs: number }>;
  /** Join a device group (start one without `options.code`): this device lends its model to
   * the group, and can share a batch over it or run a pipeline across it. */
  joinGroup(options?: GroupOptions): Promise<DeviceGroup>;
  /** Share `count` items over workers of the given speeds (ms per item, transfer ms): the
   * worker index of each item (`shared/src/group/tasks.rs`). */
  planTasks(count: number, msPerItem: number[], transferMs: number[]): number[] | Promise<number[]>;
  /** Close the connection and stop probing. */
  close(): void;
  /** A client in a worker: stop the worker (weights, connection and all); later calls fail
   * with code "worker". */
  terminate?(): void;
}

/** Options of `SplitChat.create`. */
export interface ChatOptions {
  /** The server (its origin, or a base URL); the page's origin by default. */
  server?: string;
  /** Where the package's own files are served, as `CreateOptions.assetBase`. */
  assetBase?: string;
  /** Blocks of the language model run in the browser; the rest run on the server. The
   * model's block count (30 for SmolLM2) runs it whole in the browser. By default the default
   * privacy floor's (12: the fewest after which no measured attack names more than 5% of a
   * prompt's tokens from what the server receives; docs/privacy.md). */
  blocks?: number;
  /** Fewer blocks than this (short of the whole model) are refused with "privacy_floor";
   * "default" is the measured floor above. None by default. */
  privacyFloor?: number | "default";
  /** The longest conversation, prompt and answer, in tokens (1,024; the server's limit caps it). */
  positions?: number;
  /** The server's bearer token, when it requires one. */
  token?: string;
  /** How the hidden states cross each way (docs/llm.md, "The hidden states' codec"); the
   * module's default unless named. */
  codec?: HiddenCodecName;
  /** Where the model runs (docs/llm.md, "Placements"); "auto": where the planner predicts the
   * fastest answer under `privacyFloor` and `memoryBytes` (`info.plan` says why). */
  placement?: ChatPlacement | "auto";
  /** Most bytes of the model this browser may download and hold (`placement: "auto"` only:
   * larger shares are refused with the reason "memory"). */
  memoryBytes?: number;
  /** A U-shaped split across a device group (docs/llm.md, "Through a device group"): the
   * next `blocks` blocks after this browser's run on member `peer` of `group` (one whose `llm`
   * is true), the server the rest; the frames go through the server's relay, so the privacy
   * floor still counts this browser's blocks. If the member leaves mid-answer, the server
   * takes its blocks and the answer goes on (`memberLeft`). */
  member?: { group: DeviceGroup; peer: number; blocks: number };
  /** The model share's download: `{ stage: "llm-weights", loaded, total, fraction, cached }`. */
  onProgress?: (p: Progress) => void;
}

/** "split" (the default, U-shaped): the browser runs the first `blocks` and the head, the
 * server the blocks between, seeing only hidden states. "plain": the server also runs the
 * head and samples (it sees the answer's tokens, not the prompt's). "cloud": the server runs
 * everything from the prompt's token ids and streams the answer (only the tokenizer is
 * downloaded; refused under a privacy floor). "edge": the whole model in the browser. */
export type ChatPlacement = "split" | "plain" | "cloud" | "edge";

/** A placement of the language model with its predicted figures (milliseconds, bytes). */
export interface ChatEstimate {
  placement: ChatPlacement;
  /** Edge blocks of a split. */
  blocks?: number;
  firstTokenMs: number;
  tokenMs: number;
  /** The share's download before the first answer; 0 when cached. */
  downloadMs: number;
  /** The download, the first token and the rest of a 128-token answer to a 64-token prompt. */
  answerMs: number;
  downloadBytes: number;
  bytesUp: number;
  bytesDown: number;
}

/** Why the planner chose: every allowed placement fastest first, and the refused ones
 * (`[{ placement, blocks? }, "privacy_floor" | "memory" | "no_such_split"]`). */
export interface ChatPlan {
  chosen: ChatEstimate;
  ranked: ChatEstimate[];
  refused: [{ placement: ChatPlacement; blocks?: number }, string][];
  /** Whether this browser's costs were timed (the last time a share loaded) or assumed. */
  edgeCosts: "measured" | "assumed";
  link: { rtt_ms: number; up_kbps: number; down_kbps: number };
  /** Shares (by blocks) already in the browser's cache. */
  cachedShares: number[];
}

/** A hidden-state encoding: f32 (exact), f16, bf16, q8 (a byte a value, one scale a row), q8o
 * (q8 with the row's 8 largest values apart). */
export type HiddenCodecName = "f32" | "f16" | "bf16" | "q8" | "q8o";

/** A chat message. */
export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

/** What an answer cost: milliseconds in the browser and waiting on the server (link
 * included), bytes of hidden states each way. */
export interface ChatFigures {
  edgeMs: number;
  serverMs: number;
  bytesUp: number;
  bytesDown: number;
  promptTokens: number;
  /** Of `promptTokens`, those the last answer of this chat left in both sides' caches and
   * that were not prefilled again: a history that goes on from the last answer (its prompt,
   * the answer, new messages) prefills only what is new. 0 otherwise, and in cloud-only. */
  reusedTokens: number;
  /** Times the socket dropped mid-answer and the answer went on over a new one (the edge
   * sends the hidden states it kept again; three attempts, then the answer fails). */
  resumes: number;
  /** The chat's member left during this answer and the server took its blocks (not in
   * cloud-only). */
  memberLeft?: boolean;
}

/** An answer. */
export interface ChatAnswer extends ChatFigures {
  text: string;
  tokens: number[];
  /** Ended by `stop()`. */
  stopped: boolean;
  firstTokenMs: number | null;
  tokensPerSecond: number | null;
  /** Where it ran (`ChatPlacement`). For "cloud", `serverMs` is the whole answer's time and
   * `edgeMs` 0. */
  placement: ChatPlacement;
  /** How the frames went to the chat's member (`member`): "p2p" over a direct channel (the
   * server never saw them), "relay" through the server; null without a member, or after it
   * left. */
  memberVia?: "p2p" | "relay" | null;
}

/** SmolLM2-135M-Instruct split between this page and the server: the tokenizer, the embedding,
 * the first blocks and the output layer run in a worker of the page; the server runs the
 * blocks between and sees only hidden states (576 numbers per token each way, coded), never the text
 * or the token ids. */
export declare class SplitChat {
  /** Download the model's share (cached by the browser) and load it in a new worker. */
  static create(options?: ChatOptions): Promise<SplitChat>;
  /** What was loaded. */
  readonly info: { placement: ChatPlacement; blocks: number; layers: number; width: number;
    positions: number; shareBytes: number; weightBytes: number; codec: HiddenCodecName | null;
    /** Bytes of one position's hidden state on the wire, each way. */
    rowBytes: number; model: string;
    /** The planner's choice, with `placement: "auto"`; null otherwise. */
    plan: ChatPlan | null;
    /** With `member`: who runs which blocks (`[from, to)`); null otherwise. */
    member: { peer: number; name: string; blocks: [number, number] } | null } | null;
  /** Answer a conversation; `onToken` sees the answer as it grows. Greedy unless
   * `temperature` > 0 (then top-p `topP` with `seed`). */
  ask(messages: ChatMessage[], options?: { maxTokens?: number; temperature?: number; topP?: number;
    seed?: number; onToken?: (t: ChatFigures & { text: string; tokens: number }) => void }): Promise<ChatAnswer>;
  /** End the answer being written. */
  stop(): Promise<void>;
  /** Stop the worker; pending calls fail with code "closed". */
  close(): void;
}
