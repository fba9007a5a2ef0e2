//! Runs the whole network in a loop on flex: a target for `perf record` and friends.
//!
//! `cargo run -p split-shared --example forward_loop -- WEIGHTS [REPEATS] [THREADS]`
use burn::tensor::{Device, Tensor};
use split_shared::model::{Boundary, EfficientNetLite0};
use std::time::Instant;

/// The network's activations are multi-megabyte buffers allocated and freed on every forward;
/// glibc's allocator hands them back to the OS and page-faults them in again each time
/// (about 44 faults a forward), mimalloc keeps them for reuse: 3–6% of a forward (docs/kernels.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: forward_loop WEIGHTS [REPEATS] [THREADS]")?;
    let repeats: usize = args.next().map_or(Ok(200), |s| s.parse())?;
    let threads: usize = args.next().map_or(Ok(1), |s| s.parse())?;
    split_kernels::set_max_threads(threads);
    let device = Device::flex();
    let model = EfficientNetLite0::load(path.as_ref(), &device)?;
    let x = Tensor::<4>::zeros([1, 3, 224, 224], &device);
    let mut times = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let t = Instant::now();
        drop(model.forward_range(x.clone(), Boundary::INPUT, Boundary::LOGITS)?.into_data());
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    println!("median {:.2} ms, min {:.2} ms", times[repeats / 2], times[0]);
    if std::env::var_os("PER_STAGE").is_some() {
        let stages: Vec<Boundary> = Boundary::all().collect();
        let mut sums = vec![Vec::new(); stages.len() - 1];
        for _ in 0..repeats {
            let mut h = x.clone();
            for (i, w) in stages.windows(2).enumerate() {
                let t = Instant::now();
                h = model.forward_range(h, w[0], w[1])?;
                let _ = h.clone().into_data();
                sums[i].push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        for (w, s) in stages.windows(2).zip(&mut sums) {
            s.sort_by(f64::total_cmp);
            println!("{:>8} -> {:<8} {:.3} ms", w[0].name(), w[1].name(), s[s.len() / 2]);
        }
    }
    Ok(())
}
