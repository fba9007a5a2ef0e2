use super::*;

/// SmolLM2-135M as the lab ran it (`reports/llm-placements/data.json`): 30 blocks, `f16` rows
/// of 576 values, the shares it downloaded (12 blocks, the tokenizer, the whole file).
fn smollm2() -> LlmShape {
    let mut share_bytes = vec![f64::NAN; 31];
    share_bytes[12] = 58_456_736.0;
    share_bytes[30] = 98_362_432.0;
    // Between the embedding's 36 MB and the whole file, about 2 MB a block.
    for (k, s) in share_bytes.iter_mut().enumerate() {
        if s.is_nan() {
            *s = 36_000_000.0 + k as f64 * 2_080_000.0;
        }
    }
    LlmShape { layers: 30, row_bytes: 1152.0, share_bytes, tokenizer_bytes: 1_769_536.0 }
}

/// A server twice as fast as the browser; prefill positions a quarter of a decode step.
fn costs() -> (LlmSideCosts, LlmSideCosts) {
    let edge = LlmSideCosts { block_token_ms: 1.6, block_prefill_ms: 0.4, head_ms: 12.0 };
    let server = LlmSideCosts { block_token_ms: 0.8, block_prefill_ms: 0.2, head_ms: 6.0 };
    (edge, server)
}

fn link(rtt_ms: f64, up_kbps: f64, down_kbps: f64) -> LlmLink {
    LlmLink { rtt_ms, up_kbps, down_kbps }
}

const FOUR_G: LlmLink = LlmLink { rtt_ms: 50.0, up_kbps: 5000.0, down_kbps: 20000.0 };

fn work(prefill_chunk: usize) -> LlmWorkload {
    LlmWorkload {
        prompt_tokens: 39,
        answer_tokens: 32,
        prefill_chunk,
        count_download: false,
        cached_shares: Vec::new(),
        cached_tokenizer: false,
    }
}

/// A lab row's placement (`lab/src/llm_placements.rs` names them) with `k` edge blocks, and
/// the parts its prompt went in (8 positions pipelined, else one frame).
fn lab_placement(name: &str, k: usize) -> (LlmPlacement, usize) {
    match name {
        "edge-only" => (LlmPlacement::Edge, 0),
        "u-split" => (LlmPlacement::Split { blocks: k }, 0),
        "u-split-pipelined" => (LlmPlacement::Split { blocks: k }, 8),
        "plain-split" => (LlmPlacement::Plain { blocks: k }, 0),
        "cloud-only" => (LlmPlacement::Cloud, 0),
        other => panic!("a placement the planner does not know: {other}"),
    }
}

#[test]
fn bytes_are_the_frames_the_lab_counted() {
    // Every row of the committed lab run: what each placement sent and received, to the byte.
    let data = lab_run();
    let shape = smollm2();
    let (edge, server) = costs();
    let w = LlmWorkload {
        prompt_tokens: data["prompt_tokens"].as_u64().unwrap() as usize,
        answer_tokens: 32,
        prefill_chunk: 0,
        count_download: false,
        cached_shares: Vec::new(),
        cached_tokenizer: false,
    };
    let k = data["blocks"].as_u64().unwrap() as usize;
    let mut checked = 0;
    for run in data["links"].as_array().unwrap() {
        for row in run["rows"].as_array().unwrap() {
            assert_eq!(row["tokens"].as_u64(), Some(32), "{row}");
            let (placement, chunk) = lab_placement(row["placement"].as_str().unwrap(), k);
            let e = estimate_llm(
                &shape,
                &edge,
                &server,
                &FOUR_G,
                &LlmWorkload { prefill_chunk: chunk, ..w.clone() },
                placement,
            );
            assert_eq!(e.bytes_up, row["bytes_up"].as_f64().unwrap(), "{row}");
            assert_eq!(e.bytes_down, row["bytes_down"].as_f64().unwrap(), "{row}");
            assert_eq!(e.download_bytes, row["edge_download_bytes"].as_f64().unwrap(), "{row}");
            checked += 1;
        }
    }
    assert!(checked >= 10, "{checked} rows");
}

