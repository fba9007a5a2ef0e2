//! The load generators' quick modes against the real server in-process: few requests, so the
//! harnesses cannot rot; no timing is asserted.

use std::time::Duration;

use actix_web::App;
use cloud_server::{AppState, Config, config_app};
use split_lab::llm_crowd::{Setup, crowd, record};
use split_lab::netem::{LinkProfile, Proxy};
use split_lab::{LoadConfig, Workload, run};
use split_shared::codec::HiddenCodec;
use split_studies::llm::Chat;

const CHELSEA: &[u8] = include_bytes!("../../web/samples/chelsea.png");

/// The real server in-process, with its cache off so every request computes.
fn server() -> actix_test::TestServer {
    server_with(&[])
}

fn server_with(extra: &[&str]) -> actix_test::TestServer {
    let args = ["cloud-server", "--port", "0", "--cache-entries", "0"];
    let config = <Config as clap::Parser>::parse_from(args.iter().chain(extra));
    let state = AppState::load(&config).expect("weights: run `./run.sh setup`");
    actix_test::start(move || App::new().configure(config_app(state.clone())))
}

#[actix_web::test]
async fn concurrent_clients_get_right_answers_for_every_workload() {
    let srv = server();
    for workload in ["image", "features:block5:q6", "features:block11:f32"] {
        let frame = workload.parse::<Workload>().unwrap().frame(CHELSEA).unwrap();
        let load = LoadConfig {
            url: srv.url("/ws"),
            clients: 3,
            requests: 2,
            frame,
            timeout: Duration::from_secs(60),
        };
        let r = run(&load).await.unwrap();
        assert_eq!((r.ok, r.errors, r.cached), (6, 0, 0), "{workload}: {r:?}");
        assert!(r.top1.iter().all(|c| (281..=285).contains(c)), "{workload}: {:?}", r.top1);
        assert!(r.rps > 0.0 && r.p50_ms > 0.0 && r.p99_ms >= r.p50_ms);
        assert!(r.server_compute_ms > 0.0, "{workload}: the server computed every request");
    }
}

#[actix_web::test]
async fn an_unreachable_server_is_an_error() {
    let load = LoadConfig {
        url: "ws://127.0.0.1:9/ws".into(),
        clients: 2,
        requests: 1,
        frame: vec![0; 16],
        timeout: Duration::from_secs(5),
    };
    assert!(run(&load).await.is_err());
}

#[actix_web::test]
async fn the_link_emulator_adds_its_delay_and_serializes_uploads() {
    let srv = server();
    let frame = "features:block11:q6".parse::<Workload>().unwrap().frame(CHELSEA).unwrap();
    // 300 ms round trip and 80 kbit/s up: the ~6.4 KB frame alone takes ~640 ms to send.
    let link = LinkProfile { name: "test", up_kbps: 80.0, down_kbps: 1_000.0, rtt_ms: 300.0 };
    let proxy = Proxy::start(srv.addr(), link).await.unwrap();
    let load = LoadConfig {
        url: format!("ws://{}/ws", proxy.addr),
        clients: 1,
        requests: 2,
        frame: frame.clone(),
        timeout: Duration::from_secs(60),
    };
    let r = run(&load).await.unwrap();
    assert_eq!((r.ok, r.errors), (2, 0), "{r:?}");
    let floor_ms = link.rtt_ms + frame.len() as f64 * 8.0 / link.up_kbps;
    // A lower bound the link imposes on every request, not a speed goal.
    assert!(r.p50_ms >= floor_ms * 0.95, "{} ms < {floor_ms} ms", r.p50_ms);
    assert!(r.top1.iter().all(|c| (281..=285).contains(c)));
}

/// `llm-crowd`'s harness: a few split conversations with the language model at once, every
/// reply checked against the rows this process computes with the same model.
#[actix_web::test]
async fn split_conversations_at_once_get_the_rows_the_model_computes() {
    let srv = server();
    let chat = Chat::load(None).expect("the language model: run `./run.sh setup`");
    let setup = Setup {
        url: srv.url("/llm"),
        blocks: 12,
        tokens: 5,
        codec: HiddenCodec::F16,
        message: "Name three colours.".into(),
        server_pid: Some(std::process::id()),
        timeout: Duration::from_secs(60),
    };
    let rec = record(&chat, &setup).unwrap();
    assert_eq!(rec.frames(), 5, "the prompt's frame, then one a token");
    let run = crowd(&setup, &rec, 3).await;
    assert_eq!((run.completed, run.failed), (3, 0), "{run:?}");
    assert_eq!(run.replies, 15, "{run:?}");
    // Same frames, same model code: the server's rows are this process's to the bit.
    assert_eq!(run.replies_exact, run.replies, "largest difference {}", run.max_abs_diff);
    assert!(run.server_rss_peak_mib.is_some_and(|m| m > 0.0), "{run:?}");

    // With the steps batched across conversations (`--llm-batch`), every row is still the
    // model's to the bit, and every frame went through a batch.
    let batching = server_with(&["--llm-batch"]);
    let run = crowd(&Setup { url: batching.url("/llm"), ..setup.clone() }, &rec, 3).await;
    assert_eq!((run.completed, run.failed, run.replies), (3, 0, 15), "{run:?}");
    assert_eq!(run.replies_exact, run.replies, "largest difference {}", run.max_abs_diff);
    let page = String::from_utf8(
        awc::Client::new()
            .get(batching.url("/metrics"))
            .send()
            .await
            .unwrap()
            .body()
            .await
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    let count = |name: &str| -> u64 {
        let line = page
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {page}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(count("split_llm_batched_steps_total"), 15);
    let batches = count("split_llm_batches_total");
    // A batch holds a piece of work of one conversation or more: a decode step, or a piece of
    // a prompt (16 rows, the server's default `--llm-prefill-chunk`, the last piece up to 19),
    // so at most one a piece. (Not 15: a prompt in two pieces made 16 batches in CI.)
    let pieces = {
        let (mut left, mut n) = (rec.prompt_tokens(), 1);
        while left > 16 + 3 {
            left -= 16;
            n += 1;
        }
        n
    };
    let most = 3 * (pieces + rec.frames() - 1) as u64;
    assert!((1..=most).contains(&batches), "{batches} batches, at most {most}");

    // No server there: every conversation fails, and the report says why.
    let run = crowd(&Setup { url: "ws://127.0.0.1:9/llm".into(), ..setup }, &rec, 2).await;
    assert_eq!((run.completed, run.failed), (0, 2), "{run:?}");
    assert!(run.first_error.is_some_and(|e| e.contains("connecting")));
}
