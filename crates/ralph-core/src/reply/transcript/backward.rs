//! Reading a file's lines from last to first, in blocks, so that the end of
//! a large transcript is read without reading the rest.

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
    crate::fs::safe_fs::open_read_following(path).map_err(|e| match e {
        crate::fs::safe_fs::FsError::Io { source, .. } => source,
        other => std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
    })
}

/// Yields the lines of `file[floor..end]` from last to first.
pub(crate) struct BackwardLines<'a> {
    file: &'a mut File,
    floor: u64,
    pos: u64,
    /// Bytes read but not yet returned: the start of the file region still
    /// being split, whose first line may be incomplete.
    pending: Vec<u8>,
}

impl<'a> BackwardLines<'a> {
    pub(crate) fn new(file: &'a mut File, floor: u64, end: u64) -> Self {
        Self {
            file,
            floor,
            pos: end,
            pending: Vec::new(),
        }
    }

    pub(crate) fn next_line(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        loop {
            // Drop a trailing newline, then look for the previous one.
            while self.pending.last() == Some(&b'\n') {
                self.pending.pop();
            }
            if let Some(i) = self.pending.iter().rposition(|&b| b == b'\n') {
                let line = self.pending.split_off(i + 1);
                return Ok(Some(line));
            }
            if self.pos <= self.floor {
                if self.pending.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(std::mem::take(&mut self.pending)));
            }
            let size = usize::try_from(self.pos - self.floor).map_or(BLOCK, |n| n.min(BLOCK));
            self.pos -= size as u64;
            let mut block = vec![0; size];
            self.file.seek(SeekFrom::Start(self.pos))?;
            self.file.read_exact(&mut block)?;
            block.extend_from_slice(&self.pending);
            self.pending = block;
        }
    }
}
