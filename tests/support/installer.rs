//! Talos installers built in the test, laid out as Talos's imager lays them out: a UKI (PE32+)
//! at `usr/install/<arch>/vmlinuz.efi` whose `.initrd` section is a microcode cpio
//! (uncompressed), the base initramfs (zstd, as Talos's `Dockerfile` builds it) and the extensions' cpio (zstd) holding
//! `extensions.yaml`, then zero padding; wrapped as an exported root filesystem, a `docker save`
//! tarball or an OCI archive (`skopeo copy … oci-archive:`).
//!
//! The newc archives are written here by hand (not with the crate the command reads them with),
//! so a mistake shared by the reader and a writer cannot hide.

use std::io::Write;
use std::path::Path;

use object::pe;
use object::write::pe::{NtHeaders, Writer};

/// An extension of the list: name and version.
pub type Ext<'a> = (&'a str, &'a str);

/// `extensions.yaml` as Talos's encoder writes it (`pkg/machinery/extensions/config.go`).
pub fn extensions_yaml(exts: &[Ext]) -> String {
    let mut out = String::from("layers:\n");
    for (i, (name, version)) in exts.iter().enumerate() {
        out.push_str(&format!(
            "    - image: {i:03}-{name}.sqsh\n      metadata:\n        name: {name}\n        version: {version:?}\n        author: someone\n        description: an extension\n        compatibility:\n            talos:\n                version: '>= v1.10.0'\n"
        ));
    }
    out
}

/// A newc archive (`cpio -H newc --create`) of `files`, with its trailer, padded to 512 bytes as
/// GNU cpio pads.
pub fn cpio(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut entry = |name: &str, mode: u32, data: &[u8]| {
        let header = format!(
            "070701{:08x}{mode:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            1, 0, 0, 1, 0, data.len(), 0, 0, 0, 0, name.len() + 1, 0
        );
        out.extend(header.as_bytes());
        out.extend(name.as_bytes());
        out.push(0);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out.extend(data);
        while out.len() % 4 != 0 {
            out.push(0);
        }
    };
    for (name, data) in files {
        entry(name, 0o100644, data);
    }
    entry("TRAILER!!!", 0, b"");
    while out.len() % 512 != 0 {
        out.push(0);
    }
    out
}

/// zstd, as the imager compresses the extensions' archive from Talos 1.8.
pub fn zstd(data: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
}

/// xz, as the imager compressed the extensions' archive before Talos 1.8.
pub fn xz(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    lzma_rs::xz_compress(&mut &data[..], &mut out).expect("xz");
    out
}

/// The initramfs of an installer built with `exts` (none: no extensions archive at all, as the
/// imager skips the rebuild): microcode first, uncompressed; the base; the extensions; zeros.
pub fn initrd(exts: Option<&[Ext]>) -> Vec<u8> {
    initrd_compressed(exts, zstd)
}

/// [`initrd`] with the extensions' archive compressed by `compress`.
pub fn initrd_compressed(exts: Option<&[Ext]>, compress: fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
    let mut out = cpio(&[("kernel/x86/microcode/GenuineIntel.bin", b"microcode")]);
    out.extend(zstd(&cpio(&[
        ("init", b"\x7fELF talos init"),
        ("etc/os-release", b"NAME=Talos\n"),
    ])));
    if let Some(exts) = exts {
        let list = extensions_yaml(exts);
        out.extend(compress(&cpio(&[
            ("000-readyprism.sqsh", b"hsqs squashfs"),
            ("extensions.yaml", list.as_bytes()),
        ])));
    }
    out.extend([0u8; 4096]);
    out
}

/// A PE32+ EFI application with `.linux`, `.cmdline` and `.initrd` sections, as a UKI.
pub fn uki(initrd: &[u8]) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = Writer::new(true, 0x1000, 0x200, &mut buf);
    w.reserve_dos_header_and_stub();
    w.reserve_nt_headers(16);
    w.reserve_section_headers(3);
    let flags = pe::SectionFlags(pe::IMAGE_SCN_CNT_INITIALIZED_DATA.0 | pe::IMAGE_SCN_MEM_READ.0);
    let sections: [(&[u8; 8], &[u8]); 3] = [
        (b".linux\0\0", b"MZ a kernel"),
        (b".cmdline", b"talos.platform=metal"),
        (b".initrd\0", initrd),
    ];
    let ranges: Vec<_> = sections
        .iter()
        .map(|(name, data)| w.reserve_section(**name, flags, data.len() as u32, data.len() as u32))
        .collect();
    w.write_dos_header_and_stub().expect("dos header");
    w.write_nt_headers(NtHeaders {
        machine: pe::IMAGE_FILE_MACHINE_AMD64,
        time_date_stamp: 0,
        characteristics: pe::IMAGE_FILE_EXECUTABLE_IMAGE,
        major_linker_version: 0,
        minor_linker_version: 0,
        address_of_entry_point: 0,
        image_base: 0x1_0000_0000,
        major_operating_system_version: 0,
        minor_operating_system_version: 0,
        major_image_version: 0,
        minor_image_version: 0,
        major_subsystem_version: 0,
        minor_subsystem_version: 0,
        subsystem: pe::IMAGE_SUBSYSTEM_EFI_APPLICATION,
        dll_characteristics: pe::DllFlags(0),
        size_of_stack_reserve: 0,
        size_of_stack_commit: 0,
        size_of_heap_reserve: 0,
        size_of_heap_commit: 0,
    });
    w.write_section_headers();
    for ((_, data), range) in sections.iter().zip(&ranges) {
        w.write_section(range.file_offset, data);
    }
    buf
}

