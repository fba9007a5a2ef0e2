//! `GET /llm/edge/{blocks}`: the share of the language model a browser runs in a U-shaped
//! split — the tokenizer and chat format (the file's metadata), the embedding, the final norm
//! and blocks `0..blocks` — as a GGUF file of its own
//! ([`split_shared::models::smollm2::edge_share`]). `blocks` = the model's block count gives the
//! whole model (edge-only). The last [`KEPT_SHARES`] shares made are kept in memory; the
//! server's own model is unaffected (it holds every block).

use actix_web::web::Bytes;
use actix_web::{HttpResponse, web};
use split_shared::models::smollm2::edge_share;

use crate::state::AppState;

/// Where the shares are: `/llm/edge/4` holds blocks 0..4.
pub const LLM_EDGE_URL: &str = "/llm/edge/";
/// The model's metadata without weights: the tokenizer and the chat format (cloud-only).
pub const LLM_TOKENIZER_URL: &str = "/llm/tokenizer";
/// Shares kept in memory after they are made (each is 30 MB and 2.2 MB per block for SmolLM2).
pub const KEPT_SHARES: usize = 2;

/// Shares made, most recent last.
#[derive(Default)]
pub struct Shares(std::sync::Mutex<Vec<(usize, Bytes)>>);

impl Shares {
    fn get(&self, blocks: usize) -> Option<Bytes> {
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.iter().find(|(b, _)| *b == blocks).map(|(_, s)| s.clone())
    }

    fn put(&self, blocks: usize, share: Bytes) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.retain(|(b, _)| *b != blocks);
        kept.push((blocks, share));
        let excess = kept.len().saturating_sub(KEPT_SHARES);
        kept.drain(..excess);
    }
}

/// The share of `blocks` edge blocks: 404 without a language model, 400 past its blocks.
pub async fn edge_weights(
    blocks: web::Path<String>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let Some(host) = state.llm.clone() else {
        return Ok(HttpResponse::NotFound()
            .body("no language model on this server (`./run.sh setup` fetches it)"));
    };
    let layers = host.model.config.layers;
    let blocks = blocks.into_inner();
    let blocks = match blocks.parse::<usize>() {
        Ok(b) if b <= layers => b,
        _ => {
            return Ok(HttpResponse::BadRequest()
                .body(format!("{blocks:?}: the edge's blocks are a number from 0 to {layers}")));
        }
    };
    let share = match host.shares.get(blocks) {
        Some(share) => share,
        None => {
            let path = host.path.clone();
            let made = web::block(move || -> anyhow::Result<Vec<u8>> {
                let file = std::fs::read(&path)?;
                Ok(edge_share(&file, blocks)?)
            })
            .await?
            .map_err(|e| {
                log::error!("making the language model's edge share of {blocks} blocks: {e:#}");
                actix_web::error::ErrorInternalServerError("the model file could not be read")
            })?;
            let made = Bytes::from(made);
            host.shares.put(blocks, made.clone());
            made
        }
    };
    Ok(HttpResponse::Ok()
        .content_type("application/octet-stream")
        .insert_header(("ETag", format!("\"{}-{blocks}\"", host.file_id)))
        .body(share))
}

/// `GET /llm/tokenizer`: the model file's metadata, no tensors (404 without a language model).
pub async fn tokenizer(state: web::Data<AppState>) -> HttpResponse {
    match state.llm.as_ref() {
        None => HttpResponse::NotFound()
            .body("no language model on this server (`./run.sh setup` fetches it)"),
        Some(host) => HttpResponse::Ok()
            .content_type("application/octet-stream")
            .insert_header(("ETag", format!("\"{}-tokenizer\"", host.file_id)))
            .body(host.tokenizer.clone()),
    }
}
