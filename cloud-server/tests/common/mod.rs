//! The real server binary for the tests that need its process: its `main`, its flags, its
//! memory as the kernel counts it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// The server binary, killed on drop.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Server {
    /// A field of `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`).
    #[allow(dead_code)] // not every test binary that includes this module reads memory
    pub fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with(field)).expect("field in status");
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

/// Start the binary with `args` on a free port; its URL once it listens.
pub fn start(args: &[&str]) -> (Server, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cloud-server"))
        .args(["--port", "0"])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting cloud-server");
    let stdout = child.stdout.take().unwrap();
    let server = Server(child);
    for line in BufReader::new(stdout).lines() {
        if let Some(url) = line.unwrap().strip_prefix("split-inference demo: ") {
            return (server, url.to_string());
        }
    }
    panic!("the server exited before listening");
}