/// A file of an image: path and contents.
pub type File = (String, Vec<u8>);

/// The UKI of an installer for `arch` carrying `exts`, as an image file.
pub fn uki_file(arch: &str, exts: Option<&[Ext]>) -> File {
    (
        format!("usr/install/{arch}/vmlinuz.efi"),
        uki(&initrd(exts)),
    )
}

/// Files the base installer layers hold besides the artifacts.
pub fn base_files() -> Vec<File> {
    vec![
        ("usr/bin/installer".into(), b"\x7fELF installer".to_vec()),
        (
            "usr/install/amd64/systemd-bootx64.efi".into(),
            b"MZ sd-boot".to_vec(),
        ),
    ]
}

/// `files` written under `root`, as `crane export | tar -x` leaves them.
pub fn write_rootfs(root: &Path, files: &[File]) {
    for (path, data) in files {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("mkdir");
        std::fs::write(p, data).expect("write");
    }
}

/// A layer tar of `files` (a `.wh.` name is a whiteout, written as an empty file).
pub fn layer_tar(files: &[File]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, format!("./{path}"), &data[..])
            .expect("append");
    }
    b.into_inner().expect("tar")
}

/// gzip, as `docker save` and most registries compress layers.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).expect("gzip");
    e.finish().expect("gzip")
}

fn outer_tar(path: &Path, members: &[(String, Vec<u8>)]) {
    let mut b = tar::Builder::new(std::fs::File::create(path).expect("create"));
    for (name, data) in members {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, &data[..]).expect("append");
    }
    b.finish().expect("tar");
}

/// A `docker save` / `crane pull --format=tarball` tarball: `manifest.json` naming gzip layers.
pub fn write_docker_tarball(path: &Path, layers: &[Vec<File>]) {
    let mut members = Vec::new();
    let mut names = Vec::new();
    for (i, files) in layers.iter().enumerate() {
        let name = format!("{i:064x}.tar.gz");
        members.push((name.clone(), gzip(&layer_tar(files))));
        names.push(name);
    }
    members.push(("sha256:cfg".into(), b"{}".to_vec()));
    let manifest = serde_json::json!([{
        "Config": "sha256:cfg",
        "RepoTags": ["registry.example.com/talos-installer:v1.14.0-readyprism"],
        "Layers": names,
    }]);
    members.push(("manifest.json".into(), manifest.to_string().into_bytes()));
    outer_tar(path, &members);
}

/// An OCI archive (`skopeo copy … oci-archive:`): `index.json` → an image index with one
/// manifest per platform → zstd layers, as blobs named by digest.
pub fn write_oci_archive(path: &Path, platforms: &[(&str, Vec<Vec<File>>)]) {
    let mut members = vec![(
        "oci-layout".to_string(),
        br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
    )];
    let blob = |data: Vec<u8>, members: &mut Vec<(String, Vec<u8>)>| {
        let digest = format!("{:064x}", members.len());
        members.push((format!("blobs/sha256/{digest}"), data));
        format!("sha256:{digest}")
    };
    let mut manifests = Vec::new();
    for (arch, layers) in platforms {
        let layer_descs: Vec<_> = layers
            .iter()
            .map(|files| {
                let digest = blob(zstd(&layer_tar(files)), &mut members);
                serde_json::json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": digest, "size": 0})
            })
            .collect();
        let config = blob(b"{}".to_vec(), &mut members);
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 2},
            "layers": layer_descs,
        });
        let digest = blob(manifest.to_string().into_bytes(), &mut members);
        manifests.push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest, "size": 0,
            "platform": {"architecture": arch, "os": "linux"},
        }));
    }
    let image_index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    });
    let digest = blob(image_index.to_string().into_bytes(), &mut members);
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json", "digest": digest, "size": 0}],
    });
    members.push(("index.json".into(), index.to_string().into_bytes()));
    outer_tar(path, &members);
}
