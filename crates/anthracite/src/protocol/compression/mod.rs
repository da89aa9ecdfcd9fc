//! Stream compression of plaintext connections, on carbon-c-relay 3.7.3's wire formats
//! (`transport gzip|lz4|snappy` in its configuration; `server.c` writes them, `dispatcher.c`
//! reads them), plus zstd between anthracite relays. No I/O: the receivers push what they
//! read into a [`Decompressor`] and pull lines' bytes out; the destinations pass each write
//! through a [`Compressor`]. One of each per connection: every connection starts a new stream.
//!
//! The formats, as carbon-c-relay writes them:
//!
//! - **gzip**: one deflate stream per connection behind a gzip header (`deflateInit2` with
//!   window bits 15 + 16), each write ending in a partial flush so the peer can decode it at
//!   once; the stream is never finished. anthracite writes the same header and ends each write
//!   with a sync flush (both end the block and align the output; any inflater reads either),
//!   at level 1 rather than carbon-c-relay's 6: a third of the CPU for half as many bytes
//!   again (measured in docs/benchmarks.md).
//! - **lz4**: every flush of up to 32 KiB of lines is one complete LZ4 frame
//!   (`LZ4F_compressFrame`). A frame split across reads is kept until the rest arrives
//!   (carbon-c-relay 3.7.3's reader loses it).
//! - **snappy**: every flush of up to 32 KiB is one raw snappy block (`snappy_compress`), with
//!   no framing: where a block ends is found by walking its elements up to its decoded length.
//!   (carbon-c-relay 3.7.3's reader decodes one block and then fails.)
//! - **zstd** (anthracite only; `transport zstd` in a carbon-c-relay configuration,
//!   `compression = "zstd"` in relay.toml): one zstd stream per connection, each write ending
//!   in a flush; windows of 128 KiB.
//!
//! **Bounded decompression.** An LZ4 frame or a snappy block may decode into at most the
//! budget (`listen.max_decompressed_bytes`); a gzip or zstd stream, past its first budget of
//! decoded bytes, into at most [`STREAM_RATIO`] times the compressed bytes it was sent, and its
//! zstd window may be no larger than the budget. Past that the decompressor refuses with
//! [`DecompressError::TooLarge`] and the receiver counts it (`decompressed_too_large`) and
//! closes the connection, keeping everything decoded before it. Output is handed out in
//! pieces of [`PIECE`] bytes, so the lines of a stream never sit in memory whole; a frame or
//! block is decoded whole, so a connection holds at most the budget of decoded bytes, plus
//! the undecoded rest of a frame (also at most the budget) and a zstd window.

mod frames;

use std::io::Read;

use bytes::BytesMut;

/// Stream compression of a plaintext connection (a listener's or a destination's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Compression {
    /// None.
    #[default]
    Plain,
    /// A gzip-wrapped deflate stream, flushed per write.
    Gzip,
    /// One LZ4 frame per write of up to 32 KiB.
    Lz4,
    /// One raw snappy block per write of up to 32 KiB.
    Snappy,
    /// A zstd stream, flushed per write (anthracite to anthracite).
    Zstd,
}

impl Compression {
    /// Every kind, in carbon-c-relay's order (zstd last).
    pub const ALL: [Compression; 5] = [
        Compression::Plain,
        Compression::Gzip,
        Compression::Lz4,
        Compression::Snappy,
        Compression::Zstd,
    ];

    /// Its word in configurations (carbon-c-relay's `transport`, relay.toml's `compression`).
    pub fn word(self) -> &'static str {
        match self {
            Compression::Plain => "plain",
            Compression::Gzip => "gzip",
            Compression::Lz4 => "lz4",
            Compression::Snappy => "snappy",
            Compression::Zstd => "zstd",
        }
    }

    /// The kind named `word` (`""` is plain).
    pub fn from_word(word: &str) -> Option<Self> {
        if word.is_empty() {
            return Some(Compression::Plain);
        }
        Compression::ALL.into_iter().find(|c| c.word() == word)
    }
}

