//! TLS for the gRPC listener (rustls with ring, through tonic): the
//! server's certificate and key from PEM files, and optionally a client CA,
//! in which case every client must present a certificate it signed (mTLS)
//! and the certificate's subject CN names the caller (see [`crate::edge::auth`]).
//!
//! Files are read and parsed here, at start, so a wrong path or a key that
//! is not a key stops the server with a message naming the flag.

use crate::config::Security;
use anyhow::{Context as _, bail};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

/// The TLS settings, or `None` when TLS is off.
pub fn server_config(args: &Security) -> anyhow::Result<Option<ServerTlsConfig>> {
    let (cert, key) = match (&args.tls_cert, &args.tls_key) {
        (None, None) => {
            if args.tls_client_ca.is_some() {
                bail!("--tls-client-ca needs --tls-cert and --tls-key (mTLS is TLS first)");
            }
            return Ok(None);
        }
        (Some(cert), Some(key)) => (cert, key),
        (Some(_), None) => bail!("--tls-cert needs --tls-key"),
        (None, Some(_)) => bail!("--tls-key needs --tls-cert"),
    };
    let cert_pem = read(cert, "--tls-cert")?;
    certificates(&cert_pem, "--tls-cert", cert)?;
    let key_pem = read(key, "--tls-key")?;
    PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| anyhow::anyhow!("--tls-key {}: no usable private key ({e})", key.display()))?;
    let mut config = ServerTlsConfig::new().identity(Identity::from_pem(cert_pem, key_pem));
    if let Some(ca) = &args.tls_client_ca {
        let ca_pem = read(ca, "--tls-client-ca")?;
        certificates(&ca_pem, "--tls-client-ca", ca)?;
        // A client CA makes client certificates required, not optional.
        config = config
            .client_ca_root(Certificate::from_pem(ca_pem))
            .client_auth_optional(false);
    }
    Ok(Some(config))
}

fn read(path: &Path, flag: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("{flag}: cannot read {}", path.display()))
}

fn certificates(pem: &[u8], flag: &str, path: &Path) -> anyhow::Result<usize> {
    let certs: Vec<CertificateDer<'_>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("{flag} {}: not PEM certificates ({e})", path.display()))?;
    if certs.is_empty() {
        bail!("{flag} {}: no certificate found", path.display());
    }
    Ok(certs.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file under the system temp directory, removed on drop.
    struct TempFile(std::path::PathBuf);

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn file(content: &str) -> TempFile {
        let path = std::env::temp_dir().join(format!("tally-tls-{}", uuid::Uuid::new_v4()));
        std::fs::write(&path, content).unwrap();
        TempFile(path)
    }

    fn args() -> Security {
        Security::disabled()
    }

    #[test]
    fn off_without_files_and_half_settings_are_refused() {
        assert!(server_config(&args()).unwrap().is_none());
        let mut a = args();
        a.tls_cert = Some("c.pem".into());
        assert!(
            server_config(&a)
                .unwrap_err()
                .to_string()
                .contains("--tls-key")
        );
        let mut a = args();
        a.tls_client_ca = Some("ca.pem".into());
        assert!(
            server_config(&a)
                .unwrap_err()
                .to_string()
                .contains("--tls-cert")
        );
    }

    #[test]
    fn bad_files_name_their_flag() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let (cert_file, key_file) = (file(&cert.pem()), file(&key.serialize_pem()));
        let junk = file("not pem");

        let mut a = args();
        a.tls_cert = Some(cert_file.0.clone());
        a.tls_key = Some(key_file.0.clone());
        assert!(server_config(&a).unwrap().is_some());

        a.tls_client_ca = Some(junk.0.clone());
        let e = server_config(&a).unwrap_err().to_string();
        assert!(e.contains("--tls-client-ca"), "{e}");

        a.tls_client_ca = None;
        a.tls_key = Some(cert_file.0.clone());
        let e = server_config(&a).unwrap_err().to_string();
        assert!(e.contains("--tls-key"), "{e}");

        a.tls_key = Some(key_file.0.clone());
        a.tls_cert = Some("/nonexistent/cert.pem".into());
        let e = server_config(&a).unwrap_err().to_string();
        assert!(
            e.contains("--tls-cert") && e.contains("/nonexistent"),
            "{e}"
        );
    }
}