/// The lab's run (`reports/llm-placements/data.json`): what each side measured of itself and
/// what each placement took on each link.
fn lab_run() -> serde_json::Value {
    serde_json::from_str(include_str!("../../../../reports/llm-placements/data.json")).unwrap()
}

#[test]
fn predictions_are_near_what_the_lab_measured() {
    // From the costs the run measured, each placement's whole answer within 20% of the
    // measured one, and the placement predicted fastest measured within 5% of the fastest.
    let data = lab_run();
    let costs = |key: &str| -> LlmSideCosts { serde_json::from_value(data[key].clone()).unwrap() };
    let (edge, server) = (costs("edge_costs"), costs("server_costs"));
    let k = data["blocks"].as_u64().unwrap() as usize;
    let mut shape = smollm2();
    for run in data["links"].as_array().unwrap() {
        let mut l: LlmLink = serde_json::from_value(run["link"].clone()).unwrap();
        // The round trip the lab measured through its emulator, as the page predicts from
        // the round trip it measures.
        l.rtt_ms = run["measured_rtt_ms"].as_f64().unwrap();
        let mut measured = Vec::new();
        let mut predicted = Vec::new();
        for row in run["rows"].as_array().unwrap() {
            let (placement, chunk) = lab_placement(row["placement"].as_str().unwrap(), k);
            let n = row["tokens"].as_f64().unwrap();
            let ms = |first: &str, rate: &str| {
                row[first].as_f64().unwrap() + (n - 1.0) * 1e3 / row[rate].as_f64().unwrap()
            };
            shape.share_bytes[placement.edge_blocks(30)] =
                row["edge_download_bytes"].as_f64().unwrap();
            let work = LlmWorkload { answer_tokens: n as usize, ..work(chunk) };
            let e = estimate_llm(&shape, &edge, &server, &l, &work, placement);
            let real = ms("first_token_ms", "tokens_per_s");
            assert!((e.answer_ms / real - 1.0).abs() < 0.2, "{row}: predicted {e:?}");
            measured.push(real);
            predicted.push(e.answer_ms);
        }
        let best = measured.iter().copied().fold(f64::INFINITY, f64::min);
        let chosen = predicted.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
        assert!(measured[chosen] <= best * 1.05, "{}: {measured:?} {predicted:?}", run["link"]);
    }
}

#[test]
fn equal_compute_and_a_perfect_link_make_cloud_and_edge_equal() {
    let shape = smollm2();
    let same = LlmSideCosts { block_token_ms: 1.0, block_prefill_ms: 0.25, head_ms: 5.0 };
    let perfect = link(0.0, f64::INFINITY, f64::INFINITY);
    let at = |p| estimate_llm(&shape, &same, &same, &perfect, &work(0), p);
    let (cloud, edge) = (at(LlmPlacement::Cloud), at(LlmPlacement::Edge));
    assert!((cloud.first_token_ms - edge.first_token_ms).abs() < 1e-9, "{cloud:?} {edge:?}");
    assert!((cloud.token_ms - edge.token_ms).abs() < 1e-9);
    // A split of the same compute costs the same too, whichever side runs the head.
    for p in [LlmPlacement::Split { blocks: 12 }, LlmPlacement::Plain { blocks: 4 }] {
        assert!((at(p).answer_ms - edge.answer_ms).abs() < 1e-9, "{p:?}");
    }
}

#[test]
fn a_split_pays_the_round_trip_each_token_and_cloud_only_does_not() {
    let shape = smollm2();
    let (edge, server) = costs();
    let near = link(10.0, 20_000.0, 50_000.0);
    let far = link(160.0, 20_000.0, 50_000.0);
    for p in [LlmPlacement::Split { blocks: 12 }, LlmPlacement::Plain { blocks: 12 }] {
        let (a, b) = (
            estimate_llm(&shape, &edge, &server, &near, &work(0), p),
            estimate_llm(&shape, &edge, &server, &far, &work(0), p),
        );
        assert!((b.token_ms - a.token_ms - 150.0).abs() < 1e-9, "{p:?}");
        assert!((b.first_token_ms - a.first_token_ms - 150.0).abs() < 1e-9, "{p:?}");
    }
    let (a, b) = (
        estimate_llm(&shape, &edge, &server, &near, &work(0), LlmPlacement::Cloud),
        estimate_llm(&shape, &edge, &server, &far, &work(0), LlmPlacement::Cloud),
    );
    assert_eq!(a.token_ms, b.token_ms, "streamed: the link's delay is paid once");
    assert!((b.first_token_ms - a.first_token_ms - 150.0).abs() < 1e-9);
}

