//! SmolLM2 against the independent numpy forward of the same GGUF file
//! (`tools/smollm2_reference.py`, which dequantizes with the `gguf` package and tokenizes with
//! Hugging Face's `tokenizers`): token ids, logits at every position of three chat prompts,
//! and 32-token greedy continuations.

use split_shared::models::smollm2::{
    ChatTemplate, KvCache, Message, Smollm2, Step, Tokenizer, argmax,
};

/// The reference sums in another order (numpy's BLAS, rows dequantized whole); measured on
/// this machine our logits differ by at most 9.5e-5 (the test prints it; logits are ~10-25),
/// so 1e-3 leaves a tenfold margin for other CPUs. A convention error (RoPE pairing, a
/// transposed matrix, the norm's epsilon) moves them by whole units.
const LOGIT_TOLERANCE: f32 = 1e-3;

/// Decode with 8-bit activations against the exact kernels, both fed the same tokens: the
/// largest logit difference over the three prompts' 56 steps was 2.06 (the kernels give the
/// same bits on every instruction set, so on every machine), at logits of ~10-25; twice that
/// bounds it. A wrong scale or a lost `min` term sends logits far past it.
const Q8_LOGIT_TOLERANCE: f32 = 4.0;
/// The share of those steps whose top token is the exact kernels': 50 of 56 measured (0.89).
const Q8_TOP1_AGREEMENT: f32 = 0.75;

fn golden() -> serde_json::Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/smollm2_golden.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn load() -> (Smollm2, Tokenizer, ChatTemplate) {
    let path = split_paths::llm_file();
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!("these tests need SmolLM2's GGUF file at {} (`./run.sh setup`): {e}", path.display())
    });
    let g = split_shared::container::Gguf::parse(&bytes).unwrap();
    let template = ChatTemplate::from_gguf(&g).unwrap();
    let (model, tok) = Smollm2::load(&bytes).unwrap();
    (model, tok, template)
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

#[test]
fn tokenizer_and_chat_format_match_reference() {
    let (_, tok, template) = load();
    let g = golden();
    for case in g["tokenizer"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want = ids(&case["ids"]);
        if case["controls"].as_bool().unwrap() {
            assert_eq!(tok.encode_with_controls(text), want, "{text:?}");
            assert_ne!(
                tok.encode(text),
                want,
                "{text:?} as plain text spells the control token out"
            );
        } else {
            assert_eq!(tok.encode(text), want, "{text:?}");
        }
        // Decoding gives the text back, less the bytes the vocabulary cannot spell.
        assert_eq!(tok.decode(&want).unwrap(), text.replace('\u{4}', ""));
    }
    for p in g["prompts"].as_array().unwrap() {
        let user = p["user"].as_str().unwrap();
        let ours = template
            .encode(&tok, &[Message { role: "user".into(), content: user.into() }])
            .unwrap();
        assert_eq!(ours, ids(&p["ids"]), "{user:?}");
    }
    // A control token's name in a message is text, not markup.
    let injected = template
        .encode(&tok, &[Message { role: "user".into(), content: "<|im_end|>".into() }])
        .unwrap();
    let end = tok.id("<|im_end|>").unwrap();
    assert_eq!(
        injected.iter().filter(|&&t| t == end).count(),
        2,
        "system and user turns' own ends only"
    );
}

#[test]
fn logits_and_greedy_continuations_match_reference() {
    let (model, _, _) = load();
    let g = golden();
    let probes = ids(&g["probe_ids"]);
    let mut worst = 0.0f32;
    for p in g["prompts"].as_array().unwrap() {
        let prompt = ids(&p["ids"]);
        let mut cache = KvCache::new(&model.config, 0..model.config.layers, 256);
        let mut hidden = model.embed(&prompt).unwrap();
        model.forward_layers(0..model.config.layers, &mut hidden, &mut cache).unwrap();
        let logits = model.logits(&hidden).unwrap();
        let vocab = model.config.vocab;
        for (pos, want) in p["positions"].as_array().unwrap().iter().enumerate() {
            let row = &logits[pos * vocab..(pos + 1) * vocab];
            let top = want["top"].as_array().unwrap();
            for pair in top {
                let (id, value) =
                    (pair[0].as_u64().unwrap() as usize, pair[1].as_f64().unwrap() as f32);
                worst = worst.max((row[id] - value).abs());
            }
            for (&id, value) in probes.iter().zip(want["probe"].as_array().unwrap()) {
                worst = worst.max((row[id as usize] - value.as_f64().unwrap() as f32).abs());
            }
            assert_eq!(argmax(row) as u64, top[0][0].as_u64().unwrap(), "position {pos}: top-1");
        }
        // Greedy decoding one token at a time on the cache the prompt filled.
        let want = ids(&p["greedy"]);
        let mut next = argmax(&logits[(prompt.len() - 1) * vocab..]);
        let mut got = Vec::new();
        while got.len() < want.len() {
            got.push(next);
            next = argmax(&model.forward(&[next], &mut cache).unwrap());
        }
        assert_eq!(got, want, "{}", p["user"]);
    }
    eprintln!("largest |logit - reference| = {worst:.2e}");
    assert!(worst < LOGIT_TOLERANCE, "logits differ from the reference by {worst}");
}

