//! `./run.sh train <what>`: training in burn, by distillation from the whole network on the dev
//! photos not held back ([`data`]). What it trains so far: early-exit heads (`exits`), a
//! learned bottleneck at a boundary (`bottleneck`, its parts in `coder`) and a light model for
//! outages on a smaller input (`light`).
//!
//! Training runs on burn's autodiff (`flex` wrapped in it, the plain-op path), which this
//! crate builds only with its `train` feature: without it the command runs itself again from a
//! `split-studies` built with it, as the attacks do.

#[cfg(feature = "train")]
pub mod bottleneck;
#[cfg(feature = "train")]
mod coder;
pub mod data;
#[cfg(feature = "train")]
pub mod exits;
#[cfg(feature = "train")]
pub mod head;
#[cfg(feature = "train")]
mod learned;
#[cfg(feature = "train")]
pub mod light;

use anyhow::Result;

/// What to train.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand, Debug)]
enum What {
    /// Early-exit heads at chosen boundaries, with the confidence threshold of each.
    Exits(ExitsArgs),
    /// A learned linear bottleneck at a boundary: agreement per width and bit depth.
    Bottleneck(BottleneckArgs),
    /// A light model for outages: the whole network on a smaller input, its biases distilled.
    Light(LightArgs),
}

#[cfg(feature = "train")]
type ExitsArgs = exits::Args;
#[cfg(feature = "train")]
type BottleneckArgs = bottleneck::Args;
#[cfg(feature = "train")]
type LightArgs = light::Args;

/// Without the `train` feature the arguments are passed on as they are, `--help` included
/// (the build with the feature knows the options).
#[cfg(not(feature = "train"))]
#[derive(clap::Args, Debug)]
#[command(disable_help_flag = true)]
struct Passed {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<String>,
}
#[cfg(not(feature = "train"))]
type ExitsArgs = Passed;
#[cfg(not(feature = "train"))]
type BottleneckArgs = Passed;
#[cfg(not(feature = "train"))]
type LightArgs = Passed;

/// `./run.sh train`.
pub fn run(a: Args) -> Result<()> {
    #[cfg(feature = "train")]
    return match a.what {
        What::Exits(e) => exits::run(e),
        What::Bottleneck(b) => bottleneck::run(b),
        What::Light(l) => light::run(l),
    };
    #[cfg(not(feature = "train"))]
    {
        let _ = a;
        eprintln!(
            "split-studies: training needs burn's autodiff; running split-studies built with \
             --features train"
        );
        let mut cargo = xtask::cmd::cargo();
        cargo.args(["run", "--package", "split-studies", "--features", "train", "--"]);
        cargo.args(std::env::args_os().skip(1));
        xtask::cmd::run(&mut cargo)
    }
}
