//! The router's training data on disk: a header, then one record per labelled item, each a
//! length-prefixed bincode blob appended as soon as the item is done. An interrupted run
//! resumes after the last complete record (a torn tail is cut off), and a file made for other
//! models is refused rather than mixed.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

/// Bumped when the record layout changes.
pub const LABELS_FORMAT: u32 = 1;
/// Largest record accepted when reading (a corrupt length must not allocate gigabytes).
const MAX_RECORD: usize = 64 << 20;

/// What the labels were computed with; a resumed run must match it exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelsHeader {
    /// Record layout version.
    pub format: u32,
    /// SLM model id.
    pub slm_id: String,
    /// LLM model id.
    pub llm_id: String,
    /// The shared tokenizer's fingerprint.
    pub tokenizer_fingerprint: String,
    /// `edge_node::routing::router_file::FEATURE_SPEC`.
    pub feature_spec: String,
    /// Width of the SLM's hidden state.
    pub hidden_size: usize,
}

/// One teacher-forced position of a reference chain of thought.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabelledPosition {
    /// The reference token at this position.
    pub reference: u32,
    /// The SLM's greedy token.
    pub slm: u32,
    /// The LLM's greedy token.
    pub llm: u32,
    /// The SLM's top next-token probability.
    pub top_prob: f32,
    /// Entropy (nats) of the SLM's next-token distribution.
    pub entropy: f32,
    /// The SLM's final hidden state, as little-endian f16 (half the bytes of f32; the router
    /// standardises features anyway).
    pub hidden_f16: Vec<u8>,
}

impl LabelledPosition {
    /// The CITER shortcut label: 1 where the SLM's token is the reference, 0 where the SLM is
    /// wrong and the LLM right, none (dropped from training) where both are wrong.
    pub fn label(&self) -> Option<f32> {
        if self.slm == self.reference {
            Some(1.0)
        } else if self.llm == self.reference {
            Some(0.0)
        } else {
            None
        }
    }

    /// The hidden state as f32.
    pub fn hidden(&self) -> Vec<f32> {
        self.hidden_f16.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
    }

    /// Store a hidden state compactly.
    pub fn encode_hidden(hidden: &[f32]) -> Vec<u8> {
        hidden.iter().flat_map(|&h| half::f16::from_f32(h).to_le_bytes()).collect()
    }
}

/// All positions of one training item.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabelledItem {
    /// Dataset id.
    pub id: String,
    /// Positions in order.
    pub positions: Vec<LabelledPosition>,
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

fn write_record<T: Serialize>(w: &mut impl Write, value: &T) -> anyhow::Result<()> {
    let bytes = bincode::serde::encode_to_vec(value, config())?;
    w.write_all(&(bytes.len() as u32).to_le_bytes())?;
    w.write_all(&bytes)?;
    Ok(())
}

/// Read one record; `Ok(None)` at a clean end or a torn tail.
fn read_record<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> anyhow::Result<Option<(T, u64)>> {
    let mut len = [0u8; 4];
    if r.read_exact(&mut len).is_err() {
        return Ok(None);
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_RECORD {
        bail!("record of {len} bytes is larger than {MAX_RECORD}: the file is damaged");
    }
    let mut buf = vec![0u8; len];
    if r.read_exact(&mut buf).is_err() {
        return Ok(None);
    }
    let (value, _) = bincode::serde::decode_from_slice(&buf, config()).context("undecodable record")?;
    Ok(Some((value, 4 + len as u64)))
}

/// Everything in a labels file.
pub struct LabelsFile {
    /// What the labels were computed with.
    pub header: LabelsHeader,
    /// Complete items, in file order.
    pub items: Vec<LabelledItem>,
    /// Bytes up to the end of the last complete record.
    valid_len: u64,
}

impl LabelsFile {
    /// Read a labels file, ignoring a torn last record.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let file = File::open(path).with_context(|| format!("labels file {}", path.display()))?;
        let mut r = std::io::BufReader::new(file);
        let Some((header, mut valid_len)) = read_record::<LabelsHeader>(&mut r).with_context(|| format!("labels file {}", path.display()))? else {
            bail!("labels file {} has no header (empty or not a labels file)", path.display());
        };
        if header.format != LABELS_FORMAT {
            bail!("labels file {} has format {} (this build reads {LABELS_FORMAT}); label again into a new file", path.display(), header.format);
        }
        let mut items = Vec::new();
        loop {
            match read_record::<LabelledItem>(&mut r) {
                Ok(Some((item, n))) => {
                    items.push(item);
                    valid_len += n;
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("labels file {}: stopping at a damaged record after {} items: {e:#}", path.display(), items.len());
                    break;
                }
            }
        }
        Ok(Self { header, items, valid_len })
    }
}