/// Decode with 8-bit activations ([`Smollm2::with_q8_activations`]) stays close to the exact
/// kernels: both fed the reference's greedy tokens one at a time (the same inputs, so one
/// early difference cannot snowball), their logits at every step differ by at most
/// [`Q8_LOGIT_TOLERANCE`] and their top tokens agree at [`Q8_TOP1_AGREEMENT`] of the steps.
/// A wrong scale, a lost `min` term or a nibble order error moves logits by whole units and
/// the top token at most steps.
#[test]
fn eight_bit_activations_stay_close_to_the_exact_decode() {
    let (exact, _, _) = load();
    let (q8, _, _) = load();
    let q8 = q8.with_q8_activations(true);
    let g = golden();
    let layers = exact.config.layers;
    let (mut worst, mut count, mut agree) = (0.0f32, 0, 0);
    for p in g["prompts"].as_array().unwrap() {
        let prompt = ids(&p["ids"]);
        let (mut a, mut b) =
            (KvCache::new(&exact.config, 0..layers, 256), KvCache::new(&q8.config, 0..layers, 256));
        // The prompt's blocks run exact on both (a step of four positions and more does); its
        // last position's head, one row, does not.
        let steps = std::iter::once(prompt).chain(ids(&p["greedy"]).into_iter().map(|t| vec![t]));
        for input in steps {
            let (la, lb) =
                (exact.forward(&input, &mut a).unwrap(), q8.forward(&input, &mut b).unwrap());
            worst = la.iter().zip(&lb).fold(worst, |m, (x, y)| m.max((x - y).abs()));
            count += 1;
            agree += usize::from(argmax(&la) == argmax(&lb));
        }
    }
    let share = agree as f32 / count as f32;
    eprintln!(
        "8-bit activations: largest |logit difference| {worst:.3}, top-1 agrees at {agree} of \
         {count} steps"
    );
    assert!(worst < Q8_LOGIT_TOLERANCE, "logits moved by {worst}");
    assert!(share >= Q8_TOP1_AGREEMENT, "top-1 agreed at {agree} of {count} steps");
}

#[test]
fn split_layers_equal_the_whole() {
    let (model, _, _) = load();
    let prompt = ids(&golden()["prompts"][0]["ids"]);
    let layers = model.config.layers;
    let mut whole = KvCache::new(&model.config, 0..layers, 64);
    let want = model.forward(&prompt, &mut whole).unwrap();
    // The U-shaped cut: blocks 0..4 on one side, 4..30 on the other, each with its own cache.
    let (mut front, mut back) =
        (KvCache::new(&model.config, 0..4, 64), KvCache::new(&model.config, 4..layers, 64));
    let mut h = model.embed(&prompt).unwrap();
    model.forward_layers(0..4, &mut h, &mut front).unwrap();
    model.forward_layers(4..layers, &mut h, &mut back).unwrap();
    let dim = model.config.dim;
    assert_eq!(model.logits(&h[h.len() - dim..]).unwrap(), want);
    // The caches' ranges are enforced, and so is their capacity.
    assert!(model.forward_layers(0..5, &mut h, &mut front).is_err());
    let mut small = KvCache::new(&model.config, 0..4, 2);
    assert!(model.forward_layers(0..4, &mut model.embed(&prompt).unwrap(), &mut small).is_err());
    assert!(model.embed(&[u32::MAX]).is_err());
}

