//! The model's files cut per boundary, so a browser downloads only what its split uses:
//! the weights per stage at `/weights/shards/{stage}.splw` (a split at block5 runs the stem and
//! blocks 0–5, 2% of the bytes), the same stages quantized for the light model that answers
//! during an outage at `/weights/light/{stage}.splq` (int8: a quarter of the bytes) and the codec calibration per boundary at
//! `/calibration/parts/{boundary}.splc` (a frame at block5 needs block5's tables, 1% of the
//! file). Cut once at start-up from the files the server itself loads, held in memory, so the
//! parts always match the whole; each is cached by the browser under its own checksum.

use std::sync::Arc;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;
use split_shared::codec::Calibration;
use split_shared::container::TensorFile;
use split_shared::model::{LightPrecision, WEIGHTS_MAGIC, light_shards, weight_shards};

use crate::state::AppState;

/// Where the weight shards are: this, the stage's name, `.splw`.
pub const SHARDS_URL: &str = "/weights/shards/";
/// Where the light model's shards are: this, the stage's name, `.splq`.
pub const LIGHT_URL: &str = "/weights/light/";
/// Where the calibration parts are: this, the boundary's name, `.splc`.
pub const PARTS_URL: &str = "/calibration/parts/";

/// A part as `/api/info` lists it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PartInfo {
    /// The boundary it belongs to: for a weight shard, the one its stage ends at (`stem`,
    /// `block0`…`block15`, `head`, `logits`); for a calibration part, the one it codes.
    pub name: String,
    /// Where to fetch it.
    pub url: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its container's checksum (16 hex digits): what a client caches it under.
    pub id: String,
}

#[derive(Debug)]
struct Part {
    info: PartInfo,
    bytes: web::Bytes,
}

/// Parts of one file, in forward order.
#[derive(Clone, Debug, Default)]
pub struct Parts(Arc<Vec<Part>>);

impl Parts {
    fn new(prefix: &str, extension: &str, parts: Vec<(String, Vec<u8>)>) -> Self {
        let parts = parts
            .into_iter()
            .map(|(name, bytes)| {
                let tail: [u8; 8] = bytes[bytes.len() - 8..].try_into().expect("a checksum");
                let info = PartInfo {
                    url: format!("{prefix}{name}.{extension}"),
                    name,
                    bytes: bytes.len() as u64,
                    id: format!("{:016x}", u64::from_le_bytes(tail)),
                };
                Part { info, bytes: web::Bytes::from(bytes) }
            })
            .collect();
        Self(Arc::new(parts))
    }

    /// The weights cut per stage.
    pub fn of_weights(weights: &TensorFile) -> Self {
        let shards = weight_shards(weights)
            .into_iter()
            .map(|(stage, file)| (stage.name().to_string(), file.to_bytes(WEIGHTS_MAGIC)))
            .collect();
        Self::new(SHARDS_URL, "splw", shards)
    }

    /// The weights cut per stage and quantized: the light model's shards.
    pub fn of_light(weights: &TensorFile, precision: LightPrecision) -> Self {
        let shards = light_shards(weights, precision)
            .into_iter()
            .map(|(stage, b)| (stage.name().to_string(), b))
            .collect();
        Self::new(LIGHT_URL, "splq", shards)
    }

    /// The calibration cut per boundary.
    pub fn of_calibration(calibration: &Calibration) -> Self {
        let parts = calibration
            .boundaries()
            .filter_map(|b| Some((b.to_string(), calibration.part(b)?)))
            .collect();
        Self::new(PARTS_URL, "splc", parts)
    }

    /// What `/api/info` lists.
    pub fn manifest(&self) -> Vec<PartInfo> {
        self.0.iter().map(|s| s.info.clone()).collect()
    }

    fn get(&self, file: &str) -> Option<&Part> {
        self.0.iter().find(|s| s.info.url.rsplit('/').next() == Some(file))
    }
}

/// `GET /weights/shards/{stage}.splw`.
pub async fn weight_shard(
    req: HttpRequest,
    file: web::Path<String>,
    state: web::Data<AppState>,
) -> HttpResponse {
    serve(&req, &state.weight_shards, &file)
}

/// `GET /weights/light/{stage}.splq`.
pub async fn light_shard(
    req: HttpRequest,
    file: web::Path<String>,
    state: web::Data<AppState>,
) -> HttpResponse {
    serve(&req, &state.light_shards, &file)
}

/// `GET /calibration/parts/{boundary}.splc`.
pub async fn calibration_part(
    req: HttpRequest,
    file: web::Path<String>,
    state: web::Data<AppState>,
) -> HttpResponse {
    serve(&req, &state.calibration_parts, &file)
}

/// A part, cached by the browser for good when the URL names its checksum (`?v=ID`, as the
/// client asks), else revalidated by its ETag.
fn serve(req: &HttpRequest, parts: &Parts, file: &str) -> HttpResponse {
    let Some(part) = parts.get(file) else {
        return HttpResponse::NotFound()
            .content_type("text/plain; charset=utf-8")
            .body(format!("no part {file} here; /api/info lists them"));
    };
    let etag = format!("\"{}\"", part.info.id);
    let versioned =
        web::Query::<std::collections::HashMap<String, String>>::from_query(req.query_string())
            .is_ok_and(|q| q.get("v") == Some(&part.info.id));
    let cache = if versioned { "public, max-age=31536000, immutable" } else { "no-cache" };
    let matches = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut response = if matches { HttpResponse::NotModified() } else { HttpResponse::Ok() };
    response.insert_header((header::ETAG, etag)).insert_header((header::CACHE_CONTROL, cache));
    if matches {
        return response.finish();
    }
    response.content_type("application/octet-stream").body(part.bytes.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_listed_in_order_and_found_by_file_name() {
        let mut file = TensorFile::new();
        file.insert("stem.weight", vec![2], vec![1.0, 2.0]);
        file.insert("fc.bias", vec![1], vec![3.0]);
        let shards = Parts::of_weights(&file);
        let manifest = shards.manifest();
        assert_eq!(manifest.len(), 19);
        assert_eq!(manifest[0].name, "stem");
        assert_eq!(manifest[0].url, "/weights/shards/stem.splw");
        assert_eq!(manifest.last().unwrap().name, "logits");
        let stem = shards.get("stem.splw").unwrap();
        let parsed = TensorFile::from_bytes(&stem.bytes, WEIGHTS_MAGIC).unwrap();
        assert_eq!(parsed.names().collect::<Vec<_>>(), ["stem.weight"]);
        assert_eq!(stem.info.bytes, stem.bytes.len() as u64);
        assert!(shards.get("stem").is_none(), "the name ends in .splw");
        assert!(shards.get("pool.splw").is_none(), "pool has no weights");
        assert!(shards.get("../secret.splw").is_none());
    }
}
