//! Certificates made at test time (rcgen; nothing committed): a CA, and server certificates it
//! signs — valid for `localhost` and `127.0.0.1`, expired, or for another name — plus the
//! rustls server configurations the TLS sinks use.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A throw-away certificate authority.
pub struct TestCa {
    params: CertificateParams,
    key: KeyPair,
    /// The CA certificate, PEM.
    pub cert_pem: String,
}

/// A server certificate chain and its key, PEM.
pub struct ServerCert {
    /// Leaf certificate followed by nothing else (the CA is the trust anchor).
    pub cert_pem: String,
    /// PKCS#8 private key.
    pub key_pem: String,
}

impl TestCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().expect("generate CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("self-sign CA");
        TestCa {
            cert_pem: cert.pem(),
            params,
            key,
        }
    }

    /// A server certificate for `names` (DNS names or IP addresses), valid now.
    pub fn server_cert(&self, names: &[&str]) -> ServerCert {
        self.sign(names, false)
    }

    /// A server certificate for `names` that expired in 2001.
    pub fn expired_server_cert(&self, names: &[&str]) -> ServerCert {
        self.sign(names, true)
    }

    fn sign(&self, names: &[&str], expired: bool) -> ServerCert {
        let key = KeyPair::generate().expect("generate server key");
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .expect("server params");
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().copied().unwrap_or("server"),
        );
        if expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).expect("sign server cert");
        ServerCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// Writes the CA certificate to `dir/<file>` and returns the path.
    pub fn write(&self, dir: &Path, file: &str) -> PathBuf {
        let path = dir.join(file);
        std::fs::write(&path, &self.cert_pem)
            .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }
}

impl ServerCert {
    /// A self-signed certificate for `names` marked `CA:TRUE`, as
    /// `openssl req -x509 -newkey rsa:2048 -nodes …` makes one: its own trust anchor.
    pub fn self_signed_ca(names: &[&str]) -> ServerCert {
        let key = KeyPair::generate().expect("generate key");
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().copied().unwrap_or("self-signed"),
        );
        let cert = params.self_signed(&key).expect("self-sign");
        ServerCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A rustls server configuration presenting this certificate (ring provider, like
    /// anthracite's).
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .expect("parse server cert PEM");
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).expect("parse key PEM");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
        Arc::new(config)
    }

    /// Writes `cert.pem` and `key.pem` with `prefix` into `dir`; returns (cert, key) paths.
    pub fn write(&self, dir: &Path, prefix: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{prefix}-cert.pem"));
        let key = dir.join(format!("{prefix}-key.pem"));
        std::fs::write(&cert, &self.cert_pem).expect("write cert");
        std::fs::write(&key, &self.key_pem).expect("write key");
        (cert, key)
    }
}
