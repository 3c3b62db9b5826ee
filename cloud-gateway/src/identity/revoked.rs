//! The deny list: device ids and certificate serials the gateway refuses, read from a file the
//! operator edits (by hand or with `cloud-gateway ca revoke`) and reloaded while the gateway
//! runs.
//!
//! A certificate stays valid until it expires; revoking it must not wait for that, nor for a
//! restart that would cut every other device off. A plain file of lines (rather than a CRL
//! signed by the CA) keeps revocation a one-line edit any config-management tool or Kubernetes
//! Secret can ship, and needs no CA key on the gateway. Denying a device id refuses all of its
//! certificates (the device is gone); denying a serial refuses one certificate (a leaked key,
//! replaced by a new certificate for the same id).
//!
//! Format, one entry per line: `serial:HEX` (colons and case as `openssl x509 -serial` or
//! `ca issue` prints it) or a device id; blank lines and lines starting with `#` are skipped.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, RwLock};

use common::device_id::check_device_id;

use super::cert::Serial;

/// Prefix of a serial-number line.
pub const SERIAL_PREFIX: &str = "serial:";

/// The parsed deny list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DenyList {
    ids: HashSet<String>,
    serials: HashSet<Serial>,
}

/// Why a deny list could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DenyListError {
    /// The file could not be read.
    #[error("reading the deny list {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line is neither a serial nor a valid device id.
    #[error("deny list line {line}: {why}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
}

impl DenyList {
    /// Parse the file format (see the module docs). One bad line refuses the whole list, so a
    /// typo never silently un-revokes a device.
    pub fn parse(text: &str) -> Result<Self, DenyListError> {
        let mut list = Self::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: String| DenyListError::Line { line: i + 1, why };
            if let Some(hex) = line.strip_prefix(SERIAL_PREFIX) {
                let serial = Serial::from_hex(hex.trim()).ok_or_else(|| bad(format!("`{}` is not a hex serial number", hex.trim())))?;
                list.serials.insert(serial);
            } else {
                check_device_id(line).map_err(|e| bad(e.to_string()))?;
                list.ids.insert(line.to_string());
            }
        }
        Ok(list)
    }

    /// Read and parse `path`.
    pub fn load(path: &Path) -> Result<Self, DenyListError> {
        let text = std::fs::read_to_string(path).map_err(|source| DenyListError::Io { path: path.display().to_string(), source })?;
        Self::parse(&text)
    }

    /// Whether a device with this id (and certificate serial, if it has one) is refused.
    pub fn denies(&self, device_id: &str, serial: Option<&Serial>) -> bool {
        self.ids.contains(device_id) || serial.is_some_and(|s| self.serials.contains(s))
    }

    /// Entries (ids and serials).
    pub fn len(&self) -> usize {
        self.ids.len() + self.serials.len()
    }

    /// Whether nothing is denied.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The deny list in force, shared by the TLS verifier (new connections), the handshake (dev
/// mode) and the reloader (which swaps it and closes what it now denies).
#[derive(Debug, Default)]
pub struct DenyCell(RwLock<Arc<DenyList>>);

impl DenyCell {
    /// A cell holding `list`.
    pub fn new(list: DenyList) -> Self {
        Self(RwLock::new(Arc::new(list)))
    }

    /// The list in force.
    pub fn get(&self) -> Arc<DenyList> {
        match self.0.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Put `list` in force.
    pub fn set(&self, list: DenyList) {
        let list = Arc::new(list);
        match self.0.write() {
            Ok(mut g) => *g = list,
            Err(poisoned) => *poisoned.into_inner() = list,
        }
    }
}

/// Append `entry` (a device id or `serial:HEX`) to the deny list at `path`, creating it; the
/// gateway picks it up at its next poll. Returns `false` if it was already there.
pub fn append(path: &Path, entry: &str, comment: &str) -> anyhow::Result<bool> {
    use anyhow::Context;
    use std::io::Write;
    let entry = entry.trim();
    // One line, validated with the same parser the gateway uses.
    anyhow::ensure!(!entry.chars().any(char::is_control), "a deny list entry is one line without control characters");
    let added = DenyList::parse(entry).map_err(|e| anyhow::anyhow!("`{entry}`: {e}"))?;
    let existing = match std::fs::read_to_string(path) {
        Ok(text) => DenyList::parse(&text).with_context(|| format!("the deny list {} is already invalid", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => DenyList::default(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    if added.ids.is_subset(&existing.ids) && added.serials.is_subset(&existing.serials) {
        return Ok(false);
    }
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).with_context(|| format!("opening {}", path.display()))?;
    let comment = comment.replace(['\n', '\r'], " ");
    writeln!(file, "# {comment}\n{entry}").with_context(|| format!("writing {}", path.display()))?;
    file.sync_all().with_context(|| format!("syncing {}", path.display()))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deny_list_names_devices_and_serials() {
        let list = DenyList::parse("# lost on 2026-11-02\ndevice-7\n\n  serial:0A:1B  \nserial:00ff\n").unwrap();
        assert_eq!(list.len(), 3);
        assert!(list.denies("device-7", None));
        assert!(list.denies("device-7", Serial::from_hex("99").as_ref()), "an id denies every certificate of it");
        assert!(list.denies("device-8", Serial::from_hex("0a1b").as_ref()), "a serial denies one certificate");
        assert!(list.denies("device-8", Serial::from_hex("ff").as_ref()));
        assert!(!list.denies("device-8", Serial::from_hex("0a1c").as_ref()));
        assert!(!list.denies("device-8", None));
    }

    #[test]
    fn one_bad_line_refuses_the_whole_list_with_its_number() {
        let err = DenyList::parse("device-1\nserial:xyz\n").unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("xyz"), "{err}");
        let err = DenyList::parse("device-1\n\u{1b}[31mred\n").unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("control character"), "{err}");
    }

    #[test]
    fn append_creates_the_file_and_skips_what_is_already_denied() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("revoked.txt");
        assert!(append(&path, "device-1", "lost").unwrap());
        assert!(append(&path, "serial:0a1b", "key leaked").unwrap());
        assert!(!append(&path, "device-1", "again").unwrap());
        assert!(!append(&path, "serial:0A:1B", "again").unwrap());
        assert!(append(&path, "bad\nid", "x").is_err());
        let list = DenyList::load(&path).unwrap();
        assert_eq!(list.len(), 2);
        assert!(list.denies("device-1", None));
    }

    #[test]
    fn the_cell_swaps_lists() {
        let cell = DenyCell::new(DenyList::default());
        assert!(!cell.get().denies("d", None));
        cell.set(DenyList::parse("d").unwrap());
        assert!(cell.get().denies("d", None));
    }
}
