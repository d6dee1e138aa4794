//! The base64 of the JSON wire: standard alphabet with padding, decoding
//! what Python's `base64.b64decode` accepts (non-zero trailing bits).
//!
//! The reference server and its client encode with Python, so text they
//! produce decodes here; what this crate writes is canonical base64 that
//! every decoder reads.
//!
//! ```
//! use abx_wire::codec::base64::{decode, encode};
//!
//! assert_eq!(encode(b"chart"), "Y2hhcnQ=");
//! assert_eq!(decode("Y2hhcnQ=").unwrap(), b"chart");
//! // Python accepts non-zero trailing bits; so does this decoder.
//! assert_eq!(decode("Y2hhcnR=").unwrap(), b"chart");
//! assert!(decode("not base64!").is_err());
//! ```

use ::base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use ::base64::Engine as _;

pub use ::base64::DecodeError;

/// Standard base64 with padding, tolerant of non-zero trailing bits (as Python's decoder).
///
/// ```
/// use base64::Engine as _;
/// use abx_wire::codec::base64::BASE64;
///
/// let mut out = [0u8; 8];
/// let n = BASE64.decode_slice("aGk=", &mut out).unwrap();
/// assert_eq!(&out[..n], b"hi");
/// ```
pub const BASE64: GeneralPurpose = GeneralPurpose::new(
    &::base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

/// `data` as standard base64 with padding.
///
/// ```
/// assert_eq!(abx_wire::codec::base64::encode([0xff, 0x00]), "/wA=");
/// ```
pub fn encode(data: impl AsRef<[u8]>) -> String {
    BASE64.encode(data)
}

/// The bytes `text` encodes.
///
/// # Errors
/// Characters outside the alphabet, a wrong length or wrong padding.
///
/// ```
/// use abx_wire::codec::base64::decode;
///
/// assert_eq!(decode("aGk=").unwrap(), b"hi");
/// assert!(decode("aGk").is_err(), "padding is required");
/// ```
pub fn decode(text: impl AsRef<[u8]>) -> Result<Vec<u8>, DecodeError> {
    BASE64.decode(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_length() {
        let data: Vec<u8> = (0..=255).collect();
        for len in 0..data.len() {
            assert_eq!(decode(encode(&data[..len])).expect("decodes"), &data[..len]);
        }
    }

    #[test]
    fn accepts_what_python_accepts_and_nothing_else() {
        assert_eq!(decode("").expect("empty"), b"");
        assert_eq!(decode("YQ==").expect("canonical"), b"a");
        assert_eq!(decode("YR==").expect("trailing bits"), b"a");
        assert!(decode("YQ").is_err());
        assert!(decode("YQ=").is_err());
        assert!(decode("Y Q==").is_err());
        assert!(decode("YQ==YQ==").is_err());
    }
}
