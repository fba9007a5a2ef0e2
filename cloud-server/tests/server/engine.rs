//! The model worker pool: a full queue answers `busy` instead of growing without bound.

use std::sync::Arc;

use burn::tensor::Device;
use cloud_server::{Config, Engine, ServeError, Work};
use split_shared::model::{EfficientNetLite0, Lite0Split};
use split_shared::runtime::SplitModel;

/// The network as the server hosts it.
fn hosted(model: EfficientNetLite0, device: Device) -> Arc<dyn SplitModel> {
    Arc::new(Lite0Split::new(model, device, None).expect("no calibration to check"))
}

const CHELSEA: &[u8] = include_bytes!("../../../web/samples/chelsea.png");

#[actix_web::test]
async fn a_full_queue_answers_busy_and_serves_the_rest() {
    let device = Device::flex();
    let model = EfficientNetLite0::load(&Config::for_tests().weights_path(), &device)
        .unwrap_or_else(|e| panic!("{e}"));
    // One worker, room for one waiting request: of eight sent at once, at most two can be taken.
    let engine = Engine::start(hosted(model, device), 1, 1, 1, Default::default());
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

/// Requests that wait together are answered together: one worker, batching on, the same
/// answers as one at a time, and mixed boundaries in one batch each get their own pass.
#[actix_web::test]
async fn waiting_requests_are_batched_with_the_same_answers() {
    let device = Device::flex();
    let model = EfficientNetLite0::load(&Config::for_tests().weights_path(), &device)
        .unwrap_or_else(|e| panic!("{e}"));
    let coffee = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../web/samples/coffee.png"))
        .expect("coffee sample");
    let model = hosted(model, device);
    let single = Engine::start(model.clone(), 1, 16, 1, Default::default());
    let batched = Engine::start(model, 1, 16, 4, Default::default());
    let works = || {
        vec![
            Work::Image(CHELSEA.to_vec()),
            Work::Image(coffee.clone()),
            Work::Image(b"not an image".to_vec()),
            Work::Image(CHELSEA.to_vec()),
            Work::Image(coffee.clone()),
        ]
    };
    let one = futures_util::future::join_all(works().into_iter().map(|w| single.submit(w))).await;
    let many = futures_util::future::join_all(works().into_iter().map(|w| batched.submit(w))).await;
    for (a, b) in one.iter().zip(&many) {
        match (a, b) {
            (Ok(a), Ok(b)) => {
                let classes =
                    |o: &cloud_server::Outcome| o.top.iter().map(|p| p.class).collect::<Vec<_>>();
                assert_eq!(classes(a), classes(b));
                for (p, q) in a.top.iter().zip(&b.top) {
                    assert!((p.prob - q.prob).abs() < 1e-4, "{p:?} vs {q:?}");
                }
            }
            (Err(a), Err(b)) => assert_eq!(a.code(), b.code()),
            other => panic!("batched and single disagree: {other:?}"),
        }
    }
    assert_eq!(many[0].as_ref().unwrap().top[0].class, 282);
    assert_eq!(many[1].as_ref().unwrap().top[0].class, 967);
    assert!(many[2].is_err(), "the bad image fails alone");
    // Four good images: one at a time is four passes; batched, those that waited together
    // shared one (the first may be taken alone before the others arrive).
    assert_eq!(single.forward_passes(), 4);
    assert!(batched.forward_passes() < 4, "{} passes", batched.forward_passes());
}

/// With a batch delay, a worker that takes a request waits for others to join it: four
/// requests arriving a few milliseconds apart run as one pass, where without the delay the
/// first runs alone.
#[actix_web::test]
async fn a_batch_delay_gathers_requests_that_arrive_apart() {
    let device = Device::flex();
    let model = EfficientNetLite0::load(&Config::for_tests().weights_path(), &device)
        .unwrap_or_else(|e| panic!("{e}"));
    let delay = std::time::Duration::from_millis(300);
    let engine =
        Engine::start_with_delay(hosted(model, device), 1, 16, 4, delay, Default::default());
    let mut waiting = Vec::new();
    for _ in 0..4 {
        let engine = engine.clone();
        waiting.push(actix_web::rt::spawn(async move {
            engine.submit(Work::Image(CHELSEA.to_vec())).await
        }));
        actix_web::rt::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    for w in waiting {
        assert_eq!(w.await.unwrap().unwrap().top[0].class, 282);
    }
    assert_eq!(engine.forward_passes(), 1, "the four requests shared one pass");
}

/// A request a worker has taken but not answered still counts in the load replies and pongs
/// carry: the queue itself is empty then, and a client forecasting from it alone would see no
/// wait while a whole batch is still to be computed.
#[actix_web::test]
async fn a_taken_request_counts_in_the_load_until_answered() {
    let device = Device::flex();
    let model = EfficientNetLite0::load(&Config::for_tests().weights_path(), &device)
        .unwrap_or_else(|e| panic!("{e}"));
    // The batch delay holds the taken request in the worker's hand for two seconds.
    let delay = std::time::Duration::from_secs(2);
    let engine =
        Engine::start_with_delay(hosted(model, device), 1, 16, 4, delay, Default::default());
    let submitted = engine.clone();
    let answer =
        actix_web::rt::spawn(async move { submitted.submit(Work::Image(CHELSEA.to_vec())).await });
    let taken = std::time::Instant::now();
    loop {
        if engine.queued() == 0 && engine.load().queued == 1 {
            break;
        }
        assert!(taken.elapsed() < delay, "the taken request never showed in the load");
        actix_web::rt::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(answer.await.unwrap().unwrap().top[0].class, 282);
    let load = engine.load();
    assert_eq!(load.queued, 0, "answered, nothing ahead any more");
    assert!(load.recent_us > 0, "the pass's time per request is reported");
}