/// Most bytes one write's LZ4 frame or snappy block holds: carbon-c-relay's `METRIC_BUFSIZ`,
/// the buffer its writer fills before each frame (its reader takes no larger).
pub const UNIT_BYTES: usize = 32 << 10;

/// Most decoded bytes one [`Decompressor::pull`] hands out.
pub const PIECE: usize = 64 << 10;

/// The default of `listen.max_decompressed_bytes`: far above what a 32 KiB unit of lines or
/// a 64 KiB read of a stream decodes into (a few hundred KiB at the ratios lines compress to),
/// far below what a crafted one can (a 64 KiB read of deflate: 64 MiB; of zstd: gigabytes).
pub const DEFAULT_BUDGET: usize = 4 << 20;

/// The smallest budget accepted: one unit of carbon-c-relay's, with room for what a zstd
/// window needs.
pub const MIN_BUDGET: usize = 128 << 10;

/// How many times its compressed size a gzip or zstd stream may decode into, past its first
/// budget: far above what lines compress to (10 to 60 times with zstd, the most regular
/// names), far below a bomb's (deflate reaches 1032, zstd tens of thousands). A line repeated
/// verbatim compresses past it.
pub const STREAM_RATIO: u64 = 256;

/// The zstd window the compressor uses (2^17 = 128 KiB): what the smallest budget admits.
const ZSTD_WINDOW_LOG: u32 = 17;

/// Why a compressed stream was refused; the connection is closed either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecompressError {
    /// A unit decodes (or a frame's declared sizes would decode) into more than the budget.
    TooLarge,
    /// The bytes are not of the format.
    Corrupt,
}

/// The gzip stream's state.
enum Gzip {
    /// Before a member's header.
    Header,
    /// Inside a member's deflate stream.
    Body(Box<flate2::Decompress>),
    /// After a member's end: its CRC and length (this many bytes left), then perhaps another
    /// member.
    Trailer(usize),
}

enum Decoder {
    Gzip(Gzip),
    Lz4,
    Snappy(snap::raw::Decoder),
    /// Created at the first bytes (a context that cannot be allocated refuses them).
    Zstd(Option<Box<zstd::stream::raw::Decoder<'static>>>),
}

/// A zstd decoder whose window is no larger than `budget`.
fn zstd_decoder(budget: usize) -> std::io::Result<Box<zstd::stream::raw::Decoder<'static>>> {
    let mut d = zstd::stream::raw::Decoder::new()?;
    // The window is decoder memory: no larger than the budget allows.
    let log = (usize::BITS - 1 - budget.leading_zeros()).clamp(ZSTD_WINDOW_LOG, 27);
    d.set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(log))?;
    Ok(Box::new(d))
}

/// Counts a step of a gzip or zstd stream (`stream`: compressed bytes consumed, bytes
/// decoded): past its first `budget` of decoded bytes, a stream may decode into at most
/// [`STREAM_RATIO`] times what it was sent.
fn stream_step(
    stream: &mut (u64, u64),
    budget: usize,
    used: usize,
    made: usize,
) -> Result<(), DecompressError> {
    stream.0 += used as u64;
    stream.1 += made as u64;
    if stream.1 > budget as u64 + STREAM_RATIO * stream.0 {
        return Err(DecompressError::TooLarge);
    }
    Ok(())
}

/// One connection's decompressing reader: [`push`](Self::push) what the socket gave,
/// [`pull`](Self::pull) what it decodes into until it has nothing more.
pub struct Decompressor {
    decoder: Decoder,
    budget: usize,
    /// Compressed bytes not yet decoded, from `input_pos`.
    input: Vec<u8>,
    input_pos: usize,
    /// A decoded frame or block not yet handed out, from `decoded_pos`.
    decoded: Vec<u8>,
    decoded_pos: usize,
    /// Compressed bytes consumed and bytes decoded over the connection (gzip, zstd).
    stream: (u64, u64),
    /// Where the streams decode into before the bytes are handed out.
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Decompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decompressor")
            .field("budget", &self.budget)
            .field("pending", &(self.input.len() - self.input_pos))
            .finish_non_exhaustive()
    }
}

