//! What the gateway reads from a device certificate: the device id (the subject's one common
//! name) and the serial number, the two things a deny list can name.
//!
//! Only certificates that rustls already verified against the fleet CA are read here, but the
//! parse is still total: a certificate the CA signed with no common name, two of them, or an id
//! that breaks [`check_device_id`] is refused, never guessed at.

use common::device_id::{check_device_id, DeviceIdError};

/// A device certificate's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceCert {
    /// The device id: the certificate's subject common name.
    pub device_id: String,
    /// The serial number, big-endian, without leading zero bytes (see [`Serial`]).
    pub serial: Serial,
}

/// A certificate serial number, normalised (big-endian, no leading zero bytes) so that the DER
/// form (which pads a high bit with `00`) and the hex an operator copies compare equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Serial(Vec<u8>);

impl Serial {
    /// From big-endian bytes, leading zeros dropped.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        let first = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
        Self(bytes[first..].to_vec())
    }

    /// From hex as operators write it (`0a1b..`, `0A:1B:..`, any case); `None` if not hex.
    pub fn from_hex(text: &str) -> Option<Self> {
        let digits: Vec<u8> = text.bytes().filter(|&b| b != b':').collect();
        if digits.is_empty() || digits.len() > 80 {
            return None;
        }
        let value = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
        // An odd count is read as if it had a leading zero.
        let padded: Vec<u8> = if digits.len() % 2 == 1 { std::iter::once(b'0').chain(digits).collect() } else { digits };
        let bytes = padded.chunks(2).map(|p| Some(value(p[0])? << 4 | value(p[1])?)).collect::<Option<Vec<u8>>>()?;
        Some(Self::from_bytes(&bytes))
    }

    /// Big-endian bytes, no leading zeros (what a CRL entry's serial is made from).
    pub fn to_bytes(&self) -> Vec<u8> {
        if self.0.is_empty() {
            vec![0]
        } else {
            self.0.clone()
        }
    }

    /// Lower-case hex, as `fleet issue` prints it and a deny list takes it.
    pub fn to_hex(&self) -> String {
        if self.0.is_empty() {
            return "00".into();
        }
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl std::fmt::Display for Serial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Why a certificate names no usable device.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// Not an X.509 certificate.
    #[error("unreadable certificate: {0}")]
    Parse(String),
    /// No subject common name, or more than one.
    #[error("the certificate's subject must have exactly one common name (it has {0})")]
    CommonNames(usize),
    /// The common name is not a string.
    #[error("the certificate's common name is not a string")]
    NotAString,
    /// The common name is not a valid device id.
    #[error("the certificate's common name is not a valid device id: {0}")]
    DeviceId(#[from] DeviceIdError),
}

/// Read a DER certificate's device id and serial.
pub fn parse_device_cert(der: &[u8]) -> Result<DeviceCert, CertError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| CertError::Parse(e.to_string()))?;
    let names: Vec<_> = cert.subject().iter_common_name().collect();
    let [name] = names.as_slice() else { return Err(CertError::CommonNames(names.len())) };
    let device_id = name.as_str().map_err(|_| CertError::NotAString)?.to_string();
    check_device_id(&device_id)?;
    Ok(DeviceCert { device_id, serial: Serial::from_bytes(cert.raw_serial()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_compare_equal_however_an_operator_writes_them() {
        let der = Serial::from_bytes(&[0x00, 0x8a, 0x01]);
        assert_eq!(der.to_hex(), "8a01");
        for text in ["8a01", "8A01", "8a:01", "00:8a:01", "08a01"] {
            assert_eq!(Serial::from_hex(text), Some(der.clone()), "{text}");
        }
        for bad in ["", "xyz", "8a0g", ":"] {
            assert_eq!(Serial::from_hex(bad), None, "{bad}");
        }
        assert_eq!(Serial::from_bytes(&[0, 0]).to_hex(), "00");
    }

    fn cert_with_subject(dn: rcgen::DistinguishedName) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = dn;
        params.serial_number = Some(rcgen::SerialNumber::from(vec![0x01, 0x02]));
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn the_device_id_is_the_one_common_name_and_a_bad_one_is_refused() {
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CommonName, "device-a");
        dn.push(rcgen::DnType::OrganizationName, "fleet");
        let parsed = parse_device_cert(&cert_with_subject(dn)).unwrap();
        assert_eq!((parsed.device_id.as_str(), parsed.serial.to_hex().as_str()), ("device-a", "0102"));

        assert!(matches!(parse_device_cert(&cert_with_subject(rcgen::DistinguishedName::new())), Err(CertError::CommonNames(0))));
        let mut two = rcgen::DistinguishedName::new();
        two.push(rcgen::DnType::CommonName, "a");
        two.push(rcgen::DnType::CustomDnType(vec![2, 5, 4, 3]), "b");
        assert!(matches!(parse_device_cert(&cert_with_subject(two)), Err(CertError::CommonNames(2))));
        let mut control = rcgen::DistinguishedName::new();
        control.push(rcgen::DnType::CommonName, "a\nb");
        assert!(matches!(parse_device_cert(&cert_with_subject(control)), Err(CertError::DeviceId(_))));
        assert!(matches!(parse_device_cert(b"not a certificate"), Err(CertError::Parse(_))));
    }
}