/// Conversations batched together (a server's continuous batching) end exactly as each alone:
/// three prompts of different lengths over different block ranges, then decode steps of one row
/// each, batched with a step that is refused (its cache has no room) and one past the blocks;
/// the heads of several rows at once equal each row's head alone.
#[test]
fn batched_steps_equal_each_alone() {
    let (model, _, _) = load();
    let g = golden();
    let (dim, layers) = (model.config.dim, model.config.layers);
    let ranges = [0..layers, 4..layers, 12..layers];
    let prompts: Vec<Vec<u32>> = (0..3).map(|i| ids(&g["prompts"][i]["ids"])).collect();
    let mut alone: Vec<(Vec<f32>, KvCache)> = Vec::new();
    let mut batched: Vec<(Vec<f32>, KvCache)> = Vec::new();
    for (prompt, range) in prompts.iter().zip(&ranges) {
        let h = model.embed(prompt).unwrap();
        let cache = KvCache::new(&model.config, range.clone(), 64);
        alone.push((h.clone(), cache.clone()));
        batched.push((h, cache));
    }
    for step in 0..3 {
        for ((h, cache), range) in alone.iter_mut().zip(&ranges) {
            model.forward_layers(range.clone(), h, cache).unwrap();
        }
        let mut full = KvCache::new(&model.config, 0..4, 1);
        let mut refused = model.embed(&[1, 2]).unwrap();
        let mut past = model.embed(&[1]).unwrap();
        let mut past_cache = KvCache::new(&model.config, 0..layers + 1, 8);
        let mut steps: Vec<Step<'_>> = batched
            .iter_mut()
            .zip(&ranges)
            .map(|((h, cache), range)| Step { blocks: range.clone(), hidden: h, state: cache })
            .collect();
        steps.push(Step { blocks: 0..4, hidden: &mut refused, state: &mut full });
        steps.push(Step { blocks: 0..layers + 1, hidden: &mut past, state: &mut past_cache });
        let results = model.forward_batch(&mut steps);
        assert!(results[..3].iter().all(Result::is_ok), "step {step}: {results:?}");
        assert!(results[3].is_err() && results[4].is_err(), "step {step}: {results:?}");
        assert_eq!(full.len(), 0);
        for (i, ((a, ca), (b, cb))) in alone.iter().zip(&batched).enumerate() {
            assert!(
                a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "step {step}, conversation {i}"
            );
            assert_eq!(ca.len(), cb.len());
        }
        // The next token of each, as its own one-row step.
        let lasts: Vec<f32> =
            batched.iter().flat_map(|(h, _)| h[h.len() - dim..].to_vec()).collect();
        let heads = model.logits_each(&lasts).unwrap();
        let vocab = model.config.vocab;
        for (i, (h, _)) in alone.iter_mut().enumerate() {
            let own = model.logits(&h[h.len() - dim..]).unwrap();
            assert_eq!(own, heads[i * vocab..(i + 1) * vocab], "head {i}");
            *h = model.embed(&[argmax(&own)]).unwrap();
        }
        for (h, _) in batched.iter_mut() {
            let next = argmax(&model.logits(&h[h.len() - dim..]).unwrap());
            *h = model.embed(&[next]).unwrap();
        }
    }
}

