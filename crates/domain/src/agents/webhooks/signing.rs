//! Standard Webhooks signatures, as the reference and the official `openai`
//! SDK's `client.webhooks.unwrap` compute them: the secret is `whsec_` and
//! the base64 of 32 random bytes; the signature is
//! `v1,<base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>">`
//! under the secret's decoded bytes.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use abx_wire::codec::base64;

/// The prefix of a signing secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// A fresh signing secret.
///
/// # Errors
/// The kernel's random source cannot be read.
pub fn new_secret() -> std::io::Result<String> {
    let key: [u8; 32] = crate::ids::random_key()?;
    Ok(format!("{SECRET_PREFIX}{}", base64::encode(key)))
}

/// The HMAC key of `secret`: the bytes its base64 encodes, or its text when
/// it is not base64 (as the reference reads a secret set by hand).
fn key(secret: &str) -> Vec<u8> {
    let raw = secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret);
    base64::decode(raw).unwrap_or_else(|_| raw.as_bytes().to_vec())
}

/// The `webhook-signature` value of `payload` sent as message `msg_id` at `timestamp`.
pub fn sign(secret: &str, msg_id: &str, timestamp: i64, payload: &[u8]) -> String {
    // HMAC takes a key of any length: new_from_slice cannot fail for it.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&key(secret)) else { unreachable!("HMAC accepts any key") };
    mac.update(format!("{msg_id}.{timestamp}.").as_bytes());
    mac.update(payload);
    format!("v1,{}", base64::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_whsec_and_32_bytes_of_base64() {
        let a = new_secret().expect("random");
        assert!(a.starts_with("whsec_"));
        assert_eq!(key(&a).len(), 32);
        assert_ne!(a, new_secret().expect("random"));
    }

    #[test]
    fn signatures_match_the_standard_webhooks_test_vector() {
        // The vector of the Standard Webhooks specification's reference libraries.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let payload = br#"{"test": 2432232314}"#;
        assert_eq!(
            sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, payload),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert_eq!(key("not base64!"), b"not base64!", "a hand-set secret is its own key");
    }
}
