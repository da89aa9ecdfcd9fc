//! TLS with rustls: towards destinations (carbon's `DESTINATION_TRANSPORT = ssl`) and, beyond
//! carbon, on the TCP receivers.
//!
//! Certificates and keys are PEM files, read once when the configuration is validated, so a
//! missing or unreadable file is a startup error naming the key. The crypto provider is
//! rustls's `ring` provider, always passed explicitly: the AWS SDK behind the `kinesis` feature
//! compiles rustls's aws-lc-rs provider into the same binary, and with two providers present
//! rustls has no process default to fall back on.
//!
//! - [`ClientTls`]: whom a destination trusts (`ca_file`, else the system's CA store, as
//!   carbon's `optionsForClientTLS` with no `DESTINATION_SSL_CA` uses the platform trust), the
//!   name its certificate must carry (`server_name`, else the destination's host, as carbon
//!   does), and an optional client certificate.
//!   A carbon-c-relay member (`transport … ssl`) is checked as carbon-c-relay 3.7.3 checks it
//!   ([`NameCheck::ChainOnly`]): the certificate must chain to the CA given with `-C` (a file,
//!   or a directory of them), whatever names it carries, since 3.7.3 sets `SSL_VERIFY_PEER`
//!   and never a host name to check.
//! - [`ServerTls`]: a receiver's certificate and key, and optionally the CA client
//!   certificates must chain to (`client_ca`: mutual TLS). A carbon-c-relay listener's
//!   `ssl PEMFILE` holds the certificate and its key in one file.
//!
//! **Pinned certificates.** A certificate in `ca_file` or `client_ca` is also accepted when the
//! peer presents exactly it (byte for byte) as its own certificate, as OpenSSL (carbon's
//! pyOpenSSL) accepts a trusted self-signed certificate: the usual
//! `openssl req -x509 -newkey rsa:2048 -nodes …` one-liner marks its certificate `CA:TRUE`,
//! which WebPKI refuses as an end entity (`CaUsedAsEndEntity`). The peer still proves it holds
//! the certificate's key in the handshake; any other certificate goes through WebPKI
//! verification unchanged.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme,
};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    /// A certificate or key file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// A file holds no PEM certificate, or one that does not parse.
    #[error("{path}: no PEM certificate found{detail}")]
    NoCertificate {
        /// The file.
        path: PathBuf,
        /// The parser's complaint, if any.
        detail: String,
    },
    /// A key file holds no PEM private key.
    #[error("{path}: no PEM private key found ({detail})")]
    NoKey {
        /// The file.
        path: PathBuf,
        /// The parser's complaint.
        detail: String,
    },
    /// The system CA store is empty or unreadable, and no `ca_file` was given.
    #[error("no system CA certificates could be loaded ({0}); set ca_file")]
    NoSystemRoots(String),
    /// `server_name` is neither a DNS name nor an IP address.
    #[error("{0:?} is not a valid TLS server name")]
    ServerName(String),
    /// rustls refused the certificates or key (e.g. the key does not match).
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
}

/// The crypto provider every TLS configuration here uses.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Every certificate in a PEM file (at least one).
pub(crate) fn load_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::NoCertificate {
            path: path.to_path_buf(),
            detail: format!(" ({e})"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
            detail: String::new(),
        });
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::NoKey {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })
}

/// The CA certificates of `path`: a PEM file, or a directory whose files are read in name
/// order (carbon-c-relay's `-C` takes either; a file there without a certificate is passed
/// over, as OpenSSL's lookup by hashed name never opens it).
fn ca_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    if !path.is_dir() {
        return load_certificates(path);
    }
    let listing = std::fs::read_dir(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut files: Vec<PathBuf> = listing
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let certs: Vec<_> = files
        .iter()
        .filter_map(|f| load_certificates(f).ok())
        .flatten()
        .collect();
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
            detail: " (in no file of the directory)".into(),
        });
    }
    Ok(certs)
}

fn roots_from(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    let certs = ca_certificates(path)?;
    if path.is_dir() {
        // A system directory (`/etc/ssl/certs`) may hold a certificate WebPKI cannot take
        // as an anchor: passed over, as for the system store.
        if roots.add_parsable_certificates(certs).0 == 0 {
            return Err(TlsError::NoCertificate {
                path: path.to_path_buf(),
                detail: " (none usable as a trust anchor)".into(),
            });
        }
    } else {
        for cert in certs {
            roots.add(cert)?;
        }
    }
    Ok(roots)
}