impl Decompressor {
    /// A reader of `kind` (`None` for plain) whose units may decode into `budget` bytes each.
    pub fn new(kind: Compression, budget: usize) -> Option<Self> {
        let budget = budget.max(MIN_BUDGET);
        let decoder = match kind {
            Compression::Plain => return None,
            Compression::Gzip => Decoder::Gzip(Gzip::Header),
            Compression::Lz4 => Decoder::Lz4,
            Compression::Snappy => Decoder::Snappy(snap::raw::Decoder::new()),
            Compression::Zstd => Decoder::Zstd(None),
        };
        Some(Self {
            decoder,
            budget,
            input: Vec::new(),
            input_pos: 0,
            decoded: Vec::new(),
            decoded_pos: 0,
            stream: (0, 0),
            scratch: Vec::new(),
        })
    }

    /// Takes what one read brought.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.input_pos > 0 {
            self.input.drain(..self.input_pos);
            self.input_pos = 0;
        }
        self.input.extend_from_slice(bytes);
    }

    /// Appends up to [`PIECE`] decoded bytes to `out`; `Ok(0)` when it needs more input.
    pub fn pull(&mut self, out: &mut BytesMut) -> Result<usize, DecompressError> {
        if self.decoded_pos < self.decoded.len() {
            let end = (self.decoded_pos + PIECE).min(self.decoded.len());
            out.extend_from_slice(&self.decoded[self.decoded_pos..end]);
            let n = end - self.decoded_pos;
            self.decoded_pos = end;
            return Ok(n);
        }
        self.decoded.clear();
        self.decoded_pos = 0;
        let n = match &mut self.decoder {
            Decoder::Gzip(_) => self.pull_gzip(out)?,
            Decoder::Zstd(_) => self.pull_zstd(out)?,
            Decoder::Lz4 => {
                if !self.decode_lz4()? {
                    return Ok(0);
                }
                return self.pull(out);
            }
            Decoder::Snappy(_) => {
                if !self.decode_snappy()? {
                    return Ok(0);
                }
                return self.pull(out);
            }
        };
        if self.input_pos == self.input.len() {
            self.input.clear();
            self.input_pos = 0;
        }
        Ok(n)
    }

    /// Undecoded input held: more than the budget (plus a header's worth) cannot be a unit
    /// that decodes within it.
    fn check_pending(&self) -> Result<(), DecompressError> {
        let pending = self.input.len() - self.input_pos;
        if pending > snap::raw::max_compress_len(self.budget) + 64 {
            return Err(DecompressError::TooLarge);
        }
        Ok(())
    }

    /// Decodes the next whole LZ4 frame into `decoded`; `false` when none is complete.
    fn decode_lz4(&mut self) -> Result<bool, DecompressError> {
        loop {
            let rest = &self.input[self.input_pos..];
            let Some(unit) = frames::lz4_unit(rest, self.budget)? else {
                self.check_pending()?;
                return Ok(false);
            };
            match unit {
                frames::Lz4Unit::Skip(n) => self.input_pos += n,
                frames::Lz4Unit::Frame(n) => {
                    let frame = &rest[..n];
                    let limit = self.budget as u64 + 1;
                    lz4_flex::frame::FrameDecoder::new(frame)
                        .take(limit)
                        .read_to_end(&mut self.decoded)
                        .map_err(|_| DecompressError::Corrupt)?;
                    if self.decoded.len() > self.budget {
                        return Err(DecompressError::TooLarge);
                    }
                    self.input_pos += n;
                    if !self.decoded.is_empty() {
                        return Ok(true);
                    }
                }
            }
        }
    }

    /// Decodes the next whole snappy block into `decoded`; `false` when none is complete.
    fn decode_snappy(&mut self) -> Result<bool, DecompressError> {
        let Decoder::Snappy(decoder) = &mut self.decoder else {
            return Ok(false);
        };
        loop {
            let rest = &self.input[self.input_pos..];
            if rest.is_empty() {
                return Ok(false);
            }
            let Some((len, n)) = frames::snappy_block(rest, self.budget)? else {
                let pending = rest.len();
                return if pending > snap::raw::max_compress_len(self.budget) + 64 {
                    Err(DecompressError::TooLarge)
                } else {
                    Ok(false)
                };
            };
            self.decoded.resize(len, 0);
            decoder
                .decompress(&rest[..n], &mut self.decoded)
                .map_err(|_| DecompressError::Corrupt)?;
            self.input_pos += n;
            if len > 0 {
                return Ok(true);
            }
        }
    }

    /// Decodes gzip input into `out`, a piece at a time.
    fn pull_gzip(&mut self, out: &mut BytesMut) -> Result<usize, DecompressError> {
        let Decoder::Gzip(state) = &mut self.decoder else {
            return Ok(0);
        };
        loop {
            let rest = &self.input[self.input_pos..];
            match state {
                Gzip::Header => {
                    let Some(n) = frames::gzip_header(rest)? else {
                        return Ok(0);
                    };
                    self.input_pos += n;
                    *state = Gzip::Body(Box::new(flate2::Decompress::new(false)));
                }
                Gzip::Trailer(left) => {
                    let n = (*left).min(rest.len());
                    self.input_pos += n;
                    *left -= n;
                    if *left > 0 {
                        return Ok(0);
                    }
                    *state = Gzip::Header;
                }
                Gzip::Body(inflate) => {
                    self.scratch.resize(PIECE, 0);
                    let (before_in, before_out) = (inflate.total_in(), inflate.total_out());
                    let status = inflate
                        .decompress(rest, &mut self.scratch, flate2::FlushDecompress::None)
                        .map_err(|_| DecompressError::Corrupt)?;
                    let used = (inflate.total_in() - before_in) as usize;
                    let made = (inflate.total_out() - before_out) as usize;
                    self.input_pos += used;
                    stream_step(&mut self.stream, self.budget, used, made)?;
                    out.extend_from_slice(&self.scratch[..made]);
                    if status == flate2::Status::StreamEnd {
                        *state = Gzip::Trailer(8);
                    }
                    if made > 0 {
                        return Ok(made);
                    }
                    if used == 0 && status != flate2::Status::StreamEnd {
                        return Ok(0);
                    }
                }
            }
        }
    }

    /// Decodes zstd input into `out`, a piece at a time.
    fn pull_zstd(&mut self, out: &mut BytesMut) -> Result<usize, DecompressError> {
        use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
        let Decoder::Zstd(slot) = &mut self.decoder else {
            return Ok(0);
        };
        let decoder = match slot {
            Some(d) => d,
            None => slot.insert(zstd_decoder(self.budget).map_err(|_| DecompressError::Corrupt)?),
        };
        self.scratch.resize(PIECE, 0);
        loop {
            let rest = &self.input[self.input_pos..];
            let mut input = InBuffer::around(rest);
            let mut output = OutBuffer::around(&mut self.scratch[..]);
            decoder.run(&mut input, &mut output).map_err(|e| {
                // A frame whose window passes what the budget allows is a memory refusal, as
                // a unit decoding past it is (libzstd's `frameParameter_windowTooLarge`).
                if e.to_string().contains("too much memory") {
                    DecompressError::TooLarge
                } else {
                    DecompressError::Corrupt
                }
            })?;
            let (used, made) = (input.pos(), output.pos());
            self.input_pos += used;
            stream_step(&mut self.stream, self.budget, used, made)?;
            out.extend_from_slice(&self.scratch[..made]);
            // A frame that ends without output (a skippable or empty one) stops the decoder
            // at its end: go on with what follows it.
            if made > 0 || used == 0 || self.input_pos == self.input.len() {
                return Ok(made);
            }
        }
    }
}

