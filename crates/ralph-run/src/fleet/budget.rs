//! One dollar budget for a whole fleet run (`ralph fleet-budget`): the jobs
//! of a GitHub matrix share a ledger folder, one file per job and fact
//! (`<story>.reserved`: the share it took when it started; `<story>.spent`:
//! what its loop spent, once it ended). A job that starts takes what is left
//! (the total less each other job's share, or what it spent when that is
//! more) divided by the jobs not started yet, itself included: however many
//! start at the same moment without seeing each other, their shares add up
//! to no more than what was left. A job that finds nothing left does not start. The
//! final job sums what all spent. The rules are pure; reading and writing
//! the ledger go through `safe_fs`.

use std::path::Path;

use ralph_fs::safe_fs;
use ralph_state::fields::stories::valid_id;
use ralph_state::money::Money;
use ralph_state::storage::fleet::{RECORDS, read_record};

use crate::fleet::error::FleetError;

/// The ledger's suffixes: a job's share when it started, what it spent.
const RESERVED: &str = "reserved";
const SPENT: &str = "spent";

/// What the ledger says of one job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entry {
    pub story: String,
    pub reserved: Option<Money>,
    pub spent: Option<Money>,
}

impl Entry {
    /// What the job counts against the total: the share it took, or what it
    /// spent when that is more. Never less than the share: what a job says it
    /// spent comes from files its agent could have written, so only an amount
    /// above the share is believed (a job that spent less gives nothing back).
    pub(crate) fn committed(&self) -> Money {
        self.spent
            .unwrap_or_default()
            .max(self.reserved.unwrap_or_default())
    }
}

/// A starting job's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Share {
    /// Its `--max-cost`.
    Granted(Money),
    /// Nothing left: the jobs spent or took `committed` of the total.
    Exhausted { committed: Money },
}

/// The share of job `story` among `jobs` jobs, from `ledger` (the other
/// jobs' entries; its own is ignored, so a retried job takes its share anew).
pub fn share(total: Money, jobs: usize, story: &str, ledger: &[Entry]) -> Share {
    let others: Vec<&Entry> = ledger.iter().filter(|e| e.story != story).collect();
    let committed = others
        .iter()
        .fold(Money::default(), |sum, e| sum.plus(e.committed()));
    let started = others.iter().filter(|e| e.reserved.is_some()).count();
    let waiting = u64::try_from(jobs.saturating_sub(started).max(1)).unwrap_or(u64::MAX);
    let left = total.minus(committed);
    let granted = Money(left.0 / waiting);
    if granted.0 == 0 {
        Share::Exhausted { committed }
    } else {
        Share::Granted(granted)
    }
}

/// What the fleet spent: the sum of what each job said it spent, and the
/// shares of jobs that never said (ended before they could; counted apart).
pub fn sum(ledger: &[Entry]) -> (Money, Money) {
    ledger.iter().fold(
        (Money::default(), Money::default()),
        |(spent, unsaid), e| match e.spent {
            Some(s) => (spent.plus(s), unsaid),
            None => (spent, unsaid.plus(e.reserved.unwrap_or_default())),
        },
    )
}

/// Every entry of the ledger folder (none when it does not exist). Files
/// other than `<id>.reserved` and `<id>.spent` are left alone; an amount
/// that cannot be read is an error (a job's bound must not silently vanish).
pub fn read(dir: &Path) -> Result<Vec<Entry>, FleetError> {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut entries: Vec<Entry> = Vec::new();
    let mut names: Vec<String> = listing
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        let Some((story, kind)) = name.rsplit_once('.') else {
            continue;
        };
        if !valid_id(story) || !matches!(kind, RESERVED | SPENT) {
            continue;
        }
        let text = safe_fs::read_text(&dir.join(&name), 64)?;
        let amount = Money::parse(&text).map_err(|e| FleetError::Ledger {
            file: name.clone(),
            why: e.to_string(),
        })?;
        let at = match entries.iter().position(|e| e.story == story) {
            Some(at) => at,
            None => {
                entries.push(Entry {
                    story: story.to_owned(),
                    ..Entry::default()
                });
                entries.len() - 1
            }
        };
        if kind == RESERVED {
            entries[at].reserved = Some(amount);
        } else {
            entries[at].spent = Some(amount);
        }
    }
    Ok(entries)
}

/// Writes one fact of job `story` into the ledger folder (which exists).
pub fn write(dir: &Path, story: &str, spent: bool, amount: Money) -> Result<(), FleetError> {
    if !valid_id(story) {
        return Err(FleetError::NoSuchStory(story.to_owned()));
    }
    let kind = if spent { SPENT } else { RESERVED };
    let path = dir.join(format!("{story}.{kind}"));
    safe_fs::replace(&path, format!("{}\n", amount.decimal()).as_bytes())?;
    Ok(())
}

