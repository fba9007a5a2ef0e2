//! HTTP routes: the WebSocket endpoint, model metadata, the weights and the calibration (whole
//! and in parts: [`crate::shards`]), the cost
//! table, health (`/livez`, `/readyz`), `/metrics`, and the static demo (an allow-list:
//! [`crate::static_files`]).

use actix_files::{Files, NamedFile};
use actix_web::middleware::DefaultHeaders;
use actix_web::{HttpRequest, HttpResponse, web};

use crate::info::{CALIBRATION_URL, COST_TABLE_URL, ServerInfo, WEIGHTS_URL};
use crate::shards::{self, LIGHT_URL, PARTS_URL, SHARDS_URL};
use crate::state::AppState;

/// `/livez` (and `/healthz`, its older name): the process answers HTTP. A load balancer or
/// an orchestrator restarts a server that fails it.
async fn livez() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain; charset=utf-8").body("ok")
}

/// `/readyz`: whether to send this server new clients — the model loaded (it is, or the server
/// would not have started), every worker alive, the queue below `--ready-queue`, not shutting
/// down. 503 with the reason otherwise; clients already connected are still served.
async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    match state.not_ready() {
        None => HttpResponse::Ok().content_type("text/plain; charset=utf-8").body("ready"),
        Some(why) => HttpResponse::ServiceUnavailable()
            .content_type("text/plain; charset=utf-8")
            .body(format!("not ready: {why}")),
    }
}

/// `/metrics`: counters, histograms and gauges in the OpenMetrics text format.
async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let queued = state.models.engines().map(crate::Engine::queued).sum();
    let page = state.metrics.render(queued, state.connections.open(), state.draining());
    HttpResponse::Ok().content_type(crate::metrics::CONTENT_TYPE).body(page)
}

async fn info(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((crate::site::SITE_HEADER, &*state.site))
        .json(ServerInfo::of(&state))
}

async fn calibration(
    req: HttpRequest,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let Some((_, path)) = &state.calibration else {
        return Ok(HttpResponse::NotFound().body("no codec calibration on this server"));
    };
    Ok(NamedFile::open_async(path.as_path()).await?.into_response(&req))
}

/// A cost table's JSON text, with the site version it belongs to.
fn table_response(state: &AppState, table: &str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .insert_header((crate::site::SITE_HEADER, &*state.site))
        .body(table.to_owned())
}

async fn cost_table(state: web::Data<AppState>) -> HttpResponse {
    match state.cost_table_of(split_shared::model::LITE0_NAME) {
        Some(t) => table_response(&state, t),
        None => {
            HttpResponse::NotFound().body("no cost table on this server; run `./run.sh profile`")
        }
    }
}

/// `/api/models/{name}/cost-table`: the hosted model's cost table.
async fn model_cost_table(name: web::Path<String>, state: web::Data<AppState>) -> HttpResponse {
    let hosted = state.models.registry().iter().any(|m| m.spec().name == *name);
    match state.cost_table_of(&name) {
        Some(t) if hosted => table_response(&state, t),
        _ if hosted => HttpResponse::NotFound().body(format!("no cost table for {name}")),
        _ => HttpResponse::NotFound().body(format!("no model {name} on this server")),
    }
}

async fn weights(req: HttpRequest, state: web::Data<AppState>) -> actix_web::Result<HttpResponse> {
    Ok(NamedFile::open_async(state.weights_path.as_path()).await?.into_response(&req))
}

/// `Cross-Origin-Opener-Policy: same-origin` and `Cross-Origin-Embedder-Policy: require-corp`:
/// what a browser needs before it gives a page (and its workers) shared memory.
fn cross_origin_isolated() -> DefaultHeaders {
    DefaultHeaders::new()
        .add(("Cross-Origin-Opener-Policy", "same-origin"))
        .add(("Cross-Origin-Embedder-Policy", "require-corp"))
}

/// Register every route on `cfg`; shared by `main` and the tests.
pub fn config_app(state: AppState) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        let web_dir = state.web_dir.as_path().to_path_buf();
        // The page's files say which site version they are (`crate::site`), for the offline
        // start's service worker, and are revalidated on every load (a 304 without a body while
        // unchanged): left to a browser's heuristic freshness, a visit after an upgrade could
        // run the old build's client with the new build's module.
        let site = DefaultHeaders::new()
            .add((crate::site::SITE_HEADER, &*state.site))
            .add((actix_web::http::header::CACHE_CONTROL, "no-cache"));
        cfg.app_data(web::Data::new(state));
        // Every route behind the `Host` check (`crate::hosts`), with CORS for the origins the
        // operator allowed (`crate::cors`).
        let app = web::scope("")
            .wrap(actix_web::middleware::from_fn(crate::cors::allow_listed_origins))
            .wrap(actix_web::middleware::from_fn(crate::hosts::check_host))
            .route("/ws", web::get().to(crate::ws::websocket))
            .route("/group", web::get().to(crate::group_ws::group_socket))
            .route("/llm", web::get().to(crate::llm_ws::llm_socket))
            .route("/encrypted", web::get().to(crate::encrypted_ws::encrypted_socket))
            .route(
                &format!("{}{{blocks}}", crate::llm_edge::LLM_EDGE_URL),
                web::get().to(crate::llm_edge::edge_weights),
            )
            .route(crate::llm_edge::LLM_TOKENIZER_URL, web::get().to(crate::llm_edge::tokenizer))
            .route("/api/info", web::get().to(info))
            .route("/api/info", web::head().to(info))
            .route("/livez", web::get().to(livez))
            .route("/livez", web::head().to(livez))
            .route("/healthz", web::get().to(livez))
            .route("/healthz", web::head().to(livez))
            .route("/readyz", web::get().to(readyz))
            .route("/readyz", web::head().to(readyz))
            .route("/metrics", web::get().to(metrics))
            .route("/metrics", web::head().to(metrics))
            .route(WEIGHTS_URL, web::get().to(weights))
            .route(&format!("{SHARDS_URL}{{file}}"), web::get().to(shards::weight_shard))
            .route(&format!("{SHARDS_URL}{{file}}"), web::head().to(shards::weight_shard))
            .route(&format!("{LIGHT_URL}{{file}}"), web::get().to(shards::light_shard))
            .route(&format!("{LIGHT_URL}{{file}}"), web::head().to(shards::light_shard))
            .route(&format!("{PARTS_URL}{{file}}"), web::get().to(shards::calibration_part))
            .route(&format!("{PARTS_URL}{{file}}"), web::head().to(shards::calibration_part))
            .route(CALIBRATION_URL, web::get().to(calibration))
            .route(COST_TABLE_URL, web::get().to(cost_table))
            .route(
                &format!("{}{{name}}/cost-table", crate::info::MODELS_URL),
                web::get().to(model_cost_table),
            )
            .service(
                // The page is cross-origin isolated, which lets its client start the threaded
                // edge build (SharedArrayBuffer): everything it loads is same-origin.
                web::scope("").wrap(cross_origin_isolated()).wrap(site).service(
                    Files::new("/", &web_dir)
                        .index_file("index.html")
                        .prefer_utf8(true)
                        .path_filter(move |path, _| crate::static_files::servable(&web_dir, path)),
                ),
            );
        cfg.service(app);
    }
}
