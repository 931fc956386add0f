//! A zstd stream of one or more frames, read as one, stopping where the stream stops so that what
//! follows it (the next initramfs segment) stays in the source.
//!
//! Owns the frame loop; does not own decoding (ruzstd's `FrameDecoder`, which reads from the source
//! exactly the bytes of a frame) or what the stream holds.

use std::io::{self, BufRead, Read};

use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

/// The four bytes every zstd frame begins with (RFC 8878 §3.1.1), little-endian 0xFD2FB528.
pub const MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Decompresses the frames at the start of `source`, one after another, as a single stream.
pub struct Frames<R> {
    source: R,
    decoder: FrameDecoder,
}

impl<R: BufRead> Frames<R> {
    /// Starts on the frame at the start of `source`.
    pub fn new(mut source: R) -> io::Result<Self> {
        let mut decoder = FrameDecoder::new();
        decoder.init(&mut source).map_err(io::Error::other)?;
        Ok(Frames { source, decoder })
    }

    /// Whether another frame follows the one just finished.
    fn next_is_frame(&mut self) -> io::Result<bool> {
        Ok(self.source.fill_buf()?.starts_with(&MAGIC))
    }
}

impl<R: BufRead> Read for Frames<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.decoder.can_collect() > 0 {
                return self.decoder.read(buf);
            }
            if self.decoder.is_finished() {
                if !self.next_is_frame()? {
                    return Ok(0);
                }
                self.decoder
                    .reset(&mut self.source)
                    .map_err(io::Error::other)?;
                continue;
            }
            self.decoder
                .decode_blocks(
                    &mut self.source,
                    BlockDecodingStrategy::UptoBytes(buf.len()),
                )
                .map_err(io::Error::other)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compress(data: &[u8]) -> Vec<u8> {
        ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
    }

    #[test]
    fn frames_read_as_one_stream_and_what_follows_stays() {
        let mut input = compress(b"first ");
        input.extend(compress(b"second"));
        input.extend(b"\0\0\0\0after");
        let mut cursor = &input[..];
        let mut out = Vec::new();
        Frames::new(&mut cursor)
            .expect("a frame")
            .read_to_end(&mut out)
            .expect("decodes");
        assert_eq!(out, b"first second");
        assert_eq!(cursor, b"\0\0\0\0after");
    }
}
