//! `readyprism talos check-installer` on installers built in the test as Talos's imager builds
//! them (`support::installer`): it passes those that carry readyprism, in each form an image
//! reaches an operator, and fails, in one line naming what is there, those that do not, those for
//! another architecture and what is no installer.

use std::path::Path;

use crate::support::installer::*;
use crate::support::{readyprism, stderr};

const WITH: &[Ext] = &[("intel-ucode", "20250211"), ("readyprism", "0.1.0")];
const WITHOUT: &[Ext] = &[("intel-ucode", "20250211"), ("iscsi-tools", "v0.2.0")];

fn check(installer: &Path, extra: &[&str]) -> std::process::Output {
    let path = installer.to_str().expect("a UTF-8 path");
    let mut args = vec!["talos", "check-installer", path];
    args.extend(extra);
    readyprism(&args)
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// The error is one line, the binary's `readyprism: …` line.
fn one_line_error(o: &std::process::Output) -> String {
    assert!(!o.status.success(), "passed:\n{}", stdout(o));
    let e = stderr(o);
    assert_eq!(e.lines().count(), 1, "not one line: {e}");
    e
}

#[test]
fn an_exported_rootfs_with_readyprism_passes_and_lists_every_extension() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut files = base_files();
    files.push(uki_file("amd64", Some(WITH)));
    write_rootfs(dir.path(), &files);
    let o = check(dir.path(), &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "usr/install/amd64/vmlinuz.efi: 2 system extensions\n  intel-ucode  20250211\n  readyprism   0.1.0\n"
    );
}

#[test]
fn a_docker_save_tarball_is_read_with_later_layers_winning() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = dir.path().join("good.tar");
    // The base layers carry an older UKI without readyprism; the artifacts layer replaces it.
    write_docker_tarball(
        &good,
        &[
            base_files(),
            vec![uki_file("amd64", Some(WITHOUT))],
            vec![uki_file("amd64", Some(WITH))],
        ],
    );
    let o = check(&good, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("  readyprism   0.1.0\n"),
        "{}",
        stdout(&o)
    );

    let bad = dir.path().join("bad.tar");
    write_docker_tarball(
        &bad,
        &[
            vec![uki_file("amd64", Some(WITH))],
            vec![uki_file("amd64", Some(WITHOUT))],
        ],
    );
    let o = check(&bad, &[]);
    let e = one_line_error(&o);
    assert!(
        e.contains("does not carry readyprism: its extensions are intel-ucode 20250211, iscsi-tools v0.2.0"),
        "{e}"
    );
    assert!(stdout(&o).contains("iscsi-tools"), "{}", stdout(&o));
}

#[test]
fn a_later_layers_whiteout_removes_the_uki() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("whited.tar");
    write_docker_tarball(
        &path,
        &[
            vec![uki_file("amd64", Some(WITH))],
            vec![("usr/install/amd64/.wh.vmlinuz.efi".into(), Vec::new())],
        ],
    );
    let e = one_line_error(&check(&path, &[]));
    assert!(e.contains("not a Talos installer"), "{e}");
}

#[test]
fn an_oci_archive_is_read_for_the_architecture_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("installer.oci.tar");
    write_oci_archive(
        &path,
        &[
            (
                "amd64",
                vec![base_files(), vec![uki_file("amd64", Some(WITHOUT))]],
            ),
            ("arm64", vec![vec![uki_file("arm64", Some(WITH))]]),
        ],
    );
    let o = check(&path, &["--arch", "arm64"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("usr/install/arm64/vmlinuz.efi: 2 system extensions\n"),
        "{}",
        stdout(&o)
    );
    let e = one_line_error(&check(&path, &["--arch", "amd64"]));
    assert!(e.contains("does not carry readyprism"), "{e}");
}

#[test]
fn an_installer_for_another_architecture_fails_naming_what_it_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("arm64.tar");
    write_docker_tarball(&path, &[vec![uki_file("arm64", Some(WITH))]]);
    let e = one_line_error(&check(&path, &[]));
    assert!(
        e.contains(
            "no /usr/install/amd64/vmlinuz.efi: the installer holds /usr/install/arm64/vmlinuz.efi"
        ),
        "{e}"
    );
    let rootfs = dir.path().join("rootfs");
    write_rootfs(&rootfs, &[uki_file("amd64", Some(WITH))]);
    let e = one_line_error(&check(&rootfs, &["--arch", "arm64"]));
    assert!(
        e.contains("the installer holds /usr/install/amd64/vmlinuz.efi"),
        "{e}"
    );
}

#[test]
fn an_xz_extensions_archive_as_before_talos_1_8_is_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut files = base_files();
    files.push((
        "usr/install/amd64/vmlinuz.efi".into(),
        uki(&initrd_compressed(Some(WITH), xz)),
    ));
    write_rootfs(dir.path(), &files);
    let o = check(dir.path(), &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("readyprism   0.1.0"), "{}", stdout(&o));

    // Without readyprism in it, it fails as the zstd one does.
    let without = dir.path().join("without");
    write_rootfs(
        &without,
        &[(
            "usr/install/amd64/vmlinuz.efi".into(),
            uki(&initrd_compressed(Some(WITHOUT), xz)),
        )],
    );
    let e = one_line_error(&check(&without, &[]));
    assert!(e.contains("does not carry readyprism: its extensions are intel-ucode 20250211, iscsi-tools v0.2.0"), "{e}");
}

#[test]
fn an_installer_built_without_extensions_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_rootfs(dir.path(), &[uki_file("amd64", None)]);
    let o = check(dir.path(), &[]);
    let e = one_line_error(&o);
    assert!(e.contains("it has no system extensions"), "{e}");
    assert_eq!(
        stdout(&o),
        "usr/install/amd64/vmlinuz.efi: 0 system extensions\n"
    );
}

#[test]
fn what_is_not_an_installer_fails_saying_what_it_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let other_image = dir.path().join("busybox.tar");
    write_docker_tarball(
        &other_image,
        &[vec![("bin/sh".into(), b"\x7fELF".to_vec())]],
    );
    let e = one_line_error(&check(&other_image, &[]));
    assert!(e.contains("not a Talos installer"), "{e}");

    let plain_tar = dir.path().join("files.tar");
    std::fs::write(
        &plain_tar,
        layer_tar(&[("usr/install/amd64/vmlinuz.efi".into(), b"x".to_vec())]),
    )
    .expect("write");
    let e = one_line_error(&check(&plain_tar, &[]));
    assert!(e.contains("not an image tarball"), "{e}");

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a tar at all\n".repeat(100)).expect("write");
    assert!(!check(&text, &[]).status.success());

    let not_pe = dir.path().join("not-pe");
    write_rootfs(
        &not_pe,
        &[(
            "usr/install/amd64/vmlinuz.efi".into(),
            b"\x7fELF kernel".to_vec(),
        )],
    );
    let e = one_line_error(&check(&not_pe, &[]));
    assert!(e.contains("not a PE32+ (UEFI) file"), "{e}");

    let e = one_line_error(&check(&dir.path().join("missing.tar"), &[]));
    assert!(e.contains("missing.tar"), "{e}");
}
