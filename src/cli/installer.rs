//! `readyprism talos check-installer`: which system extensions a Talos installer image carries,
//! and whether readyprism is one of them, read from the installer itself before an upgrade.
//!
//! Owns the check and its report: the installer's UKI → its `.initrd` section → `/extensions.yaml`
//! → the list. Does not own reading the image (`image`), the PE file (`uki`) or the initramfs
//! (`initrd`).
//!
//! What Talos builds, cited from siderolabs/talos at v1.14.0-rc.1 (v1.13.9 where it differs): from
//! Talos 1.10 the imager puts only the UKI in an installer, at `usr/install/<arch>/vmlinuz.efi`
//! (`pkg/imager/out.go:548,556-567`, `:489,497-507` at v1.13.9; `UseSDBootForUEFI`,
//! `pkg/machinery/imager/quirks/quirks.go:171-181`; the path, `pkg/machinery/constants/constants.go:658`,
//! `:622` at v1.13.9). The initramfs is the UKI's `.initrd` section (`internal/pkg/uki/generate.go:75`,
//! `:72` at v1.13.9). The imager rebuilds it with the extensions: their images and
//! `/extensions.yaml` (`constants.go:148`, `:141` at v1.13.9; written by
//! `pkg/imager/extensions/extensions.go:93`, one layer per extension with its manifest's metadata,
//! `:132-135`) go into a cpio archive appended compressed, zstd from Talos 1.8 else xz
//! (`pkg/imager/extensions/rebuild.go:78-85`, `quirks.go:83`); files under `kernel/` (CPU
//! microcode) into an uncompressed cpio prepended to it (`rebuild.go:119-149`,
//! `pkg/imager/extensions/contents.go:48`). An installer built without extensions has no
//! `/extensions.yaml` (`pkg/imager/imager.go:305`, `:291` at v1.13.9).

mod image;
mod initrd;
mod uki;
mod xz;
mod zstd;

use std::fmt::Write as _;
use std::path::Path;

pub use image::ImageError;
pub use initrd::InitrdError;
pub use uki::UkiError;

/// The name of this extension, as its manifest (`talos/extension/manifest.yaml`) gives it.
pub const EXTENSION_NAME: &str = "readyprism";

/// Where Talos's init reads the extensions list in the initramfs (`constants.ExtensionsConfigFile`,
/// `internal/app/init/main.go:128`), without its leading `/` as cpio names it.
const EXTENSIONS_FILE: &str = "extensions.yaml";

/// An installer's architecture: the `<arch>` of `usr/install/<arch>/`, and the platform picked
/// from an OCI image index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Arch {
    /// x86-64.
    Amd64,
    /// 64-bit ARM.
    Arm64,
}

impl Arch {
    /// The name Talos and OCI use for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    /// The UKI's path in the installer's root filesystem.
    pub fn uki_path(self) -> String {
        format!("usr/install/{}/vmlinuz.efi", self.as_str())
    }
}

/// One extension the installer carries: a layer of `/extensions.yaml`
/// (`pkg/machinery/extensions/config.go:16-26`, its metadata `metadata.go:16-23`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extension {
    /// The manifest's `metadata.name`.
    pub name: String,
    /// The manifest's `metadata.version`.
    pub version: String,
}

/// What an installer was found to carry.
#[derive(Debug)]
pub struct Installer {
    /// The UKI's path in the image (`usr/install/<arch>/vmlinuz.efi`).
    pub uki: String,
    /// Its extensions, in the order of `/extensions.yaml`; empty when it has none.
    pub extensions: Vec<Extension>,
}

/// Why the check failed: the input is no installer, the UKI or its initramfs is unreadable, or
/// readyprism is not among the extensions.
#[derive(Debug, thiserror::Error)]
pub enum InstallerError {
    /// The image or directory could not be read, or holds no UKI for the architecture.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The UKI is not a PE file with an `.initrd` section.
    #[error("{path}")]
    Uki {
        /// The UKI's path in the image.
        path: String,
        /// What is wrong with it.
        source: UkiError,
    },
    /// The initramfs could not be walked.
    #[error("{path}: the .initrd section")]
    Initrd {
        /// The UKI's path in the image.
        path: String,
        /// What is wrong with it.
        source: InitrdError,
    },
    /// `/extensions.yaml` is not the list Talos writes.
    #[error("{path}: /extensions.yaml in the .initrd section")]
    List {
        /// The UKI's path in the image.
        path: String,
        /// The YAML error.
        source: yaml_serde::Error,
    },
    /// readyprism is not among the extensions.
    #[error("the installer does not carry {EXTENSION_NAME}: {}", describe(.0))]
    NotIncluded(Vec<Extension>),
}

