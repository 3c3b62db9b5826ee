//! Streaming detokenization: turn a growing list of ids into text pieces as they become stable.
//!
//! A token may end in the middle of a UTF-8 character, and byte-level BPE decodes differently
//! with and without context, so each new piece is the difference between decoding a short
//! window with and without the newest tokens (the same scheme as TGI's streaming decoder).

use crate::tokenizer::{Tokenizer, TokenizerError};

/// Incremental decoder over one generation.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
}

impl StreamDecoder {
    /// A decoder with no tokens yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add one token; return the text it completes, if any.
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<Option<String>, TokenizerError> {
        self.ids.push(id);
        let prefix = tok.decode(&self.ids[self.prefix_offset..self.read_offset])?;
        let full = tok.decode(&self.ids[self.prefix_offset..])?;
        if full.len() > prefix.len() && !full.ends_with('\u{FFFD}') && full.is_char_boundary(prefix.len()) {
            let piece = full[prefix.len()..].to_string();
            self.prefix_offset = self.read_offset;
            self.read_offset = self.ids.len();
            Ok(Some(piece))
        } else {
            Ok(None)
        }
    }

    /// Text still held back (an incomplete character at the end), for when generation stops.
    pub fn flush(&mut self, tok: &Tokenizer) -> Result<Option<String>, TokenizerError> {
        let prefix = tok.decode(&self.ids[self.prefix_offset..self.read_offset])?;
        let full = tok.decode(&self.ids[self.prefix_offset..])?;
        self.prefix_offset = self.ids.len();
        self.read_offset = self.ids.len();
        if full.len() > prefix.len() && full.is_char_boundary(prefix.len()) {
            Ok(Some(full[prefix.len()..].to_string()))
        } else {
            Ok(None)
        }
    }
}