enum Encoder {
    Gzip {
        deflate: Box<flate2::Compress>,
        header: bool,
    },
    Lz4,
    Snappy(Box<snap::raw::Encoder>),
    /// Created at the first write (a context that cannot be allocated fails it).
    Zstd(Option<Box<zstd::stream::raw::Encoder<'static>>>),
}

/// One connection's compressing writer: [`compress`](Self::compress) turns each write's lines
/// into what carbon-c-relay writes for them.
pub struct Compressor {
    encoder: Encoder,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compressor").finish_non_exhaustive()
    }
}

/// The gzip header zlib writes for `deflateInit2(…, 15 + 16, …)` at level 1: no name, no
/// time, "fastest", Unix.
const GZIP_HEADER: [u8; 10] = [0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 4, 3];

impl Compressor {
    /// A writer of `kind` (`None` for plain).
    pub fn new(kind: Compression) -> Option<Self> {
        let encoder = match kind {
            Compression::Plain => return None,
            Compression::Gzip => Encoder::Gzip {
                deflate: Box::new(flate2::Compress::new(flate2::Compression::fast(), false)),
                header: false,
            },
            Compression::Lz4 => Encoder::Lz4,
            Compression::Snappy => Encoder::Snappy(Box::new(snap::raw::Encoder::new())),
            Compression::Zstd => Encoder::Zstd(None),
        };
        Some(Self {
            encoder,
            scratch: Vec::new(),
        })
    }