/// Certificates accepted as they are, whatever their chain: a peer presenting exactly one of
/// them is trusted without WebPKI verification (see the [module documentation](self)).
#[derive(Debug)]
struct Pinned(Vec<CertificateDer<'static>>);

impl Pinned {
    fn holds(&self, end_entity: &CertificateDer<'_>) -> bool {
        self.0.iter().any(|p| p.as_ref() == end_entity.as_ref())
    }
}

/// The handshake-signature methods of a pinned verifier: a pinned certificate's key must still
/// sign the handshake, so they are always its WebPKI verifier's (`self.webpki`).
macro_rules! webpki_signatures {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.webpki.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.webpki.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.webpki.supported_verify_schemes()
        }
    };
}

/// Accepts a destination presenting one of the `pinned` certificates; any other goes to
/// WebPKI verification.
#[derive(Debug)]
struct PinnedServerVerifier {
    pinned: Pinned,
    webpki: Arc<dyn ServerCertVerifier>,
}

impl ServerCertVerifier for PinnedServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.pinned.holds(end_entity) {
            return Ok(ServerCertVerified::assertion());
        }
        self.webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    webpki_signatures!();
}

/// carbon-c-relay's check of a member ([`NameCheck::ChainOnly`]): a certificate that chains to
/// `roots` (or is one of the `pinned` ones) is accepted whatever names it carries. Everything
/// else WebPKI checks is checked: the chain, validity dates, key usage, and the handshake
/// signature by the certificate's key.
#[derive(Debug)]
struct ChainOnlyVerifier {
    pinned: Pinned,
    /// Empty when there is nothing to trust: every certificate is then refused.
    roots: Arc<RootCertStore>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ChainOnlyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.pinned.holds(end_entity) {
            return Ok(ServerCertVerified::assertion());
        }
        let cert = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Accepts a client presenting one of the `pinned` certificates; any other goes to WebPKI
/// verification against `client_ca`.
#[derive(Debug)]
struct PinnedClientVerifier {
    pinned: Pinned,
    webpki: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for PinnedClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.webpki.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if self.pinned.holds(end_entity) {
            return Ok(ClientCertVerified::assertion());
        }
        self.webpki
            .verify_client_cert(end_entity, intermediates, now)
    }

    webpki_signatures!();
}

fn system_roots() -> Result<RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map_or_else(|| "none found".to_owned(), ToString::to_string);
        return Err(TlsError::NoSystemRoots(why));
    }
    Ok(roots)
}

/// Whether a destination's certificate must name it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum NameCheck {
    /// The certificate must be valid for `server_name` (or the destination's host).
    #[default]
    Checked,
    /// Any certificate that chains to the CA is accepted, as carbon-c-relay 3.7.3 accepts a
    /// member's; without a CA, the system store's (none there: nothing is trusted, as 3.7.3
    /// trusts nothing without `-C`).
    ChainOnly,
}

/// How a destination is reached over TLS (`destinations.tls`), as configured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClientTlsSettings {
    /// PEM CA certificates the destination's certificate must chain to; `None`: the system
    /// store.
    pub ca_file: Option<PathBuf>,
    /// Name the certificate must be valid for; `None`: the destination's host.
    pub server_name: Option<String>,
    /// PEM client certificate chain (with `client_key`), for destinations that ask for one.
    pub client_cert: Option<PathBuf>,
    /// PEM private key of `client_cert`.
    pub client_key: Option<PathBuf>,
    /// Whether the certificate must name the destination.
    pub names: NameCheck,
}

/// A ready TLS client configuration (files read, roots loaded).
#[derive(Clone)]
pub(crate) struct ClientTls {
    settings: ClientTlsSettings,
    connector: TlsConnector,
}