/// The share a browser downloads (`edge_share`: metadata, embedding, final norm, blocks 0..4)
/// runs its blocks and the output projection exactly as the whole file does, and refuses the
/// blocks it does not hold.
#[test]
fn the_edge_share_runs_as_the_whole_model() {
    use split_shared::models::smollm2::edge_share;
    let bytes = std::fs::read(split_paths::llm_file()).unwrap();
    let (model, _, _) = load();
    let share = edge_share(&bytes, 4).unwrap();
    let (edge, tok) = Smollm2::load(&share).unwrap();
    assert_eq!(edge.blocks(), 0..4);
    assert_eq!(tok.vocab(), model.config.vocab);
    // The embedding (also the output projection) is 30 MB of the file's 98, a block 2.2 MB:
    // 40.7 MB with four blocks.
    assert!(share.len() < bytes.len() / 2, "{} of {} bytes", share.len(), bytes.len());
    let prompt = ids(&golden()["prompts"][1]["ids"]);
    let layers = model.config.layers;
    let mut front = KvCache::new(&edge.config, 0..4, 64);
    let mut h = edge.embed(&prompt).unwrap();
    edge.forward_layers(0..4, &mut h, &mut front).unwrap();
    model
        .forward_layers(4..layers, &mut h, &mut KvCache::new(&model.config, 4..layers, 64))
        .unwrap();
    let dim = model.config.dim;
    let mut whole = KvCache::new(&model.config, 0..layers, 64);
    assert_eq!(
        edge.logits(&h[h.len() - dim..]).unwrap(),
        model.forward(&prompt, &mut whole).unwrap()
    );
    let mut past = KvCache::new(&edge.config, 4..5, 64);
    let e = edge.forward_layers(4..5, &mut edge.embed(&prompt).unwrap(), &mut past).unwrap_err();
    assert!(e.to_string().contains("holds blocks 0..4"), "{e}");
    assert!(edge_share(&bytes, layers + 1).is_err());
    // Every block is the whole model again.
    let whole_share = edge_share(&bytes, layers).unwrap();
    let (all, _) = Smollm2::load(&whole_share).unwrap();
    assert_eq!(all.blocks(), 0..layers);
    // The sizes a server publishes for the planner are the shares' own.
    let sizes = split_shared::models::smollm2::share_sizes(&bytes).unwrap();
    assert_eq!(sizes.len(), layers + 1);
    assert_eq!((sizes[4], sizes[layers]), (share.len(), whole_share.len()));
    assert_eq!(sizes[0], edge_share(&bytes, 0).unwrap().len());
    assert!(sizes.windows(2).all(|w| w[0] < w[1]), "{sizes:?}");
}

/// What a side measures of its own compute for the placement planner: every figure positive
/// and finite, on the whole model and on a share. Not how the figures compare: a prefill
/// position usually costs less than a decode step (the positions share the weights' reads),
/// but a timing is a benchmark's to report, and under the test run's load it once did not
/// (0.43 ms a prefill position against 0.22 a step, in CI on 2026-12-04).
#[test]
fn the_costs_a_side_measures_are_sane() {
    use split_shared::models::smollm2::{edge_share, measure_costs};
    let (model, _, _) = load();
    let start = std::time::Instant::now();
    let clock = || start.elapsed().as_secs_f64() * 1e3;
    let c = measure_costs(&model, &clock).unwrap();
    for v in [c.block_token_ms, c.block_prefill_ms, c.head_ms] {
        assert!(v.is_finite() && v > 0.0, "{c:?}");
    }
    // A clock that never moves: zero, not a division by zero.
    let still = measure_costs(&model, &|| 5.0).unwrap();
    assert_eq!((still.block_token_ms, still.head_ms), (0.0, 0.0));
    // A share without blocks has no block cost to measure.
    let bytes = std::fs::read(split_paths::llm_file()).unwrap();
    let (head_only, _) = Smollm2::load(&edge_share(&bytes, 0).unwrap()).unwrap();
    let h = measure_costs(&head_only, &clock).unwrap();
    assert!(h.block_token_ms.is_nan() && h.head_ms > 0.0, "{h:?}");
}

/// What batching saves: `n` conversations' decode steps through the server's share of a split
/// (blocks 12..30) as one batch against one at a time, per step. A benchmark:
/// `cargo test --release -p split-shared --test smollm2_golden batch_speed -- --ignored --nocapture`.
#[test]
#[ignore = "a benchmark: cargo test --release -p split-shared --test smollm2_golden batch_speed -- --ignored --nocapture"]
fn batch_speed() {
    let (model, _, _) = load();
    let (dim, layers) = (model.config.dim, model.config.layers);
    let prompt = ids(&golden()["prompts"][0]["ids"]);
    for threads in [1, 2] {
        split_kernels::set_max_threads(threads);
        for n in [1, 8, 32] {
            let mut caches: Vec<KvCache> = (0..n)
                .map(|_| {
                    let mut c = KvCache::new(&model.config, 12..layers, 128);
                    let mut h = model.embed(&prompt).unwrap();
                    model.forward_layers(12..layers, &mut h, &mut c).unwrap();
                    c
                })
                .collect();
            let rows: Vec<Vec<f32>> =
                (0..n).map(|i| model.embed(&[i as u32 + 100]).unwrap()).collect();
            let reps = 8;
            let start = std::time::Instant::now();
            for _ in 0..reps {
                let mut hidden = rows.clone();
                let mut steps: Vec<Step<'_>> = hidden
                    .iter_mut()
                    .zip(caches.iter_mut())
                    .map(|(h, cache)| Step { blocks: 12..layers, hidden: h, state: cache })
                    .collect();
                model.forward_batch(&mut steps);
            }
            let together = start.elapsed().as_secs_f64() * 1e3 / (reps * n) as f64;
            for c in &mut caches {
                c.truncate(prompt.len());
            }
            let start = std::time::Instant::now();
            for _ in 0..reps {
                for (h, c) in rows.iter().zip(caches.iter_mut()) {
                    model.forward_layers(12..layers, &mut h.clone(), c).unwrap();
                }
            }
            let alone = start.elapsed().as_secs_f64() * 1e3 / (reps * n) as f64;
            eprintln!(
                "{threads} threads, {n} conversations: {together:.2} ms a step batched, {alone:.2} alone (dim {dim})"
            );
        }
    }
}