/// Appends items to a labels file.
pub struct LabelsWriter {
    out: BufWriter<File>,
    path: PathBuf,
}

impl LabelsWriter {
    /// Open `path` for appending, creating it with `header` or checking that an existing file
    /// was made with the same settings. Returns the ids already labelled.
    pub fn open(path: &Path, header: &LabelsHeader) -> anyhow::Result<(Self, Vec<String>)> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let mut done = Vec::new();
        let file = if path.exists() && std::fs::metadata(path).map(|m| m.len() > 0).unwrap_or(false) {
            let existing = LabelsFile::read(path)?;
            if existing.header != *header {
                bail!(
                    "labels file {} was made with other settings ({:?}); pass another --out or delete it",
                    path.display(),
                    existing.header
                );
            }
            done = existing.items.iter().map(|i| i.id.clone()).collect();
            let mut f = OpenOptions::new().write(true).open(path)?;
            f.set_len(existing.valid_len)?;
            f.seek(SeekFrom::End(0))?;
            f
        } else {
            let mut f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
            write_record(&mut f, header)?;
            f.sync_data()?;
            f
        };
        Ok((Self { out: BufWriter::new(file), path: path.to_path_buf() }, done))
    }

    /// Append one item and flush it to the OS, so a kill loses at most the item in progress.
    pub fn append(&mut self, item: &LabelledItem) -> anyhow::Result<()> {
        write_record(&mut self.out, item).with_context(|| format!("writing {}", self.path.display()))?;
        self.out.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> LabelsHeader {
        LabelsHeader {
            format: LABELS_FORMAT,
            slm_id: "s".into(),
            llm_id: "l".into(),
            tokenizer_fingerprint: "f".into(),
            feature_spec: "x".into(),
            hidden_size: 2,
        }
    }

    fn item(id: &str) -> LabelledItem {
        let p = LabelledPosition { reference: 5, slm: 5, llm: 7, top_prob: 0.5, entropy: 1.0, hidden_f16: LabelledPosition::encode_hidden(&[1.5, -2.0]) };
        LabelledItem { id: id.into(), positions: vec![p] }
    }

    #[test]
    fn append_resume_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.bin");
        let (mut w, done) = LabelsWriter::open(&path, &header()).unwrap();
        assert!(done.is_empty());
        w.append(&item("a")).unwrap();
        w.append(&item("b")).unwrap();
        drop(w);
        // A torn record at the end (killed mid-write).
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[200, 0, 0, 0, 1, 2, 3]).unwrap();
        drop(f);
        let (mut w, done) = LabelsWriter::open(&path, &header()).unwrap();
        assert_eq!(done, ["a", "b"]);
        w.append(&item("c")).unwrap();
        drop(w);
        let file = LabelsFile::read(&path).unwrap();
        assert_eq!(file.items.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(file.items[0].positions[0].hidden(), vec![1.5, -2.0]);
        assert_eq!(file.items[0].positions[0].label(), Some(1.0));
    }

    #[test]
    fn other_settings_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.bin");
        drop(LabelsWriter::open(&path, &header()).unwrap());
        let mut other = header();
        other.llm_id = "other".into();
        let e = LabelsWriter::open(&path, &other).err().unwrap();
        assert!(e.to_string().contains("other settings"), "{e}");
        std::fs::write(&path, b"garbage!").unwrap();
        assert!(LabelsFile::read(&path).is_err());
    }

    #[test]
    fn labels_follow_the_citer_shortcut() {
        let mut p = item("a").positions.remove(0);
        assert_eq!(p.label(), Some(1.0));
        p.slm = 6;
        assert_eq!(p.label(), None, "both wrong: dropped");
        p.llm = 5;
        assert_eq!(p.label(), Some(0.0));
    }
}