impl ClientTls {
    /// Reads the files `settings` names and builds the rustls configuration.
    pub(crate) fn new(settings: ClientTlsSettings) -> Result<Self, TlsError> {
        if let Some(name) = &settings.server_name {
            ServerName::try_from(name.clone()).map_err(|_| TlsError::ServerName(name.clone()))?;
        }
        let versions = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?;
        let builder = match (&settings.ca_file, settings.names) {
            (ca_file, NameCheck::ChainOnly) => {
                let (pinned, roots) = match ca_file {
                    Some(path) => (ca_certificates(path)?, roots_from(path)?),
                    None => (
                        Vec::new(),
                        system_roots().unwrap_or_else(|_| RootCertStore::empty()),
                    ),
                };
                versions
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(ChainOnlyVerifier {
                        pinned: Pinned(pinned),
                        roots: Arc::new(roots),
                        algorithms: provider().signature_verification_algorithms,
                    }))
            }
            (Some(path), NameCheck::Checked) => {
                let pinned = ca_certificates(path)?;
                let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                    Arc::new(roots_from(path)?),
                    provider(),
                )
                .build()
                .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?;
                versions
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(PinnedServerVerifier {
                        pinned: Pinned(pinned),
                        webpki,
                    }))
            }
            (None, NameCheck::Checked) => versions.with_root_certificates(system_roots()?),
        };
        let config = match (&settings.client_cert, &settings.client_key) {
            (Some(cert), Some(key)) => {
                builder.with_client_auth_cert(load_certificates(cert)?, load_key(key)?)?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(Self {
            settings,
            connector: TlsConnector::from(Arc::new(config)),
        })
    }

    /// The settings it was built from.
    #[cfg(test)]
    pub fn settings(&self) -> &ClientTlsSettings {
        &self.settings
    }

    /// Runs the handshake over `stream`, verifying the peer against `server_name` (or `host`).
    /// A certificate the peer presents that does not verify fails with an error saying why
    /// (unknown issuer, expired, not valid for the name…); nothing is sent in plaintext.
    pub(crate) async fn connect(
        &self,
        stream: TcpStream,
        host: &str,
    ) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let name = self.settings.server_name.as_deref().unwrap_or(host);
        let server_name = match ServerName::try_from(name.to_owned()) {
            Ok(n) => n,
            // No name is checked: a host that is no valid name goes without one (no SNI).
            Err(_) if self.settings.names == NameCheck::ChainOnly => {
                ServerName::IpAddress(std::net::Ipv4Addr::UNSPECIFIED.into())
            }
            Err(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{name:?} is not a valid TLS server name"),
                ));
            }
        };
        self.connector
            .connect(server_name, stream)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("TLS handshake with {name} failed: {e}")))
    }
}

impl PartialEq for ClientTls {
    fn eq(&self, other: &Self) -> bool {
        self.settings == other.settings
    }
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// TLS on the receivers (`listen.tls`), as configured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ServerTlsSettings {
    /// PEM certificate chain the receivers present.
    pub cert_file: PathBuf,
    /// PEM private key of `cert_file`.
    pub key_file: PathBuf,
    /// PEM CA certificates client certificates must chain to; `None`: no client certificate
    /// is asked for.
    pub client_ca: Option<PathBuf>,
}

/// A ready TLS server configuration.
#[derive(Clone)]
pub(crate) struct ServerTls {
    settings: ServerTlsSettings,
    acceptor: TlsAcceptor,
}

impl ServerTls {
    /// Reads the files `settings` names and builds the rustls configuration.
    pub(crate) fn new(settings: ServerTlsSettings) -> Result<Self, TlsError> {
        let provider = provider();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let builder = match &settings.client_ca {
            Some(ca) => {
                let webpki = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots_from(ca)?),
                    provider,
                )
                .build()
                .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?;
                builder.with_client_cert_verifier(Arc::new(PinnedClientVerifier {
                    pinned: Pinned(load_certificates(ca)?),
                    webpki,
                }))
            }
            None => builder.with_no_client_auth(),
        };
        let config = builder.with_single_cert(
            load_certificates(&settings.cert_file)?,
            load_key(&settings.key_file)?,
        )?;
        Ok(Self {
            settings,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// Runs the server side of the handshake on an accepted connection.
    pub(crate) async fn accept<S>(
        &self,
        stream: S,
    ) -> io::Result<tokio_rustls::server::TlsStream<S>>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        self.acceptor.accept(stream).await
    }
}

