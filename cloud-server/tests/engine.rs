//! The model worker pool: a full queue answers `busy` instead of growing without bound.

use burn::tensor::Device;
use cloud_server::{Config, Engine, ServeError, Work};
use split_shared::model::{EfficientNetLite0, WeightsFile};

const CHELSEA: &[u8] = include_bytes!("../../web/samples/chelsea.png");

#[actix_web::test]
async fn a_full_queue_answers_busy_and_serves_the_rest() {
    let bytes = std::fs::read(Config::for_tests().weights_path())
        .expect("weights: run `cargo xtask setup`");
    let device = Device::flex();
    let model = EfficientNetLite0::from_weights(&WeightsFile::from_bytes(&bytes).unwrap(), &device)
        .unwrap();
    // One worker, room for one waiting request: of eight sent at once, at most two can be taken.
    let engine = Engine::start(model, device, 1, 1);
    let requests = (0..8).map(|_| engine.submit(Work::Image(CHELSEA.to_vec())));
    let results = futures_util::future::join_all(requests).await;
    let busy = results.iter().filter(|r| matches!(r, Err(ServeError::Busy(1)))).count();
    let served: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert!(busy >= 6, "expected the queue to refuse at least 6 of 8, refused {busy}");
    assert!(!served.is_empty() && served.len() + busy == 8, "{results:?}");
    assert!(served.iter().all(|o| (281..=285).contains(&o.top[0].class)));
    // Once the queue drains, the engine serves again.
    let again = engine.submit(Work::Image(CHELSEA.to_vec())).await.unwrap();
    assert_eq!(again.top[0].class, served[0].top[0].class);
}