/// `ralph fleet-budget share`: job `story`'s share, reserved in the ledger
/// before its loop starts; refused when nothing is left.
pub fn reserve(dir: &Path, total: Money, jobs: usize, story: &str) -> Result<Money, FleetError> {
    match share(total, jobs, story, &read(dir)?) {
        Share::Granted(granted) => {
            write(dir, story, false, granted)?;
            Ok(granted)
        }
        Share::Exhausted { committed } => Err(FleetError::FleetBudgetSpent {
            total: total.dollars(),
            committed: committed.dollars(),
        }),
    }
}

/// `ralph fleet-budget spent`: what job `story`'s loop spent, as its record
/// in the project says (nothing when it has none), written to the ledger.
pub fn record_spent(
    project: &ralph_state::storage::store::Project,
    dir: &Path,
    story: &str,
) -> Result<Money, FleetError> {
    let records = project.root.join(RECORDS);
    let spent = safe_fs::check_dir(&project.root, RECORDS)
        .unwrap_or(false)
        .then(|| read_record(&records, story))
        .flatten()
        .map(|r| r.cost_usd)
        .unwrap_or_default();
    write(dir, story, true, spent)?;
    Ok(spent)
}

/// `ralph fleet-budget sum`: what the fleet spent against `total`, in words.
pub fn summary(dir: &Path, total: Money) -> Result<String, FleetError> {
    let ledger = read(dir)?;
    let (spent, unsaid) = sum(&ledger);
    let jobs = ralph_state::plural::count(
        u64::try_from(ledger.len()).unwrap_or(u64::MAX),
        "job",
        "jobs",
    );
    let mut line = format!(
        "The fleet spent {} of its {} budget ({jobs}).",
        spent.dollars(),
        total.dollars()
    );
    if unsaid.0 > 0 {
        line.push_str(&format!(
            " Jobs that did not say what they spent had {} reserved between them.",
            unsaid.dollars()
        ));
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(story: &str, reserved: Option<u64>, spent: Option<u64>) -> Entry {
        Entry {
            story: story.into(),
            reserved: reserved.map(Money),
            spent: spent.map(Money),
        }
    }

    #[test]
    fn each_job_takes_its_share_of_what_is_left() {
        let total = Money(10_000_000);
        assert_eq!(share(total, 4, "A", &[]), Share::Granted(Money(2_500_000)));
        // B ended having spent $1 of its $2.50 (its share still counts); C spent
        // $4, more than its share: $3.50 is left for A and the job after it.
        let ledger = [
            entry("B", Some(2_500_000), Some(1_000_000)),
            entry("C", Some(2_500_000), Some(4_000_000)),
        ];
        assert_eq!(
            share(total, 4, "A", &ledger),
            Share::Granted(Money(1_750_000))
        );
        // Its own earlier entry (a retry) is not counted against it.
        let mut retried = ledger.to_vec();
        retried.push(entry("A", Some(9_000_000), None));
        assert_eq!(
            share(total, 4, "A", &retried),
            share(total, 4, "A", &ledger)
        );
    }

    #[test]
    fn jobs_that_start_together_never_take_more_than_is_left() {
        let total = Money(1_000_000);
        // Three jobs start at once, each seeing the same ledger.
        let shares: Vec<u64> = ["A", "B", "C"]
            .iter()
            .map(|s| match share(total, 3, s, &[]) {
                Share::Granted(m) => m.0,
                Share::Exhausted { .. } => 0,
            })
            .collect();
        assert!(shares.iter().sum::<u64>() <= total.0);
    }

    #[test]
    fn nothing_left_means_no_start_and_the_sum_counts_every_job() {
        let ledger = [
            entry("A", Some(600_000), Some(700_000)),
            entry("B", Some(400_000), None),
        ];
        assert_eq!(
            share(Money(1_000_000), 3, "C", &ledger),
            Share::Exhausted {
                committed: Money(1_100_000)
            }
        );
        assert_eq!(sum(&ledger), (Money(700_000), Money(400_000)));
    }

    #[cfg(unix)]
    #[test]
    fn what_a_job_spent_is_read_from_its_record_never_through_a_link() {
        use ralph_state::storage::fleet::{StoryRecord, write_record};
        let spending = |root: &Path| {
            let dir = root.join(RECORDS);
            std::fs::create_dir_all(&dir).unwrap();
            let record = StoryRecord {
                cost_usd: Money(1_500_000),
                ..StoryRecord::ended("US-1", "completed", 1, 0, 0)
            };
            write_record(&dir, "US-1", &record).unwrap();
        };
        let ledger = tempfile::tempdir().unwrap();
        let project = |root: &Path| ralph_state::storage::store::Project {
            root: root.to_owned(),
        };
        let real = tempfile::tempdir().unwrap();
        spending(real.path());
        let spent = record_spent(&project(real.path()), ledger.path(), "US-1").unwrap();
        assert_eq!(spent, Money(1_500_000));

        // The records folder a link to another project's: nothing is read through it.
        let linked = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(linked.path().join(".claude/ralph")).unwrap();
        std::os::unix::fs::symlink(real.path().join(RECORDS), linked.path().join(RECORDS)).unwrap();
        let spent = record_spent(&project(linked.path()), ledger.path(), "US-1").unwrap();
        assert_eq!(spent, Money(0));
    }
}