#[test]
fn a_pipelined_prompt_is_never_slower_and_faster_when_the_stages_overlap() {
    let shape = smollm2();
    let (edge, server) = costs();
    let split = LlmPlacement::Split { blocks: 12 };
    for l in [FOUR_G, link(150.0, 750.0, 1600.0), link(10.0, 20_000.0, 50_000.0)] {
        let whole = estimate_llm(&shape, &edge, &server, &l, &work(0), split);
        let parts = estimate_llm(&shape, &edge, &server, &l, &work(8), split);
        assert!(parts.first_token_ms < whole.first_token_ms, "{l:?}: {parts:?} {whole:?}");
        assert_eq!(parts.token_ms, whole.token_ms);
    }
    // One part is the whole prompt.
    let one = estimate_llm(&shape, &edge, &server, &FOUR_G, &work(64), split);
    let whole = estimate_llm(&shape, &edge, &server, &FOUR_G, &work(0), split);
    assert_eq!(one.first_token_ms, whole.first_token_ms);
}

#[test]
fn the_privacy_floor_keeps_text_and_early_states_in_the_browser() {
    let shape = smollm2();
    let limits = LlmLimits { privacy_floor: 12, memory_bytes: None };
    let refusal = |p| llm_refusal(&shape, &limits, p);
    assert_eq!(refusal(LlmPlacement::Cloud), Some(LlmRefusal::PrivacyFloor));
    assert_eq!(refusal(LlmPlacement::Plain { blocks: 16 }), Some(LlmRefusal::PrivacyFloor));
    assert_eq!(refusal(LlmPlacement::Split { blocks: 8 }), Some(LlmRefusal::PrivacyFloor));
    assert_eq!(refusal(LlmPlacement::Split { blocks: 12 }), None);
    assert_eq!(refusal(LlmPlacement::Edge), None);
    assert_eq!(refusal(LlmPlacement::Split { blocks: 30 }), Some(LlmRefusal::NoSuchSplit));
    assert_eq!(refusal(LlmPlacement::Plain { blocks: 0 }), Some(LlmRefusal::NoSuchSplit));
    // No floor: everything the model has.
    let open = LlmLimits { privacy_floor: 0, memory_bytes: None };
    for p in llm_candidates(&[1, 4, 12, 29]) {
        assert_eq!(llm_refusal(&shape, &open, p), None, "{p:?}");
    }
}

#[test]
fn the_memory_budget_refuses_shares_over_it() {
    let shape = smollm2();
    let limits = LlmLimits { privacy_floor: 0, memory_bytes: Some(64e6) };
    assert_eq!(llm_refusal(&shape, &limits, LlmPlacement::Edge), Some(LlmRefusal::Memory));
    assert_eq!(llm_refusal(&shape, &limits, LlmPlacement::Split { blocks: 12 }), None);
    assert_eq!(
        llm_refusal(&shape, &limits, LlmPlacement::Split { blocks: 16 }),
        Some(LlmRefusal::Memory)
    );
    assert_eq!(llm_refusal(&shape, &limits, LlmPlacement::Cloud), None);
}

