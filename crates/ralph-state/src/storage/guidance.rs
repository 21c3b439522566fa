//! A loop's mailbox: the guidance `ralph say` queues for its next iteration,
//! and the question its agent asked the user (`<question>…</question>`).
//!
//! It lives beside the arming records, in `$XDG_STATE_HOME/ralph/guidance/<key>/`
//! (`key` as the record's: the project's canonical path and the loop's name),
//! outside every project, so a `ralph run --sandbox` agent can neither read,
//! delete nor forge it. In a session the agent runs as the user and can reach
//! it like anything of the user's (docs/security.md).
//!
//! Layout (folders 0700, files 0600):
//!   pending/<stamp>-<random>.json      queued, not yet delivered
//!   delivered/<iteration>-<same>.json  delivered, with the iteration that carried it
//!   gate/<same>.json                   `--gate` guidance delivered since the last promise
//!   question.json                      the agent's open question
//!   raised/<stamp>-<random>.json       a bound the user raised, not yet told the session
//!
//! Each entry is created with `create_new` under a name nobody else picks (the clock
//! in nanoseconds and 64 random bits), written whole under a dot-name and linked into
//! place, so two `ralph say` at once both land, and a reader never sees half an entry.
//! Delivery is a rename out of `pending/`: of two deliveries racing, one gets
//! the entry and the other nothing, so each is delivered once.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::storage::registry::{self, Registry, RegistryError};
use crate::time::Timestamp;

/// The most text one guidance carries (a sentence or a paragraph, not a file).
pub const MAX_TEXT_BYTES: usize = 4096;

/// The most pending entries one delivery takes; the rest wait for the next.
const MAX_PER_DELIVERY: usize = 20;

/// One guidance, as `ralph say` queued it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Guidance {
    pub text: String,
    /// `--gate`: the first promise after its delivery is refused once.
    #[serde(default)]
    pub gate: bool,
    /// When it was queued (RFC 3339).
    pub at: String,
    /// Who queued it: `ralph say`, `/ralph-say`, `ralph watch`.
    pub by: String,
    /// The question it answers, when one was open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<String>,
}

/// A delivered guidance, with the iteration whose prompt carried it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub iteration: u64,
    pub guidance: Guidance,
}

/// The question the agent asked, waiting for the user's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    pub text: String,
    pub at: String,
    /// The iteration that asked.
    pub iteration: u64,
}

/// One loop's mailbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mailbox {
    registry: Registry,
    dir: PathBuf,
}

impl Mailbox {
    /// The mailbox of the loop `name` of the project at `root` (canonical).
    pub fn of(registry: &Registry, root: &Path, name: &str) -> Self {
        Self {
            registry: registry.clone(),
            dir: registry.mailbox_dir(root, name),
        }
    }

    /// The mailbox of a loop of `project`, when its path resolves.
    pub fn of_project(
        registry: &Registry,
        project: &crate::storage::store::Project,
        name: &str,
    ) -> Option<Self> {
        let root = registry::canonical_root(project).ok()?;
        Some(Self::of(registry, &root, name))
    }

