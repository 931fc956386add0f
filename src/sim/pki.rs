//! An in-memory certificate authority for the demo and the tests: a cluster CA, apiserver
//! certificates with IP SANs, and kubelet-style client certificates (cert and key in one PEM).
//!
//! Not used by the balancer itself, which only reads the files an operator gives it.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A generated CA able to issue certificates.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate, PEM.
    pub cert_pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

/// A certificate and its key.
#[derive(Debug, Clone)]
pub struct Issued {
    /// Certificate, PEM.
    pub cert_pem: String,
    /// Private key, PEM (PKCS#8).
    pub key_pem: String,
    /// Certificate, DER.
    pub cert_der: Vec<u8>,
}

impl Issued {
    /// Certificate and key in one file, the way kubelet writes `kubelet-client-current.pem`.
    pub fn combined_pem(&self) -> String {
        format!("{}{}", self.cert_pem, self.key_pem)
    }
}

impl Ca {
    /// A new self-signed CA named `name`.
    pub fn new(name: &str) -> Result<Ca, rcgen::Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(Ca {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A server certificate for `sans` (IP addresses or DNS names).
    pub fn server(&self, sans: &[&str]) -> Result<Issued, rcgen::Error> {
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params)
    }

    /// A client certificate like kubelet's: CN `system:node:<node>`, O `system:nodes`.
    pub fn client(&self, node: &str) -> Result<Issued, rcgen::Error> {
        self.issue(kubelet_params(node)?)
    }

    /// A client certificate for the user `cn` in the group `org` (the lab's
    /// kube-controller-manager and `kubectl`: `system:masters`).
    pub fn user(&self, cn: &str, org: &str) -> Result<Issued, rcgen::Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, cn);
        params
            .distinguished_name
            .push(DnType::OrganizationName, org);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params)
    }

    /// Like [`Ca::client`], valid until midnight UTC `days` days from today (a negative number:
    /// expired that long ago), for tests of an expired or soon-expiring certificate.
    pub fn client_until(&self, node: &str, days: i64) -> Result<Issued, rcgen::Error> {
        let mut params = kubelet_params(node)?;
        let today = crate::tls::unix_now().div_euclid(86_400);
        let day = u64::try_from(today + days).unwrap_or(0);
        let (y, m, d) = crate::admin::timestamp::civil_from_days(day);
        // Any date a test asks for fits: years within i32, months and days within u8.
        let (y, m, d) = (
            i32::try_from(y).unwrap_or(i32::MAX),
            u8::try_from(m).unwrap_or(12),
            u8::try_from(d).unwrap_or(28),
        );
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(y, m, d);
        self.issue(params)
    }

    fn issue(&self, params: CertificateParams) -> Result<Issued, rcgen::Error> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().to_vec(),
        })
    }
}

/// The names and use of a kubelet's client certificate: CN `system:node:<node>`, O
/// `system:nodes`, client authentication.
fn kubelet_params(node: &str) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, format!("system:node:{node}"));
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:nodes");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    Ok(params)
}
