//! Reading a file's lines from last to first, in blocks, so that the end of
//! a large transcript is read without reading the rest.
//!
//! Linear in what it reads: each block is searched for a newline once, and
//! a line that spans blocks is read again once, whole, when its start is
//! found (joining the blocks on every read made one long line cost its
//! length squared, and holding them cost it twice).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

pub(super) const BLOCK: usize = 64 * 1024;

/// The most a backward scan reads before giving up: a reply is never this long.
pub(crate) const MAX_SCAN: u64 = 16 * 1024 * 1024;

/// Opens the transcript. Its path comes from the client (Claude Code keeps
/// transcripts under `~/.claude/projects/`), so a link is followed; but the
/// open never blocks and only a regular file is read, so a FIFO or device
/// planted on the way is refused (as `InvalidData`, with the reason).
pub(super) fn open(path: &Path) -> std::io::Result<File> {
    ralph_fs::safe_fs::open_read_following(path).map_err(|e| match e {
        ralph_fs::safe_fs::FsError::Io { source, .. } => source,
        other => std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
    })
}

/// Yields the lines of `file[floor..end]` from last to first.
pub(crate) struct BackwardLines<'a> {
    file: &'a mut File,
    floor: u64,
    /// Where `head` begins in the file.
    pos: u64,
    /// The front of the region read so far, not yet split into lines.
    head: Vec<u8>,
    /// Bytes of the line being assembled that are past `head` (no newline
    /// in them): not kept, but read again once, when the line's start is
    /// found, so a long line is held once and never as pieces plus a copy.
    tail_len: usize,
    /// Lines longer than this come back empty (their bytes are not kept).
    max_line: usize,
    /// Where the line last returned begins.
    line_start: u64,
}

impl<'a> BackwardLines<'a> {
    pub(crate) fn new(file: &'a mut File, floor: u64, end: u64) -> Self {
        Self {
            file,
            floor,
            pos: end,
            head: Vec::new(),
            tail_len: 0,
            max_line: usize::MAX,
            line_start: end,
        }
    }

    /// Lines longer than `max` bytes are returned empty, so that memory
    /// stays bounded whatever the file holds (for a reader that needs only
    /// short lines).
    pub(crate) fn with_max_line(mut self, max: usize) -> Self {
        self.max_line = max;
        self
    }

    /// The offset where the line last returned by [`Self::next_line`] begins.
    pub(crate) fn line_start(&self) -> u64 {
        self.line_start
    }

    pub(crate) fn next_line(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        loop {
            if self.tail_len == 0 {
                // Nothing assembled yet: drop a trailing newline (and empty lines).
                while self.head.last() == Some(&b'\n') {
                    self.head.pop();
                }
            }
            if let Some(i) = self.head.iter().rposition(|&b| b == b'\n') {
                let front = self.head.split_off(i + 1);
                self.line_start = self.pos + (i as u64) + 1;
                return self.take_line(front).map(Some);
            }
            if self.pos <= self.floor {
                if self.head.is_empty() && self.tail_len == 0 {
                    return Ok(None);
                }
                let front = std::mem::take(&mut self.head);
                self.line_start = self.pos;
                return self.take_line(front).map(Some);
            }
            // No newline in `head`: all of it belongs to the line.
            self.tail_len = self.tail_len.saturating_add(self.head.len());
            let size = usize::try_from(self.pos - self.floor).map_or(BLOCK, |n| n.min(BLOCK));
            self.pos -= size as u64;
            let mut block = vec![0; size];
            self.file.seek(SeekFrom::Start(self.pos))?;
            self.file.read_exact(&mut block)?;
            self.head = block;
        }
    }

    /// The line whose first bytes are `front`, with the rest of it read
    /// again from the file.
    fn take_line(&mut self, mut front: Vec<u8>) -> std::io::Result<Vec<u8>> {
        let rest = std::mem::take(&mut self.tail_len);
        if rest.saturating_add(front.len()) > self.max_line {
            front.clear();
        } else if rest > 0 {
            let at = self.line_start + front.len() as u64;
            let kept = front.len();
            front.resize(kept.saturating_add(rest), 0);
            self.file.seek(SeekFrom::Start(at))?;
            self.file.read_exact(&mut front[kept..])?;
        }
        Ok(front)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn lines_of(bytes: &[u8], floor: u64, max: usize) -> Vec<(u64, Vec<u8>)> {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        let len = bytes.len() as u64;
        let mut lines = BackwardLines::new(&mut f, floor, len).with_max_line(max);
        let mut out = Vec::new();
        while let Some(line) = lines.next_line().unwrap() {
            out.push((lines.line_start(), line));
        }
        out
    }

    #[test]
    fn yields_lines_last_first_with_their_offsets() {
        let long = "x".repeat(BLOCK * 3 + 5);
        let text = format!("a\n\n{long}\nbc\n");
        let got = lines_of(text.as_bytes(), 0, usize::MAX);
        let want: Vec<(u64, Vec<u8>)> = vec![
            ((text.len() - 3) as u64, b"bc".to_vec()),
            (3, long.clone().into_bytes()),
            (0, b"a".to_vec()),
        ];
        assert_eq!(got, want);
        // From a floor inside a line: its part above the floor.
        let got = lines_of(text.as_bytes(), 4, usize::MAX);
        assert_eq!(got[1], (4, long.as_bytes()[1..].to_vec()));
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn a_line_over_the_cap_comes_back_empty_in_its_place() {
        let long = "y".repeat(BLOCK * 2);
        let text = format!("a\n{long}\nb\n");
        let got = lines_of(text.as_bytes(), 0, 1000);
        assert_eq!(
            got,
            vec![
                ((text.len() - 2) as u64, b"b".to_vec()),
                (2, Vec::new()),
                (0, b"a".to_vec())
            ]
        );
    }
}