fn describe(extensions: &[Extension]) -> String {
    if extensions.is_empty() {
        return "it has no system extensions (no /extensions.yaml in its initramfs)".into();
    }
    let names: Vec<String> = extensions
        .iter()
        .map(|e| format!("{} {}", e.name, e.version))
        .collect();
    format!("its extensions are {}", names.join(", "))
}

/// Reads the installer at `input` (an OCI image tarball or an exported root filesystem) and lists
/// the extensions its `arch` UKI carries.
pub fn inspect(input: &Path, arch: Arch) -> Result<Installer, InstallerError> {
    let uki_path = arch.uki_path();
    let uki = image::read_file(input, &uki_path, arch)?;
    let initrd = uki::initrd(&uki).map_err(|source| InstallerError::Uki {
        path: uki_path.clone(),
        source,
    })?;
    let list =
        initrd::find_file(initrd, EXTENSIONS_FILE).map_err(|source| InstallerError::Initrd {
            path: uki_path.clone(),
            source,
        })?;
    let extensions = match list {
        None => Vec::new(),
        Some(text) => parse_list(&text).map_err(|source| InstallerError::List {
            path: uki_path.clone(),
            source,
        })?,
    };
    Ok(Installer {
        uki: uki_path,
        extensions,
    })
}

impl Installer {
    /// The extensions as a table, one a line, under a line naming the UKI.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{}: {} system extension{}\n",
            self.uki,
            self.extensions.len(),
            if self.extensions.len() == 1 { "" } else { "s" }
        );
        let width = self
            .extensions
            .iter()
            .map(|e| e.name.len())
            .max()
            .unwrap_or(0);
        for e in &self.extensions {
            // Writing to a String cannot fail.
            let _ = writeln!(out, "  {:width$}  {}", e.name, e.version);
        }
        out
    }

    /// readyprism's entry, or the error that names what the installer carries instead.
    pub fn readyprism(&self) -> Result<&Extension, InstallerError> {
        self.extensions
            .iter()
            .find(|e| e.name == EXTENSION_NAME)
            .ok_or_else(|| InstallerError::NotIncluded(self.extensions.clone()))
    }
}

/// `/extensions.yaml` as Talos writes it (`pkg/machinery/extensions/config.go:16-26`): only the
/// fields the report shows; the rest (`image`, `author`, …) are ignored.
#[derive(serde::Deserialize)]
struct ListFile {
    #[serde(default)]
    layers: Vec<Layer>,
}

#[derive(serde::Deserialize)]
struct Layer {
    metadata: Metadata,
}

#[derive(serde::Deserialize)]
struct Metadata {
    name: String,
    #[serde(default)]
    version: String,
}

fn parse_list(text: &[u8]) -> Result<Vec<Extension>, yaml_serde::Error> {
    let file: ListFile = yaml_serde::from_slice(text)?;
    Ok(file
        .layers
        .into_iter()
        .map(|l| Extension {
            name: l.metadata.name,
            version: l.metadata.version,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape Talos's encoder writes (`Config.Write`, `config.go:41-50`).
    const TALOS_LIST: &str = "layers:\n    - image: 000-intel-ucode.sqsh\n      metadata:\n        name: intel-ucode\n        version: \"20250211\"\n        author: Spencer Smith\n        description: microcode\n        compatibility:\n            talos:\n                version: '>= v1.10.0'\n    - image: 001-readyprism.sqsh\n      metadata:\n        name: readyprism\n        version: 0.1.0\n        author: readyprism\n        description: balancer\n        compatibility:\n            talos:\n                version: '>= v1.13.0'\n";

    #[test]
    fn the_list_as_talos_writes_it_gives_names_and_versions() {
        let list = parse_list(TALOS_LIST.as_bytes()).expect("parses");
        assert_eq!(
            list,
            vec![
                Extension {
                    name: "intel-ucode".into(),
                    version: "20250211".into()
                },
                Extension {
                    name: "readyprism".into(),
                    version: "0.1.0".into()
                },
            ]
        );
    }

    #[test]
    fn a_missing_readyprism_names_what_is_there() {
        let installer = Installer {
            uki: Arch::Amd64.uki_path(),
            extensions: vec![Extension {
                name: "iscsi-tools".into(),
                version: "v0.2.0".into(),
            }],
        };
        let e = installer.readyprism().expect_err("not there");
        assert_eq!(
            e.to_string(),
            "the installer does not carry readyprism: its extensions are iscsi-tools v0.2.0"
        );
        let none = Installer {
            uki: Arch::Amd64.uki_path(),
            extensions: vec![],
        };
        assert!(none
            .readyprism()
            .expect_err("not there")
            .to_string()
            .contains("no system extensions"));
    }
}
