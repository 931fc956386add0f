//! Which config field a value found to be bad after loading came from: the address a listener
//! could not bind, the TLS file that could not be used. Errors point at that field's line
//! ([`super::Source::place`]).
//!
//! Does not find lines (`locate`) nor know why the value is bad (the error's owner).

use std::net::SocketAddr;
use std::path::Path;

use super::{Config, TlsFiles};

/// Which of the config's listener fields an address comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenField {
    /// A client listener (`listen`).
    Listen,
    /// The admin listener (`admin`).
    Admin,
}

impl Config {
    /// The field of a listener address: `listen[i]` for the client listener at `addr`, `admin`
    /// for the admin one.
    pub fn listener_field(&self, field: ListenField, addr: SocketAddr) -> String {
        match field {
            ListenField::Admin => "admin".to_string(),
            ListenField::Listen => match self.listen.iter().position(|a| *a == addr) {
                Some(i) => format!("listen[{i}]"),
                None => "listen".to_string(),
            },
        }
    }
}

impl TlsFiles {
    /// The field that names the TLS file `path` (`tls.ca`, `tls.client_cert`, `tls.client_key`);
    /// `about_key` when the trouble is with the key it holds, since kubelet's one file under
    /// `client_cert` holds the key too. `None` when no field names it.
    pub fn field_of(&self, path: &Path, about_key: bool) -> Option<&'static str> {
        let path = Some(path);
        let cert = self.client_cert.as_deref();
        let key = self.client_key.as_deref().or(cert);
        let key_field = if key == cert {
            "tls.client_cert"
        } else {
            "tls.client_key"
        };
        if about_key && path == key {
            Some(key_field)
        } else if path == Some(self.ca.as_path()) {
            Some("tls.ca")
        } else if path == cert {
            Some("tls.client_cert")
        } else if path == key {
            Some(key_field)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_file_is_placed_at_the_field_that_names_it() {
        let kubelet = TlsFiles {
            ca: "/ca.crt".into(),
            client_cert: Some("/kubelet.pem".into()),
            client_key: None,
        };
        let place = |files: &TlsFiles, p: &str, key| files.field_of(Path::new(p), key);
        assert_eq!(place(&kubelet, "/ca.crt", false), Some("tls.ca"));
        assert_eq!(
            place(&kubelet, "/kubelet.pem", true),
            Some("tls.client_cert")
        );
        assert_eq!(place(&kubelet, "/elsewhere", false), None);
        let split = TlsFiles {
            client_key: Some("/key.pem".into()),
            ..kubelet
        };
        assert_eq!(
            place(&split, "/kubelet.pem", false),
            Some("tls.client_cert")
        );
        assert_eq!(place(&split, "/key.pem", true), Some("tls.client_key"));
        assert_eq!(place(&split, "/key.pem", false), Some("tls.client_key"));
    }

    #[test]
    fn a_listener_address_is_placed_at_its_listen_entry_or_admin() {
        let config = Config::parse(
            "listen: [\"127.0.0.1:7445\", \"[::1]:7445\"]\nbackends: [{ address: \"10.0.0.1:6443\" }]\ntls: { ca: /ca.crt }\n",
            "c.yaml",
        )
        .expect("valid");
        let second = "[::1]:7445".parse().expect("addr");
        assert_eq!(
            config.listener_field(ListenField::Listen, second),
            "listen[1]"
        );
        assert_eq!(
            config.listener_field(ListenField::Admin, config.admin),
            "admin"
        );
    }
}