#[test]
fn the_choice_follows_the_link_the_floor_and_the_budget() {
    let shape = smollm2();
    let (edge, server) = costs();
    let candidates = llm_candidates(&[1, 2, 4, 8, 12, 16]);
    let choose_with = |edge: &LlmSideCosts, l: &LlmLink, w: &LlmWorkload, floor, memory| {
        let limits = LlmLimits { privacy_floor: floor, memory_bytes: memory };
        plan_llm(&shape, edge, &server, l, w, &limits, &candidates).unwrap()
    };
    let choose =
        |l: &LlmLink, w: &LlmWorkload, floor, memory| choose_with(&edge, l, w, floor, memory);
    let w = work(8);
    // No floor: the faster server streams the answer.
    let plan = choose(&FOUR_G, &w, 0, None);
    assert_eq!(plan.chosen.placement, LlmPlacement::Cloud, "{plan:?}");
    assert!(plan.ranked.windows(2).all(|p| p[0].answer_ms <= p[1].answer_ms));
    assert!(plan.refused.is_empty());
    // The default floor on 4G: a split's round trip a token costs more than running the rest
    // of the model here, so the whole model runs in the browser...
    let plan = choose(&FOUR_G, &w, 12, None);
    assert_eq!(plan.chosen.placement, LlmPlacement::Edge, "{plan:?}");
    assert_eq!(plan.refused.len(), 1 + 6 + 4, "cloud, plain at all six, split under 12");
    // ... unless it does not fit: then the split at the floor, the fewest blocks allowed.
    let plan = choose(&FOUR_G, &w, 12, Some(64e6));
    assert_eq!(plan.chosen.placement, LlmPlacement::Split { blocks: 12 }, "{plan:?}");
    // A near server over a fast link, with a slow browser: the split beats edge-only.
    let slow = LlmSideCosts { block_token_ms: 6.0, block_prefill_ms: 1.5, head_ms: 45.0 };
    let wifi = link(4.0, 50_000.0, 100_000.0);
    let plan = choose_with(&slow, &wifi, &w, 12, None);
    assert_eq!(plan.chosen.placement, LlmPlacement::Split { blocks: 12 }, "{plan:?}");
    // A first visit counts the downloads: on 3G with no floor the tokenizer alone wins even
    // against a browser as fast as the server.
    let three_g = link(150.0, 750.0, 1600.0);
    let first = LlmWorkload { count_download: true, ..w.clone() };
    let plan = choose_with(&server, &three_g, &first, 0, None);
    assert_eq!(plan.chosen.placement, LlmPlacement::Cloud, "{plan:?}");
    assert!(plan.ranked.iter().all(|e| e.download_ms > 0.0));
    // With the whole model already in the browser's cache, it runs there.
    let kept = LlmWorkload { cached_shares: vec![30], ..first };
    let plan = choose_with(&server, &three_g, &kept, 0, None);
    assert_eq!(plan.chosen.placement, LlmPlacement::Edge, "{plan:?}");
    assert_eq!(plan.chosen.download_ms, 0.0);
}

#[test]
fn nothing_fits_names_every_refusal() {
    let shape = smollm2();
    let (edge, server) = costs();
    let limits = LlmLimits { privacy_floor: 12, memory_bytes: Some(10e6) };
    let candidates = llm_candidates(&[4, 12]);
    let err =
        plan_llm(&shape, &edge, &server, &FOUR_G, &work(0), &limits, &candidates).unwrap_err();
    assert_eq!(err.0.len(), candidates.len());
    assert!(err.0.contains(&(LlmPlacement::Edge, LlmRefusal::Memory)));
    assert!(err.0.contains(&(LlmPlacement::Cloud, LlmRefusal::PrivacyFloor)));
}

#[test]
fn placements_read_as_the_chat_names_them() {
    let p: LlmPlacement = serde_json::from_str(r#"{"placement":"split","blocks":12}"#).unwrap();
    assert_eq!(p, LlmPlacement::Split { blocks: 12 });
    assert_eq!(serde_json::to_string(&LlmPlacement::Cloud).unwrap(), r#"{"placement":"cloud"}"#);
    let e = estimate_llm(
        &smollm2(),
        &costs().0,
        &costs().1,
        &FOUR_G,
        &work(0),
        LlmPlacement::Plain { blocks: 4 },
    );
    let json = serde_json::to_value(e).unwrap();
    assert_eq!(json["placement"], "plain");
    assert_eq!(json["blocks"], 4);
    assert!(json["firstTokenMs"].as_f64().unwrap() > 0.0);
}
