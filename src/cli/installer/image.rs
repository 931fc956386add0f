//! One file of an installer image: from an OCI image tarball (`docker save`, `crane pull
//! --format=tarball`, `skopeo copy … oci-archive:`: its `manifest.json` or `index.json`, then the
//! layers in order, gzip, zstd or plain tar, later layers and their whiteouts winning) or from an
//! exported root filesystem directory.
//!
//! Owns finding the file and saying what the image holds instead; does not own what the file is.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::{zstd, Arch};

/// Where Talos installers keep their boot assets (`usr/install/<arch>/…`).
const INSTALL_DIR: &str = "usr/install/";
/// The most of a JSON document (index, manifest) read: real ones are a few kilobytes.
const MAX_JSON: u64 = 4 << 20;
/// The most of the file read: a Talos UKI is under 200 MiB.
const MAX_FILE: u64 = 1 << 30;
/// How many of the image's `usr/install/` files an error names.
const LISTED: usize = 12;

/// Why the file could not be read from the image.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The input could not be read.
    #[error("{path}")]
    Io {
        /// The input.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A tarball that is not an image.
    #[error("{path}: not an image tarball (no manifest.json or index.json, as docker save, crane pull --format=tarball and skopeo copy oci-archive: write)")]
    NotAnImage {
        /// The input.
        path: PathBuf,
    },
    /// The image's index or manifest is not what it should be.
    #[error("{path}: {what}")]
    BadImage {
        /// The input.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// An image or tree without `usr/install/`.
    #[error("{path}: not a Talos installer (nothing under /{INSTALL_DIR})")]
    NotAnInstaller {
        /// The input.
        path: PathBuf,
    },
    /// An installer without the file.
    #[error("{path}: no /{wanted}: the installer holds {found}")]
    Missing {
        /// The input.
        path: PathBuf,
        /// The file looked for.
        wanted: String,
        /// What is under `usr/install/` instead, listed.
        found: String,
    },
    /// The file is larger than any Talos UKI.
    #[error("{path}: /{wanted} is larger than {MAX_FILE} bytes")]
    TooLarge {
        /// The input.
        path: PathBuf,
        /// The file.
        wanted: String,
    },
}

/// The contents of `wanted` (a path without a leading `/`) in the installer at `input`: a
/// directory is a root filesystem, anything else an image tarball whose platform `arch` is taken
/// from an index that lists several.
pub fn read_file(input: &Path, wanted: &str, arch: Arch) -> Result<Vec<u8>, ImageError> {
    let io_err = |source| ImageError::Io {
        path: input.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(input).map_err(io_err)?;
    let tree = if meta.is_dir() {
        from_directory(input, wanted)?
    } else {
        from_tarball(input, wanted, arch)?
    };
    tree.into_file(input, wanted)
}

/// What was seen of the image: the file, if present, and every file under `usr/install/`.
#[derive(Default)]
struct Tree {
    file: Option<Vec<u8>>,
    install: BTreeSet<String>,
}

impl Tree {
    fn into_file(self, input: &Path, wanted: &str) -> Result<Vec<u8>, ImageError> {
        if let Some(file) = self.file {
            return Ok(file);
        }
        if self.install.is_empty() {
            return Err(ImageError::NotAnInstaller {
                path: input.to_path_buf(),
            });
        }
        let mut found: Vec<String> = self
            .install
            .iter()
            .take(LISTED)
            .map(|p| format!("/{p}"))
            .collect();
        if self.install.len() > LISTED {
            found.push(format!("and {} more", self.install.len() - LISTED));
        }
        Err(ImageError::Missing {
            path: input.to_path_buf(),
            wanted: wanted.into(),
            found: found.join(", "),
        })
    }
}

fn from_directory(root: &Path, wanted: &str) -> Result<Tree, ImageError> {
    let io_err = |source| ImageError::Io {
        path: root.to_path_buf(),
        source,
    };
    let mut tree = Tree::default();
    let path = root.join(wanted);
    if path.is_file() {
        let f = File::open(&path).map_err(io_err)?;
        tree.file = Some(read_capped(f, root, wanted)?);
        return Ok(tree);
    }
    list_files(root, &root.join(INSTALL_DIR), &mut tree.install).map_err(io_err)?;
    Ok(tree)
}

/// Every file under `dir`, as a path relative to `root`; nothing when `dir` does not exist.
fn list_files(root: &Path, dir: &Path, out: &mut BTreeSet<String>) -> io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            list_files(root, &path, out)?;
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.insert(rel.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

fn read_capped(r: impl Read, input: &Path, wanted: &str) -> Result<Vec<u8>, ImageError> {
    let mut out = Vec::new();
    r.take(MAX_FILE + 1)
        .read_to_end(&mut out)
        .map_err(|source| ImageError::Io {
            path: input.to_path_buf(),
            source,
        })?;
    if out.len() as u64 > MAX_FILE {
        return Err(ImageError::TooLarge {
            path: input.to_path_buf(),
            wanted: wanted.into(),
        });
    }
    Ok(out)
}

/// A member of the outer tarball: where its data lies.
#[derive(Clone, Copy)]
struct Member {
    offset: u64,
    size: u64,
}

/// `manifest.json` of `docker save` and `crane pull --format=tarball`: one entry per image.
#[derive(serde::Deserialize)]
struct DockerManifest {
    #[serde(rename = "Layers")]
    layers: Vec<String>,
}

/// An OCI image index or image manifest (`index.json` and the blobs it names).
#[derive(serde::Deserialize)]
struct OciDocument {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    #[serde(default)]
    manifests: Vec<Descriptor>,
    #[serde(default)]
    layers: Vec<Descriptor>,
}

#[derive(serde::Deserialize)]
struct Descriptor {
    digest: String,
    #[serde(rename = "mediaType", default)]
    media_type: String,
    platform: Option<Platform>,
}

#[derive(serde::Deserialize)]
struct Platform {
    architecture: String,
}

fn from_tarball(input: &Path, wanted: &str, arch: Arch) -> Result<Tree, ImageError> {
    let io_err = |source| ImageError::Io {
        path: input.to_path_buf(),
        source,
    };
    let bad = |what: String| ImageError::BadImage {
        path: input.to_path_buf(),
        what,
    };
    let mut members = BTreeMap::new();
    let mut archive = tar::Archive::new(File::open(input).map_err(io_err)?);
    let entries = archive.entries().map_err(io_err)?;
    for entry in entries {
        let entry = entry.map_err(io_err)?;
        let path = entry.path().map_err(io_err)?;
        let name = normalize(&path.to_string_lossy());
        members.insert(
            name,
            Member {
                offset: entry.raw_file_position(),
                size: entry.size(),
            },
        );
    }
    let read_json = |name: &str| -> Result<Vec<u8>, ImageError> {
        let m = members
            .get(name)
            .ok_or_else(|| bad(format!("{name} is not in the tarball")))?;
        if m.size > MAX_JSON {
            return Err(bad(format!("{name} is larger than {MAX_JSON} bytes")));
        }
        let mut buf = Vec::new();
        member(input, *m)
            .map_err(io_err)?
            .read_to_end(&mut buf)
            .map_err(io_err)?;
        Ok(buf)
    };
    let layers: Vec<String> = if members.contains_key("manifest.json") {
        let images: Vec<DockerManifest> = serde_json::from_slice(&read_json("manifest.json")?)
            .map_err(|e| bad(format!("manifest.json: {e}")))?;
        match images.as_slice() {
            [one] => one.layers.iter().map(|l| normalize(l)).collect(),
            _ => {
                return Err(bad(format!(
                    "manifest.json lists {} images, not one",
                    images.len()
                )))
            }
        }
    } else if members.contains_key("index.json") {
        let mut doc: OciDocument = serde_json::from_slice(&read_json("index.json")?)
            .map_err(|e| bad(format!("index.json: {e}")))?;
        // index.json → (an image index →) an image manifest: at most two steps in practice.
        for _ in 0..4 {
            if doc.manifests.is_empty() {
                break;
            }
            let chosen = pick_manifest(&doc.manifests, arch).map_err(bad)?;
            let blob = blob_path(&chosen.digest).map_err(bad)?;
            doc = serde_json::from_slice(&read_json(&blob)?)
                .map_err(|e| bad(format!("{blob}: {e}")))?;
        }
        if doc.layers.is_empty() {
            return Err(bad(format!(
                "the image manifest ({}) names no layers",
                doc.media_type
            )));
        }
        doc.layers
            .iter()
            .map(|l| blob_path(&l.digest))
            .collect::<Result<_, _>>()
            .map_err(bad)?
    } else {
        return Err(ImageError::NotAnImage {
            path: input.to_path_buf(),
        });
    };

    let mut tree = Tree::default();
    for layer in &layers {
        let m = members
            .get(layer)
            .ok_or_else(|| bad(format!("the layer {layer} is not in the tarball")))?;
        let reader = member(input, *m).map_err(io_err)?;
        apply_layer(reader, wanted, &mut tree, input).map_err(|e| match e {
            LayerError::Io(source) => bad(format!("the layer {layer}: {source}")),
            LayerError::Image(e) => e,
        })?;
    }
    Ok(tree)
}

/// The manifest of `arch` among an index's, or its only one.
fn pick_manifest(manifests: &[Descriptor], arch: Arch) -> Result<&Descriptor, String> {
    if let [one] = manifests {
        return Ok(one);
    }
    manifests
        .iter()
        .find(|m| {
            m.platform
                .as_ref()
                .is_some_and(|p| p.architecture == arch.as_str())
        })
        .ok_or_else(|| {
            let have: Vec<String> = manifests
                .iter()
                .map(|m| match &m.platform {
                    Some(p) => p.architecture.clone(),
                    None => format!("{} without a platform", m.media_type),
                })
                .collect();
            format!(
                "the image index has no {} image (it has: {})",
                arch.as_str(),
                have.join(", ")
            )
        })
}

/// `blobs/<algorithm>/<hex>` of a digest `<algorithm>:<hex>`.
fn blob_path(digest: &str) -> Result<String, String> {
    match digest.split_once(':') {
        Some((alg, hex))
            if !alg.is_empty()
                && !hex.is_empty()
                && hex.bytes().all(|b| b.is_ascii_alphanumeric())
                && alg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'-') =>
        {
            Ok(format!("blobs/{alg}/{hex}"))
        }
        _ => Err(format!("{digest:?} is not a digest")),
    }
}

/// A path in an archive without `./` or `/` before it.
fn normalize(path: &str) -> String {
    path.trim_start_matches("./")
        .trim_start_matches('/')
        .to_string()
}

/// The data of a member of the outer tarball.
fn member(input: &Path, m: Member) -> io::Result<BufReader<io::Take<File>>> {
    let mut f = File::open(input)?;
    f.seek(SeekFrom::Start(m.offset))?;
    Ok(BufReader::new(f.take(m.size)))
}

enum LayerError {
    Io(io::Error),
    Image(ImageError),
}

impl From<io::Error> for LayerError {
    fn from(e: io::Error) -> Self {
        LayerError::Io(e)
    }
}

/// One layer over the tree below it: its whiteouts remove from below, its files replace.
fn apply_layer<R: BufRead>(
    mut reader: R,
    wanted: &str,
    tree: &mut Tree,
    input: &Path,
) -> Result<(), LayerError> {
    let head = reader.fill_buf()?;
    if head.starts_with(&[0x1f, 0x8b]) {
        let gz = flate2::bufread::GzDecoder::new(reader);
        walk_layer(gz, wanted, tree, input)
    } else if head.starts_with(&zstd::MAGIC) {
        walk_layer(zstd::Frames::new(reader)?, wanted, tree, input)
    } else {
        walk_layer(reader, wanted, tree, input)
    }
}

fn walk_layer<R: Read>(
    reader: R,
    wanted: &str,
    tree: &mut Tree,
    input: &Path,
) -> Result<(), LayerError> {
    let mut file = None;
    let mut added = BTreeSet::new();
    let mut removed = Vec::new();
    let mut layer = tar::Archive::new(reader);
    for entry in layer.entries()? {
        let entry = entry?;
        let path = normalize(&entry.path()?.to_string_lossy());
        let (dir, base) = match path.trim_end_matches('/').rsplit_once('/') {
            Some((d, b)) => (format!("{d}/"), b.to_string()),
            None => (String::new(), path.trim_end_matches('/').to_string()),
        };
        if base == ".wh..wh..opq" {
            // An opaque directory: nothing below it from lower layers.
            removed.push(dir);
            continue;
        }
        if let Some(gone) = base.strip_prefix(".wh.") {
            removed.push(format!("{dir}{gone}"));
            continue;
        }
        let regular = entry.header().entry_type().is_file();
        if regular && path == wanted {
            file = Some(read_capped(entry, input, wanted).map_err(LayerError::Image)?);
        } else if regular && path.starts_with(INSTALL_DIR) {
            added.insert(path);
        }
    }
    for gone in removed {
        let under = if gone.ends_with('/') {
            gone.clone()
        } else {
            format!("{gone}/")
        };
        let hit = |p: &str| p == gone || p.starts_with(&under);
        tree.install.retain(|p| !hit(p));
        if hit(wanted) {
            tree.file = None;
        }
    }
    if let Some(f) = file {
        tree.install.insert(wanted.to_string());
        tree.file = Some(f);
    }
    tree.install.extend(added);
    Ok(())
}
