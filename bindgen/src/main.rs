//! `split-bindgen <module.wasm> <out-dir> <out-name>`: the JavaScript bindings and TypeScript
//! declarations of one browser module, for `<script type="module">` use (what `wasm-bindgen
//! --target web --remove-name-section --remove-producers-section` makes).

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: split-bindgen <module.wasm> <out-dir> <out-name>\n\
    Writes <out-name>.js, <out-name>.d.ts and <out-name>_bg.wasm into <out-dir>.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let [input, out_dir, out_name] = args.as_slice() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    match generate(PathBuf::from(input), PathBuf::from(out_dir), out_name) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("split-bindgen: {input}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn generate(input: PathBuf, out_dir: PathBuf, out_name: &str) -> anyhow::Result<()> {
    let mut b = wasm_bindgen_cli_support::Bindgen::new();
    b.web(true)?
        .input_path(input)
        .out_name(out_name)
        .typescript(true)
        .remove_name_section(true)
        .remove_producers_section(true)
        // What the command line passes unless told otherwise.
        .omit_default_module_path(false);
    b.generate(out_dir)
}
