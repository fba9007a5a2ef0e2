//! The site's version: one id for everything a page needs to start (the served files, this
//! server's build, its weights, calibration and cost table), sent as the [`SITE_HEADER`] of
//! those responses and as `/api/info`'s `site`.
//!
//! The demo's service worker (`web/sw.js`) files every response in a cache named by this id
//! and, when the server is out of reach, starts the page from the cache of the last id a page
//! started with: never a wasm build of one server with the weights or `/api/info` of another.
//! A new server build, other weights or a changed web folder make a new id, and the next start
//! online drops the old caches.

use std::path::Path;

use split_shared::container::fnv1a64;

/// The response header naming the site version a response belongs to.
pub const SITE_HEADER: &str = "split-site";

/// The site's id: 16 hex digits of a hash over the served files' names, sizes and times of
/// change (not their bytes: the wasm builds are megabytes, and a rebuild changes the time),
/// this executable's size and time, and `parts` (the weights', calibration's and cost table's
/// identities). Computed once at start-up.
pub fn site_id(web_dir: &Path, parts: &[&str]) -> String {
    let mut seen = Vec::new();
    seen.extend_from_slice(env!("CARGO_PKG_VERSION").as_bytes());
    if let Ok(exe) = std::env::current_exe() {
        stamp(&mut seen, &exe);
    }
    for part in parts {
        seen.extend_from_slice(part.as_bytes());
        seen.push(0);
    }
    for entry in crate::static_files::SERVED {
        walk(&mut seen, web_dir, &web_dir.join(entry));
    }
    format!("{:016x}", fnv1a64(&seen))
}

/// Add `path`'s size and modification time (nothing when it is missing).
fn stamp(seen: &mut Vec<u8>, path: &Path) {
    let Ok(meta) = path.metadata() else { return };
    seen.extend_from_slice(&meta.len().to_le_bytes());
    let modified = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    seen.extend_from_slice(&modified.map_or(0, |d| d.as_nanos()).to_le_bytes());
}

/// Add every file under `path` (in name order; symlinks and `node_modules` left out, as the
/// server does not serve them or they are tooling), each as its path under `root`, size and time.
fn walk(seen: &mut Vec<u8>, root: &Path, path: &Path) {
    let Ok(meta) = path.symlink_metadata() else { return };
    if meta.is_file() {
        seen.extend_from_slice(
            path.strip_prefix(root).unwrap_or(path).as_os_str().as_encoded_bytes(),
        );
        seen.push(0);
        stamp(seen, path);
    } else if meta.is_dir() && path.file_name().is_none_or(|n| n != "node_modules") {
        let Ok(entries) = std::fs::read_dir(path) else { return };
        let mut children: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        children.sort();
        for child in children {
            walk(seen, root, &child);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The id follows what a page would load: a served file changed or added, or other
    /// weights, make a new one; a file the server does not serve does not.
    #[test]
    fn changes_with_what_is_served() {
        let root = std::env::temp_dir().join(format!("split-site-{}", std::process::id()));
        std::fs::create_dir_all(root.join("client")).unwrap();
        std::fs::write(root.join("client/a.js"), "one").unwrap();
        let first = site_id(&root, &["weights-1"]);
        assert_eq!(first.len(), 16);
        assert_eq!(site_id(&root, &["weights-1"]), first, "the same folder, the same id");
        assert_ne!(site_id(&root, &["weights-2"]), first, "other weights");
        std::fs::write(root.join("package.json"), "{}").unwrap();
        assert_eq!(site_id(&root, &["weights-1"]), first, "a file that is not served");
        std::fs::write(root.join("client/a.js"), "two!").unwrap();
        let second = site_id(&root, &["weights-1"]);
        assert_ne!(second, first, "a served file changed");
        std::fs::write(root.join("index.html"), "<p>").unwrap();
        assert_ne!(site_id(&root, &["weights-1"]), second, "a served file added");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