impl PartialEq for ServerTls {
    fn eq(&self, other: &Self) -> bool {
        self.settings == other.settings
    }
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Ca {
        params: rcgen::CertificateParams,
        key: rcgen::KeyPair,
        pem: String,
    }

    impl Ca {
        fn new(name: &str) -> Ca {
            let key = rcgen::KeyPair::generate().expect("CA key");
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            let pem = params.self_signed(&key).expect("CA").pem();
            Ca { params, key, pem }
        }

        /// A certificate for `name` and its key, PEM, in one string.
        fn leaf(&self, name: &str, expired: bool) -> String {
            let key = rcgen::KeyPair::generate().expect("key");
            let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).expect("params");
            if expired {
                params.not_before = rcgen::date_time_ymd(2000, 1, 1);
                params.not_after = rcgen::date_time_ymd(2001, 1, 1);
            }
            let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
            let cert = params.signed_by(&key, &issuer).expect("sign");
            format!("{}{}", cert.pem(), key.serialize_pem())
        }
    }

    /// One handshake: a server on 127.0.0.1 presenting `pem` (certificate and key in one
    /// file), a carbon-c-relay member's client trusting `ca`; `Ok` with the bytes the server
    /// read.
    async fn member_handshake(dir: &Path, pem: &str, ca: Option<&Path>) -> io::Result<Vec<u8>> {
        let pem_path = dir.join("server.pem");
        std::fs::write(&pem_path, pem).expect("write PEM");
        let server = ServerTls::new(ServerTlsSettings {
            cert_file: pem_path.clone(),
            key_file: pem_path,
            client_ca: None,
        })
        .expect("certificate and key from one file");
        let client = ClientTls::new(ClientTlsSettings {
            ca_file: ca.map(Path::to_path_buf),
            names: NameCheck::ChainOnly,
            ..ClientTlsSettings::default()
        })
        .expect("client");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accept = tokio::spawn(async move {
            let (s, _) = listener.accept().await.expect("accept");
            let mut got = Vec::new();
            if let Ok(mut tls) = server.accept(s).await {
                let _ = tls.read_to_end(&mut got).await;
            }
            got
        });
        let stream = TcpStream::connect(addr).await.expect("connect");
        let result = client.connect(stream, "127.0.0.1").await;
        let sent = match result {
            Ok(mut tls) => {
                tls.write_all(b"a.b 1 2\n").await?;
                tls.shutdown().await?;
                Ok(())
            }
            Err(e) => Err(e),
        };
        let got = accept.await.expect("server task");
        sent.map(|()| got)
    }

    #[tokio::test]
    async fn a_member_accepts_a_certificate_of_its_ca_for_any_name_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (ca, other) = (Ca::new("the CA"), Ca::new("another CA"));
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, &ca.pem).expect("write CA");
        let got = member_handshake(
            dir.path(),
            &ca.leaf("cache.example.org", false),
            Some(&ca_file),
        )
        .await
        .expect("a certificate of the CA for another name, as carbon-c-relay accepts it");
        assert_eq!(got, b"a.b 1 2\n");
        for (pem, why) in [
            (other.leaf("127.0.0.1", false), "UnknownIssuer"),
            (ca.leaf("127.0.0.1", true), "expired"),
        ] {
            let e = member_handshake(dir.path(), &pem, Some(&ca_file))
                .await
                .expect_err("refused");
            assert!(e.to_string().contains(why), "{why}: {e}");
        }
        // Without `-C`: the system's store, which does not hold this CA.
        let e = member_handshake(dir.path(), &ca.leaf("127.0.0.1", false), None)
            .await
            .expect_err("refused");
        assert!(e.to_string().contains("UnknownIssuer"), "{e}");
        // A directory of CA files, as `-C` takes one.
        let cas = dir.path().join("cas");
        std::fs::create_dir(&cas).expect("mkdir");
        std::fs::write(cas.join("a.pem"), &other.pem).expect("write");
        std::fs::write(cas.join("b.pem"), &ca.pem).expect("write");
        std::fs::write(cas.join("README"), "not a certificate").expect("write");
        member_handshake(dir.path(), &ca.leaf("x.example.org", false), Some(&cas))
            .await
            .expect("the CA found in the directory");
    }
}
