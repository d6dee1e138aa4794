//! Random identifiers: hex digits from the kernel's random source, for
//! session, watcher, turn and item ids; and hex digits of any bytes.

/// `2 * bytes` lowercase hex digits of fresh randomness (falling back to
/// the clock if the kernel refuses, which it does not after boot).
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    if rustix::rand::getrandom(&mut buf, rustix::rand::GetRandomFlags::empty()).is_err() {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        for (i, b) in buf.iter_mut().enumerate() {
            *b = nanos.to_le_bytes()[i % 16];
        }
    }
    hex(&buf)
}

/// `N` bytes from the kernel's random source, for keys (no fallback: a key
/// must not be guessable, so a refusal is an error).
///
/// # Errors
/// The kernel's random source cannot be read.
pub fn random_key<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut buf = [0u8; N];
    let mut filled = 0;
    while filled < N {
        filled += rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty())?;
    }
    Ok(buf)
}

/// `bytes` as lowercase hex digits (digests, random ids).
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
        out.push(char::from_digit(u32::from(b & 0xf), 16).unwrap_or('0'));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_hex_of_the_asked_length_and_differ() {
        let a = random_hex(12);
        assert_eq!(a.len(), 24);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(a, random_hex(12));
    }
}
