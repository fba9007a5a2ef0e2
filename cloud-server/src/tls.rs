//! TLS for `wss://` and `https://`: features and images must not cross a network in clear
//! text. rustls with the ring provider; certificate chain and key from PEM files.

use std::path::Path;

use anyhow::{Context, Result, bail};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A rustls server configuration from a PEM certificate chain and a PEM private key (PKCS#8,
/// PKCS#1 or SEC1), with HTTP/1.1 announced over ALPN (what a WebSocket upgrade needs).
///
/// # Errors
/// A file that cannot be read, holds no certificate or key, or a key that does not match.
pub fn server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig> {
    let chain = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading the TLS certificate {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing the TLS certificate {}", cert.display()))?;
    if chain.is_empty() {
        bail!("{} holds no PEM certificate", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("reading a PEM private key from {}", key.display()))?;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("the TLS key does not match the certificate")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Whether `host` only reaches this machine (clear text is harmless there).
pub fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for h in ["127.0.0.1", "localhost", "::1", "[::1]", "127.1.2.3"] {
            assert!(is_loopback(h), "{h}");
        }
        for h in ["0.0.0.0", "::", "10.0.0.1", "example.com", "192.168.1.2"] {
            assert!(!is_loopback(h), "{h}");
        }
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let dir = std::env::temp_dir().join(format!("split-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a pem file").unwrap();
        let e = server_config(&dir.join("missing.pem"), &empty).unwrap_err();
        assert!(format!("{e:#}").contains("missing.pem"), "{e:#}");
        let e = server_config(&empty, &empty).unwrap_err();
        assert!(format!("{e:#}").contains("no PEM certificate"), "{e:#}");
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let (c, k) = (dir.join("c.pem"), dir.join("k.pem"));
        std::fs::write(&c, cert.cert.pem()).unwrap();
        std::fs::write(&k, other.key_pair.serialize_pem()).unwrap();
        let e = server_config(&c, &k).unwrap_err();
        assert!(format!("{e:#}").contains("does not match"), "{e:#}");
        std::fs::write(&k, cert.key_pair.serialize_pem()).unwrap();
        assert!(server_config(&c, &k).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
