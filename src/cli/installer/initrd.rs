//! An initramfs as the kernel unpacks it: cpio archives (newc) one after another, each
//! uncompressed or compressed, with zero padding between them; one file taken out of it by name,
//! the last copy winning as it does when the kernel unpacks them in order.
//!
//! Owns the walk over segments and archives; does not own decompression (`zstd`) or the newc
//! header (the `cpio` crate), nor what the file means. Inside a compressed segment only archives
//! and padding may follow one another, as in the kernel (`init/initramfs.c`, `unpack_to_rootfs`).
//!
//! Compressed segments are read in zstd and xz: Talos compresses its initramfs with zstd
//! (siderolabs/talos `Dockerfile:1113-1114` at v1.14.0-rc.1, `:1018-1019` at v1.13.9) and so does
//! the imager from Talos 1.8 (`UseZSTDCompression`, `pkg/machinery/imager/quirks/quirks.go:83`),
//! with xz before it. A gzip segment, which no Talos writes, is named, not decoded.

use std::io::{self, BufRead, BufReader, Read};

use super::{xz, zstd};

/// Compressions the kernel reads but no Talos initramfs holds, by magic: gzip (RFC 1952 §2.3.1).
const UNREAD: &[(&str, &[u8])] = &[("gzip", &[0x1f, 0x8b])];
/// The start of a newc header, with or without checksums (`070701`, `070702`).
const NEWC_MAGIC: &[u8] = b"07070";
/// The name of the entry that ends a cpio archive.
const TRAILER: &str = "TRAILER!!!";
/// The most of the wanted file kept: `/extensions.yaml` is a few hundred bytes an extension, so a
/// larger one is not Talos's.
const MAX_FILE: u64 = 1 << 20;

/// Why the initramfs could not be walked.
#[derive(Debug, thiserror::Error)]
pub enum InitrdError {
    /// A segment compressed otherwise than with zstd or xz: not a Talos initramfs.
    #[error("at byte {offset}: a {kind} segment; Talos compresses with zstd (xz before 1.8), the only compressions read here")]
    Unread {
        /// Where the segment starts in the section.
        offset: usize,
        /// `xz` or `gzip`.
        kind: &'static str,
    },
    /// A segment starts with bytes that are neither a cpio header nor a compressed stream.
    #[error("at byte {offset}: neither a cpio archive nor a zstd or xz stream (starts {start})")]
    Unknown {
        /// Where the segment starts in the section.
        offset: usize,
        /// Its first bytes, in hex.
        start: String,
    },
    /// A segment is truncated or corrupt.
    #[error("at byte {offset}, a {kind} segment")]
    Corrupt {
        /// Where the segment starts in the section.
        offset: usize,
        /// `cpio`, `zstd` or `xz`.
        kind: &'static str,
        /// The decoder's or the reader's error.
        source: io::Error,
    },
    /// The wanted file is larger than any Talos writes.
    #[error("{name} is larger than {MAX_FILE} bytes")]
    TooLarge {
        /// The file's name.
        name: String,
    },
}

/// The contents of the file `name` (a path without a leading `/`) in the initramfs `data`, or
/// `None` when no archive holds it.
pub fn find_file(data: &[u8], name: &str) -> Result<Option<Vec<u8>>, InitrdError> {
    let mut found = None;
    let mut rest = data;
    loop {
        rest = skip_zeros(rest);
        if rest.is_empty() {
            return Ok(found);
        }
        let offset = data.len() - rest.len();
        let corrupt = |kind| {
            move |source| InitrdError::Corrupt {
                offset,
                kind,
                source,
            }
        };
        let mut cursor = rest;
        if rest.starts_with(NEWC_MAGIC) {
            archive(&mut cursor, name, &mut found).map_err(corrupt("cpio"))?;
        } else if rest.starts_with(&zstd::MAGIC) {
            let frames = zstd::Frames::new(&mut cursor).map_err(corrupt("zstd"))?;
            archives(BufReader::new(frames), name, &mut found).map_err(corrupt("zstd"))?;
        } else if rest.starts_with(&xz::MAGIC) {
            let (plain, len) = xz::decode(rest).map_err(corrupt("xz"))?;
            archives(&plain[..], name, &mut found).map_err(corrupt("xz"))?;
            cursor = &rest[len..];
        } else if let Some((kind, _)) = UNREAD.iter().find(|(_, m)| rest.starts_with(m)) {
            return Err(InitrdError::Unread { offset, kind });
        } else {
            let start: String = rest.iter().take(8).map(|b| format!("{b:02x}")).collect();
            return Err(InitrdError::Unknown { offset, start });
        }
        rest = cursor;
        check_size(&found, name)?;
    }
}

fn check_size(found: &Option<Vec<u8>>, name: &str) -> Result<(), InitrdError> {
    match found {
        Some(f) if f.len() as u64 > MAX_FILE => Err(InitrdError::TooLarge { name: name.into() }),
        _ => Ok(()),
    }
}

fn skip_zeros(data: &[u8]) -> &[u8] {
    let n = data.iter().take_while(|&&b| b == 0).count();
    &data[n..]
}

/// The archives of a decompressed segment, with zero padding between them, to its end.
fn archives<R: BufRead>(mut r: R, name: &str, found: &mut Option<Vec<u8>>) -> io::Result<()> {
    loop {
        let (zeros, done) = {
            let buf = r.fill_buf()?;
            let zeros = buf.iter().take_while(|&&b| b == 0).count();
            (zeros, buf.is_empty())
        };
        if done {
            return Ok(());
        }
        if zeros > 0 {
            r.consume(zeros);
            continue;
        }
        archive(&mut r, name, found)?;
    }
}

/// One cpio archive, up to and including its trailer entry.
fn archive<R: Read>(r: &mut R, name: &str, found: &mut Option<Vec<u8>>) -> io::Result<()> {
    loop {
        let mut entry = cpio::NewcReader::new(&mut *r)?;
        let e = entry.entry();
        if e.is_trailer() || e.name() == TRAILER {
            entry.finish()?;
            return Ok(());
        }
        // cpio names are relative (`extensions.yaml`, as the imager's `cpio --create` in its
        // temporary directory writes them), sometimes with `./` or `/` before them.
        let entry_name = e.name().trim_start_matches("./").trim_start_matches('/');
        // S_IFREG: a regular file, not a directory or a link of that name.
        let regular = e.mode() & 0o170000 == 0o100000;
        if regular && entry_name == name {
            let mut contents = Vec::new();
            (&mut entry).take(MAX_FILE + 1).read_to_end(&mut contents)?;
            *found = Some(contents);
        }
        entry.finish()?;
    }
}
