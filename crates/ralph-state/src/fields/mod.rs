//! What a loop file says: its text split into YAML frontmatter and body
//! (`frontmatter`), one value read under its cap (`values`), the typed
//! fields (`limit`, `guards` with their `options`, `outcome`, `run_owner`,
//! `confinement`, `notice`, `stories`), which of them the arming record binds
//! (`binding`), and `state`, the whole file as one typed value. The loop files,
//! their lock and the records are `storage`'s; a field reads only what it
//! names (a PRD's stories, a run owner's process, the cost a log recorded).

pub mod binding;
pub mod confinement;
pub mod frontmatter;
pub mod guards;
pub mod limit;
pub mod notice;
pub mod options;
pub mod outcome;
pub mod prd_import;
pub mod prd_lint;
pub mod run_owner;
pub mod state;
pub mod stories;
pub mod values;
