//! What the language model's studies (`llm_invert`, `llm_codec`) share: the model loaded from
//! its GGUF file, the prompts file, the blocks a split may keep, and the JSON report written
//! with the command that made it.

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use split_shared::models::smollm2::{ChatTemplate, Smollm2, Tokenizer};

/// The model, its tokenizer and chat format, and the file's name (for the report).
pub struct Chat {
    /// The model, every block loaded.
    pub model: Smollm2,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// Its chat format.
    pub template: ChatTemplate,
    /// The file's name.
    pub file: String,
}

impl Chat {
    /// The GGUF file at `path`, or the one `./run.sh setup` fetched.
    pub fn load(path: Option<&Path>) -> Result<Self> {
        let path = path.map_or_else(split_paths::llm_file, Path::to_path_buf);
        let bytes = std::fs::read(&path)
            .with_context(|| format!("reading {} (`./run.sh setup` fetches it)", path.display()))?;
        let gguf = split_shared::container::Gguf::parse(&bytes)?;
        let template = ChatTemplate::from_gguf(&gguf)?;
        let (model, tokenizer) = Smollm2::load_parsed(&gguf)?;
        let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(Self { model, tokenizer, template, file })
    }

    /// `--blocks` checked: a split keeps 1 to `layers − 1` blocks in the browser.
    pub fn check_blocks(&self, blocks: &[usize]) -> Result<()> {
        let layers = self.model.config.layers;
        if let Some(&bad) = blocks.iter().find(|&&b| b == 0 || b >= layers) {
            bail!("--blocks {bad}: a split keeps 1 to {} blocks in the browser", layers - 1);
        }
        Ok(())
    }
}

/// The prompts of a file, one per non-empty line.
pub fn read_prompts(path: &Path) -> Result<Vec<String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect())
}

/// The command as a person types it: `./run.sh <task> <arguments>`.
pub fn command_line() -> String {
    std::iter::once("./run.sh".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `report` as pretty JSON at `out`, its folder made if needed.
pub fn write_report(out: &Path, report: &impl Serialize) -> Result<()> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(out, serde_json::to_string_pretty(report)? + "\n")
        .with_context(|| format!("writing {}", out.display()))
}
