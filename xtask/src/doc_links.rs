//! The docs' links, checked: every relative link in a committed Markdown file names a file that
//! exists, and every `#anchor` names a heading of the page it points to (GitHub's rule for
//! turning a heading into an anchor). Moving a section or renaming a heading otherwise leaves
//! links that look fine in a diff and lead nowhere. `./run.sh docs` runs it in both modes.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result};

/// A link that leads nowhere: the file it is in, its line, the target and why.
#[derive(Debug, PartialEq, Eq)]
pub struct Broken {
    /// The Markdown file the link is in, relative to the repository.
    pub file: String,
    /// Its line, from 1.
    pub line: usize,
    /// What the link points to, as written.
    pub target: String,
    /// What is missing: the file or the heading.
    pub why: &'static str,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: ({}) {}", self.file, self.line, self.target, self.why)
    }
}

/// Every broken link in `files` (paths relative to `root`).
pub fn check(root: &Path, files: &[String]) -> Result<Vec<Broken>> {
    let mut anchors: HashMap<PathBuf, HashSet<String>> = HashMap::new();
    let mut broken = Vec::new();
    for file in files {
        let text =
            std::fs::read_to_string(root.join(file)).with_context(|| format!("reading {file}"))?;
        let here = Path::new(file).parent().unwrap_or(Path::new(""));
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let resolved =
                if path.is_empty() { PathBuf::from(file) } else { normalise(&here.join(path)) };
            if !root.join(&resolved).exists() {
                broken.push(Broken { file: file.clone(), line, target, why: "no such file" });
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if resolved.extension().is_none_or(|e| e != "md") {
                continue;
            }
            if !anchors.contains_key(&resolved) {
                let page = std::fs::read_to_string(root.join(&resolved))
                    .with_context(|| format!("reading {}", resolved.display()))?;
                anchors.insert(resolved.clone(), headings(&page));
            }
            if !anchors[&resolved].contains(anchor) {
                broken.push(Broken { file: file.clone(), line, target, why: "no such heading" });
            }
        }
    }
    Ok(broken)
}

/// The committed Markdown files, from git (a clone's own files, not what a build left there).
pub fn markdown_files(root: &Path) -> Result<Vec<String>> {
    let out = std::process::Command::new("git")
        .args(["ls-files", "--", "*.md"])
        .current_dir(root)
        .output()
        .context("running git ls-files")?;
    anyhow::ensure!(out.status.success(), "git ls-files failed");
    Ok(String::from_utf8(out.stdout)?
        .lines()
        .filter(|f| !f.contains("node_modules/"))
        .map(str::to_owned)
        .collect())
}

/// `a/b/../c` as `a/c`, without touching the file system.
fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// Each `](target)` outside code, with its line number (1-based).
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = without_code_spans(line);
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let Some(end) = tail.find(')') else { break };
            let target = tail[..end].split_whitespace().next().unwrap_or("");
            if !target.is_empty() {
                out.push((i + 1, target.to_owned()));
            }
            rest = tail[end..].to_owned();
        }
    }
    out
}

/// The line with `code spans` blanked, so that a link written as code is not followed.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        }
        out.push(if in_code { ' ' } else { c });
    }
    out
}

/// The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as
/// hyphens, and `-1`, `-2`, ... after a repeated one.
fn headings(text: &str) -> HashSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = HashSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug = slug(title.trim());
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 { slug.clone() } else { format!("{slug}-{n}") });
        *n += 1;
    }
    out
}

fn slug(title: &str) -> String {
    title
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_follow_githubs_rule() {
        assert_eq!(slug("Encode and decode time (`s`)"), "encode-and-decode-time-s");
        assert_eq!(slug("The codec's first context model"), "the-codecs-first-context-model");
        assert_eq!(slug("Many users at once (`--clients N`)"), "many-users-at-once---clients-n");
        let h = headings("# A\n## Tests\n```\n# not a heading\n```\n## Tests\n#hashtag\n");
        assert_eq!(
            h,
            ["a", "tests", "tests-1"].into_iter().map(String::from).collect::<HashSet<_>>()
        );
    }

    #[test]
    fn links_outside_code_are_found() {
        let text =
            "see [a](x.md#b) and `[c](not-a-link.md)`\n```\n[d](e.md)\n```\n[f](g.md \"t\")\n";
        assert_eq!(links(text), vec![(1, "x.md#b".to_owned()), (5, "g.md".to_owned())]);
    }

    #[test]
    fn a_missing_file_or_heading_is_reported() {
        let dir = std::env::temp_dir().join(format!("doc-links-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("docs")).unwrap();
        std::fs::write(dir.join("docs/a.md"), "# Top\n## Part two\n").unwrap();
        std::fs::write(
            dir.join("README.md"),
            "[ok](docs/a.md#part-two) [self](#readme) [gone](docs/b.md) [bad](docs/a.md#part-3)\n\
             # Readme\n[web](https://example.org/#x)\n",
        )
        .unwrap();
        let broken = check(&dir, &["README.md".into()]).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        let what: Vec<_> = broken.iter().map(|b| (b.target.as_str(), b.why)).collect();
        assert_eq!(
            what,
            vec![("docs/b.md", "no such file"), ("docs/a.md#part-3", "no such heading")]
        );
    }
}
