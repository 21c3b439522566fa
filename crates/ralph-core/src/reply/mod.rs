//! What the agent said and did: the Stop payload (`event`), the transcript's
//! readers (`transcript`), the promise found in a reply (`promise`) and how full
//! the context is (`context`).

pub mod event;
pub mod promise;
pub mod transcript;
