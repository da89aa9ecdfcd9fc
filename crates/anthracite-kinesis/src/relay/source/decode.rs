//! Payload → Graphite text: content decoding (none, gzip, zlib, auto). The text is fed to the
//! ingestor as one message ([`anthracite::Ingestor::message`]: carbon's datagram rules).

use std::io::Read;

use crate::config::ContentEncoding;

/// Largest decompressed user record. Bigger ones are dropped and counted (a compression bomb
/// must not take the relay's memory).
pub(crate) const MAX_DECODED: usize = 64 << 20;

/// Why a payload could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DecodeError {
    /// Not a valid gzip or zlib stream.
    #[error("payload is not valid {0}")]
    Corrupt(&'static str),
    /// Decompresses to more than [`MAX_DECODED`] bytes.
    #[error("payload decompresses to more than {MAX_DECODED} bytes")]
    TooLarge,
}

/// Decodes payloads into a buffer it reuses, so steady state allocates nothing per record.
#[derive(Debug)]
pub(crate) struct PayloadDecoder {
    encoding: ContentEncoding,
    buf: Vec<u8>,
}

impl PayloadDecoder {
    /// A decoder for `encoding`.
    pub(crate) fn new(encoding: ContentEncoding) -> Self {
        Self {
            encoding,
            buf: Vec::new(),
        }
    }

    /// The text of one user record.
    pub(crate) fn decode<'a>(&'a mut self, data: &'a [u8]) -> Result<&'a [u8], DecodeError> {
        match self.encoding {
            ContentEncoding::None => Ok(data),
            ContentEncoding::Gzip => self.inflate(data, Kind::Gzip),
            ContentEncoding::Zlib => self.inflate(data, Kind::Zlib),
            ContentEncoding::Auto => {
                if data.starts_with(&[0x1f, 0x8b]) {
                    self.inflate(data, Kind::Gzip)
                } else if looks_like_zlib(data) {
                    // Plain text can start with a valid-looking zlib header ("x^…"): fall back.
                    match inflate_into(&mut self.buf, data, Kind::Zlib) {
                        Ok(()) => Ok(&self.buf),
                        Err(_) => Ok(data),
                    }
                } else {
                    Ok(data)
                }
            }
        }
    }

    fn inflate(&mut self, data: &[u8], kind: Kind) -> Result<&[u8], DecodeError> {
        inflate_into(&mut self.buf, data, kind)?;
        Ok(&self.buf)
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Gzip,
    Zlib,
}

fn looks_like_zlib(data: &[u8]) -> bool {
    match data {
        [cmf, flg, ..] => cmf & 0x0f == 8 && (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 == 0,
        _ => false,
    }
}

fn inflate_into(buf: &mut Vec<u8>, data: &[u8], kind: Kind) -> Result<(), DecodeError> {
    buf.clear();
    let limit = MAX_DECODED as u64 + 1;
    let (read, name) = match kind {
        Kind::Gzip => (
            flate2::read::MultiGzDecoder::new(data)
                .take(limit)
                .read_to_end(buf),
            "gzip",
        ),
        Kind::Zlib => (
            flate2::read::ZlibDecoder::new(data)
                .take(limit)
                .read_to_end(buf),
            "zlib",
        ),
    };
    let result = match read {
        Err(_) => Err(DecodeError::Corrupt(name)),
        Ok(n) if n > MAX_DECODED => Err(DecodeError::TooLarge),
        Ok(_) => Ok(()),
    };
    if buf.capacity() > 4 * (1 << 20) && result.is_err() {
        *buf = Vec::new();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let _ = e.write_all(data);
        e.finish().unwrap_or_default()
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        let _ = e.write_all(data);
        e.finish().unwrap_or_default()
    }

    #[test]
    fn encodings() {
        let text = b"a.b 1 2\n";
        let mut auto = PayloadDecoder::new(ContentEncoding::Auto);
        assert_eq!(auto.decode(&gzip(text)), Ok(&text[..]));
        assert_eq!(auto.decode(&zlib(text)), Ok(&text[..]));
        assert_eq!(auto.decode(text), Ok(&text[..]));
        let mut g = PayloadDecoder::new(ContentEncoding::Gzip);
        assert_eq!(g.decode(text), Err(DecodeError::Corrupt("gzip")));
        let mut z = PayloadDecoder::new(ContentEncoding::Zlib);
        assert_eq!(z.decode(&zlib(text)), Ok(&text[..]));
        let mut n = PayloadDecoder::new(ContentEncoding::None);
        assert_eq!(n.decode(text), Ok(&text[..]));
    }
}