    fn sub(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Queues `guidance` for the next iteration; returns the entry's name.
    pub fn post(&self, guidance: &Guidance) -> Result<String, RegistryError> {
        let pending = self.sub("pending");
        self.registry.ensure_private(&pending)?;
        let name = format!(
            "{:020}-{}.json",
            nanos_now(),
            registry::new_nonce()?.get(..16).unwrap_or("0")
        );
        let text = serde_json::to_string(guidance).unwrap_or_default();
        write_new(&pending, &name, &text)?;
        Ok(name)
    }

    /// The queued guidance, oldest first.
    pub fn pending(&self) -> Vec<Guidance> {
        entries(&self.sub("pending"))
            .into_iter()
            .filter_map(|name| read_entry(&self.sub("pending").join(name)))
            .collect()
    }

    /// Takes the queued guidance for `iteration`: each entry moved into
    /// `delivered/` (and `--gate`'s into `gate/`), so it is delivered once.
    pub fn deliver(&self, iteration: u64) -> Vec<Guidance> {
        let pending = self.sub("pending");
        let names = entries(&pending);
        if names.is_empty() {
            return Vec::new();
        }
        let (delivered, gate) = (self.sub("delivered"), self.sub("gate"));
        if self.registry.ensure_private(&delivered).is_err()
            || self.registry.ensure_private(&gate).is_err()
        {
            return Vec::new();
        }
        let mut taken = Vec::new();
        for name in names.into_iter().take(MAX_PER_DELIVERY) {
            let to = delivered.join(format!("{iteration:020}-{name}"));
            // Another delivery took it first: it is that one's.
            if fs::rename(pending.join(&name), &to).is_err() {
                continue;
            }
            let Some(guidance) = read_entry(&to) else {
                continue;
            };
            if guidance.gate {
                let _ = fs::hard_link(&to, gate.join(&name));
            }
            taken.push(guidance);
        }
        taken
    }

    /// Every delivered guidance, oldest first, with the iteration that carried it.
    pub fn delivered(&self) -> Vec<Delivered> {
        let dir = self.sub("delivered");
        entries(&dir)
            .into_iter()
            .filter_map(|name| {
                let iteration = name.split('-').next()?.parse().ok()?;
                let guidance = read_entry(&dir.join(&name))?;
                Some(Delivered {
                    iteration,
                    guidance,
                })
            })
            .collect()
    }

    /// The `--gate` guidance delivered since the last promise, then the
    /// `--gate` guidance still queued (a promise given before the agent saw
    /// it is refused too: the continuation carries it).
    pub fn open_gate(&self) -> Vec<String> {
        let dir = self.sub("gate");
        let delivered = entries(&dir)
            .into_iter()
            .filter_map(|name| read_entry(&dir.join(name)));
        delivered
            .chain(self.pending().into_iter().filter(|g| g.gate))
            .map(|g| g.text)
            .collect()
    }

    /// A promise met the gate guidance: it is spent.
    pub fn close_gate(&self) {
        let dir = self.sub("gate");
        for name in entries(&dir) {
            let _ = fs::remove_file(dir.join(name));
        }
    }

    /// Keeps `raised` (each bound the user raised, old and new: `iterations 3 → 23`)
    /// for the session's next continuation (`take_raised`).
    pub fn post_raised(&self, raised: &[String]) -> Result<(), RegistryError> {
        let dir = self.sub("raised");
        self.registry.ensure_private(&dir)?;
        let name = format!(
            "{:020}-{}.json",
            nanos_now(),
            registry::new_nonce()?.get(..16).unwrap_or("0")
        );
        write_new(
            &dir,
            &name,
            &serde_json::to_string(raised).unwrap_or_default(),
        )
    }

    /// Takes the raised bounds not yet told, oldest first: each entry is
    /// renamed away before it is read, so of two takers racing one gets it,
    /// and it is told once.
    pub fn take_raised(&self) -> Vec<String> {
        let dir = self.sub("raised");
        let mut taken = Vec::new();
        for name in entries(&dir) {
            let claimed = dir.join(format!(".taken-{name}"));
            if fs::rename(dir.join(&name), &claimed).is_err() {
                continue;
            }
            let text = registry::read_private(&claimed).ok().flatten();
            let _ = fs::remove_file(&claimed);
            let words: Vec<String> = text
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default();
            taken.extend(words);
        }
        taken
    }

    /// Records the agent's question (replacing an older one).
    pub fn ask(&self, question: &Question) -> Result<(), RegistryError> {
        self.registry.ensure_private(&self.dir)?;
        let _ = fs::remove_file(self.sub("question.json"));
        let text = serde_json::to_string(question).unwrap_or_default();
        write_new(&self.dir, "question.json", &text)
    }

    /// The open question, if any.
    pub fn question(&self) -> Option<Question> {
        let text = registry::read_private(&self.sub("question.json")).ok()??;
        serde_json::from_str(&text).ok()
    }

    /// Takes the open question away (it was answered); whether there was one.
    pub fn answer(&self) -> Option<Question> {
        let question = self.question()?;
        fs::remove_file(self.sub("question.json")).ok()?;
        Some(question)
    }
}

/// The entry names of a folder, sorted (oldest first); dot-names (entries
/// being written) skipped.
fn entries(dir: &Path) -> Vec<String> {
    let Ok(read) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = read
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.') && n.ends_with(".json"))
        .collect();
    names.sort();
    names
}

fn read_entry(path: &Path) -> Option<Guidance> {
    let text = registry::read_private(path).ok()??;
    serde_json::from_str(&text).ok()
}

/// Writes `text` whole into `dir/name`, created exclusively: written under a
/// dot-name first, then linked into place (a link never replaces a file).
fn write_new(dir: &Path, name: &str, text: &str) -> Result<(), RegistryError> {
    let temp = dir.join(format!(".{name}.{}", std::process::id()));
    let io = |action: &'static str, path: &Path| {
        let path = path.to_owned();
        move |source: io::Error| RegistryError::Io {
            action,
            path,
            source,
        }
    };
    let mut file = registry::private_new_file()
        .open(&temp)
        .map_err(io("create", &temp))?;
    let written = file
        .write_all(text.as_bytes())
        .and_then(|()| file.sync_all());
    drop(file);
    let placed = written.and_then(|()| fs::hard_link(&temp, dir.join(name)));
    let _ = fs::remove_file(&temp);
    placed.map_err(io("write", &dir.join(name)))
}