    /// Appends `plain`, compressed and flushed, to `out`.
    pub fn compress(&mut self, plain: &[u8], out: &mut BytesMut) -> std::io::Result<()> {
        match &mut self.encoder {
            Encoder::Gzip { deflate, header } => {
                if !std::mem::replace(header, true) {
                    out.extend_from_slice(&GZIP_HEADER);
                }
                let mut at = 0;
                loop {
                    self.scratch.resize(PIECE, 0);
                    let before = (deflate.total_in(), deflate.total_out());
                    deflate
                        .compress(&plain[at..], &mut self.scratch, flate2::FlushCompress::Sync)
                        .map_err(std::io::Error::other)?;
                    at += (deflate.total_in() - before.0) as usize;
                    let made = (deflate.total_out() - before.1) as usize;
                    out.extend_from_slice(&self.scratch[..made]);
                    // Done when all input is in and the flush did not fill the output.
                    if at == plain.len() && made < self.scratch.len() {
                        return Ok(());
                    }
                }
            }
            Encoder::Lz4 => {
                use std::io::Write;
                for unit in plain.chunks(UNIT_BYTES) {
                    let info = lz4_flex::frame::FrameInfo::new()
                        .block_size(lz4_flex::frame::BlockSize::Max64KB)
                        .block_mode(lz4_flex::frame::BlockMode::Independent);
                    self.scratch.clear();
                    let mut frame = lz4_flex::frame::FrameEncoder::with_frame_info(
                        info,
                        std::mem::take(&mut self.scratch),
                    );
                    frame.write_all(unit)?;
                    self.scratch = frame.finish().map_err(std::io::Error::other)?;
                    out.extend_from_slice(&self.scratch);
                }
                Ok(())
            }
            Encoder::Snappy(encoder) => {
                for unit in plain.chunks(UNIT_BYTES) {
                    self.scratch
                        .resize(snap::raw::max_compress_len(unit.len()), 0);
                    let n = encoder
                        .compress(unit, &mut self.scratch)
                        .map_err(std::io::Error::other)?;
                    out.extend_from_slice(&self.scratch[..n]);
                }
                Ok(())
            }
            Encoder::Zstd(slot) => {
                use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
                let encoder = match slot {
                    Some(e) => e,
                    None => {
                        let mut e = zstd::stream::raw::Encoder::new(1)?;
                        e.set_parameter(zstd::zstd_safe::CParameter::WindowLog(ZSTD_WINDOW_LOG))?;
                        slot.insert(Box::new(e))
                    }
                };
                self.scratch.resize(PIECE, 0);
                let mut input = InBuffer::around(plain);
                while input.pos() < plain.len() {
                    let mut output = OutBuffer::around(&mut self.scratch[..]);
                    encoder.run(&mut input, &mut output)?;
                    let n = output.pos();
                    out.extend_from_slice(&self.scratch[..n]);
                }
                loop {
                    let mut output = OutBuffer::around(&mut self.scratch[..]);
                    let left = encoder.flush(&mut output)?;
                    let n = output.pos();
                    out.extend_from_slice(&self.scratch[..n]);
                    if left == 0 {
                        return Ok(());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
