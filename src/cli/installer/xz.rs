//! An xz stream at the start of an initramfs segment: where it ends, and what it holds.
//!
//! Owns finding the stream's end; does not own decoding (lzma-rs, which checks every block, the
//! index and the footer, but reads its input to the end and refuses bytes after the stream) or
//! what the stream holds. Talos's imager compressed the extensions' archive with xz before 1.8
//! (`pkg/imager/extensions/rebuild.go:78-85`, `UseZSTDCompression` in
//! `pkg/machinery/imager/quirks/quirks.go:83`), and the kernel reads it (`init/initramfs.c`).
//!
//! The end is found from the footer (the xz file format 1.2.0, §2.1.2): a stream is a multiple of
//! four bytes and ends with CRC32, Backward Size, Stream Flags and `YZ`, the CRC32 covering the
//! six bytes between, the flags equal to the header's (§2.1.1.2). The first place where all of
//! that holds and the stream decodes is its end.

use std::io::{self, Write};

/// The six bytes an xz stream begins with (§2.1.1.1).
pub const MAGIC: [u8; 6] = [0xfd, b'7', b'z', b'X', b'Z', 0];
/// The footer's last two bytes (§2.1.2.4).
const FOOTER_MAGIC: &[u8] = b"YZ";
/// A stream header and a footer are 12 bytes each.
const HEADER: usize = 12;
/// The most an xz segment may hold decompressed: Talos's whole initramfs is a few hundred MiB.
pub const MAX_PLAIN: u64 = 1 << 30;

/// Decodes the xz stream at the start of `data`: what it holds, and how many bytes of `data` it
/// took.
pub fn decode(data: &[u8]) -> io::Result<(Vec<u8>, usize)> {
    let flags = data
        .get(MAGIC.len()..MAGIC.len() + 2)
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "truncated stream header"))?;
    let mut last = None;
    for end in footer_ends(data, flags) {
        let mut plain = Bounded(Vec::new());
        match lzma_rs::xz_decompress(&mut &data[..end], &mut plain) {
            Ok(()) => return Ok((plain.0, end)),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) => io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
        None => io::Error::new(io::ErrorKind::UnexpectedEof, "no stream footer"),
    })
}

/// Every offset where a footer with a good CRC32 and the header's flags ends, in order.
fn footer_ends<'d>(data: &'d [u8], flags: &'d [u8]) -> impl Iterator<Item = usize> + 'd {
    (2 * HEADER..=data.len()).step_by(4).filter(move |&end| {
        let footer = &data[end - HEADER..end];
        let crc = u32::from_le_bytes([footer[0], footer[1], footer[2], footer[3]]);
        footer[10..] == *FOOTER_MAGIC
            && footer[8..10] == *flags
            && crc32fast::hash(&footer[4..10]) == crc
    })
}

/// A `Vec` that refuses to grow past [`MAX_PLAIN`].
struct Bounded(Vec<u8>);

impl Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.0.len() as u64 + buf.len() as u64 > MAX_PLAIN {
            return Err(io::Error::other(format!(
                "holds more than {MAX_PLAIN} bytes"
            )));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xz(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        lzma_rs::xz_compress(&mut &data[..], &mut out).unwrap();
        out
    }

    #[test]
    fn a_stream_is_found_to_its_end_with_what_follows_left() {
        let plain: Vec<u8> = (0..50_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let stream = xz(&plain);
        let mut data = stream.clone();
        data.extend([0, 0, 0, 0]);
        data.extend(xz(b"next"));
        let (got, len) = decode(&data).unwrap();
        assert_eq!(got, plain);
        assert_eq!(len, stream.len());
    }

    #[test]
    fn a_truncated_or_corrupt_stream_is_an_error() {
        let stream = xz(b"some bytes of an archive");
        assert!(decode(&stream[..stream.len() - 4]).is_err());
        // The stream header's CRC32 (§2.1.1.3) no longer matches its flags.
        let mut bad = stream.clone();
        bad[8] ^= 0xff;
        assert!(decode(&bad).is_err());
        assert!(decode(&MAGIC).is_err());
    }
}