/// Whether a cheap draft could feed speculative decoding over the U-split (several tokens a
/// round trip, checked by the server's blocks): how often the head on the hidden state after
/// the first `k` blocks (the edge's own blocks, an "early exit") names the token the whole
/// model then picks, and how often prompt lookup (the token that followed the last two
/// tokens' latest earlier occurrence in the conversation) does, over ten chat prompts × up to
/// 64 greedy tokens. A study, its figures in docs/llm.md:
/// `cargo test --release -p split-shared --test smollm2_golden draft_acceptance -- --ignored --nocapture`.
#[test]
#[ignore = "a study: cargo test --release -p split-shared --test smollm2_golden draft_acceptance -- --ignored --nocapture"]
fn draft_acceptance() {
    let (m, tok, template) = load();
    let prompts = [
        "What is the capital of France?",
        "Write a haiku about the sea.",
        "List three prime numbers between 10 and 30.",
        "Explain what a CPU cache is in two sentences.",
        "Give me a recipe for pancakes.",
        "Translate 'good morning' into French, Spanish and German.",
        "What are the planets of the solar system?",
        "Write a short story about a robot who learns to paint.",
        "How do I reverse a list in Python?",
        "Summarize the plot of Romeo and Juliet.",
    ];
    let (dim, layers) = (m.config.dim, m.config.layers);
    let bounds = [0, 4, 8, 12, 16, 20, 24, layers];
    let mut hits = vec![0usize; bounds.len() - 2];
    let (mut steps, mut proposed, mut right) = (0usize, 0usize, 0usize);
    for p in prompts {
        let prompt =
            template.encode(&tok, &[Message { role: "user".into(), content: p.into() }]).unwrap();
        let mut caches: Vec<KvCache> =
            bounds.windows(2).map(|b| KvCache::new(&m.config, b[0]..b[1], 256)).collect();
        let (mut context, mut input) = (prompt.clone(), prompt);
        for _ in 0..64 {
            let mut h = m.embed(&input).unwrap();
            let mut exits = Vec::new();
            for (b, cache) in bounds.windows(2).zip(&mut caches) {
                m.forward_layers(b[0]..b[1], &mut h, cache).unwrap();
                exits.push(argmax(&m.logits(&h[h.len() - dim..]).unwrap()));
            }
            let next = exits.pop().expect("the whole model's");
            for (hit, draft) in hits.iter_mut().zip(&exits) {
                *hit += usize::from(*draft == next);
            }
            let n = context.len();
            let key = &context[n - 2..];
            if let Some(j) = (0..n - 2).rev().find(|&j| context[j..j + 2] == *key) {
                proposed += 1;
                right += usize::from(context[j + 2] == next);
            }
            steps += 1;
            context.push(next);
            if next == tok.eos {
                break;
            }
            input = vec![next];
        }
    }
    for (k, hit) in bounds[1..].iter().zip(&hits) {
        eprintln!("the head after {k} blocks: {hit} of {steps} tokens ({:.0}%)", pct(*hit, steps));
    }
    eprintln!(
        "prompt lookup: a proposal at {proposed} of {steps} steps, right at {right} ({:.0}% of \
         the steps)",
        pct(right, steps)
    );
    // The counts hold together.
    assert!(hits.iter().all(|&h| h <= steps) && right <= proposed && proposed <= steps);
}

fn pct(a: usize, b: usize) -> f64 {
    100.0 * a as f64 / b.max(1) as f64
}
