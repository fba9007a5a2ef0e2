//! Keeping the shared target directory from filling the disk.
//!
//! Every clone builds into the one target directory outside it (`run.sh`), and cargo names the
//! workspace's test binaries and incremental state by the clone's path: each fresh clone that
//! CI tests adds a few GB that no later build reads. On this project's machine the directory
//! reached 73 GB (69 GB of it `debug/`) and filled the disk mid-test. Before the tests, what no
//! build has touched for a day goes: test executables in `debug/deps` and `debug/incremental`
//! sessions. Libraries (`.rlib`, `.rmeta`, `.so`, `.d`) stay, so dependencies are not rebuilt.

use std::path::Path;
use std::time::{Duration, SystemTime};

/// Untouched for this long, a test binary or incremental session is assumed stale.
const STALE: Duration = Duration::from_secs(24 * 3600);

fn stale(path: &Path, now: SystemTime) -> bool {
    path.symlink_metadata()
        .and_then(|m| m.modified())
        .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > STALE))
}

/// Remove stale test executables and incremental sessions under `target/debug`; returns the
/// bytes of executables freed and the sessions removed. Errors on single entries are skipped:
/// pruning is best effort.
pub fn prune_target(target: &Path) -> (u64, usize) {
    let now = SystemTime::now();
    let (mut freed, mut sessions) = (0, 0);
    let debug = target.join("debug");
    if let Ok(entries) = std::fs::read_dir(debug.join("deps")) {
        for e in entries.flatten() {
            let path = e.path();
            let is_executable = path.extension().is_none() && path.is_file();
            if is_executable && stale(&path, now) {
                let size = e.metadata().map_or(0, |m| m.len());
                if std::fs::remove_file(&path).is_ok() {
                    freed += size;
                }
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir(debug.join("incremental")) {
        for e in entries.flatten() {
            let path = e.path();
            if stale(&path, now) && std::fs::remove_dir_all(&path).is_ok() {
                sessions += 1;
            }
        }
    }
    (freed, sessions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stale_executables_go() {
        let root = std::env::temp_dir().join(format!("split-prune-{}", std::process::id()));
        let deps = root.join("debug/deps");
        std::fs::create_dir_all(&deps).unwrap();
        let old = std::fs::File::create(deps.join("ws-0123")).unwrap();
        old.set_modified(SystemTime::now() - 2 * STALE).unwrap();
        std::fs::write(deps.join("ws-4567"), b"fresh").unwrap();
        let lib = std::fs::File::create(deps.join("libburn-89ab.rlib")).unwrap();
        lib.set_modified(SystemTime::now() - 2 * STALE).unwrap();
        prune_target(&root);
        assert!(!deps.join("ws-0123").exists(), "a stale test binary");
        assert!(deps.join("ws-4567").exists(), "a fresh one stays");
        assert!(deps.join("libburn-89ab.rlib").exists(), "libraries stay");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
