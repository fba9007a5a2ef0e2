//! The demo's static files, served from an allow-list: the page, the client, the wasm builds
//! and the sample photos. Anything else in the web folder (`node_modules/`, the browser tests,
//! `package.json`) is the project's tooling, not the site, and a symlink could point anywhere
//! on the machine, so neither is served.

use std::path::Path;

/// First path components that are served; every other request under `/` is a 404.
pub const SERVED: &[&str] = &[
    "index.html",
    "app.js",
    "camera.js",
    "seen.js",
    "devices.js",
    "chat-ui.js",
    "qr.js",
    "style.css",
    "split-client.js",
    "split-client.d.ts",
    "sw.js",
    "client",
    "pkg",
    "pkg-cpu",
    "pkg-cpu-relaxed",
    "pkg-cpu-threads",
    "pkg-cpu-threads-simd128",
    "samples",
    "examples",
];

/// Whether `path` (relative to `root`, as actix-files resolved it) may be served: the index
/// (empty path), or a path under an allow-listed entry with no symlink along the way.
pub fn servable(root: &Path, path: &Path) -> bool {
    let mut components = path.components();
    let Some(first) = components.next() else { return true };
    if !SERVED.iter().any(|s| first.as_os_str() == *s) {
        return false;
    }
    // Each prefix of the path must be a plain directory or file: checking the last alone would
    // miss a symlinked directory in the middle.
    let mut at = root.to_path_buf();
    path.components().all(|c| {
        at.push(c);
        match at.symlink_metadata() {
            Ok(m) => !m.file_type().is_symlink(),
            Err(_) => true, // a missing file: actix-files answers 404 itself
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_entries_without_symlinks() {
        let root = std::env::temp_dir().join(format!("split-static-{}", std::process::id()));
        std::fs::create_dir_all(root.join("pkg")).unwrap();
        std::fs::write(root.join("pkg/a.js"), "x").unwrap();
        std::fs::create_dir_all(root.join("node_modules/x")).unwrap();
        let _ = std::os::unix::fs::symlink("/etc", root.join("samples"));
        assert!(servable(&root, Path::new("")));
        assert!(servable(&root, Path::new("pkg/a.js")));
        assert!(servable(&root, Path::new("index.html")));
        assert!(!servable(&root, Path::new("node_modules/x")));
        assert!(!servable(&root, Path::new("package.json")));
        assert!(!servable(&root, Path::new("tests/e2e.mjs")));
        assert!(!servable(&root, Path::new("samples/passwd")), "a symlink out of the folder");
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// Every page file at the web folder's top (scripts, styles, the page) is on the list: one
    /// left off is a 404 the page's imports fail on.
    #[test]
    fn every_page_file_is_served() {
        let web = Path::new(env!("CARGO_MANIFEST_DIR")).join("../web");
        for entry in std::fs::read_dir(&web).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if [".js", ".css", ".html"].iter().any(|ext| name.ends_with(ext)) {
                assert!(SERVED.contains(&name.as_str()), "web/{name} is not served");
            }
        }
    }
}