fn nanos_now() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// A guidance queued now by `by`.
pub fn guidance(text: &str, gate: bool, by: &str) -> Guidance {
    Guidance {
        text: text.to_owned(),
        gate,
        at: Timestamp::now().to_string(),
        by: by.to_owned(),
        answers: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mailbox() -> (tempfile::TempDir, Mailbox) {
        let dir = tempfile::tempdir().unwrap();
        let registry = registry::locate(Some(&dir.path().join("state")), None).unwrap();
        let mailbox = Mailbox::of(&registry, Path::new("/p"), "l");
        (dir, mailbox)
    }

    #[test]
    fn guidance_is_delivered_once_in_order_with_its_iteration() {
        let (_d, m) = mailbox();
        m.post(&guidance("first", false, "ralph say")).unwrap();
        m.post(&guidance("second", true, "ralph say")).unwrap();
        assert_eq!(m.pending().len(), 2);
        assert_eq!(m.open_gate(), ["second"], "queued gate guidance holds too");
        let taken = m.deliver(3);
        let texts: Vec<&str> = taken.iter().map(|g| g.text.as_str()).collect();
        assert_eq!(texts, ["first", "second"]);
        assert!(m.deliver(4).is_empty(), "delivered once");
        let delivered = m.delivered();
        assert_eq!(delivered.len(), 2);
        assert!(delivered.iter().all(|d| d.iteration == 3));
        assert_eq!(m.open_gate(), ["second"]);
        m.close_gate();
        assert!(m.open_gate().is_empty());
    }

    #[test]
    fn raised_bounds_are_taken_once_in_order() {
        let (_d, m) = mailbox();
        assert!(m.take_raised().is_empty());
        m.post_raised(&["iterations 3 → 23".into()]).unwrap();
        m.post_raised(&["iterations 23 → 25".into(), "dollars $5.00 → $6.00".into()])
            .unwrap();
        assert_eq!(
            m.take_raised(),
            [
                "iterations 3 → 23",
                "iterations 23 → 25",
                "dollars $5.00 → $6.00"
            ]
        );
        assert!(m.take_raised().is_empty(), "told once");
    }

    #[test]
    fn two_posts_at_once_both_land() {
        let (_d, m) = mailbox();
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let m = m.clone();
                std::thread::spawn(move || m.post(&guidance(&format!("g{i}"), false, "t")))
            })
            .collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
        assert_eq!(m.deliver(1).len(), 8);
    }

    #[test]
    fn a_question_is_kept_until_answered() {
        let (_d, m) = mailbox();
        assert!(m.question().is_none());
        let q = Question {
            text: "Which database?".into(),
            at: "t".into(),
            iteration: 2,
        };
        m.ask(&q).unwrap();
        assert_eq!(m.question(), Some(q.clone()));
        assert_eq!(m.answer(), Some(q));
        assert!(m.question().is_none());
    }
}
