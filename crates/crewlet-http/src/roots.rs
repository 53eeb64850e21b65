//! The roots every outbound TLS connection trusts: the bundled Mozilla roots
//! always, plus the system store, or `SSL_CERT_FILE` / `SSL_CERT_DIR` in its
//! place when either is set (as OpenSSL reads them).

use std::path::Path;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;

use crate::NetworkSettings;

/// The trusted roots and what went wrong reading them.
pub(crate) struct Roots {
    pub store: RootCertStore,
    /// How many came from outside the bundle (system store or the variables).
    pub local: usize,
    /// One line per problem, each naming the file or store it is about.
    pub warnings: Vec<String>,
}

pub(crate) fn load(settings: &NetworkSettings) -> Roots {
    let mut roots = Roots {
        store: RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        },
        local: 0,
        warnings: Vec::new(),
    };
    if settings.cert_file.is_none() && settings.cert_dirs.is_empty() {
        let found = rustls_native_certs::load_native_certs();
        for error in &found.errors {
            roots
                .warnings
                .push(format!("the system certificate store: {error}"));
        }
        roots.add(found.certs, "the system certificate store");
        return roots;
    }
    if let Some(file) = &settings.cert_file {
        roots.add_path("SSL_CERT_FILE", file, true);
    }
    for dir in &settings.cert_dirs {
        roots.add_path("SSL_CERT_DIR", dir, false);
    }
    roots
}

impl Roots {
    fn add_path(&mut self, var: &str, path: &Path, is_file: bool) {
        let found = if is_file {
            rustls_native_certs::load_certs_from_paths(Some(path), None)
        } else {
            rustls_native_certs::load_certs_from_paths(None, Some(path))
        };
        let source = format!("{var}={}", path.display());
        for error in &found.errors {
            self.warnings.push(format!(
                "{source}: {error}; the certificates it should add are not trusted"
            ));
        }
        if found.errors.is_empty() && found.certs.is_empty() {
            let what = if is_file { "file" } else { "directory" };
            self.warnings.push(format!(
                "{source}: the {what} holds no PEM certificate (-----BEGIN CERTIFICATE-----); \
                 only the bundled Mozilla roots are trusted for what it should cover"
            ));
        }
        self.add(found.certs, &source);
    }

    fn add(&mut self, certs: Vec<CertificateDer<'static>>, source: &str) {
        let (added, ignored) = self.store.add_parsable_certificates(certs);
        self.local += added;
        if ignored > 0 {
            self.warnings.push(format!(
                "{source}: {ignored} certificate(s) could not be parsed and are not trusted"
            ));
        }
    }
}
